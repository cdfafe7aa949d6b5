//! What a user takes out of a recording by time, through its frame index:
//! `dvrfs export` (a clip in the source's container, cut at keyframes, no re-encode,
//! with a manifest that ties it to the volume), `dvrfs keyframe` (one keyframe that
//! plays on its own, for a thumbnail) and `dvrfs timeline` (a recording's spans and
//! gaps, from the index alone). A recording is a stream directory of chunks or one
//! file (`recording.rs`); the reads are best-effort traffic, beside the recordings.

use clap::Args;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::time::Instant;

use dvrfs_core::format::frame_index::{FLAG_CLOCK_STEP, FLAG_DISCONTINUITY};
use dvrfs_core::media::{Container, Mp4Retimer, TrickMp4, TsTrim};
use dvrfs_core::meta::Ino;
use dvrfs_remote::Handle;

use crate::chain::hex;
use crate::error::{local_io, CliError, CliResult};
use crate::output::{human_bytes, print_json, uuid_string};
use crate::recording::{read_range, Pos, Recording};
use crate::seek::head_of;
use crate::target::{open_handle, Access};
use crate::timespec::{parse_at, rfc3339, Zone};

#[derive(Args, Debug)]
pub struct ExportArgs {
    pub target: PathBuf,
    /// The recording: a stream directory of chunks, or one file
    pub path: String,
    /// Start at the last keyframe at or before this: an RFC 3339 time, a local time
    /// in --tz, +DURATION after the first frame, -DURATION before the end (or
    /// frame:N of a one-file recording)
    #[arg(long, allow_hyphen_values = true)]
    pub from: String,
    /// End at the first keyframe at or after this (same forms); past the last
    /// keyframe, the clip runs to the recording's end
    #[arg(long, allow_hyphen_values = true)]
    pub to: String,
    /// The clip: a local file, or `-` for stdout
    #[arg(long)]
    pub output: PathBuf,
    /// Also write a JSON manifest here: the clip's SHA-256, its UTC range, the
    /// stream, the byte ranges of the chunks it came from and the volume's UUID
    #[arg(long)]
    pub manifest: Option<PathBuf>,
    /// Overwrite existing local files
    #[arg(long)]
    pub force: bool,
    /// Zone of local times given and shown (an IANA name) [default: the host's]
    #[arg(long)]
    pub tz: Option<String>,
    /// Print the manifest on stdout too (not with --output -)
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug)]
pub struct KeyframeArgs {
    pub target: PathBuf,
    /// The recording: a stream directory of chunks, or one file
    pub path: String,
    /// The last keyframe at or before this (the forms of `export --from`)
    #[arg(long, allow_hyphen_values = true)]
    pub at: String,
    /// Where it goes: a local file, or `-` for stdout. A transport stream's keyframe
    /// after its PAT and PMT; an MP4's keyframe fragment after its init segment
    #[arg(long)]
    pub output: PathBuf,
    /// Overwrite an existing local file
    #[arg(long)]
    pub force: bool,
    /// Zone of a local time given and shown (an IANA name) [default: the host's]
    #[arg(long)]
    pub tz: Option<String>,
    /// Print what was written as JSON on stdout (not with --output -)
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug)]
pub struct TimelineArgs {
    pub target: PathBuf,
    /// The recording: a stream directory of chunks, or one file
    pub path: String,
    /// Zone the times are shown in (an IANA name) [default: the host's]; JSON is UTC
    #[arg(long)]
    pub tz: Option<String>,
    /// Print JSON on stdout
    #[arg(long)]
    pub json: bool,
}

/// Where a command's bytes go, hashed on the way; an MP4 clip through a retimer
/// (its decode times made to start at 0).
struct Sink {
    path: PathBuf,
    out: Box<dyn Write>,
    hash: Sha256,
    bytes: u64,
    retimer: Option<Mp4Retimer>,
    /// A transport-stream clip's other streams trimmed to its video.
    trim: Option<TsTrim>,
}

