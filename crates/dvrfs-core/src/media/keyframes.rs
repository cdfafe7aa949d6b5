//! From parsed frames to frame-index entries: which frames are stored (keyframes
//! only, FORMAT.md section 10c), and the UTC each gets.
//!
//! **Time of an import.** A file indexed after it was written (`dvrfs reindex`, a
//! file recorded faster than real time) has no host clock to anchor to: its media
//! time governs. The first frame is at the start UTC the caller gives; every later
//! frame is that plus its PTS distance from the anchor. At a discontinuity (the
//! parser's: the transport flag, or a PTS step past `MAX_PTS_STEP_90K`) the anchor
//! moves to that frame, one frame interval after the last UTC given, and the next
//! keyframe is flagged. UTC never goes backwards (B-frames' PTS do, in file order):
//! a frame earlier than the last UTC given gets the last one. Every entry carries
//! `FLAG_IMPORT`.
//!
//! **Time of a live recording** (the engine indexing a file as it is written): the
//! first frame is at the host's wall clock when the write carrying it was submitted,
//! and the media time carries it from there. A discontinuity moves the anchor to
//! the wall clock of its write (never before the last UTC given). A source whose
//! media time runs more than [`IMPORT_LEAD_NS`] ahead of the wall clock since the
//! anchor is being copied faster than real time: from then on it is an import
//! (`FLAG_IMPORT`), its media time alone governs. Not yet: re-anchoring a live
//! source whose clock drifts from the host's by more than a second, and logging a
//! host clock step (a step back is never applied: UTC never goes backwards).
//!
//! What cannot be stored is counted, never stored wrong: a keyframe whose length or
//! frame number does not fit the entry's 32-bit fields (`skipped_keyframes`).

use super::{Frame, Indexer, TICKS_PER_SECOND};
use crate::format::frame_index::{FrameEntry, FLAG_DISCONTINUITY, FLAG_IMPORT};

/// How far a live source's media time may run ahead of the wall clock before it
/// counts as an import (10 s: more than any recorder buffers).
pub const IMPORT_LEAD_NS: i64 = 10_000_000_000;

/// The frame interval assumed at a discontinuity before any was seen (25 fps).
const DEFAULT_INTERVAL_90K: i64 = TICKS_PER_SECOND / 25;

/// Media time in 90 kHz ticks to nanoseconds.
fn ticks_to_ns(t: i64) -> i64 {
    t.saturating_mul(100_000) / 9
}

/// The media time from `from` to `to`, 90 kHz: a transport stream's 33-bit PTS
/// wraps (every 26.5 hours), and a new parser starts unwrapping afresh, so a step
/// of more than half the range is taken as a wrap.
fn pts_step(from: i64, to: i64) -> i64 {
    const WRAP: i64 = 1 << 33;
    let d = to - from;
    if d.abs() <= WRAP / 2 {
        return d;
    }
    let m = d.rem_euclid(WRAP);
    if m > WRAP / 2 {
        m - WRAP
    } else {
        m
    }
}

/// See the module docs.
#[derive(Debug)]
pub struct KeyframeBuilder {
    indexer: Indexer,
    /// (PTS, UTC) of the anchor frame.
    anchor: Option<(i64, i64)>,
    /// Live: the wall clock is consulted (until the source turns out an import).
    live: bool,
    /// The wall clock of the bytes being fed (live).
    wall_ns: i64,
    start_utc_ns: i64,
    last_utc_ns: i64,
    last_pts: Option<i64>,
    /// The last positive PTS step between consecutive frames.
    interval_90k: i64,
    /// A discontinuity since the last keyframe stored.
    pending_flags: u32,
    /// The (PTS, UTC) of the last frame of the file this one continues (a
    /// recording's next chunk): its first frame is timed from there.
    continues: Option<(i64, i64)>,
    /// The last frame's PTS and its UTC by the anchor, before UTC was held from
    /// going back (a pair a next file can be timed from).
    last_timed: Option<(i64, i64)>,
    frames: u64,
    keyframes: u64,
    skipped_keyframes: u64,
}

