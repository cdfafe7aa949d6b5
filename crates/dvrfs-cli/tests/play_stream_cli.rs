//! `dvrfs play` of a stream directory (issue 25: everything follows a stream across
//! its chunks): the chunks of a recording made by `record --chunk` played as one
//! stream under one reservation (`Op::StreamQueue`), from the start or `--from` a
//! time in a later chunk, in MPEG-TS and fragmented MP4: every frame of the source
//! from the starting keyframe on, once, in order, decoding without a word from
//! `ffmpeg -v error`, with no late request and no stall; trick play forward and
//! back across the chunks shows every keyframe; `--follow` plays a live recording
//! to its end as its chunks are made. Prints SKIP where ffmpeg (or FUSE) is missing
//! (the test command installs it).

mod common;

use common::{
    assert_clean, av_recording, decode_errors, dvrfs, ffmpeg_here, json, mkfs, ok, tempdir,
    video_packets, AT_4_MBITS,
};
use std::path::Path;

/// Records `input` into `/cam` in chunks of `chunk`: how many it made.
fn record(img: &Path, input: &Path, chunk: &str) -> u64 {
    common::record_chunked(img, "/cam", input, chunk)["chunks"]
        .as_u64()
        .unwrap()
}

/// `play IMG /cam` with `extra` flags into `out`: its JSON report.
fn play(img: &Path, out: &Path, extra: &[&str]) -> serde_json::Value {
    let mut args = vec![
        "play",
        img.to_str().unwrap(),
        "/cam",
        "--rate",
        "100M",
        "--output",
        out.to_str().unwrap(),
        "--force",
        "--json",
    ];
    args.extend_from_slice(extra);
    json(&ok(dvrfs(args)))
}

/// The PTS of `got`'s frames equal the source's from its frame at `from_s` on, in
/// order: nothing lost, doubled or reordered at a chunk boundary.
fn assert_frames_from(got: &Path, src: &[(bool, f64)], from_s: f64) {
    let got = video_packets(got);
    let pts0 = src[0].1;
    // The source's keyframe nearest `from_s` (an MP4's first frame may sit a few
    // tens of ms before the second's timeline).
    let first = src
        .iter()
        .position(|f| f.0 && (f.1 - pts0 - from_s).abs() < 0.1)
        .expect("a source keyframe at the start");
    assert!(src[first].0, "the start is a keyframe");
    let want: Vec<f64> = src[first..].iter().map(|f| f.1).collect();
    let have: Vec<f64> = got.iter().map(|f| f.1).collect();
    assert_eq!(have.len(), want.len(), "frames from {from_s} s");
    // A transport stream keeps the source's PTS; compare the distances from the start.
    let shift = have[0] - want[0];
    for (i, (h, w)) in have.iter().zip(&want).enumerate() {
        assert!(
            (h - shift - w).abs() < 1e-3,
            "frame {i}: {h} against the source's {w}"
        );
    }
}

#[test]
fn a_stream_directory_plays_as_one_stream_from_the_start_or_a_time() {
    if !ffmpeg_here() {
        return;
    }
    let d = tempdir();
    // One minute at 4 Mbit/s, a keyframe every 2 s, in 10-second chunks.
    let ts = av_recording(d.path(), "cam.ts", 60, AT_4_MBITS);
    let src = video_packets(&ts);
    let img = d.path().join("v.img");
    mkfs(&img, "1G", &[]);
    let chunks = record(&img, &ts, "10s");
    assert_eq!(chunks, 6);
    let out = d.path().join("out.ts");
    let r = play(&img, &out, &[]);
    assert_eq!(r["chunks"].as_u64(), Some(6), "{r}");
    assert_eq!(r["deadline_misses"].as_u64(), Some(0), "{r}");
    assert_eq!(r["stalls"].as_u64(), Some(0), "{r}");
    assert_frames_from(&out, &src, 0.0);
    let errors = decode_errors(&out);
    assert!(errors.is_empty(), "{errors}");
    // From 25 s in: the keyframe at 24 s, in the third chunk.
    let r = play(&img, &out, &["--from", "+25s"]);
    assert_eq!(r["chunks"].as_u64(), Some(4), "{r}");
    assert_frames_from(&out, &src, 24.0);
    assert!(decode_errors(&out).is_empty());
    // 15 s before the end (60 s): the keyframe at 44 s.
    play(&img, &out, &["--from", "-15s"]);
    assert_frames_from(&out, &src, 44.0);
    // A chunk's frame numbers are its own: frame:N needs a file.
    let e = common::fails(
        dvrfs([
            "play",
            img.to_str().unwrap(),
            "/cam",
            "--rate",
            "8M",
            "--from",
            "frame:10",
            "--output",
            out.to_str().unwrap(),
            "--force",
        ]),
        "stream directory",
    );
    assert!(e.contains("name the chunk file"), "{e}");
    assert_clean(&img);
}

