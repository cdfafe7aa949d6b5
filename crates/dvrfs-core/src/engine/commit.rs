//! The commit pipeline: an explicit state machine with barriers.
//!
//! A commit job runs these stages, each only after the previous one has completed:
//!
//! ```text
//!   TailLog        the batch of recordings' tails at the tail log's head (metadata
//!                  class, the journal write's deadline), if the cut made one
//!   DataFlush      flush, if any data write (or the batch) completed since the last flush
//!   Journal        the transaction at the journal head               (metadata class)
//!   JournalFlush   flush: the commit point
//!   Primary        the dirty blocks to the primary region, coalesced  (metadata class)
//!   PrimaryFlush   flush
//!   Backup         the same to the backup region + end-of-device superblock copy
//!   BackupFlush    flush: only now may the next transaction overwrite the journal
//!   Invalidate     (unmount, and after a replay) zero the journal head
//!   InvalidateFlush
//! ```
//!
//! The engine enforces this order; no policy can reorder across a stage, because a
//! stage's requests reach the scheduler only when the previous stage is complete, and a
//! flush is issued only when no request of its stage is outstanding; each stage asserts
//! it when it starts (`CommitJob::assert_may_start`). Journal and checkpoint writes are
//! requests of their own class ([`Class::Metadata`]) with a deadline of their own: the
//! job's start plus the commit interval (the whole job should be done before the next
//! one is due; the journal write, which is the commit point, by the start plus the
//! gather lead, so bytes are durable soon after the cut, `stream::GATHER_LEAD_NS`), or
//! sooner when an `fsync` with a deadline (or the blocking driver's sync, which wants it
//! now) waits for the job. So a commit is never starved (it has a deadline) and never
//! starves a stream (the mixer plans it like any deadline-bearing request).
//!
//! One job runs at a time. A job starts when the interval has passed since the last
//! one started and something is dirty, or at once when asked (fsync, unmount, an
//! operation that needs the room or the freed blocks, a dirty set past a quarter of the
//! journal). A transaction carries the blocks it frees; they become allocatable only
//! when its job is done. A job whose write or flush fails marks the engine broken: its
//! waiters and every later commit fail (the device is suspect), nothing it freed is
//! reused.
//!
//! [`Class::Metadata`]: crate::sched::Class::Metadata

use super::{Engine, Now, OpId, Output, Stage};
use crate::device::AlignedBuf;
use crate::error::Error;
use crate::volume::Transaction;
use std::collections::VecDeque;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum CommitStage {
    TailLog,
    DataFlush,
    Journal,
    JournalFlush,
    Primary,
    PrimaryFlush,
    Backup,
    BackupFlush,
    Invalidate,
    InvalidateFlush,
}

impl CommitStage {
    fn bit(self) -> u16 {
        1 << self as u16
    }

    fn is_flush(self) -> bool {
        matches!(
            self,
            CommitStage::JournalFlush
                | CommitStage::PrimaryFlush
                | CommitStage::BackupFlush
                | CommitStage::InvalidateFlush
        )
    }
}

pub(super) struct CommitJob {
    stages: VecDeque<CommitStage>,
    /// The job's stages as it was made, and those completed (`CommitStage::bit`): a
    /// stage starts only when every one before it is done (`assert_may_start`).
    planned: Vec<CommitStage>,
    done: u16,
    started: bool,
    /// A deadline the whole job must meet (something blocked waits for it).
    urgent_ns: Option<u64>,
    /// The deadline of every write of the job: its start plus the interval, or what a
    /// waiter asks for.
    deadline_ns: u64,
    /// The journal write's own, sooner deadline: the start plus the gather lead. The
    /// journal flush is the commit point, what makes the bytes written before the
    /// cut durable; held until the interval's end (as the mixer holds any request
    /// until its latest safe moment) it added up to an interval to every writer's
    /// exposure to a crash. The checkpoint after it keeps the interval.
    journal_by_ns: u64,
    outstanding: u32,
    flush_wanted: bool,
    flush_in_flight: bool,
    journal: Option<(u64, AlignedBuf)>,
    primary: Vec<(u64, AlignedBuf)>,
    backup: Vec<(u64, AlignedBuf)>,
    invalidate: Option<(u64, AlignedBuf)>,
    /// The tail-log batch the transaction names inside `[tail, head)`: written in
    /// the `TailLog` stage, made durable by the data flush, before the journal
    /// write that commits it (`tail_log.rs`).
    tail_writes: Vec<(u64, AlignedBuf)>,
    tail_written: bool,
    tail_flushed: bool,
    freed: Vec<u64>,
    /// fsyncs this job completes, with their deadlines.
    waiters: Vec<(OpId, Option<u64>)>,
    /// The unmount this job completes.
    final_op: Option<OpId>,
    /// Dirty blocks were left for the next job (waiters move on to it).
    partial: bool,
    error: Option<String>,
    is_txn: bool,
}

