//! `play --speed N` on an indexed transport stream, one file or a stream
//! directory's chunks: trick play (N = 2 to 32 fast forward, -2 to -32 rewind). It
//! reads exactly the byte ranges of the keyframes it shows, found through the frame
//! index, never the bytes between them, and writes them as a stream of their own
//! (`media::TrickTs`: video only, PTS and PCR set to when each is shown, so a player
//! shows smooth fast motion).
//!
//! **Which keyframes.** Walking the index from the start (`--from`, else the first
//! keyframe, or the last when rewinding), across chunks as one run, a keyframe is
//! shown at its media distance from the start over |N|; one that would come less
//! than 1/[`MAX_KEYFRAMES_PER_S`] of a second after the last shown is skipped, as
//! players do at high speeds. The media distance is the sum of the PTS steps between
//! consecutive keyframes; a step that is not forward by at most [`MAX_STEP_S`] (a
//! discontinuity, a source restarted in the next chunk) counts as the recording's
//! keyframe interval, so a gap in a recording never freezes the picture.
//!
//! **The head.** The first chunk's PAT and PMT give the output's tables; a stream
//! directory's chunks are one source's (`record --chunk`, a segment muxer), so the
//! same video PID is taken from every chunk.
//!
//! **The reservation.** A keyframe read is a positioning and a short transfer, not
//! a rate: the player holds an idle read stream (admitted, never prefetching) whose
//! requests are the shown keyframes' mean size, rounded up to whole sectors, at the
//! rate they are shown, so admission counts a positioning per keyframe. The reads
//! themselves are deadline requests, each due when its keyframe is shown, a few in
//! flight ahead; a read that completes after its deadline counts as late.

use std::collections::VecDeque;
use std::io::Write;
use std::time::{Duration, Instant};

use dvrfs_core::engine::StreamSpec;
use dvrfs_core::format::frame_index::FrameEntry;
use dvrfs_core::media::{Container, TrickMp4, TrickTs, TICKS_PER_SECOND};
use dvrfs_core::{IoBuf, Op, Output};
use dvrfs_remote::Handle;
use serde_json::json;

use crate::error::{CliError, CliResult};
use crate::output::print_json;
use crate::recording::{Pos, Recording};

/// The most keyframes shown per second of output (the simulator's `t` readers
/// use the same bound).
pub const MAX_KEYFRAMES_PER_S: f64 = 8.0;
/// Reads in flight ahead of the one shown.
const READS_AHEAD: usize = 4;
/// Time from the start to the first keyframe shown: the first reads' deadline.
const STARTUP: Duration = Duration::from_millis(500);
/// The first shown keyframe's PTS in the output (1 s).
const BASE_90K: i64 = TICKS_PER_SECOND;
const OWNER: u32 = 0;
/// The longest PTS step between two keyframes taken as it is (module docs).
pub const MAX_STEP_S: i64 = 10;

/// A keyframe to show, and when (seconds of output from the first).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Shown {
    pub key: usize,
    pub at_s: f64,
}

/// Each keyframe's place on the recording's media time line, in 90 kHz ticks from
/// the first: the PTS steps between consecutive keyframes, a step that is not
/// forward by at most [`MAX_STEP_S`] counted as `interval_ns` (module docs).
pub fn media_times(keys: &[&FrameEntry], interval_ns: i64) -> Vec<i64> {
    let fallback = interval_ns.max(0) * TICKS_PER_SECOND / 1_000_000_000;
    let mut t = 0i64;
    let mut out = Vec::with_capacity(keys.len());
    for (i, k) in keys.iter().enumerate() {
        if i > 0 {
            let step = k.pts_90k - keys[i - 1].pts_90k;
            t += match step {
                s if s > 0 && s <= MAX_STEP_S * TICKS_PER_SECOND => s,
                _ => fallback,
            };
        }
        out.push(t);
    }
    out
}

