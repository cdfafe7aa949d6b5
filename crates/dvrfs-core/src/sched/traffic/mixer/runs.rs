//! Sequential runs: which request continues a run (fix 6) and which arrivals ride
//! along with a batch that is not saturated (fix 3).
//!
//! **Invariant.** An arrival rides along only if it continues a run ahead of the
//! sweep and endangers no margin: neither the batch's own hold time nor that of the
//! pending requests behind it falls below what it was, or below now.

use super::*;

impl Fixes {
    /// 6. **Overlapping reads continue the run.** An unaligned reader (a FUSE client, a
    ///    player restarting mid-page) can issue a read that starts a few sectors
    ///    *before* the end of its previous one. Under exact contiguity that read lies
    ///    just behind the head once the previous one is served: it is not "ahead", and
    ///    it waits a whole sweep (or, dispatched alone, almost a revolution). A read
    ///    that starts at most [`RUN_OVERLAP_SECTORS`] before the end of the previous
    ///    request (or command) and reaches beyond it counts as continuing the run: the
    ///    C-SCAN order and the hold time start that far behind the head, and it may
    ///    ride along (fix 3). Writes never count (their order matters). With the
    ///    simulator's first, unaligned playback this raised `--find-max` 8r0w from 14
    ///    to 17 streams (`docs/mixer-tuning.md`).
    ///
    /// Where the C-SCAN order starts: the head, less the tolerated overlap.
    pub(super) fn overlapping_reads_continue_the_run(&self, head_lba: u64) -> u64 {
        head_lba.saturating_sub(RUN_OVERLAP_SECTORS)
    }

    /// Fix 6: `next` continues the run that ends at `end`: it starts there, or it is a
    /// read overlapping the run's last [`RUN_OVERLAP_SECTORS`] and reaching beyond it.
    fn continues_run(next: &Request, end: u64, write: bool) -> bool {
        next.lba == end
            || (!write
                && !next.write
                && next.lba < end
                && next.lba + RUN_OVERLAP_SECTORS >= end
                && next.end_lba() > end)
    }

    /// 3. **Runs ride along.** In a batch that is not saturated, a real-time request
    ///    that arrives during the batch joins it, whatever its deadline, if it
    ///    continues a run (starts where a batch request, or the command just sent,
    ///    ends), lies ahead of the sweep (at or above the head, and below the sweep's
    ///    starting LBA once wrapped), and endangers no margin: the batch's own hold
    ///    time after joining is not below min(now, its value before), and the pending
    ///    requests, which start after the batch, keep `H_pending - W_batch >= now`. It
    ///    costs transfer time only. (Taking *any* request ahead of the head was tried
    ///    and is worse below saturation: it serves a stream's request before the
    ///    stream's next ones have accumulated, breaking up the very runs the hold
    ///    exists to build.)
    pub(super) fn runs_ride_along<E: ServiceEstimate>(
        &mut self,
        core: &mut Core<E>,
        req: Request,
        now_ns: u64,
    ) -> Result<(), Request> {
        let sweep_lba = core.sweep_lba(&*self);
        let ahead = req.lba >= sweep_lba && (!core.sweep.wrapped || req.lba < core.sweep.start_lba);
        // Only a request that continues a run already in the batch (or the command
        // just sent) rides along: it costs transfer time only.
        let continues = Self::continues_run(&req, core.head_lba, core.head_write)
            || core
                .batch
                .last_lt((req.lba, 0))
                .is_some_and(|p| Self::continues_run(&req, p.end_lba(), p.write));
        if !ahead || !continues {
            return Err(req);
        }
        // Accept when (a) the pending requests, which start after the batch, keep
        // their margin: H_pending - W_batch(after) >= now, and (b) the batch's hold
        // time after joining is not below min(now, before); `before` is needed only
        // when `after` < now.
        let key = key_of(&req);
        let now = now_ns as i64;
        core.batch.insert(req, &core.est);
        let (after, work_after) = core
            .batch_hold_and_work(&*self, now_ns)
            .unwrap_or((i64::MAX, 0));
        let pending_ok = core
            .hold_and_work(&*self, now_ns)
            .is_none_or(|(h, _)| h.saturating_sub(work_after) >= now);
        if pending_ok && after >= now {
            return Ok(());
        }
        let probe = core.batch.remove(key, &core.est).expect("just inserted");
        if !pending_ok {
            return Err(probe);
        }
        let before = core
            .batch_hold_and_work(&*self, now_ns)
            .map_or(i64::MAX, |(h, _)| h);
        if after >= before {
            core.batch.insert(probe, &core.est);
            Ok(())
        } else {
            Err(probe)
        }
    }
}
