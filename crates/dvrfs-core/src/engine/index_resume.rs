//! Picking a file's index up again (`engine/indexing.rs`): an append to a file whose
//! index the engine is not following, because it was written before this open (a
//! writer that opens it again to go on, a recording a crash cut whose tail-log
//! bytes the open replays), resumes indexing it instead of leaving the index behind.
//!
//! **How.** The index's last keyframe says where to go on from: the engine reads the
//! file's head (its tables or init segment, at most [`HEAD_BYTES`]) and then its
//! bytes from that keyframe on, up to its applied size, as best-effort reads of its
//! own ([`INDEX_RESUME_OWNER`], pieces of [`READ_PIECE`]), and feeds them to a parser
//! resumed there (`KeyframeBuilder::resume_at`: the keyframe must be found again,
//! where and when the index says, or the file is not what its index describes).
//! Appends that land meanwhile only move the end it reads to; once it has fed the
//! file to its applied size it follows the file's writes again as if it had never
//! stopped. A file whose index was empty (a recording cut before its first
//! keyframe, or a file that is not media) is read from its start, if it is at most
//! [`FRESH_MAX_BYTES`]: its first [`DETECT_READ`] bytes tell whether it is media
//! (if not, nothing more is read and its appends are followed as a non-media
//! file's).
//!
//! **Honest while it runs.** The index is flagged incomplete when the resume starts
//! and the flag is cleared, with the keyframes found appended, in one step when it
//! has caught up (`Volume::complete_frame_index`): a crash or an unmount in between
//! leaves an index that says it is incomplete (`reindex` rebuilds it), never one
//! that claims keyframes it lacks. What makes it give up, leaving the flag set: a
//! last keyframe more than [`TAIL_MAX_BYTES`] before the end, a head the parser
//! cannot go on from, the keyframe not found again, a read that fails, a write that
//! is not an append, more than [`CATCH_UP_MAX_BYTES`] read without catching up, or
//! `reindex` (or a writer's own index) taking the file over.
//!
//! **Time.** The frames after the last keyframe are timed on from its UTC by their
//! media time; a live file's clocks are consulted again at its next discontinuity
//! (a new writer's PTS starting over anchors it at the wall clock). A crash's
//! replayed bytes are therefore timed as they were recorded, not as replayed.

use super::live_index::{LiveIndex, Resume};
use super::{Engine, IoBuf, Now, Op, OpId, Output};
use crate::error::Result;
use crate::media::{Container, KeyframeBuilder};
use crate::meta::Ino;

/// Owner id of the resume's reads (their completions go to the index, not to a
/// driver).
pub(super) const INDEX_RESUME_OWNER: u32 = 0x7FFF_FFFC;

/// The head read for the file's tables or init segment.
const HEAD_BYTES: u64 = 1 << 20;
/// The most bytes from the last keyframe to the end that a resume reads back (a
/// GOP of 10 s at 25 Mbit/s is 31 MB).
const TAIL_MAX_BYTES: u64 = 32 << 20;
/// The largest file with an empty index that is read from its start.
const FRESH_MAX_BYTES: u64 = 4 << 20;
/// The first read of a file with an empty index.
const DETECT_READ: u64 = 64 << 10;
/// One read of a resume.
const READ_PIECE: u64 = 4 << 20;
/// A resume that has read this much without catching up with the file's appends
/// gives up.
const CATCH_UP_MAX_BYTES: u64 = 256 << 20;

impl Engine {
    /// An append (`old_size..new_size`) to file `ino`, which the engine was not
    /// following: starts a resume if the file's index can go on (see the module
    /// docs). Whether it started.
    pub(super) fn index_resume_start(
        &mut self,
        ino: Ino,
        generation: u32,
        old_size: u64,
        new_size: u64,
        now: Now,
    ) -> bool {
        let Ok(info) = self.vol.frame_info(ino) else {
            return false;
        };
        if !info.complete {
            return false;
        }
        let len = match info.last {
            Some(l) if old_size.saturating_sub(l.offset) > TAIL_MAX_BYTES => return false,
            Some(_) => {
                if self.vol.mark_index_incomplete(ino).is_err() {
                    return false;
                }
                HEAD_BYTES.min(old_size)
            }
            None if old_size > FRESH_MAX_BYTES => return false,
            // A first read enough to tell media from anything else (which costs
            // no more then).
            None => DETECT_READ.min(new_size),
        };
        let reading = self.index_resume_read_at(ino, 0, len, now);
        let builder = info.last.is_none().then(KeyframeBuilder::live);
        let resume = Resume {
            head: info.last.is_some(),
            last: info.last,
            reading,
            next: 0,
            read: 0,
            found: Vec::new(),
            ended: false,
        };
        self.live_indexes.insert(
            ino,
            LiveIndex::resuming(generation, new_size, builder, resume),
        );
        true
    }

