//! `emulate`: serve an image as an emulated hard disk, `DIR/disk` over FUSE (crate
//! `dvrfs-emulate`), with a loop device on it (`--attach`); `emulate --stop DIR`
//! ends it.
//!
//! Every check of the command line, the image and the mount point is made before
//! anything is mounted, so bad input leaves nothing behind. Without `--foreground`
//! the command forks before it starts a thread (as `dvrfs mount` does): the child
//! mounts, attaches and serves; the parent waits on a pipe for "ready" (and the
//! loop device, which it prints alone on stdout) or the reason it failed.
//!
//! Stopping (SIGTERM, SIGINT or SIGHUP to the daemon, which `--stop` sends) is
//! refused while a file system on the loop device is mounted or something holds
//! it: the emulator keeps serving and says what to unmount. Otherwise it detaches
//! the loop device, unmounts `DIR`, lets the queued commands complete, flushes the
//! trace and exits. `umount DIR` with nothing attached ends it too.

use std::io::{Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use clap::builder::{PossibleValuesParser, TypedValueParser};
use clap::Args;
use dvrfs_emulate::{loopdev, Config, Emulator};
use dvrfs_io::process;
use dvrfs_io::signals::{self, SignalSet};

use crate::error::{CliError, CliResult};
use crate::target::mount_on;

#[derive(Args, Debug, Clone)]
pub struct EmulateArgs {
    /// The image file: its size is the emulated disk's (at most the model's
    /// capacity; a smaller image is the outer part of the disk)
    pub image: Option<PathBuf>,
    /// The disk model: a built-in name (avfs-250g, nvr-8t, laptop-5400) or a model
    /// JSON file
    #[arg(long)]
    pub model: Option<String>,
    /// An empty directory: the emulator serves DIR/disk, DIR/stats and DIR/timing
    #[arg(long, value_name = "DIR")]
    pub mount: Option<PathBuf>,
    /// The drive's command queue, 1 (arrival order) to 32 (NCQ)
    #[arg(long, default_value_t = 32)]
    pub ncq: u32,
    /// Attach a loop device (direct I/O, rotational) and print its name
    #[arg(long)]
    pub attach: bool,
    /// The loop device's logical sector, 512 or 4096
    #[arg(long, default_value_t = 512, value_parser = PossibleValuesParser::new(["512", "4096"]).map(|s| s.parse::<u32>().unwrap_or(512)))]
    pub sector_size: u32,
    /// Write every command to this CSV file
    #[arg(long, value_name = "FILE")]
    pub trace: Option<PathBuf>,
    /// Stay in the foreground (log to stderr) instead of becoming a daemon
    #[arg(long, short = 'f')]
    pub foreground: bool,
    /// The daemon's log (default: dvrfs-emulate.log in the temporary directory)
    #[arg(long, value_name = "FILE")]
    pub log: Option<PathBuf>,
    /// Spin the disk down after this long without a command (as `hdparm -S` sets a
    /// real disk's standby timer); the next command waits for the spin-up. Needs a
    /// model with power figures. Default: never
    #[arg(long, value_name = "DURATION")]
    pub standby: Option<String>,
    /// Stop the emulator serving DIR (refused while a file system on its loop
    /// device is mounted) and print its report
    #[arg(long, value_name = "DIR", conflicts_with_all = ["image", "model", "mount", "attach", "trace", "foreground", "standby", "predict"])]
    pub stop: Option<PathBuf>,
    /// Print what the model predicts for the fio checks (random 4 KiB reads at queue
    /// depth 1 and 32, sequential 1 MiB reads at both edges) and exit; needs only
    /// --model (and --ncq)
    #[arg(long, conflicts_with_all = ["image", "mount", "attach", "trace", "foreground", "standby"])]
    pub predict: bool,
    /// With --predict: one JSON object on stdout
    #[arg(long, requires = "predict")]
    pub json: bool,
}

/// The longest `--standby`: a day (hdparm's longest timer is 21 minutes).
const MAX_STANDBY_MS: u64 = 24 * 3_600_000;

/// How long `--stop` (and the daemon's own stop) waits for the emulator to let go.
const STOP_WAIT: Duration = Duration::from_secs(60);

/// How often a stop looks whether the loop device or the daemon is gone (neither
/// says so through anything a process can wait on).
const STOP_POLL: Duration = Duration::from_millis(20);

pub fn emulate(a: &EmulateArgs) -> CliResult<u8> {
    if let Some(dir) = &a.stop {
        return stop(dir);
    }
    if a.predict {
        return crate::emulate_predict::predict(a.model.as_deref(), a.ncq, a.json);
    }
    let cfg = check(a)?;
    if a.foreground {
        return serve(&cfg, a.attach, None);
    }
    let log = a
        .log
        .clone()
        .unwrap_or_else(|| std::env::temp_dir().join("dvrfs-emulate.log"));
    daemonize(&cfg, a.attach, &log)
}

/// Every check that needs no mount: the flags, the model, the image, the mount
/// point, losetup.
fn check(a: &EmulateArgs) -> CliResult<Config> {
    let need = |what: &str, hint: &str| CliError::usage(format!("emulate needs {what}"), hint);
    let image = a.image.clone().ok_or_else(|| {
        need(
            "an image",
            "dvrfs emulate IMG --model avfs-250g --mount DIR (or --stop DIR)",
        )
    })?;
    let model_name = a.model.clone().ok_or_else(|| {
        need(
            "--model",
            "give a built-in model (avfs-250g, nvr-8t, laptop-5400) or a model JSON file",
        )
    })?;
    let dir = a.mount.clone().ok_or_else(|| {
        need(
            "--mount DIR",
            "give an empty directory to serve DIR/disk in",
        )
    })?;
    let model = crate::cmd_sim::load_disk(&model_name)?;
    crate::args::check_range("--ncq", a.ncq, 1..=dvrfs_core::disk::drive::MAX_NCQ)?;
    let standby_ns = match &a.standby {
        Some(t) => {
            if model.power.is_none() {
                return Err(CliError::usage(
                    format!("--standby: the {model_name} model has no power section"),
                    "the standby timer needs the model's spin-down and spin-up times: add a power section (disks/SCHEMA.md) or leave --standby out",
                ));
            }
            Some(crate::args::parse_duration_in("--standby", t, 1000..=MAX_STANDBY_MS)? * 1_000_000)
        }
        None => None,
    };
    let cap = model.capacity_bytes();
    let meta = match std::fs::metadata(&image) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(CliError::new(format!("{}: no such image", image.display())).hint(
                format!(
                    "create a sparse one first: truncate -s {cap} {} (the whole {model_name}), or smaller for the outer part of the disk",
                    image.display()
                ),
            ))
        }
        Err(e) => return Err(crate::error::local_io(&image, "cannot use the image", e)),
    };
    if !meta.is_file() {
        return Err(
            CliError::new(format!("{}: not a regular file", image.display()))
                .hint("give an image file (truncate -s SIZE IMG makes a sparse one)"),
        );
    }
    let sector = u64::from(a.sector_size.max(model.sector_bytes));
    if meta.len() > cap {
        return Err(CliError::new(format!(
            "{} holds {} bytes, more than the {model_name} model's capacity of {cap} bytes",
            image.display(),
            meta.len()
        ))
        .hint(format!("shrink it: truncate -s {cap} {}", image.display())));
    }
    if meta.len() == 0 || !meta.len().is_multiple_of(sector) {
        return Err(CliError::new(format!(
            "{} holds {} bytes, not a whole number of {sector}-byte sectors",
            image.display(),
            meta.len()
        ))
        .hint(format!(
            "resize it to a multiple of {sector}: truncate -s {} {}",
            (meta.len() / sector).max(1) * sector,
            image.display()
        )));
    }
    let dir = check_mountpoint(&dir)?;
    if a.attach {
        if let Err(e) = std::process::Command::new("losetup")
            .arg("--version")
            .output()
        {
            return Err(
                CliError::new(format!("--attach needs losetup (util-linux): {e}"))
                    .hint("install util-linux, or leave --attach out and attach DIR/disk yourself"),
            );
        }
    }
    let abs = |p: &Path| std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf());
    Ok(Config {
        image: std::fs::canonicalize(&image).unwrap_or_else(|_| abs(&image)),
        // A model file is published by its absolute path, for readers elsewhere.
        model_file: dvrfs_core::disk::DiskModel::builtin(&model_name)
            .is_none()
            .then(|| {
                std::fs::canonicalize(&model_name).unwrap_or_else(|_| abs(Path::new(&model_name)))
            }),
        model,
        model_name,
        ncq: a.ncq,
        mountpoint: dir,
        sector_bytes: a.sector_size,
        trace: a.trace.as_deref().map(abs),
        standby_ns,
    })
}

