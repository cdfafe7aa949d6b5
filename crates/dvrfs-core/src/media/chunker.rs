//! Where a recording is cut into chunks: at the first keyframe after a chunk's
//! length, so that every chunk plays on its own (issue 25, `dvrfs record --chunk`).
//!
//! A [`Chunker`] is fed a recording's bytes as they come, in pieces of any size, and
//! hands them back as [`Piece`]s: bytes for the chunk being written, and cuts. A cut
//! lies right before a keyframe (a transport stream's packet that starts the
//! keyframe's PES, a fragmented MP4's `moof` whose first sample is a sync sample) and
//! carries the head the next chunk must start with to play on its own: the last PAT
//! and PMT packets, or the init segment (`ftyp`, `moov`). A chunk is cut once it
//! holds its length ([`ChunkLimit`]): in media time from its first keyframe to the
//! latest presentation time seen (frames come in decode order; a jump of the time
//! is no length), or in bytes.
//!
//! A keyframe is known only once the frame after it starts, so bytes are held back
//! from the start of the frame being assembled on ([`super::Indexer::settled`]): about
//! one frame. At most [`MAX_HELD_BYTES`] are held; past that (a frame larger than any
//! camera makes, or bytes that do not parse) they are handed on and that stretch is
//! not cut. A recording that is neither a transport stream nor fragmented MP4 is
//! handed on whole, as one chunk: there is no keyframe to cut at.
//!
//! Pure, as the parser it drives: the same bytes give the same chunks whatever the
//! split.

use super::{Container, Indexer, MAX_PTS_STEP_90K};

/// Most bytes held back waiting for the parser (module docs).
pub const MAX_HELD_BYTES: usize = 16 << 20;

/// How long a chunk grows before it is cut at the next keyframe.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChunkLimit {
    /// Media time, 90 kHz.
    Duration90k(i64),
    /// Bytes of the chunk, its head included.
    Bytes(u64),
}

/// What the recording's bytes become.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Piece {
    /// The next bytes of the chunk being written.
    Bytes(Vec<u8>),
    /// The chunk ends here; the next starts with `head` (then the keyframe).
    /// `at`: the recording's byte offset of the keyframe; `pts_90k`: its time;
    /// `ended_90k`: the media time the chunk that ends spans (its first frame to
    /// this keyframe, jumps carried).
    Cut {
        head: Vec<u8>,
        at: u64,
        pts_90k: i64,
        ended_90k: i64,
    },
}

/// See the module docs.
#[derive(Debug)]
pub struct Chunker {
    ix: Indexer,
    limit: ChunkLimit,
    /// Bytes fed and not yet handed on, from recording offset `held_at`.
    held: Vec<u8>,
    held_at: u64,
    /// The chunk being written: where in the recording it starts, its head's
    /// length (0 for the first), its media time so far.
    chunk_at: u64,
    head_len: u64,
    /// The chunk's media time: from `base_90k` (its first frame's time, or the
    /// time after a jump) to the latest time seen since (`max_90k`; frames come in
    /// decode order, so times go back and forth with B-frames), plus `carried_90k`,
    /// what it spanned before a jump.
    base_90k: Option<i64>,
    max_90k: i64,
    carried_90k: i64,
    last_pts: Option<i64>,
    /// The offset of the last frame seen: the frames of one MP4 fragment share it.
    last_offset: Option<u64>,
    cuts: u64,
}

impl Chunker {
    pub fn new(limit: ChunkLimit) -> Chunker {
        Chunker {
            ix: Indexer::new(),
            limit,
            held: Vec::new(),
            held_at: 0,
            chunk_at: 0,
            head_len: 0,
            base_90k: None,
            max_90k: 0,
            carried_90k: 0,
            last_pts: None,
            last_offset: None,
            cuts: 0,
        }
    }

    /// What the recording turned out to be.
    pub fn container(&self) -> Container {
        self.ix.container()
    }

