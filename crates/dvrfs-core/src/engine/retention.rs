//! Retention run by the engine (issue 26; docs/retention.md): the planner's
//! deletions (`crate::retention`) as best-effort work of the engine's own.
//!
//! **When.** On a writable volume that has a policy (`Volume::retention_active`),
//! every [`CHECK_NS`] (so `max-age` acts within a minute), at once after a
//! policy is set or a file is created in a stream a policy governs (a recorder's
//! next chunk: a stream's max-size holds within the chunk being written), and at the first poll that finds the volume's use (data blocks
//! in use and held) above its high mark with nothing queued, the engine takes a
//! snapshot of its streams, with the files it has open (streams, operations in
//! flight) marked busy, and plans; while a plan's deletions are being run, and
//! while the volume is above its high mark, every [`CHECK_BUSY_NS`].
//!
//! **How.** One chunk at a time, at most one every [`DELETE_GAP_NS`] and at most
//! [`MAX_PER_COMMIT`] in one transaction, as an
//! unlink of the engine's own ([`RETENTION_OWNER`], no deadline): it touches metadata only (the file's blocks
//! go back to the free maps, its name and inode go), it waits for the chunk's own
//! operations like any unlink, and it takes its room in the transaction being
//! built like any namespace operation (`Engine::room_for`: a transaction never
//! outgrows the journal; a full one is cut first). A chunk is checked again just
//! before it goes: still the file the plan named under that name, and not busy
//! now; otherwise it is skipped. Each deletion is logged as a `chunk_deleted`
//! event with the chunk's path, size, UTC range and cause.
//!
//! **The chain.** A chunk deleted from a directory that keeps an integrity chain
//! (`.chain`, `crate::chain`) gets its `deleted` line there, `by` retention and
//! its cause, appended by an `Op::Append` of the engine's own (so it never
//! overwrites a line a recorder appends meanwhile), so that `verify` shows it
//! deleted rather than missing. The unlink and the line are two operations: a crash
//! between them (they usually share a commit) leaves the chunk gone without its
//! line, and the `chunk_deleted` event is then the record.
//!
//! **Space owed.** A recording admitted on space retention can reclaim
//! (`reclaim.rs`) is owed what was not free: each plan is asked to free what is
//! owed, and every poll holds what became free for it.
//!
//! Not yet: protected clips.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use super::{Engine, IoBuf, Now, Op, OpId, Output, StreamId};
use crate::chain::{Record, CHAIN_NAME};
use crate::error::Result;
use crate::format::events::What;
use crate::meta::Ino;
use crate::retention::{plan, utc_rfc3339, Deletion, PlanInput, Snapshot};

/// Owner id of retention's unlinks (their completions go to retention, not to a
/// driver).
pub(super) const RETENTION_OWNER: u32 = 0x7FFF_FFFB;
/// Between two plans while nothing is being deleted.
pub const CHECK_NS: u64 = 10_000_000_000;
/// Between two plans while deleting, or above the high mark.
pub const CHECK_BUSY_NS: u64 = 1_000_000_000;
/// Between two deletions: at most 20 chunks a second (72,000 an hour, a year of
/// one-minute chunks of 8 streams in 58 minutes), so that a commit carries at most
/// a commit interval's worth of them.
pub const DELETE_GAP_NS: u64 = 50_000_000;
/// The most deletions one transaction carries: a commit interval's worth at the
/// default interval (1 s / 50 ms). With a longer interval deletion slows to this
/// many per commit rather than making commits larger.
pub const MAX_PER_COMMIT: u64 = 20;