/// The mount point, canonical: an existing empty directory nothing is mounted on.
fn check_mountpoint(dir: &Path) -> CliResult<PathBuf> {
    let canon = match std::fs::canonicalize(dir) {
        Ok(p) => p,
        Err(e) if e.raw_os_error() == Some(libc::ENOTCONN) => {
            return Err(crate::target::dead_mount(dir))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(
                CliError::new(format!("{}: no such directory", dir.display()))
                    .hint(format!("create it first: mkdir -p {}", dir.display())),
            )
        }
        Err(e) => return Err(crate::error::local_io(dir, "cannot use the mount point", e)),
    };
    if !canon.is_dir() {
        return Err(CliError::new(format!("{}: not a directory", dir.display()))
            .hint("give an empty directory"));
    }
    if let Some(m) = mount_on(&canon) {
        return Err(CliError::new(format!(
            "{} is already a mount point: {} ({}) is mounted there",
            canon.display(),
            m.source,
            m.fstype
        ))
        .hint(format!(
            "unmount it first (umount {}; for an emulator: dvrfs emulate --stop {}), or use another directory",
            canon.display(),
            canon.display()
        )));
    }
    let not_empty = std::fs::read_dir(&canon)
        .map_err(|e| crate::error::local_io(&canon, "cannot list the mount point", e))?
        .next()
        .is_some();
    if not_empty {
        return Err(CliError::new(format!("{}: not empty", canon.display()))
            .hint("give an empty directory (what it holds would be hidden)"));
    }
    Ok(canon)
}

