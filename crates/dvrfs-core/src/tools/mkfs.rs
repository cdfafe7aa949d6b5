//! Creating a file system: every metadata area written in both regions (bitmaps, inode
//! table, data checksums; the dynamic area is unused until allocated), the journal
//! head invalidated, the superblock in its three places.

use crate::device::{AlignedBuf, Device};
use crate::error::{Error, Result};
use crate::format::inode::{InodeRecord, INODES_PER_BLOCK, INODE_BYTES, S_IFDIR};
use crate::format::superblock::Superblock;
use crate::format::{payload_mut, seal_block, BlockType, Header, META_BLOCK_BYTES};
use crate::layout::{plan, MkfsParams};
use crate::meta::Inode;
use crate::volume::inode_record;

const CHUNK_BLOCKS: u64 = 256;

/// Formats `dev`. `progress(done, total)` is called as metadata blocks are written.
pub fn mkfs<D: Device>(
    dev: &mut D,
    params: &MkfsParams,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<Superblock> {
    let mut p = params.clone();
    p.device_bytes = p.device_bytes.min(dev.size_bytes());
    let sb = plan(&p)?;
    let root = Inode {
        attr: InodeRecord {
            mode: S_IFDIR | 0o755,
            nlink: 2,
            mtime_ns: p.created_ns,
            ctime_ns: p.created_ns,
            ..Default::default()
        },
        runs: vec![],
    };
    invalidate(dev, &sb)?;
    write_areas(dev, &sb, &root, progress)?;
    write_superblocks(dev, &sb)?;
    Ok(sb)
}

/// First make the device not a file system at all (superblocks and journal head
/// gone), so a crash during mkfs leaves nothing that looks valid.
fn invalidate<D: Device>(dev: &mut D, sb: &Superblock) -> Result<()> {
    let zero = AlignedBuf::zeroed(META_BLOCK_BYTES);
    for offset in [
        0,
        sb.primary_offset(sb.journal_start),
        sb.last_copy_offset(),
    ] {
        write(dev, offset, &zero)?;
    }
    dev.flush().map_err(|e| Error::io("flushing", e))
}

/// Every fixed metadata area, in both regions: empty bitmaps, the inode table with
/// the root's record, every data checksum unset, an empty event ring.
fn write_areas<D: Device>(
    dev: &mut D,
    sb: &Superblock,
    root: &Inode,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<()> {
    let areas = [
        (
            sb.data_bitmap_start,
            sb.data_bitmap_blocks,
            BlockType::DataBitmap,
        ),
        (
            sb.meta_bitmap_start,
            sb.meta_bitmap_blocks,
            BlockType::MetaBitmap,
        ),
        (
            sb.inode_table_start,
            sb.inode_table_blocks,
            BlockType::InodeTable,
        ),
        // Every data checksum unset (sum_blocks is 0 without checksums).
        (sb.sum_start, sb.sum_blocks, BlockType::Sums),
        // The event log (none without FEATURE_EVENTS): an empty ring, every slot's
        // sequence 0. The superblock's lost-tail record is empty too (zeros).
        (sb.events_start, sb.events_blocks, BlockType::EventLog),
    ];
    let root_block = sb.inode_table_start + sb.root_ino as u64 / INODES_PER_BLOCK as u64;
    let total: u64 = 2 * areas.iter().map(|a| a.1).sum::<u64>();
    let mut done = 0;
    for backup in [false, true] {
        for &(start, count, ty) in &areas {
            let mut k = 0;
            while k < count {
                let n = CHUNK_BLOCKS.min(count - k);
                let mut buf = AlignedBuf::zeroed(n as usize * META_BLOCK_BYTES);
                for j in 0..n {
                    let block_no = start + k + j;
                    let b = &mut buf
                        [j as usize * META_BLOCK_BYTES..(j as usize + 1) * META_BLOCK_BYTES];
                    if ty == BlockType::InodeTable && block_no == root_block {
                        let at = (sb.root_ino as usize % INODES_PER_BLOCK) * INODE_BYTES;
                        inode_record(root).encode(&mut payload_mut(b)[at..at + INODE_BYTES]);
                    }
                    seal_block(
                        b,
                        &Header {
                            block_type: ty,
                            uuid: sb.uuid,
                            block_no,
                            seq: 0,
                        },
                    );
                }
                let offset = if backup {
                    sb.backup_offset(start + k)
                } else {
                    sb.primary_offset(start + k)
                };
                write(dev, offset, &buf)?;
                k += n;
                done += n;
                progress(done, total);
            }
        }
    }
    dev.flush().map_err(|e| Error::io("flushing", e))
}

/// The superblocks last: until they are there, the device is not a dvrfs. When the
/// file system is smaller than the device, the end of the device gets a copy too,
/// because that is where open looks when the primary is lost.
fn write_superblocks<D: Device>(dev: &mut D, sb: &Superblock) -> Result<()> {
    let mut img = AlignedBuf::zeroed(META_BLOCK_BYTES);
    img.copy_from_slice(&sb.encode(0)[..]);
    let device_end = dev.size_bytes() / META_BLOCK_BYTES as u64 * META_BLOCK_BYTES as u64;
    let mut copies = vec![0, sb.backup_offset(0), sb.last_copy_offset()];
    if device_end - (META_BLOCK_BYTES as u64) > sb.last_copy_offset() {
        copies.push(device_end - META_BLOCK_BYTES as u64);
    }
    for offset in copies {
        write(dev, offset, &img)?;
    }
    dev.flush().map_err(|e| Error::io("flushing", e))
}

fn write<D: Device>(dev: &mut D, offset: u64, buf: &[u8]) -> Result<()> {
    dev.write_at(offset, buf)
        .map_err(|e| Error::io(format!("writing at byte {offset}"), e))
}
