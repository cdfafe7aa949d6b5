//! The tail log in the engine (FORMAT.md section 11a): a recording's partial request
//! is made durable by logging its bytes in the next commit, one sequential write at
//! the ring's head, instead of a short write in place (a positioning per stream)
//! at every gather point.
//!
//! **Gather.** At a stream's gather point (`stream/recording.rs`), on a volume with
//! the log, the bytes of its partial request not yet logged (`[logged_len,
//! fill_len)` of the request being filled) are copied into a pending entry; the
//! stream goes on filling the same request, and writes it in place when it is full,
//! as without the log. A gather makes the superblock dirty, so the cadence cuts a
//! commit.
//!
//! **Whole requests of logging recordings** (`stream/tail_log.rs`: a request that
//! does not fill within `D`). A full request is written out due only at its buffer's
//! overflow ([`Engine::tail_log_defer_full`]), not by the next commit: its bytes not
//! yet logged stay recorded against it, with room held for them in the ring
//! (`reserved_blocks`, counted by every room check), and the next gather point logs
//! them from the request's buffer, before the request being filled
//! (`tail_log_in_flight`), unless the request is applied first, when the next commit
//! carries them ([`Engine::tail_log_landed`]). Their entry dies when that request is
//! applied and committed, as any other. Without room the request is due by the next
//! commit, as before. A fast recording keeps that rule: its full requests are never
//! logged.
//!
//! **Cut.** Right before a transaction is cut, the pending entries become one batch
//! at the log's head ([`Engine::tail_log_cut`]); the superblock of that transaction
//! names it inside `[tail, head)`. The commit job writes the batch before its data
//! flush, which therefore makes it durable before the journal write that commits
//! it (`commit.rs`, stage `TailLog`): a transaction never names a batch that might
//! not be on the media.
//!
//! **Liveness.** An entry dies once its bytes are in place and applied (the file's
//! applied size reaches its end: the full request covering them was written), or
//! its file is gone (freed, or the number reused with another generation), or the
//! file was truncated after it was logged (its floor passed the batch,
//! `volume/tail_log.rs`). At every cut the tail moves to the oldest batch with a live
//! entry. Since an applied size, a generation and a floor only ever make an entry
//! dead in the state a cut commits, a committed tail never passes bytes that are
//! not in place in that same transaction.
//!
//! **Ring full.** A gather whose entry does not fit between the head and the live
//! tail is not logged: the stream writes its partial request in place, as without
//! the log (`StreamStats::tail_log_full`), and the streams whose entries hold the
//! tail write theirs in place too, so the tail moves once those writes are applied.
//! A live entry is never overwritten.
//!
//! **Replay** at a writable open: the plan `Volume::load` made
//! (`volume/tail_log.rs`) is written through the ordinary write path, as best-effort
//! writes of the engine's own; their batches stay live until the writes are applied,
//! and the commit that follows moves the tail past them.

use super::stream::InFlightUnlogged;
use super::{Engine, IoBuf, Now, Op, StreamId};
use crate::device::AlignedBuf;
use crate::error::Result;
use crate::format::tail_log::{batch_blocks, encode_batch, ENTRIES_PER_HEADER};
use crate::format::META_BLOCK_BYTES;
use crate::meta::Ino;
use crate::volume::tail_log::ReplayWrite;
use std::collections::VecDeque;

/// Owner id of the replay's writes (for per-issuer policies; their completions go
/// to the tail log, not to a driver).
pub(super) const TAIL_REPLAY_OWNER: u32 = 0x7FFF_FFFE;

/// An entry logged in a batch, as long as it may be live.
struct LiveEntry {
    ino: Ino,
    generation: u32,
    end_bytes: u64,
    /// The stream that logged it (none for a replayed entry).
    stream: Option<StreamId>,
}

/// A batch committed or being committed.
struct LiveBatch {
    pos: u64,
    blocks: u64,
    entries: Vec<LiveEntry>,
}

/// Bytes handed over since the last cut.
struct Pending {
    stream: StreamId,
    ino: Ino,
    generation: u32,
    offset_bytes: u64,
    bytes: Vec<u8>,
}

