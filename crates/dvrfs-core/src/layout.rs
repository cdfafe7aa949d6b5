//! How mkfs divides a device: region sizes from the device size, the data block size
//! and the inode count. Pure arithmetic; `FORMAT.md` explains each rule.

use crate::error::{Error, Result};
use crate::format::inode::{INODES_PER_BLOCK, RUNS_PER_BLOCK};
use crate::format::sums::SUMS_PER_BLOCK;
use crate::format::superblock::{AllocPolicy, Superblock, MIN_TAIL_LOG_BLOCKS};
use crate::format::{Uuid, BITS_PER_BITMAP_BLOCK, META_BLOCK_BYTES};

pub use crate::format::superblock::{MAX_DATA_BLOCK_BYTES, MAX_ZONES, MIN_DATA_BLOCK_BYTES};
pub const DEFAULT_DATA_BLOCK_BYTES: u64 = 4 << 20;
/// AVFS: each zone no smaller than 16 GB.
pub const AVFS_MIN_ZONE_BYTES: u64 = 16_000_000_000;
/// Small images still get round-robin placement: up to this many zones of at least
/// [`SMALL_IMAGE_MIN_ZONE_BLOCKS`] blocks each, when the AVFS rule gives fewer.
pub const SMALL_IMAGE_ZONES: u64 = 8;
pub const SMALL_IMAGE_MIN_ZONE_BLOCKS: u64 = 4;
/// A file system needs at least this many data blocks to be worth formatting.
pub const MIN_DATA_BLOCKS: u64 = 8;
/// Default preallocation window of the contig policy (HERMES 5).
pub const DEFAULT_PREALLOC_BLOCKS: u32 = 64;
pub const DEFAULT_COMMIT_INTERVAL_MS: u32 = 1000;
/// Inode count bounds of the default rule (one inode per data block).
pub const MIN_DEFAULT_INODES: u64 = 1024;
pub const MAX_DEFAULT_INODES: u64 = 1 << 20;
/// Inode numbers are u32 and index the inode table; 0 is never used.
pub const MAX_INODES: u64 = 1 << 28;
/// The data region starts on this boundary (or the block size, if smaller).
pub const DATA_ALIGN_BYTES: u64 = 1 << 20;
/// Journal floor, in metadata blocks.
pub const MIN_JOURNAL_BLOCKS: u64 = 256;
/// Bytes one data checksum covers by default (or the block size, if smaller): the
/// default stream request, so a stream's reads are checked without reading more.
pub const DEFAULT_SUM_GRANULE_BYTES: u64 = 512 << 10;

/// Data bytes one frame-index block is kept for in the dynamic area (3 MiB): a
/// block holds 101 keyframes, so this covers a one-minute chunk (each chunk's index
/// takes a block of its own) at 400 kbit/s and up, or a long file with a keyframe
/// a second at 240 kbit/s and up. On a volume of 4 MiB blocks that is 0.13 % of
/// the data area.
pub const INDEX_DATA_BYTES_PER_BLOCK: u64 = 3 << 20;

/// Event-log blocks mkfs gives a volume: 32 x 31 = 992 events (128 KiB), the
/// newest kept when it wraps. At a few events per recording (admitted, ended) that
/// is days of an NVR's history; what it is for is the last hours before an operator
/// looks (a crash, a full disk), not an archive.
pub const DEFAULT_EVENT_RING_BLOCKS: u64 = 32;

/// Bounds of the tail log mkfs gives a volume by default: a 1,024th of the device,
/// from 4 MiB to 256 MiB (FORMAT.md section 11a). The ring must hold about two
/// partial requests of every recording the disk admits: 200 recordings of 1 MiB
/// requests on an 8 TB disk fit in 256 MiB, and a small image still holds a few.
pub const MIN_DEFAULT_TAIL_LOG_BYTES: u64 = 4 << 20;
pub const MAX_DEFAULT_TAIL_LOG_BYTES: u64 = 256 << 20;

/// How large a tail log mkfs makes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TailLogSize {
    /// None (`mkfs --no-tail-log`): recordings gather in place, as before the log.
    Off,
    /// [`default_tail_log_blocks`] of the device.
    Auto,
    /// This many 4 KiB blocks.
    Blocks(u64),
}

