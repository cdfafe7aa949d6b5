//! The real-time load estimate: the share of disk time real-time (and metadata)
//! commands took, decayed with a time constant, and a light/heavy regime with
//! hysteresis. Not in the paper; `mixer`'s fixes 7, 8 and 10 read it, and its regime
//! switches are reported for both users.
//!
//! **Invariant.** The estimate starts as if the disk had been fully busy (light load
//! must be measured, not assumed), in the heavy regime; device time is counted once
//! per completion, from the later of dispatch and the previous completion.

use super::*;

/// Time constant of the real-time load estimate, ns.
pub(super) const LOAD_TAU_NS: f64 = 5.0e9;

/// The load regime switches to heavy above this real-time share of disk time, and
/// back to light below the lower one (hysteresis: no flapping at the edge).
const LOAD_HEAVY_ABOVE: f64 = 0.6;
const LOAD_LIGHT_BELOW: f64 = 0.5;

impl<E: ServiceEstimate> Core<E> {
    /// Updates the decayed real-time device time and the load regime.
    pub(super) fn note_load(&mut self, now_ns: u64, rt_service_ns: u64) {
        let dt = now_ns.saturating_sub(self.load_updated_ns) as f64;
        self.load_updated_ns = self.load_updated_ns.max(now_ns);
        self.rt_busy_decayed_ns =
            self.rt_busy_decayed_ns * (-dt / LOAD_TAU_NS).exp() + rt_service_ns as f64;
        let load = self.rt_busy_decayed_ns / LOAD_TAU_NS;
        let (up, down) = (LOAD_HEAVY_ABOVE, LOAD_LIGHT_BELOW);
        if self.heavy && load < down {
            self.heavy = false;
            self.stats.to_light += 1;
        } else if !self.heavy && load > up {
            self.heavy = true;
            self.stats.to_heavy += 1;
        }
    }

    /// The real-time share of disk time, decayed to `now_ns`.
    pub(super) fn rt_load(&self, now_ns: u64) -> f64 {
        let dt = now_ns.saturating_sub(self.load_updated_ns) as f64;
        self.rt_busy_decayed_ns * (-dt / LOAD_TAU_NS).exp() / LOAD_TAU_NS
    }

    /// Whether the load regime is heavy (with hysteresis).
    pub(super) fn heavy(&self) -> bool {
        self.heavy
    }
}
