//! Device access for the runtime shell: image files and block devices behind
//! [`dvrfs_core::device::Device`].
//!
//! # Contract
//!
//! - [`FileDevice::open`] opens an existing regular file (an image) or a block device with
//!   `O_DIRECT`, so reads and writes bypass the page cache and a completed write has been
//!   handed to the device. If the file system refuses `O_DIRECT` (`EINVAL`, at open or on a
//!   first probe read), the device falls back to buffered I/O; [`FileDevice::is_direct`]
//!   reports which mode is in effect. In both modes [`Device::flush`] is `fdatasync`, which
//!   also flushes the drive's volatile write cache, so durability does not depend on the mode.
//! - Every access must be aligned to [`IO_ALIGN_BYTES`] in offset and length
//!   (`io::ErrorKind::InvalidInput` otherwise) and lie inside [`Device::size_bytes`]
//!   (`io::ErrorKind::UnexpectedEof` otherwise). The memory buffer need not be aligned:
//!   an aligned buffer is used directly (no copy); an unaligned one is bounced through a
//!   reusable aligned buffer in chunks of at most [`BOUNCE_MAX_BYTES`].
//! - The size is learned once, at open: a regular file's length, a block device's
//!   `BLKGETSIZE64`, rounded down to [`IO_ALIGN_BYTES`]. A file that shrinks under us makes
//!   reads fail with `UnexpectedEof`; they never return made-up zeros.
//! - Each open takes an advisory `flock` ([`LockMode`]) on its own open file description,
//!   so two dvrfs opens conflict even inside one process. An exclusive open of a block
//!   device also uses `O_EXCL`, which the kernel refuses while the device is mounted.
//!   A loop device also takes the lock on its backing image, so the image and a loop
//!   device over it exclude each other as one volume.
//!
//! # Fault model
//!
//! This crate adds no caching, reordering or retrying of its own: a failed system call is
//! returned as the `io::Error` it produced (with `EINTR` retried by std). What survives a
//! crash is what the media keeps: writes since the last `flush` may land in any subset and
//! the last may be torn at a logical-sector boundary ([`Device::sector_bytes`]), exactly
//! the model of `dvrfs_core::device`. A failed `flush` means nothing since the previous
//! successful flush is known durable; callers must treat the device as suspect.

use std::fmt;
use std::fs::{File, OpenOptions, TryLockError};
use std::io;
use std::os::unix::fs::{FileExt, FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use dvrfs_core::device::{AlignedBuf, Device, IO_ALIGN_BYTES};

mod blk;
/// File calls std has no safe form for (`SEEK_DATA`, `access`, `O_PATH`).
pub mod files;
mod huge;
/// The mount daemon's process calls: pipe, fork, detaching its descriptors.
pub mod process;
/// Catching, masking and waiting for signals (the CLI's clean stop).
pub mod signals;

pub use huge::HugeBuf;

/// Largest chunk bounced through the aligned scratch buffer for an unaligned memory buffer.
pub const BOUNCE_MAX_BYTES: usize = 8 << 20;

/// Sector size assumed when a regular file's underlying device cannot be identified: the
/// smallest we support, so the torn-write model stays conservative.
const FALLBACK_SECTOR_BYTES: u32 = 512;

/// The permissions of an image file [`FileDevice::create_image`] creates.
pub const IMAGE_MODE: u32 = 0o600;

/// Which advisory lock an open takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LockMode {
    /// Readers: many may hold it together, none while an exclusive holder exists.
    Shared,
    /// A writer (mount, format, repair): nobody else may hold any lock.
    Exclusive,
}

