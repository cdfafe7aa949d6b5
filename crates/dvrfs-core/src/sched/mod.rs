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

pub mod fifo;

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
}
