//! A simple service-time estimate for tests and benchmarks, standing in for
//! `disk::Estimator` (AVFS eq. 1) so the scheduler can be tested on its own.
//!
//! **Invariant.** The estimate is eq. 1 exactly: positioning only when not sequential, the
//! transfer rate linear in the LBA.
//!
//! T_S = (seek + half rotation, when not sequential) + size / rate(L), the rate falling
//! linearly from the outer to the inner edge. Defaults are the avfs-250g figures:
//! 8.9 ms average seek + 4.17 ms half revolution ~= 13 ms, 70 -> 38 MB/s over
//! 488,397,168 sectors of 512 bytes.

use super::ServiceEstimate;

/// Average seek plus half a revolution of a 7200 rpm disk (8.9 + 4.17 ms), rounded.
pub const POSITION_NS: u64 = 13_000_000;
/// Sustained transfer rate at the outer edge (LBA 0), bytes per second.
pub const RATE_OUTER_BYTES_PER_S: u64 = 70_000_000;
/// Sustained transfer rate at the inner edge (the last LBA), bytes per second.
pub const RATE_INNER_BYTES_PER_S: u64 = 38_000_000;
/// avfs-250g capacity in sectors.
pub const LBAS: u64 = 488_397_168;
pub const SECTOR_BYTES: u64 = 512;

/// AVFS eq. 1 with the constants above.
#[derive(Clone, Copy, Debug)]
pub struct LinearEstimate {
    pub position_ns: u64,
    pub rate_outer_bytes_per_s: u64,
    pub rate_inner_bytes_per_s: u64,
    pub lbas: u64,
}

impl Default for LinearEstimate {
    fn default() -> Self {
        Self {
            position_ns: POSITION_NS,
            rate_outer_bytes_per_s: RATE_OUTER_BYTES_PER_S,
            rate_inner_bytes_per_s: RATE_INNER_BYTES_PER_S,
            lbas: LBAS,
        }
    }
}

impl ServiceEstimate for LinearEstimate {
    fn service_ns(&self, lba: u64, sectors: u32, _write: bool, sequential: bool) -> u64 {
        let lba = lba.min(self.lbas);
        let drop = (self.rate_outer_bytes_per_s - self.rate_inner_bytes_per_s) as u128
            * lba as u128
            / self.lbas.max(1) as u128;
        let rate = (self.rate_outer_bytes_per_s as u128 - drop).max(1);
        let transfer_ns = sectors as u128 * SECTOR_BYTES as u128 * 1_000_000_000 / rate;
        let position_ns = if sequential { 0 } else { self.position_ns };
        position_ns + transfer_ns as u64
    }
}

/// A policy driven directly, without the framework, with the old caller's bookkeeping:
/// it remembers what it dispatched so tests can complete by id (policy unit tests).
#[cfg(test)]
pub(crate) struct Direct<P> {
    pub p: P,
    sent: std::collections::BTreeMap<super::ReqId, super::Request>,
}

#[cfg(test)]
impl<P: super::Policy> Direct<P> {
    pub fn new(p: P) -> Self {
        Direct {
            p,
            sent: Default::default(),
        }
    }
    pub fn insert(&mut self, r: super::Request, now_ns: u64) {
        self.p.insert(r, now_ns)
    }
    pub fn dispatch(&mut self, now_ns: u64) -> super::Pick {
        let d = self.p.dispatch(now_ns, 1);
        if let super::Pick::Dispatch(r) = d {
            self.sent.insert(r.id, r);
        }
        d
    }
    pub fn complete(&mut self, id: super::ReqId, now_ns: u64) {
        let r = self
            .sent
            .remove(&id)
            .expect("completed a request never dispatched");
        self.p.complete(&r, now_ns)
    }
    pub fn queued(&self) -> u64 {
        self.p.queued()
    }
}

#[cfg(test)]
impl<P> std::ops::Deref for Direct<P> {
    type Target = P;
    fn deref(&self) -> &P {
        &self.p
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn linear_estimate_matches_eq1_at_the_edges() {
        let e = LinearEstimate::default();
        // 512 KiB at 70 MB/s = 7.49 ms; at 38 MB/s = 13.8 ms.
        assert_eq!(e.service_ns(0, 1024, false, true), 7_489_828);
        assert_eq!(e.service_ns(LBAS, 1024, false, true), 13_797_052);
        assert_eq!(e.service_ns(0, 1024, false, false), 13_000_000 + 7_489_828);
    }
}
