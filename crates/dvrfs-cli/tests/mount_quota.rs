//! Reservations a user cannot keep from root (issue 22, item 7): a reservation set on a
//! file nobody opens expires after the grace, one held by a process ends when the
//! process dies, and per-user caps and the share kept for root refuse a user's
//! reservation that root's would pass; the same share is kept from the user's plain
//! writes (through the mount and the daemon's socket) and `df` shows it as not
//! available. The user is `nobody` (uid 65534, through
//! `setpriv`) on a mount with `--allow-other`; the tests need root.

mod common;

use common::*;
use std::fs;
use std::io::{BufRead, BufReader};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// A volume of `size` mounted with `--allow-other` and `extra` in a directory
/// everyone can enter, with a file `f` of nobody's; `None` without setpriv or FUSE.
fn quota_mount(size: &str, extra: &[&str]) -> Option<(tempfile::TempDir, Mount)> {
    let (dir, _img, m) = users_mount(size, extra)?;
    let f = m.path("f");
    fs::write(&f, b"x").unwrap();
    std::os::unix::fs::chown(&f, Some(65534), Some(65534)).unwrap();
    Some((dir, m))
}

/// `setfattr -n user.dvrfs.stream -v RES PATH` by `cmd` (root's or nobody's).
fn setfattr(mut cmd: Command, path: &Path, res: &str) -> std::process::Output {
    cmd.args(["-n", "user.dvrfs.stream", "-v", res])
        .arg(path)
        .output()
        .unwrap()
}

#[track_caller]
fn refused_with(o: &std::process::Output, errno_text: &str) {
    assert!(
        !o.status.success() && stderr(o).contains(errno_text),
        "expected {errno_text:?}, got status {} and {:?}",
        o.status,
        stderr(o)
    );
}

#[track_caller]
fn admitted(o: &std::process::Output) {
    assert!(o.status.success(), "refused: {}", stderr(o));
}

