//! The simulation shell: a discrete-event loop in virtual time that drives the real
//! file-system code and a real scheduler policy over a disk model.
//!
//! Nothing here models the file system: recordings are created, filled, aged and
//! deleted through [`Fs`] on a [`SimDevice`], so block placement comes from the real
//! allocator and the metadata traffic from the real journal. The loop turns what that
//! code writes, and what the stream clients read, into disk requests, gives them to a
//! [`Scheduler`], and times each dispatched command on a [`DiskTimer`].
//!
//! Stream clients follow AVFS 2.1. A stream moves `request_bytes` per request at
//! `bitrate` and may have `depth` requests outstanding (its buffer). With
//! `P = request_bytes / rate`:
//! - a **read** (playback) stream issues requests 0..depth at its start time `t0`;
//!   playback of request `k` begins at `t_play + k*P` with `t_play = t0 + (depth-1)*P`,
//!   which is request `k`'s deadline (the buffer would run dry); request `k >= depth`
//!   is issued when request `k - depth` starts playing (its slot frees);
//! - a **write** (recording) stream issues request `k` when its data is complete,
//!   `t0 + (k+1)*P`, with the deadline `(depth-1)*P` later, when the buffer would
//!   overflow.
//!
//! In both, a stream never has more than `depth` requests outstanding: if the slot is
//! still busy the issue waits for it, and the deadline does not move. Playback and
//! recording do not stop for a late request; the late request is a glitch.
//! Everything random comes from one seed (ChaCha8), so a run is reproducible byte for
//! byte.

pub mod device;
pub mod workload;

pub use device::SimDevice;
pub use workload::{StreamGroup, Workload, WorkloadError};

use crate::disk::{Access, AccessTiming};
use crate::error::{Error, Result};
use crate::format::superblock::{AllocPolicy, Superblock};
use crate::fs::{mkfs, Fs, OpenOptions};
use crate::layout::MkfsParams;
use crate::sched::{Class, Command, Counters, Event, ReqId, Request, Scheduler};
use rand_chacha::rand_core::{RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};

/// Times one command on a disk (the HDD model, or a simple one in tests).
pub trait DiskTimer {
    fn service(&mut self, issue_ns: u64, a: &Access) -> AccessTiming;
    fn capacity_bytes(&self) -> u64;
    fn sector_bytes(&self) -> u32;
    fn name(&self) -> String;
}

/// The HDD model as the simulator's disk.
pub struct HddDisk {
    hdd: crate::disk::Hdd,
    model: crate::disk::DiskModel,
}

impl HddDisk {
    pub fn new(model: &crate::disk::DiskModel, seed: u64) -> Self {
        HddDisk {
            hdd: crate::disk::Hdd::new(model, seed),
            model: model.clone(),
        }
    }
}

impl DiskTimer for HddDisk {
    fn service(&mut self, issue_ns: u64, a: &Access) -> AccessTiming {
        self.hdd.service(issue_ns, a)
    }
    fn capacity_bytes(&self) -> u64 {
        self.model.capacity_bytes()
    }
    fn sector_bytes(&self) -> u32 {
        self.model.sector_bytes
    }
    fn name(&self) -> String {
        self.model.name.clone()
    }
}

/// Best-effort traffic that runs beside the streams.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BestEffort {
    /// Copy 100 photos averaging 1.3 MB onto the disk (AVFS 4.3.2).
    Photos,
    /// Read a large file as fast as the disk allows (ABISS 5.1).
    GreedyRead,
    /// Write a new file as fast as the disk allows (ABISS 5.1).
    GreedyWrite,
    /// Delete a large recording while the streams run (AVFS 4.3.1).
    Delete,
}

impl BestEffort {
    pub const NAMES: &'static [&'static str] = &["photos", "greedy-read", "greedy-write", "delete"];

    pub fn parse(s: &str) -> Option<BestEffort> {
        Some(match s {
            "photos" => BestEffort::Photos,
            "greedy-read" => BestEffort::GreedyRead,
            "greedy-write" => BestEffort::GreedyWrite,
            "delete" => BestEffort::Delete,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            BestEffort::Photos => "photos",
            BestEffort::GreedyRead => "greedy-read",
            BestEffort::GreedyWrite => "greedy-write",
            BestEffort::Delete => "delete",
        }
    }
}

/// Photos: count and mean size (AVFS 4.3.2), and when the copy starts.
pub const PHOTO_COUNT: u32 = 100;
pub const PHOTO_MEAN_BYTES: u64 = 1_300_000;
pub const BE_START_NS: u64 = 5_000_000_000;
/// Best-effort generators move at most this much per request.
pub const BE_REQUEST_BYTES: u64 = 512 << 10;
/// Recordings made by `--fill` and `--age` last 15 to 45 minutes at the run's bit rate.
pub const FILL_RECORDING_MIN_S: f64 = 15.0 * 60.0;
pub const FILL_RECORDING_MAX_S: f64 = 45.0 * 60.0;

