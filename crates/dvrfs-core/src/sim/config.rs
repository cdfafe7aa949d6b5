//! A run's configuration: the workload, the volume it runs on (allocation policy,
//! block size, fill and ageing), the stream parameters, the best-effort traffic beside
//! them, and the check that refuses a configuration no run can honour.

use super::Workload;
use crate::error::{Error, Result};
use crate::format::inode::StreamRetention;
use crate::format::superblock::{AllocPolicy, VolumeRetention};
use crate::layout::TailLogSize;

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
/// The simulated clock's UTC at time 0 of a run (2026-01-01T00:00:00Z): chunk names
/// and modification times are UTC, as on a recorder.
pub const SIM_UTC_EPOCH_NS: i64 = 1_767_225_600_000_000_000;

/// Retention in a run (`--retention`, docs/retention.md): the volume's policy, one
/// policy for every stream, and the chunk length recordings are cut into.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SimRetention {
    pub volume: VolumeRetention,
    /// Set on `/live`, the directory of the streams' directories (`None`: no
    /// per-stream policy).
    pub stream: Option<StreamRetention>,
    /// Every recording, and the fill's history, is cut into chunks this long.
    pub chunk_ns: u64,
    /// The UTC of time 0 of the run, which chunk names count from: the simulator's
    /// [`SIM_UTC_EPOCH_NS`], `bench`'s wall clock when it starts (so that `max-age`
    /// compares names with the engine's clock).
    pub utc_epoch_ns: i64,
}

/// Chunks of a run with retention: ten minutes unless told.
pub const SIM_CHUNK_NS: u64 = 600_000_000_000;

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
    /// Trick-play readers (`t` terms): the playback speed, 2 to 32 forward, -2 to -32
    /// backward.
    pub trick_speed: i32,
    /// The recordings' keyframe interval (GOP): what a trick-play reader skips by.
    pub gop_ns: u64,
    /// Keep per-request series for plots.
    pub keep_series: bool,
    /// Keep a row per device command ([`SimOutcome::trace`], `dvrfs sim --trace`).
    pub trace: bool,
    /// `None`: recordings are AVFS clients issuing whole requests with their own
    /// deadlines (the published comparisons). `Some`: engine streams written a frame
    /// at a time (`client/engine_streams.rs`), which needs an admission model in the
    /// engine's configuration.
    pub stream_recordings: Option<StreamRecordings>,
    /// `Some`: the volume runs retention, and is laid out for it: every recording
    /// writes a stream directory `/live/sNNNN/` of chunks named by their UTC start,
    /// and the fill is those streams' history, chunk by chunk, oldest first (see
    /// `setup.rs`); playbacks hold their files open (a reader pins its chunk).
    pub retention: Option<SimRetention>,
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
            trick_speed: 8,
            gop_ns: 2_000_000_000,
            keep_series: false,
            trace: false,
            stream_recordings: None,
            retention: None,
        }
    }
}

pub(super) fn validate(cfg: &SimConfig, sector_bytes: u32) -> Result<()> {
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
    if let Some(r) = cfg.retention {
        if r.chunk_ns == 0 {
            return Err(Error::InvalidArgument(
                "retention: the chunk length must be above 0".into(),
            ));
        }
        if cfg.stream_recordings.is_some() {
            return Err(Error::InvalidArgument(
                "retention runs with AVFS recordings only (not --stream-recordings yet)".into(),
            ));
        }
        if cfg.age_cycles > 0 {
            return Err(Error::InvalidArgument(
                "retention: --age does not apply (the fill is the streams' own history)".into(),
            ));
        }
    }
    Ok(())
}
