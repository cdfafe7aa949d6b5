//! `play`: one file, or a stream directory's chunks as one recording, under one read
//! stream reservation.
//!
//! - **Where it starts.** At byte 0 of the first chunk, or `--from` a time or frame:
//!   the last keyframe at or before it, found through the frame index across the
//!   chunks (`seek.rs`), the chunk's PAT and PMT (or init segment) written first.
//! - **Across chunks** (`Op::StreamQueue`, `engine/stream/playback.rs`). The stream
//!   is opened on the chunk it starts in; each later chunk is queued from its first
//!   keyframe (its head left out: the output's head came once, and a fragmented
//!   MP4's second init segment would break it), a few buffers ahead of what has been
//!   played, so the engine's prefetch goes on from chunk to chunk under the same
//!   admission and buffer: no re-admission, no start-up and no stall at a boundary.
//!   It plays the chunks there when it starts, up to the end of the last one as it
//!   is recorded then.
//! - **Trick play** (`--speed` other than 1 on an indexed recording) is
//!   `trick_play.rs`, across chunks the same way; without an index `--speed N` reads
//!   every byte N times faster.
//!
//! It prints what it reserved and how the stream fared, as `record` does
//! (`cmd_stream.rs`); a late request or a stall makes it exit with status 1.

use std::io::{self, Write};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use clap::Args;
use dvrfs_core::engine::{StreamDir, StreamInfo};
use dvrfs_core::format::dir::Kind;
use dvrfs_core::media::Container;
use dvrfs_core::meta::Ino;
use dvrfs_core::{Error as CoreError, IoBuf, Op, Output};
use dvrfs_remote::Handle;

use crate::cmd_stream::{
    admission_name, close_stream, open, open_stream, report, status_line, Ran, Setup, StreamArgs,
};
use crate::error::{local_io, CliError, CliResult};
use crate::output::progress;
use crate::recording::Recording;
use crate::target::Access;

/// The fastest `play --speed`: 64 times the rate (a fast forward).
pub const MAX_PLAY_SPEED: i32 = 64;
/// Owner id of the playback's own operations.
const OWNER: u32 = 0;
/// Bytes of chunks queued ahead of what has been played, in stream buffers: enough
/// that the prefetch (one buffer ahead) never reaches the end of the queued chunks.
const QUEUE_AHEAD_BUFFERS: u64 = 3;

#[derive(Args, Debug)]
pub struct PlayArgs {
    pub target: PathBuf,
    /// The file to play, or a stream directory (its chunks in name order, as one
    /// recording)
    pub path: String,
    /// Where the bytes go: a local file or `-` (stdout)
    #[arg(long, default_value = "-")]
    pub output: PathBuf,
    /// Overwrite an existing local --output file (without it, play refuses, as get does)
    #[arg(long)]
    pub force: bool,
    /// Start at the last keyframe at or before this point, found through the frame
    /// index (across a stream's chunks): an RFC 3339 time, a local time in --tz,
    /// +DURATION after the first frame (90s alone means the same), -DURATION before
    /// the end, or frame:N (one file's frames). The output starts with the stream's
    /// PAT and PMT (or MP4 init segment). A file without an index takes only a
    /// duration: that far in at the rate
    #[arg(long, allow_hyphen_values = true)]
    pub from: Option<String>,
    /// Zone of a local --from time (an IANA name) [default: the host's]
    #[arg(long)]
    pub tz: Option<String>,
    /// Trick play of a recording with a frame index (an MPEG-TS): 2 to 32 fast
    /// forward, -2 to -32 rewind, reading only the keyframes shown, with a
    /// reservation of their own. Without an index: 2 to 64 reads every byte that
    /// much faster
    #[arg(long, default_value_t = 1, allow_hyphen_values = true)]
    pub speed: i32,
    /// Follow the recording as it goes on (watching live): at the end of what is
    /// there, wait for the recording's next bytes and the chunks it makes after
    /// (each from its first keyframe); ends when the recording has ended and nothing
    /// new has come for 5 s. A reader that catches up with live falls back one
    /// buffer's slack behind it
    #[arg(long)]
    pub follow: bool,
    #[command(flatten)]
    pub stream: StreamArgs,
}

