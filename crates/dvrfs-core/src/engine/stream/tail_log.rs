//! What the tail log (`engine/tail_log.rs`) needs of a write stream: the bytes it
//! accepted that are in neither the log nor a commit, wherever they are (the
//! request being filled, and the requests being written whose deadline is their
//! buffer's overflow), whether it logs at all, and its figures.
//!
//! **Which recordings log.** A recording whose request does not fill within its
//! durability interval `D` (`request / rate > D`: 250 kbit/s and 4 Mbit/s at
//! `D` = 1 s) logs: its partial request at each gather point, and a full request's
//! bytes not yet logged at the first gather point after it is written out; the full
//! request itself is due only when its buffer would overflow (its guarantee), so
//! whole requests no longer all fall due in one gather lead. A fast recording (a
//! request fills within `D`: 40 Mbit/s) keeps the old rule: a full request is due by
//! the next commit and never logged (logging it would write every byte twice); only
//! its partial request at a gather point is logged.

use super::{OpId, Stream};
use crate::meta::Ino;

/// A request being written whose bytes `[from_bytes, end_bytes)` (its last ones)
/// rely on the tail log: the next gather point logs them, unless the request is
/// applied first (then the next commit carries them). Room for them in the ring is
/// held from when the request is written out (`reserved_blocks`), so that gather
/// always has room.
#[derive(Clone, Copy, Debug)]
pub(in crate::engine) struct InFlightUnlogged {
    /// The request's file (a roll may have moved the stream on to another).
    pub ino: Ino,
    pub from_bytes: u64,
    pub end_bytes: u64,
    /// When the oldest of those bytes was accepted.
    pub first_ns: u64,
    /// Ring blocks held for them (`engine/tail_log.rs`).
    pub reserved_blocks: u64,
}

/// What the tail log (`engine/tail_log.rs`) needs of a write stream.
impl Stream {
    /// The file, and how many bytes of the request being filled are not yet logged.
    pub(in crate::engine) fn unlogged(&self) -> (Ino, usize) {
        (self.info.ino, self.fill_len - self.logged_len)
    }

    /// The request being filled: its bytes not yet logged, `[from, end)`, and when
    /// the oldest of them was accepted.
    pub(in crate::engine) fn unlogged_fill(&self) -> (u64, u64, u64) {
        (
            self.fill_at + self.logged_len as u64,
            self.fill_at + self.fill_len as u64,
            self.fill_first_ns,
        )
    }

    /// Where request `op` being written goes in the file.
    pub(in crate::engine) fn request_at(&self, op: OpId) -> Option<u64> {
        self.writes.iter().find(|w| w.op == op).map(|w| w.at)
    }

    /// Whether this recording's request does not fill within its durability
    /// interval (module docs): on a volume with a tail log, it logs its full
    /// requests' last bytes instead of making them due by the next commit.
    pub(in crate::engine) fn fills_slower_than_durable(&self) -> bool {
        let fill_ns = self.info.request_bytes as f64 / self.rate.max(1.0) * 1e9;
        fill_ns > self.info.durable_ns as f64
    }

    /// When the oldest accepted byte that is in neither the log nor a request due by
    /// a commit was accepted: the durability bound is about it.
    pub(in crate::engine) fn oldest_unlogged_ns(&self) -> Option<u64> {
        let fill = (self.fill_len > self.logged_len).then_some(self.fill_first_ns);
        self.unlogged_writes
            .values()
            .map(|u| u.first_ns)
            .chain(fill)
            .min()
    }

    /// The requests being written whose last bytes wait for the log.
    pub(in crate::engine) fn in_flight_unlogged(&self) -> Vec<(OpId, InFlightUnlogged)> {
        self.unlogged_writes.iter().map(|(&o, &u)| (o, u)).collect()
    }

    /// Those bytes of request `op` were logged, or it was applied: returns what it
    /// held of the ring.
    pub(in crate::engine) fn settle_in_flight(&mut self, op: OpId) -> Option<InFlightUnlogged> {
        self.unlogged_writes.remove(&op)
    }

    /// The request just written out (the newest in `writes`) leaves `u` to the log.
    pub(in crate::engine) fn leave_to_log(&mut self, u: InFlightUnlogged) {
        let w = *self.writes.back().expect("a request was just written out");
        assert!(
            w.ino == u.ino
                && w.at <= u.from_bytes
                && u.from_bytes < u.end_bytes
                && u.end_bytes == self.pos,
            "bytes left to the log lie outside the request written out"
        );
        self.unlogged_writes.insert(w.op, u);
    }

    /// Counts bytes logged.
    pub(in crate::engine) fn count_logged(&mut self, n: u64) {
        self.stats.tail_logged_bytes += n;
    }

    /// Takes the bytes of the request being filled that are not yet logged: their
    /// file offset and a copy (zeros for the simulator's buffers, which hold none).
    pub(in crate::engine) fn take_unlogged(&mut self) -> (u64, Vec<u8>) {
        let (from, to) = (self.logged_len, self.fill_len);
        assert!(from < to, "a gather with nothing new to log");
        let fill = self
            .fill
            .as_ref()
            .expect("a partial request is being filled");
        let bytes = match fill.bytes() {
            Some(b) => b[from..to].to_vec(),
            None => vec![0; to - from],
        };
        self.logged_len = to;
        self.stats.tail_logged_bytes += (to - from) as u64;
        (self.fill_at + from as u64, bytes)
    }

    /// The ring had no room for this stream's gather.
    pub(in crate::engine) fn count_tail_log_full(&mut self) {
        self.stats.tail_log_full += 1;
    }

    /// Whether the request being filled holds bytes of file `ino` before `end_bytes`
    /// (so writing it in place settles a logged entry ending there).
    pub(in crate::engine) fn partial_holds(&self, ino: Ino, end_bytes: u64) -> bool {
        self.info.ino == ino && self.fill.is_some() && self.fill_len > 0 && self.fill_at < end_bytes
    }
}
