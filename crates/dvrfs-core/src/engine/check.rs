//! The engine's self-check: its bookkeeping, verified where it must hold.
//!
//! [`Engine::check`] verifies the scheduler's conservation law (requests inserted less
//! those completed are the ones queued or in flight), that the engine holds exactly the
//! requests the scheduler does, the volume's own invariants
//! ([`Volume::check_invariants`]) and the streams' holds on their files. It runs after
//! every device completion in debug builds (the tests and the simulator's debug runs)
//! and when the unmount completes in every build; the simulator also calls it after
//! every run. A failure is a bug in the engine, never damage on the disk: it panics
//! with what broke and where.
//!
//! [`Volume::check_invariants`]: crate::volume::Volume::check_invariants

use super::device::InFlight;
use super::Engine;

impl Engine {
    /// The engine's bookkeeping, checked (the simulator calls it after every run).
    pub fn check(&self) -> std::result::Result<(), String> {
        self.sched.check()?;
        self.vol.check_invariants()?;
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

    /// What a command in flight serves, for a bug report.
    pub(super) fn command_about(&self, what: &InFlight) -> String {
        match what {
            InFlight::Flush => "a flush for the commit pipeline".to_string(),
            InFlight::Sched(c) => {
                let mut ops: Vec<String> = c
                    .members
                    .iter()
                    .map(|m| match self.pieces.get(&m.id).and_then(|p| p.op) {
                        Some(op) => format!("operation {op}"),
                        None => "the commit pipeline".to_string(),
                    })
                    .collect();
                ops.dedup();
                format!(
                    "a {} of {} requests for {}",
                    if c.write { "write" } else { "read" },
                    c.members.len(),
                    ops.join(", ")
                )
            }
        }
    }

    /// [`Engine::check`], or a panic that reads as a bug report: `when` says at which
    /// step the bookkeeping was found broken.
    pub(super) fn assert_consistent(&self, when: impl FnOnce() -> String) {
        if let Err(e) = self.check() {
            panic!(
                "dvrfs engine bug: its bookkeeping broke {}: {e} (the scheduler: {} \
                 requests queued, {} in flight). Report it with the driver's log; the \
                 simulator replays it from its seed.",
                when(),
                self.sched.queued(),
                self.sched.in_flight_requests()
            );
        }
    }
}