impl Sink {
    fn create(path: &Path, force: bool) -> CliResult<Sink> {
        let out: Box<dyn Write> = if path.as_os_str() == "-" {
            Box::new(io::BufWriter::new(io::stdout().lock()))
        } else {
            Box::new(crate::cmd_data::create_local(path, force)?)
        };
        Ok(Sink {
            path: path.to_path_buf(),
            out,
            hash: Sha256::new(),
            bytes: 0,
            retimer: None,
            trim: None,
        })
    }

    fn is_stdout(&self) -> bool {
        self.path.as_os_str() == "-"
    }

    fn write(&mut self, b: &[u8]) -> CliResult<()> {
        if let Some(r) = self.retimer.as_mut() {
            let out = r.feed(b);
            return self.put(&out);
        }
        if let Some(t) = self.trim.as_mut() {
            let out = t.feed(b);
            return self.put(&out);
        }
        self.put(b)
    }

    fn put(&mut self, b: &[u8]) -> CliResult<()> {
        self.out
            .write_all(b)
            .map_err(|e| local_io(&self.path, "error writing", e))?;
        self.hash.update(b);
        self.bytes += b.len() as u64;
        Ok(())
    }

    /// Packets the trim dropped.
    fn trimmed(&self) -> u64 {
        self.trim.as_ref().map_or(0, TsTrim::dropped_packets)
    }

    fn finish(mut self) -> CliResult<(u64, String)> {
        if let Some(mut t) = self.trim.take() {
            let rest = t.finish();
            self.put(&rest)?;
            if let Some(why) = t.gave_up() {
                eprintln!("export: the clip's audio was left untrimmed from where it met {why}");
            }
        }
        if let Some(mut r) = self.retimer.take() {
            let rest = r.finish();
            self.put(&rest)?;
            if let Some(why) = r.gave_up() {
                eprintln!("export: the clip's times were left as the source's from where {why}");
            }
        }
        self.out
            .flush()
            .map_err(|e| local_io(&self.path, "error writing", e))?;
        Ok((self.bytes, hex(&self.hash.finalize())))
    }