impl KeyframeBuilder {
    /// A builder for a file indexed after it was written, its first frame at
    /// `start_utc_ns`.
    pub fn import(start_utc_ns: i64) -> KeyframeBuilder {
        KeyframeBuilder {
            indexer: Indexer::new(),
            anchor: None,
            live: false,
            wall_ns: 0,
            start_utc_ns,
            last_utc_ns: i64::MIN,
            last_pts: None,
            interval_90k: DEFAULT_INTERVAL_90K,
            pending_flags: 0,
            continues: None,
            last_timed: None,
            frames: 0,
            keyframes: 0,
            skipped_keyframes: 0,
        }
    }

    /// A builder for a file indexed as it is written (see the module docs); feed it
    /// with [`KeyframeBuilder::feed_at`].
    pub fn live() -> KeyframeBuilder {
        KeyframeBuilder {
            live: true,
            ..KeyframeBuilder::import(0)
        }
    }

    /// A builder for the next file of the same recording (`Op::StreamRoll`, a
    /// chunk after a chunk): a parser of its own, and the time where this one left
    /// it, so that the next file's first frame is timed by the media time since this
    /// one's last frame (a PTS wrap between them included) and an import stays one.
    /// Before this one saw a frame, a fresh builder of the same kind.
    pub fn continuing(&self) -> KeyframeBuilder {
        let mut next = KeyframeBuilder {
            live: self.live,
            wall_ns: self.wall_ns,
            interval_90k: self.interval_90k,
            ..KeyframeBuilder::import(self.start_utc_ns)
        };
        // Its own last frame, or (before it timed one) what it was to be timed from.
        if let Some(timed) = self.last_timed.or(self.continues) {
            next.continues = Some(timed);
            next.last_utc_ns = self.last_utc_ns;
        }
        next
    }

    /// Whether a next file can be timed from this one: it timed a frame, or was
    /// itself continuing one that had.
    pub fn has_time(&self) -> bool {
        self.last_timed.is_some() || self.continues.is_some()
    }

    /// [`KeyframeBuilder::feed`] of bytes written at wall-clock time `wall_ns`.
    pub fn feed_at(&mut self, bytes: &[u8], wall_ns: i64) -> Vec<FrameEntry> {
        self.wall_ns = wall_ns;
        self.feed(bytes)
    }

    /// Whether a live source turned out to be an import.
    pub fn is_import(&self) -> bool {
        !self.live
    }

    /// The parser (its container, codec and counters).
    pub fn indexer(&self) -> &Indexer {
        &self.indexer
    }

    /// The UTC given to the last frame so far (`i64::MIN` before the first).
    pub fn last_utc_ns(&self) -> i64 {
        self.last_utc_ns
    }

    /// Frames seen, keyframes stored and keyframes that could not be.
    pub fn counts(&self) -> (u64, u64, u64) {
        (self.frames, self.keyframes, self.skipped_keyframes)
    }

    /// The file's next bytes; returns the keyframes they completed.
    pub fn feed(&mut self, bytes: &[u8]) -> Vec<FrameEntry> {
        self.indexer.feed(bytes);
        let frames = self.indexer.drain();
        self.entries(frames)
    }

    /// The end of the file; returns the last keyframes.
    pub fn finish(&mut self) -> Vec<FrameEntry> {
        let frames = self.indexer.finish();
        self.entries(frames)
    }

    fn entries(&mut self, frames: Vec<Frame>) -> Vec<FrameEntry> {
        let mut out = Vec::new();
        for f in frames {
            self.frames += 1;
            let utc = self.utc_of(&f);
            if !f.keyframe {
                continue;
            }
            let (Ok(len), Ok(number), Ok(delta)) = (
                u32::try_from(f.len),
                u32::try_from(f.number),
                u32::try_from(f.data_offset - f.offset),
            ) else {
                self.skipped_keyframes += 1;
                continue;
            };
            out.push(FrameEntry {
                offset: f.offset,
                data_delta: delta,
                len,
                number,
                flags: if self.live { 0 } else { FLAG_IMPORT }
                    | std::mem::take(&mut self.pending_flags),
                pts_90k: f.pts_90k,
                utc_ns: utc,
            });
            self.keyframes += 1;
        }
        out
    }

