//! The scheduling windows of the real-time scheduler (AVFS 3.3.4, Fig. 11): which
//! requests of the batch the next dispatch chooses among.
//!
//! **Invariant.** The choice depends only on the earliest deadline t_d of the batch,
//! the time t, m and e (and whether the user keeps the full sweep): re-evaluated at
//! every dispatch, so "R_d and all succeeding urgent requests run EDF until none
//! remains urgent" holds as stated.
//!
//! With t_d the earliest deadline in the batch, each dispatch picks:
//! - t_d <= t + e (EDF window): the earliest-deadline request; a read with t_d <= t is
//!   failed ("deadline missed") by the framework, a late write is still served (never
//!   dropped);
//! - t_d <= t + m (reduced C-SCAN window): the next request in C-SCAN order from the
//!   head among those with T_D < t_d + m;
//! - otherwise (C-SCAN window): the next request in C-SCAN order from the head.

/// The window the next dispatch of a batch is chosen from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Window {
    /// Earliest deadline first.
    Edf,
    /// C-SCAN order among the requests with a deadline below `deadline_below_ns`.
    Reduced { deadline_below_ns: u64 },
    /// C-SCAN order over the whole batch.
    Cscan,
}

impl Window {
    /// The window for earliest deadline `earliest_ns` at `now_ns`, with margin m and
    /// urgent threshold e; `full_sweep`: the user keeps the C-SCAN window (a hook).
    pub(super) fn choose(
        earliest_ns: u64,
        now_ns: u64,
        margin_ns: u64,
        urgent_ns: u64,
        full_sweep: bool,
    ) -> Window {
        if full_sweep {
            return Window::Cscan;
        }
        if earliest_ns <= now_ns.saturating_add(urgent_ns) {
            return Window::Edf;
        }
        if earliest_ns <= now_ns.saturating_add(margin_ns) {
            // Only T_D < t_d + m (a bound of u64::MAX leaves no request out).
            let bound = earliest_ns.saturating_add(margin_ns);
            if bound != u64::MAX {
                return Window::Reduced {
                    deadline_below_ns: bound,
                };
            }
        }
        Window::Cscan
    }
}