    /// The media time of the chunk being written so far (its first frame to the
    /// latest seen, jumps carried).
    pub fn chunk_90k(&self) -> i64 {
        self.base_90k
            .map_or(0, |base| self.carried_90k + self.max_90k - base)
    }

    /// The recording's next bytes: what can be handed on now.
    pub fn push(&mut self, bytes: &[u8]) -> Vec<Piece> {
        self.held.extend_from_slice(bytes);
        self.ix.feed(bytes);
        let mut out = vec![];
        for f in self.ix.drain() {
            let first_of_fragment = self.last_offset != Some(f.offset);
            self.last_offset = Some(f.offset);
            let jumped = self
                .last_pts
                .is_some_and(|last| (f.pts_90k - last).abs() > MAX_PTS_STEP_90K);
            self.last_pts = Some(f.pts_90k);
            match self.base_90k {
                Some(base) if jumped => {
                    self.carried_90k += self.max_90k - base;
                    self.base_90k = Some(f.pts_90k);
                    self.max_90k = f.pts_90k;
                }
                Some(_) => self.max_90k = self.max_90k.max(f.pts_90k),
                None => {
                    self.base_90k = Some(f.pts_90k);
                    self.max_90k = f.pts_90k;
                }
            }
            let elapsed_90k = self.carried_90k + self.max_90k - self.base_90k.expect("set above");
            if !(f.keyframe && first_of_fragment) || f.offset <= self.chunk_at {
                continue;
            }
            if f.offset < self.held_at {
                // Handed on already (held past MAX_HELD_BYTES): no cut there.
                continue;
            }
            let full = match self.limit {
                ChunkLimit::Duration90k(d) => elapsed_90k >= d,
                ChunkLimit::Bytes(b) => self.head_len + (f.offset - self.chunk_at) >= b,
            };
            let Some(head) = self.ix.chunk_head().filter(|_| full) else {
                continue;
            };
            self.hand_on(f.offset, &mut out);
            self.head_len = head.len() as u64;
            out.push(Piece::Cut {
                head,
                at: f.offset,
                pts_90k: f.pts_90k,
                ended_90k: elapsed_90k,
            });
            self.chunk_at = f.offset;
            self.base_90k = Some(f.pts_90k);
            self.max_90k = f.pts_90k;
            self.carried_90k = 0;
            self.cuts += 1;
        }
        let settled = match self.ix.container() {
            Container::Unknown => self.held_at,
            _ => self.ix.settled(),
        };
        let end = self.held_at + self.held.len() as u64;
        let upto = if self.held.len() > MAX_HELD_BYTES {
            end
        } else {
            settled.clamp(self.held_at, end)
        };
        self.hand_on(upto, &mut out);
        out
    }

    /// The end of the recording: the bytes still held.
    pub fn finish(&mut self) -> Vec<Piece> {
        let mut out = vec![];
        let end = self.held_at + self.held.len() as u64;
        self.hand_on(end, &mut out);
        out
    }

    /// Hands on the held bytes before recording offset `upto`.
    fn hand_on(&mut self, upto: u64, out: &mut Vec<Piece>) {
        let n = (upto - self.held_at) as usize;
        if n == 0 {
            return;
        }
        let rest = self.held.split_off(n);
        out.push(Piece::Bytes(std::mem::replace(&mut self.held, rest)));
        self.held_at = upto;
    }
}

#[cfg(test)]
mod tests {
    use super::super::synth::{packet, stream};
    use super::*;

    fn run(bytes: &[u8], piece: usize, limit: ChunkLimit) -> Vec<Piece> {
        let mut c = Chunker::new(limit);
        let mut out = vec![];
        for p in bytes.chunks(piece) {
            out.extend(c.push(p));
        }
        out.extend(c.finish());
        out
    }

    /// The chunks the pieces make: each a Vec of bytes, heads included.
    fn chunks(pieces: &[Piece]) -> Vec<Vec<u8>> {
        let mut out = vec![vec![]];
        for p in pieces {
            match p {
                Piece::Bytes(b) => out.last_mut().unwrap().extend_from_slice(b),
                Piece::Cut { head, .. } => out.push(head.clone()),
            }
        }
        out
    }

