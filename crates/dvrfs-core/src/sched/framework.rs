//! The scheduling framework: what every policy gets, done once.
//!
//! **Invariant.** Between any two calls the conservation law holds (`inserted ==
//! dispatched + failed + cancelled + queued`, `dispatched == completed + in_flight`, in
//! requests) and the policy holds exactly the framework's entries ([`Scheduler::check`]).
//!
//! ## Merging
//! Linux merges a new bio into a queued request that it continues (back merge) or
//! precedes (front merge) before any elevator sees it, for every elevator, and merges
//! two queued requests a new one bridges. So does this framework: a request joins a
//! queued entry of the same class and direction that ends where it starts, or starts
//! where it ends, while the entry stays within [`SchedSettings::merge_max_sectors`]
//! and the policy's [`Policy::allow_merge`] agrees. The policy is told with
//! [`Policy::merged`]; it never sees the members. A dispatched [`Command`] carries its
//! members (in LBA order, contiguous, never overlapping), so the caller can complete
//! each one; nothing travels through an id-space handshake. Only queued entries merge:
//! a request arriving after its neighbour was dispatched is a command of its own, as
//! in the kernel.
//!
//! ## Late reads
//! At dispatch, a member whose `drop_if_late` is set and whose deadline has passed is
//! failed ("deadline missed") instead of being read; the rest of the entry is still
//! sent (a read may then cover a failed member's sectors: reading them costs less than
//! a second command). Writes are never dropped. An entry whose every member is failed
//! never reaches the device; the policy that chose it is told it completed at once
//! ([`Policy::complete`]), so no policy counts it in flight.
//!
//! ## The best-effort guarantee
//! While best-effort traffic has work (a best-effort request queued or in flight), it
//! earns credit at `be_share` ns per ns of elapsed time, capped at
//! [`BE_CREDIT_CAP_NS`]; every best-effort command, whoever chose it, is charged its
//! device time at completion, and the balance never falls below minus that command's
//! time (service beyond the share, given while the disk was idle anyway, is not a debt
//! to be repaid under load). When a slot is free, best-effort requests wait and the
//! credit is not negative, the framework sends the oldest best-effort entry itself,
//! before asking the policy. So over any stretch of time in which best-effort has work,
//! it gets at least `be_share` of the disk, less one command, whatever the policy and
//! the real-time load; and a policy that serves best-effort generously on its own
//! (the mixers, while they hold) never sees the framework step in. The device time of
//! a command is measured from dispatch (or from the previous completion, when several
//! are in flight) to completion.
//!
//! ## Limits
//! At most [`SchedSettings::max_queued`] requests queued (then [`QueueError::Full`]),
//! at most [`SchedSettings::queue_depth`] commands in flight (the caller asks for a
//! dispatch only while a slot is free; asking otherwise gets a `Wait`).

use super::*;
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// How many dispatches in a row the guarantee lets a sequential run go on before it
/// takes its turn anyway (see "run boundaries" in the module docs).
pub const BE_MAX_DEFERRALS: u32 = 16;

/// Most best-effort credit banked while it waits for a free slot, ns. Bounds how long a
/// burst of forced best-effort commands can hold the disk after a long real-time
/// command (100 ms: a few best-effort requests, well inside any stream's margin).
pub const BE_CREDIT_CAP_NS: f64 = 100_000_000.0;

/// Request counts; the conservation law holds between them at every call.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    pub inserted: u64,
    pub dispatched: u64,
    pub completed: u64,
    /// Late reads failed instead of served.
    pub failed: u64,
    pub cancelled: u64,
    /// Device commands sent (a merged command counts once).
    pub commands: u64,
    /// Merges: a request joining a queued entry, or two entries joined by one.
    pub merged: u64,
    /// Best-effort commands the guarantee sent without asking the policy.
    pub forced_be: u64,
}

