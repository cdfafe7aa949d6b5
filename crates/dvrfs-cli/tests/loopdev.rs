//! mkfs/put/get/fsck on real block devices: loop devices with 512- and 4096-byte
//! logical blocks (needs root). Where `losetup` cannot attach, prints `SKIP: <reason>`.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::*;

const IMAGE_BYTES: u64 = 512 << 20;

/// An attached loop device, detached on drop (also when an assertion fails).
struct LoopDev(PathBuf);

impl LoopDev {
    fn attach(image: &Path, sector_bytes: u32) -> Result<LoopDev, String> {
        let out = Command::new("losetup")
            .args(["--find", "--show", "-b", &sector_bytes.to_string()])
            .arg(image)
            .output()
            .map_err(|e| format!("cannot run losetup: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "losetup -b {sector_bytes} failed ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        let dev = String::from_utf8_lossy(&out.stdout).trim().to_string();
        if dev.is_empty() {
            return Err("losetup printed no device name".into());
        }
        let lo = LoopDev(PathBuf::from(dev));
        if !lo.0.exists() {
            return Err(format!(
                "{} was attached but has no device node",
                lo.0.display()
            ));
        }
        Ok(lo)
    }
}

impl Drop for LoopDev {
    fn drop(&mut self) {
        match Command::new("losetup").arg("-d").arg(&self.0).status() {
            Ok(s) if s.success() => {}
            other => eprintln!("warning: losetup -d {} failed: {other:?}", self.0.display()),
        }
    }
}

fn round_trip_on_loop_device(sector_bytes: u32) {
    let dir = tempdir();
    let image = dir.path().join("backing.img");
    std::fs::File::create(&image)
        .and_then(|f| f.set_len(IMAGE_BYTES))
        .expect("backing image");
    let lo = match LoopDev::attach(&image, sector_bytes) {
        Ok(lo) => lo,
        Err(reason) => {
            eprintln!("SKIP: loop device test ({sector_bytes}-byte sectors): {reason}");
            return;
        }
    };
    let dev = lo.0.to_str().expect("utf-8 device path");
    // A block device is formatted at its own size; --size is refused.
    fails(dvrfs(["mkfs", dev, "--size", "1G"]), "block device");
    ok(dvrfs(["mkfs", dev, "--block-size", "1M"]));
    assert_eq!(info(&lo.0)["size_bytes"], IMAGE_BYTES);
    let src = random_file(
        &dir.path().join("src.bin"),
        (64 << 20) + 12_345,
        u64::from(sector_bytes),
    );
    put_get_check(&lo.0, &src, "/clip.bin", dir.path());
    let o = dvrfs(["fsck", dev]);
    assert_eq!(code(&o), 0, "{} {}", stdout(&o), stderr(&o));
    fails(dvrfs(["mkfs", dev]), "--force");
}

#[test]
fn loop_device_with_512_byte_sectors() {
    round_trip_on_loop_device(512);
}

#[test]
fn loop_device_with_4096_byte_sectors() {
    round_trip_on_loop_device(4096);
}

/// Issue 22 item 12: a loop device over an image is the same volume. While the image
/// is held (mounted, or opened by a writer), `put` to the loop device and a `mount`
/// of it are refused, naming where the image is mounted; while the loop device is
/// mounted, so are a writer and `fsck` on the image. Before, both were accepted and
/// everything written through one of them (fsync'd files included) was lost.
#[test]
fn a_loop_device_over_an_image_shares_the_images_lock() {
    use dvrfs_io::{FileDevice, LockMode};
    let dir = tempdir();
    let img = dir.path().join("fs.img");
    mkfs(&img, "256M", &["--block-size", "1M"]);
    let lo = match LoopDev::attach(&img, 512) {
        Ok(lo) => lo,
        Err(reason) => {
            println!("SKIP: loop device over a locked image: {reason}");
            return;
        }
    };
    let dev = lo.0.to_str().expect("utf-8 device path");
    let i = img.to_str().expect("utf-8");
    let src = random_file(&dir.path().join("src.bin"), 1 << 20, 12);
    let s = src.to_str().unwrap();
    {
        // A writer holds the image: the loop device is in use too, and the other way.
        let _held = FileDevice::open(&img, true, LockMode::Exclusive).expect("hold the image");
        fails(dvrfs(["put", dev, s, "/a"]), "in use");
        fails(dvrfs(["ls", dev]), "in use");
    }
    {
        let _held = FileDevice::open(&lo.0, true, LockMode::Exclusive).expect("hold the loop");
        fails(dvrfs(["put", i, s, "/a"]), "in use");
        assert_eq!(code(&dvrfs(["fsck", i])), 8);
    }
    if let Some(why) = fuse_missing() {
        println!("SKIP: the mounted half: {why}");
        return;
    }
    // The image mounted: the loop device is refused, naming the mount.
    let m = Mount::new(dir.path(), &img, &[]);
    let err = fails(dvrfs(["put", dev, s, "/a"]), "is mounted at");
    assert!(err.contains(m.mnt.to_str().unwrap()), "{err}");
    let other = dir.path().join("other");
    std::fs::create_dir(&other).unwrap();
    fails(
        dvrfs(["mount", dev, other.to_str().unwrap(), "--log", "/dev/null"]),
        "is mounted at",
    );
    assert!(!mounted(&other));
    m.unmount();
    // The loop device mounted: the image is refused.
    let sub = dir.path().join("sub");
    std::fs::create_dir(&sub).unwrap();
    let m = Mount::new(&sub, &lo.0, &[]);
    std::fs::copy(&src, m.path("through-loop")).unwrap();
    fails(dvrfs(["put", i, s, "/a"]), "is mounted at");
    let o = dvrfs(["fsck", i]);
    assert_eq!(code(&o), 8, "{}", stderr(&o));
    m.unmount();
    assert_clean(&img);
    let back = dir.path().join("back.bin");
    get_to(&img, "/through-loop", &back);
    assert_eq!(sha256_file(&back), sha256_file(&src));
}
