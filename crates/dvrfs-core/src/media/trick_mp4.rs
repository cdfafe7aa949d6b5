//! Trick play's output for an MP4, fragmented or plain: keyframes alone, as a
//! fragmented MP4 a player shows as smooth fast motion (`play --speed`), and a
//! keyframe alone as a file that plays on its own (`dvrfs keyframe`).
//!
//! **The init segment** is made from the source's `moov` (an fMP4's init segment,
//! or a plain MP4's `moov`, sample tables and all): the video track alone (its
//! `tkhd`, and its `mdia` with the sample description, `stsd`, as it was, so the
//! decoder is configured exactly as for the source), its sample tables emptied,
//! every duration set to 0 (a plain MP4's would give the output the source's
//! length), its edit list dropped (it shifts the source's times, not the
//! output's), and an `mvex` with one `trex` for it. Audio tracks, `udta`, `meta`
//! and the source's `mvex` (its `mehd` is the source's length) are left out.
//!
//! **Each keyframe** is one fragment: a `moof` (`mfhd` numbered from 1; one `traf`:
//! `tfhd` with `default-base-is-moof`, a `tfdt` with the time it is shown, a `trun`
//! of one sample with its duration, size and sync flags) and an `mdat` with the
//! sample's bytes, which go through unchanged: nothing is re-encoded.
//!
//! What cannot be made sense of is refused at [`TrickMp4::new`] with what it
//! lacks, never guessed.

use super::be::{be32, be64, u32_at};
use super::mp4::children;
use super::TICKS_PER_SECOND;

/// `tfhd` flags: `default-base-is-moof`.
const BASE_IS_MOOF: u32 = 0x02_0000;
/// `trun` flags: data offset, and each sample's duration, size and flags present.
const TRUN_FIELDS: u32 = 0x0001 | 0x0100 | 0x0200 | 0x0400;
/// A sample's flags: depends on no other (`sample_depends_on` = 2), a sync sample.
const SYNC_SAMPLE: u32 = 0x0200_0000;

/// A box of `kind` around `payload`: a 32-bit size, or a 64-bit one past 4 GiB.
fn boxed(kind: &[u8; 4], payload: &[u8]) -> Vec<u8> {
    let mut b = Vec::with_capacity(payload.len() + 16);
    match u32::try_from(payload.len() + 8) {
        Ok(size) => b.extend_from_slice(&be32(size)),
        Err(_) => b.extend_from_slice(&be32(1)),
    }
    b.extend_from_slice(kind);
    if u32::try_from(payload.len() + 8).is_err() {
        b.extend_from_slice(&be64(payload.len() as u64 + 16));
    }
    b.extend_from_slice(payload);
    b
}

