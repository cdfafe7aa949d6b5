//! The superblock: the geometry of the file system and its few global counters.
//!
//! Three copies: metadata block 0 of the primary region, block 0 of the backup region,
//! and the last 4 KiB of the device. All three carry block number 0 in their header
//! (they are the same logical block), so the images are byte-identical.

use super::*;

/// Data-block allocation policy, fixed at mkfs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AllocPolicy {
    /// Zone round robin (AVFS 3.2.2).
    Zrr,
    /// Contiguous with a preallocation window (HERMES 5).
    Contig,
    /// Plain first fit, the baseline.
    Seq,
}

impl AllocPolicy {
    pub fn as_str(self) -> &'static str {
        match self {
            AllocPolicy::Zrr => "zrr",
            AllocPolicy::Contig => "contig",
            AllocPolicy::Seq => "seq",
        }
    }
    pub fn parse(s: &str) -> Option<AllocPolicy> {
        match s {
            "zrr" => Some(AllocPolicy::Zrr),
            "contig" => Some(AllocPolicy::Contig),
            "seq" => Some(AllocPolicy::Seq),
            _ => None,
        }
    }
    fn to_u8(self) -> u8 {
        match self {
            AllocPolicy::Zrr => 1,
            AllocPolicy::Contig => 2,
            AllocPolicy::Seq => 3,
        }
    }
    fn from_u8(v: u8) -> Option<AllocPolicy> {
        match v {
            1 => Some(AllocPolicy::Zrr),
            2 => Some(AllocPolicy::Contig),
            3 => Some(AllocPolicy::Seq),
            _ => None,
        }
    }
}

/// The decoded superblock. Region starts and lengths of the metadata areas are in
/// metadata blocks (4 KiB) from the start of the device; the data and backup regions
/// are given in bytes because data blocks are not 4 KiB.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Superblock {
    pub uuid: Uuid,
    pub device_bytes: u64,
    pub data_block_bytes: u64,
    /// Length of the primary metadata region (superblock + journal + the rest).
    pub meta_blocks: u64,
    pub journal_start: u64,
    pub journal_blocks: u64,
    pub data_bitmap_start: u64,
    pub data_bitmap_blocks: u64,
    pub meta_bitmap_start: u64,
    pub meta_bitmap_blocks: u64,
    pub inode_table_start: u64,
    pub inode_table_blocks: u64,
    pub dynamic_start: u64,
    pub dynamic_blocks: u64,
    pub data_start_bytes: u64,
    pub data_blocks: u64,
    pub backup_start_bytes: u64,
    pub inode_count: u32,
    pub root_ino: u32,
    pub alloc: AllocPolicy,
    pub zone_count: u32,
    pub zone_blocks: u64,
    pub prealloc_blocks: u32,
    pub commit_interval_ms: u32,
    /// ZRR: the zone where the next new file starts.
    pub zrr_cursor: u32,
    /// The last transaction checkpointed into this region.
    pub last_txn: u64,
    pub created_ns: i64,
    /// How many leading inode-table blocks may hold a live inode: every inode in use
    /// lies below `inode_blocks_used * INODES_PER_BLOCK`. Raised (in the same
    /// transaction) when an inode past it is allocated, never lowered.
    /// A loader reads only these blocks of the inode table (and a margin past them);
    /// 0 in a volume made before the field existed: read the whole table.
    pub inode_blocks_used: u64,
    /// The data checksum area (`format/sums.rs`): it follows the dynamic area and
    /// ends the primary region. 0 blocks (a volume made before 2026-11-25, or with
    /// checksums turned off): no data checksums, and `sum_start` and
    /// `sum_granule_bytes` are 0 too.
    pub sum_start: u64,
    pub sum_blocks: u64,
    /// Bytes of data one checksum covers: a power of two from 64 KiB to the block size.
    pub sum_granule_bytes: u64,
    /// Feature bits ([`FEATURE_MAP_SUMS`], [`FEATURE_EVENTS`], [`FEATURE_TAIL_LOG`],
    /// [`FEATURE_INLINE_SYMLINKS`]); 0 in a volume made
    /// before they existed.
    pub features: u32,
    /// The event area (`format/events.rs`): the event log's ring. It follows the
    /// checksum area (or the dynamic area) and ends the primary region. 0 and 0
    /// without [`FEATURE_EVENTS`]. (The lost-tail record lies in this block's own
    /// reserved bytes: `events::TAILS_AT`, not a field of this struct.)
    pub events_start: u64,
    pub events_blocks: u64,
    /// The tail log (`format/tail_log.rs`, [`FEATURE_TAIL_LOG`]): a ring of
    /// `tail_log_blocks` blocks from `tail_log_start`, the last area of the primary
    /// region and the only one besides the journal with no copy in the backup region.
    /// All four are 0 without the feature. They lie in the last 48 bytes of the
    /// payload (`tail_log::SB_TAIL_LOG_AT`), which the lost-tail record gives up.
    pub tail_log_start: u64,
    pub tail_log_blocks: u64,
    /// Log positions (blocks, from 0 at mkfs, never reused): the batches in
    /// `[tail_log_tail, tail_log_head)` hold bytes not yet in place, replayed at
    /// recovery. Committed with every transaction, like `last_txn`.
    pub tail_log_tail: u64,
    pub tail_log_head: u64,
    /// The volume's retention policy ([`FEATURE_RETENTION`]; all 0 without one).
    pub retention: VolumeRetention,
}

