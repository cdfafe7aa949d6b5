//! Disk schedulers: one trait, one file per policy.
//!
//! The framework-to-policy hook table, as in Linux's elevator: `insert` a request,
//! `dispatch` when the disk is idle (queue depth 1 on a hard disk), `complete` when the
//! dispatched request finishes, `has_work`. Settings (`SchedSettings`) are separate from
//! run-time state. Every policy keeps [`Counters`], and the conservation law
//! `inserted == dispatched + failed + queued` and `dispatched == completed + in_flight`
//! is checked by the simulator after every run.
//!
//! A request with a deadline is real-time. Under every policy a *read* whose deadline
//! has passed when it would be dispatched is failed ("deadline missed") instead of being
//! served; a write is never dropped: it completes late and counts as a miss.
//!
//! Policies (`--scheduler` names, [`NAMES`]):
//!
//! | name | file | one line |
//! |---|---|---|
//! | `mixer` | [`mixer`] | `avfs` made work-conserving near saturation (the default) |
//! | `avfs` | [`avfs`] | the AVFS traffic mixer exactly as the paper gives it (3.3.3-3.3.5) |
//! | `fifo` | [`fifo`] | arrival order |
//! | `cscan` | [`cscan`] | ascending LBA from the head, wrapping |
//! | `edf` | [`edf`] | earliest deadline first, best-effort after in arrival order |
//! | `scan-edf` | [`scan_edf`] | deadline order, SCAN within a deadline window |
//! | `deadline` | [`deadline`] | deadline-like: a model of Linux mq-deadline |
//! | `cfq` | [`cfq`] | cfq-like: a model of Linux CFQ |
//!
//! **Merged commands.** A policy may serve several contiguous requests with one device
//! command (only `mixer`, and only when [`SchedSettings::merge_max_sectors`] is non-zero;
//! `mixer` also merges a read that overlaps the tail of the previous one by at most
//! [`mixer::RUN_OVERLAP_SECTORS`], and the command then covers the union).
//! It then dispatches a synthetic [`Request`] whose id is at or above [`MERGED_ID_BASE`];
//! the caller must call [`Scheduler::take_merged`] once right after such a dispatch to
//! learn the constituent ids (LBA order), and later reports the completion of the whole
//! command with `complete(merged_id)`. [`Counters`] count constituent requests, so the
//! `in_flight` given to [`Counters::check`] is the number of *requests* on the disk, not
//! of commands. Callers must allocate their own ids below `MERGED_ID_BASE`.

pub mod avfs;
pub mod cfq;
pub mod cscan;
pub mod deadline;
pub mod edf;
pub mod fifo;
mod hold_tree;
pub mod mixer;
pub mod scan_edf;
pub mod testing;

use std::fmt;

/// Identifies a request for its whole life.
pub type ReqId = u64;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request {
    pub id: ReqId,
    pub lba: u64,
    pub sectors: u32,
    pub write: bool,
    /// Absolute deadline (virtual or wall-clock ns); `None` = best-effort.
    pub deadline_ns: Option<u64>,
    /// Who issued it (a stream, a best-effort generator, the journal): CFQ-like
    /// scheduling keeps one queue per owner.
    pub owner: u32,
    pub submit_ns: u64,
}

impl Request {
    pub fn is_realtime(&self) -> bool {
        self.deadline_ns.is_some()
    }
    pub fn end_lba(&self) -> u64 {
        self.lba + self.sectors as u64
    }
}

/// What the scheduler wants the idle disk to do now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Send this request to the disk.
    Dispatch(Request),
    /// This read's deadline has passed: complete it with a "deadline missed" error.
    /// The disk stays idle; ask again.
    Fail(Request),
    /// Nothing to do until `until_ns` (a hold timer), or until a new request arrives
    /// (`None`).
    Wait { until_ns: Option<u64> },
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    pub inserted: u64,
    pub dispatched: u64,
    pub completed: u64,
    pub failed: u64,
}

impl Counters {
    /// The conservation law, given what is still queued and in flight.
    pub fn check(&self, queued: u64, in_flight: u64) -> Result<(), String> {
        if self.inserted != self.dispatched + self.failed + queued {
            return Err(format!(
                "inserted {} != dispatched {} + failed {} + queued {queued}",
                self.inserted, self.dispatched, self.failed
            ));
        }
        if self.dispatched != self.completed + in_flight {
            return Err(format!(
                "dispatched {} != completed {} + in flight {in_flight}",
                self.dispatched, self.completed
            ));
        }
        Ok(())
    }
}

pub trait Scheduler {
    /// The policy's name as `--scheduler` spells it.
    fn name(&self) -> &'static str;
    fn insert(&mut self, req: Request, now_ns: u64);
    /// Called only when the disk is idle.
    fn dispatch(&mut self, now_ns: u64) -> Decision;
    /// The dispatched request `id` finished.
    fn complete(&mut self, id: ReqId, now_ns: u64);
    fn has_work(&self) -> bool;
    /// Requests inserted and neither dispatched nor failed.
    fn queued(&self) -> u64;
    fn counters(&self) -> Counters;
    /// The constituent request ids of the merged command `merged_id` just dispatched
    /// (see the module docs), in LBA order; empty for a plain request. Each merged
    /// command's list is handed out once. Policies that never merge keep the default.
    fn take_merged(&mut self, merged_id: ReqId) -> Vec<ReqId> {
        let _ = merged_id;
        Vec::new()
    }
}

