//! `dvrfs bench`: a `sim` workload on a real device or image, in wall-clock time.
//!
//! The same parts as `sim`, with the runtime in place of the virtual disk: the volume
//! is formatted, filled and aged exactly as the simulator does it for the same seed
//! (`sim::prepare_device`, metadata only: the recordings' blocks are allocated, their
//! bytes are whatever the device holds), then the simulator's own workload client
//! (`sim::Client`: AVFS 2.1 stream clients and the best-effort generators) runs
//! against the runtime, with real buffers, its timers on the monotonic clock. The
//! report comes from the engine's QoS recorder and scheduler like `sim`'s
//! (`sim::fill_outcome`), so the JSON keys and plots are the same. With
//! `--device-model` the runtime emulates that disk on the image (every command
//! completes when the model's disk would have finished it), which is how `bench` and
//! `sim` are compared; without it, the device runs at its own speed (the mixer plans
//! with `--disk`'s model, or nvr-8t's). On a `dvrfs emulate` loop device the
//! emulator is the disk (`crate::emulated`): the mixer plans with its model, the
//! preparation runs with its timing off, and utilization and energy come from its
//! stats over the measured run, as for `bench --dir`.
//!
//! What cannot be known in wall-clock time is left out rather than guessed: the
//! per-command split into seek, rotation and transfer, and the drive's cache hits.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::io::ErrorKind;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use clap::Args;
use dvrfs_core::device::Device;
use dvrfs_core::disk::{DiskModel, Estimator};
use dvrfs_core::engine::EngineConfig;
use dvrfs_core::sim::report::Report;
use dvrfs_core::sim::{self, Client, ClientEv, Host, SimOutcome};
use dvrfs_core::volume::Volume;
use dvrfs_core::{Error as CoreError, Op, OpId, Output};
use dvrfs_io::FileDevice;
use dvrfs_runtime::{Runtime, RuntimeError, Ticket};

use crate::args::parse_size;
use crate::cmd_sim::{load_disk, print_text, setup_run, RunArgs, Setup};
use crate::emulated::{self, EmuStats, Emulated, UntimedWhile};
use crate::error::{CliError, CliResult};
use crate::target::{open_device, Access};
use crate::wall_clock::{self, Completion, Timers, WallHost};

/// What `dvrfs demo` runs: a DVR's four playbacks and two recordings of ATSC streams
/// beside a copy of photos, on the emulated `avfs-250g` (the AVFS paper's disk).
pub const DEMO_WORKLOAD: &str = "4r2w";
pub const DEMO_BEST_EFFORT: &str = "photos";
pub const DEMO_DISK: &str = "avfs-250g";

/// Size of a new image without a device model.
const DEFAULT_BENCH_IMAGE_BYTES: u64 = 64 << 30;