/// The volume's retention policy (`dvrfs retention TARGET / --high --low
/// --protected-max`), in thousandths of the data region. 0 = not set.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct VolumeRetention {
    /// Above this share used, the oldest unprotected chunks go ...
    pub high_permille: u16,
    /// ... down to this share.
    pub low_permille: u16,
    /// Protected clips may hold at most this share.
    pub protected_max_permille: u16,
}

/// Every regular file's inode record carries its map checksum (FORMAT.md section 7):
/// set by mkfs. On such a volume a file record whose checksum reads 0 ("not kept")
/// was damaged; on an older volume 0 may be a record written before map checksums.
pub const FEATURE_MAP_SUMS: u32 = 1;
/// The volume has an event log (`events_start`, `events_blocks`) and every
/// superblock image carries the lost-tail record of its transaction
/// (`events::TAILS_AT`). Set by mkfs since 2026-11-27; an older volume opens without
/// them (no event log, no lost-tail report).
pub const FEATURE_EVENTS: u32 = 2;
/// The volume has a tail log (`tail_log_*`): a recording's partial request is
/// logged in the commit instead of written in place at each gather point, and
/// replayed into its file at recovery (FORMAT.md section 11a). Set by mkfs since
/// 2026-11-27 unless `--no-tail-log`; a volume without it keeps the in-place gather.
pub const FEATURE_TAIL_LOG: u32 = 4;
/// A symbolic link whose target fits in its inode record's map bytes
/// (`inode::MAX_INLINE_TARGET_BYTES`) is stored there, with no runs and no block
/// (FORMAT.md section 10): set by mkfs since 2026-11-27. Without it every link has
/// a symlink block, as before; a build that does not know the bit refuses the volume
/// (it would read such a link as one with no target).
pub const FEATURE_INLINE_SYMLINKS: u32 = 8;
/// Files may carry a frame index: a tree of frame-index blocks (type 10) named by
/// their inode's `frame_index_root` and `frame_count` (FORMAT.md section 10c). Set by
/// mkfs since 2026-11-28, and by the first index a volume without it stores: a build
/// that does not know the bit refuses the volume (it would free a file without its
/// index blocks, and read their blocks as leaked).
pub const FEATURE_FRAME_INDEX: u32 = 16;
/// Retention policies are stored: the volume's in the superblock (`retention_*`),
/// a stream directory's in its inode record (`inode::FLAG_RETENTION`, FORMAT.md
/// sections 5 and 7). Set by mkfs since 2026-11-29, and by the first policy stored
/// on a volume without it: a build that does not know the bit refuses the volume
/// (it would read a directory's policy as a frame index and clear it).
pub const FEATURE_RETENTION: u32 = 32;
/// Chunks may be protected clips: a regular file with `inode::FLAG_PROTECTED`
/// carries its protection's expiry and id where a recording's frame rate would be
/// (FORMAT.md section 7, `dvrfs protect`). Set by mkfs since 2026-11-29, and by the
/// first protection stored on a volume without it: a build that does not know the
/// bit refuses the volume (its retention would delete a protected clip).
pub const FEATURE_PROTECTION: u32 = 64;
/// The feature bits this build knows; a superblock with another is malformed.
pub const KNOWN_FEATURES: u32 = FEATURE_MAP_SUMS
    | FEATURE_EVENTS
    | FEATURE_TAIL_LOG
    | FEATURE_INLINE_SYMLINKS
    | FEATURE_FRAME_INDEX
    | FEATURE_RETENTION
    | FEATURE_PROTECTION;
