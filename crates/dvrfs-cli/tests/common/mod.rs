//! Helpers for the tests that run the real `dvrfs` binary on real image files.
#![allow(dead_code)]

mod media;
mod mount;
mod users;
#[allow(unused_imports)]
pub use media::{
    av_recording, decode_errors, ffmpeg_here, key_positions, picture_hashes, probe, record_chunked,
    remux, video_packets, AT_4_MBITS,
};
#[allow(unused_imports)]
pub use mount::{field, getfattr, setfattr, Mount};
#[allow(unused_imports)]
pub use users::{as_nobody, dir_for_everyone, no_setpriv, users_mount};

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use sha2::{Digest, Sha256};

/// A scratch directory in /tmp (a real disk here, so `O_DIRECT` is exercised).
pub fn tempdir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("dvrfs-cli-")
        .tempdir_in("/tmp")
        .expect("create temp dir")
}

/// Runs `dvrfs` with `args`, never on a terminal (no progress bars).
pub fn dvrfs<I, S>(args: I) -> Output
where
    I: IntoIterator<Item = S>,
    S: AsRef<std::ffi::OsStr>,
{
    Command::new(env!("CARGO_BIN_EXE_dvrfs"))
        .args(args)
        .output()
        .expect("run dvrfs")
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Asserts success and returns stdout.
#[track_caller]
pub fn ok(o: Output) -> String {
    assert!(
        o.status.success(),
        "dvrfs failed ({}):\nstdout: {}\nstderr: {}",
        o.status,
        stdout(&o),
        stderr(&o)
    );
    stdout(&o)
}

/// Asserts a clean failure: non-zero exit, a `dvrfs: ` first line on stderr that
/// contains `needle`, no panic. Returns stderr.
#[track_caller]
pub fn fails(o: Output, needle: &str) -> String {
    let err = stderr(&o);
    assert!(
        !o.status.success(),
        "expected failure, got success; stdout: {}",
        stdout(&o)
    );
    assert!(!err.contains("panicked"), "panic: {err}");
    assert!(!err.contains("RUST_BACKTRACE"), "backtrace hint: {err}");
    let first = err.lines().next().unwrap_or("");
    assert!(
        first.starts_with("dvrfs: "),
        "first stderr line is not `dvrfs: ...`: {err}"
    );
    assert!(
        err.to_lowercase().contains(&needle.to_lowercase()),
        "stderr does not mention {needle:?}: {err}"
    );
    for line in err.lines().skip(1) {
        assert!(
            line.starts_with("hint: "),
            "unexpected stderr line {line:?} in {err}"
        );
    }
    err
}

pub fn code(o: &Output) -> i32 {
    o.status.code().expect("exit code (not a signal)")
}

pub fn json(text: &str) -> serde_json::Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("bad JSON ({e}): {text}"))
}

/// Makes a file system on `img`: `mkfs img --size size [extra...]`.
pub fn mkfs(img: &Path, size: &str, extra: &[&str]) {
    let mut args = vec![
        "mkfs".to_string(),
        img.display().to_string(),
        "--size".into(),
        size.into(),
    ];
    args.extend(extra.iter().map(|s| s.to_string()));
    ok(dvrfs(&args));
}

pub fn info(img: &Path) -> serde_json::Value {
    json(&ok(dvrfs([
        "info".as_ref(),
        img.as_os_str(),
        "--json".as_ref(),
    ])))
}

/// `fsck --json` must say clean and exit 0.
#[track_caller]
/// Waits until no process holds the volume's lock. A killed dvrfs process can hold it
/// for a moment after it is reaped: the kernel tears its io_uring down (and with it the
/// last reference to the open file and its `flock`) asynchronously. A blocking
/// exclusive `flock` on our own open returns exactly when the lock is free.
pub fn wait_unlocked(img: &Path) {
    use std::os::fd::AsRawFd;
    let f = std::fs::File::open(img).expect("open the image");
    // SAFETY: flock on a descriptor we own; released when `f` is dropped.
    let r = unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX) };
    assert_eq!(r, 0, "flock: {}", std::io::Error::last_os_error());
}

pub fn assert_clean(img: &Path) {
    let o = dvrfs(["fsck".as_ref(), img.as_os_str(), "--json".as_ref()]);
    let v = json(&stdout(&o));
    assert_eq!(v["clean"], true, "fsck: {v}\nstderr: {}", stderr(&o));
    assert_eq!(code(&o), 0, "fsck: {v}");
}