/// The engine's tail-log state.
pub(super) struct TailLog {
    ring_blocks: u64,
    /// The log position the next batch takes.
    head: u64,
    batches: VecDeque<LiveBatch>,
    pending: Vec<Pending>,
    /// Ring blocks held for bytes of requests being written that the next gather
    /// logs (`stream/tail_log.rs`, `InFlightUnlogged`): counted as used by every
    /// room check, so that gather always fits.
    reserved_blocks: u64,
    /// Replay writes not yet completed.
    replaying: usize,
}

/// A batch cut with a transaction: what the commit job writes.
pub(super) struct CutBatch {
    pos: u64,
    entries: Vec<(u32, u32, u64, Vec<u8>)>,
}

impl TailLog {
    pub(super) fn new(ring_blocks: u64, head: u64) -> TailLog {
        TailLog {
            ring_blocks,
            head,
            batches: VecDeque::new(),
            pending: Vec::new(),
            reserved_blocks: 0,
            replaying: 0,
        }
    }

    /// Blocks the pending entries take as a batch, with `extra` more bytes.
    fn pending_blocks_with(&self, extra: Option<u64>) -> u64 {
        let lens = self
            .pending
            .iter()
            .map(|p| p.bytes.len() as u64)
            .chain(extra);
        let n = self.pending.len() + extra.is_some() as usize;
        if n == 0 {
            0
        } else {
            batch_blocks(lens)
        }
    }

    pub(super) fn replaying(&self) -> bool {
        self.replaying > 0
    }

    /// Whether the pending entries with `extra` more bytes, the held blocks and
    /// `reserve` more fit between the live tail and the end of the ring.
    fn fits(&self, tail: u64, extra: Option<u64>, reserve: u64) -> bool {
        self.head + self.pending_blocks_with(extra) + self.reserved_blocks + reserve - tail
            <= self.ring_blocks
    }
}

/// Ring blocks held for `n` bytes logged later: their data blocks, and a header
/// block (an entry adds at most one to its batch).
fn reserve_for(n: u64) -> u64 {
    crate::format::tail_log::data_blocks(n) + 1
}

impl Engine {
    /// Whether entry `e` of the batch at `pos` may still be needed at recovery.
    fn entry_live(&self, pos: u64, e: &LiveEntry) -> bool {
        self.vol.file_generation(e.ino) == Some(e.generation)
            && self.vol.tail_floor(e.ino) <= pos
            && self.vol.applied_size(e.ino).unwrap_or(0) < e.end_bytes
    }

    /// Drops dead entries and batches; the oldest live batch's position, or the head.
    fn tail_log_prune(&mut self) -> u64 {
        let Some(mut log) = self.tail.take() else {
            return 0;
        };
        for b in log.batches.iter_mut() {
            let pos = b.pos;
            b.entries.retain(|e| self.entry_live(pos, e));
        }
        while log.batches.front().is_some_and(|b| b.entries.is_empty()) {
            log.batches.pop_front();
        }
        let tail = log.batches.front().map_or(log.head, |b| b.pos);
        self.tail = Some(log);
        tail
    }

    /// At a write stream's gather point on a volume with a tail log: logs the bytes
    /// of its partial request not yet logged. Returns false when they must be written
    /// in place instead (the ring is full: the streams holding its tail are made to
    /// write theirs in place as well).
    pub(super) fn tail_log_gather(&mut self, sid: StreamId, now: Now) -> bool {
        if self.tail.is_none() || !self.vol.is_writable() {
            return false;
        }
        let (ino, n) = self.streams[&sid].unlogged();
        let Some(generation) = self.vol.file_generation(ino) else {
            return false;
        };
        // First the requests being written that left their last bytes to the log:
        // the ring holds room for them.
        self.tail_log_in_flight(sid);
        if n == 0 {
            // Nothing new in the request being filled.
            self.vol.touch_superblock();
            return true;
        }
        let tail = self.tail_log_prune();
        let log = self.tail.as_ref().expect("checked above");
        if !log.fits(tail, Some(n as u64), 0) {
            self.streams
                .get_mut(&sid)
                .expect("listed")
                .count_tail_log_full();
            self.qos.tail_log_full += 1;
            self.tail_log_free_tail(sid, now);
            return false;
        }
        let (offset_bytes, bytes) = self.streams.get_mut(&sid).expect("listed").take_unlogged();
        self.qos.tail_logged_bytes += bytes.len() as u64;
        let log = self.tail.as_mut().expect("checked above");
        log.pending.push(Pending {
            stream: sid,
            ino,
            generation,
            offset_bytes,
            bytes,
        });
        // The next commit must cut, even with nothing else dirty.
        self.vol.touch_superblock();
        true
    }

