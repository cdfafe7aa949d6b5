//! `avfs`: the AVFS traffic mixer (Lee et al., AVFS section 3.3), kept exactly as the
//! paper gives it so that its results can be reproduced: the core of `traffic/` with
//! the paper's behaviour at every hook. `mixer` is the same core with its fixes at the
//! hooks (see `mixer/`).
//!
//! **Invariant.** At no hook does this policy depart from the text of 3.3.3-3.3.5: it
//! holds until H at any load, starts C-SCAN order at the head, leaves the windows to
//! the earliest deadline, admits a late arrival only with an earlier deadline than the
//! batch's latest, and serves no best-effort request during a batch.
//!
//! The algorithm is described beside its code: admission in `pending.rs`, H and the
//! mixer states in `hold.rs`, the batch in `batch.rs`, the windows in `window.rs`,
//! best effort in `best_effort.rs`.
//!
//! ## Defaults
//! m = 500 ms, e = 100 ms (AVFS 4.1), BE aging 1 s ([`SchedSettings`]).
//!
//! ## Faithfulness
//! Exact to the text of 3.3.3-3.3.5 except where the text is silent: the choice of e_0
//! (head, `head.rs`), the aging rule (`best_effort.rs`), the in-flight term of H (from
//! the dvrfs brief), and the deadline-ordered list, realised as a per-subtree minimum
//! deadline in the same tree (same answers, one structure). Request merging comes from
//! the framework, as the paper's mixer got it from the Linux block layer: a request
//! merged into an entry of the running batch is served with it. Not modelled: plugging.
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

use super::*;

/// The paper's behaviour at every hook.
pub(crate) struct Paper;

impl Hooks for Paper {
    fn name(&self) -> &'static str {
        "avfs"
    }
    /// e_0 is the first request at or after the head.
    fn sweep_from(&self, head_lba: u64) -> u64 {
        head_lba
    }
    fn hold_reserve_ns<E: ServiceEstimate>(&self, _: &Core<E>, _: i64) -> i64 {
        0
    }
    /// "If H > t then the mixer delays execution of pending real-time requests."
    fn hold_until<E: ServiceEstimate>(&self, _: &Core<E>, h: i64, _: i64, _: u64) -> i64 {
        h
    }
    fn may_hold<E: ServiceEstimate>(&self, _: &Core<E>, _: u64) -> bool {
        true
    }
    fn slack(&mut self) {}
    fn batch_started<E: ServiceEstimate>(&mut self, _: &mut Core<E>, _: u64) {}
    fn before_dispatch<E: ServiceEstimate>(&mut self, _: &mut Core<E>, _: u64) {}
    /// The windows follow the earliest deadline alone (Fig. 11).
    fn full_sweep<E: ServiceEstimate>(&self, _: &Core<E>, _: u64) -> bool {
        false
    }
    fn detour<E: ServiceEstimate>(&mut self, _: &mut Core<E>, _: u64) -> Option<Request> {
        None
    }
    /// Footnote *1: the batch is not interleaved with best-effort requests.
    fn best_effort_in_sweep<E: ServiceEstimate>(&self, _: &Core<E>) -> Option<Key> {
        None
    }
    /// "Otherwise, this new real-time request is left pending until a new batch
    /// processing is started."
    fn join_late<E: ServiceEstimate>(
        &mut self,
        _: &mut Core<E>,
        req: Request,
        _: u64,
    ) -> Result<(), Request> {
        Err(req)
    }
    /// A command sent moves the head, whoever sent it: best effort continues "from the
    /// end LBA of the last request executed" (3.3.5).
    fn forced<E: ServiceEstimate>(&mut self, core: &mut Core<E>, cmd: &Request, now_ns: u64) {
        core.note_sent(cmd, now_ns);
    }
    fn held(&mut self, _: &Request) {}
    fn released(&mut self, _: &Request) {}
}

/// The AVFS traffic mixer; see the module docs. It plans with eq. 1 as written
/// ([`Eq1`]): the average seek for every non-sequential request.
pub struct Avfs<E = Box<dyn ServiceEstimate>>(TrafficMixer<Eq1<E>, Paper>);

impl<E: ServiceEstimate> Avfs<E> {
    pub fn new(settings: &SchedSettings, est: E) -> Self {
        Self(TrafficMixer::new(settings, Paper, Eq1(est)))
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

super::delegate_policy!(Avfs);

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