#[derive(Args, Debug)]
pub struct BenchArgs {
    /// Image file or block device. It is formatted: a new image is created (sparse);
    /// one that holds a file system or data needs --force
    #[arg(required_unless_present = "dir")]
    pub target: Option<PathBuf>,
    /// Run the workload on files in this directory of any file system instead (POSIX
    /// calls, a thread per stream; nothing is formatted): see docs/bench.md
    #[arg(long, value_name = "PATH", conflicts_with_all = [
        "target", "scheduler", "alloc", "block_size", "margin", "urgent", "merge",
        "be_share", "be_latency", "journal_class", "checksums", "commit_interval",
    ])]
    pub dir: Option<PathBuf>,
    /// With --dir: open the streams' files with O_DIRECT (default: buffered I/O)
    #[arg(long, requires = "dir")]
    pub direct: bool,
    /// With --dir: each recording calls fdatasync at this interval (e.g. 1s)
    #[arg(long, requires = "dir")]
    pub fsync_every: Option<String>,
    /// With --dir: the I/O priority class of the stream threads: rt, be or idle
    #[arg(long, requires = "dir")]
    pub ioprio: Option<String>,
    /// With --dir: keep PATH/dvrfs-bench (the fill and the recordings) after the run
    #[arg(long, requires = "dir")]
    pub keep: bool,
    /// With --dir: only prepare PATH/dvrfs-bench (the fill, --age, the delete victim)
    /// and keep it, with a manifest, for runs with --reuse-fill
    #[arg(long, requires = "dir", conflicts_with_all = ["reuse_fill", "keep", "plot"])]
    pub fill_only: bool,
    /// With --dir: measure on the fill a --fill-only run left in PATH/dvrfs-bench (made
    /// with the same --fill, --seed, --age); afterwards only this run's files are removed
    #[arg(long, requires = "dir")]
    pub reuse_fill: bool,
    /// Emulate this hard disk on the image (a built-in model name or a JSON file): real
    /// data, each command completed when the model's disk would finish it; the mixer
    /// plans with the model. Without it the device runs at its own speed
    #[arg(long, conflicts_with = "dir")]
    pub device_model: Option<String>,
    /// The model of TARGET, a real disk whose model is known (a built-in name or a
    /// JSON file): the mixer plans with it, the device runs at its own speed. Not
    /// needed on a `dvrfs emulate` loop device (its model is read from the emulator)
    #[arg(long, value_name = "NAME|FILE", conflicts_with_all = ["dir", "device_model"])]
    pub disk: Option<String>,
    /// Size of a new image (default: the model's capacity with --device-model, else 64G)
    #[arg(long, allow_hyphen_values = true, conflicts_with = "dir")]
    pub size: Option<String>,
    /// Format TARGET even if it holds a file system or other data
    #[arg(long, conflicts_with = "dir")]
    pub force: bool,
    /// Device commands in flight at once: 1 for a hard disk (and an emulated one), more
    /// for an SSD or an image file
    #[arg(long, default_value_t = 1, conflicts_with = "dir")]
    pub queue_depth: u32,
    #[command(flatten)]
    pub run: RunArgs,
}

/// The runtime as the workload client's host: wall-clock timers and tickets.
struct BenchHost<'a> {
    rt: &'a Runtime,
    start: Instant,
    /// The runtime's clock at `start`.
    t0_ns: u64,
    events: BinaryHeap<Reverse<(u64, u64, ClientEv)>>,
    seq: u64,
    tickets: Vec<Ticket>,
    not_issued: Vec<(u64, bool)>,
    late: u64,
}

fn core_err(e: RuntimeError) -> CoreError {
    match e {
        RuntimeError::Engine(e) => e,
        other => CoreError::io(
            "running the workload",
            std::io::Error::other(other.to_string()),
        ),
    }
}

impl Host for BenchHost<'_> {
    fn submit(
        &mut self,
        op: Op,
        deadline_ns: Option<u64>,
        owner: u32,
        _now: u64,
    ) -> dvrfs_core::Result<OpId> {
        let deadline = deadline_ns.map(|d| self.start + Duration::from_nanos(d));
        let t = self.rt.start(op, deadline, owner).map_err(core_err)?;
        self.tickets.push(t);
        Ok(t.0)
    }

    fn namespace(&mut self, op: Op) -> dvrfs_core::Result<u32> {
        match self.rt.run(op, None, 0).map_err(core_err)? {
            Output::Ino(i) => Ok(i),
            _ => Ok(0),
        }
    }

    fn schedule(&mut self, at_ns: u64, ev: ClientEv) {
        self.seq += 1;
        self.events.push(Reverse((at_ns, self.seq, ev)));
    }

    fn not_issued(&mut self, count: u64, no_space: bool) {
        self.not_issued.push((count, no_space));
    }

    fn query<R: Send + 'static>(
        &mut self,
        f: impl FnOnce(&Volume) -> R + Send + 'static,
    ) -> dvrfs_core::Result<R> {
        self.rt.query(f).map_err(core_err)
    }
}