/// Polls `cond` until it holds, at most `bound`; panics naming `what` when not.
fn poll_until(bound: Duration, what: &str, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(start.elapsed() < bound, "{what}: not within {bound:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Bytes free on the mounted volume (`statvfs`'s free blocks, the share kept for root
/// among them: its available blocks leave that out).
fn available(mnt: &Path) -> u64 {
    let o = Command::new("stat")
        .args(["-f", "-c", "%f %S"])
        .arg(mnt)
        .output()
        .unwrap();
    let out = ok(o);
    let v: Vec<u64> = out.split_whitespace().map(|w| w.parse().unwrap()).collect();
    v[0] * v[1]
}

/// Issue 22, item 7, the space attack: nobody's `write:8M,size=` on a closed file held
/// nearly all the free space until the daemon stopped, and root's writes failed with
/// ENOSPC. Now it is pending: an open by another user neither takes nor ends it, and
/// no open by nobody within the grace makes it expire; root's write then fits.
#[test]
fn a_reservation_nobody_opens_expires_and_its_space_is_free_again() {
    let Some((_dir, m)) = quota_mount("512M", &["--stream-grace", "1s"]) else {
        return;
    };
    let f = m.path("f");
    let free = available(&m.mnt);
    let held = (free - (48 << 20)) >> 20 << 20;
    admitted(&setfattr(
        as_nobody("setfattr"),
        &f,
        &format!("write:8M,size={held}"),
    ));
    // Another user reads the file: its open does not take nobody's reservation, and
    // its close does not end it (it would then say `state=ended`).
    let mut other = Command::new("setpriv");
    other.args(["--reuid=1", "--regid=1", "--clear-groups", "cat"]);
    admitted(&other.arg(&f).output().unwrap());
    poll_until(Duration::from_secs(30), "the reservation expired", || {
        getfattr(&f).is_some_and(|s| s.contains("state=expired"))
    });
    let log = fs::read_to_string(&m.log).unwrap();
    assert!(
        log.contains("expired: uid 65534 set it") && log.contains("-o stream_grace="),
        "{log}"
    );
    // Another user's write through an open that did not take a pending reservation
    // (the file is writable by all) ends it and goes best-effort.
    let g = m.path("g");
    fs::write(&g, b"").unwrap();
    fs::set_permissions(&g, fs::Permissions::from_mode(0o666)).unwrap();
    std::os::unix::fs::chown(&g, Some(65534), Some(65534)).unwrap();
    admitted(&setfattr(as_nobody("setfattr"), &g, "write:1M,size=1M"));
    let mut append = Command::new("setpriv");
    append.args(["--reuid=1", "--regid=1", "--clear-groups", "sh", "-c"]);
    admitted(
        &append
            .arg(format!("echo x >> {}", g.display()))
            .output()
            .unwrap(),
    );
    let st = getfattr(&g).expect("the ended stream's figures");
    assert!(st.contains("state=ended"), "{st}");
    assert_eq!(fs::read(&g).unwrap(), b"x\n");
    // The held space is free: root writes more than was left beside the hold.
    let o = Command::new("dd")
        .args([
            "if=/dev/zero",
            "bs=1M",
            "count=96",
            "conv=fsync",
            "status=none",
        ])
        .arg(format!("of={}", m.path("root.bin").display()))
        .output()
        .unwrap();
    admitted(&o);
    m.unmount();
}

/// Issue 22, item 7: a user's reservations are bounded by `--user-space` and
/// `--user-rate` (EDQUOT), and by the share kept for root (ENOSPC for space, EBUSY for
/// the real-time share), while root's same reservations are admitted.
#[test]
fn user_limits_and_the_root_share_refuse_nobody_not_root() {
    let Some((_dir, m)) = quota_mount(
        "512M",
        &[
            "--bandwidth",
            "100M",
            "-o",
            "user_space=64M,user_rate=30M,stream_grace=1h",
        ],
    ) else {
        return;
    };
    let (f, g) = (m.path("f"), m.path("g"));
    fs::write(&g, b"x").unwrap();
    std::os::unix::fs::chown(&g, Some(65534), Some(65534)).unwrap();
    // Per-user caps: EDQUOT, the reason and the way out in the log.
    refused_with(
        &setfattr(as_nobody("setfattr"), &f, "write:1M,size=100M"),
        "Disk quota exceeded",
    );
    refused_with(
        &setfattr(as_nobody("setfattr"), &f, "read:40M"),
        "Disk quota exceeded",
    );
    let log = fs::read_to_string(&m.log).unwrap();
    assert!(
        log.contains("user_space=") && log.contains("user_rate="),
        "{log}"
    );
    // Within them, admitted; a second one past the rate cap is refused.
    admitted(&setfattr(as_nobody("setfattr"), &f, "read:20M"));
    refused_with(
        &setfattr(as_nobody("setfattr"), &g, "read:20M"),
        "Disk quota exceeded",
    );
    admitted(&setfattr(as_nobody("setfattr"), &f, "read:1M"));
    // Root is exempt from the caps.
    admitted(&setfattr(Command::new("setfattr"), &g, "read:40M"));
    admitted(&setfattr(
        Command::new("setfattr"),
        &g,
        "write:1M,size=100M",
    ));
    m.unmount();
    // The root share: a mount without caps.
    let dir = tempdir();
    fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o755)).unwrap();
    let img = dir.path().join("w.img");
    mkfs(&img, "512M", &[]);
    let m = Mount::new(dir.path(), &img, &["--allow-other", "--bandwidth", "100M"]);
    let f = m.path("f");
    fs::write(&f, b"x").unwrap();
    std::os::unix::fs::chown(&f, Some(65534), Some(65534)).unwrap();
    // Most of the real-time share (100 Mbit/s, 10% best-effort): past 95% of it.
    refused_with(
        &setfattr(as_nobody("setfattr"), &f, "read:88M"),
        "Device or resource busy",
    );
    admitted(&setfattr(Command::new("setfattr"), &f, "read:88M"));
    let o = Command::new("setfattr")
        .args(["-x", "user.dvrfs.stream"])
        .arg(&f)
        .output()
        .unwrap();
    admitted(&o);
    // Nearly all the free space: less than 5% would be left.
    let free = available(&m.mnt);
    let most = (free - (4 << 20)) >> 20 << 20;
    let res = format!("write:1M,size={most}");
    refused_with(
        &setfattr(as_nobody("setfattr"), &f, &res),
        "No space left on device",
    );
    let log = fs::read_to_string(&m.log).unwrap();
    assert!(
        log.contains("is kept for root") && log.contains("root_share="),
        "{log}"
    );
    admitted(&setfattr(Command::new("setfattr"), &f, &res));
    m.unmount();
}

