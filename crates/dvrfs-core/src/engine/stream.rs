//! Stream reservations: admission, the playout buffer, write-behind and rate control
//! (ABISS 2.2-3.4, brought into the engine).
//!
//! An application opens a stream on a file with a direction, a rate `r`, a request
//! size `d` and a buffer of `depth` requests (or lets dvrfs choose the buffer: the
//! smallest that gives a second of slack and fits). Admission
//! ([`crate::disk::Admission`]) checks the stream against everything already admitted
//! and the best-effort share and refuses, saying what was asked and what is left,
//! when it does not fit. A write stream states how many bytes it will write; that
//! space is held at admission ([`crate::volume::Volume::hold_space`]), so a full disk is
//! reported at open and never after data was accepted.
//!
//! From then on the engine moves the stream's data itself, as real-time requests
//! whose deadlines come from buffer levels:
//!
//! - **Rate control.** The application's position (the *playout point*) may move at
//!   most at rate `r`: a credit grows at `r` up to a burst `b = d / 2` and every byte
//!   read or written spends one (ABISS 3.4). A read or write that runs ahead of its
//!   rate waits for credit: the operation completes later, it is never refused.
//! - **Playout buffer** (read). The engine keeps up to `depth` requests of the file
//!   ahead of the playout point read or on their way. A request for the bytes at
//!   offset `o` is due when the playout point could reach `o` at the earliest:
//!   `now + (o - pp - credit) / r`. At open the credit starts at `-(depth - 1.5) d`, so
//!   the first byte is due one buffer's slack after the open: the start-up latency is
//!   the slack every later request gets, the same guarantee from the first byte on.
//!   The files queued after the stream's own (`Op::StreamQueue`, the chunks of a
//!   stream) continue its offsets: one run of bytes (`stream/playback.rs`).
//! - **Write-behind** (write, `stream/recording.rs`). Bytes the application writes
//!   are copied into the buffer (`depth` requests) and the operation completes at
//!   once; each full request is written at the end of the file, due when the buffer
//!   would overflow if the application kept writing at its rate: `now + (free -
//!   credit) / r`, `free` being the buffer not taken by requests still being written.
//!   A partial request is written before a commit when a byte in it would otherwise
//!   stay off the disk longer than the stream's durability interval, so a crash costs
//!   a recording at most that interval (plus a lead and the commit's time) whatever
//!   its rate. Close writes the last, partial request (due a slack after the close
//!   at the soonest: no byte comes after it, so the buffer cannot overflow), waits
//!   for all of them and gives back the unused held space.
//!
//! A request that completes after its deadline is counted late (a miss, in the QoS
//! recorder and the stream's own figures); its data is still delivered, since a
//! playback wants its bytes even late. A read of the application that finds its data
//! not yet there, or a write that finds the buffer full, waits and counts a stall.
//! The stream's slack (`depth * d - d - b) / r` is what admission plans with
//! (`disk::admission`), a recording's at most its gather period, with the short
//! requests that period makes it write (`stream/admit.rs`).

mod admit;
mod events;
mod expire;
mod hold;
mod memory;
mod playback;
mod recording;
mod roll;
mod share;
mod tail_log;

pub use admit::{gather_period_ns, stream_ask, GatherMode};
pub use hold::RECORDING_BUSY;
pub(super) use hold::STREAM_RELEASE_OWNER;
use playback::PlayFile;
pub use playback::MAX_PLAY_FILES;
pub use recording::GATHER_LEAD_NS;
pub use share::{KeptShare, MAX_KEEP_FRACTION};
pub(super) use tail_log::InFlightUnlogged;

use super::{buf, Body, Engine, IoBuf, Now, Op, OpId, OpState, Output, Stage};
use crate::error::{Error, Result};
use crate::meta::Ino;
use std::collections::{BTreeMap, VecDeque};

/// Identifies an open stream.
pub type StreamId = u32;

/// Scheduler owner ids of streams (per-issuer policies tell them apart).
const STREAM_OWNER_BASE: u32 = 0x8000_0000;

