//! `cfq`: cfq-like, a model of Linux CFQ (block/cfq-iosched.c, removed in 5.0). Not
//! the kernel code; reports call it "cfq-like". The AVFS paper measured against CFQ.
//!
//! **Invariant.** Every queued entry is in exactly one issuer's queue (keyed by owner and
//! async), and `queued` counts them.
//!
//! Rules:
//! - one queue per issuer and kind, keyed by `(Request::owner, async)`. A best-effort
//!   write is *async* (page-cache writeback in the kernel); reads and real-time writes
//!   are *sync* (dvrfs stream writes are `O_DIRECT`, which CFQ treats as sync);
//! - queues with requests take turns round-robin; the active queue owns the disk for a
//!   time slice of [`SLICE_SYNC_NS`] (sync) or [`SLICE_ASYNC_NS`] (async), counted from
//!   its activation, and is moved to the back of the round when the slice ends while it
//!   still has requests;
//! - within a queue, requests go in C-SCAN order from the head position (the kernel
//!   picks the closest request with a back-seek penalty; ascending order is the same on
//!   a stream's sequential requests);
//! - **idling**: when the active queue is sync, runs dry before its slice ends, is not
//!   seeky and its issuer does not think too long, CFQ keeps the disk idle for up to
//!   [`SLICE_IDLE_NS`] waiting for that issuer's next (typically sequential) request.
//!   Modelled with [`Pick::Wait`]: the first dispatch that finds the active queue empty
//!   records `idle_until = min(now + SLICE_IDLE_NS, slice end)` and returns `Wait {
//!   until_ns: Some(idle_until) }`; a request from the same issuer inserted before then
//!   is served at the next dispatch (the engine calls dispatch after every insert while
//!   a slot is free); requests of other queues do not end the idle. Once idle_until
//!   passes, the queue is expired and the next one in the round is activated;
//! - "seeky", as in CFQ: a 32-bit history records for each of the queue's last
//!   requests whether it started more than [`SEEK_THRESHOLD_SECTORS`] away from the end
//!   of the queue's previous request; more than 4 of 32 seeky requests disables idling;
//! - **think time**, as in CFQ's `cfq_update_io_thinktime` / `cfq_update_idle_window`:
//!   each queue keeps a decaying mean of the time from the completion of its last
//!   request to the arrival of its next one (the kernel's fixed-point average: weight
//!   7/8 on the past, valid after a few samples). An issuer whose mean think time
//!   exceeds [`SLICE_IDLE_NS`], or exceeds what is left of the slice, is not idled
//!   for: waiting for it would only waste the disk. A stream client that issues its
//!   requests on a clock (every 217 ms at 19.39 Mbit/s) rather than on completion is
//!   such an issuer, so CFQ does not idle for streams, as the kernel would not.
//!
//! Deadlines do not influence the order; a read whose deadline has passed when it is
//! picked is failed (the framework's rule). Merging comes from the framework, within
//! one issuer's queue ([`Policy::allow_merge`]), as `cfq_allow_bio_merge` did. Not
//! modelled: I/O priorities and classes, service trees and groups, queue merging,
//! `quantum`, `back_seek_penalty`, `low_latency` slice scaling, slice extension on the
//! first request.

use super::*;
use std::collections::{BTreeMap, VecDeque};

/// CFQ `slice_sync`: disk time of a sync queue per turn (kernel default 100 ms).
pub const SLICE_SYNC_NS: u64 = 100_000_000;
/// CFQ `slice_async`: disk time of an async queue per turn (kernel default 40 ms).
pub const SLICE_ASYNC_NS: u64 = 40_000_000;
/// CFQ `slice_idle`: how long an emptied sync queue keeps the disk (kernel 8 ms).
pub const SLICE_IDLE_NS: u64 = 8_000_000;
/// CFQ `CFQQ_SEEK_THR`: a request farther than this from the previous one is a seek.
pub const SEEK_THRESHOLD_SECTORS: u64 = 8 * 100;
/// CFQ `CFQQ_SEEKY`: more seeks than this among the last 32 requests = seeky.
pub const SEEKY_MAX_SEEKS: u32 = 32 / 8;
/// CFQ's think-time average is valid once its sample weight exceeds this
/// (`sample_valid`: samples > 80, on the kernel's 256 scale).
const THINK_SAMPLES_VALID: f64 = 80.0;

/// (owner, async)
type QueueKey = (u32, bool);

#[derive(Default)]
struct Queue {
    sorted: BTreeMap<(u64, ReqId), Request>,
    in_round: bool,
    last_end_lba: Option<u64>,
    seek_history: u32,
    /// When the issuer's last request completed.
    last_complete_ns: Option<u64>,
    /// CFQ's decaying think-time average: sample weight and weighted total (ns).
    think_samples: f64,
    think_total_ns: f64,
}

impl Queue {
    fn seeky(&self) -> bool {
        self.seek_history.count_ones() > SEEKY_MAX_SEEKS
    }

