//! Media containers as a recording's bytes go by: the incremental parser that the
//! frame index (HERMES 4: the frame as a unit of the file system) is built from.
//!
//! Contract: an [`Indexer`] is fed a file's bytes in file order, in pieces of any size
//! split anywhere ([`Indexer::feed`]), and gives back one [`Frame`] per access unit
//! (a video frame) of the file's video track, in file order, each with its byte
//! range, its number, its presentation time and whether it is a keyframe (a frame a
//! decoder can start at). The same bytes give the same frames whatever the split.
//! It is pure: no I/O, no clock, no allocation that grows with the input.
//!
//! Fault model: the input is whatever a camera, a network or a damaged disk delivers.
//! No input makes it panic or grow without bound (every buffer has a named maximum);
//! garbage is skipped, counted and resynchronised past ([`Counters`]); a frame is only
//! reported from bytes that parsed. What it recognises is in `ts.rs` (MPEG-TS),
//! `es.rs` (keyframes in H.264, H.265 and MPEG-2 video) and `mp4.rs` (fragmented
//! MP4); a file that is neither is reported as such and costs nothing more.

mod be;
mod boxes;
mod chunker;
pub mod clip_oracle;
mod es;
mod keyframes;
mod mp4;
mod mp4_tables;
mod mp4_write;
mod remux_mp4;
mod retime;
#[cfg(test)]
mod synth;
mod trick_mp4;
mod trick_ts;
mod ts;
mod ts_trim;

pub use boxes::box_header;
pub use chunker::{ChunkLimit, Chunker, Piece};
pub use es::Codec;
pub use keyframes::{ClockNote, KeyframeBuilder};
pub use remux_mp4::{is_plain as is_plain_mp4, Mp4Remux};
pub use retime::Mp4Retimer;
pub use trick_mp4::TrickMp4;
pub use trick_ts::TrickTs;
pub use ts_trim::TsTrim;

/// 90 kHz ticks, the unit of MPEG presentation times.
pub const TICKS_PER_SECOND: i64 = 90_000;

/// One access unit (video frame) of the file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Frame {
    /// Where a reader starts to play from this frame: in a transport stream the
    /// packet that starts its PES; in fragmented MP4 its fragment's `moof`.
    pub offset: u64,
    /// Where the frame's own bytes start (what `ffprobe -show_packets` reports as
    /// `pos`): `offset` in a transport stream, the sample in MP4.
    pub data_offset: u64,
    /// Transport stream: bytes from `offset` to the next frame's start (the packets a
    /// reader fetches to get this frame, with the audio and tables among them). MP4:
    /// the sample's bytes from `data_offset`.
    pub len: u64,
    /// 0 for the file's first frame.
    pub number: u64,
    /// Presentation time, 90 kHz, unwrapped past 2^33 (a time before the first PTS
    /// of the file, when a frame has none, repeats the last known one).
    pub pts_90k: i64,
    /// A decoder can start here: H.264 IDR, H.265 IRAP, MPEG-2 I picture after a
    /// sequence header.
    pub keyframe: bool,
    /// The stream's time jumped before this frame (the transport's discontinuity
    /// flag, or the PTS moved by more than [`MAX_PTS_STEP_90K`]).
    pub discontinuity: bool,
}

/// A PTS step between consecutive frames larger than this (10 s) is a
/// discontinuity, not a frame interval.
pub const MAX_PTS_STEP_90K: i64 = 10 * TICKS_PER_SECOND;

/// What the parser made of the file.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    /// Bytes fed.
    pub fed_bytes: u64,
    /// Bytes skipped while out of sync (not 188-byte packets).
    pub skipped_bytes: u64,
    /// Times the packet sync was lost and found again.
    pub resyncs: u64,
    /// Packets whose table or header did not parse (ignored).
    pub bad_packets: u64,
}

/// What the file turned out to be.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Container {
    /// Not decided yet (too few bytes).
    Unknown,
    /// MPEG transport stream (188-byte packets).
    Ts,
    /// Fragmented MP4 (ISO BMFF with `moof` fragments).
    Mp4,
    /// Neither: nothing is indexed.
    Other,
}

/// Bytes looked at to decide the container: a transport stream has its sync byte at
/// three consecutive 188-byte packets within them.
const DETECT_BYTES: usize = 4 * ts::PACKET;

/// See the module docs.
#[derive(Debug)]
pub struct Indexer {
    container: Container,
    /// Bytes fed.
    fed: u64,
    /// The first bytes while the container is not decided.
    head: Vec<u8>,
    ts: ts::TsParser,
    mp4: mp4::Mp4Parser,
}

impl Default for Indexer {
    fn default() -> Self {
        Self::new()
    }
}

