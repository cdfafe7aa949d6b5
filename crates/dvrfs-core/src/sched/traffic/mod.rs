//! The traffic mixer (AVFS 3.3): the paper's core, which the published policy (`avfs`,
//! [`avfs`]) and dvrfs's own mixer (`mixer`, [`mixer`]) both run, and the hooks at
//! which they differ.
//!
//! **Invariant.** Every real-time entry the mixer holds is in exactly one of two sets,
//! the pending set or the running batch (a best-effort entry in the best-effort
//! queue); a batch is only formed from an empty one; the commands counted in flight
//! never exceed the queue depth.
//!
//! ## The core, one concept per file
//!
//! | file | concept (AVFS section) |
//! |---|---|
//! | `pending.rs` | admission: the pending set of real-time requests (3.3.1) |
//! | `hold_tree.rs` | the set itself: LBA order, deadline order and eq. 2-3 in O(log n) |
//! | `hold.rs` | the hold time H (eq. 2-3) and the mixer states of Fig. 10 |
//! | `batch.rs` | forming the batch, sweeping it in C-SCAN order, joins (3.3.4) |
//! | `window.rs` | the EDF, reduced C-SCAN and C-SCAN windows (Fig. 11) |
//! | `best_effort.rs` | the best-effort queue: C-SCAN from the head, aging (3.3.5) |
//! | `head.rs` | the head position and the commands in flight |
//! | `load.rs` | the real-time load estimate (not in the paper; reported for both) |
//!
//! ## The hooks
//!
//! The algorithm is the paper's; at each point where `mixer` decides otherwise it
//! asks its [`Hooks`], as the framework asks a [`Policy`] (`framework.rs`). The
//! published policy ([`avfs::Paper`]) answers each hook with the paper's behaviour;
//! the mixer ([`mixer::Fixes`]) answers with one named function per fix, the fix's
//! essay beside it. The hook table, in the order the algorithm meets it:
//!
//! | hook | the paper | `mixer` |
//! |---|---|---|
//! | [`Hooks::sweep_from`] | C-SCAN order starts at the head | fix 6: a little behind it |
//! | [`Hooks::hold_reserve_ns`] | nothing set aside | the best-effort share |
//! | [`Hooks::hold_until`] | hold until H | fix 1 (cut by the work), fix 7 (light load) |
//! | [`Hooks::may_hold`] | always | fix 10: never at saturation |
//! | [`Hooks::slack`] | - | fix 2: notes the idle disk |
//! | [`Hooks::batch_started`] | - | fix 2, fix 8: is the batch saturated? |
//! | [`Hooks::before_dispatch`] | - | fix 2: a light saturated batch holds again |
//! | [`Hooks::full_sweep`] | never | fix 2, fix 4: keep C-SCAN order |
//! | [`Hooks::detour`] | none | fix 11: rescue a read |
//! | [`Hooks::best_effort_in_sweep`] | none (footnote *1) | fix 9 |
//! | [`Hooks::join_late`] | refused | fix 2, fix 3 (with fix 6) |
//! | [`Hooks::forced`] | the head moves | the sweep keeps its place |
//! | [`Hooks::held`], [`Hooks::released`] | - | fix 11's read index |
//!
//! [`MixerStats`] counts batches, dispatches per window, holds and joins.

mod batch;
mod best_effort;
mod head;
mod hold;
mod hold_tree;
mod load;
mod pending;
mod window;

pub mod avfs;
pub mod mixer;

use super::*;
use hold_tree::{key_of, HoldTree, Key};
use load::LOAD_TAU_NS;
use std::collections::BTreeMap;
use window::Window;

/// What the mixer did, for reports: dispatches per window and how often it held.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MixerStats {
    pub batches: u64,
    pub cscan_dispatches: u64,
    pub reduced_dispatches: u64,
    pub edf_dispatches: u64,
    pub best_effort_dispatches: u64,
    /// `Wait { until_ns: Some(H) }` answers.
    pub holds: u64,
    /// Requests that joined a running batch.
    pub joined: u64,
    /// Batches that started saturated (`mixer`: back-to-back, C-SCAN joins).
    pub saturated_batches: u64,
    /// Saturated batches turned back into held pending sets.
    pub desaturations: u64,
    /// Best-effort commands the framework's guarantee sent around the mixer.
    pub forced_best_effort: u64,
    /// Switches of the load regime.
    pub to_light: u64,
    pub to_heavy: u64,
    /// Best-effort requests a saturated batch served as its sweep passes them.
    pub be_in_sweep: u64,
    /// Real-time reads a saturated batch served out of C-SCAN order so as not to
    /// fail them (`mixer`, fix 11).
    pub rescued_reads: u64,
}

