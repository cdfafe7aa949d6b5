//! `dvrfs mount`: the kernel's FUSE client on a real mount, driven by ordinary file
//! operations, `mount -t fuse.dvrfs`, refused mounts and crashes of the daemon.
//! Needs root and /dev/fuse (each test says SKIP with the reason when they are
//! missing). The mount under outside programs (`pjdfstest`, `fsx`, `ffmpeg`) is in
//! `mount_tools.rs`.

mod common;

use common::*;
use std::fs::{self, File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;
use std::process::Command;

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| ((i / 7) as u8).wrapping_mul(13) ^ seed ^ (i as u8))
        .collect()
}

#[test]
fn posix_file_operations_through_the_mount() {
    need_fuse!();
    let dir = tempdir();
    let img = dir.path().join("fs.img");
    mkfs(&img, "2G", &[]);
    let m = Mount::new(dir.path(), &img, &[]);

    // A large file in 1 MiB writes and a small one in 4 KiB writes, read back exact.
    let big = pattern(24 << 20, 1);
    let mut f = File::create(m.path("big.ts")).unwrap();
    for c in big.chunks(1 << 20) {
        f.write_all(c).unwrap();
    }
    f.sync_all().unwrap();
    drop(f);
    assert_eq!(fs::read(m.path("big.ts")).unwrap(), big);
    let small = pattern(300_000, 2);
    let mut f = File::create(m.path("small")).unwrap();
    for c in small.chunks(4096) {
        f.write_all(c).unwrap();
    }
    drop(f);
    assert_eq!(fs::read(m.path("small")).unwrap(), small);
    // Overwrite in the middle, then read across the change.
    let mut f = OpenOptions::new()
        .write(true)
        .open(m.path("small"))
        .unwrap();
    f.seek(SeekFrom::Start(5000)).unwrap();
    f.write_all(&[0xAB; 10_000]).unwrap();
    drop(f);
    let mut want = small.clone();
    want[5000..15_000].fill(0xAB);
    assert_eq!(fs::read(m.path("small")).unwrap(), want);

    // O_DIRECT: aligned buffers straight through.
    let mut buf = vec![0u8; 3 << 20];
    buf.copy_from_slice(&big[..3 << 20]);
    let aligned = std::alloc::Layout::from_size_align(buf.len(), 4096).unwrap();
    // SAFETY: the layout is non-zero; the memory is freed below.
    let p = unsafe { std::alloc::alloc(aligned) };
    // SAFETY: p holds buf.len() bytes.
    let abuf = unsafe { std::slice::from_raw_parts_mut(p, buf.len()) };
    abuf.copy_from_slice(&buf);
    let mut f = OpenOptions::new()
        .create(true)
        .write(true)
        .read(true)
        .custom_flags(libc::O_DIRECT)
        .open(m.path("direct"))
        .unwrap();
    f.write_all(abuf).unwrap();
    f.seek(SeekFrom::Start(0)).unwrap();
    abuf.fill(0);
    f.read_exact(abuf).unwrap();
    assert!(abuf == &buf[..], "O_DIRECT read-back differs");
    // SAFETY: allocated above with this layout.
    unsafe { std::alloc::dealloc(p, aligned) };
    drop(f);

    // Names: directories, rename (replacing), symlinks, hard links.
    fs::create_dir_all(m.path("rec/2026/11")).unwrap();
    fs::rename(m.path("small"), m.path("rec/2026/11/a")).unwrap();
    fs::write(m.path("rec/b"), b"bbb").unwrap();
    fs::rename(m.path("rec/b"), m.path("rec/2026/11/a")).unwrap();
    assert_eq!(fs::read(m.path("rec/2026/11/a")).unwrap(), b"bbb");
    std::os::unix::fs::symlink("2026/11/a", m.path("rec/latest")).unwrap();
    assert_eq!(
        fs::read_link(m.path("rec/latest")).unwrap(),
        Path::new("2026/11/a")
    );
    assert_eq!(fs::read(m.path("rec/latest")).unwrap(), b"bbb");
    fs::hard_link(m.path("big.ts"), m.path("rec/big-link.ts")).unwrap();
    assert_eq!(fs::metadata(m.path("big.ts")).unwrap().nlink(), 2);
    assert!(fs::remove_dir(m.path("rec")).is_err(), "not empty");
    let mut names: Vec<String> = fs::read_dir(m.path("rec"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, ["2026", "big-link.ts", "latest"]);

    // Attributes: mode, times, truncate.
    fs::set_permissions(m.path("rec/2026/11/a"), fs::Permissions::from_mode(0o600)).unwrap();
    let md = fs::metadata(m.path("rec/2026/11/a")).unwrap();
    assert_eq!(md.mode() & 0o7777, 0o600);
    let t = std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_700_000_000);
    File::options()
        .write(true)
        .open(m.path("rec/2026/11/a"))
        .unwrap()
        .set_modified(t)
        .unwrap();
    assert_eq!(
        fs::metadata(m.path("rec/2026/11/a")).unwrap().mtime(),
        1_700_000_000
    );
    let f = OpenOptions::new()
        .write(true)
        .open(m.path("big.ts"))
        .unwrap();
    f.set_len(5 << 20).unwrap();
    drop(f);
    assert_eq!(fs::read(m.path("rec/big-link.ts")).unwrap(), big[..5 << 20]);

    // A file removed while open stays readable through the open descriptor.
    fs::write(m.path("tmp"), pattern(2 << 20, 9)).unwrap();
    let mut f = File::open(m.path("tmp")).unwrap();
    fs::remove_file(m.path("tmp")).unwrap();
    assert!(!m.path("tmp").exists());
    let mut back = vec![];
    f.read_to_end(&mut back).unwrap();
    assert_eq!(back, pattern(2 << 20, 9));
    drop(f);

    // Unsupported node types say so with the proper errno.
    let c = std::ffi::CString::new(m.path("fifo").to_str().unwrap()).unwrap();
    // SAFETY: a valid C path.
    let r = unsafe { libc::mkfifo(c.as_ptr(), 0o644) };
    assert_eq!(r, -1);
    assert_eq!(
        std::io::Error::last_os_error().raw_os_error(),
        Some(libc::EPERM)
    );

    // fallocate: the range is allocated (zeros where nothing was), the size grows
    // unless KEEP_SIZE; modes the format cannot do say so.
    let pre = m.path("pre.ts");
    fs::write(&pre, b"0123456789").unwrap();
    let free = |p: &Path| {
        let c = std::ffi::CString::new(p.to_str().unwrap()).unwrap();
        // SAFETY: a valid C path and a zeroed statvfs to fill.
        let mut v: libc::statvfs = unsafe { std::mem::zeroed() };
        assert_eq!(unsafe { libc::statvfs(c.as_ptr(), &mut v) }, 0);
        v.f_bfree * v.f_frsize
    };
    let free0 = free(&m.mnt);
    let f = OpenOptions::new().write(true).open(&pre).unwrap();
    let fd = std::os::fd::AsRawFd::as_raw_fd(&f);
    // SAFETY: fallocate on an open descriptor.
    let falloc = |mode: i32, off: i64, len: i64| unsafe {
        if libc::fallocate(fd, mode, off, len) == 0 {
            Ok(())
        } else {
            Err(std::io::Error::last_os_error().raw_os_error().unwrap())
        }
    };
    assert_eq!(falloc(0, 0, 9 << 20), Ok(()));
    assert_eq!(f.metadata().unwrap().len(), 9 << 20);
    // Two more 4 MiB blocks (the first held the 10 bytes already).
    assert!(free0 - free(&m.mnt) >= 8 << 20, "no space was taken");
    assert_eq!(falloc(libc::FALLOC_FL_KEEP_SIZE, 0, 4 << 20), Ok(()));
    assert_eq!(
        falloc(libc::FALLOC_FL_KEEP_SIZE, 12 << 20, 4 << 20),
        Err(libc::EOPNOTSUPP)
    );
    assert_eq!(
        falloc(
            libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
            0,
            4096
        ),
        Err(libc::EOPNOTSUPP)
    );
    assert_eq!(falloc(0, 0, 1 << 50), Err(libc::ENOSPC));
    assert_eq!(
        f.metadata().unwrap().len(),
        9 << 20,
        "ENOSPC changed the file"
    );
    drop(f);
    let back = fs::read(&pre).unwrap();
    assert_eq!(&back[..10], b"0123456789");
    assert!(
        back[10..].iter().all(|&b| b == 0),
        "allocated bytes are not zero"
    );
    fs::remove_file(&pre).unwrap();

    // statfs: the volume's size and what is free.
    let out = Command::new("df").arg("-B1").arg(&m.mnt).output().unwrap();
    assert!(out.status.success());

    // A command that needs the device to itself is told where the volume is
    // mounted instead of a bare lock error; `ls` goes through the daemon.
    let err = fails(
        dvrfs(["mkdir".as_ref(), img.as_os_str(), "/x".as_ref()]),
        "is mounted at",
    );
    assert!(err.contains(m.mnt.to_str().unwrap()), "{err}");
    let listed = ok(dvrfs(["ls".as_ref(), img.as_os_str(), "/".as_ref()]));
    assert!(listed.lines().any(|l| l == "rec/"), "{listed}");
    m.unmount();

    // Everything is on the volume, and the volume is clean.
    assert_clean(&img);
    let back = dir.path().join("link.ts");
    ok(dvrfs([
        "get".as_ref(),
        img.as_os_str(),
        "/rec/big-link.ts".as_ref(),
        back.as_os_str(),
    ]));
    assert_eq!(fs::read(&back).unwrap(), big[..5 << 20]);
}