/// A buffer dvrfs chooses gives at least this much slack...
pub const AUTO_SLACK_NS: f64 = 1e9;
/// ...and is never larger than this.
pub const MAX_STREAM_BUFFER_BYTES: u64 = 256 << 20;
/// Largest request of a stream.
pub const MAX_STREAM_REQUEST_BYTES: u64 = 16 << 20;

#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StreamDir {
    /// A playback: the engine prefetches.
    Read,
    /// A recording: the engine writes behind, at the end of the file.
    Write,
}

impl StreamDir {
    pub fn name(self) -> &'static str {
        match self {
            StreamDir::Read => "read",
            StreamDir::Write => "write",
        }
    }
}

/// What a stream asks for.
#[derive(Clone, Debug, PartialEq)]
pub struct StreamSpec {
    pub dir: StreamDir,
    /// Bits per second.
    pub rate_bps: f64,
    /// Bytes per disk request: a multiple of 4096.
    pub request_bytes: u64,
    /// The buffer; `None`: dvrfs chooses it from the device's admission model.
    pub buffer_bytes: Option<u64>,
    /// A write stream: the bytes it will write (held at admission). Ignored for reads.
    pub reserve_bytes: u64,
    /// A read stream: where in the file playback starts. Write streams append at the
    /// end of the file.
    pub start_bytes: u64,
    /// A write stream: at most how long after it is accepted a byte is written and
    /// committed (plus the gather lead and the commit's own time, see the module
    /// docs); `None`: the volume's commit interval. Shorter than the interval it
    /// cannot be (commits are what make bytes durable); longer spares the disk
    /// partial requests of a slow stream. Ignored for reads.
    pub durable_ns: Option<u64>,
    /// A read stream: admitted idle, its buffer not filled until its first
    /// `Op::StreamRead` (a zero-length one starts it without taking a byte); its
    /// clock starts then, as at an open. A reservation made ahead of the reader (the
    /// mount's attribute on a file nobody has open) holds no memory until the file
    /// is opened (`stream/memory.rs`). Ignored for writes.
    pub idle: bool,
}

/// What an admitted stream got.
#[derive(Clone, Debug, PartialEq)]
pub struct StreamInfo {
    pub id: StreamId,
    pub ino: Ino,
    pub dir: StreamDir,
    pub rate_bytes_per_s: f64,
    pub request_bytes: u64,
    /// Buffer, in requests, and in bytes.
    pub depth: u32,
    pub buffer_bytes: u64,
    /// How long after it is issued a request is due: the stream's guarantee.
    pub slack_ns: u64,
    /// Held for a write stream at admission.
    pub reserved_bytes: u64,
    /// Load of the device's real-time share with this stream (1.0 = full).
    pub load: f64,
    /// A write stream's durability interval: accepted bytes are on the disk and
    /// committed within it (plus the gather lead and the commit's time).
    pub durable_ns: u64,
}

/// How a stream has fared.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct StreamStats {
    /// Disk requests completed, and of them completed after their deadline.
    pub requests: u64,
    pub late: u64,
    /// Smallest deadline minus completion, ns (negative: late).
    pub min_margin_ns: Option<i64>,
    /// Application operations that had to wait for data (read) or buffer room
    /// (write) although their rate allowed them to go on.
    pub stalls: u64,
    /// Bytes the application moved.
    pub app_bytes: u64,
    /// Write stream: bytes on disk and applied to the file (durable at the next
    /// commit or fsync).
    pub written_bytes: u64,
    /// Write stream: application writes refused with no space left (past the
    /// reservation on a full volume). Each was refused whole, before a byte of it
    /// was accepted; everything accepted before it is kept.
    pub no_space: u64,
    /// Write stream: requests that landed after the commit they were due for (to
    /// bound a crash's loss, `stream/recording.rs`) but before the buffer would have
    /// overflowed: not misses of the stream's guarantee (`late`), but bytes durable
    /// one commit later than promised.
    pub durability_late: u64,
    /// Write stream, on a volume with a tail log: bytes of partial requests logged
    /// at gather points instead of written in place, and gathers written in place
    /// because the ring was full (`engine/tail_log.rs`).
    pub tail_logged_bytes: u64,
    pub tail_log_full: u64,
}

