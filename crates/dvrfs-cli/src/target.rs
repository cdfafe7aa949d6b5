//! Opening a TARGET, and the two things the core leaves to its shell: the clock and
//! the identity of the caller.
//!
//! Locking rule: commands that only read (ls, stat, get, info, fsck without --repair)
//! open the device read-only with a shared lock, so any number of them run together;
//! commands that write open it read-write with an exclusive lock. Either kind fails
//! with the in-use message while the other holds the device.
//!
//! A volume that `dvrfs mount` holds is used through the daemon instead, over its
//! socket (`dvrfs-remote`), by the commands that can: `ls`, `stat`, `get`, `put`,
//! `record` and `play` ask [`daemon`] first and open the device only when no daemon
//! serves it. The others (they change the namespace, or read the whole device) are
//! refused with where it is mounted.
//!
//! One holder is waited for instead: a `dvrfs mount` daemon whose volume was just
//! unmounted. The kernel's `umount` returns as soon as the mount is gone, before the
//! daemon has written what it gathered, committed and closed the device (tens of
//! milliseconds, more on a busy disk), so `umount /mnt/rec && dvrfs fsck rec.img`
//! would otherwise find the volume in use. A command that finds the lock held by such
//! a daemon (a `dvrfs mount` process, and the volume in no mount) tries again until
//! the lock is free, for at most [`UNMOUNT_WAIT_MAX`], and then says who holds it.
//! A holder that is exiting is waited for the same way: `kill -9` returns before the
//! process has died, and its lock goes with its last file reference, which its
//! io_uring ring, torn down after the process, keeps a few milliseconds longer
//! (`dvrfs put ... & kill -9 $! ; dvrfs fsck` found the volume "in use" in 4 of 10
//! runs before).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use dvrfs_core::{Fs, OpenOptions};
use dvrfs_io::{FileDevice, LockMode, OpenError, SystemClock};

use crate::error::{CliError, CliResult};

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Access {
    Read,
    Write,
}

pub type DevFs = Fs<FileDevice>;

/// The longest a command waits for a `dvrfs mount` daemon that holds the volume after
/// it was unmounted (see the module docs). Its shutdown writes at most what its open
/// files gathered (a chunk each) and one commit, well under a second on a disk the
/// unmount left idle; a daemon still holding the volume after this long is stuck or
/// still starting, and the command says so instead of hanging.
pub const UNMOUNT_WAIT_MAX: Duration = Duration::from_secs(5);

/// A wait longer than this is announced on stderr (a usual one is over before).
const UNMOUNT_WAIT_NOTE_AFTER: Duration = Duration::from_millis(500);

/// Between two tries of the lock: a small part of a usual wait.
const UNMOUNT_WAIT_RETRY: Duration = Duration::from_millis(5);

pub fn open_device(path: &Path, access: Access) -> CliResult<FileDevice> {
    after_unmount(path, || match access {
        Access::Read => FileDevice::open(path, false, LockMode::Shared),
        Access::Write => FileDevice::open(path, true, LockMode::Exclusive),
    })
}

/// Runs `open` (an open or a lock of the volume on `path`) and, while it fails because
/// a `dvrfs mount` daemon that is unmounting the volume holds the lock, runs it again,
/// for at most [`UNMOUNT_WAIT_MAX`]. Any other failure is returned at once.
pub fn after_unmount<T>(
    path: &Path,
    mut open: impl FnMut() -> Result<T, OpenError>,
) -> CliResult<T> {
    let started = Instant::now();
    let mut announced = false;
    loop {
        let in_use = match open() {
            Ok(v) => return Ok(v),
            Err(e @ OpenError::InUse { .. }) => e,
            Err(e) => return Err(e.into()),
        };
        // The file whose lock is held: `path`, or the image behind the loop device
        // `path` names.
        let held = match &in_use {
            OpenError::InUse { path } => path.clone(),
            _ => path.to_path_buf(),
        };
        // Held by anything else (a mount that is up, `record`, a C program): the
        // in-use message at once, as before.
        let Some(holder) = letting_go(&held) else {
            return Err(in_use.into());
        };
        let waited = started.elapsed();
        if waited >= UNMOUNT_WAIT_MAX {
            return Err(CliError::new(format!(
                "{} is still held by {}; waited {:.1} s for it to let go",
                path.display(),
                holder.describe(),
                waited.as_secs_f64()
            ))
            .hint(match holder {
                LettingGo::Daemon(_) => "it is finishing an unmount (writing what it gathered, committing) or starting a mount, and its log says which: try again once the log says `unmounted, journal committed`",
                _ => "the kernel has yet to release what the exited process held (its last writes in flight); try again, and if it persists see dmesg",
            }));
        }
        if !announced && waited >= UNMOUNT_WAIT_NOTE_AFTER {
            eprintln!(
                "dvrfs: waiting for {} to let go of {} (up to {} s)",
                holder.describe(),
                path.display(),
                UNMOUNT_WAIT_MAX.as_secs()
            );
            announced = true;
        }
        std::thread::sleep(UNMOUNT_WAIT_RETRY);
    }
}

