//! `dvrfs protect` and `dvrfs unprotect`: protected clips (retention's rule 2,
//! docs/retention.md "Protected clips"). A protection names a stream directory and
//! a UTC range; the engine stamps every chunk the range meets (`Op::Protect`,
//! `dvrfs_core::retention::protect`), refusing it past the volume's
//! `protected-max`, and retention never deletes a stamped chunk before the
//! protection ends. `--for` gives it an end; without one it holds until
//! `unprotect`.
//!
//! The protections' record is `/.protect` on the volume, one JSON line per event:
//! `protect` (the id, path, range asked, end and note; written before the chunks
//! are stamped, so the id of one interrupted before its outcome is never reused),
//! then `covered` (what the engine stamped) or `refused` (why not: nothing was
//! stamped, and the next protection takes its id), and `removed`. `protect --list` folds it; a
//! `protect` without its outcome is shown as interrupted. Removing a protection
//! clears its stamps and then states again the other protections of the same
//! stream, so a chunk in two keeps the one that remains. Both go through the
//! `dvrfs mount` daemon when it holds the volume, as `record` does.

use clap::Args;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::path::PathBuf;

use dvrfs_core::chain::ChainStore;
use dvrfs_core::format::dir::Kind;
use dvrfs_core::format::inode::Protection;
use dvrfs_core::retention::Covered;
use dvrfs_core::{Error as CoreError, Op, Output};
use dvrfs_remote::Handle;
use dvrfs_runtime::RuntimeError;

use crate::args::parse_duration_ms;
use crate::chain::Via;
use crate::error::{CliError, CliResult};
use crate::output::{human_bytes, print_json};
use crate::recording::Recording;
use crate::target::{now_ns, open_handle, Access};
use crate::timespec::{parse_at, rfc3339, At, Zone};

/// The protections' record, at the volume's root.
pub const RECORD_NAME: &str = ".protect";

#[derive(Args, Debug)]
pub struct ProtectArgs {
    pub target: PathBuf,
    /// The stream's directory (its chunks are what is protected)
    pub path: Option<String>,
    /// The clip's start: an RFC 3339 time, a local time in --tz, +DURATION after the
    /// stream's first frame, -DURATION before its end, or frame:N
    #[arg(long, allow_hyphen_values = true)]
    pub from: Option<String>,
    /// The clip's end (the same forms)
    #[arg(long, allow_hyphen_values = true)]
    pub to: Option<String>,
    /// The protection ends this long from now (e.g. 90d); without it, it holds
    /// until `dvrfs unprotect`
    #[arg(long = "for")]
    pub for_: Option<String>,
    /// Why it is kept (shown by --list)
    #[arg(long)]
    pub note: Option<String>,
    /// Show every protection on the volume
    #[arg(long, conflicts_with_all = ["path", "from", "to", "for_", "note"])]
    pub list: bool,
    /// Zone of local times given and shown (an IANA name) [default: the host's]
    #[arg(long)]
    pub tz: Option<String>,
    /// Print JSON on stdout
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug)]
pub struct UnprotectArgs {
    pub target: PathBuf,
    /// The protection's number (`dvrfs protect --list`)
    #[arg(long)]
    pub id: u32,
    /// Print JSON on stdout
    #[arg(long)]
    pub json: bool,
}

/// One protection as the record tells it.
#[derive(Clone, Debug, Default)]
struct Entry {
    id: u32,
    path: String,
    from_ns: i64,
    to_ns: i64,
    /// UTC seconds, or `Protection::FOREVER`.
    until_s: u32,
    note: String,
    at: String,
    covered: Option<Covered>,
    refused: Option<String>,
    removed: Option<String>,
}

impl Entry {
    fn protection(&self) -> Protection {
        Protection {
            until_s: self.until_s,
            id: self.id,
        }
    }

    fn state(&self, now: i64) -> &'static str {
        match (&self.covered, &self.refused, &self.removed) {
            (_, _, Some(_)) => "removed",
            (_, Some(_), _) => "refused",
            (None, None, None) => "interrupted",
            (Some(_), None, None) if self.protection().holds_at(now) => "held",
            (Some(_), None, None) => "ended",
        }
    }
}

