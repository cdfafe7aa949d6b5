//! `fifo`: requests in arrival order, real-time or not. The baseline of baselines.

use super::*;
use std::collections::VecDeque;

#[derive(Default)]
pub struct Fifo {
    queue: VecDeque<Request>,
    counters: Counters,
}

impl Fifo {
    pub fn new() -> Self {
        Self::default()
    }
}

impl Scheduler for Fifo {
    fn name(&self) -> &'static str {
        "fifo"
    }
    fn insert(&mut self, req: Request, _now_ns: u64) {
        self.counters.inserted += 1;
        self.queue.push_back(req);
    }
    fn dispatch(&mut self, now_ns: u64) -> Decision {
        match self.queue.pop_front() {
            None => Decision::Wait { until_ns: None },
            Some(r) if !r.write && r.deadline_ns.is_some_and(|d| d <= now_ns) => {
                self.counters.failed += 1;
                Decision::Fail(r)
            }
            Some(r) => {
                self.counters.dispatched += 1;
                Decision::Dispatch(r)
            }
        }
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