/// Fewest blocks of a tail log (two 512 KiB requests and their headers).
pub const MIN_TAIL_LOG_BLOCKS: u64 = 258;
/// Data block size bounds (a power of two in this range; FORMAT.md section 3).
pub const MIN_DATA_BLOCK_BYTES: u64 = 64 << 10;
pub const MAX_DATA_BLOCK_BYTES: u64 = 1 << 30;
/// ZRR never uses more zones than this (AVFS 3.2.2).
pub const MAX_ZONES: u32 = 32;
/// Fewest blocks of an event area.
pub const MIN_EVENTS_BLOCKS: u64 = 1;

// Payload layout.
const S_DEVICE: usize = 0;
const S_DATA_BLOCK: usize = S_DEVICE + 8;
const S_META_BLOCKS: usize = S_DATA_BLOCK + 8;
const S_JOURNAL: usize = S_META_BLOCKS + 8; // start u64, blocks u64
const S_DBITMAP: usize = S_JOURNAL + 16;
const S_MBITMAP: usize = S_DBITMAP + 16;
const S_ITABLE: usize = S_MBITMAP + 16;
const S_DYNAMIC: usize = S_ITABLE + 16;
const S_DATA_START: usize = S_DYNAMIC + 16;
const S_DATA_BLOCKS: usize = S_DATA_START + 8;
const S_BACKUP_START: usize = S_DATA_BLOCKS + 8;
const S_INODE_COUNT: usize = S_BACKUP_START + 8;
const S_ROOT: usize = S_INODE_COUNT + 4;
const S_ALLOC: usize = S_ROOT + 4; // u8 + 3 zero bytes
const S_ZONE_COUNT: usize = S_ALLOC + 4;
const S_ZONE_BLOCKS: usize = S_ZONE_COUNT + 4;
const S_PREALLOC: usize = S_ZONE_BLOCKS + 8;
const S_COMMIT_MS: usize = S_PREALLOC + 4;
const S_ZRR_CURSOR: usize = S_COMMIT_MS + 4;
const S_RET_HIGH: usize = S_ZRR_CURSOR + 4; // u16 permille
const S_RET_LOW: usize = S_RET_HIGH + 2; // u16 permille
const S_LAST_TXN: usize = S_RET_LOW + 2;
const _: () = assert!(S_RET_HIGH == 164 && S_LAST_TXN == 168);
const S_CREATED: usize = S_LAST_TXN + 8;
const S_INODE_BLOCKS_USED: usize = S_CREATED + 8;
const S_SUMS: usize = S_INODE_BLOCKS_USED + 8; // start u64, blocks u64
const S_SUM_GRANULE: usize = S_SUMS + 16;
const S_FEATURES: usize = S_SUM_GRANULE + 8; // u32 + 4 zero bytes
const S_RET_PROTECTED: usize = S_FEATURES + 4; // u16 permille + u16 zero
const S_EVENTS: usize = S_FEATURES + 8; // start u64, blocks u64
const _: () = assert!(S_RET_PROTECTED == 220);
/// Bytes of the superblock payload in use; the rest is zero (reserved).
pub const SUPERBLOCK_USED_BYTES: usize = S_EVENTS + 16;
const _: () = assert!(S_EVENTS == 224);
const _: () = assert!(SUPERBLOCK_USED_BYTES == 240);

