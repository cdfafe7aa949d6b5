//! Block-device geometry through Linux ioctls: the only `unsafe` in this crate.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;

/// `BLKGETSIZE64 = _IOR(0x12, 114, size_t)`: device size in bytes as a `u64`. Not in the
/// `libc` crate, so spelled out; the direction bits differ on the older ioctl layouts.
#[cfg(not(any(
    target_arch = "mips",
    target_arch = "mips64",
    target_arch = "powerpc",
    target_arch = "powerpc64",
    target_arch = "sparc",
    target_arch = "sparc64"
)))]
const BLKGETSIZE64: libc::Ioctl = 0x8008_1272_u32 as libc::Ioctl;
#[cfg(any(
    target_arch = "mips",
    target_arch = "mips64",
    target_arch = "powerpc",
    target_arch = "powerpc64",
    target_arch = "sparc",
    target_arch = "sparc64"
))]
const BLKGETSIZE64: libc::Ioctl = 0x4008_1272_u32 as libc::Ioctl;

/// The block device's size in bytes.
pub(crate) fn size_bytes(file: &File) -> io::Result<u64> {
    let mut size_bytes: u64 = 0;
    // SAFETY: the fd is open for the lifetime of `file`; BLKGETSIZE64 writes exactly one
    // u64 through the pointer, which points at a live, properly aligned u64.
    let rc = unsafe { libc::ioctl(file.as_raw_fd(), BLKGETSIZE64, &mut size_bytes as *mut u64) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(size_bytes)
}

/// The block device's logical block size (the smallest unit it can address), in bytes.
pub(crate) fn logical_sector_bytes(file: &File) -> io::Result<u32> {
    let mut sector_bytes: libc::c_int = 0;
    // SAFETY: the fd is open for the lifetime of `file`; BLKSSZGET writes exactly one C
    // int through the pointer, which points at a live, properly aligned c_int.
    let rc = unsafe {
        libc::ioctl(
            file.as_raw_fd(),
            libc::BLKSSZGET,
            &mut sector_bytes as *mut libc::c_int,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    u32::try_from(sector_bytes).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("BLKSSZGET returned a negative block size {sector_bytes}"),
        )
    })
}

/// `LOOP_GET_STATUS64`: a loop device's status, including its backing file's device
/// and inode numbers. Not in the `libc` crate, so spelled out (`linux/loop.h`).
const LOOP_GET_STATUS64: libc::Ioctl = 0x4C05 as libc::Ioctl;

/// `struct loop_info64` of `linux/loop.h` (232 bytes).
#[repr(C)]
struct LoopInfo64 {
    lo_device: u64,
    lo_inode: u64,
    lo_rdevice: u64,
    lo_offset: u64,
    lo_sizelimit: u64,
    lo_number: u32,
    lo_encrypt_type: u32,
    lo_encrypt_key_size: u32,
    lo_flags: u32,
    lo_file_name: [u8; 64],
    lo_crypt_name: [u8; 64],
    lo_encrypt_key: [u8; 32],
    lo_init: [u64; 2],
}

const _: () = assert!(std::mem::size_of::<LoopInfo64>() == 232);

/// The device and inode numbers of the file behind a loop device, or `None` when
/// `file` is not a loop device or has nothing attached.
pub(crate) fn loop_backing(file: &File) -> Option<(u64, u64)> {
    // SAFETY: all-zero bytes are a valid LoopInfo64 (integers and byte arrays).
    let mut info: LoopInfo64 = unsafe { std::mem::zeroed() };
    // SAFETY: the fd is open for the lifetime of `file`; LOOP_GET_STATUS64 writes one
    // struct loop_info64 through the pointer, which points at a live one.
    let rc = unsafe {
        libc::ioctl(
            file.as_raw_fd(),
            LOOP_GET_STATUS64,
            &mut info as *mut LoopInfo64,
        )
    };
    (rc == 0).then_some((info.lo_device, info.lo_inode))
}