/// Why a device or image could not be opened or created.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error("{} does not exist; check the path (create an image with `create_image` first)", path.display())]
    NotFound { path: PathBuf },
    #[error("{} is in use by another dvrfs process (mounted or being written); stop it first", path.display())]
    InUse { path: PathBuf },
    #[error("{} is busy: it is mounted, or another program holds it exclusively; unmount it or stop that program first", path.display())]
    Busy { path: PathBuf },
    #[error("permission denied opening {}; run as a user with access to it (block devices usually need root or the `disk` group)", path.display())]
    PermissionDenied { path: PathBuf },
    #[error("{} is read-only (read-only file system or write-protected device); open it read-only or make it writable", path.display())]
    ReadOnly { path: PathBuf },
    #[error("{} is neither a regular file nor a block device; give an image file or a block device such as /dev/sdX", path.display())]
    NotFileOrBlockDevice { path: PathBuf },
    #[error("{} is a block device; images are only created as regular files, format the device directly instead", path.display())]
    IsBlockDevice { path: PathBuf },
    #[error("{} is {current_bytes} bytes, larger than the requested {requested_bytes}; refusing to shrink it (that would destroy data), pick a size of at least {current_bytes} or remove the file first", path.display())]
    WouldShrink {
        path: PathBuf,
        current_bytes: u64,
        requested_bytes: u64,
    },
    #[error("image size {size_bytes} bytes for {} is too small; it must be at least {} bytes", path.display(), IO_ALIGN_BYTES)]
    TooSmall { path: PathBuf, size_bytes: u64 },
    #[error("{} has a logical block size of {sector_bytes} bytes; dvrfs needs one that divides {} (512 or 4096)", path.display(), IO_ALIGN_BYTES)]
    UnsupportedSectorSize { path: PathBuf, sector_bytes: u32 },
    #[error("I/O error on {}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
}

impl OpenError {
    /// Maps an `io::Error` from opening `path` to the variant that says what to do.
    fn from_io(path: &Path, source: io::Error) -> OpenError {
        let path = path.to_path_buf();
        match source.raw_os_error() {
            Some(libc::ENOENT) => OpenError::NotFound { path },
            Some(libc::EACCES) | Some(libc::EPERM) => OpenError::PermissionDenied { path },
            Some(libc::EROFS) => OpenError::ReadOnly { path },
            Some(libc::EBUSY) => OpenError::Busy { path },
            _ => OpenError::Io { path, source },
        }
    }
}

/// An image file or block device opened for dvrfs, implementing [`Device`].
pub struct FileDevice {
    path: PathBuf,
    file: File,
    writable: bool,
    direct: bool,
    block_device: bool,
    size_bytes: u64,
    sector_bytes: u32,
    /// A loop device's backing image, opened only to hold the same lock on it (see
    /// [`lock_loop_backing`]).
    _backing_lock: Option<File>,
    /// Aligned scratch for callers whose memory buffer is not aligned; grows on demand up
    /// to [`BOUNCE_MAX_BYTES`]. A mutex because `read_at` takes `&self`.
    bounce: Mutex<AlignedBuf>,
}

impl fmt::Debug for FileDevice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FileDevice")
            .field("path", &self.path)
            .field("writable", &self.writable)
            .field("direct", &self.direct)
            .field("block_device", &self.block_device)
            .field("size_bytes", &self.size_bytes)
            .field("sector_bytes", &self.sector_bytes)
            .finish_non_exhaustive()
    }
}

/// Whether `open` may use `O_DIRECT` (tests force the buffered fallback with `Never`).
#[derive(Clone, Copy, PartialEq, Eq)]
enum DirectPolicy {
    Try,
    #[cfg_attr(not(test), allow(dead_code))]
    Never,
}

impl FileDevice {
    /// Opens an existing image file or block device. `writable = false` opens read-only.
    ///
    /// Takes an advisory lock of mode `lock`; if another open (in this or another process)
    /// holds a conflicting one, fails with [`OpenError::InUse`].
    pub fn open(path: &Path, writable: bool, lock: LockMode) -> Result<FileDevice, OpenError> {
        Self::open_with(path, writable, lock, DirectPolicy::Try)
    }

