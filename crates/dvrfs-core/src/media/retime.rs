//! A fragmented MP4 cut out of a recording, made to start at time 0: every
//! fragment's `tfdt` (each track's decode time at the fragment's start) less the
//! first one of its track in the clip, so a player shows the clip from 0:00 and
//! ffprobe gives its true duration. Boxes that index the whole source file (`sidx`,
//! `mfra`) are left out: their offsets and times are the source's. Everything else
//! goes through unchanged, so no sample is touched and nothing is re-encoded.
//!
//! It runs over the clip's bytes as they come (any split): a `moof` is gathered
//! whole (at most [`MAX_MOOF_BYTES`]), every other box streams through. A box header
//! that makes no sense, or a `moof` larger than the bound, passes the rest through
//! unchanged (`gave_up` says so): the clip is still the source's bytes.

use super::be::{u32_at, u64_at};

/// The largest `moof` rewritten.
pub const MAX_MOOF_BYTES: usize = 16 << 20;

#[derive(Debug)]
enum State {
    /// Reading a box header: the bytes so far.
    Header(Vec<u8>),
    /// Gathering a `moof` of `size` bytes.
    Moof { size: usize, bytes: Vec<u8> },
    /// Passing (`keep`) or dropping this many more bytes of a box.
    Body { left: u64, keep: bool },
    /// Everything from here passes unchanged.
    Through,
}

/// See the module docs.
#[derive(Debug)]
pub struct Mp4Retimer {
    state: State,
    /// (track, first `tfdt` of the clip).
    bases: Vec<(u32, u64)>,
    gave_up: Option<String>,
}

impl Default for Mp4Retimer {
    fn default() -> Self {
        Self::new()
    }
}

/// The children of a box's payload: (kind, start of the child's payload, end).
fn children(b: &[u8], mut at: usize, end: usize) -> Vec<([u8; 4], usize, usize)> {
    let mut out = vec![];
    while at + 8 <= end {
        let Some(size) = u32_at(b, at) else { break };
        let kind: [u8; 4] = b[at + 4..at + 8].try_into().expect("4 bytes");
        let (head, size) = match size {
            1 => match u64_at(b, at + 8) {
                Some(s) => (16, s),
                None => break,
            },
            0 => (8, (end - at) as u64),
            s => (8, u64::from(s)),
        };
        // `checked_add`: a 64-bit size near 2^64 must end the walk, not wrap.
        match (at as u64).checked_add(size) {
            Some(stop) if size >= head as u64 && stop <= end as u64 => {}
            _ => break,
        }
        out.push((kind, at + head, at + size as usize));
        at += size as usize;
    }
    out
}

impl Mp4Retimer {
    pub fn new() -> Mp4Retimer {
        Mp4Retimer {
            state: State::Header(Vec::new()),
            bases: Vec::new(),
            gave_up: None,
        }
    }

    /// Why the rest went through unchanged, if it did.
    pub fn gave_up(&self) -> Option<&str> {
        self.gave_up.as_deref()
    }

    /// The clip's next bytes: what goes out for them.
    pub fn feed(&mut self, mut bytes: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(bytes.len());
        while !bytes.is_empty() {
            match &mut self.state {
                State::Through => {
                    out.extend_from_slice(bytes);
                    break;
                }
                State::Body { left, keep } => {
                    let n = (*left).min(bytes.len() as u64) as usize;
                    if *keep {
                        out.extend_from_slice(&bytes[..n]);
                    }
                    *left -= n as u64;
                    if *left == 0 {
                        self.state = State::Header(Vec::new());
                    }
                    bytes = &bytes[n..];
                }
                State::Moof { size, bytes: got } => {
                    let n = (*size - got.len()).min(bytes.len());
                    got.extend_from_slice(&bytes[..n]);
                    bytes = &bytes[n..];
                    if got.len() == *size {
                        let mut moof = std::mem::take(got);
                        self.rebase(&mut moof);
                        out.extend_from_slice(&moof);
                        self.state = State::Header(Vec::new());
                    }
                }
                State::Header(h) => {
                    let want = if h.len() >= 8 && u32_at(h, 0) == Some(1) {
                        16
                    } else {
                        8
                    };
                    let n = (want - h.len()).min(bytes.len());
                    h.extend_from_slice(&bytes[..n]);
                    bytes = &bytes[n..];
                    if h.len() < want || (want == 8 && u32_at(h, 0) == Some(1)) {
                        continue;
                    }
                    let head = std::mem::take(h);
                    self.header(head, &mut out);
                }
            }
        }
        out
    }

