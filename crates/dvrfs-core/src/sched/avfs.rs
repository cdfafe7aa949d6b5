//! `avfs`: the AVFS traffic mixer (Lee et al., AVFS section 3.3), kept exactly as the
//! paper gives it so that its results can be reproduced. `mixer` is built on the same
//! code with its fixes switched on (see `mixer.rs`).
//!
//! ## The algorithm
//!
//! *Admission (3.3.1).* A request with a deadline is real-time (RT), one without is
//! best-effort (BE). RT requests wait in the *pending* set, kept in execution order
//! (ascending LBA) and, through a per-subtree minimum, in deadline order.
//!
//! *Execution order.* The paper uses increasing LBA "equivalent to a C-SCAN policy"
//! (3.3.1) and starts a batch at R_e0 (3.3.4). We take e_0 to be the first request at
//! or after the *head position* (the end LBA of the last dispatched request), wrapping
//! to the lowest LBA after the highest: the C-SCAN order a disk head actually follows.
//! The same order is used to compute H and to run the batch, so the plan and the
//! execution agree.
//!
//! *Hold time (3.3.3, eq. 2-3).* With T_S the service-time estimate of eq. 1 (a
//! [`ServiceEstimate`]; "sequential" means the request starts where its predecessor in
//! this order ends, the first one's predecessor being the head):
//!
//! ```text
//!     H_j = T_D(e_j) - (m + sum_{i<=j} T_S(e_i)),   H = min_j H_j - (remaining T_S of the request in flight)
//! ```
//!
//! `dispatch` is only called with the disk idle, so the in-flight term is zero there; it
//! is kept (estimated end of the in-flight request minus now) so that [`Avfs::hold_ns`]
//! is also right while the disk is busy. H costs O(log n) per event (`hold_tree.rs`).
//!
//! *Mixer states (Fig. 10), at time t with the disk idle and no batch running:*
//! 1. no RT pending: serve the next BE request, if any;
//! 2. RT pending and H > t: *hold*. If a BE request R' is waiting, run it when
//!    H >= t + T_S(R'); if that test fails, start the RT batch (the paper's rule: the
//!    mixer "activates the real-time scheduler"). With no BE request, wait until H
//!    ([`Pick::Wait`] with `until_ns = H`);
//! 3. RT pending and H <= t: start the RT batch.
//!
//! *The batch (3.3.4).* Starting a batch moves every pending RT request into it. Then,
//! with t_d the earliest deadline in the batch, each dispatch picks:
//! - t_d <= t + e (EDF window): the earliest-deadline request; a read with t_d <= t is
//!   failed ("deadline missed") by the framework, a late write is still served (never
//!   dropped);
//! - t_d <= t + m (reduced C-SCAN window): the next request in C-SCAN order from the
//!   head among those with T_D < t_d + m;
//! - otherwise (C-SCAN window): the next request in C-SCAN order from the head.
//!
//! The window is re-evaluated at every dispatch, so "R_d and all succeeding urgent
//! requests run EDF until none remains urgent" holds as stated. An RT request arriving
//! while the batch runs joins it only if its deadline is earlier than the batch's latest
//! deadline; otherwise it waits in the pending set for the next batch. The batch is
//! active from its start until a dispatch finds it empty; BE requests do not run
//! during a batch (footnote *1: no interleaving).
//!
//! *Best effort (3.3.5).* BE requests are served in increasing LBA order from the head
//! (C-SCAN), "starting from the end LBA of the last request executed (either real-time
//! or best-effort)". Aging, which the paper requires but does not specify: a BE request
//! that has waited at least [`SchedSettings::be_max_age_ns`] (default 1 s) since its
//! submission is served before younger ones, oldest first.
//!
//! ## Defaults
//! m = 500 ms, e = 100 ms (AVFS 4.1), BE aging 1 s ([`SchedSettings`]).
//!
//! ## Faithfulness
//! Exact to the text of 3.3.3-3.3.5 except where the text is silent: the choice of e_0
//! (head, above), the aging rule (above), the in-flight term of H (from the dvrfs brief),
//! and the deadline-ordered list, realised as a per-subtree minimum deadline in the same
//! tree (same answers, one structure). Request merging comes from the framework, as the
//! paper's mixer got it from the Linux block layer: a request merged into an entry of
//! the running batch is served with it. Not modelled: plugging.
//!
//! *Classes.* Metadata requests (journal, checkpoints) carry a deadline and are planned
//! and batched exactly like real-time ones; only best-effort requests lack one.
//!
//! ## Known weakness (fixed in `mixer`)
//! The mixer is not work-conserving: it idles the disk until the latest safe moment
//! even when the disk is near saturation; requests that arrive during a batch with a
//! later deadline than the batch's latest wait for the next batch even when they
//! continue a run just ahead of the head; and near capacity the reduced and EDF
//! windows break sequential runs, the backlog grows, and it collapses into EDF.
//!
//! [`MixerStats`] counts batches, dispatches per window, holds and joins.

use super::hold_tree::{key_of, HoldTree, Key};

/// Time constant of the real-time load estimate, ns.
const LOAD_TAU_NS: f64 = 5.0e9;

/// The load regime switches to heavy above this real-time share of disk time, and
/// back to light below the lower one (hysteresis: no flapping at the edge).
const LOAD_HEAVY_ABOVE: f64 = 0.6;
const LOAD_LIGHT_BELOW: f64 = 0.5;
use super::*;
use std::collections::BTreeMap;