impl Counters {
    /// The conservation law, given what is still queued and in flight (requests).
    pub fn check(&self, queued: u64, in_flight: u64) -> Result<(), String> {
        if self.inserted != self.dispatched + self.failed + self.cancelled + queued {
            return Err(format!(
                "inserted {} != dispatched {} + failed {} + cancelled {} + queued {queued}",
                self.inserted, self.dispatched, self.failed, self.cancelled
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

/// One device command: the extent to transfer and the requests it serves.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Command {
    /// The framework's command number (its own sequence, not a request id).
    pub id: u64,
    pub lba: u64,
    pub sectors: u32,
    pub write: bool,
    pub class: Class,
    /// The earliest deadline of the members.
    pub deadline_ns: Option<u64>,
    /// The requests served, in LBA order, contiguous (for reads, a failed member may
    /// leave a hole that the command still covers).
    pub members: Vec<Request>,
    /// Sent by the best-effort guarantee rather than chosen by the policy.
    pub forced: bool,
}

impl Command {
    pub fn end_lba(&self) -> u64 {
        self.lba + self.sectors as u64
    }
}

/// What a free slot should do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// Send this command. Late reads of the same entry may have been failed with it:
    /// see [`Scheduler::take_failed`].
    Dispatch(Command),
    /// These reads are past their deadline: complete them with "deadline missed". The
    /// slot is still free; ask again.
    Fail(Vec<Request>),
    /// Nothing to do until `until_ns`, or until a request arrives (`None`).
    Wait { until_ns: Option<u64> },
}

/// Why a request was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum QueueError {
    #[error("the scheduler queue is full ({max} requests); retry when some complete")]
    Full { max: u32 },
    #[error("request id {0} is already queued or in flight")]
    Duplicate(ReqId),
    #[error("invalid request: {0}")]
    Invalid(String),
}

/// What the best-effort guarantee measured.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct BeStats {
    /// Time during which best-effort had a request queued or in flight, ns.
    pub active_ns: u64,
    /// Device time of best-effort commands, ns.
    pub busy_ns: u64,
    /// Commands the guarantee sent itself.
    pub forced: u64,
}

impl BeStats {
    /// Best-effort device time over the time it had work (1 without activity).
    pub fn share(&self) -> f64 {
        if self.active_ns == 0 {
            1.0
        } else {
            self.busy_ns as f64 / self.active_ns as f64
        }
    }
}

struct Entry {
    /// The entry as the policy holds it (id of its lowest member).
    req: Request,
    /// LBA order, contiguous.
    members: Vec<Request>,
}

struct InFlight {
    cmd: Command,
    /// The entry the policy was given (complete() hands it back).
    entry: Request,
    dispatched_ns: u64,
}

#[derive(Default)]
struct BeBudget {
    share: f64,
    credit_ns: f64,
    last_ns: u64,
    stats: BeStats,
}

impl BeBudget {
    /// Time moves to `now_ns`; `active` is whether best-effort had work since the last
    /// call.
    fn advance(&mut self, now_ns: u64, active: bool) {
        let dt = now_ns.saturating_sub(self.last_ns);
        self.last_ns = self.last_ns.max(now_ns);
        if active {
            self.stats.active_ns += dt;
            self.credit_ns = (self.credit_ns + self.share * dt as f64).min(BE_CREDIT_CAP_NS);
        }
    }

    fn charge(&mut self, service_ns: u64) {
        self.stats.busy_ns += service_ns;
        let s = service_ns as f64;
        self.credit_ns = (self.credit_ns - s).max(-s);
    }
}

/// Key of the merge indexes: (class, write, lba, entry id).
type EdgeKey = (Class, bool, u64, ReqId);

/// The framework around one policy (see the module docs).
pub struct Scheduler {
    policy: Box<dyn Policy>,
    settings: SchedSettings,
    entries: HashMap<ReqId, Entry>,
    starts: BTreeSet<EdgeKey>,
    ends: BTreeSet<EdgeKey>,
    member_entry: HashMap<ReqId, ReqId>,
    /// Best-effort entries by (submit time, id): the guarantee serves the oldest.
    be_by_age: BTreeSet<(u64, ReqId)>,
    queued_requests: u64,
    in_flight: BTreeMap<u64, InFlight>,
    in_flight_requests: u64,
    be_in_flight: u32,
    last_complete_ns: u64,
    /// End LBA of the last command sent.
    head_lba: Option<u64>,
    /// Dispatches the guarantee has let a run go on since it was owed.
    be_deferrals: u32,
    next_cmd_id: u64,
    counters: Counters,
    be: BeBudget,
    failed: Vec<Request>,
}

impl Scheduler {
    /// The framework around `policy`; `settings` are validated here.
    pub fn new(policy: Box<dyn Policy>, settings: SchedSettings) -> Result<Self, SettingsError> {
        settings.validate()?;
        Ok(Scheduler {
            policy,
            settings,
            entries: HashMap::new(),
            starts: BTreeSet::new(),
            ends: BTreeSet::new(),
            member_entry: HashMap::new(),
            be_by_age: BTreeSet::new(),
            queued_requests: 0,
            in_flight: BTreeMap::new(),
            in_flight_requests: 0,
            be_in_flight: 0,
            last_complete_ns: 0,
            head_lba: None,
            be_deferrals: 0,
            next_cmd_id: 1,
            counters: Counters::default(),
            be: BeBudget {
                share: settings.be_share,
                ..Default::default()
            },
            failed: Vec::new(),
        })
    }

