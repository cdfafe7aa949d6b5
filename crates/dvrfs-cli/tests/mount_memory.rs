//! Memory bounded globally (issue 22, item 8): read reservations set on files nobody
//! opens prefetch nothing until one is opened, all stream buffers together stay within
//! the daemon's budget (`--stream-memory`), and the read cache of all open files has
//! one cap (`--read-cache`). The user setting reservations is `nobody` (uid 65534,
//! through `setpriv`) on a mount with `--allow-other`; the tests need root (to mount
//! and to switch users). Memory is the daemon's `VmRSS`/`VmHWM` in `/proc/PID/status`,
//! checked against bounds computed from the buffers and caps, never against a time.

mod common;

use common::*;
use std::fs;
use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};

const MIB: u64 = 1 << 20;

/// A volume of `size` mounted with `--allow-other`, a bandwidth for admission and
/// `extra`, in a directory everyone can enter, its root writable by everyone.
fn memory_mount(size: &str, extra: &[&str]) -> Option<(tempfile::TempDir, PathBuf, Mount)> {
    let args = [&["--bandwidth", "100M"][..], extra].concat();
    let (dir, img, m) = users_mount(size, &args)?;
    fs::set_permissions(&m.mnt, fs::Permissions::from_mode(0o777)).unwrap();
    Some((dir, img, m))
}

/// A figure of `/proc/PID/status` in bytes (`VmRSS`, `VmHWM`).
fn vm(pid: i32, key: &str) -> u64 {
    let status = fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status
        .lines()
        .find(|l| l.starts_with(key))
        .unwrap_or_else(|| panic!("no {key} in /proc/{pid}/status"));
    let kib: u64 = line
        .split_whitespace()
        .nth(1)
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("{line}"));
    kib * 1024
}

/// `name=N` of a stream's figures.
fn figure(text: &str, name: &str) -> Option<u64> {
    text.split_whitespace()
        .find_map(|w| w.strip_prefix(&format!("{name}=")))
        .and_then(|v| v.parse().ok())
}

/// Runs `cmd`, which must succeed.
fn run_ok(cmd: &mut Command) {
    let o = cmd.output().unwrap();
    assert!(o.status.success(), "{cmd:?}: {}", stderr(&o));
}

/// Sets `value` as `path`'s reservation, as nobody: the command's output.
fn setfattr_as_nobody(path: &Path, value: &str) -> std::process::Output {
    as_nobody("setfattr")
        .args(["-n", "user.dvrfs.stream", "-v", value])
        .arg(path)
        .output()
        .unwrap()
}

/// Reservations with 32 MiB buffers (32 requests of 1 MiB) on sparse files.
const PLAYBACK: &str = "read:1M,request=1M,buffer=32M";
const PLAYBACK_BUFFER: u64 = 32 * MIB;
const PLAYBACK_DEPTH: u64 = 32;