/// The switches that make `mixer` out of `avfs`. All off = the paper.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Rules {
    pub name: &'static str,
    /// Stop holding when `H - t <= work * hold_work_percent / 100`, `work` being the
    /// estimated service time of all pending RT requests; 0 = hold until H (the paper).
    pub hold_work_percent: i64,
    /// `mixer` joins: an RT request that continues a run of the batch ahead of the
    /// sweep joins it when that endangers no margin, whatever its deadline; a batch
    /// that starts back-to-back with the previous one is *saturated* and takes every
    /// arrival in C-SCAN order until it is light enough to hold again.
    pub join_ahead: bool,
    /// Keep the full C-SCAN window while C-SCAN order from the head still completes
    /// every batch request at least this long before its deadline (estimated); the
    /// paper's reduced and EDF windows apply only when it does not. `None` = the paper.
    pub sweep_guard_ns: Option<u64>,
    /// A read that starts at most this many sectors *before* the end of the previous
    /// one (an unaligned reader's pages overlap) still continues the run: it counts as
    /// ahead of the head and may ride along. 0 = the paper (exact contiguity only).
    pub overlap_sectors: u64,
    /// Plan batches with the best-effort guarantee's share of the time set aside
    /// while best-effort has work (`mixer`); false = the paper.
    pub plan_be_share: bool,
    /// `mixer`: how to hold while the real-time load is light and best-effort has no
    /// work (fix 7); `None`: one rule at every load (the paper).
    pub light_load: Option<LightLoad>,
    /// `mixer` (fix 8): at or above this real-time share of disk time (percent, over
    /// the load estimate's time constant) every batch is saturated; 0 = never.
    pub saturated_load_percent: u64,
    /// `mixer` (fix 9): a saturated batch serves a best-effort request its sweep
    /// passes, as C-SCAN over every request would.
    pub be_in_sweep: bool,
    /// `mixer` (fix 10): no hold (the disk never idles with real-time work queued)
    /// before the load has been measured for one time constant, nor at or above this
    /// real-time share of disk time (percent). `None`: hold at any load (the paper).
    pub work_conserving_load_percent: Option<u64>,
    /// `mixer` (fix 11): in a saturated batch, a real-time read within e of its
    /// deadline that the sweep would not complete by then is served first, up to this
    /// share of the sweep's time (percent); 0 = never (the paper).
    pub rescue_share_percent: u64,
}

/// The hold under light load (fix 7 of `mixer`).
#[derive(Clone, Copy, Debug)]
pub(crate) struct LightLoad {
    /// The hold-work percentage (fix 1) that applies instead.
    pub hold_work_percent: i64,
    /// The hold ends when this share of the margin is left (percent; 100: all of it).
    pub hold_margin_percent: i64,
}

/// What the mixer did, for reports: dispatches per window and how often it held.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MixerStats {
    pub batches: u64,
    pub cscan_dispatches: u64,
    pub reduced_dispatches: u64,
    pub edf_dispatches: u64,
    pub best_effort_dispatches: u64,
    /// `Wait { until_ns: Some(H) }` answers.
    pub holds: u64,
    /// Requests that joined a running batch.
    pub joined: u64,
    /// Batches that started saturated (`mixer`: back-to-back, C-SCAN joins).
    pub saturated_batches: u64,
    /// Saturated batches turned back into held pending sets.
    pub desaturations: u64,
    /// Best-effort commands the framework's guarantee sent around the mixer.
    pub forced_best_effort: u64,
    /// Switches of the load regime.
    pub to_light: u64,
    pub to_heavy: u64,
    /// Best-effort requests a saturated batch served as its sweep passed them.
    pub be_in_sweep: u64,
    /// Real-time reads a saturated batch served out of C-SCAN order so as not to
    /// fail them (`mixer`, fix 11).
    pub rescued_reads: u64,
}

/// The shared engine of `avfs` and `mixer`.
pub(crate) struct TrafficMixer<E> {
    settings: SchedSettings,
    rules: Rules,
    est: E,
    /// RT requests waiting for a batch.
    pending: HoldTree,
    /// RT requests of the running batch.
    batch: HoldTree,
    batch_active: bool,
    /// Latest deadline in the batch when it started (joiners are earlier by rule).
    batch_latest_deadline_ns: u64,
    /// LBA at which the batch's sweep started, and whether the sweep has wrapped.
    sweep_start_lba: u64,
    sweep_wrapped: bool,
    /// Fix 11: when C-SCAN order last wrapped, and the time rescues took since.
    sweep_began_ns: u64,
    rescue_ns: u64,
    /// The disk idled (held) or ran best effort since the last batch ended.
    slack_seen: bool,
    /// The running batch started right after the previous one, with no hold or best
    /// effort in between: the disk is saturated.
    batch_saturated: bool,
    /// BE requests by (lba, id) and by (submit, id) for aging.
    be_by_lba: BTreeMap<Key, Request>,
    be_by_age: BTreeMap<(u64, ReqId), u64>,
    /// Real-time reads held (pending or in the batch), by deadline (fix 11).
    reads_by_deadline: std::collections::BTreeSet<(u64, Key)>,
    /// The longest read ever indexed there (sectors): bounds how early a read can be
    /// urgent, so the rescue check stops at the first deadline beyond that.
    longest_read_sectors: u32,
    /// End LBA of the last dispatched request.
    head_lba: u64,
    /// Whether the last dispatched command was a write.
    head_write: bool,
    /// Dispatched entries: id -> estimated end time.
    in_flight: BTreeMap<ReqId, u64>,
    /// Best-effort commands among them, and when best effort last had work.
    be_in_flight: u32,
    be_last_ns: u64,
    /// Dispatch times of the commands in flight.
    sent_ns: BTreeMap<ReqId, u64>,
    /// Real-time (and metadata) device time, decayed with [`LOAD_TAU_NS`], and when
    /// it was last updated; `heavy`: the load regime (with hysteresis).
    rt_busy_decayed_ns: f64,
    load_updated_ns: u64,
    last_complete_ns: u64,
    heavy: bool,
    stats: MixerStats,
}

impl<E: ServiceEstimate> TrafficMixer<E> {
    /// Settings are validated by the framework ([`SchedSettings::validate`]); invalid
    /// ones give odd schedules, never a panic.
    pub fn new(settings: &SchedSettings, rules: Rules, est: E) -> Self {
        Self {
            settings: *settings,
            rules,
            est,
            pending: HoldTree::default(),
            batch: HoldTree::default(),
            batch_active: false,
            batch_latest_deadline_ns: 0,
            sweep_start_lba: 0,
            sweep_wrapped: false,
            sweep_began_ns: 0,
            rescue_ns: 0,
            slack_seen: true,
            batch_saturated: false,
            be_by_lba: BTreeMap::new(),
            be_by_age: BTreeMap::new(),
            reads_by_deadline: std::collections::BTreeSet::new(),
            longest_read_sectors: 0,
            head_lba: 0,
            head_write: false,
            in_flight: BTreeMap::new(),
            be_in_flight: 0,
            be_last_ns: 0,
            sent_ns: BTreeMap::new(),
            // As if the disk had been fully busy: light load must be measured first.
            rt_busy_decayed_ns: LOAD_TAU_NS,
            load_updated_ns: 0,
            last_complete_ns: 0,
            // Start in the safe regime; light load is recognised within a few
            // time constants.
            heavy: true,
            stats: MixerStats::default(),
        }
    }

