//! What the emulator has done so far, shared by its threads, and `DIR/stats`, the
//! JSON form other programs read (`dvrfs bench --dir`, `dvrfs emulate --stop`).
//!
//! Contract: the keys of [`Shared::stats_json`] are a published interface
//! (docs/emulate.md): renaming or dropping one breaks its readers. The drive's
//! figures (`commands` .. `max_queue_depth`) are the [`DriveStats`] of the one
//! `Drive`, copied after every batch of completions (with its energy meter, which
//! reports up to the moment the file is read), so they count the commands the
//! drive has completed (not those still queued); commands served with timing off
//! are counted apart (`untimed_commands`), never in the drive's figures.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::Instant;

use dvrfs_core::disk::power::EnergyMeter;
use dvrfs_core::disk::DriveStats;

/// A reply later than this after the model's end time counts as late.
pub const LATE_NS: u64 = 1_000_000;

/// What the emulator serves (fixed at start).
#[derive(Clone, Debug)]
pub struct Info {
    pub model: String,
    /// The model file's absolute path, `None` for a built-in model.
    pub model_file: Option<String>,
    pub image: String,
    pub ncq: u32,
    /// The emulated disk's logical sector (the loop device's).
    pub sector_bytes: u32,
    pub capacity_bytes: u64,
}

/// The counters the drive thread keeps.
#[derive(Clone, Debug, Default)]
pub struct Counters {
    pub drive: DriveStats,
    pub late_commands: u64,
    pub max_late_ns: u64,
    /// A copy of the drive's energy meter after the last batch of completions
    /// (`None`: the model has no power figures).
    pub meter: Option<EnergyMeter>,
}

/// State every thread of the emulator sees.
#[derive(Debug)]
pub struct Shared {
    pub info: Info,
    /// The emulator's time zero: every `_ns` time is measured from here on the
    /// monotonic clock.
    start: Instant,
    timing: AtomicBool,
    untimed_commands: AtomicU64,
    counters: Mutex<Counters>,
    loop_dev: Mutex<Option<String>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Shared {
    pub fn new(info: Info) -> Shared {
        Shared {
            info,
            start: Instant::now(),
            timing: AtomicBool::new(true),
            untimed_commands: AtomicU64::new(0),
            counters: Mutex::new(Counters::default()),
            loop_dev: Mutex::new(None),
        }
    }

    /// Nanoseconds since the emulator started (monotonic).
    pub fn now_ns(&self) -> u64 {
        self.start.elapsed().as_nanos() as u64
    }

    /// The instant `ns` after the start.
    pub fn instant_at(&self, ns: u64) -> Instant {
        self.start + std::time::Duration::from_nanos(ns)
    }

    pub fn timing(&self) -> bool {
        self.timing.load(Ordering::SeqCst)
    }

    pub fn set_timing(&self, on: bool) {
        self.timing.store(on, Ordering::SeqCst);
    }

    pub fn count_untimed(&self) {
        self.untimed_commands.fetch_add(1, Ordering::Relaxed);
    }

    pub fn counters(&self) -> Counters {
        lock(&self.counters).clone()
    }

    pub fn update(&self, f: impl FnOnce(&mut Counters)) {
        f(&mut lock(&self.counters));
    }

    pub fn loop_dev(&self) -> Option<String> {
        lock(&self.loop_dev).clone()
    }

    pub fn set_loop_dev(&self, dev: Option<String>) {
        *lock(&self.loop_dev) = dev;
    }

    /// `DIR/stats` (see the module docs and docs/emulate.md).
    pub fn stats_json(&self) -> serde_json::Value {
        let c = self.counters();
        let d = c.drive;
        let now_ns = self.now_ns();
        serde_json::json!({
            "model": self.info.model,
            "model_file": self.info.model_file,
            "image": self.info.image,
            "pid": std::process::id(),
            "ncq": self.info.ncq,
            "sector_bytes": self.info.sector_bytes,
            "capacity_bytes": self.info.capacity_bytes,
            "loop": self.loop_dev(),
            "timing": self.timing(),
            "uptime_ns": now_ns,
            "commands": d.commands,
            "reads": d.reads,
            "writes": d.writes,
            "flushes": d.flushes,
            "bytes_read": d.bytes_read,
            "bytes_written": d.bytes_written,
            "busy_ns": d.busy_ns,
            "max_queue_depth": d.max_queue_depth,
            "late_commands": c.late_commands,
            "max_late_ns": c.max_late_ns,
            "untimed_commands": self.untimed_commands.load(Ordering::Relaxed),
            // Up to now: the copy accounts the idle time since the last batch too.
            "energy_j": c.meter.as_ref().map(|m| m.report(now_ns).joules),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stats_carry_every_published_key() {
        let s = Shared::new(Info {
            model: "avfs-250g".into(),
            model_file: None,
            image: "/tmp/x.img".into(),
            ncq: 32,
            sector_bytes: 512,
            capacity_bytes: 1 << 30,
        });
        s.update(|c| c.drive.busy_ns = 7);
        let v = s.stats_json();
        let keys = [
            "model",
            "model_file",
            "image",
            "pid",
            "ncq",
            "sector_bytes",
            "capacity_bytes",
            "loop",
            "timing",
            "uptime_ns",
            "commands",
            "reads",
            "writes",
            "flushes",
            "bytes_read",
            "bytes_written",
            "busy_ns",
            "max_queue_depth",
            "late_commands",
            "max_late_ns",
            "untimed_commands",
            "energy_j",
        ];
        let obj = v.as_object().unwrap();
        for k in keys {
            assert!(obj.contains_key(k), "missing {k}");
        }
        assert_eq!(obj.len(), keys.len(), "no key beyond the published ones");
        assert_eq!(v["busy_ns"], 7);
        assert!(v["loop"].is_null() && v["energy_j"].is_null() && v["model_file"].is_null());
        s.set_timing(false);
        s.set_loop_dev(Some("/dev/loop3".into()));
        let v = s.stats_json();
        assert_eq!(v["timing"], false);
        assert_eq!(v["loop"], "/dev/loop3");
    }
}
