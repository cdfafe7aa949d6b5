//! The media parser against ffprobe, on fixtures made here with ffmpeg
//! (it prints `SKIP: <reason>` where ffmpeg or ffprobe is missing; the test command
//! installs them): every frame's offset, every keyframe, the frame count, and the
//! time across a PTS wrap must be what ffprobe reads, however the bytes are split;
//! garbage between packets is skipped and the frames after it are found.

mod common;

use common::ffmpeg::{fixture, have, probe, scratch, tools};
use std::path::Path;
use std::process::Command;

use dvrfs_core::format::frame_index::FrameEntry;
use dvrfs_core::media::{Container, Frame, Indexer, KeyframeBuilder, TICKS_PER_SECOND};
use proptest::prelude::*;

/// The parser's frames of `bytes`, fed in pieces of `piece` bytes.
fn index(bytes: &[u8], piece: usize) -> (Vec<Frame>, Indexer) {
    let mut ix = Indexer::new();
    let mut frames = Vec::new();
    for chunk in bytes.chunks(piece.max(1)) {
        ix.feed(chunk);
        frames.extend(ix.drain());
    }
    frames.extend(ix.finish());
    (frames, ix)
}

/// Frames and keyframes agree with ffprobe's packets, offset by offset.
fn agree(path: &Path) -> Vec<Frame> {
    let bytes = std::fs::read(path).unwrap();
    let want = probe(path);
    let (frames, ix) = index(&bytes, 64 * 1024);
    assert_eq!(ix.container(), Container::Ts);
    assert!(frames.iter().all(|f| f.data_offset == f.offset));
    assert_eq!(frames.len(), want.len(), "{}: frame count", path.display());
    for (f, (pos, key, _)) in frames.iter().zip(&want) {
        assert_eq!(f.offset, *pos, "{}: frame {}", path.display(), f.number);
        assert_eq!(
            f.keyframe,
            *key,
            "{}: frame {} at {pos}",
            path.display(),
            f.number
        );
    }
    // Frames tile the file from the first: each ends where the next starts.
    for w in frames.windows(2) {
        assert_eq!(w[0].offset + w[0].len, w[1].offset);
    }
    assert_eq!(
        frames.last().map(|f| f.offset + f.len),
        Some(bytes.len() as u64)
    );
    assert!(
        frames.iter().filter(|f| f.keyframe).count() >= 2,
        "{}",
        path.display()
    );
    assert_eq!(ix.counters().skipped_bytes, 0);
    frames
}

#[test]
fn h264_h265_and_mpeg2_transport_streams_index_as_ffprobe_reads_them() {
    if !tools() {
        return;
    }
    let d = scratch();
    let h264 = fixture(
        &d.0,
        "h264.ts",
        12,
        &["-c:v", "libx264", "-g", "50", "-b:v", "1M"],
        &[],
    );
    let frames = agree(&h264);
    assert_eq!(frames.len(), 300);
    // A keyframe every 2 s: frames 0, 50, 100, ...
    let keys: Vec<u64> = frames
        .iter()
        .filter(|f| f.keyframe)
        .map(|f| f.number)
        .collect();
    assert_eq!(keys, (0..6).map(|k| k * 50).collect::<Vec<_>>());
    // Presentation times 40 ms apart in display order.
    let mut pts: Vec<i64> = frames.iter().map(|f| f.pts_90k).collect();
    pts.sort();
    assert!(pts.windows(2).all(|w| w[1] - w[0] == TICKS_PER_SECOND / 25));

    let h265 = fixture(
        &d.0,
        "h265.ts",
        6,
        &[
            "-c:v",
            "libx265",
            "-x265-params",
            "log-level=error:keyint=50:min-keyint=50:scenecut=0",
            "-b:v",
            "1M",
        ],
        &[],
    );
    agree(&h265);
    let mpeg2 = fixture(
        &d.0,
        "mpeg2.ts",
        6,
        &["-c:v", "mpeg2video", "-g", "25", "-bf", "2", "-b:v", "2M"],
        &[],
    );
    agree(&mpeg2);
}