/// How often `--follow` looks for new bytes and chunks at the end.
const FOLLOW_POLL: Duration = Duration::from_millis(100);
/// `--follow` ends once nothing new has come for this long.
const FOLLOW_IDLE: Duration = Duration::from_secs(5);

/// A chunk the playback goes through: its file, its first byte played and its size.
struct Part {
    ino: Ino,
    from: u64,
    size: u64,
    /// A chunk's name in its stream directory: checked before and after it is queued,
    /// so a chunk retention deleted meanwhile (a time-shift ring) is an overrun,
    /// never another file's bytes under its inode number.
    name: Option<Vec<u8>>,
}

impl Part {
    fn bytes(&self) -> u64 {
        self.size.saturating_sub(self.from)
    }
}

pub fn play(a: &PlayArgs) -> CliResult<u8> {
    // The flag checked before anything is opened: the range any file takes.
    if a.speed < 0 {
        crate::args::trick_speed(a.speed)?;
    } else {
        crate::args::check_range("--speed", a.speed, 1..=MAX_PLAY_SPEED)?;
    }
    let Setup { rt, mut spec } = open(&a.target, Access::Read, &a.stream, StreamDir::Read)?;
    let rec = Recording::open(&rt, &a.path)?;
    let zone = crate::timespec::Zone::new(a.tz.as_deref())?;
    let indexed = rec.first().is_some();
    let sink = |buffered: bool| -> CliResult<Box<dyn Write>> {
        Ok(match a.output.as_os_str() == "-" {
            true if buffered => Box::new(io::BufWriter::new(io::stdout().lock())),
            true => Box::new(io::stdout().lock()),
            false => Box::new(crate::cmd_data::create_local(&a.output, a.force)?),
        })
    };
    let rate_bytes = spec.rate_bps / 8.0;
    if a.speed != 1 && indexed {
        crate::args::trick_speed(a.speed)?;
        // Trick play: from the keyframe --from names, else the first (the last
        // when rewinding).
        let start = match &a.from {
            None if a.speed < 0 => rec.last().expect("indexed"),
            None => rec.first().expect("indexed"),
            Some(f) => {
                let s = crate::seek::start_of(&rt, &rec, f, &zone, rate_bytes)?;
                s.keyframe
                    .expect("an indexed recording starts at a keyframe")
                    .1
            }
        };
        let mut out = sink(true)?;
        crate::interrupt::catch();
        let r = crate::trick_play::trick_play(
            &rt,
            &rec,
            start,
            a.speed,
            spec,
            &mut *out,
            a.stream.json,
        );
        drop(out);
        rt.close()?;
        return r;
    }
    if a.speed < 0 {
        return Err(CliError::usage(
            format!(
                "--speed {}: rewinding needs {}'s frame index",
                a.speed, a.path
            ),
            format!("build it with `dvrfs reindex TARGET {}`", a.path),
        ));
    }
    let mut head = vec![];
    let mut first = Part {
        ino: rec.chunks[0].ino,
        from: 0,
        size: rec.chunks[0].size,
        name: None,
    };
    let mut first_chunk = 0;
    let mut first_key = rec.first();
    if let Some(f) = &a.from {
        let start = crate::seek::start_of(&rt, &rec, f, &zone, rate_bytes)?;
        let chunk = &rec.chunks[start.chunk];
        if let Some((k, _)) = start.keyframe {
            let what = match rec.dir {
                true => format!(" of {}", chunk.path),
                false => String::new(),
            };
            eprintln!(
                "play: from keyframe {}{what} at byte {} ({})",
                k.number,
                k.offset,
                zone.show(k.utc_ns)
            );
        }
        first = Part {
            ino: chunk.ino,
            from: start.offset,
            size: chunk.size,
            name: None,
        };
        first_chunk = start.chunk;
        first_key = start.keyframe.map(|k| k.1);
        head = start.head;
    }
    // The later chunks, each from its first keyframe (its head left out).
    let mut rest: Vec<Part> = rec.chunks[first_chunk + 1..]
        .iter()
        .map(|c| Part {
            ino: c.ino,
            from: c.data_start(),
            size: c.size,
            name: rec
                .dir
                .then(|| c.path.rsplit('/').next().unwrap_or("").as_bytes().to_vec()),
        })
        .collect();
    // A plain MP4 from a keyframe, or its later chunks, go out remuxed.
    let mut plain = None;
    if let Some(start) = first_key.filter(|_| a.from.is_some() || rec.chunks.len() > 1) {
        let chunk = &rec.chunks[start.chunk];
        let mp4 = crate::seek::head_of(&rt, chunk.ino, 0)?.container == Container::Mp4;
        if let Some(pieces) = mp4
            .then(|| crate::plain_mp4::pieces(&rt, &rec, start, None))
            .transpose()?
            .flatten()
        {
            if a.follow {
                return Err(CliError::usage(
                    format!("--follow of {}: a plain MP4 plays only once it is finished (its moov comes last)", a.path),
                    "record fragmented MP4 or MPEG-TS to watch it live",
                ));
            }
            let part = |p: &crate::plain_mp4::Piece| Part {
                ino: rec.chunks[p.chunk].ino,
                from: p.start,
                size: rec.chunks[p.chunk].size,
                name: None,
            };
            first = pieces.first().map_or(first, part);
            rest = pieces.iter().skip(1).map(part).collect();
            head = pieces
                .first()
                .map_or_else(Vec::new, |p| p.remux.init_segment().to_vec());
            plain = Some(crate::plain_mp4::Feed::new(&rec, pieces));
        }
    }
    let total = first.bytes() + rest.iter().map(Part::bytes).sum::<u64>();
    spec.start_bytes = first.from;
    spec.rate_bps *= a.speed as f64;
    let mut out = sink(false)?;
    let info = open_stream(&rt, first.ino, spec)?;
    if a.follow {
        rt.run(Op::StreamFollow { stream: info.id }, None, OWNER)?;
    }
    let admission = admission_name(&rt)?;
    let started = Instant::now();
    let pb = progress(total, true, "play");
    let mut moved = 0u64;
    let mut last = Instant::now();
    let dir = match rec.dir {
        true => Some(rt.resolve(&rec.path)?),
        false => None,
    };
    let mut queue = Queue {
        rest,
        next: 0,
        queued_end: first.bytes(),
        dir,
        overruns: 0,
    };
    let mut follow = Follow {
        dir,
        last_name: rec
            .chunks
            .last()
            .map(|c| c.path.rsplit('/').next().unwrap_or("").to_string()),
        last: (
            rec.chunks[rec.chunks.len() - 1].ino,
            rec.chunks[rec.chunks.len() - 1].size,
        ),
        changed: Instant::now(),
    };
    let result = (|| -> CliResult<()> {
        out.write_all(&head)
            .map_err(|e| local_io(&a.output, "error writing", e))?;
        let mut buf = IoBuf::zeroed(info.request_bytes as usize);
        loop {
            queue.top_up(&rt, &info, moved)?;
            let r = rt.run(
                Op::StreamRead {
                    stream: info.id,
                    buf,
                },
                None,
                OWNER,
            )?;
            let Output::Read { buf: b, bytes } = r else {
                unreachable!("a stream read returns bytes")
            };
            if bytes == 0 {
                if !a.follow {
                    break;
                }
                buf = b;
                match follow.step(&rt, &mut queue)? {
                    true => continue,
                    false if follow.changed.elapsed() >= FOLLOW_IDLE => break,
                    false => {
                        std::thread::sleep(FOLLOW_POLL);
                        crate::interrupt::check("play")?;
                        continue;
                    }
                }
            }
            // The idle time `--follow` ends at counts from the last byte that came.
            follow.changed = Instant::now();
            let data = &b.bytes().expect("real memory")[..bytes];
            let remuxed;
            let data = match plain.as_mut() {
                Some(p) => {
                    remuxed = p.feed(data)?;
                    &remuxed[..]
                }
                None => data,
            };
            out.write_all(data)
                .map_err(|e| local_io(&a.output, "error writing", e))?;
            moved += bytes as u64;
            pb.set_position(moved);
            buf = b;
            if last.elapsed() >= Duration::from_secs(1) {
                last = Instant::now();
                if let Some((_, st)) = rt.stream(info.id)? {
                    pb.set_message(status_line("play", moved, started, &st, ""));
                }
            }
        }
        if let Some(p) = &plain {
            p.finish()?;
        }
        out.flush()
            .map_err(|e| local_io(&a.output, "error writing", e))
    })();
    let closed = close_stream(&rt, info.id);
    pb.finish_and_clear();
    let elapsed = started.elapsed();
    rt.close()?;
    result?;
    let stats = closed?;
    let ran = Ran {
        what: "play",
        path: &a.path,
        chunks: rec.dir.then_some(1 + queue.next as u64),
        admission: &admission,
        json: a.stream.json,
        interrupted: None,
        overruns: rec.dir.then_some(queue.overruns),
    };
    report(ran, &info, &stats, moved, elapsed)
}

