//! The workload client: the stream clients of AVFS 2.1 and the best-effort generators,
//! as a state machine that only submits operations and reacts to their completions.
//!
//! Two drivers run it: the simulator (virtual time, the engine called directly) and
//! `dvrfs bench` (wall-clock time, through the runtime), so a `bench` run and a `sim`
//! run of the same workload and seed issue the same operations with the same
//! deadlines. The driver gives the client a [`Host`]: a way to submit an operation,
//! to run a namespace operation before the run, to ask the metadata a question, and a
//! timer ([`Host::schedule`]) that calls [`Client::event`] back at a given time.
//!
//! A stream moves `request_bytes` per request at its rate (period
//! `P = request_bytes / rate`) and may have `depth` requests outstanding; see the
//! module docs of `sim` for the issue times and deadlines. Everything random comes
//! from the seeded generator the client is given.

use super::{BestEffort, SimConfig, BE_START_NS, PHOTO_COUNT};
use crate::engine::{IoBuf, Op, OpId, Output};
use crate::error::{Error, Result};
use crate::meta::Ino;
use crate::volume::{OpenMode, Volume};
use rand_chacha::rand_core::RngCore;
use rand_chacha::ChaCha8Rng;
use std::collections::BTreeMap;

mod chunks;
mod engine_streams;
mod trick;

use chunks::ChunkRoll;
use trick::Trick;

/// Owner ids: streams are 0..n; the best-effort generator and the sync client follow.
const BE_OWNER_OFFSET: u32 = 0;
const SYNC_OWNER_OFFSET: u32 = 1;

/// What the client asks its driver to do.
pub trait Host {
    /// Submits `op` at time `now` (ns of the run), with an absolute deadline (ns of
    /// the run) or none (best effort). Its completion goes to [`Client::completed`].
    fn submit(&mut self, op: Op, deadline_ns: Option<u64>, owner: u32, now: u64) -> Result<OpId>;
    /// Runs a namespace operation before the run starts, to completion; the new
    /// inode for a create or mkdir.
    fn namespace(&mut self, op: Op) -> Result<Ino>;
    /// Calls [`Client::event`] with `ev` at `at_ns`.
    fn schedule(&mut self, at_ns: u64, ev: ClientEv);
    /// Requests a stream could not issue: misses (see `qos::Recorder::not_issued`).
    fn not_issued(&mut self, count: u64, no_space: bool);
    /// A question to the metadata in memory. A host without a dvrfs volume (`bench
    /// --dir`: files of another file system) answers the questions below itself and
    /// gives an error here.
    fn query<R: Send + 'static>(
        &mut self,
        f: impl FnOnce(&Volume) -> R + Send + 'static,
    ) -> Result<R>;

    // The client's questions to the namespace; by default, answered by `query`.

    /// The root directory.
    fn root(&mut self) -> Result<Ino> {
        self.query(|v| v.root())
    }
    /// The entry `name` of directory `parent`, if there is one.
    fn lookup(&mut self, parent: Ino, name: Vec<u8>) -> Result<Option<Ino>> {
        self.query(move |v| v.lookup(parent, &name).ok())
    }
    /// The file at `path`: its inode and size.
    fn file(&mut self, path: &str) -> Result<(Ino, u64)> {
        let path = path.to_string();
        self.query(move |v| -> Result<_> {
            let ino = v.resolve(&path)?;
            Ok((ino, v.stat(ino)?.size_bytes))
        })?
    }
    /// The file at `path` as an unlink names it: its directory, its name, its size.
    fn unlink_target(&mut self, path: &str) -> Result<(Ino, Vec<u8>, u64)> {
        let path = path.to_string();
        self.query(move |v| -> Result<_> {
            let (p, n) = v.resolve_parent(&path)?;
            let size = v.stat(v.lookup(p, n)?)?.size_bytes;
            Ok((p, n.to_vec(), size))
        })?
    }
    /// The sizes of files (0 for `None` and for a file that cannot be stat'ed).
    fn sizes(&mut self, inos: Vec<Option<Ino>>) -> Result<Vec<u64>> {
        self.query(move |v| {
            inos.iter()
                .map(|i| i.map_or(0, |ino| v.stat(ino).map_or(0, |s| s.size_bytes)))
                .collect::<Vec<u64>>()
        })
    }
}

