//! The engine's self-check: its bookkeeping, verified where it must hold.
//!
//! [`Engine::check`] verifies the scheduler's conservation law (requests inserted less
//! those completed are the ones queued or in flight), that the engine holds exactly the
//! requests the scheduler does, the volume's own invariants
//! ([`Volume::check_invariants`]) and the streams' holds on their files. It runs after
//! every device completion in debug builds (the tests and the simulator's debug runs;
//! on a large volume the volume's scan only every so many completions,
//! [`SCAN_BLOCKS_PER_COMPLETION`]) and when the unmount completes in every build; the simulator also calls it after
//! every run. A failure is a bug in the engine, never damage on the disk: it panics
//! with what broke and where.
//!
//! [`Volume::check_invariants`]: crate::volume::Volume::check_invariants

use super::device::InFlight;
use super::{Engine, OpId};
use std::fmt;

/// Data blocks the volume's check may scan per device completion in a debug build,
/// amortized: the allocator's check reads every block's bits, so on a large volume a
/// full check after every completion would dominate a debug run (1.6x the CPU time of
/// the stream tests). The bookkeeping proper (the conservation law, the requests
/// held) is checked after every completion.
const SCAN_BLOCKS_PER_COMPLETION: u64 = 4096;

/// What a completed command served, for a bug report.
pub(super) struct Served {
    kind: &'static str,
    requests: usize,
    /// The operation its first request was for (`None`: the commit pipeline's).
    first_op: Option<OpId>,
}

impl fmt::Display for Served {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.requests == 0 {
            return write!(f, "a {}", self.kind);
        }
        write!(
            f,
            "a {} of {} requests, the first ",
            self.kind, self.requests
        )?;
        match self.first_op {
            Some(op) => write!(f, "for operation {op}"),
            None => write!(f, "the commit pipeline's"),
        }
    }
}

impl Engine {
    /// The engine's bookkeeping, checked (the simulator calls it after every run).
    pub fn check(&self) -> std::result::Result<(), String> {
        self.check_bookkeeping()?;
        self.vol.check_invariants()
    }

    /// The cheap part of [`Engine::check`], O(streams): the scheduler's conservation
    /// law, the requests the engine and the scheduler hold, the streams' holds.
    fn check_bookkeeping(&self) -> std::result::Result<(), String> {
        self.sched.check()?;
        self.check_holds()?;
        let held = self.pieces.len() as u64;
        let sched_held = self.sched.queued() + self.sched.in_flight_requests();
        if held != sched_held {
            return Err(format!(
                "engine holds {held} requests, the scheduler {sched_held}"
            ));
        }
        Ok(())
    }

    /// What command `what` serves, named before its completion drops its requests.
    pub(super) fn served(&self, what: &InFlight) -> Served {
        match what {
            InFlight::Flush => Served {
                kind: "flush",
                requests: 0,
                first_op: None,
            },
            InFlight::Sched(c) => Served {
                kind: if c.write { "write" } else { "read" },
                requests: c.members.len(),
                first_op: c
                    .members
                    .first()
                    .and_then(|m| self.pieces.get(&m.id))
                    .and_then(|p| p.op),
            },
        }
    }

    /// After device command `cmd` (serving `served`) completed, in debug builds: the
    /// bookkeeping every time, the volume's invariants on completions spaced so that
    /// their scan costs [`SCAN_BLOCKS_PER_COMPLETION`] blocks per completion at most.
    pub(super) fn check_after_completion(&mut self, cmd: u64, served: Served) {
        self.completions_checked += 1;
        let blocks = self.vol.superblock().data_blocks;
        let stride = (blocks / SCAN_BLOCKS_PER_COMPLETION).max(1);
        let result = if self.completions_checked.is_multiple_of(stride) {
            self.check()
        } else {
            self.check_bookkeeping()
        };
        if let Err(e) = result {
            self.bug_report(
                &e,
                format!("after device command {cmd} ({served}) completed"),
            );
        }
    }

    /// [`Engine::check`], or a panic that reads as a bug report: `when` says at which
    /// step the bookkeeping was found broken.
    pub(super) fn assert_consistent(&self, when: impl FnOnce() -> String) {
        if let Err(e) = self.check() {
            self.bug_report(&e, when());
        }
    }

    fn bug_report(&self, e: &str, when: String) -> ! {
        panic!(
            "dvrfs engine bug: its bookkeeping broke {}: {e} (the scheduler: {} requests \
             queued, {} in flight). Report it with the driver's log; the simulator replays \
             it from its seed.",
            when,
            self.sched.queued(),
            self.sched.in_flight_requests()
        );
    }
}