/// The keyframes at media times `times` shown at `speed` from keyframe `start`
/// (module docs).
pub fn plan(times: &[i64], start: usize, speed: i32) -> Vec<Shown> {
    let speed_abs = f64::from(speed.unsigned_abs());
    let t0 = times[start];
    let order: Box<dyn Iterator<Item = usize>> = if speed < 0 {
        Box::new((0..=start).rev())
    } else {
        Box::new(start..times.len())
    };
    let mut out: Vec<Shown> = vec![];
    for k in order {
        let at_s = (times[k] - t0).abs() as f64 / TICKS_PER_SECOND as f64 / speed_abs;
        if out
            .last()
            .is_none_or(|l| at_s - l.at_s >= 1.0 / MAX_KEYFRAMES_PER_S - 1e-9)
        {
            out.push(Shown { key: k, at_s });
        }
    }
    out
}

/// What the keyframes go out as.
enum Trick {
    Ts(TrickTs),
    Mp4(TrickMp4),
}

impl Trick {
    /// For recording `rec`, whose first keyframe is at `first`: from its first
    /// chunk's head (the same source's chunks share their tables or init segment).
    fn new(rt: &Handle, rec: &Recording, first: Pos) -> CliResult<Trick> {
        let chunk = &rec.chunks[first.chunk];
        let head = crate::seek::head_of(rt, chunk.ino, rec.entry(first).offset)?;
        let cannot = |why: String| {
            CliError::new(format!(
                "{}: cannot play keyframes alone: {why}",
                chunk.path
            ))
        };
        match head.container {
            Container::Ts => Ok(Trick::Ts(TrickTs::new(&head.bytes).map_err(cannot)?)),
            Container::Mp4 => {
                let head = crate::seek::mp4_head(rt, chunk.ino, chunk.size, &chunk.path)?;
                Ok(Trick::Mp4(TrickMp4::new(&head).map_err(cannot)?))
            }
            _ => Err(cannot("it is neither MPEG-TS nor MP4".into())),
        }
    }

    /// What goes out before the first keyframe.
    fn head(&self) -> Vec<u8> {
        match self {
            Trick::Ts(_) => vec![], // each keyframe carries its PAT and PMT
            Trick::Mp4(m) => m.init_segment().to_vec(),
        }
    }

    /// A keyframe's bytes as read, shown at `pts` for `duration` (90 kHz).
    fn keyframe(&mut self, bytes: &[u8], pts: i64, duration: i64) -> Vec<u8> {
        match self {
            Trick::Ts(t) => t.keyframe(bytes, pts),
            Trick::Mp4(m) => m.keyframe(bytes, pts, duration),
        }
    }
}

