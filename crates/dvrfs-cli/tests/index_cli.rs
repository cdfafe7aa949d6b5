//! `dvrfs reindex` and `dvrfs keyframes` on a volume image: an ffmpeg recording put
//! into the volume is indexed as it is written, and a reindex gives exactly
//! ffprobe's keyframes, timed from `--start` (UTC or a
//! local time in `--tz`, where a time the clocks skipped is an error naming the
//! candidates), kept across runs, fsck clean; a file that is not media gets none.
//! Prints SKIP where ffmpeg is missing (the test command installs it).

mod common;

use common::{
    assert_clean, dvrfs, fails, ffmpeg_here, json, key_positions, mkfs, ok, random_file, tempdir,
};
use std::process::Command;

/// `secs` seconds of H.264 at 25 fps with a keyframe a second, made by ffmpeg in `dir`.
fn recording(dir: &std::path::Path, secs: u32) -> std::path::PathBuf {
    let ts = dir.join("rec.ts");
    let o = Command::new("ffmpeg")
        .args(["-v", "error", "-f", "lavfi", "-i"])
        .arg(format!("testsrc2=size=320x240:rate=25:duration={secs}"))
        .args(["-c:v", "libx264", "-g", "25"])
        .arg(&ts)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    ts
}

#[test]
fn a_recording_put_in_the_volume_is_indexed_with_ffprobes_keyframes() {
    if !ffmpeg_here() {
        return;
    }
    let d = tempdir();
    let ts = recording(d.path(), 10);
    let img = d.path().join("v.img");
    mkfs(&img, "1G", &[]);
    ok(dvrfs([
        "put",
        img.to_str().unwrap(),
        ts.to_str().unwrap(),
        "/rec.ts",
    ]));
    // `put` wrote it through the engine, which indexed it as it went.
    let live = ok(dvrfs(["keyframes", img.to_str().unwrap(), "/rec.ts"]));
    assert!(
        live.contains("10 keyframes in 1 index blocks (complete)"),
        "{live}"
    );

    // A local start in Berlin (CET, UTC+1).
    let r = json(&ok(dvrfs([
        "reindex",
        img.to_str().unwrap(),
        "/rec.ts",
        "--start",
        "2026-11-28T14:03:10",
        "--tz",
        "Europe/Berlin",
        "--json",
    ])));
    assert_eq!(r[0]["container"], "MPEG-TS");
    assert_eq!(r[0]["frames"], 250);
    assert_eq!(r[0]["keyframes"], 10);
    assert_eq!(r[0]["first_utc"], "2026-11-28T13:03:10Z");
    assert_clean(&img);
    let k = json(&ok(dvrfs([
        "keyframes",
        img.to_str().unwrap(),
        "/rec.ts",
        "--json",
    ])));
    assert_eq!(k["complete"], true);
    let offsets: Vec<u64> = k["keyframes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["offset"].as_u64().unwrap())
        .collect();
    assert_eq!(offsets, key_positions(&ts));
    assert_eq!(k["keyframes"][3]["utc"], "2026-11-28T13:03:13Z");
    assert_eq!(k["keyframes"][3]["frame"], 75);
    let text = ok(dvrfs([
        "keyframes",
        img.to_str().unwrap(),
        "/rec.ts",
        "--tz",
        "Europe/Berlin",
    ]));
    assert!(text.contains("2026-11-28 14:03:13.000 CET"), "{text}");

    // A start in the hour Berlin skipped (2026-03-29 02:00 to 03:00) names the problem.
    let e = fails(
        dvrfs([
            "reindex",
            img.to_str().unwrap(),
            "/rec.ts",
            "--start",
            "2026-03-29T02:30:00",
            "--tz",
            "Europe/Berlin",
        ]),
        "--start",
    );
    assert!(e.contains("skipped") || e.contains("does not exist"), "{e}");
    // Without --start the last frame falls on the file's modification time.
    let r = json(&ok(dvrfs([
        "reindex",
        img.to_str().unwrap(),
        "/rec.ts",
        "--json",
    ])));
    assert_eq!(r[0]["keyframes"], 10);
    assert_clean(&img);
}

/// ffprobe's video frames of `path`: (keyframe, pts seconds).
fn frames(path: &std::path::Path) -> Vec<(bool, f64)> {
    let o = Command::new("ffprobe")
        .args(["-v", "error", "-select_streams", "v:0", "-show_entries"])
        .args(["frame=key_frame,pts_time", "-of", "json"])
        .arg(path)
        .output()
        .unwrap();
    json(&String::from_utf8_lossy(&o.stdout))["frames"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            (
                f["key_frame"].as_i64() == Some(1),
                f["pts_time"].as_str().unwrap().parse().unwrap(),
            )
        })
        .collect()
}

