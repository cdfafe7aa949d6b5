//! `dvrfs bench --dir PATH`: the `sim`/`bench` workload on files in a directory of
//! any file system, through POSIX calls, a thread per stream.
//!
//! The same workload client as `sim` and `bench` (`sim::Client`), so the same SPEC
//! and seed issue the same requests with the same deadlines, driven in wall-clock
//! time with the POSIX host (`host.rs`) in place of the runtime. The run's files
//! live in `PATH/dvrfs-bench/`, which is removed at the end, after an error too
//! (unless `--keep`). `--fill-only` prepares that directory and keeps it, with a
//! manifest (`manifest.rs`), and `--reuse-fill` measures on it again and again,
//! removing only each run's own files. When PATH sits on a loop device over a `dvrfs emulate` disk
//! (`place.rs`), the preparation runs with the emulator's timing off and the
//! measurement with it on, and utilization and energy come from the emulator.

mod host;
mod manifest;
mod place;
mod prepare;
mod report;

use std::path::{Path, PathBuf};
use std::time::Instant;

use dvrfs_core::sim::report::Report;
use dvrfs_core::sim::{self, Client, SimOutcome};
use rand_chacha::ChaCha8Rng;

use crate::args::parse_duration_in;
use crate::cmd_bench::BenchArgs;
use crate::cmd_sim::{load_disk, setup_run};
use crate::emulated;
use crate::error::{CliError, CliResult};
use crate::wall_clock::{self, WallHost};
use dvrfs_io::files::fs_space;
use host::{HostOptions, PosixHost};
use manifest::Manifest;

/// The longest `--fsync-every`: an hour.
const MAX_FSYNC_EVERY_MS: u64 = 3_600_000;

/// What has to be undone whatever happens: the bench directory (all of it, or with
/// a reused fill the run's own files), the emulator's timing.
struct Cleanup {
    dir: PathBuf,
    keep: bool,
    /// The fill being reused: only what the run made is removed.
    reused: Option<Manifest>,
    emulator: Option<PathBuf>,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        // Removing the fill is no part of the measurement: at host speed.
        if let Some(e) = &self.emulator {
            let _ = emulated::set_timing(e, false);
        }
        let whole = match (&self.reused, self.keep) {
            (_, true) => false,
            (None, false) => true,
            (Some(m), false) => match manifest::remove_run_files(&self.dir, m) {
                Ok(true) => false,
                Ok(false) => {
                    eprintln!(
                        "dvrfs: the run removed part of the fill in {} (the delete victim): it is no longer reusable and is removed",
                        self.dir.display()
                    );
                    true
                }
                Err(e) => {
                    eprintln!(
                        "dvrfs: warning: cannot remove the run's files from {}: {e}",
                        self.dir.display()
                    );
                    false
                }
            },
        };
        if whole {
            if let Err(e) = std::fs::remove_dir_all(&self.dir) {
                eprintln!("dvrfs: warning: cannot remove {}: {e}", self.dir.display());
            }
        }
        if let Some(e) = &self.emulator {
            if let Err(err) = emulated::set_timing(e, true) {
                eprintln!(
                    "dvrfs: warning: cannot turn the emulator's timing back on in {}: {err}",
                    e.display()
                );
            }
        }
    }
}

