//! A large file through `put` and `get` is bit-identical, and `info` accounts for it.

mod common;

use common::*;

const FILE_BYTES: u64 = 256 << 20;

#[test]
fn put_get_round_trip_of_256_mib_is_bit_identical() {
    let dir = tempdir();
    let img = dir.path().join("fs.img");
    mkfs(&img, "512M", &[]);
    let src = random_file(&dir.path().join("src.bin"), FILE_BYTES, 1);
    ok(dvrfs([
        "put".as_ref(),
        img.as_os_str(),
        src.as_os_str(),
        "/video.bin".as_ref(),
    ]));
    let back = dir.path().join("back.bin");
    ok(dvrfs([
        "get".as_ref(),
        img.as_os_str(),
        "/video.bin".as_ref(),
        back.as_os_str(),
    ]));
    assert_eq!(sha256_file(&src), sha256_file(&back));

    // `-` writes to stdout.
    let out = dvrfs([
        "get".as_ref(),
        img.as_os_str(),
        "/video.bin".as_ref(),
        "-".as_ref(),
    ]);
    assert!(out.status.success());
    assert_eq!(out.stdout.len() as u64, FILE_BYTES);
    assert!(out.stdout == std::fs::read(&src).expect("read src"));

    let o = dvrfs(["fsck".as_ref(), img.as_os_str()]);
    assert_eq!(code(&o), 0, "fsck: {} {}", stdout(&o), stderr(&o));

    let v = info(&img);
    for key in [
        "block_size",
        "alloc",
        "zones",
        "size_bytes",
        "free_bytes",
        "used_bytes",
        "files",
        "regions",
        "uuid",
        "inodes",
        "dirs",
        "data_blocks",
        "commit_interval_ms",
        "version",
        "io_backend",
    ] {
        assert!(v.get(key).is_some(), "info --json lacks {key}: {v}");
    }
    let n = |k: &str| {
        v[k].as_u64()
            .unwrap_or_else(|| panic!("{k} is not a number: {v}"))
    };
    assert_eq!(n("size_bytes"), 512 << 20);
    assert_eq!(n("block_size"), 4 << 20);
    assert_eq!(v["alloc"], "zrr");
    assert!(
        v["io_backend"] == "io_uring" || v["io_backend"] == "threads",
        "{v}"
    );
    assert_eq!(n("files"), 1);
    assert!(n("used_bytes") >= FILE_BYTES, "{v}");
    assert_eq!(
        n("used_bytes") + n("free_bytes"),
        n("data_blocks") * n("block_size"),
        "{v}"
    );
    // Regions in order and inside the device.
    let r = |name: &str| {
        let o = &v["regions"][name];
        (
            o["offset"].as_u64().expect("offset"),
            o["length"].as_u64().expect("length"),
        )
    };
    let (p, j, d, b) = (r("primary"), r("journal"), r("data"), r("backup"));
    assert_eq!(p.0, 0);
    assert!(
        j.0 >= p.0 && j.0 + j.1 <= p.0 + p.1,
        "journal inside primary: {v}"
    );
    assert!(
        d.0 >= p.0 + p.1 && d.0 + d.1 <= b.0 && b.0 + b.1 <= n("size_bytes"),
        "{v}"
    );
    assert_eq!(d.1, n("data_blocks") * n("block_size"));

    // The stored file carries the local file's mode and owner.
    let st = json(&ok(dvrfs([
        "stat".as_ref(),
        img.as_os_str(),
        "/video.bin".as_ref(),
        "--json".as_ref(),
    ])));
    let meta = std::fs::metadata(&src).expect("stat src");
    use std::os::unix::fs::MetadataExt;
    assert_eq!(st["size_bytes"], FILE_BYTES);
    assert_eq!(st["uid"], meta.uid());
    assert_eq!(
        st["mode"].as_u64().expect("mode") & 0o7777,
        u64::from(meta.mode() & 0o7777)
    );
}

#[test]
fn empty_and_unaligned_files_round_trip() {
    let dir = tempdir();
    let img = dir.path().join("fs.img");
    mkfs(&img, "64M", &["--block-size", "64K"]);
    for (k, len) in [0u64, 1, 4095, 4097, 65_536, 65_537, 3 * 65_536 + 123]
        .into_iter()
        .enumerate()
    {
        let src = random_file(&dir.path().join(format!("f{k}")), len, k as u64 + 10);
        put_get_check(&img, &src, &format!("/f{k}"), dir.path());
    }
    assert_clean(&img);
}

/// Reads `/proc/PID/io` field `key` (bytes), or `None` once the process is gone.
fn proc_io(pid: u32, key: &str) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/io")).ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(": ")?.trim().parse().ok())
}

/// Runs `args`, sends `sig` once the process has moved `after` bytes (`key` of
/// `/proc/PID/io`), and returns its output. Panics if it finished first.
fn interrupt_after(
    args: &[&std::ffi::OsStr],
    key: &str,
    after: u64,
    sig: i32,
) -> std::process::Output {
    let child = std::process::Command::new(env!("CARGO_BIN_EXE_dvrfs"))
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    loop {
        match proc_io(pid, key) {
            Some(n) if n >= after => break,
            Some(_) => std::thread::yield_now(),
            None => panic!("the process ended before it moved {after} bytes"),
        }
    }
    // SAFETY: signalling our own child.
    assert_eq!(unsafe { libc::kill(pid as i32, sig) }, 0);
    child.wait_with_output().unwrap()
}

/// Issue 9, case 8: SIGINT or SIGTERM part-way through `put` removes the partial file
/// (exit 128 + signal), and through `get` the partial local file.
#[test]
fn interrupted_put_and_get_leave_no_partial_file() {
    let dir = tempdir();
    let img = dir.path().join("fs.img");
    mkfs(&img, "8G", &[]);
    // A sparse source: read at memory speed, written in full.
    let src = dir.path().join("big.bin");
    let f = std::fs::File::create(&src).unwrap();
    f.set_len(3 << 30).unwrap();
    drop(f);
    for (sig, code) in [(libc::SIGINT, 130), (libc::SIGTERM, 143)] {
        let o = interrupt_after(
            &[
                "put".as_ref(),
                img.as_os_str(),
                src.as_os_str(),
                "/big.bin".as_ref(),
            ],
            "rchar",
            256 << 20,
            sig,
        );
        assert_eq!(o.status.code(), Some(code), "{}", stderr(&o));
        let err = stderr(&o);
        assert!(err.contains("put interrupted by SIG"), "{err}");
        assert!(err.contains("was removed"), "{err}");
        let ls = ok(dvrfs(["ls".as_ref(), img.as_os_str(), "/".as_ref()]));
        assert!(!ls.contains("big.bin"), "{ls}");
        assert_clean(&img);
    }

    // A whole file to get.
    let f = std::fs::File::create(&src).unwrap();
    f.set_len(1 << 30).unwrap();
    drop(f);
    ok(dvrfs([
        "put".as_ref(),
        img.as_os_str(),
        src.as_os_str(),
        "/one.bin".as_ref(),
    ]));
    let out = dir.path().join("out.bin");
    let o = interrupt_after(
        &[
            "get".as_ref(),
            img.as_os_str(),
            "/one.bin".as_ref(),
            out.as_os_str(),
        ],
        "wchar",
        128 << 20,
        libc::SIGINT,
    );
    assert_eq!(o.status.code(), Some(130), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("get interrupted by SIGINT"),
        "{}",
        stderr(&o)
    );
    assert!(!out.exists(), "the partial local file is still there");
    assert_clean(&img);
}