/// The default tail log of a device of `device_bytes`, in blocks.
pub fn default_tail_log_blocks(device_bytes: u64) -> u64 {
    (device_bytes / 1024).clamp(MIN_DEFAULT_TAIL_LOG_BYTES, MAX_DEFAULT_TAIL_LOG_BYTES)
        / META_BLOCK_BYTES as u64
}

/// Everything mkfs needs to know.
#[derive(Clone, Debug)]
pub struct MkfsParams {
    pub device_bytes: u64,
    pub data_block_bytes: u64,
    pub alloc: AllocPolicy,
    pub inodes: Option<u64>,
    pub zones: Option<u32>,
    pub prealloc_blocks: u32,
    pub commit_interval_ms: u32,
    pub uuid: Uuid,
    /// Seeds the random first zone of ZRR.
    pub seed: u64,
    pub created_ns: i64,
    /// Bytes per data checksum (a power of two from 64 KiB; more than the block size
    /// means one per block); `None`: no checksums.
    pub sum_granule_bytes: Option<u64>,
    /// Blocks of the event log's ring (`FEATURE_EVENTS`, FORMAT.md section 10b);
    /// `None`: no event area, the layout of a volume made before it existed.
    pub event_ring_blocks: Option<u64>,
    /// The tail log (`FEATURE_TAIL_LOG`, FORMAT.md section 11a).
    pub tail_log: TailLogSize,
    /// The dynamic area has room for frame indexes, one block per
    /// [`INDEX_DATA_BYTES_PER_BLOCK`] of data (mkfs since 2026-11-28); `false`: the
    /// area as sized before (for finding older volumes' backup regions).
    pub index_share: bool,
}

impl MkfsParams {
    pub fn new(device_bytes: u64, uuid: Uuid, seed: u64) -> Self {
        MkfsParams {
            device_bytes,
            data_block_bytes: DEFAULT_DATA_BLOCK_BYTES,
            alloc: AllocPolicy::Zrr,
            inodes: None,
            zones: None,
            prealloc_blocks: DEFAULT_PREALLOC_BLOCKS,
            commit_interval_ms: DEFAULT_COMMIT_INTERVAL_MS,
            uuid,
            seed,
            created_ns: 0,
            sum_granule_bytes: Some(DEFAULT_SUM_GRANULE_BYTES.min(DEFAULT_DATA_BLOCK_BYTES)),
            event_ring_blocks: Some(DEFAULT_EVENT_RING_BLOCKS),
            tail_log: TailLogSize::Auto,
            index_share: true,
        }
    }
}

fn div_ceil(a: u64, b: u64) -> u64 {
    a.div_ceil(b)
}

/// The ZRR zone count for a data region (see `FORMAT.md`, "Zones").
pub fn default_zone_count(data_blocks: u64, data_block_bytes: u64) -> u32 {
    let avfs = (data_blocks * data_block_bytes / AVFS_MIN_ZONE_BYTES).min(MAX_ZONES as u64);
    let small = (data_blocks / SMALL_IMAGE_MIN_ZONE_BLOCKS).min(SMALL_IMAGE_ZONES);
    avfs.max(small).max(1) as u32
}

