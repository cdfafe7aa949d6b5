//! `dvrfs record --ring`: the time-shift ring (issue 26, criterion 4 in its short
//! form; docs/retention.md, "The time-shift ring", has the two-minute run at
//! 40 Mbit/s). An ffmpeg fixture at 40 Mbit/s recorded with `--ring 10s --chunk 2s`
//! on the emulated avfs-250g: no request late; every chunk deleted went for its
//! max-age, within a second after its end passed the ring; what is left at the end
//! spans between the ring (less a keyframe interval: a chunk's end is its last
//! keyframe) and the ring plus a chunk; `verify` lists the gone as deleted by
//! retention; `fsck` is clean. Bad rings are refused with what to give. Through a
//! mount, a reader of the ring whose output nobody reads falls behind it: it gets an
//! "overrun", goes on at the oldest chunk left, and what it played decodes; the
//! recording never waited for it. A chunk of the ring protected while the ring
//! held it (`dvrfs protect` through the mount) outlives three ring lengths past its
//! end and still plays whole; unprotected, the ring deletes it (criterion 5 in its
//! short form). Prints SKIP where ffmpeg is missing (the test command installs it)
//! or FUSE is.

mod common;

use common::*;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// 30 s of MPEG-2 in MPEG-TS at 40 Mbit/s, a keyframe a second.
fn fixture(dir: &Path) -> PathBuf {
    let fixture = dir.join("fix.ts");
    let o = Command::new("ffmpeg")
        .args(["-hide_banner", "-nostdin", "-v", "error"])
        .args([
            "-f",
            "lavfi",
            "-i",
            "testsrc=size=640x360:rate=25",
            "-t",
            "30",
        ])
        .args(["-c:v", "mpeg2video", "-b:v", "38M", "-minrate", "38M"])
        .args(["-maxrate", "38M", "-bufsize", "8M", "-g", "25"])
        .args(["-f", "mpegts", "-muxrate", "40M"])
        .arg(&fixture)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    fixture
}

const S: i64 = 1_000_000_000;

/// The UTC a chunk's name says, ns (`YYYYMMDDTHHMMSS.mmmZ.ts`).
fn name_utc(name: &str) -> i64 {
    let n = |r: std::ops::Range<usize>| name[r].parse::<i64>().unwrap();
    let days = {
        // Days since 1970-01-01 of a civil date (proleptic Gregorian).
        let (y, m, d) = (n(0..4), n(4..6), n(6..8));
        let y = if m <= 2 { y - 1 } else { y };
        let era = y.div_euclid(400);
        let yoe = y - era * 400;
        let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + d - 1;
        let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
        era * 146_097 + doe - 719_468
    };
    let secs = days * 86_400 + n(9..11) * 3600 + n(11..13) * 60 + n(13..15);
    secs * S + n(16..19) * 1_000_000
}

/// A moment as RFC 3339 in UTC, with milliseconds (`date` does the calendar).
fn rfc3339(ns: i64) -> String {
    let o = Command::new("date")
        .args(["-u", "+%Y-%m-%dT%H:%M:%S.%3NZ", "-d"])
        .arg(format!("@{}.{:09}", ns / S, ns % S))
        .output()
        .unwrap();
    String::from_utf8(o.stdout).unwrap().trim().to_string()
}

