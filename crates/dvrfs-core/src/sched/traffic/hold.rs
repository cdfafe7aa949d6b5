//! Holding each real-time request until its latest safe moment: the hold time H
//! (AVFS 3.3.3, eq. 2-3) and the mixer states of Fig. 10, i.e. what a free slot does
//! when no batch runs.
//!
//! **Invariant.** The plan and the execution agree: H is computed over the same C-SCAN
//! order from the same position ([`Hooks::sweep_from`]) that the batch then sweeps,
//! and a best-effort request runs during a hold only if the hold still ends after it.
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
//! is kept (estimated end of the in-flight request minus now) so that
//! [`Avfs::hold_ns`](super::avfs::Avfs::hold_ns) is also right while the disk is busy.
//! H costs O(log n) per event (`hold_tree.rs`).
//!
//! *Mixer states (Fig. 10), at time t with the disk idle and no batch running:*
//! 1. no RT pending: serve the next BE request, if any;
//! 2. RT pending and H > t: *hold*. If a BE request R' is waiting, run it when
//!    H >= t + T_S(R'); if that test fails, start the RT batch (the paper's rule: the
//!    mixer "activates the real-time scheduler"). With no BE request, wait until H
//!    ([`Pick::Wait`] with `until_ns = H`);
//! 3. RT pending and H <= t: start the RT batch.
//!
//! Where the hold ends ([`Hooks::hold_until`]) and whether the mixer may hold at all
//! ([`Hooks::may_hold`]) are hooks: the paper holds until H, always.

use super::*;

impl<E: ServiceEstimate> Core<E> {
    /// `(H, work)` of one set: eq. 2-3 over its C-SCAN order from the sweep position,
    /// less the margin, the in-flight remainder and what the hooks set aside.
    fn set_hold_and_work<H: Hooks>(
        &self,
        set: &HoldTree,
        hooks: &H,
        now_ns: u64,
    ) -> Option<(i64, i64)> {
        let (raw, work) = set.hold_and_work(self.sweep_lba(hooks), &self.est)?;
        let h = raw
            .saturating_sub(self.settings.margin_ns as i64)
            .saturating_sub(self.in_flight_remaining_ns(now_ns))
            .saturating_sub(hooks.hold_reserve_ns(self, work));
        Some((h, work))
    }

    /// `(H, pending work)` in ns, `None` without pending RT requests.
    pub(super) fn hold_and_work<H: Hooks>(&self, hooks: &H, now_ns: u64) -> Option<(i64, i64)> {
        self.set_hold_and_work(&self.pending, hooks, now_ns)
    }

    /// The batch's own `(hold time, work)`: how late its C-SCAN order may start and
    /// still give every batch member its margin, and its estimated service time.
    pub(super) fn batch_hold_and_work<H: Hooks>(
        &self,
        hooks: &H,
        now_ns: u64,
    ) -> Option<(i64, i64)> {
        self.set_hold_and_work(&self.batch, hooks, now_ns)
    }
}

impl<E: ServiceEstimate, H: Hooks> TrafficMixer<E, H> {
    pub fn dispatch(&mut self, now_ns: u64) -> Pick {
        self.hooks.before_dispatch(&mut self.core, now_ns);
        if self.core.batch_active {
            if let Some(d) = self.serve_batch(now_ns) {
                return d;
            }
            self.core.batch_active = false;
        }
        if let Some((h, work)) = self.core.hold_and_work(&self.hooks, now_ns) {
            let hold_end = self.hooks.hold_until(&self.core, h, work, now_ns);
            let now = now_ns as i64;
            if hold_end > now && self.hooks.may_hold(&self.core, now_ns) {
                match self.core.be_next(now_ns) {
                    Some(key) => {
                        let ts = self.core.estimate(&self.core.be_by_lba[&key]) as i64;
                        if hold_end >= now.saturating_add(ts) {
                            return self.send_be(key, now_ns);
                        }
                    }
                    None => {
                        self.core.stats.holds += 1;
                        self.hooks.slack();
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
        match self.core.be_next(now_ns) {
            Some(key) => self.send_be(key, now_ns),
            None => {
                self.hooks.slack();
                Pick::Wait { until_ns: None }
            }
        }
    }
}
