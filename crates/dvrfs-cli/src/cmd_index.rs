//! `dvrfs reindex` (HERMES `addindex`: a file's frame index built from its bytes) and
//! `dvrfs keyframes` (what a file's index holds). Both open the volume directly, as
//! `fsck` and `info` do; through a mounted volume's daemon they are not offered yet.

use clap::Args;
use serde_json::{json, Value};
use std::path::PathBuf;

use dvrfs_core::format::frame_index::{
    FrameEntry, FLAG_CLOCK_STEP, FLAG_DISCONTINUITY, FLAG_IMPORT,
};
use dvrfs_core::media::{Container, TICKS_PER_SECOND};
use dvrfs_core::tools::reindex::{reindex as reindex_file, ReindexReport, Start};

use crate::error::{CliError, CliResult};
use crate::output::print_json;
use crate::target::{now_ns, open_fs, Access};
use crate::timespec::{parse_at, rfc3339, At, Zone};

#[derive(Args, Debug)]
pub struct ReindexArgs {
    pub target: PathBuf,
    /// Files to index (MPEG-TS with H.264, H.265 or MPEG-2 video; fragmented or plain MP4)
    #[arg(required = true)]
    pub paths: Vec<String>,
    /// UTC of each file's first frame: an RFC 3339 time, or a local time in --tz
    /// [default: the time that makes the file's last frame fall on its modification
    /// time, when its last byte was written]
    #[arg(long)]
    pub start: Option<String>,
    /// Zone of a local --start (an IANA name) [default: the host's]
    #[arg(long)]
    pub tz: Option<String>,
    /// Print JSON on stdout: an array with one object per file
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug)]
pub struct KeyframesArgs {
    pub target: PathBuf,
    /// The file whose index to show
    pub path: String,
    /// Zone the times are shown in (an IANA name) [default: the host's]; JSON is UTC
    #[arg(long)]
    pub tz: Option<String>,
    /// Print JSON on stdout
    #[arg(long)]
    pub json: bool,
}

fn container_name(c: Container) -> &'static str {
    match c {
        Container::Ts => "MPEG-TS",
        Container::Mp4 => "MP4",
        Container::Other | Container::Unknown => "not a media stream",
    }
}

fn report_json(path: &str, r: &ReindexReport) -> Value {
    json!({
        "path": path,
        "container": container_name(r.container),
        "codec": r.codec.map(|c| format!("{c:?}")),
        "frames": r.frames,
        "keyframes": r.keyframes,
        "skipped_keyframes": r.skipped_keyframes,
        "skipped_bytes": r.skipped_bytes,
        "resyncs": r.resyncs,
        "first_utc": r.first_utc_ns.map(rfc3339),
        "last_utc": r.last_utc_ns.map(rfc3339),
        "complete": !r.out_of_room,
    })
}

