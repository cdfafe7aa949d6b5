//! A plain (non-fragmented) MP4 played or cut from a keyframe (`play --from`,
//! `export`): its bytes from there are no MP4 a player can open (the `moov`
//! describes the whole file, from its first sample), so the samples are put out
//! again as a fragmented MP4, unchanged: the init segment of its video and first
//! audio track (`mp4_write.rs`), then one fragment a GOP (the video samples from
//! one keyframe to the next, and each other track's samples whose decode time falls
//! in that span), its decode times counted from the clip's start (each track from
//! the first keyframe's time in its own timescale, so the tracks stay in step).
//!
//! **Streaming.** The samples come from the source's bytes as they are read in file
//! order ([`Mp4Remux::feed`], any split), from [`Mp4Remux::byte_range`]: a fragment
//! goes out once the bytes of all its samples have gone by. A muxer interleaves
//! its tracks in file order about as they are in time, so what is held is about one
//! GOP's bytes; at most [`MAX_WINDOW_BYTES`] (past it, or bytes not in order, the
//! rest is left out and [`Mp4Remux::gave_up`] says why).
//!
//! **Chunks.** A stream directory's chunks are one source's: the next chunk's
//! remux goes on from this one ([`Mp4Remux::continuing`]): the same init segment
//! and track ids, sequence numbers and times running on.
//!
//! Edit lists are left out (`mp4_write.rs`): the video's first picture is shown at
//! its composition offset (two frames of B-frame delay, 80 ms at 25 fps, for
//! ffmpeg's x264) where the source's edit list shows it at 0.

use std::collections::VecDeque;
use std::ops::Range;

use super::mp4_tables::{samples, tables_of, Sample};
use super::mp4_write::{
    fragment, fragmented_init, KeptTrack, Part, RunSample, NON_SYNC_SAMPLE, SYNC_SAMPLE,
};
use super::TICKS_PER_SECOND;

/// The most source bytes held while a fragment's samples come in.
pub const MAX_WINDOW_BYTES: usize = 64 << 20;

#[derive(Debug)]
struct Track {
    /// The output's track id.
    id: u32,
    timescale: u32,
    video: bool,
    samples: Vec<Sample>,
    /// The decode time (this track's timescale) that is the clip's 0.
    base: u64,
}

/// The samples of one fragment: per track, a range of its samples.
#[derive(Debug)]
struct Planned {
    parts: Vec<(usize, Range<usize>)>,
    lo: u64,
    hi: u64,
}

/// See the module docs.
#[derive(Debug)]
pub struct Mp4Remux {
    init: Vec<u8>,
    tracks: Vec<Track>,
    plan: VecDeque<Planned>,
    sequence: u32,
    /// Where the clip's times start (90 kHz): the earlier chunks' length.
    offset_90k: i64,
    /// Where the planned video ends (90 kHz, from the clip's start).
    end_90k: i64,
    window: Vec<u8>,
    window_at: u64,
    gave_up: Option<String>,
}

/// Whether the `moov` in `head` is a plain MP4's (no `mvex`: its sample tables
/// hold the samples).
pub fn is_plain(head: &[u8]) -> bool {
    let children = super::boxes::children;
    children(head)
        .into_iter()
        .find(|(k, _)| k == b"moov")
        .is_some_and(|(_, m)| !children(m).iter().any(|(k, _)| k == b"mvex"))
}

impl Mp4Remux {
    /// From a plain MP4's head (its `ftyp`, if any, and its `moov`); an error
    /// saying what it lacks.
    pub fn new(head: &[u8]) -> Result<Mp4Remux, String> {
        let (init, kept) = fragmented_init(head, &|h| h == b"vide" || h == b"soun")?;
        Ok(Mp4Remux {
            init,
            tracks: Self::tracks(&kept, &kept)?,
            plan: VecDeque::new(),
            sequence: 0,
            offset_90k: 0,
            end_90k: 0,
            window: vec![],
            window_at: 0,
            gave_up: None,
        })
    }