/// The client's timer events.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum ClientEv {
    /// Stream `s` issues its next request.
    Issue(u32),
    /// The best-effort generator issues its next operation.
    BeTick,
    /// The application fsync ([`SimConfig::fsync_every_ns`]).
    Sync,
}

pub(super) struct Stream {
    pub(super) write: bool,
    /// A trick-play reader's reads (`t` terms).
    trick: Option<Trick>,
    ino: Ino,
    pub(super) period_ns: u64,
    pub(super) t0_ns: u64,
    next_k: u64,
    pub(super) outstanding: u32,
    blocked: bool,
    stopped: bool,
    file_bytes: u64,
    start_offset: u64,
    /// A recording made as an engine stream ([`SimConfig::stream_recordings`]): its
    /// id once admitted (`None` while the open is in flight).
    sid: Option<crate::engine::StreamId>,
    /// Bits per second.
    rate_bps: f64,
    /// Completion time per request (the [`series_stream`], for the buffer-level series).
    pub(super) done_ns: Vec<u64>,
    /// A recording cut into chunks (runs with retention: `chunks.rs`).
    chunk: Option<ChunkRoll>,
}

/// The stream whose buffer level a run plots: the first playback, else the first
/// recording.
pub(super) fn series_stream(streams: &[Stream]) -> Option<u32> {
    streams
        .iter()
        .position(|s| !s.write && s.trick.is_none())
        .or(if streams.is_empty() { None } else { Some(0) })
        .map(|i| i as u32)
}

#[derive(Clone, Copy, Debug)]
enum Purpose {
    Stream {
        s: u32,
    },
    /// An engine stream's open (see `engine_streams`).
    StreamOpen {
        s: u32,
    },
    /// The create of a chunked recording's next chunk (`chunks.rs`), named for
    /// request `named_k`.
    ChunkCreate {
        s: u32,
        named_k: u64,
    },
    BestEffort,
    Sync,
}

#[derive(Default)]
struct BeState {
    /// Operations of the generator in flight.
    in_flight: u32,
    /// Greedy read: the file and the next offset.
    read_ino: Ino,
    read_bytes: u64,
    offset: u64,
    /// Greedy write / photos: the file being written.
    ino: Ino,
    file_left: u64,
    photos_left: u32,
    /// A create is in flight (its inode comes back in the completion).
    creating: bool,
    /// The finished photo's close is in flight.
    closing: bool,
    done: bool,
    /// Delete: the file to delete.
    victim: Option<String>,
}

/// See the module docs.
pub struct Client {
    cfg: SimConfig,
    rng: ChaCha8Rng,
    pub(super) streams: Vec<Stream>,
    be: BeState,
    purposes: BTreeMap<OpId, Purpose>,
    /// The run is over: nothing more is issued.
    stopped: bool,
    /// Reads failed for their deadline, recordings that could not go on.
    pub failed_reads: u64,
    pub recordings_stopped: u32,
    /// Of them, engine-stream recordings admission refused at open.
    pub recordings_refused: u32,
    /// Sizes of the recordings as of the last completed application fsync.
    pub(super) durable_sizes: Vec<u64>,
    /// Sizes when the fsync in flight was submitted.
    sync_snapshot: Option<Vec<u64>>,
    sync_in_flight: bool,
    sync_submit_ns: u64,
    /// When the delete generator's unlink completed, and whether an fsync submitted
    /// after that has completed.
    pub(super) unlink_done_ns: Option<u64>,
    pub(super) victim_gone_durably: bool,
    /// The delete generator: the victim's size and when its unlink was submitted.
    pub(super) delete_started: Option<(u64, u64)>,
    /// Real memory behind every buffer (a real device) rather than virtual lengths.
    real_buffers: bool,
    /// Buffers of finished operations, for reuse (allocating and zeroing a fresh
    /// aligned buffer per request would cost more than a fast device's transfer).
    pool: Vec<IoBuf>,
    /// Makes a real buffer (default: aligned memory; `bench` gives huge pages).
    alloc: fn(usize) -> IoBuf,
}