/// A program writing 4 KiB at a time: the disk still gets whole chunks.
#[test]
fn small_writes_reach_the_disk_as_whole_chunks() {
    need_fuse!();
    let dir = tempdir();
    let img = dir.path().join("fs.img");
    mkfs(&img, "1G", &[]);
    let m = Mount::new(dir.path(), &img, &[]);
    let data = pattern(64 << 20, 8);
    let mut f = File::create(m.path("dribble.ts")).unwrap();
    for c in data.chunks(4096) {
        f.write_all(c).unwrap();
    }
    drop(f);
    // Read back 4 KiB at a time too (past the kernel's cache: a fresh open).
    let mut back = Vec::with_capacity(data.len());
    let mut f = File::open(m.path("dribble.ts")).unwrap();
    let mut buf = [0u8; 4096];
    loop {
        let n = f.read(&mut buf).unwrap();
        if n == 0 {
            break;
        }
        back.extend_from_slice(&buf[..n]);
    }
    drop(f);
    assert!(back == data, "4 KiB writes read back differently");
    let log_path = m.log.clone();
    m.unmount();
    let log = fs::read_to_string(&log_path).unwrap();
    let commands: u64 = log
        .rsplit("journal committed (")
        .next()
        .and_then(|t| t.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no command count in the log: {log}"));
    println!("{commands} device commands for 64 MiB written and read in 4 KiB pieces");
    // 16 chunks of data written and (at most) read, plus the commits' journal,
    // checkpoint and flush commands; 4 KiB requests would be 16,384 writes.
    assert!(
        commands <= 200,
        "{commands} device commands for 64 MiB in 4 KiB writes"
    );
    assert_clean(&img);
}

/// A granule whose bytes no longer match their checksum fails only the reads that
/// touch it: the mount reads 4 MiB chunks, and a chunk holding the bad granule used
/// to fail every read inside it (EIO for bytes that were intact).
#[test]
fn a_bad_granule_fails_only_the_reads_that_touch_it() {
    need_fuse!();
    let dir = tempdir();
    let img = dir.path().join("fs.img");
    mkfs(&img, "256M", &[]);
    // Random bytes: a needle of them is stored once in the image.
    let local = random_file(&dir.path().join("v.ts"), 8 << 20, 21);
    let data = fs::read(&local).unwrap();
    ok(dvrfs([
        "put",
        img.to_str().unwrap(),
        local.to_str().unwrap(),
        "/v.ts",
    ]));
    // Flip a byte 100 bytes into the file's second 512 KiB granule.
    let mut image = fs::read(&img).unwrap();
    let needle = &data[512 << 10..(512 << 10) + 4096];
    let at = image
        .windows(needle.len())
        .position(|w| w == needle)
        .expect("the file's bytes are in the image");
    image[at + 100] ^= 0x40;
    fs::write(&img, &image).unwrap();

    let m = Mount::new(dir.path(), &img, &[]);
    let f = File::open(m.path("v.ts")).unwrap();
    let read = |off: u64| -> std::io::Result<Vec<u8>> {
        let mut b = vec![0u8; 128 << 10];
        f.read_exact_at(&mut b, off).map(|()| b)
    };
    // The first chunk (0 to 4 MiB) holds the bad granule: reads outside it succeed.
    for off in [0u64, 384 << 10, 1 << 20, 3 << 20, 5 << 20] {
        let got = read(off).unwrap_or_else(|e| panic!("read at {off}: {e}"));
        assert!(
            got == data[off as usize..off as usize + (128 << 10)],
            "bytes at {off}"
        );
    }
    for off in [512u64 << 10, (512 << 10) + (256 << 10)] {
        let e = read(off).expect_err("a read of the bad granule succeeded");
        assert_eq!(e.raw_os_error(), Some(libc::EIO), "read at {off}: {e}");
    }
    drop(f);
    m.unmount();
}

#[test]
fn sigterm_unmounts_and_commits() {
    need_fuse!();
    let dir = tempdir();
    let img = dir.path().join("fs.img");
    mkfs(&img, "1G", &[]);
    let m = Mount::new(dir.path(), &img, &[]);
    let data = pattern(6 << 20, 4);
    fs::write(m.path("a.ts"), &data).unwrap(); // no fsync: the unmount commits it
                                               // SAFETY: signalling the daemon.
    unsafe { libc::kill(m.pid, libc::SIGTERM) };
    wait_exit(m.pid);
    assert!(!mounted(&m.mnt), "SIGTERM unmounts");
    let log = fs::read_to_string(&m.log).unwrap();
    assert!(log.contains("signal 15: unmounting"), "{log}");
    assert!(log.contains("journal committed"), "{log}");
    assert_clean(&img);
    let back = dir.path().join("a.ts");
    ok(dvrfs([
        "get".as_ref(),
        img.as_os_str(),
        "/a.ts".as_ref(),
        back.as_os_str(),
    ]));
    assert_eq!(fs::read(&back).unwrap(), data);
    drop(m);
}

#[test]
fn kill_9_of_the_daemon_then_a_remount_keeps_what_was_fsynced() {
    need_fuse!();
    let dir = tempdir();
    let img = dir.path().join("fs.img");
    mkfs(&img, "1G", &[]);
    let m = Mount::new(dir.path(), &img, &[]);
    let synced = pattern(9 << 20, 5);
    let mut f = File::create(m.path("synced.ts")).unwrap();
    f.write_all(&synced).unwrap();
    f.sync_all().unwrap();
    fs::create_dir(m.path("d")).unwrap();
    File::open(m.path("d")).unwrap().sync_all().unwrap();
    // Written, not synced; and a file removed while open (an orphan at the crash).
    f.write_all(&pattern(1 << 20, 6)).unwrap();
    fs::write(m.path("tmp"), pattern(3 << 20, 7)).unwrap();
    let open = File::open(m.path("tmp")).unwrap();
    fs::remove_file(m.path("tmp")).unwrap();
    File::open(&m.mnt).unwrap().sync_all().unwrap();
    // SAFETY: signalling the daemon.
    unsafe { libc::kill(m.pid, libc::SIGKILL) };
    wait_exit(m.pid);
    drop((f, open));
    // The kernel keeps a dead mount until it is unmounted.
    let o = Command::new("umount")
        .arg("-l")
        .arg(&m.mnt)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    // The dead daemon's io_uring is torn down after it exits; its lock goes with it.
    wait_unlocked(&img);
    let mnt_dir = dir.path().join("second");
    fs::create_dir(&mnt_dir).unwrap();
    let m2 = Mount::new(&mnt_dir, &img, &[]);
    let mut back = fs::read(m2.path("synced.ts")).unwrap();
    assert!(back.len() >= synced.len(), "fsynced bytes lost");
    back.truncate(synced.len());
    assert!(back == synced, "fsynced bytes differ after replay");
    assert!(m2.path("d").is_dir());
    let log = fs::read_to_string(&m2.log).unwrap();
    assert!(log.contains("mounted on"), "{log}");
    m2.unmount();
    // The mount replayed the journal and freed the orphan: fsck finds nothing.
    assert_clean(&img);
    drop(m);
}

#[test]
fn mount_t_fuse_dvrfs_uses_dvrfs_as_its_helper() {
    need_fuse!();
    let dir = tempdir();
    let img = dir.path().join("fs.img");
    mkfs(&img, "1G", &[]);
    let mnt = dir.path().join("mnt");
    fs::create_dir(&mnt).unwrap();
    // mount(8) runs /sbin/mount.fuse.dvrfs when it exists (as the docs install it):
    // a link to this build, removed at the end. An installed helper is left alone.
    let helper = Path::new("/sbin/mount.fuse.dvrfs");
    if helper.symlink_metadata().is_ok() {
        println!(
            "SKIP: {} exists already (an installed dvrfs); not replacing it",
            helper.display()
        );
        return;
    }
    if let Err(e) = std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_dvrfs"), helper) {
        // A read-only /sbin (some containers): the helper cannot be installed here.
        println!("SKIP: cannot link {}: {e}", helper.display());
        return;
    }
    struct Unlink(&'static Path);
    impl Drop for Unlink {
        fn drop(&mut self) {
            let _ = fs::remove_file(self.0);
        }
    }
    let _helper = Unlink(helper);
    let pid_file = dir.path().join("pid");
    let opts = format!(
        "rw,nosuid,device_model=avfs-250g,log={},pid_file={}",
        dir.path().join("log").display(),
        pid_file.display()
    );
    // As an /etc/fstab line `IMAGE MNT fuse.dvrfs OPTS 0 0` would run it.
    let o = Command::new("mount")
        .args(["-t", "fuse.dvrfs"])
        .arg(&img)
        .arg(&mnt)
        .args(["-o", &opts])
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "mount -t fuse.dvrfs: {}{}",
        stdout(&o),
        stderr(&o)
    );
    assert!(mounted(&mnt));
    let pid: i32 = fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    fs::write(mnt.join("x"), b"through the helper").unwrap();
    assert_eq!(fs::read(mnt.join("x")).unwrap(), b"through the helper");
    let o = Command::new("umount").arg(&mnt).output().unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    wait_exit(pid);
    assert_clean(&img);
    // A wrong option is refused by the helper with the reason.
    let o = Command::new("mount")
        .args(["-t", "fuse.dvrfs", "-o", "colour=blue"])
        .arg(&img)
        .arg(&mnt)
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("not a dvrfs mount option"),
        "{}",
        stderr(&o)
    );
}

