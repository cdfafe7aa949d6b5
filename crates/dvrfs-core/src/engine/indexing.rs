//! Frame indexes built while files are written (HERMES 4; FORMAT.md section 10c): the
//! engine feeds every regular file written from its first byte, in order, to the
//! media parser as its writes are applied, and appends the keyframes it completes
//! to the file's index in the same step, so they reach the disk in the transaction
//! that carries the data they describe. A file that is not a transport stream or an
//! MP4 is recognised within its first 752 bytes and costs nothing more.
//!
//! Why at apply: a write's bytes join the file, in file order, only when it is
//! applied (a recording's requests are held by the mixer and may complete out of
//! order; the volume applies them in order), so the parser sees exactly the file,
//! and a keyframe is never stored before its bytes. The UTC of the bytes is the wall
//! clock when their write was submitted, carried by the media time and checked
//! against the monotonic clock (`KeyframeBuilder::live`); a move of the clocks is
//! logged as a `clock_step` event.
//!
//! A file that is not media stays followed (cheaply: its length and generation),
//! whatever is written where, so that an index its writer stores itself
//! (`Op::AppendFrames`) is not taken for one its appends left behind, and its next
//! append is not a resume. What stops live indexing of a file, and what its index
//! then says:
//! - a write that is not the next append (a rewrite, a hole): the parser's view is
//!   no longer the file's, so the file is flagged incomplete (the volume has already
//!   cut the keyframes a rewrite changed); except an MP4 muxer setting the size of
//!   the `mdat` it left open (ffmpeg writing a plain MP4: its `moov` follows);
//! - an append to an indexed file the engine is not following (written before this
//!   open, a crash's replay): its index is picked up again from its last keyframe
//!   (`engine/index_resume.rs`), flagged incomplete only until it has caught up, or
//!   for good where it cannot go on (the keyframes stored stay);
//! - a keyframe the index refuses, or no room: flagged incomplete;
//! - a file truncated to 0 and written again starts over.
//!
//! `dvrfs reindex` builds a flagged file's index again. The engine sees a file end
//! (`index_file_ended`: its last frame ends there; a plain MP4's sample tables, at
//! its end, give all its keyframes) when a recording stream rolls on from it or
//! closes, and, for a plain MP4 whose tables it has seen, at the file's last close
//! (`Op::CloseFile`: the mount's release, the APIs' close).
//! Simulated writes carry no bytes and are not indexed.

use super::live_index::LiveIndex;
use super::{Engine, Now};
use crate::format::events::What;
use crate::media::{ClockNote, Container, KeyframeBuilder};
use crate::meta::Ino;

/// Files followed at once; past it, files that no longer exist are forgotten.
const MAX_LIVE: usize = 4096;