    /// The end of the clip: a box cut short goes out as it came.
    pub fn finish(&mut self) -> Vec<u8> {
        match std::mem::replace(&mut self.state, State::Through) {
            State::Header(h) => h,
            State::Moof { bytes, .. } => bytes,
            _ => vec![],
        }
    }

    fn header(&mut self, head: Vec<u8>, out: &mut Vec<u8>) {
        let kind: [u8; 4] = head[4..8].try_into().expect("8 bytes");
        let size = match u32_at(&head, 0).expect("8 bytes") {
            1 => u64_at(&head, 8).expect("16 bytes"),
            0 => u64::MAX, // to the end of the file
            s => u64::from(s),
        };
        if size < head.len() as u64 {
            self.gave_up = Some(format!(
                "a {} box of {size} bytes, less than its header",
                String::from_utf8_lossy(&kind)
            ));
            out.extend_from_slice(&head);
            self.state = State::Through;
            return;
        }
        let left = size.saturating_sub(head.len() as u64);
        match &kind {
            b"moof" if size <= MAX_MOOF_BYTES as u64 => {
                self.state = State::Moof {
                    size: size as usize,
                    bytes: head,
                };
            }
            b"moof" => {
                self.gave_up = Some(format!("a moof of {size} bytes, over the bound"));
                out.extend_from_slice(&head);
                self.state = State::Through;
            }
            b"sidx" | b"mfra" => self.state = State::Body { left, keep: false },
            _ => {
                out.extend_from_slice(&head);
                self.state = State::Body { left, keep: true };
            }
        }
        if matches!(self.state, State::Body { left: 0, .. }) {
            self.state = State::Header(Vec::new());
        }
    }

    /// Each `traf`'s `tfdt` less its track's first in the clip.
    fn rebase(&mut self, moof: &mut [u8]) {
        let head = if u32_at(moof, 0) == Some(1) { 16 } else { 8 };
        for (kind, start, end) in children(moof, head, moof.len()) {
            if &kind != b"traf" {
                continue;
            }
            let kids = children(moof, start, end);
            let track = kids
                .iter()
                .find(|k| &k.0 == b"tfhd")
                .and_then(|&(_, s, _)| u32_at(moof, s + 4));
            let tfdt = kids.iter().find(|k| &k.0 == b"tfdt");
            let (Some(track), Some(&(_, s, e))) = (track, tfdt) else {
                continue;
            };
            let wide = moof[s] == 1;
            let at = s + 4;
            let t = match wide {
                true if at + 8 <= e => u64_at(moof, at),
                false if at + 4 <= e => u32_at(moof, at).map(u64::from),
                _ => None,
            };
            let Some(t) = t else { continue };
            let base = match self.bases.iter().find(|b| b.0 == track) {
                Some(b) => b.1,
                None => {
                    self.bases.push((track, t));
                    t
                }
            };
            let v = t.saturating_sub(base);
            if wide {
                moof[at..at + 8].copy_from_slice(&v.to_be_bytes_shifted());
            } else {
                moof[at..at + 4].copy_from_slice(&(v as u32).to_be_bytes_shifted());
            }
        }
    }
}

/// Big-endian bytes by shifts (the workspace lints out the `to_be_bytes` family).
trait BeBytes<const N: usize> {
    fn to_be_bytes_shifted(self) -> [u8; N];
}

impl BeBytes<8> for u64 {
    fn to_be_bytes_shifted(self) -> [u8; 8] {
        std::array::from_fn(|i| (self >> (56 - 8 * i)) as u8)
    }
}

