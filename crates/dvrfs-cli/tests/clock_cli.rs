//! Issue 25, test 6: the host's clock stepped under a live recording. A 16-second
//! recording is played in real time (`ffmpeg -re`) into `dvrfs record --chunk 4s`
//! whose wall clock libfaketime steps by an hour six seconds in (the monotonic
//! clock left alone, as a real step leaves it). Forward: the step is applied and
//! flagged, the timeline shows an hour's gap caused by it, the event log names it,
//! and no two chunks overlap. Back: the step is logged and not applied: one span,
//! chunk names and times still in order. A local time in a DST fold is refused as
//! ambiguous, naming both candidates. Prints SKIP where ffmpeg or libfaketime is
//! missing (the test command installs both).

mod common;

use common::{av_recording, dvrfs, fails, ffmpeg_here, json, mkfs, ok, tempdir};
use jiff::Timestamp;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

const HOUR_NS: i64 = 3_600_000_000_000;
const SEC_NS: i64 = 1_000_000_000;

/// libfaketime's multithreaded library, where Debian's `faketime` puts it.
fn libfaketime() -> Option<PathBuf> {
    let dir = Path::new("/usr/lib");
    std::fs::read_dir(dir)
        .ok()?
        .filter_map(|e| e.ok())
        .map(|e| e.path().join("faketime/libfaketimeMT.so.1"))
        .find(|p| p.exists())
}

fn utc(v: &Value) -> i64 {
    let t: Timestamp = v.as_str().expect("a time").parse().expect("RFC 3339");
    t.as_nanosecond() as i64
}

/// Records 16 s of `src` in real time into `/cam` of `img`, the wall clock stepped
/// by `step` (libfaketime's syntax: `+1h`, `-1h`) 6 s in; the record report.
fn record_with_step(lib: &Path, img: &Path, src: &Path, step: &str) -> Value {
    let mut feed = Command::new("ffmpeg")
        .args(["-v", "error", "-re", "-i"])
        .arg(src)
        .args(["-c", "copy", "-f", "mpegts", "-"])
        .stdout(Stdio::piped())
        .spawn()
        .expect("run ffmpeg");
    let out = Command::new(env!("CARGO_BIN_EXE_dvrfs"))
        .args(["record", img.to_str().unwrap(), "/cam", "--chunk", "4s"])
        .args(["--rate", "8M", "--json"])
        .env("LD_PRELOAD", lib)
        .env("FAKETIME", step)
        .env("FAKETIME_START_AFTER_SECONDS", "6")
        .env("DONT_FAKE_MONOTONIC", "1")
        .stdin(feed.stdout.take().unwrap())
        .output()
        .expect("run dvrfs");
    assert!(feed.wait().unwrap().success());
    json(&ok(out))
}

/// Each chunk of `/cam` in name order: (name, first and last keyframe UTC, and
/// whether a keyframe is flagged clock-step).
fn chunks(img: &Path) -> Vec<(String, i64, i64, bool)> {
    let ls = ok(dvrfs(["ls", img.to_str().unwrap(), "/cam"]));
    let mut names: Vec<String> = ls
        .lines()
        .filter_map(|l| l.split_whitespace().last())
        .filter(|n| n.ends_with(".ts"))
        .map(str::to_string)
        .collect();
    names.sort();
    names
        .into_iter()
        .map(|n| {
            let path = format!("/cam/{n}");
            let k = json(&ok(dvrfs([
                "keyframes",
                img.to_str().unwrap(),
                &path,
                "--json",
            ])));
            let kf = k["keyframes"].as_array().unwrap().clone();
            assert!(!kf.is_empty(), "{n}: no keyframes");
            let stepped = kf
                .iter()
                .any(|e| e["flags"].as_str().unwrap().contains("clock-step"));
            (
                n,
                utc(&kf[0]["utc"]),
                utc(&kf[kf.len() - 1]["utc"]),
                stepped,
            )
        })
        .collect()
}

/// Chunk names sort in time order and no chunk's keyframes reach into the next's.
fn assert_no_overlap(chunks: &[(String, i64, i64, bool)]) {
    for w in chunks.windows(2) {
        assert!(
            w[0].2 < w[1].1,
            "{} ends after {} starts: {chunks:?}",
            w[0].0,
            w[1].0
        );
    }
}