#[test]
fn fragmented_mp4_chunks_play_as_one_file_with_one_init_segment() {
    if !ffmpeg_here() {
        return;
    }
    let d = tempdir();
    let mp4 = av_recording(d.path(), "cam.mp4", 40, &["-preset", "ultrafast"]);
    let src = video_packets(&mp4);
    let img = d.path().join("v.img");
    mkfs(&img, "1G", &[]);
    assert_eq!(record(&img, &mp4, "10s"), 4);
    let out = d.path().join("out.mp4");
    let r = play(&img, &out, &[]);
    assert_eq!(r["chunks"].as_u64(), Some(4), "{r}");
    let got = std::fs::read(&out).unwrap();
    let moovs = got.windows(4).filter(|w| w == b"moov").count();
    assert_eq!(moovs, 1, "one init segment");
    assert_frames_from(&out, &src, 0.0);
    assert!(decode_errors(&out).is_empty());
    let r = play(&img, &out, &["--from", "+21s"]);
    assert_eq!(r["chunks"].as_u64(), Some(2), "{r}");
    assert_frames_from(&out, &src, 20.0);
    assert!(decode_errors(&out).is_empty());
    assert_clean(&img);
}

#[test]
fn trick_play_walks_a_streams_keyframes_across_its_chunks() {
    if !ffmpeg_here() {
        return;
    }
    let d = tempdir();
    let ts = av_recording(d.path(), "cam.ts", 40, AT_4_MBITS);
    let img = d.path().join("v.img");
    mkfs(&img, "1G", &[]);
    assert_eq!(record(&img, &ts, "10s"), 4);
    let out = d.path().join("ff.ts");
    for speed in ["16", "-16"] {
        let r = play(&img, &out, &["--speed", speed]);
        // 16x with a keyframe every 2 s: 8 a second, every one shown.
        assert_eq!(r["keyframes_shown"].as_u64(), Some(20), "{speed}: {r}");
        assert_eq!(r["chunks"].as_u64(), Some(4), "{speed}: {r}");
        assert_eq!(r["late_reads"].as_u64(), Some(0), "{speed}: {r}");
        let bytes = r["bytes_read"].as_u64().unwrap();
        assert!(
            bytes * 5 < r["file_bytes"].as_u64().unwrap(),
            "{speed}: read {bytes} bytes"
        );
        let frames = video_packets(&out);
        assert_eq!(frames.len(), 20, "{speed}");
        assert!(frames.iter().all(|f| f.0), "{speed}: keyframes only");
        assert!(decode_errors(&out).is_empty(), "{speed}");
    }
    assert_clean(&img);
}

/// `play --follow` of a stream being recorded (watching live): started once the
/// recording's first chunk has a keyframe, it plays every frame the recording gets,
/// across its chunks as they are made, and ends once the recording has ended; no
/// miss and no stall (waiting at the live edge is not one).
#[test]
fn follow_plays_a_live_recording_to_its_end_across_its_chunks() {
    if !ffmpeg_here() {
        return;
    }
    if let Some(why) = common::fuse_missing() {
        println!("SKIP: {why}");
        return;
    }
    use std::process::{Command, Stdio};
    let d = tempdir();
    let src = av_recording(d.path(), "cam.ts", 12, AT_4_MBITS);
    let img = d.path().join("v.img");
    mkfs(&img, "1G", &[]);
    let m = common::Mount::new(d.path(), &img, &[]);
    let s = img.to_str().unwrap();
    let mut feed = Command::new("ffmpeg")
        .args(["-v", "error", "-re", "-i"])
        .arg(&src)
        .args(["-c", "copy", "-f", "mpegts", "-"])
        .stdout(Stdio::piped())
        .spawn()
        .expect("run ffmpeg");
    let rec = Command::new(env!("CARGO_BIN_EXE_dvrfs"))
        .args([
            "record", s, "/live", "--chunk", "4s", "--rate", "6M", "--json",
        ])
        .stdin(feed.stdout.take().unwrap())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run dvrfs record");
    // Once the first chunk has a keyframe (the timeline has a span).
    let mut polls = 0;
    loop {
        let o = dvrfs(["timeline", s, "/live", "--json"]);
        let started = o.status.success()
            && json(&String::from_utf8_lossy(&o.stdout))["spans"]
                .as_array()
                .is_some_and(|a| !a.is_empty());
        if started {
            break;
        }
        polls += 1;
        assert!(polls < 100_000, "the recording never started");
        std::thread::yield_now();
    }
    let out = d.path().join("live.ts");
    let player = Command::new(env!("CARGO_BIN_EXE_dvrfs"))
        .args(["play", s, "/live", "--follow", "--rate", "6M", "--json"])
        .args(["--output", out.to_str().unwrap()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run dvrfs play");
    let r = json(&ok(rec.wait_with_output().unwrap()));
    assert!(feed.wait().unwrap().success());
    assert_eq!(r["chunks"].as_u64(), Some(3), "{r}");
    let p = json(&ok(player.wait_with_output().unwrap()));
    assert_eq!(p["chunks"].as_u64(), Some(3), "{p}");
    assert_eq!(p["deadline_misses"].as_u64(), Some(0), "{p}");
    assert_eq!(p["stalls"].as_u64(), Some(0), "{p}");
    assert_frames_from(&out, &video_packets(&src), 0.0);
    assert!(decode_errors(&out).is_empty());
    m.unmount();
    assert_clean(&img);
}