impl CommitJob {
    fn new(stages: &[CommitStage]) -> CommitJob {
        CommitJob {
            stages: stages.iter().copied().collect(),
            planned: stages.to_vec(),
            done: 0,
            started: false,
            urgent_ns: None,
            deadline_ns: 0,
            journal_by_ns: u64::MAX,
            outstanding: 0,
            flush_wanted: false,
            flush_in_flight: false,
            journal: None,
            primary: vec![],
            backup: vec![],
            invalidate: None,
            tail_writes: vec![],
            tail_written: false,
            tail_flushed: false,
            freed: vec![],
            waiters: vec![],
            final_op: None,
            partial: false,
            error: None,
            is_txn: false,
        }
    }

    /// The checkpoint of a transaction replayed at open, then an empty journal.
    pub(super) fn replay(
        primary: Vec<(u64, AlignedBuf)>,
        backup: Vec<(u64, AlignedBuf)>,
        invalidate: (u64, AlignedBuf),
    ) -> CommitJob {
        use CommitStage::*;
        let mut j = CommitJob::new(&[
            Primary,
            PrimaryFlush,
            Backup,
            BackupFlush,
            Invalidate,
            InvalidateFlush,
        ]);
        j.primary = primary;
        j.backup = backup;
        j.invalidate = Some(invalidate);
        j
    }

    /// Asserts that `stage` may start: every stage before it in the job is complete,
    /// and what the stage writes exists (the barrier order the module docs state).
    fn assert_may_start(&self, stage: CommitStage) {
        for &s in self.planned.iter().take_while(|&&s| s != stage) {
            assert!(
                self.done & s.bit() != 0,
                "commit stage {stage:?} started before stage {s:?} completed (job stages {:?})",
                self.planned
            );
        }
        assert!(
            self.outstanding == 0 && !self.flush_wanted && !self.flush_in_flight,
            "commit stage {stage:?} started with {} writes or a flush of the previous stage out",
            self.outstanding
        );
        match stage {
            CommitStage::Journal => assert!(
                self.is_txn && self.journal.is_some(),
                "a journal write without a transaction cut for it"
            ),
            CommitStage::Primary if self.is_txn => assert!(
                self.done & CommitStage::JournalFlush.bit() != 0,
                "a checkpoint write before the journal's flush (the commit point) completed"
            ),
            CommitStage::Invalidate => assert!(
                self.invalidate.is_some(),
                "a journal invalidation stage without its write"
            ),
            _ => {}
        }
    }

    fn txn(
        t: Transaction,
        invalidate: Option<(u64, AlignedBuf)>,
        tail_writes: Vec<(u64, AlignedBuf)>,
    ) -> CommitJob {
        use CommitStage::*;
        let mut stages = vec![
            TailLog,
            DataFlush,
            Journal,
            JournalFlush,
            Primary,
            PrimaryFlush,
            Backup,
            BackupFlush,
        ];
        if invalidate.is_some() {
            stages.extend([Invalidate, InvalidateFlush]);
        }
        let mut j = CommitJob::new(&stages);
        j.journal = Some(t.journal);
        j.primary = t.primary;
        j.backup = t.backup;
        j.freed = t.freed;
        j.partial = t.partial;
        j.invalidate = invalidate;
        j.tail_writes = tail_writes;
        j.is_txn = true;
        j
    }
}

/// The pipeline's state inside the engine.
pub(super) struct CommitState {
    interval_ns: u64,
    last_start_ns: u64,
    requested: bool,
    /// The earliest deadline something blocked on the next job asked for.
    urgent_ns: Option<u64>,
    job: Option<CommitJob>,
    /// fsyncs waiting for the next job.
    next_waiters: Vec<(OpId, Option<u64>)>,
    /// An unmount waiting for the final job.
    final_waiter: Option<(OpId, Option<u64>)>,
}

impl CommitState {
    pub(super) fn new(interval_ns: u64, now_ns: u64) -> CommitState {
        CommitState {
            interval_ns: interval_ns.max(1),
            last_start_ns: now_ns,
            requested: false,
            urgent_ns: None,
            job: None,
            next_waiters: vec![],
            final_waiter: None,
        }
    }