/// What cannot be mounted is said before anything is mounted, with the right status.
#[test]
fn bad_mounts_are_refused_with_the_reason() {
    let dir = tempdir();
    let mnt = dir.path().join("mnt");
    fs::create_dir(&mnt).unwrap();
    let img = dir.path().join("fs.img");
    mkfs(&img, "256M", &[]);
    let junk = random_file(&dir.path().join("junk.img"), 1 << 20, 1);
    let log = dir.path().join("log");
    let mount = |target: &Path, at: &Path, extra: &[&str]| {
        let mut a: Vec<std::ffi::OsString> = vec!["mount".into(), target.into(), at.into()];
        a.extend(["--log".into(), log.clone().into()]);
        a.extend(extra.iter().map(|s| s.into()));
        dvrfs(a)
    };
    let o = mount(&dir.path().join("missing.img"), &mnt, &[]);
    assert_eq!(code(&o), 1);
    assert!(stderr(&o).contains("No such file"), "{}", stderr(&o));
    let o = mount(&img, &dir.path().join("nodir"), &[]);
    assert_eq!(code(&o), 1);
    assert!(stderr(&o).contains("no such directory"), "{}", stderr(&o));
    assert!(stderr(&o).contains("mkdir -p"), "{}", stderr(&o));
    let o = mount(&img, &img, &[]);
    assert_eq!(code(&o), 1);
    assert!(stderr(&o).contains("not a directory"), "{}", stderr(&o));
    assert!(!stderr(&o).contains("mkdir"), "{}", stderr(&o));
    let o = mount(&img, &mnt, &["-o", "colour=blue"]);
    assert_eq!(code(&o), 2);
    assert!(
        stderr(&o).contains("not a dvrfs mount option"),
        "{}",
        stderr(&o)
    );
    let o = mount(&img, &mnt, &["--device-model", "no-such-disk"]);
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    // The daemon finds out (it opens the volume); the parent reports it.
    let o = mount(&junk, &mnt, &[]);
    assert_eq!(code(&o), 1);
    assert!(
        stderr(&o).contains("not a dvrfs file system"),
        "{}",
        stderr(&o)
    );
    assert!(!mounted(&mnt));
    // Nothing was changed: the volume is still clean and the junk untouched.
    assert_clean(&img);
    assert_eq!(fs::read(&junk).unwrap().len(), 1 << 20);
}

