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

#[derive(Clone, Debug)]
struct Track {
    /// The output's track id.
    id: u32,
    timescale: u32,
    /// The `hdlr` type: `vide` or `soun`.
    handler: [u8; 4],
    samples: Vec<Sample>,
    /// The decode time (this track's timescale) that is the clip's 0.
    base: u64,
}

impl Track {
    fn video(&self) -> bool {
        &self.handler == b"vide"
    }
}

/// The samples of one fragment: per track, a range of its samples.
#[derive(Clone, Debug)]
struct Planned {
    parts: Vec<(usize, Range<usize>)>,
    lo: u64,
    hi: u64,
}

/// See the module docs.
#[derive(Clone, Debug)]
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
        let ids: Vec<([u8; 4], u32)> = kept.iter().map(|k| (k.handler, k.id)).collect();
        Ok(Self::starting(init, Self::tracks(&kept, &ids)?, 0, 0))
    }

    /// The next chunk of the same recording (module docs): `head` is its own; its
    /// tracks are put out as `self`'s of the same kind, its times from where
    /// `self`'s planned video ends.
    pub fn continuing(&self, head: &[u8]) -> Result<Mp4Remux, String> {
        let (_, kept) = fragmented_init(head, &|h| h == b"vide" || h == b"soun")?;
        let ids: Vec<([u8; 4], u32)> = self.tracks.iter().map(|t| (t.handler, t.id)).collect();
        Ok(Self::starting(
            self.init.clone(),
            Self::tracks(&kept, &ids)?,
            self.sequence.wrapping_add(self.plan.len() as u32),
            self.offset_90k.saturating_add(self.end_90k),
        ))
    }

    /// A remux of `tracks` after `init`, its fragments numbered on from
    /// `sequence`, its times from `offset_90k`; nothing selected yet.
    fn starting(init: Vec<u8>, tracks: Vec<Track>, sequence: u32, offset_90k: i64) -> Mp4Remux {
        Mp4Remux {
            init,
            tracks,
            plan: VecDeque::new(),
            sequence,
            offset_90k,
            end_90k: 0,
            window: vec![],
            window_at: 0,
            gave_up: None,
        }
    }

    /// The tracks `kept` of a source, put out under the ids `ids` gives their kind
    /// (handler) (a kind it lacks is left out); the video first.
    fn tracks(kept: &[KeptTrack], ids: &[([u8; 4], u32)]) -> Result<Vec<Track>, String> {
        let mut tracks: Vec<Track> = kept
            .iter()
            .filter_map(|k| {
                let &(handler, id) = ids.iter().find(|(h, _)| *h == k.handler)?;
                Some(Track {
                    id,
                    timescale: k.timescale,
                    handler,
                    samples: samples(&tables_of(&k.stbl)),
                    base: 0,
                })
            })
            .collect();
        tracks.sort_by_key(|t| !t.video());
        match tracks.first() {
            Some(t) if t.video() && !t.samples.is_empty() => Ok(tracks),
            Some(t) if t.video() => Err("its video track has no samples in its tables".into()),
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
                None => video[n - 1]
                    .dts
                    .saturating_add(u64::from(video[n - 1].duration)),
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
                    (
                        lo.min(s.offset),
                        hi.max(s.offset.saturating_add(u64::from(s.size))),
                    )
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
            let base = (ss[0].dts - track.base).saturating_add(offset);
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::media::be::be32;
    use crate::media::mp4_write::{boxed, full};
    use crate::media::{Container, Indexer};

    /// A full box of u32 fields.
    fn table(kind: &[u8; 4], fields: &[u32]) -> Vec<u8> {
        full(
            kind,
            0,
            0,
            &fields.iter().flat_map(|&v| be32(v)).collect::<Vec<_>>(),
        )
    }

    /// A plain MP4: four 40-ms video frames (keyframes 0 and 2; 90 kHz) and eight
    /// 20-ms audio frames (48 kHz), interleaved two video frames then four audio
    /// frames; video sample `i` is 100 bytes of `i`, audio `j` 50 bytes of `0x80 + j`.
    /// (the file, its head: `ftyp` and `moov`).
    fn plain_file() -> (Vec<u8>, Vec<u8>) {
        let ftyp = boxed(b"ftyp", b"isom\0\0\0\x01");
        let mut data = vec![];
        let mdat_at = (ftyp.len() + 8) as u32;
        let (mut vchunks, mut achunks) = (vec![], vec![]);
        for half in 0..2u8 {
            vchunks.push(mdat_at + data.len() as u32);
            for i in 0..2 {
                data.extend([half * 2 + i; 100]);
            }
            achunks.push(mdat_at + data.len() as u32);
            for j in 0..4 {
                data.extend([0x80 + half * 4 + j; 50]);
            }
        }
        let trak = |id: u32, handler: &[u8; 4], ts: u32, stbl: Vec<u8>| {
            let mut tkhd = vec![0u8; 84];
            tkhd[12..16].copy_from_slice(&be32(id));
            let mut mdhd = vec![0u8; 24];
            mdhd[12..16].copy_from_slice(&be32(ts));
            let mut hdlr = vec![0u8; 24];
            hdlr[8..12].copy_from_slice(handler);
            let minf = boxed(b"minf", &boxed(b"stbl", &stbl));
            let mdia = [boxed(b"mdhd", &mdhd), boxed(b"hdlr", &hdlr), minf].concat();
            boxed(
                b"trak",
                &[boxed(b"tkhd", &tkhd), boxed(b"mdia", &mdia)].concat(),
            )
        };
        let stsd = boxed(b"stsd", b"\0\0\0\0\0\0\0\x01an entry");
        let video = [
            stsd.clone(),
            table(b"stts", &[1, 4, 3600]),
            table(b"stss", &[2, 1, 3]),
            table(b"stsz", &[0, 4, 100, 100, 100, 100]),
            table(b"stsc", &[1, 1, 2, 1]),
            table(b"stco", &[2, vchunks[0], vchunks[1]]),
        ]
        .concat();
        let audio = [
            stsd,
            table(b"stts", &[1, 8, 960]),
            table(b"stsz", &[50, 8]),
            table(b"stsc", &[1, 1, 4, 1]),
            table(b"stco", &[2, achunks[0], achunks[1]]),
        ]
        .concat();
        let moov = boxed(
            b"moov",
            &[
                boxed(b"mvhd", &[0; 100]),
                trak(1, b"vide", 90_000, video),
                trak(2, b"soun", 48_000, audio),
            ]
            .concat(),
        );
        let file = [ftyp.clone(), boxed(b"mdat", &data), moov.clone()].concat();
        (file, [ftyp, moov].concat())
    }

    /// What `r` puts out for `file` fed in `piece`-byte pieces from its byte range.
    fn run(r: &mut Mp4Remux, file: &[u8], piece: usize) -> Vec<u8> {
        let (lo, hi) = r.byte_range().expect("samples selected");
        let mut out = r.init_segment().to_vec();
        let mut at = lo as usize;
        for p in file[lo as usize..hi as usize].chunks(piece) {
            out.extend(r.feed(at as u64, p));
            at += p.len();
        }
        out
    }

    #[test]
    fn the_samples_from_a_keyframe_go_out_as_fragments_whatever_the_split() {
        let (file, head) = plain_file();
        for (from, want) in [(0u64, vec![0u8, 1, 2, 3]), (2, vec![2, 3])] {
            for piece in [1, 7, 1000] {
                let mut r = Mp4Remux::new(&head).expect("a plain MP4");
                r.select(from, None).expect("a keyframe");
                let out = run(&mut r, &file, piece);
                assert_eq!((r.left(), r.gave_up()), (0, None));
                let mut ix = Indexer::new();
                ix.feed(&out);
                assert_eq!(ix.container(), Container::Mp4);
                let frames = ix.drain();
                let firsts: Vec<u8> = frames.iter().map(|f| out[f.data_offset as usize]).collect();
                assert_eq!(firsts, want, "from {from}, pieces of {piece}");
                let pts: Vec<i64> = frames.iter().map(|f| f.pts_90k).collect();
                assert_eq!(
                    pts,
                    (0..want.len() as i64).map(|i| i * 3600).collect::<Vec<_>>()
                );
                let keys: Vec<bool> = frames.iter().map(|f| f.keyframe).collect();
                assert!(keys[0]);
                assert_eq!(keys.iter().filter(|&&k| k).count(), want.len() / 2);
                // The audio from the keyframe's time on, each frame once.
                let audio: Vec<u8> = (0x80..0x88u8)
                    .filter(|b| out.windows(50).any(|w| w.iter().all(|x| x == b)))
                    .collect();
                let first_audio = 0x80 + 2 * from as u8;
                assert_eq!(audio, (first_audio..0x88).collect::<Vec<_>>());
            }
        }
    }

    #[test]
    fn bytes_out_of_order_or_not_a_keyframe_are_refused_saying_so() {
        let (file, head) = plain_file();
        let mut r = Mp4Remux::new(&head).expect("a plain MP4");
        assert!(r.select(1, None).unwrap_err().contains("not a keyframe"));
        r.select(0, Some(2)).expect("the first GOP");
        let (lo, hi) = r.byte_range().unwrap();
        let mid = (lo + hi) / 2;
        // Read from the middle: the fragment's first bytes never came.
        assert!(r.feed(mid, &file[mid as usize..hi as usize]).is_empty());
        assert_eq!(r.left(), 1);
        let why = r.gave_up().expect("gave up");
        assert!(why.contains("before the bytes read"), "{why}");
        // A piece that does not follow the last.
        let mut r = Mp4Remux::new(&head).expect("a plain MP4");
        r.select(0, None).expect("all of it");
        assert!(r.feed(lo, &file[lo as usize..lo as usize + 10]).is_empty());
        assert!(r.feed(lo + 20, &file[lo as usize + 20..]).is_empty());
        assert_eq!(r.left(), 2);
        let why = r.gave_up().expect("gave up");
        assert!(why.contains("out of order"), "{why}");
        assert!(Mp4Remux::new(b"not an mp4").is_err());
    }
}