/// A prefetched request of a read stream.
struct Chunk {
    /// Where in the playback's position space (`stream/playback.rs`).
    offset: u64,
    /// Its file ([`PlayFile::seq`]).
    file: u64,
    len: usize,
    /// The engine's read, while it runs.
    op: Option<OpId>,
    buf: Option<IoBuf>,
    bytes: usize,
    taken: usize,
    error: Option<Error>,
}

/// A request of a write stream being written.
#[derive(Clone, Copy, Debug)]
struct Request {
    /// The engine's write.
    op: OpId,
    /// Its file: the stream's, or the one it wrote before a roll (`stream/roll.rs`).
    ino: Ino,
    /// Where in the file.
    at: u64,
    /// When the stream's buffer would overflow without it: its deadline as the
    /// stream's guarantee (the write may be due sooner, by the commit that makes it
    /// durable).
    overflow_ns: u64,
}

/// An application's read or write waiting on the stream, or a roll
/// (`stream/roll.rs`), which waits its turn behind the writes before it.
struct AppOp {
    id: OpId,
    buf: IoBuf,
    /// A roll: the file the stream's next bytes go to.
    roll_to: Option<Ino>,
    done: usize,
    submit_ns: u64,
    stalled: bool,
}

pub(super) struct Stream {
    info: StreamInfo,
    rate: f64,
    burst: f64,
    credit: f64,
    credit_at: u64,
    /// Read: the playout point; write: where the next accepted byte goes.
    pos: u64,
    // read
    next_fetch: u64,
    /// Read: admitted idle ([`StreamSpec::idle`]): nothing prefetched until a read.
    idle: bool,
    chunks: VecDeque<Chunk>,
    /// Read: the files played, the one at the playout point first, then the one
    /// being fetched and those queued after it, each held (`stream/playback.rs`).
    play: VecDeque<PlayFile>,
    /// Read: the file being fetched, an index into `play`.
    fetch_file: usize,
    /// Read: follows its last file while a recording writes it (`Op::StreamFollow`).
    follow: bool,
    /// Read: at the end of what is there (waiting at a live edge, or a read ended
    /// there): the next bytes start it again as at its open.
    at_edge: bool,
    /// A read came back short (the file shrank): nothing after it is delivered.
    ended: bool,
    /// Read: expired, a file it held deleted for a recording's space (rule 6,
    /// `stream/expire.rs`): every read fails with this reason.
    expired: Option<String>,
    // write
    fill: Option<IoBuf>,
    fill_len: usize,
    /// Bytes of the request being filled already in the tail log (from its start).
    logged_len: usize,
    fill_at: u64,
    /// When the first byte of the request being filled was accepted.
    fill_first_ns: u64,
    /// Requests being written whose last bytes are in neither the tail log nor a
    /// commit yet: a logging recording's full requests, due only at their buffer's
    /// overflow; the next gather point logs those bytes (`stream/tail_log.rs`).
    unlogged_writes: BTreeMap<OpId, tail_log::InFlightUnlogged>,
    /// Requests being written, oldest first.
    writes: VecDeque<Request>,
    error: Option<String>,
    /// The errno of `error`, for the `stream_failed` event.
    errno: Option<u32>,
    virtual_bufs: bool,
    waiting: VecDeque<AppOp>,
    /// Closed: no more operations; removed once nothing of it is in flight.
    closed: bool,
    close_op: Option<OpId>,
    /// `StreamSync`s waiting for the writes in flight when they came (and any since).
    syncs: Vec<OpId>,
    wake_ns: Option<u64>,
    stats: StreamStats,
}