/// Where a metadata block lies ([`Superblock::area_of`]); the number is the block's
/// index within its area.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Area {
    Superblock,
    Journal,
    DataBitmap(u64),
    MetaBitmap(u64),
    InodeTable(u64),
    Sums(u64),
    /// The event area: block `k` of the event log's ring.
    Events(u64),
    /// The tail log: block `k` of its ring (never checkpointed, no backup copy).
    TailLog(u64),
    /// The dynamic area (directories, indirect runs, symlinks), or past it.
    Dynamic,
}

impl Superblock {
    /// Every regular file's record carries its map checksum ([`FEATURE_MAP_SUMS`]).
    pub fn map_sums_kept(&self) -> bool {
        self.features & FEATURE_MAP_SUMS != 0
    }

    /// The volume keeps an event log and lost-tail records ([`FEATURE_EVENTS`]).
    pub fn has_events(&self) -> bool {
        self.features & FEATURE_EVENTS != 0
    }

    /// The volume has a tail log ([`FEATURE_TAIL_LOG`]).
    pub fn has_tail_log(&self) -> bool {
        self.features & FEATURE_TAIL_LOG != 0
    }

    /// Files may carry a frame index ([`FEATURE_FRAME_INDEX`]).
    pub fn has_frame_index(&self) -> bool {
        self.features & FEATURE_FRAME_INDEX != 0
    }

    /// Retention policies may be stored ([`FEATURE_RETENTION`]).
    pub fn has_retention(&self) -> bool {
        self.features & FEATURE_RETENTION != 0
    }

    /// Chunks may carry a protection ([`FEATURE_PROTECTION`]).
    pub fn has_protection(&self) -> bool {
        self.features & FEATURE_PROTECTION != 0
    }

    /// Short symlink targets live in their inode records ([`FEATURE_INLINE_SYMLINKS`]).
    pub fn has_inline_symlinks(&self) -> bool {
        self.features & FEATURE_INLINE_SYMLINKS != 0
    }

    /// The backup region holds every primary metadata block except the journal and
    /// the tail log (which ends the primary region): both only matter until the
    /// next commit puts what they hold in place, so a second copy would only add
    /// writes.
    pub fn backup_blocks(&self) -> u64 {
        self.meta_blocks - self.journal_blocks - self.tail_log_blocks
    }

    /// Whether block `n` lies in the tail log.
    pub fn in_tail_log(&self, n: u64) -> bool {
        n >= self.tail_log_start && n < self.tail_log_start + self.tail_log_blocks
    }

    /// Byte offset of the ring block holding log position `pos`.
    pub fn tail_log_offset(&self, pos: u64) -> u64 {
        debug_assert!(self.tail_log_blocks > 0);
        self.primary_offset(self.tail_log_start + pos % self.tail_log_blocks)
    }

    /// Byte offset of the primary copy of metadata block `n`.
    pub fn primary_offset(&self, n: u64) -> u64 {
        n * META_BLOCK_BYTES as u64
    }

    /// Byte offset of the backup copy of metadata block `n` (`n` outside the journal).
    pub fn backup_offset(&self, n: u64) -> u64 {
        debug_assert!(!self.in_journal(n) && !self.in_tail_log(n));
        let idx = if n >= self.journal_start + self.journal_blocks {
            n - self.journal_blocks
        } else {
            n
        };
        self.backup_start_bytes + idx * META_BLOCK_BYTES as u64
    }

    /// Byte offset of the third superblock copy: the last metadata block of the device.
    pub fn last_copy_offset(&self) -> u64 {
        // `validate` keeps device_bytes at two blocks or more.
        self.device_bytes.saturating_sub(META_BLOCK_BYTES as u64)
    }

    pub fn in_journal(&self, n: u64) -> bool {
        n >= self.journal_start && n < self.journal_start + self.journal_blocks
    }