    pub fn stats(&self) -> MixerStats {
        self.stats
    }

    fn in_flight_remaining_ns(&self, now_ns: u64) -> i64 {
        self.in_flight
            .values()
            .map(|&end| end.saturating_sub(now_ns) as i64)
            .sum()
    }

    /// `(H, pending work)` in ns, `None` without pending RT requests.
    pub fn hold_and_work(&self, now_ns: u64) -> Option<(i64, i64)> {
        let (raw, work) = self.pending.hold_and_work(self.sweep_lba(), &self.est)?;
        let h = raw
            .saturating_sub(self.settings.margin_ns as i64)
            .saturating_sub(self.in_flight_remaining_ns(now_ns))
            .saturating_sub(self.be_reserve_ns(work));
        Some((h, work))
    }

    /// `mixer`: the time the best-effort guarantee will take from a batch of `work`
    /// while best-effort has work (the framework may send a best-effort command
    /// between any two batch commands, up to the share of the time).
    fn be_reserve_ns(&self, work: i64) -> i64 {
        let s = self.settings.be_share;
        if !self.rules.plan_be_share
            || s <= 0.0
            || (self.be_by_lba.is_empty() && self.be_in_flight == 0)
        {
            return 0;
        }
        (work as f64 * s / (1.0 - s)) as i64
    }

    /// The batch's own `(hold time, work)`: how late its C-SCAN order may start and
    /// still give every batch member its margin, and its estimated service time.
    fn batch_hold_and_work(&self, now_ns: u64) -> Option<(i64, i64)> {
        let (raw, work) = self.batch.hold_and_work(self.sweep_lba(), &self.est)?;
        let h = raw
            .saturating_sub(self.settings.margin_ns as i64)
            .saturating_sub(self.in_flight_remaining_ns(now_ns))
            .saturating_sub(self.be_reserve_ns(work));
        Some((h, work))
    }

    pub fn batch_active(&self) -> bool {
        self.batch_active
    }
    #[cfg(test)]
    pub fn batch_len(&self) -> usize {
        self.batch.len()
    }

    fn be_next(&self, now_ns: u64) -> Option<Key> {
        let (&(submit, id), &lba) = self.be_by_age.first_key_value()?;
        if now_ns.saturating_sub(submit) >= self.settings.be_max_age_ns {
            return Some((lba, id));
        }
        self.be_by_lba
            .range((self.head_lba, 0)..)
            .next()
            .or_else(|| self.be_by_lba.first_key_value())
            .map(|(k, _)| *k)
    }

    /// Where the C-SCAN order starts: the head, less the tolerated overlap.
    fn sweep_lba(&self) -> u64 {
        self.head_lba.saturating_sub(self.rules.overlap_sectors)
    }

    /// `next` continues the run that ends at `end`: it starts there, or it is a read
    /// overlapping the run's last `overlap_sectors` and reaching beyond it.
    fn continues_run(&self, next: &Request, end: u64, write: bool) -> bool {
        next.lba == end
            || (!write
                && !next.write
                && next.lba < end
                && next.lba + self.rules.overlap_sectors >= end
                && next.end_lba() > end)
    }

    fn estimate(&self, r: &Request) -> u64 {
        self.est
            .service_after_ns(r.lba, r.sectors, r.write, Some(self.head_lba))
    }

    /// Hands out an entry, noting where the head goes and when the disk will be free.
    fn send(&mut self, cmd: Request, now_ns: u64) -> Pick {
        self.note_sent(&cmd, now_ns);
        Pick::Dispatch(cmd)
    }

    fn note_sent(&mut self, cmd: &Request, now_ns: u64) {
        self.sent_ns.insert(cmd.id, now_ns);
        let end = now_ns + self.estimate(cmd);
        self.head_lba = cmd.end_lba();
        self.head_write = cmd.write;
        self.in_flight.insert(cmd.id, end);
        self.be_in_flight += !cmd.is_realtime() as u32;
        self.check_in_flight();
    }

    /// Every command sent is completed: the commands counted in flight never exceed
    /// the queue depth (a leak would lower every hold by phantom work, and make each
    /// dispatch slower as the map grew).
    fn check_in_flight(&self) {
        assert!(
            self.in_flight.len() <= self.settings.queue_depth as usize,
            "{} counts {} commands in flight at queue depth {}: a command sent was never completed",
            if self.rules.join_ahead {
                "mixer"
            } else {
                "avfs"
            },
            self.in_flight.len(),
            self.settings.queue_depth
        );
    }

    fn start_batch(&mut self, now_ns: u64) {
        assert!(
            self.batch.is_empty(),
            "a batch started while the last one held requests"
        );
        self.batch = self.pending.take_all();
        self.batch_active = true;
        self.stats.batches += 1;
        self.batch_latest_deadline_ns = self.batch.total().max_td;
        self.sweep_start_lba = self.head_lba;
        self.sweep_wrapped = false;
        // Saturated: no slack at all since the last batch, or the load near saturation.
        self.batch_saturated =
            self.rules.join_ahead && (!self.slack_seen || self.near_saturation(now_ns));
        self.stats.saturated_batches += self.batch_saturated as u64;
        self.slack_seen = false;
    }