    /// Logs the bytes of stream `sid`'s requests being written that wait for the log
    /// (they lie before the request being filled, so its entry follows them and
    /// replay chains them), releasing the room held for them.
    /// Each request's own file: the stream may have rolled on to another since.
    fn tail_log_in_flight(&mut self, sid: StreamId) {
        let parts = self.streams[&sid].in_flight_unlogged();
        for (op, u) in parts {
            let at = self.streams[&sid]
                .request_at(op)
                .expect("an unlogged request is being written");
            let (from, len) = (
                (u.from_bytes - at) as usize,
                (u.end_bytes - u.from_bytes) as usize,
            );
            let bytes = match self.ops.get(&op).map(|o| &o.body) {
                Some(super::Body::Write { data, .. }) => match data.bytes() {
                    Some(b) => b[from..from + len].to_vec(),
                    None => vec![0; len],
                },
                _ => unreachable!("a stream's request being written is a write"),
            };
            let s = self.streams.get_mut(&sid).expect("listed");
            s.settle_in_flight(op);
            s.count_logged(len as u64);
            self.qos.tail_logged_bytes += len as u64;
            let generation = self.vol.file_generation(u.ino);
            let log = self
                .tail
                .as_mut()
                .expect("bytes are left to the log only with one");
            log.reserved_blocks -= u.reserved_blocks;
            // A file removed since has nothing to keep.
            if let Some(generation) = generation {
                log.pending.push(Pending {
                    stream: sid,
                    ino: u.ino,
                    generation,
                    offset_bytes: u.from_bytes,
                    bytes,
                });
            }
        }
    }

    /// A logging recording's request is full (`stream/tail_log.rs`): it is written
    /// out due only at its buffer's overflow, and its bytes not yet logged are left
    /// to the next gather point, with room held for them in the ring. False (and
    /// nothing done) for a fast recording, without a writable log, or when the ring
    /// has no room: the request is then due by the next commit, as before.
    pub(super) fn tail_log_defer_full(&mut self, sid: StreamId, now: Now) -> bool {
        if self.tail.is_none() || !self.vol.is_writable() {
            return false;
        }
        let s = &self.streams[&sid];
        if !s.fills_slower_than_durable() {
            return false;
        }
        let (ino, n) = s.unlogged();
        let (from, end, first_ns) = s.unlogged_fill();
        let reserve = if n == 0 { 0 } else { reserve_for(n as u64) };
        let tail = self.tail_log_prune();
        let log = self.tail.as_mut().expect("checked above");
        if !log.fits(tail, None, reserve) {
            return false;
        }
        log.reserved_blocks += reserve;
        self.stream_write_out(sid, now, None);
        if n > 0 {
            self.streams
                .get_mut(&sid)
                .expect("listed")
                .leave_to_log(InFlightUnlogged {
                    ino,
                    from_bytes: from,
                    end_bytes: end,
                    first_ns,
                    reserved_blocks: reserve,
                });
        }
        true
    }

    /// Request `op` of stream `sid` was applied: bytes it left to the log and that
    /// were not logged yet go with the next commit; the room held for them is free.
    pub(super) fn tail_log_landed(&mut self, sid: StreamId, op: super::OpId) {
        let Some(u) = self
            .streams
            .get_mut(&sid)
            .and_then(|s| s.settle_in_flight(op))
        else {
            return;
        };
        let log = self
            .tail
            .as_mut()
            .expect("bytes are left to the log only with one");
        log.reserved_blocks -= u.reserved_blocks;
    }