/// Issue 22, item 7: a reservation set by a process that holds the file open ends
/// when the process is killed (the kernel closes its descriptors), and the bandwidth
/// it had is admitted to another stream.
#[test]
fn a_reservation_ends_when_the_process_holding_it_is_killed() {
    let Some((_dir, m)) = quota_mount("512M", &["--bandwidth", "100M"]) else {
        return;
    };
    let (f, g) = (m.path("f"), m.path("g"));
    fs::write(&g, b"x").unwrap();
    let script = "import os,sys,time\n\
        fd = os.open(sys.argv[1], os.O_RDONLY)\n\
        os.setxattr(fd, 'user.dvrfs.stream', sys.argv[2].encode())\n\
        print('holding', flush=True)\n\
        time.sleep(600)\n";
    let mut holder = as_nobody("/usr/bin/python3")
        .args(["-c", script])
        .arg(&f)
        .arg("read:60M")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(holder.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(
        line.trim(),
        "holding",
        "the holder did not set its reservation"
    );
    // It holds two thirds of the real-time share: root's second 60M does not fit.
    refused_with(
        &setfattr(Command::new("setfattr"), &g, "read:60M"),
        "Device or resource busy",
    );
    holder.kill().unwrap();
    holder.wait().unwrap();
    poll_until(Duration::from_secs(30), "the holder's stream ended", || {
        getfattr(&f).is_some_and(|s| s.contains("state=ended"))
    });
    admitted(&setfattr(Command::new("setfattr"), &g, "read:60M"));
    m.unmount();
}

/// Every quota option has a range; a value outside it is a usage error (exit 2)
/// before anything is mounted.
#[test]
fn quota_options_out_of_range_are_usage_errors() {
    let dir = tempdir();
    let (img, mnt) = (dir.path().join("none.img"), dir.path().join("mnt"));
    for (opts, says) in [
        (&["--stream-grace", "10ms"][..], "--stream-grace"),
        (&["-o", "stream_grace=2h"], "out of range"),
        (&["--root-share", "51"], "--root-share"),
        (&["-o", "root_share=x"], "root_share=x"),
        (&["-o", "user_rate=1"], "--user-rate"),
        (&["--user-rate", "200G"], "out of range"),
        (&["--user-space", "1"], "--user-space"),
        (&["-o", "user_space=2048T"], "out of range"),
    ] {
        let o = dvrfs(
            [
                &["mount".as_ref(), img.as_os_str(), mnt.as_os_str()][..],
                &opts.iter().map(std::ffi::OsStr::new).collect::<Vec<_>>(),
            ]
            .concat(),
        );
        assert_eq!(code(&o), 2, "{opts:?}: {}", stderr(&o));
        assert!(stderr(&o).contains(says), "{opts:?}: {}", stderr(&o));
    }
}

/// Issue 22, item 7: the daemon's socket applies the same per-user caps by the
/// client's uid (`SO_PEERCRED`): nobody's `dvrfs record` past `--user-rate` is refused
/// with the reason, within it admitted (and its end gives the rate back), and root's
/// past it admitted.
#[test]
fn socket_recordings_count_against_the_same_user_caps() {
    let Some((dir, m)) = quota_mount("512M", &["--bandwidth", "100M", "-o", "user_rate=30M"])
    else {
        return;
    };
    let img = dir.path().join("v.img");
    let u = m.path("u");
    fs::create_dir(&u).unwrap();
    std::os::unix::fs::chown(&u, Some(65534), Some(65534)).unwrap();
    let src = random_file(&dir.path().join("src.ts"), 1 << 20, 7);
    fs::set_permissions(&src, fs::Permissions::from_mode(0o644)).unwrap();
    let record = |who: Option<&str>, name: &str, rate: &str| {
        let mut c = match who {
            Some(_) => as_nobody(env!("CARGO_BIN_EXE_dvrfs")),
            None => Command::new(env!("CARGO_BIN_EXE_dvrfs")),
        };
        c.arg("record")
            .arg(&img)
            .arg(name)
            .args(["--rate", rate, "--input"])
            .arg(&src)
            .output()
            .unwrap()
    };
    let o = record(Some("nobody"), "/u/a.ts", "40M");
    assert!(!o.status.success(), "admitted past the cap");
    assert!(
        stderr(&o).contains("over the user's limit"),
        "{}",
        stderr(&o)
    );
    let log = fs::read_to_string(&m.log).unwrap();
    assert!(
        log.contains("a client's write stream") && log.contains("user_rate="),
        "{log}"
    );
    admitted(&record(Some("nobody"), "/u/b.ts", "20M"));
    // That recording's end gave its rate back: another fits under the cap.
    admitted(&record(Some("nobody"), "/u/d.ts", "20M"));
    admitted(&record(None, "/c.ts", "40M"));
    m.unmount();
}

/// `statfs` of the mount (as root, or as nobody): free blocks (`f_bfree`), blocks
/// available to users (`f_bavail`), all data blocks, the block size.
fn statfs(mut stat: Command, mnt: &Path) -> (u64, u64, u64, u64) {
    let out = ok(stat
        .args(["-f", "-c", "%f %a %b %S"])
        .arg(mnt)
        .output()
        .unwrap());
    let v: Vec<u64> = out.split_whitespace().map(|w| w.parse().unwrap()).collect();
    (v[0], v[1], v[2], v[3])
}

/// As nobody, writes `path` 1 MiB at a time (byte `i` of the file is `i % 251`)
/// until a write fails; then fsyncs and closes it. Returns the bytes the writes
/// said they wrote and the failed write's errno name.
fn fill_as_nobody(path: &Path) -> (u64, String) {
    let script = "import errno,os,sys\n\
        pat = bytes(i % 251 for i in range(251 * 4200))\n\
        fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)\n\
        total = 0\n\
        while True:\n\
        \x20   at = total % 251\n\
        \x20   try:\n\
        \x20       total += os.write(fd, pat[at:at + (1 << 20)])\n\
        \x20   except OSError as e:\n\
        \x20       failed = errno.errorcode[e.errno]\n\
        \x20       break\n\
        os.fsync(fd)\n\
        os.close(fd)\n\
        print(total, failed)\n";
    let o = as_nobody("/usr/bin/python3")
        .args(["-c", script])
        .arg(path)
        .output()
        .unwrap();
    let out = ok(o);
    let mut w = out.split_whitespace();
    let total = w.next().unwrap().parse().unwrap();
    (total, w.next().unwrap().to_string())
}

/// Reads `path` and checks it holds exactly `total` bytes of [`fill_as_nobody`]'s
/// pattern.
#[track_caller]
fn holds_pattern(path: &Path, total: u64) {
    let got = fs::read(path).unwrap();
    assert_eq!(got.len() as u64, total, "the file's size");
    if let Some(i) = (0..got.len()).find(|&i| got[i] != (i % 251) as u8) {
        panic!("byte {i} of {} is {}, not {}", total, got[i], i % 251);
    }
}

/// Issue 22, item 7, plain writes: a user who writes until `ENOSPC` leaves the share
/// kept for root (5% by default) free, as ext4 keeps its reserved blocks: every byte
/// the user's writes accepted is in the file (its fsync and close succeed), `df` as
/// the user shows nothing available while the share is free, root then writes most
/// of the share and reads it back, and the daemon says why once, not per write. With
/// `--root-share 0` the user fills the volume (nothing kept).
#[test]
fn a_users_plain_writes_leave_the_share_kept_for_root() {
    let Some((_dir, m)) = quota_mount("128M", &[]) else {
        return;
    };
    let f = m.path("f");
    let (total, failed) = fill_as_nobody(&f);
    assert_eq!(failed, "ENOSPC");
    holds_pattern(&f, total);
    let (bfree, bavail, blocks, bs) = statfs(Command::new("stat"), &m.mnt);
    let kept = blocks * bs * 5 / 100;
    let free = bfree * bs;
    assert!(free >= kept, "{free} bytes free, {kept} kept for root");
    // The refused write needed at most 1 MiB in whole data blocks: nobody wrote up to
    // the share.
    let near = (1 << 20) + bs;
    assert!(
        free < kept + near,
        "{free} bytes free, {kept} kept, {bs}-byte blocks"
    );
    assert!(bavail * bs < near, "root sees {bavail} blocks available");
    let (nfree, navail, _, _) = statfs(as_nobody("stat"), &m.mnt);
    assert_eq!(nfree, bfree);
    assert!(navail * bs < near, "nobody sees {navail} blocks available");
    let log = fs::read_to_string(&m.log).unwrap();
    let said = "uid 65534: a write to /f refused: the volume's last 5%";
    assert_eq!(log.matches(said).count(), 1, "{log}");
    assert!(log.contains("is kept for root (--root-share)"), "{log}");
    // Root may use the share.
    let most = (kept - (1 << 20)) as usize;
    let data: Vec<u8> = (0..most).map(|i| (i % 253) as u8).collect();
    let r = m.path("root.bin");
    fs::write(&r, &data).unwrap();
    fs::File::open(&r).unwrap().sync_all().unwrap();
    assert!(fs::read(&r).unwrap() == data, "root's file reads back");
    // Overwriting bytes the file already has needs no new blocks: allowed.
    let o = as_nobody("dd")
        .args(["if=/dev/zero", "bs=4096", "count=1", "conv=notrunc,fsync"])
        .arg(format!("of={}", f.display()))
        .output()
        .unwrap();
    admitted(&o);
    m.unmount();

    // Nothing kept: nobody fills the volume.
    let Some((_dir, m)) = quota_mount("128M", &["--root-share", "0"]) else {
        return;
    };
    let f = m.path("f");
    let (total, failed) = fill_as_nobody(&f);
    assert_eq!(failed, "ENOSPC");
    holds_pattern(&f, total);
    let (bfree, bavail, _, bs) = statfs(Command::new("stat"), &m.mnt);
    assert_eq!(bfree, bavail);
    assert!(bfree * bs < (1 << 20) + bs, "{bfree} blocks left free");
    m.unmount();
}

/// Issue 22, item 7: the daemon's socket keeps the same share from a user's plain
/// writes, by the client's uid (`SO_PEERCRED`): nobody's `dvrfs put` of more than
/// the volume holds stops short of the share with the reason, and root's `put`
/// then fits in it.
#[test]
fn socket_writes_leave_the_share_kept_for_root() {
    let Some((dir, m)) = quota_mount("128M", &[]) else {
        return;
    };
    let img = dir.path().join("v.img");
    let u = m.path("u");
    fs::create_dir(&u).unwrap();
    std::os::unix::fs::chown(&u, Some(65534), Some(65534)).unwrap();
    let (bfree, _, blocks, bs) = statfs(Command::new("stat"), &m.mnt);
    let src = random_file(&dir.path().join("big.bin"), bfree * bs, 11);
    fs::set_permissions(&src, fs::Permissions::from_mode(0o644)).unwrap();
    let o = as_nobody(env!("CARGO_BIN_EXE_dvrfs"))
        .arg("put")
        .arg(&img)
        .arg(&src)
        .arg("/u/big.bin")
        .output()
        .unwrap();
    assert!(!o.status.success(), "nobody's put filled the volume");
    assert!(stderr(&o).contains("kept for root"), "{}", stderr(&o));
    let kept = blocks * bs * 5 / 100;
    let (bfree, _, _, _) = statfs(Command::new("stat"), &m.mnt);
    assert!(bfree * bs >= kept, "{} bytes free, {kept} kept", bfree * bs);
    let log = fs::read_to_string(&m.log).unwrap();
    assert!(
        log.contains("uid 65534: a write to /u/big.bin refused"),
        "{log}"
    );
    let small = random_file(&dir.path().join("small.bin"), kept / 2, 12);
    put_get_check(&img, &small, "/root.bin", dir.path());
    m.unmount();
}
