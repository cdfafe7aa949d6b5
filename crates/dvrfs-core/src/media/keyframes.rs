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
//! **Time of a live recording** (the engine indexing a file as it is written): each
//! write comes with the two clocks of its submission, monotonic and wall. The
//! freshest frame of the first write (the one with the highest PTS) is at the wall
//! clock then, and the media time carries every frame from there. A discontinuity
//! moves the anchor to the wall clock of its write (never before the last UTC
//! given). Then, at each write, the media time is held against the monotonic clock
//! and the wall clock against the monotonic one; the UTC anchor moves (the next
//! keyframe flagged `FLAG_CLOCK_STEP`, a [`ClockNote`] for the event log) when:
//! - the host's wall clock stepped forward by more than [`DRIFT_NS`] (an operator,
//!   NTP's first sync): the recording's UTC jumps with it;
//! - the source's media time fell more than [`DRIFT_NS`] behind the monotonic clock
//!   (a slow source clock, frames lost without a PTS gap): the UTC jumps forward to
//!   real time;
//! - it ran more than [`DRIFT_NS`] ahead, slowly (at most 1 % faster than real
//!   time: a clock error, not a copy): re-anchored to real time, and since UTC
//!   never goes backwards, the frames until real time catches up are held at the
//!   last UTC given.
//!
//! A host clock stepped back is noted and not applied: the recording's UTC goes on
//! by its media time, so a step back never makes a recording's times (or its chunks,
//! named by them) overlap. A slow slew (NTP) is not a step: the two clocks are
//! compared write to write. A source whose media time runs more than
//! [`IMPORT_LEAD_NS`] ahead of the monotonic clock since the anchor is being copied
//! faster than real time: from then on it is an import (`FLAG_IMPORT`), its media
//! time alone governs and the clocks are no longer consulted.
//!
//! What cannot be stored is counted, never stored wrong: a keyframe whose length or
//! frame number does not fit the entry's 32-bit fields (`skipped_keyframes`).

use super::{Frame, Indexer, TICKS_PER_SECOND};
use crate::format::events::ClockChange;
use crate::format::frame_index::{FrameEntry, FLAG_CLOCK_STEP, FLAG_DISCONTINUITY, FLAG_IMPORT};

/// How far a live source's media time may run ahead of the wall clock before it
/// counts as an import (10 s: more than any recorder buffers).
pub const IMPORT_LEAD_NS: i64 = 10_000_000_000;

/// How far a live source's media time may drift from the monotonic clock, or the
/// host's wall clock step against it between two writes, before the UTC anchor
/// moves (1 s).
pub const DRIFT_NS: i64 = 1_000_000_000;

/// A media time ahead of the monotonic clock is a clock error (re-anchored) only if
/// it gained at most 1/this of the time since the anchor: faster is a copy.
const DRIFT_RATE_DIVISOR: i64 = 100;