impl Indexer {
    pub fn new() -> Indexer {
        Indexer {
            container: Container::Unknown,
            fed: 0,
            head: Vec::new(),
            ts: ts::TsParser::new(),
            mp4: mp4::Mp4Parser::new(),
        }
    }

    pub fn container(&self) -> Container {
        self.container
    }

    /// The video codec, once the program map named it.
    /// Bytes at `offset`, already fed, were written again: whether the parser can go
    /// on (an MP4 muxer setting the size of the `mdat` it left open; see
    /// `Mp4Parser::patch`). Otherwise its view is no longer the file's.
    pub fn patch(&mut self, offset: u64, bytes: &[u8]) -> bool {
        self.container == Container::Mp4 && self.mp4.patch(offset, bytes)
    }

    /// A plain MP4 whose sample tables have been seen: it can be indexed whole by
    /// [`Indexer::finish`] (the engine does at its writer's last close).
    pub fn has_plain_tables(&self) -> bool {
        self.container == Container::Mp4 && self.mp4.has_plain_tables()
    }

    pub fn codec(&self) -> Option<Codec> {
        self.ts.codec()
    }

    /// The video PID, once known.
    pub fn video_pid(&self) -> Option<u16> {
        self.ts.video_pid()
    }

    pub fn counters(&self) -> Counters {
        match self.container {
            Container::Mp4 => self.mp4.counters(),
            _ => self.ts.counters(),
        }
    }

    /// What a file cut from this recording at a keyframe must start with to play on
    /// its own: the last PAT and PMT packets of a transport stream, the init segment
    /// (`ftyp` and `moov`) of a fragmented MP4; `None` until they went by.
    pub fn chunk_head(&self) -> Option<Vec<u8>> {
        match self.container {
            Container::Ts => self.ts.tables(),
            Container::Mp4 => self.mp4.init_segment(),
            _ => None,
        }
    }

    /// Every frame reported from now on starts at or after this file offset (the
    /// frame being assembled, or the bytes not yet parsed): the bytes before it can
    /// be handed on, and a cut at a keyframe reported later lies past them
    /// (`media/chunker.rs`). Everything fed, for a file that is not media.
    pub fn settled(&self) -> u64 {
        match self.container {
            Container::Ts => self.ts.settled(),
            Container::Mp4 => self.mp4.settled(),
            Container::Other => self.fed,
            Container::Unknown => 0,
        }
    }

    /// The file's next bytes.
    pub fn feed(&mut self, bytes: &[u8]) {
        self.fed += bytes.len() as u64;
        self.feed_parser(bytes);
    }

    fn feed_parser(&mut self, bytes: &[u8]) {
        match self.container {
            Container::Ts => self.ts.feed(bytes),
            Container::Mp4 => self.mp4.feed(bytes),
            Container::Other => {}
            Container::Unknown => {
                let take = (DETECT_BYTES - self.head.len()).min(bytes.len());
                self.head.extend_from_slice(&bytes[..take]);
                if self.head.len() == DETECT_BYTES {
                    self.decide();
                    self.feed_parser(&bytes[take..]);
                }
            }
        }
    }

    fn decide(&mut self) {
        let head = std::mem::take(&mut self.head);
        self.container = if ts::looks_like_ts(&head) {
            Container::Ts
        } else if mp4::looks_like_mp4(&head) {
            Container::Mp4
        } else {
            Container::Other
        };
        match self.container {
            Container::Ts => self.ts.feed(&head),
            Container::Mp4 => self.mp4.feed(&head),
            _ => {}
        }
    }

    /// Goes on parsing at file offset `offset`, where a frame numbered `number`
    /// with PTS `pts_90k` (unwrapped) starts: the file's bytes from there are fed
    /// next, as if every byte before had been. For a recording's index picked up
    /// again after a reopen (`engine/indexing.rs`): fed the file's head first, so
    /// that its tables or init segment are known. Whether it can: a transport
    /// stream whose map named its video, or a fragmented MP4 whose `moov` did.
    pub fn resume_at(&mut self, offset: u64, number: u64, pts_90k: i64) -> bool {
        let resumed = match self.container {
            Container::Ts => self.ts.resume_at(offset, number, pts_90k),
            Container::Mp4 => self.mp4.resume_at(offset, number),
            Container::Unknown | Container::Other => false,
        };
        if resumed {
            self.fed = offset;
        }
        resumed
    }

    /// The frames completed so far, in file order (each once).
    pub fn drain(&mut self) -> Vec<Frame> {
        match self.container {
            Container::Mp4 => self.mp4.drain(),
            _ => self.ts.drain(),
        }
    }

    /// The end of the file: the last frame ends with it.
    pub fn finish(&mut self) -> Vec<Frame> {
        if self.container == Container::Unknown {
            self.decide();
        }
        match self.container {
            Container::Mp4 => self.mp4.finish(),
            _ => self.ts.finish(),
        }
        self.drain()
    }
}
