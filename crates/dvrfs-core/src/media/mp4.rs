//! Fragmented MP4 (ISO/IEC 14496-12): the `moov` names the video track (handler
//! `vide`), its timescale and its `trex` defaults; each fragment's `moof` lists its
//! samples (`traf`: `tfhd`, `tfdt`, `trun`), whose bytes follow in an `mdat`. A sample
//! is a keyframe when its flags say sync (`sample_is_non_sync_sample` clear); its
//! time is the fragment's `tfdt` plus the durations before it plus its composition
//! offset. A frame's `offset` is its fragment's `moof` (what a reader must fetch to
//! play from there), its `data_offset` the sample itself (ffprobe's `pos`).
//!
//! Top-level boxes are followed by their headers; only `ftyp`, `moov` and `moof` are
//! gathered (each at most [`MAX_GATHER_BYTES`]), an `mdat` is skipped as it goes by.
//! A frame is reported once its bytes have gone by. A box header that cannot be
//! (a size below its header) ends the parse: the rest is counted as skipped. A plain
//! (non-fragmented) MP4 is indexed at the end of the file from its sample tables
//! (`mp4_tables.rs`).

use super::be::{u32_at, u64_at};
use super::boxes::children;
use super::{Counters, Frame, TICKS_PER_SECOND};

/// The largest `moov` or `moof` gathered; a larger one is skipped (and its fragment
/// not indexed).
const MAX_GATHER_BYTES: u64 = 16 << 20;
/// The most samples one `trun` may list (an hour of 30 fps video is 108,000); a
/// larger count is damage, cut to this.
const MAX_TRUN_SAMPLES: usize = 1 << 17;
/// A sample's flags: `sample_is_non_sync_sample`.
const NON_SYNC: u32 = 0x0001_0000;

/// Whether `head` starts with an ISO BMFF box a recording begins with.
pub fn looks_like_mp4(head: &[u8]) -> bool {
    head.len() >= 8 && matches!(&head[4..8], b"ftyp" | b"styp" | b"moov" | b"moof" | b"sidx")
}

#[derive(Clone, Copy, Debug, Default)]
struct Track {
    id: u32,
    timescale: u32,
    default_duration: u32,
    default_size: u32,
    default_flags: u32,
}

#[derive(Debug)]
enum State {
    /// Reading a box header (8 or 16 bytes).
    Header,
    /// Gathering a `moov` or `moof` of `size` bytes that started at `start`.
    Gather {
        kind: [u8; 4],
        start: u64,
        size: u64,
    },
    /// Skipping this many more bytes (`None`: to the end of the file).
    Skip(Option<u64>),
    /// A header that made no sense: nothing more is parsed.
    Stopped,
}

#[derive(Debug)]
pub struct Mp4Parser {
    pos: u64,
    state: State,
    buf: Vec<u8>,
    video: Option<Track>,
    /// `trex` defaults by track id, until the video track is known.
    trex: Vec<(u32, u32, u32, u32)>,
    /// The `ftyp` box as it was, and the `ftyp` and `moov` of the last `moov` that
    /// named a video track: the init segment a chunk cut at a keyframe starts with.
    ftyp: Vec<u8>,
    init: Vec<u8>,
    /// A plain MP4's `moov` (no `mvex`): its sample tables make the frames at the end.
    plain: Option<Vec<u8>>,
    /// Where the box being skipped to the end of the file (size 0) starts: a
    /// muxer writing a plain MP4 sets its `mdat`'s size last ([`Mp4Parser::patch`]).
    open_box: Option<u64>,
    /// Frames described by a `moof` whose bytes have not all gone by yet.
    waiting: std::collections::VecDeque<Frame>,
    out: Vec<Frame>,
    next_number: u64,
    counters: Counters,
}

/// A box of `kind` around `payload` (a 32-bit size: gathered boxes are at most
/// [`MAX_GATHER_BYTES`]).
fn boxed(kind: &[u8; 4], payload: &[u8]) -> Vec<u8> {
    let size = u32::try_from(payload.len() + 8).expect("gathered boxes are small");
    let mut b = Vec::with_capacity(payload.len() + 8);
    b.extend_from_slice(&[
        (size >> 24) as u8,
        (size >> 16) as u8,
        (size >> 8) as u8,
        size as u8,
    ]);
    b.extend_from_slice(kind);
    b.extend_from_slice(payload);
    b
}