/// Buffers kept for reuse.
const POOL_MAX: usize = 64;

fn ns_for_bytes(bytes: u64, rate_bps: f64) -> u64 {
    (bytes as f64 * 8.0 / rate_bps * 1e9).round() as u64
}

impl Client {
    /// A client for `cfg` drawing from `rng` (after the volume was prepared with it).
    /// `real_buffers`: give every read and write real memory (a real device) instead
    /// of virtual lengths (the simulator).
    pub fn new(cfg: &SimConfig, rng: ChaCha8Rng, real_buffers: bool) -> Client {
        Client {
            cfg: cfg.clone(),
            rng,
            streams: Vec::new(),
            be: BeState::default(),
            purposes: BTreeMap::new(),
            stopped: false,
            failed_reads: 0,
            recordings_stopped: 0,
            recordings_refused: 0,
            durable_sizes: Vec::new(),
            sync_snapshot: None,
            sync_in_flight: false,
            sync_submit_ns: 0,
            unlink_done_ns: None,
            victim_gone_durably: false,
            delete_started: None,
            real_buffers,
            pool: Vec::new(),
            alloc: IoBuf::zeroed,
        }
    }

    /// Real buffers come from `alloc` (a driver's own memory, e.g. huge pages).
    pub fn with_allocator(mut self, alloc: fn(usize) -> IoBuf) -> Client {
        self.alloc = alloc;
        self
    }

    fn buf(&mut self, len: usize) -> IoBuf {
        if !self.real_buffers {
            return IoBuf::virtual_len(len);
        }
        match self.pool.iter().position(|b| b.len() == len) {
            Some(i) => self.pool.swap_remove(i),
            None => (self.alloc)(len),
        }
    }

    /// Keeps a finished operation's buffer for reuse.
    fn recycle(&mut self, result: &mut Result<Output>) {
        if !self.real_buffers || self.pool.len() >= POOL_MAX {
            return;
        }
        let taken = match result {
            Ok(Output::Read { buf, .. }) => std::mem::replace(buf, IoBuf::virtual_len(0)),
            Ok(Output::Write { data }) => std::mem::replace(data, IoBuf::virtual_len(0)),
            _ => return,
        };
        if !taken.is_virtual() {
            self.pool.push(taken);
        }
    }

    /// Streams in the workload.
    pub fn streams(&self) -> u32 {
        self.streams.len() as u32
    }

    /// Starts the streams and the best-effort generator on the prepared volume;
    /// `recordings` are its recordings (the delete victim last).
    pub fn start(&mut self, host: &mut impl Host, recordings: &[String]) -> Result<()> {
        self.start_streams(host, recordings)?;
        self.start_best_effort(host, recordings)?;
        // After every namespace operation: the host's runs them to completion and
        // would take an open's completion with them.
        self.open_engine_streams(host)?;
        self.durable_sizes = vec![0; self.streams.len()];
        if self.cfg.fsync_every_ns > 0 {
            host.schedule(self.cfg.fsync_every_ns, ClientEv::Sync);
        }
        Ok(())
    }

    /// The run is over: nothing more is issued (what is outstanding completes).
    pub fn stop(&mut self) {
        self.stopped = true;
    }

    /// Nothing of the client is outstanding.
    pub fn idle(&self) -> bool {
        self.streams.iter().all(|s| s.outstanding == 0) && self.be.in_flight == 0
    }

    /// Stream requests still outstanding (counted as misses when a run is cut).
    pub fn outstanding(&self) -> u64 {
        self.streams.iter().map(|s| s.outstanding as u64).sum()
    }