    /// One dispatch from the running batch; `None` when the batch is empty.
    fn serve_batch(&mut self, now_ns: u64) -> Option<Pick> {
        let earliest = self.batch.total().min_td;
        if self.batch.is_empty() {
            return None;
        }
        let (m, e) = (self.settings.margin_ns, self.settings.urgent_ns);
        // `mixer`: a saturated batch is a plain C-SCAN queue; another batch keeps
        // C-SCAN order while it still meets every deadline (estimated).
        let order_feasible = self.rules.sweep_guard_ns.is_some_and(|guard| {
            self.batch_hold_and_work(now_ns).is_some_and(|(h, _)| {
                // h has m subtracted; the test is against the guard instead.
                h.saturating_add(m as i64).saturating_sub(guard as i64) >= now_ns as i64
            })
        });
        let sweep_feasible = self.batch_saturated || order_feasible;
        if self.batch_saturated && self.rules.rescue_share_percent > 0 {
            if let Some(key) = self.read_to_rescue(now_ns) {
                self.stats.rescued_reads += 1;
                let r = self.batch.remove(key, &self.est).expect("key just found");
                self.rescue_ns += 2 * self.estimate(&r);
                self.forget_read(&r);
                // A detour: C-SCAN order goes on from where the sweep was (as after a
                // best-effort command the guarantee forced in).
                let (head, write) = (self.head_lba, self.head_write);
                let pick = self.send(r, now_ns);
                (self.head_lba, self.head_write) = (head, write);
                return Some(pick);
            }
        }
        if self.batch_saturated && self.rules.be_in_sweep {
            // A saturated batch is C-SCAN over best effort too: a best-effort request
            // the sweep passes before its next real-time one costs its transfer only.
            if let Some(key) = self.be_in_sweep() {
                self.stats.be_in_sweep += 1;
                self.stats.best_effort_dispatches += 1;
                let r = self.be_by_lba.remove(&key).expect("BE key present");
                self.be_by_age.remove(&(r.submit_ns, r.id));
                return Some(self.send(r, now_ns));
            }
        }
        if sweep_feasible {
            // C-SCAN order meets every deadline with the guard to spare: keep it.
        } else if earliest <= now_ns.saturating_add(e) {
            // EDF window.
            let urgent = self.batch.earliest_deadline().expect("non-empty batch");
            self.stats.edf_dispatches += 1;
            let key = key_of(urgent);
            let r = self.batch.remove(key, &self.est).expect("key just found");
            self.forget_read(&r);
            return Some(self.send(r, now_ns));
        }
        let bound = if !sweep_feasible && earliest <= now_ns.saturating_add(m) {
            // Reduced C-SCAN window: only T_D < t_d + m.
            earliest.saturating_add(m)
        } else {
            u64::MAX
        };
        if bound == u64::MAX {
            self.stats.cscan_dispatches += 1;
        } else {
            self.stats.reduced_dispatches += 1;
        }
        let next = if bound == u64::MAX {
            self.batch.cscan_next(self.sweep_lba())
        } else {
            self.batch.cscan_next_td_below(self.sweep_lba(), bound)
        };
        let next = *next.expect("window holds the earliest request");
        let r = self
            .batch
            .remove(key_of(&next), &self.est)
            .expect("key just found");
        self.forget_read(&r);
        if r.lba < self.sweep_lba() {
            self.sweep_wrapped = true;
            self.sweep_began_ns = now_ns;
            self.rescue_ns = 0;
        }
        Some(self.send(r, now_ns))
    }

    /// Fix 11's index entry of a request: real-time reads that fail when late (a
    /// playback's), by deadline; `None` for anything else or without the fix.
    fn read_key(&self, r: &Request) -> Option<(u64, Key)> {
        (self.rules.rescue_share_percent > 0
            && r.class == Class::RealTime
            && !r.write
            && r.drop_if_late)
            .then(|| (r.deadline_ns.unwrap_or(u64::MAX), key_of(r)))
    }

    fn index_read(&mut self, r: &Request) {
        if let Some(k) = self.read_key(r) {
            self.reads_by_deadline.insert(k);
            self.longest_read_sectors = self.longest_read_sectors.max(r.sectors);
        }
    }

    fn forget_read(&mut self, r: &Request) {
        if let Some(k) = self.read_key(r) {
            self.reads_by_deadline.remove(&k);
        }
    }

    /// Fix 11: the earliest-deadline real-time read of the batch that is urgent (its
    /// deadline within e of the moment its own service must start, so a long merged
    /// read is urgent earlier than a short one) and that the sweep, as it stands, would
    /// complete only after its deadline: the work C-SCAN order serves before it, the
    /// command in flight and its own service time. A detour delays every read the
    /// sweep would serve before it by the rescued read's service time, so a read is
    /// not rescued at the cost of an earlier-deadline read that would then be late.
    /// Only the eight earliest reads are looked at (the index also holds pending
    /// reads, which are skipped), so a dispatch stays O(log n).
    fn read_to_rescue(&self, now_ns: u64) -> Option<Key> {
        // Rescues are a detour of two positionings each: capped at a share of the
        // sweep's time, so that past capacity they cannot turn the sweep into EDF.
        let share = self.rules.rescue_share_percent;
        if share == 0 || self.rescue_ns * 100 > now_ns.saturating_sub(self.sweep_began_ns) * share {
            return None;
        }
        let urgent_until = now_ns.saturating_add(self.settings.urgent_ns);
        let busy = self.in_flight_remaining_ns(now_ns);
        // No read is urgent earlier than the longest one takes at the slowest rate
        // with twice the average positioning (a full-stroke seek is about twice the
        // average one).
        let (sectors, inner) = (self.longest_read_sectors, u64::MAX);
        let positioned = self.est.service_ns(inner, sectors, false, false);
        let position = positioned
            - self
                .est
                .service_ns(inner, sectors, false, true)
                .min(positioned);
        let longest = positioned + position;
        // The least time to spare of the earlier-deadline reads that are on time.
        let mut spare = i64::MAX;
        for &(deadline, key) in self.reads_by_deadline.iter().take(8) {
            if deadline > urgent_until.saturating_add(longest) {
                return None;
            }
            let Some(r) = self.batch.get(key) else {
                continue;
            };
            let own = self.estimate(r) as i64;
            let before = self.batch.cscan_work_before(self.sweep_lba(), key);
            let late_by = now_ns as i64 + busy + own + before - deadline as i64;
            let urgent = deadline <= urgent_until.saturating_add(own as u64);
            if late_by <= 0 {
                spare = spare.min(-late_by);
            } else if urgent && own <= spare {
                return Some(key);
            }
        }
        None
    }