/// Computes the geometry of a new file system.
pub fn plan(p: &MkfsParams) -> Result<Superblock> {
    let bs = p.data_block_bytes;
    if !bs.is_power_of_two() || !(MIN_DATA_BLOCK_BYTES..=MAX_DATA_BLOCK_BYTES).contains(&bs) {
        return Err(Error::InvalidArgument(format!(
            "block size {bs} bytes: must be a power of two from 64K to 1G"
        )));
    }
    let mb = META_BLOCK_BYTES as u64;
    let device_bytes = p.device_bytes / mb * mb;
    let upper_blocks = device_bytes / bs;
    let inodes = inode_count(p, upper_blocks)?;
    // Sized for the worst case of every data block being its own run (ZRR), with the
    // doubling indirect extents wasting up to half, plus directories and symlinks.
    let inode_table_blocks = div_ceil(inodes, INODES_PER_BLOCK as u64);
    // And frame indexes: one block per INDEX_DATA_BYTES_PER_BLOCK of data.
    let index_blocks = match p.index_share {
        true => div_ceil(upper_blocks * bs, INDEX_DATA_BYTES_PER_BLOCK),
        false => 0,
    };
    let dynamic_blocks = 256
        + div_ceil(inodes, 8)
        + index_blocks
        + div_ceil(2 * upper_blocks, RUNS_PER_BLOCK as u64);
    let data_bitmap_blocks = div_ceil(upper_blocks.max(1), BITS_PER_BITMAP_BLOCK);
    let meta_bitmap_blocks = div_ceil(dynamic_blocks, BITS_PER_BITMAP_BLOCK);
    let sum_granule_bytes = sum_granule_bytes(p)?;
    let sum_blocks = match sum_granule_bytes {
        0 => 0,
        g => div_ceil(upper_blocks * (bs / g), SUMS_PER_BLOCK as u64),
    };
    let journal_blocks =
        (2 * (data_bitmap_blocks + meta_bitmap_blocks) + 1024).max(MIN_JOURNAL_BLOCKS);
    let journal_start = 1;
    let data_bitmap_start = journal_start + journal_blocks;
    let meta_bitmap_start = data_bitmap_start + data_bitmap_blocks;
    let inode_table_start = meta_bitmap_start + meta_bitmap_blocks;
    let dynamic_start = inode_table_start + inode_table_blocks;
    let sum_start = if sum_blocks == 0 {
        0
    } else {
        dynamic_start + dynamic_blocks
    };
    // The event area: the ring.
    let events_blocks = event_ring_blocks(p)?;
    let events_start = match events_blocks {
        0 => 0,
        _ => dynamic_start + dynamic_blocks + sum_blocks,
    };
    // The tail log ends the primary region and has no backup copy.
    let tail_log_blocks = tail_log_blocks(p, device_bytes)?;
    let tail_log_start = match tail_log_blocks {
        0 => 0,
        _ => dynamic_start + dynamic_blocks + sum_blocks + events_blocks,
    };
    let meta_blocks = dynamic_start + dynamic_blocks + sum_blocks + events_blocks + tail_log_blocks;
    let backup_blocks = meta_blocks - journal_blocks - tail_log_blocks;

    let align = bs.min(DATA_ALIGN_BYTES);
    let data_start_bytes = div_ceil(meta_blocks * mb, align) * align;
    let too_small = || {
        let need = data_start_bytes + MIN_DATA_BLOCKS * bs + (backup_blocks + 1) * mb;
        Error::TooSmall {
            device_bytes,
            need_bytes: need,
        }
    };
    let backup_start_bytes = device_bytes
        .checked_sub(mb + backup_blocks * mb)
        .ok_or_else(too_small)?;
    let data_blocks = backup_start_bytes.saturating_sub(data_start_bytes) / bs;
    if data_blocks < MIN_DATA_BLOCKS {
        return Err(too_small());
    }
    let zone_count = zone_count(p, data_blocks)?;
    let zone_blocks = div_ceil(data_blocks, zone_count as u64);
    let zrr_cursor = (rand_seeded(p.seed) % zone_count as u64) as u32;
    let sb = Superblock {
        uuid: p.uuid,
        device_bytes,
        data_block_bytes: bs,
        meta_blocks,
        journal_start,
        journal_blocks,
        data_bitmap_start,
        data_bitmap_blocks,
        meta_bitmap_start,
        meta_bitmap_blocks,
        inode_table_start,
        inode_table_blocks,
        dynamic_start,
        dynamic_blocks,
        data_start_bytes,
        data_blocks,
        backup_start_bytes,
        inode_count: inodes as u32,
        root_ino: 1,
        alloc: p.alloc,
        zone_count,
        zone_blocks,
        prealloc_blocks: p.prealloc_blocks.max(1),
        commit_interval_ms: p.commit_interval_ms,
        zrr_cursor,
        last_txn: 0,
        created_ns: p.created_ns,
        // The root inode's block.
        inode_blocks_used: 1 + 1 / crate::format::inode::INODES_PER_BLOCK as u64,
        sum_start,
        sum_blocks,
        sum_granule_bytes,
        features: features(events_blocks, tail_log_blocks),
        events_start,
        events_blocks,
        tail_log_start,
        tail_log_blocks,
        tail_log_tail: 0,
        tail_log_head: 0,
        retention: crate::format::superblock::VolumeRetention::default(),
    };
    sb.validate()
        .map_err(|e| Error::InvalidArgument(format!("internal layout error: {e}")))?;
    Ok(sb)
}

