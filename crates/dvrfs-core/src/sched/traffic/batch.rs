//! Forming the batch and sweeping it (AVFS 3.3.4): the real-time scheduler.
//!
//! **Invariant.** A batch is only formed when the last one is empty, and takes every
//! pending request; its members leave it only by being served (or cancelled, or
//! handed back to the pending set by a hook); best-effort requests do not run during
//! a batch unless a hook serves one in the sweep.
//!
//! *The batch (3.3.4).* Starting a batch moves every pending RT request into it. Each
//! dispatch then picks from the window of `window.rs`. An RT request arriving while
//! the batch runs joins it only if its deadline is earlier than the batch's latest
//! deadline; otherwise it waits in the pending set for the next batch (unless
//! [`Hooks::join_late`] takes it). The batch is active from its start until a dispatch
//! finds it empty; BE requests do not run during a batch (footnote *1: no
//! interleaving).

use super::*;

/// The batch's sweep in C-SCAN order.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Sweep {
    /// LBA at which the batch's sweep started, and whether the sweep has wrapped.
    pub(super) start_lba: u64,
    pub(super) wrapped: bool,
    /// When C-SCAN order last wrapped, and how often it has (a pass number).
    pub(super) began_ns: u64,
    pub(super) passes: u64,
}

impl<E: ServiceEstimate, H: Hooks> TrafficMixer<E, H> {
    pub(super) fn start_batch(&mut self, now_ns: u64) {
        let core = &mut self.core;
        assert!(
            core.batch.is_empty(),
            "a batch started while the last one held requests"
        );
        core.batch = core.pending.take_all();
        core.batch_active = true;
        core.stats.batches += 1;
        core.batch_latest_deadline_ns = core.batch.total().max_td;
        core.sweep.start_lba = core.head_lba;
        core.sweep.wrapped = false;
        self.hooks.batch_started(core, now_ns);
    }

    /// One dispatch from the running batch; `None` when the batch is empty.
    pub(super) fn serve_batch(&mut self, now_ns: u64) -> Option<Pick> {
        let earliest = self.core.batch.total().min_td;
        if self.core.batch.is_empty() {
            return None;
        }
        let (m, e) = (self.core.settings.margin_ns, self.core.settings.urgent_ns);
        let full_sweep = self.hooks.full_sweep(&self.core, now_ns);
        if let Some(r) = self.hooks.detour(&mut self.core, now_ns) {
            return Some(self.core.send_detour(r, now_ns));
        }
        if let Some(key) = self.hooks.best_effort_in_sweep(&self.core) {
            self.core.stats.be_in_sweep += 1;
            self.core.stats.best_effort_dispatches += 1;
            let r = self.core.take_be(key);
            return Some(self.core.send(r, now_ns));
        }
        let core = &mut self.core;
        let sweep_lba = core.sweep_lba(&self.hooks);
        let next = match Window::choose(earliest, now_ns, m, e, full_sweep) {
            Window::Edf => {
                core.stats.edf_dispatches += 1;
                let urgent = core.batch.earliest_deadline().expect("non-empty batch");
                let r = core
                    .batch
                    .remove(key_of(urgent), &core.est)
                    .expect("key just found");
                self.hooks.released(&r);
                return Some(core.send(r, now_ns));
            }
            Window::Reduced { deadline_below_ns } => {
                core.stats.reduced_dispatches += 1;
                core.batch.cscan_next_td_below(sweep_lba, deadline_below_ns)
            }
            Window::Cscan => {
                core.stats.cscan_dispatches += 1;
                core.batch.cscan_next(sweep_lba)
            }
        };
        let next = *next.expect("window holds the earliest request");
        let r = core
            .batch
            .remove(key_of(&next), &core.est)
            .expect("key just found");
        self.hooks.released(&r);
        if r.lba < sweep_lba {
            core.sweep.wrapped = true;
            core.sweep.began_ns = now_ns;
            core.sweep.passes += 1;
        }
        Some(core.send(r, now_ns))
    }

    /// Whether a request arriving during the batch may join it (3.3.4, then the
    /// [`Hooks::join_late`] hook). Inserts it into the batch if so.
    pub(super) fn try_join(&mut self, req: Request, now_ns: u64) -> Result<(), Request> {
        let deadline = req.deadline_ns.unwrap_or(u64::MAX);
        if deadline < self.core.batch_latest_deadline_ns {
            self.core.batch.insert(req, &self.core.est);
            return Ok(());
        }
        self.hooks.join_late(&mut self.core, req, now_ns)
    }
}