fn child<'a>(b: &'a [u8], kind: &[u8; 4]) -> Option<&'a [u8]> {
    children(b)
        .into_iter()
        .find(|(k, _)| k == kind)
        .map(|(_, p)| p)
}

impl Mp4Parser {
    pub fn new() -> Mp4Parser {
        Mp4Parser {
            pos: 0,
            state: State::Header,
            buf: Vec::new(),
            video: None,
            trex: Vec::new(),
            ftyp: Vec::new(),
            init: Vec::new(),
            plain: None,
            open_box: None,
            waiting: Default::default(),
            out: Vec::new(),
            next_number: 0,
            counters: Counters::default(),
        }
    }

    pub fn counters(&self) -> Counters {
        self.counters
    }

    pub fn drain(&mut self) -> Vec<Frame> {
        std::mem::take(&mut self.out)
    }

    pub fn feed(&mut self, mut bytes: &[u8]) {
        self.counters.fed_bytes += bytes.len() as u64;
        while !bytes.is_empty() {
            match &mut self.state {
                State::Stopped => {
                    self.counters.skipped_bytes += bytes.len() as u64;
                    self.pos += bytes.len() as u64;
                    bytes = &[];
                }
                State::Skip(left) => {
                    let n = left.map_or(bytes.len() as u64, |l| l.min(bytes.len() as u64));
                    self.pos += n;
                    bytes = &bytes[n as usize..];
                    if let Some(l) = left {
                        *l -= n;
                        if *l == 0 {
                            self.state = State::Header;
                        }
                    }
                }
                State::Header => {
                    let want = if self.buf.len() >= 4 && u32_at(&self.buf, 0) == Some(1) {
                        16
                    } else {
                        8
                    };
                    let take = (want - self.buf.len()).min(bytes.len());
                    self.buf.extend_from_slice(&bytes[..take]);
                    bytes = &bytes[take..];
                    if self.buf.len() == 8 && u32_at(&self.buf, 0) == Some(1) {
                        continue; // a 64-bit size follows
                    }
                    if self.buf.len() == want {
                        self.header();
                    }
                }
                State::Gather { size, .. } => {
                    let take = (*size as usize - self.buf.len()).min(bytes.len());
                    self.buf.extend_from_slice(&bytes[..take]);
                    bytes = &bytes[take..];
                    if self.buf.len() as u64 == *size {
                        self.gathered();
                    }
                }
            }
            self.release();
        }
    }

    /// A whole box header in `buf`, at file offset `pos - len`.
    fn header(&mut self) {
        let hdr = self.buf.len() as u64;
        let start = self.pos;
        self.pos += hdr;
        let size = match u32_at(&self.buf, 0) {
            Some(1) => u64_at(&self.buf, 8).unwrap_or(0),
            Some(0) => u64::MAX, // to the end of the file
            Some(s) => u64::from(s),
            None => 0,
        };
        let kind = [self.buf[4], self.buf[5], self.buf[6], self.buf[7]];
        if size < hdr {
            self.state = State::Stopped;
            self.counters.bad_packets += 1;
            self.buf.clear();
            return;
        }
        let body = (size != u64::MAX).then(|| size - hdr);
        let gather = matches!(&kind, b"moov" | b"moof" | b"ftyp");
        self.state = match body {
            Some(b) if gather && size <= MAX_GATHER_BYTES => {
                self.buf.clear();
                if b == 0 {
                    State::Header
                } else {
                    State::Gather {
                        kind,
                        start,
                        size: b,
                    }
                }
            }
            Some(0) => State::Header,
            Some(b) => {
                if gather {
                    self.counters.bad_packets += 1;
                }
                State::Skip(Some(b))
            }
            None => {
                self.open_box = Some(start);
                State::Skip(None)
            }
        };
        if !matches!(self.state, State::Gather { .. }) {
            self.buf.clear();
        }
    }

