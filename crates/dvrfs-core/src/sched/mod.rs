//! Disk scheduling: one framework, one hook table, one file per policy.
//!
//! **Invariant.** A policy sees requests only through [`Policy`], so the framework's rules
//! (merging, late reads, the best-effort guarantee, the conservation law) hold for
//! every policy alike.
//!
//! The split follows Linux's block layer. The **framework** ([`Scheduler`], in
//! `framework.rs`) does what the block layer does for every elevator, once:
//! - it takes [`Request`]s with a [`Class`] (real-time, best-effort, metadata) and
//!   validates them;
//! - it **merges** a request into a queued one that it continues or precedes on disk
//!   (same class, same direction, up to [`SchedSettings::merge_max_sectors`]), so every
//!   policy sees the merged extent as one entry, exactly as the block layer hands an
//!   elevator merged requests; the dispatched [`Command`] carries its members;
//! - it **cancels** queued requests (splitting a merged entry if needed);
//! - it fails, at dispatch, a read whose deadline has passed ("deadline missed") instead
//!   of sending it; writes are never dropped, they complete late;
//! - it keeps a number of device slots (queue depth 1 for hard disks) and asks the
//!   policy only when a slot is free;
//! - it guarantees best-effort traffic a share of disk time while it has work
//!   ([`SchedSettings::be_share`]), whatever the policy does (see `framework.rs`);
//! - it keeps the conservation law `inserted == dispatched + failed + cancelled +
//!   queued`, `dispatched == completed + in_flight`, counted in requests.
//!
//! A **policy** ([`Policy`]) only orders: `insert`, `remove`, `dispatch` (told how many
//! slots are free), `complete`, plus `merged` and `allow_merge` hooks, as in Linux's
//! `elevator_mq_ops`. Settings ([`SchedSettings`]) are validated where they are built;
//! run-time state stays in each policy.
//!
//! Policies (`--scheduler` names, [`NAMES`]):
//!
//! | name | file | one line |
//! |---|---|---|
//! | `mixer` | [`mixer`] (`traffic/mixer/`) | `avfs` made work-conserving near saturation (the default) |
//! | `avfs` | [`avfs`] (`traffic/avfs.rs`) | the AVFS traffic mixer exactly as the paper gives it (3.3.3-3.3.5) |
//! | `fifo` | [`fifo`] | arrival order |
//! | `cscan` | [`cscan`] | ascending LBA from the head, wrapping |
//! | `edf` | [`edf`] | earliest deadline first, best-effort after in arrival order |
//! | `scan-edf` | [`scan_edf`] | deadline order, SCAN within a deadline window |
//! | `deadline` | [`deadline`] | deadline-like: a model of Linux mq-deadline |
//! | `cfq` | [`cfq`] | cfq-like: a model of Linux CFQ |
//!
//! `avfs` and `mixer` are two users of one core, the traffic mixer of AVFS 3.3
//! ([`traffic`]: the pending set, the hold, the windows, the batch), which asks a
//! small hook table of its own wherever the two differ.

pub mod cfq;
pub mod cscan;
pub mod deadline;
pub mod edf;
pub mod fifo;
mod framework;
pub mod scan_edf;
pub mod testing;
pub mod traffic;

/// The two traffic mixers keep their paths (`sched::avfs`, `sched::mixer`).
pub use traffic::{avfs, mixer};

pub use framework::{BeStats, Command, Counters, Event, QueueError, Scheduler};

use std::fmt;

/// Identifies a request for its whole life.
pub type ReqId = u64;

/// What kind of traffic a request is. The class decides who may merge with whom, what
/// the best-effort guarantee counts, and how reports split the traffic.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Class {
    /// A stream's request: it has a deadline.
    RealTime,
    /// Everything without a deadline: copies, `ls`, deletions' data, FUSE traffic.
    BestEffort,
    /// The file system's own journal and checkpoint writes: they have a deadline of
    /// their own, so a commit is never starved and never starves a stream.
    Metadata,
}

