//! `cscan`: circular SCAN over every request, real-time or not, by LBA.
//!
//! Rule: serve the request with the lowest LBA at or above the head position (the end
//! LBA of the last dispatched request); when none is left above the head, wrap to the
//! lowest LBA and sweep up again. Deadlines play no part in the order; the common rule
//! still fails a read whose deadline has passed when its turn comes.
//!
//! Models the elevator the AVFS mixer uses inside a batch (3.3.1: "increasing LBA
//! ordering ... equivalent to a C-SCAN policy"), without holding: it is
//! work-conserving, so it sets the throughput bar the mixers must reach near capacity.
//! Faithful to textbook C-SCAN with a zero-cost return sweep (the disk pays the long
//! seek back; the scheduler does not model it). No tunables.

use super::*;
use std::collections::BTreeMap;

#[derive(Default)]
pub struct CScan {
    /// (lba, id) -> request.
    queue: BTreeMap<(u64, ReqId), Request>,
    head_lba: u64,
    counters: Counters,
}

impl CScan {
    pub fn new() -> Self {
        Self::default()
    }
}

impl Scheduler for CScan {
    fn name(&self) -> &'static str {
        "cscan"
    }
    fn insert(&mut self, req: Request, _now_ns: u64) {
        self.counters.inserted += 1;
        self.queue.insert((req.lba, req.id), req);
    }
    fn dispatch(&mut self, now_ns: u64) -> Decision {
        let key = self
            .queue
            .range((self.head_lba, 0)..)
            .next()
            .or_else(|| self.queue.first_key_value())
            .map(|(k, _)| *k);
        let Some(key) = key else {
            return Decision::Wait { until_ns: None };
        };
        let r = self.queue.remove(&key).expect("key just found");
        let d = dispatch_or_fail(&mut self.counters, r, now_ns);
        if let Decision::Dispatch(r) = &d {
            self.head_lba = r.end_lba();
        }
        d
    }
    fn complete(&mut self, _id: ReqId, _now_ns: u64) {
        self.counters.completed += 1;
    }
    fn has_work(&self) -> bool {
        !self.queue.is_empty()
    }
    fn queued(&self) -> u64 {
        self.queue.len() as u64
    }
    fn counters(&self) -> Counters {
        self.counters
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(id: u64, lba: u64) -> Request {
        Request {
            id,
            lba,
            sectors: 8,
            write: true,
            deadline_ns: None,
            owner: 0,
            submit_ns: 0,
        }
    }

    #[test]
    fn ascending_from_the_head_then_wrap() {
        let mut s = CScan::new();
        s.insert(req(1, 500), 0);
        assert!(matches!(s.dispatch(0), Decision::Dispatch(r) if r.id == 1));
        s.complete(1, 0);
        for (id, lba) in [(2, 100), (3, 900), (4, 508), (5, 300)] {
            s.insert(req(id, lba), 0);
        }
        let mut order = Vec::new();
        while let Decision::Dispatch(r) = s.dispatch(0) {
            order.push(r.id);
            s.complete(r.id, 0);
        }
        // Head at 508 after request 1: 508 (sequential), 900, wrap, 100, 300.
        assert_eq!(order, vec![4, 3, 2, 5]);
        s.counters().check(0, 0).unwrap();
    }
}