impl Engine {
    /// A write of `data` at `offset` to `ino`, which had `size_before` bytes, was
    /// applied; `submit` is when it was submitted, `now` is now: feed it and store
    /// what it completes.
    pub(super) fn index_applied(
        &mut self,
        ino: Ino,
        (offset, size_before): (u64, u64),
        data: Option<&[u8]>,
        submit: Now,
        now: Now,
    ) {
        let Some(data) = data else {
            return; // the simulator's writes carry no bytes
        };
        let Some(generation) = self.vol.file_generation(ino) else {
            return;
        };
        if data.is_empty() {
            return;
        }
        let start_over = offset == 0 && size_before == 0;
        let end = offset + data.len() as u64;
        if !start_over && self.index_resume_write(ino, generation, offset, end) {
            return;
        }
        let followed = self
            .live_indexes
            .get(&ino)
            .is_some_and(|l| l.generation == generation && l.fed == offset);
        if start_over {
            self.index_start_over(ino, generation);
        } else if !followed {
            if self.index_non_media_write(ino, generation, offset, end) {
                return;
            }
            // A rewrite of bytes already fed that the parser can take (an MP4
            // muxer setting its `mdat`'s size at the end): still followed.
            let patched = self.live_indexes.get_mut(&ino).is_some_and(|l| {
                l.generation == generation
                    && offset + data.len() as u64 <= l.fed
                    && l.builder.as_mut().is_some_and(|b| b.patch(offset, data))
            });
            if patched {
                return;
            }
            self.live_indexes.remove(&ino);
            if offset == size_before && self.index_resume_start(ino, generation, offset, end, now) {
                return;
            }
            self.index_unfollowed(ino);
            return;
        }
        let live = self.live_indexes.get_mut(&ino).expect("followed or new");
        live.fed = end;
        let Some(builder) = live.builder.as_mut() else {
            return;
        };
        let entries = builder.feed_at(data, submit.mono_ns, submit.wall_ns);
        let notes = builder.take_clock_notes();
        if builder.indexer().container() == Container::Other {
            live.builder = None; // its parser's memory goes
            return;
        }
        self.index_clock_notes(ino, notes, submit);
        if entries.is_empty() {
            return;
        }
        match self.vol.append_frames(ino, &entries) {
            Ok(crate::volume::IndexAppend::Stored) => {}
            Ok(crate::volume::IndexAppend::OutOfRoom) | Err(_) => {
                self.live_indexes.remove(&ino);
                let _ = self.vol.mark_index_incomplete(ino);
            }
        }
        if self.live_indexes.len() > MAX_LIVE {
            let vol = &self.vol;
            // Files gone, and files that are not media (an index their writer
            // keeps would then be flagged at their next append: rare, and safe).
            self.live_indexes.retain(|&i, l| {
                (l.builder.is_some() || l.seed.is_some() || l.resume.is_some())
                    && vol.file_generation(i) == Some(l.generation)
            });
        }
    }

    /// A write of `[offset, end)` that is not the next append reached file `ino`
    /// (`generation`), followed as a file that is not media: a rewrite changes
    /// nothing of that, so it stays followed (a hole flags an index its writer
    /// keeps). Whether it was such a file.
    fn index_non_media_write(&mut self, ino: Ino, generation: u32, offset: u64, end: u64) -> bool {
        let Some(l) = self.live_indexes.get_mut(&ino).filter(|l| {
            l.generation == generation
                && l.builder.is_none()
                && l.seed.is_none()
                && l.resume.is_none()
        }) else {
            return false;
        };
        let hole = offset > l.fed;
        l.fed = l.fed.max(end);
        if hole {
            self.index_unfollowed(ino);
        }
        true
    }

    /// File `ino` is written from its first byte: it is indexed afresh, timed on
    /// from the file its recording rolled on from, if it did.
    fn index_start_over(&mut self, ino: Ino, generation: u32) {
        let continues = self
            .live_indexes
            .get(&ino)
            .filter(|l| l.generation == generation && l.fed == 0)
            .and_then(|l| l.continues);
        let builder = match continues {
            Some(from) => self.continuing_from(from),
            None => KeyframeBuilder::live(),
        };
        let live = LiveIndex {
            builder: Some(builder),
            generation,
            fed: 0,
            continues: None,
            seed: None,
            resume: None,
        };
        self.live_indexes.insert(ino, live);
    }

    /// The clock moves a file's parser saw in bytes written at `at`, logged as
    /// `clock_step` events.
    pub(super) fn index_clock_notes(&mut self, ino: Ino, notes: Vec<ClockNote>, at: Now) {
        for n in notes {
            let what = What::ClockStep {
                ino,
                change: n.change,
                step_ns: n.step_ns,
                offset: n.offset,
            };
            self.vol.push_event(at.mono_ns, at.wall_ns, what);
        }
    }

    /// A recording rolled on from file `from` to the empty file `to`: `to`'s index
    /// will time its first frame from where `from`'s left off, so that a chunked
    /// recording's chunks follow each other in UTC (an import's included).
    pub(super) fn index_continues(&mut self, from: Ino, to: Ino) {
        let Some(generation) = self.vol.file_generation(to) else {
            return;
        };
        self.live_indexes.insert(
            to,
            LiveIndex {
                builder: Some(KeyframeBuilder::live()),
                generation,
                fed: 0,
                continues: Some(from),
                seed: None,
                resume: None,
            },
        );
    }

