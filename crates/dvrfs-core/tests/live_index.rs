//! Frame indexes built by the engine while files are written (`engine/indexing.rs`):
//! an ffmpeg recording written in pieces, or recorded through a stream reservation,
//! gets exactly ffprobe's keyframes, timed by the wall clock of its writes; a
//! rewrite, an append the engine did not follow, and a crash leave an index that is
//! flagged or covers the committed data; a file that is not media costs nothing.
//! Prints SKIP where ffmpeg or ffprobe is missing.

mod common;

use common::drive::{open_stream, setup, stream_spec, Drive};
use common::ffmpeg::{fixture, probe, scratch, tools};
use common::{assert_fsck_clean, formatted, open_rw};
use dvrfs_core::device::MemDevice;
use dvrfs_core::disk::Admission;
use dvrfs_core::driver::blocking::ManualClock;
use dvrfs_core::engine::{Engine, Op, StreamDir};
use dvrfs_core::format::frame_index::FLAG_IMPORT;
use dvrfs_core::format::superblock::AllocPolicy;
use dvrfs_core::media::TICKS_PER_SECOND;
use dvrfs_core::tools::reindex::{reindex, Start};
use dvrfs_core::volume::OpenOptions;
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
fn after_a_crash_the_index_covers_the_committed_data_and_later_appends_flag_it() {
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
    // The recorder goes on after the crash: this open did not follow the file.
    fs.write(f, size, &bytes[half..half + PIECE], T0).unwrap();
    assert!(!fs.frame_info(f).unwrap().complete);
    fs.sync().unwrap();
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