    pub(super) fn start(&mut self, job: CommitJob, now_ns: u64) {
        assert!(self.job.is_none(), "a commit job started while one runs");
        self.job = Some(job);
        self.last_start_ns = now_ns;
    }

    pub(super) fn busy(&self) -> bool {
        self.job.is_some()
    }

    /// Start a commit as soon as possible.
    pub(super) fn want_now(&mut self) {
        self.requested = true;
    }

    /// Start a commit as soon as possible, and finish it by `deadline_ns`: an
    /// operation is blocked until it is done.
    pub(super) fn want_by(&mut self, deadline_ns: u64) {
        self.requested = true;
        self.urgent_ns = Some(self.urgent_ns.map_or(deadline_ns, |u| u.min(deadline_ns)));
    }

    /// An fsync waits: for the running job if what it must cover is already in it
    /// (`next` false), else for the next one.
    pub(super) fn add_waiter(&mut self, id: OpId, deadline: Option<u64>, next: bool) {
        match self.job.as_mut() {
            Some(j) if !next => j.waiters.push((id, deadline)),
            _ => {
                self.next_waiters.push((id, deadline));
                self.requested = true;
            }
        }
    }

    pub(super) fn add_final(&mut self, id: OpId, deadline: Option<u64>) {
        self.final_waiter = Some((id, deadline));
        self.requested = true;
    }

    pub(super) fn forget_waiter(&mut self, id: OpId) {
        self.next_waiters.retain(|(w, _)| *w != id);
        if let Some(j) = self.job.as_mut() {
            j.waiters.retain(|(w, _)| *w != id);
        }
    }

    pub(super) fn flush_wanted(&self) -> bool {
        self.job
            .as_ref()
            .is_some_and(|j| j.flush_wanted && !j.flush_in_flight)
    }

    pub(super) fn flush_issued(&mut self) {
        let j = self.job.as_mut().expect("a flush belongs to a commit job");
        assert!(
            j.flush_wanted && !j.flush_in_flight,
            "a commit flush issued that the job did not want (stage {:?})",
            j.stages.front()
        );
        j.flush_wanted = false;
        j.flush_in_flight = true;
    }

    pub(super) fn flush_done(&mut self, error: Option<String>) {
        let j = self.job.as_mut().expect("a flush belongs to a commit job");
        assert!(
            j.flush_in_flight,
            "a commit flush completed that was not in flight (stage {:?})",
            j.stages.front()
        );
        j.flush_in_flight = false;
        if let Some(e) = error {
            j.error.get_or_insert(e);
        }
    }

    pub(super) fn piece_added(&mut self) {
        self.job
            .as_mut()
            .expect("commit writes belong to a job")
            .outstanding += 1;
    }

    pub(super) fn piece_done(&mut self, error: Option<String>) {
        let j = self.job.as_mut().expect("commit writes belong to a job");
        assert!(
            j.outstanding > 0,
            "a commit write completed that stage {:?} did not have out",
            j.stages.front()
        );
        j.outstanding -= 1;
        if let Some(e) = error {
            j.error.get_or_insert(e);
        }
    }

    pub(super) fn interval_ns(&self) -> u64 {
        self.interval_ns
    }

    /// When the commit cadence makes the next commit due if something is dirty (the
    /// last start plus the interval; in the past when the volume stayed clean), and
    /// the interval.
    pub(super) fn cadence(&self) -> (u64, u64) {
        (
            self.last_start_ns.saturating_add(self.interval_ns),
            self.interval_ns,
        )
    }

    /// When the interval next makes a commit due (`dirty`: something to commit).
    pub(super) fn due_ns(&self, dirty: bool) -> Option<u64> {
        (self.job.is_none() && dirty).then(|| self.last_start_ns + self.interval_ns)
    }
}

impl Engine {
    /// Why the engine is broken (a commit write or flush failed), if it is: from then
    /// on nothing reaches the journal, and every fsync and the unmount fail. The
    /// mount daemon logs it as soon as it happens.
    pub fn broken(&self) -> Option<&str> {
        self.broken.as_deref()
    }