/// Clears the `random_access_indicator` (adaptation field flag 0x40) in every packet.
fn clear_rai(bytes: &mut [u8]) {
    for p in bytes.chunks_exact_mut(188) {
        if p[3] & 0x20 != 0 && p[4] > 0 {
            p[5] &= !0x40;
        }
    }
}

#[test]
fn the_random_access_indicator_is_not_what_makes_a_keyframe() {
    if !tools() {
        return;
    }
    let d = scratch();
    let src = fixture(&d.0, "rai.ts", 6, &["-c:v", "libx264", "-g", "25"], &[]);
    let mut bytes = std::fs::read(&src).unwrap();
    let (with, _) = index(&bytes, 4096);
    clear_rai(&mut bytes);
    let (without, _) = index(&bytes, 4096);
    assert_eq!(with, without);
    assert_eq!(with.iter().filter(|f| f.keyframe).count(), 6);
}

#[test]
fn a_clip_whose_pts_wraps_lasts_its_true_duration() {
    if !tools() {
        return;
    }
    let d = scratch();
    // 2^33 / 90 kHz = 95443.7 s: start 5 s before the wrap, last 10 s.
    let wrap = fixture(
        &d.0,
        "wrap.ts",
        10,
        &["-c:v", "libx264", "-g", "25"],
        &["-output_ts_offset", "95438"],
    );
    let frames = agree(&wrap);
    let raw: Vec<i64> = probe(&wrap).iter().filter_map(|p| p.2).collect();
    assert!(
        raw.iter().any(|&p| p < 90_000 * 10),
        "the fixture's PTS wraps: {raw:?}"
    );
    let first = frames.iter().map(|f| f.pts_90k).min().unwrap();
    let last = frames.iter().map(|f| f.pts_90k).max().unwrap();
    let frame = TICKS_PER_SECOND / 25;
    assert_eq!(last - first, 10 * TICKS_PER_SECOND - frame);
    assert!(
        frames.iter().all(|f| !f.discontinuity),
        "a wrap is no discontinuity"
    );
}

#[test]
fn fragmented_mp4_indexes_as_ffprobe_reads_it_with_each_frame_at_its_moof() {
    if !tools() {
        return;
    }
    let d = scratch();
    let mp4 = fixture(
        &d.0,
        "frag.mp4",
        8,
        &["-c:v", "libx264", "-g", "25", "-bf", "2"],
        &["-movflags", "frag_keyframe+empty_moov+default_base_moof"],
    );
    let bytes = std::fs::read(&mp4).unwrap();
    let want = probe(&mp4);
    for piece in [bytes.len(), 65536, 1000, 7] {
        let (frames, ix) = index(&bytes, piece);
        assert_eq!(ix.container(), Container::Mp4);
        assert_eq!(frames.len(), want.len(), "frame count, {piece}-byte pieces");
        for (f, (pos, key, _)) in frames.iter().zip(&want) {
            assert_eq!(f.data_offset, *pos, "frame {}", f.number);
            assert_eq!(f.keyframe, *key, "frame {} at {pos}", f.number);
            // The entry is the fragment's moof, before the sample.
            assert!(f.offset < f.data_offset);
            assert_eq!(
                &bytes[f.offset as usize + 4..f.offset as usize + 8],
                b"moof"
            );
        }
        let keys = frames.iter().filter(|f| f.keyframe).count();
        assert_eq!(keys, 8, "a keyframe a second");
        // Presentation times: 25 fps in display order, from 0.
        let mut pts: Vec<i64> = frames.iter().map(|f| f.pts_90k).collect();
        pts.sort();
        assert!(
            pts.windows(2).all(|w| w[1] - w[0] == TICKS_PER_SECOND / 25),
            "{pts:?}"
        );
    }
    // Cut short in the middle of a fragment's mdat: only whole frames are reported.
    let cut = bytes.len() * 2 / 3;
    let (frames, _) = index(&bytes[..cut], 4096);
    assert!(frames.iter().all(|f| f.data_offset + f.len <= cut as u64));
    assert!(frames.len() < want.len() && !frames.is_empty());
}