pub fn bench_dir(a: &BenchArgs, path: &Path) -> CliResult<u8> {
    // Settings the workload needs (the disk model only validates: nothing plans with it).
    if a.run.retention.is_some() {
        return Err(CliError::usage(
            "--retention runs dvrfs's own retention: it has no meaning on another file system",
            "drop --dir to bench dvrfs on a device or image, or drop --retention",
        ));
    }
    let mut s = setup_run(load_disk("nvr-8t")?, &a.run, "60s")?;
    let fsync_every_ms = a
        .fsync_every
        .as_deref()
        .map(|t| parse_duration_in("--fsync-every", t, 1..=MAX_FSYNC_EVERY_MS))
        .transpose()?;
    s.cfg.fsync_every_ns = fsync_every_ms.unwrap_or(0) * 1_000_000;
    let cfg = s.cfg.clone();
    let ioprio = a.ioprio.as_deref().map(prepare::ioprio).transpose()?;
    let Prepared {
        dir,
        place,
        mut cleanup,
        rng,
        recordings,
        used,
        dropped,
        before,
        prepare_s,
    } = prepare_all(a, path, &cfg)?;
    if a.fill_only {
        cleanup.keep = true;
        drop(cleanup);
        return fill_only_report(a, &dir, recordings.len(), used, prepare_s);
    }
    let streams: u32 = cfg.workload.groups.iter().map(|g| g.count).sum();
    let mut client = Client::new(&cfg, rng, true);
    let start = Instant::now();
    let mut host = PosixHost::new(
        &dir,
        streams,
        HostOptions {
            direct: a.direct,
            ioprio,
        },
        start,
    );
    let result = wall_clock::drive(
        &mut client,
        &mut host,
        &recordings,
        cfg.duration_ns,
        "bench --dir",
    );
    let elapsed_ns = host.now_ns().min(cfg.duration_ns.max(1));
    host.close();
    result?;
    let after = match &place.emulator {
        Some(e) => Some(emulated::read_stats(e).map_err(CliError::new)?),
        None => None,
    };
    let usage = before
        .as_ref()
        .zip(after.as_ref())
        .map(|(b, a)| emulated::usage(b, a, elapsed_ns));
    let mut out = outcome(&host, &client, &cfg, elapsed_ns, used);
    out.scheduler = format!("kernel:{}", place.scheduler.as_deref().unwrap_or("unknown"));
    out.disk = match (&after, &place.device) {
        (Some(st), _) => format!("{} (emulated)", st.model),
        (None, Some(d)) => d.clone(),
        (None, None) => "unknown".into(),
    };
    let fs = place.fs_type.clone().unwrap_or_else(|| "unknown".into());
    let report = Report::new(
        &out,
        &cfg.workload.to_string(),
        &fs,
        cfg.duration_ns,
        cfg.seed,
    );
    let syncs = *host.syncs.lock().expect("sync counts");
    let extra = report::Extra {
        dir: path.display().to_string(),
        direct: a.direct,
        ioprio: a.ioprio.clone(),
        page_cache_dropped: dropped,
        utilization: usage.map(|u| u.0),
        energy_j: usage.and_then(|u| u.1),
        no_emulator: place.emulator.is_none().then(|| place.no_emulator.clone()),
        fsync_every_s: fsync_every_ms.map(|ms| ms as f64 / 1e3),
        syncs,
        elapsed_s: elapsed_ns as f64 / 1e9,
        prepare_s,
    };
    drop(host);
    drop(cleanup);
    if let Some(plots) = &a.run.plot {
        let title = format!(
            "bench --dir {} {} {} on {}",
            report.workload, report.scheduler, report.alloc, report.disk
        );
        crate::plot::write_all(plots, &out, &title)?;
    }
    if a.run.json {
        crate::output::print_json(&report::json(&report, &extra)?);
    } else {
        report::print_text(&report, &extra);
    }
    if report.recordings_stopped > 0 {
        return Ok(crate::cmd_sim::stopped_for_space(
            report.recordings_stopped.into(),
        ));
    }
    Ok(0)
}

/// The run's directory, filled and aged, and what the measurement needs of it.
struct Prepared {
    dir: PathBuf,
    place: place::Place,
    /// Undoes the preparation when dropped.
    cleanup: Cleanup,
    rng: ChaCha8Rng,
    recordings: Vec<String>,
    used: u64,
    dropped: bool,
    /// The emulator's stats as the measurement starts.
    before: Option<emulated::EmuStats>,
    prepare_s: f64,
}