impl Class {
    /// Names as they are written in reports and on the command line.
    pub const NAMES: &'static [&'static str] = &["real-time", "best-effort", "metadata"];

    pub fn name(self) -> &'static str {
        match self {
            Class::RealTime => "real-time",
            Class::BestEffort => "best-effort",
            Class::Metadata => "metadata",
        }
    }

    pub fn parse(s: &str) -> Result<Class, UnknownClass> {
        match s {
            "real-time" | "rt" => Ok(Class::RealTime),
            "best-effort" | "be" => Ok(Class::BestEffort),
            "metadata" | "meta" => Ok(Class::Metadata),
            _ => Err(UnknownClass {
                name: s.to_string(),
            }),
        }
    }

    /// Classes that must carry a deadline (best-effort must not).
    pub fn has_deadline(self) -> bool {
        self != Class::BestEffort
    }
}

/// A class name that is not one of [`Class::NAMES`].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown request class `{name}`; valid classes: real-time, best-effort, metadata")]
pub struct UnknownClass {
    pub name: String,
}

/// One request as the file system issues it, or (inside a policy) one queued entry,
/// which may stand for several merged requests.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Request {
    pub id: ReqId,
    pub lba: u64,
    pub sectors: u32,
    pub write: bool,
    pub class: Class,
    /// Absolute deadline (virtual or monotonic ns); `None` exactly for best-effort.
    pub deadline_ns: Option<u64>,
    /// Who issued it (a stream, a best-effort generator, the journal): CFQ-like
    /// scheduling keeps one queue per owner.
    pub owner: u32,
    pub submit_ns: u64,
    /// A read that is failed, not served, once its deadline has passed: the reads of a
    /// read operation. False for writes (never dropped) and for the reads a partial
    /// write needs (read-modify-write), which must complete however late.
    pub drop_if_late: bool,
}

impl Request {
    pub fn is_realtime(&self) -> bool {
        self.deadline_ns.is_some()
    }
    pub fn end_lba(&self) -> u64 {
        self.lba + self.sectors as u64
    }
}

/// What a policy wants a free device slot to do now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pick {
    /// Send this queued entry (the framework fails the late reads in it).
    Dispatch(Request),
    /// Nothing to do until `until_ns` (a hold timer), or until a request arrives
    /// (`None`).
    Wait { until_ns: Option<u64> },
}

/// The hook table between the framework and a policy. Every call is made with the
/// framework's bookkeeping already consistent; `req` arguments are entries the policy
/// holds (or is given) exactly as last inserted.
pub trait Policy: Send {
    /// The policy's name as `--scheduler` spells it.
    fn name(&self) -> &'static str;
    /// A new entry joins the queue.
    fn insert(&mut self, req: Request, now_ns: u64);
    /// Takes a queued entry out (cancel, or the framework merging entries); false if
    /// the policy does not hold it.
    fn remove(&mut self, req: &Request) -> bool;
    /// The queued entry `old` grew into `new` by merging (its id or LBA may change).
    /// Policies that keep entries in several sets override this to keep `new` where
    /// `old` was.
    fn merged(&mut self, old: &Request, new: Request, now_ns: u64) {
        let held = self.remove(old);
        assert!(held, "merged an entry the policy does not hold");
        self.insert(new, now_ns);
    }
    /// Called when at least one device slot is free: `free_slots` of them.
    fn dispatch(&mut self, now_ns: u64, free_slots: u32) -> Pick;
    /// The framework sent `cmd` without asking the policy (the best-effort guarantee).
    /// Policies that track the head position or the work in flight note it here.
    fn forced(&mut self, cmd: &Request, now_ns: u64) {
        let _ = (cmd, now_ns);
    }
    /// The dispatched (or forced) command `cmd` finished.
    fn complete(&mut self, cmd: &Request, now_ns: u64);
    /// Entries held (merged entries count once).
    fn queued(&self) -> u64;
    /// The policy's own figures (windows used, holds, ...), for reports.
    fn stats(&self) -> Vec<(&'static str, u64)> {
        Vec::new()
    }
    /// Whether the new request `new` may be merged into the queued entry `queued`
    /// (CFQ only merges within one issuer's queue, as the kernel's did).
    fn allow_merge(&self, queued: &Request, new: &Request) -> bool {
        let _ = (queued, new);
        true
    }
}