/// What retention has done and is doing.
#[derive(Debug, Default)]
pub(super) struct RetentionRun {
    /// The next plan is due at this monotonic time.
    pub(super) next_check_ns: u64,
    /// Space owed to admitted recordings, bytes by stream (`reclaim.rs`).
    pub(super) owed: BTreeMap<StreamId, u64>,
    /// Chunks deleted from under their readers (rule 6, `expire.rs`) and not
    /// freed yet, by inode number and generation (a number freed may be a new
    /// file's at once), with what their readers are told: forgotten once freed.
    pub(super) expiring: BTreeMap<(Ino, u32), String>,
    /// The cuts to zero bytes of expired chunks left open by their readers.
    emptying: BTreeSet<OpId>,
    /// Deletions planned and not yet submitted, oldest first.
    queue: VecDeque<(Deletion, i64, i64)>,
    /// The unlink in flight: its operation, the chunk, its path and UTC range.
    in_flight: Option<(OpId, Deletion, String, (i64, i64))>,
    /// Chain lines being appended.
    appending: BTreeSet<OpId>,
    /// The next deletion is submitted no sooner than this monotonic time.
    next_delete_ns: u64,
    /// Whether the volume has a policy (`Volume::retention_active`, a walk of its
    /// directories), kept until a policy is set or cleared: the engine's loop asks
    /// at every wakeup.
    active: std::cell::Cell<Option<bool>>,
    /// Deletions applied since the last transaction was cut.
    in_txn: u64,
    /// The next sample of the volume's use, the last one's time, and whether it
    /// found the volume above high with nothing left to delete.
    next_sample_ns: u64,
    last_sample_ns: u64,
    short: bool,
    /// The wall clock at the last step: what a protection's expiry is compared
    /// with between plans (admission's reclaimable space).
    pub(super) wall_ns: i64,
    pub(super) figures: RetentionFigures,
}

/// Retention's figures since the engine started (`Engine::retention_figures`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RetentionFigures {
    pub deleted_chunks: u64,
    pub deleted_bytes: u64,
    /// Plans made.
    pub plans: u64,
    /// The last plan: bytes still over the high mark once all it could delete had
    /// gone, and the streams whose chunks younger than their min-age went.
    pub over_high_bytes: u64,
    pub min_age_unmet: Vec<Ino>,
    /// Chunks skipped at their turn (renamed, replaced, reopened since the plan).
    pub skipped: u64,
    /// `deleted` lines appended to streams' chains, and appends that failed.
    pub chain_lines: u64,
    pub chain_errors: u64,
    /// Transactions that carried deletions, the most deletions one carried, and the
    /// largest such transaction's journal write in bytes (all it carried, the
    /// recordings' metadata with the deletions).
    pub commits: u64,
    pub commit_max_chunks: u64,
    pub commit_max_journal_bytes: u64,
    /// The most of the data region in use at once (blocks in use and held for
    /// recordings, as the planner counts them), sampled every [`USAGE_SAMPLE_NS`]
    /// on a writable volume, with or without a policy: between two samples use
    /// grows only by what was written meanwhile.
    pub usage_max_bytes: u64,
    /// Time spent above the high mark with the last plan unable to get under it
    /// (protected, open or no chunks left to delete).
    pub shortfall_ns: u64,
    /// Of the space owed to recordings at the last plan, what it could not free.
    pub owed_shortfall_bytes: u64,
    /// Recordings admitted on space retention was to reclaim (owed some), and the
    /// most owed at once, in bytes.
    pub owed_recordings: u64,
    pub owed_max_bytes: u64,
    /// Chunks deleted from under playbacks for a recording's need (rule 6): each
    /// playback holding one was told "range expired".
    pub expired_chunks: u64,
}

/// Between two samples of the volume's use.
pub const USAGE_SAMPLE_NS: u64 = 10_000_000;

