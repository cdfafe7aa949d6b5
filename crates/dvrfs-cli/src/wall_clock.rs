//! The workload client (`sim::Client`) run in wall-clock time: the loop `bench`
//! (through the runtime) and `bench --dir` (through POSIX threads) share. The client's
//! timers wait in a heap ordered by time; the loop fires each at its time, sleeps
//! until the next timer or completion, hands every completion to the client, stops
//! the client at the run's end and returns once nothing it started is left.
//!
//! A host says how it learns of completions ([`WallHost::wait`]); everything else is
//! here, so both benches time their clients the same way.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::{Duration, Instant};

use dvrfs_core::sim::{Client, ClientEv, Host};
use dvrfs_core::{Error as CoreError, OpId, Output};

use crate::error::{CliError, CliResult};

/// The client's timers: (time in ns of the run, sequence number, event).
pub type Timers = BinaryHeap<Reverse<(u64, u64, ClientEv)>>;

/// The longest the loop sleeps without looking at the clock (the progress line).
const MAX_WAIT_NS: u64 = 100_000_000;
/// How often the progress line is updated.
const STATUS_EVERY: Duration = Duration::from_millis(500);

/// One finished operation, as the client takes it.
pub struct Completion {
    pub id: OpId,
    pub result: Result<Output, CoreError>,
    /// When it finished, in ns of the run.
    pub at_ns: u64,
}

/// A host that runs the client in wall-clock time.
pub trait WallHost: Host {
    /// Nanoseconds since the run started.
    fn now_ns(&self) -> u64;
    fn timers(&mut self) -> &mut Timers;
    /// Waits at most `wait_ns` for operations to finish; returns those that did.
    fn wait(&mut self, wait_ns: u64) -> CliResult<Vec<Completion>>;
    /// Operations started and not yet returned by `wait`.
    fn in_flight(&self) -> usize;
    /// The progress line's running figure (e.g. "3 late so far").
    fn status(&self) -> String;
}

/// Runs the client until the run's end and everything it started has finished.
pub fn drive<H: WallHost>(
    client: &mut Client,
    host: &mut H,
    recordings: &[String],
    duration_ns: u64,
    what: &str,
) -> CliResult<()> {
    let sim_err = |e: CoreError| CliError::new(format!("the workload failed: {e}"));
    client.start(host, recordings).map_err(sim_err)?;
    let pb = crate::output::progress(duration_ns / 1_000_000_000, false, what);
    let mut stopped = false;
    let mut last_status = Instant::now();
    loop {
        let now = host.now_ns();
        if now >= duration_ns && !stopped {
            stopped = true;
            client.stop();
        }
        while let Some(Reverse((t, _, ev))) = host.timers().peek().copied() {
            if t > now {
                break;
            }
            host.timers().pop();
            client.event(host, ev, t).map_err(sim_err)?;
        }
        if stopped && client.idle() && host.in_flight() == 0 {
            break;
        }
        let next = host.timers().peek().map(|Reverse((t, _, _))| *t);
        let mut wait_ns = next
            .map_or(MAX_WAIT_NS, |t| t.saturating_sub(host.now_ns()))
            .min(MAX_WAIT_NS);
        if !stopped {
            wait_ns = wait_ns.min(duration_ns.saturating_sub(host.now_ns()));
        }
        for c in host.wait(wait_ns)? {
            client
                .completed(host, c.id, c.result, c.at_ns)
                .map_err(sim_err)?;
        }
        if last_status.elapsed() >= STATUS_EVERY {
            last_status = Instant::now();
            pb.set_position((host.now_ns() / 1_000_000_000).min(duration_ns / 1_000_000_000));
            pb.set_message(format!("{what}: {}", host.status()));
        }
    }
    pb.finish_and_clear();
    Ok(())
}
