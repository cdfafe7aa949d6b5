//! Cutting transactions: serialising dirty metadata into the journal write and the
//! checkpoint writes. The engine's commit pipeline (`engine/commit.rs`) sends them.

use super::*;
use crate::device::AlignedBuf;
use crate::format::dir::{encode_dir, encode_symlink};
use crate::format::inode::{
    encode_runs, map_sum, put_map_sum, put_tail_floor, InodeRecord, INLINE_RUNS, INODES_PER_BLOCK,
    INODE_BYTES, RUNS_PER_BLOCK,
};
use crate::format::journal::{encode_transaction, transaction_blocks};
use crate::format::superblock::Area;
use crate::format::{new_block, payload_mut, seal_block, BlockType, Header, META_BLOCK_BYTES};

/// Largest single device write the checkpoint issues.
const MAX_CHECKPOINT_WRITE_BYTES: usize = 4 << 20;

/// Clean metadata blocks in a gap of at most this many blocks between two blocks of a
/// transaction go into it too, so the checkpoint writes the run as one command: on a
/// hard disk each separate write of a scattered checkpoint waits for the platter to
/// come round (up to a revolution, 8 ms at 7,200 rpm), while 32 more blocks cost
/// 128 KiB of transfer (under 1 ms). A commit of 190 recordings dirties every other
/// inode-table block; its ~60 checkpoint writes became ~10 (`docs/results.md`, 9).
pub const BRIDGE_GAP_BLOCKS: u64 = 32;

/// Device writes: (byte offset, 4 KiB-aligned bytes).
pub type Writes = Vec<(u64, AlignedBuf)>;

/// One commit's writes, encoded when the transaction is cut: the engine's commit
/// pipeline sends them in order (journal, flush, primary, flush, backup, flush).
pub struct Transaction {
    pub txn: u64,
    /// The journal write: (device offset, bytes).
    pub journal: (u64, AlignedBuf),
    /// Checkpoint writes to the primary region, coalesced, in offset order.
    pub primary: Vec<(u64, AlignedBuf)>,
    /// Checkpoint writes to the backup region and the end-of-device superblock copy.
    pub backup: Vec<(u64, AlignedBuf)>,
    /// Data blocks this transaction frees: reusable once it is durable.
    pub freed: Vec<u64>,
    /// Metadata blocks it carries.
    pub blocks: usize,
    /// Dirty blocks were left for a later transaction (only an fsck repair of a badly
    /// damaged volume dirties more than one transaction holds).
    pub partial: bool,
}

impl Volume {
    /// Cuts a transaction from the dirty set: every dirty block is encoded now (with
    /// the next transaction number), so operations after this call go into the next
    /// one. `None` when nothing is dirty.
    pub fn snapshot(&mut self) -> Option<Transaction> {
        if !self.writable || self.dirty.is_empty() {
            return None;
        }
        self.sb.zrr_cursor = self.data.zrr_cursor();
        let per_txn = self.max_transaction_images() - 1;
        let all: Vec<u64> = self.dirty.iter().copied().filter(|&n| n != 0).collect();
        let partial = all.len() > per_txn;
        let blocks: Vec<u64> = all.into_iter().take(per_txn).collect();
        let blocks = self.bridge_gaps(blocks, per_txn);
        let txn = self.sb.last_txn + 1;
        self.sb.last_txn = txn;
        let images: Vec<(u64, Vec<u8>)> = std::iter::once(0)
            .chain(blocks.iter().copied())
            .filter_map(|n| self.encode_block(n, txn).map(|img| (n, img)))
            .collect();
        let refs: Vec<(u64, &[u8])> = images.iter().map(|(n, b)| (*n, &b[..])).collect();
        let bytes = encode_transaction(&self.sb.uuid, self.sb.journal_start, txn, &refs);
        assert!(
            bytes.len() as u64 <= self.sb.journal_blocks * META_BLOCK_BYTES as u64,
            "transaction {txn} of {} blocks does not fit the journal",
            refs.len()
        );
        let mut journal = AlignedBuf::zeroed(bytes.len());
        journal.copy_from_slice(&bytes);
        let (primary, backup) = checkpoint_writes(&self.sb, &refs);
        self.dirty.remove(&0);
        // (Bridged blocks were clean: removing them is a no-op.)
        for n in &blocks {
            self.dirty.remove(n);
        }
        // Frees are carried by the transaction that records them; with a partial cut
        // they wait for the last one.
        let freed = if partial {
            Vec::new()
        } else {
            self.data.take_pending_free()
        };
        Some(Transaction {
            txn,
            journal: (self.sb.primary_offset(self.sb.journal_start), journal),
            primary,
            backup,
            freed,
            blocks: refs.len(),
            partial,
        })
    }