/// A service-time estimate for one request (AVFS eq. 1), the seam to
/// `disk::Estimator`. The policies that plan with it (`avfs`, `mixer`) hold one.
pub trait ServiceEstimate: Send {
    /// Estimated time the disk needs for the request, in ns. `sequential` is true when
    /// the request starts where the previous one in execution order ends (no seek).
    fn service_ns(&self, lba: u64, sectors: u32, write: bool, sequential: bool) -> u64;
    /// The same, knowing where the previous request in execution order ends
    /// (`prev_end_lba`; `None`: unknown). An estimator that knows the seek curve
    /// charges the seek over that distance instead of the average seek; the default
    /// is eq. 1 as written.
    fn service_after_ns(
        &self,
        lba: u64,
        sectors: u32,
        write: bool,
        prev_end_lba: Option<u64>,
    ) -> u64 {
        self.service_ns(lba, sectors, write, prev_end_lba == Some(lba))
    }
}

/// The disk model's estimator (AVFS eq. 1 with its corrections, `disk/estimator.rs`)
/// is what the mixer plans with. The impl lives here, above the disk models, so that
/// `disk` knows nothing of the schedulers.
impl ServiceEstimate for crate::disk::Estimator {
    fn service_ns(&self, lba: u64, sectors: u32, write: bool, sequential: bool) -> u64 {
        crate::disk::Estimator::service_ns(self, lba, sectors, write, sequential)
    }
    fn service_after_ns(&self, lba: u64, sectors: u32, write: bool, prev: Option<u64>) -> u64 {
        crate::disk::Estimator::service_after_ns(self, lba, sectors, write, prev)
    }
}

impl<T: ServiceEstimate + ?Sized> ServiceEstimate for Box<T> {
    fn service_ns(&self, lba: u64, sectors: u32, write: bool, sequential: bool) -> u64 {
        (**self).service_ns(lba, sectors, write, sequential)
    }
    fn service_after_ns(&self, lba: u64, sectors: u32, write: bool, prev: Option<u64>) -> u64 {
        (**self).service_after_ns(lba, sectors, write, prev)
    }
}

impl<T: ServiceEstimate + Sync + ?Sized> ServiceEstimate for std::sync::Arc<T> {
    fn service_ns(&self, lba: u64, sectors: u32, write: bool, sequential: bool) -> u64 {
        (**self).service_ns(lba, sectors, write, sequential)
    }
    fn service_after_ns(&self, lba: u64, sectors: u32, write: bool, prev: Option<u64>) -> u64 {
        (**self).service_after_ns(lba, sectors, write, prev)
    }
}

impl<T: ServiceEstimate + Sync + ?Sized> ServiceEstimate for &T {
    fn service_ns(&self, lba: u64, sectors: u32, write: bool, sequential: bool) -> u64 {
        (**self).service_ns(lba, sectors, write, sequential)
    }
    fn service_after_ns(&self, lba: u64, sectors: u32, write: bool, prev: Option<u64>) -> u64 {
        (**self).service_after_ns(lba, sectors, write, prev)
    }
}

/// AVFS eq. 1 exactly: whatever the estimator knows, only "sequential or not" counts
/// (the average seek for every non-sequential request). What `avfs` plans with.
pub struct Eq1<E>(pub E);

impl<E: ServiceEstimate> ServiceEstimate for Eq1<E> {
    fn service_ns(&self, lba: u64, sectors: u32, write: bool, sequential: bool) -> u64 {
        self.0.service_ns(lba, sectors, write, sequential)
    }
}

/// Largest device queue depth the framework accepts.
pub const MAX_QUEUE_DEPTH: u32 = 256;
/// Default bound on requests queued in the framework (not yet dispatched).
pub const DEFAULT_MAX_QUEUED: u32 = 1 << 20;

