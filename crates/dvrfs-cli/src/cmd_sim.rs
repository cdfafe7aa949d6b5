//! `dvrfs sim`: the virtual-time simulator, and the run flags `sim` and `bench` share.

use crate::args::{check_range, parse_duration_in, parse_size};
use crate::error::{CliError, CliResult};
use crate::limits;
use dvrfs_core::disk::{DiskModel, Estimator, StreamParams};
use dvrfs_core::engine::{DevKind, EngineConfig};
use dvrfs_core::format::superblock::AllocPolicy;
use dvrfs_core::sched::{self, Class, SchedSettings};
use dvrfs_core::sim::report::{Neighbour, Report, SeedRun};
use dvrfs_core::sim::{self, BestEffort, HddDisk, SimConfig, SimOutcome, Workload};
use std::path::{Path, PathBuf};

/// The longest `--duration` of `sim` (virtual time) and `bench` (wall-clock time):
/// 7 days. A week of virtual time covers every schedule a DVR repeats; a run asked
/// for longer would take hours of real time (or never end, for `bench`).
pub const MAX_RUN_DURATION_MS: u64 = 7 * 24 * 3_600_000;

/// The most `--age` record-and-delete cycles: 1,000 fragments a volume as far as
/// years of ring recording do, in about a minute.
pub const MAX_AGE_CYCLES: u32 = 1000;

/// Stream parameters shared by `sim` and `capacity`.
#[derive(clap::Args, Debug, Clone)]
pub struct StreamOpts {
    /// Stream bit rate (decimal K/M/G bits per second)
    #[arg(long, default_value = "19.39M")]
    pub bitrate: String,
    /// Bytes per stream request
    #[arg(long, default_value = "512K")]
    pub request: String,
    /// Requests a stream may have outstanding (its buffer)
    #[arg(long, default_value_t = 8)]
    pub depth: u32,
    /// Share of disk time best-effort traffic always gets while it has work (0 to <1)
    #[arg(long, default_value = "0.1", allow_hyphen_values = true)]
    pub be_share: String,
}

/// The mixer's deadline settings (`sim` and `bench`; `capacity` is a bound that no
/// scheduler setting moves, so it does not take them).
#[derive(clap::Args, Debug)]
pub struct MixerOpts {
    /// Completion margin the mixer aims for (m)
    #[arg(long, default_value = "500ms", allow_hyphen_values = true)]
    pub margin: String,
    /// Deadline distance that makes a request urgent (e)
    #[arg(long, default_value = "100ms", allow_hyphen_values = true)]
    pub urgent: String,
}

/// What a run is: workload, scheduler, file system, best-effort traffic (shared by
/// `sim` and `bench`).
#[derive(clap::Args, Debug)]
pub struct RunArgs {
    /// Workload: NrMw (e.g. 4r2w) or a comma list of <count><r|w>[@<bitrate>]
    #[arg(long)]
    pub workload: String,
    /// Disk scheduler: mixer, avfs, fifo, cscan, edf, scan-edf, deadline, cfq
    #[arg(long, default_value = "mixer")]
    pub scheduler: String,
    /// Data block allocation policy: zrr, contig, seq
    #[arg(long, default_value = "zrr")]
    pub alloc: String,
    /// Data block size of the file system
    #[arg(long, default_value = "4M")]
    pub block_size: String,
    #[command(flatten)]
    pub stream: StreamOpts,
    #[command(flatten)]
    pub mixer: MixerOpts,
    /// Fill the file system with recordings to this level first (e.g. 80%)
    #[arg(long, default_value = "80%")]
    pub fill: String,
    /// Record-and-delete cycles that age the file system first, 0 to 1000
    #[arg(long, default_value_t = 0)]
    pub age: u32,
    /// How long the run lasts, 1ms to 168h (sim: 1h of virtual time; bench: 60s of
    /// wall-clock time)
    #[arg(long)]
    pub duration: Option<String>,
    /// Best-effort traffic beside the streams: photos, greedy-read, greedy-write, delete
    #[arg(long)]
    pub best_effort: Option<String>,
    /// Size of the recording --best-effort delete removes
    #[arg(long, default_value = "20000M")]
    pub delete_size: String,
    /// Bytes per request of the best-effort generators (a multiple of 4K)
    #[arg(long, default_value = "512K")]
    pub be_request: String,
    /// Requests greedy-read and greedy-write keep in flight
    #[arg(long, default_value_t = 1)]
    pub be_depth: u32,
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Largest device command contiguous requests are merged into, for every policy (0 = no merging)
    #[arg(long, default_value = "4M")]
    pub merge: String,
    /// Best-effort latency target (its 99th percentile); --find-max fails a run that misses it
    #[arg(long, default_value = "500ms", allow_hyphen_values = true)]
    pub be_latency: String,
    /// Class of the journal and checkpoint writes: metadata, real-time or best-effort
    #[arg(long, default_value = "metadata")]
    pub journal_class: String,
    /// Make the volume with data checksums (as mkfs does by default) and keep them
    /// up to date: their metadata traffic is part of the run
    #[arg(long)]
    pub checksums: bool,
    /// The volume's metadata commit interval (as mkfs --commit-interval), 1ms to 1h
    #[arg(long, default_value = "1s")]
    pub commit_interval: String,
    /// Trick-play readers (`t` terms): the speed, 2 to 32, negative to rewind
    #[arg(long, default_value_t = 8, allow_hyphen_values = true)]
    pub speed: i32,
    /// Trick-play readers: the recordings' keyframe interval (GOP), 100ms to 10s
    #[arg(long, default_value = "2s")]
    pub gop: String,
    /// Run retention on the volume (docs/retention.md): the volume's marks and a
    /// policy for every stream, e.g. high=95%,low=90% or max-size=25G,min-age=7d;
    /// recordings then write chunks into stream directories and the fill is their
    /// history
    #[arg(long)]
    pub retention: Option<String>,
    /// With --retention: the chunk length of the recordings and of the fill's
    /// history, 1s to 24h
    #[arg(long, default_value = "10m")]
    pub chunk: String,
    /// Print one JSON object on stdout
    #[arg(long)]
    pub json: bool,
    /// Write margin_cdf.svg, buffer_level.svg and seek_distance.svg into this directory
    #[arg(long)]
    pub plot: Option<PathBuf>,
}

