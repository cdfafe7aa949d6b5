//! A playback's pin yielding to a recording (retention's rule 6, docs/retention.md
//! "A reader's pin yields to a recording").
//!
//! A playback holds every file it has (`stream/playback.rs`), and retention never
//! deletes a chunk that is held. When the space owed to admitted recordings (rule 1)
//! cannot be freed otherwise, chunks that only playbacks hold may go too: the plan
//! marks such a deletion `expire` ([`crate::retention::Deletion`]), and just before
//! it is submitted every playback holding the chunk is **expired**: its waiting and
//! later reads fail with [`Error::RangeExpired`] (`ESTALE`), what it had fetched is
//! dropped, and it fetches nothing more. It never gives a byte of a file that is
//! going, nor of one whose inode number came back as another's. The chunk's name
//! goes at once; its blocks stay the playbacks' until they close (a driver that
//! gets the error closes its stream), and are free for the recording then.
//!
//! Only the engine's playbacks yield: a file also held by a handle of the mount or
//! of the C API, or with a write running, keeps its pin. While an expired chunk's
//! blocks wait for its playbacks to close, the plan counts them as coming
//! (`Engine::expiring_bytes`), so one need expires one set of chunks, not more.

use std::collections::{BTreeMap, BTreeSet};

use super::super::{Engine, Now};
use super::{Error, Ino, StreamDir, StreamId};

impl Engine {
    /// Files every hold of which is a playback's, with no write running and no
    /// recording on them: their pins yield to a recording's need.
    pub(in crate::engine) fn playback_pins(&self) -> BTreeSet<Ino> {
        let mut holds: BTreeMap<Ino, u32> = BTreeMap::new();
        for s in self.streams.values() {
            if s.info.dir == StreamDir::Read && s.expired.is_none() {
                for f in &s.play {
                    *holds.entry(f.ino).or_default() += 1;
                }
            }
        }
        holds
            .into_iter()
            .filter(|&(ino, n)| {
                self.vol.open_count(ino) == n
                    && self.recording_on(ino).is_none()
                    && self.files.get(&ino).is_none_or(|f| f.writes.is_empty())
            })
            .map(|(ino, _)| ino)
            .collect()
    }

    /// Expires every playback that holds `ino` (see the module docs): `why` is
    /// what their reads are told.
    pub(in crate::engine) fn expire_playbacks(&mut self, ino: Ino, why: &str, now: Now) {
        for s in self.streams.values_mut() {
            if s.info.dir == StreamDir::Read
                && s.expired.is_none()
                && s.play.iter().any(|f| f.ino == ino)
            {
                s.expired = Some(why.to_string());
                s.ended = true;
                s.wake(now);
            }
        }
    }

    /// An expired playback's step (`why` its reason): its reads fail, its fetched
    /// bytes are dropped. Whether anything changed.
    pub(super) fn expired_step(&mut self, sid: StreamId, why: String, now: Now) -> bool {
        let s = self.streams.get_mut(&sid).expect("listed");
        // Bytes fetched are dropped; fetches running finish into nothing.
        let fetched = s.chunks.len();
        s.chunks.retain(|c| c.op.is_some());
        let mut changed = s.chunks.len() < fetched;
        let waiting: Vec<_> = s.waiting.drain(..).collect();
        for w in waiting {
            self.stream_finish_read(w, Err(Error::RangeExpired(why.clone())), now);
            changed = true;
        }
        changed
    }
}
