//! What the tail log (`engine/tail_log.rs`) needs of a write stream: the bytes of
//! its partial request not yet logged, and its figures.

use super::Stream;
use crate::alloc::Ino;

/// What the tail log (`engine/tail_log.rs`) needs of a write stream.
impl Stream {
    /// The file, and how many bytes of the request being filled are not yet logged.
    pub(in crate::engine) fn unlogged(&self) -> (Ino, usize) {
        (self.info.ino, self.fill_len - self.logged_len)
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

    /// Whether the request being filled holds bytes before `end_bytes` (so writing
    /// it in place settles a logged entry ending there).
    pub(in crate::engine) fn partial_holds(&self, end_bytes: u64) -> bool {
        self.fill.is_some() && self.fill_len > 0 && self.fill_at < end_bytes
    }
}