impl Engine {
    /// Runs retention's part of the engine's loop (see the module docs).
    pub(super) fn retention_step(&mut self, now: Now) {
        if !self.vol.is_writable() || self.closing {
            return;
        }
        self.retention.wall_ns = now.wall_ns;
        if !self.retention.expiring.is_empty() {
            let vol = &self.vol;
            let alive = |&(ino, g): &(Ino, u32), _: &mut String| {
                vol.stat(ino).is_ok_and(|st| st.generation == g)
            };
            self.retention.expiring.retain(alive);
        }
        if now.mono_ns >= self.retention.next_sample_ns {
            self.sample_usage(now.mono_ns);
        }
        self.pay_owed();
        if self.retention.in_flight.is_none() && now.mono_ns >= self.retention.next_delete_ns {
            self.retention_next(now);
        }
        if now.mono_ns < self.retention.next_check_ns
            && !self.above_high_idle()
            && !self.owed_plan_due()
        {
            return;
        }
        let busy_work = self.retention.in_flight.is_some() || !self.retention.queue.is_empty();
        if busy_work || !self.retention_active() {
            let wait = if busy_work { CHECK_BUSY_NS } else { CHECK_NS };
            self.retention.next_check_ns = now.mono_ns + wait;
            return;
        }
        let busy = self.busy_files();
        let mut snapshot = Snapshot::of(&self.vol, &busy, now.wall_ns);
        let owed = self.owed_bytes();
        if owed > 0 {
            snapshot.pins_yield(&self.reader_pins());
        }
        let p = plan(PlanInput {
            snapshot: &snapshot,
            volume: self.vol.volume_retention(),
            now_utc_ns: now.wall_ns,
            need_free_bytes: owed.saturating_sub(self.expiring_bytes()),
        });
        let range = |d: &Deletion| {
            snapshot
                .streams
                .iter()
                .flat_map(|s| &s.chunks)
                .find(|c| c.ino == d.ino)
                .map_or((0, 0), |c| (c.start_utc_ns, c.end_utc_ns))
        };
        self.retention.queue = p
            .deletions
            .iter()
            .map(|d| {
                let (a, b) = range(d);
                (d.clone(), a, b)
            })
            .collect();
        let f = &mut self.retention.figures;
        f.plans += 1;
        f.over_high_bytes = p.over_high_bytes;
        f.min_age_unmet = p.min_age_unmet;
        f.owed_shortfall_bytes = p.shortfall_bytes;
        let wait = if self.retention.queue.is_empty()
            && p.over_high_bytes == 0
            && p.shortfall_bytes == 0
        {
            CHECK_NS
        } else {
            CHECK_BUSY_NS
        };
        self.retention.next_check_ns = now.mono_ns + wait;
        if let Some(at) = p.next_max_age_utc_ns {
            // The wall clock's distance, on the monotonic clock.
            let due = now.mono_ns + u64::try_from(at - now.wall_ns).unwrap_or(0);
            let r = &mut self.retention;
            r.next_check_ns = r.next_check_ns.min(due);
        }
        if now.mono_ns >= self.retention.next_delete_ns {
            self.retention_next(now);
        }
    }

    /// Nothing is queued or in flight, the last plan left nothing over the high
    /// mark, and the volume's use is above it: a plan is due now, not at the next
    /// check (use stays within a commit's worth of the mark).
    fn above_high_idle(&self) -> bool {
        let r = &self.retention;
        let high = u64::from(self.vol.superblock().retention.high_permille);
        if high == 0 || r.in_flight.is_some() || !r.queue.is_empty() {
            return false;
        }
        if r.figures.over_high_bytes > 0 {
            return false; // nothing more could go: the next check tries again
        }
        let (in_use, data) = self.usage();
        u128::from(in_use) * 1000 > u128::from(data) * u128::from(high)
    }

    /// The chunk whose unlink retention has in flight.
    pub(super) fn retention_deleting(&self) -> Option<Ino> {
        self.retention.in_flight.as_ref().map(|(_, d, ..)| d.ino)
    }

    /// Nothing is queued or being deleted.
    pub(super) fn retention_idle(&self) -> bool {
        self.retention.in_flight.is_none() && self.retention.queue.is_empty()
    }

    /// The volume's use now (data blocks in use and held), in bytes, and the data
    /// region.
    fn usage(&self) -> (u64, u64) {
        let sb = self.vol.superblock();
        (
            self.vol.used_data_bytes() + self.vol.held_bytes(),
            sb.data_blocks * sb.data_block_bytes,
        )
    }