    #[test]
    fn cuts_at_the_first_keyframe_after_the_length_with_the_tables_first() {
        // 100 frames at 25 fps, a keyframe every 12 frames (0.48 s): cut every
        // second at the first keyframe after it, at frames 36, 72.
        let ts = stream(100, 12);
        let limit = ChunkLimit::Duration90k(90_000);
        let whole = run(&ts, 1 << 20, limit);
        for piece in [1, 187, 188, 1000, 4096] {
            assert!(
                chunks(&run(&ts, piece, limit)) == chunks(&whole),
                "split into {piece}-byte pieces, other chunks"
            );
        }
        let cuts: Vec<(i64, i64)> = whole
            .iter()
            .filter_map(|p| match p {
                Piece::Cut {
                    pts_90k, ended_90k, ..
                } => Some((pts_90k / 3600, ended_90k / 3600)),
                _ => None,
            })
            .collect();
        // Cut at frames 36 and 72; the chunks that end there span 36 frames each.
        assert_eq!(cuts, vec![(36, 36), (72, 36)]);
        let cs = chunks(&whole);
        assert_eq!(cs.len(), 3);
        // Every byte once, in order, apart from the heads; each later chunk starts
        // with PAT and PMT, then the keyframe's packet.
        let bodies: Vec<u8> = cs
            .iter()
            .enumerate()
            .flat_map(|(k, c)| c[if k == 0 { 0 } else { 2 * 188 }..].to_vec())
            .collect();
        let frame_bytes = 3 * 188;
        let key_at = |f: usize| (f / 12 + 1) * 2 * 188 + f * frame_bytes;
        assert_eq!(bodies.len(), ts.len());
        assert!(bodies[..key_at(36)] == ts[..key_at(36)]);
        for c in &cs[1..] {
            assert_eq!(c[1..3], [0x40, 0x00], "PAT first");
            assert_eq!(c[188 + 1..188 + 3], [0x41, 0x00], "PMT second");
            assert_eq!(
                c[2 * 188 + 1] & 0x40,
                0x40,
                "the keyframe's PES starts the body"
            );
        }
        // The bytes of a cut chunk start at that keyframe's packet.
        assert!(cs[1][2 * 188..] == ts[key_at(36)..key_at(72)]);
    }

    #[test]
    fn a_byte_limit_cuts_and_what_is_not_media_goes_on_whole() {
        let ts = stream(60, 6);
        let pieces = run(&ts, 5000, ChunkLimit::Bytes(20 * 188 * 3));
        let cs = chunks(&pieces);
        assert!(cs.len() >= 3, "{}", cs.len());
        for c in &cs[..cs.len() - 1] {
            assert!(c.len() as u64 >= 20 * 188 * 3, "{}", c.len());
        }
        let text = b"not a video, just text ".repeat(10_000);
        let pieces = run(&text, 777, ChunkLimit::Bytes(1000));
        assert!(pieces.iter().all(|p| matches!(p, Piece::Bytes(_))));
        assert!(chunks(&pieces) == vec![text]);
    }

    #[test]
    fn at_most_the_bound_is_held_back() {
        // One endless frame: the bytes go on once more than MAX_HELD_BYTES wait.
        let mut ts = stream(1, 1);
        for i in 0..(MAX_HELD_BYTES / 184 + 10) {
            ts.extend(packet(0x101, false, i as u8, &[0xAB; 184]));
        }
        let mut c = Chunker::new(ChunkLimit::Bytes(1));
        let mut handed = 0;
        for p in ts.chunks(1 << 16) {
            for piece in c.push(p) {
                if let Piece::Bytes(b) = piece {
                    handed += b.len();
                }
            }
            assert!(c.held.len() <= MAX_HELD_BYTES + (1 << 16));
        }
        assert!(handed > ts.len() - MAX_HELD_BYTES - (1 << 16));
    }
}