impl Stream {
    /// A stream just admitted: `info`, its rate, burst and first credit, at byte
    /// `start` of its file, idle (a playback that fetches nothing until a read).
    fn new(
        info: StreamInfo,
        (rate, burst, credit): (f64, f64, f64),
        start: u64,
        idle: bool,
        now: Now,
    ) -> Stream {
        let info_ino = info.ino;
        Stream {
            info,
            rate,
            burst,
            credit,
            credit_at: now.mono_ns,
            pos: start,
            next_fetch: start,
            idle,
            chunks: VecDeque::new(),
            play: VecDeque::from([PlayFile {
                seq: 0,
                ino: info_ino,
                from: start,
                base: Some(start),
            }]),
            fetch_file: 0,
            follow: false,
            at_edge: false,
            ended: false,
            expired: None,
            fill: None,
            fill_len: 0,
            logged_len: 0,
            fill_at: start,
            fill_first_ns: now.mono_ns,
            unlogged_writes: BTreeMap::new(),
            writes: VecDeque::new(),
            error: None,
            errno: None,
            virtual_bufs: false,
            waiting: VecDeque::new(),
            closed: false,
            close_op: None,
            syncs: vec![],
            wake_ns: None,
            stats: StreamStats::default(),
        }
    }

    fn credit_at(&self, now: u64) -> f64 {
        let dt = now.saturating_sub(self.credit_at) as f64 / 1e9;
        (self.credit + self.rate * dt).min(self.burst)
    }

    fn update_credit(&mut self, now: u64) {
        self.credit = self.credit_at(now);
        self.credit_at = now;
    }

    /// When the credit reaches `need` bytes.
    fn credit_time(&self, need: f64) -> u64 {
        let missing = need - self.credit;
        if missing <= 0.0 {
            return self.credit_at;
        }
        self.credit_at + (missing / self.rate * 1e9).ceil() as u64
    }

    fn deadline(&self, ahead_bytes: f64, now: u64) -> u64 {
        now + ((ahead_bytes / self.rate) * 1e9).max(0.0) as u64
    }

    /// Bytes in the stream's buffer now: a recording's accepted bytes not yet on the
    /// disk, a playback's prefetched bytes not yet taken (`dvrfs status`).
    pub(super) fn buffered_bytes(&self) -> u64 {
        match self.info.dir {
            StreamDir::Write => self
                .stats
                .app_bytes
                .saturating_sub(self.stats.written_bytes),
            StreamDir::Read => self
                .chunks
                .iter()
                .filter(|c| c.op.is_none() && c.error.is_none())
                .map(|c| c.bytes.saturating_sub(c.taken) as u64)
                .sum(),
        }
    }

    pub(super) fn is_open(&self) -> bool {
        !self.closed
    }

    pub(super) fn info(&self) -> &StreamInfo {
        &self.info
    }

    pub(super) fn stats(&self) -> &StreamStats {
        &self.stats
    }

    fn in_flight(&self) -> bool {
        self.chunks.iter().any(|c| c.op.is_some()) || !self.writes.is_empty()
    }
}

/// Least credit worth waking up for: an eighth of a request (at least 4 KiB), or what
/// the operation still wants.
fn granule(request_bytes: u64, remaining: usize) -> f64 {
    (remaining as f64).min((request_bytes as f64 / 8.0).max(4096.0))
}

fn spec_error(msg: String) -> Error {
    Error::InvalidArgument(msg)
}