/// A full box: version, flags, then `body`.
fn full(kind: &[u8; 4], version: u8, flags: u32, body: &[u8]) -> Vec<u8> {
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

/// See the module docs.
#[derive(Debug)]
pub struct TrickMp4 {
    init: Vec<u8>,
    track: u32,
    timescale: u32,
    sequence: u32,
}

/// The video track of a `moov`, rebuilt (module docs): (`trak`, id, timescale).
fn video_trak(trak: &[u8]) -> Option<(Vec<u8>, u32, u32)> {
    let mdia = children(trak).into_iter().find(|(k, _)| k == b"mdia")?.1;
    let parts = children(mdia);
    let find = |kind: &[u8; 4]| parts.iter().find(|(k, _)| k == kind).map(|(_, p)| *p);
    if find(b"hdlr").and_then(|h| h.get(8..12)) != Some(b"vide") {
        return None;
    }
    let tkhd = children(trak).into_iter().find(|(k, _)| k == b"tkhd")?.1;
    let id = u32_at(tkhd, if tkhd.first() == Some(&1) { 20 } else { 12 })?;
    let mdhd = find(b"mdhd")?;
    let timescale = u32_at(mdhd, if mdhd.first() == Some(&1) { 20 } else { 12 })?;
    if id == 0 || timescale == 0 {
        return None;
    }
    let minf = find(b"minf")?;
    let stbl = children(minf).into_iter().find(|(k, _)| k == b"stbl")?.1;
    let stsd = children(stbl).into_iter().find(|(k, _)| k == b"stsd")?.1;
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
        .map(|(k, p)| match &k {
            b"stbl" => boxed(b"stbl", &empty_stbl),
            _ => boxed(&k, p),
        })
        .collect::<Vec<_>>()
        .concat();
    let mut new_mdia = vec![];
    for (k, p) in parts {
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
    Some((boxed(b"trak", &new_trak), id, timescale))
}

impl TrickMp4 {
    /// From an MP4's head: its `ftyp` (if any) and a `moov` (an fMP4's init segment,
    /// or a plain MP4's `moov`); an error saying what it lacks.
    pub fn new(head: &[u8]) -> Result<TrickMp4, String> {
        let top = children(head);
        let ftyp = top.iter().find(|(k, _)| k == b"ftyp").map(|(_, p)| *p);
        let moov = top
            .iter()
            .find(|(k, _)| k == b"moov")
            .map(|(_, p)| *p)
            .ok_or("the head has no moov")?;
        let mut mvhd = None;
        let mut video = None;
        for (k, p) in children(moov) {
            match &k {
                b"mvhd" if mvhd.is_none() => {
                    mvhd = Some(zero_duration(p, 16, 24).ok_or("the mvhd is too short")?);
                }
                b"trak" if video.is_none() => video = video_trak(p),
                _ => {}
            }
        }
        let mvhd = mvhd.ok_or("the moov has no mvhd")?;
        let (trak, track, timescale) =
            video.ok_or("the moov has no video track with a sample description")?;
        let trex = [
            track, 1, // the first sample description
            0, // default duration, size and flags: every trun gives its own
            0, 0,
        ]
        .iter()
        .flat_map(|&v| be32(v))
        .collect::<Vec<u8>>();
        let moov = [
            boxed(b"mvhd", &mvhd),
            trak,
            boxed(b"mvex", &full(b"trex", 0, 0, &trex)),
        ]
        .concat();
        let mut init = ftyp.map_or_else(Vec::new, |p| boxed(b"ftyp", p));
        init.extend(boxed(b"moov", &moov));
        Ok(TrickMp4 {
            init,
            track,
            timescale,
            sequence: 0,
        })
    }

    /// The init segment: what the output starts with.
    pub fn init_segment(&self) -> &[u8] {
        &self.init
    }

    /// The video track's timescale (ticks a second).
    pub fn timescale(&self) -> u32 {
        self.timescale
    }

    /// One keyframe's `sample` (its bytes in the source's `mdat`) as a fragment
    /// shown at `pts_90k` for `duration_90k` (90 kHz ticks; a negative time is 0).
    pub fn keyframe(&mut self, sample: &[u8], pts_90k: i64, duration_90k: i64) -> Vec<u8> {
        self.sequence = self.sequence.wrapping_add(1);
        let ticks = |t: i64| {
            (i128::from(t.max(0)) * i128::from(self.timescale) / i128::from(TICKS_PER_SECOND))
                as u64
        };
        let duration = u32::try_from(ticks(duration_90k)).unwrap_or(u32::MAX);
        let size = u32::try_from(sample.len()).unwrap_or(u32::MAX);
        let trun = |data_offset: u32| {
            let body: Vec<u8> = [1, data_offset, duration, size, SYNC_SAMPLE]
                .iter()
                .flat_map(|&v| be32(v))
                .collect();
            full(b"trun", 0, TRUN_FIELDS, &body)
        };
        let moof = |data_offset: u32| {
            let traf = [
                full(b"tfhd", 0, BASE_IS_MOOF, &be32(self.track)),
                full(b"tfdt", 1, 0, &be64(ticks(pts_90k))),
                trun(data_offset),
            ]
            .concat();
            boxed(
                b"moof",
                &[
                    full(b"mfhd", 0, 0, &be32(self.sequence)),
                    boxed(b"traf", &traf),
                ]
                .concat(),
            )
        };
        // The sample starts past the moof and the mdat's header (16 bytes past 4 GiB).
        let mdat = boxed(b"mdat", sample);
        let mdat_header = mdat.len() - sample.len();
        let moof_len = moof(0).len();
        let mut out = moof((moof_len + mdat_header) as u32);
        debug_assert_eq!(
            out.len(),
            moof_len,
            "the data offset is a fixed-width field"
        );
        out.extend(mdat);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::media::{Container, Indexer};

    /// A plain MP4's `moov`: an audio track, then a video track with two samples'
    /// tables and an edit list, a duration everywhere.
    fn plain_moov() -> Vec<u8> {
        let mvhd = {
            let mut p = vec![0u8; 100];
            p[12..16].copy_from_slice(&be32(1000));
            p[16..20].copy_from_slice(&be32(60_000));
            p
        };
        let trak = |id: u32, handler: &[u8; 4], ts: u32| {
            let mut tkhd = vec![0u8; 84];
            tkhd[12..16].copy_from_slice(&be32(id));
            tkhd[20..24].copy_from_slice(&be32(60_000));
            let mut mdhd = vec![0u8; 24];
            mdhd[12..16].copy_from_slice(&be32(ts));
            mdhd[16..20].copy_from_slice(&be32(ts * 60));
            let mut hdlr = vec![0u8; 24];
            hdlr[8..12].copy_from_slice(handler);
            let stbl = [
                boxed(b"stsd", b"\0\0\0\0\0\0\0\x01the sample entry"),
                full(b"stts", 0, 0, &[0, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0x0b, 0xb8]),
                full(b"stss", 0, 0, &[0, 0, 0, 1, 0, 0, 0, 1]),
                full(
                    b"stsz",
                    0,
                    0,
                    &[0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 9, 0, 0, 0, 9],
                ),
                full(b"stco", 0, 0, &[0, 0, 0, 1, 0, 0, 0, 40]),
            ]
            .concat();
            let minf = [boxed(b"vmhd", &[0; 12]), boxed(b"stbl", &stbl)].concat();
            let mdia = [
                boxed(b"mdhd", &mdhd),
                boxed(b"hdlr", &hdlr),
                boxed(b"minf", &minf),
            ]
            .concat();
            boxed(
                b"trak",
                &[
                    boxed(b"tkhd", &tkhd),
                    boxed(b"edts", &full(b"elst", 0, 0, &[0; 16])),
                    boxed(b"mdia", &mdia),
                ]
                .concat(),
            )
        };
        boxed(
            b"moov",
            &[
                boxed(b"mvhd", &mvhd),
                trak(1, b"soun", 48_000),
                trak(2, b"vide", 90_000),
                boxed(b"udta", b"source"),
            ]
            .concat(),
        )
    }

    #[test]
    fn the_init_segment_is_the_video_track_alone_empty_and_without_durations() {
        let head = [boxed(b"ftyp", b"isom\0\0\0\x01"), plain_moov()].concat();
        let t = TrickMp4::new(&head).expect("a video track");
        assert_eq!((t.track, t.timescale()), (2, 90_000));
        let init = t.init_segment();
        let top = children(init);
        assert_eq!(
            top.iter().map(|c| c.0).collect::<Vec<_>>(),
            [*b"ftyp", *b"moov"]
        );
        let moov = children(top[1].1);
        let kinds: Vec<[u8; 4]> = moov.iter().map(|c| c.0).collect();
        assert_eq!(kinds, [*b"mvhd", *b"trak", *b"mvex"]);
        assert_eq!(u32_at(moov[0].1, 16), Some(0), "mvhd duration");
        let trak = children(moov[1].1);
        assert_eq!(
            trak.iter().map(|c| c.0).collect::<Vec<_>>(),
            [*b"tkhd", *b"mdia"]
        );
        assert_eq!(u32_at(trak[0].1, 12), Some(2));
        assert_eq!(u32_at(trak[0].1, 20), Some(0), "tkhd duration");
        let mdia = children(trak[1].1);
        assert_eq!(u32_at(mdia[0].1, 16), Some(0), "mdhd duration");
        let stbl = children(children(mdia[2].1)[1].1);
        let names: Vec<[u8; 4]> = stbl.iter().map(|c| c.0).collect();
        assert_eq!(names, [*b"stsd", *b"stts", *b"stsc", *b"stsz", *b"stco"]);
        assert_eq!(stbl[0].1, b"\0\0\0\0\0\0\0\x01the sample entry");
        for (_, p) in &stbl[1..] {
            assert!(p.iter().all(|&b| b == 0), "an empty table");
        }
        let mvex = children(moov[2].1);
        assert_eq!(mvex.iter().map(|c| c.0).collect::<Vec<_>>(), [*b"trex"]);
        assert_eq!(u32_at(mvex[0].1, 4), Some(2), "trex track");
        assert_eq!(
            u32_at(mvex[0].1, 8),
            Some(1),
            "the first sample description"
        );
    }

    #[test]
    fn each_keyframe_is_a_fragment_the_parser_reads_back_as_a_keyframe_at_its_time() {
        let head = [boxed(b"ftyp", b"isom\0\0\0\x01"), plain_moov()].concat();
        let mut t = TrickMp4::new(&head).expect("a video track");
        let mut file = t.init_segment().to_vec();
        let mut starts = vec![];
        for (i, pts) in [(0u8, 90_000i64), (1, 101_250), (2, 112_500)] {
            starts.push(file.len() as u64);
            file.extend(t.keyframe(&[i; 777], pts, 11_250));
        }
        let mut ix = Indexer::new();
        ix.feed(&file);
        assert_eq!(ix.container(), Container::Mp4);
        let frames = ix.drain();
        assert_eq!(frames.len(), 3);
        for (f, (at, pts)) in frames
            .iter()
            .zip(starts.iter().zip([90_000, 101_250, 112_500]))
        {
            assert!(f.keyframe);
            assert_eq!((f.offset, f.pts_90k, f.len), (*at, pts, 777));
            let sample = &file[f.data_offset as usize..][..777];
            assert!(sample.iter().all(|&b| b == sample[0]));
        }
    }

    #[test]
    fn a_head_without_a_video_track_is_refused_saying_so() {
        let audio_only = boxed(b"moov", &[boxed(b"mvhd", &[0; 100])].concat());
        let e = TrickMp4::new(&audio_only).expect_err("no video");
        assert!(e.contains("no video track"), "{e}");
        assert!(TrickMp4::new(b"garbage").is_err());
    }
}