    /// `cfq_update_io_thinktime`: a request arrived `elapsed_ns` after the last
    /// completion.
    fn think(&mut self, elapsed_ns: u64) {
        self.think_samples = (7.0 * self.think_samples + 256.0) / 8.0;
        self.think_total_ns = (7.0 * self.think_total_ns + 256.0 * elapsed_ns as f64) / 8.0;
    }

    /// The mean think time, once enough samples make it valid.
    fn think_mean_ns(&self) -> Option<f64> {
        (self.think_samples > THINK_SAMPLES_VALID)
            .then(|| (self.think_total_ns + 128.0) / self.think_samples)
    }

    /// Whether idling for this issuer's next request can pay off
    /// (`cfq_update_idle_window` and the slice check of `cfq_arm_slice_timer`).
    fn worth_idling(&self, slice_left_ns: u64) -> bool {
        !self.seeky()
            && self
                .think_mean_ns()
                .is_none_or(|m| m <= SLICE_IDLE_NS as f64 && m <= slice_left_ns as f64)
    }
}

struct Active {
    key: QueueKey,
    slice_end_ns: u64,
    idle_until_ns: Option<u64>,
}

#[derive(Default)]
pub struct Cfq {
    queues: BTreeMap<QueueKey, Queue>,
    round: VecDeque<QueueKey>,
    active: Option<Active>,
    head_lba: u64,
    queued: u64,
}

fn queue_key(r: &Request) -> QueueKey {
    (r.owner, r.write && !r.is_realtime())
}

impl Cfq {
    pub fn new() -> Self {
        Self::default()
    }

    /// Ends the active queue's turn.
    fn expire(&mut self) {
        let Some(a) = self.active.take() else { return };
        let q = self.queues.get_mut(&a.key).expect("active queue exists");
        if !q.sorted.is_empty() && !q.in_round {
            q.in_round = true;
            self.round.push_back(a.key);
        }
    }

    fn serve(&mut self, key: QueueKey) -> Pick {
        let head = self.head_lba;
        let q = self.queues.get_mut(&key).expect("active queue exists");
        let k = *q
            .sorted
            .range((head, 0)..)
            .next()
            .or_else(|| q.sorted.first_key_value())
            .expect("queue has requests")
            .0;
        let r = q.sorted.remove(&k).expect("key just found");
        self.queued -= 1;
        let seek = q
            .last_end_lba
            .is_some_and(|e| e.abs_diff(r.lba) > SEEK_THRESHOLD_SECTORS);
        q.seek_history = (q.seek_history << 1) | seek as u32;
        q.last_end_lba = Some(r.end_lba());
        self.head_lba = r.end_lba();
        Pick::Dispatch(r)
    }
}