    fn open_with(
        path: &Path,
        writable: bool,
        lock: LockMode,
        policy: DirectPolicy,
    ) -> Result<FileDevice, OpenError> {
        let meta = std::fs::metadata(path).map_err(|e| OpenError::from_io(path, e))?;
        let block_device = meta.file_type().is_block_device();
        if !block_device && !meta.file_type().is_file() {
            return Err(OpenError::NotFileOrBlockDevice {
                path: path.to_path_buf(),
            });
        }
        // O_EXCL on a block device makes the kernel refuse the open while it is mounted or
        // held exclusively by someone else: a writer must never share a disk with them.
        let excl = block_device && lock == LockMode::Exclusive;

        let mut direct = policy == DirectPolicy::Try;
        let mut file = None;
        if direct {
            match open_file(path, writable, excl, true) {
                Ok(f) if probe_direct(&f, block_device, meta.len()) => file = Some(f),
                Ok(_) => direct = false,
                Err(e) if e.raw_os_error() == Some(libc::EINVAL) => direct = false,
                Err(e) => return Err(open_error(path, e)),
            }
        }
        let file = match file {
            Some(f) => f,
            None => open_file(path, writable, excl, false).map_err(|e| open_error(path, e))?,
        };

        take_lock(&file, path, lock)?;
        let backing_lock = if block_device {
            lock_loop_backing(&file, lock)?
        } else {
            None
        };

        let io_err = |source| OpenError::Io {
            path: path.to_path_buf(),
            source,
        };
        let (raw_size_bytes, sector_bytes) = if block_device {
            let size = blk::size_bytes(&file).map_err(io_err)?;
            let sector = blk::logical_sector_bytes(&file).map_err(io_err)?;
            (size, sector)
        } else {
            let size = file.metadata().map_err(io_err)?.len();
            (size, backing_sector_bytes(meta.dev()))
        };
        if sector_bytes == 0 || !IO_ALIGN_BYTES.is_multiple_of(u64::from(sector_bytes)) {
            return Err(OpenError::UnsupportedSectorSize {
                path: path.to_path_buf(),
                sector_bytes,
            });
        }

        Ok(FileDevice {
            path: path.to_path_buf(),
            file,
            writable,
            direct,
            block_device,
            size_bytes: raw_size_bytes - raw_size_bytes % IO_ALIGN_BYTES,
            sector_bytes,
            _backing_lock: backing_lock,
            bounce: Mutex::new(AlignedBuf::zeroed(0)),
        })
    }

    /// Creates (or grows) a sparse image file of exactly `size_bytes` rounded down to
    /// [`IO_ALIGN_BYTES`]. Never shrinks an existing file and never touches a block device.
    /// Takes an exclusive lock while it works, so it fails with [`OpenError::InUse`] on an
    /// image that dvrfs has open.
    pub fn create_image(path: &Path, size_bytes: u64) -> Result<(), OpenError> {
        let requested_bytes = size_bytes - size_bytes % IO_ALIGN_BYTES;
        if requested_bytes == 0 {
            return Err(OpenError::TooSmall {
                path: path.to_path_buf(),
                size_bytes,
            });
        }
        let existed = match std::fs::metadata(path) {
            Ok(meta) if meta.file_type().is_block_device() => {
                return Err(OpenError::IsBlockDevice {
                    path: path.to_path_buf(),
                })
            }
            Ok(meta) if !meta.file_type().is_file() => {
                return Err(OpenError::NotFileOrBlockDevice {
                    path: path.to_path_buf(),
                })
            }
            Ok(_) => true,
            Err(e) if e.kind() == io::ErrorKind::NotFound => false,
            Err(e) => return Err(OpenError::from_io(path, e)),
        };

        // A new image is its owner's alone (0600): anyone who can read it reads every
        // file in it whatever their modes, and anyone who can open it can hold its
        // lock against the owner's mount. An existing file keeps the mode it has.
        let file = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .mode(IMAGE_MODE)
            .open(path)
            .map_err(|e| OpenError::from_io(path, e))?;
        take_lock(&file, path, LockMode::Exclusive)?;
        let io_err = |source| OpenError::Io {
            path: path.to_path_buf(),
            source,
        };
        let current_bytes = file.metadata().map_err(io_err)?.len();
        if current_bytes > requested_bytes {
            return Err(OpenError::WouldShrink {
                path: path.to_path_buf(),
                current_bytes,
                requested_bytes,
            });
        }
        if current_bytes != requested_bytes {
            file.set_len(requested_bytes).map_err(io_err)?;
        }
        file.sync_all().map_err(io_err)?;
        if !existed {
            sync_parent_dir(path).map_err(io_err)?;
        }
        Ok(())
    }