#[derive(Clone, Debug)]
pub struct SimConfig {
    pub workload: Workload,
    pub alloc: AllocPolicy,
    pub block_bytes: u64,
    pub bitrate_bps: f64,
    pub request_bytes: u64,
    pub depth: u32,
    /// Fraction of the data region filled with recordings before measuring.
    pub fill: f64,
    pub age_cycles: u32,
    pub duration_ns: u64,
    pub best_effort: Option<BestEffort>,
    /// Size of the recording `--best-effort delete` removes.
    pub delete_bytes: u64,
    pub seed: u64,
    pub commit_interval_ms: u32,
    /// Keep per-request series for plots.
    pub keep_series: bool,
}

impl SimConfig {
    pub fn new(workload: Workload) -> Self {
        SimConfig {
            workload,
            alloc: AllocPolicy::Zrr,
            block_bytes: 4 << 20,
            bitrate_bps: 19.39e6,
            request_bytes: 512 << 10,
            depth: 8,
            fill: 0.8,
            age_cycles: 0,
            duration_ns: 3_600_000_000_000,
            best_effort: None,
            delete_bytes: 20_000_000_000,
            seed: 1,
            commit_interval_ms: 1000,
            keep_series: false,
        }
    }
}

/// What one run measured.
#[derive(Clone, Debug, Default)]
pub struct SimOutcome {
    pub elapsed_ns: u64,
    pub streams: u32,
    pub rt_requests: u64,
    pub deadline_misses: u64,
    pub failed_reads: u64,
    /// Completion margin of every real-time request (deadline - completion), ns.
    pub margins_ns: Vec<i64>,
    pub busy_ns: u64,
    /// Device commands, and where their time went (ns summed over all commands).
    pub commands: u64,
    pub seek_ns: u64,
    pub rotation_ns: u64,
    pub transfer_ns: u64,
    pub overhead_ns: u64,
    pub rt_bytes: u64,
    pub be_bytes: u64,
    pub be_requests: u64,
    pub be_latencies_ns: Vec<u64>,
    /// When the first best-effort request was submitted and the last one completed.
    pub be_first_submit_ns: Option<u64>,
    pub be_last_done_ns: u64,
    pub journal_bytes: u64,
    pub journal_requests: u64,
    /// Distance from the end of each dispatched request to the start of the next, bytes.
    pub seek_distances_bytes: Vec<u64>,
    /// Buffer level of stream 0 over time: (virtual ns, bytes).
    pub buffer_level: Vec<(u64, i64)>,
    pub counters: Counters,
    pub disk: String,
    pub scheduler: String,
    pub data_block_bytes: u64,
    pub used_bytes_at_start: u64,
}

const JOURNAL_OWNER_OFFSET: u32 = 0;
const BE_OWNER_OFFSET: u32 = 1;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Ev {
    DiskDone,
    Wake,
    Commit,
    Issue(u32),
    BeTick,
}

#[derive(Clone, Copy, Debug)]
enum Purpose {
    /// Part of request `k` of stream `s`.
    Stream {
        s: u32,
        k: u64,
    },
    Journal,
    BestEffort,
}

struct Stream {
    write: bool,
    ino: u32,
    period_ns: u64,
    t0_ns: u64,
    next_k: u64,
    outstanding: u32,
    blocked: bool,
    /// Read streams: the file's data block of each file block, and where playback starts.
    blocks: Vec<u64>,
    file_bytes: u64,
    start_offset: u64,
    /// Parts still in flight per request.
    parts_left: BTreeMap<u64, u32>,
    /// Completion (or failure) time per request, for the buffer-level series.
    done_ns: Vec<(u64, u64)>,
}

struct Sim<'a, T: DiskTimer> {
    cfg: &'a SimConfig,
    fs: Fs<SimDevice>,
    sb: Superblock,
    disk: &'a mut T,
    sched: &'a mut Scheduler,
    rng: ChaCha8Rng,
    events: BinaryHeap<Reverse<(u64, u64, Ev)>>,
    seq: u64,
    next_id: ReqId,
    /// Every request given to the scheduler: why, its length, deadline and submit time.
    purposes: BTreeMap<ReqId, (Purpose, u64, Option<u64>, u64)>,
    /// The command on the disk and the requests it serves (several when merged).
    busy: Option<(Command, Vec<ReqId>)>,
    next_wake: Option<u64>,
    last_end_lba: Option<u64>,
    streams: Vec<Stream>,
    zeros: Vec<u8>,
    out: SimOutcome,
    be: BeState,
    stopped: bool,
}

