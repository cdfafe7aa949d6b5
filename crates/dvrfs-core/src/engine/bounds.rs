//! Bounds that cannot break a commit: how the scheduler's queue bound is shared
//! between operations and the commit pipeline, and how requests reach the scheduler.
//!
//! The scheduler holds at most [`SchedSettings::max_queued`] requests queued (not yet
//! dispatched). A commit job sends its requests one stage at a time (`commit.rs`), and
//! no stage holds more than [`commit_reserve`] requests: the largest transaction's
//! checkpoint (one write per block at most, coalesced), the superblock's copy at the
//! end of the device, the tail log's batch (two writes at most, where it wraps), the
//! journal write or its invalidation. So operations may fill the queue only up to the
//! bound less that reserve ([`Engine::op_queue_limit`]), and a commit request always
//! finds room: a full queue never fails a commit, an fsync or the unmount (a refused
//! commit write would mark the engine broken, `commit.rs`). [`Engine::new`] refuses a
//! bound that leaves operations no room.
//!
//! Operations are admitted against the room left for them:
//! - [`Engine::submit`] refuses a read, write or truncate with [`Error::Busy`]
//!   (`EAGAIN`) while the operations' share of the queue is full. Namespace
//!   operations, fsync and unmount send no data requests and are always admitted.
//! - An admitted operation that finds no room when it is about to start (others took
//!   it meanwhile) waits, deferred, until dispatches free some.
//! - One that plans more requests than the room left when it starts fails with
//!   [`Error::Busy`] (its requests already queued complete first, as for any failed
//!   request; a failed write fails the file's later writes, as any failed write). With
//!   the default bound ([`crate::sched::DEFAULT_MAX_QUEUED`], a million requests) the
//!   operation bound ([`crate::engine::DEFAULT_MAX_OPS`]) is reached long before.
//!
//! Where no bound is reached nothing here changes a decision: the checks only refuse.

use super::device::{Piece, PieceBuf, Then};
use super::{Body, Engine, IoBuf, Now, Op, OpId, JOURNAL_OWNER};
use crate::error::{Error, Result};
use crate::sched::{Class, QueueError, Request, SchedSettings};
use crate::volume::Volume;

/// Requests the commit pipeline may have queued at once on `vol` (see the module
/// docs): kept out of the operations' share of the scheduler's queue.
pub fn commit_reserve(vol: &Volume) -> u64 {
    // Checkpoint: at most one write per image, plus the superblock's last copy
    // (backup stage); the tail log: two; journal, invalidation: one.
    vol.max_transaction_images() as u64 + 2
}

/// Checks that `settings` leave operations room in the queue on `vol`.
pub(super) fn check_queue_bound(vol: &Volume, settings: &SchedSettings) -> Result<()> {
    let reserve = commit_reserve(vol);
    if settings.max_queued as u64 <= reserve {
        return Err(Error::InvalidArgument(format!(
            "a queue bound of {} requests leaves operations no room: the commit pipeline \
             keeps {reserve} for itself on this volume (its largest transaction); use more",
            settings.max_queued
        )));
    }
    Ok(())
}

impl Engine {
    /// Requests operations may have queued in the scheduler at once: its bound less
    /// the commit pipeline's reserve ([`commit_reserve`]).
    pub fn op_queue_limit(&self) -> u64 {
        let limit = self.sched.settings().max_queued as u64;
        let reserve = commit_reserve(&self.vol);
        assert!(
            limit > reserve,
            "Engine::new accepted a queue bound without room"
        );
        limit - reserve
    }

    /// Whether operations' requests fill their share of the queue.
    pub(super) fn op_queue_full(&self) -> bool {
        self.sched.queued() >= self.op_queue_limit()
    }

    fn busy(&self) -> Error {
        Error::Busy(format!(
            "the disk queue holds {} requests, the most operations may queue ({} more are \
             kept for commits)",
            self.sched.queued(),
            commit_reserve(&self.vol)
        ))
    }

    /// Admission at [`Engine::submit`]: data operations need room in the queue.
    pub(super) fn admit_op(&self, op: &Op) -> Result<()> {
        self.refuse_expired(op)?;
        let data = matches!(
            op,
            Op::Read { .. } | Op::Write { .. } | Op::Append { .. } | Op::Truncate { .. }
        );
        if data && self.op_queue_full() {
            return Err(self.busy());
        }
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn add_op_piece(
        &mut self,
        id: OpId,
        offset_bytes: u64,
        len_bytes: u64,
        write: bool,
        buf: PieceBuf,
        then: Then,
        now: Now,
    ) {
        let room = !self.op_queue_full();
        let busy = (!room).then(|| self.busy());
        let st = self.ops.get_mut(&id).expect("op exists");
        if let Some(e) = busy {
            st.error.get_or_insert(e);
            return;
        }
        st.pieces_left += 1;
        let class = st.class();
        let deadline = st.deadline_ns;
        let owner = st.owner;
        // A stream's prefetch is wanted even late (the playback shows it late).
        let drop_if_late = !write
            && matches!(st.body, Body::Read { .. })
            && deadline.is_some()
            && st.stream.is_none();
        let piece = Piece {
            op: Some(id),
            offset_bytes,
            len_bytes,
            write,
            buf,
            then,
        };
        if let Err(e) = self.insert_piece(piece, class, deadline, owner, drop_if_late, now) {
            let st = self.ops.get_mut(&id).expect("op exists");
            st.piece_back(id);
            st.error.get_or_insert(e);
        }
    }

    fn insert_piece(
        &mut self,
        piece: Piece,
        class: Class,
        deadline_ns: Option<u64>,
        owner: u32,
        drop_if_late: bool,
        now: Now,
    ) -> Result<()> {
        let id = self.next_req;
        self.next_req += 1;
        let req = Request {
            id,
            lba: piece.offset_bytes / self.sector_bytes,
            sectors: u32::try_from(piece.len_bytes / self.sector_bytes).map_err(|_| {
                Error::InvalidArgument(format!(
                    "a device access of {} bytes is too large",
                    piece.len_bytes
                ))
            })?,
            write: piece.write,
            class,
            deadline_ns,
            owner,
            submit_ns: now.mono_ns,
            drop_if_late,
        };
        self.sched.insert(req, now.mono_ns).map_err(|e| match e {
            QueueError::Full { .. } => self.busy(),
            e => Error::InvalidArgument(e.to_string()),
        })?;
        self.pieces.insert(id, piece);
        Ok(())
    }

    /// A commit write (journal, checkpoint) with the stage's deadline.
    pub(super) fn add_commit_piece(
        &mut self,
        offset: u64,
        buf: crate::device::AlignedBuf,
        deadline_ns: u64,
        now: Now,
    ) {
        // The reserve holds every stage: a full queue never refuses a commit write.
        assert!(
            self.sched.queued() < self.sched.settings().max_queued as u64,
            "a commit write found the queue full: the reserve of {} requests is too small",
            commit_reserve(&self.vol)
        );
        let len = buf.len() as u64;
        let (class, deadline) = match self.metadata_class {
            Class::BestEffort => (Class::BestEffort, None),
            c => (c, Some(deadline_ns)),
        };
        let piece = Piece {
            op: None,
            offset_bytes: offset,
            len_bytes: len,
            write: true,
            buf: PieceBuf::Own(IoBuf::Mem(buf)),
            then: Then::Nothing,
        };
        self.commit.piece_added();
        if let Err(e) = self.insert_piece(piece, class, deadline, JOURNAL_OWNER, false, now) {
            self.commit.piece_done(Some(e.to_string()));
        }
    }
}
