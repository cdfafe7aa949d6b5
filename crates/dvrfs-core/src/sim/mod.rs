//! The simulation shell: the engine, a disk timer and an event loop in virtual time.
//!
//! Nothing here models the file system or the scheduler. The simulator formats a
//! volume, fills and ages it through the blocking driver (the real allocator and
//! journal, with virtual buffers that carry no bytes), loads it into an [`Engine`] and
//! then only submits operations (stream requests, best-effort traffic), times the
//! device commands the engine hands out on a [`DiskTimer`] (the HDD model), and feeds
//! the completions back. Reads are planned by the file system's own read path, writes
//! by its write path; journal and checkpoint writes are the commit pipeline's, with
//! their flushes, in its order. The metadata the engine writes lands in a real
//! in-memory device image (so a simulated power cut can be recovered from); file data
//! is virtual.
//!
//! Stream clients follow AVFS 2.1. A stream moves `request_bytes` per request at
//! `bitrate` (period `P = request_bytes / rate`) and may have `depth` requests
//! outstanding: its buffer holds `depth` requests, so a request's deadline is its
//! submission plus `depth * P`, the buffer size over the rate (AVFS 2.1: "dividing the
//! buffer size by the rate ... gives the deadline"):
//! - a **read** (playback) stream issues requests `0..depth` when it starts, at `t0`;
//!   request `k` plays from `t_play + k*P` with `t_play = t0 + depth*P` (the player
//!   starts once its buffer could be full), which is its deadline; request
//!   `k >= depth` is issued when request `k - depth` starts playing (its slot frees),
//!   at `t0 + k*P`, so every steady-state request has `depth * P` of slack;
//! - a **write** (recording) stream issues request `k` when its data is complete,
//!   `t0 + (k+1)*P`, with the deadline `depth*P` later.
//!
//! A stream never has more than `depth` requests outstanding: if the slot is still busy
//! the issue waits for it, and the deadline does not move. Playback and recording do
//! not stop for a late request; the late request is a glitch. A recording that cannot
//! go on (the disk is full) stops, and every request it would have issued until the
//! end of the run counts as missed, with its cause (`recordings_stopped`).
//! Everything random comes from one seed (ChaCha8), so a run is reproducible byte for
//! byte.

pub mod client;
pub mod report;
pub mod workload;

pub use client::{Client, ClientEv, Host};
pub use workload::{StreamGroup, Workload, WorkloadError};

use crate::device::{CrashDevice, CrashMode, Device, MemDevice};
use crate::disk::Access;
pub use crate::disk::{DiskTimer, HddDisk};
use crate::driver::{Fs, ManualClock};
use crate::engine::{DevKind, Engine, EngineConfig, IoBuf, Now, Op, OpId, Output};
use crate::error::{Error, Result};
use crate::format::superblock::AllocPolicy;
use crate::layout::{MkfsParams, TailLogSize};
use crate::qos::MissCauses;
use crate::sched::{BeStats, Class, Counters};
use crate::tools::mkfs;
use crate::volume::{OpenOptions, Volume};
use rand_chacha::rand_core::{RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};

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
/// Bytes per write while filling (virtual: no memory behind them).
const FILL_WRITE_BYTES: u64 = 64 << 20;

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
    /// Bytes per request of the greedy and photo generators ([`BE_REQUEST_BYTES`]).
    pub be_request_bytes: u64,
    /// Operations the greedy generators keep in flight (1: one at a time).
    pub be_depth: u32,
    /// Size of the recording `--best-effort delete` removes.
    pub delete_bytes: u64,
    pub seed: u64,
    pub commit_interval_ms: u32,
    /// The volume keeps data checksums (mkfs's default). Off by default here: the
    /// simulator moves no bytes, so it only models their metadata writes, and the
    /// published comparisons were made without them (`docs/checksums.md` measures
    /// what they add).
    pub checksums: bool,
    /// The volume's tail log (`mkfs`'s default, [`TailLogSize::Auto`]): recordings'
    /// partial requests are logged in the commits instead of written in place at
    /// each gather point (`engine/tail_log.rs`). `Off`: `--no-tail-log`; `Blocks`:
    /// `--tail-log SIZE`.
    pub tail_log: TailLogSize,
    /// An application-level `fsync` this often (0: never), as an NVR that checkpoints
    /// its recordings would issue; the crash test uses it to know what was durable.
    pub fsync_every_ns: u64,
    /// Keep per-request series for plots.
    pub keep_series: bool,
    /// Keep a row per device command ([`SimOutcome::trace`], `dvrfs sim --trace`).
    pub trace: bool,
    /// `None`: recordings are AVFS clients issuing whole requests with their own
    /// deadlines (the published comparisons). `Some`: engine streams written a frame
    /// at a time (`client/engine_streams.rs`), which needs an admission model in the
    /// engine's configuration.
    pub stream_recordings: Option<StreamRecordings>,
}