pub fn protect(a: &ProtectArgs) -> CliResult<u8> {
    let zone = Zone::new(a.tz.as_deref())?;
    if a.list {
        let h = open_handle(&a.target, Access::Read)?;
        return list(&h, &zone, a.json);
    }
    let (Some(path), Some(from), Some(to)) = (&a.path, &a.from, &a.to) else {
        return Err(CliError::usage(
            "protect needs PATH, --from and --to (or --list)",
            "e.g. dvrfs protect rec.img /cams/door --from 2026-11-28T14:03:00Z --to 2026-11-28T14:04:00Z --for 90d",
        ));
    };
    let from_at = parse_at("--from", from, &zone)?;
    let to_at = parse_at("--to", to, &zone)?;
    let now = now_ns();
    let until_s = match &a.for_ {
        None => Protection::FOREVER,
        Some(d) => {
            let ms = parse_duration_ms("--for", d)?;
            let end = now / 1_000_000_000 + i64::try_from(ms / 1000).unwrap_or(i64::MAX);
            u32::try_from(end)
                .ok()
                .filter(|&s| s != Protection::FOREVER)
                .ok_or_else(|| {
                    CliError::usage(
                        format!("--for {d} ends after 2106"),
                        "give a shorter time, or none: the protection then holds until unprotected",
                    )
                })?
        }
    };
    let h = open_handle(&a.target, Access::Write)?;
    let dir = h.resolve(path)?;
    if h.stat(dir)?.kind != Kind::Dir {
        return Err(CliError::usage(
            format!("{path} is not a directory"),
            "a protection covers chunks of a stream: name its directory",
        ));
    }
    let (from_ns, to_ns) = utc_range(&h, path, (from, from_at), (to, to_at), &zone)?;
    if to_ns < from_ns {
        return Err(CliError::usage(
            format!("--to {to} is before --from {from}"),
            "give an end after the start",
        ));
    }
    let mut rec = Record::open(&h)?;
    // A refused protection stamped nothing (the engine's operation is whole): its
    // number is free again. Any other, interrupted ones too, is never reused.
    let mut id = rec
        .entries
        .values()
        .filter(|e| e.refused.is_none())
        .map(|e| e.id)
        .max()
        .map_or(1, |m| m + 1);
    let mut entry = Entry {
        id,
        path: path.trim_end_matches('/').to_string(),
        from_ns,
        to_ns,
        until_s,
        note: a.note.clone().unwrap_or_default(),
        at: rfc3339(now),
        ..Entry::default()
    };
    let covered = loop {
        entry.id = id;
        rec.append(&h, &protect_line(&entry))?;
        let e = match run_protect(&h, dir, &entry, false) {
            Ok(c) => break c,
            Err(e) => e,
        };
        let line = json!({"id": id, "event": "refused", "why": e.to_string()});
        rec.append(&h, &line)?;
        match e {
            // Chunks carry this id from a protection the record lost (`/.protect`
            // removed or cut): the next id, as the engine asks.
            RuntimeError::Engine(CoreError::Exists(_)) if id < u32::MAX - 1 => id += 1,
            e => return Err(e.into()),
        }
    };
    rec.append(&h, &covered_line(id, &covered))?;
    h.run(Op::Fsync, None, 0)?;
    let entry = Entry {
        covered: Some(covered),
        ..entry
    };
    if a.json {
        print_json(&entry_json(&entry, now));
    } else {
        println!("{}", entry_text(&entry, &zone, now));
    }
    Ok(0)
}

pub fn unprotect(a: &UnprotectArgs) -> CliResult<u8> {
    let h = open_handle(&a.target, Access::Write)?;
    let mut rec = Record::open(&h)?;
    let recorded = rec.entries.get(&a.id).filter(|e| e.refused.is_none());
    let Some(entry) = recorded.cloned() else {
        // Not in the record (`/.protect` removed or cut): the chunks' stamps are
        // what protects, and they go all the same.
        return unprotect_unrecorded(&h, &mut rec, a);
    };
    if entry.removed.is_some() {
        return Err(CliError::usage(
            format!("protection {} was removed already", a.id),
            "see the protections with dvrfs protect TARGET --list",
        ));
    }
    let now = now_ns();
    let cleared = run_unprotect(&h, a.id)?;
    rec.append(
        &h,
        &json!({"id": a.id, "event": "removed", "at": rfc3339(now)}),
    )?;
    // A chunk in this protection and another kept this one's stamp (it ended
    // later): the others of the stream are stated again.
    let mut restated = vec![];
    for other in rec.entries.values() {
        let same = other.path == entry.path && other.id != a.id;
        if same && other.state(now) == "held" {
            let dir = h.resolve(&other.path)?;
            match run_protect(&h, dir, other, true) {
                Ok(_) => restated.push(other.id),
                Err(e) => eprintln!(
                    "unprotect: protection {} could not be stated again: {}",
                    other.id,
                    CliError::from(e).message
                ),
            }
        }
    }
    h.run(Op::Fsync, None, 0)?;
    if a.json {
        print_json(&json!({
            "id": a.id,
            "path": entry.path,
            "chunks": cleared.chunks,
            "bytes": cleared.bytes,
            "restated": restated,
        }));
    } else {
        println!(
            "removed protection {} of {}: {} chunk(s), {}, now deleted by retention as its policies say",
            a.id,
            entry.path,
            cleared.chunks,
            human_bytes(cleared.bytes)
        );
    }
    Ok(0)
}

