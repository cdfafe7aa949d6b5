//! `record` and `play` on image files: byte-exact, at the rate, admission and space
//! refusals said at open with nothing left behind, bad flags, `kill -9`, and SIGINT /
//! SIGTERM stopping a recording cleanly while its input is quiet.

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
    // 90 MB/s for streams, less what the recording logs at each gather point on
    // this volume (it has a tail log): half a request a second.
    assert!(err.contains("fits at up to 717.90 Mbit/s"), "{err}");
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
    ok(dvrfs(["mkdir", &img.display().to_string(), "/empty"]));
    fails(play("/empty", &["--rate", "8M"]), "not a recording");
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
        if let Some((n, _)) = line
            .strip_prefix("record: ")
            .and_then(|l| l.split_once(" bytes durable, "))
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

/// A `record` fed from a pipe the test writes into; its stderr lines come over a
/// channel as they are printed.
struct Recorder {
    child: std::process::Child,
    stdin: Option<std::process::ChildStdin>,
    lines: std::sync::mpsc::Receiver<String>,
    log: String,
}

/// How long a test waits for the recorder before it calls it hung.
const HUNG: std::time::Duration = std::time::Duration::from_secs(60);

impl Recorder {
    fn start(img: &std::path::Path, path: &str, extra: &[&str]) -> Recorder {
        use std::io::{BufRead, BufReader};
        let mut child = Command::new(env!("CARGO_BIN_EXE_dvrfs"))
            .arg("record")
            .arg(img)
            .arg(path)
            .args(extra)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take();
        let stderr = child.stderr.take().unwrap();
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines() {
                if tx.send(line.unwrap()).is_err() {
                    break;
                }
            }
        });
        Recorder {
            child,
            stdin,
            lines,
            log: String::new(),
        }
    }

    fn feed(&mut self, data: &[u8]) {
        self.stdin.as_mut().unwrap().write_all(data).unwrap();
    }

    /// The next stderr line; `None` once the recorder has closed stderr (exited).
    fn next_line(&mut self) -> Option<String> {
        match self.lines.recv_timeout(HUNG) {
            Ok(line) => {
                self.log.push_str(&line);
                self.log.push('\n');
                Some(line)
            }
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => None,
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                let _ = self.child.kill();
                panic!("the recorder printed nothing for {HUNG:?}:\n{}", self.log);
            }
        }
    }

    /// The bytes accepted according to the next once-a-second status line (`record: N
    /// bytes durable, M accepted`).
    fn next_accepted(&mut self) -> u64 {
        while let Some(line) = self.next_line() {
            if let Some((_, m)) = line
                .strip_prefix("record: ")
                .and_then(|l| l.split_once(" bytes durable, "))
            {
                return m.strip_suffix(" accepted").unwrap().parse().unwrap();
            }
        }
        panic!("the recorder ended without a status line:\n{}", self.log);
    }

    /// Waits for the status line saying that exactly `bytes` were taken from the
    /// input: from then on the input is quiet and the recorder waits on it.
    fn wait_accepted(&mut self, bytes: u64) {
        while self.next_accepted() != bytes {}
    }

    fn signal(&self, sig: libc::c_int) {
        // SAFETY: kill of our own child, which has not been reaped yet.
        let r = unsafe { libc::kill(self.child.id() as libc::pid_t, sig) };
        assert_eq!(r, 0, "kill: {}", std::io::Error::last_os_error());
    }

    /// Waits for the recorder to exit, its input still open (so it is the signal, not
    /// the end of the input, that stops it): its status, stdout and whole stderr.
    fn finish(mut self) -> (std::process::ExitStatus, String, String) {
        use std::io::Read;
        while self.next_line().is_some() {}
        let status = self.child.wait().unwrap();
        let mut out = String::new();
        self.child
            .stdout
            .take()
            .unwrap()
            .read_to_string(&mut out)
            .unwrap();
        drop(self.stdin.take());
        (status, out, self.log)
    }
}

/// Three whole 512 KiB requests and 300 KiB of a fourth.
const MID_RECORDING_BYTES: u64 = 3 * (512 << 10) + 300 * 1024;

/// A recording stopped by a signal: what it was fed, how it ended.
struct Stopped {
    dir: tempfile::TempDir,
    img: std::path::PathBuf,
    path: &'static str,
    feed: Vec<u8>,
    status: std::process::ExitStatus,
    stdout: String,
    log: String,
}

/// Records `len` pseudo-random bytes (seed `seed`) into `path` of a new volume,
/// `record` given `flags`: the test writes them all into the pipe at once, waits until
/// the recorder says it took every one of them, sends `sig` with the input still open
/// and quiet (only the signal can end the recording), and waits for the recorder to
/// exit.
fn stop_a_recording(
    path: &'static str,
    len: u64,
    seed: u64,
    flags: &[&str],
    sig: libc::c_int,
) -> Stopped {
    let dir = tempdir();
    let img = dir.path().join("fs.img");
    mkfs(&img, "512M", &[]);
    let feed = std::fs::read(random_file(&dir.path().join("feed.ts"), len, seed)).unwrap();
    let mut rec = Recorder::start(&img, path, flags);
    rec.feed(&feed);
    rec.wait_accepted(len);
    rec.signal(sig);
    let (status, stdout, log) = rec.finish();
    Stopped {
        dir,
        img,
        path,
        feed,
        status,
        stdout,
        log,
    }
}

