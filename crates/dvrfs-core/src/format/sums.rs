//! Data checksum blocks: a CRC32C for every granule of every data block.
//!
//! The checksum area holds one entry per (data block, granule) pair, in data block
//! order: entry `block * granules_per_block + granule`. Checksum block `k` of the area
//! holds entries `k * SUMS_PER_BLOCK ..`: first the CRC32C values (u32 each), then a
//! bitmap with one bit per entry, set when the entry holds the checksum of the
//! granule's bytes. A clear bit means "not checked" (never written, or cut by a
//! truncation); what a set bit covers is fixed by the file that maps the block, see
//! `FORMAT.md` section 10a.

use super::*;

/// Entries per checksum block.
pub const SUMS_PER_BLOCK: usize = 960;
const SUM_CRCS: usize = 0;
const SUM_VALID: usize = SUM_CRCS + SUMS_PER_BLOCK * 4;
/// Payload bytes of a checksum block in use; the rest is zero.
pub const SUM_USED_BYTES: usize = SUM_VALID + SUMS_PER_BLOCK / 8;
const _: () = assert!(SUMS_PER_BLOCK.is_multiple_of(64));
const _: () = assert!(SUM_USED_BYTES == 3960);
const _: () = assert!(SUM_USED_BYTES <= PAYLOAD_BYTES);

/// Writes entries `(crc, valid)` into a checksum block payload.
pub fn encode_sums(entries: impl Iterator<Item = Option<u32>>, payload: &mut [u8]) {
    for (i, e) in entries.take(SUMS_PER_BLOCK).enumerate() {
        if let Some(crc) = e {
            put_u32(payload, SUM_CRCS + i * 4, crc);
            payload[SUM_VALID + i / 8] |= 1 << (i % 8);
        }
    }
}

/// Entry `i` (`< SUMS_PER_BLOCK`) of a checksum block payload: the CRC if its bit is set.
pub fn decode_sum(payload: &[u8], i: usize) -> Option<u32> {
    (payload[SUM_VALID + i / 8] & (1 << (i % 8)) != 0).then(|| get_u32(payload, SUM_CRCS + i * 4))
}

/// The CRC32C of a granule's place, `ino` and the file offset of its first byte (16
/// bytes, little-endian u64s): every checksum starts from it, so bytes that are
/// intact but at the wrong place (a run pointing at another file's block, or at
/// another offset of the same file) fail their check too.
pub fn place_seed(ino: u32, file_offset: u64) -> u32 {
    let mut b = [0u8; 16];
    b[..8].copy_from_slice(&(ino as u64).to_le_bytes());
    b[8..].copy_from_slice(&file_offset.to_le_bytes());
    crc32c::crc32c(&b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_round_trip_with_their_valid_bits() {
        let mut p = vec![0u8; PAYLOAD_BYTES];
        let entries: Vec<Option<u32>> = (0..SUMS_PER_BLOCK as u32)
            .map(|i| (i % 3 != 0).then_some(i.wrapping_mul(0x9E37_79B9)))
            .collect();
        encode_sums(entries.iter().copied(), &mut p);
        for (i, e) in entries.iter().enumerate() {
            assert_eq!(decode_sum(&p, i), *e, "entry {i}");
        }
        assert!(p[SUM_USED_BYTES..].iter().all(|&b| b == 0));
    }
}