impl Engine {
    /// Admits the stream or says why not (`stream_open`, in `stream/events.rs`,
    /// records which).
    fn stream_admit(&mut self, ino: Ino, spec: &StreamSpec, now: Now) -> Result<Output> {
        let interval_ns = self.commit.interval_ns();
        let durable_ns = spec.durable_ns.unwrap_or(interval_ns);
        if spec.dir == StreamDir::Write && durable_ns < interval_ns {
            return Err(spec_error(format!(
                "a recording's durability interval ({} ms) cannot be shorter than the volume's commit interval ({} ms): bytes become durable at commits; ask for at least {} ms, or open the volume with a shorter commit interval",
                durable_ns / 1_000_000,
                interval_ns / 1_000_000,
                interval_ns / 1_000_000
            )));
        }
        self.one_recording_per_file(ino, spec)?;
        let (l, load) = self.admit(ino, spec)?;
        self.check_stream_memory(spec, l.depth as u64 * l.request_bytes)?;
        let (d, depth, rate) = (l.request_bytes, l.depth, l.rate_bytes_per_s);
        let mut reserved = 0;
        let mut owed = 0;
        let start = match spec.dir {
            StreamDir::Read => spec.start_bytes,
            StreamDir::Write => {
                self.vol.check_writable()?;
                let start = self.vol.planned_size(ino)?;
                if spec.reserve_bytes > 0 {
                    // Free space, or on a volume with retention what it can reclaim
                    // (`reclaim.rs`).
                    owed = self.hold_or_reclaim(ino, spec.reserve_bytes)?;
                    reserved = spec.reserve_bytes;
                }
                start
            }
        };
        // Last, when nothing can refuse the stream any more: admission checked that
        // `ino` is a regular file, all `open_file` asks.
        self.stream_hold(ino, spec.dir)?;
        let id = self.next_stream;
        self.next_stream += 1;
        self.owe_space(id, owed);
        let burst = l.burst_bytes() as f64;
        // The guarantee is the buffer's: a recording's requests may be due sooner
        // (durability), which admission planned with.
        let slack_ns = l.buffer_slack_ns() as u64;
        let info = StreamInfo {
            id,
            ino,
            dir: spec.dir,
            rate_bytes_per_s: rate,
            request_bytes: d,
            depth,
            buffer_bytes: depth as u64 * d,
            slack_ns,
            reserved_bytes: reserved,
            load,
            durable_ns,
        };
        let credit = match spec.dir {
            // The first byte is due one slack after the open.
            StreamDir::Read => -(l.buffer_slack_ns() / 1e9 * rate),
            StreamDir::Write => burst,
        };
        let idle = spec.idle && spec.dir == StreamDir::Read;
        let s = Stream::new(info.clone(), (rate, burst, credit), start, idle, now);
        self.streams.insert(id, s);
        self.refresh_gather_lead();
        Ok(Output::Stream(info))
    }

    /// An application read, write or close on a stream: queued on it.
    pub(super) fn stream_submit(&mut self, id: OpId, op: Op, now: Now) -> Result<()> {
        let (sid, buf, dir) = match op {
            Op::StreamRead { stream, buf } => (stream, Some(buf), StreamDir::Read),
            Op::StreamWrite { stream, data } => (stream, Some(data), StreamDir::Write),
            Op::StreamClose { stream } => (stream, None, StreamDir::Read),
            Op::StreamRoll { stream, ino } => return self.stream_roll_submit(id, stream, ino, now),
            op @ (Op::StreamQueue { .. } | Op::StreamFollow { .. }) => {
                match op {
                    Op::StreamQueue { stream, ino, from } => {
                        self.stream_queue_submit(stream, ino, from, now)?
                    }
                    Op::StreamFollow { stream } => self.stream_follow_submit(stream, now)?,
                    _ => unreachable!("matched above"),
                }
                self.completions.push_back(super::Completion {
                    op: id,
                    result: Ok(Output::Done),
                    deadline_ns: None,
                    submit_ns: now.mono_ns,
                    done_ns: now.mono_ns,
                });
                return Ok(());
            }
            Op::StreamSync { stream } => {
                let Some(s) = self.streams.get_mut(&stream).filter(|s| !s.closed) else {
                    return Err(Error::InvalidArgument(format!(
                        "stream {stream} is not open"
                    )));
                };
                s.syncs.push(id);
                if s.info.dir == StreamDir::Write && s.fill_len > 0 {
                    // In place: a sync wants the bytes in the file, not in the log.
                    self.stream_write_out(stream, now, None);
                }
                return Ok(());
            }
            _ => unreachable!("stream_submit of a stream operation"),
        };
        let Some(s) = self.streams.get_mut(&sid).filter(|s| !s.closed) else {
            return Err(Error::InvalidArgument(format!("stream {sid} is not open")));
        };
        match buf {
            None => {
                s.closed = true;
                s.close_op = Some(id);
                for w in std::mem::take(&mut s.waiting) {
                    let e = Error::InvalidArgument(format!("stream {sid} was closed"));
                    self.completions.push_back(super::Completion {
                        op: w.id,
                        result: Err(e),
                        deadline_ns: None,
                        submit_ns: w.submit_ns,
                        done_ns: now.mono_ns,
                    });
                }
                if s.info.dir == StreamDir::Write && s.fill_len > 0 {
                    self.stream_write_out(sid, now, None);
                }
            }
            Some(b) => {
                if dir != s.info.dir {
                    return Err(Error::InvalidArgument(format!(
                        "stream {sid} is a {} stream: it cannot {}",
                        s.info.dir.name(),
                        dir.name()
                    )));
                }
                if let Some(e) = &s.error {
                    return Err(Error::io(
                        "writing behind a stream",
                        std::io::Error::other(e.clone()),
                    ));
                }
                s.virtual_bufs |= b.is_virtual();
                s.wake(now);
                s.waiting.push_back(AppOp {
                    id,
                    buf: b,
                    roll_to: None,
                    done: 0,
                    submit_ns: now.mono_ns,
                    stalled: false,
                });
            }
        }
        Ok(())
    }

