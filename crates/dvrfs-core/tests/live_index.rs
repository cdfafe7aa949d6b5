//! Frame indexes built by the engine while files are written (`engine/indexing.rs`):
//! an ffmpeg recording written in pieces, or recorded through a stream reservation,
//! gets exactly ffprobe's keyframes, timed by the wall clock of its writes; a crash
//! leaves an index that covers the committed data, and a writer going on after it
//! (or a crash's replayed tail) has it picked up again where it stopped; a rewrite
//! leaves it flagged; a file that is not media costs nothing.
//! Prints SKIP where ffmpeg or ffprobe is missing.

mod common;

use common::drive::{engine_on, open_stream, setup, stream_spec, stream_write, Drive, MS};
use common::ffmpeg::{fixture, probe, scratch, tools};
use common::{assert_fsck_clean, formatted, open_rw};
use dvrfs_core::device::MemDevice;
use dvrfs_core::disk::Admission;
use dvrfs_core::driver::blocking::ManualClock;
use dvrfs_core::engine::{Engine, Op, StreamDir, StreamSpec};
use dvrfs_core::format::frame_index::FLAG_IMPORT;
use dvrfs_core::format::superblock::AllocPolicy;
use dvrfs_core::layout::TailLogSize;
use dvrfs_core::media::TICKS_PER_SECOND;
use dvrfs_core::tools::reindex::{reindex, Start};
use dvrfs_core::volume::{OpenOptions, Volume};
use dvrfs_core::{Fs, IoBuf};
use std::path::Path;

const T0: i64 = 1_795_000_000_000_000_000;
const PIECE: usize = 64 << 10;

/// A 12-second H.264 transport stream, its bytes and ffprobe's keyframes
/// (position, PTS).
fn recording(dir: &Path) -> (Vec<u8>, Vec<(u64, i64)>) {
    recording_of(dir, 12)
}

/// [`recording`] of `secs` seconds.
fn recording_of(dir: &Path, secs: u32) -> (Vec<u8>, Vec<(u64, i64)>) {
    let ts = fixture(dir, "rec.ts", secs, &["-c:v", "libx264", "-g", "25"], &[]);
    let keys = probe(&ts)
        .into_iter()
        .filter(|p| p.1)
        .map(|(pos, _, pts)| (pos, pts.unwrap()))
        .collect();
    (std::fs::read(ts).unwrap(), keys)
}

/// Writes `bytes` to a new file in pieces, piece `k` at wall time `wall(k)`; the
/// volume's monotonic clock moves with the wall clock from `T0`.
fn write_pieces(
    (fs, clock): &mut (Fs<MemDevice>, ManualClock),
    name: &[u8],
    bytes: &[u8],
    wall: impl Fn(usize) -> i64,
) -> u32 {
    let f = fs.create(fs.root(), name, 0o644, 0, 0, wall(0)).unwrap();
    for (k, piece) in bytes.chunks(PIECE).enumerate() {
        clock.set((wall(k) - T0) as u64);
        fs.write(f, (k * PIECE) as u64, piece, wall(k)).unwrap();
    }
    f
}

/// A volume and its monotonic clock.
fn volume() -> (Fs<MemDevice>, ManualClock) {
    let clock = ManualClock::new();
    let dev = formatted(512 << 20, 1 << 20, AllocPolicy::Zrr, 5);
    let fs = Fs::open_with(dev, OpenOptions::writable(), Box::new(clock.clone()), None);
    (fs.expect("open"), clock)
}

#[test]
fn a_recording_written_in_real_time_is_indexed_as_it_is_written() {
    if !tools() {
        return;
    }
    let d = scratch();
    let (bytes, keys) = recording(&d.0);
    let mut v = volume();
    // Each piece written when its share of the 12 s has passed.
    let per_piece = 12_000_000_000 * PIECE as i64 / bytes.len() as i64;
    let f = write_pieces(&mut v, b"live.ts", &bytes, |k| {
        T0 + (k as i64 + 1) * per_piece
    });
    let mut fs = v.0;
    let ix = fs
        .frame_index(f)
        .unwrap()
        .expect("indexed while written")
        .clone();
    let offsets: Vec<u64> = ix.entries().iter().map(|e| e.offset).collect();
    assert_eq!(offsets, keys.iter().map(|k| k.0).collect::<Vec<_>>());
    // Live: no import flag, no clock moved; UTC from the first write's clock (its
    // freshest frame at its submission), carried by the PTS.
    let first = ix.entries()[0];
    assert!(ix.entries().iter().all(|e| e.flags == 0));
    let frame_ns = 40_000_000;
    assert!(
        (first.utc_ns - T0).abs() <= 2 * frame_ns,
        "{}",
        first.utc_ns - T0
    );
    for (e, (_, pts)) in ix.entries().iter().zip(&keys) {
        assert_eq!(
            e.utc_ns - first.utc_ns,
            (pts - keys[0].1) * 1_000_000_000 / TICKS_PER_SECOND
        );
    }
    assert!(fs.frame_info(f).unwrap().complete);
    fs.sync().unwrap();
    let dev = fs.close().unwrap();
    assert_fsck_clean(&dev);
    let fs = open_rw(dev);
    assert_eq!(fs.frame_index(f).unwrap().unwrap(), &ix, "stored as built");
}