/// Polls `done` every 50 ms until it holds; fails the test after a minute (a
/// guard against a hang, not a measure of time).
fn poll_until(what: &str, mut done: impl FnMut() -> bool) {
    let start = std::time::Instant::now();
    while !done() {
        assert!(
            start.elapsed() < std::time::Duration::from_secs(60),
            "{what}: not after a minute"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// A scratch directory with the fixture and a fresh 1 GiB image in it; None (SKIP
/// printed) without ffmpeg.
fn setup() -> Option<(tempfile::TempDir, PathBuf, PathBuf)> {
    if !ffmpeg_here() {
        println!("SKIP: ffmpeg is not installed (scripts/test.sh installs it)");
        return None;
    }
    let dir = tempdir();
    let fixture = fixture(dir.path());
    let img = dir.path().join("fs.img");
    mkfs(&img, "1G", &[]);
    Some((dir, fixture, img))
}

#[test]
fn a_ring_keeps_its_length_plus_at_most_a_chunk_and_deletes_on_time() {
    let Some((_dir, fixture, img)) = setup() else {
        return;
    };
    let img_s = img.to_str().unwrap();
    let input = fixture.to_str().unwrap();
    let rec = |extra: &[&str]| {
        let mut a = vec!["record", img_s, "/cam", "--rate", "42M", "--input", input];
        a.extend(extra);
        dvrfs(a)
    };
    // A ring that holds less than two chunks, and rings that are not one.
    fails(
        rec(&["--ring", "3s", "--chunk", "2s"]),
        "less than two chunks",
    );
    fails(rec(&["--ring", "1500ms"]), "invalid --ring");
    fails(rec(&["--ring", "64K"]), "invalid --ring");

    let r = json(&ok(rec(&[
        "--ring",
        "10s",
        "--chunk",
        "2s",
        "--device-model",
        "avfs-250g",
        "--json",
    ])));
    assert_eq!(r["deadline_misses"], 0, "{r}");
    assert!(r["chunks"].as_u64().unwrap() >= 12, "{r}");
    let ev = json(&ok(dvrfs(["events", img_s, "--json"])));
    let events = ev["events"].as_array().unwrap();
    let gone: Vec<&serde_json::Value> = events
        .iter()
        .filter(|e| e["kind"] == "chunk_deleted")
        .collect();
    assert!(gone.len() >= 6, "{ev}");
    for e in &gone {
        assert_eq!(e["cause"], "max_age", "{e}");
        let late = e["wall_ns"].as_i64().unwrap() - e["end_utc_ns"].as_i64().unwrap();
        assert!(
            (10 * S..11 * S).contains(&late),
            "deleted {late} ns after its end: {e}"
        );
    }
    // What is left spans the ring, give or take a keyframe interval and a chunk.
    let ended = events
        .iter()
        .rfind(|e| e["kind"] == "stream_ended")
        .expect("the recording's end is logged")["wall_ns"]
        .as_i64()
        .unwrap();
    let ls = ok(dvrfs(["ls", img_s, "/cam"]));
    let left: Vec<&str> = ls
        .lines()
        .map(str::trim)
        .filter(|l| l.ends_with(".ts"))
        .collect();
    let oldest = name_utc(left.iter().min().unwrap());
    let span = ended - oldest;
    println!(
        "{} chunks left spanning {:.2} s",
        left.len(),
        span as f64 / 1e9
    );
    assert!((9 * S..=14 * S + S / 2).contains(&span), "{span} ns: {ls}");
    // The gone are deleted by retention in the chain, not missing.
    let v = ok(dvrfs(["verify", img_s, "/cam"]));
    assert!(v.matches("deleted").count() >= gone.len(), "{v}");
    assert!(!v.contains("MISSING"), "{v}");
    assert_clean(&img);
}

#[test]
fn a_reader_that_falls_behind_the_ring_gets_an_overrun_and_a_protected_chunk_outlives_it() {
    need_fuse!();
    let Some((dir, fixture, img)) = setup() else {
        return;
    };
    let img_s = img.to_str().unwrap();
    let m = Mount::new(dir.path(), &img, &["--device-model", "avfs-250g"]);
    // The recording, through the mount's daemon.
    let rec = Command::new(env!("CARGO_BIN_EXE_dvrfs"))
        .args(["record", img_s, "/cam", "--ring", "10s", "--chunk", "2s"])
        .args(["--rate", "42M", "--json", "--input"])
        .arg(&fixture)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let cam = m.path("cam");
    let names = || -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(&cam).map_or(vec![], |d| {
            d.map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .filter(|n| n.ends_with(".ts"))
                .collect()
        });
        v.sort();
        v
    };
    let chunks = || names().len();
    // Polled (each poll a directory listing through the mount).
    while chunks() < 2 {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    // A reader that stops reading: its output pipe fills and it waits.
    let mut play = Command::new(env!("CARGO_BIN_EXE_dvrfs"))
        .args(["play", img_s, "/cam", "--follow", "--rate", "48M"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Until the ring has deleted well past where the reader stopped (the chain's
    // `deleted` lines).
    let deleted = || {
        std::fs::read_to_string(cam.join(".chain"))
            .unwrap_or_default()
            .lines()
            .filter(|l| l.contains("\"deleted\""))
            .count()
    };
    // The ring's fourth chunk protected while the ring holds it: a moment half a
    // second into it (its span runs from its first keyframe to the next chunk's).
    poll_until("five chunks", || chunks() >= 5);
    let clip = names()[3].clone();
    let at = rfc3339(name_utc(&clip) + S / 2);
    let pj = json(&ok(dvrfs([
        "protect", img_s, "/cam", "--from", &at, "--to", &at, "--note", "incident", "--json",
    ])));
    assert_eq!(
        (pj["id"].as_u64(), pj["chunks"].as_u64()),
        (Some(1), Some(1)),
        "{pj}"
    );
    assert_eq!(pj["state"], "held", "{pj}");
    poll_until("eight chunks deleted", || deleted() >= 8);
    let mut out = vec![];
    play.stdout.take().unwrap().read_to_end(&mut out).unwrap();
    let p = play.wait_with_output().unwrap();
    let perr = stderr(&p);
    assert!(p.status.success(), "{perr}");
    assert!(perr.contains("play: overrun:"), "{perr}");
    assert!(perr.contains(", 0 late, 0 stalls"), "{perr}");
    let r = rec.wait_with_output().unwrap();
    assert!(r.status.success(), "{}", stderr(&r));
    let rj = json(&stdout(&r));
    assert_eq!(rj["deadline_misses"], 0, "{rj}");
    // Less than was recorded, and it decodes: from a keyframe at every chunk.
    let played = dir.path().join("played.ts");
    std::fs::write(&played, &out).unwrap();
    assert!(
        (out.len() as u64) < rj["bytes"].as_u64().unwrap(),
        "nothing skipped"
    );
    assert!(out.len() > 10 << 20, "{} bytes played", out.len());
    let errs = decode_errors(&played);
    assert!(errs.trim().is_empty(), "{errs}");
    // Until the ring has deleted a chunk recorded 20 s after the clip's start, at
    // its end plus the ring: the clip has outlived three ring lengths past its own
    // end (a chunk is 2 s), and it is still there, whole, and plays.
    let gone_after = |t: i64| {
        std::fs::read_to_string(cam.join(".chain"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| json(l)["deleted"].as_str().map(name_utc))
            .any(|n| n >= t)
    };
    poll_until("the ring 20 s past the clip", || {
        gone_after(name_utc(&clip) + 20 * S)
    });
    assert!(names().contains(&clip), "the protected chunk was deleted");
    let clip_path = format!("/cam/{clip}");
    let out = Command::new(env!("CARGO_BIN_EXE_dvrfs"))
        .args(["play", img_s, &clip_path, "--rate", "48M"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let size = std::fs::metadata(cam.join(&clip)).unwrap().len();
    assert_eq!(out.stdout.len() as u64, size);
    let clip_ts = dir.path().join("clip.ts");
    std::fs::write(&clip_ts, &out.stdout).unwrap();
    let errs = decode_errors(&clip_ts);
    assert!(errs.trim().is_empty(), "{errs}");
    let list = ok(dvrfs(["protect", img_s, "--list"]));
    assert!(
        list.contains("id 1: /cam") && list.contains("(incident)"),
        "{list}"
    );
    // Removed, the ring deletes it at once (it is past max-age).
    ok(dvrfs(["unprotect", img_s, "--id", "1"]));
    poll_until("the unprotected chunk deleted", || !names().contains(&clip));
    assert!(ok(dvrfs(["protect", img_s, "--list"])).contains("no protections"));
    m.unmount();
    assert_clean(&img);
}