    fn start_streams(&mut self, host: &mut impl Host, recordings: &[String]) -> Result<()> {
        let mut readable: Vec<String> = recordings.to_vec();
        if self.cfg.best_effort == Some(BestEffort::Delete) {
            readable.pop();
        }
        // The directory of the recordings: created before the run.
        let root = host.root()?;
        let live = host.lookup(root, b"live".to_vec())?;
        let dir = match live {
            Some(d) => d,
            None => host.namespace(Op::Mkdir {
                parent: root,
                name: b"live".to_vec(),
                perm: 0o755,
                uid: 0,
                gid: 0,
            })?,
        };
        let mut sid = 0u32;
        let groups = self.cfg.workload.groups.clone();
        for g in &groups {
            let rate = g.bitrate_bps.unwrap_or(self.cfg.bitrate_bps);
            for _ in 0..g.count {
                let (trick, period_ns) = if g.trick {
                    let (t, p) = Trick::plan(rate, self.cfg.gop_ns, self.cfg.trick_speed);
                    (Some(t), p)
                } else {
                    (None, ns_for_bytes(self.cfg.request_bytes, rate))
                };
                let t0_ns = self.rng.next_u64() % period_ns.max(1);
                let mut st = Stream {
                    write: g.write,
                    trick,
                    ino: 0,
                    period_ns,
                    t0_ns,
                    next_k: 0,
                    outstanding: 0,
                    blocked: false,
                    stopped: false,
                    file_bytes: 0,
                    start_offset: 0,
                    sid: None,
                    rate_bps: rate,
                    done_ns: vec![],
                    chunk: None,
                };
                if g.write && self.cfg.retention.is_some() {
                    self.streams.push(st);
                    self.start_chunked(host, sid, dir)?;
                    host.schedule(t0_ns + period_ns, ClientEv::Issue(sid));
                    sid += 1;
                    continue;
                }
                if g.write {
                    st.ino = host.namespace(Op::Create {
                        parent: dir,
                        name: format!("s{sid:04}.ts").into_bytes(),
                        perm: 0o644,
                        uid: 0,
                        gid: 0,
                    })?;
                } else {
                    if readable.is_empty() {
                        return Err(Error::InvalidArgument(
                            "read streams need recordings to play: use --fill above 0%".into(),
                        ));
                    }
                    // Random files, distinct while there are enough.
                    let i = (self.rng.next_u64() % readable.len() as u64) as usize;
                    let path = if readable.len() > 1 {
                        readable.swap_remove(i)
                    } else {
                        readable[0].clone()
                    };
                    let (ino, size) = host.file(&path)?;
                    if self.cfg.retention.is_some() {
                        // A reader pins what it plays (`chunks.rs`).
                        host.namespace(Op::OpenFile {
                            ino,
                            mode: OpenMode::Read,
                        })?;
                    }
                    st.ino = ino;
                    st.file_bytes = size;
                    let requests_in_file = (st.file_bytes / self.cfg.request_bytes).max(1);
                    st.start_offset =
                        (self.rng.next_u64() % requests_in_file) * self.cfg.request_bytes;
                }
                let first = t0_ns + if g.write { period_ns } else { 0 };
                self.streams.push(st);
                // An engine stream's frames start once it is admitted (`start`).
                if !(g.write && self.cfg.stream_recordings.is_some()) {
                    host.schedule(first, ClientEv::Issue(sid));
                }
                sid += 1;
            }
        }
        Ok(())
    }

    pub(super) fn issue_time(&self, s: u32, k: u64) -> u64 {
        let st = &self.streams[s as usize];
        let d = self.cfg.depth as u64;
        if self.engine_stream(s) {
            self.frame_time(s, k)
        } else if st.write {
            st.t0_ns + (k + 1) * st.period_ns
        } else if k < d {
            st.t0_ns
        } else {
            st.t0_ns + k * st.period_ns
        }
    }

