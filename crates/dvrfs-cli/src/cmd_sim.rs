//! `dvrfs sim` and `dvrfs capacity`: the virtual-time simulator and the admission bound.

use crate::args::{parse_duration_ms, parse_size};
use crate::error::{CliError, CliResult};
use dvrfs_core::disk::{capacity, DiskModel, Estimator, StreamParams};
use dvrfs_core::format::superblock::AllocPolicy;
use dvrfs_core::qos::Report;
use dvrfs_core::sched::{self, SchedSettings};
use dvrfs_core::sim::{self, BestEffort, HddDisk, SimConfig, SimOutcome, Workload};
use std::path::PathBuf;

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
    /// Completion margin the mixer aims for (m)
    #[arg(long, default_value = "500ms")]
    pub margin: String,
    /// Deadline distance that makes a request urgent (e)
    #[arg(long, default_value = "100ms")]
    pub urgent: String,
}

#[derive(clap::Args, Debug)]
pub struct SimArgs {
    /// Disk model: a built-in name (avfs-250g, nvr-8t) or a JSON file
    #[arg(long)]
    pub disk: String,
    /// Workload: NrMw (e.g. 4r2w) or a comma list of <count><r|w>[@<bitrate>]
    #[arg(long)]
    pub workload: String,
    /// Disk scheduler: mixer, avfs, fifo, cscan, edf, scan-edf, deadline, cfq
    #[arg(long, default_value = "mixer")]
    pub scheduler: String,
    /// Data block allocation policy: zrr, contig, seq
    #[arg(long, default_value = "zrr")]
    pub alloc: String,
    /// Data block size of the simulated file system
    #[arg(long, default_value = "4M")]
    pub block_size: String,
    #[command(flatten)]
    pub stream: StreamOpts,
    /// Fill the file system with recordings to this level first (e.g. 80%)
    #[arg(long, default_value = "80%")]
    pub fill: String,
    /// Record-and-delete cycles that age the file system first
    #[arg(long, default_value_t = 0)]
    pub age: u32,
    /// Simulated time
    #[arg(long, default_value = "1h")]
    pub duration: String,
    /// Best-effort traffic beside the streams: photos, greedy-read, greedy-write, delete
    #[arg(long)]
    pub best_effort: Option<String>,
    /// Size of the recording --best-effort delete removes
    #[arg(long, default_value = "20000M")]
    pub delete_size: String,
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Largest device command the mixer may merge contiguous requests into (0 = no merging)
    #[arg(long, default_value = "4M")]
    pub merge: String,
    /// Grow the first workload term until a deadline is missed; report max_streams
    #[arg(long)]
    pub find_max: bool,
    /// Print one JSON object on stdout
    #[arg(long)]
    pub json: bool,
    /// Write margin_cdf.svg, buffer_level.svg and seek_distance.svg into this directory
    #[arg(long)]
    pub plot: Option<PathBuf>,
}