    /// The best-effort request the sweep reaches before its next real-time request, if
    /// any (C-SCAN order from the sweep position).
    fn be_in_sweep(&self) -> Option<Key> {
        let start = self.sweep_lba();
        let rt = self.batch.cscan_next(start)?;
        let be = self
            .be_by_lba
            .range((start, 0)..)
            .next()
            .or_else(|| self.be_by_lba.first_key_value())
            .map(|(k, _)| *k)?;
        // Distance ahead of the sweep position, wrapping past the end of the disk.
        let ahead = |lba: u64| lba.wrapping_sub(start);
        (ahead(be.0) < ahead(rt.lba)).then_some(be)
    }

    fn send_be(&mut self, key: Key, now_ns: u64) -> Pick {
        self.stats.best_effort_dispatches += 1;
        self.slack_seen = true;
        let r = self.be_by_lba.remove(&key).expect("BE key present");
        self.be_by_age.remove(&(r.submit_ns, r.id));
        self.send(r, now_ns)
    }

    /// Whether a request arriving during the batch may join it (3.3.4, plus the
    /// `join_ahead` fix). Inserts it into the batch if so.
    fn try_join(&mut self, req: Request, now_ns: u64) -> Result<(), Request> {
        let deadline = req.deadline_ns.unwrap_or(u64::MAX);
        if deadline < self.batch_latest_deadline_ns {
            self.batch.insert(req, &self.est);
            return Ok(());
        }
        if !self.rules.join_ahead {
            return Err(req);
        }
        if self.batch_saturated {
            // Saturated: the batch is a plain C-SCAN queue (see `mixer.rs`).
            self.batch.insert(req, &self.est);
            return Ok(());
        }
        let ahead =
            req.lba >= self.sweep_lba() && (!self.sweep_wrapped || req.lba < self.sweep_start_lba);
        // Only a request that continues a run already in the batch (or the command
        // just sent) rides along: it costs transfer time only. Taking any request
        // ahead of the head would serve it before its stream's next requests have
        // accumulated, breaking up the sequential runs the hold exists to build.
        let continues = self.batch_saturated
            || self.continues_run(&req, self.head_lba, self.head_write)
            || self
                .batch
                .last_lt((req.lba, 0))
                .is_some_and(|p| self.continues_run(&req, p.end_lba(), p.write));
        if !ahead || !continues {
            return Err(req);
        }
        // Accept when (a) the pending requests, which start after the batch, keep
        // their margin: H_pending - W_batch(after) >= now, and (b) the batch's hold
        // time after joining is not below min(now, before); `before` is needed only
        // when `after` < now.
        let key = key_of(&req);
        let now = now_ns as i64;
        self.batch.insert(req, &self.est);
        let (after, work_after) = self.batch_hold_and_work(now_ns).unwrap_or((i64::MAX, 0));
        let pending_ok = self
            .hold_and_work(now_ns)
            .is_none_or(|(h, _)| h.saturating_sub(work_after) >= now);
        if pending_ok && after >= now {
            return Ok(());
        }
        let probe = self.batch.remove(key, &self.est).expect("just inserted");
        if !pending_ok {
            return Err(probe);
        }
        let before = self
            .batch_hold_and_work(now_ns)
            .map_or(i64::MAX, |(h, _)| h);
        if after >= before {
            self.batch.insert(probe, &self.est);
            Ok(())
        } else {
            Err(probe)
        }
    }

    pub fn insert(&mut self, req: Request, now_ns: u64) {
        if !req.is_realtime() {
            self.be_last_ns = self.be_last_ns.max(now_ns);
            self.be_by_age.insert((req.submit_ns, req.id), req.lba);
            self.be_by_lba.insert(key_of(&req), req);
            return;
        }
        self.index_read(&req);
        let req = if self.batch_active {
            match self.try_join(req, now_ns) {
                Ok(()) => {
                    self.stats.joined += 1;
                    return;
                }
                Err(r) => r,
            }
        } else {
            req
        };
        self.pending.insert(req, &self.est);
    }

    fn hold_end(&self, h: i64, work: i64, now_ns: u64) -> i64 {
        h.saturating_sub(work.saturating_mul(self.hold_work_percent(now_ns)) / 100)
    }

    pub fn remove(&mut self, req: &Request) -> bool {
        let key = key_of(req);
        if !req.is_realtime() {
            if self.be_by_lba.remove(&key).is_none() {
                return false;
            }
            self.be_by_age.remove(&(req.submit_ns, req.id));
            return true;
        }
        let held = self.batch.remove(key, &self.est).is_some()
            || self.pending.remove(key, &self.est).is_some();
        if held {
            self.forget_read(req);
        }
        held
    }

    /// A queued entry grew by merging: it stays where it was (a batch member stays in
    /// the batch: the merge costs transfer time only).
    pub fn merged(&mut self, old: &Request, new: Request, now_ns: u64) {
        let key = key_of(old);
        if !old.is_realtime() {
            let held = self.remove(old);
            assert!(held, "merged a best-effort entry the mixer does not hold");
            self.insert(new, now_ns);
        } else {
            let set = if self.batch.remove(key, &self.est).is_some() {
                &mut self.batch
            } else if self.pending.remove(key, &self.est).is_some() {
                &mut self.pending
            } else {
                panic!("merged a real-time entry the mixer does not hold: {old:?}");
            };
            set.insert(new, &self.est);
            self.forget_read(old);
            self.index_read(&new);
        }
    }

    /// The framework sent a best-effort command itself (the guarantee). Under `mixer`
    /// it is not slack: the disk was taken, not left idle, so a saturated disk stays
    /// saturated.
    pub fn forced(&mut self, cmd: &Request, now_ns: u64) {
        self.stats.forced_best_effort += 1;
        if !self.rules.join_ahead {
            self.slack_seen = true;
            self.note_sent(cmd, now_ns);
            return;
        }
        // `mixer`: the sweep goes on where it was (C-SCAN keeps its position across an
        // interruption); only the time the disk is taken counts.
        let end = now_ns + self.estimate(cmd);
        self.in_flight.insert(cmd.id, end);
        self.sent_ns.insert(cmd.id, now_ns);
        self.be_in_flight += 1;
        self.check_in_flight();
    }

