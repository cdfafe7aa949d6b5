//! QoS measurement (AVFS 2.2). The engine's [`Recorder`] notes, for every real-time
//! operation, its submission, completion and deadline (and every failure, with its
//! cause), for every best-effort operation its latency, and for every device command
//! its place on the disk and the time the device was busy. The simulator's report
//! (`sim/report.rs`) turns a run into figures.

use serde::Serialize;

/// Why a real-time request missed its deadline.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct MissCauses {
    /// Completed after its deadline (writes are never dropped: they complete late).
    pub late: u64,
    /// A read failed with "deadline missed" instead of being served late.
    pub deadline_failed: u64,
    /// Could not be issued or failed for lack of space (a recording that stopped).
    pub no_space: u64,
    /// Failed or could not be issued for another reason (an I/O error, a stream that
    /// could not go on).
    pub other: u64,
}

impl MissCauses {
    pub fn total(&self) -> u64 {
        self.late + self.deadline_failed + self.no_space + self.other
    }
}

/// What the engine measures while it runs (all times monotonic ns).
#[derive(Clone, Debug, Default)]
pub struct Recorder {
    /// Real-time operations that completed or failed, and their bytes moved.
    pub rt_ops: u64,
    pub rt_bytes: u64,
    /// Completion margin of every real-time operation (deadline - completion); a
    /// failed one counts with a margin just below zero.
    pub margins_ns: Vec<i64>,
    pub misses: MissCauses,
    pub be_ops: u64,
    pub be_bytes: u64,
    pub be_latencies_ns: Vec<u64>,
    pub be_first_submit_ns: Option<u64>,
    pub be_last_done_ns: u64,
    /// Device commands (flushes excluded) and the time the device had one in flight.
    pub commands: u64,
    pub busy_ns: u64,
    /// Distance from the end of each command to the start of the next, bytes.
    pub seek_distances_bytes: Vec<u64>,
    last_end_bytes: Option<u64>,
    /// Journal and checkpoint commands, and their bytes.
    pub metadata_commands: u64,
    pub metadata_bytes: u64,
    pub commits: u64,
    pub flushes: u64,
    /// Bytes of recordings' partial requests logged in the tail log, and gathers
    /// written in place because the ring was full (`engine/tail_log.rs`).
    pub tail_logged_bytes: u64,
    pub tail_log_full: u64,
    /// Keep the counters and no per-request sample (`margins_ns`, `be_latencies_ns`,
    /// `seek_distances_bytes` stay empty): a driver that runs for months (the
    /// mount) would otherwise hold a sample of every request it ever served.
    pub counts_only: bool,
}

impl Recorder {
    /// A device command starts at byte `offset` for `len` bytes.
    pub fn command(&mut self, offset: u64, len: u64, metadata: bool) {
        self.commands += 1;
        if let Some(prev) = self.last_end_bytes.filter(|_| !self.counts_only) {
            self.seek_distances_bytes.push(prev.abs_diff(offset));
        }
        self.last_end_bytes = Some(offset + len);
        if metadata {
            self.metadata_commands += 1;
            self.metadata_bytes += len;
        }
    }

    /// A real-time operation finished at `done_ns` (`ok`: it delivered its data).
    pub fn realtime(&mut self, deadline_ns: u64, done_ns: u64, bytes: u64, outcome: RtOutcome) {
        self.rt_ops += 1;
        let margin = deadline_ns as i64 - done_ns as i64;
        let before = self.margins_ns.len();
        match outcome {
            RtOutcome::Done => {
                self.rt_bytes += bytes;
                if margin < 0 {
                    self.misses.late += 1;
                }
                self.margins_ns.push(margin);
            }
            RtOutcome::DeadlineFailed => {
                self.misses.deadline_failed += 1;
                self.margins_ns.push(margin.min(-1));
            }
            RtOutcome::NoSpace => {
                self.misses.no_space += 1;
                self.margins_ns.push(margin.min(-1));
            }
            RtOutcome::Other => {
                self.misses.other += 1;
                self.margins_ns.push(margin.min(-1));
            }
        }
        if self.counts_only {
            self.margins_ns.truncate(before);
        }
    }

    /// Real-time requests a client could not issue at all (a recording stopped): each
    /// counts as a miss with its cause.
    pub fn not_issued(&mut self, count: u64, no_space: bool) {
        self.rt_ops += count;
        if no_space {
            self.misses.no_space += count;
        } else {
            self.misses.other += count;
        }
        if !self.counts_only {
            self.margins_ns
                .extend(std::iter::repeat_n(-1, count as usize));
        }
    }

    /// A best-effort data operation finished.
    pub fn best_effort(&mut self, submit_ns: u64, done_ns: u64, bytes: u64) {
        self.be_ops += 1;
        self.be_bytes += bytes;
        if !self.counts_only {
            self.be_latencies_ns.push(done_ns.saturating_sub(submit_ns));
        }
        self.be_first_submit_ns = Some(
            self.be_first_submit_ns
                .map_or(submit_ns, |f| f.min(submit_ns)),
        );
        self.be_last_done_ns = self.be_last_done_ns.max(done_ns);
    }

    pub fn deadline_misses(&self) -> u64 {
        self.misses.total()
    }
}

/// How a real-time operation ended, for [`Recorder::realtime`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RtOutcome {
    Done,
    DeadlineFailed,
    NoSpace,
    Other,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_counts_only_recorder_counts_everything_and_keeps_no_sample() {
        let mut full = Recorder::default();
        let mut counts = Recorder {
            counts_only: true,
            ..Recorder::default()
        };
        for r in [&mut full, &mut counts] {
            r.command(0, 4096, false);
            r.command(1 << 30, 4096, true);
            r.realtime(100, 50, 4096, RtOutcome::Done);
            r.realtime(100, 150, 4096, RtOutcome::Done);
            r.realtime(100, 50, 0, RtOutcome::NoSpace);
            r.not_issued(3, false);
            r.best_effort(10, 20, 4096);
        }
        assert_eq!(full.margins_ns.len(), 6);
        assert_eq!(full.seek_distances_bytes.len(), 1);
        assert_eq!(full.be_latencies_ns.len(), 1);
        assert!(counts.margins_ns.is_empty());
        assert!(counts.seek_distances_bytes.is_empty());
        assert!(counts.be_latencies_ns.is_empty());
        for r in [&full, &counts] {
            assert_eq!((r.rt_ops, r.commands, r.metadata_commands), (6, 2, 1));
            assert_eq!(
                (r.misses.late, r.misses.no_space, r.misses.other),
                (1, 1, 3)
            );
            assert_eq!((r.be_ops, r.be_bytes, r.rt_bytes), (1, 4096, 8192));
        }
    }
}