    pub fn name(&self) -> &'static str {
        self.policy.name()
    }

    pub fn settings(&self) -> &SchedSettings {
        &self.settings
    }

    pub fn counters(&self) -> Counters {
        self.counters
    }

    pub fn be_stats(&self) -> BeStats {
        self.be.stats
    }

    /// Requests queued (not yet dispatched, failed or cancelled).
    pub fn queued(&self) -> u64 {
        self.queued_requests
    }

    /// Commands on the device.
    pub fn in_flight(&self) -> u32 {
        self.in_flight.len() as u32
    }

    /// Requests on the device.
    pub fn in_flight_requests(&self) -> u64 {
        self.in_flight_requests
    }

    pub fn free_slots(&self) -> u32 {
        self.settings.queue_depth.saturating_sub(self.in_flight())
    }

    pub fn has_work(&self) -> bool {
        !self.entries.is_empty()
    }

    /// The policy's own figures (windows used, holds, ...), for reports.
    pub fn policy_stats(&self) -> Vec<(&'static str, u64)> {
        self.policy.stats()
    }

    /// Late reads failed together with the last dispatched command.
    pub fn take_failed(&mut self) -> Vec<Request> {
        std::mem::take(&mut self.failed)
    }

    /// The conservation law and the policy's entry count.
    pub fn check(&self) -> Result<(), String> {
        self.counters
            .check(self.queued_requests, self.in_flight_requests)?;
        if self.policy.queued() != self.entries.len() as u64 {
            return Err(format!(
                "policy {} holds {} entries, the framework {}",
                self.policy.name(),
                self.policy.queued(),
                self.entries.len()
            ));
        }
        Ok(())
    }

    fn be_active(&self) -> bool {
        !self.be_by_age.is_empty() || self.be_in_flight > 0
    }

    fn advance(&mut self, now_ns: u64) {
        let active = self.be_active();
        self.be.advance(now_ns, active);
    }

    /// Queues a request (merging it where it can).
    pub fn insert(&mut self, req: Request, now_ns: u64) -> Result<(), QueueError> {
        if req.sectors == 0 {
            return Err(QueueError::Invalid(format!("request {} is empty", req.id)));
        }
        if req.lba.checked_add(req.sectors as u64).is_none() {
            return Err(QueueError::Invalid(format!(
                "request {} ends past the last addressable sector",
                req.id
            )));
        }
        if req.class.has_deadline() != req.deadline_ns.is_some() {
            return Err(QueueError::Invalid(format!(
                "request {}: a {} request {} a deadline",
                req.id,
                req.class.name(),
                if req.class.has_deadline() {
                    "needs"
                } else {
                    "cannot have"
                }
            )));
        }
        if self.member_entry.contains_key(&req.id)
            || self
                .in_flight
                .values()
                .any(|f| f.cmd.members.iter().any(|m| m.id == req.id))
        {
            return Err(QueueError::Duplicate(req.id));
        }
        if self.queued_requests >= self.settings.max_queued as u64 {
            return Err(QueueError::Full {
                max: self.settings.max_queued,
            });
        }
        self.advance(now_ns);
        self.counters.inserted += 1;
        self.queued_requests += 1;
        self.merge_or_queue(req, now_ns);
        Ok(())
    }

