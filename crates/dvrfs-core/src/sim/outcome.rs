//! What a run measured ([`SimOutcome`]), what a power cut left behind
//! ([`CrashOutcome`]), and how the scheduler's, the QoS recorder's and the workload
//! client's own counts fill an outcome: the simulator and `bench` fill theirs the
//! same way.

use super::{Client, StreamRecordings};
use crate::device::MemDevice;
use crate::disk::Energy;
use crate::engine::{DevKind, Engine, RetentionFigures};
use crate::qos::MissCauses;
use crate::sched::{BeStats, Class, Counters};

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

/// What retention did over a run with it (`SimConfig::retention`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RetentionOutcome {
    /// The engine's figures (deletions, commits, time short of the high mark).
    pub figures: RetentionFigures,
    /// Chunks the recordings started (their first included).
    pub chunks_started: u64,
    /// Every stream at the end of the run: its directory, its chunks' lengths added
    /// up, and its chunks.
    pub streams_end: Vec<(String, u64, u64)>,
}

/// Every stream of `v` (`retention::Snapshot`): its directory, its chunks' lengths
/// added up, its chunks.
pub fn stream_lengths(v: &crate::volume::Volume) -> Vec<(String, u64, u64)> {
    crate::retention::Snapshot::of(v, &Default::default(), 0)
        .streams
        .into_iter()
        .map(|s| {
            let len = s.chunks.iter().map(|c| c.size_bytes).sum();
            (s.path, len, s.chunks.len() as u64)
        })
        .collect()
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
    /// The disk's energy over the run (`disk/power.rs`; `None`: the model has no
    /// power figures, or the device is not emulated).
    pub disk_energy: Option<Energy>,
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
    /// The data region, and the most of it in use at once (blocks in use and held,
    /// as the engine samples it: `RetentionFigures::usage_max_bytes`).
    pub data_bytes: u64,
    pub usage_max_bytes: u64,
    /// A run with retention ([`super::SimConfig::retention`]): what it deleted.
    pub retention: Option<super::RetentionOutcome>,
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

/// The volume's use and retention's figures from the engine, `chunks_started` the
/// client's (`Client::chunks_started`); the retention part only for a run with
/// retention. The simulator calls it beside its engine, `bench` through its
/// runtime's `inspect`.
pub fn retention_outcome(out: &mut SimOutcome, engine: &Engine, chunks_started: u64, with: bool) {
    let sb = engine.volume().superblock();
    let f = engine.retention_figures();
    out.data_bytes = sb.data_blocks * sb.data_block_bytes;
    out.usage_max_bytes = f.usage_max_bytes;
    out.retention = with.then(|| RetentionOutcome {
        figures: f.clone(),
        chunks_started,
        streams_end: stream_lengths(engine.volume()),
    });
}