    /// Whether `id` is an application operation waiting on a stream.
    pub(super) fn stream_waiting_op(&self, id: OpId) -> Option<StreamId> {
        self.streams
            .iter()
            .find(|(_, s)| s.waiting.iter().any(|w| w.id == id))
            .map(|(sid, _)| *sid)
    }

    /// Cancels a waiting application operation (bytes a write already put in the
    /// buffer stay there).
    pub(super) fn stream_cancel(&mut self, sid: StreamId, id: OpId, now: Now) {
        let s = self.streams.get_mut(&sid).expect("caller found it");
        if let Some(i) = s.waiting.iter().position(|w| w.id == id) {
            let w = s.waiting.remove(i).expect("index found");
            self.stream_finish_app(w, Err(Error::Cancelled), now);
        }
    }

    /// Application operations waiting on streams.
    pub(super) fn stream_ops_waiting(&self) -> usize {
        self.streams
            .values()
            .map(|s| s.waiting.len() + s.syncs.len() + s.close_op.is_some() as usize)
            .sum()
    }

    /// The earliest credit timer of a waiting operation, or gather of a partial
    /// request.
    pub(super) fn stream_wakeup(&self) -> Option<u64> {
        self.streams
            .values()
            .filter_map(|s| s.wake_ns)
            .chain({
                let lead = self.gather_lead();
                self.streams
                    .values()
                    .filter_map(move |s| self.gather_at(s, lead, true))
            })
            .min()
    }

    pub fn stream_info(&self, sid: StreamId) -> Option<(&StreamInfo, &StreamStats)> {
        self.streams.get(&sid).map(|s| (&s.info, &s.stats))
    }

    /// Open streams (closed ones still finishing are not listed).
    pub fn streams(&self) -> impl Iterator<Item = (&StreamInfo, &StreamStats)> {
        self.streams
            .values()
            .filter(|s| !s.closed)
            .map(|s| (&s.info, &s.stats))
    }

    /// Unmount: waiting operations fail, every stream closes (its last partial
    /// request is written).
    pub(super) fn streams_shutdown(&mut self, now: Now) {
        let ids: Vec<StreamId> = self.streams.keys().copied().collect();
        for sid in ids {
            let s = self.streams.get_mut(&sid).expect("listed");
            let waiting = std::mem::take(&mut s.waiting);
            let dir = s.info.dir;
            let fill = s.fill_len > 0;
            s.closed = true;
            for w in waiting {
                self.stream_finish_app(
                    w,
                    Err(Error::InvalidArgument(
                        "the file system is being unmounted".into(),
                    )),
                    now,
                );
            }
            if dir == StreamDir::Write && fill {
                self.stream_write_out(sid, now, None);
            }
        }
    }