    pub fn dispatch(&mut self, now_ns: u64) -> Pick {
        assert!(
            self.reads_by_deadline.len() <= self.pending.len() + self.batch.len(),
            "the mixer's read index names requests it does not hold"
        );
        if self.batch_active
            && self.batch_saturated
            && self.pending.is_empty()
            && self.may_hold(now_ns)
        {
            // A saturated batch that has become light again goes back to holding.
            if let Some((h, work)) = self.batch_hold_and_work(now_ns) {
                if self.hold_end(h, work, now_ns) > now_ns as i64 {
                    self.pending = self.batch.take_all();
                    self.batch_active = false;
                    self.batch_saturated = false;
                    self.stats.desaturations += 1;
                }
            }
        }
        if self.batch_active {
            if let Some(d) = self.serve_batch(now_ns) {
                return d;
            }
            self.batch_active = false;
        }
        if let Some((h, work)) = self.hold_and_work(now_ns) {
            let hold_end = self
                .hold_end(h, work, now_ns)
                .saturating_add(self.light_margin_bonus_ns(now_ns));
            let now = now_ns as i64;
            if hold_end > now && self.may_hold(now_ns) {
                match self.be_next(now_ns) {
                    Some(key) => {
                        let ts = self.estimate(&self.be_by_lba[&key]) as i64;
                        if hold_end >= now.saturating_add(ts) {
                            return self.send_be(key, now_ns);
                        }
                    }
                    None => {
                        self.stats.holds += 1;
                        self.slack_seen = true;
                        return Pick::Wait {
                            until_ns: Some(hold_end as u64),
                        };
                    }
                }
            }
            self.start_batch(now_ns);
            return self
                .serve_batch(now_ns)
                .expect("a batch started from pending requests is not empty");
        }
        match self.be_next(now_ns) {
            Some(key) => self.send_be(key, now_ns),
            None => {
                self.slack_seen = true;
                Pick::Wait { until_ns: None }
            }
        }
    }

    pub fn complete(&mut self, cmd: &Request, now_ns: u64) {
        if self.in_flight.remove(&cmd.id).is_some() && !cmd.is_realtime() {
            self.be_in_flight -= 1;
        }
        if !cmd.is_realtime() {
            self.be_last_ns = self.be_last_ns.max(now_ns);
        }
        let sent = self.sent_ns.remove(&cmd.id).unwrap_or(now_ns);
        let service = now_ns.saturating_sub(sent.max(self.last_complete_ns));
        self.last_complete_ns = self.last_complete_ns.max(now_ns);
        self.note_load(now_ns, if cmd.is_realtime() { service } else { 0 });
    }

    /// Updates the decayed real-time device time and the load regime.
    fn note_load(&mut self, now_ns: u64, rt_service_ns: u64) {
        let dt = now_ns.saturating_sub(self.load_updated_ns) as f64;
        self.load_updated_ns = self.load_updated_ns.max(now_ns);
        self.rt_busy_decayed_ns =
            self.rt_busy_decayed_ns * (-dt / LOAD_TAU_NS).exp() + rt_service_ns as f64;
        let load = self.rt_busy_decayed_ns / LOAD_TAU_NS;
        let (up, down) = (LOAD_HEAVY_ABOVE, LOAD_LIGHT_BELOW);
        if self.heavy && load < down {
            self.heavy = false;
            self.stats.to_light += 1;
        } else if !self.heavy && load > up {
            self.heavy = true;
            self.stats.to_heavy += 1;
        }
    }

    /// The real-time share of disk time, decayed to `now_ns`.
    fn rt_load(&self, now_ns: u64) -> f64 {
        let dt = now_ns.saturating_sub(self.load_updated_ns) as f64;
        self.rt_busy_decayed_ns * (-dt / LOAD_TAU_NS).exp() / LOAD_TAU_NS
    }

    /// Fix 10: whether the mixer may idle the disk to hold at all. Not in the load
    /// estimate's first time constant (it starts at time 0 as if the disk had been fully
    /// busy: an unmeasured load is taken as saturated), and not while the load is at or
    /// above `work_conserving_load_percent`: at saturation every moment the disk idles
    /// is lost for good, since the backlog it leaves never drains.
    fn may_hold(&self, now_ns: u64) -> bool {
        let Some(percent) = self.rules.work_conserving_load_percent else {
            return true;
        };
        now_ns as f64 >= LOAD_TAU_NS && self.rt_load(now_ns) * 100.0 < percent as f64
    }

    /// Fix 8: real-time work takes so much of the disk that every batch is a plain
    /// C-SCAN queue, as if no slack had been seen.
    fn near_saturation(&self, now_ns: u64) -> bool {
        self.rules.saturated_load_percent > 0
            && self.rt_load(now_ns) * 100.0 >= self.rules.saturated_load_percent as f64
    }

    /// The share of the hold the pending work cuts off (fix 1), by load regime.
    fn hold_work_percent(&self, now_ns: u64) -> i64 {
        match self.rules.light_load {
            Some(l) if self.light(now_ns) => l.hold_work_percent,
            _ => self.rules.hold_work_percent,
        }
    }

    /// Fix 7 applies: light real-time load, and no best-effort work for a while (the
    /// time the hold saves would go to best effort anyway, at the streams' risk).
    fn light(&self, now_ns: u64) -> bool {
        self.rules.light_load.is_some()
            && !self.heavy
            && !self.be_active()
            && now_ns.saturating_sub(self.be_last_ns) > LOAD_TAU_NS as u64
    }

    /// Under light load with no best-effort work, how much of the margin the hold may
    /// use (fix 7).
    fn light_margin_bonus_ns(&self, now_ns: u64) -> i64 {
        match self.rules.light_load {
            Some(l) if self.light(now_ns) => {
                self.settings.margin_ns as i64 * (100 - l.hold_margin_percent) / 100
            }
            _ => 0,
        }
    }

    fn be_active(&self) -> bool {
        !self.be_by_lba.is_empty() || self.be_in_flight > 0
    }

    pub fn queued(&self) -> u64 {
        (self.pending.len() + self.batch.len() + self.be_by_lba.len()) as u64
    }

    pub fn name(&self) -> &'static str {
        self.rules.name
    }

    pub fn stats_list(&self) -> Vec<(&'static str, u64)> {
        let s = self.stats;
        vec![
            ("batches", s.batches),
            ("cscan_dispatches", s.cscan_dispatches),
            ("reduced_dispatches", s.reduced_dispatches),
            ("edf_dispatches", s.edf_dispatches),
            ("best_effort_dispatches", s.best_effort_dispatches),
            ("forced_best_effort", s.forced_best_effort),
            ("to_light", s.to_light),
            ("to_heavy", s.to_heavy),
            ("holds", s.holds),
            ("joined", s.joined),
            ("saturated_batches", s.saturated_batches),
            ("desaturations", s.desaturations),
            ("be_in_sweep", s.be_in_sweep),
            ("rescued_reads", s.rescued_reads),
        ]
    }
}