#[derive(clap::Args, Debug)]
pub struct SimArgs {
    /// Disk model: a built-in name (avfs-250g, nvr-8t, laptop-5400) or a JSON file
    #[arg(long)]
    pub disk: String,
    #[command(flatten)]
    pub run: RunArgs,
    /// Run several seeds: a range (1-10) or a list (1,4,7); --find-max reports the minimum and median
    #[arg(long)]
    pub seeds: Option<String>,
    /// Grow the first workload term until a run fails (a miss, a stopped stream, or the best-effort guarantee not met); report max_streams
    #[arg(long)]
    pub find_max: bool,
    /// Write one CSV row per device command of the reported run (with --find-max, the answer's; with --seeds, the worst seed's) to this file
    #[arg(long)]
    pub trace: Option<PathBuf>,
    /// Make the recordings engine streams written a frame at a time (the engine's write-behind, admission and time-bounded durability) instead of AVFS clients issuing whole requests
    #[arg(long)]
    pub stream_recordings: bool,
    /// With --stream-recordings: the streams' durability interval [default: the commit interval, 1s]
    #[arg(long)]
    pub durable: Option<String>,
    /// With --stream-recordings: format the simulated volume without a tail log, so
    /// recordings write their partial requests in place at each gather point
    #[arg(long)]
    pub no_tail_log: bool,
    /// With --stream-recordings: the simulated volume's tail log ring [default: what mkfs gives it, a 1024th of the disk, 4M to 256M]
    #[arg(long, conflicts_with = "no_tail_log")]
    pub tail_log: Option<String>,
    /// With --stream-recordings: how often the application writes (one frame)
    #[arg(long, default_value = "40ms")]
    pub frame: String,
}

/// A built-in model by name, or a JSON file.
pub fn load_disk(spec: &str) -> CliResult<DiskModel> {
    if let Some(m) = DiskModel::builtin(spec) {
        return Ok(m);
    }
    let path = std::path::Path::new(spec);
    if !path.exists() {
        return Err(CliError::usage(
            format!("unknown disk {spec:?}"),
            format!(
                "use a built-in model ({}) or the path of a model JSON file (see docs/disk-models.md)",
                dvrfs_core::disk::model::BUILTIN_NAMES.join(", ")
            ),
        ));
    }
    let text = std::fs::read_to_string(path)
        .map_err(|e| crate::error::local_io(path, "reading the disk model", e))?;
    DiskModel::from_json(&text).map_err(|e| {
        CliError::usage(
            format!("{spec}: {e}"),
            "fix the model file; docs/disk-models.md lists every field",
        )
    })
}

/// The longest `--margin`, `--urgent` and `--be-latency`: a minute, far beyond any
/// buffer a stream has (the paper uses 500ms and 100ms).
const MAX_MIXER_MS: u64 = 60_000;