#[test]
fn a_plain_mp4_is_indexed_at_its_end_from_its_sample_tables() {
    if !tools() {
        return;
    }
    let d = scratch();
    // The moov at the end (ffmpeg's default) and at the start (faststart).
    for (name, mux) in [
        ("end.mp4", &[][..]),
        ("start.mp4", &["-movflags", "faststart"][..]),
    ] {
        let mp4 = fixture(
            &d.0,
            name,
            6,
            &["-c:v", "libx264", "-g", "25", "-bf", "2"],
            mux,
        );
        let bytes = std::fs::read(&mp4).unwrap();
        let want = probe(&mp4);
        for piece in [bytes.len(), 4096] {
            let (frames, ix) = index(&bytes, piece);
            assert_eq!(ix.container(), Container::Mp4);
            assert_eq!(frames.len(), want.len(), "{name}: frame count");
            for (f, (pos, key, _)) in frames.iter().zip(&want) {
                assert_eq!(f.data_offset, *pos, "{name}: frame {}", f.number);
                assert_eq!(f.keyframe, *key, "{name}: frame {}", f.number);
            }
            assert_eq!(frames.iter().filter(|f| f.keyframe).count(), 6);
            let mut pts: Vec<i64> = frames.iter().map(|f| f.pts_90k).collect();
            pts.sort();
            assert!(pts.windows(2).all(|w| w[1] - w[0] == TICKS_PER_SECOND / 25));
        }
    }
}

/// Decodes `path` with ffmpeg: its complaints (none for a clean stream) and the
/// video frames ffprobe counts.
fn decode(path: &Path) -> (String, usize) {
    let o = Command::new("ffmpeg")
        .args(["-v", "error", "-i"])
        .arg(path)
        .args(["-f", "null", "-"])
        .output()
        .expect("run ffmpeg");
    (
        String::from_utf8_lossy(&o.stderr).into_owned(),
        probe(path).len(),
    )
}

#[test]
fn a_chunk_cut_at_a_keyframe_after_the_chunk_head_plays_on_its_own() {
    if !tools() {
        return;
    }
    let d = scratch();
    let ts = fixture(&d.0, "cut.ts", 8, &["-c:v", "libx264", "-g", "50"], &[]);
    let mp4 = fixture(
        &d.0,
        "cut.mp4",
        8,
        &["-c:v", "libx264", "-g", "50"],
        &["-movflags", "frag_keyframe+empty_moov+default_base_moof"],
    );
    for src in [ts, mp4] {
        let bytes = std::fs::read(&src).unwrap();
        let (frames, ix) = index(&bytes, 100_000);
        let head = ix
            .chunk_head()
            .expect("the tables or the init segment went by");
        // The third keyframe (4 s in): the chunk is the head, then the file from there.
        let key = frames.iter().filter(|f| f.keyframe).nth(2).unwrap();
        let chunk = d.0.join(format!(
            "chunk-{}",
            src.file_name().unwrap().to_string_lossy()
        ));
        std::fs::write(&chunk, [&head[..], &bytes[key.offset as usize..]].concat()).unwrap();
        let (complaints, n) = decode(&chunk);
        assert_eq!(complaints, "", "{}", chunk.display());
        assert_eq!(
            n as u64,
            frames.len() as u64 - key.number,
            "{}",
            chunk.display()
        );
        // The head is what it says: a PAT packet first, or an ftyp then the moov.
        match ix.container() {
            Container::Ts => assert!(head[0] == 0x47 && head[1] & 0x1F == 0 && head[2] == 0),
            _ => assert!(&head[4..8] == b"ftyp" && head.windows(4).any(|w| w == b"moov")),
        }
    }
}

#[test]
fn a_file_that_is_not_a_transport_stream_indexes_nothing() {
    let (frames, ix) = index(&vec![0x5Au8; 100_000], 1000);
    assert!(frames.is_empty());
    assert_eq!(ix.container(), Container::Other);
    let (frames, _) = index(&[], 1);
    assert!(frames.is_empty());
}

