//! All byte-level encoding of the on-disk format (little-endian everywhere).
//!
//! Only this module knows offsets; the rest of the core works with typed values.
//! `FORMAT.md` at the repository root documents the same layout with diagrams; every
//! offset here is derived from the previous one so the two cannot drift silently.
//!
//! Every metadata block is [`META_BLOCK_BYTES`] long and starts with a self-describing
//! header (magic, block type, CRC32C, file-system UUID, its own block number, sequence
//! number). [`verify_block`] checks all of it on every read, so a torn block (bad CRC),
//! a block from another file system (UUID) or a misdirected write (block number) is
//! detected instead of trusted.

pub mod bitmap;
pub mod dir;
pub mod events;
pub mod frame_index;
pub mod inode;
pub mod journal;
pub mod sums;
pub mod superblock;
pub mod tail_log;

/// Size of every metadata block.
pub const META_BLOCK_BYTES: usize = 4096;
/// "DVRF" read as a little-endian u32.
pub const MAGIC: u32 = u32::from_le_bytes(*b"DVRF");
/// On-disk format version written by this code.
pub const FORMAT_VERSION: u16 = 1;

// Header layout, each offset following the previous field.
const H_MAGIC: usize = 0; // u32
const H_TYPE: usize = H_MAGIC + 4; // u16
const H_VERSION: usize = H_TYPE + 2; // u16
const H_CRC: usize = H_VERSION + 2; // u32, CRC32C of the block with this field zeroed
const H_RESERVED: usize = H_CRC + 4; // u32, zero
const H_UUID: usize = H_RESERVED + 4; // [u8; 16]
const H_BLOCK_NO: usize = H_UUID + 16; // u64, the block's own metadata block number
const H_SEQ: usize = H_BLOCK_NO + 8; // u64, transaction that wrote it
/// Bytes of header at the start of every metadata block.
pub const HEADER_BYTES: usize = H_SEQ + 8;
/// Bytes after the header.
pub const PAYLOAD_BYTES: usize = META_BLOCK_BYTES - HEADER_BYTES;
pub use bitmap::BITS_PER_BITMAP_BLOCK;

const _: () = assert!(HEADER_BYTES == 48);
const _: () = assert!(META_BLOCK_BYTES.is_multiple_of(512));

/// The file-type bits of a POSIX mode (`st_mode & S_IFMT`), shared by the inode
/// record's mode field (`inode.rs`) and the kind of a directory entry (`dir.rs`).
pub const S_IFMT: u32 = 0o170000;
pub const S_IFREG: u32 = 0o100000;
pub const S_IFDIR: u32 = 0o040000;
pub const S_IFLNK: u32 = 0o120000;

/// A file-system identity, random at mkfs.
pub type Uuid = [u8; 16];

/// What a metadata block holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[repr(u16)]
pub enum BlockType {
    Superblock = 1,
    DataBitmap = 2,
    MetaBitmap = 3,
    InodeTable = 4,
    Directory = 5,
    Runs = 6,
    Symlink = 7,
    JournalDescriptor = 8,
    JournalCommit = 9,
    /// Reserved for the frame index (a later format revision fills it).
    FrameIndex = 10,
    /// Data checksums (`sums.rs`).
    Sums = 11,
    /// The event log's ring (`events.rs`).
    EventLog = 12,
    /// A header block of a tail-log batch (`tail_log.rs`).
    TailLog = 13,
}

impl BlockType {
    pub fn from_u16(v: u16) -> Option<BlockType> {
        use BlockType::*;
        Some(match v {
            1 => Superblock,
            2 => DataBitmap,
            3 => MetaBitmap,
            4 => InodeTable,
            5 => Directory,
            6 => Runs,
            7 => Symlink,
            8 => JournalDescriptor,
            9 => JournalCommit,
            10 => FrameIndex,
            11 => Sums,
            12 => EventLog,
            13 => TailLog,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        use BlockType::*;
        match self {
            Superblock => "superblock",
            DataBitmap => "data bitmap",
            MetaBitmap => "metadata bitmap",
            InodeTable => "inode table",
            Directory => "directory",
            Runs => "indirect runs",
            Symlink => "symlink",
            JournalDescriptor => "journal descriptor",
            JournalCommit => "journal commit",
            FrameIndex => "frame index",
            Sums => "data checksum",
            EventLog => "event log",
            TailLog => "tail log",
        }
    }
}

/// The parsed header of a metadata block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    pub block_type: BlockType,
    pub uuid: Uuid,
    pub block_no: u64,
    pub seq: u64,
}

/// Why a metadata block was rejected.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum BlockError {
    #[error("no dvrfs block header (bad magic)")]
    BadMagic,
    #[error("checksum mismatch (torn or corrupted block)")]
    BadChecksum,
    #[error("unsupported format version {0}")]
    Version(u16),
    #[error("unknown block type {0}")]
    UnknownType(u16),
    #[error("expected a {expected} block, found a {found} block")]
    WrongType {
        expected: &'static str,
        found: &'static str,
    },
    #[error("block belongs to another file system")]
    WrongUuid,
    #[error("misplaced block: header says block {found}")]
    Misplaced { found: u64 },
    #[error("malformed {0}")]
    Malformed(&'static str),
}

pub fn get_u16(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}
pub fn get_u32(b: &[u8], at: usize) -> u32 {
    let mut x = [0u8; 4];
    x.copy_from_slice(&b[at..at + 4]);
    u32::from_le_bytes(x)
}
pub fn get_u64(b: &[u8], at: usize) -> u64 {
    let mut x = [0u8; 8];
    x.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(x)
}
pub fn get_i64(b: &[u8], at: usize) -> i64 {
    get_u64(b, at) as i64
}
pub fn put_u16(b: &mut [u8], at: usize, v: u16) {
    b[at..at + 2].copy_from_slice(&v.to_le_bytes());
}
pub fn put_u32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_le_bytes());
}
pub fn put_u64(b: &mut [u8], at: usize, v: u64) {
    b[at..at + 8].copy_from_slice(&v.to_le_bytes());
}
pub fn put_i64(b: &mut [u8], at: usize, v: i64) {
    put_u64(b, at, v as u64);
}