fn be_share(text: &str) -> CliResult<f64> {
    text.trim()
        .parse::<f64>()
        .ok()
        .filter(|v| v.is_finite() && (0.0..1.0).contains(v))
        .ok_or_else(|| {
            CliError::usage(
                format!("--be-share {text:?}: must be a fraction of disk time from 0 up to (not including) 1"),
                "e.g. --be-share 0.1 (10% of the disk for copies and ls), or 0 for no guarantee",
            )
        })
}

/// The mixer's margin and urgency threshold, ns.
fn mixer_params(m: &MixerOpts) -> CliResult<(u64, u64)> {
    let margin_ms = parse_duration_in("--margin", &m.margin, 1..=MAX_MIXER_MS)?;
    let urgent_ms = parse_duration_in("--urgent", &m.urgent, 0..=MAX_MIXER_MS)?;
    if urgent_ms >= margin_ms {
        return Err(CliError::usage(
            format!(
                "--urgent {} must be shorter than --margin {}",
                m.urgent, m.margin
            ),
            "the paper uses --margin 500ms --urgent 100ms",
        ));
    }
    Ok((margin_ms * 1_000_000, urgent_ms * 1_000_000))
}

pub(crate) fn stream_params(s: &StreamOpts) -> CliResult<StreamParams> {
    let request_bytes = limits::stream_request("--request", &s.request, "e.g. --request 512K")?;
    Ok(StreamParams {
        bitrate_bps: limits::stream_rate("--bitrate", &s.bitrate)?,
        request_bytes,
        depth: check_range("--depth", s.depth, 1..=limits::MAX_STREAM_DEPTH)?,
        be_share: be_share(&s.be_share)?,
    })
}

/// `--seeds`: `A-B` or a comma list.
fn parse_seeds(text: &str) -> CliResult<Vec<u64>> {
    let bad = || {
        CliError::usage(
            format!("--seeds {text:?} is not a seed range or list"),
            "e.g. --seeds 1-10 or --seeds 1,4,7",
        )
    };
    let seeds: Vec<u64> = if let Some((a, b)) = text.split_once('-') {
        let (a, b): (u64, u64) = (
            a.trim().parse().map_err(|_| bad())?,
            b.trim().parse().map_err(|_| bad())?,
        );
        if a > b {
            return Err(bad());
        }
        if b - a >= 10_000 {
            return Err(CliError::usage(
                format!(
                    "--seeds {text}: {} seeds, more than 10000",
                    (b - a).saturating_add(1)
                ),
                "give at most 10000 seeds, e.g. --seeds 1-100",
            ));
        }
        (a..=b).collect()
    } else {
        text.split(',')
            .map(|x| x.trim().parse().map_err(|_| bad()))
            .collect::<CliResult<_>>()?
    };
    if seeds.is_empty() {
        return Err(bad());
    }
    if seeds.len() > 10_000 {
        return Err(CliError::usage(
            format!("--seeds: {} seeds, more than 10000", seeds.len()),
            "give at most 10000 seeds, e.g. --seeds 1-100",
        ));
    }
    Ok(seeds)
}

fn s_bytes(m: &DiskModel) -> u64 {
    m.sector_bytes as u64
}

pub struct Setup {
    pub model: DiskModel,
    pub cfg: SimConfig,
    pub scheduler: String,
    pub settings: SchedSettings,
    pub journal_class: Class,
    pub seeds: Vec<u64>,
    pub alloc: &'static str,
}

fn setup(a: &SimArgs) -> CliResult<Setup> {
    let mut s = setup_run(load_disk(&a.disk)?, &a.run, "1h")?;
    s.cfg.trace = a.trace.is_some();
    let durable_ns = a
        .durable
        .as_deref()
        .map(crate::args::parse_durable_ns)
        .transpose()?;
    if a.stream_recordings {
        // A frame from 1ms (1000 fps) to 10s (a snapshot camera).
        let frame_ns = parse_duration_in("--frame", &a.frame, 1..=10_000)? * 1_000_000;
        s.cfg.stream_recordings = Some(sim::StreamRecordings {
            durable_ns,
            frame_ns,
        });
        s.cfg.tail_log = crate::cmd_fs::tail_log_size(a.no_tail_log, a.tail_log.as_deref())?;
    } else if a.no_tail_log || a.tail_log.is_some() {
        return Err(CliError::usage(
            "--no-tail-log and --tail-log apply to engine-stream recordings",
            "add --stream-recordings (the AVFS clients issue whole requests and log nothing)",
        ));
    } else if durable_ns.is_some() {
        return Err(CliError::usage(
            "--durable applies to engine-stream recordings",
            "add --stream-recordings (the AVFS clients issue whole requests and have no durability interval)",
        ));
    }
    if let Some(t) = &a.seeds {
        s.seeds = parse_seeds(t)?;
    }
    Ok(s)
}