/// Every input kept in the fuzzer's corpus (`fuzz/corpus/media`: the seeds and any
/// `regress-*` input a failure left) passes the fuzz target's oracle here too, so
/// `cargo test` replays them without the nightly toolchain.
#[test]
fn the_fuzz_corpus_passes_the_oracle() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/media");
    let mut n = 0;
    for e in std::fs::read_dir(&dir).unwrap() {
        let data = std::fs::read(e.unwrap().path()).unwrap();
        let piece = 1 + usize::from(data.first().copied().unwrap_or(0)) * 7;
        let (whole, _) = index(&data, data.len());
        let (pieces, _) = index(&data, piece);
        assert_eq!(whole, pieces);
        for (i, f) in whole.iter().enumerate() {
            assert_eq!(f.number, i as u64);
            assert!(f.data_offset + f.len <= data.len() as u64);
        }
        n += 1;
    }
    assert!(n >= 3, "the seeds are there");
}

/// Every input kept in the clip writers' corpus (`fuzz/corpus/clip`) passes their
/// fuzz target's oracle (`media::clip_oracle`) here too.
#[test]
fn the_clip_fuzz_corpus_passes_the_oracle() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/clip");
    let mut n = 0;
    for e in std::fs::read_dir(&dir).unwrap() {
        let p = e.unwrap().path();
        let data = std::fs::read(&p).unwrap();
        if let Err(why) = dvrfs_core::media::clip_oracle::check(&data) {
            panic!("{}: {why}", p.display());
        }
        n += 1;
    }
    assert!(n >= 2, "the seeds are there");
}

/// A small fixture read once for the property tests (none when ffmpeg is missing).
fn sample() -> Option<&'static [u8]> {
    static SAMPLE: std::sync::OnceLock<Option<Vec<u8>>> = std::sync::OnceLock::new();
    SAMPLE
        .get_or_init(|| {
            if !have("ffmpeg") {
                return None;
            }
            let d = scratch();
            let p = fixture(
                &d.0,
                "sample.ts",
                3,
                &["-c:v", "libx264", "-g", "25", "-b:v", "300k"],
                &[],
            );
            Some(std::fs::read(p).unwrap())
        })
        .as_deref()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn any_split_of_the_bytes_gives_the_same_frames(cuts in proptest::collection::vec(1usize..5000, 1..40)) {
        let Some(bytes) = sample() else { return Ok(()) };
        let (whole, _) = index(bytes, bytes.len());
        let mut ix = Indexer::new();
        let mut frames = Vec::new();
        let mut at = 0;
        for c in cuts.iter().cycle() {
            if at >= bytes.len() { break; }
            let end = (at + c).min(bytes.len());
            ix.feed(&bytes[at..end]);
            frames.extend(ix.drain());
            at = end;
        }
        frames.extend(ix.finish());
        prop_assert_eq!(frames, whole);
    }

    #[test]
    fn garbage_between_packets_is_skipped_and_later_frames_are_found(
        at_packet in 20usize..200,
        garbage in proptest::collection::vec(any::<u8>(), 1..2000),
    ) {
        let Some(bytes) = sample() else { return Ok(()) };
        let (clean, _) = index(bytes, 65536);
        let cut = (at_packet * 188).min(bytes.len());
        let mut damaged = bytes[..cut].to_vec();
        damaged.extend_from_slice(&garbage);
        damaged.extend_from_slice(&bytes[cut..]);
        let (frames, ix) = index(&damaged, 3000);
        // Frames wholly after the garbage are all found, shifted by its length.
        let shift = garbage.len() as u64;
        // (The frame open at the cut is lost; resync takes three packets.)
        let after: Vec<Frame> = clean.iter().filter(|f| f.offset > cut as u64 + 188 * 3).cloned().collect();
        prop_assert!(!after.is_empty());
        for f in &after {
            let found = frames.iter().find(|g| g.offset == f.offset + shift);
            prop_assert!(found.is_some_and(|g| g.keyframe == f.keyframe && g.pts_90k == f.pts_90k), "frame at {}", f.offset);
        }
        prop_assert!(ix.counters().skipped_bytes <= garbage.len() as u64 + 3 * 188);
    }

    #[test]
    fn arbitrary_bytes_never_panic_and_frames_stay_inside_the_input(
        bytes in proptest::collection::vec(any::<u8>(), 0..20000),
        sync_every in proptest::option::of(1usize..200),
    ) {
        let mut b = bytes;
        if let Some(k) = sync_every {
            // Sprinkle sync bytes at packet spacing so the parser gets past detection.
            for i in (0..b.len()).step_by(188) { if i / 188 % k != 1 { b[i] = 0x47; } }
        }
        let (frames, _) = index(&b, 777);
        for f in frames {
            prop_assert!(f.data_offset + f.len <= b.len() as u64);
        }
    }
}