/// `--follow` at the end of what is there: the recording's directory (None: one
/// file), its last chunk's name, the last file and its size as last seen, and when
/// something new last came (a byte read, a chunk found, the last file grown).
struct Follow {
    dir: Option<Ino>,
    last_name: Option<String>,
    last: (Ino, u64),
    changed: Instant,
}

impl Follow {
    /// Looks for what came since: the last file grown, new chunks with a keyframe
    /// (queued). Whether anything did.
    fn step(&mut self, rt: &Handle, queue: &mut Queue) -> CliResult<bool> {
        let mut new = false;
        if let Some(dir) = self.dir {
            let mut names: Vec<(String, Ino)> = rt
                .readdir(dir)?
                .into_iter()
                .filter(|(n, _, k)| *k == Kind::File && !n.starts_with(b"."))
                .map(|(n, i, _)| (String::from_utf8_lossy(&n).into_owned(), i))
                .filter(|(n, _)| self.last_name.as_ref().is_none_or(|l| n > l))
                .collect();
            names.sort();
            if let (Some(last), Some((next, _))) = (&self.last_name, names.first()) {
                self.deleted_between(rt, dir, last, next, queue)?;
            }
            for (name, ino) in names {
                // Queued from its first keyframe, once it has one (its head left out).
                let Some(k) = rt.keyframes(ino)?.entries.first().copied() else {
                    break;
                };
                let size = rt.stat(ino)?.size_bytes;
                queue.rest.push(Part {
                    ino,
                    from: k.offset,
                    size,
                    name: Some(name.as_bytes().to_vec()),
                });
                self.last_name = Some(name);
                self.last = (ino, size);
                new = true;
            }
        }
        let size = rt.stat(self.last.0)?.size_bytes;
        if size > self.last.1 {
            // (`queued_end` not moved on: counting short only queues the next sooner.)
            self.last.1 = size;
            new = true;
        }
        if new {
            self.changed = Instant::now();
        }
        Ok(new)
    }