/// The run `a` describes on `model`; `default_duration` when `--duration` is absent.
pub fn setup_run(model: DiskModel, a: &RunArgs, default_duration: &str) -> CliResult<Setup> {
    // Best-effort traffic alone (0r0w) is a throughput measurement.
    let workload = Workload::parse_with(&a.workload, a.best_effort.is_some()).map_err(|e| {
        CliError::usage(
            e.to_string(),
            "e.g. --workload 4r2w (0r0w only with --best-effort)",
        )
    })?;
    if !sched::NAMES.contains(&a.scheduler.as_str()) {
        return Err(CliError::usage(
            format!("unknown scheduler {:?}", a.scheduler),
            format!("choose one of {}", sched::NAMES.join(", ")),
        ));
    }
    let alloc = AllocPolicy::parse(&a.alloc).ok_or_else(|| {
        CliError::usage(
            format!("unknown allocation policy {:?}", a.alloc),
            "choose zrr, contig or seq",
        )
    })?;
    let sp = stream_params(&a.stream)?;
    limits::check_workload(&a.workload, &workload, sp.depth)?;
    let (margin_ns, urgent_ns) = mixer_params(&a.mixer)?;
    let fill_text = a.fill.trim_end_matches('%');
    let fill: f64 = fill_text
        .parse()
        .ok()
        .filter(|f: &f64| f.is_finite())
        .ok_or_else(|| {
            CliError::usage(
                format!("--fill {:?} is not a percentage", a.fill),
                "e.g. --fill 80%",
            )
        })?;
    if !(0.0..=100.0).contains(&fill) {
        return Err(CliError::usage(
            format!("--fill {}: must be between 0% and 100%", a.fill),
            "e.g. --fill 80%",
        ));
    }
    let best_effort = match &a.best_effort {
        None => None,
        Some(s) => Some(BestEffort::parse(s).ok_or_else(|| {
            CliError::usage(
                format!("unknown best-effort generator {s:?}"),
                format!("choose one of {}", BestEffort::NAMES.join(", ")),
            )
        })?),
    };
    let duration_ms = parse_duration_in(
        "--duration",
        a.duration.as_deref().unwrap_or(default_duration),
        1..=MAX_RUN_DURATION_MS,
    )?;
    check_range("--age", a.age, 0..=MAX_AGE_CYCLES)?;
    let mut cfg = SimConfig::new(workload);
    cfg.alloc = alloc;
    cfg.block_bytes = parse_size("--block-size", &a.block_size)?;
    if !cfg.block_bytes.is_power_of_two()
        || !(dvrfs_core::layout::MIN_DATA_BLOCK_BYTES..=dvrfs_core::layout::MAX_DATA_BLOCK_BYTES)
            .contains(&cfg.block_bytes)
    {
        return Err(CliError::usage(
            format!(
                "invalid --block-size {:?}: {} bytes is not a power of two from 64K to 1G",
                a.block_size, cfg.block_bytes
            ),
            "use 64K, 1M or 4M (the default)",
        ));
    }
    cfg.bitrate_bps = sp.bitrate_bps;
    cfg.request_bytes = sp.request_bytes;
    cfg.depth = sp.depth;
    cfg.fill = fill / 100.0;
    cfg.age_cycles = a.age;
    cfg.duration_ns = duration_ms * 1_000_000;
    cfg.best_effort = best_effort;
    cfg.delete_bytes = limits::size_in(
        "--delete-size",
        &a.delete_size,
        1..=limits::MAX_DELETE_BYTES,
        "from 1 byte to 16T",
        "e.g. --delete-size 20000M (the default)",
    )?;
    cfg.be_request_bytes = limits::stream_request(
        "--be-request",
        &a.be_request,
        "e.g. --be-request 512K (the default) or 4M",
    )?;
    cfg.be_depth = check_range("--be-depth", a.be_depth, 1..=limits::MAX_BE_DEPTH)?;
    cfg.seed = a.seed;
    cfg.checksums = a.checksums;
    cfg.trick_speed = crate::args::trick_speed(a.speed)?;
    cfg.gop_ns = parse_duration_in("--gop", &a.gop, 100..=10_000)? * 1_000_000;
    cfg.commit_interval_ms =
        parse_duration_in("--commit-interval", &a.commit_interval, 1..=3_600_000)? as u32;
    cfg.keep_series = a.plot.is_some();
    cfg.retention = retention(a)?;
    let merge_bytes = limits::size_in(
        "--merge",
        &a.merge,
        0..=limits::MAX_MERGE_BYTES,
        "from 0 (no merging) to 64M",
        "e.g. --merge 4M (the default)",
    )?;
    let be_latency_ms = parse_duration_in("--be-latency", &a.be_latency, 1..=MAX_MIXER_MS)?;
    let journal_class = Class::parse(&a.journal_class).map_err(|e| {
        CliError::usage(
            format!("--journal-class: {e}"),
            "use metadata (the default), real-time or best-effort",
        )
    })?;
    let settings = SchedSettings {
        margin_ns,
        urgent_ns,
        merge_max_sectors: (merge_bytes / s_bytes(&model)).min(u32::MAX as u64) as u32,
        be_share: sp.be_share,
        be_latency_ns: be_latency_ms * 1_000_000,
        ..SchedSettings::default()
    };
    settings
        .validate()
        .map_err(|e| CliError::usage(e.to_string(), "see dvrfs sim --help"))?;
    let seeds = vec![a.seed];
    Ok(Setup {
        model,
        cfg,
        scheduler: a.scheduler.clone(),
        settings,
        journal_class,
        seeds,
        alloc: alloc.as_str(),
    })
}