/// The `clock_step` events of the volume.
fn clock_events(img: &Path) -> Vec<Value> {
    let ev = json(&ok(dvrfs(["events", img.to_str().unwrap(), "--json"])));
    ev["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["kind"] == "clock_step")
        .cloned()
        .collect()
}

/// (libfaketime, a scratch dir, the 16-s source) or `None` after printing SKIP.
fn setup() -> Option<(PathBuf, tempfile::TempDir, PathBuf)> {
    if !ffmpeg_here() {
        return None;
    }
    let Some(lib) = libfaketime() else {
        println!("SKIP: libfaketime not installed (apt-get install faketime)");
        return None;
    };
    let d = tempdir();
    let src = av_recording(d.path(), "src.ts", 16, &[]);
    Some((lib, d, src))
}

#[test]
fn a_host_clock_stepped_forward_is_applied_flagged_and_logged_without_overlap() {
    let Some((lib, d, src)) = setup() else {
        return;
    };
    let img = d.path().join("fwd.img");
    mkfs(&img, "2G", &[]);
    let r = record_with_step(&lib, &img, &src, "+1h");
    assert_eq!(r["deadline_misses"], 0, "{r}");

    let c = chunks(&img);
    assert!(c.len() >= 4, "{c:?}");
    assert_no_overlap(&c);
    assert_eq!(
        c.iter().filter(|x| x.3).count(),
        1,
        "one chunk flagged: {c:?}"
    );
    // The chunks after the step are named by the stepped clock.
    let first_ns = c[0].1;
    assert!(c.last().unwrap().1 - first_ns > HOUR_NS, "{c:?}");

    let t = json(&ok(dvrfs([
        "timeline",
        img.to_str().unwrap(),
        "/cam",
        "--json",
    ])));
    let gaps = t["gaps"].as_array().unwrap();
    assert_eq!(gaps.len(), 1, "{t}");
    assert!(
        gaps[0]["cause"].as_str().unwrap().contains("re-anchored"),
        "{t}"
    );
    let gap_ns = (gaps[0]["seconds"].as_f64().unwrap() * 1e9) as i64;
    assert!((gap_ns - HOUR_NS).abs() < SEC_NS, "{t}");
    let spans: f64 = t["spans"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["seconds"].as_f64().unwrap())
        .sum();
    assert!((spans - 16.0).abs() <= 2.0, "{t}");

    let ev = clock_events(&img);
    assert_eq!(ev.len(), 1, "{ev:?}");
    assert_eq!(ev[0]["change"], "host_forward");
    assert_eq!(ev[0]["applied"], true);
    let step = ev[0]["step_ns"].as_i64().unwrap();
    assert!((step - HOUR_NS).abs() < SEC_NS, "{ev:?}");
    ok(dvrfs(["fsck", img.to_str().unwrap()]));
}

#[test]
fn a_host_clock_stepped_back_is_logged_and_not_applied() {
    let Some((lib, d, src)) = setup() else {
        return;
    };
    let img = d.path().join("back.img");
    mkfs(&img, "2G", &[]);
    let r = record_with_step(&lib, &img, &src, "-1h");
    assert_eq!(r["deadline_misses"], 0, "{r}");

    let c = chunks(&img);
    assert!(c.len() >= 4, "{c:?}");
    assert_no_overlap(&c);
    assert!(c.iter().all(|x| !x.3), "nothing re-anchored: {c:?}");
    // The media time carried the recording on: 16 s from first to last keyframe.
    let span = c.last().unwrap().2 - c[0].1;
    assert!((span - 16 * SEC_NS).abs() <= 3 * SEC_NS, "{c:?}");

    let t = json(&ok(dvrfs([
        "timeline",
        img.to_str().unwrap(),
        "/cam",
        "--json",
    ])));
    assert_eq!(t["gaps"].as_array().unwrap().len(), 0, "{t}");
    assert_eq!(t["spans"].as_array().unwrap().len(), 1, "{t}");

    let ev = clock_events(&img);
    assert_eq!(ev.len(), 1, "{ev:?}");
    assert_eq!(ev[0]["change"], "host_back");
    assert_eq!(ev[0]["applied"], false);
    ok(dvrfs(["fsck", img.to_str().unwrap()]));
}

#[test]
fn a_local_time_in_a_dst_fold_is_refused_naming_both_candidates() {
    let d = tempdir();
    let img = d.path().join("tz.img");
    mkfs(&img, "1G", &[]);
    ok(dvrfs(["mkdir", img.to_str().unwrap(), "/cam"]));
    // Berlin's clocks went back from 03:00 CEST to 02:00 CET on 2026-10-25: 02:30
    // happened twice.
    let e = fails(
        dvrfs([
            "export",
            img.to_str().unwrap(),
            "/cam",
            "--from",
            "2026-10-25T02:30:00",
            "--to",
            "+5s",
            "--tz",
            "Europe/Berlin",
            "--output",
            d.path().join("clip.ts").to_str().unwrap(),
        ]),
        "ambiguous",
    );
    assert!(
        e.contains("2026-10-25T00:30:00Z") && e.contains("2026-10-25T01:30:00Z"),
        "{e}"
    );
    assert!(!d.path().join("clip.ts").exists());
}