/// Protects `e`'s range; `restate`: stated again after another protection was
/// removed (not checked against protected-max again).
fn run_protect(h: &Handle, dir: u32, e: &Entry, restate: bool) -> Result<Covered, RuntimeError> {
    let op = Op::Protect {
        dir,
        from_utc_ns: e.from_ns,
        to_utc_ns: e.to_ns,
        protection: e.protection(),
        restate,
    };
    match h.run(op, None, 0)? {
        Output::Covered(c) => Ok(c),
        o => unreachable!("protect returned {o:?}"),
    }
}

/// `unprotect` of an id the record does not know: its stamps are cleared if any
/// chunk carries it (the record lost it), else there is no such protection.
fn unprotect_unrecorded(h: &Handle, rec: &mut Record, a: &UnprotectArgs) -> CliResult<u8> {
    let cleared = run_unprotect(h, a.id)?;
    if cleared.chunks == 0 {
        return Err(CliError::usage(
            format!("there is no protection {}", a.id),
            "see the protections with dvrfs protect TARGET --list",
        ));
    }
    let now = now_ns();
    rec.append(
        h,
        &json!({"id": a.id, "event": "removed", "at": rfc3339(now), "unrecorded": true}),
    )?;
    h.run(Op::Fsync, None, 0)?;
    if a.json {
        print_json(&json!({
            "id": a.id,
            "path": null,
            "chunks": cleared.chunks,
            "bytes": cleared.bytes,
            "restated": [],
        }));
    } else {
        println!(
            "removed protection {} (not in the record /{RECORD_NAME}: its range and note were lost): {} chunk(s), {}, now deleted by retention as its policies say",
            a.id,
            cleared.chunks,
            human_bytes(cleared.bytes)
        );
    }
    Ok(0)
}

/// Removes protection `id` from its chunks, in as many parts as the engine takes.
fn run_unprotect(h: &Handle, id: u32) -> CliResult<Covered> {
    let mut all = Covered::default();
    loop {
        let c = match h.run(Op::Unprotect { id }, None, 0)? {
            Output::Covered(c) => c,
            o => unreachable!("unprotect returned {o:?}"),
        };
        all.chunks += c.chunks;
        all.bytes += c.bytes;
        if !c.more {
            return Ok(all);
        }
    }
}

/// `--from` and `--to` in UTC: a time as given; the forms relative to the
/// recording (after its first frame, before its end, a frame) at the keyframe
/// they name in the stream's index.
fn utc_range(
    h: &Handle,
    path: &str,
    (from, from_at): (&str, At),
    (to, to_at): (&str, At),
    zone: &Zone,
) -> CliResult<(i64, i64)> {
    if let (At::Utc(a), At::Utc(b)) = (from_at, to_at) {
        return Ok((a, b));
    }
    let rec = Recording::open(h, path)?;
    let a = match from_at {
        At::Utc(t) => t,
        _ => {
            rec.entry(rec.start_at("--from", from, from_at, zone)?)
                .utc_ns
        }
    };
    let b = match to_at {
        At::Utc(t) => t,
        _ => match rec.end_at("--to", to, to_at)? {
            Some(p) => rec.entry(p).utc_ns,
            None => rec.end_utc().unwrap_or(i64::MAX),
        },
    };
    Ok((a, b))
}

/// The record file, read.
struct Record {
    ino: u32,
    entries: BTreeMap<u32, Entry>,
}

impl Record {
    /// Reads `/.protect`, made empty if missing.
    fn open(h: &Handle) -> CliResult<Record> {
        let root = h.resolve("/")?;
        let mut via = Via(h);
        let ino = match via.find(root, RECORD_NAME)? {
            Some(i) => i,
            None => via.make(root, RECORD_NAME)?,
        };
        let size = via.size(ino)?;
        let text = via.read_at(ino, 0, size as usize)?;
        let mut entries = BTreeMap::new();
        for (n, line) in String::from_utf8_lossy(&text).lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            let v: Value = serde_json::from_str(line).map_err(|e| {
                CliError::new(format!(
                    "{RECORD_NAME} line {}: not JSON ({e}); the protections themselves are in the chunks",
                    n + 1
                ))
            })?;
            fold(&mut entries, &v);
        }
        Ok(Record { ino, entries })
    }

    fn append(&mut self, h: &Handle, line: &Value) -> CliResult<()> {
        let mut text = line.to_string();
        text.push('\n');
        Via(h).append_at_end(self.ino, text.as_bytes())?;
        fold(&mut self.entries, line);
        Ok(())
    }
}