/// Opens (creating if missing) and checks TARGET; the device to format.
fn target_device(
    a: &BenchArgs,
    target: &std::path::Path,
    model_bytes: Option<u64>,
) -> CliResult<FileDevice> {
    let size = a
        .size
        .as_deref()
        .map(|s| parse_size("--size", s))
        .transpose()?;
    match std::fs::metadata(target) {
        Err(e) if e.kind() == ErrorKind::NotFound => {
            let bytes = size.or(model_bytes).unwrap_or(DEFAULT_BENCH_IMAGE_BYTES);
            FileDevice::create_image(target, bytes)?;
        }
        Err(e) => return Err(crate::error::local_io(target, "cannot read", e)),
        Ok(_) => {
            let dev = open_device(target, Access::Write)?;
            let existing = if a.force {
                None
            } else {
                crate::cmd_fs::existing_contents_of(target, &dev)?
            };
            if let Some(what) = existing {
                return Err(CliError::new(format!(
                    "{} already holds {what}; bench formats its target",
                    target.display()
                ))
                .hint("add --force to benchmark on it anyway (this destroys what is there), or give a new image path"));
            }
        }
    }
    let dev = open_device(target, Access::Write)?;
    if let Some(m) = model_bytes {
        if dev.size_bytes() > m {
            return Err(CliError::usage(
                format!(
                    "{} is {} bytes, larger than the emulated disk ({m} bytes)",
                    target.display(),
                    dev.size_bytes()
                ),
                "use a smaller image, or leave out --device-model",
            ));
        }
    }
    Ok(dev)
}

#[derive(Args, Debug)]
pub struct DemoArgs {
    /// The image to create (sparse: it takes a few hundred MB of real space)
    #[arg(long, default_value = "dvrfs-demo.img")]
    pub image: PathBuf,
    /// How long the streams run
    #[arg(long, default_value = "60s")]
    pub duration: String,
    /// Where the plots go
    #[arg(long, default_value = "dvrfs-demo-plots")]
    pub plot: PathBuf,
    /// The disk to emulate: a built-in model name or a model JSON file
    #[arg(long, default_value = DEMO_DISK)]
    pub device_model: String,
}

/// `dvrfs demo`: `bench` with the DVR workload on the emulated `avfs-250g`.
pub fn demo(a: &DemoArgs) -> CliResult<u8> {
    // Our own demo image from an earlier run may be formatted again; anything else
    // at that path is refused by bench's usual check.
    let ours = std::fs::metadata(&a.image).is_ok()
        && dvrfs_io::FileDevice::open(&a.image, false, dvrfs_io::LockMode::Shared)
            .ok()
            .and_then(|d| Volume::load(&d, &dvrfs_core::OpenOptions::read_only()).ok())
            .is_some();
    let mut argv: Vec<String> = vec![
        "dvrfs".into(),
        "bench".into(),
        a.image.display().to_string(),
        "--device-model".into(),
        a.device_model.clone(),
        "--workload".into(),
        DEMO_WORKLOAD.into(),
        "--best-effort".into(),
        DEMO_BEST_EFFORT.into(),
        "--duration".into(),
        a.duration.clone(),
        "--plot".into(),
        a.plot.display().to_string(),
    ];
    if ours {
        argv.push("--force".into());
    }
    let cli = <crate::args::Cli as clap::Parser>::try_parse_from(&argv)
        .map_err(|e| CliError::usage(format!("demo: {e}"), "see dvrfs demo --help"))?;
    let crate::args::Command::Bench(b) = cli.command else {
        unreachable!("the demo builds a bench command line")
    };
    let disk = if a.device_model == DEMO_DISK {
        format!("{DEMO_DISK} disk (the AVFS paper's)")
    } else {
        a.device_model.clone()
    };
    eprintln!(
        "dvrfs demo: {DEMO_WORKLOAD} (4 playbacks, 2 recordings of 19.39 Mbit/s ATSC streams) beside a copy of {} photos, on an emulated {disk}, for {}",
        sim::PHOTO_COUNT,
        a.duration
    );
    eprintln!(
        "dvrfs demo: image {} (sparse), every command timed by the disk model in wall-clock time",
        a.image.display()
    );
    let code = bench(&b)?;
    outln!();
    outln!(
        "plots: {}/margin_cdf.svg, buffer_level.svg, seek_distance.svg",
        a.plot.display()
    );
    outln!("the same workload in virtual time (an hour in about a second):");
    outln!(
        "  dvrfs sim --disk {} --workload {DEMO_WORKLOAD} --best-effort {DEMO_BEST_EFFORT}",
        a.device_model
    );
    outln!("on a real disk (this formats it):");
    outln!("  dvrfs bench /dev/sdX --force --workload {DEMO_WORKLOAD} --best-effort {DEMO_BEST_EFFORT}");
    outln!("record and play with reservations: dvrfs record / dvrfs play (docs/commands.md)");
    Ok(code)
}