pub fn reindex(a: &ReindexArgs) -> CliResult<u8> {
    let zone = Zone::new(a.tz.as_deref())?;
    let start = match a.start.as_deref() {
        None => Start::EndsAtMtime,
        Some(text) => match parse_at("--start", text, &zone)? {
            At::Utc(t) => Start::Utc(t),
            _ => {
                return Err(CliError::usage(
                    format!("invalid --start {text:?}: a reindex needs a moment, not a position in the recording"),
                    "give an RFC 3339 time (2026-11-28T14:03:10Z) or a local date and time in --tz",
                ))
            }
        },
    };
    let mut fs = open_fs(&a.target, Access::Write)?;
    let mut all = vec![];
    let mut incomplete = 0;
    for path in &a.paths {
        let ino = fs.resolve(path)?;
        let r = reindex_file(&mut fs, ino, start, now_ns())
            .map_err(|e| CliError::from(e).hint(format!("{path}: the index was not changed")))?;
        fs.tick()?;
        incomplete += usize::from(r.out_of_room);
        if a.json {
            all.push(report_json(path, &r));
            continue;
        }
        match r.container {
            Container::Ts | Container::Mp4 => {
                let codec = r.codec.map_or(String::new(), |c| format!(", {c:?}"));
                outln!(
                    "{path}: {} keyframes of {} frames ({}{codec})",
                    r.keyframes,
                    r.frames,
                    container_name(r.container)
                );
                if let (Some(f), Some(l)) = (r.first_utc_ns, r.last_utc_ns) {
                    outln!("  from {} to {}", zone.show(f), zone.show(l));
                }
                if r.skipped_bytes > 0 || r.skipped_keyframes > 0 {
                    outln!(
                        "  {} bytes of garbage skipped ({} resyncs); {} keyframes too large to index",
                        r.skipped_bytes,
                        r.resyncs,
                        r.skipped_keyframes
                    );
                }
                if r.out_of_room {
                    outln!("  the metadata area had no room for the whole index: it stops there and the file is marked incomplete (free space or names, then reindex)");
                }
            }
            _ => outln!("{path}: not a transport stream or an MP4: no index"),
        }
    }
    fs.sync()?;
    fs.close()?;
    if a.json {
        print_json(&Value::Array(all));
    }
    Ok(if incomplete > 0 { 3 } else { 0 })
}

fn flags_text(f: u32) -> String {
    let mut v = vec![];
    if f & FLAG_DISCONTINUITY != 0 {
        v.push("discontinuity");
    }
    if f & FLAG_CLOCK_STEP != 0 {
        v.push("clock-step");
    }
    if f & FLAG_IMPORT != 0 {
        v.push("import");
    }
    v.join(",")
}

fn entry_json(e: &FrameEntry) -> Value {
    json!({
        "frame": e.number,
        "offset": e.offset,
        "data_offset": e.offset + u64::from(e.data_delta),
        "length": e.len,
        "pts_90k": e.pts_90k,
        "utc": rfc3339(e.utc_ns),
        "flags": flags_text(e.flags),
    })
}

pub fn keyframes(a: &KeyframesArgs) -> CliResult<u8> {
    let zone = Zone::new(a.tz.as_deref())?;
    let fs = open_fs(&a.target, Access::Read)?;
    let ino = fs.resolve(&a.path)?;
    let info = fs.frame_info(ino)?;
    let entries: Vec<FrameEntry> = fs
        .frame_index(ino)?
        .map(|ix| ix.entries().to_vec())
        .unwrap_or_default();
    if a.json {
        print_json(&json!({
            "path": a.path,
            "complete": info.complete,
            "index_blocks": info.blocks,
            "keyframes": entries.iter().map(entry_json).collect::<Vec<_>>(),
        }));
        return Ok(0);
    }
    let state = match (info.complete, entries.is_empty()) {
        (true, true) => "no index: `dvrfs reindex` builds one",
        (true, false) => "complete",
        (false, _) => "incomplete: the index misses keyframes; `dvrfs reindex` builds it again",
    };
    outln!(
        "{}: {} keyframes in {} index blocks ({state})",
        a.path,
        entries.len(),
        info.blocks
    );
    if entries.is_empty() {
        return Ok(0);
    }
    outln!(
        "{:>9} {:>14} {:>10} {:>12}  {} ({})",
        "frame",
        "offset",
        "length",
        "media s",
        "time",
        zone.name()
    );
    let pts0 = entries[0].pts_90k;
    for e in &entries {
        let media = (e.pts_90k - pts0) as f64 / TICKS_PER_SECOND as f64;
        let flags = flags_text(e.flags & !FLAG_IMPORT);
        outln!(
            "{:>9} {:>14} {:>10} {:>12.3}  {}{}",
            e.number,
            e.offset,
            e.len,
            media,
            zone.show(e.utc_ns),
            if flags.is_empty() {
                String::new()
            } else {
                format!("  [{flags}]")
            }
        );
    }
    Ok(0)
}
