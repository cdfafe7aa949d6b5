//! `dvrfs reindex` and `dvrfs keyframes` on a volume image: an ffmpeg recording put
//! into the volume is indexed as it is written, and a reindex gives exactly
//! ffprobe's keyframes, timed from `--start` (UTC or a
//! local time in `--tz`, where a time the clocks skipped is an error naming the
//! candidates), kept across runs, fsck clean; a file that is not media gets none.
//! Prints SKIP where ffmpeg is missing (the test command installs it).

mod common;

use common::{assert_clean, dvrfs, fails, json, mkfs, ok, random_file, tempdir};
use std::process::Command;

fn ffmpeg_here() -> bool {
    let here = Command::new("ffprobe")
        .arg("-version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !here {
        eprintln!("SKIP: ffmpeg or ffprobe missing (apt-get install ffmpeg)");
    }
    here
}

/// ffprobe's keyframe packet positions.
fn key_positions(path: &std::path::Path) -> Vec<u64> {
    let o = Command::new("ffprobe")
        .args(["-v", "error", "-select_streams", "v:0", "-show_packets"])
        .args(["-show_entries", "packet=pos,flags", "-of", "json"])
        .arg(path)
        .output()
        .unwrap();
    json(&String::from_utf8_lossy(&o.stdout))["packets"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["flags"].as_str().unwrap().starts_with('K'))
        .map(|p| p["pos"].as_str().unwrap().parse().unwrap())
        .collect()
}

#[test]
fn a_recording_put_in_the_volume_is_indexed_with_ffprobes_keyframes() {
    if !ffmpeg_here() {
        return;
    }
    let d = tempdir();
    let ts = d.path().join("rec.ts");
    let o = Command::new("ffmpeg")
        .args([
            "-v",
            "error",
            "-f",
            "lavfi",
            "-i",
            "testsrc2=size=320x240:rate=25:duration=10",
        ])
        .args(["-c:v", "libx264", "-g", "25"])
        .arg(&ts)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
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