/// One record line applied to the entries.
fn fold(entries: &mut BTreeMap<u32, Entry>, v: &Value) {
    let Some(id) = v["id"].as_u64().and_then(|i| u32::try_from(i).ok()) else {
        return;
    };
    let s = |k: &str| v[k].as_str().unwrap_or_default().to_string();
    let i = |k: &str| v[k].as_i64().unwrap_or_default();
    match v["event"].as_str() {
        Some("protect") => {
            entries.insert(
                id,
                Entry {
                    id,
                    path: s("path"),
                    from_ns: i("from_ns"),
                    to_ns: i("to_ns"),
                    until_s: v["until_s"]
                        .as_u64()
                        .and_then(|u| u32::try_from(u).ok())
                        .unwrap_or(Protection::FOREVER),
                    note: s("note"),
                    at: s("at"),
                    ..Entry::default()
                },
            );
        }
        Some("covered") => {
            if let Some(e) = entries.get_mut(&id) {
                e.covered = Some(Covered {
                    chunks: v["chunks"].as_u64().unwrap_or_default(),
                    bytes: v["bytes"].as_u64().unwrap_or_default(),
                    first_utc_ns: i("first_ns"),
                    last_utc_ns: i("last_ns"),
                    more: false,
                });
            }
        }
        Some("refused") => {
            if let Some(e) = entries.get_mut(&id) {
                e.refused = Some(s("why"));
            }
        }
        Some("removed") => {
            if let Some(e) = entries.get_mut(&id) {
                e.removed = Some(s("at"));
            }
        }
        _ => {}
    }
}

fn protect_line(e: &Entry) -> Value {
    json!({
        "id": e.id,
        "event": "protect",
        "path": e.path,
        "from_ns": e.from_ns,
        "to_ns": e.to_ns,
        "from": rfc3339(e.from_ns),
        "to": rfc3339(e.to_ns),
        "until_s": e.until_s,
        "note": e.note,
        "at": e.at,
    })
}

fn covered_line(id: u32, c: &Covered) -> Value {
    json!({
        "id": id,
        "event": "covered",
        "chunks": c.chunks,
        "bytes": c.bytes,
        "first_ns": c.first_utc_ns,
        "last_ns": c.last_utc_ns,
    })
}

fn until_text(until_s: u32, zone: &Zone) -> String {
    match until_s {
        Protection::FOREVER => "until removed".into(),
        s => format!("until {}", zone.show(i64::from(s) * 1_000_000_000)),
    }
}

fn entry_text(e: &Entry, zone: &Zone, now: i64) -> String {
    let mut t = format!(
        "id {}: {} from {} to {}, {}",
        e.id,
        e.path,
        zone.show(e.from_ns),
        zone.show(e.to_ns),
        until_text(e.until_s, zone)
    );
    if let Some(c) = &e.covered {
        t += &format!(
            "; {} chunk(s), {}, from {} to {}",
            c.chunks,
            human_bytes(c.bytes),
            zone.show(c.first_utc_ns),
            zone.show(c.last_utc_ns)
        );
    }
    match e.state(now) {
        "held" => {}
        "refused" => t += &format!(" [refused: {}]", e.refused.as_deref().unwrap_or("")),
        "interrupted" => {
            t += " [interrupted before its chunks were stamped: unprotect it and protect again]"
        }
        s => t += &format!(" [{s}]"),
    }
    if !e.note.is_empty() {
        t += &format!(" ({})", e.note);
    }
    t
}

fn entry_json(e: &Entry, now: i64) -> Value {
    json!({
        "id": e.id,
        "path": e.path,
        "from": rfc3339(e.from_ns),
        "to": rfc3339(e.to_ns),
        "until": match e.until_s {
            Protection::FOREVER => Value::Null,
            s => Value::from(rfc3339(i64::from(s) * 1_000_000_000)),
        },
        "note": e.note,
        "state": e.state(now),
        "chunks": e.covered.map(|c| c.chunks),
        "bytes": e.covered.map(|c| c.bytes),
        "covers_from": e.covered.map(|c| rfc3339(c.first_utc_ns)),
        "covers_to": e.covered.map(|c| rfc3339(c.last_utc_ns)),
        "created": e.at,
        "refused": e.refused,
    })
}

/// `protect --list`: every protection neither refused nor removed, by id.
fn list(h: &Handle, zone: &Zone, json: bool) -> CliResult<u8> {
    let root = h.resolve("/")?;
    let mut via = Via(h);
    let entries = match via.find(root, RECORD_NAME)? {
        None => BTreeMap::new(),
        Some(_) => Record::open(h)?.entries,
    };
    let now = now_ns();
    let shown: Vec<&Entry> = entries
        .values()
        .filter(|e| e.removed.is_none() && e.refused.is_none())
        .collect();
    if json {
        print_json(&Value::from(
            shown.iter().map(|e| entry_json(e, now)).collect::<Vec<_>>(),
        ));
        return Ok(0);
    }
    if shown.is_empty() {
        println!("no protections");
    }
    for e in shown {
        println!("{}", entry_text(e, zone, now));
    }
    Ok(0)
}