    /// Starts and advances commit jobs; returns whether anything changed.
    pub(super) fn commit_step(&mut self, now: Now) -> bool {
        let mut changed = false;
        loop {
            if self.commit.job.is_none() {
                if !self.start_commit(now) {
                    return changed;
                }
                changed = true;
                continue;
            }
            let interval = self.commit.interval_ns;
            let job = self.commit.job.as_mut().expect("checked above");
            if job.outstanding > 0 || job.flush_wanted || job.flush_in_flight {
                return changed;
            }
            if job.error.is_some() {
                job.stages.clear();
            }
            match job.stages.front().copied() {
                Some(stage) if !job.started => {
                    job.assert_may_start(stage);
                    job.started = true;
                    changed = true;
                    // The job's deadline, capped by any waiter that joined since; never
                    // in the past.
                    let cap = job
                        .waiters
                        .iter()
                        .filter_map(|(_, d)| *d)
                        .chain(job.urgent_ns)
                        .min();
                    let mut deadline = job.deadline_ns.min(cap.unwrap_or(u64::MAX));
                    if matches!(stage, CommitStage::Journal | CommitStage::TailLog) {
                        deadline = deadline.min(job.journal_by_ns);
                    }
                    if stage == CommitStage::Journal {
                        // The batch this transaction names is on the media first.
                        assert!(
                            job.tail_writes.is_empty() && (!job.tail_written || job.tail_flushed),
                            "a transaction would commit a tail-log batch not yet durable"
                        );
                    }
                    let deadline = deadline.max(now.mono_ns);
                    let _ = interval;
                    let job = self.commit.job.as_mut().expect("checked above");
                    if stage.is_flush() {
                        job.flush_wanted = true;
                        continue;
                    }
                    let writes: Vec<(u64, AlignedBuf)> = match stage {
                        CommitStage::DataFlush => {
                            if self.data_unflushed || job.tail_written {
                                job.flush_wanted = true;
                            }
                            continue;
                        }
                        CommitStage::TailLog => {
                            job.tail_written = !job.tail_writes.is_empty();
                            std::mem::take(&mut job.tail_writes)
                        }
                        CommitStage::Journal => job.journal.take().into_iter().collect(),
                        CommitStage::Primary => std::mem::take(&mut job.primary),
                        CommitStage::Backup => std::mem::take(&mut job.backup),
                        CommitStage::Invalidate => job.invalidate.take().into_iter().collect(),
                        _ => unreachable!("flush stages handled above"),
                    };
                    for (offset, buf) in writes {
                        self.add_commit_piece(offset, buf, deadline, now);
                    }
                }
                Some(stage) => {
                    // The started stage is complete.
                    if stage == CommitStage::DataFlush && job.tail_written {
                        job.tail_flushed = true;
                    }
                    job.stages.pop_front();
                    job.done |= stage.bit();
                    job.started = false;
                    changed = true;
                }
                None => {
                    let job = self.commit.job.take().expect("checked above");
                    self.finish_commit(job, now);
                    changed = true;
                }
            }
        }
    }

    /// Cuts and starts a job if one is due; false if nothing started.
    fn start_commit(&mut self, now: Now) -> bool {
        let c = &self.commit;
        let due = self.vol.dirty_blocks() > 0
            && now.mono_ns >= c.last_start_ns.saturating_add(c.interval_ns);
        let want = c.requested
            || !c.next_waiters.is_empty()
            || c.final_waiter.is_some()
            || due
            || (self.vol.dirty_blocks() > 0 && self.vol.wants_commit_now());
        if !want || !self.vol.is_writable() {
            if !self.vol.is_writable() {
                // A read-only volume has nothing to commit: its waiters are done.
                return self.release_waiters(now);
            }
            return false;
        }
        if let Some(b) = self.broken.clone() {
            self.commit.requested = false;
            let waiters: Vec<(OpId, Option<u64>)> = std::mem::take(&mut self.commit.next_waiters)
                .into_iter()
                .chain(self.commit.final_waiter.take())
                .collect();
            let had = !waiters.is_empty();
            for (w, _) in waiters {
                self.finish(
                    w,
                    Err(Error::io(
                        "committing",
                        std::io::Error::other(format!("the device failed earlier ({b})")),
                    )),
                    now,
                );
            }
            return had;
        }
        self.commit.requested = false;
        let waiters = std::mem::take(&mut self.commit.next_waiters);
        let final_waiter = self.commit.final_waiter.take();
        let invalidate = final_waiter.map(|_| self.vol.invalidate_journal_write());
        // Events of the state being cut, and the record of what it leaves out.
        self.before_cut(now);
        // The recordings' tails handed over since the last cut, and the log's bounds.
        let batch = self.tail_log_cut();
        let mut job = match self.vol.snapshot() {
            Some(t) => {
                self.retention_cut(t.journal.1.len() as u64);
                let partial = t.partial;
                let tail_writes = batch
                    .map(|b| self.tail_log_writes(b, t.txn))
                    .unwrap_or_default();
                let mut j = CommitJob::txn(t, if partial { None } else { invalidate }, tail_writes);
                if partial {
                    // The unmount waits for the last part.
                    self.commit.final_waiter = final_waiter;
                    self.commit.requested = true;
                } else {
                    j.final_op = final_waiter.map(|(id, _)| id);
                }
                j
            }
            None if batch.is_some() => {
                unreachable!("a tail-log batch moves the head: the superblock is dirty")
            }
            None if final_waiter.is_some() => {
                use CommitStage::*;
                let mut j = CommitJob::new(&[DataFlush, Invalidate, InvalidateFlush]);
                j.invalidate = invalidate;
                j.final_op = final_waiter.map(|(id, _)| id);
                j
            }
            None if self.data_unflushed && !waiters.is_empty() => {
                CommitJob::new(&[CommitStage::DataFlush])
            }
            None => {
                let had = !waiters.is_empty();
                for (w, _) in waiters {
                    self.finish(w, Ok(Output::Done), now);
                }
                return had;
            }
        };
        job.urgent_ns = waiters
            .iter()
            .chain(final_waiter.iter())
            .filter_map(|(_, d)| *d)
            .chain(self.commit.urgent_ns.take())
            .min();
        job.waiters = waiters;
        job.deadline_ns = now.mono_ns + self.commit.interval_ns;
        job.journal_by_ns = now.mono_ns + self.gather_lead();
        self.commit.start(job, now.mono_ns);
        true
    }

