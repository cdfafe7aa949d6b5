//! What the mount daemon holds in memory for its callers, and the bounds on it.
//!
//! A user of the mount can make the daemon hold memory two ways, and each has one
//! bound for the whole daemon, whatever the number of files, users or handles:
//!
//! - **Stream buffers.** Every admitted reservation has a buffer of up to 256 MiB (a
//!   playback's prefetched requests, a recording's write-behind). Their sum is bounded
//!   by the engine's stream memory budget (`dvrfs_core::engine` `stream/memory.rs`;
//!   `--stream-memory`, [`DEFAULT_STREAM_MEMORY_BYTES`]): a reservation whose buffer
//!   would pass it is refused with `EBUSY` and the reason in the log. A read
//!   reservation set on a file nobody has open is admitted *idle*: its bandwidth is
//!   counted and its buffer promised, but nothing is prefetched until a handle opens
//!   the file ([`crate::file::FileState::stream_opened`]) or reads it. Before, each
//!   one prefetched its whole buffer at once: 24 of them on sparse files nobody read
//!   held 6.35 GB.
//! - **The read cache.** A file read best-effort keeps up to [`crate::file::CACHE_CHUNKS`]
//!   chunks it read and [`crate::file::READ_AHEAD_CHUNKS`] (twice, as the kernel's
//!   read-ahead runs ahead) read ahead. Every one of those chunks, in every open file,
//!   holds a share of one [`ReadCache`] (`--read-cache`,
//!   [`DEFAULT_READ_CACHE_BYTES`]). When it is all taken, a read reuses its own
//!   file's oldest cached chunk, or, with none, reads just the bytes asked for
//!   straight into the reply (no cache, no read-ahead): reads always progress, never
//!   wait for another file's cache, and the cache never grows past the bound. Before,
//!   each open file could hold about 24 MiB: 1.24 GB at 50 files.
//!
//! Beside those, the daemon holds its metadata, one request buffer per session
//! thread (about 1 MiB each), and up to `POOL_MAX_BYTES` of free chunk buffers kept
//! for reuse (`file.rs`): the fixed overhead docs/mount.md gives figures for.

use crate::file::FileState;
use dvrfs_core::engine::{IoBuf, Op, StreamDir};
use dvrfs_runtime::Runtime;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// The stream buffers' budget of a mount without `--stream-memory`: 1 GiB. A fixed
/// figure rather than a share of the machine's memory, so a mount behaves the same
/// on every machine it is moved to; 1 GiB holds four of the largest buffers, or a
/// hundred playbacks with the buffers dvrfs chooses for a few Mbit/s each (a few MiB),
/// and is a quarter of the 4 GiB a small recorder has.
pub const DEFAULT_STREAM_MEMORY_BYTES: u64 = 1 << 30;
/// Smallest budget: one stream of the smallest buffers dvrfs chooses (two 4 MiB
/// requests, `dvrfs_core::engine::MAX_STREAM_REQUEST_BYTES` halved).
pub const MIN_STREAM_MEMORY_BYTES: u64 = 16 << 20;
/// Largest budget: 1 TiB (beyond any machine dvrfs runs on; a typo's bound).
pub const MAX_STREAM_MEMORY_BYTES: u64 = 1 << 40;

/// The read cache of a mount without `--read-cache`: 64 MiB, enough for 8 files
/// read at full speed each with its whole cache and read-ahead (8 chunks of 1 MiB),
/// and for any number read slower (each keeps the chunk it reads).
pub const DEFAULT_READ_CACHE_BYTES: u64 = 64 << 20;
/// Smallest read cache: 4 MiB (a few chunks; with none, every read is direct).
pub const MIN_READ_CACHE_BYTES: u64 = 4 << 20;
/// Largest read cache: 64 GiB.
pub const MAX_READ_CACHE_BYTES: u64 = 64 << 30;

/// The shares of the read cache: at most `cap` chunks held by all open files.
pub struct ReadCache {
    cap: usize,
    held: AtomicUsize,
}

/// One chunk's share of the read cache, given back when dropped (with the chunk).
pub struct Held(Arc<ReadCache>);

impl Drop for Held {
    fn drop(&mut self) {
        let before = self.0.held.fetch_sub(1, Ordering::AcqRel);
        assert!(before > 0, "a read cache share given back twice");
    }
}

impl ReadCache {
    /// A cache of `bytes` in chunks of `chunk_bytes` (at least one chunk).
    pub fn new(bytes: u64, chunk_bytes: u64) -> Arc<ReadCache> {
        assert!(chunk_bytes > 0, "chunks have a size");
        Arc::new(ReadCache {
            cap: (bytes / chunk_bytes).max(1) as usize,
            held: AtomicUsize::new(0),
        })
    }

    /// A share for one more chunk, if the cache has one left.
    pub fn try_hold(self: &Arc<Self>) -> Option<Held> {
        self.held
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |h| {
                (h < self.cap).then_some(h + 1)
            })
            .ok()
            .map(|_| Held(self.clone()))
    }

    /// Chunks held now, and the most that may be.
    pub fn usage(&self) -> (usize, usize) {
        (self.held.load(Ordering::Acquire), self.cap)
    }
}

impl FileState {
    /// A handle is opening the file: a read reservation set while nobody had it
    /// open (admitted idle, not yet `used`) starts prefetching now, its clock starting
    /// as at an open. A zero-length stream read says so to the engine without taking
    /// a byte; an idle stream has no reads queued, so it is answered at once. A stream
    /// already playing is left alone (a zero-length read would queue behind reads
    /// waiting for its rate).
    pub(crate) fn stream_opened(&self, rt: &Runtime) {
        let Some(s) = self
            .stream
            .as_ref()
            .filter(|s| s.res.dir == StreamDir::Read && !s.used)
        else {
            return;
        };
        let op = Op::StreamRead {
            stream: s.info.id,
            buf: IoBuf::zeroed(0),
        };
        if let Err(e) = rt.run_waiting(op, None, 0) {
            // Its first read starts it then (or reports the failure to the reader).
            eprintln!(
                "{} dvrfs: inode {}: stream {}: starting its prefetch at the open failed: {e}",
                crate::stamp(),
                self.ino,
                s.info.id
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_read_cache_gives_no_more_shares_than_its_cap_and_takes_them_back() {
        let c = ReadCache::new(3 << 20, 1 << 20);
        let held: Vec<Held> = (0..3).map(|_| c.try_hold().expect("room")).collect();
        assert!(c.try_hold().is_none(), "full at three chunks");
        assert_eq!(c.usage(), (3, 3));
        drop(held);
        assert_eq!(c.usage(), (0, 3));
        assert!(c.try_hold().is_some());
        // Smaller than a chunk: one chunk all the same, so reads still cache.
        assert_eq!(ReadCache::new(1, 1 << 20).usage(), (0, 1));
    }
}