    /// The builder for a file a recording rolled on to from file `from`: timed on
    /// from the nearest earlier file of the recording whose index has a time (a
    /// chunk's first write can be applied before the last chunk's: requests complete
    /// in the mixer's order, so the chain of files not yet started is walked back);
    /// anchored afresh when none has. A `from` that has ended is dropped: its seed
    /// was what it was kept for.
    fn continuing_from(&mut self, from: Ino) -> KeyframeBuilder {
        let mut at = Some(from);
        let mut found = None;
        for _ in 0..MAX_LIVE {
            let Some(l) = at.and_then(|i| self.live_indexes.get(&i)) else {
                break;
            };
            let timed = l
                .builder
                .as_ref()
                .or(l.seed.as_deref())
                .filter(|b| b.has_time());
            if let Some(b) = timed {
                found = Some(b.continuing());
                break;
            }
            // Not started yet: its own predecessor times it, and so this one.
            at = l.continues;
        }
        if self
            .live_indexes
            .get(&from)
            .is_some_and(|l| l.builder.is_none() && l.seed.is_some())
        {
            self.live_indexes.remove(&from);
        }
        found.unwrap_or_else(KeyframeBuilder::live)
    }

    /// File `ino`'s recording has rolled on or closed, and all its writes have
    /// landed: the last frame ends with the file (its keyframe, if it is one, is stored now), and the
    /// parser's memory goes. What the next file is timed from stays as a seed while
    /// that file has not started.
    pub(super) fn index_file_ended(&mut self, ino: Ino) {
        let Some(l) = self.live_indexes.get_mut(&ino) else {
            return;
        };
        if let Some(r) = l.resume.as_mut() {
            r.ended = true; // ended when the resume has caught up
            return;
        }
        let Some(mut builder) = l.builder.take() else {
            return;
        };
        let entries = builder.finish();
        if !entries.is_empty() {
            match self.vol.append_frames(ino, &entries) {
                Ok(crate::volume::IndexAppend::Stored) => {}
                Ok(crate::volume::IndexAppend::OutOfRoom) | Err(_) => {
                    let _ = self.vol.mark_index_incomplete(ino);
                }
            }
        }
        let waited_on = self
            .live_indexes
            .values()
            .any(|n| n.continues == Some(ino) && n.fed == 0);
        if waited_on && builder.has_time() {
            let l = self.live_indexes.get_mut(&ino).expect("looked up above");
            l.seed = Some(Box::new(builder.continuing()));
        } else {
            self.live_indexes.remove(&ino);
        }
    }

    /// File `ino` was closed (`Op::CloseFile`). At its last close, with nothing in
    /// flight, a plain MP4 whose sample tables have been seen is ended, which
    /// indexes it whole (its `moov` comes last). Other files stay followed: a writer
    /// may open the file again to append, and a transport stream's parser needs no
    /// end (only its last frame waits for one).
    pub(super) fn index_closed(&mut self, ino: Ino) {
        let plain = self
            .live_indexes
            .get(&ino)
            .and_then(|l| l.builder.as_ref())
            .is_some_and(|b| b.indexer().has_plain_tables());
        if plain && self.vol.open_count(ino) == 0 && self.file_idle(ino) {
            self.index_file_ended(ino);
        }
    }

    /// A write the engine did not follow changed or grew an indexed file: its index
    /// no longer covers it.
    fn index_unfollowed(&mut self, ino: Ino) {
        let indexed = self
            .vol
            .frame_info(ino)
            .is_ok_and(|i| i.keyframes > 0 && i.complete);
        if indexed {
            let _ = self.vol.mark_index_incomplete(ino);
        }
    }

    /// Files indexed as they are written, now (`dvrfs status`, tests).
    pub fn live_indexes(&self) -> usize {
        self.live_indexes
            .values()
            .filter(|l| l.builder.is_some())
            .count()
    }
}