/// Settings of the framework and of the policies (`--margin`, `--urgent`, ...). Build
/// them, then [`SchedSettings::validate`]; [`Scheduler::new`] refuses invalid ones.
/// Tunables that belong to a single policy are named constants at the top of its file.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SchedSettings {
    /// AVFS desired completion margin m: a real-time request should complete at least
    /// this long before its deadline (AVFS 4.1: 500 ms). Must be positive.
    pub margin_ns: u64,
    /// AVFS urgent threshold e (< m): requests due within it are served EDF
    /// (AVFS 4.1: 100 ms).
    pub urgent_ns: u64,
    /// Best-effort aging in `avfs`/`mixer`: a best-effort request waiting longer than
    /// this is served before younger ones, oldest first (the paper leaves the rule
    /// open, 3.3.5; 1 s keeps a `ls` responsive without breaking up LBA order).
    pub be_max_age_ns: u64,
    /// Largest merged command the framework builds from contiguous requests, in
    /// sectors; 0 turns merging off. Applies to every policy.
    pub merge_max_sectors: u32,
    /// Share of disk time best-effort traffic always gets while it has work, 0 <= s < 1
    /// (0: no guarantee). `dvrfs capacity` and admission subtract it.
    pub be_share: f64,
    /// Latency target of a best-effort request (submission to completion), checked at
    /// its 99th percentile by `--find-max`.
    pub be_latency_ns: u64,
    /// Device slots: commands in flight at once (1 for a hard disk).
    pub queue_depth: u32,
    /// Requests the framework holds at most before it refuses new ones.
    pub max_queued: u32,
}

impl Default for SchedSettings {
    fn default() -> Self {
        Self {
            margin_ns: 500_000_000,
            urgent_ns: 100_000_000,
            be_max_age_ns: 1_000_000_000,
            merge_max_sectors: 8192,
            be_share: 0.1,
            be_latency_ns: 500_000_000,
            queue_depth: 1,
            max_queued: DEFAULT_MAX_QUEUED,
        }
    }
}

/// Why a [`SchedSettings`] was refused.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum SettingsError {
    #[error("the completion margin must be positive (the paper uses 500 ms)")]
    ZeroMargin,
    #[error(
        "the urgent threshold ({urgent_ms} ms) must be shorter than the margin ({margin_ms} ms)"
    )]
    UrgentNotBelowMargin { urgent_ms: f64, margin_ms: f64 },
    #[error("the best-effort share {share} is outside 0..1 (a fraction of disk time, e.g. 0.1)")]
    BeShare { share: String },
    #[error("the best-effort latency target must be positive")]
    ZeroBeLatency,
    #[error("queue depth {depth} is outside 1..={MAX_QUEUE_DEPTH}")]
    QueueDepth { depth: u32 },
    #[error("the queue bound must be at least 1 request")]
    ZeroMaxQueued,
}

impl SchedSettings {
    /// Checks every setting; the error says which one and why.
    pub fn validate(&self) -> Result<(), SettingsError> {
        if self.margin_ns == 0 {
            return Err(SettingsError::ZeroMargin);
        }
        if self.urgent_ns >= self.margin_ns {
            return Err(SettingsError::UrgentNotBelowMargin {
                urgent_ms: self.urgent_ns as f64 / 1e6,
                margin_ms: self.margin_ns as f64 / 1e6,
            });
        }
        if !(self.be_share.is_finite() && (0.0..1.0).contains(&self.be_share)) {
            return Err(SettingsError::BeShare {
                share: format!("{}", self.be_share),
            });
        }
        if self.be_latency_ns == 0 {
            return Err(SettingsError::ZeroBeLatency);
        }
        if self.queue_depth == 0 || self.queue_depth > MAX_QUEUE_DEPTH {
            return Err(SettingsError::QueueDepth {
                depth: self.queue_depth,
            });
        }
        if self.max_queued == 0 {
            return Err(SettingsError::ZeroMaxQueued);
        }
        Ok(())
    }
}

/// `--scheduler` names, the default first.
pub const NAMES: &[&str] = &[
    "mixer", "avfs", "fifo", "cscan", "edf", "scan-edf", "deadline", "cfq",
];

/// Why a scheduler could not be built.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum BuildError {
    #[error(transparent)]
    UnknownScheduler(#[from] UnknownScheduler),
    #[error(transparent)]
    Settings(#[from] SettingsError),
}

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

/// Builds the policy called `name` (settings already validated by the caller).
/// `est` is used by `avfs` and `mixer` only.
pub fn policy_by_name(
    name: &str,
    settings: &SchedSettings,
    est: Box<dyn ServiceEstimate>,
) -> Result<Box<dyn Policy>, UnknownScheduler> {
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

/// The framework around the policy called `name`.
pub fn by_name(
    name: &str,
    settings: SchedSettings,
    est: Box<dyn ServiceEstimate>,
) -> Result<Scheduler, BuildError> {
    settings.validate()?;
    let policy = policy_by_name(name, &settings, est)?;
    Ok(Scheduler::new(policy, settings)?)
}