    fn mergeable(&self, queued: &Entry, r: &Request) -> bool {
        queued.req.sectors as u64 + r.sectors as u64 <= self.settings.merge_max_sectors as u64
            && self.policy.allow_merge(&queued.req, r)
    }

    /// An entry of `r`'s class and direction with an edge at `lba` that may take `r`.
    fn neighbour(&self, index: &BTreeSet<EdgeKey>, r: &Request, lba: u64) -> Option<ReqId> {
        index
            .range((r.class, r.write, lba, 0)..=(r.class, r.write, lba, ReqId::MAX))
            .map(|k| k.3)
            .find(|id| self.mergeable(&self.entries[id], r))
    }

    fn merge_or_queue(&mut self, r: Request, now_ns: u64) {
        if self.settings.merge_max_sectors == 0 {
            return self.queue_new(vec![r], now_ns);
        }
        let back = self.neighbour(&self.ends, &r, r.lba);
        let front = self.neighbour(&self.starts, &r, r.end_lba());
        match (back, front) {
            (None, None) => self.queue_new(vec![r], now_ns),
            (Some(b), front) => {
                let old = self.unindex(b);
                let mut members = old.members;
                members.push(r);
                self.counters.merged += 1;
                // Bridge to the entry that follows, if the whole still fits.
                let total = members.last().map_or(0, |m| m.end_lba()) - members[0].lba;
                if let Some(f) = front.filter(|f| {
                    let fe = &self.entries[f];
                    total + fe.req.sectors as u64 <= self.settings.merge_max_sectors as u64
                        && self.policy.allow_merge(&old.req, &fe.req)
                }) {
                    let next = self.unindex(f);
                    let held = self.policy.remove(&next.req);
                    assert!(held, "policy lost entry {}", next.req.id);
                    members.extend(next.members);
                    self.counters.merged += 1;
                }
                let new = entry_request(&members);
                self.policy.merged(&old.req, new, now_ns);
                self.index(Entry { req: new, members });
            }
            (None, Some(f)) => {
                let old = self.unindex(f);
                let mut members = vec![r];
                members.extend(old.members);
                self.counters.merged += 1;
                let new = entry_request(&members);
                self.policy.merged(&old.req, new, now_ns);
                self.index(Entry { req: new, members });
            }
        }
    }

    fn queue_new(&mut self, members: Vec<Request>, now_ns: u64) {
        let req = entry_request(&members);
        self.policy.insert(req, now_ns);
        self.index(Entry { req, members });
    }

    fn index(&mut self, e: Entry) {
        let r = e.req;
        self.starts.insert((r.class, r.write, r.lba, r.id));
        self.ends.insert((r.class, r.write, r.end_lba(), r.id));
        if r.class == Class::BestEffort {
            self.be_by_age.insert((r.submit_ns, r.id));
        }
        for m in &e.members {
            self.member_entry.insert(m.id, r.id);
        }
        let prev = self.entries.insert(r.id, e);
        assert!(prev.is_none(), "two queued entries with id {}", r.id);
    }

    fn unindex(&mut self, id: ReqId) -> Entry {
        let e = self
            .entries
            .remove(&id)
            .unwrap_or_else(|| panic!("scheduler entry {id} is not queued"));
        let r = e.req;
        self.starts.remove(&(r.class, r.write, r.lba, r.id));
        self.ends.remove(&(r.class, r.write, r.end_lba(), r.id));
        self.be_by_age.remove(&(r.submit_ns, r.id));
        for m in &e.members {
            self.member_entry.remove(&m.id);
        }
        e
    }

    /// Takes a queued request out. Returns it, or `None` if it is not queued (already
    /// dispatched, failed or unknown).
    pub fn cancel(&mut self, id: ReqId, now_ns: u64) -> Option<Request> {
        let eid = *self.member_entry.get(&id)?;
        self.advance(now_ns);
        let e = self.unindex(eid);
        let held = self.policy.remove(&e.req);
        assert!(held, "policy lost entry {eid}");
        let mut gone = None;
        let mut group: Vec<Request> = Vec::new();
        for m in e.members {
            if m.id == id {
                gone = Some(m);
                if !group.is_empty() {
                    self.queue_new(std::mem::take(&mut group), now_ns);
                }
            } else {
                group.push(m);
            }
        }
        if !group.is_empty() {
            self.queue_new(group, now_ns);
        }
        self.queued_requests -= 1;
        self.counters.cancelled += 1;
        gone
    }