/// Writes `len` deterministic pseudo-random bytes (xorshift64*) to `path`.
pub fn random_file(path: &Path, len: u64, seed: u64) -> PathBuf {
    let mut f =
        std::io::BufWriter::with_capacity(1 << 20, std::fs::File::create(path).expect("create"));
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut left = len;
    let mut buf = vec![0u8; 1 << 20];
    while left > 0 {
        let n = left.min(buf.len() as u64) as usize;
        for word in buf[..n].chunks_mut(8) {
            x ^= x >> 12;
            x ^= x << 25;
            x ^= x >> 27;
            let v = x.wrapping_mul(0x2545_F491_4F6C_DD1D).to_le_bytes();
            word.copy_from_slice(&v[..word.len()]);
        }
        f.write_all(&buf[..n]).expect("write");
        left -= n as u64;
    }
    f.flush().expect("flush");
    path.to_path_buf()
}

pub fn sha256_file(path: &Path) -> [u8; 32] {
    let mut f = std::fs::File::open(path).expect("open");
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f.read(&mut buf).expect("read");
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    h.finalize().into()
}

/// `get` of `path` on `img` into the local file `local`, which must succeed.
pub fn get_to(img: &Path, path: &str, local: &Path) {
    ok(dvrfs([
        "get".as_ref(),
        img.as_os_str(),
        path.as_ref(),
        local.as_os_str(),
    ]));
}

/// Puts `local` at `path` and checks that `get` returns the same bytes.
pub fn put_get_check(img: &Path, local: &Path, path: &str, scratch: &Path) {
    ok(dvrfs([
        "put".as_ref(),
        img.as_os_str(),
        local.as_os_str(),
        path.as_ref(),
    ]));
    let back = scratch.join("back.bin");
    get_to(img, path, &back);
    assert_eq!(
        sha256_file(local),
        sha256_file(&back),
        "{path} came back different"
    );
    std::fs::remove_file(back).expect("remove");
}

/// Why mounting cannot be tested here, if it cannot.
pub fn fuse_missing() -> Option<String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Some("mounting needs root".into());
    }
    if !Path::new("/dev/fuse").exists() {
        return Some("/dev/fuse is missing (no FUSE in this kernel or container)".into());
    }
    None
}

/// Returns from the test, saying SKIP and why, when FUSE mounts cannot be made here.
#[macro_export]
macro_rules! need_fuse {
    () => {
        if let Some(why) = fuse_missing() {
            println!("SKIP: {why}");
            return;
        }
    };
}

/// Whether a dvrfs FUSE mount is on `mnt`.
pub fn mounted(mnt: &Path) -> bool {
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let m = mnt.to_str().unwrap();
    info.lines()
        .any(|l| l.split(' ').nth(4) == Some(m) && l.contains(" - fuse.dvrfs "))
}

/// Waits for process `pid` (not a child of ours) to end, without polling.
pub fn wait_exit(pid: i32) {
    // SAFETY: plain system calls on a pid and the descriptor they return.
    unsafe {
        let fd = libc::syscall(libc::SYS_pidfd_open, pid, 0) as i32;
        if fd < 0 {
            return; // already gone
        }
        let mut p = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        let r = libc::poll(&mut p, 1, 120_000);
        libc::close(fd);
        assert_eq!(r, 1, "the dvrfs daemon {pid} did not exit within 2 minutes");
    }
}

/// The keys every run report has, whoever ran the workload (`sim`, `bench TARGET`,
/// `bench --dir`): what scripts read (docs/commands.md).
pub const REPORT_KEYS: &[&str] = &[
    "workload",
    "scheduler",
    "alloc",
    "disk",
    "duration_s",
    "rt_requests",
    "deadline_misses",
    "p_miss",
    "margin_ms",
    "misses",
    "utilization",
    "disk_energy_j",
    "disk_power_w",
    "rt_throughput_mbps",
    "be_throughput_mbps",
    "be_latency_ms",
    "seek_within_5gb",
    "recordings_stopped",
    "usage_max_pct",
];

/// Asserts that a run report has every [`REPORT_KEYS`] key, and that its misses by
/// cause add up to its deadline misses, which are at most its requests.
pub fn check_report_keys(r: &serde_json::Value) {
    for k in REPORT_KEYS {
        assert!(r.get(*k).is_some(), "the report has no {k}: {r}");
    }
    let m = &r["misses"];
    let causes: u64 = ["late", "deadline_failed", "no_space", "other"]
        .iter()
        .map(|c| m[c].as_u64().unwrap())
        .sum();
    let misses = r["deadline_misses"].as_u64().unwrap();
    assert_eq!(causes, misses, "misses by cause add up: {r}");
    assert!(r["rt_requests"].as_u64().unwrap() >= misses, "{r}");
}