#[test]
fn play_from_a_time_or_a_frame_starts_at_the_keyframe_before_it_and_decodes() {
    if !ffmpeg_here() {
        return;
    }
    let d = tempdir();
    let ts = recording(d.path(), 12);
    let src = frames(&ts);
    let pts0 = src[0].1;
    let img = d.path().join("v.img");
    mkfs(&img, "1G", &[]);
    let i = img.to_str().unwrap();
    ok(dvrfs(["put", i, ts.to_str().unwrap(), "/rec.ts"]));
    ok(dvrfs([
        "reindex",
        i,
        "/rec.ts",
        "--start",
        "2026-11-28T14:00:00Z",
    ]));
    let out = d.path().join("out.ts");
    let o = out.to_str().unwrap();
    // (--from, the keyframe's media second it must start at, frames to the end)
    for (from, second, count) in [
        ("+5500ms", 5.0, 175),
        ("90s", -1.0, 0),
        ("frame:130", 5.0, 175),
        ("2026-11-28T14:00:07.2Z", 7.0, 125),
        // The end is the last keyframe (11 s) plus one keyframe interval.
        ("-3s", 9.0, 75),
    ] {
        let r = dvrfs([
            "play", i, "/rec.ts", "--rate", "8M", "--output", o, "--force", "--from", from,
        ]);
        if second < 0.0 {
            // Past the last keyframe's time: the last keyframe.
            assert!(r.status.success(), "{from}: {}", common::stderr(&r));
            assert_eq!(frames(&out).len(), 25, "{from}");
            continue;
        }
        assert!(r.status.success(), "{from}: {}", common::stderr(&r));
        let got = frames(&out);
        assert_eq!(got.len(), count, "{from}: frames to the end");
        assert!(got[0].0, "{from}: starts at a keyframe");
        assert!(
            (got[0].1 - pts0 - second).abs() < 1e-6,
            "{from}: starts at {}",
            got[0].1 - pts0
        );
        let dec = Command::new("ffmpeg")
            .args(["-v", "error", "-i", o, "-f", "null", "-"])
            .output()
            .unwrap();
        assert!(
            dec.status.success() && dec.stderr.is_empty(),
            "{from}: {}",
            String::from_utf8_lossy(&dec.stderr)
        );
    }
    fails(
        dvrfs([
            "play",
            i,
            "/rec.ts",
            "--rate",
            "8M",
            "--output",
            o,
            "--force",
            "--from",
            "2026-11-28T13:59:00Z",
        ]),
        "before /rec.ts's first keyframe",
    );
    // A file without an index takes a duration only.
    let noise = random_file(&d.path().join("noise.bin"), 300_000, 3);
    ok(dvrfs(["put", i, noise.to_str().unwrap(), "/noise.bin"]));
    let e = fails(
        dvrfs([
            "play",
            i,
            "/noise.bin",
            "--rate",
            "8M",
            "--output",
            o,
            "--force",
            "--from",
            "frame:3",
        ]),
        "no frame index",
    );
    assert!(e.contains("dvrfs reindex"), "{e}");
    assert_clean(&img);
}

#[test]
fn a_file_that_is_not_media_is_reported_and_gets_no_index() {
    let d = tempdir();
    let img = d.path().join("v.img");
    mkfs(&img, "1G", &[]);
    let f = random_file(&d.path().join("noise.bin"), 300_000, 7);
    ok(dvrfs([
        "put",
        img.to_str().unwrap(),
        f.to_str().unwrap(),
        "/noise.bin",
    ]));
    let out = ok(dvrfs(["reindex", img.to_str().unwrap(), "/noise.bin"]));
    assert!(out.contains("not a transport stream or an MP4"), "{out}");
    let k = json(&ok(dvrfs([
        "keyframes",
        img.to_str().unwrap(),
        "/noise.bin",
        "--json",
    ])));
    assert_eq!(k["keyframes"].as_array().unwrap().len(), 0);
    fails(
        dvrfs(["reindex", img.to_str().unwrap(), "/missing.ts"]),
        "missing.ts",
    );
    assert_clean(&img);
}

#[test]
fn a_recordings_last_keyframe_is_indexed_when_it_ends() {
    if !ffmpeg_here() {
        return;
    }
    let d = tempdir();
    // Every frame a keyframe: the last one ends only with the file.
    let ts = d.path().join("k.ts");
    let o = Command::new("ffmpeg")
        .args([
            "-v",
            "error",
            "-f",
            "lavfi",
            "-i",
            "testsrc=size=64x64:rate=1:duration=10",
        ])
        .args(["-c:v", "libx264", "-g", "1"])
        .arg(&ts)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let img = d.path().join("v.img");
    mkfs(&img, "1G", &[]);
    let s = img.to_str().unwrap();
    ok(dvrfs([
        "record",
        s,
        "/k.ts",
        "--input",
        ts.to_str().unwrap(),
        "--rate",
        "10M",
    ]));
    let k = json(&ok(dvrfs(["keyframes", s, "/k.ts", "--json"])));
    let offsets: Vec<u64> = k["keyframes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["offset"].as_u64().unwrap())
        .collect();
    assert_eq!(offsets, key_positions(&ts), "{k}");
    assert_eq!(offsets.len(), 10);
    assert_clean(&img);
}