/// The inode count asked for (16 to [`MAX_INODES`]), else one per data block of the
/// whole device, within the default bounds.
fn inode_count(p: &MkfsParams, upper_blocks: u64) -> Result<u64> {
    Ok(match p.inodes {
        Some(n) if !(16..=MAX_INODES).contains(&n) => {
            return Err(Error::InvalidArgument(format!(
                "inode count {n}: must be between 16 and {MAX_INODES}"
            )))
        }
        Some(n) => n,
        None => upper_blocks.clamp(MIN_DEFAULT_INODES, MAX_DEFAULT_INODES),
    })
}

/// The checksum granule asked for (0: no checksum area), at most the data block.
fn sum_granule_bytes(p: &MkfsParams) -> Result<u64> {
    Ok(match p.sum_granule_bytes {
        None => 0,
        Some(g) if !g.is_power_of_two() || g < MIN_DATA_BLOCK_BYTES => {
            return Err(Error::InvalidArgument(format!(
                "checksum granule {g} bytes: must be a power of two from 64K up"
            )))
        }
        // A granule larger than the block covers the whole block.
        Some(g) => g.min(p.data_block_bytes),
    })
}

/// The event ring's blocks asked for (0: no event area; an empty ring is refused).
fn event_ring_blocks(p: &MkfsParams) -> Result<u64> {
    Ok(match p.event_ring_blocks {
        None => 0,
        Some(0) => {
            return Err(Error::InvalidArgument(
                "event log of 0 blocks: give at least 1".into(),
            ))
        }
        Some(n) => n,
    })
}

/// The tail log's blocks (0: none): off, sized for the device, or as asked (at least
/// [`MIN_TAIL_LOG_BLOCKS`]).
fn tail_log_blocks(p: &MkfsParams, device_bytes: u64) -> Result<u64> {
    Ok(match p.tail_log {
        TailLogSize::Off => 0,
        TailLogSize::Auto => default_tail_log_blocks(device_bytes),
        TailLogSize::Blocks(n) if n < MIN_TAIL_LOG_BLOCKS => {
            return Err(Error::InvalidArgument(format!(
                "tail log of {n} blocks: give at least {MIN_TAIL_LOG_BLOCKS} ({} KiB)",
                MIN_TAIL_LOG_BLOCKS * 4
            )))
        }
        TailLogSize::Blocks(n) => n,
    })
}

/// The zone count asked for (1 to [`MAX_ZONES`], at most one zone per data block),
/// else [`default_zone_count`].
fn zone_count(p: &MkfsParams, data_blocks: u64) -> Result<u32> {
    Ok(match p.zones {
        Some(z) if z == 0 || z > MAX_ZONES || z as u64 > data_blocks => {
            return Err(Error::InvalidArgument(format!(
                "zone count {z}: must be 1 to {MAX_ZONES} and at most the data block count ({data_blocks})"
            )))
        }
        Some(z) => z,
        None => default_zone_count(data_blocks, p.data_block_bytes),
    })
}

/// The feature bits of a new volume: map checksums, inline symlinks and frame
/// indexes, retention and protection always, the event area and the tail log when they have blocks.
fn features(events_blocks: u64, tail_log_blocks: u64) -> u32 {
    crate::format::superblock::FEATURE_MAP_SUMS
        | crate::format::superblock::FEATURE_INLINE_SYMLINKS
        | crate::format::superblock::FEATURE_FRAME_INDEX
        | crate::format::superblock::FEATURE_RETENTION
        | crate::format::superblock::FEATURE_PROTECTION
        | match events_blocks {
            0 => 0,
            _ => crate::format::superblock::FEATURE_EVENTS,
        }
        | match tail_log_blocks {
            0 => 0,
            _ => crate::format::superblock::FEATURE_TAIL_LOG,
        }
}