    /// A queued request starts where the last command ended.
    fn run_continues(&self) -> bool {
        let Some(h) = self.head_lba else {
            return false;
        };
        [Class::RealTime, Class::Metadata, Class::BestEffort]
            .into_iter()
            .flat_map(|c| [(c, false), (c, true)])
            .any(|(c, w)| {
                self.starts
                    .range((c, w, h, 0)..=(c, w, h, ReqId::MAX))
                    .next()
                    .is_some()
            })
    }

    fn be_owed(&self) -> bool {
        self.settings.be_share > 0.0 && !self.be_by_age.is_empty() && self.be.credit_ns >= 0.0
    }

    /// When the waiting best-effort requests will be owed a slot.
    fn be_wake_ns(&self, now_ns: u64) -> Option<u64> {
        if self.settings.be_share <= 0.0 || self.be_by_age.is_empty() {
            return None;
        }
        let wait = (-self.be.credit_ns).max(0.0) / self.settings.be_share;
        Some(now_ns + wait.ceil() as u64 + 1)
    }

    /// Asks for the next command for a free slot.
    pub fn dispatch(&mut self, now_ns: u64) -> Event {
        self.advance(now_ns);
        let free = self.free_slots();
        if free == 0 {
            return Event::Wait { until_ns: None };
        }
        if self.be_owed() {
            if self.run_continues() && self.be_deferrals < BE_MAX_DEFERRALS {
                self.be_deferrals += 1;
            } else {
                self.be_deferrals = 0;
                let &(_, id) = self.be_by_age.first().expect("be_owed checks non-empty");
                return self.send(id, now_ns, true);
            }
        }
        match self.policy.dispatch(now_ns, free) {
            Pick::Wait { until_ns } => {
                let until_ns = match (until_ns, self.be_wake_ns(now_ns)) {
                    (Some(a), Some(b)) => Some(a.min(b)),
                    (a, b) => a.or(b),
                };
                Event::Wait { until_ns }
            }
            Pick::Dispatch(req) => {
                let known = self.entries.get(&req.id).map(|e| e.req);
                assert_eq!(
                    known,
                    Some(req),
                    "policy {} dispatched an entry the framework does not hold",
                    self.policy.name()
                );
                self.send(req.id, now_ns, false)
            }
        }
    }

    fn send(&mut self, id: ReqId, now_ns: u64, forced: bool) -> Event {
        let e = self.unindex(id);
        if forced {
            let held = self.policy.remove(&e.req);
            assert!(held, "policy lost entry {id}");
        }
        self.queued_requests -= e.members.len() as u64;
        let (late, keep): (Vec<Request>, Vec<Request>) = e
            .members
            .into_iter()
            .partition(|m| m.drop_if_late && m.deadline_ns.is_some_and(|d| d <= now_ns));
        self.counters.failed += late.len() as u64;
        if keep.is_empty() {
            // Nothing goes to the device. A policy that chose the entry counts it as
            // sent: it is over now, as a command that took no time.
            if !forced {
                self.policy.complete(&e.req, now_ns);
            }
            return Event::Fail(late);
        }
        self.failed.extend(late);
        let lba = keep[0].lba;
        let end = keep.iter().map(|m| m.end_lba()).max().unwrap_or(lba);
        let cmd = Command {
            id: self.next_cmd_id,
            lba,
            sectors: u32::try_from(end - lba).expect("entries stay within u32 sectors"),
            write: e.req.write,
            class: e.req.class,
            deadline_ns: keep.iter().filter_map(|m| m.deadline_ns).min(),
            members: keep,
            forced,
        };
        self.next_cmd_id += 1;
        self.head_lba = Some(cmd.end_lba());
        if forced {
            self.policy.forced(&e.req, now_ns);
            self.counters.forced_be += 1;
            self.be.stats.forced += 1;
        }
        if cmd.class == Class::BestEffort {
            self.be_in_flight += 1;
        }
        self.counters.dispatched += cmd.members.len() as u64;
        self.counters.commands += 1;
        self.in_flight_requests += cmd.members.len() as u64;
        self.in_flight.insert(
            cmd.id,
            InFlight {
                cmd: cmd.clone(),
                entry: e.req,
                dispatched_ns: now_ns,
            },
        );
        Event::Dispatch(cmd)
    }

