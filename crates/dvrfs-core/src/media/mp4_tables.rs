//! A plain (non-fragmented) MP4's frames, from its video track's sample tables in the
//! `moov` (ISO/IEC 14496-12 8.6-8.7): sizes (`stsz`), chunk offsets (`stco`, `co64`),
//! samples per chunk (`stsc`), decode durations (`stts`), composition offsets (`ctts`)
//! and sync samples (`stss`; none: every sample is one). The tables describe the
//! whole file at once, so the frames are made at the end of the file, when the
//! `moov` has gone by wherever it was (at the start with `-movflags faststart`, at
//! the end by default).
//!
//! Bounds: the tables are in a `moov` of at most 16 MiB; at most [`MAX_SAMPLES`]
//! samples are made (a count above it is damage, cut to it); run-length entries are
//! expanded only up to that count.

use super::be::{u32_at, u64_at};
use super::{Frame, TICKS_PER_SECOND};

/// The most samples made from one track: 2^20, 11.6 hours at 25 fps (a longer plain
/// MP4 is indexed up to there; recordings are fragmented or chunked well before).
const MAX_SAMPLES: usize = 1 << 20;

/// A full box's entry count at offset 4 and its entries of `width` bytes from
/// offset 8, as many as the box holds.
fn entries(b: &[u8], width: usize) -> impl Iterator<Item = &[u8]> {
    let n = u32_at(b, 4).unwrap_or(0) as usize;
    b.get(8..).unwrap_or(&[]).chunks_exact(width).take(n)
}

/// The boxes of an `stbl` a plain MP4's frames are made from.
pub struct Tables<'a> {
    pub stsz: Option<&'a [u8]>,
    pub stco: Option<&'a [u8]>,
    pub co64: Option<&'a [u8]>,
    pub stsc: Option<&'a [u8]>,
    pub stts: Option<&'a [u8]>,
    pub ctts: Option<&'a [u8]>,
    pub stss: Option<&'a [u8]>,
}

/// One sample as the tables give it, in the track's timescale.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sample {
    pub offset: u64,
    pub size: u32,
    /// Decode time, from the track's start.
    pub dts: u64,
    pub duration: u32,
    /// Composition offset: presentation time less decode time.
    pub cto: i32,
    pub sync: bool,
}

/// The tables of an `stbl`'s payload.
pub fn tables_of(stbl: &[u8]) -> Tables<'_> {
    let child = |kind: &[u8; 4]| {
        super::boxes::children(stbl)
            .into_iter()
            .find(|(k, _)| k == kind)
            .map(|(_, p)| p)
    };
    Tables {
        stsz: child(b"stsz"),
        stco: child(b"stco"),
        co64: child(b"co64"),
        stsc: child(b"stsc"),
        stts: child(b"stts"),
        ctts: child(b"ctts"),
        stss: child(b"stss"),
    }
}

/// The samples the tables describe, in decode order; empty when a table that is
/// needed is missing.
pub fn samples(t: &Tables) -> Vec<Sample> {
    let Some(stsz) = t.stsz else {
        return Vec::new();
    };
    let uniform = u32_at(stsz, 4).unwrap_or(0);
    let count = (u32_at(stsz, 8).unwrap_or(0) as usize).min(MAX_SAMPLES);
    let sizes: Vec<u32> = if uniform != 0 {
        vec![uniform; count]
    } else {
        stsz.get(12..)
            .unwrap_or(&[])
            .chunks_exact(4)
            .take(count)
            .map(|e| u32_at(e, 0).unwrap_or(0))
            .collect()
    };
    let chunk_offsets: Vec<u64> = match (t.stco, t.co64) {
        (Some(b), _) => entries(b, 4)
            .map(|e| u64::from(u32_at(e, 0).unwrap_or(0)))
            .collect(),
        (None, Some(b)) => entries(b, 8).map(|e| u64_at(e, 0).unwrap_or(0)).collect(),
        (None, None) => return Vec::new(),
    };
    // stsc: (first chunk, 1-based; samples per chunk) runs.
    let runs: Vec<(usize, usize)> = t
        .stsc
        .map(|b| {
            entries(b, 12)
                .map(|e| {
                    (
                        u32_at(e, 0).unwrap_or(1) as usize,
                        u32_at(e, 4).unwrap_or(0) as usize,
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    let mut offsets = Vec::with_capacity(sizes.len());
    'chunks: for (c, &chunk_at) in chunk_offsets.iter().enumerate() {
        let per = runs
            .iter()
            .take_while(|(first, _)| *first <= c + 1)
            .last()
            .map_or(0, |r| r.1);
        let mut at = chunk_at;
        for _ in 0..per {
            let Some(&size) = sizes.get(offsets.len()) else {
                break 'chunks;
            };
            offsets.push(at);
            at = at.saturating_add(u64::from(size));
        }
    }
    let n = offsets.len();
    let durations = expand(t.stts, n);
    let ctts = expand(t.ctts, n);
    let sync: Option<std::collections::BTreeSet<u32>> = t
        .stss
        .map(|b| entries(b, 4).filter_map(|e| u32_at(e, 0)).collect());
    let mut dts = 0u64;
    (0..n)
        .map(|i| {
            let duration = durations.get(i).copied().unwrap_or(0);
            let s = Sample {
                offset: offsets[i],
                size: sizes[i],
                dts,
                duration,
                cto: ctts.get(i).copied().unwrap_or(0) as i32,
                sync: sync.as_ref().is_none_or(|s| s.contains(&(i as u32 + 1))),
            };
            dts = dts.saturating_add(u64::from(duration));
            s
        })
        .collect()
}

/// The frames the tables describe, in decode order; empty when a table that is
/// needed is missing.
pub fn frames(t: &Tables, timescale: u32) -> Vec<Frame> {
    let ts = i128::from(timescale.max(1));
    samples(t)
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let pts = (s.dts as i64).saturating_add(i64::from(s.cto));
            Frame {
                offset: s.offset,
                data_offset: s.offset,
                len: u64::from(s.size),
                number: i as u64,
                pts_90k: (i128::from(pts) * i128::from(TICKS_PER_SECOND) / ts) as i64,
                keyframe: s.sync,
                discontinuity: false,
            }
        })
        .collect()
}

/// A run-length table (`stts`, `ctts`: count, value) expanded to at most `n` values.
fn expand(b: Option<&[u8]>, n: usize) -> Vec<u32> {
    let mut out = Vec::with_capacity(n);
    if let Some(b) = b {
        for e in entries(b, 8) {
            let count = u32_at(e, 0).unwrap_or(0) as usize;
            let value = u32_at(e, 4).unwrap_or(0);
            let take = count.min(n - out.len());
            out.extend(std::iter::repeat_n(value, take));
            if out.len() == n {
                break;
            }
        }
    }
    out
}
