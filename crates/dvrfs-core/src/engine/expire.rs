//! A reader's pin yielding to a recording (retention's rule 6, docs/retention.md
//! "A reader's pin yields to a recording").
//!
//! A reader holds every file it has open: a playback (`stream/playback.rs`) each file
//! it has queued, a handle of the mount or of the C API opened read-only
//! ([`OpenMode::Read`](crate::volume::OpenMode)) its file; and retention never deletes a chunk that is held.
//! When the space owed to admitted recordings (rule 1) cannot be freed otherwise,
//! chunks that only readers hold may go too: the plan marks such a deletion `expire`
//! ([`crate::retention::Deletion`]), and just before it is submitted the chunk is
//! **expired**:
//!
//! - every playback holding it is expired: its waiting and later reads fail with
//!   [`Error::RangeExpired`] (`ESTALE`), what it had fetched is dropped, and it
//!   fetches nothing more;
//! - the file, by inode number and generation, is marked expired: a later
//!   `Op::Read` or `Op::OpenFile` of it fails with the same error (a read already
//!   running reads the chunk's own blocks, which are still its own);
//! - once the unlink is done the nameless file (an orphan, held open) is cut to
//!   zero bytes (`retention.rs`), after the reads running on it: its blocks are the
//!   recording's at once, not when the last reader gets round to closing.
//!
//! No reader is ever given a byte of a file that is going, nor of one whose inode
//! number came back as another's: the number stays the orphan's until its last
//! close, and the generation tells a new file from it after. The plan counts an
//! expired chunk's blocks as coming until they are free (`Engine::expiring_bytes`),
//! so one need expires one set of chunks, not more.
//!
//! A writer's hold never yields: a file with a handle open for writing, a write
//! running or a recording on it keeps its pin, since expiring it would lose bytes
//! a writer was told were written.

use std::collections::BTreeSet;

use super::{Engine, Now, Op};
use crate::error::{Error, Result};
use crate::meta::Ino;

impl Engine {
    /// Files every hold of which is a reader's, with no write running and no
    /// recording on them: their pins yield to a recording's need.
    pub(in crate::engine) fn reader_pins(&self) -> BTreeSet<Ino> {
        // Every hold, a playback's or a handle's, is in the volume's open counts.
        let held: BTreeSet<Ino> = self.vol.open_files().collect();
        held.into_iter()
            .filter(|&ino| {
                self.vol.writer_count(ino) == 0
                    && !self.vol.is_orphan(ino)
                    && self.recording_on(ino).is_none()
                    && self.files.get(&ino).is_none_or(|f| f.writes.is_empty())
            })
            .collect()
    }

    /// Expires chunk `ino` for its readers (see the module docs): `why` is what
    /// their reads are told.
    pub(in crate::engine) fn expire_readers(&mut self, ino: Ino, why: &str, now: Now) {
        self.expire_playbacks(ino, why, now);
        let generation = self.vol.stat(ino).map_or(0, |st| st.generation);
        self.retention
            .expiring
            .insert((ino, generation), why.to_string());
    }

    /// Why `ino`, as it is now, was expired, if it was.
    fn expired_why(&self, ino: Ino) -> Option<&String> {
        if self.retention.expiring.is_empty() {
            return None; // the usual case, at every read
        }
        let generation = self.vol.stat(ino).ok()?.generation;
        self.retention.expiring.get(&(ino, generation))
    }

    /// Refuses a read or an open of an expired file (module docs).
    pub(in crate::engine) fn refuse_expired(&self, op: &Op) -> Result<()> {
        let ino = match op {
            Op::Read { ino, .. } | Op::OpenFile { ino, .. } => *ino,
            _ => return Ok(()),
        };
        match self.expired_why(ino) {
            Some(why) => Err(Error::RangeExpired(why.clone())),
            None => Ok(()),
        }
    }
}