/// A fresh zeroed metadata block.
pub fn new_block() -> Box<[u8; META_BLOCK_BYTES]> {
    Box::new([0u8; META_BLOCK_BYTES])
}

fn block_crc(block: &[u8]) -> u32 {
    let crc = crc32c::crc32c(&block[..H_CRC]);
    let crc = crc32c::crc32c_append(crc, &[0u8; 4]);
    crc32c::crc32c_append(crc, &block[H_CRC + 4..])
}

/// Fills in the header of `block` (whose payload is already written) and seals it with
/// its checksum. Call last, after every payload byte is final.
pub fn seal_block(block: &mut [u8], header: &Header) {
    debug_assert_eq!(block.len(), META_BLOCK_BYTES);
    put_u32(block, H_MAGIC, MAGIC);
    put_u16(block, H_TYPE, header.block_type as u16);
    put_u16(block, H_VERSION, FORMAT_VERSION);
    put_u32(block, H_RESERVED, 0);
    block[H_UUID..H_UUID + 16].copy_from_slice(&header.uuid);
    put_u64(block, H_BLOCK_NO, header.block_no);
    put_u64(block, H_SEQ, header.seq);
    put_u32(block, H_CRC, 0);
    let crc = block_crc(block);
    put_u32(block, H_CRC, crc);
    debug_assert!(parse_header(block).is_ok());
}

/// Checks magic, version, type and checksum; does not check identity or position.
pub fn parse_header(block: &[u8]) -> Result<Header, BlockError> {
    if block.len() != META_BLOCK_BYTES || get_u32(block, H_MAGIC) != MAGIC {
        return Err(BlockError::BadMagic);
    }
    if get_u32(block, H_CRC) != block_crc(block) {
        return Err(BlockError::BadChecksum);
    }
    let version = get_u16(block, H_VERSION);
    if version != FORMAT_VERSION {
        return Err(BlockError::Version(version));
    }
    let raw_type = get_u16(block, H_TYPE);
    let block_type = BlockType::from_u16(raw_type).ok_or(BlockError::UnknownType(raw_type))?;
    let mut uuid = [0u8; 16];
    uuid.copy_from_slice(&block[H_UUID..H_UUID + 16]);
    Ok(Header {
        block_type,
        uuid,
        block_no: get_u64(block, H_BLOCK_NO),
        seq: get_u64(block, H_SEQ),
    })
}

/// Full verification of a block read from where `block_no` should live.
pub fn verify_block(
    block: &[u8],
    expected: BlockType,
    uuid: &Uuid,
    block_no: u64,
) -> Result<Header, BlockError> {
    let h = parse_header(block)?;
    if h.block_type != expected {
        return Err(BlockError::WrongType {
            expected: expected.name(),
            found: h.block_type.name(),
        });
    }
    if &h.uuid != uuid {
        return Err(BlockError::WrongUuid);
    }
    if h.block_no != block_no {
        return Err(BlockError::Misplaced { found: h.block_no });
    }
    Ok(h)
}

/// The payload part of a block.
pub fn payload(block: &[u8]) -> &[u8] {
    &block[HEADER_BYTES..]
}
pub fn payload_mut(block: &mut [u8]) -> &mut [u8] {
    &mut block[HEADER_BYTES..]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> (Box<[u8; META_BLOCK_BYTES]>, Header) {
        let mut b = new_block();
        payload_mut(&mut b[..])[10] = 42;
        let h = Header {
            block_type: BlockType::InodeTable,
            uuid: [9; 16],
            block_no: 77,
            seq: 5,
        };
        seal_block(&mut b[..], &h);
        (b, h)
    }

    #[test]
    fn sealed_block_verifies() {
        let (b, h) = sample();
        assert_eq!(
            verify_block(&b[..], BlockType::InodeTable, &[9; 16], 77),
            Ok(h)
        );
    }

    #[test]
    fn every_flipped_byte_is_detected() {
        let (b, _) = sample();
        for i in 0..META_BLOCK_BYTES {
            let mut c = b.clone();
            c[i] ^= 0x10;
            assert!(
                verify_block(&c[..], BlockType::InodeTable, &[9; 16], 77).is_err(),
                "flip at byte {i} went unnoticed"
            );
        }
    }

    #[test]
    fn misplaced_and_foreign_blocks_are_rejected() {
        let (b, _) = sample();
        assert_eq!(
            verify_block(&b[..], BlockType::InodeTable, &[9; 16], 78),
            Err(BlockError::Misplaced { found: 77 })
        );
        assert_eq!(
            verify_block(&b[..], BlockType::InodeTable, &[8; 16], 77),
            Err(BlockError::WrongUuid)
        );
        assert!(matches!(
            verify_block(&b[..], BlockType::Directory, &[9; 16], 77),
            Err(BlockError::WrongType { .. })
        ));
        assert_eq!(
            verify_block(&[0u8; META_BLOCK_BYTES], BlockType::Directory, &[9; 16], 77),
            Err(BlockError::BadMagic)
        );
    }
}