    /// Moves every stream's data as far as it can go now. Returns whether anything
    /// changed.
    pub(super) fn streams_step(&mut self, now: Now) -> bool {
        let ids: Vec<StreamId> = self.streams.keys().copied().collect();
        let mut changed = false;
        for sid in ids {
            changed |= match self.streams[&sid].info.dir {
                StreamDir::Read => self.read_stream_step(sid, now),
                StreamDir::Write => self.write_stream_step(sid, now) | self.stream_gather(sid, now),
            };
            changed |= self.stream_syncs_done(sid, now);
            changed |= self.stream_maybe_done(sid, now);
        }
        changed
    }

    /// An engine request of a stream finished.
    pub(super) fn stream_io_done(
        &mut self,
        sid: StreamId,
        op: OpId,
        deadline_ns: Option<u64>,
        result: Result<Output>,
        now: Now,
    ) {
        let Some(s) = self.streams.get_mut(&sid) else {
            return;
        };
        // A write is measured against its buffer's overflow, the stream's guarantee;
        // landing after the sooner durability deadline it was given is counted apart.
        let guarantee = match s.info.dir {
            StreamDir::Write => s.writes.iter().find(|w| w.op == op).map(|w| w.overflow_ns),
            StreamDir::Read => None,
        };
        if let Some(d) = deadline_ns {
            let g = guarantee.unwrap_or(d);
            if g > d && now.mono_ns > d {
                s.stats.durability_late += 1;
            }
            let margin = g as i64 - now.mono_ns as i64;
            s.stats.requests += 1;
            if margin < 0 {
                s.stats.late += 1;
            }
            s.stats.min_margin_ns = Some(s.stats.min_margin_ns.map_or(margin, |m| m.min(margin)));
        }
        match s.info.dir {
            StreamDir::Read => {
                if let Some(c) = s.chunks.iter_mut().find(|c| c.op == Some(op)) {
                    c.op = None;
                    match result {
                        Ok(Output::Read { buf, bytes }) => {
                            c.buf = Some(buf);
                            c.bytes = bytes.min(c.len);
                        }
                        Ok(_) => c.bytes = 0,
                        Err(e) => c.error = Some(e),
                    }
                }
            }
            StreamDir::Write => {
                let Some(i) = s.writes.iter().position(|w| w.op == op) else {
                    return;
                };
                let done = s.writes.remove(i).expect("found");
                match result {
                    Ok(Output::Write { data }) => s.stats.written_bytes += data.len() as u64,
                    Ok(_) => {}
                    Err(e) => {
                        s.errno.get_or_insert(e.errno().unsigned_abs());
                        s.error.get_or_insert_with(|| e.to_string());
                    }
                }
                // Applied: the next commit carries its bytes, logged or not.
                self.tail_log_landed(sid, op);
                self.rolled_file_landed(sid, done.ino, now);
            }
        }
    }

    /// `StreamSync`s complete once nothing the stream accepted before them is still
    /// being written (a read stream's at once). A stream write failure fails them.
    fn stream_syncs_done(&mut self, sid: StreamId, now: Now) -> bool {
        let s = self.streams.get_mut(&sid).expect("listed");
        if s.syncs.is_empty() || !s.writes.is_empty() {
            return false;
        }
        let result = || match &s.error {
            Some(e) => Err(Error::io(
                "writing behind a stream",
                std::io::Error::other(e.clone()),
            )),
            None => Ok(Output::Done),
        };
        let done: Vec<_> = s.syncs.drain(..).map(|id| (id, result())).collect();
        for (op, result) in done {
            self.completions.push_back(super::Completion {
                op,
                result,
                deadline_ns: None,
                submit_ns: now.mono_ns,
                done_ns: now.mono_ns,
            });
        }
        true
    }