/// Plays recording `rec` at `speed` from keyframe `start` into `sink`; `spec` is
/// the playback's (its rate unused: the reservation is the keyframes').
pub fn trick_play(
    rt: &Handle,
    rec: &Recording,
    start: Pos,
    speed: i32,
    mut spec: StreamSpec,
    sink: &mut dyn Write,
    json_out: bool,
) -> CliResult<u8> {
    let path = rec.path.as_str();
    // Every keyframe of the recording, in order, with its chunk.
    let keys: Vec<(Pos, &FrameEntry)> = rec
        .chunks
        .iter()
        .enumerate()
        .flat_map(|(chunk, c)| {
            c.keyframes
                .iter()
                .enumerate()
                .map(move |(key, e)| (Pos { chunk, key }, e))
        })
        .collect();
    let first = rec.first().expect("trick play has an index");
    let mut out = Trick::new(rt, rec, first)?;
    let samples_alone = matches!(out, Trick::Mp4(_));
    let entries: Vec<&FrameEntry> = keys.iter().map(|k| k.1).collect();
    let times = media_times(&entries, rec.interval_ns);
    let start = keys
        .iter()
        .position(|k| k.0 == start)
        .expect("the start is a keyframe of the recording");
    let shown = plan(&times, start, speed);
    let span = |k: usize| {
        let (p, e) = keys[k];
        let chunk = &rec.chunks[p.chunk];
        let (from, to) = match samples_alone {
            // The keyframe's packets, from the one that starts its PES.
            false => (
                e.offset,
                e.offset + u64::from(e.data_delta) + u64::from(e.len),
            ),
            // An MP4 sample alone: the output's fragment is made around it.
            true => {
                let at = e.offset + u64::from(e.data_delta);
                (at, at + u64::from(e.len))
            }
        };
        (chunk.ino, from.min(chunk.size), to.min(chunk.size))
    };
    let bytes: u64 = shown
        .iter()
        .map(|s| span(s.key))
        .map(|(_, from, to)| to - from)
        .sum();
    let duration_s = shown
        .last()
        .map_or(0.0, |s| s.at_s)
        .max(1.0 / MAX_KEYFRAMES_PER_S);
    let mean = (bytes / shown.len().max(1) as u64).max(1);
    spec.request_bytes = mean.div_ceil(4096) * 4096;
    spec.rate_bps = spec.request_bytes as f64 * 8.0 * shown.len() as f64 / duration_s;
    spec.idle = true;
    spec.buffer_bytes = None;
    let info = super::cmd_stream::open_stream(rt, rec.chunks[first.chunk].ino, spec)?;
    let started = Instant::now() + STARTUP;
    let due = |s: &Shown| started + Duration::from_secs_f64(s.at_s);
    let mut in_flight: VecDeque<(dvrfs_runtime::Ticket, usize)> = VecDeque::new();
    let (mut next, mut late, mut read) = (0usize, 0usize, 0u64);
    let result = (|| -> CliResult<()> {
        for (i, s) in shown.iter().enumerate() {
            while next < shown.len() && next < i + READS_AHEAD {
                let (ino, from, to) = span(shown[next].key);
                let op = Op::Read {
                    ino,
                    offset: from,
                    buf: IoBuf::zeroed((to - from) as usize),
                };
                in_flight.push_back((rt.start(op, Some(due(&shown[next])), OWNER)?, next));
                next += 1;
            }
            let (t, n) = in_flight.pop_front().expect("the read of keyframe i");
            debug_assert_eq!(n, i);
            let done = rt.check(t, true)?;
            let (_, from, to) = span(s.key);
            let Some(d) = done else {
                return Err(CliError::new(format!(
                    "{path}: a keyframe read did not finish (a dvrfs bug)"
                )));
            };
            if Instant::now() > due(s) {
                late += 1;
            }
            let Output::Read { buf, bytes } = d.output else {
                unreachable!("a read returns bytes")
            };
            if (bytes as u64) < to - from {
                return Err(CliError::new(format!(
                    "{}: a keyframe read at byte {from} returned {bytes} of {} bytes",
                    rec.chunks[keys[s.key].0.chunk].path,
                    to - from
                )));
            }
            read += bytes as u64;
            let pts = BASE_90K + (s.at_s * TICKS_PER_SECOND as f64).round() as i64;
            let shown_for = shown
                .get(i + 1)
                .map_or(1.0 / MAX_KEYFRAMES_PER_S, |n| n.at_s - s.at_s);
            let duration = (shown_for * TICKS_PER_SECOND as f64).round() as i64;
            let keyframe = &buf.bytes().expect("a memory buffer")[..bytes];
            let mut bytes_out = out.keyframe(keyframe, pts, duration);
            if i == 0 {
                bytes_out.splice(0..0, out.head());
            }
            // Shown on time, not before: a player reads as fast as it is fed.
            if let Some(wait) = due(s).checked_duration_since(Instant::now()) {
                std::thread::sleep(wait);
            }
            // Out now, not when a buffer fills: a player shows it when it comes.
            sink.write_all(&bytes_out)
                .and_then(|()| sink.flush())
                .map_err(|e| CliError::new(format!("error writing the output: {e}")))?;
            crate::interrupt::check("play")?;
        }
        sink.flush()
            .map_err(|e| CliError::new(format!("error writing the output: {e}")))
    })();
    for (t, _) in in_flight.drain(..) {
        let _ = rt.check(t, true);
    }
    let _ = super::cmd_stream::close_stream(rt, info.id);
    result?;
    let first = shown.first().map(|s| keys[s.key].1.number);
    let last = shown.last().map(|s| keys[s.key].1.number);
    let size: u64 = rec.chunks.iter().map(|c| c.size).sum();
    let chunks_shown = {
        let mut c: Vec<usize> = shown.iter().map(|s| keys[s.key].0.chunk).collect();
        c.dedup();
        c.len()
    };
    if json_out {
        print_json(&json!({
            "path": path,
            "speed": speed,
            "keyframes_shown": shown.len(),
            "first_frame": first,
            "last_frame": last,
            "seconds": duration_s,
            "bytes_read": read,
            "file_bytes": size,
            "chunks": chunks_shown,
            "late_reads": late,
            "reserved_rate_bps": info.rate_bytes_per_s * 8.0,
            "reserved_request_bytes": info.request_bytes,
        }));
    } else {
        let frames = match rec.dir {
            false => format!("frames {} to {}", first.unwrap_or(0), last.unwrap_or(0)),
            true => format!("from {chunks_shown} chunks"),
        };
        eprintln!(
            "play: {path} at {speed}x: {} keyframes ({frames}) in {:.1} s, {} of {} bytes read ({:.1}%), {late} late; reserved {} B requests at {:.0} kbit/s",
            shown.len(),
            duration_s,
            read,
            size,
            100.0 * read as f64 / size.max(1) as f64,
            info.request_bytes,
            info.rate_bytes_per_s * 8.0 / 1e3,
        );
    }
    if late > 0 {
        return Err(CliError::new(format!(
            "play: {late} of {} keyframe reads missed their deadline (the keyframes still went out, late)",
            shown.len()
        ))
        .hint("the device is slower than admission assumed: give its --device-model or a lower --bandwidth"));
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(n: usize, gop_s: i64) -> Vec<FrameEntry> {
        (0..n)
            .map(|i| FrameEntry {
                offset: 1000 * i as u64,
                data_delta: 0,
                len: 100,
                number: (i as i64 * gop_s * 25) as u32,
                flags: 0,
                pts_90k: i as i64 * gop_s * TICKS_PER_SECOND,
                utc_ns: 0,
            })
            .collect()
    }

    fn times(k: &[FrameEntry]) -> Vec<i64> {
        media_times(&k.iter().collect::<Vec<_>>(), 2_000_000_000)
    }

    /// A PTS that jumps back (a restarted source in the next chunk) or far ahead
    /// (a gap) steps one keyframe interval; a forward step is taken as it is.
    #[test]
    fn media_times_step_over_jumps() {
        let mut k = keys(6, 2);
        k[3].pts_90k = 5; // back to near zero
        k[4].pts_90k = 5 + 2 * TICKS_PER_SECOND;
        k[5].pts_90k = k[4].pts_90k + 3600 * TICKS_PER_SECOND; // an hour's gap
        let t: Vec<i64> = times(&k).iter().map(|t| t / TICKS_PER_SECOND).collect();
        assert_eq!(t, [0, 2, 4, 6, 8, 10]);
    }

    #[test]
    fn every_keyframe_at_8x_and_at_most_8_a_second_at_32x() {
        let k = keys(60, 2);
        let p = plan(&times(&k), 0, 8);
        assert_eq!(p.len(), 60);
        assert_eq!(p[1].at_s, 0.25);
        assert_eq!(p.last().unwrap().at_s, 118.0 / 8.0);
        // 32x with a keyframe every 2 s is 16 a second: every other one.
        let p = plan(&times(&k), 0, 32);
        assert_eq!(p.len(), 30);
        assert!(p.windows(2).all(|w| w[1].at_s - w[0].at_s >= 0.125 - 1e-9));
    }

    #[test]
    fn rewinding_walks_back_from_the_start() {
        let k = keys(10, 2);
        let p = plan(&times(&k), 9, -4);
        assert_eq!(
            p.iter().map(|s| s.key).collect::<Vec<_>>(),
            (0..10).rev().collect::<Vec<_>>()
        );
        assert_eq!(p[9].at_s, 18.0 / 4.0);
    }
}
