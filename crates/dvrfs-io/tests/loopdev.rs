//! Real block devices: loop devices with 512- and 4096-byte logical blocks (needs root).
//! Where `losetup` cannot attach a device, the test prints `SKIP: <reason>` and passes.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::{pattern, TempDir};
use dvrfs_core::device::{AlignedBuf, Device, IO_ALIGN_BYTES};
use dvrfs_io::{is_block_device, FileDevice, LockMode, OpenError};

const IMAGE_BYTES: u64 = 16 << 20;

/// An attached loop device, detached on drop (also when an assertion fails).
struct LoopDev {
    path: PathBuf,
}

impl LoopDev {
    /// Attaches `image` with the given logical block size, or says why it could not.
    fn attach(image: &Path, sector_bytes: u32) -> Result<LoopDev, String> {
        let out = Command::new("losetup")
            .args(["--find", "--show", "-b", &sector_bytes.to_string()])
            .arg(image)
            .output()
            .map_err(|e| format!("cannot run losetup: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "losetup -b {sector_bytes} failed ({}): {} (needs root and the loop module)",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        let dev = String::from_utf8_lossy(&out.stdout).trim().to_string();
        if dev.is_empty() {
            return Err("losetup printed no device name".to_string());
        }
        Ok(LoopDev {
            path: PathBuf::from(dev),
        })
    }
}

impl Drop for LoopDev {
    fn drop(&mut self) {
        match Command::new("losetup").arg("-d").arg(&self.path).status() {
            Ok(s) if s.success() => {}
            Ok(s) => eprintln!("warning: losetup -d {} failed: {s}", self.path.display()),
            Err(e) => eprintln!(
                "warning: cannot run losetup -d {}: {e}",
                self.path.display()
            ),
        }
    }
}

/// The two tests run one at a time. Each spawns `losetup` while the other may hold
/// its image's lock (`flock` belongs to the open file, and a child forked by one
/// thread shares every open file of the process until its `exec` closes them): under
/// load the child of one test held the other's image lock long enough for its open
/// to be refused as in use.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn exercise_loop_device(sector_bytes: u32) {
    let _alone = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let dir = TempDir::new(&format!("loop{sector_bytes}"));
    let image = dir.path().join("loop.img");
    FileDevice::create_image(&image, IMAGE_BYTES).expect("create backing image");
    let lo = match LoopDev::attach(&image, sector_bytes) {
        Ok(lo) => lo,
        Err(reason) => {
            eprintln!("SKIP: loop device test ({sector_bytes}-byte sectors): {reason}");
            return;
        }
    };
    // The device node can lag behind the attach under udev; it is there on devtmpfs.
    if !lo.path.exists() {
        eprintln!(
            "SKIP: {} was attached but its node does not exist",
            lo.path.display()
        );
        return;
    }

    assert!(is_block_device(&lo.path));
    let mut dev = FileDevice::open(&lo.path, true, LockMode::Exclusive).expect("open loop dev");
    assert!(dev.is_block_device());
    assert!(dev.is_direct());
    assert_eq!(dev.sector_bytes(), sector_bytes);
    assert_eq!(dev.size_bytes(), IMAGE_BYTES);

    // A second exclusive open is refused (O_EXCL), and so is a shared one (flock).
    for (writable, mode) in [(true, LockMode::Exclusive), (false, LockMode::Shared)] {
        match FileDevice::open(&lo.path, writable, mode) {
            Err(OpenError::InUse { .. }) => {}
            Err(e) => panic!("{mode:?} open of a held loop device: expected InUse, got {e}"),
            Ok(_) => panic!("{mode:?} open of a held loop device succeeded"),
        }
    }

    // Aligned and unaligned memory, start and end of the device.
    let len_bytes = 3 * IO_ALIGN_BYTES as usize;
    let mut aligned = AlignedBuf::zeroed(len_bytes);
    aligned.copy_from_slice(&pattern(len_bytes, 21));
    dev.write_at(0, &aligned).expect("write aligned");
    let mut storage = AlignedBuf::zeroed(len_bytes + 4096);
    storage[7..7 + len_bytes].copy_from_slice(&pattern(len_bytes, 22));
    let end_offset_bytes = IMAGE_BYTES - len_bytes as u64;
    dev.write_at(end_offset_bytes, &storage[7..7 + len_bytes])
        .expect("write unaligned");
    dev.flush().expect("flush");

    let mut back = AlignedBuf::zeroed(len_bytes);
    dev.read_at(0, &mut back).expect("read aligned");
    assert!(back[..] == pattern(len_bytes, 21)[..]);
    storage.fill(0);
    dev.read_at(end_offset_bytes, &mut storage[5..5 + len_bytes])
        .expect("read unaligned");
    assert!(storage[5..5 + len_bytes] == pattern(len_bytes, 22)[..]);
    let err = dev
        .read_at(IMAGE_BYTES, &mut back[..4096])
        .expect_err("past the end");
    assert_eq!(err.kind(), std::io::ErrorKind::UnexpectedEof);
    drop(dev);

    // The data went through the block layer into the backing file.
    let raw = std::fs::read(&image).expect("read backing image");
    assert!(raw[..len_bytes] == pattern(len_bytes, 21)[..]);
    assert!(raw[end_offset_bytes as usize..] == pattern(len_bytes, 22)[..]);

    // create_image refuses to touch a block device.
    let err = FileDevice::create_image(&lo.path, 1 << 20).expect_err("block device");
    assert!(matches!(err, OpenError::IsBlockDevice { .. }), "{err}");

    // Once released, it opens again.
    FileDevice::open(&lo.path, false, LockMode::Shared).expect("reopen after drop");
}

#[test]
fn loop_device_with_512_byte_sectors() {
    exercise_loop_device(512);
}

#[test]
fn loop_device_with_4096_byte_sectors() {
    exercise_loop_device(4096);
}
