//! Failures of a mounted volume are failures (issue 22, items 10 and 11): a commit
//! that failed keeps `umount` from reporting success and makes the daemon exit
//! non-zero with the cause in its log; the daemon unmounts its own mount and never
//! another file system mounted over it on the same directory.
//!
//! The device error is real: the image lives, sparse, on a small tmpfs that is then
//! filled, so the journal's next write finds no room (`ENOSPC`, a short transfer).
//! Needs root and FUSE; prints `SKIP: <reason>` where they are missing.

mod common;

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::*;

/// A tmpfs mounted for one test, unmounted (lazily) at the end.
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(dir: &Path, size: &str) -> Result<Tmpfs, String> {
        fs::create_dir_all(dir).unwrap();
        let o = Command::new("mount")
            .args([
                "-t",
                "tmpfs",
                "-o",
                &format!("size={size}"),
                "dvrfs-test-tmpfs",
            ])
            .arg(dir)
            .output()
            .map_err(|e| format!("cannot run mount: {e}"))?;
        if !o.status.success() {
            return Err(format!("mount -t tmpfs failed: {}", stderr(&o).trim()));
        }
        Ok(Tmpfs(dir.to_path_buf()))
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).output();
    }
}

/// Polls `cond` until it holds, for at most `max`; false if it never did.
fn poll_until(max: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    while start.elapsed() < max {
        if cond() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    cond()
}

/// `dvrfs mount --foreground` as a child of the test (so its exit status can be
/// read), with its log in `log`; returns once the volume is mounted.
fn mount_foreground(img: &Path, mnt: &Path, log: &Path) -> Child {
    fs::create_dir_all(mnt).unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_dvrfs"))
        .arg("mount")
        .arg(img)
        .arg(mnt)
        .arg("--foreground")
        .stdout(Stdio::null())
        .stderr(fs::File::create(log).unwrap())
        .spawn()
        .expect("start dvrfs mount -f");
    assert!(
        poll_until(Duration::from_secs(30), || mounted(mnt)),
        "not mounted within 30 s: {}",
        fs::read_to_string(log).unwrap_or_default()
    );
    child
}

#[test]
fn a_failed_commit_fails_the_umount_and_the_daemon_exits_non_zero_with_the_cause_logged() {
    need_fuse!();
    let dir = tempdir();
    let small = match Tmpfs::mount(&dir.path().join("t"), "40M") {
        Ok(t) => t,
        Err(why) => {
            println!("SKIP: {why}");
            return;
        }
    };
    // Sparse: the tmpfs holds only what was written.
    let img = small.0.join("fs.img");
    mkfs(&img, "256M", &["--block-size", "1M"]);
    let mnt = dir.path().join("mnt");
    let log = dir.path().join("mount.log");
    let mut daemon = mount_foreground(&img, &mnt, &log);
    struct Kill<'a>(&'a mut Child, PathBuf);
    impl Drop for Kill<'_> {
        fn drop(&mut self) {
            if mounted(&self.1) {
                let _ = Command::new("umount").arg("-l").arg(&self.1).output();
            }
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let guard = Kill(&mut daemon, mnt.clone());
    fs::write(mnt.join("kept"), b"committed before the failure").unwrap();
    fs::File::open(mnt.join("kept"))
        .unwrap()
        .sync_all()
        .unwrap();

    // Fill the tmpfs: the journal's next blocks (holes in the image) cannot be
    // written any more.
    let mut filler = fs::File::create(small.0.join("filler")).unwrap();
    let chunk = vec![0xa5u8; 1 << 20];
    while filler.write_all(&chunk).is_ok() {}
    drop(filler);
    fs::create_dir(mnt.join("after")).unwrap();
    fs::write(mnt.join("after/f"), b"x").unwrap();
    let synced = fs::File::open(mnt.join("after/f")).unwrap().sync_all();
    assert!(synced.is_err(), "fsync succeeded with the device full");

    // The cause is logged when it happens, and the mount is held.
    assert!(
        poll_until(Duration::from_secs(30), || {
            fs::read_to_string(&log).is_ok_and(|l| l.contains("the mount is kept"))
        }),
        "the failed commit was not logged: {}",
        fs::read_to_string(&log).unwrap_or_default()
    );
    let text = fs::read_to_string(&log).unwrap();
    assert!(text.contains("a commit write failed"), "{text}");
    let o = Command::new("umount").arg(&mnt).output().unwrap();
    assert!(
        !o.status.success(),
        "umount succeeded after a failed commit; log: {text}"
    );
    assert!(mounted(&mnt), "the mount went away");
    // What it holds can still be copied off.
    assert_eq!(
        fs::read(mnt.join("kept")).unwrap(),
        b"committed before the failure"
    );

    // SIGTERM lets it go: exit status 1, the cause, never "journal committed".
    // SAFETY: signalling our own child.
    unsafe { libc::kill(guard.0.id() as i32, libc::SIGTERM) };
    let status = guard.0.wait().unwrap();
    assert_eq!(status.code(), Some(1), "daemon exit status");
    assert!(!mounted(&mnt));
    let text = fs::read_to_string(&log).unwrap();
    assert!(
        text.contains("the journal could not be committed"),
        "{text}"
    );
    assert!(!text.contains("journal committed ("), "{text}");
}

#[test]
fn the_daemon_unmounts_only_its_own_mount_never_one_over_it() {
    need_fuse!();
    let dir = tempdir();
    let img = dir.path().join("fs.img");
    mkfs(&img, "64M", &["--block-size", "1M"]);
    let m = Mount::new(dir.path(), &img, &[]);
    fs::write(m.path("on-dvrfs"), b"dvrfs").unwrap();
    // Another file system mounted over the volume, on the same directory.
    let over = match Tmpfs::mount(&m.mnt, "1M") {
        Ok(t) => t,
        Err(why) => {
            println!("SKIP: {why}");
            return;
        }
    };
    fs::write(m.mnt.join("on-tmpfs"), b"tmpfs").unwrap();
    // SIGTERM asks the daemon to unmount: not the tmpfs on top.
    // SAFETY: signalling the daemon's pid.
    unsafe { libc::kill(m.pid, libc::SIGTERM) };
    assert!(
        poll_until(Duration::from_secs(30), || {
            fs::read_to_string(&m.log).is_ok_and(|l| l.contains("is mounted over it"))
        }),
        "the daemon did not say why it cannot unmount: {}",
        fs::read_to_string(&m.log).unwrap_or_default()
    );
    assert_eq!(
        fs::read(m.mnt.join("on-tmpfs")).unwrap(),
        b"tmpfs",
        "the tmpfs over the volume was taken away"
    );
    // Take the tmpfs away; the volume is on top again and unmounts as usual.
    let o = Command::new("umount").arg(&over.0).output().unwrap();
    assert!(o.status.success(), "umount tmpfs: {}", stderr(&o));
    std::mem::forget(over);
    assert_eq!(fs::read(m.path("on-dvrfs")).unwrap(), b"dvrfs");
    m.unmount();
    assert_clean(&img);
}

/// Issue 22 item 15: the pid file and the log are never written through a symbolic
/// link (the daemon runs as root; a link planted in a shared directory would have it
/// overwrite whatever the link names).
#[test]
fn the_pid_file_and_the_log_are_not_followed_through_symlinks() {
    need_fuse!();
    let dir = tempdir();
    let img = dir.path().join("fs.img");
    mkfs(&img, "64M", &["--block-size", "1M"]);
    let mnt = dir.path().join("mnt");
    fs::create_dir(&mnt).unwrap();
    let victim = dir.path().join("victim");
    fs::write(&victim, b"precious").unwrap();
    let link = dir.path().join("link");
    std::os::unix::fs::symlink(&victim, &link).unwrap();
    let good_log = dir.path().join("mount.log");
    let good_pid = dir.path().join("mount.pid");
    for (flag, other_flag, other) in [
        ("--pid-file", "--log", &good_log),
        ("--log", "--pid-file", &good_pid),
    ] {
        let o = dvrfs([
            "mount".as_ref(),
            img.as_os_str(),
            mnt.as_os_str(),
            flag.as_ref(),
            link.as_os_str(),
            other_flag.as_ref(),
            other.as_os_str(),
        ]);
        if mounted(&mnt) {
            let _ = Command::new("umount").arg(&mnt).output();
        }
        let err = fails(o, "is a symbolic link");
        assert!(err.contains(flag), "{err}");
        assert_eq!(fs::read(&victim).unwrap(), b"precious", "{flag}");
    }
    assert!(!mounted(&mnt));
    // Real paths work as before.
    let m = Mount::new(dir.path(), &img, &[]);
    m.unmount();
}

/// Issue 22 item 16, through the mount: a reservation whose duration would wrap the
/// space it holds is refused, and a write past the largest file the volume holds
/// fails at the call with EFBIG (as truncate to that size does), changing nothing.
#[test]
fn absurd_reservations_and_offsets_are_refused_at_the_call() {
    need_fuse!();
    use std::os::unix::fs::FileExt;
    let dir = tempdir();
    let img = dir.path().join("fs.img");
    mkfs(&img, "256M", &["--block-size", "1M"]);
    let m = Mount::new(dir.path(), &img, &[]);
    let f = fs::OpenOptions::new()
        .create(true)
        .truncate(true)
        .read(true)
        .write(true)
        .open(m.path("rec.ts"))
        .unwrap();
    let set = |v: &str| {
        let p = std::ffi::CString::new(m.path("rec.ts").to_str().unwrap()).unwrap();
        // SAFETY: valid C strings and a buffer of the given length.
        let r = unsafe {
            libc::setxattr(
                p.as_ptr(),
                c"user.dvrfs.stream".as_ptr(),
                v.as_ptr().cast(),
                v.len(),
                0,
            )
        };
        if r == 0 {
            Ok(())
        } else {
            Err(std::io::Error::last_os_error().raw_os_error())
        }
    };
    assert_eq!(
        set("write:1M,duration=99999999999h"),
        Err(Some(libc::EINVAL)),
        "an absurd duration was admitted"
    );
    let e = f.write_at(b"x", 1 << 62).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EFBIG), "{e}");
    assert_eq!(
        f.metadata().unwrap().len(),
        0,
        "the refused write grew the file"
    );
    f.sync_all().unwrap();
    drop(f);
    m.unmount();
    assert_clean(&img);
}