#[test]
fn a_copy_faster_than_real_time_turns_into_an_import_and_a_rewrite_flags_the_index() {
    if !tools() {
        return;
    }
    let d = scratch();
    // 20 s written at once: past the first write, more than 10 s of media.
    let (bytes, keys) = recording_of(&d.0, 20);
    let mut v = volume();
    let f = write_pieces(&mut v, b"copy.ts", &bytes, |_| T0);
    let mut fs = v.0;
    let ix = fs.frame_index(f).unwrap().unwrap().clone();
    assert_eq!(ix.len(), keys.len());
    // Media time more than 10 s ahead of the clock: an import from then on.
    let flagged: Vec<bool> = ix
        .entries()
        .iter()
        .map(|e| e.flags & FLAG_IMPORT != 0)
        .collect();
    assert!(!flagged[0] && flagged[keys.len() - 1], "{flagged:?}");
    // A rewrite inside keyframe 6: the index keeps 0..6 and is incomplete.
    fs.write(f, keys[6].0 + 200, &[0x47; 188], T0).unwrap();
    let info = fs.frame_info(f).unwrap();
    assert_eq!((info.keyframes, info.complete), (6, false));
    // An append is no longer followed; a reindex makes it whole again.
    fs.write(f, bytes.len() as u64, &bytes[..PIECE], T0)
        .unwrap();
    assert_eq!(fs.frame_info(f).unwrap().keyframes, 6);
    fs.truncate(f, bytes.len() as u64, T0).unwrap();
    reindex(&mut fs, f, Start::Utc(T0), T0).unwrap();
    assert!(fs.frame_info(f).unwrap().complete);
    assert_eq!(fs.frame_info(f).unwrap().keyframes, keys.len() as u64);
    fs.sync().unwrap();
    assert_fsck_clean(&fs.close().unwrap());
}

#[test]
fn after_a_crash_the_index_covers_the_committed_data_and_goes_on_with_later_appends() {
    if !tools() {
        return;
    }
    let d = scratch();
    let (bytes, keys) = recording(&d.0);
    let mut v = volume();
    let half = bytes.len() / 2 / PIECE * PIECE;
    let f = write_pieces(&mut v, b"rec.ts", &bytes[..half], |_| T0);
    let mut fs = v.0;
    fs.sync().unwrap();
    for (k, piece) in bytes[half..].chunks(PIECE).enumerate() {
        fs.write(f, (half + k * PIECE) as u64, piece, T0).unwrap();
    }
    let dev = fs.crash();
    let mut fs = open_rw(dev);
    let size = fs.stat(f).unwrap().size_bytes;
    assert_eq!(size, half as u64, "the second half was not committed");
    let ix = fs.frame_index(f).unwrap().unwrap().clone();
    let within = keys.iter().filter(|k| k.0 < size).count();
    assert!(
        ix.len() <= within && ix.len() + 1 >= within,
        "{} of {within}",
        ix.len()
    );
    for e in ix.entries() {
        assert!(e.offset + u64::from(e.data_delta) + u64::from(e.len) <= size);
    }
    assert!(fs.frame_info(f).unwrap().complete);
    let before = ix.entries().last().copied().unwrap();
    // The recorder goes on after the crash: this open did not follow the file, it
    // picks the index up again from its last keyframe and follows on.
    for (k, piece) in bytes[half..].chunks(PIECE).enumerate() {
        fs.write(f, (half + k * PIECE) as u64, piece, T0 + 3_600_000_000_000)
            .unwrap();
    }
    fs.close_file(f, dvrfs_core::OpenMode::Write).unwrap();
    let info = fs.frame_info(f).unwrap();
    assert!(info.complete, "{info:?}");
    let ix = fs.frame_index(f).unwrap().unwrap().clone();
    let offsets: Vec<u64> = ix.entries().iter().map(|e| e.offset).collect();
    assert_eq!(offsets, keys.iter().map(|k| k.0).collect::<Vec<_>>());
    for (e, k) in ix.entries().iter().zip(&keys) {
        assert_eq!(e.pts_90k, k.1);
    }
    // Numbered and timed on from the keyframe stored last (by the media time: the
    // writer's wall clock an hour later does not move it).
    let numbers: Vec<u32> = ix.entries().iter().map(|e| e.number).collect();
    assert_eq!(
        numbers,
        (0..numbers.len() as u32)
            .map(|k| 25 * k)
            .collect::<Vec<_>>()
    );
    for e in ix.entries().iter().filter(|e| e.offset > before.offset) {
        let media_ns = (e.pts_90k - before.pts_90k) * 100_000 / 9;
        assert_eq!(e.utc_ns - before.utc_ns, media_ns, "keyframe {}", e.number);
    }
    fs.sync().unwrap();
    assert_fsck_clean(&fs.close().unwrap());
}

