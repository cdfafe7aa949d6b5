//! Symbolic links: where a target is stored, and how a loaded record yields it.
//!
//! On a volume with `FEATURE_INLINE_SYMLINKS` (mkfs since 2026-11-27) a target of
//! 1 to [`MAX_INLINE_TARGET_BYTES`] (164) bytes lives in the link's inode record, in
//! the map bytes a link has no use for (`run_count` 0, no block); a longer one, up
//! to [`MAX_SYMLINK_BYTES`], takes a symlink block of the dynamic area (one run), as
//! every target does on an older volume. So the links a recorder makes (`latest ->
//! cam1/2026-11-27/seg0412.ts`) cost an inode and a directory entry, never a
//! dynamic block, and cannot crowd out file maps (`volume/room.rs`). In memory both
//! kinds are the same: `Volume::symlinks` holds every target, and a link with no
//! runs is an inline one (`commit.rs` writes its target into the record).

use super::*;
use crate::format::dir::{decode_symlink, MAX_SYMLINK_BYTES};
use crate::format::inode::{MAX_INLINE_TARGET_BYTES, S_IFLNK};

impl Volume {
    /// Whether a target of `len` bytes is stored in the inode record on this volume.
    pub fn symlink_is_inline(&self, len: usize) -> bool {
        self.sb.has_inline_symlinks() && (1..=MAX_INLINE_TARGET_BYTES).contains(&len)
    }

    pub fn symlink(
        &mut self,
        parent: Ino,
        name: &[u8],
        target: &[u8],
        uid: u32,
        gid: u32,
        now_ns: i64,
    ) -> Result<Ino> {
        if target.len() > MAX_SYMLINK_BYTES {
            return Err(Error::TargetTooLong {
                len: target.len(),
                max: MAX_SYMLINK_BYTES,
            });
        }
        if target.is_empty() {
            return Err(Error::InvalidArgument(format!(
                "an empty symlink target (1 to {MAX_SYMLINK_BYTES} bytes)"
            )));
        }
        let inline = self.symlink_is_inline(target.len());
        if !inline {
            // Checked before anything changes: the target's block and the entry's.
            // (A bad parent or name is new_inode's to report.)
            self.check_writable()?;
            let named = self
                .dirs
                .get(&parent)
                .is_some_and(|d| d.entries.contains_key(name));
            let entry = match self.entry_blocks(parent, name) {
                Ok(n) if validate_name(name).is_ok() && !named => n,
                _ => 0,
            };
            self.check_name_room(1 + entry)?;
            if self.meta.free_blocks() < 1 + entry {
                return Err(Error::MetadataFull);
            }
        }
        let ino = self.new_inode(parent, name, S_IFLNK | 0o777, uid, gid, now_ns)?;
        self.symlinks.insert(ino, target.to_vec());
        if !inline {
            let m = self.alloc_meta_block(1)?;
            self.owners.insert(m, Owner::Symlink { ino });
            self.dirty.insert(m);
            self.inode_mut(ino)?.map_block(0, m);
        }
        let inode = self.inode_mut(ino)?;
        inode.attr.size_bytes = target.len() as u64;
        Ok(ino)
    }
}

/// A symlink's target and the block it came from (`None`: inline), or what is wrong.
pub(super) type LoadedTarget = std::result::Result<(Vec<u8>, Option<u64>), String>;

/// A loaded symlink record's target: the inline one (`inline_target`, taken from
/// the record) on a volume with inline symlinks and a record without runs, else the
/// target block named by its first run, read by `read_block`. Returns the target and
/// the block it came from (`None`: inline), or what is wrong with the record.
pub(super) fn loaded_target(
    sb: &Superblock,
    inode: &crate::meta::Inode,
    inline_target: Vec<u8>,
    read_block: impl FnOnce(u64) -> Result<std::result::Result<Vec<u8>, String>>,
) -> Result<LoadedTarget> {
    let size = inode.attr.size_bytes;
    if inode.attr.run_count == 0 && sb.has_inline_symlinks() {
        let max = MAX_INLINE_TARGET_BYTES as u64;
        if size == 0 || size > max {
            return Ok(Err(format!(
                "its inline target is {size} bytes long; an inline target is 1 to {max} bytes"
            )));
        }
        assert_eq!(inline_target.len() as u64, size, "decoded inline target");
        return Ok(Ok((inline_target, None)));
    }
    let Some(run) = inode.runs.first() else {
        return Ok(Err("it has no target block".into()));
    };
    Ok(read_block(run.start)?
        .and_then(|img| decode_symlink(crate::format::payload(&img)).map_err(|e| e.to_string()))
        .map(|t| (t, Some(run.start))))
}