    /// The area of the primary metadata region that block `n` lies in, with its index
    /// within the area (FORMAT.md, the region's layout). Anything not in a fixed area
    /// is [`Area::Dynamic`]: the dynamic metadata area, or past it.
    pub fn area_of(&self, n: u64) -> Area {
        let within = |start: u64, len: u64| (n >= start && n < start + len).then(|| n - start);
        if n == 0 {
            Area::Superblock
        } else if self.in_journal(n) {
            Area::Journal
        } else if let Some(i) = within(self.data_bitmap_start, self.data_bitmap_blocks) {
            Area::DataBitmap(i)
        } else if let Some(i) = within(self.meta_bitmap_start, self.meta_bitmap_blocks) {
            Area::MetaBitmap(i)
        } else if let Some(i) = within(self.inode_table_start, self.inode_table_blocks) {
            Area::InodeTable(i)
        } else if let Some(i) = within(self.sum_start, self.sum_blocks) {
            Area::Sums(i)
        } else if let Some(i) = within(self.events_start, self.events_blocks) {
            Area::Events(i)
        } else if let Some(i) = within(self.tail_log_start, self.tail_log_blocks) {
            Area::TailLog(i)
        } else {
            Area::Dynamic
        }
    }

    pub fn data_offset(&self, data_block: u64) -> u64 {
        self.data_start_bytes + data_block * self.data_block_bytes
    }

    /// The superblock's block image, sealed with sequence `seq`.
    ///
    /// Panics if `self` fails [`Superblock::validate`]: every superblock the code
    /// makes (mkfs's plan, a commit's update, a repair's rewrite) is valid, so one that
    /// is not is a bug, and writing it would leave a copy no open accepts.
    pub fn encode(&self, seq: u64) -> Box<[u8; META_BLOCK_BYTES]> {
        if let Err(e) = self.validate() {
            panic!(
                "dvrfs bug: refusing to write a superblock that fails validation ({e}): {self:?}"
            );
        }
        let mut b = new_block();
        let p = payload_mut(&mut b[..]);
        put_u64(p, S_DEVICE, self.device_bytes);
        put_u64(p, S_DATA_BLOCK, self.data_block_bytes);
        put_u64(p, S_META_BLOCKS, self.meta_blocks);
        put_u64(p, S_JOURNAL, self.journal_start);
        put_u64(p, S_JOURNAL + 8, self.journal_blocks);
        put_u64(p, S_DBITMAP, self.data_bitmap_start);
        put_u64(p, S_DBITMAP + 8, self.data_bitmap_blocks);
        put_u64(p, S_MBITMAP, self.meta_bitmap_start);
        put_u64(p, S_MBITMAP + 8, self.meta_bitmap_blocks);
        put_u64(p, S_ITABLE, self.inode_table_start);
        put_u64(p, S_ITABLE + 8, self.inode_table_blocks);
        put_u64(p, S_DYNAMIC, self.dynamic_start);
        put_u64(p, S_DYNAMIC + 8, self.dynamic_blocks);
        put_u64(p, S_DATA_START, self.data_start_bytes);
        put_u64(p, S_DATA_BLOCKS, self.data_blocks);
        put_u64(p, S_BACKUP_START, self.backup_start_bytes);
        put_u32(p, S_INODE_COUNT, self.inode_count);
        put_u32(p, S_ROOT, self.root_ino);
        p[S_ALLOC] = self.alloc.to_u8();
        put_u32(p, S_ZONE_COUNT, self.zone_count);
        put_u64(p, S_ZONE_BLOCKS, self.zone_blocks);
        put_u32(p, S_PREALLOC, self.prealloc_blocks);
        put_u32(p, S_COMMIT_MS, self.commit_interval_ms);
        put_u32(p, S_ZRR_CURSOR, self.zrr_cursor);
        put_u64(p, S_LAST_TXN, self.last_txn);
        put_i64(p, S_CREATED, self.created_ns);
        put_u64(p, S_INODE_BLOCKS_USED, self.inode_blocks_used);
        put_u64(p, S_SUMS, self.sum_start);
        put_u64(p, S_SUMS + 8, self.sum_blocks);
        put_u64(p, S_SUM_GRANULE, self.sum_granule_bytes);
        put_u32(p, S_FEATURES, self.features);
        let r = self.retention;
        put_u16(p, S_RET_HIGH, r.high_permille);
        put_u16(p, S_RET_LOW, r.low_permille);
        put_u16(p, S_RET_PROTECTED, r.protected_max_permille);
        put_u64(p, S_EVENTS, self.events_start);
        put_u64(p, S_EVENTS + 8, self.events_blocks);
        if self.has_tail_log() {
            use super::tail_log::{SBT_BLOCKS, SBT_HEAD, SBT_START, SBT_TAIL};
            put_u64(p, SBT_START, self.tail_log_start);
            put_u64(p, SBT_BLOCKS, self.tail_log_blocks);
            put_u64(p, SBT_TAIL, self.tail_log_tail);
            put_u64(p, SBT_HEAD, self.tail_log_head);
        }
        seal_block(
            &mut b[..],
            &Header {
                block_type: BlockType::Superblock,
                uuid: self.uuid,
                block_no: 0,
                seq,
            },
        );
        b
    }