/// Forks; the child serves, the parent reports what the child says.
fn daemonize(cfg: &Config, attach: bool, log: &Path) -> CliResult<u8> {
    let log_file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .map_err(|e| crate::error::local_io(log, "cannot open the log", e))?;
    let (rd, wr) =
        process::pipe().map_err(|e| CliError::new(format!("cannot create a pipe: {e}")))?;
    let forked =
        process::fork().map_err(|e| CliError::new(format!("cannot fork the daemon: {e}")))?;
    if let process::Forked::Parent(_) = forked {
        drop(wr);
        let mut said = String::new();
        let _ = std::fs::File::from(rd).read_to_string(&mut said);
        let mut lines = said.lines();
        match lines.next() {
            Some("ok") => {
                let dev = lines.next().unwrap_or("");
                for l in lines {
                    eprintln!("{l}");
                }
                if !dev.is_empty() {
                    outln!("{dev}");
                }
                return Ok(0);
            }
            Some("err") => {
                let why = lines.next().unwrap_or("").to_string();
                let mut e = CliError::new(why);
                if let Some(h) = lines.next().filter(|h| !h.trim().is_empty()) {
                    e = e.hint(h.trim().to_string());
                }
                return Err(e);
            }
            _ => {
                return Err(CliError::new(format!(
                    "the emulator stopped before serving {}",
                    cfg.image.display()
                ))
                .hint(format!("see its log, {}", log.display())))
            }
        }
    }
    drop(rd);
    process::detach_stdio(log_file.as_fd());
    drop(log_file);
    let _ = std::env::set_current_dir("/");
    let code = match serve(cfg, attach, Some(wr)) {
        Ok(c) => c,
        Err(e) => {
            e.print();
            e.exit_code
        }
    };
    std::process::exit(code as i32)
}

/// The start message: what is served where.
fn start_message(cfg: &Config, size_bytes: u64) -> String {
    let cap = cfg.model.capacity_bytes();
    let part = if size_bytes < cap {
        format!("{size_bytes} of the model's {cap} bytes: the outer part of the disk")
    } else {
        format!("the whole disk, {cap} bytes")
    };
    format!(
        "dvrfs emulate: {} as a {} ({part}) at {}/disk, command queue {}, pid {}",
        cfg.image.display(),
        cfg.model_name,
        cfg.mountpoint.display(),
        cfg.ncq,
        std::process::id()
    )
}