    /// The command `cmd_id` finished; returns it (with its members), or `None` if no
    /// such command is in flight.
    pub fn complete(&mut self, cmd_id: u64, now_ns: u64) -> Option<Command> {
        let f = self.in_flight.remove(&cmd_id)?;
        self.advance(now_ns);
        self.counters.completed += f.cmd.members.len() as u64;
        self.in_flight_requests -= f.cmd.members.len() as u64;
        if f.cmd.class == Class::BestEffort {
            self.be_in_flight -= 1;
            let from = f.dispatched_ns.max(self.last_complete_ns);
            self.be.charge(now_ns.saturating_sub(from));
        }
        self.last_complete_ns = self.last_complete_ns.max(now_ns);
        self.policy.complete(&f.entry, now_ns);
        Some(f.cmd)
    }
}

/// The entry a policy sees for `members` (LBA order, contiguous): their extent, the
/// earliest deadline and submission, the first member's id and owner.
fn entry_request(members: &[Request]) -> Request {
    let first = members[0];
    let end = members
        .iter()
        .map(|m| m.end_lba())
        .max()
        .unwrap_or(first.lba);
    Request {
        id: first.id,
        lba: first.lba,
        sectors: u32::try_from(end - first.lba).expect("merge limit is a u32"),
        write: first.write,
        class: first.class,
        deadline_ns: members.iter().filter_map(|m| m.deadline_ns).min(),
        owner: first.owner,
        submit_ns: members.iter().map(|m| m.submit_ns).min().unwrap_or(0),
        drop_if_late: members.iter().all(|m| m.drop_if_late),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    fn fifo(settings: SchedSettings) -> Scheduler {
        Scheduler::new(Box::new(fifo::Fifo::new()), settings).unwrap()
    }

    fn req(id: u64, lba: u64, sectors: u32, write: bool, class: Class) -> Request {
        Request {
            id,
            lba,
            sectors,
            write,
            class,
            deadline_ns: class.has_deadline().then_some(10_000 * MS),
            owner: 0,
            submit_ns: 0,
            drop_if_late: !write && class == Class::RealTime,
        }
    }

    fn no_share() -> SchedSettings {
        SchedSettings {
            be_share: 0.0,
            ..SchedSettings::default()
        }
    }

    fn take(s: &mut Scheduler, now: u64) -> Command {
        match s.dispatch(now) {
            Event::Dispatch(c) => c,
            e => panic!("expected a dispatch, got {e:?}"),
        }
    }

    #[test]
    fn contiguous_requests_merge_back_front_and_bridge() {
        let mut s = fifo(no_share());
        s.insert(req(1, 100, 8, true, Class::RealTime), 0).unwrap();
        s.insert(req(2, 116, 8, true, Class::RealTime), 0).unwrap();
        // Bridges 1 and 2: one entry 100..124.
        s.insert(req(3, 108, 8, true, Class::RealTime), 0).unwrap();
        // Front merge into it.
        s.insert(req(4, 92, 8, true, Class::RealTime), 0).unwrap();
        // Another direction, another class: separate.
        s.insert(req(5, 124, 8, false, Class::RealTime), 0).unwrap();
        s.insert(req(6, 124, 8, true, Class::BestEffort), 0)
            .unwrap();
        s.check().unwrap();
        let c = take(&mut s, 0);
        assert_eq!((c.lba, c.sectors), (92, 32));
        let ids: Vec<u64> = c.members.iter().map(|m| m.id).collect();
        assert_eq!(ids, vec![4, 1, 3, 2]);
        assert_eq!(s.counters().merged, 3);
        s.check().unwrap();
        s.complete(c.id, 1).unwrap();
        assert_eq!(take(&mut s, 1).members.len(), 1);
    }

    #[test]
    fn merging_respects_the_size_limit_and_can_be_off() {
        let mut s = fifo(SchedSettings {
            merge_max_sectors: 16,
            ..no_share()
        });
        for i in 0..3 {
            s.insert(req(i + 1, 100 + i * 8, 8, true, Class::RealTime), 0)
                .unwrap();
        }
        assert_eq!(take(&mut s, 0).sectors, 16);
        let mut off = fifo(SchedSettings {
            merge_max_sectors: 0,
            ..no_share()
        });
        off.insert(req(1, 100, 8, true, Class::RealTime), 0)
            .unwrap();
        off.insert(req(2, 108, 8, true, Class::RealTime), 0)
            .unwrap();
        assert_eq!(take(&mut off, 0).sectors, 8);
    }

    #[test]
    fn cancel_splits_a_merged_entry() {
        let mut s = fifo(no_share());
        for i in 0..3 {
            s.insert(req(i + 1, 100 + i * 8, 8, false, Class::RealTime), 0)
                .unwrap();
        }
        assert_eq!(s.cancel(2, 0).map(|r| r.id), Some(2));
        assert_eq!(s.cancel(2, 0), None);
        s.check().unwrap();
        let a = take(&mut s, 0);
        let b = take_after(&mut s, &a);
        assert_eq!((a.lba, a.sectors, b.lba, b.sectors), (100, 8, 116, 8));
        assert_eq!(s.counters().cancelled, 1);
    }

    fn take_after(s: &mut Scheduler, prev: &Command) -> Command {
        s.complete(prev.id, 0).unwrap();
        take(s, 0)
    }

    #[test]
    fn late_reads_fail_writes_do_not() {
        let mut s = fifo(no_share());
        let mut r = req(1, 100, 8, false, Class::RealTime);
        r.deadline_ns = Some(5 * MS);
        let mut w = req(2, 500, 8, true, Class::RealTime);
        w.deadline_ns = Some(5 * MS);
        s.insert(r, 0).unwrap();
        s.insert(w, 0).unwrap();
        assert!(matches!(s.dispatch(10 * MS), Event::Fail(v) if v[0].id == 1));
        assert_eq!(take(&mut s, 10 * MS).members[0].id, 2);
        assert_eq!(s.counters().failed, 1);
        s.check().unwrap();
    }

    /// A policy that chose an entry whose every member was late, and so never reached
    /// the device, is told it is over: the mixer, which counts its commands in flight
    /// (and asserts they never exceed the queue depth), used to keep it for good.
    #[test]
    fn a_wholly_late_entry_is_over_for_the_policy_that_chose_it() {
        for policy in ["mixer", "avfs", "cfq"] {
            let mut s = by_name(
                policy,
                no_share(),
                Box::new(testing::LinearEstimate::default()),
            )
            .unwrap();
            for (id, deadline) in [(1, 5 * MS), (2, 6 * MS)] {
                let mut r = req(id, 100 * id, 8, false, Class::RealTime);
                r.deadline_ns = Some(deadline);
                s.insert(r, 0).unwrap();
                assert!(
                    matches!(s.dispatch(10 * MS), Event::Fail(v) if v[0].id == id),
                    "{policy}"
                );
            }
            // Due within the margin: no policy holds it.
            let mut r = req(3, 900, 8, false, Class::RealTime);
            r.deadline_ns = Some(400 * MS);
            s.insert(r, 10 * MS).unwrap();
            assert_eq!(take(&mut s, 10 * MS).members[0].id, 3, "{policy}");
            s.check().unwrap();
        }
    }

    #[test]
    fn a_partly_late_entry_sends_the_rest() {
        let mut s = fifo(no_share());
        let mut a = req(1, 100, 8, false, Class::RealTime);
        a.deadline_ns = Some(5 * MS);
        s.insert(a, 0).unwrap();
        s.insert(req(2, 108, 8, false, Class::RealTime), 0).unwrap();
        let c = take(&mut s, 10 * MS);
        assert_eq!(c.members.iter().map(|m| m.id).collect::<Vec<_>>(), vec![2]);
        assert_eq!((c.lba, c.sectors), (108, 8));
        assert_eq!(s.take_failed().len(), 1);
        s.check().unwrap();
    }

    #[test]
    fn invalid_requests_are_refused_with_a_reason() {
        let mut s = fifo(no_share());
        let mut r = req(1, 100, 8, false, Class::BestEffort);
        r.deadline_ns = Some(1);
        assert!(matches!(s.insert(r, 0), Err(QueueError::Invalid(_))));
        let mut r = req(1, 100, 8, false, Class::Metadata);
        r.deadline_ns = None;
        assert!(matches!(s.insert(r, 0), Err(QueueError::Invalid(_))));
        assert!(matches!(
            s.insert(req(1, 100, 0, false, Class::RealTime), 0),
            Err(QueueError::Invalid(_))
        ));
        s.insert(req(1, 100, 8, false, Class::RealTime), 0).unwrap();
        assert_eq!(
            s.insert(req(1, 900, 8, false, Class::RealTime), 0),
            Err(QueueError::Duplicate(1))
        );
        let mut small = fifo(SchedSettings {
            max_queued: 1,
            ..no_share()
        });
        small
            .insert(req(1, 100, 8, false, Class::RealTime), 0)
            .unwrap();
        assert_eq!(
            small.insert(req(2, 900, 8, false, Class::RealTime), 0),
            Err(QueueError::Full { max: 1 })
        );
    }

    #[test]
    fn bad_settings_are_refused_not_panicked_on() {
        for (s, what) in [
            (
                SchedSettings {
                    margin_ns: 0,
                    ..SchedSettings::default()
                },
                "margin",
            ),
            (
                SchedSettings {
                    urgent_ns: 600 * MS,
                    ..SchedSettings::default()
                },
                "urgent",
            ),
            (
                SchedSettings {
                    be_share: 1.5,
                    ..SchedSettings::default()
                },
                "share",
            ),
            (
                SchedSettings {
                    be_share: -0.1,
                    ..SchedSettings::default()
                },
                "share",
            ),
            (
                SchedSettings {
                    be_share: f64::NAN,
                    ..SchedSettings::default()
                },
                "share",
            ),
            (
                SchedSettings {
                    queue_depth: 0,
                    ..SchedSettings::default()
                },
                "depth",
            ),
        ] {
            let e = s.validate().expect_err(what);
            assert!(e.to_string().contains(what), "{what}: {e}");
            for name in NAMES {
                assert!(
                    by_name(name, s, Box::new(testing::LinearEstimate::default())).is_err(),
                    "{name} accepted bad {what}"
                );
            }
        }
        assert!(matches!(
            by_name(
                "nope",
                SchedSettings::default(),
                Box::new(testing::LinearEstimate::default())
            ),
            Err(BuildError::UnknownScheduler(_))
        ));
        assert!(Class::parse("urgent").is_err());
        assert_eq!(Class::parse("metadata"), Ok(Class::Metadata));
    }

    #[test]
    fn best_effort_gets_its_share_under_a_policy_that_starves_it() {
        let share = 0.1;
        // EDF never serves best effort while a real-time request waits.
        let mut s = Scheduler::new(
            Box::new(edf::Edf::new()),
            SchedSettings {
                be_share: share,
                merge_max_sectors: 0,
                ..SchedSettings::default()
            },
        )
        .unwrap();
        // A saturating real-time load (a request always waiting, 10 ms each) and a
        // greedy best-effort reader with one request outstanding (5 ms each).
        let (mut t, mut id) = (0u64, 1u64);
        let mut be_waiting = false;
        let mut rt_waiting = 0;
        let mut be_time = 0;
        while t < 10_000 * MS {
            while rt_waiting < 2 {
                let mut r = req(id, id * 1000, 8, true, Class::RealTime);
                r.deadline_ns = Some(t + 60_000 * MS);
                s.insert(r, t).unwrap();
                id += 1;
                rt_waiting += 1;
            }
            if !be_waiting {
                s.insert(req(id, id * 1000, 8, false, Class::BestEffort), t)
                    .unwrap();
                id += 1;
                be_waiting = true;
            }
            let c = take(&mut s, t);
            let dt = if c.class == Class::BestEffort {
                be_waiting = false;
                be_time += 5 * MS;
                5 * MS
            } else {
                rt_waiting -= 1;
                10 * MS
            };
            t += dt;
            s.complete(c.id, t).unwrap();
            s.check().unwrap();
        }
        let got = be_time as f64 / t as f64;
        assert!(got >= share * 0.95, "best effort got {got:.3} of the disk");
        assert!(s.be_stats().share() >= share * 0.95, "{:?}", s.be_stats());
        assert!(s.be_stats().forced > 0);
    }
}