    /// A failed command leaves no partial local file behind.
    fn abandon(self) {
        if !self.is_stdout() {
            drop(self.out);
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// Copies bytes `start..end` of file `ino` to `sink`; the SHA-256 of just these
/// bytes.
fn copy_range(
    rt: &Handle,
    ino: Ino,
    path: &str,
    start: u64,
    end: u64,
    sink: &mut Sink,
) -> CliResult<String> {
    let mut hash = Sha256::new();
    read_range(rt, ino, path, start, end, &mut |b| {
        hash.update(b);
        sink.write(b)
    })?;
    Ok(hex(&hash.finalize()))
}

/// The head that goes first when output starts at keyframe `p`: the chunk's PAT
/// and PMT or init segment (nothing when `p` is at the file's first byte).
fn head_before(rt: &Handle, rec: &Recording, p: Pos) -> CliResult<(Vec<u8>, Container)> {
    let chunk = &rec.chunks[p.chunk];
    let offset = rec.entry(p).offset;
    let head = head_of(rt, chunk.ino, offset)?;
    Ok((
        if offset == 0 { vec![] } else { head.bytes },
        head.container,
    ))
}

pub fn export(a: &ExportArgs) -> CliResult<u8> {
    let zone = Zone::new(a.tz.as_deref())?;
    if a.json && a.output.as_os_str() == "-" {
        return Err(CliError::usage(
            "--json and --output - both want stdout",
            "write the clip to a file, or the manifest with --manifest FILE",
        ));
    }
    let from_at = parse_at("--from", &a.from, &zone)?;
    let to_at = parse_at("--to", &a.to, &zone)?;
    if let Some(m) = &a.manifest {
        crate::cmd_data::refuse_overwrite(m, a.force)?;
    }
    let rt = open_handle(&a.target, Access::Read)?;
    let rec = Recording::open(&rt, &a.path)?;
    let from = rec.start_at("--from", &a.from, from_at, &zone)?;
    let to = rec.end_at("--to", &a.to, to_at)?;
    if to.is_some_and(|t| (t.chunk, t.key) <= (from.chunk, from.key)) {
        return Err(CliError::usage(
            format!("--to {} is not after --from {}", a.to, a.from),
            "give an end after the start",
        ));
    }
    let ranges = rec.ranges(from, to);
    let last = ranges.last().map_or(from.chunk, |&(c, _, _)| c);
    let held = rec.hold(&rt, from.chunk..=last)?;
    let (head, container) = head_before(&rt, &rec, from)?;
    // A plain MP4's samples from a keyframe go out as a fragmented MP4.
    let mut plain = match container {
        Container::Mp4 => crate::plain_mp4::pieces(&rt, &rec, from, to)?,
        _ => None,
    };
    let (head, ranges) = match &plain {
        Some(p) => (
            p.first()
                .map_or_else(Vec::new, |p| p.remux.init_segment().to_vec()),
            p.iter().map(|p| (p.chunk, p.start, p.end)).collect(),
        ),
        None => (head, ranges),
    };
    let uuid = uuid_string(&rt.volume_uuid()?);
    // The chunks' seals, when the stream directory keeps a chain.
    let sealed: Vec<crate::chain::Record> = match rec.dir {
        true => crate::chain::read(&mut crate::chain::Via(&rt), rt.resolve(&rec.path)?)?
            .map(|(_, c)| c.records)
            .unwrap_or_default(),
        false => vec![],
    };
    crate::interrupt::catch();
    let started = Instant::now();
    let mut sink = Sink::create(&a.output, a.force)?;
    if container == Container::Mp4 && plain.is_none() {
        sink.retimer = Some(Mp4Retimer::new());
    }
    if container == Container::Ts {
        // The audio muxed ahead of the video past its end (and behind it before its
        // start) dropped, so the clip lasts as long as its video. A clip from the
        // file's first byte has its tables in place: read for the trim.
        let tables = match head.is_empty() {
            true => head_of(&rt, rec.chunks[from.chunk].ino, 0)?.bytes,
            false => head.clone(),
        };
        let end = to.map(|p| rec.entry(p).pts_90k);
        sink.trim = TsTrim::new(&tables, rec.entry(from).pts_90k, end).ok();
    }
    let copied = (|| -> CliResult<Vec<Value>> {
        sink.write(&head)?;
        let mut sources = vec![];
        for (i, &(c, start, end)) in ranges.iter().enumerate() {
            let chunk = &rec.chunks[c];
            let sha = match plain.as_mut() {
                Some(pieces) => {
                    crate::plain_mp4::run(&rt, &rec, &mut pieces[i], &mut |b| sink.write(b))?
                }
                None => copy_range(&rt, chunk.ino, &chunk.path, start, end, &mut sink)?,
            };
            let mut source = json!({
                "path": chunk.path,
                "from_byte": start,
                "to_byte": end,
                "sha256": sha,
            });
            let name = chunk.path.rsplit('/').next().unwrap_or_default();
            if let Some(crate::chain::Record::Chunk {
                bytes,
                sha256,
                chain,
                ..
            }) = sealed
                .iter()
                .find(|r| matches!(r, crate::chain::Record::Chunk { name: n, .. } if n == name))
            {
                source["chunk_bytes"] = json!(bytes);
                source["chunk_sha256"] = json!(hex(sha256));
                source["chunk_chain"] = json!(hex(chain));
            }
            sources.push(source);
        }
        Ok(sources)
    })();
    let sources = match copied {
        Ok(s) => s,
        Err(e) => {
            sink.abandon();
            return Err(e);
        }
    };
    let to_stdout = sink.is_stdout();
    let trimmed = sink.trimmed();
    let (bytes, sha) = sink.finish()?;
    held.release()?;
    rt.close()?;
    let first = rec.entry(from);
    let end_utc = match to {
        Some(p) => rec.entry(p).utc_ns,
        None => rec
            .end_utc()
            .expect("a recording with a keyframe has an end"),
    };
    let manifest = json!({
        "clip": a.output.display().to_string(),
        "bytes": bytes,
        "sha256": sha,
        "head_bytes": head.len(),
        "trimmed_packets": trimmed,
        "stream": rec.path,
        "volume_uuid": uuid,
        "from": rfc3339(first.utc_ns),
        "to": rfc3339(end_utc),
        "to_is_end": to.is_none(),
        "seconds": (end_utc - first.utc_ns) as f64 / 1e9,
        "asked": {"from": a.from, "to": a.to},
        "first_frame": {"chunk": rec.chunks[from.chunk].path, "frame": first.number, "offset": first.offset},
        "sources": sources,
    });
    if let Some(m) = &a.manifest {
        let text = serde_json::to_string_pretty(&manifest).expect("JSON") + "\n";
        std::fs::write(m, text).map_err(|e| local_io(m, "cannot write", e))?;
    }
    if a.json {
        print_json(&manifest);
    }
    if !to_stdout || a.manifest.is_some() || !a.json {
        eprintln!(
            "export: {} ({bytes} bytes) of {}, {} to {} ({:.1} s{}) from {} chunk{} to {} in {:.2} s; SHA-256 {sha}",
            human_bytes(bytes),
            rec.path,
            zone.show(first.utc_ns),
            zone.show(end_utc),
            (end_utc - first.utc_ns) as f64 / 1e9,
            if to.is_none() { ", to the end" } else { "" },
            ranges.len(),
            if ranges.len() == 1 { "" } else { "s" },
            a.output.display(),
            started.elapsed().as_secs_f64(),
        );
    }
    Ok(0)
}

pub fn keyframe(a: &KeyframeArgs) -> CliResult<u8> {
    let zone = Zone::new(a.tz.as_deref())?;
    if a.json && a.output.as_os_str() == "-" {
        return Err(CliError::usage(
            "--json and --output - both want stdout",
            "write the keyframe to a file",
        ));
    }
    let at = parse_at("--at", &a.at, &zone)?;
    let rt = open_handle(&a.target, Access::Read)?;
    let rec = Recording::open(&rt, &a.path)?;
    let p = rec.start_at("--at", &a.at, at, &zone)?;
    let held = rec.hold(&rt, p.chunk..=p.chunk)?;
    let (head, container) = head_before(&rt, &rec, p)?;
    let chunk = &rec.chunks[p.chunk];
    let e = *rec.entry(p);
    // A transport stream's keyframe is its own packets. An MP4's is its sample
    // alone, in a fragment of its own after an init segment of the video track
    // (`media::TrickMp4`): one picture at its time in the source, from a fragmented
    // or a plain MP4 alike.
    let (head, end) = match container {
        Container::Mp4 => {
            let moov = crate::seek::mp4_head(&rt, chunk.ino, chunk.size, &chunk.path)?;
            let mut mp4 = TrickMp4::new(&moov).map_err(|why| {
                CliError::new(format!(
                    "{}: cannot take a keyframe alone: {why}",
                    chunk.path
                ))
            })?;
            let at = e.offset + u64::from(e.data_delta);
            let mut sample = Vec::with_capacity(e.len as usize);
            read_range(
                &rt,
                chunk.ino,
                &chunk.path,
                at,
                at + u64::from(e.len),
                &mut |b| {
                    sample.extend_from_slice(b);
                    Ok(())
                },
            )?;
            let shown_90k = rec.interval_ns * 9 / 100_000;
            let mut file = mp4.init_segment().to_vec();
            file.extend(mp4.keyframe(&sample, e.pts_90k, shown_90k));
            (file, None)
        }
        _ => (
            head,
            Some(e.offset + u64::from(e.data_delta) + u64::from(e.len)),
        ),
    };
    crate::interrupt::catch();
    let mut sink = Sink::create(&a.output, a.force)?;
    let copied = sink.write(&head).and_then(|()| match end {
        Some(end) => copy_range(&rt, chunk.ino, &chunk.path, e.offset, end, &mut sink).map(drop),
        None => Ok(()),
    });
    if let Err(err) = copied {
        sink.abandon();
        return Err(err);
    }
    let (bytes, sha) = sink.finish()?;
    held.release()?;
    rt.close()?;
    if a.json {
        print_json(&json!({
            "output": a.output.display().to_string(),
            "bytes": bytes,
            "sha256": sha,
            "chunk": chunk.path,
            "frame": e.number,
            "offset": e.offset,
            "utc": rfc3339(e.utc_ns),
        }));
    } else {
        eprintln!(
            "keyframe: frame {} of {} at {} ({} bytes) to {}",
            e.number,
            chunk.path,
            zone.show(e.utc_ns),
            bytes,
            a.output.display()
        );
    }
    Ok(0)
}

/// A stretch of a recording with frames in it.
#[derive(Debug, PartialEq)]
struct Span {
    from: i64,
    to: i64,
    chunks: usize,
    keyframes: usize,
    bytes: u64,
}

/// A stretch without frames, and why.
#[derive(Debug, PartialEq)]
struct Gap {
    from: i64,
    to: i64,
    cause: String,
}

/// A gap is this much longer than the keyframe interval: between two keyframes of
/// a chunk, or from a chunk's (estimated) end to the next chunk's first keyframe.
const GAP_SLACK_NS: i64 = 1_000_000_000;

/// The spans and gaps of `rec`, and the chunks without an index (they have no
/// times; the timeline names them).
fn spans_and_gaps(rec: &Recording) -> (Vec<Span>, Vec<Gap>, Vec<usize>) {
    let (mut spans, mut gaps, mut unindexed) = (vec![], vec![], vec![]);
    let mut cur: Option<Span> = None;
    let mut prev_chunk: Option<usize> = None;
    for (c, chunk) in rec.chunks.iter().enumerate() {
        if chunk.keyframes.is_empty() {
            unindexed.push(c);
            continue;
        }
        let interval = match chunk.keyframes.len() {
            0 | 1 => rec.interval_ns,
            _ => chunk.keyframe_interval_ns(),
        };
        let first = chunk.keyframes[0].utc_ns;
        if let (Some(span), Some(p)) = (cur.as_mut(), prev_chunk) {
            if first - span.to > GAP_SLACK_NS {
                let name = |i: usize| {
                    rec.chunks[i]
                        .path
                        .rsplit('/')
                        .next()
                        .unwrap_or("")
                        .to_string()
                };
                let cause = match jump_cause(chunk.keyframes[0].flags) {
                    Some(why) => format!("{why} at the start of {}", chunk.path),
                    None => format!("no recording between {} and {}", name(p), name(c)),
                };
                gaps.push(Gap {
                    from: span.to,
                    to: first,
                    cause,
                });
                spans.push(cur.take().expect("a span"));
            }
        }
        let span = cur.get_or_insert(Span {
            from: first,
            to: first,
            chunks: 0,
            keyframes: 0,
            bytes: 0,
        });
        span.chunks += 1;
        span.bytes += chunk.size;
        for w in chunk.keyframes.windows(2) {
            let (a, b) = (&w[0], &w[1]);
            if b.utc_ns - a.utc_ns > interval + GAP_SLACK_NS {
                let cause = jump_cause(b.flags).unwrap_or("no frames");
                let span = cur.as_mut().expect("a span");
                span.keyframes += 1;
                span.to = a.utc_ns.saturating_add(interval);
                gaps.push(Gap {
                    from: span.to,
                    to: b.utc_ns,
                    cause: format!("{cause} in {} after frame {}", chunk.path, a.number),
                });
                spans.push(
                    cur.replace(Span {
                        from: b.utc_ns,
                        to: b.utc_ns,
                        chunks: 1,
                        keyframes: 0,
                        bytes: 0,
                    })
                    .expect("a span"),
                );
            } else {
                cur.as_mut().expect("a span").keyframes += 1;
            }
        }
        let span = cur.as_mut().expect("a span");
        span.keyframes += 1;
        span.to = chunk.end_utc(rec.interval_ns).expect("an indexed chunk");
        prev_chunk = Some(c);
    }
    spans.extend(cur);
    (spans, gaps, unindexed)
}

/// Why a keyframe's time jumped, by its index flags (`None`: nothing says).
fn jump_cause(flags: u32) -> Option<&'static str> {
    if flags & FLAG_CLOCK_STEP != 0 {
        Some("the clock was re-anchored (the host clock stepped or the source drifted: `dvrfs events` says which)")
    } else if flags & FLAG_DISCONTINUITY != 0 {
        Some("the stream's time jumped")
    } else {
        None
    }
}

fn seconds(ns: i64) -> String {
    let s = ns / 1_000_000_000;
    match s {
        s if s >= 3600 => format!("{}h{:02}m{:02}s", s / 3600, s / 60 % 60, s % 60),
        s if s >= 60 => format!("{}m{:02}s", s / 60, s % 60),
        _ => format!("{:.1}s", ns as f64 / 1e9),
    }
}

pub fn timeline(a: &TimelineArgs) -> CliResult<u8> {
    let zone = Zone::new(a.tz.as_deref())?;
    let rt = open_handle(&a.target, Access::Read)?;
    let t0 = std::time::Instant::now();
    let rec = Recording::open(&rt, &a.path)?;
    let (spans, gaps, unindexed) = spans_and_gaps(&rec);
    let took = t0.elapsed();
    rt.close()?;

    let incomplete: Vec<&str> = rec
        .chunks
        .iter()
        .filter(|c| !c.complete)
        .map(|c| c.path.as_str())
        .collect();
    if a.json {
        print_json(&json!({
            "path": rec.path,
            "chunks": rec.chunks.len(),
            "keyframes": rec.keyframe_count(),
            "bytes": rec.chunks.iter().map(|c| c.size).sum::<u64>(),
            "spans": spans.iter().map(|s| json!({
                "from": rfc3339(s.from), "to": rfc3339(s.to),
                "seconds": (s.to - s.from) as f64 / 1e9,
                "chunks": s.chunks, "keyframes": s.keyframes, "bytes": s.bytes,
            })).collect::<Vec<_>>(),
            "gaps": gaps.iter().map(|g| json!({
                "from": rfc3339(g.from), "to": rfc3339(g.to),
                "seconds": (g.to - g.from) as f64 / 1e9, "cause": g.cause,
            })).collect::<Vec<_>>(),
            "unindexed": unindexed.iter().map(|&c| json!({
                "path": rec.chunks[c].path,
                "name_utc": rec.chunks[c].name_utc.map(rfc3339),
                "bytes": rec.chunks[c].size,
            })).collect::<Vec<_>>(),
            "incomplete": incomplete,
            "took_ms": took.as_secs_f64() * 1e3,
        }));
        return Ok(0);
    }
    outln!(
        "{}: {} chunk{}, {} keyframes, {}; {} span{}, {} gap{} (times in {}; a span ends one keyframe interval after its last keyframe)",
        rec.path,
        rec.chunks.len(),
        if rec.chunks.len() == 1 { "" } else { "s" },
        rec.keyframe_count(),
        human_bytes(rec.chunks.iter().map(|c| c.size).sum()),
        spans.len(),
        if spans.len() == 1 { "" } else { "s" },
        gaps.len(),
        if gaps.len() == 1 { "" } else { "s" },
        zone.name()
    );
    // Spans and gaps alternate in time.
    let mut gi = gaps.iter().peekable();
    for s in &spans {
        while let Some(g) = gi.next_if(|g| g.to <= s.from) {
            outln!(
                "  gap   {} to {}  {:>9}  {}",
                zone.show(g.from),
                zone.show(g.to),
                seconds(g.to - g.from),
                g.cause
            );
        }
        outln!(
            "  span  {} to {}  {:>9}  {} chunk{}, {} keyframes, {}",
            zone.show(s.from),
            zone.show(s.to),
            seconds(s.to - s.from),
            s.chunks,
            if s.chunks == 1 { "" } else { "s" },
            s.keyframes,
            human_bytes(s.bytes)
        );
    }
    for c in unindexed {
        let ch = &rec.chunks[c];
        outln!(
            "  {}: no frame index ({}): `dvrfs reindex` builds one",
            ch.path,
            human_bytes(ch.size)
        );
    }
    for p in incomplete {
        outln!("  {p}: its index misses keyframes: `dvrfs reindex` builds it again");
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::recording::{name_utc, Chunk};
    use dvrfs_core::format::frame_index::FrameEntry;

    fn chunk(name: &str, keys_s: &[(i64, u32)]) -> Chunk {
        Chunk {
            path: format!("cam/{name}"),
            ino: 2,
            size: 1000,
            complete: true,
            keyframes: keys_s
                .iter()
                .enumerate()
                .map(|(i, &(s, flags))| FrameEntry {
                    offset: 100 + 100 * i as u64,
                    data_delta: 0,
                    len: 10,
                    number: 50 * i as u32,
                    flags,
                    pts_90k: s * 90_000,
                    utc_ns: s * 1_000_000_000,
                })
                .collect(),
            name_utc: name_utc(name),
        }
    }

    #[test]
    fn chunks_back_to_back_are_one_span_and_a_pause_is_a_gap() {
        let rec = Recording::new(
            "cam",
            true,
            vec![
                chunk("a.ts", &[(0, 0), (2, 0), (4, 0)]),
                chunk("b.ts", &[(6, 0), (8, 0)]),
                // Ten seconds with nothing, then a clock step inside a chunk.
                chunk("c.ts", &[(20, 0), (22, 0), (60, FLAG_CLOCK_STEP), (62, 0)]),
                // A step seen as a chunk began.
                chunk("e.ts", &[(100, FLAG_CLOCK_STEP), (102, 0)]),
                Chunk {
                    keyframes: vec![],
                    ..chunk("d.bin", &[])
                },
            ],
        );
        let (spans, gaps, unindexed) = spans_and_gaps(&rec);
        let s = 1_000_000_000;
        assert_eq!(
            spans
                .iter()
                .map(|x| (x.from / s, x.to / s, x.chunks, x.keyframes))
                .collect::<Vec<_>>(),
            vec![
                (0, 10, 2, 5),
                (20, 24, 1, 2),
                (60, 64, 1, 2),
                (100, 104, 1, 2)
            ]
        );
        assert_eq!(
            gaps.iter()
                .map(|g| (g.from / s, g.to / s))
                .collect::<Vec<_>>(),
            vec![(10, 20), (24, 60), (64, 100)]
        );
        assert!(
            gaps[0].cause.contains("no recording between b.ts and c.ts"),
            "{}",
            gaps[0].cause
        );
        assert!(gaps[1].cause.contains("re-anchored"), "{}", gaps[1].cause);
        assert!(
            gaps[2].cause.contains("re-anchored")
                && gaps[2].cause.contains("at the start of cam/e.ts"),
            "{}",
            gaps[2].cause
        );
        assert_eq!(unindexed, vec![4]);
    }

    #[test]
    fn chunks_of_one_keyframe_each_take_the_recordings_interval() {
        let names = ["a.ts", "b.ts", "c.ts", "d.ts", "f.ts"];
        let starts = [0, 2, 4, 6, 20];
        let chunks = names
            .iter()
            .zip(starts)
            .map(|(n, t)| chunk(n, &[(t, 0)]))
            .collect();
        let rec = Recording::new("cam", true, chunks);
        assert_eq!(rec.interval_ns, 2_000_000_000);
        let (spans, gaps, _) = spans_and_gaps(&rec);
        let s = 1_000_000_000;
        assert_eq!(
            spans
                .iter()
                .map(|x| (x.from / s, x.to / s, x.chunks))
                .collect::<Vec<_>>(),
            vec![(0, 8, 4), (20, 22, 1)]
        );
        assert_eq!(gaps.len(), 1);
    }
}