    /// A transaction is durable in both regions: the blocks it freed can be reused.
    pub fn commit_done(&mut self, freed: Vec<u64>) {
        self.data.release_freed(freed);
    }

    /// The checkpoint writes of a transaction replayed at open.
    pub fn replay_writes(&self, replay: &Replay) -> (Writes, Writes) {
        let refs: Vec<(u64, &[u8])> = replay.images.iter().map(|(n, b)| (*n, &b[..])).collect();
        checkpoint_writes(&self.sb, &refs)
    }

    /// The write that empties the journal (a clean unmount: nothing to replay).
    pub fn invalidate_journal_write(&self) -> (u64, AlignedBuf) {
        (
            self.sb.primary_offset(self.sb.journal_start),
            AlignedBuf::zeroed(META_BLOCK_BYTES),
        )
    }

    /// `blocks` (ascending) with the clean blocks of every short gap between two of
    /// them added ([`BRIDGE_GAP_BLOCKS`]), as long as the transaction stays within
    /// `limit` blocks. Only blocks whose whole content is in memory are added (a
    /// bitmap, inode-table or loaded checksum block, or a dynamic block with an owner),
    /// and only on a volume that loaded without a problem: a block the loader could
    /// not read, or one fsck is rebuilding, is never rewritten from memory unasked.
    fn bridge_gaps(&self, blocks: Vec<u64>, limit: usize) -> Vec<u64> {
        let r = &self.report;
        if self.in_fsck
            || !r.problems.is_empty()
            || !r.lost_blocks.is_empty()
            || !r.from_backup.is_empty()
        {
            return blocks;
        }
        let mut out: Vec<u64> = Vec::with_capacity(blocks.len());
        for (i, &n) in blocks.iter().enumerate() {
            if let Some(&prev) = out.last() {
                let gap = n - prev - 1;
                let room = out.len() + gap as usize + (blocks.len() - i) <= limit;
                if gap > 0
                    && gap <= BRIDGE_GAP_BLOCKS
                    && room
                    && (prev + 1..n).all(|g| self.in_memory_whole(g))
                {
                    out.extend(prev + 1..n);
                }
            }
            out.push(n);
        }
        out
    }

    /// Whether metadata block `n` can be written from memory alone (see
    /// [`Volume::bridge_gaps`]).
    fn in_memory_whole(&self, n: u64) -> bool {
        match self.sb.area_of(n) {
            Area::Superblock | Area::Journal | Area::TailLog(_) => false,
            Area::DataBitmap(_) | Area::MetaBitmap(_) => true,
            Area::InodeTable(k) => k < self.report.inode_blocks_read,
            Area::Sums(_) => self.sums.is_some(),
            Area::Events(_) => self.has_event_log(),
            Area::Dynamic => self.owners.contains_key(&n),
        }
    }

