//! A plain bit set over block numbers, with the searches the allocators need.

use crate::format;
pub use crate::format::BITS_PER_BITMAP_BLOCK;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Bitmap {
    words: Vec<u64>,
    len: u64,
}

impl Bitmap {
    pub fn new(len: u64) -> Self {
        Bitmap {
            words: vec![0; len.div_ceil(64) as usize],
            len,
        }
    }

    pub fn len(&self) -> u64 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn get(&self, i: u64) -> bool {
        debug_assert!(i < self.len);
        self.words[(i / 64) as usize] >> (i % 64) & 1 == 1
    }

    pub fn set(&mut self, i: u64, v: bool) {
        // Every allocator transition ends here: a bit past the end would be a block
        // that does not exist.
        assert!(
            i < self.len,
            "bit {i} of a {}-bit bitmap (a dvrfs bug)",
            self.len
        );
        let w = &mut self.words[(i / 64) as usize];
        if v {
            *w |= 1 << (i % 64);
        } else {
            *w &= !(1 << (i % 64));
        }
    }

    pub fn count_ones(&self) -> u64 {
        self.words.iter().map(|w| w.count_ones() as u64).sum()
    }

    /// First clear bit in `from..to`.
    pub fn first_clear(&self, from: u64, to: u64) -> Option<u64> {
        let to = to.min(self.len);
        let mut i = from;
        while i < to {
            let w = self.words[(i / 64) as usize];
            if i.is_multiple_of(64) && w == u64::MAX {
                i += 64;
                continue;
            }
            if w >> (i % 64) & 1 == 0 {
                return Some(i);
            }
            i += 1;
        }
        None
    }

    /// Length of the run of clear bits starting at `at`, capped at `max`.
    pub fn clear_run_at(&self, at: u64, max: u64) -> u64 {
        let mut n = 0;
        while n < max && at + n < self.len && !self.get(at + n) {
            n += 1;
        }
        n
    }

    /// The first run of `want` clear bits; if none, the longest run (start, length);
    /// `None` when every bit is set.
    pub fn find_clear_run(&self, want: u64) -> Option<(u64, u64)> {
        let mut best: Option<(u64, u64)> = None;
        let mut i = 0;
        while let Some(start) = self.first_clear(i, self.len) {
            let n = self.clear_run_at(start, want);
            if n >= want {
                return Some((start, want));
            }
            if best.is_none_or(|(_, b)| n > b) {
                best = Some((start, n));
            }
            i = start + n;
        }
        best
    }

    /// Serialises bits `k * BITS_PER_BITMAP_BLOCK ..` into a bitmap block payload (the
    /// byte order is `format/bitmap.rs`'s).
    pub fn encode_block(&self, k: u64, payload: &mut [u8]) {
        format::bitmap::encode_words(&self.words[self.block_words(k)], payload);
    }

    pub fn decode_block(&mut self, k: u64, payload: &[u8]) {
        let tail = self.len % 64;
        let last = self.words.len().wrapping_sub(1);
        for (w, mut v) in self
            .block_words(k)
            .zip(format::bitmap::decode_words(payload))
        {
            if w == last && tail != 0 {
                v &= (1 << tail) - 1;
            }
            self.words[w] = v;
        }
    }

    /// The indices of the words that bitmap block `k` holds (fewer in the last).
    fn block_words(&self, k: u64) -> std::ops::Range<usize> {
        const WORDS: u64 = format::bitmap::WORDS_PER_BITMAP_BLOCK as u64;
        let first = (k * WORDS).min(self.words.len() as u64);
        first as usize..(first + WORDS).min(self.words.len() as u64) as usize
    }

    /// Set bits beyond `len` in a stored block, which must be zero.
    pub fn block_has_stray_bits(&self, k: u64, payload: &[u8]) -> bool {
        let base = k * BITS_PER_BITMAP_BLOCK;
        let valid = self.len.saturating_sub(base).min(BITS_PER_BITMAP_BLOCK);
        let (whole, part) = ((valid / 8) as usize, valid % 8);
        let partial = part != 0 && payload[whole] >> part != 0;
        let rest = whole + (part != 0) as usize;
        partial
            || payload[rest..BITS_PER_BITMAP_BLOCK as usize / 8]
                .iter()
                .any(|&b| b != 0)
    }
}

// Bitmap blocks hold whole words, so a block's bits start on a word.
const _: () = assert!(BITS_PER_BITMAP_BLOCK.is_multiple_of(64));

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn searches_find_first_and_longest_runs() {
        let mut b = Bitmap::new(200);
        for i in 0..200 {
            b.set(i, true);
        }
        assert_eq!(b.first_clear(0, 200), None);
        for i in [3, 4, 5, 100, 101, 102, 103, 104] {
            b.set(i, false);
        }
        assert_eq!(b.first_clear(0, 200), Some(3));
        assert_eq!(b.first_clear(6, 200), Some(100));
        assert_eq!(b.find_clear_run(3), Some((3, 3)));
        assert_eq!(b.find_clear_run(4), Some((100, 4)));
        assert_eq!(b.find_clear_run(10), Some((100, 5)));
        let mut p = vec![0u8; crate::format::PAYLOAD_BYTES];
        b.encode_block(0, &mut p);
        let mut c = Bitmap::new(200);
        c.decode_block(0, &p);
        assert_eq!(b, c);
        assert!(!c.block_has_stray_bits(0, &p));
        p[200 / 8 + 1] = 1;
        assert!(c.block_has_stray_bits(0, &p));
    }

    /// The word-wise block codec against its definition, bit by bit: bit i of the
    /// volume is payload byte (i - base) / 8, bit (i - base) % 8 of block i / bits.
    #[test]
    fn blocks_hold_bits_in_payload_order_and_stray_bits_are_any_beyond_len() {
        let bits = BITS_PER_BITMAP_BLOCK;
        for len in [1, 63, 64, 65, 200, bits - 1, bits, bits + 1, 2 * bits + 77] {
            let mut b = Bitmap::new(len);
            let mut x = len | 1;
            for i in 0..len {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                b.set(i, x & 1 == 1);
            }
            let mut back = Bitmap::new(len);
            for k in 0..len.div_ceil(bits) {
                let mut p = vec![0xffu8; crate::format::PAYLOAD_BYTES];
                b.encode_block(k, &mut p);
                for j in 0..bits {
                    let i = k * bits + j;
                    let stored = p[(j / 8) as usize] >> (j % 8) & 1 == 1;
                    assert_eq!(stored, i < len && b.get(i), "len {len}, bit {i}");
                }
                assert!(!b.block_has_stray_bits(k, &p));
                // Noise beyond `len` is dropped on decode and reported as stray.
                let mut noisy = p.clone();
                let first_stray = (len - k * bits).min(bits);
                for j in (first_stray..bits).step_by(61) {
                    noisy[(j / 8) as usize] |= 1 << (j % 8);
                    assert!(b.block_has_stray_bits(k, &noisy), "len {len}, bit {j}");
                }
                back.decode_block(k, &noisy);
            }
            assert_eq!(back, b, "len {len}");
        }
    }
}
