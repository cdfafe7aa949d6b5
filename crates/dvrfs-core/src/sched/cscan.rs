//! `cscan`: circular SCAN over every request, real-time or not, by LBA.
//!
//! **Invariant.** Every queued entry is in the LBA-ordered queue once; the head is the end LBA
//! of the last command dispatched.
//!
//! Rule: serve the request with the lowest LBA at or above the head position (the end
//! LBA of the last dispatched request); when none is left above the head, wrap to the
//! lowest LBA and sweep up again. Deadlines play no part in the order; the framework
//! still fails a read whose deadline has passed when its turn comes.
//!
//! Models the elevator the AVFS mixer uses inside a batch (3.3.1: "increasing LBA
//! ordering ... equivalent to a C-SCAN policy"), without holding: it is
//! work-conserving, so it sets the throughput bar the mixers must reach near capacity.
//! Faithful to textbook C-SCAN with a zero-cost return sweep (the disk pays the long
//! seek back; the scheduler does not model it). Merging of contiguous requests comes
//! from the framework, as the block layer gives it to every Linux elevator. No
//! tunables.

use super::*;
use std::collections::BTreeMap;

#[derive(Default)]
pub struct CScan {
    /// (lba, id) -> request.
    queue: BTreeMap<(u64, ReqId), Request>,
    head_lba: u64,
}

impl CScan {
    pub fn new() -> Self {
        Self::default()
    }
}

impl Policy for CScan {
    fn name(&self) -> &'static str {
        "cscan"
    }
    fn insert(&mut self, req: Request, _now_ns: u64) {
        self.queue.insert((req.lba, req.id), req);
    }
    fn remove(&mut self, req: &Request) -> bool {
        self.queue.remove(&(req.lba, req.id)).is_some()
    }
    fn dispatch(&mut self, _now_ns: u64, _free_slots: u32) -> Pick {
        let key = self
            .queue
            .range((self.head_lba, 0)..)
            .next()
            .or_else(|| self.queue.first_key_value())
            .map(|(k, _)| *k);
        let Some(key) = key else {
            return Pick::Wait { until_ns: None };
        };
        let r = self.queue.remove(&key).expect("key just found");
        self.head_lba = r.end_lba();
        Pick::Dispatch(r)
    }
    fn complete(&mut self, _cmd: &Request, _now_ns: u64) {}
    fn queued(&self) -> u64 {
        self.queue.len() as u64
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
            class: Class::BestEffort,
            deadline_ns: None,
            owner: 0,
            submit_ns: 0,
            drop_if_late: false,
        }
    }

    #[test]
    fn ascending_from_the_head_then_wrap() {
        let mut s = CScan::new();
        s.insert(req(1, 500), 0);
        assert!(matches!(s.dispatch(0, 1), Pick::Dispatch(r) if r.id == 1));
        for (id, lba) in [(2, 100), (3, 900), (4, 508), (5, 300)] {
            s.insert(req(id, lba), 0);
        }
        let mut order = Vec::new();
        while let Pick::Dispatch(r) = s.dispatch(0, 1) {
            order.push(r.id);
        }
        // Head at 508 after request 1: 508 (sequential), 900, wrap, 100, 300.
        assert_eq!(order, vec![4, 3, 2, 5]);
        assert_eq!(s.queued(), 0);
    }
}