#[test]
fn a_rewrite_after_an_index_was_picked_up_again_flags_it() {
    if !tools() {
        return;
    }
    let d = scratch();
    let (bytes, _) = recording(&d.0);
    let mut v = volume();
    let half = bytes.len() / 2 / PIECE * PIECE;
    let f = write_pieces(&mut v, b"rec.ts", &bytes[..half], |_| T0);
    let dev = v.0.close().unwrap();
    // A clean reopen's append picks the index up again; a write into the file's
    // middle after it cuts the index there and flags it.
    let mut fs = open_rw(dev);
    fs.write(f, half as u64, &bytes[half..half + PIECE], T0)
        .unwrap();
    let info = fs.frame_info(f).unwrap();
    assert!(info.complete, "{info:?}");
    fs.write(f, 1000, &bytes[1000..2000], T0).unwrap();
    let cut = fs.frame_info(f).unwrap();
    assert!(!cut.complete);
    assert!(cut.keyframes < info.keyframes, "{cut:?}");
    // Flagged stays flagged: a later reopen's append does not resume it.
    let mut fs = open_rw(fs.close().unwrap());
    let end = fs.stat(f).unwrap().size_bytes;
    fs.write(f, end, &bytes[half + PIECE..half + 2 * PIECE], T0)
        .unwrap();
    assert!(!fs.frame_info(f).unwrap().complete);
    assert_fsck_clean(&fs.close().unwrap());
}

#[test]
fn a_file_that_is_not_media_is_dropped_from_indexing_at_once() {
    let mut v = volume();
    let f = write_pieces(&mut v, b"notes.bin", &common::pattern(3, 1 << 20), |_| T0);
    let fs = v.0;
    assert_eq!(fs.engine().live_indexes(), 0);
    assert_eq!(fs.frame_info(f).unwrap().keyframes, 0);
    assert!(fs.frame_info(f).unwrap().complete);
    // Appended to after a reopen: its start is read to tell, and it stays a file
    // without an index, complete.
    let mut fs = open_rw(fs.close().unwrap());
    fs.write(f, 1 << 20, &common::pattern(4, 4096), T0).unwrap();
    assert_eq!(fs.engine().live_indexes(), 0);
    let info = fs.frame_info(f).unwrap();
    assert!(info.complete && info.keyframes == 0, "{info:?}");
}

#[test]
fn a_recording_cut_before_its_first_keyframe_was_stored_is_indexed_from_its_start() {
    if !tools() {
        return;
    }
    let d = scratch();
    let (bytes, keys) = recording(&d.0);
    // Its tables and the first keyframe's first packets: no frame is whole yet.
    let mut v = volume();
    let f = write_pieces(&mut v, b"rec.ts", &bytes[..2 * 188 + 10 * 188], |_| T0);
    let mut fs = open_rw(v.0.close().unwrap());
    assert_eq!(fs.frame_info(f).unwrap().keyframes, 0);
    let at = fs.stat(f).unwrap().size_bytes as usize;
    fs.write(f, at as u64, &bytes[at..], T0).unwrap();
    let ix = fs.frame_index(f).unwrap().expect("indexed").clone();
    let offsets: Vec<u64> = ix.entries().iter().map(|e| e.offset).collect();
    assert_eq!(offsets, keys.iter().map(|k| k.0).collect::<Vec<_>>());
    assert!(fs.frame_info(f).unwrap().complete);
}

/// Records `bytes` through a write stream of `mbit` Mbit/s in `PIECE` writes.
fn record(e: &mut Engine, d: &mut Drive, ino: u32, bytes: &[u8], mbit: f64) {
    let s = open_stream(
        e,
        d,
        ino,
        stream_spec(StreamDir::Write, mbit, bytes.len() as u64),
    )
    .unwrap();
    for piece in bytes.chunks(PIECE) {
        let data = IoBuf::from_slice(piece);
        d.run(e, Op::StreamWrite { stream: s.id, data }).unwrap();
    }
    d.run(e, Op::StreamClose { stream: s.id }).unwrap();
}