#[derive(Default)]
struct BeState {
    in_flight: bool,
    /// Greedy read: the file's blocks and the next offset.
    read_blocks: Vec<u64>,
    read_bytes: u64,
    offset: u64,
    /// Greedy write / photos: the file being written.
    ino: u32,
    file_left: u64,
    photos_left: u32,
    done: bool,
    /// Delete: the file to delete.
    victim: Option<String>,
}

fn ns_for_bytes(bytes: u64, rate_bps: f64) -> u64 {
    (bytes as f64 * 8.0 / rate_bps * 1e9).round() as u64
}

/// Runs one simulation. `make_sched` builds the scheduler (so that `--find-max` can run
/// the same configuration repeatedly).
pub fn run<T: DiskTimer>(
    cfg: &SimConfig,
    disk: &mut T,
    sched: &mut Scheduler,
) -> Result<SimOutcome> {
    if !(0.0..=1.0).contains(&cfg.fill) {
        return Err(Error::InvalidArgument(format!(
            "fill {:.1}% is outside 0..100%",
            cfg.fill * 100.0
        )));
    }
    if cfg.request_bytes == 0
        || !cfg.request_bytes.is_multiple_of(disk.sector_bytes() as u64)
        || !cfg.request_bytes.is_multiple_of(4096)
    {
        return Err(Error::InvalidArgument(format!(
            "request size {} bytes: must be a positive multiple of 4096",
            cfg.request_bytes
        )));
    }
    if cfg.depth == 0 {
        return Err(Error::InvalidArgument("depth must be at least 1".into()));
    }
    let mut rng = ChaCha8Rng::seed_from_u64(cfg.seed);
    let size = disk.capacity_bytes();
    let mut dev = SimDevice::new(size, disk.sector_bytes());
    let mut p = MkfsParams::new(size, seed_uuid(cfg.seed), cfg.seed);
    p.data_block_bytes = cfg.block_bytes;
    p.alloc = cfg.alloc;
    p.commit_interval_ms = cfg.commit_interval_ms;
    let sb = mkfs(&mut dev, &p, &mut |_, _| {})?;
    dev.set_data_region(
        sb.data_start_bytes..sb.data_start_bytes + sb.data_blocks * sb.data_block_bytes,
    );
    let mut fs = Fs::open(dev, OpenOptions::writable())?;
    let zeros = vec![
        0u8;
        (64 << 20)
            .max(cfg.request_bytes as usize)
            .max(cfg.block_bytes as usize)
    ];
    let recordings = setup(&mut fs, cfg, &mut rng, &zeros)?;
    fs.sync()?;
    let _ = fs_dev_mut(&mut fs).take_writes();
    let used_bytes_at_start = fs.info().used_blocks * sb.data_block_bytes;
    let mut sim = Sim {
        cfg,
        sb,
        disk,
        sched,
        rng,
        events: BinaryHeap::new(),
        seq: 0,
        next_id: 1,
        purposes: BTreeMap::new(),
        busy: None,
        next_wake: None,
        last_end_lba: None,
        streams: Vec::new(),
        zeros,
        out: SimOutcome::default(),
        be: BeState::default(),
        stopped: false,
        fs,
    };
    sim.out.used_bytes_at_start = used_bytes_at_start;
    sim.out.data_block_bytes = sim.sb.data_block_bytes;
    sim.start_streams(&recordings)?;
    sim.start_best_effort(&recordings)?;
    sim.push(cfg.commit_interval_ms as u64 * 1_000_000, Ev::Commit);
    sim.run_loop()?;
    sim.finish()
}

/// `--find-max`: the largest count of the workload's first term whose run misses no
/// deadline, and that run. The count doubles from 1 until a run misses, then the gap is
/// bisected; every count reported was simulated and missed nothing. (Misses grow with
/// load but not strictly, so this is the largest count found on that path.) `run_with`
/// runs one configuration. A count of 0 means even one stream of the first term missed.
pub fn find_max(
    cfg: &SimConfig,
    mut run_with: impl FnMut(&SimConfig) -> Result<SimOutcome>,
) -> Result<(SimOutcome, u32)> {
    const LIMIT: u32 = 1 << 14;
    let mut with = |n: u32| {
        let mut c = cfg.clone();
        c.workload = cfg.workload.with_first_count(n);
        run_with(&c)
    };
    let mut good: Option<(SimOutcome, u32)> = None;
    let mut bad = None;
    let mut n = 1;
    while n <= LIMIT {
        let o = with(n)?;
        if o.deadline_misses > 0 {
            bad = Some(n);
            break;
        }
        good = Some((o, n));
        n *= 2;
    }
    let mut lo = good.as_ref().map_or(0, |g| g.1);
    let mut hi = bad.unwrap_or(LIMIT + 1);
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        let o = with(mid)?;
        if o.deadline_misses > 0 {
            hi = mid;
        } else {
            lo = mid;
            good = Some((o, mid));
        }
    }
    match good {
        Some(g) => Ok(g),
        None => Ok((with(1)?, 0)),
    }
}

