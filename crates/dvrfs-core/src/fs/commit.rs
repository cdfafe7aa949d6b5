//! Serialising dirty metadata, the journal write and the checkpoint.

use super::*;
use crate::format::dir::{encode_dir, encode_symlink};
use crate::format::inode::{
    encode_runs, InodeRecord, INLINE_RUNS, INODES_PER_BLOCK, INODE_BYTES, RUNS_PER_BLOCK,
};
use crate::format::journal::{encode_transaction, transaction_blocks};
use crate::format::{new_block, payload_mut, seal_block, BlockType, Header, META_BLOCK_BYTES};

/// Largest single device write the checkpoint issues.
const MAX_CHECKPOINT_WRITE_BYTES: usize = 4 << 20;

impl<D: Device> Fs<D> {
    /// Commits every operation so far: data flushed, journal written, checkpointed.
    pub fn sync(&mut self) -> Result<()> {
        if !self.writable {
            return Ok(());
        }
        if self.data_unflushed {
            self.dev
                .flush()
                .map_err(|e| Error::io("flushing file data", e))?;
            self.data_unflushed = false;
        }
        if self.dirty.is_empty() {
            self.data.commit_done();
            return Ok(());
        }
        self.sb.zrr_cursor = self.data.zrr_cursor();
        // Operations keep their changes well under one journal's worth (see
        // `Fs::write` and `after_op`), so this is one transaction. Only an fsck repair
        // of a badly damaged volume can dirty more; it then commits in several
        // transactions, each atomic, the superblock in every one.
        let mut blocks: Vec<u64> = self.dirty.iter().copied().filter(|&n| n != 0).collect();
        let per_txn = self.max_transaction_images() - 1;
        loop {
            let rest = blocks.split_off(blocks.len().min(per_txn));
            let txn = self.sb.last_txn + 1;
            self.sb.last_txn = txn;
            let images: Vec<(u64, Vec<u8>)> = std::iter::once(0)
                .chain(blocks.iter().copied())
                .filter_map(|n| self.encode_block(n, txn).map(|img| (n, img)))
                .collect();
            let refs: Vec<(u64, &[u8])> = images.iter().map(|(n, b)| (*n, &b[..])).collect();
            let bytes = encode_transaction(&self.sb.uuid, self.sb.journal_start, txn, &refs);
            debug_assert!(bytes.len() as u64 <= self.sb.journal_blocks * META_BLOCK_BYTES as u64);
            self.dev
                .write_at(self.sb.primary_offset(self.sb.journal_start), &bytes)
                .map_err(|e| Error::io("writing the journal", e))?;
            self.dev
                .flush()
                .map_err(|e| Error::io("flushing the journal", e))?;
            checkpoint(&mut self.dev, &self.sb, &refs)?;
            for n in &blocks {
                self.dirty.remove(n);
            }
            blocks = rest;
            if blocks.is_empty() {
                break;
            }
        }
        self.dirty.clear();
        self.data.commit_done();
        Ok(())
    }

    /// Commits if the commit interval has passed since the last commit. Returns
    /// whether it committed. `now_ns` is the caller's clock.
    pub fn tick(&mut self, now_ns: i64) -> Result<bool> {
        let last = *self.last_commit_ns.get_or_insert(now_ns);
        if now_ns - last < self.commit_interval_ns || !self.writable {
            return Ok(false);
        }
        self.last_commit_ns = Some(now_ns);
        if self.dirty.is_empty() && !self.data_unflushed {
            return Ok(false);
        }
        self.sync()?;
        Ok(true)
    }

    /// The most images one transaction can carry in this journal.
    pub(super) fn max_transaction_images(&self) -> usize {
        let mut n = self.sb.journal_blocks as usize;
        while transaction_blocks(n) as u64 > self.sb.journal_blocks {
            n -= 1;
        }
        n
    }

    /// Operations that touched this many blocks commit at once, so that one
    /// transaction always fits the journal.
    pub(super) fn after_op(&mut self) -> Result<()> {
        if self.dirty.len() as u64 * 4 > self.sb.journal_blocks {
            self.sync()?;
        }
        Ok(())
    }

