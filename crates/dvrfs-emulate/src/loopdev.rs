//! The loop device on `DIR/disk`: attach, mark rotational, check what uses it,
//! detach. Uses util-linux `losetup` (the kernel's `LOOP_CONFIGURE` through the tool
//! every administrator knows), and sysfs.
//!
//! Contract: [`attach`] returns the device (`/dev/loopN`) configured with direct I/O
//! (`--direct-io=on`: the loop device bypasses the page cache of the file under it,
//! so with the FUSE file opened direct nothing caches the emulated disk) and the
//! given logical sector, `rotational` = 1 (the kernel's schedulers and file
//! systems then treat it as the hard disk it emulates) and no discard
//! (`discard_max_bytes` = 0: a hard disk has no TRIM). [`in_use`] says what holds
//! a device (a mounted file system, a holder such as device-mapper), so that a stop
//! never pulls a disk from under a file system.

use std::path::Path;
use std::process::Command;

/// Why a loop device could not be made or let go.
#[derive(Debug, thiserror::Error)]
pub enum LoopError {
    #[error("losetup (util-linux) is not installed or cannot run: {0}")]
    NoLosetup(std::io::Error),
    #[error("losetup failed: {0}")]
    Losetup(String),
    #[error("{dev}: cannot set rotational: {source}")]
    Rotational { dev: String, source: std::io::Error },
    #[error("{dev}: cannot turn discard off (a hard disk has none): {source}")]
    Discard { dev: String, source: std::io::Error },
}

fn losetup(args: &[&std::ffi::OsStr]) -> Result<String, LoopError> {
    let out = Command::new("losetup")
        .args(args)
        .output()
        .map_err(LoopError::NoLosetup)?;
    if !out.status.success() {
        return Err(LoopError::Losetup(
            String::from_utf8_lossy(&out.stderr).trim().to_string(),
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// `loopN` of `/dev/loopN`.
fn name(dev: &str) -> &str {
    dev.rsplit('/').next().unwrap_or(dev)
}

/// Attaches a loop device to `file` (see the module docs); its name.
pub fn attach(file: &Path, sector_bytes: u32) -> Result<String, LoopError> {
    let sector = sector_bytes.to_string();
    let dev = losetup(&[
        "--find".as_ref(),
        "--show".as_ref(),
        "--direct-io=on".as_ref(),
        "--sector-size".as_ref(),
        sector.as_ref(),
        file.as_os_str(),
    ])?;
    if !dev.starts_with("/dev/loop") {
        return Err(LoopError::Losetup(format!(
            "losetup printed {dev:?}, not a loop device"
        )));
    }
    let rot = format!("/sys/block/{}/queue/rotational", name(&dev));
    if let Err(source) = std::fs::write(&rot, "1") {
        let _ = detach(&dev);
        return Err(LoopError::Rotational { dev, source });
    }
    // A hard disk takes no discard (TRIM): without this a loop device offers it, and a
    // file system that discards when it can (btrfs's `discard=async`) would send the
    // emulated disk commands no real one gets.
    let discard = format!("/sys/block/{}/queue/discard_max_bytes", name(&dev));
    if let Err(source) = std::fs::write(&discard, "0") {
        let _ = detach(&dev);
        return Err(LoopError::Discard { dev, source });
    }
    // `--direct-io=on` is a request: losetup falls back to buffered when the file
    // refuses it. Buffered would put the page cache in front of the emulated disk.
    let dio =
        std::fs::read_to_string(format!("/sys/block/{}/loop/dio", name(&dev))).unwrap_or_default();
    if dio.trim() != "1" {
        let _ = detach(&dev);
        return Err(LoopError::Losetup(format!(
            "{dev} did not take direct I/O (sysfs loop/dio is {:?}): the page cache would hide the disk",
            dio.trim()
        )));
    }
    Ok(dev)
}

/// Detaches `dev` (the kernel lets it go once nothing has it open).
pub fn detach(dev: &str) -> Result<(), LoopError> {
    losetup(&["-d".as_ref(), dev.as_ref()]).map(|_| ())
}

/// Whether `dev` is still attached (sysfs shows its backing file).
pub fn attached(dev: &str) -> bool {
    Path::new(&format!("/sys/block/{}/loop/backing_file", name(dev))).exists()
}

/// What uses `dev`, as a sentence saying what to undo first; `None` when nothing
/// does (no file system mounted from it, no holder).
pub fn in_use(dev: &str) -> Option<String> {
    let n = name(dev);
    let majmin = std::fs::read_to_string(format!("/sys/block/{n}/dev"))
        .map(|s| s.trim().to_string())
        .unwrap_or_default();
    let mounted: Vec<String> = std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            let sep = f.iter().position(|x| *x == "-")?;
            let source = f.get(sep + 2)?;
            let hit = (!majmin.is_empty() && f.get(2) == Some(&majmin.as_str()))
                || *source == dev
                || source.starts_with(&format!("{dev}p"));
            hit.then(|| f.get(4).map(|m| m.to_string()))?
        })
        .collect();
    if !mounted.is_empty() {
        return Some(format!(
            "a file system on {dev} is mounted at {}: unmount it first (umount {})",
            mounted.join(", "),
            mounted[0]
        ));
    }
    let holders: Vec<String> = std::fs::read_dir(format!("/sys/block/{n}/holders"))
        .map(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    if !holders.is_empty() {
        return Some(format!(
            "{dev} is held by {} (device-mapper, md or similar): remove that first",
            holders.join(", ")
        ));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_device_nobody_uses_is_free() {
        // No such device: nothing mounted from it, no holders.
        assert_eq!(in_use("/dev/loop987654"), None);
        assert!(!attached("/dev/loop987654"));
        assert_eq!(name("/dev/loop7"), "loop7");
    }
}