    /// True when `O_DIRECT` is in effect; false only after the buffered fallback.
    pub fn is_direct(&self) -> bool {
        self.direct
    }

    /// True when this is a block device rather than an image file.
    pub fn is_block_device(&self) -> bool {
        self.block_device
    }

    /// True when opened for writing.
    pub fn is_writable(&self) -> bool {
        self.writable
    }

    /// The path this device was opened from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn check_range(&self, offset_bytes: u64, len_bytes: usize) -> io::Result<()> {
        let len = len_bytes as u64;
        if !offset_bytes.is_multiple_of(IO_ALIGN_BYTES) || !len.is_multiple_of(IO_ALIGN_BYTES) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "{}: unaligned device access at offset {offset_bytes} length {len_bytes} \
                     (both must be multiples of {IO_ALIGN_BYTES})",
                    self.path.display()
                ),
            ));
        }
        match offset_bytes.checked_add(len) {
            Some(end) if end <= self.size_bytes => Ok(()),
            _ => Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!(
                    "{}: device access at offset {offset_bytes} length {len_bytes} is past \
                     the end ({} bytes)",
                    self.path.display(),
                    self.size_bytes
                ),
            )),
        }
    }

    /// Runs `f(bounce, chunk_offset_bytes, chunk_range)` over `len_bytes` in chunks of at
    /// most [`BOUNCE_MAX_BYTES`], with `bounce` an aligned buffer of the chunk's length.
    fn with_bounce(
        &self,
        offset_bytes: u64,
        len_bytes: usize,
        mut f: impl FnMut(&mut [u8], u64, std::ops::Range<usize>) -> io::Result<()>,
    ) -> io::Result<()> {
        // The scratch holds no state across calls, so a panic elsewhere cannot poison it.
        let mut bounce = self.bounce.lock().unwrap_or_else(|e| e.into_inner());
        let want = len_bytes.min(BOUNCE_MAX_BYTES);
        if bounce.len() < want {
            *bounce = AlignedBuf::zeroed(want);
        }
        let mut done = 0usize;
        while done < len_bytes {
            let n = (len_bytes - done).min(BOUNCE_MAX_BYTES);
            f(&mut bounce[..n], offset_bytes + done as u64, done..done + n)?;
            done += n;
        }
        Ok(())
    }
}

fn is_io_aligned(buf: &[u8]) -> bool {
    (buf.as_ptr() as usize).is_multiple_of(IO_ALIGN_BYTES as usize)
}

/// The open file, for a driver that submits its own I/O (the io_uring runtime). The
/// file keeps the `O_DIRECT` flag and the lock of [`FileDevice::open`].
impl std::os::fd::AsRawFd for FileDevice {
    fn as_raw_fd(&self) -> std::os::fd::RawFd {
        self.file.as_raw_fd()
    }
}

impl Device for FileDevice {
    fn size_bytes(&self) -> u64 {
        self.size_bytes
    }

    fn sector_bytes(&self) -> u32 {
        self.sector_bytes
    }

    fn read_at(&self, offset_bytes: u64, buf: &mut [u8]) -> io::Result<()> {
        self.check_range(offset_bytes, buf.len())?;
        if !self.direct || is_io_aligned(buf) {
            return self.file.read_exact_at(buf, offset_bytes);
        }
        self.with_bounce(
            offset_bytes,
            buf.len(),
            |bounce, chunk_offset_bytes, range| {
                self.file.read_exact_at(bounce, chunk_offset_bytes)?;
                buf[range].copy_from_slice(bounce);
                Ok(())
            },
        )
    }

