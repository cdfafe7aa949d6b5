//! `dvrfs status TARGET|MOUNT`: the operator's view of a volume. On a mounted volume,
//! the daemon's engine as it runs (every open stream, the disk's load, what admission
//! would still take, the space); on one that is not mounted, the space and the
//! headroom of an idle disk.

use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::Args;
use dvrfs_core::engine::{admission_status, HeadroomAsk, Status, StreamDir, DEFAULT_REQUEST_BYTES};
use serde::Serialize;

use crate::cmd_stream::admission;
use crate::error::{CliError, CliResult};
use crate::output::human_bytes;
use crate::target::{self, Access};

#[derive(Args, Debug)]
pub struct StatusArgs {
    /// The volume (image file or block device), or the directory it is mounted on
    pub target: PathBuf,
    /// The stream admission's headroom is counted for: how many more of this rate fit
    #[arg(long, default_value = "4M")]
    pub rate: String,
    /// Its request size (a multiple of 4K)
    #[arg(long, default_value = "512K")]
    pub request: String,
    /// Its buffer (default: the one dvrfs would choose, as `record` and the mount do)
    #[arg(long)]
    pub buffer: Option<String>,
    /// The streams counted: recordings (write) or playbacks (read)
    #[arg(long, default_value = "write")]
    pub dir: String,
    /// Recordings: their durability interval (default: the volume's commit interval)
    #[arg(long)]
    pub durable: Option<String>,
    /// How long to watch the disk's load on a mounted volume (0: only since mount)
    #[arg(long, default_value = "1s")]
    pub sample: String,
    /// A volume that is not mounted: the disk model admission is counted on
    #[arg(long)]
    pub device_model: Option<String>,
    /// A volume that is not mounted: the bandwidth admission is counted on
    #[arg(long)]
    pub bandwidth: Option<String>,
    /// Print one JSON object on stdout
    #[arg(long)]
    pub json: bool,
}

/// What `status --json` prints.
#[derive(Serialize)]
struct Report {
    target: String,
    /// Where `dvrfs mount` has it (`None`: not mounted; the figures are the volume's
    /// at rest).
    mounted_at: Option<String>,
    /// Device busy time over the sample (`None` without a sample or when not mounted).
    sample_seconds: Option<f64>,
    busy_fraction_sample: Option<f64>,
    /// Since the mount.
    uptime_seconds: f64,
    busy_fraction_since_mount: f64,
    status: Status,
}

pub fn status(a: &StatusArgs) -> CliResult<u8> {
    let ask = headroom_ask(a)?;
    let sample_ms =
        crate::args::parse_duration_in("--sample", &a.sample, 0..=crate::limits::MAX_SAMPLE_MS)?;
    let (image, mount) = locate(&a.target);
    let report = match &mount {
        Some(dir) => {
            if a.device_model.is_some() || a.bandwidth.is_some() {
                return Err(CliError::usage(
                    format!(
                        "{} is mounted at {}: its admission is the mount's, not --device-model or --bandwidth",
                        image.display(),
                        dir.display()
                    ),
                    "leave them out: status shows what the daemon admits against",
                ));
            }
            let first = daemon_status(&image, ask)?;
            check_durable(a, ask, first.space.commit_interval_ms)?;
            let (sample, last) = if sample_ms > 0 {
                std::thread::sleep(Duration::from_millis(sample_ms));
                let last = daemon_status(&image, ask)?;
                let dt = last.now_ns.saturating_sub(first.now_ns).max(1);
                let busy = last.disk.busy_ns.saturating_sub(first.disk.busy_ns);
                (Some((dt as f64 / 1e9, busy as f64 / dt as f64)), last)
            } else {
                (None, first)
            };
            report(&image, Some(dir), sample, last)
        }
        None => {
            let fs = target::open_fs(&image, Access::Read)?;
            let mut st = fs.engine().status(ask);
            check_durable(a, ask, st.space.commit_interval_ms)?;
            let (_, adm) = admission(a.device_model.as_deref(), a.bandwidth.as_deref())?;
            let mode = fs.engine().gather_mode();
            st.admission = Some(admission_status(&adm, &[], ask, mode));
            report(&image, None, None, st)
        }
    };
    if a.json {
        let text = serde_json::to_string_pretty(&report)
            .map_err(|e| CliError::new(format!("status as JSON: {e}")))?;
        outln!("{text}");
    } else {
        print(&report);
    }
    Ok(0)
}