#[test]
fn read_reservations_on_files_nobody_opens_hold_no_memory_until_one_is_opened() {
    let Some((_dir, _img, m)) = memory_mount("1G", &[]) else {
        return;
    };
    let base_rss = vm(m.pid, "VmRSS");
    let files: Vec<PathBuf> = (0..24).map(|i| m.path(&format!("sparse{i}"))).collect();
    for f in &files {
        // 256 MiB of nothing: every byte a hole, read as zeros.
        run_ok(as_nobody("truncate").args(["-s", "256M"]).arg(f));
        let o = setfattr_as_nobody(f, PLAYBACK);
        assert!(o.status.success(), "{}: {}", f.display(), stderr(&o));
    }
    // 24 x 32 MiB = 768 MiB of buffers: all admitted within the default 1 GiB budget.
    let log = fs::read_to_string(&m.log).unwrap();
    assert_eq!(log.matches(" admitted: read:1M").count(), 24, "{log}");
    // Opening one starts its prefetch: its whole buffer is read (the condition is
    // the stream's own figures, not a time).
    let opened = fs::File::open(&files[0]).unwrap();
    let start = Instant::now();
    loop {
        let text = getfattr(&files[0]).expect("figures");
        if figure(&text, "requests").unwrap_or(0) >= PLAYBACK_DEPTH {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "the opened file's stream never filled its buffer: {text}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // The others, set before it and never opened, read nothing at all...
    for f in &files[1..] {
        let text = getfattr(f).expect("figures");
        assert_eq!(
            figure(&text, "requests"),
            Some(0),
            "{}: prefetched though nobody opened it: {text}",
            f.display()
        );
    }
    // ...so the daemon holds about the one buffer being played, not 24 of them.
    let rss = vm(m.pid, "VmRSS");
    let bound = base_rss + 3 * PLAYBACK_BUFFER;
    assert!(
        rss <= bound,
        "daemon resident {} MiB with one of 24 playbacks open, more than {} MiB (at mount {} MiB, each buffer {} MiB)",
        rss / MIB,
        bound / MIB,
        base_rss / MIB,
        PLAYBACK_BUFFER / MIB
    );
    drop(opened);
    m.unmount();
}

#[test]
fn a_reservation_past_the_stream_memory_budget_is_refused_with_ebusy_naming_the_budget() {
    let Some((_dir, _img, m)) = memory_mount("1G", &["-o", "stream_memory=64M"]) else {
        return;
    };
    let (a, b) = (m.path("a"), m.path("b"));
    for f in [&a, &b] {
        run_ok(as_nobody("truncate").args(["-s", "64M"]).arg(f));
    }
    let o = setfattr_as_nobody(&a, "read:1M,request=1M,buffer=48M");
    assert!(o.status.success(), "{}", stderr(&o));
    // 48 + 32 MiB would pass the 64 MiB budget.
    let o = setfattr_as_nobody(&b, PLAYBACK);
    assert!(!o.status.success(), "admitted past the budget");
    assert!(
        stderr(&o).contains("Device or resource busy"),
        "{}",
        stderr(&o)
    );
    let log = fs::read_to_string(&m.log).unwrap();
    assert!(
        log.contains("stream buffers would take 80 MiB of the daemon's 64 MiB budget"),
        "{log}"
    );
    assert!(log.contains("--stream-memory"), "{log}");
    // Giving the first one back makes room.
    run_ok(
        as_nobody("setfattr")
            .args(["-x", "user.dvrfs.stream"])
            .arg(&a),
    );
    let o = setfattr_as_nobody(&b, PLAYBACK);
    assert!(o.status.success(), "{}", stderr(&o));
    m.unmount();
}

/// Files read at once in the read-cache test, and each one's size.
const FILES: usize = 50;
const FILE_BYTES: u64 = 3 * MIB;

#[test]
fn fifty_files_read_at_once_stay_within_the_read_cache() {
    if let Some(why) = fuse_missing() {
        println!("SKIP: {why}");
        return;
    }
    let dir = tempdir();
    let img = dir.path().join("v.img");
    mkfs(&img, "512M", &[]);
    // Put in the image before the mount: the kernel caches none of it, so every
    // byte read comes from the daemon.
    let local = dir.path().join("local.bin");
    let mut want = vec![];
    for i in 0..FILES {
        random_file(&local, FILE_BYTES, i as u64 + 1);
        want.push(sha256_file(&local));
        ok(dvrfs([
            "put".as_ref(),
            img.as_os_str(),
            local.as_os_str(),
            format!("/f{i}").as_ref(),
        ]));
    }
    fs::remove_file(&local).unwrap();
    let cache = 16 * MIB;
    let m = Mount::new(dir.path(), &img, &["--read-cache", "16M"]);
    let base_hwm = vm(m.pid, "VmHWM");
    // All 50 open at once, read in turns of 64 KiB: each file's cache and read-ahead
    // would live at once.
    let mut open: Vec<(fs::File, Sha256)> = (0..FILES)
        .map(|i| {
            (
                fs::File::open(m.path(&format!("f{i}"))).unwrap(),
                Sha256::new(),
            )
        })
        .collect();
    let mut buf = vec![0u8; 64 << 10];
    let mut read = vec![0u64; FILES];
    while read.iter().any(|&r| r < FILE_BYTES) {
        for (i, (f, h)) in open.iter_mut().enumerate() {
            if read[i] >= FILE_BYTES {
                continue;
            }
            let n = f.read(&mut buf).unwrap();
            assert!(n > 0, "f{i} ended at {} of {FILE_BYTES} bytes", read[i]);
            h.update(&buf[..n]);
            read[i] += n as u64;
        }
    }
    for (i, (_, h)) in open.drain(..).enumerate() {
        let got: [u8; 32] = h.finalize().into();
        assert_eq!(got, want[i], "f{i} read back different");
    }
    // Peak resident: the cache, the chunks kept free for reuse (32 MiB, `file.rs`
    // POOL_MAX_BYTES) and the session threads' request buffers (8 of about 1 MiB)
    // with room for what the reads in flight hold: a fixed overhead of 48 MiB.
    let hwm = vm(m.pid, "VmHWM");
    let bound = base_hwm + cache + 48 * MIB;
    assert!(
        hwm <= bound,
        "daemon peak resident {} MiB reading {FILES} files at once, more than {} MiB (at mount {} MiB, read cache {} MiB)",
        hwm / MIB,
        bound / MIB,
        base_hwm / MIB,
        cache / MIB
    );
    m.unmount();
}

#[test]
fn memory_bounds_out_of_range_are_usage_errors_before_mounting() {
    let dir = tempdir();
    let img = dir.path().join("v.img");
    mkfs(&img, "64M", &[]);
    let mnt = dir.path().join("mnt");
    fs::create_dir(&mnt).unwrap();
    for (args, needle) in [
        (
            vec!["--stream-memory", "1M"],
            "--stream-memory (-o stream_memory=) 1M: out of range: from 16M to 1T",
        ),
        (
            vec!["-o", "stream_memory=2T"],
            "out of range: from 16M to 1T",
        ),
        (
            vec!["-o", "read_cache=1M"],
            "--read-cache (-o read_cache=) 1M: out of range: from 4M to 64G",
        ),
        (vec!["--read-cache", "65G"], "out of range: from 4M to 64G"),
        (vec!["--read-cache", "lots"], "invalid --read-cache"),
    ] {
        let mut all: Vec<&std::ffi::OsStr> =
            vec!["mount".as_ref(), img.as_os_str(), mnt.as_os_str()];
        all.extend(args.iter().map(std::ffi::OsStr::new));
        let o = dvrfs(all);
        assert_eq!(code(&o), 2, "{args:?}: {}", stderr(&o));
        assert!(stderr(&o).contains(needle), "{args:?}: {}", stderr(&o));
        assert!(!mounted(&mnt), "{args:?} mounted");
    }
}
