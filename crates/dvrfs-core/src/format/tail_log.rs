//! Behind `FEATURE_TAIL_LOG` (FORMAT.md section 11a): the tail log, a ring of 4 KiB
//! blocks at the end of the primary metadata region holding the bytes of recordings'
//! partial requests, so that a slow recording is durable within its interval without
//! a short write in place (one positioning per stream) at every gather point.
//!
//! **Log positions.** Every block ever written to the ring has a *log position*, a
//! `u64` counting blocks from 0 at mkfs and never reused; position `p` lies at ring
//! block `p mod tail_log_blocks`. The superblock (in every transaction) carries
//! `tail_log_tail` and `tail_log_head`: the batches in `[tail, head)` are the live
//! ones, replayed at recovery. A header block names its own log position in its
//! `block_no`, so a block left from an earlier lap of the ring (its position is
//! smaller by a multiple of the ring) fails verification instead of being replayed.
//!
//! **A batch** (what one commit logs) is one run of log positions:
//!
//! ```text
//!   [header 0] .. [header h-1] [data of entry 0] [data of entry 1] ...
//! ```
//!
//! Each header block (type 13, sealed like any metadata block: uuid, `block_no` = its
//! log position, `seq` = the transaction that commits the batch) lists up to
//! [`ENTRIES_PER_HEADER`] entries: a file (inode and generation), the file offset
//! and length of the bytes, their CRC32C, and the log position of their first data
//! block. An entry's bytes follow the headers, each entry padded to whole 4 KiB
//! blocks (raw bytes, no header: the entry's CRC covers them).
//!
//! Fault model: a batch is written and flushed before the journal write of the
//! transaction whose superblock puts it inside `[tail, head)`, so a committed batch
//! is whole unless the media damaged it. A header that does not verify, or an entry
//! whose bytes fail their CRC, is reported and skipped by the reader; nothing here
//! stops a volume from opening.

use super::*;

/// Bytes of the tail-log fields in the superblock: they take the last 48 bytes of
/// its payload, which the lost-tail record gives up on a volume with the log (156
/// entries instead of 158, `events::max_tails`).
pub const SB_TAIL_LOG_BYTES: usize = 48;
/// Where they lie in the superblock's payload.
pub const SB_TAIL_LOG_AT: usize = PAYLOAD_BYTES - SB_TAIL_LOG_BYTES;
const _: () = assert!(SB_TAIL_LOG_AT == 4000);
/// Offsets within those 48 bytes: area start, area length (blocks), tail, head (log
/// positions), then 16 zero bytes.
pub(super) const SBT_START: usize = SB_TAIL_LOG_AT;
pub(super) const SBT_BLOCKS: usize = SBT_START + 8;
pub(super) const SBT_TAIL: usize = SBT_BLOCKS + 8;
pub(super) const SBT_HEAD: usize = SBT_TAIL + 8;
const _: () = assert!(SBT_HEAD + 8 + 16 == PAYLOAD_BYTES);

// Header block payload.
const H_TXN: usize = 0; // u64: the transaction that commits the batch (the header's seq)
const H_BATCH_POS: usize = H_TXN + 8; // u64: log position of the batch's first block
const H_BATCH_BLOCKS: usize = H_BATCH_POS + 8; // u32: blocks of the whole batch
const H_HEADERS: usize = H_BATCH_BLOCKS + 4; // u32: header blocks of the batch
const H_INDEX: usize = H_HEADERS + 4; // u32: which header this is
const H_COUNT: usize = H_INDEX + 4; // u32: entries in this header
const H_ENTRIES: usize = H_COUNT + 4;
// One entry.
const E_INO: usize = 0; // u32
const E_GENERATION: usize = E_INO + 4; // u32
const E_OFFSET: usize = E_GENERATION + 4; // u64: file offset of the bytes
const E_LEN: usize = E_OFFSET + 8; // u32: bytes
const E_CRC: usize = E_LEN + 4; // u32: CRC32C of the bytes
const E_DATA_POS: usize = E_CRC + 4; // u64: log position of the bytes' first block
/// Bytes of one entry.
pub const ENTRY_BYTES: usize = E_DATA_POS + 8;
/// Entries one header block lists.
pub const ENTRIES_PER_HEADER: usize = (PAYLOAD_BYTES - H_ENTRIES) / ENTRY_BYTES;
const _: () = assert!(H_ENTRIES == 32 && ENTRY_BYTES == 32);
const _: () = assert!(ENTRIES_PER_HEADER == 125);
const _: () = assert!(H_ENTRIES + ENTRIES_PER_HEADER * ENTRY_BYTES <= PAYLOAD_BYTES);
/// Longest entry: a stream request is at most 16 MiB.
pub const MAX_ENTRY_BYTES: u64 = 16 << 20;