/// Ids at or above this are synthetic ids of merged commands made by a policy.
pub const MERGED_ID_BASE: ReqId = 1 << 63;

/// A service-time estimate for one request (AVFS eq. 1), the seam to
/// `disk::Estimator`. The policies that plan with it (`avfs`, `mixer`) hold one.
pub trait ServiceEstimate {
    /// Estimated time the disk needs for the request, in ns. `sequential` is true when
    /// the request starts where the previous one in execution order ends (no seek).
    fn service_ns(&self, lba: u64, sectors: u32, write: bool, sequential: bool) -> u64;
}

impl<T: ServiceEstimate + ?Sized> ServiceEstimate for Box<T> {
    fn service_ns(&self, lba: u64, sectors: u32, write: bool, sequential: bool) -> u64 {
        (**self).service_ns(lba, sectors, write, sequential)
    }
}

impl<T: ServiceEstimate + ?Sized> ServiceEstimate for std::sync::Arc<T> {
    fn service_ns(&self, lba: u64, sectors: u32, write: bool, sequential: bool) -> u64 {
        (**self).service_ns(lba, sectors, write, sequential)
    }
}

impl<T: ServiceEstimate + ?Sized> ServiceEstimate for &T {
    fn service_ns(&self, lba: u64, sectors: u32, write: bool, sequential: bool) -> u64 {
        (**self).service_ns(lba, sectors, write, sequential)
    }
}

/// The settings shared by the policies (`--margin`, `--urgent`, ...). Tunables that
/// belong to a single policy are named constants at the top of its file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SchedSettings {
    /// AVFS desired completion margin m: a real-time request should complete at least
    /// this long before its deadline (AVFS 4.1: 500 ms).
    pub margin_ns: u64,
    /// AVFS urgent threshold e (< m): requests due within it are served EDF
    /// (AVFS 4.1: 100 ms).
    pub urgent_ns: u64,
    /// Best-effort aging in `avfs`/`mixer`: a best-effort request waiting longer than
    /// this is served before younger ones, oldest first (the paper leaves the rule
    /// open, 3.3.5; 1 s keeps a `ls` responsive without breaking up LBA order).
    pub be_max_age_ns: u64,
    /// Largest merged command `mixer` builds from contiguous requests of a batch, in
    /// sectors; 0 turns merging off. Off by default: the caller must support
    /// [`Scheduler::take_merged`] before turning it on.
    pub merge_max_sectors: u32,
}

impl Default for SchedSettings {
    fn default() -> Self {
        Self {
            margin_ns: 500_000_000,
            urgent_ns: 100_000_000,
            be_max_age_ns: 1_000_000_000,
            merge_max_sectors: 0,
        }
    }
}

/// `--scheduler` names, the default first.
pub const NAMES: &[&str] = &[
    "mixer", "avfs", "fifo", "cscan", "edf", "scan-edf", "deadline", "cfq",
];

/// A `--scheduler` name that is not one of [`NAMES`].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub struct UnknownScheduler {
    pub name: String,
}

impl fmt::Display for UnknownScheduler {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "unknown scheduler `{}`; valid names: {}",
            self.name,
            NAMES.join(", ")
        )
    }
}

/// Builds the policy called `name`. `est` is used by `avfs` and `mixer` only.
pub fn by_name(
    name: &str,
    settings: SchedSettings,
    est: Box<dyn ServiceEstimate>,
) -> Result<Box<dyn Scheduler>, UnknownScheduler> {
    Ok(match name {
        "mixer" => Box::new(mixer::Mixer::new(settings, est)),
        "avfs" => Box::new(avfs::Avfs::new(settings, est)),
        "fifo" => Box::new(fifo::Fifo::new()),
        "cscan" => Box::new(cscan::CScan::new()),
        "edf" => Box::new(edf::Edf::new()),
        "scan-edf" => Box::new(scan_edf::ScanEdf::new()),
        "deadline" => Box::new(deadline::Deadline::new()),
        "cfq" => Box::new(cfq::Cfq::new()),
        _ => {
            return Err(UnknownScheduler {
                name: name.to_string(),
            })
        }
    })
}

/// The common rule: a read whose deadline is at or before `now_ns` is failed instead
/// of served.
pub(crate) fn read_expired(req: &Request, now_ns: u64) -> bool {
    !req.write && req.deadline_ns.is_some_and(|d| d <= now_ns)
}

/// Hands `req` out under the common rule, counting it.
pub(crate) fn dispatch_or_fail(counters: &mut Counters, req: Request, now_ns: u64) -> Decision {
    if read_expired(&req, now_ns) {
        counters.failed += 1;
        Decision::Fail(req)
    } else {
        counters.dispatched += 1;
        Decision::Dispatch(req)
    }
}
