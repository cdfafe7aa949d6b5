//! Trick play's output for an MP4, fragmented or plain: keyframes alone, as a
//! fragmented MP4 a player shows as smooth fast motion (`play --speed`), and a
//! keyframe alone as a file that plays on its own (`dvrfs keyframe`).
//!
//! The init segment is the video track's alone, made from the source's `moov`
//! (`mp4_write.rs`: sample description as it was, tables empty, no durations, no
//! edit list); each keyframe is one fragment of one sample, its `tfdt` the time it
//! is shown and its duration until the next is shown. Audio is left out.
//!
//! What cannot be made sense of is refused at [`TrickMp4::new`] with what it
//! lacks, never guessed.

use super::mp4_write::{fragment, fragmented_init, Part, RunSample, SYNC_SAMPLE};
use super::TICKS_PER_SECOND;

/// See the module docs.
#[derive(Debug)]
pub struct TrickMp4 {
    init: Vec<u8>,
    track: u32,
    timescale: u32,
    sequence: u32,
}

impl TrickMp4 {
    /// From an MP4's head: its `ftyp` (if any) and a `moov` (an fMP4's init segment,
    /// or a plain MP4's `moov`); an error saying what it lacks.
    pub fn new(head: &[u8]) -> Result<TrickMp4, String> {
        let (init, tracks) = fragmented_init(head, &|h| h == b"vide")?;
        let video = &tracks[0];
        Ok(TrickMp4 {
            init,
            track: video.id,
            timescale: video.timescale,
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
        let one = [RunSample {
            duration: u32::try_from(ticks(duration_90k)).unwrap_or(u32::MAX),
            size: u32::try_from(sample.len()).unwrap_or(u32::MAX),
            flags: SYNC_SAMPLE,
            cto: 0,
        }];
        let part = Part {
            track: self.track,
            base: ticks(pts_90k),
            samples: &one,
            data: sample,
        };
        fragment(self.sequence, &[part])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::media::be::{be32, u32_at};
    use crate::media::boxes::children;
    use crate::media::mp4_write::{boxed, full};
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