#[derive(clap::Args, Debug)]
pub struct CapacityArgs {
    /// Disk model: a built-in name (avfs-250g, nvr-8t) or a JSON file
    #[arg(long)]
    pub disk: String,
    #[command(flatten)]
    pub stream: StreamOpts,
    /// Print one JSON object on stdout
    #[arg(long)]
    pub json: bool,
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

fn rate(flag: &str, text: &str) -> CliResult<f64> {
    sim::workload::parse_rate_bps(text).ok_or_else(|| {
        CliError::usage(
            format!("{flag} {text:?} is not a bit rate"),
            "give bits per second with K/M/G, e.g. 19.39M",
        )
    })
}

fn stream_params(s: &StreamOpts) -> CliResult<(StreamParams, u64, u64)> {
    let request_bytes = parse_size("--request", &s.request)?;
    if request_bytes == 0 || !request_bytes.is_multiple_of(4096) {
        return Err(CliError::usage(
            format!("--request {}: must be a positive multiple of 4K", s.request),
            "e.g. --request 512K",
        ));
    }
    if s.depth == 0 {
        return Err(CliError::usage(
            "--depth 0: a stream needs at least one request",
            "e.g. --depth 8",
        ));
    }
    let margin_ms = parse_duration_ms("--margin", &s.margin)?;
    let urgent_ms = parse_duration_ms("--urgent", &s.urgent)?;
    if urgent_ms >= margin_ms {
        return Err(CliError::usage(
            "--urgent must be shorter than --margin",
            "the paper uses --margin 500ms --urgent 100ms",
        ));
    }
    Ok((
        StreamParams {
            bitrate_bps: rate("--bitrate", &s.bitrate)?,
            request_bytes,
            depth: s.depth,
        },
        margin_ms * 1_000_000,
        urgent_ms * 1_000_000,
    ))
}

fn s_bytes(m: &DiskModel) -> u64 {
    m.sector_bytes as u64
}

struct Setup {
    model: DiskModel,
    cfg: SimConfig,
    scheduler: String,
    settings: SchedSettings,
    alloc: &'static str,
}

fn setup(a: &SimArgs) -> CliResult<Setup> {
    let model = load_disk(&a.disk)?;
    let workload = Workload::parse(&a.workload)
        .map_err(|e| CliError::usage(e.to_string(), "e.g. --workload 4r2w"))?;
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
    let (sp, margin_ns, urgent_ns) = stream_params(&a.stream)?;
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
    let duration_ms = parse_duration_ms("--duration", &a.duration)?;
    if duration_ms == 0 {
        return Err(CliError::usage(
            "--duration must be positive",
            "e.g. --duration 1h",
        ));
    }
    let mut cfg = SimConfig::new(workload);
    cfg.alloc = alloc;
    cfg.block_bytes = parse_size("--block-size", &a.block_size)?;
    cfg.bitrate_bps = sp.bitrate_bps;
    cfg.request_bytes = sp.request_bytes;
    cfg.depth = sp.depth;
    cfg.fill = fill / 100.0;
    cfg.age_cycles = a.age;
    cfg.duration_ns = duration_ms * 1_000_000;
    cfg.best_effort = best_effort;
    cfg.delete_bytes = parse_size("--delete-size", &a.delete_size)?;
    cfg.seed = a.seed;
    cfg.keep_series = a.plot.is_some();
    let merge_bytes = parse_size("--merge", &a.merge)?;
    let settings = SchedSettings {
        margin_ns,
        urgent_ns,
        merge_max_sectors: (merge_bytes / s_bytes(&model)).min(u32::MAX as u64) as u32,
        ..SchedSettings::default()
    };
    Ok(Setup {
        model,
        cfg,
        scheduler: a.scheduler.clone(),
        settings,
        alloc: alloc.as_str(),
    })
}

fn run_once(s: &Setup, cfg: &SimConfig) -> CliResult<SimOutcome> {
    let mut sched = sched::by_name(
        &s.scheduler,
        s.settings,
        Box::new(Estimator::from_model(&s.model)),
    )
    .map_err(|e| CliError::usage(e.to_string(), "see dvrfs sim --help"))?;
    let mut disk = HddDisk::new(&s.model, cfg.seed);
    sim::run(cfg, &mut disk, &mut sched)
        .map_err(|e| CliError::new(format!("simulation failed: {e}")))
}

fn find_max(s: &Setup) -> CliResult<(SimOutcome, u32)> {
    let mut err = None;
    let found = sim::find_max(&s.cfg, |cfg| match run_once(s, cfg) {
        Ok(o) => Ok(o),
        Err(e) => {
            err = Some(e);
            Err(dvrfs_core::Error::InvalidArgument(
                "the simulation failed".into(),
            ))
        }
    });
    match (found, err) {
        (Ok(r), _) => Ok(r),
        (Err(_), Some(e)) => Err(e),
        (Err(e), None) => Err(CliError::new(format!("simulation failed: {e}"))),
    }
}

pub fn sim(a: &SimArgs) -> CliResult<u8> {
    let s = setup(a)?;
    let (outcome, max_streams) = if a.find_max {
        let (o, n) = find_max(&s)?;
        let others: u32 = s.cfg.workload.groups.iter().skip(1).map(|g| g.count).sum();
        (o, Some(if n == 0 { 0 } else { n + others }))
    } else {
        (run_once(&s, &s.cfg)?, None)
    };
    let workload = match max_streams {
        Some(_) => s.cfg.workload.with_first_count(
            outcome.streams.saturating_sub(
                s.cfg
                    .workload
                    .groups
                    .iter()
                    .skip(1)
                    .map(|g| g.count)
                    .sum::<u32>(),
            ),
        ),
        None => s.cfg.workload.clone(),
    };
    let mut report = Report::new(
        &outcome,
        &workload.to_string(),
        s.alloc,
        s.cfg.duration_ns,
        s.cfg.seed,
    );
    report.max_streams = max_streams;
    if let Some(dir) = &a.plot {
        let title = format!(
            "{} {} {} on {}",
            report.workload, report.scheduler, report.alloc, report.disk
        );
        crate::plot::write_all(dir, &outcome, &title)?;
    }
    if a.json {
        let v = serde_json::to_value(&report)
            .map_err(|e| CliError::new(format!("cannot encode the report: {e}")))?;
        crate::output::print_json(&v);
    } else {
        print_text(&report);
    }
    Ok(0)
}

fn print_text(r: &Report) {
    outln!(
        "dvrfs sim: {} on {} with {} scheduling and {} allocation, {:.0} s simulated",
        r.workload,
        r.disk,
        r.scheduler,
        r.alloc,
        r.duration_s
    );
    if let Some(m) = r.max_streams {
        outln!("  max streams       {m} (largest workload with no deadline miss)");
    }
    outln!(
        "  real-time         {} requests from {} streams, {} missed (P0 = {:.2e}), {} reads failed",
        r.rt_requests,
        r.streams,
        r.deadline_misses,
        r.p_miss,
        r.failed_reads
    );
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
    }
    outln!(
        "  journal           {} requests, {:.2} MB",
        r.journal_requests,
        r.journal_mbytes
    );
    outln!(
        "  seeks             {:.1}% within 5 GB, mean {:.2} GB",
        r.seek_within_5gb * 100.0,
        r.mean_seek_distance_gb
    );
    outln!("  scheduler         inserted {} dispatched {} completed {} failed {} (conservation checked)", r.counters.inserted, r.counters.dispatched, r.counters.completed, r.counters.failed);
}