    fn deadline(&self, s: u32, k: u64) -> u64 {
        let st = &self.streams[s as usize];
        let d = self.cfg.depth as u64;
        if st.write {
            self.issue_time(s, k) + d * st.period_ns
        } else {
            st.t0_ns + (d + k) * st.period_ns
        }
    }

    fn submit(
        &mut self,
        host: &mut impl Host,
        op: Op,
        deadline: Option<u64>,
        owner: u32,
        purpose: Purpose,
        now: u64,
    ) -> Result<OpId> {
        let id = host.submit(op, deadline, owner, now)?;
        self.purposes.insert(id, purpose);
        Ok(id)
    }

    /// A timer the client scheduled has come.
    pub fn event(&mut self, host: &mut impl Host, ev: ClientEv, now: u64) -> Result<()> {
        match ev {
            ClientEv::Issue(s) => {
                let st = &self.streams[s as usize];
                if self.stopped || st.stopped {
                    return Ok(());
                }
                if st.outstanding
                    >= if self.engine_stream(s) {
                        1
                    } else {
                        self.cfg.depth
                    }
                {
                    self.streams[s as usize].blocked = true;
                    Ok(())
                } else {
                    self.issue(host, s, now)
                }
            }
            ClientEv::BeTick => self.be_tick(host, now),
            ClientEv::Sync => self.sync_tick(host, now),
        }
    }

    /// Issues request `k` of stream `s` now.
    fn issue(&mut self, host: &mut impl Host, s: u32, now: u64) -> Result<()> {
        if self.engine_stream(s) {
            return self.issue_frame(host, s, now);
        }
        let k = self.streams[s as usize].next_k;
        let deadline = self.deadline(s, k);
        let req = self.cfg.request_bytes;
        let st = &self.streams[s as usize];
        let op = if st.write {
            let (ino, offset) = self.write_target(host, s, k, now)?;
            Op::Write {
                ino,
                offset,
                data: self.buf(req as usize),
            }
        } else if let Some(t) = st.trick {
            let (ino, offset, len) = (
                st.ino,
                t.offset(st.start_offset, k, st.file_bytes),
                t.len(st.file_bytes),
            );
            Op::Read {
                ino,
                offset,
                buf: self.buf(len as usize),
            }
        } else {
            // Playback reads whole, aligned requests and loops over the file's whole
            // requests (a player restarting at a request boundary).
            let whole = (st.file_bytes / req).max(1);
            let pos = ((st.start_offset / req + k) % whole) * req;
            Op::Read {
                ino: st.ino,
                offset: pos,
                buf: self.buf(req as usize),
            }
        };
        self.submit(host, op, Some(deadline), s, Purpose::Stream { s }, now)?;
        let st = &mut self.streams[s as usize];
        st.next_k += 1;
        st.outstanding += 1;
        let next = self.issue_time(s, k + 1).max(now);
        if next < self.cfg.duration_ns {
            host.schedule(next, ClientEv::Issue(s));
        }
        Ok(())
    }

    /// A stream cannot go on: every request it would still have issued is a miss.
    fn stop_stream(&mut self, host: &mut impl Host, s: u32, no_space: bool) {
        let st = &self.streams[s as usize];
        if st.stopped {
            return;
        }
        let mut left = 0;
        let mut k = st.next_k;
        while self.issue_time(s, k) < self.cfg.duration_ns {
            left += 1;
            k += 1;
        }
        host.not_issued(left, no_space);
        let st = &mut self.streams[s as usize];
        st.stopped = true;
        if st.write {
            self.recordings_stopped += 1;
        }
    }

    fn stream_done(&mut self, host: &mut impl Host, s: u32, result: &Result<Output>, now: u64) {
        let st = &mut self.streams[s as usize];
        st.outstanding -= 1;
        if self.cfg.keep_series && Some(s) == series_stream(&self.streams) {
            self.streams[s as usize].done_ns.push(now);
        }
        match result {
            Ok(_) | Err(Error::DeadlineMissed { .. }) => {}
            Err(Error::NoSpace { .. }) => self.stop_stream(host, s, true),
            Err(_) => self.stop_stream(host, s, false),
        }
        let st = &mut self.streams[s as usize];
        if st.blocked && !self.stopped && !st.stopped {
            st.blocked = false;
            host.schedule(now, ClientEv::Issue(s));
        }
    }