    /// The most images one transaction can carry in this journal.
    pub fn max_transaction_images(&self) -> usize {
        let mut n = self.sb.journal_blocks as usize;
        while transaction_blocks(n) as u64 > self.sb.journal_blocks {
            n -= 1;
        }
        n
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
        match sb.area_of(n) {
            Area::Superblock => return Some(self.encode_superblock(seq)),
            // The journal and the tail log are written by the commit, never
            // checkpointed.
            Area::Journal | Area::TailLog(_) => return None,
            Area::DataBitmap(k) => {
                self.data.used().encode_block(k, payload_mut(&mut b[..]));
                seal_block(&mut b[..], &header(BlockType::DataBitmap));
            }
            Area::MetaBitmap(k) => {
                self.meta.used().encode_block(k, payload_mut(&mut b[..]));
                seal_block(&mut b[..], &header(BlockType::MetaBitmap));
            }
            Area::InodeTable(k) => {
                let p = payload_mut(&mut b[..]);
                for j in 0..INODES_PER_BLOCK {
                    let ino = k * INODES_PER_BLOCK as u64 + j as u64;
                    if let Some(inode) = u32::try_from(ino).ok().and_then(|i| self.inodes.get(&i)) {
                        let mut rec = inode_record(inode);
                        // An inline link: its target takes the map bytes. (One whose
                        // target was lost to damage has none to write; fsck frees it.)
                        if inode.kind() == Some(Kind::Symlink) && inode.runs.is_empty() {
                            if let Some(t) = self.symlinks.get(&(ino as Ino)) {
                                rec.inline_target = t.clone();
                            }
                        }
                        rec.encode(&mut p[j * INODE_BYTES..(j + 1) * INODE_BYTES]);
                        if inode.kind() == Some(Kind::File) {
                            put_map_sum(p, j, map_sum(inode.attr.size_bytes, inode.runs.iter()));
                            if let Some(&floor) = self.tail_floors.get(&(ino as Ino)) {
                                put_tail_floor(p, j, floor);
                            }
                        }
                    }
                }
                seal_block(&mut b[..], &header(BlockType::InodeTable));
            }
            Area::Sums(k) => {
                // Checksum blocks are only dirtied with the table loaded.
                let sums = self.sums.as_ref()?;
                sums.encode_block(k, payload_mut(&mut b[..]));
                seal_block(&mut b[..], &header(BlockType::Sums));
            }
            Area::Events(k) => return self.encode_event_block(k, seq),
            Area::Dynamic => match *self.owners.get(&n)? {
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
                Owner::FrameIndex { ino, level, index } => {
                    let block = self.frame_index_image(ino, level, index)?;
                    crate::format::frame_index::encode(&block, payload_mut(&mut b[..]));
                    seal_block(&mut b[..], &header(BlockType::FrameIndex));
                }
            },
        }
        Some(b.to_vec())
    }
}

/// The stored record of an in-memory inode.
pub(crate) fn inode_record(inode: &Inode) -> InodeRecord {
    let mut rec = inode.attr.clone();
    rec.run_count = inode.runs.len() as u32;
    rec.inline = inode.runs.iter().take(INLINE_RUNS).copied().collect();
    rec
}

/// The checkpoint writes of `images`: to the primary region, then to the backup region
/// and (for the superblock) the last 4 KiB of the device; each coalesced.
pub(super) fn checkpoint_writes(sb: &Superblock, images: &[(u64, &[u8])]) -> (Writes, Writes) {
    let primary: Vec<(u64, &[u8])> = images
        .iter()
        .map(|(n, b)| (sb.primary_offset(*n), *b))
        .collect();
    let mut backup: Vec<(u64, &[u8])> = images
        .iter()
        .filter(|(n, _)| !sb.in_journal(*n) && !sb.in_tail_log(*n))
        .map(|(n, b)| (sb.backup_offset(*n), *b))
        .collect();
    if let Some((_, sb_image)) = images.iter().find(|(n, _)| *n == 0) {
        backup.push((sb.last_copy_offset(), sb_image));
    }
    (coalesce(primary), coalesce(backup))
}

/// 4 KiB images at byte offsets, neighbours merged into writes of at most
/// [`MAX_CHECKPOINT_WRITE_BYTES`].
pub(super) fn coalesce(mut blocks: Vec<(u64, &[u8])>) -> Vec<(u64, AlignedBuf)> {
    blocks.sort_by_key(|(o, _)| *o);
    let mut out = Vec::new();
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
        let mut buf = AlignedBuf::zeroed((j - i) * META_BLOCK_BYTES);
        for (k, (_, img)) in blocks[i..j].iter().enumerate() {
            buf[k * META_BLOCK_BYTES..(k + 1) * META_BLOCK_BYTES].copy_from_slice(img);
        }
        out.push((start, buf));
        i = j;
    }
    out
}