/// The keyframes of `bytes` indexed whole, and indexed again by a builder resumed
/// at each of them (the file's head fed first, then the bytes from that keyframe
/// on, in pieces): the same keyframes after it, each entry equal. Returns the count.
fn resumes_at_every_keyframe(bytes: &[u8]) -> usize {
    const T0: i64 = 1_795_000_000_000_000_000;
    let mut whole = KeyframeBuilder::import(T0);
    let mut all = whole.feed(bytes);
    all.extend(whole.finish());
    let head = &bytes[..bytes.len().min(1 << 20)];
    for (k, last) in all.iter().enumerate() {
        let mut b = KeyframeBuilder::resume_at(head, last).expect("a head to go on from");
        let mut got = Vec::new();
        for piece in bytes[last.offset as usize..].chunks(4099) {
            got.extend(b.feed(piece));
        }
        got.extend(b.finish());
        assert!(!b.resume_broken(), "keyframe {k}");
        assert_eq!(got[..], all[k + 1..], "resumed at keyframe {k}");
    }
    // Where the index says a keyframe is that is not there (another time): the
    // resume gives nothing and says so.
    let last = all[all.len() / 2];
    let wrong = FrameEntry {
        pts_90k: last.pts_90k + 1,
        ..last
    };
    let mut b = KeyframeBuilder::resume_at(head, &wrong).unwrap();
    assert!(b.feed(&bytes[last.offset as usize..]).is_empty());
    assert!(b.resume_broken());
    all.len()
}

#[test]
fn an_index_resumed_at_any_keyframe_goes_on_as_the_whole_files() {
    if !tools() {
        return;
    }
    let d = scratch();
    let x264 = ["-c:v", "libx264", "-g", "25", "-bf", "2"];
    // A transport stream whose PTS wraps on the way (resumed before and after it).
    let ts = fixture(&d.0, "wrap.ts", 10, &x264, &["-output_ts_offset", "95438"]);
    assert_eq!(resumes_at_every_keyframe(&std::fs::read(ts).unwrap()), 10);
    // Fragmented MP4, a fragment per keyframe, and fragments of 3 s holding three
    // keyframes each (a keyframe that is not its fragment's first sample).
    let frag = ["-movflags", "frag_keyframe+empty_moov+default_base_moof"];
    let mp4 = fixture(&d.0, "frag.mp4", 8, &x264, &frag);
    assert_eq!(resumes_at_every_keyframe(&std::fs::read(mp4).unwrap()), 8);
    let long = [
        "-movflags",
        "empty_moov+default_base_moof",
        "-frag_duration",
        "3000000",
    ];
    let mp4 = fixture(&d.0, "long.mp4", 9, &x264, &long);
    assert_eq!(resumes_at_every_keyframe(&std::fs::read(mp4).unwrap()), 9);
    // A head that is not media: nothing to go on from.
    let any = FrameEntry {
        offset: 0,
        data_delta: 0,
        len: 1,
        number: 0,
        flags: 0,
        pts_90k: 0,
        utc_ns: 0,
    };
    assert!(KeyframeBuilder::resume_at(&[0x11; 4096], &any).is_none());
}