/// The kernel's `umount` returns once the mount is gone, before the daemon has written
/// what it gathered, committed and let go of the volume: a command given the image
/// right then waits for that daemon (bounded), instead of finding the volume in use.
#[test]
fn a_command_right_after_umount_waits_for_the_daemon_to_let_go() {
    use std::io::BufRead;
    need_fuse!();
    let dir = tempdir();
    let img = dir.path().join("fs.img");
    mkfs(&img, "1G", &[]);
    // As an operator does it: a file written on the emulated disk, `umount`, and at
    // once a command on the image (the daemon's last writes take the model's time).
    let mut m = Mount::new(dir.path(), &img, &["--device-model", "avfs-250g"]);
    let data = pattern(6 << 20, 8);
    fs::write(m.path("a.ts"), &data).unwrap();
    let o = Command::new("umount").arg(&m.mnt).output().unwrap();
    assert!(o.status.success(), "umount: {}", stderr(&o));
    info(&img);
    wait_exit(m.pid);
    m.pid = 0;
    let log = fs::read_to_string(&m.log).unwrap();
    assert!(log.contains("unmounted, journal committed"), "{log}");
    let back = dir.path().join("a.back");
    ok(dvrfs([
        "get".as_ref(),
        img.as_os_str(),
        "/a.ts".as_ref(),
        back.as_os_str(),
    ]));
    assert!(fs::read(&back).unwrap() == data, "a.ts came back different");

    // Deterministically: the daemon stopped (SIGSTOP) just where an unmount leaves it,
    // unmounted and still holding the volume. umount(2) itself: umount(8) would first
    // look at the mount point, which a stopped daemon never answers.
    let second = dir.path().join("second");
    fs::create_dir(&second).unwrap();
    let mut m = Mount::new(&second, &img, &[]);
    // SAFETY: signalling the daemon; umount2 with a valid C string.
    let r = unsafe {
        libc::kill(m.pid, libc::SIGSTOP);
        let c = std::ffi::CString::new(m.mnt.to_str().unwrap()).unwrap();
        libc::umount2(c.as_ptr(), 0)
    };
    assert_eq!(r, 0, "umount2: {}", std::io::Error::last_os_error());
    assert!(!mounted(&m.mnt));
    // Held past the bound: the command gives up, saying who holds the volume.
    let o = dvrfs(["info".as_ref(), img.as_os_str()]);
    let err = stderr(&o);
    assert_eq!(code(&o), 1, "{err}");
    assert!(
        err.contains("waiting for the dvrfs mount daemon"),
        "no note of the wait: {err}"
    );
    assert!(
        err.contains(&format!(
            "still held by the dvrfs mount daemon (pid {})",
            m.pid
        )),
        "{err}"
    );
    assert!(err.contains("hint: "), "{err}");
    // Let go while a command waits: the command goes on and succeeds.
    let mut child = Command::new(env!("CARGO_BIN_EXE_dvrfs"))
        .arg("info")
        .arg(&img)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = std::io::BufReader::new(child.stderr.take().unwrap()).lines();
    let note = lines.next().expect("a line on stderr").unwrap();
    assert!(
        note.contains("waiting for the dvrfs mount daemon"),
        "{note}"
    );
    // SAFETY: signalling the daemon.
    unsafe { libc::kill(m.pid, libc::SIGCONT) };
    let rest: Vec<String> = lines.map(Result::unwrap).collect();
    let o = child.wait_with_output().unwrap();
    assert!(o.status.success(), "info after the wait: {rest:?}");
    assert!(rest.is_empty(), "{rest:?}");
    assert!(stdout(&o).contains("fs.img"), "{}", stdout(&o));
    wait_exit(m.pid);
    m.pid = 0;
    assert_clean(&img);
}

