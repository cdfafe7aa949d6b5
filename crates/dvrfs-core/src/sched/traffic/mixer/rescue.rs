//! Fix 11: rescuing a read the sweep would fail, and the deadline index of the reads
//! it looks at.
//!
//! **Invariant.** The read index names only real-time reads the mixer holds (pending
//! or in the batch; asserted at every dispatch), and rescues take at most
//! [`RESCUE_SHARE_PERCENT`] of the current sweep pass's time.

use super::*;

impl Fixes {
    /// 11. **Rescue a read the sweep would fail.** A late write is served late; a late
    ///     read fails and the playback glitches. In a saturated batch a sweep takes
    ///     about a stream's whole buffer, so a playback read that arrives just behind
    ///     the head can wait past its deadline. The mixer keeps the real-time reads it
    ///     holds ordered by deadline; at each dispatch of a saturated batch the
    ///     earliest of them whose deadline is within e of the moment its own service
    ///     must start and which C-SCAN order (the work ahead of it, the command in
    ///     flight and its own service time) would complete after its deadline is served
    ///     first, as a detour: a seek there and back, C-SCAN order going on from where
    ///     the sweep was. The window counts the read's own service because merging
    ///     makes playback reads long (seven members, 3.5 MiB, 90 ms on the inner zones
    ///     of `avfs-250g`): with a plain e such a read was urgent only when it was
    ///     already too late to save. A detour delays every read the sweep serves before
    ///     the rescued one by its service time, so no read is rescued if an
    ///     earlier-deadline read that is on time has less than that to spare: it would
    ///     fail in its place. (Both found at `--find-max` on zrr seeds 2 and 9, where
    ///     the mixer carried one stream fewer than C-SCAN; now at least as many on
    ///     every seed.) Rescues may take [`RESCUE_SHARE_PERCENT`] of the sweep's time
    ///     at most; uncapped, past capacity nearly every read is urgent and the sweep
    ///     turns into EDF (the closed loop at 18 streams: 3,438 misses against
    ///     C-SCAN's 1,059). On the NVR rows with playbacks the one-off read failures
    ///     near the maximum are gone and the misses are monotone
    ///     (`docs/mixer-tuning.md`).
    ///
    /// Takes the rescued read out of the batch; the core sends it as a detour.
    pub(super) fn rescue_a_read_the_sweep_would_fail<E: ServiceEstimate>(
        &mut self,
        core: &mut Core<E>,
        now_ns: u64,
    ) -> Option<Request> {
        let key = self.read_to_rescue(core, now_ns)?;
        core.stats.rescued_reads += 1;
        let r = core.batch.remove(key, &core.est).expect("key just found");
        if self.rescue_pass != core.sweep.passes {
            (self.rescue_pass, self.rescue_ns) = (core.sweep.passes, 0);
        }
        self.rescue_ns += 2 * core.estimate(&r);
        self.forget_read(&r);
        Some(r)
    }

    /// The rescue time spent in the current sweep pass (it starts again at 0 when
    /// C-SCAN order wraps).
    fn rescue_spent_ns<E: ServiceEstimate>(&self, core: &Core<E>) -> u64 {
        if self.rescue_pass == core.sweep.passes {
            self.rescue_ns
        } else {
            0
        }
    }

    /// The earliest-deadline real-time read of the batch that is urgent (its deadline
    /// within e of the moment its own service must start, so a long merged read is
    /// urgent earlier than a short one) and that the sweep, as it stands, would
    /// complete only after its deadline: the work C-SCAN order serves before it, the
    /// command in flight and its own service time. A detour delays every read the
    /// sweep would serve before it by the rescued read's service time, so a read is
    /// not rescued at the cost of an earlier-deadline read that would then be late.
    /// Only the eight earliest reads are looked at (the index also holds pending
    /// reads, which are skipped), so a dispatch stays O(log n).
    fn read_to_rescue<E: ServiceEstimate>(&self, core: &Core<E>, now_ns: u64) -> Option<Key> {
        // Rescues are a detour of two positionings each: capped at a share of the
        // sweep's time, so that past capacity they cannot turn the sweep into EDF.
        let share = RESCUE_SHARE_PERCENT;
        if self.rescue_spent_ns(core) * 100 > now_ns.saturating_sub(core.sweep.began_ns) * share {
            return None;
        }
        let urgent_until = now_ns.saturating_add(core.settings.urgent_ns);
        let busy = core.in_flight_remaining_ns(now_ns);
        // No read is urgent earlier than the longest one takes at the slowest rate
        // with twice the average positioning (a full-stroke seek is about twice the
        // average one).
        let (sectors, inner) = (self.longest_read_sectors, u64::MAX);
        let positioned = core.est.service_ns(inner, sectors, false, false);
        let position = positioned
            - core
                .est
                .service_ns(inner, sectors, false, true)
                .min(positioned);
        let longest = positioned + position;
        // The least time to spare of the earlier-deadline reads that are on time.
        let mut spare = i64::MAX;
        let sweep_lba = core.sweep_lba(self);
        for &(deadline, key) in self.reads_by_deadline.iter().take(8) {
            if deadline > urgent_until.saturating_add(longest) {
                return None;
            }
            let Some(r) = core.batch.get(key) else {
                continue;
            };
            let own = core.estimate(r) as i64;
            let before = core.batch.cscan_work_before(sweep_lba, key);
            let late_by = now_ns as i64 + busy + own + before - deadline as i64;
            let urgent = deadline <= urgent_until.saturating_add(own as u64);
            if late_by <= 0 {
                spare = spare.min(-late_by);
            } else if urgent && own <= spare {
                return Some(key);
            }
        }
        None
    }

    /// Fix 11's index entry of a request: real-time reads that fail when late (a
    /// playback's), by deadline; `None` for anything else.
    fn read_key(r: &Request) -> Option<(u64, Key)> {
        (r.class == Class::RealTime && !r.write && r.drop_if_late)
            .then(|| (r.deadline_ns.unwrap_or(u64::MAX), key_of(r)))
    }

    /// A real-time entry is held: index it if it is a read fix 11 may rescue.
    pub(super) fn index_read(&mut self, r: &Request) {
        if let Some(k) = Self::read_key(r) {
            self.reads_by_deadline.insert(k);
            self.longest_read_sectors = self.longest_read_sectors.max(r.sectors);
        }
    }

    /// A real-time entry left the mixer: forget it.
    pub(super) fn forget_read(&mut self, r: &Request) {
        if let Some(k) = Self::read_key(r) {
            self.reads_by_deadline.remove(&k);
        }
    }

    /// The read index names no request the mixer does not hold (see the module docs).
    pub(super) fn check_read_index<E: ServiceEstimate>(&self, core: &Core<E>) {
        assert!(
            self.reads_by_deadline.len() <= core.pending.len() + core.batch.len(),
            "the mixer's read index names requests it does not hold"
        );
    }
}