/// Recordings as engine streams (see [`SimConfig::stream_recordings`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct StreamRecordings {
    /// The streams' durability interval (`StreamSpec::durable_ns`; `None`: the
    /// commit interval).
    pub durable_ns: Option<u64>,
    /// How often the application writes (one frame), ns.
    pub frame_ns: u64,
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
            be_request_bytes: BE_REQUEST_BYTES,
            be_depth: 1,
            delete_bytes: 20_000_000_000,
            seed: 1,
            commit_interval_ms: 1000,
            checksums: false,
            tail_log: TailLogSize::Auto,
            fsync_every_ns: 0,
            keep_series: false,
            trace: false,
            stream_recordings: None,
        }
    }
}

/// One device command of a traced run (`dvrfs sim --trace`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TraceRow {
    pub start_ns: u64,
    pub end_ns: u64,
    pub kind: DevKind,
    /// `None` for a flush.
    pub class: Option<Class>,
    pub offset_bytes: u64,
    pub len_bytes: u64,
    /// Requests merged into the command.
    pub requests: u32,
    /// The earliest deadline among them.
    pub deadline_ns: Option<u64>,
    /// Sent by the best-effort guarantee rather than chosen by the policy.
    pub forced: bool,
    pub seek_ns: u64,
    pub rotation_ns: u64,
    pub transfer_ns: u64,
    /// Served from the drive's read-ahead cache: wholly, partly.
    pub cache_hit: bool,
    pub cache_partial_hit: bool,
}

/// (virtual ns, value) points of a plotted series.
pub type Series = Vec<(u64, i64)>;

/// What the delete generator did.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct DeleteOutcome {
    pub bytes: u64,
    pub submit_ns: u64,
    pub done_ns: Option<u64>,
    /// An fsync that covers the unlink completed (its blocks are free for good).
    pub durable: bool,
}

/// What one run measured.
#[derive(Clone, Debug, Default)]
pub struct SimOutcome {
    pub elapsed_ns: u64,
    pub streams: u32,
    pub rt_requests: u64,
    pub deadline_misses: u64,
    /// Misses by cause.
    pub misses: MissCauses,
    pub failed_reads: u64,
    /// Recordings that could not go on (disk full, or refused by admission: of them
    /// `recordings_refused`) before the end of the run.
    pub recordings_stopped: u32,
    pub recordings_refused: u32,
    /// The delete generator's file: its size, when its unlink was submitted and when
    /// it completed (virtual ns).
    pub delete: Option<DeleteOutcome>,
    /// Completion margin of every real-time request (deadline - completion), ns.
    pub margins_ns: Vec<i64>,
    pub busy_ns: u64,
    /// Device commands, and where their time went (ns summed over all commands).
    pub commands: u64,
    pub seek_ns: u64,
    pub rotation_ns: u64,
    pub transfer_ns: u64,
    pub overhead_ns: u64,
    pub cache_hits: u64,
    pub cache_partial_hits: u64,
    pub rt_bytes: u64,
    pub be_bytes: u64,
    pub be_requests: u64,
    pub be_latencies_ns: Vec<u64>,
    /// When the first best-effort request was submitted and the last one completed.
    pub be_first_submit_ns: Option<u64>,
    pub be_last_done_ns: u64,
    /// The best-effort guarantee's own figures (time with work, device time).
    pub be_stats: BeStats,
    pub be_share: f64,
    pub be_latency_target_ns: u64,
    /// Journal and checkpoint commands and bytes, commits and flushes.
    pub journal_bytes: u64,
    pub journal_requests: u64,
    pub commits: u64,
    pub flushes: u64,
    /// Distance from the end of each dispatched request to the start of the next, bytes.
    pub seek_distances_bytes: Vec<u64>,
    /// Buffer level of [`SimOutcome::buffer_stream`] over time: (virtual ns, bytes).
    pub buffer_level: Vec<(u64, i64)>,
    /// The stream of `buffer_level` (the first playback, else the first recording)
    /// and whether it is a recording (then the level is its write-behind: bytes
    /// produced and not yet written).
    pub buffer_stream: Option<(u32, bool)>,
    pub counters: Counters,
    /// One row per device command, in issue order, when [`SimConfig::trace`] is set.
    pub trace: Vec<TraceRow>,
    pub policy_stats: Vec<(&'static str, u64)>,
    pub disk: String,
    pub scheduler: String,
    pub data_block_bytes: u64,
    pub used_bytes_at_start: u64,
    /// Engine-stream recordings ([`SimConfig::stream_recordings`]): their disk
    /// requests, those past the buffer's overflow (misses of the stream's
    /// guarantee), and those past the commit they were due for (`durability_late`).
    pub stream_recordings: Option<StreamRecordings>,
    pub stream_requests: u64,
    pub stream_late: u64,
    pub stream_durability_late: u64,
    /// Their bytes logged in the tail log, and gathers written in place because
    /// the ring was full.
    pub stream_tail_logged_bytes: u64,
    pub stream_tail_log_full: u64,
}

impl SimOutcome {
    /// Whether best-effort got its guaranteed share and met its latency target while
    /// it had work (true when there was no best-effort work).
    pub fn be_guarantee_met(&self) -> bool {
        if self.be_stats.active_ns == 0 || self.be_share <= 0.0 {
            return true;
        }
        let mut lat = self.be_latencies_ns.clone();
        lat.sort_unstable();
        let p99 = report::quantile(&lat, 0.99).unwrap_or(0);
        self.be_stats.share() >= self.be_share * BE_SHARE_TOLERANCE
            && p99 <= self.be_latency_target_ns
    }
}

/// A run counts the guarantee as met at this fraction of the configured share: the
/// share is enforced between commands, so the last command before a measurement edge
/// can shift it by one command's time.
pub const BE_SHARE_TOLERANCE: f64 = 0.95;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Ev {
    DiskDone(u64),
    Wake,
    Client(ClientEv),
}

/// The simulator's side of the workload client: the engine, called directly, and
/// the event queue in virtual time.
struct SimHost {
    engine: Engine,
    events: BinaryHeap<Reverse<(u64, u64, Ev)>>,
    seq: u64,
}

impl SimHost {
    fn push(&mut self, t: u64, ev: Ev) {
        self.seq += 1;
        self.events.push(Reverse((t, self.seq, ev)));
    }
}

impl Host for SimHost {
    fn submit(&mut self, op: Op, deadline_ns: Option<u64>, owner: u32, now: u64) -> Result<OpId> {
        self.engine.submit(op, deadline_ns, owner, Now::mono(now))
    }