    /// Completes every waiting fsync and unmount (nothing to commit).
    fn release_waiters(&mut self, now: Now) -> bool {
        let waiters: Vec<(OpId, Option<u64>)> = std::mem::take(&mut self.commit.next_waiters)
            .into_iter()
            .chain(self.commit.final_waiter.take())
            .collect();
        self.commit.requested = false;
        let had = !waiters.is_empty();
        for (w, _) in waiters {
            self.finish(w, Ok(Output::Done), now);
        }
        had
    }

    fn finish_commit(&mut self, job: CommitJob, now: Now) {
        assert!(
            job.error.is_some() || job.planned.iter().all(|s| job.done & s.bit() != 0),
            "a commit job finished with stages not done: {:?} of {:?}",
            job.stages,
            job.planned
        );
        assert!(
            job.outstanding == 0 && !job.flush_in_flight,
            "a commit job finished with {} writes or a flush still out",
            job.outstanding
        );
        let waiters: Vec<OpId> = job
            .waiters
            .iter()
            .map(|(w, _)| *w)
            .chain(job.final_op)
            .collect();
        if let Some(e) = job.error {
            self.broken
                .get_or_insert_with(|| format!("a commit failed: {e}"));
            for w in waiters {
                self.finish(
                    w,
                    Err(Error::io("committing", std::io::Error::other(e.clone()))),
                    now,
                );
            }
            return;
        }
        if job.is_txn {
            self.qos.commits += 1;
        }
        self.vol.commit_done(job.freed);
        if job.partial {
            // What the waiters need is not all durable yet: on to the next job.
            self.commit.next_waiters.extend(job.waiters);
            self.commit.requested = true;
            if let Some(f) = job.final_op {
                self.commit.final_waiter = Some((f, Some(now.mono_ns)));
            }
            return;
        }
        for w in waiters {
            self.finish(w, Ok(Output::Done), now);
        }
    }

    pub(super) fn start_fsync(&mut self, id: OpId, now: Now) -> bool {
        if let Some(b) = &self.broken {
            let msg = b.clone();
            self.finish(
                id,
                Err(Error::io("committing", std::io::Error::other(msg))),
                now,
            );
            return true;
        }
        if self.vol.dirty_blocks() == 0 && !self.data_unflushed && !self.commit.busy() {
            self.finish(id, Ok(Output::Done), now);
            return true;
        }
        let deadline = self.ops[&id].deadline_ns;
        self.ops
            .get_mut(&id)
            .expect("op exists")
            .advance(id, Stage::Running);
        // Changes already cut into a running commit are covered by it; anything dirty
        // needs the next one.
        let next = self.vol.dirty_blocks() > 0 || self.data_unflushed || !self.commit.busy();
        self.commit.add_waiter(id, deadline, next);
        true
    }

    pub(super) fn start_unmount(&mut self, id: OpId, now: Now) -> bool {
        // Everything else finishes first, streams included: a stream's end may still
        // free the orphan it held last (`stream/hold.rs`), for the final commit.
        if self.ops.len() > 1 || !self.streams.is_empty() {
            return false;
        }
        self.ops
            .get_mut(&id)
            .expect("op exists")
            .advance(id, Stage::Running);
        let deadline = Some(now.mono_ns);
        self.commit.add_final(id, deadline);
        true
    }
}