/// A directory that is already a mount point (a dvrfs volume or anything else) is
/// refused: a second mount would hide the first and one `umount` take the wrong one.
/// A mount whose daemon died is named as such, with the way out.
#[test]
fn mounting_on_a_mount_point_is_refused_with_what_is_there() {
    need_fuse!();
    let dir = tempdir();
    let img = dir.path().join("fs.img");
    mkfs(&img, "256M", &[]);
    let img2 = dir.path().join("second.img");
    mkfs(&img2, "256M", &[]);
    let log2 = dir.path().join("second.log");
    let mount_at = |target: &Path, at: &Path| {
        dvrfs([
            "mount".as_ref(),
            target.as_os_str(),
            at.as_os_str(),
            "--log".as_ref(),
            log2.as_os_str(),
        ])
    };
    let m = Mount::new(dir.path(), &img, &[]);
    fs::write(m.path("first"), b"the first volume").unwrap();
    let err = fails(mount_at(&img2, &m.mnt), "is already a mount point");
    assert!(
        err.contains(&format!(
            "the dvrfs volume {} is mounted there",
            img.display()
        )),
        "{err}"
    );
    let here = fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .filter(|l| l.split(' ').nth(4) == m.mnt.to_str())
        .count();
    assert_eq!(here, 1, "one mount on {}", m.mnt.display());
    assert_eq!(fs::read(m.path("first")).unwrap(), b"the first volume");
    // Any other file system's mount point too.
    let t = dir.path().join("tmpfs");
    fs::create_dir(&t).unwrap();
    let o = Command::new("mount")
        .args(["-t", "tmpfs", "dvrfs-test-tmpfs"])
        .arg(&t)
        .output()
        .unwrap();
    assert!(o.status.success(), "mount -t tmpfs: {}", stderr(&o));
    let r = mount_at(&img2, &t);
    let _ = Command::new("umount").arg(&t).output();
    let err = fails(r, "is already a mount point");
    assert!(err.contains("dvrfs-test-tmpfs (tmpfs)"), "{err}");
    // One umount, and the first volume is gone with nothing left on the directory.
    let mnt = m.mnt.clone();
    m.unmount();
    assert!(!mounted(&mnt));
    assert_clean(&img2);

    // A mount whose daemon was killed: not "not a directory", but how to clear it.
    let second = dir.path().join("second");
    fs::create_dir(&second).unwrap();
    let mut dead = Mount::new(&second, &img2, &[]);
    // SAFETY: signalling the daemon.
    unsafe { libc::kill(dead.pid, libc::SIGKILL) };
    wait_exit(dead.pid);
    dead.pid = 0;
    let err = fails(mount_at(&img, &dead.mnt), "daemon has stopped");
    assert!(
        err.contains(&format!("umount -l {}", dead.mnt.display())),
        "{err}"
    );
    drop(dead);
    wait_unlocked(&img2);
    assert_clean(&img);
}

