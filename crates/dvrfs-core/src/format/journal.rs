//! Journal records.
//!
//! A transaction is written as one sequential run from the start of the journal area:
//!
//! ```text
//! [descriptor 0] .. [descriptor d-1] [image 0] .. [image n-1] [commit]
//! ```
//!
//! Descriptors list the metadata block numbers the images belong to. Images are the
//! target blocks verbatim (their own headers name the target and carry the
//! transaction number as sequence). The commit block holds a CRC32C over every
//! descriptor and image byte, so a torn or partly written transaction is detected and
//! ignored as a whole, never half applied.

use super::*;

const J_TXN: usize = 0; // u64
const J_TOTAL: usize = J_TXN + 8; // u32 images in the transaction
const J_FIRST: usize = J_TOTAL + 4; // u32 index of this descriptor's first entry
const J_COUNT: usize = J_FIRST + 4; // u32 entries in this descriptor
const J_ENTRIES: usize = J_COUNT + 8; // after 4 bytes of padding; u64 each
/// Target block numbers per descriptor block.
pub const TARGETS_PER_DESCRIPTOR: usize = (PAYLOAD_BYTES - J_ENTRIES) / 8;
const _: () = assert!(TARGETS_PER_DESCRIPTOR == 503);

const C_TXN: usize = 0; // u64
const C_TOTAL: usize = C_TXN + 8; // u32
const C_DESCRIPTORS: usize = C_TOTAL + 4; // u32
const C_CRC: usize = C_DESCRIPTORS + 4; // u32 over descriptors and images

pub fn descriptor_count(images: usize) -> usize {
    images.div_ceil(TARGETS_PER_DESCRIPTOR).max(1)
}

/// Journal blocks a transaction of `images` images takes.
pub fn transaction_blocks(images: usize) -> usize {
    descriptor_count(images) + images + 1
}

/// Builds the bytes of a transaction. `journal_start` is the metadata block number of
/// the first journal block (descriptor headers name their own position).
pub fn encode_transaction(
    uuid: &Uuid,
    journal_start: u64,
    txn: u64,
    images: &[(u64, &[u8])],
) -> Vec<u8> {
    let d = descriptor_count(images.len());
    let total = transaction_blocks(images.len());
    let mut out = vec![0u8; total * META_BLOCK_BYTES];
    for k in 0..d {
        let first = k * TARGETS_PER_DESCRIPTOR;
        let chunk =
            &images[first.min(images.len())..(first + TARGETS_PER_DESCRIPTOR).min(images.len())];
        let b = &mut out[k * META_BLOCK_BYTES..(k + 1) * META_BLOCK_BYTES];
        let p = payload_mut(b);
        put_u64(p, J_TXN, txn);
        put_u32(p, J_TOTAL, images.len() as u32);
        put_u32(p, J_FIRST, first as u32);
        put_u32(p, J_COUNT, chunk.len() as u32);
        for (i, (target, _)) in chunk.iter().enumerate() {
            put_u64(p, J_ENTRIES + 8 * i, *target);
        }
        seal_block(
            b,
            &Header {
                block_type: BlockType::JournalDescriptor,
                uuid: *uuid,
                block_no: journal_start + k as u64,
                seq: txn,
            },
        );
    }
    for (i, (_, image)) in images.iter().enumerate() {
        let at = (d + i) * META_BLOCK_BYTES;
        out[at..at + META_BLOCK_BYTES].copy_from_slice(image);
    }
    let body_end = (d + images.len()) * META_BLOCK_BYTES;
    let crc = crc32c::crc32c(&out[..body_end]);
    let c = &mut out[body_end..];
    let p = payload_mut(c);
    put_u64(p, C_TXN, txn);
    put_u32(p, C_TOTAL, images.len() as u32);
    put_u32(p, C_DESCRIPTORS, d as u32);
    put_u32(p, C_CRC, crc);
    seal_block(
        c,
        &Header {
            block_type: BlockType::JournalCommit,
            uuid: *uuid,
            block_no: journal_start + (d + images.len()) as u64,
            seq: txn,
        },
    );
    out
}

/// Recomputes the commit record's CRC over a whole transaction (`bytes`, exactly its
/// blocks) and reseals the commit block: for the fuzzer, which edits descriptors and
/// images of a committed transaction so that no checksum sees the damage.
pub fn reseal_transaction(bytes: &mut [u8]) {
    let body = bytes.len() - META_BLOCK_BYTES;
    let crc = crc32c::crc32c(&bytes[..body]);
    let commit = &mut bytes[body..];
    let header = parse_header(commit);
    put_u32(payload_mut(commit), C_CRC, crc);
    if let Ok(h) = header {
        seal_block(commit, &h);
    }
}

/// What the first journal block says about the transaction that starts there.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TransactionHead {
    pub txn: u64,
    pub images: usize,
}