impl Policy for Cfq {
    fn name(&self) -> &'static str {
        "cfq"
    }
    fn insert(&mut self, req: Request, now_ns: u64) {
        self.queued += 1;
        let key = queue_key(&req);
        let is_active = self.active.as_ref().is_some_and(|a| a.key == key);
        let q = self.queues.entry(key).or_default();
        if let Some(last) = q.last_complete_ns {
            q.think(now_ns.saturating_sub(last));
        }
        q.sorted.insert((req.lba, req.id), req);
        if !is_active && !q.in_round {
            q.in_round = true;
            self.round.push_back(key);
        }
    }
    fn remove(&mut self, req: &Request) -> bool {
        let key = queue_key(req);
        let Some(q) = self.queues.get_mut(&key) else {
            return false;
        };
        if q.sorted.remove(&(req.lba, req.id)).is_none() {
            return false;
        }
        self.queued -= 1;
        if q.sorted.is_empty() && q.in_round {
            q.in_round = false;
            self.round.retain(|k| *k != key);
        }
        true
    }
    fn merged(&mut self, old: &Request, new: Request, _now_ns: u64) {
        // Same issuer (allow_merge): the entry stays in its queue, no think sample.
        let q = self
            .queues
            .get_mut(&queue_key(old))
            .expect("merged entry's queue exists");
        q.sorted.remove(&(old.lba, old.id));
        q.sorted.insert((new.lba, new.id), new);
    }
    fn allow_merge(&self, queued: &Request, new: &Request) -> bool {
        queue_key(queued) == queue_key(new)
    }
    fn dispatch(&mut self, now_ns: u64, _free_slots: u32) -> Pick {
        loop {
            if let Some(a) = &mut self.active {
                let key = a.key;
                if now_ns >= a.slice_end_ns {
                    self.expire();
                    continue;
                }
                let q = &self.queues[&key];
                if !q.sorted.is_empty() {
                    a.idle_until_ns = None;
                    return self.serve(key);
                }
                let sync = !key.1;
                if sync && q.worth_idling(a.slice_end_ns - now_ns) {
                    let slice_end = a.slice_end_ns;
                    let until = *a
                        .idle_until_ns
                        .get_or_insert((now_ns + SLICE_IDLE_NS).min(slice_end));
                    if now_ns < until {
                        return Pick::Wait {
                            until_ns: Some(until),
                        };
                    }
                }
                self.expire();
                continue;
            }
            let Some(key) = self.round.pop_front() else {
                return Pick::Wait { until_ns: None };
            };
            let q = self.queues.get_mut(&key).expect("queued key exists");
            q.in_round = false;
            let slice = if key.1 { SLICE_ASYNC_NS } else { SLICE_SYNC_NS };
            self.active = Some(Active {
                key,
                slice_end_ns: now_ns + slice,
                idle_until_ns: None,
            });
        }
    }
    fn complete(&mut self, cmd: &Request, now_ns: u64) {
        if let Some(q) = self.queues.get_mut(&queue_key(cmd)) {
            q.last_complete_ns = Some(now_ns);
        }
    }
    fn queued(&self) -> u64 {
        self.queued
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    fn read(id: u64, owner: u32, lba: u64) -> Request {
        Request {
            id,
            lba,
            sectors: 1024,
            write: false,
            class: Class::BestEffort,
            deadline_ns: None,
            owner,
            submit_ns: 0,
            drop_if_late: false,
        }
    }

    fn next(s: &mut Cfq, now_ns: u64) -> Pick {
        let d = s.dispatch(now_ns, 1);
        if let Pick::Dispatch(r) = &d {
            s.complete(r, now_ns);
        }
        d
    }

    #[test]
    fn queues_take_turns_in_time_slices() {
        let mut s = Cfq::new();
        for i in 0..30 {
            s.insert(read(i, 1, i * 1024), 0);
            s.insert(read(100 + i, 2, 1_000_000 + i * 1024), 0);
        }
        // Each request takes 10 ms: owner 1 gets 10 requests (100 ms), then owner 2.
        let mut owners = Vec::new();
        let mut t = 0;
        for _ in 0..40 {
            match next(&mut s, t) {
                Pick::Dispatch(r) => owners.push(r.owner),
                d => panic!("{d:?}"),
            }
            t += 10 * MS;
        }
        let expect: Vec<u32> = [1u32, 2, 1, 2]
            .iter()
            .flat_map(|&o| std::iter::repeat_n(o, 10))
            .collect();
        assert_eq!(owners, expect);
        assert_eq!(s.queued(), 20);
    }

    #[test]
    fn an_emptied_sync_queue_idles_for_its_next_request() {
        let mut s = Cfq::new();
        s.insert(read(1, 1, 0), 0);
        s.insert(read(2, 2, 5_000_000), 0);
        assert!(matches!(next(&mut s, 0), Pick::Dispatch(r) if r.id == 1));
        // Owner 1 is empty: the disk idles 8 ms for it, although owner 2 waits.
        assert_eq!(
            next(&mut s, 10 * MS),
            Pick::Wait {
                until_ns: Some(18 * MS)
            }
        );
        // Owner 1's next sequential request arrives within the window: served.
        s.insert(read(3, 1, 1024), 12 * MS);
        assert!(matches!(next(&mut s, 12 * MS), Pick::Dispatch(r) if r.id == 3));
        // It runs dry again; when the idle window passes, owner 2 gets the disk.
        assert!(matches!(next(&mut s, 20 * MS), Pick::Wait { until_ns: Some(u) } if u == 28 * MS));
        assert!(matches!(next(&mut s, 28 * MS), Pick::Dispatch(r) if r.id == 2));
    }

    #[test]
    fn seeky_queues_do_not_idle() {
        let mut s = Cfq::new();
        for i in 0..8u64 {
            s.insert(read(i, 1, i * 10_000_000), 0);
        }
        s.insert(read(50, 2, 1), 0);
        for _ in 0..8 {
            assert!(matches!(next(&mut s, 0), Pick::Dispatch(r) if r.owner == 1));
        }
        // 7 seeks in the history (> 4): no idling, owner 2 next.
        assert!(matches!(next(&mut s, 0), Pick::Dispatch(r) if r.id == 50));
    }

    #[test]
    fn an_issuer_that_thinks_longer_than_slice_idle_is_not_idled_for() {
        let mut s = Cfq::new();
        // Owner 1 issues a request 50 ms after each completion (a clocked stream);
        // owner 2 always has work.
        for i in 0..5_000u64 {
            s.insert(read(100_000 + i, 2, 5_000_000 + i * 1024), 0);
        }
        let mut t = 0;
        let mut idled = 0;
        for i in 0..6u64 {
            s.insert(read(i + 1, 1, i * 1024), t);
            loop {
                match next(&mut s, t) {
                    Pick::Dispatch(r) if r.owner == 1 => {
                        t += MS;
                        break;
                    }
                    Pick::Dispatch(_) => t += MS,
                    Pick::Wait { until_ns: Some(u) } => {
                        idled += 1;
                        t = u;
                    }
                    Pick::Wait { until_ns: None } => panic!("owner 2 has work"),
                }
            }
            // Owner 1's queue is empty now; with a valid think time of 50 ms CFQ must
            // not hold the disk for it.
            if i >= 3 {
                assert!(
                    matches!(s.dispatch(t, 1), Pick::Dispatch(r) if r.owner == 2),
                    "idled for a slow issuer at round {i}"
                );
            }
            t += 50 * MS;
        }
        assert!(idled <= 3, "idled {idled} times");
    }
}
