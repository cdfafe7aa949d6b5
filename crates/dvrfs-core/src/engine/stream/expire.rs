//! The playbacks' part of a reader's pin yielding to a recording (retention's rule
//! 6; the whole in `engine/expire.rs`): an expired playback's reads fail with
//! [`Error::RangeExpired`], what it fetched is dropped, and it fetches nothing more.

use super::super::{Engine, Now};
use super::{Error, Ino, StreamDir, StreamId};

impl Engine {
    /// Expires every playback that holds `ino`: `why` is what their reads are told.
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
