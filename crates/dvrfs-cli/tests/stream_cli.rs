//! `record` and `play` on image files: byte-exact, at the rate, admission and space
//! refusals said at open with nothing left behind, bad flags.

mod common;

use common::*;
use std::io::Write;
use std::process::{Command, Stdio};
use std::time::Instant;

#[test]
fn record_a_file_then_play_it_back_byte_exact_at_the_rate() {
    let dir = tempdir();
    let img = dir.path().join("fs.img");
    mkfs(&img, "1G", &[]);
    let src = random_file(&dir.path().join("cam.ts"), 12 << 20, 7);
    // 48 Mbit/s = 6 MB/s: two seconds of recording.
    let t = Instant::now();
    let v = json(&ok(dvrfs([
        "record".as_ref(),
        img.as_os_str(),
        "/cam.ts".as_ref(),
        "--input".as_ref(),
        src.as_os_str(),
        "--rate".as_ref(),
        "48M".as_ref(),
        "--json".as_ref(),
    ])));
    let took = t.elapsed().as_secs_f64();
    assert_eq!(v["bytes"], 12 << 20, "{v}");
    assert_eq!(v["reserved_bytes"], 12 << 20, "{v}");
    assert_eq!(v["deadline_misses"], 0, "{v}");
    assert_eq!(v["direction"], "write", "{v}");
    assert!(v["rt_requests"].as_u64().unwrap() >= 24, "{v}");
    // Rate control: never faster than the rate (less the half-request burst).
    assert!(took >= (12.0 * 1048576.0 - 262144.0) / 6e6, "{took}");
    assert_clean(&img);

    let back = dir.path().join("back.ts");
    let v = json(&ok(dvrfs([
        "play".as_ref(),
        img.as_os_str(),
        "/cam.ts".as_ref(),
        "--output".as_ref(),
        back.as_os_str(),
        "--rate".as_ref(),
        "96M".as_ref(),
        "--json".as_ref(),
    ])));
    assert_eq!(v["deadline_misses"], 0, "{v}");
    assert_eq!(v["stalls"], 0, "{v}");
    assert_eq!(sha256_file(&src), sha256_file(&back));

    // --from: a second in at 48 Mbit/s is 6,000,000 bytes; stdout works too.
    let o = dvrfs([
        "play".as_ref(),
        img.as_os_str(),
        "/cam.ts".as_ref(),
        "--rate".as_ref(),
        "48M".as_ref(),
        "--from".as_ref(),
        "1s".as_ref(),
        "--speed".as_ref(),
        "4".as_ref(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let all = std::fs::read(&src).unwrap();
    assert!(o.stdout == all[6_000_000..], "play --from 1s differs");
}

#[test]
fn record_from_stdin_for_a_duration_holds_that_much_and_stops() {
    let dir = tempdir();
    let img = dir.path().join("fs.img");
    mkfs(&img, "512M", &[]);
    let mut child = Command::new(env!("CARGO_BIN_EXE_dvrfs"))
        .args([
            "record".as_ref(),
            img.as_os_str(),
            "/live.ts".as_ref(),
            "--rate".as_ref(),
            "16M".as_ref(),
            "--duration".as_ref(),
            "2s".as_ref(),
            "--json".as_ref(),
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // More than two seconds' worth: the recording takes 4,000,000 bytes.
    let data = vec![0x47u8; 6_000_000];
    let mut stdin = child.stdin.take().unwrap();
    let writer = std::thread::spawn(move || {
        let _ = stdin.write_all(&data);
    });
    let o = child.wait_with_output().unwrap();
    writer.join().unwrap();
    let v = json(&ok(o));
    assert_eq!(v["bytes"], 4_000_000, "{v}");
    assert_eq!(v["reserved_bytes"], 4_000_000, "{v}");
    let st = json(&ok(dvrfs([
        "stat".as_ref(),
        img.as_os_str(),
        "/live.ts".as_ref(),
        "--json".as_ref(),
    ])));
    assert_eq!(st["size_bytes"], 4_000_000, "{st}");
}

#[test]
fn over_capacity_and_full_disk_are_refused_at_open_leaving_nothing() {
    let dir = tempdir();
    let img = dir.path().join("fs.img");
    mkfs(&img, "256M", &[]);
    let src = random_file(&dir.path().join("x.ts"), 1 << 20, 3);
    // 100 MB/s by default, 90% for streams: 1 Gbit/s does not fit.
    let err = fails(
        dvrfs([
            "record".as_ref(),
            img.as_os_str(),
            "/big.ts".as_ref(),
            "--input".as_ref(),
            src.as_os_str(),
            "--rate".as_ref(),
            "1G".as_ref(),
        ]),
        "stream refused",
    );
    assert!(
        err.contains("asked for a write stream of 1000.00 Mbit/s"),
        "{err}"
    );
    assert!(err.contains("fits at up to 720.00 Mbit/s"), "{err}");
    // On the emulated disk's model a 19.39 Mbit/s stream with a tiny buffer does not
    // fit either, and the message names the model.
    let err = fails(
        dvrfs([
            "record".as_ref(),
            img.as_os_str(),
            "/big.ts".as_ref(),
            "--input".as_ref(),
            src.as_os_str(),
            "--rate".as_ref(),
            "19.39M".as_ref(),
            "--request".as_ref(),
            "64K".as_ref(),
            "--buffer".as_ref(),
            "128K".as_ref(),
            "--device-model".as_ref(),
            "avfs-250g".as_ref(),
        ]),
        "avfs-250g",
    );
    assert!(err.contains("larger buffer"), "{err}");
    // A recording larger than the free space: refused before a byte is taken.
    let err = fails(
        dvrfs([
            "record".as_ref(),
            img.as_os_str(),
            "/big.ts".as_ref(),
            "--rate".as_ref(),
            "8M".as_ref(),
            "--size".as_ref(),
            "10G".as_ref(),
        ]),
        "no space",
    );
    assert!(!err.is_empty());
    let ls = ok(dvrfs(["ls".as_ref(), img.as_os_str(), "/".as_ref()]));
    assert!(!ls.contains("big.ts"), "{ls}");
    assert_clean(&img);
}

#[test]
fn bad_flags_and_paths_say_what_is_wrong() {
    let dir = tempdir();
    let img = dir.path().join("fs.img");
    mkfs(&img, "256M", &[]);
    let src = random_file(&dir.path().join("x.ts"), 1 << 20, 3);
    let rec = |extra: &[&str]| {
        let mut args = vec![
            "record".to_string(),
            img.display().to_string(),
            "/x.ts".into(),
            "--input".into(),
            src.display().to_string(),
        ];
        args.extend(extra.iter().map(|s| s.to_string()));
        dvrfs(&args)
    };
    fails(rec(&["--rate", "fast"]), "is not a bit rate");
    fails(rec(&["--rate", "8M", "--request", "1000"]), "request size");
    fails(rec(&["--rate", "8M", "--buffer", "12Q"]), "--buffer");
    fails(
        rec(&["--rate", "8M", "--duration", "1s", "--size", "1M"]),
        "--size and --duration",
    );
    fails(
        rec(&[
            "--rate",
            "8M",
            "--device-model",
            "nvr-8t",
            "--bandwidth",
            "1G",
        ]),
        "--device-model and --bandwidth",
    );
    fails(
        rec(&["--rate", "8M", "--device-model", "floppy"]),
        "unknown disk",
    );
    ok(rec(&["--rate", "80M"]));
    fails(rec(&["--rate", "80M"]), "exists");
    let play = |path: &str, extra: &[&str]| {
        let mut args = vec!["play".to_string(), img.display().to_string(), path.into()];
        args.extend(extra.iter().map(|s| s.to_string()));
        dvrfs(&args)
    };
    fails(play("/nope.ts", &["--rate", "8M"]), "no such file");
    fails(play("/", &["--rate", "8M"]), "not a regular file");
    fails(
        play("/x.ts", &["--rate", "8M", "--from", "1h"]),
        "past the end",
    );
    assert_clean(&img);
}

#[test]
fn kill_9_of_a_recording_keeps_every_byte_it_reported_durable() {
    use std::io::{BufRead, BufReader};
    let dir = tempdir();
    let img = dir.path().join("fs.img");
    mkfs(&img, "1G", &[]);
    let src = random_file(&dir.path().join("feed.ts"), 48 << 20, 11);
    let feed = std::fs::read(&src).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_dvrfs"))
        .args([
            "record".as_ref(),
            img.as_os_str(),
            "/live.ts".as_ref(),
            "--rate".as_ref(),
            "16M".as_ref(),
            "--size".as_ref(),
            "48M".as_ref(),
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let data = feed.clone();
    let writer = std::thread::spawn(move || {
        // Ends with a broken pipe once the recorder is killed.
        let _ = stdin.write_all(&data);
    });
    let mut durable = 0u64;
    let mut log = String::new();
    for line in BufReader::new(child.stderr.take().unwrap()).lines() {
        let line = line.unwrap();
        log.push_str(&line);
        log.push('\n');
        if let Some(n) = line
            .strip_prefix("record: ")
            .and_then(|l| l.strip_suffix(" bytes durable"))
        {
            durable = n.parse().unwrap();
            if durable >= 4 << 20 {
                break;
            }
        }
    }
    assert!(
        durable >= 4 << 20,
        "the recorder never reported 4 MiB durable:\n{log}"
    );
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    writer.join().unwrap();
    wait_unlocked(&img);
    // Reopened (the journal replays): every durable byte is there and right.
    assert_clean(&img);
    let back = dir.path().join("back.ts");
    ok(dvrfs([
        "get".as_ref(),
        img.as_os_str(),
        "/live.ts".as_ref(),
        back.as_os_str(),
    ]));
    let got = std::fs::read(&back).unwrap();
    assert!(
        got.len() as u64 >= durable,
        "{} bytes after the crash, {durable} were reported durable",
        got.len()
    );
    assert!(
        got[..] == feed[..got.len()],
        "the recording differs from its input"
    );
    // A writer opens it again (replaying for real) and it stays clean.
    ok(dvrfs([
        "mkdir".as_ref(),
        img.as_os_str(),
        "/after".as_ref(),
    ]));
    assert_clean(&img);
}