    /// A whole `moov` or `moof` payload in `buf`.
    fn gathered(&mut self) {
        let State::Gather { kind, start, size } = self.state else {
            unreachable!("gathered only while gathering")
        };
        let body = std::mem::take(&mut self.buf);
        self.pos += size;
        self.state = State::Header;
        match &kind {
            b"ftyp" => self.ftyp = boxed(b"ftyp", &body),
            b"moov" => {
                self.moov(&body);
                if self.video.is_some() {
                    self.init = [self.ftyp.clone(), boxed(b"moov", &body)].concat();
                }
            }
            _ => self.moof(&body, start),
        }
    }

    fn moov(&mut self, b: &[u8]) {
        if child(b, b"mvex").is_none() {
            self.plain = Some(b.to_vec());
        }
        if let Some(mvex) = child(b, b"mvex") {
            for (k, p) in children(mvex) {
                if &k == b"trex" {
                    if let (Some(id), Some(d), Some(s), Some(f)) =
                        (u32_at(p, 4), u32_at(p, 12), u32_at(p, 16), u32_at(p, 20))
                    {
                        self.trex.push((id, d, s, f));
                    }
                }
            }
        }
        for (k, trak) in children(b) {
            if &k != b"trak" {
                continue;
            }
            let Some(mdia) = child(trak, b"mdia") else {
                continue;
            };
            let vide = child(mdia, b"hdlr").and_then(|h| h.get(8..12)) == Some(b"vide");
            if !vide {
                continue;
            }
            let id = child(trak, b"tkhd").and_then(|t| {
                let v = *t.first()?;
                u32_at(t, if v == 1 { 20 } else { 12 })
            });
            let timescale = child(mdia, b"mdhd").and_then(|m| {
                let v = *m.first()?;
                u32_at(m, if v == 1 { 20 } else { 12 })
            });
            if let (Some(id), Some(ts)) = (id, timescale.filter(|&t| t > 0)) {
                let (d, s, f) = self
                    .trex
                    .iter()
                    .find(|t| t.0 == id)
                    .map_or((0, 0, 0), |t| (t.1, t.2, t.3));
                self.video = Some(Track {
                    id,
                    timescale: ts,
                    default_duration: d,
                    default_size: s,
                    default_flags: f,
                });
                return;
            }
        }
    }

    /// A fragment at file offset `moof_at`: its video samples.
    fn moof(&mut self, b: &[u8], moof_at: u64) {
        let Some(track) = self.video else { return };
        for (k, traf) in children(b) {
            if &k != b"traf" {
                continue;
            }
            let Some(tfhd) = child(traf, b"tfhd") else {
                continue;
            };
            let flags = u32_at(tfhd, 0).unwrap_or(0) & 0x00FF_FFFF;
            if u32_at(tfhd, 4) != Some(track.id) {
                continue;
            }
            let mut i = 8;
            let mut base = moof_at;
            let (mut dur, mut size, mut sflags) = (
                track.default_duration,
                track.default_size,
                track.default_flags,
            );
            if flags & 0x1 != 0 {
                base = u64_at(tfhd, i).unwrap_or(moof_at);
                i += 8;
            }
            if flags & 0x2 != 0 {
                i += 4;
            }
            if flags & 0x8 != 0 {
                dur = u32_at(tfhd, i).unwrap_or(dur);
                i += 4;
            }
            if flags & 0x10 != 0 {
                size = u32_at(tfhd, i).unwrap_or(size);
                i += 4;
            }
            if flags & 0x20 != 0 {
                sflags = u32_at(tfhd, i).unwrap_or(sflags);
            }
            let mut dts = child(traf, b"tfdt").and_then(|t| match t.first()? {
                1 => u64_at(t, 4),
                _ => u32_at(t, 4).map(u64::from),
            });
            for (k, trun) in children(traf) {
                if &k != b"trun" {
                    continue;
                }
                self.trun(trun, track, base, moof_at, &mut dts, (dur, size, sflags));
            }
        }
    }

