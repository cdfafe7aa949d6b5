//! Admission that counts reclaimable space (issue 26, rule 1: an admitted recording
//! never stops for space; docs/retention.md, "Recordings on a full volume").
//!
//! A recording that states its size (`size=`, or `duration=` times its rate) has that
//! space held at admission (`Volume::hold_space`), so a full disk is reported at open
//! and never after a byte was accepted. On a volume with a retention policy, space
//! retention may delete counts too: a recording is admitted when the space free
//! (not held, counting blocks freed by operations not yet committed) and the space
//! **reclaimable** (the data blocks of streams' chunks that are neither open nor
//! protected, whatever their min-age) cover its size and everything still
//! **promised** to recordings admitted before it. It is refused at open otherwise
//! ([`Error::SpaceNotKept`], `ENOSPC`), saying the three figures.
//!
//! What is free is held for it at once; the rest is **owed** to its stream. From
//! then on:
//!
//! - the planner is asked to free what is owed (`PlanInput::need_free_bytes`): the
//!   oldest chunks go, whatever the high mark and the min-age (the latter reported);
//! - at every poll, space that became free (a deletion reached a transaction) is
//!   held for the owed streams, the earliest admitted first, before any other write
//!   can take it;
//! - a recording's write that finds no space while it is owed some waits for
//!   retention (its bytes are not refused; a stall is counted) instead of failing.
//!
//! A debt ends when it is paid or when the stream ends (a recording that stops
//! early no longer needs it). What the plan cannot free (every chunk left is held by
//! a writer or protected: one opened for writing after the admission) stays owed and
//! is the plan's shortfall; the recording still has the space it was given, and
//! retention keeps trying every [`super::retention::CHECK_BUSY_NS`].

use super::{Engine, Error, Ino, Result, StreamId};
use crate::retention::Snapshot;

impl Engine {
    /// Holds `bytes` for a recording about to be admitted on `ino`: all of it, from
    /// free space; or on a volume with a retention policy what is free, the rest to
    /// be owed (returned: the caller records it with [`Engine::owe_space`] once the
    /// stream exists). Nothing is held on an error.
    pub(super) fn hold_or_reclaim(&mut self, ino: Ino, bytes: u64) -> Result<u64> {
        let err = match self.vol.hold_space(ino, bytes) {
            Ok(()) => return Ok(0),
            Err(e @ Error::NoSpace { .. }) => e,
            Err(e) => return Err(e),
        };
        if !self.retention_active() {
            return Err(err);
        }
        let bs = self.vol.superblock().data_block_bytes;
        let want = bytes.next_multiple_of(bs);
        let free = self.vol.available_bytes();
        let (reclaimable, promised) = (self.reclaimable_bytes(), self.owed_bytes());
        if free + reclaimable < want + promised {
            return Err(Error::SpaceNotKept(format!(
                "a recording of {want} bytes; {free} bytes are free and retention can reclaim {reclaimable} more (chunks of streams not open or protected), of which {promised} are promised to recordings already admitted: close one, unprotect or delete old chunks, or ask for a shorter duration"
            )));
        }
        self.vol
            .hold_space(ino, free)
            .expect("what is available can be held");
        Ok(want - free)
    }

    /// Records that stream `sid` is owed `bytes` of space (see the module docs); a
    /// plan is due at once.
    pub(super) fn owe_space(&mut self, sid: StreamId, bytes: u64) {
        if bytes == 0 {
            return;
        }
        let r = &mut self.retention;
        let before = r.owed.insert(sid, bytes);
        assert!(before.is_none(), "stream {sid} was owed space twice");
        r.next_check_ns = 0;
        let owed = self.owed_bytes();
        let f = &mut self.retention.figures;
        f.owed_recordings += 1;
        f.owed_max_bytes = f.owed_max_bytes.max(owed);
    }

    /// Stream `sid` ended: what it was still owed is forgotten.
    pub(super) fn forget_owed(&mut self, sid: StreamId) {
        self.retention.owed.remove(&sid);
    }