impl BeBytes<4> for u32 {
    fn to_be_bytes_shifted(self) -> [u8; 4] {
        std::array::from_fn(|i| (self >> (24 - 8 * i)) as u8)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bx(kind: &[u8; 4], payload: &[u8]) -> Vec<u8> {
        let mut b = ((8 + payload.len()) as u32).to_be_bytes_shifted().to_vec();
        b.extend_from_slice(kind);
        b.extend_from_slice(payload);
        b
    }

    /// A fragment: a moof with one traf per (track, tfdt, version), then an mdat.
    fn fragment(trafs: &[(u32, u64, u8)]) -> Vec<u8> {
        let mut moof = bx(b"mfhd", &[0, 0, 0, 0, 0, 0, 0, 7]);
        for &(track, t, v) in trafs {
            let mut tfhd = vec![0, 2, 0, 0];
            tfhd.extend_from_slice(&track.to_be_bytes_shifted());
            let mut tfdt = vec![v, 0, 0, 0];
            match v {
                1 => tfdt.extend_from_slice(&t.to_be_bytes_shifted()),
                _ => tfdt.extend_from_slice(&(t as u32).to_be_bytes_shifted()),
            }
            let traf = [
                bx(b"tfhd", &tfhd),
                bx(b"tfdt", &tfdt),
                bx(b"trun", &[0; 12]),
            ]
            .concat();
            moof.extend(bx(b"traf", &traf));
        }
        [bx(b"moof", &moof), bx(b"mdat", &[0xAB; 300])].concat()
    }

    fn run(bytes: &[u8], piece: usize) -> (Vec<u8>, Mp4Retimer) {
        let mut r = Mp4Retimer::new();
        let mut out = vec![];
        for p in bytes.chunks(piece) {
            out.extend(r.feed(p));
        }
        out.extend(r.finish());
        (out, r)
    }

    #[test]
    fn each_tracks_decode_times_start_at_zero_and_nothing_else_changes() {
        let init = [bx(b"ftyp", b"isom\0\0\0\0"), bx(b"moov", &[1; 50])].concat();
        let clip = [
            init.clone(),
            fragment(&[(1, 1_260_000, 1), (2, 672_000, 0)]),
            bx(b"sidx", &[9; 40]),
            fragment(&[(1, 1_440_000, 1), (2, 768_000, 0)]),
            bx(b"mfra", &[9; 30]),
        ]
        .concat();
        let want = [
            init,
            fragment(&[(1, 0, 1), (2, 0, 0)]),
            fragment(&[(1, 180_000, 1), (2, 96_000, 0)]),
        ]
        .concat();
        for piece in [1, 7, 8, 100, 1 << 20] {
            let (out, r) = run(&clip, piece);
            assert!(out == want, "split into {piece}-byte pieces");
            assert_eq!(r.gave_up(), None);
        }
    }

    #[test]
    fn a_box_that_makes_no_sense_passes_the_rest_unchanged() {
        let mut clip = fragment(&[(1, 500, 1)]);
        let bad = clip.len();
        clip.extend_from_slice(&[0, 0, 0, 3, b'x', b'y', b'z', b'w', 1, 2, 3]);
        clip.extend(fragment(&[(1, 900, 1)]));
        let (out, r) = run(&clip, 5);
        assert!(out[bad..] == clip[bad..]);
        assert_eq!(out.len(), clip.len());
        assert!(r.gave_up().is_some());
    }

    /// A child of the moof whose 64-bit size is near 2^64 ends the walk (found by the
    /// clip fuzz target: the sum of its offset and size wrapped).
    #[test]
    fn a_64_bit_child_size_near_the_top_ends_the_walk() {
        let mut child = vec![0, 0, 0, 1];
        child.extend_from_slice(b"traf");
        child.extend_from_slice(&(u64::MAX - 3).to_be_bytes_shifted());
        let moof = bx(b"moof", &child);
        let clip = [moof.clone(), bx(b"mdat", &[7; 20])].concat();
        let (out, r) = run(&clip, 3);
        assert!(out == clip);
        assert_eq!(r.gave_up(), None);
    }

    proptest::proptest! {
        /// Any bytes, split anywhere: no panic, the same output for any split, never
        /// longer than the input (boxes are only dropped or rewritten in place).
        #[test]
        fn any_bytes_any_split(data in proptest::collection::vec(proptest::num::u8::ANY, 0..3000), piece in 1usize..400) {
            let (whole, _) = run(&data, data.len().max(1));
            let (split, _) = run(&data, piece);
            proptest::prop_assert!(whole == split);
            proptest::prop_assert!(whole.len() <= data.len());
        }
    }
}