    /// A namespace operation at time 0, before the run: it completes at once.
    fn namespace(&mut self, op: Op) -> Result<u32> {
        let id = self.engine.submit(op, None, 0, Now::mono(0))?;
        while let Some(c) = self.engine.take_completion() {
            if c.op == id {
                return match c.result? {
                    Output::Ino(i) => Ok(i),
                    _ => Ok(0),
                };
            }
        }
        Err(Error::InvalidArgument(
            "a namespace operation did not complete at once".into(),
        ))
    }

    fn schedule(&mut self, at_ns: u64, ev: ClientEv) {
        self.push(at_ns, Ev::Client(ev));
    }

    fn not_issued(&mut self, count: u64, no_space: bool) {
        self.engine.qos_mut().not_issued(count, no_space);
    }

    fn query<R: Send + 'static>(
        &mut self,
        f: impl FnOnce(&Volume) -> R + Send + 'static,
    ) -> Result<R> {
        Ok(f(self.engine.volume()))
    }
}

struct Sim<'a, T: DiskTimer, D: Device> {
    cfg: &'a SimConfig,
    host: SimHost,
    client: Client,
    dev: D,
    disk: &'a mut T,
    /// The command on the disk.
    busy: Option<(u64, DevKind)>,
    next_wake: Option<u64>,
    out: SimOutcome,
    stopped: bool,
    /// The power was cut (crash runs): the loop ends.
    crashed: bool,
    /// The device is a crash device: a failed write is the power cut.
    crash_run: bool,
}

fn validate(cfg: &SimConfig, sector_bytes: u32) -> Result<()> {
    if !(0.0..=1.0).contains(&cfg.fill) {
        return Err(Error::InvalidArgument(format!(
            "fill {:.1}% is outside 0..100%",
            cfg.fill * 100.0
        )));
    }
    if cfg.request_bytes == 0
        || !cfg.request_bytes.is_multiple_of(sector_bytes as u64)
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
    if cfg.be_request_bytes == 0 || !cfg.be_request_bytes.is_multiple_of(4096) {
        return Err(Error::InvalidArgument(format!(
            "best-effort request size {} bytes: must be a positive multiple of 4096",
            cfg.be_request_bytes
        )));
    }
    Ok(())
}