    fn trun(
        &mut self,
        t: &[u8],
        track: Track,
        base: u64,
        moof_at: u64,
        dts: &mut Option<u64>,
        (dur, size, sflags): (u32, u32, u32),
    ) {
        let Some(vf) = u32_at(t, 0) else { return };
        let version = vf >> 24;
        let flags = vf & 0x00FF_FFFF;
        let Some(count) = u32_at(t, 4) else { return };
        let mut i = 8;
        let mut data = base;
        if flags & 0x1 != 0 {
            let Some(off) = u32_at(t, i) else { return };
            data = base.wrapping_add_signed(i64::from(off as i32));
            i += 4;
        }
        let mut first_flags = None;
        if flags & 0x4 != 0 {
            first_flags = u32_at(t, i);
            i += 4;
        }
        let per = [0x100, 0x200, 0x400, 0x800]
            .iter()
            .filter(|&&f| flags & f != 0)
            .count()
            * 4;
        // A count that the box cannot hold is damage: stop at what is there.
        let count = (count as usize)
            .min(t.len().saturating_sub(i) / per.max(1))
            .min(MAX_TRUN_SAMPLES);
        for n in 0..count {
            let mut at = i + n * per;
            let mut field = |on: u32, default: u32| -> u32 {
                if flags & on == 0 {
                    return default;
                }
                let v = u32_at(t, at).unwrap_or(default);
                at += 4;
                v
            };
            let d = field(0x100, dur);
            let s = field(0x200, size);
            let f = field(
                0x400,
                if n == 0 {
                    first_flags.unwrap_or(sflags)
                } else {
                    sflags
                },
            );
            let cto = field(0x800, 0);
            let cto = if version == 0 {
                i64::from(cto)
            } else {
                i64::from(cto as i32)
            };
            let decode = dts.unwrap_or(0);
            let pts = (decode as i64).saturating_add(cto);
            self.waiting.push_back(Frame {
                offset: moof_at,
                data_offset: data,
                len: u64::from(s),
                number: self.next_number,
                pts_90k: (i128::from(pts) * i128::from(TICKS_PER_SECOND)
                    / i128::from(track.timescale)) as i64,
                keyframe: f & NON_SYNC == 0,
                discontinuity: false,
            });
            self.next_number += 1;
            data = data.saturating_add(u64::from(s));
            *dts = Some(decode.saturating_add(u64::from(d)));
        }
    }

    /// The init segment (`ftyp` and `moov`) of the video track, once seen.
    pub fn init_segment(&self) -> Option<Vec<u8>> {
        (!self.init.is_empty()).then(|| self.init.clone())
    }

    /// Every frame reported from now on starts (its `moof`) at or after this offset:
    /// the fragment of the first frame still waiting for its bytes, else the box
    /// being read.
    pub fn settled(&self) -> u64 {
        let box_start = match self.state {
            State::Gather { start, .. } => start,
            _ => self.pos,
        };
        self.waiting
            .front()
            .map_or(box_start, |f| f.offset.min(box_start))
    }

    /// Frames whose bytes have all gone by.
    fn release(&mut self) {
        while let Some(f) = self.waiting.front() {
            if f.data_offset.saturating_add(f.len) > self.pos {
                break;
            }
            let f = self.waiting.pop_front().expect("a front frame");
            self.out.push(f);
        }
    }

    /// Bytes at `offset`, already fed, were written again. Taken (true) only where
    /// it is a muxer closing the box it left open (size 0, "to the end of the
    /// file": ffmpeg's `mdat`) at the current end, so that the next box (the
    /// `moov`) is read: the 32-bit size at the box's start, or a 64-bit header in
    /// the 8 bytes before it (a `free`/`wide` box turned into the size). Anything
    /// else is not taken: the caller stops following the file.
    pub fn patch(&mut self, offset: u64, bytes: &[u8]) -> bool {
        let (Some(start), State::Skip(None)) = (self.open_box, &self.state) else {
            return false;
        };
        let end = match (offset, bytes.len()) {
            (o, 4) if o == start => u32_at(bytes, 0).map(|s| start + u64::from(s)),
            (o, 16) if o + 8 == start && &bytes[4..8] == b"mdat" && u32_at(bytes, 0) == Some(1) => {
                u64_at(bytes, 8).map(|s| o + s)
            }
            _ => None,
        };
        if end != Some(self.pos) {
            return false;
        }
        self.open_box = None;
        self.state = State::Header;
        true
    }

    /// Whether this is a plain MP4 whose `moov` (its sample tables) has been seen:
    /// [`Mp4Parser::finish`] then gives its frames.
    pub fn has_plain_tables(&self) -> bool {
        self.plain.is_some() && self.video.is_some()
    }