/// Makes the bench directory, fills and ages it, drops the page cache and turns the
/// emulator's timing on (see the module docs of `prepare`).
fn prepare_all(a: &BenchArgs, path: &Path, cfg: &sim::SimConfig) -> CliResult<Prepared> {
    let prep_start = Instant::now();
    let dir = prepare::bench_dir(path, a.reuse_fill)?;
    let place = place::find(path);
    let reused = if a.reuse_fill {
        let total = fs_space(&dir)
            .map_err(|e| crate::error::local_io(&dir, "cannot statvfs", e))?
            .total_bytes;
        Some(Manifest::load(&dir, cfg, total)?)
    } else {
        None
    };
    let mut cleanup = Cleanup {
        dir: dir.clone(),
        keep: a.keep,
        reused: None,
        emulator: place.emulator.clone(),
    };
    if let Some(e) = &place.emulator {
        emulated::set_timing(e, false).map_err(|err| {
            crate::error::local_io(e, "cannot turn off the timing of the emulator in", err)
        })?;
    }
    if a.direct {
        prepare::check_direct(&dir)?;
    }
    let (rng, recordings, used) = match reused {
        Some(m) => {
            let rng = m.rng(cfg)?;
            let recordings = m.paths();
            let used = fs_space(&dir)
                .map(|s| s.total_bytes - s.free_bytes)
                .unwrap_or(m.used_bytes);
            cleanup.reused = Some(m);
            (rng, recordings, used)
        }
        None => {
            let progress = crate::output::progress(0, false, "bench --dir: filling");
            let mut rng = sim::run_rng(cfg);
            let (recordings, used) = prepare::fill(&dir, cfg, &mut rng)?;
            progress.finish_and_clear();
            let total = fs_space(&dir)
                .map_err(|e| crate::error::local_io(&dir, "cannot statvfs", e))?
                .total_bytes;
            let paths = recordings.iter().map(|(p, _)| p.clone()).collect();
            Manifest::new(cfg, total, used, recordings, &rng).write(&dir)?;
            (rng, paths, used)
        }
    };
    let dropped = prepare::drop_caches();
    let before = match &place.emulator {
        Some(e) => {
            emulated::set_timing(e, true).map_err(|err| {
                crate::error::local_io(e, "cannot turn on the timing of the emulator in", err)
            })?;
            Some(emulated::read_stats(e).map_err(CliError::new)?)
        }
        None => None,
    };
    let prepare_s = prep_start.elapsed().as_secs_f64();
    Ok(Prepared {
        dir,
        place,
        cleanup,
        rng,
        recordings,
        used,
        dropped,
        before,
        prepare_s,
    })
}

/// What the run measured, as `sim::fill_outcome` makes it from the engine's
/// recorder (the scheduler's own figures stay empty: there is none of dvrfs's).
fn outcome(
    host: &PosixHost,
    client: &Client,
    cfg: &sim::SimConfig,
    elapsed_ns: u64,
    used: u64,
) -> SimOutcome {
    let q = host.recorder.clone();
    let mut out = SimOutcome {
        rt_requests: q.rt_ops,
        deadline_misses: q.deadline_misses(),
        misses: q.misses,
        margins_ns: q.margins_ns,
        rt_bytes: q.rt_bytes,
        be_bytes: q.be_bytes,
        be_requests: q.be_ops,
        be_latencies_ns: q.be_latencies_ns,
        be_first_submit_ns: q.be_first_submit_ns,
        be_last_done_ns: q.be_last_done_ns,
        elapsed_ns,
        used_bytes_at_start: used,
        ..SimOutcome::default()
    };
    sim::client_outcome(&mut out, client);
    (out.buffer_level, out.buffer_stream) = sim::buffer_level(cfg, client, elapsed_ns);
    out
}

/// `--fill-only`: what was prepared, and how to measure on it.
fn fill_only_report(
    a: &BenchArgs,
    dir: &Path,
    recordings: usize,
    used: u64,
    prepare_s: f64,
) -> CliResult<u8> {
    if a.run.json {
        crate::output::print_json(&serde_json::json!({
            "fill_only": true,
            "dir": dir.display().to_string(),
            "recordings": recordings,
            "used_bytes": used,
            "prepare_s": prepare_s,
            "manifest": dir.join(manifest::MANIFEST).display().to_string(),
        }));
    } else {
        outln!(
            "dvrfs bench --dir: filled {} with {recordings} recordings ({} in use) in {prepare_s:.0} s; measure on it with --reuse-fill (same --fill, --seed, --age)",
            dir.display(),
            crate::output::human_bytes(used)
        );
    }
    Ok(0)
}
