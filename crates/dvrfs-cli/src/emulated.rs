//! The reader of a `dvrfs emulate` disk as other commands see it: the emulator
//! behind a loop device, its `stats` and its `timing` switch. `bench --dir` (through
//! `bench_dir/place.rs`) and `bench TARGET` (`cmd_bench.rs`) both measure with it, so
//! that every stack in a comparison is measured by the same meter.
//!
//! The emulator's contract (docs/emulate.md): next to the served `disk` file, `stats`
//! is one JSON object with (among others) `model`, `model_file` (a path or null),
//! `busy_ns` and `energy_j` (a number or null), and writing `off` or `on` to
//! `timing` turns the disk model's timing off (commands complete at host speed and
//! are not counted as busy) or on. A loop device is over an emulated disk when its
//! sysfs `loop/backing_file` sits beside a readable `stats`. Nothing here guesses:
//! what cannot be found out is an error string, with the reason.

use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

/// One snapshot of the emulator's `stats`.
#[derive(Clone, Debug, PartialEq)]
pub struct EmuStats {
    pub model: String,
    /// The model file's absolute path (`None` for a built-in model, or an emulator
    /// older than the key).
    pub model_file: Option<PathBuf>,
    pub busy_ns: u64,
    pub energy_j: Option<f64>,
}