/// `--retention` and `--chunk`.
fn retention(a: &RunArgs) -> CliResult<Option<sim::SimRetention>> {
    let chunk_ns = parse_duration_in("--chunk", &a.chunk, 1_000..=86_400_000)? * 1_000_000;
    let Some(text) = &a.retention else {
        if chunk_ns != sim::SIM_CHUNK_NS {
            return Err(CliError::usage(
                "--chunk applies to runs with retention",
                "add --retention, e.g. --retention high=95%,low=90%",
            ));
        }
        return Ok(None);
    };
    let p = dvrfs_core::retention::parse_policy(text).map_err(|e| {
        CliError::usage(
            format!("--retention: {e}"),
            "e.g. --retention high=95%,low=90% or --retention max-size=25G,high=95%,low=90%",
        )
    })?;
    let volume = p.volume.unwrap_or_default();
    if let Err(e) = dvrfs_core::volume::check_volume_retention(&volume) {
        return Err(CliError::usage(
            format!("--retention: {e}"),
            "e.g. --retention high=95%,low=90% (low at most high)",
        ));
    }
    let stream = (p.stream != Default::default()).then_some(p.stream);
    if stream.is_none() && volume.high_permille == 0 {
        return Err(CliError::usage(
            format!("--retention {text:?} sets no policy"),
            "give a high mark or a stream policy, e.g. high=95%,low=90% or max-size=25G",
        ));
    }
    Ok(Some(sim::SimRetention {
        volume,
        stream,
        chunk_ns,
        utc_epoch_ns: sim::SIM_UTC_EPOCH_NS,
    }))
}

fn run_once(s: &Setup, cfg: &SimConfig) -> CliResult<SimOutcome> {
    let engine = EngineConfig {
        scheduler: s.scheduler.clone(),
        settings: s.settings,
        estimator: Box::new(Estimator::from_model(&s.model)),
        sector_bytes: s.model.sector_bytes,
        metadata_class: s.journal_class,
        max_ops: dvrfs_core::engine::DEFAULT_MAX_OPS,
        // Engine streams are admitted as the mount admits them, on the model.
        admission: cfg
            .stream_recordings
            .map(|_| dvrfs_core::disk::Admission::from_model(&s.model, s.settings.be_share)),
    };
    let mut disk = HddDisk::new(&s.model, cfg.seed);
    sim::run(cfg, &mut disk, engine).map_err(|e| CliError::new(format!("simulation failed: {e}")))
}

/// A run `--find-max` counts: no miss (late, failed, or not issued), no stream that
/// stopped, and the best-effort guarantee met while best-effort had work.
pub fn passes(o: &SimOutcome) -> bool {
    o.deadline_misses == 0 && o.recordings_stopped == 0 && o.be_guarantee_met()
}

fn find_max(s: &Setup, cfg: &SimConfig) -> CliResult<sim::FindMax> {
    let mut err = None;
    let found = sim::find_max(
        cfg,
        |c| match run_once(s, c) {
            Ok(o) => Ok(o),
            Err(e) => {
                err = Some(e);
                Err(dvrfs_core::Error::InvalidArgument(
                    "the simulation failed".into(),
                ))
            }
        },
        passes,
    );
    match (found, err) {
        (Ok(r), _) => Ok(r),
        (Err(_), Some(e)) => Err(e),
        (Err(e), None) => Err(CliError::new(format!("simulation failed: {e}"))),
    }
}