/// One entry of a batch: bytes of a file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Entry {
    pub ino: u32,
    pub generation: u32,
    pub offset_bytes: u64,
    pub len_bytes: u32,
    pub crc: u32,
    /// Log position of the first block of the bytes.
    pub data_pos: u64,
}

impl Entry {
    pub fn end_bytes(&self) -> u64 {
        self.offset_bytes + self.len_bytes as u64
    }
}

/// A decoded header block.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BatchHeader {
    pub txn: u64,
    pub batch_pos: u64,
    pub batch_blocks: u32,
    pub headers: u32,
    pub index: u32,
    pub entries: Vec<Entry>,
}

/// Blocks the bytes of one entry take.
pub fn data_blocks(len_bytes: u64) -> u64 {
    len_bytes.div_ceil(META_BLOCK_BYTES as u64)
}

/// Blocks a batch of entries with these lengths takes: its headers and their data.
pub fn batch_blocks(lens: impl Iterator<Item = u64>) -> u64 {
    let (n, data) = lens.fold((0u64, 0u64), |(n, d), l| (n + 1, d + data_blocks(l)));
    n.div_ceil(ENTRIES_PER_HEADER as u64) + data
}

/// The CRC32C an entry carries for its bytes.
pub fn entry_crc(bytes: &[u8]) -> u32 {
    crc32c::crc32c(bytes)
}

/// Encodes a whole batch at log position `pos` for transaction `txn`: the header
/// blocks then each entry's bytes, padded. `entries` gives (inode, generation, file
/// offset, bytes). The result is `batch_blocks` x 4 KiB.
pub fn encode_batch(
    uuid: &Uuid,
    txn: u64,
    pos: u64,
    entries: &[(u32, u32, u64, &[u8])],
) -> Vec<u8> {
    assert!(!entries.is_empty(), "an empty batch is never written");
    let headers = entries.len().div_ceil(ENTRIES_PER_HEADER);
    let total = batch_blocks(entries.iter().map(|e| e.3.len() as u64));
    assert!(total <= u32::MAX as u64);
    let bs = META_BLOCK_BYTES;
    let mut out = vec![0u8; total as usize * bs];
    let mut data_pos = pos + headers as u64;
    let mut listed = Vec::with_capacity(entries.len());
    for &(ino, generation, offset, bytes) in entries {
        assert!(ino != 0 && !bytes.is_empty() && bytes.len() as u64 <= MAX_ENTRY_BYTES);
        let at = (data_pos - pos) as usize * bs;
        out[at..at + bytes.len()].copy_from_slice(bytes);
        listed.push(Entry {
            ino,
            generation,
            offset_bytes: offset,
            len_bytes: bytes.len() as u32,
            crc: entry_crc(bytes),
            data_pos,
        });
        data_pos += data_blocks(bytes.len() as u64);
    }
    assert_eq!(data_pos, pos + total);
    for (i, chunk) in listed.chunks(ENTRIES_PER_HEADER).enumerate() {
        let b = &mut out[i * bs..(i + 1) * bs];
        let p = payload_mut(b);
        put_u64(p, H_TXN, txn);
        put_u64(p, H_BATCH_POS, pos);
        put_u32(p, H_BATCH_BLOCKS, total as u32);
        put_u32(p, H_HEADERS, headers as u32);
        put_u32(p, H_INDEX, i as u32);
        put_u32(p, H_COUNT, chunk.len() as u32);
        for (j, e) in chunk.iter().enumerate() {
            let at = H_ENTRIES + j * ENTRY_BYTES;
            put_u32(p, at + E_INO, e.ino);
            put_u32(p, at + E_GENERATION, e.generation);
            put_u64(p, at + E_OFFSET, e.offset_bytes);
            put_u32(p, at + E_LEN, e.len_bytes);
            put_u32(p, at + E_CRC, e.crc);
            put_u64(p, at + E_DATA_POS, e.data_pos);
        }
        seal_block(
            b,
            &Header {
                block_type: BlockType::TailLog,
                uuid: *uuid,
                block_no: pos + i as u64,
                seq: txn,
            },
        );
        debug_assert!(decode_header(b, uuid, pos + i as u64).is_ok());
    }
    out
}