/// Mounts, attaches and serves until stopped. `ready` (daemon mode) hears "ok",
/// the loop device and the start message, or "err" and why.
fn serve(cfg: &Config, attach: bool, ready: Option<OwnedFd>) -> CliResult<u8> {
    let mut ready = ready.map(std::fs::File::from);
    let fail = |ready: &mut Option<std::fs::File>, e: CliError| {
        if let Some(r) = ready.as_mut() {
            let hint = e.hint.as_deref().unwrap_or("").replace('\n', " ");
            let _ = write!(r, "err\n{}\n{hint}\n", e.message.replace('\n', " "));
        }
        e
    };
    // Termination signals go to one thread (blocked in every thread from here on).
    let set =
        SignalSet::of(&[libc::SIGTERM, libc::SIGINT, libc::SIGHUP]).expect("valid signal numbers");
    signals::mask(signals::MaskHow::Block, Some(&set));
    let mut emu = Emulator::mount(cfg).map_err(|e| fail(&mut ready, start_error(cfg, e)))?;
    let shared = emu.shared();
    let mut unmounter = emu.unmounter();
    let session = std::thread::Builder::new()
        .name("emulate-session".into())
        .spawn(move || emu.run())
        .map_err(|e| {
            fail(
                &mut ready,
                CliError::new(format!("cannot start a thread: {e}")),
            )
        })?;
    let disk = cfg.mountpoint.join("disk");
    let dev = if attach {
        match loopdev::attach(&disk, cfg.sector_bytes) {
            Ok(d) => Some(d),
            Err(e) => {
                let _ = unmounter.unmount();
                let _ = session.join();
                return Err(fail(
                    &mut ready,
                    CliError::new(format!(
                        "cannot attach a loop device to {}: {e}",
                        disk.display()
                    ))
                    .hint("check that loop devices exist (modprobe loop; losetup --find)"),
                ));
            }
        }
    } else {
        None
    };
    shared.set_loop_dev(dev.clone());
    let msg = start_message(cfg, shared.info.capacity_bytes);
    match ready.take() {
        Some(mut r) => {
            let _ = write!(r, "ok\n{}\n{msg}\n", dev.as_deref().unwrap_or(""));
        }
        None => {
            eprintln!("{msg}");
            if let Some(d) = &dev {
                outln!("{d}");
            }
        }
    }
    let mountpoint = cfg.mountpoint.clone();
    let stopper_shared = shared.clone();
    std::thread::spawn(move || loop {
        let sig = signals::wait(&set).unwrap_or(0);
        match stop_serving(&stopper_shared, &mountpoint) {
            Ok(()) => return,
            Err(why) => eprintln!("dvrfs emulate: signal {sig}: not stopping: {why}"),
        }
    });
    let report = session
        .join()
        .map_err(|_| CliError::new("internal: the emulator's session panicked"))?
        .map_err(|e| CliError::new(format!("the FUSE session ended with an error: {e}")))?;
    // `umount DIR` ended it while a loop device was attached (it cannot: the loop
    // device holds the file), or a stop raced: the device goes too.
    if let Some(d) = shared.loop_dev() {
        if loopdev::attached(&d) {
            let _ = loopdev::detach(&d);
        }
    }
    for line in report_lines(&report.stats) {
        eprintln!("dvrfs emulate: {line}");
    }
    if let Some(e) = report.trace_error {
        return Err(CliError::new(format!("the trace is incomplete: {e}")));
    }
    Ok(0)
}

/// A library error as the command reports it.
fn start_error(cfg: &Config, e: dvrfs_emulate::EmulateError) -> CliError {
    use dvrfs_emulate::image::ImageError;
    use dvrfs_emulate::EmulateError as E;
    let hint = match &e {
        E::Image(ImageError::InUse { .. }) => format!(
            "another emulator serves it (dvrfs emulate --stop ITS_DIR), or a dvrfs command has it open; see the mount table: grep {} /proc/self/mountinfo",
            cfg.image.display()
        ),
        E::Mount { .. } => "check that /dev/fuse exists (modprobe fuse) and the directory is free".into(),
        E::Trace { .. } => "give a writable --trace path".into(),
        _ => "see docs/emulate.md".into(),
    };
    CliError::new(e.to_string()).hint(hint)
}