fn others(cfg: &SimConfig) -> u32 {
    cfg.workload.groups.iter().skip(1).map(|g| g.count).sum()
}

fn report_of(s: &Setup, o: &SimOutcome, cfg: &SimConfig) -> Report {
    Report::new(
        o,
        &cfg.workload.to_string(),
        s.alloc,
        cfg.duration_ns,
        cfg.seed,
    )
}

/// The seed with the smallest `--find-max` answer: count, run, config, neighbours.
type Best = (u32, SimOutcome, SimConfig, Vec<(u32, bool)>);

pub fn sim(a: &SimArgs) -> CliResult<u8> {
    let s = setup(a)?;
    let (outcome, report) = if a.find_max {
        let mut best: Option<Best> = None;
        let mut by_seed = Vec::new();
        for &seed in &s.seeds {
            let mut cfg = s.cfg.clone();
            cfg.seed = seed;
            let f = find_max(&s, &cfg)?;
            by_seed.push((seed, f.count));
            if best.as_ref().is_none_or(|b| f.count < b.0) {
                cfg.workload = cfg.workload.with_first_count(f.count.max(1));
                best = Some((f.count, f.run, cfg, f.neighbours));
            }
        }
        let (count, o, cfg, neighbours) = best.expect("at least one seed");
        let mut r = report_of(&s, &o, &cfg);
        r.max_streams = Some(if count == 0 { 0 } else { count + others(&cfg) });
        r.neighbours = Some(
            neighbours
                .into_iter()
                .map(|(n, passed)| Neighbour {
                    streams: n + others(&cfg),
                    passed,
                })
                .collect(),
        );
        if s.seeds.len() > 1 {
            let mut counts: Vec<u32> = by_seed.iter().map(|x| x.1).collect();
            counts.sort_unstable();
            let n = counts.len();
            let median = if n % 2 == 1 {
                counts[n / 2] as f64
            } else {
                (counts[n / 2 - 1] + counts[n / 2]) as f64 / 2.0
            };
            r.max_streams_median = Some(median + others(&cfg) as f64);
            r.max_streams_by_seed = Some(
                by_seed
                    .iter()
                    .map(|&(seed, c)| (seed, if c == 0 { 0 } else { c + others(&cfg) }))
                    .collect(),
            );
        }
        (o, r)
    } else {
        let mut runs = Vec::new();
        for &seed in &s.seeds {
            let mut cfg = s.cfg.clone();
            cfg.seed = seed;
            let o = run_once(&s, &cfg)?;
            let r = report_of(&s, &o, &cfg);
            runs.push((o, r));
        }
        let by_seed: Vec<SeedRun> = runs
            .iter()
            .map(|(_, r)| SeedRun {
                seed: r.seed,
                deadline_misses: r.deadline_misses,
                margin_min_ms: r.margin_ms.min,
                utilization: r.utilization,
                disk_energy_j: r.disk_energy_j,
                disk_power_w: r.disk_power_w,
                be_throughput_mbps: r.be_throughput_mbps,
                recordings_stopped: r.recordings_stopped,
                usage_max_pct: r.usage_max_pct,
                retention_deleted_bytes: r.retention.retention_deleted_bytes,
                retention_commit_max_chunks: r.retention.retention_commit_max_chunks,
            })
            .collect();
        // The worst run speaks for all: most misses, then the smallest margin.
        let worst = (0..runs.len())
            .max_by(|&i, &j| {
                let (a, b) = (&runs[i].1, &runs[j].1);
                a.deadline_misses
                    .cmp(&b.deadline_misses)
                    .then(b.margin_ms.min.total_cmp(&a.margin_ms.min))
                    .then(j.cmp(&i))
            })
            .expect("at least one seed");
        let (o, mut r) = runs.swap_remove(worst);
        if s.seeds.len() > 1 {
            r.runs_by_seed = Some(by_seed);
        }
        (o, r)
    };
    if let Some(dir) = &a.run.plot {
        let title = format!(
            "{} {} {} on {}",
            report.workload, report.scheduler, report.alloc, report.disk
        );
        crate::plot::write_all(dir, &outcome, &title)?;
    }
    if let Some(path) = &a.trace {
        write_trace(path, &outcome.trace)?;
    }
    if a.run.json {
        let v = serde_json::to_value(&report)
            .map_err(|e| CliError::new(format!("cannot encode the report: {e}")))?;
        crate::output::print_json(&v);
    } else {
        print_text(&report, "sim", "simulated");
    }
    if !a.find_max && report.recordings_stopped > 0 {
        let (refused, full) = (
            report.recordings_refused,
            report.recordings_stopped - report.recordings_refused,
        );
        if refused > 0 {
            eprintln!("dvrfs: admission refused {refused} recording(s): the disk model does not take them at this rate and durability interval");
            eprintln!("hint: record fewer streams, or give them a longer --durable (dvrfs capacity --disk {} --bitrate {} --durable D counts what fits); every request they could not issue counts as missed", a.disk, a.run.stream.bitrate);
        }
        if full > 0 {
            return Ok(stopped_for_space(full.into()));
        }
        return Ok(STREAMS_STOPPED_EXIT);
    }
    Ok(0)
}