    /// Chunks recorded after the last one listed and deleted before the next one
    /// was (the playback fell behind a time-shift ring while it could not list:
    /// its output was not being read): the stream directory's chain names them
    /// (`deleted` lines). An overrun, said as such: the playback goes on at `next`.
    fn deleted_between(
        &self,
        rt: &Handle,
        dir: Ino,
        last: &str,
        next: &str,
        queue: &mut Queue,
    ) -> CliResult<()> {
        let Some((_, chain)) = dvrfs_core::chain::read(&mut crate::chain::Via(rt), dir)? else {
            return Ok(());
        };
        let gone: Vec<&str> = chain
            .records
            .iter()
            .filter_map(|r| match r {
                dvrfs_core::chain::Record::Deleted { name, .. } => Some(name.as_str()),
                _ => None,
            })
            .filter(|n| *n > last && *n < next)
            .collect();
        if let Some(first) = gone.first() {
            queue.overruns += 1;
            eprintln!(
                "play: overrun: {} chunk(s) from {first} were deleted before they were played (the playback fell behind what retention keeps); going on at {next}, the oldest left, from its first keyframe",
                gone.len()
            );
        }
        Ok(())
    }
}

/// The chunks still to queue on the playback, and how far the queued ones reach.
struct Queue {
    rest: Vec<Part>,
    next: usize,
    /// Bytes of the playback up to the end of the last chunk queued.
    queued_end: u64,
    /// The stream directory (None: one file).
    dir: Option<Ino>,
    /// Times the playback fell behind what retention keeps (a time-shift ring) and
    /// went on at the oldest chunk left.
    overruns: u64,
}