/// A holder of the volume's lock that is letting go of it, and is waited for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum LettingGo {
    /// A `dvrfs mount` daemon whose mount is gone: it is unmounting (or starting).
    Daemon(u32),
    /// A process that has exited or is exiting (killed): the kernel drops its lock
    /// when the last reference to its open file goes, which its io_uring ring, torn
    /// down after the process, can delay by a few milliseconds, and which a process
    /// with a `kill -9` still pending has not even begun.
    Exiting(u32),
    /// Nobody holds it any more: it was let go between the failed try and the look
    /// at `/proc/locks`.
    Released,
}

impl LettingGo {
    fn describe(self) -> String {
        match self {
            LettingGo::Daemon(pid) => {
                format!("the dvrfs mount daemon (pid {pid}), which no longer has it mounted")
            }
            LettingGo::Exiting(pid) => format!("process {pid}, which is exiting"),
            LettingGo::Released => "an earlier holder (no longer in /proc/locks)".into(),
        }
    }
}

/// Who holds the lock of `path`, when each holder is letting go of it (see
/// [`LettingGo`]); `None` when one of them is using the volume.
fn letting_go(path: &Path) -> Option<LettingGo> {
    let locks = std::fs::read_to_string("/proc/locks").ok()?;
    let holders = lock_holders(&locks, path);
    if holders.is_empty() {
        return Some(LettingGo::Released);
    }
    let mounted = mounted_at(path).is_some();
    let mut first = None;
    for pid in holders {
        let h = if exiting(pid) {
            LettingGo::Exiting(pid)
        } else if !mounted && runs_dvrfs_mount(&command_line(pid)) {
            LettingGo::Daemon(pid)
        } else {
            return None;
        };
        first.get_or_insert(h);
    }
    first
}

/// Whether process `pid` has exited or is on its way out: gone, a zombie, its memory
/// (and with it its command line) already released, or a SIGKILL pending (`kill -9`
/// returns before the process has run its exit; its files, and their locks, go last).
fn exiting(pid: u32) -> bool {
    let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
        return true;
    };
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .map(str::trim)
            .unwrap_or("")
    };
    if matches!(field("State:").chars().next(), Some('Z' | 'X')) {
        return true;
    }
    // Pending signals as a hex mask, bit N-1 for signal N.
    let kill_bit = 1u64 << (libc::SIGKILL - 1);
    let pending =
        |name: &str| u64::from_str_radix(field(name), 16).is_ok_and(|m| m & kill_bit != 0);
    if pending("SigPnd:") || pending("ShdPnd:") {
        return true;
    }
    std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| c.is_empty())
}

fn command_line(pid: u32) -> Vec<String> {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .unwrap_or_default()
        .split(|&b| b == 0)
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect()
}

/// The processes that hold a `flock` on the file `path` names, from the text of
/// `/proc/locks`: lines such as `3: FLOCK  ADVISORY  WRITE 4242 fe:00:10002592 0 EOF`
/// (the holder's pid, then the file's device as hex major:minor and its inode
/// number); a waiter's line has `->` after the number and holds nothing.
fn lock_holders(locks: &str, path: &Path) -> Vec<u32> {
    use std::os::unix::fs::MetadataExt;
    let Ok(md) = std::fs::metadata(path) else {
        return vec![];
    };
    let file = format!(
        "{:02x}:{:02x}:{}",
        libc::major(md.dev()),
        libc::minor(md.dev()),
        md.ino()
    );
    locks
        .lines()
        .filter_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            match f.as_slice() {
                [_, "FLOCK", _, _, pid, at, ..] if *at == file => pid.parse().ok(),
                _ => None,
            }
        })
        .collect()
}

