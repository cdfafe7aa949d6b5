//! `edf`: earliest deadline first.
//!
//! **Invariant.** Every queued entry is in exactly one of the two queues, real-time (by
//! deadline) or best-effort (by arrival).
//!
//! Rules: real-time requests are served in increasing deadline order (ties in arrival
//! order); best-effort requests only when no real-time request is queued, in arrival
//! order (FIFO). A read whose deadline has passed when it comes up is failed; a late
//! write is still served.
//!
//! The classic real-time disk policy (Liu and Layland's EDF applied to a disk, as
//! discussed in AVFS section 5): optimal for meeting deadlines when service times do not
//! depend on order, which on a disk they do; it seeks freely between streams and so
//! wastes capacity (Reddy and Wyllie 1993). Faithful: nothing is modelled beyond the
//! order (the framework fails late reads and merges contiguous requests).
//! No tunables.

use super::*;
use std::collections::BTreeMap;

#[derive(Default)]
pub struct Edf {
    /// (deadline, arrival sequence) -> entry.
    realtime: BTreeMap<(u64, u64), Request>,
    /// arrival sequence -> entry.
    best_effort: BTreeMap<u64, Request>,
    /// Entry id -> arrival sequence (a merged entry keeps its first arrival).
    seq_of: BTreeMap<ReqId, u64>,
    arrivals: u64,
}

impl Edf {
    pub fn new() -> Self {
        Self::default()
    }

    fn put(&mut self, req: Request, seq: u64) {
        self.seq_of.insert(req.id, seq);
        match req.deadline_ns {
            Some(d) => self.realtime.insert((d, seq), req),
            None => self.best_effort.insert(seq, req),
        };
    }
}

impl Policy for Edf {
    fn name(&self) -> &'static str {
        "edf"
    }
    fn insert(&mut self, req: Request, _now_ns: u64) {
        self.arrivals += 1;
        self.put(req, self.arrivals);
    }
    fn remove(&mut self, req: &Request) -> bool {
        let Some(seq) = self.seq_of.remove(&req.id) else {
            return false;
        };
        match req.deadline_ns {
            Some(d) => self.realtime.remove(&(d, seq)).is_some(),
            None => self.best_effort.remove(&seq).is_some(),
        }
    }
    fn merged(&mut self, old: &Request, new: Request, _now_ns: u64) {
        let seq = self.seq_of[&old.id];
        let held = self.remove(old);
        assert!(held, "merged an entry the policy does not hold");
        self.put(new, seq);
    }
    fn dispatch(&mut self, _now_ns: u64, _free_slots: u32) -> Pick {
        let next = match self.realtime.pop_first() {
            Some((_, r)) => Some(r),
            None => self.best_effort.pop_first().map(|(_, r)| r),
        };
        match next {
            Some(r) => {
                self.seq_of.remove(&r.id);
                Pick::Dispatch(r)
            }
            None => Pick::Wait { until_ns: None },
        }
    }
    fn complete(&mut self, _cmd: &Request, _now_ns: u64) {}
    fn queued(&self) -> u64 {
        (self.realtime.len() + self.best_effort.len()) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(id: u64, deadline_ns: Option<u64>) -> Request {
        Request {
            id,
            lba: 1000 - id,
            sectors: 8,
            write: false,
            class: if deadline_ns.is_some() {
                Class::RealTime
            } else {
                Class::BestEffort
            },
            deadline_ns,
            owner: 0,
            submit_ns: 0,
            drop_if_late: true,
        }
    }

    #[test]
    fn deadline_order_then_best_effort_fifo() {
        let mut s = Edf::new();
        s.insert(req(1, None), 0);
        s.insert(req(2, Some(300)), 0);
        s.insert(req(3, Some(100)), 0);
        s.insert(req(4, None), 0);
        s.insert(req(5, Some(200)), 0);
        s.insert(req(6, Some(200)), 0);
        s.insert(req(7, Some(50)), 0);
        let mut order = Vec::new();
        while let Pick::Dispatch(r) = s.dispatch(60, 1) {
            order.push(r.id);
        }
        assert_eq!(order, vec![7, 3, 5, 6, 2, 1, 4]);
        assert_eq!(s.queued(), 0);
    }
}