impl EmuStats {
    /// What `load_disk` takes to load the emulator's model: the file when there is
    /// one, else the built-in name.
    pub fn model_spec(&self) -> String {
        match &self.model_file {
            Some(f) => f.display().to_string(),
            None => self.model.clone(),
        }
    }
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
    let model_file = v
        .get("model_file")
        .and_then(|m| m.as_str())
        .map(PathBuf::from);
    let energy_j = v.get("energy_j").and_then(|e| e.as_f64());
    Ok(EmuStats {
        model,
        model_file,
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
/// (utilization, energy in J).
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

/// The whole block device a sysfs block directory (canonical, under
/// `/sys/devices`) belongs to, by name: a partition's parent, or itself.
pub fn whole_device(sys_dir: &Path) -> Option<String> {
    let whole = if sys_dir.join("partition").exists() {
        sys_dir.parent()?
    } else {
        sys_dir
    };
    Some(whole.file_name()?.to_string_lossy().into_owned())
}

/// The emulator's directory behind the whole block device `dev` (e.g. "loop3"), or
/// why there is none.
pub fn behind_device(dev: &str) -> Result<PathBuf, String> {
    let block = Path::new("/sys/block").join(dev);
    let backing = match std::fs::read_to_string(block.join("loop/backing_file")) {
        Ok(b) => PathBuf::from(b.trim()),
        Err(_) => return Err(format!("{dev} is not a loop device")),
    };
    let Some(dir) = backing.parent().map(Path::to_path_buf) else {
        return Err(format!("{dev}'s backing file has no directory"));
    };
    match read_stats(&dir) {
        Ok(_) => Ok(dir),
        Err(e) => Err(format!(
            "{dev} is backed by {}, not an emulated disk ({e})",
            backing.display()
        )),
    }
}

/// An emulated disk under a block device path.
#[derive(Clone, Debug)]
pub struct Emulated {
    /// The emulator's directory (holding `disk`, `stats`, `timing`).
    pub dir: PathBuf,
    /// The whole device's name (e.g. "loop3").
    pub device: String,
    /// The stats when it was found.
    pub stats: EmuStats,
}

/// The emulated disk under `target` when `target` is a block device (or a partition
/// of one) whose loop device serves a `dvrfs emulate` disk; `None` for anything else
/// (an image file, another device).
pub fn of_block_device(target: &Path) -> Option<Emulated> {
    let meta = std::fs::metadata(target).ok()?;
    if !meta.file_type().is_block_device() {
        return None;
    }
    let (maj, min) = (libc::major(meta.rdev()), libc::minor(meta.rdev()));
    let sys = std::fs::canonicalize(format!("/sys/dev/block/{maj}:{min}")).ok()?;
    let device = whole_device(&sys)?;
    let dir = behind_device(&device).ok()?;
    let stats = read_stats(&dir).ok()?;
    Some(Emulated { dir, device, stats })
}

/// Turns the emulator's timing off while it lives (preparation at host speed), and
/// back on when dropped, after an error too.
pub struct UntimedWhile {
    dir: PathBuf,
}

impl UntimedWhile {
    pub fn start(dir: &Path) -> std::io::Result<UntimedWhile> {
        set_timing(dir, false)?;
        Ok(UntimedWhile {
            dir: dir.to_path_buf(),
        })
    }
}

impl Drop for UntimedWhile {
    fn drop(&mut self) {
        if let Err(e) = set_timing(&self.dir, true) {
            eprintln!(
                "dvrfs: warning: cannot turn the emulator's timing back on in {}: {e}",
                self.dir.display()
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const STATS: &str = r#"{"model":"avfs-250g","model_file":MODEL_FILE,"image":"/tmp/a.img",
        "pid":7,"ncq":32,"sector_bytes":512,"capacity_bytes":250000000000,"loop":"/dev/loop3",
        "timing":true,"uptime_ns":5,"commands":10,"reads":6,"writes":4,"flushes":1,
        "bytes_read":1,"bytes_written":2,"busy_ns":BUSY,"max_queue_depth":3,
        "late_commands":0,"max_late_ns":0,"untimed_commands":0,"energy_j":ENERGY}"#;

    fn stats(busy: u64, energy: &str) -> String {
        STATS
            .replace("BUSY", &busy.to_string())
            .replace("ENERGY", energy)
            .replace("MODEL_FILE", "null")
    }

    #[test]
    fn the_stats_reader_parses_the_contract_and_takes_utilization_from_two_snapshots() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("stats"), stats(1_000_000_000, "12.5")).unwrap();
        let a = read_stats(dir.path()).unwrap();
        assert_eq!(a.model, "avfs-250g");
        assert_eq!(a.model_file, None);
        assert_eq!(a.model_spec(), "avfs-250g");
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
    fn a_model_file_is_what_the_model_is_loaded_from() {
        let text = stats(1, "null").replace(
            r#""model_file":null"#,
            r#""model_file":"/etc/disks/mine.json""#,
        );
        let s = parse_stats(&text).unwrap();
        assert_eq!(s.model_file, Some(PathBuf::from("/etc/disks/mine.json")));
        assert_eq!(s.model_spec(), "/etc/disks/mine.json");
    }

    #[test]
    fn a_stats_file_without_busy_time_is_refused() {
        assert!(parse_stats(r#"{"model":"x"}"#).is_err());
        assert!(parse_stats("not json").is_err());
    }

    #[test]
    fn a_partition_belongs_to_its_whole_device() {
        let dir = tempfile::tempdir().unwrap();
        let whole = dir.path().join("loop3");
        let part = whole.join("loop3p1");
        std::fs::create_dir_all(&part).unwrap();
        std::fs::write(part.join("partition"), "1\n").unwrap();
        assert_eq!(whole_device(&part).as_deref(), Some("loop3"));
        assert_eq!(whole_device(&whole).as_deref(), Some("loop3"));
    }

    #[test]
    fn a_regular_file_is_no_emulated_disk() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("image");
        std::fs::write(&f, b"x").unwrap();
        assert!(of_block_device(&f).is_none());
        assert!(of_block_device(&dir.path().join("missing")).is_none());
    }

    #[test]
    fn timing_is_off_while_untimed_and_on_after() {
        let dir = tempfile::tempdir().unwrap();
        let timing = dir.path().join("timing");
        let guard = UntimedWhile::start(dir.path()).unwrap();
        assert_eq!(std::fs::read_to_string(&timing).unwrap(), "off");
        drop(guard);
        assert_eq!(std::fs::read_to_string(&timing).unwrap(), "on");
    }
}