    /// The ring is full: every stream whose logged bytes hold the tail and are still
    /// only in its partial request writes that request in place (`except` is the
    /// stream at hand, which does so itself), due by the next commit.
    fn tail_log_free_tail(&mut self, except: StreamId, now: Now) {
        let Some(front) = self.tail.as_ref().and_then(|l| l.batches.front()) else {
            return;
        };
        let holders: Vec<(StreamId, Ino, u64)> = front
            .entries
            .iter()
            .filter_map(|e| e.stream.map(|s| (s, e.ino, e.end_bytes)))
            .filter(|&(s, _, _)| s != except)
            .collect();
        let lead = self.gather_lead();
        for (sid, ino, end) in holders {
            if self
                .streams
                .get(&sid)
                .is_some_and(|s| s.partial_holds(ino, end))
            {
                let cap = now.mono_ns + lead;
                self.stream_write_out(sid, now, Some(cap));
            }
        }
    }

    /// A truncation of `ino`: bytes of it handed over but not yet in a batch are not
    /// logged (the file's floor makes the batches before dead).
    pub(super) fn tail_log_forget(&mut self, ino: Ino) {
        if let Some(log) = self.tail.as_mut() {
            log.pending.retain(|p| p.ino != ino);
        }
    }

    /// Right before a cut: the pending entries become a batch at the head, and the
    /// superblock gets the new `[tail, head)`. The caller encodes the batch with the
    /// transaction's number ([`Engine::tail_log_writes`]).
    pub(super) fn tail_log_cut(&mut self) -> Option<CutBatch> {
        self.tail.as_ref()?;
        let tail = self.tail_log_prune();
        let log = self.tail.as_mut().expect("checked above");
        let mut cut = None;
        if !log.pending.is_empty() {
            let pending = std::mem::take(&mut log.pending);
            let blocks = batch_blocks(pending.iter().map(|p| p.bytes.len() as u64));
            let pos = log.head;
            // The gathers checked the room against a tail that can only have moved on.
            assert!(
                pos + blocks + log.reserved_blocks - tail <= log.ring_blocks,
                "a tail-log batch of {blocks} blocks at {pos} would overwrite the live tail at {tail}"
            );
            log.head += blocks;
            log.batches.push_back(LiveBatch {
                pos,
                blocks,
                entries: pending
                    .iter()
                    .map(|p| LiveEntry {
                        ino: p.ino,
                        generation: p.generation,
                        end_bytes: p.offset_bytes + p.bytes.len() as u64,
                        stream: Some(p.stream),
                    })
                    .collect(),
            });
            cut = Some(CutBatch {
                pos,
                entries: pending
                    .into_iter()
                    .map(|p| (p.ino, p.generation, p.offset_bytes, p.bytes))
                    .collect(),
            });
        }
        let head = log.head;
        let tail = if log.batches.is_empty() { head } else { tail };
        self.vol.set_tail_log_bounds(tail, head);
        cut
    }

    /// The device writes of a cut batch for transaction `txn`: one, or two where it
    /// wraps around the end of the ring.
    pub(super) fn tail_log_writes(&self, cut: CutBatch, txn: u64) -> Vec<(u64, AlignedBuf)> {
        let sb = self.vol.superblock();
        let entries: Vec<(u32, u32, u64, &[u8])> = cut
            .entries
            .iter()
            .map(|(i, g, o, b)| (*i, *g, *o, &b[..]))
            .collect();
        debug_assert!(entries.len().div_ceil(ENTRIES_PER_HEADER) >= 1);
        let bytes = encode_batch(&sb.uuid, txn, cut.pos, &entries);
        let blocks = (bytes.len() / META_BLOCK_BYTES) as u64;
        let first = blocks.min(sb.tail_log_blocks - cut.pos % sb.tail_log_blocks);
        let mut out = vec![];
        for (from, n) in [(0, first), (first, blocks - first)] {
            if n == 0 {
                continue;
            }
            let mut buf = AlignedBuf::zeroed(n as usize * META_BLOCK_BYTES);
            let at = from as usize * META_BLOCK_BYTES;
            buf.copy_from_slice(&bytes[at..at + n as usize * META_BLOCK_BYTES]);
            out.push((sb.tail_log_offset(cut.pos + from), buf));
        }
        out
    }