    /// Decodes and validates a superblock image: checksum, then that every region lies
    /// inside the device and no two overlap.
    pub fn decode(block: &[u8]) -> Result<Superblock, BlockError> {
        let h = parse_header(block)?;
        if h.block_type != BlockType::Superblock {
            return Err(BlockError::WrongType {
                expected: BlockType::Superblock.name(),
                found: h.block_type.name(),
            });
        }
        if h.block_no != 0 {
            return Err(BlockError::Misplaced { found: h.block_no });
        }
        let p = payload(block);
        let alloc =
            AllocPolicy::from_u8(p[S_ALLOC]).ok_or(BlockError::Malformed("allocation policy"))?;
        let sb = Superblock {
            uuid: h.uuid,
            device_bytes: get_u64(p, S_DEVICE),
            data_block_bytes: get_u64(p, S_DATA_BLOCK),
            meta_blocks: get_u64(p, S_META_BLOCKS),
            journal_start: get_u64(p, S_JOURNAL),
            journal_blocks: get_u64(p, S_JOURNAL + 8),
            data_bitmap_start: get_u64(p, S_DBITMAP),
            data_bitmap_blocks: get_u64(p, S_DBITMAP + 8),
            meta_bitmap_start: get_u64(p, S_MBITMAP),
            meta_bitmap_blocks: get_u64(p, S_MBITMAP + 8),
            inode_table_start: get_u64(p, S_ITABLE),
            inode_table_blocks: get_u64(p, S_ITABLE + 8),
            dynamic_start: get_u64(p, S_DYNAMIC),
            dynamic_blocks: get_u64(p, S_DYNAMIC + 8),
            data_start_bytes: get_u64(p, S_DATA_START),
            data_blocks: get_u64(p, S_DATA_BLOCKS),
            backup_start_bytes: get_u64(p, S_BACKUP_START),
            inode_count: get_u32(p, S_INODE_COUNT),
            root_ino: get_u32(p, S_ROOT),
            alloc,
            zone_count: get_u32(p, S_ZONE_COUNT),
            zone_blocks: get_u64(p, S_ZONE_BLOCKS),
            prealloc_blocks: get_u32(p, S_PREALLOC),
            commit_interval_ms: get_u32(p, S_COMMIT_MS),
            zrr_cursor: get_u32(p, S_ZRR_CURSOR),
            last_txn: get_u64(p, S_LAST_TXN),
            created_ns: get_i64(p, S_CREATED),
            inode_blocks_used: get_u64(p, S_INODE_BLOCKS_USED),
            sum_start: get_u64(p, S_SUMS),
            sum_blocks: get_u64(p, S_SUMS + 8),
            sum_granule_bytes: get_u64(p, S_SUM_GRANULE),
            features: get_u32(p, S_FEATURES),
            events_start: get_u64(p, S_EVENTS),
            events_blocks: get_u64(p, S_EVENTS + 8),
            tail_log_start: 0,
            tail_log_blocks: 0,
            tail_log_tail: 0,
            tail_log_head: 0,
            retention: VolumeRetention::default(),
        };
        let mut sb = sb;
        if sb.has_retention() {
            sb.retention = VolumeRetention {
                high_permille: get_u16(p, S_RET_HIGH),
                low_permille: get_u16(p, S_RET_LOW),
                protected_max_permille: get_u16(p, S_RET_PROTECTED),
            };
        }
        if sb.has_tail_log() {
            use super::tail_log::{SBT_BLOCKS, SBT_HEAD, SBT_START, SBT_TAIL};
            sb.tail_log_start = get_u64(p, SBT_START);
            sb.tail_log_blocks = get_u64(p, SBT_BLOCKS);
            sb.tail_log_tail = get_u64(p, SBT_TAIL);
            sb.tail_log_head = get_u64(p, SBT_HEAD);
        }
        sb.validate()?;
        Ok(sb)
    }