/// `getfattr` after a recording was rewritten from nothing (`ffmpeg -y` opens with
/// `O_TRUNC`) must not show the old stream's figures: a truncate to size 0 forgets
/// them; a shorter truncate keeps them.
#[test]
fn a_truncated_recording_forgets_the_old_streams_figures() {
    need_fuse!();
    let dir = tempdir();
    let img = dir.path().join("fs.img");
    mkfs(&img, "1G", &[]);
    let m = Mount::new(dir.path(), &img, &[]);
    let rec = m.path("cam1.ts");
    let record = |seed: u8| {
        File::create(&rec).unwrap();
        let o = setfattr(&rec, "write:8M,size=16M");
        assert!(o.status.success(), "setfattr: {}", stderr(&o));
        let mut f = OpenOptions::new().write(true).open(&rec).unwrap();
        f.write_all(&pattern(3 << 20, seed)).unwrap();
        drop(f);
        let state = getfattr(&rec).expect("the ended stream's figures");
        assert_eq!(field(&state, "state"), "ended", "{state}");
    };
    record(1);
    // As `ffmpeg -y` rewrites it: O_TRUNC, new bytes, best-effort.
    let mut f = OpenOptions::new()
        .write(true)
        .truncate(true)
        .open(&rec)
        .unwrap();
    f.write_all(&pattern(1 << 20, 2)).unwrap();
    drop(f);
    assert_eq!(
        getfattr(&rec),
        None,
        "the old stream's figures after an O_TRUNC rewrite"
    );
    assert_eq!(fs::read(&rec).unwrap(), pattern(1 << 20, 2));
    // A shorter truncate keeps them; a truncate to nothing forgets them.
    record(3);
    OpenOptions::new()
        .write(true)
        .open(&rec)
        .unwrap()
        .set_len(1 << 20)
        .unwrap();
    let state = getfattr(&rec).expect("figures after a shorter truncate");
    assert_eq!(field(&state, "state"), "ended", "{state}");
    OpenOptions::new()
        .write(true)
        .open(&rec)
        .unwrap()
        .set_len(0)
        .unwrap();
    assert_eq!(getfattr(&rec), None, "figures after a truncate to 0");
    m.unmount();
    assert_clean(&img);
}