/// Reads the first descriptor: is there a transaction here, and how long is it?
pub fn parse_head(block: &[u8], uuid: &Uuid, journal_start: u64) -> Option<TransactionHead> {
    let h = verify_block(block, BlockType::JournalDescriptor, uuid, journal_start).ok()?;
    let p = payload(block);
    if get_u64(p, J_TXN) != h.seq || get_u32(p, J_FIRST) != 0 {
        return None;
    }
    Some(TransactionHead {
        txn: h.seq,
        images: get_u32(p, J_TOTAL) as usize,
    })
}

/// Checks a whole transaction read from the journal (exactly
/// `transaction_blocks(head.images)` blocks) and returns its (target, image) pairs, or
/// `None` if any part is torn, stale or inconsistent.
pub fn decode_transaction(
    bytes: &[u8],
    uuid: &Uuid,
    journal_start: u64,
    head: TransactionHead,
) -> Option<Vec<(u64, Vec<u8>)>> {
    let n = head.images;
    let d = descriptor_count(n);
    if bytes.len() != transaction_blocks(n) * META_BLOCK_BYTES {
        return None;
    }
    let block = |k: usize| &bytes[k * META_BLOCK_BYTES..(k + 1) * META_BLOCK_BYTES];
    let commit = block(d + n);
    let h = verify_block(
        commit,
        BlockType::JournalCommit,
        uuid,
        journal_start + (d + n) as u64,
    )
    .ok()?;
    let cp = payload(commit);
    if h.seq != head.txn
        || get_u64(cp, C_TXN) != head.txn
        || get_u32(cp, C_TOTAL) as usize != n
        || get_u32(cp, C_DESCRIPTORS) as usize != d
        || get_u32(cp, C_CRC) != crc32c::crc32c(&bytes[..(d + n) * META_BLOCK_BYTES])
    {
        return None;
    }
    let mut targets = Vec::with_capacity(n);
    for k in 0..d {
        let b = block(k);
        let h = verify_block(
            b,
            BlockType::JournalDescriptor,
            uuid,
            journal_start + k as u64,
        )
        .ok()?;
        let p = payload(b);
        let count = get_u32(p, J_COUNT) as usize;
        if h.seq != head.txn
            || get_u32(p, J_FIRST) as usize != k * TARGETS_PER_DESCRIPTOR
            || count > TARGETS_PER_DESCRIPTOR
        {
            return None;
        }
        targets.extend((0..count).map(|i| get_u64(p, J_ENTRIES + 8 * i)));
    }
    if targets.len() != n {
        return None;
    }
    let mut out = Vec::with_capacity(n);
    for (i, target) in targets.into_iter().enumerate() {
        let image = block(d + i);
        let h = parse_header(image).ok()?;
        if h.uuid != *uuid || h.block_no != target || h.seq != head.txn {
            return None;
        }
        out.push((target, image.to_vec()));
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn image(target: u64, txn: u64, fill: u8) -> Vec<u8> {
        let mut b = vec![0u8; META_BLOCK_BYTES];
        payload_mut(&mut b).fill(fill);
        seal_block(
            &mut b,
            &Header {
                block_type: BlockType::InodeTable,
                uuid: [3; 16],
                block_no: target,
                seq: txn,
            },
        );
        b
    }

    fn txn_bytes(n: usize) -> Vec<u8> {
        let imgs: Vec<(u64, Vec<u8>)> = (0..n)
            .map(|i| (100 + i as u64, image(100 + i as u64, 9, i as u8)))
            .collect();
        let refs: Vec<(u64, &[u8])> = imgs.iter().map(|(t, b)| (*t, &b[..])).collect();
        encode_transaction(&[3; 16], 1, 9, &refs)
    }

    #[test]
    fn transaction_round_trips_including_many_descriptors() {
        for n in [1, 2, 503, 504, 1200] {
            let bytes = txn_bytes(n);
            let head = parse_head(&bytes[..META_BLOCK_BYTES], &[3; 16], 1).unwrap();
            assert_eq!(head, TransactionHead { txn: 9, images: n });
            let got = decode_transaction(&bytes, &[3; 16], 1, head).unwrap();
            assert_eq!(got.len(), n);
            assert_eq!(got[n - 1].0, 100 + n as u64 - 1);
        }
    }

    #[test]
    fn replay_ignores_torn_commit_record() {
        let bytes = txn_bytes(5);
        let head = parse_head(&bytes[..META_BLOCK_BYTES], &[3; 16], 1).unwrap();
        // Tear at every sector boundary: a prefix of new bytes, old contents after.
        for keep in (0..bytes.len()).step_by(512) {
            let mut torn = bytes.clone();
            torn[keep..].fill(0xAA);
            assert!(
                decode_transaction(&torn, &[3; 16], 1, head).is_none(),
                "torn at {keep}"
            );
        }
        // A single flipped bit in any image is caught by the commit checksum.
        let mut bad = bytes.clone();
        bad[3 * META_BLOCK_BYTES + 2000] ^= 1;
        assert!(decode_transaction(&bad, &[3; 16], 1, head).is_none());
    }
}