    /// At a writable open: writes what the tail log holds beyond the files' sizes
    /// (the plan of `Volume::load`). Their batches stay live until the writes are
    /// applied.
    pub(super) fn tail_log_start_replay(&mut self, now: Now) {
        let plan: Vec<ReplayWrite> = self.vol.take_tail_replay();
        let Some(log) = self.tail.as_mut() else {
            return;
        };
        for w in &plan {
            let entry = LiveEntry {
                ino: w.ino,
                generation: w.generation,
                end_bytes: w.offset_bytes + w.bytes.len() as u64,
                stream: None,
            };
            match log.batches.back_mut().filter(|b| b.pos == w.batch_pos) {
                Some(b) => b.entries.push(entry),
                None => log.batches.push_back(LiveBatch {
                    pos: w.batch_pos,
                    blocks: 0,
                    entries: vec![entry],
                }),
            }
        }
        log.replaying = plan.len();
        for w in plan {
            let op = Op::Write {
                ino: w.ino,
                offset: w.offset_bytes,
                data: IoBuf::from_slice(&w.bytes),
            };
            self.submit_own(op, None, TAIL_REPLAY_OWNER, None, now);
        }
        if self.tail.as_ref().is_some_and(|l| l.replaying == 0) {
            self.vol.tail_replay_done();
        }
    }

    /// A replay write finished (its completion is the tail log's, not a driver's).
    pub(super) fn tail_replay_write_done(&mut self, result: Result<super::Output>) {
        let log = self
            .tail
            .as_mut()
            .expect("replay writes come from the tail log");
        log.replaying -= 1;
        if let Err(e) = result {
            // Its batch stays live: the next open tries again.
            self.vol
                .tail_replay_problem(format!("a replay write failed: {e}; kept in the log"));
        }
        if log_done(self.tail.as_ref()) {
            self.vol.tail_replay_done();
            // The tail moves past the replayed batches with the next commit.
            self.commit.want_now();
        }
    }

    /// A read of `ino` at `offset` into `buf`, whose first `bytes` bytes are
    /// planned (the committed file, and what write streams hold): on a read-only
    /// open, the bytes the tail log would replay past the committed size are read
    /// from memory (`volume/tail_log.rs`, `Volume::logged_tail`), so `get`, `play` and
    /// the sizes `stat` and `ls` show agree on what was made durable. Past the disk's
    /// bytes the buffer was zeroed (`overlay_stream_writes`: the size counts these
    /// bytes). Returns the read's new length.
    pub(in crate::engine) fn overlay_logged_tail(
        &self,
        ino: Ino,
        offset: u64,
        buf: &mut IoBuf,
        bytes: usize,
    ) -> usize {
        let Some(t) = self.vol.logged_tail(ino) else {
            return bytes;
        };
        let end = offset + buf.len() as u64;
        let (from, to) = (t.from_bytes.max(offset), t.end_bytes().min(end));
        if from >= to {
            return bytes;
        }
        // The committed file ends where the logged bytes start: a plan of the disk
        // never reaches into them.
        assert!(
            offset + bytes as u64 <= t.from_bytes.max(offset),
            "a read of inode {ino} planned past its committed size"
        );
        let (d, s, n) = (
            (from - offset) as usize,
            (from - t.from_bytes) as usize,
            (to - from) as usize,
        );
        if let Some(b) = buf.bytes_mut() {
            b[d..d + n].copy_from_slice(&t.bytes[s..s + n]);
        }
        bytes.max(d + n)
    }

    /// Replay writes still running (the blocking driver's open waits for them).
    pub(super) fn tail_log_replaying(&self) -> bool {
        self.tail.as_ref().is_some_and(TailLog::replaying)
    }

    /// The live part of the ring, for `dvrfs status` and tests: (tail, head, live
    /// batches, blocks in them).
    pub fn tail_log_state(&self) -> Option<(u64, u64, usize, u64)> {
        let log = self.tail.as_ref()?;
        let (tail, _) = self.vol.tail_log_bounds();
        Some((
            tail,
            log.head,
            log.batches.len(),
            log.batches.iter().map(|b| b.blocks).sum(),
        ))
    }
}

fn log_done(log: Option<&TailLog>) -> bool {
    log.is_some_and(|l| l.replaying == 0)
}
