//! How long the mixer holds: fixes 1, 7 and 10, and the best-effort share planned
//! into H.
//!
//! **Invariant.** The hold never ends later than the paper's H, except under light
//! load with no best-effort work (fix 7), and then by at most
//! `100 - LIGHT_HOLD_MARGIN_PERCENT` percent of the margin; the best-effort admission
//! test during a hold uses the same hold end, so best effort never eats the slack
//! these rules keep.

use super::*;

impl Fixes {
    /// 1. **Stop holding when the work approaches the slack.** With W the estimated
    ///    service time of all pending real-time requests (C-SCAN order from the head,
    ///    eq. 1), the hold ends at `H - W * HOLD_WORK_PERCENT / 100` instead of at H.
    ///    At light load W is small against the slack H - t and the mixer still holds
    ///    almost to H (low utilization kept); when the pending work is comparable to
    ///    the remaining slack, the disk is going to be busy for most of the time left
    ///    anyway, so the batch starts now and the idle time goes into margin instead.
    ///    The best-effort admission test uses the same hold end
    ///    (`hold_end >= t + T_S(R')`), so best-effort requests never eat the slack this
    ///    rule keeps. (A second form, "start when W >= alpha times the earliest
    ///    deadline's slack", was not added: H is already the tightest slack net of the
    ///    work in front of each request, so one factor on `H - t` against W covers it.)
    ///
    /// Under light load (fix 7) there is no cut: the hold runs to H.
    pub(super) fn stop_holding_when_work_approaches_slack<E: ServiceEstimate>(
        &self,
        core: &Core<E>,
        h: i64,
        work: i64,
        now_ns: u64,
    ) -> i64 {
        if self.light(core, now_ns) {
            return h;
        }
        h.saturating_sub(work.saturating_mul(HOLD_WORK_PERCENT) / 100)
    }

    /// 7. **Hold longer under light load.** The real-time share of disk time is
    ///    tracked as a decayed sum of device time (time constant 5 s, starting as if
    ///    the disk had been fully busy, so light load must be measured, not assumed),
    ///    with hysteresis between the regimes (heavy above 60%, light below 50%;
    ///    `load.rs`). Under light load, with no best-effort work for longer than the
    ///    time constant, the hold runs to H without fix 1's cut and on until
    ///    [`LIGHT_HOLD_MARGIN_PERCENT`] of the margin is left: longer runs per batch
    ///    and a disk that sleeps longer. (Fix 1 was made for capacity; at 8r0w it had
    ///    pushed utilization from the paper's 0.33-0.40 to 0.51.) Best-effort work
    ///    switches it off: the time a longer hold saves would go to best effort anyway,
    ///    at the streams' risk.
    ///
    /// Returns how much of the margin the hold may use beyond H.
    pub(super) fn hold_longer_under_light_load<E: ServiceEstimate>(
        &self,
        core: &Core<E>,
        now_ns: u64,
    ) -> i64 {
        if self.light(core, now_ns) {
            core.settings.margin_ns as i64 * (100 - LIGHT_HOLD_MARGIN_PERCENT) / 100
        } else {
            0
        }
    }

    /// Fix 7 applies: light real-time load, and no best-effort work for a while (the
    /// time the hold saves would go to best effort anyway, at the streams' risk).
    fn light<E: ServiceEstimate>(&self, core: &Core<E>, now_ns: u64) -> bool {
        !core.heavy()
            && !core.be_active()
            && now_ns.saturating_sub(core.be_last_ns) > LOAD_TAU_NS as u64
    }

    /// 10. **No idle disk at saturation.** Holding bets that the disk will have slack
    ///     later to make up for the time it idles now. At saturation it never does:
    ///     C-SCAN starts with the first request and keeps a backlog one sweep long,
    ///     while a mixer that idled for its first hold carries that much more backlog
    ///     for the rest of the run, and the streams have that much less buffer when a
    ///     slow sweep comes (on `laptop-5400`, 72 recordings at 8 Mbit/s beside two
    ///     playbacks: the first hold idled the disk from 0.16 s to 1.0 s; 265 s later a
    ///     slow sweep tipped the mixer into 7,400 late writes where C-SCAN, a second
    ///     ahead, recovered). So the mixer does not hold (a saturated batch stays one,
    ///     a pending set starts at once) in the load estimate's first time constant,
    ///     when the load is unknown and is taken as saturated (fix 7's safe start), nor
    ///     while the measured real-time load is at or above
    ///     [`WORK_CONSERVING_LOAD_PERCENT`]. The closed loop keeps its light-load holds
    ///     (8 streams: utilization 0.54 against C-SCAN's 0.85).
    ///
    /// At saturation every moment the disk idles is lost for good, since the backlog
    /// it leaves never drains.
    pub(super) fn no_idle_disk_at_saturation<E: ServiceEstimate>(
        &self,
        core: &Core<E>,
        now_ns: u64,
    ) -> bool {
        now_ns as f64 >= LOAD_TAU_NS
            && core.rt_load(now_ns) * 100.0 < WORK_CONSERVING_LOAD_PERCENT as f64
    }

    /// **The best-effort share is planned.** The time the framework's best-effort
    /// guarantee will take from a batch of `work` while best-effort has work (the
    /// framework may send a best-effort command between any two batch commands, up to
    /// the share of the time) is set aside from H, so a batch planned at H still gives
    /// every member its margin when the guarantee interrupts it.
    pub(super) fn set_aside_the_best_effort_share<E: ServiceEstimate>(
        &self,
        core: &Core<E>,
        work: i64,
    ) -> i64 {
        let s = core.settings.be_share;
        if s <= 0.0 || !core.be_active() {
            return 0;
        }
        (work as f64 * s / (1.0 - s)) as i64
    }
}