    fn write_at(&mut self, offset_bytes: u64, buf: &[u8]) -> io::Result<()> {
        if !self.writable {
            return Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                format!("{}: device was opened read-only", self.path.display()),
            ));
        }
        self.check_range(offset_bytes, buf.len())?;
        if !self.direct || is_io_aligned(buf) {
            return self.file.write_all_at(buf, offset_bytes);
        }
        let file = &self.file;
        self.with_bounce(
            offset_bytes,
            buf.len(),
            |bounce, chunk_offset_bytes, range| {
                bounce.copy_from_slice(&buf[range]);
                file.write_all_at(bounce, chunk_offset_bytes)
            },
        )
    }

    fn flush(&mut self) -> io::Result<()> {
        self.file.sync_data()
    }
}

/// True when `path` names a block device (following symlinks, as `/dev/disk/by-id` uses).
pub fn is_block_device(path: &Path) -> bool {
    std::fs::metadata(path).is_ok_and(|m| m.file_type().is_block_device())
}

/// Like [`OpenError::from_io`], but tells a block device held by another dvrfs open
/// (`InUse`) apart from one the kernel or another program holds (`Busy`): `O_EXCL` fails
/// with `EBUSY` in both cases, and only the other dvrfs holds our advisory lock.
fn open_error(path: &Path, e: io::Error) -> OpenError {
    if e.raw_os_error() == Some(libc::EBUSY) {
        let held_by_dvrfs = open_file(path, false, false, false)
            .is_ok_and(|f| matches!(f.try_lock_shared(), Err(TryLockError::WouldBlock)));
        if held_by_dvrfs {
            return OpenError::InUse {
                path: path.to_path_buf(),
            };
        }
    }
    OpenError::from_io(path, e)
}

fn open_file(path: &Path, writable: bool, excl: bool, direct: bool) -> io::Result<File> {
    let mut flags = 0;
    if direct {
        flags |= libc::O_DIRECT;
    }
    if excl {
        flags |= libc::O_EXCL;
    }
    OpenOptions::new()
        .read(true)
        .write(writable)
        .custom_flags(flags)
        .open(path)
}

/// Some file systems accept `O_DIRECT` at open but reject the I/O with `EINVAL`. Reads the
/// first aligned block (when there is one) to find out; true when direct I/O works or when
/// nothing could be learned (an error other than `EINVAL` will surface on real use).
fn probe_direct(file: &File, block_device: bool, file_len_bytes: u64) -> bool {
    if !block_device && file_len_bytes < IO_ALIGN_BYTES {
        return true;
    }
    let mut probe = AlignedBuf::zeroed(IO_ALIGN_BYTES as usize);
    match file.read_at(&mut probe, 0) {
        Err(e) => e.raw_os_error() != Some(libc::EINVAL),
        Ok(_) => true,
    }
}

/// The logical block size of the device holding a regular file, from sysfs; the fallback
/// when the file system has no single backing block device (tmpfs, btrfs, network).
fn backing_sector_bytes(st_dev: u64) -> u32 {
    let (major, minor) = (libc::major(st_dev), libc::minor(st_dev));
    // A whole disk has `queue/` itself; a partition's is in its parent directory.
    ["queue", "../queue"]
        .iter()
        .filter_map(|queue| {
            let p = format!("/sys/dev/block/{major}:{minor}/{queue}/logical_block_size");
            std::fs::read_to_string(p).ok()?.trim().parse::<u32>().ok()
        })
        .find(|&n| n.is_power_of_two() && (512..=IO_ALIGN_BYTES as u32).contains(&n))
        .unwrap_or(FALLBACK_SECTOR_BYTES)
}

/// Makes a newly created directory entry durable.
fn sync_parent_dir(path: &Path) -> io::Result<()> {
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    File::open(parent)?.sync_all()
}