/// Decodes the header block read at log position `pos`: it must verify as a tail-log
/// block of this file system naming `pos` (a block of an earlier lap names a smaller
/// position), and its fields must describe a batch it lies in, with entries whose
/// bytes lie inside the batch after its headers.
pub fn decode_header(block: &[u8], uuid: &Uuid, pos: u64) -> Result<BatchHeader, BlockError> {
    let h = verify_block(block, BlockType::TailLog, uuid, pos)?;
    let p = payload(block);
    let bad = |what| Err(BlockError::Malformed(what));
    let txn = get_u64(p, H_TXN);
    let batch_pos = get_u64(p, H_BATCH_POS);
    let batch_blocks = get_u32(p, H_BATCH_BLOCKS);
    let headers = get_u32(p, H_HEADERS);
    let index = get_u32(p, H_INDEX);
    let count = get_u32(p, H_COUNT) as usize;
    if txn != h.seq {
        return bad("tail-log header: transaction");
    }
    if headers == 0
        || index >= headers
        || batch_pos.checked_add(index as u64) != Some(pos)
        || headers > batch_blocks
    {
        return bad("tail-log header: batch shape");
    }
    if count == 0 || count > ENTRIES_PER_HEADER {
        return bad("tail-log header: entry count");
    }
    let data_start = batch_pos + headers as u64;
    let end = batch_pos + batch_blocks as u64;
    let mut entries = Vec::with_capacity(count);
    for j in 0..count {
        let at = H_ENTRIES + j * ENTRY_BYTES;
        let e = Entry {
            ino: get_u32(p, at + E_INO),
            generation: get_u32(p, at + E_GENERATION),
            offset_bytes: get_u64(p, at + E_OFFSET),
            len_bytes: get_u32(p, at + E_LEN),
            crc: get_u32(p, at + E_CRC),
            data_pos: get_u64(p, at + E_DATA_POS),
        };
        let fits = e
            .data_pos
            .checked_add(data_blocks(e.len_bytes as u64))
            .is_some_and(|x| x <= end);
        if e.ino == 0
            || e.len_bytes == 0
            || e.len_bytes as u64 > MAX_ENTRY_BYTES
            || e.data_pos < data_start
            || !fits
            || e.offset_bytes.checked_add(e.len_bytes as u64).is_none()
        {
            return bad("tail-log entry");
        }
        entries.push(e);
    }
    Ok(BatchHeader {
        txn,
        batch_pos,
        batch_blocks,
        headers,
        index,
        entries,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const U: Uuid = [3; 16];

    #[test]
    fn a_batch_round_trips_through_its_headers() {
        let a = vec![7u8; 5000];
        let b = vec![9u8; 4096];
        let bytes = encode_batch(&U, 12, 1000, &[(5, 2, 65536, &a), (6, 1, 0, &b)]);
        assert_eq!(bytes.len(), (1 + 2 + 1) * 4096);
        let h = decode_header(&bytes[..4096], &U, 1000).unwrap();
        assert_eq!(
            (h.txn, h.batch_pos, h.batch_blocks, h.headers),
            (12, 1000, 4, 1)
        );
        assert_eq!(h.entries.len(), 2);
        let e = h.entries[0];
        assert_eq!(
            (e.ino, e.generation, e.offset_bytes, e.len_bytes),
            (5, 2, 65536, 5000)
        );
        assert_eq!(e.data_pos, 1001);
        let at = (e.data_pos - 1000) as usize * 4096;
        assert_eq!(entry_crc(&bytes[at..at + 5000]), e.crc);
        assert_eq!(h.entries[1].data_pos, 1003);
    }

    #[test]
    fn many_entries_take_several_headers() {
        let one = [1u8; 10];
        let entries: Vec<_> = (1..=300u32).map(|i| (i, 0, 0, &one[..])).collect();
        let bytes = encode_batch(&U, 1, 0, &entries);
        assert_eq!(bytes.len() as u64, (3 + 300) * 4096);
        let counts: Vec<usize> = (0..3)
            .map(|i| {
                decode_header(&bytes[i * 4096..(i + 1) * 4096], &U, i as u64)
                    .unwrap()
                    .entries
                    .len()
            })
            .collect();
        assert_eq!(counts, [125, 125, 50]);
    }

    #[test]
    fn a_header_of_an_earlier_lap_is_not_taken_for_this_one() {
        let a = vec![1u8; 100];
        let bytes = encode_batch(&U, 4, 10, &[(2, 0, 0, &a)]);
        // Ring of 64 blocks: position 74 lies where position 10 was written.
        assert_eq!(
            decode_header(&bytes[..4096], &U, 74),
            Err(BlockError::Misplaced { found: 10 })
        );
        assert_eq!(
            decode_header(&bytes[..4096], &[4; 16], 10),
            Err(BlockError::WrongUuid)
        );
    }
}