/// The AVFS traffic mixer; see the module docs. It plans with eq. 1 as written
/// ([`Eq1`]): the average seek for every non-sequential request.
pub struct Avfs<E = Box<dyn ServiceEstimate>>(TrafficMixer<Eq1<E>>);

impl<E: ServiceEstimate> Avfs<E> {
    pub fn new(settings: &SchedSettings, est: E) -> Self {
        let rules = Rules {
            name: "avfs",
            hold_work_percent: 0,
            join_ahead: false,
            sweep_guard_ns: None,
            overlap_sectors: 0,
            plan_be_share: false,
            light_load: None,
            saturated_load_percent: 0,
            be_in_sweep: false,
            work_conserving_load_percent: None,
            rescue_share_percent: 0,
        };
        Self(TrafficMixer::new(settings, rules, Eq1(est)))
    }

    /// H (eq. 2-3, margin and in-flight remainder included), `None` without pending
    /// real-time requests.
    pub fn hold_ns(&self, now_ns: u64) -> Option<i64> {
        self.0.hold_and_work(now_ns).map(|(h, _)| h)
    }

    /// Whether a real-time batch is running.
    pub fn batch_active(&self) -> bool {
        self.0.batch_active()
    }

    pub fn stats(&self) -> MixerStats {
        self.0.stats()
    }
}

macro_rules! delegate_policy {
    ($t:ident) => {
        impl<E: ServiceEstimate> Policy for $t<E> {
            fn name(&self) -> &'static str {
                self.0.name()
            }
            fn insert(&mut self, req: Request, now_ns: u64) {
                self.0.insert(req, now_ns)
            }
            fn remove(&mut self, req: &Request) -> bool {
                self.0.remove(req)
            }
            fn merged(&mut self, old: &Request, new: Request, now_ns: u64) {
                self.0.merged(old, new, now_ns)
            }
            fn dispatch(&mut self, now_ns: u64, _free_slots: u32) -> Pick {
                self.0.dispatch(now_ns)
            }
            fn forced(&mut self, cmd: &Request, now_ns: u64) {
                self.0.forced(cmd, now_ns)
            }
            fn complete(&mut self, cmd: &Request, now_ns: u64) {
                self.0.complete(cmd, now_ns)
            }
            fn queued(&self) -> u64 {
                self.0.queued()
            }
            fn stats(&self) -> Vec<(&'static str, u64)> {
                self.0.stats_list()
            }
        }
    };
}
pub(crate) use delegate_policy;

