//! `dvrfs events`: the volume's event log (FORMAT.md section 10b), and the one way
//! an event is written as text or JSON, shared with the mount daemon's log lines
//! (`cmd_mount.rs`) and with fsck's lost-tail lines.
//!
//! Read-only with a shared lock, like `ls`. A volume made before the log existed
//! has none: one line says so and the exit status is 0. On a mounted volume the
//! daemon answers over its socket with its copy in memory.

use clap::Args;
use dvrfs_core::format::events::{ClockChange, EventRecord, What};
use dvrfs_core::volume::LostTail;
use serde_json::{json, Value};
use std::path::PathBuf;

use crate::error::CliResult;
use crate::output::{print_json, time_string};
use crate::target::{open_fs, Access};

#[derive(Args, Debug)]
pub struct EventsArgs {
    pub target: PathBuf,
    /// Print one JSON object on stdout
    #[arg(long)]
    pub json: bool,
    /// Only events numbered above SEQ (the last one a reader saw)
    #[arg(long, value_name = "SEQ")]
    pub since: Option<u64>,
    /// Only the newest N events (after --since)
    #[arg(long, value_name = "N")]
    pub last: Option<usize>,
}

pub fn events(a: &EventsArgs) -> CliResult<u8> {
    // A mounted volume: the daemon's copy in memory, over its socket (the events of
    // the next commit included); else the volume as it is on the disk.
    let (has_log, capacity, all, problems) = match crate::target::daemon(&a.target)? {
        Some(c) => {
            let log = c.events()?;
            (log.has_log, log.capacity as usize, log.events, log.problems)
        }
        None => {
            let fs = open_fs(&a.target, Access::Read)?;
            let problems = fs
                .load_report()
                .event_problems
                .iter()
                .map(|(_, w)| w.clone())
                .collect();
            (
                fs.has_event_log(),
                fs.event_capacity(),
                fs.events(),
                problems,
            )
        }
    };
    let mut ev: Vec<EventRecord> = all
        .into_iter()
        .filter(|e| a.since.is_none_or(|s| e.seq > s))
        .collect();
    if let Some(n) = a.last {
        ev.drain(..ev.len().saturating_sub(n));
    }
    let target = a.target.display().to_string();
    if a.json {
        print_json(&json!({
            "target": target,
            "event_log": has_log,
            "capacity": capacity,
            "problems": problems,
            "events": ev.iter().map(event_json).collect::<Vec<_>>(),
        }));
        return Ok(0);
    }
    if !has_log {
        outln!(
            "{target} has no event log (a volume made before dvrfs kept one; volumes made by dvrfs mkfs since 2026-11-27 have one)"
        );
    }
    for p in &problems {
        eprintln!("dvrfs: {target}: {p}");
    }
    for e in &ev {
        outln!("{}", event_line(e));
    }
    Ok(0)
}

/// The path an event names, or `-`.
fn path_text(e: &EventRecord) -> String {
    if e.path.is_empty() {
        return "-".into();
    }
    let shown = crate::cmd_files::shown(&e.path);
    if e.path_cut {
        format!("...{shown}")
    } else {
        shown
    }
}

/// `4.00M` bits per second.
fn mbit(bps: u64) -> String {
    format!("{:.2}M", bps as f64 / 1e6)
}