/// Formats, fills and ages a volume on an in-memory image through the blocking
/// driver; returns the image and the recordings (the delete victim last).
fn prepare<T: DiskTimer>(
    cfg: &SimConfig,
    disk: &T,
    rng: &mut ChaCha8Rng,
) -> Result<(MemDevice, Vec<String>, u64)> {
    let dev = MemDevice::with_sector(disk.capacity_bytes(), disk.sector_bytes());
    prepare_device(dev, cfg, rng)
}

/// Formats `dev` (its whole size) and fills and ages it as `cfg` says, through the
/// blocking driver with virtual buffers (only metadata is written: the recordings'
/// blocks are allocated, their bytes are whatever the device holds). Returns the
/// device, the recordings (the delete victim last) and the bytes in use. `rng` is
/// the run's generator: hand it to [`Client::new`] afterwards, as the simulator does,
/// and the run matches a simulated one of the same seed.
pub fn prepare_device<D: Device>(
    mut dev: D,
    cfg: &SimConfig,
    rng: &mut ChaCha8Rng,
) -> Result<(D, Vec<String>, u64)> {
    validate(cfg, dev.sector_bytes())?;
    let size = dev.size_bytes();
    let mut p = MkfsParams::new(size, seed_uuid(cfg.seed), cfg.seed);
    p.data_block_bytes = cfg.block_bytes;
    p.alloc = cfg.alloc;
    p.commit_interval_ms = cfg.commit_interval_ms;
    if !cfg.checksums {
        p.sum_granule_bytes = None;
    }
    p.tail_log = cfg.tail_log;
    mkfs(&mut dev, &p, &mut |_, _| {})?;
    let mut fs = Fs::open_with(
        dev,
        OpenOptions::writable(),
        Box::new(ManualClock::new()),
        None,
    )?;
    let recordings = setup(&mut fs, cfg, rng)?;
    let used = fs.info().used_blocks * fs.superblock().data_block_bytes;
    Ok((fs.close()?, recordings, used))
}

/// The run's generator, as [`prepare_device`] and [`Client::new`] expect it.
pub fn run_rng(cfg: &SimConfig) -> ChaCha8Rng {
    ChaCha8Rng::seed_from_u64(cfg.seed)
}

/// The engine over a prepared image.
fn load_engine<D: Device>(dev: &D, engine_cfg: EngineConfig) -> Result<Engine> {
    let (vol, replay) = Volume::load(dev, &OpenOptions::writable())?;
    debug_assert!(replay.is_none(), "a cleanly closed image replays nothing");
    Engine::new(vol, replay, engine_cfg, Now::mono(0))
}

/// Runs one simulation: the engine built from `engine_cfg` over `disk`.
pub fn run<T: DiskTimer>(
    cfg: &SimConfig,
    disk: &mut T,
    engine_cfg: EngineConfig,
) -> Result<SimOutcome> {
    validate(cfg, disk.sector_bytes())?;
    let mut rng = ChaCha8Rng::seed_from_u64(cfg.seed);
    let (dev, recordings, used) = prepare(cfg, disk, &mut rng)?;
    let engine = load_engine(&dev, engine_cfg)?;
    let mut sim = Sim::new(cfg, engine, dev, disk, rng);
    sim.out.used_bytes_at_start = used;
    sim.start(&recordings)?;
    sim.run_loop()?;
    sim.finish()
}

/// What a simulated power cut left behind.
pub struct CrashOutcome {
    /// The media after the cut (metadata; file data is virtual).
    pub image: MemDevice,
    /// The recordings' paths and their sizes as of the last completed `fsync` before
    /// the cut: after recovery, each must be at least that long.
    pub durable: Vec<(String, u64)>,
    /// The file `--best-effort delete` removes, and whether its removal was durable
    /// (an fsync submitted after the unlink completed had completed).
    pub victim: Option<(String, bool)>,
    /// Virtual time of the cut.
    pub at_ns: u64,
}