    fn start_best_effort(&mut self, host: &mut impl Host, recordings: &[String]) -> Result<()> {
        let Some(kind) = self.cfg.best_effort else {
            return Ok(());
        };
        match kind {
            BestEffort::GreedyRead => {
                let path = recordings.first().cloned().ok_or_else(|| {
                    Error::InvalidArgument(
                        "greedy-read needs a recording to read: use --fill above 0%".into(),
                    )
                })?;
                let (ino, size) = host.file(&path)?;
                self.be.read_ino = ino;
                self.be.read_bytes = size;
            }
            BestEffort::GreedyWrite => {
                let root = host.root()?;
                self.be.ino = host.namespace(Op::Create {
                    parent: root,
                    name: b"greedy.bin".to_vec(),
                    perm: 0o644,
                    uid: 0,
                    gid: 0,
                })?;
                self.be.file_left = u64::MAX;
            }
            BestEffort::Photos => self.be.photos_left = PHOTO_COUNT,
            BestEffort::Delete => self.be.victim = recordings.last().cloned(),
        }
        host.schedule(BE_START_NS, ClientEv::BeTick);
        Ok(())
    }

    /// The best-effort generator issues its next operations: the greedy ones keep
    /// [`SimConfig::be_depth`] in flight, the others one at a time.
    fn be_tick(&mut self, host: &mut impl Host, now: u64) -> Result<()> {
        let depth = match self.cfg.best_effort {
            Some(BestEffort::GreedyRead | BestEffort::GreedyWrite) => self.cfg.be_depth.max(1),
            _ => 1,
        };
        while self.be.in_flight < depth && !self.be.done && !self.stopped {
            self.be_issue(host, now)?;
        }
        Ok(())
    }

    /// Issues one operation of the best-effort generator (or finds it has none left).
    fn be_issue(&mut self, host: &mut impl Host, now: u64) -> Result<()> {
        let owner = self.streams() + BE_OWNER_OFFSET;
        let op = match self.cfg.best_effort {
            Some(BestEffort::GreedyRead) => {
                let size = self.be.read_bytes.max(1);
                let pos = self.be.offset % size;
                let len = self.cfg.be_request_bytes.min(size - pos);
                self.be.offset = pos + len;
                Op::Read {
                    ino: self.be.read_ino,
                    offset: pos,
                    buf: self.buf(len as usize),
                }
            }
            Some(BestEffort::GreedyWrite) => {
                let len = self.cfg.be_request_bytes;
                let op = Op::Write {
                    ino: self.be.ino,
                    offset: self.be.offset,
                    data: self.buf(len as usize),
                };
                self.be.offset += len;
                op
            }
            Some(BestEffort::Photos) => {
                if self.be.file_left == 0 {
                    if self.be.photos_left == 0 {
                        self.be.done = true;
                        return Ok(());
                    }
                    self.be.photos_left -= 1;
                    let n = PHOTO_COUNT - self.be.photos_left;
                    // Sizes uniform in [0.3, 2.3] MB: mean 1.3 MB.
                    self.be.file_left = 300_000 + self.rng.next_u64() % 2_000_001;
                    self.be.offset = 0;
                    self.be.creating = true;
                    Op::Create {
                        parent: host.root()?,
                        name: format!("photo{n:03}.jpg").into_bytes(),
                        perm: 0o644,
                        uid: 0,
                        gid: 0,
                    }
                } else {
                    let len = self.be.file_left.min(self.cfg.be_request_bytes);
                    let op = Op::Write {
                        ino: self.be.ino,
                        offset: self.be.offset,
                        data: self.buf(len as usize),
                    };
                    self.be.offset += len;
                    self.be.file_left -= len;
                    op
                }
            }
            Some(BestEffort::Delete) => {
                let Some(path) = self.be.victim.take() else {
                    self.be.done = true;
                    return Ok(());
                };
                let (parent, name, bytes) = host.unlink_target(&path)?;
                self.delete_started = Some((bytes, now));
                Op::Unlink { parent, name }
            }
            None => return Ok(()),
        };
        self.submit(host, op, None, owner, Purpose::BestEffort, now)?;
        self.be.in_flight += 1;
        Ok(())
    }