    /// A write of `[offset, end)` applied to file `ino` (`generation`) while its
    /// index is being picked up again: an append moves the end the resume reads
    /// to, anything else makes it give up. Whether the write was the resume's.
    pub(super) fn index_resume_write(
        &mut self,
        ino: Ino,
        generation: u32,
        offset: u64,
        end: u64,
    ) -> bool {
        let Some(l) = self
            .live_indexes
            .get_mut(&ino)
            .filter(|l| l.generation == generation && l.resume.is_some())
        else {
            return false;
        };
        if offset == l.fed {
            l.fed = end;
        } else {
            self.index_resume_abandon(ino);
        }
        true
    }

    fn index_resume_read_at(&mut self, ino: Ino, offset: u64, len: u64, now: Now) -> OpId {
        let buf = IoBuf::zeroed(usize::try_from(len).expect("a resume reads at most a piece"));
        let op = Op::Read { ino, offset, buf };
        self.submit_own(op, None, INDEX_RESUME_OWNER, None, now)
    }

    /// A read of a resume finished.
    pub(super) fn index_resume_read_done(&mut self, id: OpId, result: Result<Output>, now: Now) {
        let Some(ino) = self
            .live_indexes
            .iter()
            .find(|(_, l)| l.resume.as_ref().is_some_and(|r| r.reading == id))
            .map(|(&i, _)| i)
        else {
            return; // the file started over, or was taken over, meanwhile
        };
        let bytes = match result {
            Ok(Output::Read { buf, bytes }) if bytes > 0 => {
                buf.bytes().map(|b| b[..bytes].to_vec())
            }
            _ => None,
        };
        let current =
            self.live_indexes[&ino].generation == self.vol.file_generation(ino).unwrap_or(0);
        match bytes.filter(|_| current) {
            Some(b) if self.index_resume_feed(ino, &b, now) => self.index_resume_next(ino, now),
            _ => self.index_resume_abandon(ino),
        }
    }

    /// Feeds what a resume read; whether it can go on.
    fn index_resume_feed(&mut self, ino: Ino, bytes: &[u8], now: Now) -> bool {
        let live = self
            .live_indexes
            .get_mut(&ino)
            .expect("looked up by the caller");
        let r = live.resume.as_mut().expect("a resume");
        r.read += bytes.len() as u64;
        if r.head {
            let last = r
                .last
                .expect("a head is read only to go on from a keyframe");
            let Some(builder) = KeyframeBuilder::resume_at(bytes, &last) else {
                return false;
            };
            r.head = false;
            r.next = last.offset;
            live.builder = Some(builder);
            return true;
        }
        r.next += bytes.len() as u64;
        let builder = live.builder.as_mut().expect("fed after its head");
        let entries = builder.feed_at(bytes, now.mono_ns, now.wall_ns);
        let notes = builder.take_clock_notes();
        if builder.resume_broken() {
            return false;
        }
        if builder.indexer().container() == Container::Other {
            // A file that is not media (its index was empty): followed as one.
            live.builder = None;
        }
        r.found.extend(entries);
        self.index_clock_notes(ino, notes, now);
        true
    }

    /// After a read was fed: the next read, or, caught up with the file's appends,
    /// the keyframes found stored and the file followed again.
    fn index_resume_next(&mut self, ino: Ino, now: Now) {
        let live = self
            .live_indexes
            .get_mut(&ino)
            .expect("looked up by the caller");
        let target = live.fed;
        let r = live.resume.as_mut().expect("a resume");
        if r.read > CATCH_UP_MAX_BYTES {
            return self.index_resume_abandon(ino);
        }
        let media = live.builder.is_some();
        if r.next < target && media {
            let (at, len) = (r.next, READ_PIECE.min(target - r.next));
            let id = self.index_resume_read_at(ino, at, len, now);
            let r = self
                .live_indexes
                .get_mut(&ino)
                .and_then(|l| l.resume.as_mut());
            r.expect("still resuming").reading = id;
            return;
        }
        let r = live.resume.take().expect("a resume");
        if !media {
            return; // not media: nothing to store, its appends are followed
        }
        let stored = match r.last {
            Some(_) => self.vol.complete_frame_index(ino, &r.found),
            None => self.vol.append_frames(ino, &r.found),
        };
        match stored {
            Ok(crate::volume::IndexAppend::Stored) => {
                if r.ended {
                    self.index_file_ended(ino);
                }
            }
            Ok(crate::volume::IndexAppend::OutOfRoom) | Err(_) => {
                self.live_indexes.remove(&ino);
                let _ = self.vol.mark_index_incomplete(ino);
            }
        }
    }

    /// A resume gives up: the file is no longer followed, and an index that was
    /// flagged at its start stays flagged.
    pub(super) fn index_resume_abandon(&mut self, ino: Ino) {
        self.live_indexes.remove(&ino);
    }

    /// `reindex`, or a writer keeping its own index, takes file `ino`'s index over:
    /// a resume of it stops.
    pub(super) fn index_taken_over(&mut self, ino: Ino) {
        if self
            .live_indexes
            .get(&ino)
            .is_some_and(|l| l.resume.is_some())
        {
            self.live_indexes.remove(&ino);
        }
    }
}
