//! Room in the dynamic metadata area, and who may take it.
//!
//! The dynamic area holds three kinds of 4 KiB blocks: directory blocks (one per
//! 4,084 bytes of entries, so at least one per non-empty directory), symlink blocks
//! (one per link whose target is too long for its inode record, or every link on a
//! volume without `FEATURE_INLINE_SYMLINKS`), and indirect run blocks, the block
//! maps of files with more than six runs; and frame-index blocks (a file's
//! keyframes). mkfs sizes the area as `256 + ceil(inodes / 8) + ceil(data_bytes /
//! 3 MiB) + ceil(2 * data_blocks / 253)` (`layout.rs`; the third term since
//! 2026-11-28): the last term is for file maps, the rest for names and frame
//! indexes, which share it (an index that finds no room is flagged incomplete, the
//! recording goes on).
//!
//! Nothing used to stop names from taking the file maps' share: about 2,400 long
//! symlinks filled the area of a 64 GiB volume, and from then on every new file
//! stopped at its six inline runs (a 2.8 GB write failed after 24 MiB) with the data
//! area nearly empty. So directory and symlink blocks may not take the area's last
//! [`Volume::map_reserve_blocks`] blocks, which only file maps may use; a name
//! that would need one fails with [`Error::NamesFull`] (ENOSPC), while a recording
//! keeps growing its map. This is a policy of this layer, not a format change.
//!
//! **The reserve.** A run covers at least one data block, so the `F` data blocks
//! that are free (or freed by an operation not yet committed) can add at most `F`
//! runs to the files, in all. 253 runs fill an indirect block, and a file's indirect
//! extents double (1, 2, 4, ... blocks), so a file holding `b` run blocks' worth of
//! runs has at most `2b - 1` blocks allocated. `F` new runs therefore fill at most
//! `ceil(F / 253)` new run blocks, and take at most twice that:
//! `reserve = ceil(2 * F / 253) + MAP_RESERVE_MARGIN_BLOCKS`. The margin covers the
//! rounding of the files growing at once (each rounds up by at most one block per
//! extent it opens). What it does not cover: a file whose extents are exactly full
//! takes its whole next extent (as many blocks as it already has, plus one) for its
//! next run; the runs that filled the old extents were paid for when they were
//! written, and a volume that keeps its names out of the reserve always has those
//! blocks unless files were deleted and rewritten more fragmented. The reserve
//! shrinks as the data area fills (a full data area needs no more map blocks) and
//! grows back when files are deleted.

use super::*;
use crate::format::dir::{entry_bytes, DIR_SPACE_BYTES, MAX_NAME_BYTES};
use crate::format::inode::{slots_needed, RUNS_PER_BLOCK};

/// Dynamic blocks kept for file maps beyond `ceil(2 * free_data_blocks / 253)`:
/// the per-extent rounding of up to 16 files opening an extent at once.
pub const MAP_RESERVE_MARGIN_BLOCKS: u64 = 16;

/// Entries of the longest names (255 bytes) a directory block holds: what a free
/// dynamic block is worth in new names, at least.
pub const MIN_NAMES_PER_BLOCK: u64 = (DIR_SPACE_BYTES / (6 + MAX_NAME_BYTES)) as u64;
const _: () = assert!(MIN_NAMES_PER_BLOCK == 15);

/// How the dynamic area is used (`dvrfs info`, `statfs`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MetaRoom {
    /// Blocks of the dynamic area.
    pub total_blocks: u64,
    /// Blocks in use.
    pub used_blocks: u64,
    /// Of those, blocks holding directories (their entries and their maps) and
    /// symlink targets.
    pub name_blocks: u64,
    /// Of those, indirect run blocks of regular files.
    pub map_blocks: u64,
    /// Free blocks kept for file maps ([`Volume::map_reserve_blocks`]).
    pub reserve_blocks: u64,
    /// Free blocks new directory blocks and symlink blocks may still take.
    pub free_for_names_blocks: u64,
}

impl MetaRoom {
    /// Whether the metadata area, not the inode count or the data area, is what
    /// stops new directory blocks and symlink blocks.
    pub fn is_names_limit(&self) -> bool {
        self.free_for_names_blocks == 0
    }
}

impl Volume {
    /// Dynamic blocks that only file maps may take (see the module docs).
    pub fn map_reserve_blocks(&self) -> u64 {
        (2 * self.data.free_or_freeing()).div_ceil(RUNS_PER_BLOCK as u64)
            + MAP_RESERVE_MARGIN_BLOCKS
    }

    /// Free dynamic blocks beyond the reserve: what names may still take.
    fn free_for_names_blocks(&self) -> u64 {
        self.meta
            .free_blocks()
            .saturating_sub(self.map_reserve_blocks())
    }

    /// How the dynamic area is used (walks every block owner: `info`, not hot paths).
    pub fn meta_room(&self) -> MetaRoom {
        let files: BTreeSet<Ino> = self
            .inodes
            .iter()
            .filter(|(_, i)| i.kind() == Some(Kind::File))
            .map(|(&ino, _)| ino)
            .collect();
        let map_blocks = self
            .owners
            .values()
            .filter(|o| matches!(o, Owner::Indirect { ino, .. } if files.contains(ino)))
            .count() as u64;
        let used_blocks = self.meta.used().count_ones();
        MetaRoom {
            total_blocks: self.sb.dynamic_blocks,
            used_blocks,
            name_blocks: used_blocks.saturating_sub(map_blocks),
            map_blocks,
            reserve_blocks: self.map_reserve_blocks().min(self.meta.free_blocks()),
            free_for_names_blocks: self.free_for_names_blocks(),
        }
    }

    /// New names the metadata area still holds, at least (`df -i`): 15 entries of
    /// the longest names per block names may take. Names that fit in the room left
    /// in existing directory blocks are not counted.
    pub fn names_left(&self) -> u64 {
        self.free_for_names_blocks() * MIN_NAMES_PER_BLOCK
    }

    /// Dynamic blocks adding `name` to directory `parent` takes: none if a block of
    /// the directory has room, else one and any indirect extent the directory's map
    /// then opens.
    pub(super) fn entry_blocks(&self, parent: Ino, name: &[u8]) -> Result<u64> {
        let dir = self
            .dirs
            .get(&parent)
            .ok_or_else(|| Error::NotDir(String::from_utf8_lossy(name).into_owned()))?;
        debug_assert!(entry_bytes(name) <= DIR_SPACE_BYTES);
        if dir.block_with_room(name).is_some() {
            return Ok(0);
        }
        let runs = self.inode(parent)?.runs.len();
        let extents: u64 = (slots_needed(runs)..slots_needed(runs + 1))
            .map(|s| 1u64 << s)
            .sum();
        Ok(1 + extents)
    }

    /// Fails with [`Error::NamesFull`] unless `need` more directory or symlink
    /// blocks leave the reserve for file maps free. fsck (which only puts back what
    /// was there) is not held to it.
    pub(super) fn check_name_room(&self, need: u64) -> Result<()> {
        if need == 0 || self.in_fsck || need <= self.free_for_names_blocks() {
            return Ok(());
        }
        let room = self.meta_room();
        Err(Error::NamesFull {
            name_blocks: room.name_blocks,
            total_blocks: room.total_blocks,
            reserve_blocks: room.reserve_blocks,
        })
    }
}