/// One move of a live recording's clock (see the module docs), at byte `offset` of
/// the file (the frame it was seen at), by `step_ns` (its magnitude).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClockNote {
    pub change: ClockChange,
    pub step_ns: u64,
    pub offset: u64,
}

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
    /// The monotonic clock of the bytes being fed (live).
    mono_ns: i64,
    /// Live: the monotonic clock less the UTC on the anchor's time line (the
    /// monotonic time a frame's UTC corresponds to, for the drift check).
    mono_minus_utc: Option<i64>,
    /// Live: the wall clock less the monotonic clock at the last write.
    host_offset: Option<i64>,
    /// Clock moves not yet taken by the caller.
    notes: Vec<ClockNote>,
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
    /// Resuming ([`KeyframeBuilder::resume_at`]): the keyframe stored last, not yet
    /// seen again.
    resume: Option<FrameEntry>,
    /// Added to the parser's frame numbers once the resumed keyframe was seen (a
    /// fragment's samples before it are numbered from the one it was told).
    number_shift: i64,
    /// The bytes where the resumed keyframe was stored held something else.
    resume_broken: bool,
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
            mono_ns: 0,
            mono_minus_utc: None,
            host_offset: None,
            notes: Vec::new(),
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
            resume: None,
            number_shift: 0,
            resume_broken: false,
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
            mono_ns: self.mono_ns,
            mono_minus_utc: self.mono_minus_utc,
            host_offset: self.host_offset,
            // A step seen after this file's last keyframe flags the next file's first.
            pending_flags: self.pending_flags,
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

    /// A builder that goes on with a file whose index was built before this one (a
    /// writer's reopen, a crash's replay): `head` is the file's first bytes (its
    /// tables or init segment; the frames in it are not given), `last` the keyframe
    /// its index holds last. Feed it the file from `last.offset` on: that keyframe
    /// is recognised (the same bytes and media time) and not given again, the
    /// frames after it are numbered on from its number and timed on from its UTC by
    /// their media time (an import stays one; a live file's clocks are consulted
    /// again at its next discontinuity, which anchors it to the wall clock). `None`
    /// when the head does not let the parser go on (not a transport stream with a
    /// program map naming its video, nor a fragmented MP4 with a video track).
    pub fn resume_at(head: &[u8], last: &FrameEntry) -> Option<KeyframeBuilder> {
        let mut b = KeyframeBuilder::import(last.utc_ns);
        b.live = last.flags & FLAG_IMPORT == 0;
        b.indexer.feed(head);
        b.indexer.drain();
        if !b
            .indexer
            .resume_at(last.offset, u64::from(last.number), last.pts_90k)
        {
            return None;
        }
        b.anchor = Some((last.pts_90k, last.utc_ns));
        b.last_utc_ns = last.utc_ns;
        b.last_timed = Some((last.pts_90k, last.utc_ns));
        b.resume = Some(*last);
        Some(b)
    }

    /// A resumed file's bytes were not what its index said (the keyframe stored last
    /// is not where it was): nothing more is given, its index cannot go on.
    pub fn resume_broken(&self) -> bool {
        self.resume_broken
    }

    /// Whether a next file can be timed from this one: it timed a frame, or was
    /// itself continuing one that had.
    pub fn has_time(&self) -> bool {
        self.last_timed.is_some() || self.continues.is_some()
    }

    /// [`KeyframeBuilder::feed`] of bytes written at monotonic time `mono_ns` and
    /// wall-clock time `wall_ns` (a live builder's clocks; see the module docs).
    pub fn feed_at(&mut self, bytes: &[u8], mono_ns: u64, wall_ns: i64) -> Vec<FrameEntry> {
        self.wall_ns = wall_ns;
        self.mono_ns = i64::try_from(mono_ns).unwrap_or(i64::MAX);
        self.feed(bytes)
    }

    /// The clock moves seen since the last call (see the module docs).
    pub fn take_clock_notes(&mut self) -> Vec<ClockNote> {
        std::mem::take(&mut self.notes)
    }

    /// Bytes at `offset`, already fed, were written again: whether indexing can go
    /// on ([`Indexer::patch`]).
    pub fn patch(&mut self, offset: u64, bytes: &[u8]) -> bool {
        self.indexer.patch(offset, bytes)
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
        if self.live {
            self.check_clocks(&frames);
        }
        let mut out = Vec::new();
        for f in frames {
            let Some(f) = self.resumed(f) else {
                continue;
            };
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

    /// Frame `f` as given after a resume ([`KeyframeBuilder::resume_at`]): `None`
    /// for the frames before the keyframe stored last and for that keyframe (it
    /// sets the frame interval's start); later frames renumbered on from it.
    fn resumed(&mut self, f: Frame) -> Option<Frame> {
        if self.resume_broken {
            return None;
        }
        let Some(last) = self.resume else {
            let number = f.number.checked_add_signed(self.number_shift)?;
            return Some(Frame { number, ..f });
        };
        let at = last.offset + u64::from(last.data_delta);
        if f.offset == last.offset && f.data_offset < at {
            return None; // its fragment's samples before it
        }
        if f.data_offset == at && f.keyframe && f.pts_90k == last.pts_90k {
            self.resume = None;
            self.number_shift = i64::from(last.number) - f.number as i64;
            self.last_pts = Some(f.pts_90k);
            self.frames += 1;
            return None;
        }
        self.resume_broken = true;
        None
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
            None if self.live => self.anchor_live(f.pts_90k, self.wall_ns),
            None => (f.pts_90k, self.start_utc_ns),
            Some(_) if f.discontinuity => {
                self.pending_flags |= FLAG_DISCONTINUITY;
                match self.live {
                    true => self.anchor_live(f.pts_90k, self.wall_ns.max(next)),
                    false => (f.pts_90k, next),
                }
            }
            Some(a) => a,
        };
        if self.live {
            // Elapsed since the anchor by the monotonic clock (the wall clock's
            // steps are not the source's speed).
            let since = match self.mono_minus_utc {
                Some(m) => self.mono_ns - (anchor.1 + m),
                None => self.wall_ns - anchor.1,
            };
            if ticks_to_ns(f.pts_90k - anchor.0) > since + IMPORT_LEAD_NS {
                self.live = false;
            }
        }
        self.anchor = Some(anchor);
        let timed = anchor.1.saturating_add(ticks_to_ns(f.pts_90k - anchor.0));
        self.last_timed = Some((f.pts_90k, timed));
        let utc = timed.max(self.last_utc_ns);
        self.last_utc_ns = utc;
        utc
    }

    /// A live anchor: frame `pts` at `utc`, which is now on the monotonic clock.
    fn anchor_live(&mut self, pts: i64, utc: i64) -> (i64, i64) {
        self.mono_minus_utc = Some(self.mono_ns - utc);
        self.host_offset = Some(self.wall_ns - self.mono_ns);
        (pts, utc)
    }

    /// The clocks of the write that completed `frames` (see the module docs): a
    /// first anchor at its freshest frame, or the checks of a running one.
    fn check_clocks(&mut self, frames: &[Frame]) {
        // The frames of one time line: up to the first discontinuity (past it the
        // anchor moves anyway).
        let run = frames
            .iter()
            .skip(1)
            .position(|f| f.discontinuity)
            .map_or(frames.len(), |i| i + 1);
        let Some(fresh) = frames[..run].iter().max_by_key(|f| f.pts_90k) else {
            return;
        };
        if frames[0].discontinuity && self.anchor.is_some() {
            return;
        }
        let anchor = match (self.anchor, self.continues.take()) {
            (Some(a), _) => a,
            // A next file: its first frame goes on from the last file's time, and
            // its first write is checked like any other.
            (None, Some((pts, utc))) => {
                let first = frames[0].pts_90k;
                let a = (first, utc.saturating_add(ticks_to_ns(pts_step(pts, first))));
                self.anchor = Some(a);
                a
            }
            (None, None) => {
                self.anchor = Some(self.anchor_live(fresh.pts_90k, self.wall_ns));
                return;
            }
        };
        let host = self.wall_ns - self.mono_ns;
        let last_host = self.host_offset.replace(host);
        let Some(mono_minus_utc) = self.mono_minus_utc else {
            return;
        };
        let step = last_host.map_or(0, |h| host - h);
        let by_media = anchor
            .1
            .saturating_add(ticks_to_ns(fresh.pts_90k - anchor.0));
        // > 0: the media time is ahead of the monotonic clock.
        let lead = by_media + mono_minus_utc - self.mono_ns;
        let since = self.mono_ns - (anchor.1 + mono_minus_utc);
        let (change, by, to) = if step > DRIFT_NS {
            (ClockChange::HostForward, step, self.wall_ns)
        } else if step < -DRIFT_NS {
            (ClockChange::HostBack, -step, by_media)
        } else if lead < -DRIFT_NS {
            (ClockChange::SourceBehind, -lead, by_media - lead)
        } else if lead > DRIFT_NS && lead <= IMPORT_LEAD_NS && since >= DRIFT_RATE_DIVISOR * lead {
            (ClockChange::SourceAhead, lead, by_media - lead)
        } else {
            return;
        };
        self.notes.push(ClockNote {
            change,
            step_ns: by.unsigned_abs(),
            offset: fresh.offset,
        });
        if change.applied() {
            self.pending_flags |= FLAG_CLOCK_STEP;
            self.anchor = Some(self.anchor_live(fresh.pts_90k, to));
        }
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

    /// A live recording of `secs` seconds (25 fps, a keyframe a second) written a
    /// second at a time: second `i`'s bytes submitted at monotonic `mono(i)` and
    /// wall clock `wall(i)`. Its keyframes and the clock notes.
    fn live_run(
        secs: usize,
        mono: impl Fn(usize) -> i64,
        wall: impl Fn(usize) -> i64,
    ) -> (Vec<FrameEntry>, Vec<ClockNote>) {
        let mut b = KeyframeBuilder::live();
        let mut out = Vec::new();
        for i in 0..secs {
            let bytes = stream_part(i * 25..(i + 1) * 25, 25, 0);
            out.extend(b.feed_at(&bytes, mono(i) as u64, wall(i)));
        }
        out.extend(b.finish());
        (out, b.take_clock_notes())
    }

    const S: i64 = 1_000_000_000;

    /// Second `i`'s bytes are sent when its last frame is complete.
    fn real_time(i: usize) -> i64 {
        (i as i64 + 1) * S
    }

    #[test]
    fn a_live_source_on_time_is_timed_by_its_media_time_from_the_first_write() {
        let (kf, notes) = live_run(20, real_time, |i| T0 + real_time(i));
        assert!(notes.is_empty(), "{notes:?}");
        assert_eq!(kf.len(), 20);
        // The first write's freshest frame (frame 23: the 25th completes only when
        // the next write starts the frame after it) is at the wall clock of its
        // submission (1 s): frame 0 at 0.08 s.
        for (i, e) in kf.iter().enumerate() {
            assert_eq!(e.utc_ns, T0 + i as i64 * S + 2 * FRAME_NS, "keyframe {i}");
            assert_eq!(e.flags, 0);
        }
    }

    #[test]
    fn a_host_clock_stepped_forward_moves_the_anchor_and_is_flagged() {
        const HOUR: i64 = 3600 * S;
        let wall = |i: usize| T0 + real_time(i) + if i >= 10 { HOUR } else { 0 };
        let (kf, notes) = live_run(20, real_time, wall);
        assert_eq!(notes.len(), 1, "{notes:?}");
        assert_eq!(notes[0].change, ClockChange::HostForward);
        assert_eq!(notes[0].step_ns, HOUR as u64);
        // Keyframe 10 (second 10's first frame) is the first after the step.
        assert_eq!(kf[9].utc_ns, T0 + 9 * S + 2 * FRAME_NS);
        assert_eq!(kf[9].flags, 0);
        assert_eq!(kf[10].flags, FLAG_CLOCK_STEP);
        assert_eq!(kf[10].utc_ns, T0 + HOUR + 10 * S + 2 * FRAME_NS);
        assert_eq!(kf[19].utc_ns, T0 + HOUR + 19 * S + 2 * FRAME_NS);
        assert!(kf.windows(2).all(|w| w[0].utc_ns < w[1].utc_ns));
    }

    #[test]
    fn a_host_clock_stepped_back_is_noted_and_not_applied() {
        const HOUR: i64 = 3600 * S;
        let wall = |i: usize| T0 + real_time(i) - if i >= 10 { HOUR } else { 0 };
        let (kf, notes) = live_run(20, real_time, wall);
        assert_eq!(notes.len(), 1, "{notes:?}");
        assert_eq!(notes[0].change, ClockChange::HostBack);
        // The media time carries on: nothing flagged, nothing moved, no import.
        for (i, e) in kf.iter().enumerate() {
            assert_eq!(e.utc_ns, T0 + i as i64 * S + 2 * FRAME_NS, "keyframe {i}");
            assert_eq!(e.flags, 0);
        }
    }

    #[test]
    fn a_slow_source_clock_is_re_anchored_forward_past_a_second() {
        // Its second of media takes 1.1 s: after 11 s it is 1.1 s behind.
        let mono = |i: usize| (i as i64 + 1) * 1_100_000_000;
        let (kf, notes) = live_run(30, mono, |i| T0 + mono(i));
        assert!(!notes.is_empty());
        assert!(notes
            .iter()
            .all(|n| n.change == ClockChange::SourceBehind && n.step_ns > S as u64));
        // Never more than the threshold (plus one write's slip) off real time, and
        // each move flagged.
        for (i, e) in kf.iter().enumerate() {
            let real = T0 + mono(i) - 24 * FRAME_NS * 11 / 10 + FRAME_NS / 10;
            assert!(
                (e.utc_ns - real).abs() <= S + S / 10,
                "keyframe {i}: {}",
                e.utc_ns - real
            );
        }
        let flagged = kf.iter().filter(|e| e.flags & FLAG_CLOCK_STEP != 0).count();
        assert_eq!(flagged, notes.len());
        assert!(kf.windows(2).all(|w| w[0].utc_ns < w[1].utc_ns));
    }

    #[test]
    fn a_slightly_fast_source_is_re_anchored_and_a_copy_becomes_an_import() {
        // 0.5 % fast: a second of media every 0.995 s; 1 s ahead after 200 s.
        let mono = |i: usize| (i as i64 + 1) * 995_000_000;
        let (kf, notes) = live_run(400, mono, |i| T0 + mono(i));
        assert!(!notes.is_empty());
        assert!(notes.iter().all(|n| n.change == ClockChange::SourceAhead));
        assert!(kf.iter().all(|e| e.flags & FLAG_IMPORT == 0));
        assert!(kf.windows(2).all(|w| w[0].utc_ns <= w[1].utc_ns));
        let last = kf.last().unwrap();
        assert!(
            (last.utc_ns - (T0 + mono(399))).abs() <= 2 * S,
            "{}",
            last.utc_ns - T0 - mono(399)
        );
        // Twice real time is a copy: an import, its media time governs.
        let mono = |i: usize| (i as i64 + 1) * S / 2;
        let (kf, notes) = live_run(60, mono, |i| T0 + mono(i));
        assert!(notes.is_empty(), "{notes:?}");
        assert!(kf[59].flags & FLAG_IMPORT != 0);
        assert_eq!(kf[59].utc_ns - kf[0].utc_ns, 59 * S);
    }

    #[test]
    fn a_next_live_file_keeps_the_clock_checks() {
        const HOUR: i64 = 3600 * S;
        let mut a = KeyframeBuilder::live();
        for i in 0..5 {
            a.feed_at(
                &stream_part(i * 25..(i + 1) * 25, 25, 0),
                real_time(i) as u64,
                T0 + real_time(i),
            );
        }
        a.finish();
        let mut b = a.continuing();
        let mut kf = Vec::new();
        for i in 5..10 {
            let wall = T0 + real_time(i) + if i >= 7 { HOUR } else { 0 };
            kf.extend(b.feed_at(
                &stream_part(i * 25..(i + 1) * 25, 25, 0),
                real_time(i) as u64,
                wall,
            ));
        }
        let notes = b.take_clock_notes();
        assert_eq!(notes.len(), 1);
        assert_eq!(notes[0].change, ClockChange::HostForward);
        assert_eq!(kf[0].utc_ns, T0 + 5 * S + 2 * FRAME_NS);
        assert_eq!(kf[2].flags, FLAG_CLOCK_STEP);
        assert_eq!(kf[2].utc_ns, T0 + HOUR + 7 * S + 2 * FRAME_NS);
    }

    #[test]
    fn a_step_seen_at_a_next_files_first_write_or_after_a_files_last_keyframe_is_flagged() {
        const HOUR: i64 = 3600 * S;
        // Files of 4 s written once each (a slow recording's requests go at its
        // chunk cuts), the clock stepped before the second file's write.
        let mut a = KeyframeBuilder::live();
        a.feed_at(&stream_part(0..100, 25, 0), 4 * S as u64, T0 + 4 * S);
        a.finish();
        let mut b = a.continuing();
        let kf = b.feed_at(
            &stream_part(100..200, 25, 0),
            8 * S as u64,
            T0 + HOUR + 8 * S,
        );
        assert_eq!(b.take_clock_notes().len(), 1);
        assert_eq!(kf[0].flags, FLAG_CLOCK_STEP);
        assert!(kf[0].utc_ns > T0 + HOUR, "{}", kf[0].utc_ns - T0);
        // Stepped after a file's last keyframe (frame 75): the next file's first
        // keyframe carries the flag.
        let mut a = KeyframeBuilder::live();
        a.feed_at(&stream_part(0..77, 25, 0), 3 * S as u64, T0 + 3 * S);
        a.feed_at(
            &stream_part(77..100, 25, 0),
            4 * S as u64,
            T0 + HOUR + 4 * S,
        );
        a.finish();
        assert_eq!(a.take_clock_notes().len(), 1);
        let mut b = a.continuing();
        let kf = b.feed_at(
            &stream_part(100..200, 25, 0),
            8 * S as u64,
            T0 + HOUR + 8 * S,
        );
        assert!(b.take_clock_notes().is_empty());
        assert_eq!(kf[0].flags, FLAG_CLOCK_STEP);
        assert!(kf[0].utc_ns > T0 + HOUR, "{}", kf[0].utc_ns - T0);
    }

    #[test]
    fn pts_steps_take_the_short_way_round_the_wrap() {
        assert_eq!(pts_step(100, 400), 300);
        assert_eq!(pts_step((1 << 33) - 100, 50), 150);
        assert_eq!(pts_step(50, (1 << 33) - 100), -150);
        assert_eq!(pts_step(0, 1 << 40), 0);
    }
}
