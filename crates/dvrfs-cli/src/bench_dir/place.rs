//! Where `bench --dir` runs: the file system that holds the directory, the block
//! device under it and that device's I/O scheduler, and whether the device is a
//! loop device over a `dvrfs emulate` disk, whose `stats` and `timing` files the
//! run reads and writes.
//!
//! The emulator behind a loop device is found, and its files read, by the reader
//! `bench TARGET` shares (`crate::emulated`). Nothing here guesses: what cannot be
//! found out is `None`, with the reason.

use std::os::unix::ffi::OsStringExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use crate::emulated;

/// The file system and device under a directory.
#[derive(Clone, Debug, Default)]
pub struct Place {
    /// File system type from `/proc/self/mountinfo` (e.g. "ext4"), if found.
    pub fs_type: Option<String>,
    /// The whole block device (e.g. "loop3"), if found.
    pub device: Option<String>,
    /// Its active I/O scheduler (e.g. "mq-deadline"), if it has one.
    pub scheduler: Option<String>,
    /// The emulator's directory (holding `disk`, `stats`, `timing`) when the device
    /// is a loop device over an emulated disk.
    pub emulator: Option<PathBuf>,
    /// Why there is no emulator, for the report.
    pub no_emulator: String,
}

/// The active scheduler in a `queue/scheduler` line: the bracketed name.
pub fn active_scheduler(line: &str) -> Option<String> {
    let open = line.find('[')?;
    let close = line[open..].find(']')? + open;
    Some(line[open + 1..close].to_string())
}

/// The mountinfo line whose device is `maj:min`: (mount source, file system type).
fn mount_of(mountinfo: &str, maj: u64, min: u64) -> Option<(String, String)> {
    let dev = format!("{maj}:{min}");
    // The last match: a later mount on the same device hides an earlier one.
    mountinfo
        .lines()
        .filter(|l| l.split(' ').nth(2) == Some(dev.as_str()))
        .filter_map(|l| {
            let rest = l.split(" - ").nth(1)?;
            let mut f = rest.split(' ');
            let fs = f.next()?.to_string();
            let source = f.next()?.to_string();
            Some((source, fs))
        })
        .next_back()
}

/// The mountinfo line of the mount `path` (canonical) is under: the deepest mount
/// point that contains it, the last mounted there. For btrfs, whose `stat` device
/// (one anonymous number per subvolume) is not the one mountinfo lists.
fn mount_under(mountinfo: &str, path: &Path) -> Option<(String, String)> {
    mountinfo
        .lines()
        .filter_map(|l| {
            let point = unescape(l.split(' ').nth(4)?);
            let rest = l.split(" - ").nth(1)?;
            let mut f = rest.split(' ');
            let fs = f.next()?.to_string();
            let source = f.next()?.to_string();
            path.starts_with(&point).then_some((point, source, fs))
        })
        // Deepest point; among equals the last one (it hides the earlier).
        .fold(None::<(PathBuf, String, String)>, |best, m| match &best {
            Some(b) if b.0.components().count() > m.0.components().count() => best,
            _ => Some(m),
        })
        .map(|(_, source, fs)| (source, fs))
}

/// A mountinfo path field: spaces, tabs, newlines and backslashes come octal-escaped.
fn unescape(field: &str) -> PathBuf {
    let b = field.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let oct = b
            .get(i + 1..i + 4)
            .filter(|d| d.iter().all(|c| (b'0'..=b'7').contains(c)));
        match (b[i], oct) {
            (b'\\', Some(d)) => {
                out.push((d[0] - b'0') * 64 + (d[1] - b'0') * 8 + (d[2] - b'0'));
                i += 4;
            }
            (c, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    PathBuf::from(std::ffi::OsString::from_vec(out))
}

/// The whole block device holding `maj:min` (a partition's parent), by name.
fn block_device(maj: u64, min: u64, source: Option<&str>) -> Option<String> {
    let sys = PathBuf::from(format!("/sys/dev/block/{maj}:{min}"));
    let dir = std::fs::canonicalize(&sys).ok().or_else(|| {
        // btrfs reports an anonymous device number: the mount source names the device.
        let name = Path::new(source?.strip_prefix("/dev/")?).file_name()?;
        std::fs::canonicalize(Path::new("/sys/class/block").join(name)).ok()
    })?;
    emulated::whole_device(&dir)
}

/// Finds out where `path` lives (see [`Place`]).
pub fn find(path: &Path) -> Place {
    let mut place = Place::default();
    let Ok(meta) = std::fs::metadata(path) else {
        place.no_emulator = "the directory cannot be stat'ed".into();
        return place;
    };
    let (maj, min) = (
        libc::major(meta.dev()) as u64,
        libc::minor(meta.dev()) as u64,
    );
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let canon = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
    let mount = mount_of(&info, maj, min).or_else(|| mount_under(&info, &canon));
    place.fs_type = mount.as_ref().map(|(_, fs)| fs.clone());
    place.device = block_device(maj, min, mount.as_ref().map(|(s, _)| s.as_str()));
    let Some(dev) = place.device.clone() else {
        place.no_emulator = "the file system is on no block device".into();
        return place;
    };
    place.scheduler =
        std::fs::read_to_string(Path::new("/sys/block").join(&dev).join("queue/scheduler"))
            .ok()
            .and_then(|l| active_scheduler(&l));
    match emulated::behind_device(&dev) {
        Ok(dir) => place.emulator = Some(dir),
        Err(why) => place.no_emulator = why,
    }
    place
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_active_scheduler_is_the_bracketed_one() {
        assert_eq!(
            active_scheduler("none [mq-deadline] kyber bfq\n").as_deref(),
            Some("mq-deadline")
        );
        assert_eq!(active_scheduler("none\n"), None);
    }

    #[test]
    fn a_btrfs_mount_is_found_by_its_mount_point() {
        // btrfs: stat gives 0:40 under /b, mountinfo lists 0:39.
        let info = "22 1 8:1 / / rw - ext4 /dev/sda1 rw\n\
                    43 22 0:39 / /b rw - btrfs /dev/loop4 rw\n\
                    44 22 0:50 / /b\\040c rw - tmpfs none rw\n";
        assert_eq!(mount_of(info, 0, 40), None);
        assert_eq!(
            mount_under(info, Path::new("/b/dvrfs-bench")),
            Some(("/dev/loop4".into(), "btrfs".into()))
        );
        assert_eq!(
            mount_under(info, Path::new("/b c/x")),
            Some(("none".into(), "tmpfs".into()))
        );
        assert_eq!(
            mount_under(info, Path::new("/srv")),
            Some(("/dev/sda1".into(), "ext4".into()))
        );
    }

    #[test]
    fn mountinfo_names_the_file_system_of_a_device() {
        let m = "22 1 7:3 / /mnt rw,relatime shared:1 - ext4 /dev/loop3 rw\n\
                 23 1 0:41 / /b rw - btrfs /dev/loop4 rw\n";
        assert_eq!(
            mount_of(m, 7, 3),
            Some(("/dev/loop3".into(), "ext4".into()))
        );
        assert_eq!(
            mount_of(m, 0, 41),
            Some(("/dev/loop4".into(), "btrfs".into()))
        );
        assert_eq!(mount_of(m, 8, 1), None);
    }
}
