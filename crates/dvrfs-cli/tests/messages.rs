//! The messages of issue 22 item 18: each says what is wrong in the caller's terms and
//! what to do, with the errno a program expects.

mod common;

use std::fs;
use std::os::unix::fs::FileExt;
use std::path::Path;

use common::*;

fn s(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

#[test]
fn a_small_file_is_called_too_small_to_be_a_volume_not_a_device_of_0_bytes() {
    let dir = tempdir();
    let small = dir.path().join("notes.txt");
    fs::write(&small, "hello\n").unwrap();
    for cmd in ["ls", "info"] {
        let err = fails(dvrfs([cmd, s(&small)]), "is not a dvrfs file system");
        assert!(err.contains("too small to be one"), "{cmd}: {err}");
        assert!(err.contains("6 bytes"), "{cmd}: the file's own size: {err}");
        assert!(!err.contains("only 0 bytes"), "{cmd}: {err}");
    }
    let o = dvrfs(["fsck", s(&small)]);
    assert_eq!(code(&o), 8, "{}", stderr(&o));
    assert!(stderr(&o).contains("too small to be one"), "{}", stderr(&o));
}

#[test]
fn calibrate_with_an_empty_name_is_a_usage_error() {
    let dir = tempdir();
    let img = dir.path().join("rec.img");
    mkfs(&img, "64M", &["--block-size", "1M"]);
    for name in ["", "a\tb", &"x".repeat(65)] {
        let o = dvrfs(["calibrate", s(&img), "--name", name]);
        assert_eq!(code(&o), 2, "--name {name:?}: {}", stderr(&o));
        let err = stderr(&o);
        assert!(err.contains("model name"), "--name {name:?}: {err}");
        assert!(!err.contains("dvrfs bug"), "--name {name:?}: {err}");
        assert!(!err.contains("panicked"), "--name {name:?}: {err}");
    }
}

#[test]
fn a_symlink_target_too_long_is_enametoolong() {
    need_fuse!();
    let dir = tempdir();
    let img = dir.path().join("rec.img");
    mkfs(&img, "256M", &[]);
    let m = Mount::new(dir.path(), &img, &[]);
    // 4,046 bytes is the limit (one metadata block's payload); 4,047 is over it,
    // and under the kernel's own 4,095.
    let ok_target = "a".repeat(4046);
    std::os::unix::fs::symlink(&ok_target, m.path("fits")).expect("a 4,046-byte target");
    assert_eq!(
        fs::read_link(m.path("fits")).unwrap().as_os_str().len(),
        4046
    );
    let e = std::os::unix::fs::symlink("a".repeat(4047), m.path("long"))
        .expect_err("a 4,047-byte target was accepted");
    assert_eq!(e.raw_os_error(), Some(libc::ENAMETOOLONG), "{e}");
    m.unmount();
    assert_clean(&img);
}

#[test]
fn commands_on_a_dead_mount_point_say_what_it_is_and_how_to_clear_it() {
    need_fuse!();
    let dir = tempdir();
    let img = dir.path().join("rec.img");
    mkfs(&img, "256M", &[]);
    let mut m = Mount::new(dir.path(), &img, &[]);
    // SAFETY: signalling the daemon this test started.
    unsafe { libc::kill(m.pid, libc::SIGKILL) };
    wait_exit(m.pid);
    m.pid = 0;
    let mnt = s(&m.mnt).to_string();
    let dead = fs::metadata(&m.mnt).expect_err("a dead mount answers");
    assert_eq!(dead.raw_os_error(), Some(libc::ENOTCONN), "{dead}");
    for args in [
        vec!["mount", s(&img), &mnt],
        vec!["ls", &mnt, "/"],
        vec!["info", &mnt],
    ] {
        let err = fails(dvrfs(&args), "FUSE mount whose daemon has stopped");
        assert!(
            err.contains(&format!("dvrfs mount of {}", s(&img))),
            "{args:?}: {err}"
        );
        assert!(
            err.contains(&format!("fusermount3 -uz {mnt}")),
            "{args:?}: {err}"
        );
        assert!(err.contains(&format!("umount -l {mnt}")), "{args:?}: {err}");
        assert!(!err.contains("not a directory"), "{args:?}: {err}");
        assert!(!err.contains("I/O error"), "{args:?}: {err}");
    }
    drop(m);
}

#[test]
fn a_data_checksum_error_through_the_mount_is_logged_with_the_file_and_bytes() {
    need_fuse!();
    let dir = tempdir();
    let img = dir.path().join("rec.img");
    mkfs(&img, "256M", &[]);
    let local = random_file(&dir.path().join("v.ts"), 2 << 20, 22);
    let data = fs::read(&local).unwrap();
    ok(dvrfs(["mkdir", s(&img), "/cam1"]));
    ok(dvrfs(["put", s(&img), s(&local), "/cam1/v.ts"]));
    // Flip one byte of the file's second 512 KiB granule on the disk.
    let image = fs::read(&img).unwrap();
    let needle = &data[512 << 10..(512 << 10) + 4096];
    let at = image
        .windows(needle.len())
        .position(|w| w == needle)
        .expect("the file's bytes are in the image");
    drop(image);
    let f = fs::OpenOptions::new().write(true).open(&img).unwrap();
    f.write_all_at(&[data[(512 << 10) + 100] ^ 0x40], (at + 100) as u64)
        .unwrap();
    drop(f);

    let m = Mount::new(dir.path(), &img, &[]);
    let f = fs::File::open(m.path("cam1/v.ts")).unwrap();
    let mut b = vec![0u8; 128 << 10];
    let e = f
        .read_exact_at(&mut b, 512 << 10)
        .expect_err("a read of the bad granule succeeded");
    assert_eq!(e.raw_os_error(), Some(libc::EIO), "{e}");
    drop(f);
    m.unmount();
    let log = fs::read_to_string(dir.path().join("mount.log")).unwrap();
    let line = log
        .lines()
        .find(|l| l.contains("data checksum"))
        .unwrap_or_else(|| panic!("no data checksum error in the log:\n{log}"));
    assert!(line.contains("/cam1/v.ts"), "{line}");
    assert!(
        line.contains(&format!("bytes {} to {}", 512 << 10, 1 << 20)),
        "{line}"
    );
}

#[test]
fn names_the_mount_creates_that_are_not_utf8_can_be_listed_read_and_removed() {
    use std::ffi::OsStr;
    use std::os::unix::ffi::OsStrExt;
    need_fuse!();
    let dir = tempdir();
    let img = dir.path().join("rec.img");
    mkfs(&img, "256M", &[]);
    // A Latin-1 name (0xe9 is not UTF-8 on its own) in a Latin-1 directory.
    let cam = OsStr::from_bytes(b"cam\xe9ra");
    let file = OsStr::from_bytes(b"caf\xe9.ts");
    let path = OsStr::from_bytes(b"/cam\xe9ra/caf\xe9.ts");
    let mut m = Some(Mount::new(dir.path(), &img, &[]));
    let mnt = m.as_ref().expect("mounted").mnt.clone();
    fs::create_dir(mnt.join(cam)).unwrap();
    fs::write(mnt.join(cam).join(file), b"latin-1 recording").unwrap();

    let get = |to: &Path| dvrfs([OsStr::new("get"), img.as_os_str(), path, to.as_os_str()]);
    // Through the daemon while mounted, then on the unmounted image.
    for mounted in [true, false] {
        if !mounted {
            m.take().expect("mounted").unmount();
        }
        // The escaped form is how `ls` shows the name, not the name.
        fails(
            dvrfs([OsStr::new("ls"), img.as_os_str(), OsStr::new("/cam\\xe9ra")]),
            "no such file",
        );
        let listing = ok(dvrfs([OsStr::new("ls"), img.as_os_str(), OsStr::new("/")]));
        assert_eq!(listing.trim(), "cam\\xe9ra/", "mounted {mounted}");
        let listing = ok(dvrfs([
            OsStr::new("ls"),
            img.as_os_str(),
            OsStr::from_bytes(b"/cam\xe9ra"),
        ]));
        assert_eq!(listing.trim(), "caf\\xe9.ts", "mounted {mounted}");
        let out = ok(dvrfs([OsStr::new("stat"), img.as_os_str(), path]));
        assert!(out.contains("path: /cam\\xe9ra/caf\\xe9.ts"), "{out}");
        assert!(out.contains("size: 17 bytes"), "{out}");
        let back = dir.path().join(format!("back-{mounted}"));
        ok(get(&back));
        assert_eq!(fs::read(&back).unwrap(), b"latin-1 recording");
        // Into a directory: the file keeps its own name, bytes and all.
        let into = dir.path().join(format!("into-{mounted}"));
        fs::create_dir(&into).unwrap();
        ok(get(&into));
        assert_eq!(fs::read(into.join(file)).unwrap(), b"latin-1 recording");
        let missing = OsStr::from_bytes(b"/cam\xe9ra/gone\xff.ts");
        let err = fails(
            dvrfs([OsStr::new("stat"), img.as_os_str(), missing]),
            "/cam\\xe9ra/gone\\xff.ts: no such file",
        );
        assert!(!err.contains("invalid UTF-8"), "{err}");
    }
    ok(dvrfs([OsStr::new("rm"), img.as_os_str(), path]));
    ok(dvrfs([
        OsStr::new("rm"),
        OsStr::new("-r"),
        img.as_os_str(),
        OsStr::from_bytes(b"/cam\xe9ra"),
    ]));
    assert_eq!(ok(dvrfs(["ls", s(&img), "/"])).trim(), "");
    assert_clean(&img);
}