#[test]
fn a_stream_recording_is_indexed_with_ffprobes_keyframes() {
    if !tools() {
        return;
    }
    let dd = scratch();
    let (bytes, keys) = recording(&dd.0);
    let (mut e, mut d) = setup(Some(Admission::bandwidth(100e6, 0.1)), 9);
    let f = d.create(&mut e, "cam.ts");
    let mbit = bytes.len() as f64 * 8.0 / 12.0 / 1e6;
    record(&mut e, &mut d, f, &bytes, mbit * 1.5);
    let ix = e.volume().frame_index(f).unwrap().expect("indexed").clone();
    let offsets: Vec<u64> = ix.entries().iter().map(|e| e.offset).collect();
    assert_eq!(offsets, keys.iter().map(|k| k.0).collect::<Vec<_>>());
    // Written at 1.5x the media rate: the media time leads the clock by 4 s at
    // the end, not 10: still a live recording.
    assert!(ix.entries().iter().all(|e| e.flags & FLAG_IMPORT == 0));
    assert!(e.volume().frame_info(f).unwrap().complete);
}

#[test]
fn a_recordings_tail_replayed_after_a_crash_is_indexed_on_from_where_the_index_stopped() {
    if !tools() {
        return;
    }
    let dd = scratch();
    let (bytes, keys) = recording_of(&dd.0, 20);
    let dev = common::formatted_with(256 << 20, 1 << 20, AllocPolicy::Zrr, 5, |p| {
        p.tail_log = TailLogSize::Blocks(1024)
    });
    let (mut e, mut d) = engine_on(&dev, Some(Admission::bandwidth(100e6, 0.1)));
    let f = d.create(&mut e, "cam.ts");
    // Its media rate: a 512 KiB request takes seconds to fill, so the recording's
    // partial requests go to the tail log at its gather points.
    let rate = bytes.len() as f64 * 8.0 / 20.0;
    let spec = StreamSpec {
        request_bytes: 512 << 10,
        buffer_bytes: None,
        ..stream_spec(StreamDir::Write, rate / 1e6, bytes.len() as u64 + (4 << 20))
    };
    let s = open_stream(&mut e, &mut d, f, spec).unwrap();
    d.run(&mut e, Op::Fsync).unwrap();
    // Handed over in real time, 40 ms at a time, for 15 s; then the power goes.
    let (tick, mut handed) = (40 * MS, 0);
    for k in 1..=375 {
        let due = (rate / 8.0 * (k * tick) as f64 / 1e9) as usize;
        if due > handed {
            stream_write(&mut e, &mut d, s.id, &bytes[handed..due]);
            handed = due;
        }
        d.run_until(&mut e, k * tick);
    }
    let media = d.durable_at(d.t);
    let (committed, _) = Volume::load(&media, &OpenOptions::read_only()).unwrap();
    let indexed = committed.frame_info(f).unwrap();
    assert!(indexed.complete && indexed.keyframes > 0, "{indexed:?}");
    assert!(committed.load_report().tail_log.replay_bytes > 0);
    // The writable open replays the logged bytes into the file: its index goes on
    // over them.
    let (mut e, mut d) = engine_on(&media, None);
    d.run(&mut e, Op::Fsync).unwrap();
    assert!(e.volume().load_report().tail_log.replayed);
    let size = e.volume().stat(f).unwrap().size_bytes;
    assert_eq!(d.read_file(&mut e, f)[..], bytes[..size as usize]);
    let info = e.volume().frame_info(f).unwrap();
    assert!(info.complete, "{info:?}");
    let ix = e.volume().frame_index(f).unwrap().unwrap().clone();
    // Every keyframe of the durable bytes but one whose frame is not whole yet.
    let within: Vec<u64> = keys.iter().map(|k| k.0).filter(|&p| p < size).collect();
    let got: Vec<u64> = ix.entries().iter().map(|e| e.offset).collect();
    assert!(
        got.len() > indexed.keyframes as usize
            && within.starts_with(&got)
            && got.len() + 1 >= within.len(),
        "indexed {got:?}, ffprobe {within:?} within {size} bytes"
    );
    // Timed on by the media time from the keyframe the index held last.
    let last = indexed.last.unwrap();
    for e in ix.entries().iter().filter(|e| e.offset > last.offset) {
        assert_eq!(
            e.utc_ns - last.utc_ns,
            (e.pts_90k - last.pts_90k) * 100_000 / 9
        );
    }
}