    /// The current image of metadata block `n`, or `None` for a free dynamic block.
    pub(super) fn encode_block(&self, n: u64, seq: u64) -> Option<Vec<u8>> {
        let sb = &self.sb;
        let header = |block_type| Header {
            block_type,
            uuid: sb.uuid,
            block_no: n,
            seq,
        };
        let mut b = new_block();
        let in_area = |start: u64, len: u64| n >= start && n < start + len;
        if n == 0 {
            return Some(sb.encode(seq).to_vec());
        } else if in_area(sb.data_bitmap_start, sb.data_bitmap_blocks) {
            self.data
                .used()
                .encode_block(n - sb.data_bitmap_start, payload_mut(&mut b[..]));
            seal_block(&mut b[..], &header(BlockType::DataBitmap));
        } else if in_area(sb.meta_bitmap_start, sb.meta_bitmap_blocks) {
            self.meta
                .used()
                .encode_block(n - sb.meta_bitmap_start, payload_mut(&mut b[..]));
            seal_block(&mut b[..], &header(BlockType::MetaBitmap));
        } else if in_area(sb.inode_table_start, sb.inode_table_blocks) {
            let k = n - sb.inode_table_start;
            let p = payload_mut(&mut b[..]);
            for j in 0..INODES_PER_BLOCK {
                let ino = k * INODES_PER_BLOCK as u64 + j as u64;
                if let Some(inode) = u32::try_from(ino).ok().and_then(|i| self.inodes.get(&i)) {
                    inode_record(inode).encode(&mut p[j * INODE_BYTES..(j + 1) * INODE_BYTES]);
                }
            }
            seal_block(&mut b[..], &header(BlockType::InodeTable));
        } else {
            match *self.owners.get(&n)? {
                Owner::DirBlock { ino, index } => {
                    let dir = self.dirs.get(&ino)?;
                    encode_dir(&dir.block_entries(index), payload_mut(&mut b[..]));
                    seal_block(&mut b[..], &header(BlockType::Directory));
                }
                Owner::Indirect { ino, slot, within } => {
                    let runs = &self.inodes.get(&ino)?.runs;
                    let first =
                        INLINE_RUNS + (((1usize << slot) - 1) + within as usize) * RUNS_PER_BLOCK;
                    let part =
                        &runs[first.min(runs.len())..(first + RUNS_PER_BLOCK).min(runs.len())];
                    encode_runs(part, payload_mut(&mut b[..]));
                    seal_block(&mut b[..], &header(BlockType::Runs));
                }
                Owner::Symlink { ino } => {
                    encode_symlink(self.symlinks.get(&ino)?, payload_mut(&mut b[..]));
                    seal_block(&mut b[..], &header(BlockType::Symlink));
                }
            }
        }
        Some(b.to_vec())
    }
}

/// The stored record of an in-memory inode.
pub(super) fn inode_record(inode: &Inode) -> InodeRecord {
    let mut rec = inode.attr.clone();
    rec.run_count = inode.runs.len() as u32;
    rec.inline = inode.runs.iter().take(INLINE_RUNS).copied().collect();
    rec
}

/// Writes images to the primary region, flushes, then to the backup region and the
/// last-block superblock copy, and flushes again.
pub(super) fn checkpoint<D: Device>(
    dev: &mut D,
    sb: &Superblock,
    images: &[(u64, &[u8])],
) -> Result<()> {
    let primary: Vec<(u64, &[u8])> = images
        .iter()
        .map(|(n, b)| (sb.primary_offset(*n), *b))
        .collect();
    write_coalesced(dev, primary, "checkpointing to the primary region")?;
    dev.flush()
        .map_err(|e| Error::io("flushing the primary region", e))?;
    let mut backup: Vec<(u64, &[u8])> = images
        .iter()
        .filter(|(n, _)| !sb.in_journal(*n))
        .map(|(n, b)| (sb.backup_offset(*n), *b))
        .collect();
    if let Some((_, sb_image)) = images.iter().find(|(n, _)| *n == 0) {
        backup.push((sb.last_copy_offset(), sb_image));
    }
    write_coalesced(dev, backup, "checkpointing to the backup region")?;
    dev.flush()
        .map_err(|e| Error::io("flushing the backup region", e))?;
    Ok(())
}

/// Writes 4 KiB images at byte offsets, merging neighbours into larger writes.
pub(super) fn write_coalesced<D: Device>(
    dev: &mut D,
    mut blocks: Vec<(u64, &[u8])>,
    what: &str,
) -> Result<()> {
    blocks.sort_by_key(|(o, _)| *o);
    let mut i = 0;
    while i < blocks.len() {
        let start = blocks[i].0;
        let mut j = i + 1;
        while j < blocks.len()
            && blocks[j].0 == start + ((j - i) * META_BLOCK_BYTES) as u64
            && (j - i) * META_BLOCK_BYTES < MAX_CHECKPOINT_WRITE_BYTES
        {
            j += 1;
        }
        let mut buf = crate::device::AlignedBuf::zeroed((j - i) * META_BLOCK_BYTES);
        for (k, (_, img)) in blocks[i..j].iter().enumerate() {
            buf[k * META_BLOCK_BYTES..(k + 1) * META_BLOCK_BYTES].copy_from_slice(img);
        }
        dev.write_at(start, &buf).map_err(|e| Error::io(what, e))?;
        i = j;
    }
    Ok(())
}

/// Overwrites the journal head so that no transaction is found there. Only called once
/// every transaction in the journal is checkpointed in both regions.
pub(super) fn invalidate_journal<D: Device>(dev: &mut D, sb: &Superblock) -> Result<()> {
    let zero = crate::device::AlignedBuf::zeroed(META_BLOCK_BYTES);
    dev.write_at(sb.primary_offset(sb.journal_start), &zero)
        .map_err(|e| Error::io("clearing the journal", e))?;
    dev.flush()
        .map_err(|e| Error::io("flushing the journal", e))
}