delegate_policy!(Avfs);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sched::testing::{Direct, LinearEstimate};

    const MS: u64 = 1_000_000;

    fn rt(id: u64, lba: u64, deadline_ns: u64, write: bool) -> Request {
        Request {
            id,
            lba,
            sectors: 1024,
            write,
            class: Class::RealTime,
            deadline_ns: Some(deadline_ns),
            owner: id as u32,
            submit_ns: 0,
            drop_if_late: !write,
        }
    }
    fn be(id: u64, lba: u64, submit_ns: u64) -> Request {
        Request {
            id,
            lba,
            sectors: 64,
            write: false,
            class: Class::BestEffort,
            deadline_ns: None,
            owner: 99,
            submit_ns,
            drop_if_late: false,
        }
    }
    fn avfs() -> Direct<Avfs<LinearEstimate>> {
        Direct::new(Avfs::new(
            &SchedSettings::default(),
            LinearEstimate::default(),
        ))
    }
    fn dispatched_id(d: Pick) -> u64 {
        match d {
            Pick::Dispatch(r) => r.id,
            other => panic!("expected a dispatch, got {other:?}"),
        }
    }

    #[test]
    fn holds_until_h_then_serves_in_lba_order() {
        let mut s = avfs();
        let est = LinearEstimate::default();
        // Three requests far apart, deadlines 2 s out.
        let lbas = [3_000_000u64, 1_000_000, 2_000_000];
        for (i, &l) in lbas.iter().enumerate() {
            s.insert(rt(i as u64 + 1, l, 2_000 * MS, false), 0);
        }
        // H = 2 s - 500 ms - (3 non-sequential T_S): the last in LBA order is binding.
        let total: u64 = [1_000_000u64, 2_000_000, 3_000_000]
            .iter()
            .map(|&l| est.service_ns(l, 1024, false, false))
            .sum();
        let h = (2_000 * MS - 500 * MS - total) as i64;
        assert_eq!(s.hold_ns(0), Some(h));
        assert_eq!(
            s.dispatch(0),
            Pick::Wait {
                until_ns: Some(h as u64)
            }
        );
        assert!(!s.batch_active());
        // At H the batch runs in ascending LBA order from the head (0).
        let mut t = h as u64;
        let mut order = Vec::new();
        for _ in 0..3 {
            let id = dispatched_id(s.dispatch(t));
            s.complete(id, t + 20 * MS);
            t += 20 * MS;
            order.push(id);
        }
        assert_eq!(order, vec![2, 3, 1]);
        assert_eq!(s.dispatch(t), Pick::Wait { until_ns: None });
        assert_eq!(s.queued(), 0);
    }

    #[test]
    fn batch_starts_from_the_head_and_wraps() {
        let mut s = avfs();
        s.insert(be(100, 2_500_000, 0), 0);
        // BE request moves the head to ~2.5M.
        assert_eq!(dispatched_id(s.dispatch(0)), 100);
        s.complete(100, MS);
        for (i, l) in [1_000_000u64, 3_000_000, 2_000_000, 4_000_000]
            .iter()
            .enumerate()
        {
            s.insert(rt(i as u64 + 1, *l, 550 * MS, false), MS);
        }
        let mut order = Vec::new();
        let mut t = 2 * MS;
        while let Pick::Dispatch(r) = s.dispatch(t) {
            s.complete(r.id, t);
            order.push(r.lba);
            t += MS;
        }
        assert_eq!(order, vec![3_000_000, 4_000_000, 1_000_000, 2_000_000]);
    }

    #[test]
    fn urgent_requests_run_edf() {
        let mut s = avfs();
        // Earliest deadline within e = 100 ms: EDF, regardless of LBA.
        s.insert(rt(1, 1_000, 90 * MS, false), 0);
        s.insert(rt(2, 2_000, 80 * MS, false), 0);
        s.insert(rt(3, 500, 95 * MS, false), 0);
        s.insert(rt(4, 100, 5_000 * MS, false), 0);
        let mut order = Vec::new();
        for _ in 0..3 {
            let id = dispatched_id(s.dispatch(0));
            s.complete(id, 0);
            order.push(id);
        }
        assert_eq!(order, vec![2, 1, 3]);
    }

    #[test]
    fn reduced_window_serves_only_near_deadlines_in_lba_order() {
        let mut s = avfs();
        // t_d = 300 ms <= t + m: only T_D < 800 ms, in LBA order; the 5 s one waits.
        s.insert(rt(1, 3_000, 300 * MS, false), 0);
        s.insert(rt(2, 1_000, 700 * MS, false), 0);
        s.insert(rt(3, 2_000, 5_000 * MS, false), 0);
        let mut order = Vec::new();
        for _ in 0..3 {
            let id = dispatched_id(s.dispatch(0));
            s.complete(id, 0);
            order.push(id);
        }
        assert_eq!(order, vec![2, 1, 3]);
    }

    #[test]
    fn reads_past_their_deadline_fail_and_writes_are_served_late() {
        // Through the framework, which applies the rule for every policy.
        let mut s = Scheduler::new(
            Box::new(Avfs::new(
                &SchedSettings::default(),
                LinearEstimate::default(),
            )),
            SchedSettings::default(),
        )
        .unwrap();
        s.insert(rt(1, 1_000, 10 * MS, false), 0).unwrap();
        s.insert(rt(2, 2_000, 11 * MS, true), 0).unwrap();
        match s.dispatch(20 * MS) {
            Event::Fail(r) => assert_eq!(r[0].id, 1),
            d => panic!("{d:?}"),
        }
        let c = match s.dispatch(20 * MS) {
            Event::Dispatch(c) => c,
            d => panic!("{d:?}"),
        };
        assert_eq!(c.members[0].id, 2);
        s.complete(c.id, 30 * MS).unwrap();
        let n = s.counters();
        assert_eq!((n.failed, n.completed), (1, 1));
        s.check().unwrap();
    }

    #[test]
    fn best_effort_runs_only_while_h_leaves_room_for_it() {
        let est = LinearEstimate::default();
        let mut s = avfs();
        s.insert(rt(1, 1_000_000, 2_000 * MS, false), 0);
        s.insert(be(10, 5_000_000, 0), 0);
        let h = s.hold_ns(0).unwrap() as u64;
        let ts_be = est.service_ns(5_000_000, 64, false, false);
        // Plenty of room: the BE request runs.
        assert_eq!(dispatched_id(s.dispatch(0)), 10);
        s.complete(10, ts_be);
        // Just too late for another BE request: H < t + T_S(R') -> the RT batch starts.
        s.insert(be(11, 6_000_000, 0), 0);
        let t = h - est.service_ns(6_000_000, 64, false, false) + 1;
        assert_eq!(dispatched_id(s.dispatch(t)), 1);
        assert!(s.batch_active());
        // While the batch is active (last request in flight) no BE request runs either
        // before it completes; then the BE request runs.
        s.complete(1, t + 20 * MS);
        assert_eq!(dispatched_id(s.dispatch(t + 20 * MS)), 11);
    }

    #[test]
    fn best_effort_at_exactly_h_minus_ts_is_admitted() {
        let est = LinearEstimate::default();
        let mut s = avfs();
        s.insert(rt(1, 1_000_000, 2_000 * MS, false), 0);
        s.insert(be(10, 5_000_000, 0), 0);
        let h = s.hold_ns(0).unwrap() as u64;
        let t = h - est.service_ns(5_000_000, 64, false, false);
        assert_eq!(dispatched_id(s.dispatch(t)), 10);
    }

    #[test]
    fn best_effort_ages_out_of_lba_order() {
        let mut s = avfs();
        s.insert(be(1, 9_000, 0), 0);
        s.insert(be(2, 1_000, 500 * MS), 500 * MS);
        // Both young: C-SCAN from head 0 -> LBA 1000 first.
        assert_eq!(dispatched_id(s.dispatch(600 * MS)), 2);
        s.complete(2, 600 * MS);
        s.insert(be(3, 2_000, 600 * MS), 600 * MS);
        // Request 1 is now 1.2 s old: served before the LBA-nearer request 3.
        assert_eq!(dispatched_id(s.dispatch(1_200 * MS)), 1);
    }

    #[test]
    fn arrivals_join_the_batch_only_with_an_earlier_deadline() {
        let mut s = avfs();
        s.insert(rt(1, 1_000_000, 700 * MS, false), 0);
        s.insert(rt(2, 3_000_000, 900 * MS, false), 0);
        // H < 0 + ... start now: slack is small.
        let t = s.hold_ns(0).unwrap().max(0) as u64;
        assert_eq!(dispatched_id(s.dispatch(t)), 1);
        s.insert(rt(3, 2_000_000, 850 * MS, false), t); // earlier than 900: joins
        s.insert(rt(4, 2_500_000, 950 * MS, false), t); // later: next batch
        s.complete(1, t + 20 * MS);
        assert_eq!(dispatched_id(s.dispatch(t + 20 * MS)), 3);
        s.complete(3, t + 40 * MS);
        assert_eq!(dispatched_id(s.dispatch(t + 40 * MS)), 2);
        s.complete(2, t + 60 * MS);
        assert_eq!(s.p.0.batch_len(), 0);
        // Request 4 was left pending: it is held (its H is in the future).
        let h4 = s.hold_ns(t + 60 * MS).unwrap();
        assert!(h4 > (t + 60 * MS) as i64);
        assert_eq!(
            s.dispatch(t + 60 * MS),
            Pick::Wait {
                until_ns: Some(h4 as u64)
            }
        );
        assert_eq!(s.queued(), 1);
    }
}