/// The points at which a user of the core decides. Each method's doc says what the
/// paper does there; [`avfs::Paper`] does exactly that.
pub(crate) trait Hooks: Send {
    /// The name as `--scheduler` spells it.
    fn name(&self) -> &'static str;
    /// Where C-SCAN order starts, for the hold time and the batch, given the head
    /// (the end LBA of the last dispatched request). Paper: the head.
    fn sweep_from(&self, head_lba: u64) -> u64;
    /// Time to set aside from H for the pending work `work_ns` (ns). Paper: none.
    fn hold_reserve_ns<E: ServiceEstimate>(&self, core: &Core<E>, work_ns: i64) -> i64;
    /// When the hold ends, given H and the pending work W (ns). Paper: at H.
    fn hold_until<E: ServiceEstimate>(&self, core: &Core<E>, h: i64, work: i64, now_ns: u64)
        -> i64;
    /// Whether the mixer may idle the disk (or run best effort) to hold at all.
    /// Paper: always.
    fn may_hold<E: ServiceEstimate>(&self, core: &Core<E>, now_ns: u64) -> bool;
    /// The disk was left idle, or ran best effort, between batches. Paper: nothing.
    fn slack(&mut self);
    /// A batch was just formed from the pending set. Paper: nothing.
    fn batch_started<E: ServiceEstimate>(&mut self, core: &mut Core<E>, now_ns: u64);
    /// Every dispatch starts here. Paper: nothing.
    fn before_dispatch<E: ServiceEstimate>(&mut self, core: &mut Core<E>, now_ns: u64);
    /// Whether the batch keeps the full C-SCAN window whatever its deadlines. Paper:
    /// never (the windows follow the earliest deadline alone).
    fn full_sweep<E: ServiceEstimate>(&self, core: &Core<E>, now_ns: u64) -> bool;
    /// A batch member to serve out of C-SCAN order, taken out of the batch; the sweep
    /// goes on from where it was. Paper: none.
    fn detour<E: ServiceEstimate>(&mut self, core: &mut Core<E>, now_ns: u64) -> Option<Request>;
    /// A best-effort request the batch serves in its sweep. Paper: none (footnote *1:
    /// no interleaving).
    fn best_effort_in_sweep<E: ServiceEstimate>(&self, core: &Core<E>) -> Option<Key>;
    /// A real-time arrival during a batch whose deadline is not earlier than the
    /// batch's latest: `Ok` if it joined the batch (inserted there), else handed back
    /// for the pending set. Paper: handed back.
    fn join_late<E: ServiceEstimate>(
        &mut self,
        core: &mut Core<E>,
        req: Request,
        now_ns: u64,
    ) -> Result<(), Request>;
    /// The framework sent `cmd` itself (the best-effort guarantee). Paper: as any
    /// command sent, the head moves to its end.
    fn forced<E: ServiceEstimate>(&mut self, core: &mut Core<E>, cmd: &Request, now_ns: u64);
    /// A real-time entry is now held (pending or in the batch). Paper: nothing.
    fn held(&mut self, r: &Request);
    /// A real-time entry left the mixer (served, cancelled or merged). Paper: nothing.
    fn released(&mut self, r: &Request);
}

/// The state of the paper's algorithm; each part is kept by the file of its concept.
pub(crate) struct Core<E> {
    name: &'static str,
    settings: SchedSettings,
    est: E,
    /// RT requests waiting for a batch (`pending.rs`).
    pending: HoldTree,
    /// RT requests of the running batch (`batch.rs`).
    batch: HoldTree,
    batch_active: bool,
    /// Latest deadline in the batch when it started (joiners are earlier by rule).
    batch_latest_deadline_ns: u64,
    /// Where the batch's sweep started, whether it wrapped, and when it last did.
    sweep: batch::Sweep,
    /// BE requests by (lba, id) and by (submit, id) for aging (`best_effort.rs`).
    be_by_lba: BTreeMap<Key, Request>,
    be_by_age: BTreeMap<(u64, ReqId), u64>,
    /// Best-effort commands in flight, and when best effort last had work.
    be_in_flight: u32,
    be_last_ns: u64,
    /// End LBA of the last dispatched request (`head.rs`).
    head_lba: u64,
    /// Whether the last dispatched command was a write.
    head_write: bool,
    /// Dispatched entries: id -> estimated end time.
    in_flight: BTreeMap<ReqId, u64>,
    /// Dispatch times of the commands in flight.
    sent_ns: BTreeMap<ReqId, u64>,
    /// Real-time (and metadata) device time, decayed with [`LOAD_TAU_NS`], and when
    /// it was last updated; `heavy`: the load regime (with hysteresis) (`load.rs`).
    rt_busy_decayed_ns: f64,
    load_updated_ns: u64,
    last_complete_ns: u64,
    heavy: bool,
    stats: MixerStats,
}

