//! The memory streams take: a budget for their buffers, and read streams that hold
//! none until they are read.
//!
//! Every admitted stream owns a buffer (a playback's prefetched requests, a
//! recording's write-behind) of up to [`super::MAX_STREAM_BUFFER_BYTES`]. Without a
//! bound, a caller that may open streams (a user of the mount setting
//! `user.dvrfs.stream`, a client of the daemon's socket) makes the daemon hold as
//! much memory as it asks for: 24 playbacks with 256 MiB buffers took 6.35 GB.
//! So a driver may give the engine a **budget** ([`Engine::set_stream_memory_bytes`]):
//! the sum of the buffers of the streams admitted (open, prefetching or not, read
//! and write) never exceeds it. A stream whose buffer would exceed it is refused
//! ([`Error::Refused`], `EBUSY`, as a stream the disk's share cannot carry: a
//! resource the daemon shares out is taken, the caller may close a stream or ask
//! for less), with what the buffers take and what the budget is. A buffer dvrfs
//! chooses (no `buffer=`) is chosen within what is left ([`Engine::stream_memory_left`]),
//! so a stream that fits the disk with a smaller buffer is not refused for memory.
//! The engine's own default is no budget: the simulator, `bench` and a program
//! opening a volume itself (C API, `dvrfs record`) plan with the buffers they ask
//! for; the mount daemon, which serves many callers, sets one (`--stream-memory`).
//!
//! The budget counts a stream's whole buffer from its admission on, although an
//! **idle** read stream ([`super::StreamSpec::idle`]) fills it only once read: the
//! memory is promised, so the open that starts it never finds it gone. What is
//! resident is what streams being read fill: a reservation set ahead of a reader
//! costs bandwidth (admission), not memory.

use super::{Engine, Error, Result, Stream, StreamDir, StreamSpec};
use crate::engine::Now;

/// `512 KiB`, `4 MiB`: sizes in a refusal.
fn mib(bytes: u64) -> String {
    if bytes >= 1 << 20 {
        format!("{:.0} MiB", bytes as f64 / (1u64 << 20) as f64)
    } else {
        format!("{} KiB", bytes.div_ceil(1024))
    }
}

impl Engine {
    /// Bounds the sum of the admitted streams' buffers (`None`: unlimited, the
    /// default). Streams already admitted keep their buffers.
    pub fn set_stream_memory_bytes(&mut self, budget: Option<u64>) {
        self.stream_memory_bytes = budget;
    }

    /// The stream buffers' budget (`None`: unlimited).
    pub fn stream_memory_bytes(&self) -> Option<u64> {
        self.stream_memory_bytes
    }

    /// What the buffers of the streams admitted and not closed take (idle ones
    /// included: their memory is promised).
    pub fn stream_buffers_bytes(&self) -> u64 {
        self.streams
            .values()
            .filter(|s| !s.closed)
            .map(|s| s.info.buffer_bytes)
            .sum()
    }

    /// What is left of the budget for another stream's buffer (`u64::MAX`:
    /// unlimited).
    pub(super) fn stream_memory_left(&self) -> u64 {
        self.stream_memory_bytes
            .map_or(u64::MAX, |b| b.saturating_sub(self.stream_buffers_bytes()))
    }

    /// Refuses a stream whose buffer of `buffer_bytes` would take the buffers past
    /// the budget.
    pub(super) fn check_stream_memory(&self, spec: &StreamSpec, buffer_bytes: u64) -> Result<()> {
        let Some(budget) = self.stream_memory_bytes else {
            return Ok(());
        };
        let used = self.stream_buffers_bytes();
        let total = used.saturating_add(buffer_bytes);
        if total <= budget {
            return Ok(());
        }
        let open = self.streams.values().filter(|s| !s.closed).count();
        Err(Error::Refused(format!(
            "a {} stream with a {} buffer: stream buffers would take {} of the daemon's {} budget (the {open} stream(s) admitted hold {}); close a stream, ask for a smaller buffer (buffer=), or raise the budget (dvrfs mount --stream-memory)",
            spec.dir.name(),
            mib(buffer_bytes),
            mib(total),
            mib(budget),
            mib(used),
        )))
    }
}

impl Stream {
    /// An application read of an idle read stream starts it, as if it were opened
    /// now: its clock (the first byte is due one slack from now) and its prefetch.
    pub(super) fn wake(&mut self, now: Now) {
        if !self.idle {
            return;
        }
        debug_assert_eq!(self.info.dir, StreamDir::Read, "only read streams idle");
        debug_assert!(self.chunks.is_empty(), "an idle stream prefetched nothing");
        self.idle = false;
        self.credit = -(self.info.slack_ns as f64 / 1e9 * self.rate);
        self.credit_at = now.mono_ns;
    }
}

#[cfg(test)]
mod tests {
    use super::mib;

    #[test]
    fn sizes_in_a_refusal_read_as_mib_or_kib() {
        assert_eq!(mib(256 << 20), "256 MiB");
        assert_eq!(mib(512 << 10), "512 KiB");
        assert_eq!(mib(1000), "1 KiB");
    }
}