/// One line: `SEQ TIME (UTC) MONO_S KIND PATH key=value...`.
pub fn event_line(e: &EventRecord) -> String {
    let (_, kind) = e.what.kind();
    let detail = match &e.what {
        What::Recovery {
            txn,
            tails,
            left_out,
        } => format!(
            "journal transaction {} replayed; {tails} file(s) lost their last accepted bytes{}",
            if *txn == 0 { "none".into() } else { txn.to_string() },
            if *left_out > 0 {
                format!(" ({left_out} more not listed)")
            } else {
                String::new()
            }
        ),
        What::TailLost {
            ino,
            txn,
            committed_bytes,
            accepted_bytes,
        } => format!(
            "ino={ino} survived={committed_bytes} accepted={accepted_bytes} lost_at_least={} txn={txn}",
            accepted_bytes - committed_bytes
        ),
        What::StreamAdmitted {
            ino,
            dir,
            rate_bps,
            request_bytes,
            buffer_bytes,
            durable_ns,
            reserved_bytes,
        } => format!(
            "ino={ino} dir={} rate={} request={request_bytes} buffer={buffer_bytes} durable_ms={} reserved={reserved_bytes}",
            dir.name(),
            mbit(*rate_bps),
            durable_ns / 1_000_000
        ),
        What::StreamRefused {
            ino,
            dir,
            cause,
            rate_bps,
            fits_bps,
        } => format!(
            "ino={ino} dir={} rate={} cause={} fits={}",
            dir.name(),
            mbit(*rate_bps),
            cause.name(),
            mbit(*fits_bps)
        ),
        What::StreamEnded {
            ino,
            dir,
            bytes,
            requests,
            late,
            no_space,
            durability_late,
        } => format!(
            "ino={ino} dir={} bytes={bytes} requests={requests} late={late} no_space={no_space} durability_late={durability_late}",
            dir.name()
        ),
        What::StreamFailed { ino, dir, errno } => {
            format!("ino={ino} dir={} errno={errno}", dir.name())
        }
        What::WriteNoSpace {
            ino,
            need_bytes,
            free_bytes,
        } => format!("ino={ino} need={need_bytes} free={free_bytes}"),
        What::Space {
            up,
            level_pct,
            used_bytes,
            data_bytes,
        } => format!(
            "{} {level_pct}%: used={used_bytes} of {data_bytes} ({:.1}%)",
            if *up { "above" } else { "back below" },
            *used_bytes as f64 * 100.0 / (*data_bytes).max(1) as f64
        ),
        What::ClockStep {
            ino,
            change,
            step_ns,
            offset,
        } => format!(
            "ino={ino} {} {:.3}s at byte {offset}: {}",
            change.name(),
            *step_ns as f64 / 1e9,
            match change {
                ClockChange::HostForward => "the host clock stepped forward; the recording's time jumps with it",
                ClockChange::HostBack =>
                    "the host clock stepped back; not applied, the recording's time goes on by its media time",
                ClockChange::SourceBehind =>
                    "the source's media time fell behind real time; its time re-anchored forward",
                ClockChange::SourceAhead =>
                    "the source's media time ran ahead of real time; its time re-anchored (held until real time catches up)",
            }
        ),
        What::ChunkDeleted {
            ino,
            cause,
            bytes,
            start_utc_ns,
            end_utc_ns,
        } => format!(
            "ino={ino} {} bytes={bytes} from {} to {}: deleted by retention",
            cause.name(),
            time_string(*start_utc_ns),
            time_string(*end_utc_ns)
        ),
    };
    format!(
        "{} {} mono={:.3}s {kind} {} {detail}",
        e.seq,
        time_string(e.wall_ns),
        e.mono_ns as f64 / 1e9,
        path_text(e)
    )
}

