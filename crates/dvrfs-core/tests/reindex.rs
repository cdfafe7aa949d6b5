//! `reindex` (HERMES `addindex`) on ffmpeg-made recordings stored in a volume: the
//! index it builds names exactly ffprobe's keyframes, its UTC follows the media
//! time from the start given (or ends at the file's mtime), it is stored and kept
//! across opens, it clears an incomplete flag, and a file that is not media gets
//! no index without an error. Prints SKIP where ffmpeg or ffprobe is missing.

mod common;

use common::ffmpeg::{fixture, probe, scratch, tools};
use common::{assert_fsck_clean, formatted, open_rw};
use dvrfs_core::device::MemDevice;
use dvrfs_core::format::frame_index::{FLAG_DISCONTINUITY, FLAG_IMPORT};
use dvrfs_core::format::superblock::AllocPolicy;
use dvrfs_core::media::{Container, TICKS_PER_SECOND};
use dvrfs_core::tools::reindex::{reindex, Start};
use dvrfs_core::Fs;
use std::path::Path;

const T0: i64 = 1_795_000_000_000_000_000;

/// A volume holding the local file `src` as `/name`, written at `mtime_ns`.
fn stored(src: &Path, name: &[u8], mtime_ns: i64) -> (Fs<MemDevice>, u32) {
    let mut fs = open_rw(formatted(512 << 20, 1 << 20, AllocPolicy::Zrr, 3));
    let f = fs.create(fs.root(), name, 0o644, 0, 0, mtime_ns).unwrap();
    fs.write(f, 0, &std::fs::read(src).unwrap(), mtime_ns)
        .unwrap();
    (fs, f)
}

#[test]
fn a_transport_stream_gets_ffprobes_keyframes_timed_from_the_start_given() {
    if !tools() {
        return;
    }
    let d = scratch();
    let ts = fixture(
        &d.0,
        "rec.ts",
        12,
        &["-c:v", "libx264", "-g", "25", "-bf", "2"],
        &[],
    );
    let keys: Vec<(u64, i64)> = probe(&ts)
        .into_iter()
        .filter(|p| p.1)
        .map(|(pos, _, pts)| (pos, pts.unwrap()))
        .collect();
    assert_eq!(keys.len(), 12, "a keyframe a second");
    let (mut fs, f) = stored(&ts, b"rec.ts", T0);
    let r = reindex(&mut fs, f, Start::Utc(T0), T0).unwrap();
    assert_eq!(r.container, Container::Ts);
    assert_eq!(r.frames, 300);
    assert_eq!((r.keyframes, r.skipped_keyframes), (12, 0));
    fs.sync().unwrap();
    let dev = fs.close().unwrap();
    assert_fsck_clean(&dev);
    let fs = open_rw(dev);
    let ix = fs.frame_index(f).unwrap().expect("indexed");
    let pts0 = keys[0].1;
    for (e, (pos, pts)) in ix.entries().iter().zip(&keys) {
        assert_eq!(e.offset, *pos, "keyframe at {pos}");
        assert_eq!(e.pts_90k, *pts);
        assert_eq!(
            e.utc_ns,
            T0 + (pts - pts0) * 1_000_000_000 / TICKS_PER_SECOND
        );
        assert_eq!(e.flags, FLAG_IMPORT);
    }
    assert_eq!(
        ix.entries()[4].number,
        100,
        "frame numbers count every frame"
    );
    // A seek to 5.5 s after the start lands on the keyframe at 5 s.
    let at = ix.at_or_before_utc(T0 + 5_500_000_000).unwrap();
    assert_eq!(at.offset, keys[5].0);
    assert!(fs.frame_info(f).unwrap().complete);
}

#[test]
fn a_fragmented_mp4_ends_at_its_mtime_and_a_reindex_clears_the_incomplete_flag() {
    if !tools() {
        return;
    }
    let d = scratch();
    let mp4 = fixture(
        &d.0,
        "rec.mp4",
        8,
        &["-c:v", "libx264", "-g", "25", "-bf", "2"],
        &["-movflags", "frag_keyframe+empty_moov+default_base_moof"],
    );
    let key_pos: Vec<u64> = probe(&mp4)
        .into_iter()
        .filter(|p| p.1)
        .map(|p| p.0)
        .collect();
    let mtime = T0 + 3_600_000_000_000;
    let (mut fs, f) = stored(&mp4, b"rec.mp4", mtime);
    // An index the file's bytes were rewritten under: flagged incomplete.
    fs.drop_frame_index(f, true, mtime).unwrap();
    assert!(!fs.frame_info(f).unwrap().complete);
    let r = reindex(&mut fs, f, Start::EndsAtMtime, mtime).unwrap();
    assert_eq!(r.container, Container::Mp4);
    assert_eq!(r.keyframes, key_pos.len() as u64);
    let info = fs.frame_info(f).unwrap();
    assert!(info.complete, "a reindex clears the flag");
    let ix = fs.frame_index(f).unwrap().unwrap();
    for (e, pos) in ix.entries().iter().zip(&key_pos) {
        assert_eq!(e.offset + u64::from(e.data_delta), *pos);
        assert_eq!(e.flags & FLAG_DISCONTINUITY, 0);
    }
    // The last frame (0.04 s after 7.96 s of media time) ends the file at its
    // mtime: the first keyframe lies 7.96 s before it.
    let first = ix.entries()[0].utc_ns;
    assert_eq!(mtime - first, 7_960_000_000);
    assert!(info.last.unwrap().utc_ns <= mtime);
}

#[test]
fn a_file_that_is_not_media_gets_no_index_and_no_error() {
    let mut fs = open_rw(formatted(256 << 20, 1 << 20, AllocPolicy::Zrr, 4));
    let f = fs.create(fs.root(), b"notes.txt", 0o644, 0, 0, T0).unwrap();
    fs.write(f, 0, &common::pattern(5, 300_000), T0).unwrap();
    let r = reindex(&mut fs, f, Start::EndsAtMtime, T0).unwrap();
    assert_eq!(r.container, Container::Other);
    assert_eq!((r.frames, r.keyframes), (0, 0));
    let info = fs.frame_info(f).unwrap();
    assert_eq!((info.keyframes, info.complete), (0, true));
    let d = fs.mkdir(fs.root(), b"d", 0o755, 0, 0, T0).unwrap();
    let e = reindex(&mut fs, d, Start::EndsAtMtime, T0).unwrap_err();
    assert!(e.to_string().contains("not a regular file"), "{e}");
}