impl<E: ServiceEstimate> Core<E> {
    /// Settings are validated by the framework ([`SchedSettings::validate`]); invalid
    /// ones give odd schedules, never a panic.
    fn new(name: &'static str, settings: &SchedSettings, est: E) -> Self {
        Self {
            name,
            settings: *settings,
            est,
            pending: HoldTree::default(),
            batch: HoldTree::default(),
            batch_active: false,
            batch_latest_deadline_ns: 0,
            sweep: batch::Sweep::default(),
            be_by_lba: BTreeMap::new(),
            be_by_age: BTreeMap::new(),
            be_in_flight: 0,
            be_last_ns: 0,
            head_lba: 0,
            head_write: false,
            in_flight: BTreeMap::new(),
            sent_ns: BTreeMap::new(),
            // As if the disk had been fully busy: light load must be measured first.
            rt_busy_decayed_ns: LOAD_TAU_NS,
            load_updated_ns: 0,
            last_complete_ns: 0,
            // Start in the safe regime; light load is recognised within a few
            // time constants.
            heavy: true,
            stats: MixerStats::default(),
        }
    }
}

/// The core with the hooks of one user.
pub(crate) struct TrafficMixer<E, H> {
    core: Core<E>,
    hooks: H,
}

impl<E: ServiceEstimate, H: Hooks> TrafficMixer<E, H> {
    pub fn new(settings: &SchedSettings, hooks: H, est: E) -> Self {
        Self {
            core: Core::new(hooks.name(), settings, est),
            hooks,
        }
    }

    pub fn stats(&self) -> MixerStats {
        self.core.stats
    }

    /// `(H, pending work)` in ns, `None` without pending RT requests.
    pub fn hold_and_work(&self, now_ns: u64) -> Option<(i64, i64)> {
        self.core.hold_and_work(&self.hooks, now_ns)
    }

    pub fn batch_active(&self) -> bool {
        self.core.batch_active
    }

    #[cfg(test)]
    pub fn batch_len(&self) -> usize {
        self.core.batch.len()
    }

    pub fn queued(&self) -> u64 {
        (self.core.pending.len() + self.core.batch.len() + self.core.be_by_lba.len()) as u64
    }

    pub fn name(&self) -> &'static str {
        self.core.name
    }

    pub fn stats_list(&self) -> Vec<(&'static str, u64)> {
        let s = self.core.stats;
        vec![
            ("batches", s.batches),
            ("cscan_dispatches", s.cscan_dispatches),
            ("reduced_dispatches", s.reduced_dispatches),
            ("edf_dispatches", s.edf_dispatches),
            ("best_effort_dispatches", s.best_effort_dispatches),
            ("forced_best_effort", s.forced_best_effort),
            ("to_light", s.to_light),
            ("to_heavy", s.to_heavy),
            ("holds", s.holds),
            ("joined", s.joined),
            ("saturated_batches", s.saturated_batches),
            ("desaturations", s.desaturations),
            ("be_in_sweep", s.be_in_sweep),
            ("rescued_reads", s.rescued_reads),
        ]
    }

    /// The framework sent a best-effort command itself (the guarantee).
    pub fn forced(&mut self, cmd: &Request, now_ns: u64) {
        self.core.stats.forced_best_effort += 1;
        self.hooks.forced(&mut self.core, cmd, now_ns);
    }

    pub fn complete(&mut self, cmd: &Request, now_ns: u64) {
        self.core.complete(cmd, now_ns);
    }
}

/// Implements the framework's [`Policy`] for a wrapper `$t<E>(TrafficMixer<..>)`.
macro_rules! delegate_policy {
    ($t:ident) => {
        impl<E: ServiceEstimate> Policy for $t<E> {
            fn name(&self) -> &'static str {
                self.0.name()
            }
            fn insert(&mut self, req: Request, now_ns: u64) {
                self.0.insert(req, now_ns)
            }
            fn remove(&mut self, req: &Request) -> bool {
                self.0.remove(req)
            }
            fn merged(&mut self, old: &Request, new: Request, now_ns: u64) {
                self.0.merged(old, new, now_ns)
            }
            fn dispatch(&mut self, now_ns: u64, _free_slots: u32) -> Pick {
                self.0.dispatch(now_ns)
            }
            fn forced(&mut self, cmd: &Request, now_ns: u64) {
                self.0.forced(cmd, now_ns)
            }
            fn complete(&mut self, cmd: &Request, now_ns: u64) {
                self.0.complete(cmd, now_ns)
            }
            fn queued(&self) -> u64 {
                self.0.queued()
            }
            fn stats(&self) -> Vec<(&'static str, u64)> {
                self.0.stats_list()
            }
        }
    };
}
use delegate_policy;