impl Stopped {
    /// The volume is clean as the recorder left it (committed, no journal to replay)
    /// and `get` returns every byte fed, the partial last request included.
    fn assert_every_byte_kept(&self) {
        assert_clean(&self.img);
        let back = self.dir.path().join("back.ts");
        get_to(&self.img, self.path, &back);
        let got = std::fs::read(&back).unwrap();
        assert_eq!(got.len(), self.feed.len(), "{}", self.log);
        assert!(got == self.feed, "the recording differs from its input");
    }
}

#[test]
fn sigint_while_the_input_is_quiet_writes_every_accepted_byte_reports_and_exits_130() {
    let s = stop_a_recording(
        "/live.ts",
        MID_RECORDING_BYTES,
        21,
        &["--rate", "16M", "--size", "64M"],
        libc::SIGINT,
    );
    let log = &s.log;
    assert_eq!(s.status.code(), Some(130), "{}:\n{log}", s.status);
    // The usual report, and the interruption said.
    assert!(log.contains("record: /live.ts: 1.8 MiB in "), "{log}");
    assert!(log.contains(" disk requests, 0 late, 0 stalls"), "{log}");
    assert!(
        log.contains("record: interrupted by SIGINT: stopped taking input; all 1.8 MiB accepted were written and committed"),
        "{log}"
    );
    assert!(!log.contains("dvrfs: "), "an error was printed:\n{log}");
    s.assert_every_byte_kept();
}

#[test]
fn sigterm_while_the_input_is_quiet_reports_in_json_and_exits_143() {
    // No --size: nothing held, the case of a live feed of unknown length.
    let s = stop_a_recording(
        "/live.ts",
        MID_RECORDING_BYTES,
        22,
        &["--rate", "16M", "--json"],
        libc::SIGTERM,
    );
    assert_eq!(s.status.code(), Some(143), "{}:\n{}", s.status, s.log);
    let v = json(&s.stdout);
    assert_eq!(v["command"], "record", "{v}");
    assert_eq!(v["interrupted"], "SIGTERM", "{v}");
    assert_eq!(v["bytes"], MID_RECORDING_BYTES, "{v}");
    assert_eq!(v["deadline_misses"], 0, "{v}");
    // Three whole requests and the partial fourth, written at the close.
    assert!(v["rt_requests"].as_u64().unwrap() >= 4, "{v}");
    s.assert_every_byte_kept();
}

#[test]
fn sigint_before_the_first_whole_request_keeps_the_bytes_accepted() {
    // 300 KiB: less than one 512 KiB request, so no whole request was there to write.
    let s = stop_a_recording(
        "/short.ts",
        300 << 10,
        23,
        &["--rate", "4M", "--duration", "60s", "--json"],
        libc::SIGINT,
    );
    assert_eq!(s.status.code(), Some(130), "{}:\n{}", s.status, s.log);
    let v = json(&s.stdout);
    assert_eq!(v["interrupted"], "SIGINT", "{v}");
    assert_eq!(v["bytes"], 300 << 10, "{v}");
    // The partial request, written at the close.
    assert!(v["rt_requests"].as_u64().unwrap() >= 1, "{v}");
    let st = json(&ok(dvrfs([
        "stat".as_ref(),
        s.img.as_os_str(),
        "/short.ts".as_ref(),
        "--json".as_ref(),
    ])));
    assert_eq!(st["size_bytes"], 300 << 10, "{st}");
    s.assert_every_byte_kept();
}

#[test]
fn sigint_while_recording_a_file_stops_taking_input_and_keeps_what_it_took() {
    // A regular file is always ready to read: the signal must still stop the reading.
    let dir = tempdir();
    let img = dir.path().join("fs.img");
    mkfs(&img, "512M", &[]);
    let src = random_file(&dir.path().join("cam.ts"), 8 << 20, 24);
    // 16 Mbit/s: four seconds of input, stopped after the first second.
    let mut rec = Recorder::start(
        &img,
        "/cam.ts",
        &["--input", src.to_str().unwrap(), "--rate", "16M", "--json"],
    );
    let seen = rec.next_accepted();
    rec.signal(libc::SIGINT);
    let (status, out, log) = rec.finish();
    assert_eq!(status.code(), Some(130), "{status}:\n{log}");
    let v = json(&out);
    assert_eq!(v["interrupted"], "SIGINT", "{v}");
    let bytes = v["bytes"].as_u64().unwrap();
    assert!(
        bytes >= seen && bytes < 8 << 20,
        "{bytes} bytes recorded, {seen} seen accepted before the signal, of {}:\n{log}",
        8 << 20
    );
    // What it took, exactly: the file's first `bytes` bytes.
    assert_clean(&img);
    let back = dir.path().join("back.ts");
    get_to(&img, "/cam.ts", &back);
    let got = std::fs::read(&back).unwrap();
    let all = std::fs::read(&src).unwrap();
    assert_eq!(got.len() as u64, bytes, "{log}");
    assert!(
        got[..] == all[..bytes as usize],
        "the recording differs from its input"
    );
}