    /// The next chunk of the same recording (module docs): `head` is its own; its
    /// tracks are put out as `self`'s of the same kind, its times from where
    /// `self`'s planned video ends.
    pub fn continuing(&self, head: &[u8]) -> Result<Mp4Remux, String> {
        let (_, kept) = fragmented_init(head, &|h| h == b"vide" || h == b"soun")?;
        let first: Vec<KeptTrack> = self
            .tracks
            .iter()
            .map(|t| KeptTrack {
                id: t.id,
                timescale: t.timescale,
                handler: if t.video { *b"vide" } else { *b"soun" },
                stbl: vec![],
            })
            .collect();
        Ok(Mp4Remux {
            init: self.init.clone(),
            tracks: Self::tracks(&kept, &first)?,
            plan: VecDeque::new(),
            sequence: self.sequence + self.plan.len() as u32,
            offset_90k: self.offset_90k + self.end_90k,
            end_90k: 0,
            window: vec![],
            window_at: 0,
            gave_up: None,
        })
    }

    /// The tracks `kept` of a source, put out under the ids of `out`'s tracks of
    /// the same kind (those `out` lacks are left out); the video first.
    fn tracks(kept: &[KeptTrack], out: &[KeptTrack]) -> Result<Vec<Track>, String> {
        let mut tracks: Vec<Track> = kept
            .iter()
            .filter_map(|k| {
                let o = out.iter().find(|o| o.handler == k.handler)?;
                Some(Track {
                    id: o.id,
                    timescale: k.timescale,
                    video: &k.handler == b"vide",
                    samples: samples(&tables_of(&k.stbl)),
                    base: 0,
                })
            })
            .collect();
        tracks.sort_by_key(|t| !t.video);
        match tracks.first() {
            Some(t) if t.video && !t.samples.is_empty() => Ok(tracks),
            Some(t) if t.video => Err("its video track has no samples in its tables".into()),
            _ => Err("it has no video track".into()),
        }
    }

    /// The init segment: what the output starts with.
    pub fn init_segment(&self) -> &[u8] {
        &self.init
    }

    /// The video samples, from video sample `from` (a keyframe: an index entry's
    /// frame number) to `to` (not included; `None`: to the end), and the other
    /// tracks' samples in their span: what is put out.
    pub fn select(&mut self, from: u64, to: Option<u64>) -> Result<(), String> {
        let video = &self.tracks[0].samples;
        let n = video.len();
        let from = usize::try_from(from).unwrap_or(usize::MAX);
        let to = to.map_or(n, |t| usize::try_from(t).unwrap_or(n).min(n));
        if from >= to {
            return Err(format!("no video sample from {from} to {to} (of {n})"));
        }
        if !video[from].sync {
            return Err(format!("video sample {from} is not a keyframe"));
        }
        let vts = u128::from(self.tracks[0].timescale);
        let time_of = |i: usize| -> u64 {
            match video.get(i) {
                Some(s) => s.dts,
                None => video[n - 1].dts + u64::from(video[n - 1].duration),
            }
        };
        let cuts: Vec<usize> = (from..to)
            .filter(|&i| i == from || video[i].sync)
            .chain(std::iter::once(to))
            .collect();
        let start = time_of(from);
        // Each track's clip start in its own timescale, and a cursor into it.
        let in_ts = |t: u64, ts: u32| (u128::from(t) * u128::from(ts) / vts) as u64;
        let bases: Vec<u64> = self
            .tracks
            .iter()
            .map(|t| in_ts(start, t.timescale))
            .collect();
        let mut cursors: Vec<usize> = self
            .tracks
            .iter()
            .zip(&bases)
            .map(|(t, &b)| t.samples.partition_point(|s| s.dts < b))
            .collect();
        cursors[0] = from;
        let last = cuts.len() - 1;
        for (k, w) in cuts.windows(2).enumerate() {
            let end = time_of(w[1]);
            let mut parts = vec![(0usize, w[0]..w[1])];
            for (t, track) in self.tracks.iter().enumerate().skip(1) {
                let c = cursors[t];
                // The last fragment takes the rest of an open-ended clip's audio.
                let stop = match (k == last - 1, to == n) {
                    (true, true) => track.samples.len(),
                    _ => {
                        let e = in_ts(end, track.timescale);
                        c + track.samples[c..].partition_point(|s| s.dts < e)
                    }
                };
                if stop > c {
                    parts.push((t, c..stop));
                }
                cursors[t] = stop;
            }
            let (lo, hi) = parts
                .iter()
                .flat_map(|(t, r)| self.tracks[*t].samples[r.clone()].iter())
                .fold((u64::MAX, 0), |(lo, hi), s| {
                    (lo.min(s.offset), hi.max(s.offset + u64::from(s.size)))
                });
            self.plan.push_back(Planned { parts, lo, hi });
        }
        let end_90k = ((u128::from(time_of(to) - start) * TICKS_PER_SECOND as u128) / vts) as i64;
        for (t, b) in self.tracks.iter_mut().zip(bases) {
            t.base = b;
        }
        self.end_90k = end_90k;
        Ok(())
    }