/// The energy line of the text report: joules, mean watts and watt-hours per hour,
/// or why the energy is unknown.
fn energy_text(r: &Report, what: &str) -> String {
    match (r.disk_energy_j, r.disk_power_w) {
        (Some(j), Some(w)) => format!("{j:.1} J over the run, mean {w:.2} W ({w:.2} Wh per hour)"),
        _ if what == "bench" && !r.disk.ends_with("(emulated)") => {
            "unknown (a real device is not metered; --device-model emulates one)".to_string()
        }
        _ => "unknown (the disk model has no power section)".to_string(),
    }
}

/// Exit status of `dvrfs sim` when a stream could not go on to the end of the run.
pub const STREAMS_STOPPED_EXIT: u8 = 3;

/// Says that `stopped` recordings stopped because the disk was full (sim, bench,
/// bench --dir) and gives the exit status that says so.
pub fn stopped_for_space(stopped: u64) -> u8 {
    eprintln!("dvrfs: {stopped} recording(s) stopped before the end of the run: the disk was full");
    eprintln!("hint: lower --fill, shorten --duration, or record fewer streams; every request they could not issue counts as missed");
    STREAMS_STOPPED_EXIT
}

/// The report as text; `what` names the command, `time` the kind of time it ran.
pub fn print_text(r: &Report, what: &str, time: &str) {
    outln!(
        "dvrfs {what}: {} on {} with {} scheduling and {} allocation, {:.0} s {time}",
        r.workload,
        r.disk,
        r.scheduler,
        r.alloc,
        r.duration_s
    );
    if let Some(m) = r.max_streams {
        outln!("  max streams       {m} (largest workload with no miss and the best-effort guarantee met)");
        if let (Some(med), Some(by)) = (r.max_streams_median, &r.max_streams_by_seed) {
            let list: Vec<String> = by.iter().map(|(s, c)| format!("{s}:{c}")).collect();
            outln!(
                "                    minimum over seeds; median {med}; by seed {}",
                list.join(" ")
            );
        }
        if let Some(n) = &r.neighbours {
            let list: Vec<String> = n
                .iter()
                .map(|x| format!("{} {}", x.streams, if x.passed { "pass" } else { "fail" }))
                .collect();
            outln!("  neighbourhood     {}", list.join(", "));
        }
    }
    outln!(
        "  real-time         {} requests from {} streams, {} missed (P0 = {:.2e})",
        r.rt_requests,
        r.streams,
        r.deadline_misses,
        r.p_miss,
    );
    if let Some(sr) = &r.stream_recordings {
        outln!(
            "  stream recordings {} disk requests, {} past the buffer's overflow, {} past their commit (durable {}, a write every {} ms)",
            sr.requests,
            sr.late,
            sr.durability_late,
            sr.durable_s
                .map_or("= commit interval".to_string(), |d| format!("{d} s")),
            sr.frame_ms
        );
    }
    if r.deadline_misses > 0 {
        outln!(
            "  misses by cause   {} late, {} reads failed, {} not issued (disk full), {} other",
            r.misses.late,
            r.misses.deadline_failed,
            r.misses.no_space,
            r.misses.other
        );
    }
    if r.recordings_stopped > r.recordings_refused {
        outln!(
            "  STOPPED           {} recording(s) could not go on (disk full)",
            r.recordings_stopped - r.recordings_refused
        );
    }
    if r.recordings_refused > 0 {
        outln!(
            "  REFUSED           {} recording(s) refused by admission (never ran)",
            r.recordings_refused
        );
    }
    outln!(
        "  margin (ms)       min {:.1}   0.01% {:.1}   0.1% {:.1}   1% {:.1}   median {:.1}",
        r.margin_ms.min,
        r.margin_ms.p0001,
        r.margin_ms.p001,
        r.margin_ms.p01,
        r.margin_ms.p50
    );
    match r.mean_time_between_glitches_s {
        Some(s) => outln!("  glitches          one per {:.0} s of stream time", s),
        None => outln!("  glitches          none"),
    }
    outln!("  disk utilization  {:.1}%", r.utilization * 100.0);
    outln!("  disk energy       {}", energy_text(r, what));
    outln!(
        "  throughput        real-time {:.1} Mbit/s, best-effort {:.1} Mbit/s",
        r.rt_throughput_mbps,
        r.be_throughput_mbps
    );
    if r.be_throughput_mbps > 0.0 {
        outln!(
            "  best-effort lat.  median {:.1} ms, 99% {:.1} ms",
            r.be_latency_ms.p50,
            r.be_latency_ms.p99
        );
        outln!(
            "  best-effort share {:.1}% of the disk while it had work (guaranteed {:.0}%, latency target {:.0} ms): {}",
            r.be_share_measured * 100.0,
            r.be_share * 100.0,
            r.be_latency_target_ms,
            if r.be_guarantee_met { "met" } else { "NOT met" }
        );
    }
    outln!(
        "  usage             at most {:.2}% of the data region",
        r.usage_max_pct
    );
    if let (Some(bytes), Some(chunks)) = (
        r.retention.retention_deleted_bytes,
        r.retention.retention_deleted_chunks,
    ) {
        outln!(
            "  retention         {} chunk(s) deleted, {}; {} commit(s) carried them, at most {} chunk(s) and {:.0} KiB of journal in one; {:.1} s above high with nothing left to delete",
            chunks,
            crate::output::human_bytes(bytes),
            r.retention.retention_commits.unwrap_or(0),
            r.retention.retention_commit_max_chunks.unwrap_or(0),
            r.retention.retention_commit_max_kib.unwrap_or(0.0),
            r.retention.retention_shortfall_s.unwrap_or(0.0)
        );
    }
    if let Some(d) = &r.delete {
        outln!(
            "  delete            a {} file, unlinked at {:.1} s: {}",
            crate::output::human_bytes(d.bytes),
            d.submitted_s,
            match d.unlink_ms {
                Some(ms) => format!("done in {ms:.1} ms (its blocks free at the next commit)"),
                None => "NOT done when the run ended".to_string(),
            }
        );
    }
    outln!(
        "  journal           {} commits: {} commands, {:.2} MB, {} flushes",
        r.commits,
        r.journal_requests,
        r.journal_mbytes,
        r.flushes
    );
    outln!(
        "  seeks             {:.1}% within 5 GB, mean {:.2} GB",
        r.seek_within_5gb * 100.0,
        r.mean_seek_distance_gb
    );
    outln!("  scheduler         inserted {} dispatched {} completed {} failed {} (conservation checked)", r.counters.inserted, r.counters.dispatched, r.counters.completed, r.counters.failed);
}

