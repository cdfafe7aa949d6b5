//! A plain MP4 (its `moov` last, as ffmpeg and many cameras write) played and
//! exported from a keyframe (issue 25: seek and export in the source's container):
//! its samples from there go out as a fragmented MP4 of its video and audio,
//! nothing re-encoded (`media::Mp4Remux`), one file or a stream directory of plain
//! MP4 segments as one clip. Checked with ffprobe and ffmpeg: the source's
//! pictures from the keyframe on, each once, in order (their MD5s), audio with
//! them, decoding without a word from `ffmpeg -v error`. Prints SKIP where ffmpeg is missing (the
//! test command installs it).

mod common;

use common::{
    assert_clean, av_recording, decode_errors, dvrfs, ffmpeg_here, json, mkfs, ok, picture_hashes,
    probe, remux, sha256_file, tempdir, video_packets, AT_4_MBITS,
};
use std::path::Path;
use std::process::Command;

/// `path` shows exactly the pictures `want`, in order, starting at a keyframe,
/// with audio, decoding silently.
fn check_clip(path: &Path, want: &[String], what: &str) {
    let p = video_packets(path);
    assert!(
        p.first().is_some_and(|f| f.0),
        "{what}: starts at a keyframe"
    );
    let got = picture_hashes(path);
    assert_eq!(got.len(), want.len(), "{what}: pictures");
    assert!(got == want, "{what}: not the source's pictures in order");
    let o = Command::new("ffprobe")
        .args([
            "-v",
            "error",
            "-show_entries",
            "stream=codec_type",
            "-of",
            "csv=p=0",
        ])
        .arg(path)
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("audio"),
        "{what}: the audio went with it"
    );
    let errors = decode_errors(path);
    assert!(errors.is_empty(), "{what}: {errors}");
}

fn play(img: &Path, path: &str, out: &Path, extra: &[&str]) {
    let mut args = vec![
        "play",
        img.to_str().unwrap(),
        path,
        "--rate",
        "100M",
        "--output",
        out.to_str().unwrap(),
        "--force",
    ];
    args.extend_from_slice(extra);
    ok(dvrfs(args));
}

/// Exports `path` from `from` to `to` into `out`: its manifest.
fn export(img: &Path, path: &str, from: &str, to: &str, out: &Path) -> serde_json::Value {
    json(&ok(dvrfs([
        "export",
        img.to_str().unwrap(),
        path,
        "--from",
        from,
        "--to",
        to,
        "--output",
        out.to_str().unwrap(),
        "--json",
    ])))
}

#[test]
fn a_plain_mp4_plays_and_exports_from_a_keyframe_as_fragmented_mp4() {
    if !ffmpeg_here() {
        return;
    }
    let d = tempdir();
    // 40 s of H.264 (B-frames, a keyframe every 2 s) and AAC, remuxed to a plain MP4,
    // and cut by ffmpeg's segment muxer into four plain MP4 segments of 10 s.
    let frag = av_recording(d.path(), "src.mp4", 40, AT_4_MBITS);
    let plain = d.path().join("plain.mp4");
    remux(&frag, &plain, &[]);
    let pattern = d.path().join("seg%03d.mp4");
    let segments = [
        "-f",
        "segment",
        "-segment_time",
        "10",
        "-segment_format",
        "mp4",
    ];
    remux(
        &frag,
        &pattern,
        &[&segments[..], &["-reset_timestamps", "1"]].concat(),
    );
    let source = picture_hashes(&plain);
    assert_eq!(source.len(), 1000);
    let img = d.path().join("v.img");
    mkfs(&img, "1G", &[]);
    let s = img.to_str().unwrap();
    ok(dvrfs(["put", s, plain.to_str().unwrap(), "/plain.mp4"]));
    ok(dvrfs(["mkdir", s, "/cam"]));
    for i in 0..4 {
        let seg = d.path().join(format!("seg{i:03}.mp4"));
        let name = format!("/cam/seg{i:03}.mp4");
        ok(dvrfs(["put", s, seg.to_str().unwrap(), &name]));
        // Copied in at once, each segment would start now: timed as recorded, one
        // after another (a camera writing them live through the mount is).
        let start = format!("2026-11-29T10:00:{:02}Z", i * 10);
        ok(dvrfs(["reindex", s, &name, "--start", &start]));
    }

    // One file from +25 s: from the keyframe at 24 s, 16 s of frames.
    let out = d.path().join("from25.mp4");
    play(&img, "/plain.mp4", &out, &["--from", "+25s"]);
    check_clip(&out, &source[600..], "play --from +25s");

    // Exported from +11 s to +25 s: the keyframes at 10 s and 26 s, 16 s.
    let clip = d.path().join("clip.mp4");
    let m = export(&img, "/plain.mp4", "+11s", "+25s", &clip);
    check_clip(&clip, &source[250..650], "export");
    let (duration, _) = probe(&clip);
    assert!((duration - 16.0).abs() < 0.5, "{duration} s");
    let sha: String = sha256_file(&clip)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    assert_eq!(m["sha256"], sha.as_str(), "{m}");

    // The segments as one stream: from the start, every frame; from +25 s; and an
    // export across all four segments from +5 s to +35 s (the keyframes at 4 and 36 s).
    let all = d.path().join("all.mp4");
    play(&img, "/cam", &all, &[]);
    check_clip(&all, &source, "play of the segments");
    let from25 = d.path().join("cam25.mp4");
    play(&img, "/cam", &from25, &["--from", "+25s"]);
    check_clip(&from25, &source[600..], "play of the segments --from +25s");
    let across = d.path().join("across.mp4");
    let m = export(&img, "/cam", "+5s", "+35s", &across);
    assert_eq!(m["sources"].as_array().map(Vec::len), Some(4), "{m}");
    check_clip(&across, &source[100..900], "export across segments");
    assert_clean(&img);
}