pub fn bench(a: &BenchArgs) -> CliResult<u8> {
    let target = match (&a.target, &a.dir) {
        (_, Some(dir)) => return crate::bench_dir::bench_dir(a, dir),
        (Some(t), None) => t.as_path(),
        (None, None) => unreachable!("clap requires TARGET or --dir"),
    };
    let DiskPlan {
        plan: plan_model,
        emulate: model,
        emulated,
    } = disk_plan(a, target)?;
    if a.run.checksums {
        return Err(CliError::usage(
            "--checksums is for sim: bench fills its volume with metadata only (no bytes to checksum)",
            "run `dvrfs sim --checksums` to see what checksums cost in disk time; `dvrfs scrub` and docs/checksums.md measure the rest",
        ));
    }
    let s: Setup = setup_run(plan_model.clone(), &a.run, "60s")?;
    let mut cfg = s.cfg.clone();
    if let Some(r) = cfg.retention.as_mut() {
        // Chunk names count from the engine's clock: the wall clock, now.
        r.utc_epoch_ns = jiff::Timestamp::now().as_nanosecond() as i64;
    }
    // An emulated disk's preparation (the checks, mkfs, the metadata-only fill) runs
    // at host speed; the measured run is timed.
    let untimed = emulated
        .as_ref()
        .map(|e| {
            UntimedWhile::start(&e.dir).map_err(|err| {
                crate::error::local_io(&e.dir, "cannot turn off the timing of the emulator in", err)
            })
        })
        .transpose()?;
    let dev = target_device(a, target, model.as_ref().map(|m| m.capacity_bytes()))?;
    let progress = crate::output::progress(0, false, "bench: preparing the volume");
    let mut rng = sim::run_rng(&cfg);
    let (dev, recordings, used) = sim::prepare_device(dev, &cfg, &mut rng)
        .map_err(|e| CliError::from(e).hint("the volume could not be prepared"))?;
    progress.finish_and_clear();
    let engine = EngineConfig {
        scheduler: s.scheduler.clone(),
        settings: s.settings,
        estimator: Box::new(Estimator::from_model(&plan_model)),
        sector_bytes: dev.sector_bytes(),
        metadata_class: s.journal_class,
        max_ops: dvrfs_core::engine::DEFAULT_MAX_OPS,
        admission: None,
    };
    let rt = Runtime::with_device(
        dev,
        dvrfs_runtime::Options {
            engine: Some(engine),
            device_model: model.clone(),
            device_seed: cfg.seed,
            queue_depth: a.queue_depth,
            ..dvrfs_runtime::Options::default()
        },
    )?;
    // Large requests get huge-page buffers (dvrfs_io::HugeBuf: fewer, larger device
    // segments for O_DIRECT).
    let mut client = Client::new(&cfg, rng, true).with_allocator(dvrfs_io::HugeBuf::io_buf);
    drop(untimed);
    let emu_before = emulator_stats(emulated.as_ref())?;
    // The emulated disk's energy over the run: a report before and one after.
    let energy_before = rt.disk_energy()?;
    let start = Instant::now();
    let mut host = BenchHost {
        rt: &rt,
        start,
        t0_ns: rt.now_ns(),
        events: BinaryHeap::new(),
        seq: 0,
        tickets: Vec::new(),
        not_issued: Vec::new(),
        late: 0,
    };
    let result = wall_clock::drive(
        &mut client,
        &mut host,
        &recordings,
        cfg.duration_ns,
        "bench",
    );
    let elapsed_ns = host.now_ns().min(cfg.duration_ns.max(1));
    let energy_after = rt.disk_energy();
    let not_issued = std::mem::take(&mut host.not_issued);
    let pending = client.outstanding();
    result?;
    let emu_after = emulator_stats(emulated.as_ref())?;
    let mut out = engine_outcome(&rt, not_issued, pending)?;
    sim::client_outcome(&mut out, &client);
    // The same as the simulator's, read where the runtime's engine is.
    let (chunks, with) = (client.chunks_started(), cfg.retention.is_some());
    let mut out = rt.inspect(move |e| {
        sim::retention_outcome(&mut out, e, chunks, with);
        out
    })?;
    out.elapsed_ns = elapsed_ns;
    out.disk_energy = match (energy_before, energy_after?) {
        (Some(a), Some(b)) => Some(b.since(&a)),
        _ => None,
    };
    out.used_bytes_at_start = used;
    out.disk = match (&emulated, &model, &a.disk) {
        // The loaded model's name: a model file's own name, not its path.
        (Some(e), _, _) => format!("{} (emulated, /dev/{})", plan_model.name, e.device),
        (None, Some(m), _) => format!("{} (emulated)", m.name),
        (None, None, Some(_)) => format!("{} ({})", target.display(), plan_model.name),
        (None, None, None) => target.display().to_string(),
    };
    (out.buffer_level, out.buffer_stream) = sim::buffer_level(&cfg, &client, elapsed_ns);
    rt.close()?;
    let mut report = Report::new(
        &out,
        &cfg.workload.to_string(),
        s.alloc,
        cfg.duration_ns,
        cfg.seed,
    );
    if let (Some(b), Some(af)) = (&emu_before, &emu_after) {
        // The emulator's meter, as for `bench --dir`: the same for every stack.
        let (util, energy) = emulated::usage(b, af, elapsed_ns);
        report.utilization = util;
        report.disk_energy_j = energy;
        report.disk_power_w = energy.map(|j| j / (elapsed_ns as f64 / 1e9).max(1e-9));
    }
    emit(a, &report, &out)
}

