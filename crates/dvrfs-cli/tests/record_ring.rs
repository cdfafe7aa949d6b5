//! `dvrfs record --ring`: the time-shift ring (issue 26, criterion 4 in its short
//! form; docs/retention.md, "The time-shift ring", has the two-minute run at
//! 40 Mbit/s). An ffmpeg fixture at 40 Mbit/s recorded with `--ring 10s --chunk 2s`
//! on the emulated avfs-250g: no request late; every chunk deleted went for its
//! max-age, within a second after its end passed the ring; what is left at the end
//! spans between the ring (less a keyframe interval: a chunk's end is its last
//! keyframe) and the ring plus a chunk; `verify` lists the gone as deleted by
//! retention; `fsck` is clean. Bad rings are refused with what to give. Prints SKIP
//! where ffmpeg is missing (the test command installs it).

mod common;

use common::{assert_clean, dvrfs, fails, ffmpeg_here, json, mkfs, ok, tempdir};
use std::process::Command;

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

#[test]
fn a_ring_keeps_its_length_plus_at_most_a_chunk_and_deletes_on_time() {
    if !ffmpeg_here() {
        println!("SKIP: ffmpeg is not installed (scripts/test.sh installs it)");
        return;
    }
    let dir = tempdir();
    let fixture = dir.path().join("fix.ts");
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
    let img = dir.path().join("fs.img");
    let img_s = img.to_str().unwrap();
    mkfs(&img, "1G", &[]);
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