    /// Goes on parsing at file offset `offset`, a fragment's `moof` (a keyframe's,
    /// stored before: `KeyframeBuilder::resume_at`), its first sample numbered
    /// `number`; what was being gathered or waited for is dropped, the init segment
    /// stays. Whether it can: a fragmented MP4 whose `moov` named a video track.
    pub fn resume_at(&mut self, offset: u64, number: u64) -> bool {
        if self.video.is_none() || self.plain.is_some() {
            return false;
        }
        self.pos = offset;
        self.state = State::Header;
        self.buf.clear();
        self.open_box = None;
        self.waiting.clear();
        self.out.clear();
        self.next_number = number;
        true
    }

    /// The end of the file: frames whose bytes did not all arrive are not reported.
    pub fn finish(&mut self) {
        self.release();
        self.waiting.clear();
        if let (Some(moov), Some(track)) = (self.plain.take(), self.video) {
            self.plain_frames(&moov, track);
        }
    }

    /// A plain MP4's frames from its video track's sample tables (`mp4_tables.rs`).
    fn plain_frames(&mut self, moov: &[u8], track: Track) {
        for (k, trak) in children(moov) {
            let id = child(trak, b"tkhd")
                .and_then(|t| u32_at(t, if t.first() == Some(&1) { 20 } else { 12 }));
            if &k != b"trak" || id != Some(track.id) {
                continue;
            }
            let Some(stbl) = child(trak, b"mdia")
                .and_then(|m| child(m, b"minf"))
                .and_then(|m| child(m, b"stbl"))
            else {
                return;
            };
            let t = super::mp4_tables::Tables {
                stsz: child(stbl, b"stsz"),
                stco: child(stbl, b"stco"),
                co64: child(stbl, b"co64"),
                stsc: child(stbl, b"stsc"),
                stts: child(stbl, b"stts"),
                ctts: child(stbl, b"ctts"),
                stss: child(stbl, b"stss"),
            };
            let pos = self.pos;
            self.out.extend(
                super::mp4_tables::frames(&t, track.timescale)
                    .into_iter()
                    .take_while(|f| f.data_offset.saturating_add(f.len) <= pos),
            );
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn be32(x: u32) -> [u8; 4] {
        [(x >> 24) as u8, (x >> 16) as u8, (x >> 8) as u8, x as u8]
    }

    fn be64(x: u64) -> Vec<u8> {
        [be32((x >> 32) as u32), be32(x as u32)].concat()
    }

    /// `ftyp`, then an `mdat` left open (size 0) with 100 bytes: where the `mdat`
    /// starts.
    fn open_mdat(p: &mut Mp4Parser) -> u64 {
        let mut b = boxed(b"ftyp", b"isom\0\0\x02\0");
        let at = b.len() as u64;
        b.extend_from_slice(&[0, 0, 0, 0]);
        b.extend_from_slice(b"mdat");
        b.extend_from_slice(&[7; 100]);
        p.feed(&b);
        at
    }

    #[test]
    fn an_open_mdat_closed_at_the_end_lets_the_next_box_be_read() {
        let mut p = Mp4Parser::new();
        let at = open_mdat(&mut p);
        let end = at + 108;
        // Not its size field, a size that is not the end, a 64-bit header that
        // does not end there: refused, nothing changed.
        assert!(!p.patch(at + 4, &be32(108)));
        assert!(!p.patch(at, &be32(107)));
        let mut wide = vec![0, 0, 0, 1];
        wide.extend_from_slice(b"mdat");
        wide.extend_from_slice(&be64(115));
        assert!(!p.patch(at - 8, &wide));
        assert!(p.patch(at, &be32((end - at) as u32)));
        assert!(matches!(p.state, State::Header));
        // Taken once: the box is closed.
        assert!(!p.patch(at, &be32((end - at) as u32)));
        // The 64-bit form: the 8 bytes before the mdat turned into its header.
        let mut p = Mp4Parser::new();
        let at = open_mdat(&mut p);
        let mut wide = vec![0, 0, 0, 1];
        wide.extend_from_slice(b"mdat");
        wide.extend_from_slice(&be64(116));
        assert!(p.patch(at - 8, &wide));
    }
}