/// A loop device over an image is the image: when `file` is one, takes the lock of
/// `mode` on its backing file too, so that the image and every loop device over it
/// collide (a `put` to `/dev/loop0` while its image is mounted would otherwise write
/// beside the mount, and both would be lost). The backing file is found by the path
/// sysfs gives (`/sys/dev/block/MAJ:MIN/loop/backing_file`) and checked against the
/// device and inode numbers the loop driver reports; one that cannot be reached by
/// that path (deleted, in another mount namespace) cannot be locked and is skipped.
fn lock_loop_backing(file: &File, mode: LockMode) -> Result<Option<File>, OpenError> {
    let Some((dev, ino)) = blk::loop_backing(file) else {
        return Ok(None);
    };
    let Ok(rdev) = file.metadata().map(|m| m.rdev()) else {
        return Ok(None);
    };
    let sys = format!(
        "/sys/dev/block/{}:{}/loop/backing_file",
        libc::major(rdev),
        libc::minor(rdev)
    );
    let Ok(name) = std::fs::read_to_string(sys) else {
        return Ok(None);
    };
    let backing_path = PathBuf::from(name.trim_end_matches('\n'));
    let Ok(backing) = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_CLOEXEC | libc::O_NOCTTY)
        .open(&backing_path)
    else {
        return Ok(None);
    };
    match backing.metadata() {
        Ok(m) if m.dev() == dev && m.ino() == ino => {}
        _ => return Ok(None),
    }
    // A conflict names the image: its holder is the one to report (and wait for).
    take_lock(&backing, &backing_path, mode)?;
    Ok(Some(backing))
}

/// Takes the advisory lock of `mode` without waiting; a conflicting holder is `InUse`.
fn take_lock(file: &File, path: &Path, mode: LockMode) -> Result<(), OpenError> {
    let locked = match mode {
        LockMode::Shared => file.try_lock_shared(),
        LockMode::Exclusive => file.try_lock(),
    };
    match locked {
        Ok(()) => Ok(()),
        Err(TryLockError::WouldBlock) => Err(OpenError::InUse {
            path: path.to_path_buf(),
        }),
        Err(TryLockError::Error(source)) => Err(OpenError::Io {
            path: path.to_path_buf(),
            source,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffered_fallback_round_trips_and_flushes() {
        let dir = std::env::temp_dir().join(format!("dvrfs-io-unit-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("create temp dir");
        let path = dir.join("buffered.img");
        FileDevice::create_image(&path, 1 << 20).expect("create image");
        let mut dev = FileDevice::open_with(&path, true, LockMode::Exclusive, DirectPolicy::Never)
            .expect("open buffered");
        assert!(!dev.is_direct());
        let data: Vec<u8> = (0..3 * 4096).map(|i| (i % 251) as u8).collect();
        dev.write_at(8192, &data).expect("write");
        dev.flush().expect("flush");
        let mut back = vec![0u8; data.len()];
        dev.read_at(8192, &mut back).expect("read");
        assert_eq!(back, data);
        drop(dev);
        let _ = std::fs::remove_dir_all(&dir);
    }
}

/// The real monotonic clock for the blocking driver: `Instant` since it was made, and a
/// real sleep.
#[derive(Clone, Copy, Debug)]
pub struct SystemClock {
    origin: std::time::Instant,
}

impl SystemClock {
    pub fn new() -> SystemClock {
        SystemClock {
            origin: std::time::Instant::now(),
        }
    }
}

impl Default for SystemClock {
    fn default() -> Self {
        Self::new()
    }
}

impl dvrfs_core::driver::Clock for SystemClock {
    fn mono_ns(&self) -> u64 {
        u64::try_from(self.origin.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }
    fn wall_ns(&self) -> i64 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
    }
    fn sleep_until(&self, mono_ns: u64) {
        let now = self.mono_ns();
        if mono_ns > now {
            std::thread::sleep(std::time::Duration::from_nanos(mono_ns - now));
        }
    }
}