impl Queue {
    /// Queues chunks until they reach [`QUEUE_AHEAD_BUFFERS`] buffers past `played`
    /// (the engine holds at most so many files at once: one it refuses is queued
    /// at a later call).
    fn top_up(&mut self, rt: &Handle, info: &StreamInfo, played: u64) -> CliResult<()> {
        let ahead = QUEUE_AHEAD_BUFFERS * (info.buffer_bytes + info.request_bytes);
        while self.next < self.rest.len() && self.queued_end < played + ahead {
            if !self.there(rt, self.next) {
                self.overrun(rt);
                continue;
            }
            let p = &self.rest[self.next];
            let op = Op::StreamQueue {
                stream: info.id,
                ino: p.ino,
                from: p.from,
            };
            match rt.run(op, None, OWNER) {
                Ok(_) => {}
                Err(dvrfs_runtime::RuntimeError::Engine(CoreError::Refused(_))) => return Ok(()),
                // Deleted between the check and the queueing.
                Err(dvrfs_runtime::RuntimeError::Engine(CoreError::NotFound(_))) => {
                    self.overrun(rt);
                    continue;
                }
                Err(e) => return Err(e.into()),
            }
            // Queued, the chunk is the playback's and stays; were its name gone now,
            // its inode number could have been another file's by the time it was
            // queued: stop rather than play it.
            if !self.there(rt, self.next) {
                return Err(CliError::new(format!(
                    "a chunk of {} was deleted while it was being queued, and its inode number may be another file's: the playback stopped rather than play it",
                    self.rest[self.next].name.as_deref().map(String::from_utf8_lossy).unwrap_or_default()
                ))
                .hint("play again from the oldest chunk: the time-shift ring moved past this one"));
            }
            self.queued_end += self.rest[self.next].bytes();
            self.next += 1;
        }
        Ok(())
    }

    /// Whether part `i` is still its chunk (its name names its inode).
    fn there(&self, rt: &Handle, i: usize) -> bool {
        let p = &self.rest[i];
        match (self.dir, &p.name) {
            (Some(dir), Some(name)) => rt.lookup(dir, name).ok() == Some(p.ino),
            _ => true,
        }
    }

    /// The next chunk was deleted before it was played (the playback fell behind a
    /// time-shift ring): the playback goes on at the oldest chunk still there, from
    /// its first keyframe, and says so.
    fn overrun(&mut self, rt: &Handle) {
        let from = self.next;
        while self.next < self.rest.len() && !self.there(rt, self.next) {
            self.next += 1;
        }
        self.overruns += 1;
        let name = |i: usize| {
            self.rest
                .get(i)
                .and_then(|p| p.name.as_deref())
                .map(|n| String::from_utf8_lossy(n).into_owned())
        };
        eprintln!(
            "play: overrun: {} chunk(s) from {} were deleted before they were played (the playback fell behind what retention keeps); going on at {}",
            self.next - from,
            name(from).unwrap_or_default(),
            name(self.next).map_or("the next chunk recorded".to_string(), |n| format!("{n}, the oldest left, from its first keyframe"))
        );
    }
}