/// One JSON object: `seq`, `wall_ns`, `mono_ns`, `time`, `kind`, `path` (null
/// without a file), `path_cut`, and the kind's fields.
pub fn event_json(e: &EventRecord) -> Value {
    let (_, kind) = e.what.kind();
    let mut o = json!({
        "seq": e.seq,
        "wall_ns": e.wall_ns,
        "mono_ns": e.mono_ns,
        "time": time_string(e.wall_ns),
        "kind": kind,
        "path": (!e.path.is_empty()).then(|| String::from_utf8_lossy(&e.path).into_owned()),
        "path_cut": e.path_cut,
    });
    let fields = match &e.what {
        What::Recovery {
            txn,
            tails,
            left_out,
        } => json!({ "txn": txn, "tails": tails, "left_out": left_out }),
        What::TailLost {
            ino,
            txn,
            committed_bytes,
            accepted_bytes,
        } => {
            json!({ "ino": ino, "txn": txn, "survived_bytes": committed_bytes, "accepted_bytes": accepted_bytes })
        }
        What::StreamAdmitted {
            ino,
            dir,
            rate_bps,
            request_bytes,
            buffer_bytes,
            durable_ns,
            reserved_bytes,
        } => {
            json!({ "ino": ino, "dir": dir.name(), "rate_bps": rate_bps, "request_bytes": request_bytes,
                      "buffer_bytes": buffer_bytes, "durable_ns": durable_ns, "reserved_bytes": reserved_bytes })
        }
        What::StreamRefused {
            ino,
            dir,
            cause,
            rate_bps,
            fits_bps,
        } => {
            json!({ "ino": ino, "dir": dir.name(), "cause": cause.name(), "rate_bps": rate_bps, "fits_bps": fits_bps })
        }
        What::StreamEnded {
            ino,
            dir,
            bytes,
            requests,
            late,
            no_space,
            durability_late,
        } => {
            json!({ "ino": ino, "dir": dir.name(), "bytes": bytes, "requests": requests, "late": late,
                      "no_space": no_space, "durability_late": durability_late })
        }
        What::StreamFailed { ino, dir, errno } => {
            json!({ "ino": ino, "dir": dir.name(), "errno": errno })
        }
        What::WriteNoSpace {
            ino,
            need_bytes,
            free_bytes,
        } => json!({ "ino": ino, "need_bytes": need_bytes, "free_bytes": free_bytes }),
        What::Space {
            up,
            level_pct,
            used_bytes,
            data_bytes,
        } => {
            json!({ "up": up, "level_pct": level_pct, "used_bytes": used_bytes, "data_bytes": data_bytes })
        }
        What::ClockStep {
            ino,
            change,
            step_ns,
            offset,
        } => {
            json!({ "ino": ino, "change": change.name(), "applied": change.applied(), "step_ns": step_ns, "offset": offset })
        }
        What::ChunkDeleted {
            ino,
            cause,
            bytes,
            start_utc_ns,
            end_utc_ns,
        } => {
            json!({ "ino": ino, "cause": cause.name(), "bytes": bytes, "start_utc_ns": start_utc_ns, "end_utc_ns": end_utc_ns })
        }
    };
    if let (Some(o), Value::Object(f)) = (o.as_object_mut(), fields) {
        o.extend(f);
    }
    o
}

/// `file PATH: N bytes survive, at least M had been accepted`: one file of a lost-tail
/// record (fsck, the mount's log).
pub fn lost_tail_line(t: &LostTail) -> String {
    let path = match &t.path {
        Some(p) => crate::cmd_files::shown(p.as_bytes()),
        None => format!("inode {} (no name: removed while open)", t.ino),
    };
    format!(
        "file {path}: {} bytes survive, at least {} had been accepted ({} lost)",
        t.size_bytes,
        t.accepted_bytes,
        t.accepted_bytes.saturating_sub(t.size_bytes)
    )
}

/// The JSON form of a lost-tail entry.
pub fn lost_tail_json(t: &LostTail) -> Value {
    json!({ "ino": t.ino, "path": t.path, "survived_bytes": t.size_bytes, "accepted_bytes": t.accepted_bytes })
}

/// What the tail log held at open (FORMAT.md section 11a), as the mount's log and
/// fsck say it: the records replayed into their files (or, read-only, waiting for
/// the next writable open), then each record or block that could not be used.
pub fn tail_log_lines(
    r: &dvrfs_core::volume::tail_log::TailLogReport,
    writable: bool,
) -> Vec<String> {
    let mut out = vec![];
    if r.replay_records > 0 {
        out.push(format!(
            "tail log: {} records, {} bytes {} {} file(s)",
            r.replay_records,
            r.replay_bytes,
            if writable {
                "replayed into"
            } else {
                "to replay (at the next writable open) into"
            },
            r.replay_files
        ));
    }
    for p in &r.problems {
        out.push(format!("tail log: {p}"));
    }
    out
}