    /// Samples the volume's use (see `RetentionFigures::usage_max_bytes`).
    fn sample_usage(&mut self, now_ns: u64) {
        let (in_use, data) = self.usage();
        let high = u128::from(self.vol.superblock().retention.high_permille);
        let r = &mut self.retention;
        r.next_sample_ns = now_ns + USAGE_SAMPLE_NS;
        let f = &mut r.figures;
        f.usage_max_bytes = f.usage_max_bytes.max(in_use);
        if r.short {
            f.shortfall_ns += now_ns.saturating_sub(r.last_sample_ns);
        }
        r.short = high > 0
            && u128::from(in_use) * 1000 > u128::from(data) * high
            && f.over_high_bytes > 0;
        r.last_sample_ns = now_ns;
    }

    /// A transaction was cut with `journal_bytes` in its journal write: the
    /// deletions applied since the last cut go to disk in it.
    pub(super) fn retention_cut(&mut self, journal_bytes: u64) {
        let n = std::mem::take(&mut self.retention.in_txn);
        if n == 0 {
            return;
        }
        let f = &mut self.retention.figures;
        f.commits += 1;
        f.commit_max_chunks = f.commit_max_chunks.max(n);
        f.commit_max_journal_bytes = f.commit_max_journal_bytes.max(journal_bytes);
    }

    /// A file was created in (or renamed into) directory `dir`: in a stream a
    /// policy governs, a recorder has started its next chunk, and a plan is due at
    /// once, so that a stream's max-size holds within the chunk being written.
    pub(super) fn retention_file_added(&mut self, dir: Ino) {
        if self.vol.effective_retention(dir).is_some() {
            self.retention.next_check_ns = 0;
        }
    }

    /// A policy was set or cleared: the next plan is due at once.
    pub(super) fn retention_policy_changed(&mut self) {
        self.retention.next_check_ns = 0;
        self.retention.active.set(None);
    }

    /// Whether the volume has a policy (kept between policy changes; a directory
    /// with one removed leaves it true until the next change: a plan then finds
    /// nothing, at no more than one walk every 10 s).
    pub(super) fn retention_active(&self) -> bool {
        let a = &self.retention.active;
        a.get().unwrap_or_else(|| {
            let on = self.vol.retention_active();
            a.set(Some(on));
            on
        })
    }

    /// The files the engine has open: its streams' and those with operations.
    pub(super) fn busy_files(&self) -> BTreeSet<Ino> {
        let mut busy: BTreeSet<Ino> = self.streams().map(|(i, _)| i.ino).collect();
        busy.extend(
            self.files
                .keys()
                .copied()
                .filter(|&ino| !self.file_idle(ino)),
        );
        busy
    }

    /// Submits the next planned deletion that still stands.
    fn retention_next(&mut self, now: Now) {
        if self.retention.queue.is_empty() {
            return; // the usual case, at every poll: nothing to look at
        }
        if self.retention.in_txn >= MAX_PER_COMMIT {
            // This transaction is full of deletions: the next waits for the cut.
            self.retention.next_delete_ns = now.mono_ns + DELETE_GAP_NS;
            return;
        }
        let busy = self.busy_files();
        while let Some((d, start, end)) = self.retention.queue.pop_front() {
            let same = self.vol.lookup(d.dir, &d.name).ok() == Some(d.ino);
            let held = busy.contains(&d.ino) || self.vol.open_count(d.ino) > 0;
            // A pin yields (rule 6) only to what is owed, and only a playback's.
            let yields = d.expire && self.owed_bytes() > 0 && self.reader_pins().contains(&d.ino);
            if !same || (held && !yields) {
                self.retention.figures.skipped += 1;
                continue;
            }
            let path = self.vol.path_of(d.ino).unwrap_or_default();
            if held {
                let why = format!(
                    "{path} was deleted while it was read: retention needed its space for a recording admitted on it (a reader's pin yields to a recording); read from a later time, or protect a range before reading it at leisure"
                );
                self.expire_readers(d.ino, &why, now);
                self.retention.figures.expired_chunks += 1;
            }
            let op = Op::Unlink {
                parent: d.dir,
                name: d.name.clone(),
            };
            let id = self.submit_own(op, None, RETENTION_OWNER, None, now);
            self.retention.in_flight = Some((id, d, path, (start, end)));
            self.retention.next_delete_ns = now.mono_ns + DELETE_GAP_NS;
            return;
        }
    }