/// A name the kernel still holds (its entry is cached for a minute) for a file
/// deleted beside the mount (by retention here) never opens the file that took its
/// inode number since (made through the daemon's socket): that open is `ESTALE`.
#[test]
fn a_stale_name_never_opens_the_file_that_took_its_inode_number() {
    need_fuse!();
    let dir = tempdir();
    let img = dir.path().join("fs.img");
    let i = img.to_str().unwrap().to_string();
    mkfs(&img, "256M", &[]);
    let m = Mount::new(dir.path(), &img, &[]);
    let cam = m.path("cam");
    fs::create_dir(&cam).unwrap();
    let a = cam.join("20261128T100000.000Z.ts");
    fs::write(&a, vec![b'o'; 600 << 10]).unwrap();
    let old_ino = fs::metadata(&a).unwrap().ino();
    fs::write(cam.join("20261128T100100.000Z.ts"), vec![b'p'; 600 << 10]).unwrap();
    // A max-size the two chunks pass: retention deletes the first at once, beside
    // the kernel, which keeps its name.
    let set = Command::new("setfattr")
        .args(["-n", "user.dvrfs.retention", "-v", "max-size=1M"])
        .arg(&cam)
        .output()
        .unwrap();
    assert!(set.status.success(), "{}", stderr(&set));
    let give_up = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !ok(dvrfs(["events", &i])).contains("chunk_deleted") {
        assert!(
            std::time::Instant::now() < give_up,
            "retention never deleted"
        );
        std::thread::yield_now();
    }
    // A file made through the daemon's socket takes the freed number.
    let local = dir.path().join("new");
    fs::write(&local, b"NEW BYTES").unwrap();
    ok(dvrfs(["put", &i, local.to_str().unwrap(), "/x.bin"]));
    let x = json(&ok(dvrfs(["stat", &i, "/x.bin", "--json"])));
    assert_eq!(
        x["ino"].as_u64(),
        Some(old_ino),
        "the new file took the number"
    );
    match fs::read(&a) {
        Ok(bytes) => panic!(
            "the stale name opened another file: {:?}",
            String::from_utf8_lossy(&bytes[..bytes.len().min(16)])
        ),
        // Told ESTALE, the kernel looks the name up again and finds it gone.
        Err(e) => assert!(
            matches!(e.raw_os_error(), Some(libc::ENOENT | libc::ESTALE)),
            "{e}"
        ),
    }
    // The new file, by its own name, is itself.
    assert_eq!(fs::read(m.path("x.bin")).unwrap(), b"NEW BYTES");
    m.unmount();
    assert_clean(&img);
}
