//! Bitmap blocks (FORMAT.md section 6): the data bitmap and the metadata bitmap are
//! runs of metadata blocks whose whole payload is bits, one per block they track.
//! Bit `i` of a payload is byte `i / 8`, bit `i % 8`, least significant first: the
//! little-endian bytes of 64-bit words, since every block starts on a word. Bits past
//! the end of what a bitmap tracks are zero on disk and ignored when read.

use super::PAYLOAD_BYTES;

/// Bits per bitmap block: the whole payload of a metadata block.
pub const BITS_PER_BITMAP_BLOCK: u64 = (PAYLOAD_BYTES * 8) as u64;
/// 64-bit words per bitmap block.
pub const WORDS_PER_BITMAP_BLOCK: usize = PAYLOAD_BYTES / 8;
const _: () = assert!(PAYLOAD_BYTES.is_multiple_of(8));

/// Writes `words` (at most a block's worth) into a bitmap block's payload, zeroing
/// the rest of it.
pub fn encode_words(words: &[u64], payload: &mut [u8]) {
    assert!(
        words.len() <= WORDS_PER_BITMAP_BLOCK && payload.len() == PAYLOAD_BYTES,
        "a bitmap block holds {WORDS_PER_BITMAP_BLOCK} words in a {PAYLOAD_BYTES}-byte payload"
    );
    payload.fill(0);
    for (w, bytes) in words.iter().zip(payload.chunks_exact_mut(8)) {
        bytes.copy_from_slice(&w.to_le_bytes());
    }
}

/// The words of a bitmap block's payload, in order.
pub fn decode_words(payload: &[u8]) -> impl Iterator<Item = u64> + '_ {
    payload
        .chunks_exact(8)
        .map(|b| u64::from_le_bytes(b.try_into().expect("chunks of 8 bytes")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_round_trip_least_significant_bit_first() {
        let mut p = vec![0xAAu8; PAYLOAD_BYTES];
        encode_words(&[1, 1 << 63], &mut p);
        assert_eq!(p[0], 1, "bit 0 is the least significant bit of byte 0");
        assert_eq!(
            p[15], 0x80,
            "bit 127 is the most significant bit of byte 15"
        );
        assert!(p[16..].iter().all(|&b| b == 0), "the rest is zeroed");
        let words: Vec<u64> = decode_words(&p).take(3).collect();
        assert_eq!(words, vec![1, 1 << 63, 0]);
    }
}