/// Runs a simulation and cuts the power during the `n`-th metadata write (journal,
/// checkpoint or invalidation) from the start of the run; returns the media as the
/// cut left them. `Ok(None)` if the run ended before that write.
pub fn run_until_crash<T: DiskTimer>(
    cfg: &SimConfig,
    disk: &mut T,
    engine_cfg: EngineConfig,
    crash_at_write: u64,
    mode: CrashMode,
) -> Result<Option<CrashOutcome>> {
    validate(cfg, disk.sector_bytes())?;
    let mut rng = ChaCha8Rng::seed_from_u64(cfg.seed);
    let (image, recordings, used) = prepare(cfg, disk, &mut rng)?;
    let mut dev = CrashDevice::new(image, mode, cfg.seed ^ crash_at_write);
    dev.crash_after_writes(crash_at_write);
    let engine = load_engine(&dev, engine_cfg)?;
    let mut sim = Sim::new(cfg, engine, dev, disk, rng);
    sim.crash_run = true;
    sim.out.used_bytes_at_start = used;
    sim.start(&recordings)?;
    sim.run_loop()?;
    let Some(image) = sim.dev.crash_image() else {
        return Ok(None);
    };
    let durable = sim
        .client
        .streams
        .iter()
        .zip(&sim.client.durable_sizes)
        .enumerate()
        .filter(|(_, (st, _))| st.write)
        .map(|(s, (_, &size))| (format!("/live/s{s:04}.ts"), size))
        .collect();
    let victim = recordings
        .last()
        .filter(|_| cfg.best_effort == Some(BestEffort::Delete))
        .map(|v| (v.clone(), sim.client.victim_gone_durably));
    Ok(Some(CrashOutcome {
        image,
        durable,
        victim,
        at_ns: sim.out.elapsed_ns,
    }))
}

