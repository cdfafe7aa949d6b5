//! Admission and the pending set (AVFS 3.3.1): what arrives, what leaves, and what
//! merging changes.
//!
//! **Invariant.** A real-time entry is held in exactly one place, the pending set or
//! the running batch, and stays there when the framework merges it (a batch member
//! stays in the batch: the merge costs transfer time only); the hooks are told of
//! every real-time entry held and released.
//!
//! *Admission (3.3.1).* A request with a deadline is real-time (RT), one without is
//! best-effort (BE). RT requests wait in the *pending* set, kept in execution order
//! (ascending LBA) and, through a per-subtree minimum, in deadline order
//! (`hold_tree.rs`). Metadata requests (journal, checkpoints) carry a deadline and are
//! planned and batched exactly like real-time ones; only best-effort requests lack one.

use super::*;

impl<E: ServiceEstimate, H: Hooks> TrafficMixer<E, H> {
    pub fn insert(&mut self, req: Request, now_ns: u64) {
        if !req.is_realtime() {
            self.core.queue_be(req, now_ns);
            return;
        }
        self.hooks.held(&req);
        let req = if self.core.batch_active {
            match self.try_join(req, now_ns) {
                Ok(()) => {
                    self.core.stats.joined += 1;
                    return;
                }
                Err(r) => r,
            }
        } else {
            req
        };
        self.core.pending.insert(req, &self.core.est);
    }

    pub fn remove(&mut self, req: &Request) -> bool {
        if !req.is_realtime() {
            return self.core.remove_be(req);
        }
        let key = key_of(req);
        let core = &mut self.core;
        let held = core.batch.remove(key, &core.est).is_some()
            || core.pending.remove(key, &core.est).is_some();
        if held {
            self.hooks.released(req);
        }
        held
    }

    /// A queued entry grew by merging: it stays where it was (a batch member stays in
    /// the batch: the merge costs transfer time only).
    pub fn merged(&mut self, old: &Request, new: Request, now_ns: u64) {
        if !old.is_realtime() {
            let held = self.remove(old);
            assert!(held, "merged a best-effort entry the mixer does not hold");
            self.insert(new, now_ns);
            return;
        }
        let key = key_of(old);
        let core = &mut self.core;
        let set = if core.batch.remove(key, &core.est).is_some() {
            &mut core.batch
        } else if core.pending.remove(key, &core.est).is_some() {
            &mut core.pending
        } else {
            panic!("merged a real-time entry the mixer does not hold: {old:?}");
        };
        set.insert(new, &core.est);
        self.hooks.released(old);
        self.hooks.held(&new);
    }
}