    /// A closed stream with nothing left in flight goes away; its close completes.
    fn stream_maybe_done(&mut self, sid: StreamId, now: Now) -> bool {
        let s = &self.streams[&sid];
        if !s.closed || s.in_flight() || s.fill_len > 0 {
            return false;
        }
        let s = self.streams.remove(&sid).expect("listed");
        self.forget_owed(sid);
        self.refresh_gather_lead();
        if s.info.dir == StreamDir::Write {
            self.vol.release_space(s.info.ino);
            // The recording ended: its last frame ends with the file.
            self.index_file_ended(s.info.ino);
        }
        // Unused preallocation goes back with the last holder (`Volume::close_file`).
        match s.info.dir {
            StreamDir::Write => self.stream_release(s.info.ino, StreamDir::Write, now),
            StreamDir::Read => {
                let files: Vec<_> = s.play.iter().copied().collect();
                self.play_files_released(&files, now)
            }
        }
        self.stream_end_event(&s, now);
        if let Some(id) = s.close_op {
            let result = match s.error {
                Some(e) => Err(Error::io(
                    "writing behind a stream",
                    std::io::Error::other(e),
                )),
                None => Ok(Output::StreamClosed(s.stats.clone())),
            };
            self.completions.push_back(super::Completion {
                op: id,
                result,
                deadline_ns: None,
                submit_ns: now.mono_ns,
                done_ns: now.mono_ns,
            });
        }
        true
    }

    fn stream_finish_read(&mut self, w: AppOp, r: Result<usize>, now: Now) {
        let AppOp { buf, .. } = w;
        let id = w.id;
        let submit_ns = w.submit_ns;
        let result = r.map(|bytes| Output::Read { buf, bytes });
        self.completions.push_back(super::Completion {
            op: id,
            result,
            deadline_ns: None,
            submit_ns,
            done_ns: now.mono_ns,
        });
    }

    fn stream_finish_app(&mut self, w: AppOp, r: Result<Output>, now: Now) {
        let result = match r {
            Ok(Output::Write { .. }) => Ok(Output::Write { data: w.buf }),
            Ok(Output::Read { .. }) => Ok(Output::Read {
                bytes: w.done,
                buf: w.buf,
            }),
            other => other,
        };
        self.completions.push_back(super::Completion {
            op: w.id,
            result,
            deadline_ns: None,
            submit_ns: w.submit_ns,
            done_ns: now.mono_ns,
        });
    }

    /// An engine operation on behalf of stream `sid`; its completion goes to the
    /// stream, not to the driver. Started by the next pass of `progress`.
    fn submit_internal(&mut self, op: Op, deadline_ns: u64, sid: StreamId, now: Now) -> OpId {
        self.submit_own(
            op,
            Some(deadline_ns),
            STREAM_OWNER_BASE | sid,
            Some(sid),
            now,
        )
    }

    /// An engine operation of the engine's own (a stream's, the tail log's replay,
    /// retention's unlinks, chain lines and cuts of expired chunks): its completion
    /// is routed by `stream` or `owner`, never to a driver.
    pub(in crate::engine) fn submit_own(
        &mut self,
        op: Op,
        deadline_ns: Option<u64>,
        owner: u32,
        stream: Option<StreamId>,
        now: Now,
    ) -> OpId {
        let id = self.next_op;
        self.next_op += 1;
        debug_assert!(matches!(
            op,
            Op::Read { .. }
                | Op::Write { .. }
                | Op::Append { .. }
                | Op::Truncate { .. }
                | Op::CloseFile { .. }
                | Op::Unlink { .. }
        ));
        let body = Body::of(op);
        self.ops.insert(
            id,
            OpState {
                body,
                deadline_ns,
                owner,
                submit: now,
                stage: Stage::Deferred,
                pieces_left: 0,
                error: None,
                cancelled: false,
                stream,
            },
        );
        self.deferred.push_back(id);
        id
    }
}