    /// Whether stream `sid` is still owed space (its writes wait for it rather than
    /// fail).
    pub(in crate::engine) fn is_owed(&self, sid: StreamId) -> bool {
        self.retention.owed.contains_key(&sid)
    }

    /// The space a new recording can be given: free (not held), and on a volume
    /// with a retention policy what retention can reclaim less what is already
    /// promised.
    pub(super) fn space_for_recordings(&self) -> u64 {
        let free = self.vol.available_bytes();
        if !self.retention_active() {
            return free;
        }
        (free + self.reclaimable_bytes()).saturating_sub(self.owed_bytes())
    }

    /// The space owed to admitted recordings, in bytes.
    pub(super) fn owed_bytes(&self) -> u64 {
        self.retention.owed.values().sum()
    }

    /// What retention could delete now: the data blocks of chunks of streams that
    /// are neither protected nor open, except by playbacks (whose pins yield, rule
    /// 6; rule 1 goes past min-age and the marks), the one retention is deleting
    /// included (its unlink is its only operation), and the chunks expired whose
    /// playbacks have not let go yet.
    fn reclaimable_bytes(&self) -> u64 {
        let mut busy = self.busy_files();
        if let Some(ino) = self.retention_deleting() {
            busy.remove(&ino);
        }
        let mut snapshot = Snapshot::of(&self.vol, &busy, self.retention.wall_ns);
        snapshot.pins_yield(&self.reader_pins());
        let chunks: u64 = snapshot
            .streams
            .iter()
            .flat_map(|s| &s.chunks)
            .filter(|c| (!c.busy || c.yields) && !c.protected)
            .map(|c| c.bytes)
            .sum();
        chunks + self.expiring_bytes()
    }

    /// The data blocks of chunks deleted from under their readers (rule 6) that
    /// are not free yet: they are once the orphan is cut to zero bytes, or its
    /// readers close (`expire.rs`).
    pub(super) fn expiring_bytes(&self) -> u64 {
        let bs = self.vol.superblock().data_block_bytes;
        self.retention
            .expiring
            .keys()
            .filter_map(|&(ino, g)| self.vol.stat(ino).ok().filter(|st| st.generation == g))
            .map(|st| st.blocks * bs)
            .sum()
    }

    /// Holds what became free for the owed streams, the earliest admitted first.
    /// Returns whether anything was held (the streams' waiting writes may go on).
    pub(super) fn pay_owed(&mut self) -> bool {
        if self.retention.owed.is_empty() {
            return false;
        }
        let bs = self.vol.superblock().data_block_bytes;
        let mut paid = false;
        let owed: Vec<(StreamId, u64)> =
            self.retention.owed.iter().map(|(&s, &b)| (s, b)).collect();
        for (sid, bytes) in owed {
            let free = self.vol.available_bytes() / bs * bs;
            if free == 0 {
                break;
            }
            let Some(s) = self.streams.get(&sid) else {
                self.retention.owed.remove(&sid);
                continue;
            };
            let take = free.min(bytes);
            self.vol
                .hold_space(s.info().ino, take)
                .expect("what is available can be held");
            paid = true;
            if take == bytes {
                self.retention.owed.remove(&sid);
            } else {
                self.retention.owed.insert(sid, bytes - take);
            }
        }
        paid
    }

    /// Whether a plan is due now for what is owed: something is owed beyond what is
    /// free, nothing is queued or being deleted, and the last plan could free what
    /// was asked (a shortfall waits for the next check,
    /// [`super::retention::CHECK_BUSY_NS`] later).
    pub(super) fn owed_plan_due(&self) -> bool {
        let owed = self.owed_bytes();
        owed > 0
            && self.retention_idle()
            && self.retention.figures.owed_shortfall_bytes == 0
            && self.vol.available_bytes() + self.expiring_bytes() < owed
    }
}
