//! `edf`: earliest deadline first.
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
//! order. No tunables.

use super::*;
use std::collections::{BTreeMap, VecDeque};

#[derive(Default)]
pub struct Edf {
    /// (deadline, arrival sequence) -> request.
    realtime: BTreeMap<(u64, u64), Request>,
    best_effort: VecDeque<Request>,
    arrivals: u64,
    counters: Counters,
}

impl Edf {
    pub fn new() -> Self {
        Self::default()
    }
}

impl Scheduler for Edf {
    fn name(&self) -> &'static str {
        "edf"
    }
    fn insert(&mut self, req: Request, _now_ns: u64) {
        self.counters.inserted += 1;
        self.arrivals += 1;
        match req.deadline_ns {
            Some(d) => {
                self.realtime.insert((d, self.arrivals), req);
            }
            None => self.best_effort.push_back(req),
        }
    }
    fn dispatch(&mut self, now_ns: u64) -> Decision {
        let next = match self.realtime.pop_first() {
            Some((_, r)) => Some(r),
            None => self.best_effort.pop_front(),
        };
        match next {
            Some(r) => dispatch_or_fail(&mut self.counters, r, now_ns),
            None => Decision::Wait { until_ns: None },
        }
    }
    fn complete(&mut self, _id: ReqId, _now_ns: u64) {
        self.counters.completed += 1;
    }
    fn has_work(&self) -> bool {
        self.queued() > 0
    }
    fn queued(&self) -> u64 {
        (self.realtime.len() + self.best_effort.len()) as u64
    }
    fn counters(&self) -> Counters {
        self.counters
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
            deadline_ns,
            owner: 0,
            submit_ns: 0,
        }
    }

    #[test]
    fn deadline_order_then_best_effort_fifo_and_late_reads_fail() {
        let mut s = Edf::new();
        s.insert(req(1, None), 0);
        s.insert(req(2, Some(300)), 0);
        s.insert(req(3, Some(100)), 0);
        s.insert(req(4, None), 0);
        s.insert(req(5, Some(200)), 0);
        s.insert(req(6, Some(200)), 0);
        s.insert(req(7, Some(50)), 0);
        let mut order = Vec::new();
        loop {
            match s.dispatch(60) {
                Decision::Dispatch(r) => {
                    s.complete(r.id, 60);
                    order.push(r.id as i64)
                }
                Decision::Fail(r) => order.push(-(r.id as i64)),
                Decision::Wait { .. } => break,
            }
        }
        assert_eq!(order, vec![-7, 3, 5, 6, 2, 1, 4]);
        s.counters().check(0, 0).unwrap();
    }
}
