//! Fragmented MP4 written from a source's `moov` (ISO/IEC 14496-12 8.8): what
//! trick play (`trick_mp4.rs`) and a plain MP4 played or cut from a keyframe
//! (`remux_mp4.rs`) put out.
//!
//! **The init segment** is made from the source's `moov` (an fMP4's init segment,
//! or a plain MP4's `moov`, sample tables and all): the tracks kept (each `tkhd`,
//! and its `mdia` with the sample description, `stsd`, as it was, so the decoder is
//! configured exactly as for the source), their sample tables emptied, every
//! duration set to 0 (a plain MP4's would give the output the source's length),
//! edit lists dropped (they shift the source's times, not the output's), and an
//! `mvex` with one `trex` a track. `udta`, `meta` and the source's `mvex` (its
//! `mehd` is the source's length) are left out.
//!
//! **A fragment** is a `moof` (`mfhd` with its sequence number; a `traf` a track:
//! `tfhd` with `default-base-is-moof`, a `tfdt`, a `trun` giving each sample's
//! duration, size, flags and composition offset) and an `mdat` with the samples'
//! bytes, which go through unchanged: nothing is re-encoded.

use super::be::{be32, be64, u32_at};
use super::boxes::children;

/// `tfhd` flags: `default-base-is-moof`.
const BASE_IS_MOOF: u32 = 0x02_0000;
/// `trun` flags: data offset, and each sample's duration, size, flags and
/// composition offset present.
const TRUN_FIELDS: u32 = 0x0001 | 0x0100 | 0x0200 | 0x0400 | 0x0800;
/// A sample's flags: depends on no other (`sample_depends_on` = 2), a sync sample.
pub const SYNC_SAMPLE: u32 = 0x0200_0000;
/// A sample's flags: depends on others (`sample_depends_on` = 1), not a sync sample.
pub const NON_SYNC_SAMPLE: u32 = 0x0101_0000;

/// A box of `kind` around `payload`: a 32-bit size, or a 64-bit one past 4 GiB.
pub fn boxed(kind: &[u8; 4], payload: &[u8]) -> Vec<u8> {
    let mut b = Vec::with_capacity(payload.len() + 16);
    let small = u32::try_from(payload.len() + 8);
    b.extend_from_slice(&be32(*small.as_ref().unwrap_or(&1)));
    b.extend_from_slice(kind);
    if small.is_err() {
        b.extend_from_slice(&be64(payload.len() as u64 + 16));
    }
    b.extend_from_slice(payload);
    b
}

/// A full box: version, flags, then `body`.
pub fn full(kind: &[u8; 4], version: u8, flags: u32, body: &[u8]) -> Vec<u8> {
    let vf = (u32::from(version) << 24) | (flags & 0x00FF_FFFF);
    boxed(kind, &[&be32(vf)[..], body].concat())
}

/// A `mvhd`, `tkhd` or `mdhd` payload with its duration set to 0; `None` if it is
/// too short to hold one. The duration is at (`v0`, `v1`) bytes into the payload,
/// 4 bytes wide in version 0 and 8 in version 1.
fn zero_duration(p: &[u8], v0: usize, v1: usize) -> Option<Vec<u8>> {
    let mut out = p.to_vec();
    let (at, width) = match p.first()? {
        1 => (v1, 8),
        _ => (v0, 4),
    };
    out.get_mut(at..at + width)?.fill(0);
    Some(out)
}

fn child<'a>(b: &'a [u8], kind: &[u8; 4]) -> Option<&'a [u8]> {
    children(b)
        .into_iter()
        .find(|(k, _)| k == kind)
        .map(|(_, p)| p)
}

/// A track of the source kept in the output.
#[derive(Clone, Debug)]
pub struct KeptTrack {
    pub id: u32,
    pub timescale: u32,
    /// The `hdlr` type: `vide`, `soun`, ...
    pub handler: [u8; 4],
    /// The source's `stbl` payload (a plain MP4's sample tables are in it).
    pub stbl: Vec<u8>,
}

/// A `trak` rebuilt (module docs), and what it is; `None` for one without a
/// sample description, an id or a timescale.
fn emptied_trak(trak: &[u8]) -> Option<(Vec<u8>, KeptTrack)> {
    let mdia = child(trak, b"mdia")?;
    let handler: [u8; 4] = child(mdia, b"hdlr")?.get(8..12)?.try_into().ok()?;
    let tkhd = child(trak, b"tkhd")?;
    let id = u32_at(tkhd, if tkhd.first() == Some(&1) { 20 } else { 12 })?;
    let mdhd = child(mdia, b"mdhd")?;
    let timescale = u32_at(mdhd, if mdhd.first() == Some(&1) { 20 } else { 12 })?;
    if id == 0 || timescale == 0 {
        return None;
    }
    let minf = child(mdia, b"minf")?;
    let stbl = child(minf, b"stbl")?;
    let stsd = child(stbl, b"stsd")?;
    let empty_stbl = [
        boxed(b"stsd", stsd),
        full(b"stts", 0, 0, &be32(0)),
        full(b"stsc", 0, 0, &be32(0)),
        full(b"stsz", 0, 0, &[0u8; 8]),
        full(b"stco", 0, 0, &be32(0)),
    ]
    .concat();
    let new_minf: Vec<u8> = children(minf)
        .into_iter()
        .flat_map(|(k, p)| match &k {
            b"stbl" => boxed(b"stbl", &empty_stbl),
            _ => boxed(&k, p),
        })
        .collect();
    let mut new_mdia = vec![];
    for (k, p) in children(mdia) {
        new_mdia.extend(match &k {
            b"mdhd" => boxed(b"mdhd", &zero_duration(p, 16, 24)?),
            b"minf" => boxed(b"minf", &new_minf),
            _ => boxed(&k, p),
        });
    }
    let new_trak = [
        boxed(b"tkhd", &zero_duration(tkhd, 20, 28)?),
        boxed(b"mdia", &new_mdia),
    ]
    .concat();
    let kept = KeptTrack {
        id,
        timescale,
        handler,
        stbl: stbl.to_vec(),
    };
    Some((boxed(b"trak", &new_trak), kept))
}