    fn be_done(&mut self, host: &mut impl Host, result: Result<Output>, now: u64) -> Result<()> {
        self.be.in_flight -= 1;
        match (self.cfg.best_effort, result) {
            (Some(BestEffort::Photos), Ok(Output::Ino(ino))) if self.be.creating => {
                self.be.creating = false;
                self.be.ino = ino;
            }
            (Some(BestEffort::Photos), Ok(_)) if self.be.closing => self.be.closing = false,
            (Some(BestEffort::Photos), Ok(_)) if self.be.file_left == 0 => {
                // The photo is complete: close it (returns contig preallocation).
                let ino = self.be.ino;
                let owner = self.streams() + BE_OWNER_OFFSET;
                self.submit(
                    host,
                    Op::CloseFile {
                        ino,
                        mode: OpenMode::Write,
                    },
                    None,
                    owner,
                    Purpose::BestEffort,
                    now,
                )?;
                self.be.in_flight += 1;
                self.be.closing = true;
                self.be.ino = 0;
                return Ok(());
            }
            (Some(BestEffort::Delete), Ok(_)) => {
                self.be.done = true;
                self.unlink_done_ns = Some(now);
            }
            (_, Err(Error::NoSpace { .. })) => self.be.done = true,
            (_, Err(e)) => return Err(e),
            _ => {}
        }
        host.schedule(now, ClientEv::BeTick);
        Ok(())
    }

    /// An operation finished; false if it was not the client's.
    pub fn completed(
        &mut self,
        host: &mut impl Host,
        op: OpId,
        result: Result<Output>,
        now: u64,
    ) -> Result<bool> {
        let Some(purpose) = self.purposes.remove(&op) else {
            return Ok(false);
        };
        let mut result = result;
        self.recycle(&mut result);
        match purpose {
            Purpose::Stream { s } => {
                if matches!(result, Err(Error::DeadlineMissed { .. })) {
                    self.failed_reads += 1;
                }
                self.stream_done(host, s, &result, now);
            }
            Purpose::StreamOpen { s } => self.engine_stream_opened(host, s, result, now),
            Purpose::ChunkCreate { s, named_k } => self.chunk_created(host, s, named_k, result),
            Purpose::BestEffort => self.be_done(host, result, now)?,
            Purpose::Sync => {
                self.sync_in_flight = false;
                if result.is_ok() {
                    self.durable_sizes = self.sync_snapshot.take().unwrap_or_default();
                    if self
                        .unlink_done_ns
                        .is_some_and(|t| t <= self.sync_submit_ns)
                    {
                        self.victim_gone_durably = true;
                    }
                }
            }
        }
        Ok(true)
    }

    fn sync_tick(&mut self, host: &mut impl Host, now: u64) -> Result<()> {
        if self.stopped || self.sync_in_flight {
            return Ok(());
        }
        // What this fsync covers: every write applied so far.
        let inos: Vec<Option<Ino>> = self
            .streams
            .iter()
            .map(|st| st.write.then_some(st.ino))
            .collect();
        let sizes = host.sizes(inos)?;
        self.sync_snapshot = Some(sizes);
        self.sync_submit_ns = now;
        let owner = self.streams() + SYNC_OWNER_OFFSET;
        self.submit(host, Op::Fsync, None, owner, Purpose::Sync, now)?;
        self.sync_in_flight = true;
        if now + self.cfg.fsync_every_ns < self.cfg.duration_ns {
            host.schedule(now + self.cfg.fsync_every_ns, ClientEv::Sync);
        }
        Ok(())
    }
}