fn headroom_ask(a: &StatusArgs) -> CliResult<HeadroomAsk> {
    let request_bytes = crate::limits::stream_request(
        "--request",
        &a.request,
        &format!(
            "the default, {}K, suits recordings and playbacks",
            DEFAULT_REQUEST_BYTES >> 10
        ),
    )?;
    let dir = match a.dir.as_str() {
        "write" => StreamDir::Write,
        "read" => StreamDir::Read,
        other => {
            return Err(CliError::usage(
                format!("invalid --dir {other:?}"),
                "--dir write counts recordings (the default), --dir read playbacks",
            ))
        }
    };
    let durable_ns = match (&a.durable, dir) {
        (None, _) => None,
        (Some(d), StreamDir::Write) => Some(crate::args::parse_durable_ns(d)?),
        (Some(_), StreamDir::Read) => {
            return Err(CliError::usage(
                "--durable applies to recordings, not to playbacks (--dir read)",
                "leave it out, or count recordings (--dir write)",
            ))
        }
    };
    Ok(HeadroomAsk {
        rate_bps: crate::limits::stream_rate("--rate", &a.rate)?,
        request_bytes,
        buffer_bytes: a
            .buffer
            .as_deref()
            .map(|b| crate::limits::stream_buffer(b, request_bytes))
            .transpose()?,
        dir,
        durable_ns,
    })
}

/// A recording's durability interval cannot be shorter than the volume's commit
/// interval (the engine refuses such a stream): neither can the one counted.
fn check_durable(a: &StatusArgs, ask: HeadroomAsk, commit_interval_ms: u32) -> CliResult<()> {
    let interval_ns = u64::from(commit_interval_ms) * 1_000_000;
    match ask.durable_ns {
        Some(d) if d < interval_ns => Err(CliError::usage(
            format!(
                "--durable {}: a recording's durability interval cannot be shorter than the volume's commit interval ({commit_interval_ms} ms)",
                a.durable.as_deref().unwrap_or_default()
            ),
            format!("ask for at least {commit_interval_ms}ms, or leave --durable out (the commit interval)"),
        )),
        _ => Ok(()),
    }
}

/// The volume `arg` names and where it is mounted: `arg` is the volume, or the
/// directory a `dvrfs mount` of it is on.
fn locate(arg: &Path) -> (PathBuf, Option<PathBuf>) {
    if arg.is_dir() {
        if let Ok(dir) = std::fs::canonicalize(arg) {
            if let Some(m) = target::mount_on(&dir) {
                if m.fstype == "fuse.dvrfs" || m.fstype == "fuse" {
                    return (PathBuf::from(m.source), Some(dir));
                }
            }
        }
    }
    (arg.to_path_buf(), target::mounted_at(arg))
}

/// The running daemon's status of the volume on `image`, asked over its socket.
fn daemon_status(image: &Path, ask: HeadroomAsk) -> CliResult<Status> {
    match target::daemon(image)? {
        Some(c) => Ok(c.status(ask)?),
        // Mounted, but no daemon answers (it was killed, or could not serve): the
        // open says what holds the volume.
        None => {
            target::open_device(image, Access::Read)?;
            Err(CliError::new(format!(
                "{} is mounted, and its mount daemon does not answer",
                image.display()
            ))
            .hint("see the daemon's log; a daemon killed with kill -9 leaves the mount to be taken away with umount -l"))
        }
    }
}

fn report(image: &Path, mount: Option<&PathBuf>, sample: Option<(f64, f64)>, st: Status) -> Report {
    let up = st.now_ns.saturating_sub(st.started_ns);
    Report {
        target: image.display().to_string(),
        mounted_at: mount.map(|m| m.display().to_string()),
        sample_seconds: sample.map(|s| s.0),
        busy_fraction_sample: sample.map(|s| s.1),
        uptime_seconds: up as f64 / 1e9,
        busy_fraction_since_mount: if up > 0 {
            st.disk.busy_ns as f64 / up as f64
        } else {
            0.0
        },
        status: st,
    }
}

/// From this share of the data region used or held, `status` warns: the first level
/// at which the engine records a `space_low` event.
const SPACE_WARN_PCT: f64 = dvrfs_core::engine::SPACE_LEVELS_PCT[0] as f64;

fn mbit(bps: f64) -> String {
    format!("{:.2} Mbit/s", bps / 1e6)
}

fn duration(s: f64) -> String {
    let s = s.max(0.0) as u64;
    match s {
        0..=59 => format!("{s} s"),
        60..=3599 => format!("{}m {:02}s", s / 60, s % 60),
        _ => format!("{}h {:02}m", s / 3600, s % 3600 / 60),
    }
}