    /// Retention's unlink finished.
    pub(super) fn retention_done(&mut self, id: OpId, result: Result<Output>, now: Now) {
        if self.retention.emptying.remove(&id) {
            // An expired orphan's cut failed (the device under the journal): its
            // blocks stay its readers' until they close.
            return;
        }
        if self.retention.appending.remove(&id) {
            let f = &mut self.retention.figures;
            match result {
                Ok(_) => f.chain_lines += 1,
                Err(_) => f.chain_errors += 1,
            }
            return;
        }
        let Some((op, d, path, (start, end))) = self.retention.in_flight.take() else {
            return;
        };
        debug_assert_eq!(op, id, "one retention unlink at a time");
        match result {
            Ok(_) => {
                let f = &mut self.retention.figures;
                f.deleted_chunks += 1;
                f.deleted_bytes += d.bytes;
                self.retention.in_txn += 1;
                let what = What::ChunkDeleted {
                    ino: d.ino,
                    cause: d.cause,
                    bytes: d.bytes,
                    start_utc_ns: start,
                    end_utc_ns: end,
                };
                self.vol
                    .push_event_at_path(now.mono_ns, now.wall_ns, what, path.as_bytes());
                self.record_in_chain(&d, now);
                self.empty_expired(d.ino, now);
            }
            Err(_) => self.retention.figures.skipped += 1,
        }
    }

    /// An expired chunk whose readers still hold it (an orphan now) is cut to zero
    /// bytes: its blocks are the recording's at once (`expire.rs`).
    fn empty_expired(&mut self, ino: Ino, now: Now) {
        let Ok(st) = self.vol.stat(ino) else {
            return; // freed with its name: nobody held it any more
        };
        if !self.vol.is_orphan(ino)
            || !self.retention.expiring.contains_key(&(ino, st.generation))
            || st.size_bytes == 0
        {
            return;
        }
        let op = Op::Truncate { ino, size_bytes: 0 };
        let id = self.submit_own(op, None, RETENTION_OWNER, None, now);
        self.retention.emptying.insert(id);
    }

    /// Appends the `deleted` line of chunk `d` to its directory's chain, if it keeps
    /// one (see the module docs).
    fn record_in_chain(&mut self, d: &Deletion, now: Now) {
        let Ok(chain) = self.vol.lookup(d.dir, CHAIN_NAME.as_bytes()) else {
            return;
        };
        let Ok(name) = std::str::from_utf8(&d.name) else {
            return;
        };
        let line = Record::Deleted {
            name: name.to_string(),
            at: utc_rfc3339(now.wall_ns),
            by: format!("dvrfs retention ({})", d.cause.name()),
        }
        .line();
        let op = Op::Append {
            ino: chain,
            data: IoBuf::from_slice(line.as_bytes()),
        };
        let id = self.submit_own(op, None, RETENTION_OWNER, None, now);
        self.retention.appending.insert(id);
    }

    /// What retention has done since the engine started.
    pub fn retention_figures(&self) -> &RetentionFigures {
        &self.retention.figures
    }

    /// When retention wants the engine's loop next, if the volume has a policy.
    pub(super) fn retention_wakeup(&self) -> Option<u64> {
        if !self.vol.is_writable() || self.closing {
            return None;
        }
        let r = &self.retention;
        if !r.queue.is_empty() && r.in_flight.is_none() {
            return Some(r.next_delete_ns);
        }
        self.retention_active().then_some(r.next_check_ns)
    }
}
