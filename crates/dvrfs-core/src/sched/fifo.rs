//! `fifo`: requests in arrival order, real-time or not. The baseline of baselines.
//!
//! **Invariant.** Every queued entry is in the arrival-ordered queue once, under the arrival
//! sequence `seq_of` gives for its id.

use super::*;
use std::collections::BTreeMap;

#[derive(Default)]
pub struct Fifo {
    /// (arrival sequence) -> entry; a merged entry keeps its first arrival.
    queue: BTreeMap<u64, Request>,
    /// Entry id -> arrival sequence.
    seq_of: BTreeMap<ReqId, u64>,
    arrivals: u64,
}

impl Fifo {
    pub fn new() -> Self {
        Self::default()
    }
}

impl Policy for Fifo {
    fn name(&self) -> &'static str {
        "fifo"
    }
    fn insert(&mut self, req: Request, _now_ns: u64) {
        self.arrivals += 1;
        self.queue.insert(self.arrivals, req);
        self.seq_of.insert(req.id, self.arrivals);
    }
    fn remove(&mut self, req: &Request) -> bool {
        match self.seq_of.remove(&req.id) {
            Some(seq) => self.queue.remove(&seq).is_some(),
            None => false,
        }
    }
    fn merged(&mut self, old: &Request, new: Request, _now_ns: u64) {
        // A merged entry keeps its place in the arrival order.
        let seq = self.seq_of.remove(&old.id).expect("merged a held entry");
        self.queue.insert(seq, new);
        self.seq_of.insert(new.id, seq);
    }
    fn dispatch(&mut self, _now_ns: u64, _free_slots: u32) -> Pick {
        match self.queue.pop_first() {
            None => Pick::Wait { until_ns: None },
            Some((_, r)) => {
                self.seq_of.remove(&r.id);
                Pick::Dispatch(r)
            }
        }
    }
    fn complete(&mut self, _cmd: &Request, _now_ns: u64) {}
    fn queued(&self) -> u64 {
        self.queue.len() as u64
    }
}