/// The columns of `dvrfs sim --trace` (docs/commands.md describes each).
const TRACE_HEADER: &str = "start_ms,end_ms,kind,class,offset_bytes,len_bytes,requests,deadline_ms,margin_ms,forced,seek_ms,rotation_ms,transfer_ms,cache";

/// Writes the command trace as CSV: times in milliseconds of virtual time.
fn write_trace(path: &Path, rows: &[sim::TraceRow]) -> CliResult<()> {
    use std::fmt::Write as _;
    let ms = |ns: u64| ns as f64 / 1e6;
    let mut out = String::with_capacity(rows.len() * 96 + 128);
    out.push_str(TRACE_HEADER);
    out.push('\n');
    for r in rows {
        let kind = match r.kind {
            DevKind::Read => "read",
            DevKind::Write => "write",
            DevKind::Flush => "flush",
        };
        let class = r.class.map_or("", |c| c.name());
        let (deadline, margin) = match r.deadline_ns {
            Some(d) => (
                format!("{:.3}", ms(d)),
                format!("{:.3}", (d as f64 - r.end_ns as f64) / 1e6),
            ),
            None => (String::new(), String::new()),
        };
        let cache = if r.cache_hit {
            "hit"
        } else if r.cache_partial_hit {
            "partial"
        } else {
            ""
        };
        // Writing to a String cannot fail.
        let _ = writeln!(
            out,
            "{:.3},{:.3},{kind},{class},{},{},{},{deadline},{margin},{},{:.3},{:.3},{:.3},{cache}",
            ms(r.start_ns),
            ms(r.end_ns),
            r.offset_bytes,
            r.len_bytes,
            r.requests,
            r.forced as u8,
            ms(r.seek_ns),
            ms(r.rotation_ns),
            ms(r.transfer_ns),
        );
    }
    std::fs::write(path, out).map_err(|e| crate::error::local_io(path, "cannot write the trace", e))
}