/// The init segment of the tracks of `head` (its `ftyp`, if any, and a `moov`)
/// whose handler `keep` takes, at most one a handler (the first): the segment, and
/// the tracks in its order. An error says what the head lacks; a head with no
/// video track kept is refused.
pub fn fragmented_init(
    head: &[u8],
    keep: &dyn Fn(&[u8; 4]) -> bool,
) -> Result<(Vec<u8>, Vec<KeptTrack>), String> {
    let ftyp = child(head, b"ftyp");
    let moov = child(head, b"moov").ok_or("the head has no moov")?;
    let mut mvhd = None;
    let (mut traks, mut kept): (Vec<u8>, Vec<KeptTrack>) = (vec![], vec![]);
    for (k, p) in children(moov) {
        match &k {
            b"mvhd" if mvhd.is_none() => {
                mvhd = Some(zero_duration(p, 16, 24).ok_or("the mvhd is too short")?);
            }
            b"trak" => {
                let Some((trak, t)) = emptied_trak(p) else {
                    continue;
                };
                if keep(&t.handler) && !kept.iter().any(|k| k.handler == t.handler) {
                    traks.extend(trak);
                    kept.push(t);
                }
            }
            _ => {}
        }
    }
    let mvhd = mvhd.ok_or("the moov has no mvhd")?;
    if !kept.iter().any(|t| &t.handler == b"vide") {
        return Err("the moov has no video track with a sample description".into());
    }
    let mvex: Vec<u8> = kept
        .iter()
        .flat_map(|t| {
            // The first sample description; no default duration, size or flags:
            // every trun gives its own.
            let trex: Vec<u8> = [t.id, 1, 0, 0, 0].iter().flat_map(|&v| be32(v)).collect();
            full(b"trex", 0, 0, &trex)
        })
        .collect();
    let moov = [boxed(b"mvhd", &mvhd), traks, boxed(b"mvex", &mvex)].concat();
    let mut init = ftyp.map_or_else(Vec::new, |p| boxed(b"ftyp", p));
    init.extend(boxed(b"moov", &moov));
    Ok((init, kept))
}

/// A sample as a `trun` lists it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RunSample {
    pub duration: u32,
    pub size: u32,
    pub flags: u32,
    /// Presentation time less decode time.
    pub cto: i32,
}

/// One track's part of a fragment: its samples from decode time `base` (its
/// timescale), and their bytes, back to back.
pub struct Part<'a> {
    pub track: u32,
    pub base: u64,
    pub samples: &'a [RunSample],
    pub data: &'a [u8],
}

/// Fragment `sequence` of `parts` (module docs): its `moof` and `mdat`.
pub fn fragment(sequence: u32, parts: &[Part]) -> Vec<u8> {
    let moof = |data_at: u32| {
        let mut trafs = full(b"mfhd", 0, 0, &be32(sequence));
        let mut at = data_at;
        for p in parts {
            let mut run = [be32(p.samples.len() as u32), be32(at)].concat();
            for s in p.samples {
                for v in [s.duration, s.size, s.flags, s.cto as u32] {
                    run.extend(be32(v));
                }
            }
            let traf = [
                full(b"tfhd", 0, BASE_IS_MOOF, &be32(p.track)),
                full(b"tfdt", 1, 0, &be64(p.base)),
                full(b"trun", 1, TRUN_FIELDS, &run),
            ]
            .concat();
            trafs.extend(boxed(b"traf", &traf));
            at = at.saturating_add(p.data.len() as u32);
        }
        boxed(b"moof", &trafs)
    };
    let data: Vec<u8> = parts.iter().flat_map(|p| p.data.iter().copied()).collect();
    let mdat = boxed(b"mdat", &data);
    // The samples start past the moof and the mdat's header (16 bytes past 4 GiB).
    let moof_len = moof(0).len();
    let mut out = moof((moof_len + mdat.len() - data.len()) as u32);
    debug_assert_eq!(out.len(), moof_len, "data offsets are fixed-width fields");
    out.extend(mdat);
    out
}