/// `--find-max`: the largest count of the workload's first term whose run fails no
/// check (`ok`), and that run.
///
/// The count doubles from 1 until a run fails, then the gap is bisected. Since misses
/// need not grow strictly with load, the answer is then checked in its neighbourhood:
/// the two counts above must fail and the two below pass. A passing count above moves
/// the answer up (and the search goes on from there); then a failing count below moves
/// it down to just below that count, and it is never moved up again (so the search
/// ends; a count it moves down to must pass too, or it moves further). Every count
/// reported was simulated and passed, and its four neighbours were
/// simulated too ([`FindMax::neighbours`]): a non-monotone policy shows there as a
/// pass above the answer or a failure below it.
pub fn find_max(
    cfg: &SimConfig,
    mut run_with: impl FnMut(&SimConfig) -> Result<SimOutcome>,
    ok: impl Fn(&SimOutcome) -> bool,
) -> Result<FindMax> {
    const LIMIT: u32 = 1 << 14;
    let mut cache: BTreeMap<u32, (bool, Option<SimOutcome>)> = BTreeMap::new();
    let mut with = |n: u32, keep: bool| -> Result<bool> {
        if let Some((pass, o)) = cache.get(&n) {
            if !keep || o.is_some() {
                return Ok(*pass);
            }
        }
        let mut c = cfg.clone();
        c.workload = cfg.workload.with_first_count(n);
        let o = run_with(&c)?;
        let pass = ok(&o);
        cache.insert(n, (pass, (keep && pass).then_some(o)));
        Ok(pass)
    };
    let mut lo = 0u32;
    let mut hi = LIMIT + 1;
    let mut n = 1;
    while n <= LIMIT {
        if !with(n, false)? {
            hi = n;
            break;
        }
        lo = n;
        n *= 2;
    }
    // Up: while a count just above the answer passes, search on from there.
    loop {
        while hi - lo > 1 {
            let mid = lo + (hi - lo) / 2;
            if with(mid, false)? {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        let mut up = None;
        for c in [lo + 1, lo + 2] {
            if c <= LIMIT && with(c, false)? {
                up = Some(c);
                break;
            }
        }
        let Some(c) = up else { break };
        lo = c;
        hi = (c.saturating_mul(2)).min(LIMIT + 1);
        while hi <= LIMIT && with(hi, false)? {
            lo = hi;
            hi = hi.saturating_mul(2).min(LIMIT + 1);
        }
    }
    // Down: a failing count just below the answer moves it below that count (never
    // up again, so the search ends).
    while lo > 0 {
        let mut down = None;
        for c in [lo - 1, lo.saturating_sub(2)] {
            if c >= 1 && c < lo && !with(c, false)? {
                down = Some(c);
                break;
            }
        }
        match down {
            Some(c) => {
                // The count just below a failure is the new answer only if it passes.
                lo = c - 1;
                while lo > 0 && !with(lo, false)? {
                    lo -= 1;
                }
            }
            None => break,
        }
    }
    let neighbours: Vec<(u32, bool)> = [lo.saturating_sub(2), lo.saturating_sub(1), lo + 1, lo + 2]
        .into_iter()
        .filter(|&c| c >= 1 && c != lo)
        .map(|c| Ok((c, with(c, false)?)))
        .collect::<Result<_>>()?;
    let count = lo;
    let run = if count == 0 {
        // Even one stream of the first term fails: report that run.
        with(1, true)?;
        let mut c = cfg.clone();
        c.workload = cfg.workload.with_first_count(1);
        run_with(&c)?
    } else {
        with(count, true)?;
        cache
            .get_mut(&count)
            .and_then(|(_, o)| o.take())
            .expect("the answer's run is kept")
    };
    Ok(FindMax {
        count,
        run,
        neighbours,
    })
}

/// The answer of [`find_max`].
pub struct FindMax {
    /// The largest passing count of the first term (0: even one fails).
    pub count: u32,
    /// The run at that count (at 1 when `count` is 0).
    pub run: SimOutcome,
    /// The counts around the answer and whether each passed.
    pub neighbours: Vec<(u32, bool)>,
}

fn seed_uuid(seed: u64) -> [u8; 16] {
    let mut u = [0u8; 16];
    ChaCha8Rng::seed_from_u64(seed ^ 0x5eed).fill_bytes(&mut u);
    u
}

/// Fills and ages the file system through the real allocator. Returns the paths of
/// the recordings, the delete victim last (when asked for).
fn setup<D: Device>(fs: &mut Fs<D>, cfg: &SimConfig, rng: &mut ChaCha8Rng) -> Result<Vec<String>> {
    let root = fs.root();
    fs.mkdir(root, b"rec", 0o755, 0, 0, 0)?;
    let data_bytes = fs.superblock().data_blocks * fs.superblock().data_block_bytes;
    let target = (data_bytes as f64 * cfg.fill) as u64;
    let mut files: Vec<(String, u64)> = Vec::new();
    let mut n = 0u64;
    let record = |fs: &mut Fs<D>, bytes: u64, n: &mut u64| -> Result<Option<(String, u64)>> {
        let name = format!("fill{:05}.ts", *n);
        *n += 1;
        let dir = fs.resolve("/rec")?;
        let ino = fs.create(dir, name.as_bytes(), 0o644, 0, 0, 0)?;
        let mut off = 0;
        while off < bytes {
            let len = (bytes - off).min(FILL_WRITE_BYTES);
            match fs.write_buf(ino, off, IoBuf::virtual_len(len as usize), 0) {
                Ok(_) => off += len,
                Err(Error::NoSpace { .. }) => break,
                Err(e) => return Err(e),
            }
        }
        fs.close_file(ino)?;
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

impl<'a, T: DiskTimer, D: Device> Sim<'a, T, D> {
    fn new(cfg: &'a SimConfig, engine: Engine, dev: D, disk: &'a mut T, rng: ChaCha8Rng) -> Self {
        let settings = *engine.scheduler().settings();
        Sim {
            cfg,
            out: SimOutcome {
                data_block_bytes: engine.volume().superblock().data_block_bytes,
                be_share: settings.be_share,
                be_latency_target_ns: settings.be_latency_ns,
                ..Default::default()
            },
            host: SimHost {
                engine,
                events: BinaryHeap::new(),
                seq: 0,
            },
            client: Client::new(cfg, rng, false),
            dev,
            disk,
            busy: None,
            next_wake: None,
            stopped: false,
            crashed: false,
            crash_run: false,
        }
    }

    fn start(&mut self, recordings: &[String]) -> Result<()> {
        self.client.start(&mut self.host, recordings)?;
        self.out.streams = self.client.streams();
        self.pump(0)
    }

    fn completions(&mut self, now: u64) -> Result<()> {
        while let Some(c) = self.host.engine.take_completion() {
            self.client.completed(&mut self.host, c.op, c.result, now)?;
        }
        Ok(())
    }

    /// Hands the next command to the idle disk.
    fn pump(&mut self, now: u64) -> Result<()> {
        if self.crashed {
            return Ok(());
        }
        self.completions(now)?;
        // Polled on every event, busy or not: the engine starts due work (a commit)
        // then, and only hands out a command when a slot is free.
        let next = self.host.engine.poll(Now::mono(now));
        assert!(
            next.is_none() || self.busy.is_none(),
            "the engine handed out a second command to a queue-depth-1 disk"
        );
        if self.busy.is_none() {
            if let Some(cmd) = next {
                let t = match cmd.kind {
                    DevKind::Flush => self.disk.flush(now),
                    kind => {
                        let sector = self.disk.sector_bytes() as u64;
                        let a = Access {
                            lba: cmd.offset_bytes / sector,
                            sectors: (cmd.len_bytes / sector) as u32,
                            write: kind == DevKind::Write,
                        };
                        self.disk.service(now, &a)
                    }
                };
                self.out.seek_ns += t.seek_ns;
                self.out.rotation_ns += t.rotation_ns;
                self.out.transfer_ns += t.transfer_ns;
                self.out.overhead_ns += t.overhead_ns;
                self.out.cache_hits += t.cache_hit as u64;
                self.out.cache_partial_hits += t.cache_partial_hit as u64;
                if self.cfg.trace {
                    self.out.trace.push(TraceRow {
                        start_ns: now,
                        end_ns: t.end_ns,
                        kind: cmd.kind,
                        class: cmd.class,
                        offset_bytes: cmd.offset_bytes,
                        len_bytes: cmd.len_bytes,
                        requests: cmd.requests,
                        deadline_ns: cmd.deadline_ns,
                        forced: cmd.forced,
                        seek_ns: t.seek_ns,
                        rotation_ns: t.rotation_ns,
                        transfer_ns: t.transfer_ns,
                        cache_hit: t.cache_hit,
                        cache_partial_hit: t.cache_partial_hit,
                    });
                }
                self.busy = Some((cmd.id, cmd.kind));
                self.host.push(t.end_ns, Ev::DiskDone(cmd.id));
            }
            self.completions(now)?;
        }
        if let Some(w) = self.host.engine.next_wakeup() {
            let w = w.max(now + 1);
            if self.next_wake.is_none_or(|x| w < x || x <= now) {
                self.next_wake = Some(w);
                self.host.push(w, Ev::Wake);
            }
        }
        Ok(())
    }

    /// The disk finished command `id`: its metadata bytes land on the image (data is
    /// virtual), a flush makes them durable.
    fn disk_done(&mut self, id: u64, now: u64) -> Result<()> {
        let Some((busy, kind)) = self.busy.take() else {
            return Ok(());
        };
        debug_assert_eq!(busy, id, "one command at a time");
        let dev = &mut self.dev;
        let r = match kind {
            DevKind::Flush => dev.flush(),
            DevKind::Write => self.host.engine.io_write(id, |o, b| dev.write_at(o, b)),
            // Data reads are virtual; the engine never reads metadata after load.
            DevKind::Read => Ok(()),
        };
        if r.is_err() && self.crash_run {
            self.crashed = true;
            return Ok(());
        }
        self.host.engine.complete(id, r, Now::mono(now));
        Ok(())
    }

    fn run_loop(&mut self) -> Result<()> {
        while let Some(Reverse((t, _, ev))) = self.host.events.pop() {
            if t >= self.cfg.duration_ns && !self.stopped {
                self.stopped = true;
                self.client.stop();
            }
            match ev {
                Ev::DiskDone(id) => self.disk_done(id, t)?,
                Ev::Wake => {
                    if self.next_wake == Some(t) {
                        self.next_wake = None;
                    }
                }
                Ev::Client(e) => self.client.event(&mut self.host, e, t)?,
            }
            if self.crashed {
                self.out.elapsed_ns = t;
                return Ok(());
            }
            self.pump(t)?;
            self.out.elapsed_ns = self.out.elapsed_ns.max(t);
            if self.stopped
                && self.busy.is_none()
                && self.client.idle()
                && !self.host.engine.scheduler().has_work()
            {
                break;
            }
        }
        Ok(())
    }

    fn finish(mut self) -> Result<SimOutcome> {
        self.host.engine.check().map_err(|e| {
            Error::Corrupt(format!(
                "scheduler {} or engine broke an invariant: {e}",
                self.host.engine.scheduler().name()
            ))
        })?;
        self.out.disk = self.disk.name();
        // Requests still outstanding when the run was cut count as late.
        let pending = self.client.outstanding();
        if pending > 0 {
            self.host.engine.qos_mut().not_issued(pending, false);
        }
        self.out.stream_recordings = self.cfg.stream_recordings;
        for (_, st) in self.host.engine.streams() {
            self.out.stream_requests += st.requests;
            self.out.stream_late += st.late;
            self.out.stream_durability_late += st.durability_late;
        }
        let q = self.host.engine.qos();
        self.out.stream_tail_logged_bytes = q.tail_logged_bytes;
        self.out.stream_tail_log_full = q.tail_log_full;
        let q = self.host.engine.qos().clone();
        fill_outcome(&mut self.out, self.host.engine.scheduler(), q);
        client_outcome(&mut self.out, &self.client);
        (self.out.buffer_level, self.out.buffer_stream) = buffer_level(
            self.cfg,
            &self.client,
            self.cfg.duration_ns.min(self.out.elapsed_ns),
        );
        Ok(self.out)
    }
}

/// What a run measured, from the scheduler and the QoS recorder: the simulator's
/// and `bench`'s report are made the same way (with [`client_outcome`]).
pub fn fill_outcome(
    out: &mut SimOutcome,
    sched: &crate::sched::Scheduler,
    q: crate::qos::Recorder,
) {
    out.counters = sched.counters();
    out.scheduler = sched.name().to_string();
    out.policy_stats = sched.policy_stats();
    out.be_stats = sched.be_stats();
    out.be_share = sched.settings().be_share;
    out.be_latency_target_ns = sched.settings().be_latency_ns;
    out.rt_requests = q.rt_ops;
    out.deadline_misses = q.deadline_misses();
    out.misses = q.misses;
    out.margins_ns = q.margins_ns;
    out.busy_ns = q.busy_ns;
    out.commands = q.commands;
    out.rt_bytes = q.rt_bytes;
    out.be_bytes = q.be_bytes;
    out.be_requests = q.be_ops;
    out.be_latencies_ns = q.be_latencies_ns;
    out.be_first_submit_ns = q.be_first_submit_ns;
    out.be_last_done_ns = q.be_last_done_ns;
    out.journal_bytes = q.metadata_bytes;
    out.journal_requests = q.metadata_commands;
    out.commits = q.commits;
    out.flushes = q.flushes;
    out.seek_distances_bytes = q.seek_distances_bytes;
}

/// What the workload client counted itself.
pub fn client_outcome(out: &mut SimOutcome, client: &Client) {
    out.streams = client.streams();
    out.failed_reads = client.failed_reads;
    out.recordings_stopped = client.recordings_stopped;
    out.recordings_refused = client.recordings_refused;
    out.delete = client
        .delete_started
        .map(|(bytes, submit_ns)| DeleteOutcome {
            bytes,
            submit_ns,
            done_ns: client.unlink_done_ns,
            durable: client.victim_gone_durably,
        });
}

/// The buffer level of the first playback (else the first recording) over the run
/// when the run keeps series ([`SimConfig::keep_series`]), with the stream and
/// whether it records; empty otherwise.
pub fn buffer_level(
    cfg: &SimConfig,
    client: &Client,
    until_ns: u64,
) -> (Series, Option<(u32, bool)>) {
    let streams = &client.streams;
    match client::series_stream(streams).filter(|_| cfg.keep_series) {
        Some(k) => {
            let st = &streams[k as usize];
            (
                buffer_series(st, cfg.request_bytes, cfg.depth, until_ns),
                Some((k, st.write)),
            )
        }
        None => (Vec::new(), None),
    }
}

/// Every 100 ms: a playback's playout buffer (bytes delivered minus bytes played), or
/// a recording's write-behind (bytes produced minus bytes written).
fn buffer_series(
    st: &client::Stream,
    request_bytes: u64,
    depth: u32,
    until_ns: u64,
) -> Vec<(u64, i64)> {
    let t_play = st.t0_ns + depth as u64 * st.period_ns;
    let mut done = st.done_ns.clone();
    done.sort_unstable();
    let step = 100_000_000;
    let mut out = Vec::new();
    let mut i = 0;
    let mut t = 0;
    while t <= until_ns.min(120_000_000_000) {
        while i < done.len() && done[i] <= t {
            i += 1;
        }
        let completed = i as i64 * request_bytes as i64;
        if st.write {
            let produced = if t > st.t0_ns {
                ((t - st.t0_ns) as f64 / st.period_ns as f64 * request_bytes as f64) as i64
            } else {
                0
            };
            out.push((t, produced - completed));
        } else {
            let played = if t > t_play {
                ((t - t_play) as f64 / st.period_ns as f64 * request_bytes as f64) as i64
            } else {
                0
            };
            out.push((t, completed - played));
        }
        t += step;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `find_max` over a made-up pass pattern: `fails` lists the counts that fail
    /// (every count above `top` fails too).
    fn search(fails: &[u32], top: u32) -> FindMax {
        let cfg = SimConfig::new(Workload::parse("1r").unwrap());
        find_max(
            &cfg,
            |c| {
                let n = c.workload.groups[0].count;
                Ok(SimOutcome {
                    streams: n,
                    deadline_misses: (n > top || fails.contains(&n)) as u64,
                    ..SimOutcome::default()
                })
            },
            |o| o.deadline_misses == 0,
        )
        .unwrap()
    }

    #[test]
    fn find_max_answers_a_count_that_passed() {
        assert_eq!(search(&[], 20).count, 20);
        // Bisection lands on 20; the failure just below moves the answer under it.
        assert_eq!(search(&[19], 20).count, 18);
        // ... and past further failures: the answer is always a count that was
        // simulated and passed (it once moved to 18 here without running it).
        let f = search(&[19, 18, 17], 20);
        assert_eq!(f.count, 16, "{:?}", f.neighbours);
        assert_eq!(f.run.streams, 16);
        assert!(f.neighbours.contains(&(17, false)) && f.neighbours.contains(&(18, false)));
        // Nothing passes.
        assert_eq!(search(&[], 0).count, 0);
    }
}