/// Whether a command line runs `dvrfs mount`: `dvrfs mount ...`, the mount helper
/// `mount.fuse.dvrfs SOURCE DIR -o ...`, or `dvrfs SOURCE DIR -o ...` as `mount.fuse3`
/// runs it (the daemon keeps the command line it was forked with).
fn runs_dvrfs_mount(argv: &[String]) -> bool {
    use clap::CommandFactory;
    let Some(name) = argv.first().map(|a| a.rsplit('/').next().unwrap_or(a)) else {
        return false;
    };
    if name.starts_with("mount.") && name.ends_with("dvrfs") {
        return true;
    }
    if name != "dvrfs" {
        return false;
    }
    match argv.get(1).map(String::as_str) {
        Some("mount") => true,
        Some(first) if !first.starts_with('-') => {
            argv.len() >= 3
                && !crate::args::Cli::command()
                    .get_subcommands()
                    .any(|c| c.get_name() == first)
        }
        _ => false,
    }
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

/// The daemon serving the volume on `path` (a `dvrfs mount` of it; `path` may also
/// be the directory it is mounted on), connected, if there is one. A socket left by a daemon that was killed is named on stderr and
/// ignored: the volume is then opened directly (its lock went with the daemon). A
/// daemon that refuses this client (a user the mount does not let in, another
/// protocol version) is an error saying why.
pub fn daemon(path: &Path) -> CliResult<Option<dvrfs_remote::Client>> {
    use dvrfs_remote::Reach;
    // The mount point names the volume as well as the image does.
    let image = std::fs::canonicalize(path)
        .ok()
        .filter(|p| p.is_dir())
        .and_then(|dir| mount_on(&dir))
        .filter(|m| m.fstype == "fuse.dvrfs" || m.fstype == "fuse")
        .map(|m| PathBuf::from(m.source));
    match dvrfs_remote::reach(image.as_deref().unwrap_or(path)) {
        Reach::Direct => Ok(None),
        Reach::Daemon(c) => Ok(Some(c)),
        Reach::Stale(sock) => {
            // Said only while the dead daemon's mount is still there: a socket
            // outlives its daemon (kill -9) and, once the mount is taken away, names
            // nothing anyone needs to hear of (the next daemon of that name replaces
            // it; a new image may even reuse the inode number).
            if mounted_at(image.as_deref().unwrap_or(path)).is_some() {
                eprintln!(
                    "dvrfs: note: the dvrfs mount daemon of {} is gone (its socket {} refuses connections; killed?); opening the volume directly",
                    path.display(),
                    sock.display()
                );
            }
            Ok(None)
        }
        Reach::Refused(why) => Err(CliError::new(format!(
            "the dvrfs mount daemon of {} refused this command: {why}",
            path.display()
        ))
        .hint("the daemon that has the volume mounted decides who may use it (dvrfs mount --allow-other lets other users in); its log says more")),
    }
}

/// The volume on `path` for the data commands: through its daemon when it is
/// mounted, else opened here in the runtime (io_uring, or its thread pool).
pub fn open_handle(path: &Path, access: Access) -> CliResult<dvrfs_remote::Handle> {
    match daemon(path)? {
        Some(c) => Ok(dvrfs_remote::Handle::Remote(c)),
        None => Ok(dvrfs_remote::Handle::Local(open_runtime(path, access)?)),
    }
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

/// One line of `/proc/self/mountinfo`: where, what and from where.
#[derive(Clone)]
pub struct MountEntry {
    /// The mount's id, and its parent's (a mount stacked on another has the other's
    /// id as its parent).
    pub id: u64,
    pub parent: u64,
    /// The file system's device number, `major:minor` (a FUSE connection's own).
    pub dev: String,
    pub mountpoint: PathBuf,
    /// `fuse.dvrfs` for `dvrfs mount` (`fuse` from an older kernel or mount).
    pub fstype: String,
    pub source: String,
}

/// The mounts of this process's namespace, oldest first, from `/proc/self/mountinfo`
/// (nothing when it cannot be read).
pub fn mounts() -> Vec<MountEntry> {
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
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    info.lines()
        .filter_map(|line| {
            let (left, right) = line.split_once(" - ")?;
            let mut r = right.split(' ');
            let (fstype, source) = (r.next()?, r.next()?);
            let l: Vec<&str> = left.split(' ').collect();
            Some(MountEntry {
                id: l.first()?.parse().ok()?,
                parent: l.get(1)?.parse().ok()?,
                dev: l.get(2)?.to_string(),
                mountpoint: PathBuf::from(unescape(l.get(4)?)),
                fstype: fstype.to_string(),
                source: unescape(source),
            })
        })
        .collect()
}

/// Where the volume on `path` is mounted by `dvrfs mount`, if it is: a `fuse.dvrfs`
/// line of `/proc/self/mountinfo` whose source is this image or device, or a loop
/// device over this image.
pub fn mounted_at(path: &Path) -> Option<PathBuf> {
    let path = std::fs::canonicalize(path).ok()?;
    mounts().into_iter().find_map(|m| {
        // `fuse.dvrfs` (the kernel took the subtype), or `fuse` from an older mount.
        let dvrfs = m.fstype == "fuse.dvrfs" || m.fstype == "fuse";
        let source = Path::new(&m.source);
        let this = source == path || loop_backing_file(source).is_some_and(|b| b == path);
        (dvrfs && this).then_some(m.mountpoint)
    })
}

/// The error for `path`, a FUSE mount whose daemon has stopped (killed, crashed):
/// every look at it fails with ENOTCONN ("Transport endpoint is not connected") until
/// it is unmounted. Says what it is, what was mounted there if the mount table names
/// it, and how to take it away.
pub fn dead_mount(path: &Path) -> CliError {
    // `canonicalize` fails on the mount point itself; its parent resolves.
    let dir = match (path.parent(), path.file_name()) {
        (Some(parent), Some(name)) => {
            let parent = if parent.as_os_str().is_empty() {
                Path::new(".")
            } else {
                parent
            };
            std::fs::canonicalize(parent).ok().map(|p| p.join(name))
        }
        _ => std::fs::canonicalize(path).ok(),
    };
    let what = dir
        .and_then(|d| mount_on(&d))
        .map(|m| match m.fstype.as_str() {
            "fuse.dvrfs" | "fuse" => format!(" (it was the dvrfs mount of {})", m.source),
            t => format!(" (it was a {t} mount of {})", m.source),
        })
        .unwrap_or_default();
    CliError::new(format!(
        "{} is a FUSE mount whose daemon has stopped{what}: every access to it fails with `Transport endpoint is not connected`",
        path.display()
    ))
    .hint(format!(
        "unmount it: fusermount3 -uz {p} (or, as root, umount -l {p}); then mount the volume again (a dvrfs volume replays its journal: nothing committed is lost)",
        p = path.display()
    ))
}

/// The image file behind the loop device `dev`, as sysfs names it, if `dev` is one.
pub fn loop_backing_file(dev: &Path) -> Option<PathBuf> {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    let md = std::fs::metadata(dev).ok()?;
    if !md.file_type().is_block_device() {
        return None;
    }
    let name = std::fs::read_to_string(format!(
        "/sys/dev/block/{}:{}/loop/backing_file",
        libc::major(md.rdev()),
        libc::minor(md.rdev())
    ))
    .ok()?;
    std::fs::canonicalize(name.trim_end_matches('\n')).ok()
}

/// What is mounted on the directory `dir` (canonical), if it is a mount point: the
/// latest mount there, the one its path shows.
pub fn mount_on(dir: &Path) -> Option<MountEntry> {
    mounts().into_iter().rev().find(|m| m.mountpoint == dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mount_daemon_is_known_by_its_command_line() {
        let argv = |s: &str| -> Vec<String> { s.split(' ').map(str::to_string).collect() };
        for yes in [
            "dvrfs mount rec.img /mnt/rec",
            "/usr/local/bin/dvrfs mount -f rec.img /mnt/rec --log x",
            "/sbin/mount.fuse.dvrfs /srv/rec.img /mnt/rec -o rw",
            "dvrfs /srv/rec.img /mnt/rec -o rw,device_model=avfs-250g",
        ] {
            assert!(runs_dvrfs_mount(&argv(yes)), "{yes}");
        }
        for no in [
            "dvrfs record rec.img /a.ts --rate 4M",
            "dvrfs info rec.img",
            "dvrfs --help",
            "dvrfs",
            "cat rec.img",
            "mount.fuse3 rec.img /mnt/rec",
        ] {
            assert!(!runs_dvrfs_mount(&argv(no)), "{no}");
        }
    }

    #[test]
    fn lock_holders_are_read_from_proc_locks() {
        use std::os::unix::fs::MetadataExt;
        let me = std::env::current_exe().expect("the test's path");
        let md = std::fs::metadata(&me).expect("stat");
        let at = format!(
            "{:02x}:{:02x}:{}",
            libc::major(md.dev()),
            libc::minor(md.dev()),
            md.ino()
        );
        let locks = format!(
            "1: FLOCK  ADVISORY  WRITE 4242 {at} 0 EOF\n\
             1: -> FLOCK  ADVISORY  WRITE 4343 {at} 0 EOF\n\
             2: POSIX  ADVISORY  WRITE 4444 {at} 0 EOF\n\
             3: FLOCK  ADVISORY  READ 4545 {at}9 0 EOF\n\
             4: FLOCK  ADVISORY  READ 4646 {at} 0 EOF\n"
        );
        assert_eq!(lock_holders(&locks, &me), [4242, 4646]);
    }
}