fn seed_uuid(seed: u64) -> [u8; 16] {
    let mut u = [0u8; 16];
    ChaCha8Rng::seed_from_u64(seed ^ 0x5eed).fill_bytes(&mut u);
    u
}

fn fs_dev_mut(fs: &mut Fs<SimDevice>) -> &mut SimDevice {
    fs.device_mut()
}

/// Fills and ages the file system through the real allocator. Returns the paths of
/// the recordings, the delete victim last (when asked for).
fn setup(
    fs: &mut Fs<SimDevice>,
    cfg: &SimConfig,
    rng: &mut ChaCha8Rng,
    zeros: &[u8],
) -> Result<Vec<String>> {
    let root = fs.root();
    fs.mkdir(root, b"rec", 0o755, 0, 0, 0)?;
    let data_bytes = fs.superblock().data_blocks * fs.superblock().data_block_bytes;
    let target = (data_bytes as f64 * cfg.fill) as u64;
    let mut files: Vec<(String, u64)> = Vec::new();
    let mut n = 0u64;
    let record =
        |fs: &mut Fs<SimDevice>, bytes: u64, n: &mut u64| -> Result<Option<(String, u64)>> {
            let name = format!("fill{:05}.ts", *n);
            *n += 1;
            let dir = fs.resolve("/rec")?;
            let ino = fs.create(dir, name.as_bytes(), 0o644, 0, 0, 0)?;
            let mut off = 0;
            while off < bytes {
                let len = (bytes - off).min(zeros.len() as u64);
                match fs.write(ino, off, &zeros[..len as usize], 0) {
                    Ok(()) => off += len,
                    Err(Error::NoSpace { .. }) => break,
                    Err(e) => return Err(e),
                }
            }
            fs.close_file(ino);
            Ok(Some((format!("/rec/{name}"), off)))
        };
    let rec_bytes = |rng: &mut ChaCha8Rng| -> u64 {
        let secs = FILL_RECORDING_MIN_S + (FILL_RECORDING_MAX_S - FILL_RECORDING_MIN_S) * unit(rng);
        ((secs * cfg.bitrate_bps / 8.0) as u64).max(1)
    };
    let mut victim = None;
    if cfg.best_effort == Some(BestEffort::Delete) {
        let bytes = cfg.delete_bytes.min(target.max(cfg.block_bytes));
        victim = record(fs, bytes, &mut n)?;
    }
    let mut used = fs.info().used_blocks * fs.superblock().data_block_bytes;
    while used < target {
        let bytes = rec_bytes(rng).min(target - used).max(1);
        if let Some(f) = record(fs, bytes, &mut n)? {
            files.push(f);
        }
        used = fs.info().used_blocks * fs.superblock().data_block_bytes;
        if fs.free_bytes() < cfg.block_bytes {
            break;
        }
        fs.tick()?;
    }
    for _ in 0..cfg.age_cycles {
        if files.is_empty() {
            break;
        }
        let i = (rng.next_u64() % files.len() as u64) as usize;
        let (path, bytes) = files.swap_remove(i);
        let (parent, name) = fs.resolve_parent(&path)?;
        let name = name.to_vec();
        fs.unlink(parent, &name, 0)?;
        fs.sync()?;
        let new = rec_bytes(rng).min(bytes.max(cfg.block_bytes) + fs.free_bytes() / 2);
        if let Some(f) = record(fs, new, &mut n)? {
            files.push(f);
        }
    }
    let mut paths: Vec<String> = files
        .into_iter()
        .filter(|(_, b)| *b > 0)
        .map(|(p, _)| p)
        .collect();
    if let Some((v, _)) = victim {
        paths.push(v);
    }
    Ok(paths)
}