pub fn capacity_cmd(a: &CapacityArgs) -> CliResult<u8> {
    let model = load_disk(&a.disk)?;
    let (sp, _, _) = stream_params(&a.stream)?;
    let r = capacity(&model, &sp);
    if a.json {
        let mut v = serde_json::to_value(&r)
            .map_err(|e| CliError::new(format!("cannot encode the report: {e}")))?;
        if let Some(o) = v.as_object_mut() {
            o.insert("disk".into(), model.name.clone().into());
            o.insert("bitrate_bps".into(), sp.bitrate_bps.into());
            o.insert("request_bytes".into(), sp.request_bytes.into());
            o.insert("depth".into(), sp.depth.into());
        }
        crate::output::print_json(&v);
    } else {
        outln!(
            "dvrfs capacity: {} streams of {:.2} Mbit/s in {} requests, depth {}",
            model.name,
            sp.bitrate_bps / 1e6,
            crate::output::human_bytes(sp.request_bytes),
            sp.depth
        );
        outln!(
            "  bandwidth bound   {} streams (zone-averaged sustained rate {:.1} MB/s)",
            r.bandwidth_bound_streams,
            r.zone_avg_rate_bytes_per_s / 1e6
        );
        outln!(
            "  round bound       {} streams (round of {:.0} ms)",
            r.round_bound_streams,
            r.round_ms
        );
    }
    Ok(0)
}