fn rand_seeded(seed: u64) -> u64 {
    use rand_core::{RngCore, SeedableRng};
    rand_chacha::ChaCha8Rng::seed_from_u64(seed).next_u64()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zone_count_follows_avfs_on_large_disks_and_the_floor_on_small_ones() {
        // 250 GB with 4 MiB blocks: 15 zones of at least 16 GB (AVFS rule).
        assert_eq!(default_zone_count(250_000_000_000 / (4 << 20), 4 << 20), 15);
        // 8 TB: capped at 32.
        assert_eq!(
            default_zone_count(8_000_000_000_000 / (4 << 20), 4 << 20),
            32
        );
        // A 1 GiB image: 256 blocks, the small-image floor of 8 zones.
        assert_eq!(default_zone_count(256, 4 << 20), 8);
        // A tiny one: zones of at least 4 blocks.
        assert_eq!(default_zone_count(10, 4 << 20), 2);
    }

    /// A superblock that breaks its own relations is a bug in dvrfs: encode panics
    /// rather than write a copy no open would accept.
    #[test]
    #[should_panic(
        expected = "dvrfs bug: refusing to write a superblock that fails validation (malformed region bounds)"
    )]
    fn encode_refuses_a_superblock_that_fails_validation() {
        let mut sb = plan(&MkfsParams::new(64 << 20, [1; 16], 7)).unwrap();
        sb.data_blocks *= 4; // The data area now runs past the device.
        let _ = sb.encode(0);
    }

    #[test]
    fn plans_are_valid_across_sizes() {
        for (dev, bs) in [
            (64u64 << 20, 64u64 << 10),
            (256 << 20, 4 << 20),
            (64 << 30, 4 << 20),
            (8_000_000_000_000, 4 << 20),
            (1 << 40, 64 << 10),
            (64 << 30, 1 << 30),
        ] {
            let sb = plan(&MkfsParams {
                data_block_bytes: bs,
                ..MkfsParams::new(dev, [1; 16], 7)
            })
            .unwrap();
            sb.validate().unwrap();
            let round = Superblock::decode(&sb.encode(0)[..]).unwrap();
            assert_eq!(round, sb);
            // Every block of the primary region has one area, in the planned order.
            use crate::format::superblock::Area;
            let areas = [
                (sb.journal_start, sb.journal_blocks),
                (sb.data_bitmap_start, sb.data_bitmap_blocks),
                (sb.meta_bitmap_start, sb.meta_bitmap_blocks),
                (sb.inode_table_start, sb.inode_table_blocks),
                (sb.sum_start, sb.sum_blocks),
                (sb.events_start, sb.events_blocks),
                (sb.tail_log_start, sb.tail_log_blocks),
            ];
            assert!(sb.has_events() && sb.has_tail_log());
            assert_eq!(sb.events_start + sb.events_blocks, sb.tail_log_start);
            assert_eq!(sb.tail_log_start + sb.tail_log_blocks, sb.meta_blocks);
            assert_eq!(sb.area_of(0), Area::Superblock);
            for (i, &(start, len)) in areas.iter().enumerate() {
                for n in [start, start + len - 1].into_iter().filter(|_| len > 0) {
                    let want = [
                        Area::Journal,
                        Area::DataBitmap(n - start),
                        Area::MetaBitmap(n - start),
                        Area::InodeTable(n - start),
                        Area::Sums(n - start),
                        Area::Events(n - start),
                        Area::TailLog(n - start),
                    ][i];
                    assert_eq!(sb.area_of(n), want, "block {n} of {sb:?}");
                }
            }
            assert_eq!(sb.area_of(sb.dynamic_start), Area::Dynamic);
            assert_eq!(
                sb.area_of(sb.dynamic_start + sb.dynamic_blocks - 1),
                Area::Dynamic
            );
        }
    }

    #[test]
    fn too_small_devices_are_refused_with_the_size_needed() {
        let e = plan(&MkfsParams::new(8 << 20, [1; 16], 7)).unwrap_err();
        assert!(matches!(e, Error::TooSmall { .. }), "{e}");
    }
}