    /// The relations every superblock must satisfy, checked in this order (the first
    /// that fails is named).
    pub fn validate(&self) -> Result<(), BlockError> {
        let m = |what| Err(BlockError::Malformed(what));
        self.validate_sizes()?;
        let next = self.fixed_areas_end()?;
        let next = self.sum_area_end(next)?;
        let next = self.event_area_end(next)?;
        let next = self.tail_log_end(next)?;
        if next != self.meta_blocks || self.meta_blocks >= u32::MAX as u64 {
            return m("metadata region length");
        }
        self.validate_region_bounds()?;
        self.validate_tables()
    }

    /// Known feature bits, the data block size, the device size and the alignment of
    /// the regions given in bytes.
    fn validate_sizes(&self) -> Result<(), BlockError> {
        let m = |what| Err(BlockError::Malformed(what));
        if self.features & !KNOWN_FEATURES != 0 {
            return m("feature bits");
        }
        let r = self.retention;
        let pair_ok = (r.high_permille == 0 && r.low_permille == 0)
            || (0 < r.low_permille && r.low_permille <= r.high_permille && r.high_permille <= 1000);
        if (!self.has_retention() && r != VolumeRetention::default())
            || !pair_ok
            || r.protected_max_permille > 1000
        {
            return m("retention policy");
        }
        let bs = self.data_block_bytes;
        if !bs.is_power_of_two() || !(MIN_DATA_BLOCK_BYTES..=MAX_DATA_BLOCK_BYTES).contains(&bs) {
            return m("data block size");
        }
        if !self.device_bytes.is_multiple_of(META_BLOCK_BYTES as u64)
            || self.device_bytes < 2 * META_BLOCK_BYTES as u64
        {
            return m("device size");
        }
        // Every device access is 4 KiB-aligned: so are the regions given in bytes.
        if !self
            .data_start_bytes
            .is_multiple_of(META_BLOCK_BYTES as u64)
            || !self
                .backup_start_bytes
                .is_multiple_of(META_BLOCK_BYTES as u64)
        {
            return m("region alignment");
        }
        Ok(())
    }

    /// Where the fixed metadata areas (journal, bitmaps, inode table, dynamic area)
    /// end, each following the previous one from block 1.
    fn fixed_areas_end(&self) -> Result<u64, BlockError> {
        let m = |what| Err(BlockError::Malformed(what));
        // The metadata areas follow each other in this order, starting after block 0.
        let areas = [
            (self.journal_start, self.journal_blocks),
            (self.data_bitmap_start, self.data_bitmap_blocks),
            (self.meta_bitmap_start, self.meta_bitmap_blocks),
            (self.inode_table_start, self.inode_table_blocks),
            (self.dynamic_start, self.dynamic_blocks),
        ];
        let mut next = 1u64;
        for (start, len) in areas {
            if start != next || len == 0 {
                return m("metadata region layout");
            }
            next = match start.checked_add(len) {
                Some(n) => n,
                None => return m("metadata region layout"),
            };
        }
        Ok(next)
    }

    /// Where the checksum area ends (`next` when there is none).
    fn sum_area_end(&self, mut next: u64) -> Result<u64, BlockError> {
        let m = |what| Err(BlockError::Malformed(what));
        let bs = self.data_block_bytes;
        // The checksum area, when there is one, follows the dynamic area.
        if self.sum_blocks == 0 {
            if self.sum_start != 0 || self.sum_granule_bytes != 0 {
                return m("checksum area");
            }
        } else {
            let g = self.sum_granule_bytes;
            let entries = (bs / g.max(1)).saturating_mul(self.data_blocks);
            if self.sum_start != next
                || !g.is_power_of_two()
                || g < MIN_DATA_BLOCK_BYTES
                || g > bs
                || self.sum_blocks < entries.div_ceil(super::sums::SUMS_PER_BLOCK as u64)
            {
                return m("checksum area");
            }
            next = match next.checked_add(self.sum_blocks) {
                Some(n) => n,
                None => return m("checksum area"),
            };
        }
        Ok(next)
    }

