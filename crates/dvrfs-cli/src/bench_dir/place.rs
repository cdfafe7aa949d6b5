//! Where `bench --dir` runs: the file system that holds the directory, the block
//! device under it and that device's I/O scheduler, and whether the device is a
//! loop device over a `dvrfs emulate` disk, whose `stats` and `timing` files the
//! run reads and writes.
//!
//! The emulator's contract (docs/emulate.md): next to the served `disk` file, `stats`
//! is one JSON object with (among others) `model`, `busy_ns` and `energy_j` (a number
//! or null), and writing `off` or `on` to `timing` turns the disk model's timing off
//! (commands complete at host speed and are not counted as busy) or on. Nothing here
//! guesses: what cannot be found out is `None`, with the reason.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

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

/// One snapshot of the emulator's `stats`.
#[derive(Clone, Debug, PartialEq)]
pub struct EmuStats {
    pub model: String,
    pub busy_ns: u64,
    pub energy_j: Option<f64>,
}

/// Parses the emulator's `stats` JSON.
pub fn parse_stats(text: &str) -> Result<EmuStats, String> {
    let v: serde_json::Value = serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
    let busy_ns = v
        .get("busy_ns")
        .and_then(|b| b.as_u64())
        .ok_or("no busy_ns")?;
    let model = v
        .get("model")
        .and_then(|m| m.as_str())
        .unwrap_or("unknown")
        .to_string();
    let energy_j = v.get("energy_j").and_then(|e| e.as_f64());
    Ok(EmuStats {
        model,
        busy_ns,
        energy_j,
    })
}

/// Reads the emulator's `stats` in `dir`.
pub fn read_stats(dir: &Path) -> Result<EmuStats, String> {
    let p = dir.join("stats");
    let text = std::fs::read_to_string(&p).map_err(|e| format!("{}: {e}", p.display()))?;
    parse_stats(&text).map_err(|e| format!("{}: {e}", p.display()))
}

/// Turns the emulator's timing on or off.
pub fn set_timing(dir: &Path, on: bool) -> std::io::Result<()> {
    std::fs::write(dir.join("timing"), if on { "on" } else { "off" })
}

/// What a measured run used of the disk, from two snapshots `elapsed_ns` apart:
/// (utilization, energy in J, mean power in W).
pub fn usage(before: &EmuStats, after: &EmuStats, elapsed_ns: u64) -> (f64, Option<f64>) {
    assert!(
        after.busy_ns >= before.busy_ns,
        "the emulator's busy time only grows"
    );
    let util = (after.busy_ns - before.busy_ns) as f64 / elapsed_ns.max(1) as f64;
    let energy = match (before.energy_j, after.energy_j) {
        (Some(b), Some(a)) => Some(a - b),
        _ => None,
    };
    (util, energy)
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

/// The whole block device holding `maj:min` (a partition's parent), by name.
fn block_device(maj: u64, min: u64, source: Option<&str>) -> Option<String> {
    let sys = PathBuf::from(format!("/sys/dev/block/{maj}:{min}"));
    let dir = std::fs::canonicalize(&sys).ok().or_else(|| {
        // btrfs reports an anonymous device number: the mount source names the device.
        let name = Path::new(source?.strip_prefix("/dev/")?).file_name()?;
        std::fs::canonicalize(Path::new("/sys/class/block").join(name)).ok()
    })?;
    let whole = if dir.join("partition").exists() {
        dir.parent()?.to_path_buf()
    } else {
        dir
    };
    Some(whole.file_name()?.to_string_lossy().into_owned())
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
    let mount = std::fs::read_to_string("/proc/self/mountinfo")
        .ok()
        .and_then(|m| mount_of(&m, maj, min));
    place.fs_type = mount.as_ref().map(|(_, fs)| fs.clone());
    place.device = block_device(maj, min, mount.as_ref().map(|(s, _)| s.as_str()));
    let Some(dev) = place.device.clone() else {
        place.no_emulator = "the file system is on no block device".into();
        return place;
    };
    let block = Path::new("/sys/block").join(&dev);
    place.scheduler = std::fs::read_to_string(block.join("queue/scheduler"))
        .ok()
        .and_then(|l| active_scheduler(&l));
    let backing = match std::fs::read_to_string(block.join("loop/backing_file")) {
        Ok(b) => PathBuf::from(b.trim()),
        Err(_) => {
            place.no_emulator = format!("{dev} is not a loop device");
            return place;
        }
    };
    let Some(dir) = backing.parent().map(Path::to_path_buf) else {
        place.no_emulator = format!("{dev}'s backing file has no directory");
        return place;
    };
    match read_stats(&dir) {
        Ok(_) => place.emulator = Some(dir),
        Err(e) => {
            place.no_emulator = format!(
                "{dev} is backed by {}, not an emulated disk ({e})",
                backing.display()
            )
        }
    }
    place
}

#[cfg(test)]
mod tests {
    use super::*;

    const STATS: &str = r#"{"model":"avfs-250g","image":"/tmp/a.img","pid":7,"ncq":32,
        "sector_bytes":512,"capacity_bytes":250000000000,"loop":"/dev/loop3","timing":true,
        "uptime_ns":5,"commands":10,"reads":6,"writes":4,"flushes":1,"bytes_read":1,
        "bytes_written":2,"busy_ns":BUSY,"max_queue_depth":3,"late_commands":0,
        "max_late_ns":0,"untimed_commands":0,"energy_j":ENERGY}"#;

    fn stats(busy: u64, energy: &str) -> String {
        STATS
            .replace("BUSY", &busy.to_string())
            .replace("ENERGY", energy)
    }

    #[test]
    fn the_stats_reader_parses_the_contract_and_takes_utilization_from_two_snapshots() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("stats"), stats(1_000_000_000, "12.5")).unwrap();
        let a = read_stats(dir.path()).unwrap();
        assert_eq!(a.model, "avfs-250g");
        assert_eq!(a.busy_ns, 1_000_000_000);
        assert_eq!(a.energy_j, Some(12.5));
        std::fs::write(dir.path().join("stats"), stats(4_000_000_000, "42.5")).unwrap();
        let b = read_stats(dir.path()).unwrap();
        let (util, energy) = usage(&a, &b, 10_000_000_000);
        assert_eq!(util, 0.3);
        assert_eq!(energy, Some(30.0));
        let c = parse_stats(&stats(5_000_000_000, "null")).unwrap();
        assert_eq!(c.energy_j, None);
        assert_eq!(usage(&b, &c, 1_000_000_000).1, None);
    }

    #[test]
    fn a_stats_file_without_busy_time_is_refused() {
        assert!(parse_stats(r#"{"model":"x"}"#).is_err());
        assert!(parse_stats("not json").is_err());
    }

    #[test]
    fn the_active_scheduler_is_the_bracketed_one() {
        assert_eq!(
            active_scheduler("none [mq-deadline] kyber bfq\n").as_deref(),
            Some("mq-deadline")
        );
        assert_eq!(active_scheduler("none\n"), None);
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