    /// The UTC of frame `f` (see the module docs); moves the anchor at a
    /// discontinuity.
    fn utc_of(&mut self, f: &Frame) -> i64 {
        if let Some(last) = self.last_pts {
            let step = f.pts_90k - last;
            if step > 0 && !f.discontinuity {
                self.interval_90k = step;
            }
        }
        self.last_pts = Some(f.pts_90k);
        let next = self
            .last_utc_ns
            .saturating_add(ticks_to_ns(self.interval_90k));
        let anchor = match self.anchor {
            None if self.continues.is_some() => {
                let (pts, utc) = self.continues.take().expect("checked");
                (
                    f.pts_90k,
                    utc.saturating_add(ticks_to_ns(pts_step(pts, f.pts_90k))),
                )
            }
            None if self.live => (f.pts_90k, self.wall_ns),
            None => (f.pts_90k, self.start_utc_ns),
            Some(_) if f.discontinuity => {
                self.pending_flags |= FLAG_DISCONTINUITY;
                match self.live {
                    true => (f.pts_90k, self.wall_ns.max(next)),
                    false => (f.pts_90k, next),
                }
            }
            Some(a) => a,
        };
        if self.live && ticks_to_ns(f.pts_90k - anchor.0) > self.wall_ns - anchor.1 + IMPORT_LEAD_NS
        {
            self.live = false;
        }
        self.anchor = Some(anchor);
        let timed = anchor.1.saturating_add(ticks_to_ns(f.pts_90k - anchor.0));
        self.last_timed = Some((f.pts_90k, timed));
        let utc = timed.max(self.last_utc_ns);
        self.last_utc_ns = utc;
        utc
    }
}

#[cfg(test)]
mod tests {
    use super::super::synth::stream_part;
    use super::*;

    const T0: i64 = 1_800_000_000_000_000_000;
    const FRAME_NS: i64 = 40_000_000;

    /// Keyframes of a stream of 100 frames (a keyframe every 25) cut into two files
    /// at frame 50, the second indexed by the first's continuing builder.
    fn two_files(pts0: i64) -> (Vec<FrameEntry>, Vec<FrameEntry>) {
        let mut a = KeyframeBuilder::import(T0);
        let mut first = a.feed(&stream_part(0..50, 25, pts0));
        first.extend(a.finish());
        let mut b = a.continuing();
        let mut second = b.feed(&stream_part(50..100, 25, pts0));
        second.extend(b.finish());
        (first, second)
    }

    #[test]
    fn a_next_file_is_timed_by_the_media_time_since_the_last() {
        let (first, second) = two_files(0);
        let utc = |v: &[FrameEntry]| v.iter().map(|e| e.utc_ns).collect::<Vec<_>>();
        assert_eq!(utc(&first), vec![T0, T0 + 25 * FRAME_NS]);
        assert_eq!(utc(&second), vec![T0 + 50 * FRAME_NS, T0 + 75 * FRAME_NS]);
        // An import stays one; the second file numbers its own frames.
        assert!(second.iter().all(|e| e.flags & FLAG_IMPORT != 0));
        assert_eq!(second[0].number, 0);
    }

    #[test]
    fn a_pts_wrap_between_files_keeps_time_going_forward() {
        // Frame 50, the second file's first, wraps past 2^33: its parser starts
        // at a small PTS, the first file's ended just below 2^33.
        let (_, second) = two_files((1 << 33) - 50 * 3600 + 1800);
        assert!(second[0].pts_90k < 3600 * 100, "{}", second[0].pts_90k);
        assert_eq!(second[0].utc_ns, T0 + 50 * FRAME_NS);
        assert_eq!(second[1].utc_ns, T0 + 75 * FRAME_NS);
    }

    #[test]
    fn pts_steps_take_the_short_way_round_the_wrap() {
        assert_eq!(pts_step(100, 400), 300);
        assert_eq!(pts_step((1 << 33) - 100, 50), 150);
        assert_eq!(pts_step(50, (1 << 33) - 100), -150);
        assert_eq!(pts_step(0, 1 << 40), 0);
    }
}