    /// Where the event area ends (`next` when there is none).
    fn event_area_end(&self, mut next: u64) -> Result<u64, BlockError> {
        let m = |what| Err(BlockError::Malformed(what));
        // The event area, with its feature bit, follows them and ends the region.
        if !self.has_events() {
            if self.events_start != 0 || self.events_blocks != 0 {
                return m("event area");
            }
        } else {
            if self.events_start != next || self.events_blocks < MIN_EVENTS_BLOCKS {
                return m("event area");
            }
            next = match next.checked_add(self.events_blocks) {
                Some(n) => n,
                None => return m("event area"),
            };
        }
        Ok(next)
    }

    /// Where the tail log ends (`next` when there is none).
    fn tail_log_end(&self, mut next: u64) -> Result<u64, BlockError> {
        let m = |what| Err(BlockError::Malformed(what));
        // The tail log, with its feature bit, comes last; its live part is never
        // longer than the ring.
        if !self.has_tail_log() {
            if self.tail_log_start != 0
                || self.tail_log_blocks != 0
                || self.tail_log_tail != 0
                || self.tail_log_head != 0
            {
                return m("tail log");
            }
        } else {
            if self.tail_log_start != next
                || self.tail_log_blocks < MIN_TAIL_LOG_BLOCKS
                || self.tail_log_tail > self.tail_log_head
                || self.tail_log_head - self.tail_log_tail > self.tail_log_blocks
            {
                return m("tail log");
            }
            next = match next.checked_add(self.tail_log_blocks) {
                Some(n) => n,
                None => return m("tail log"),
            };
        }
        Ok(next)
    }

    /// The primary metadata, the data region and the backup region follow each other
    /// within the device, before its last superblock copy.
    fn validate_region_bounds(&self) -> Result<(), BlockError> {
        let m = |what| Err(BlockError::Malformed(what));
        let bs = self.data_block_bytes;
        let primary_end = self.meta_blocks * META_BLOCK_BYTES as u64;
        let data_end = self
            .data_blocks
            .checked_mul(bs)
            .and_then(|x| x.checked_add(self.data_start_bytes));
        let backup_end = self
            .backup_blocks()
            .checked_mul(META_BLOCK_BYTES as u64)
            .and_then(|x| x.checked_add(self.backup_start_bytes));
        match (data_end, backup_end) {
            (Some(d), Some(b))
                if self.data_start_bytes >= primary_end
                    && d <= self.backup_start_bytes
                    && b <= self.last_copy_offset() => {}
            _ => return m("region bounds"),
        }
        Ok(())
    }

    /// The bitmaps cover what they map, the inode table holds the inodes and the root,
    /// and the zones divide the data region.
    fn validate_tables(&self) -> Result<(), BlockError> {
        let m = |what| Err(BlockError::Malformed(what));
        // Products saturate: every field is read from disk and may be anything.
        let bits = super::BITS_PER_BITMAP_BLOCK;
        if self.data_bitmap_blocks.saturating_mul(bits) < self.data_blocks
            || self.meta_bitmap_blocks.saturating_mul(bits) < self.dynamic_blocks
        {
            return m("bitmap size");
        }
        if self.inode_count < 2
            || self
                .inode_table_blocks
                .saturating_mul(super::inode::INODES_PER_BLOCK as u64)
                < self.inode_count as u64
            || self.root_ino == 0
            || self.root_ino >= self.inode_count
            || self.inode_blocks_used > self.inode_table_blocks
        {
            return m("inode table");
        }
        if self.zone_count == 0
            || self.zone_count > MAX_ZONES
            || self.zone_blocks != self.data_blocks.div_ceil(self.zone_count as u64)
            || self.zrr_cursor >= self.zone_count
        {
            return m("zones");
        }
        Ok(())
    }
}