fn print(r: &Report) {
    let st = &r.status;
    match &r.mounted_at {
        Some(m) => outln!(
            "{}: mounted at {m}, up {}",
            r.target,
            duration(r.uptime_seconds)
        ),
        None => outln!("{}: not mounted (no open streams)", r.target),
    }
    let sp = &st.space;
    let pct = |n: u64| 100.0 * n as f64 / sp.total_bytes.max(1) as f64;
    outln!(
        "space:     {} total, {} used ({:.1}%), {} held for recordings, {} free ({:.1}%){}; commits every {} ms",
        human_bytes(sp.total_bytes),
        human_bytes(sp.used_bytes),
        pct(sp.used_bytes),
        human_bytes(sp.held_bytes),
        human_bytes(sp.free_bytes),
        pct(sp.free_bytes),
        if sp.freed_at_commit_bytes > 0 {
            format!(", of it {} freed at the next commit", human_bytes(sp.freed_at_commit_bytes))
        } else {
            String::new()
        },
        sp.commit_interval_ms
    );
    if sp.owed_bytes > 0 {
        outln!(
            "retention: {} promised to recordings is being freed (the oldest chunks go for them){}",
            human_bytes(sp.owed_bytes),
            if sp.owed_short_bytes > 0 {
                format!("; {} of it cannot be: every chunk left is held by a writer or protected, and those recordings' writes wait", human_bytes(sp.owed_short_bytes))
            } else {
                String::new()
            }
        );
    }
    let taken = pct(sp.used_bytes + sp.held_bytes);
    if taken >= SPACE_WARN_PCT {
        outln!(
            "WARNING:   {taken:.1}% of the data region is used or held: delete old recordings (or shorten their retention) before recordings are refused"
        );
    }
    if r.mounted_at.is_some() {
        let sample = match (r.sample_seconds, r.busy_fraction_sample) {
            (Some(s), Some(b)) => format!("{:.1}% busy over the last {s:.1} s, ", b * 100.0),
            _ => String::new(),
        };
        outln!(
            "disk:      {sample}{:.1}% since mount; {} real-time operations, {} late; {} commits",
            r.busy_fraction_since_mount * 100.0,
            st.disk.rt_ops,
            st.disk.rt_misses,
            st.disk.commits
        );
    }
    match &st.admission {
        None => outln!("admission: none (the volume was opened without a disk model or bandwidth: streams are refused)"),
        Some(a) => {
            outln!(
                "admission: against {}, best-effort share {:.0}%: {} open stream(s) take {:.1}% of the real-time share{}",
                a.against,
                a.be_share * 100.0,
                st.streams.len(),
                a.load * 100.0,
                if a.round_ms > 0.0 {
                    format!(" (round {:.0} ms)", a.round_ms)
                } else {
                    String::new()
                }
            );
            outln!(
                "headroom:  {} more stream(s) of {} in {} requests with {} ({}); the largest one stream admitted now: {}",
                a.more_streams,
                mbit(a.asked.rate_bps),
                human_bytes(a.asked.request_bytes),
                match a.asked.buffer_bytes {
                    Some(b) => format!("a {} buffer", human_bytes(b)),
                    None => "the buffer dvrfs chooses".to_string(),
                },
                match (a.asked.dir, a.asked.durable_ns) {
                    (StreamDir::Write, Some(d)) => format!("recordings durable within {:.1} s", d as f64 / 1e9),
                    (StreamDir::Write, None) => "recordings".to_string(),
                    (StreamDir::Read, _) => "playbacks".to_string(),
                },
                mbit((a.largest_rate_bps / 1e4).floor() * 1e4)
            );
        }
    }
    if st.streams.is_empty() {
        if r.mounted_at.is_some() {
            outln!("streams:   none open");
        }
        return;
    }
    outln!("streams:   {} open", st.streams.len());
    outln!(
        "  {:>4} {:<5} {:>13} {:>10} {:>6} {:>8} {:>9} {:>7} {:>5} {:>6} {:>5} {:>10} {:>10} {:>10}  PATH",
        "ID", "DIR", "RATE", "BUFFER", "FULL", "SLACK", "MIN-MARG", "REQS", "LATE", "STALLS", "NOSPC", "ACCEPTED", "WRITTEN", "HELD"
    );
    for s in &st.streams {
        let write = s.dir == "write";
        outln!(
            "  {:>4} {:<5} {:>13} {:>10} {:>5.0}% {:>6.2} s {:>9} {:>7} {:>5} {:>6} {:>5} {:>10} {:>10} {:>10}  {}",
            s.id,
            s.dir,
            mbit(s.rate_bps),
            human_bytes(s.buffer_bytes),
            100.0 * s.buffered_bytes as f64 / s.buffer_bytes.max(1) as f64,
            s.slack_ms / 1e3,
            s.min_margin_ms
                .map_or("-".to_string(), |m| format!("{:.2} s", m / 1e3)),
            s.requests,
            s.late,
            s.stalls,
            if write { s.no_space.to_string() } else { "-".into() },
            human_bytes(s.app_bytes),
            if write { human_bytes(s.written_bytes) } else { "-".into() },
            if write { human_bytes(s.reserved_bytes) } else { "-".into() },
            s.path.as_deref().unwrap_or("(no name: deleted while open)")
        );
    }
}