/// The report's figures from the engine (its QoS recorder and scheduler), as the
/// simulator makes them, after checking the engine's invariants.
fn engine_outcome(
    rt: &Runtime,
    not_issued: Vec<(u64, bool)>,
    pending: u64,
) -> CliResult<SimOutcome> {
    // The report, from the engine's own figures, as the simulator makes it.
    let checked = rt.inspect(|e| e.check())?;
    if let Err(e) = checked {
        return Err(CliError::new(format!(
            "the engine broke an internal invariant during the run: {e}"
        ))
        .hint("this is a dvrfs bug; please report it with the command that was run"));
    }
    let out = rt.inspect(move |e| {
        let mut out = SimOutcome {
            data_block_bytes: e.volume().superblock().data_block_bytes,
            ..SimOutcome::default()
        };
        let mut q = e.qos().clone();
        for (n, no_space) in not_issued {
            q.not_issued(n, no_space);
        }
        // Requests still outstanding when the run was cut count as late.
        if pending > 0 {
            q.not_issued(pending, false);
        }
        sim::fill_outcome(&mut out, e.scheduler(), q);
        out
    })?;
    Ok(out)
}

/// Writes the plots and prints the report; the exit status.
fn emit(a: &BenchArgs, report: &Report, out: &SimOutcome) -> CliResult<u8> {
    if let Some(dir) = &a.run.plot {
        let title = format!(
            "bench {} {} {} on {}",
            report.workload, report.scheduler, report.alloc, report.disk
        );
        crate::plot::write_all(dir, out, &title)?;
    }
    if a.run.json {
        let v = serde_json::to_value(report)
            .map_err(|e| CliError::new(format!("cannot encode the report: {e}")))?;
        crate::output::print_json(&v);
    } else {
        print_text(report, "bench", "of wall-clock time");
    }
    if report.recordings_stopped > 0 {
        return Ok(crate::cmd_sim::stopped_for_space(
            report.recordings_stopped.into(),
        ));
    }
    Ok(0)
}

/// The disk `bench TARGET` plans with, and who times it.
struct DiskPlan {
    /// The model the mixer plans with (and the settings come from).
    plan: DiskModel,
    /// `--device-model`: the runtime emulates this disk on the image.
    emulate: Option<DiskModel>,
    /// TARGET is a `dvrfs emulate` loop device: the emulator times it and measures.
    emulated: Option<Emulated>,
}