    /// The source bytes the selected samples lie in: what to [`Mp4Remux::feed`].
    pub fn byte_range(&self) -> Option<(u64, u64)> {
        let lo = self.plan.iter().map(|p| p.lo).min()?;
        let hi = self.plan.iter().map(|p| p.hi).max()?;
        Some((lo, hi))
    }

    /// The source's bytes at `offset` (each piece following the last): the
    /// fragments whose samples have all gone by.
    pub fn feed(&mut self, offset: u64, bytes: &[u8]) -> Vec<u8> {
        if self.gave_up.is_some() || self.plan.is_empty() {
            return vec![];
        }
        if self.window.is_empty() {
            self.window_at = offset;
        } else if offset != self.window_at + self.window.len() as u64 {
            self.gave_up = Some(format!("bytes at {offset} came out of order"));
            return vec![];
        }
        self.window.extend_from_slice(bytes);
        let mut out = vec![];
        let fed_end = self.window_at + self.window.len() as u64;
        while let Some(p) = self.plan.front() {
            if p.hi > fed_end {
                break;
            }
            if p.lo < self.window_at {
                self.gave_up = Some(format!(
                    "a fragment's samples start at byte {}, before the bytes read from {}",
                    p.lo, self.window_at
                ));
                return out;
            }
            let p = self.plan.pop_front().expect("looked at above");
            out.extend(self.emit(&p));
        }
        // Hold only what the next fragment needs.
        let keep_from = self
            .plan
            .iter()
            .map(|p| p.lo)
            .min()
            .unwrap_or(fed_end)
            .min(fed_end);
        if keep_from > self.window_at {
            let cut = (keep_from - self.window_at) as usize;
            self.window.drain(..cut.min(self.window.len()));
            self.window_at = keep_from;
        }
        if self.window.len() > MAX_WINDOW_BYTES {
            self.gave_up = Some(format!(
                "a fragment's samples spread over more than {MAX_WINDOW_BYTES} bytes"
            ));
            self.window = vec![];
        }
        out
    }

    fn emit(&mut self, p: &Planned) -> Vec<u8> {
        self.sequence = self.sequence.wrapping_add(1);
        let mut runs: Vec<(u32, u64, Vec<RunSample>, Vec<u8>)> = vec![];
        for (t, r) in &p.parts {
            let track = &self.tracks[*t];
            let ss = &track.samples[r.clone()];
            let offset = (i128::from(self.offset_90k) * i128::from(track.timescale)
                / i128::from(TICKS_PER_SECOND)) as u64;
            let base = ss[0].dts - track.base + offset;
            let mut data = Vec::with_capacity(ss.iter().map(|s| s.size as usize).sum());
            let run = ss
                .iter()
                .map(|s| {
                    let at = (s.offset - self.window_at) as usize;
                    data.extend_from_slice(&self.window[at..at + s.size as usize]);
                    RunSample {
                        duration: s.duration,
                        size: s.size,
                        flags: if s.sync { SYNC_SAMPLE } else { NON_SYNC_SAMPLE },
                        cto: s.cto,
                    }
                })
                .collect();
            runs.push((track.id, base, run, data));
        }
        let parts: Vec<Part> = runs
            .iter()
            .map(|(track, base, samples, data)| Part {
                track: *track,
                base: *base,
                samples,
                data,
            })
            .collect();
        fragment(self.sequence, &parts)
    }

    /// Fragments not put out (their bytes never all came), once the source has
    /// been fed: 0 for a whole clip.
    pub fn left(&self) -> usize {
        self.plan.len()
    }

    /// Why the rest was left out, if it was.
    pub fn gave_up(&self) -> Option<&str> {
        self.gave_up.as_deref()
    }
}