/// The stop: refused while the loop device is in use; else detaches it, waits
/// until the kernel let it go, and unmounts `dir` (the session then ends).
fn stop_serving(shared: &dvrfs_emulate::stats::Shared, dir: &Path) -> Result<(), String> {
    if let Some(d) = shared.loop_dev() {
        if let Some(why) = loopdev::in_use(&d) {
            return Err(why);
        }
        loopdev::detach(&d).map_err(|e| e.to_string())?;
        let since = Instant::now();
        while loopdev::attached(&d) {
            if since.elapsed() > STOP_WAIT {
                return Err(format!("{d} is still attached after losetup -d"));
            }
            std::thread::sleep(STOP_POLL);
        }
        shared.set_loop_dev(None);
    }
    let since = Instant::now();
    loop {
        let out = std::process::Command::new("umount")
            .arg(dir)
            .output()
            .map_err(|e| format!("cannot run umount: {e}"))?;
        if out.status.success() {
            return Ok(());
        }
        // Busy for a moment after the detach (udev probing the device goes away).
        if since.elapsed() > STOP_WAIT {
            return Err(format!(
                "umount {}: {}",
                dir.display(),
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        std::thread::sleep(STOP_POLL);
    }
}

/// The stop report's lines, from a `DIR/stats` object.
pub fn report_lines(s: &serde_json::Value) -> Vec<String> {
    let n = |k: &str| s[k].as_u64().unwrap_or(0);
    let secs = |ns: u64| ns as f64 / 1e9;
    let up = n("uptime_ns");
    let util = if up > 0 {
        100.0 * n("busy_ns") as f64 / up as f64
    } else {
        0.0
    };
    let energy = match s["energy_j"].as_f64() {
        Some(j) if up > 0 => format!("energy: {j:.1} J ({:.2} W mean)", j / secs(up)),
        Some(j) => format!("energy: {j:.1} J"),
        None => "energy: unknown (the disk model has no power section)".to_string(),
    };
    vec![
        format!("elapsed: {:.3} s", secs(up)),
        format!(
            "commands: {} ({} reads, {} writes, {} flushes; {} more with timing off)",
            n("commands"),
            n("reads"),
            n("writes"),
            n("flushes"),
            n("untimed_commands")
        ),
        format!("busy: {:.3} s ({util:.1}% utilization)", secs(n("busy_ns"))),
        format!("max queue depth: {}", n("max_queue_depth")),
        format!(
            "late commands: {} (worst {:.3} ms after the model's end)",
            n("late_commands"),
            n("max_late_ns") as f64 / 1e6
        ),
        energy,
    ]
}

/// `--stop DIR`.
fn stop(dir: &Path) -> CliResult<u8> {
    let not_emulator = |why: String| {
        CliError::new(format!("{}: not a dvrfs emulator ({why})", dir.display()))
            .hint("give the --mount DIR of a running dvrfs emulate (see /proc/self/mountinfo for fuse.dvrfs-emulate)")
    };
    let canon = std::fs::canonicalize(dir).map_err(|e| not_emulator(e.to_string()))?;
    match mount_on(&canon) {
        Some(m) if m.fstype == "fuse.dvrfs-emulate" => {}
        Some(m) => return Err(not_emulator(format!("{} is mounted there", m.fstype))),
        None => return Err(not_emulator("nothing is mounted there".into())),
    }
    let stats = read_stats(&canon).map_err(not_emulator)?;
    if let Some(d) = stats["loop"].as_str() {
        if let Some(why) = loopdev::in_use(d) {
            return Err(CliError::new(format!(
                "refusing to stop the emulator at {}: {why}",
                canon.display()
            ))
            .hint("unmount the file system on the loop device, then run --stop again"));
        }
    }
    let pid = stats["pid"]
        .as_i64()
        .and_then(|p| i32::try_from(p).ok())
        .ok_or_else(|| not_emulator("its stats carry no pid".into()))?;
    process::signal(pid, libc::SIGTERM)
        .map_err(|e| CliError::new(format!("cannot signal the emulator (pid {pid}): {e}")))?;
    // Gone when its mount is gone and the process has exited.
    let since = Instant::now();
    while mount_on(&canon).is_some_and(|m| m.fstype == "fuse.dvrfs-emulate")
        || Path::new(&format!("/proc/{pid}")).exists()
    {
        if since.elapsed() > STOP_WAIT {
            return Err(CliError::new(format!(
                "the emulator (pid {pid}) did not stop within {} s",
                STOP_WAIT.as_secs()
            ))
            .hint("see its log for why (a file system still on its loop device?)"));
        }
        std::thread::sleep(STOP_POLL);
    }
    for line in report_lines(&stats) {
        outln!("{line}");
    }
    Ok(0)
}

fn read_stats(dir: &Path) -> Result<serde_json::Value, String> {
    let text = std::fs::read_to_string(dir.join("stats")).map_err(|e| e.to_string())?;
    serde_json::from_str(&text).map_err(|e| format!("its stats are not JSON: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_report_gives_utilization_and_unknown_energy() {
        let s = serde_json::json!({
            "uptime_ns": 2_000_000_000u64, "busy_ns": 500_000_000u64, "commands": 10,
            "reads": 6, "writes": 3, "flushes": 1, "untimed_commands": 4,
            "max_queue_depth": 32, "late_commands": 2, "max_late_ns": 3_500_000u64,
            "energy_j": null
        });
        let l = report_lines(&s);
        assert_eq!(l[0], "elapsed: 2.000 s");
        assert_eq!(
            l[1],
            "commands: 10 (6 reads, 3 writes, 1 flushes; 4 more with timing off)"
        );
        assert_eq!(l[2], "busy: 0.500 s (25.0% utilization)");
        assert_eq!(
            l[4],
            "late commands: 2 (worst 3.500 ms after the model's end)"
        );
        assert_eq!(
            l[5],
            "energy: unknown (the disk model has no power section)"
        );
    }
}