/// Which model plans and times the run: the emulator's on a `dvrfs emulate` loop
/// device, else `--device-model`, else `--disk`, else nvr-8t's (the default disk).
fn disk_plan(a: &BenchArgs, target: &std::path::Path) -> CliResult<DiskPlan> {
    crate::args::check_range(
        "--queue-depth",
        a.queue_depth,
        1..=dvrfs_core::sched::MAX_QUEUE_DEPTH,
    )?;
    let emulated = emulated::of_block_device(target);
    if let Some(e) = &emulated {
        let what = format!(
            "{} is an emulated {} disk (dvrfs emulate in {})",
            target.display(),
            e.stats.model,
            e.dir.display()
        );
        if a.device_model.is_some() || a.disk.is_some() {
            let flag = if a.device_model.is_some() {
                "--device-model"
            } else {
                "--disk"
            };
            return Err(CliError::usage(
                format!("{what}: {flag} does not apply"),
                format!("leave out {flag}: the disk is already emulated, and the mixer plans with the emulator's model"),
            ));
        }
        if a.queue_depth != 1 {
            return Err(CliError::usage(
                format!("--queue-depth {} on {what}", a.queue_depth),
                "dvrfs gives an emulated hard disk one command at a time: give 1 (the default)",
            ));
        }
        return Ok(DiskPlan {
            plan: load_disk(&e.stats.model_spec())?,
            emulate: None,
            emulated,
        });
    }
    let emulate = a.device_model.as_deref().map(load_disk).transpose()?;
    if emulate.is_some() && a.queue_depth != 1 {
        return Err(CliError::usage(
            format!("--queue-depth {}", a.queue_depth),
            "an emulated hard disk (--device-model) takes one command at a time: give 1",
        ));
    }
    let plan = match (&emulate, &a.disk) {
        (Some(m), _) => m.clone(),
        (None, Some(d)) => load_disk(d)?,
        // Without a model the settings and the mixer's estimate are the default disk's.
        (None, None) => load_disk("nvr-8t")?,
    };
    Ok(DiskPlan {
        plan,
        emulate,
        emulated,
    })
}

/// A snapshot of the emulator's stats, when TARGET is an emulated disk.
fn emulator_stats(e: Option<&Emulated>) -> CliResult<Option<EmuStats>> {
    e.map(|e| {
        emulated::read_stats(&e.dir).map_err(|why| {
            CliError::new(format!("cannot read the emulator's stats: {why}"))
                .hint("is `dvrfs emulate` still serving the disk?")
        })
    })
    .transpose()
}

impl WallHost for BenchHost<'_> {
    fn now_ns(&self) -> u64 {
        self.start.elapsed().as_nanos() as u64
    }

    fn timers(&mut self) -> &mut Timers {
        &mut self.events
    }

    fn wait(&mut self, wait_ns: u64) -> CliResult<Vec<Completion>> {
        let tickets = self.tickets.clone();
        let ready = if tickets.is_empty() {
            std::thread::sleep(Duration::from_nanos(wait_ns));
            vec![]
        } else {
            self.rt
                .poll(&tickets, Some(Duration::from_nanos(wait_ns)))?
        };
        let mut done = vec![];
        for &i in ready.iter().rev() {
            done.push(self.tickets.swap_remove(i));
        }
        let mut out = vec![];
        for t in done {
            let (result, done_ns) = match self.rt.check(t, false) {
                Ok(Some(d)) => {
                    if d.late {
                        self.late += 1;
                    }
                    (Ok(d.output), d.done_ns)
                }
                Ok(None) => continue,
                Err(RuntimeError::Engine(e)) => {
                    if matches!(e, CoreError::DeadlineMissed { .. }) {
                        self.late += 1;
                    }
                    (Err(e), self.rt.now_ns())
                }
                Err(e) => return Err(e.into()),
            };
            out.push(Completion {
                id: t.0,
                result,
                at_ns: done_ns.saturating_sub(self.t0_ns),
            });
        }
        Ok(out)
    }

    fn in_flight(&self) -> usize {
        self.tickets.len()
    }

    fn status(&self) -> String {
        format!("{} late so far", self.late)
    }
}
