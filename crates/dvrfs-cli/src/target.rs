//! Opening a TARGET, and the two things the core leaves to its shell: the clock and
//! the identity of the caller.
//!
//! Locking rule: commands that only read (ls, stat, get, info, fsck without --repair)
//! open the device read-only with a shared lock, so any number of them run together;
//! commands that write open it read-write with an exclusive lock. Either kind fails
//! with the in-use message while the other holds the device.

use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use dvrfs_core::{Fs, OpenOptions};
use dvrfs_io::{FileDevice, LockMode, SystemClock};

use crate::error::{set_target, CliResult};

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Access {
    Read,
    Write,
}

pub type DevFs = Fs<FileDevice>;

pub fn open_device(path: &Path, access: Access) -> CliResult<FileDevice> {
    set_target(path);
    let dev = match access {
        Access::Read => FileDevice::open(path, false, LockMode::Shared)?,
        Access::Write => FileDevice::open(path, true, LockMode::Exclusive)?,
    };
    Ok(dev)
}

/// Opens the file system for the namespace commands (`ls`, `stat`, `info` read no file
/// data, so a read-only open skips the data checksums).
pub fn open_fs(path: &Path, access: Access) -> CliResult<DevFs> {
    let opts = match access {
        Access::Read => OpenOptions::metadata_only(),
        Access::Write => OpenOptions::writable(),
    };
    open_fs_with(path, access, opts)
}

/// Opens the file system read-only with only the metadata that resolving `paths`
/// reads, and with `list` the entries of those that are directories (`stat`, `ls`:
/// their cost does not grow with the rest of the volume).
pub fn open_fs_for_paths(path: &Path, paths: &[String], list: bool) -> CliResult<DevFs> {
    let opts = match list {
        true => OpenOptions::listing(paths),
        false => OpenOptions::paths_only(paths),
    };
    open_fs_with(path, Access::Read, opts)
}

fn open_fs_with(path: &Path, access: Access, opts: OpenOptions) -> CliResult<DevFs> {
    let dev = open_device(path, access)?;
    Ok(Fs::open_with(
        dev,
        opts,
        Box::new(SystemClock::new()),
        None,
    )?)
}

/// Opens the file system on `path` in the runtime (io_uring, or its thread pool), for
/// the data commands.
pub fn open_runtime(path: &Path, access: Access) -> CliResult<dvrfs_runtime::Runtime> {
    let dev = open_device(path, access)?;
    let opts = dvrfs_runtime::Options {
        writable: access == Access::Write,
        ..dvrfs_runtime::Options::default()
    };
    Ok(dvrfs_runtime::Runtime::with_device(dev, opts)?)
}

/// Wall-clock time in nanoseconds since the Unix epoch (0 for a clock before 1970).
pub fn now_ns() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
}

/// The effective uid and gid of this process: Linux makes them the owner of
/// `/proc/self`, which spares us an `unsafe` libc call. Root if it cannot be read.
pub fn process_owner() -> (u32, u32) {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self").map_or((0, 0), |m| (m.uid(), m.gid()))
}

/// Where the volume on `path` is mounted by `dvrfs mount`, if it is: a `fuse.dvrfs`
/// line of `/proc/self/mountinfo` whose source is this image or device.
pub fn mounted_at(path: &Path) -> Option<std::path::PathBuf> {
    let path = std::fs::canonicalize(path).ok()?;
    let info = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    // Fields: id parent major:minor root mountpoint options [optional...] - fstype source superopts
    // with spaces, tabs, newlines and backslashes in names written as octal escapes.
    let unescape = |s: &str| -> String {
        let b = s.as_bytes();
        let mut out = Vec::with_capacity(b.len());
        let mut i = 0;
        while i < b.len() {
            if b[i] == b'\\'
                && i + 3 < b.len()
                && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
            {
                let v = (b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0');
                out.push(v);
                i += 4;
            } else {
                out.push(b[i]);
                i += 1;
            }
        }
        String::from_utf8_lossy(&out).into_owned()
    };
    info.lines().find_map(|line| {
        let (left, right) = line.split_once(" - ")?;
        let mut r = right.split(' ');
        let (fstype, source) = (r.next()?, r.next()?);
        // `fuse.dvrfs` (the kernel took the subtype), or `fuse` from an older mount.
        if !(fstype == "fuse.dvrfs" || fstype == "fuse") || Path::new(&unescape(source)) != path {
            return None;
        }
        Some(std::path::PathBuf::from(unescape(left.split(' ').nth(4)?)))
    })
}