fn unit(rng: &mut ChaCha8Rng) -> f64 {
    (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64
}

impl<T: DiskTimer> Sim<'_, T> {
    fn push(&mut self, t: u64, ev: Ev) {
        self.seq += 1;
        self.events.push(Reverse((t, self.seq, ev)));
    }

    fn start_streams(&mut self, recordings: &[String]) -> Result<()> {
        let cfg = self.cfg;
        let mut readable: Vec<String> = recordings.to_vec();
        if cfg.best_effort == Some(BestEffort::Delete) {
            readable.pop();
        }
        let root = self.fs.root();
        let dir = match self.fs.lookup(root, b"live") {
            Ok(d) => d,
            Err(_) => self.fs.mkdir(root, b"live", 0o755, 0, 0, 0)?,
        };
        let mut sid = 0u32;
        for g in &cfg.workload.groups {
            let rate = g.bitrate_bps.unwrap_or(cfg.bitrate_bps);
            for _ in 0..g.count {
                let period_ns = ns_for_bytes(cfg.request_bytes, rate);
                let t0_ns = self.rng.next_u64() % period_ns.max(1);
                let mut st = Stream {
                    write: g.write,
                    ino: 0,
                    period_ns,
                    t0_ns,
                    next_k: 0,
                    outstanding: 0,
                    blocked: false,
                    blocks: vec![],
                    file_bytes: 0,
                    start_offset: 0,
                    parts_left: BTreeMap::new(),
                    done_ns: vec![],
                };
                if g.write {
                    st.ino =
                        self.fs
                            .create(dir, format!("s{sid:04}.ts").as_bytes(), 0o644, 0, 0, 0)?;
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
                    let ino = self.fs.resolve(&path)?;
                    st.ino = ino;
                    st.file_bytes = self.fs.stat(ino)?.size_bytes;
                    st.blocks = self
                        .fs
                        .runs(ino)?
                        .iter()
                        .flat_map(|r| r.start..r.start + r.count as u64)
                        .collect();
                    let requests_in_file = (st.file_bytes / cfg.request_bytes).max(1);
                    st.start_offset = (self.rng.next_u64() % requests_in_file) * cfg.request_bytes;
                }
                self.streams.push(st);
                self.push(t0_ns + if g.write { period_ns } else { 0 }, Ev::Issue(sid));
                sid += 1;
            }
        }
        self.out.streams = sid;
        Ok(())
    }

    fn issue_time(&self, s: u32, k: u64) -> u64 {
        let st = &self.streams[s as usize];
        let d = self.cfg.depth as u64;
        if st.write {
            st.t0_ns + (k + 1) * st.period_ns
        } else if k < d {
            st.t0_ns
        } else {
            st.t0_ns + (d - 1) * st.period_ns + (k - d + 1) * st.period_ns
        }
    }

    fn deadline(&self, s: u32, k: u64) -> u64 {
        let st = &self.streams[s as usize];
        let d = self.cfg.depth as u64;
        if st.write {
            self.issue_time(s, k) + (d - 1) * st.period_ns
        } else {
            st.t0_ns + (d - 1) * st.period_ns + k * st.period_ns
        }
    }

    fn new_request(
        &mut self,
        (offset, len): (u64, u64),
        write: bool,
        deadline: Option<u64>,
        owner: u32,
        purpose: Purpose,
        now: u64,
    ) {
        let id = self.next_id;
        self.next_id += 1;
        let sector = self.disk.sector_bytes() as u64;
        let req = Request {
            id,
            lba: offset / sector,
            sectors: len.div_ceil(sector) as u32,
            write,
            class: if deadline.is_some() {
                Class::RealTime
            } else {
                Class::BestEffort
            },
            deadline_ns: deadline,
            owner,
            submit_ns: now,
            drop_if_late: !write,
        };
        self.purposes.insert(id, (purpose, len, deadline, now));
        self.sched
            .insert(req, now)
            .expect("the simulator's requests are valid");
    }

    /// Issues request `k` of stream `s` now.
    fn issue(&mut self, s: u32, now: u64) -> Result<()> {
        let k = self.streams[s as usize].next_k;
        let deadline = self.deadline(s, k);
        let req_bytes = self.cfg.request_bytes;
        let streams = self.out.streams;
        let mut parts: Vec<(u64, u64)> = Vec::new();
        if self.streams[s as usize].write {
            let ino = self.streams[s as usize].ino;
            match self.fs.write(
                ino,
                k * req_bytes,
                &self.zeros[..req_bytes as usize],
                now as i64,
            ) {
                Ok(()) => {}
                Err(Error::NoSpace { .. }) => return Ok(()), // the disk is full: the recording stops
                Err(e) => return Err(e),
            }
            let data = self.sb.data_start_bytes
                ..self.sb.data_start_bytes + self.sb.data_blocks * self.sb.data_block_bytes;
            for (off, len) in self.fs.device_mut().take_writes() {
                if data.contains(&off) {
                    parts.push((off, len));
                } else {
                    self.journal_write(off, len, now, streams);
                }
            }
        } else {
            let st = &self.streams[s as usize];
            let bs = self.sb.data_block_bytes;
            // Playback reads whole, aligned requests and loops over the file's whole
            // requests (a player restarting at a request boundary), so a request never
            // overlaps the next one.
            let whole = (st.file_bytes / req_bytes).max(1);
            let mut pos = ((st.start_offset / req_bytes + k) % whole) * req_bytes;
            let end = (pos + req_bytes).min(st.file_bytes.max(req_bytes));
            while pos < end {
                let fb = pos / bs;
                let within = pos % bs;
                let len = (end - pos).min(bs - within);
                let Some(&block) = st.blocks.get(fb as usize) else {
                    break;
                };
                parts.push((
                    self.sb.data_offset(block) + within,
                    len.div_ceil(4096) * 4096,
                ));
                pos += len;
            }
        }
        let write = self.streams[s as usize].write;
        let n = parts.len() as u32;
        {
            let st = &mut self.streams[s as usize];
            st.next_k += 1;
            st.outstanding += 1;
            st.parts_left.insert(k, n);
        }
        self.out.rt_requests += 1;
        for (off, len) in parts {
            self.new_request(
                (off, len),
                write,
                Some(deadline),
                s,
                Purpose::Stream { s, k },
                now,
            );
        }
        if n == 0 {
            self.stream_request_done(s, k, now, now);
        }
        // The next request of this stream.
        let next = self.issue_time(s, k + 1).max(now);
        if next < self.cfg.duration_ns {
            self.push(next, Ev::Issue(s));
        }
        Ok(())
    }

    fn journal_write(&mut self, off: u64, len: u64, now: u64, streams: u32) {
        self.out.journal_requests += 1;
        self.out.journal_bytes += len;
        self.new_request(
            (off, len),
            true,
            None,
            streams + JOURNAL_OWNER_OFFSET,
            Purpose::Journal,
            now,
        );
    }

    fn stream_request_done(&mut self, s: u32, k: u64, now: u64, deadline: u64) {
        let margin = deadline as i64 - now as i64;
        if margin < 0 {
            self.out.deadline_misses += 1;
        }
        self.out.margins_ns.push(margin);
        let st = &mut self.streams[s as usize];
        st.outstanding -= 1;
        if s == 0 && self.cfg.keep_series {
            st.done_ns.push((k, now));
        }
        if st.blocked && !self.stopped {
            st.blocked = false;
            self.push(now, Ev::Issue(s));
        }
    }

    fn part_done(&mut self, s: u32, k: u64, now: u64, deadline: u64, failed: bool) {
        let st = &mut self.streams[s as usize];
        let Some(left) = st.parts_left.get_mut(&k) else {
            return;
        };
        *left -= 1;
        if failed {
            // A failed part fails the whole request; later parts are ignored.
            st.parts_left.remove(&k);
            self.out.failed_reads += 1;
            self.stream_request_done(s, k, now.max(deadline + 1), deadline);
            return;
        }
        if *left == 0 {
            st.parts_left.remove(&k);
            self.stream_request_done(s, k, now, deadline);
        }
    }

    fn start_best_effort(&mut self, recordings: &[String]) -> Result<()> {
        let Some(kind) = self.cfg.best_effort else {
            return Ok(());
        };
        match kind {
            BestEffort::GreedyRead => {
                let path = recordings.first().ok_or_else(|| {
                    Error::InvalidArgument(
                        "greedy-read needs a recording to read: use --fill above 0%".into(),
                    )
                })?;
                let ino = self.fs.resolve(path)?;
                self.be.read_bytes = self.fs.stat(ino)?.size_bytes;
                self.be.read_blocks = self
                    .fs
                    .runs(ino)?
                    .iter()
                    .flat_map(|r| r.start..r.start + r.count as u64)
                    .collect();
            }
            BestEffort::GreedyWrite => {
                let root = self.fs.root();
                self.be.ino = self.fs.create(root, b"greedy.bin", 0o644, 0, 0, 0)?;
            }
            BestEffort::Photos => self.be.photos_left = PHOTO_COUNT,
            BestEffort::Delete => self.be.victim = recordings.last().cloned(),
        }
        self.push(BE_START_NS, Ev::BeTick);
        Ok(())
    }

    /// The best-effort generator issues its next request (one at a time).
    fn be_tick(&mut self, now: u64) -> Result<()> {
        if self.be.in_flight || self.be.done || self.stopped {
            return Ok(());
        }
        let owner = self.out.streams + BE_OWNER_OFFSET;
        let streams = self.out.streams;
        match self.cfg.best_effort {
            Some(BestEffort::GreedyRead) => {
                let bs = self.sb.data_block_bytes;
                let pos = self.be.offset % self.be.read_bytes.max(1);
                let len = BE_REQUEST_BYTES.min(bs - pos % bs);
                let Some(&block) = self.be.read_blocks.get((pos / bs) as usize) else {
                    return Ok(());
                };
                self.be.offset = pos + len;
                self.new_request(
                    (self.sb.data_offset(block) + pos % bs, len),
                    false,
                    None,
                    owner,
                    Purpose::BestEffort,
                    now,
                );
                self.be.in_flight = true;
            }
            Some(BestEffort::GreedyWrite) | Some(BestEffort::Photos) => {
                if self.be.file_left == 0 {
                    if self.cfg.best_effort == Some(BestEffort::Photos) {
                        if self.be.photos_left == 0 {
                            self.be.done = true;
                            return Ok(());
                        }
                        self.be.photos_left -= 1;
                        let n = PHOTO_COUNT - self.be.photos_left;
                        let root = self.fs.root();
                        self.be.ino = self.fs.create(
                            root,
                            format!("photo{n:03}.jpg").as_bytes(),
                            0o644,
                            0,
                            0,
                            now as i64,
                        )?;
                        self.be.offset = 0;
                        // Sizes uniform in [0.3, 2.3] MB: mean 1.3 MB.
                        self.be.file_left = 300_000 + self.rng.next_u64() % 2_000_001;
                    } else {
                        self.be.file_left = u64::MAX;
                    }
                }
                let len = self.be.file_left.min(BE_REQUEST_BYTES);
                let ino = self.be.ino;
                match self
                    .fs
                    .write(ino, self.be.offset, &self.zeros[..len as usize], now as i64)
                {
                    Ok(()) => {}
                    Err(Error::NoSpace { .. }) => {
                        self.be.done = true;
                        return Ok(());
                    }
                    Err(e) => return Err(e),
                }
                self.be.offset += len;
                self.be.file_left -= len;
                if self.be.file_left == 0 {
                    self.fs.close_file(ino);
                }
                let data = self.sb.data_start_bytes
                    ..self.sb.data_start_bytes + self.sb.data_blocks * self.sb.data_block_bytes;
                for (off, l) in self.fs.device_mut().take_writes() {
                    if data.contains(&off) {
                        self.new_request((off, l), true, None, owner, Purpose::BestEffort, now);
                        self.be.in_flight = true;
                    } else {
                        self.journal_write(off, l, now, streams);
                    }
                }
            }
            Some(BestEffort::Delete) => {
                if let Some(path) = self.be.victim.take() {
                    let (parent, name) = self.fs.resolve_parent(&path)?;
                    let name = name.to_vec();
                    self.fs.unlink(parent, &name, now as i64)?;
                }
                self.be.done = true;
            }
            None => {}
        }
        Ok(())
    }

    fn try_dispatch(&mut self, now: u64) -> Result<()> {
        while self.busy.is_none() {
            let ev = self.sched.dispatch(now);
            for r in self.sched.take_failed() {
                self.fail_member(&r, now)?;
            }
            match ev {
                Event::Dispatch(r) => {
                    let a = Access {
                        lba: r.lba,
                        sectors: r.sectors,
                        write: r.write,
                    };
                    let t = self.disk.service(now, &a);
                    let sector = self.disk.sector_bytes() as u64;
                    if let Some(prev) = self.last_end_lba {
                        self.out
                            .seek_distances_bytes
                            .push(prev.abs_diff(r.lba) * sector);
                    }
                    self.last_end_lba = Some(r.end_lba());
                    self.out.busy_ns += t.end_ns - t.start_ns;
                    self.out.commands += 1;
                    self.out.seek_ns += t.seek_ns;
                    self.out.rotation_ns += t.rotation_ns;
                    self.out.transfer_ns += t.transfer_ns;
                    self.out.overhead_ns += t.overhead_ns;
                    let members = r.members.iter().map(|m| m.id).collect();
                    self.busy = Some((r, members));
                    self.push(t.end_ns, Ev::DiskDone);
                }
                Event::Fail(rs) => {
                    for r in rs {
                        self.fail_member(&r, now)?;
                    }
                }
                Event::Wait { until_ns } => {
                    if let Some(u) = until_ns {
                        let u = u.max(now + 1);
                        if self.next_wake.is_none_or(|w| u < w) {
                            self.next_wake = Some(u);
                            self.push(u, Ev::Wake);
                        }
                    }
                    break;
                }
            }
        }
        Ok(())
    }

    fn fail_member(&mut self, r: &Request, now: u64) -> Result<()> {
        let (purpose, ..) = self.purposes.remove(&r.id).ok_or_else(|| lost(r.id))?;
        if let Purpose::Stream { s, k } = purpose {
            self.part_done(s, k, now, r.deadline_ns.unwrap_or(now), true);
        }
        Ok(())
    }

    fn disk_done(&mut self, now: u64) -> Result<()> {
        let Some((r, members)) = self.busy.take() else {
            return Ok(());
        };
        self.sched.complete(r.id, now);
        for id in members {
            self.member_done(id, now)?;
        }
        Ok(())
    }

    /// One request served by the command that just completed.
    fn member_done(&mut self, id: ReqId, now: u64) -> Result<()> {
        let (purpose, len, deadline, submit) = self.purposes.remove(&id).ok_or_else(|| lost(id))?;
        match purpose {
            Purpose::Stream { s, k } => {
                self.out.rt_bytes += len;
                self.part_done(s, k, now, deadline.unwrap_or(now), false);
            }
            Purpose::Journal => {}
            Purpose::BestEffort => {
                self.out.be_bytes += len;
                self.out.be_requests += 1;
                self.out.be_latencies_ns.push(now - submit);
                self.out.be_first_submit_ns = Some(
                    self.out
                        .be_first_submit_ns
                        .map_or(submit, |f| f.min(submit)),
                );
                self.out.be_last_done_ns = now;
                if self
                    .purposes
                    .values()
                    .all(|(p, ..)| !matches!(p, Purpose::BestEffort))
                {
                    self.be.in_flight = false;
                    self.push(now, Ev::BeTick);
                }
            }
        }
        Ok(())
    }

    fn run_loop(&mut self) -> Result<()> {
        while let Some(Reverse((t, _, ev))) = self.events.pop() {
            if t >= self.cfg.duration_ns && !self.stopped {
                self.stopped = true;
            }
            match ev {
                Ev::Issue(s) => {
                    if self.stopped {
                        continue;
                    }
                    if self.streams[s as usize].outstanding >= self.cfg.depth {
                        self.streams[s as usize].blocked = true;
                    } else {
                        self.issue(s, t)?;
                    }
                }
                Ev::DiskDone => self.disk_done(t)?,
                Ev::Wake => {
                    if self.next_wake == Some(t) {
                        self.next_wake = None;
                    }
                }
                Ev::Commit => {
                    self.fs.tick()?;
                    let streams = self.out.streams;
                    for (off, len) in self.fs.device_mut().take_writes() {
                        self.journal_write(off, len, t, streams);
                    }
                    if !self.stopped {
                        self.push(
                            t + self.cfg.commit_interval_ms as u64 * 1_000_000,
                            Ev::Commit,
                        );
                    }
                }
                Ev::BeTick => self.be_tick(t)?,
            }
            self.try_dispatch(t)?;
            self.out.elapsed_ns = self.out.elapsed_ns.max(t);
            if self.stopped && self.busy.is_none() && !self.sched.has_work() {
                break;
            }
        }
        Ok(())
    }

    fn finish(mut self) -> Result<SimOutcome> {
        let c = self.sched.counters();
        self.sched.check().map_err(|e| {
            Error::Corrupt(format!(
                "scheduler {} broke the conservation law: {e}",
                self.sched.name()
            ))
        })?;
        self.out.counters = c;
        self.out.scheduler = self.sched.name().to_string();
        self.out.disk = self.disk.name();
        // Requests that never finished (the run was cut) count as late.
        let pending: u64 = self.streams.iter().map(|s| s.parts_left.len() as u64).sum();
        self.out.deadline_misses += pending;
        if self.cfg.keep_series && !self.streams.is_empty() && !self.streams[0].write {
            self.out.buffer_level = buffer_series(
                &self.streams[0],
                self.cfg.request_bytes,
                self.cfg.depth,
                self.cfg.duration_ns.min(self.out.elapsed_ns),
            );
        }
        if !self.cfg.keep_series {
            self.out.buffer_level.clear();
        }
        Ok(self.out)
    }
}

fn lost(id: ReqId) -> Error {
    Error::Corrupt(format!(
        "the scheduler returned request {id}, which the simulator does not know"
    ))
}

/// The playout buffer of a read stream every 100 ms: bytes delivered minus bytes played.
fn buffer_series(st: &Stream, request_bytes: u64, depth: u32, until_ns: u64) -> Vec<(u64, i64)> {
    let t_play = st.t0_ns + (depth as u64 - 1) * st.period_ns;
    let mut done: Vec<u64> = st.done_ns.iter().map(|&(_, t)| t).collect();
    done.sort_unstable();
    let step = 100_000_000;
    let mut out = Vec::new();
    let mut i = 0;
    let mut t = 0;
    while t <= until_ns.min(120_000_000_000) {
        while i < done.len() && done[i] <= t {
            i += 1;
        }
        let delivered = i as i64 * request_bytes as i64;
        let played = if t > t_play {
            ((t - t_play) as f64 / st.period_ns as f64 * request_bytes as f64) as i64
        } else {
            0
        };
        out.push((t, delivered - played));
        t += step;
    }
    out
}
