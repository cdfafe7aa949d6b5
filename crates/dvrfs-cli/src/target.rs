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

pub fn open_fs(path: &Path, access: Access) -> CliResult<DevFs> {
    let dev = open_device(path, access)?;
    let opts = match access {
        Access::Read => OpenOptions::read_only(),
        Access::Write => OpenOptions::writable(),
    };
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
