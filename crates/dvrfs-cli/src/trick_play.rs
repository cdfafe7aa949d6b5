//! `play --speed N` on an indexed transport stream: trick play (N = 2 to 32 fast
//! forward, -2 to -32 rewind). It reads exactly the byte ranges of the keyframes it
//! shows, found through the file's frame index, never the bytes between them, and
//! writes them as a stream of their own (`media::TrickTs`: video only, PTS and PCR
//! set to when each is shown, so a player shows smooth fast motion).
//!
//! **Which keyframes.** Walking the index from the start (`--from`, else the first
//! keyframe, or the last when rewinding), a keyframe is shown at its media distance
//! from the start over |N|; one that would come less than 1/[`MAX_KEYFRAMES_PER_S`]
//! of a second after the last shown is skipped, as players do at high speeds.
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
use dvrfs_core::media::{Container, TrickTs, TICKS_PER_SECOND};
use dvrfs_core::meta::Ino;
use dvrfs_core::{IoBuf, Op, Output};
use dvrfs_remote::Handle;
use serde_json::json;

use crate::error::{CliError, CliResult};
use crate::output::print_json;

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

/// A keyframe to show, and when (seconds of output from the first).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Shown {
    pub key: usize,
    pub at_s: f64,
}

/// The keyframes of `keys` shown at `speed` from keyframe `start` (module docs).
pub fn plan(keys: &[FrameEntry], start: usize, speed: i32) -> Vec<Shown> {
    let speed_abs = f64::from(speed.unsigned_abs());
    let t0 = keys[start].pts_90k;
    let order: Box<dyn Iterator<Item = usize>> = if speed < 0 {
        Box::new((0..=start).rev())
    } else {
        Box::new(start..keys.len())
    };
    let mut out: Vec<Shown> = vec![];
    for k in order {
        let at_s = (keys[k].pts_90k - t0).abs() as f64 / TICKS_PER_SECOND as f64 / speed_abs;
        if out
            .last()
            .is_none_or(|l| at_s - l.at_s >= 1.0 / MAX_KEYFRAMES_PER_S - 1e-9)
        {
            out.push(Shown { key: k, at_s });
        }
    }
    out
}

/// Plays file `ino` (`path`, `size` bytes, keyframes `keys`) at `speed` from
/// keyframe `start` into `sink`; `spec` is the playback's (its rate unused: the
/// reservation is the keyframes').
#[allow(clippy::too_many_arguments)]
pub fn trick_play(
    rt: &Handle,
    ino: Ino,
    path: &str,
    size: u64,
    keys: &[FrameEntry],
    start: usize,
    speed: i32,
    mut spec: StreamSpec,
    sink: &mut dyn Write,
    json_out: bool,
) -> CliResult<u8> {
    let head = crate::seek::head_of(rt, ino, keys[0].offset)?;
    if head.container != Container::Ts {
        return Err(CliError::new(format!(
            "{path}: trick play of an MP4 is not built yet (transport streams only)"
        ))
        .hint("play it at --speed 1, or `dvrfs export` a clip"));
    }
    let mut ts = TrickTs::new(&head.bytes)
        .map_err(|why| CliError::new(format!("{path}: cannot play keyframes alone: {why}")))?;
    let shown = plan(keys, start, speed);
    let span = |k: usize| {
        let e = &keys[k];
        (
            e.offset,
            (e.offset + u64::from(e.data_delta) + u64::from(e.len)).min(size),
        )
    };
    let bytes: u64 = shown.iter().map(|s| span(s.key).1 - span(s.key).0).sum();
    let duration_s = shown
        .last()
        .map_or(0.0, |s| s.at_s)
        .max(1.0 / MAX_KEYFRAMES_PER_S);
    let mean = (bytes / shown.len().max(1) as u64).max(1);
    spec.request_bytes = mean.div_ceil(4096) * 4096;
    spec.rate_bps = spec.request_bytes as f64 * 8.0 * shown.len() as f64 / duration_s;
    spec.idle = true;
    spec.buffer_bytes = None;
    let info = super::cmd_stream::open_stream(rt, ino, spec)?;
    let started = Instant::now() + STARTUP;
    let due = |s: &Shown| started + Duration::from_secs_f64(s.at_s);
    let mut in_flight: VecDeque<(dvrfs_runtime::Ticket, usize)> = VecDeque::new();
    let (mut next, mut late, mut read) = (0usize, 0usize, 0u64);
    let result = (|| -> CliResult<()> {
        for (i, s) in shown.iter().enumerate() {
            while next < shown.len() && next < i + READS_AHEAD {
                let (from, to) = span(shown[next].key);
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
            let (from, to) = span(s.key);
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
                    "{path}: a keyframe read at byte {from} returned {bytes} of {} bytes",
                    to - from
                )));
            }
            read += bytes as u64;
            let pts = BASE_90K + (s.at_s * TICKS_PER_SECOND as f64).round() as i64;
            let out = ts.keyframe(&buf.bytes().expect("a memory buffer")[..bytes], pts);
            // Shown on time, not before: a player reads as fast as it is fed.
            if let Some(wait) = due(s).checked_duration_since(Instant::now()) {
                std::thread::sleep(wait);
            }
            // Out now, not when a buffer fills: a player shows it when it comes.
            sink.write_all(&out)
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
    let first = shown.first().map(|s| keys[s.key].number);
    let last = shown.last().map(|s| keys[s.key].number);
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
            "late_reads": late,
            "reserved_rate_bps": info.rate_bytes_per_s * 8.0,
            "reserved_request_bytes": info.request_bytes,
        }));
    } else {
        eprintln!(
            "play: {path} at {speed}x: {} keyframes (frames {} to {}) in {:.1} s, {} of {} bytes read ({:.1}%), {late} late; reserved {} B requests at {:.0} kbit/s",
            shown.len(),
            first.unwrap_or(0),
            last.unwrap_or(0),
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

    #[test]
    fn every_keyframe_at_8x_and_at_most_8_a_second_at_32x() {
        let k = keys(60, 2);
        let p = plan(&k, 0, 8);
        assert_eq!(p.len(), 60);
        assert_eq!(p[1].at_s, 0.25);
        assert_eq!(p.last().unwrap().at_s, 118.0 / 8.0);
        // 32x with a keyframe every 2 s is 16 a second: every other one.
        let p = plan(&k, 0, 32);
        assert_eq!(p.len(), 30);
        assert!(p.windows(2).all(|w| w[1].at_s - w[0].at_s >= 0.125 - 1e-9));
    }

    #[test]
    fn rewinding_walks_back_from_the_start() {
        let k = keys(10, 2);
        let p = plan(&k, 9, -4);
        assert_eq!(
            p.iter().map(|s| s.key).collect::<Vec<_>>(),
            (0..10).rev().collect::<Vec<_>>()
        );
        assert_eq!(p[9].at_s, 18.0 / 4.0);
    }
}
