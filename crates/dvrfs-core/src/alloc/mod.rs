//! Block allocation: the data-region allocator with its three policies, and the
//! allocator of the dynamic metadata area.
//!
//! The data allocator keeps two views of the data region:
//! - `used`, the bitmap that is stored on disk: a bit is set when a file owns the block;
//! - `busy`, what a new allocation must avoid: `used`, plus blocks a `contig` file holds
//!   in its preallocation window, plus blocks *reserved* for writes whose data is still
//!   on its way to the disk, plus blocks freed by operations not yet committed.
//!   The last rule is what keeps a crash from exposing one file's new data inside a
//!   file whose deletion had not reached the disk: a freed block is reused only after
//!   the journal has made the free durable.
//!
//! A block goes free -> reserved ([`DataAlloc::reserve`], busy) when a write is planned,
//! and reserved -> used ([`DataAlloc::mark_used`]) only when its data has reached the
//! disk and the file maps it; a failed or cancelled write gives it back
//! ([`DataAlloc::cancel_reservation`]). So the stored bitmap never names a block
//! that no committed file owns.
//!
//! Preallocation windows live only in memory, so a crash never leaks them.

pub mod bitmap;
mod contig;
pub mod meta;
mod seq;
mod zrr;

pub use bitmap::{Bitmap, BITS_PER_BITMAP_BLOCK};

use crate::format::superblock::{AllocPolicy, Superblock};
use crate::meta::Ino;
use std::collections::BTreeMap;

/// A contig file's window: blocks `next .. end` are reserved for it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Window {
    next: u64,
    end: u64,
}

#[derive(Clone, Debug)]
pub struct DataAlloc {
    policy: AllocPolicy,
    used: Bitmap,
    busy: Bitmap,
    /// Blocks that are not busy.
    free_blocks: u64,
    pending_free: Vec<u64>,
    /// Blocks freed by a transaction that has been cut and is being committed: free
    /// once its job is done (`release_freed`).
    committing_free: u64,
    windows: BTreeMap<Ino, Window>,
    prealloc_blocks: u64,
    zone_count: u64,
    zone_blocks: u64,
    /// ZRR: the zone after the last one an allocation used.
    cursor: u64,
    /// Per zone (one zone for seq/contig): no free block below this hint.
    hints: Vec<u64>,
    /// Space held for files (a recording's reservation): blocks each may still take
    /// that no other file may.
    holds: BTreeMap<Ino, u64>,
    held_total: u64,
}

impl DataAlloc {
    /// An allocator over an empty data region with `sb`'s geometry.
    pub fn new(sb: &Superblock) -> Self {
        let n = sb.data_blocks;
        let zone_count = sb.zone_count.max(1) as u64;
        DataAlloc {
            policy: sb.alloc,
            used: Bitmap::new(n),
            busy: Bitmap::new(n),
            free_blocks: n,
            pending_free: Vec::new(),
            committing_free: 0,
            windows: BTreeMap::new(),
            prealloc_blocks: sb.prealloc_blocks.max(1) as u64,
            zone_count,
            zone_blocks: sb.zone_blocks,
            cursor: sb.zrr_cursor as u64 % zone_count,
            hints: (0..zone_count).map(|z| z * sb.zone_blocks).collect(),
            holds: BTreeMap::new(),
            held_total: 0,
        }
    }

    pub fn policy(&self) -> AllocPolicy {
        self.policy
    }

    pub fn total_blocks(&self) -> u64 {
        self.used.len()
    }

    /// The bitmap as it is (or will be, at the next commit) on disk.
    pub fn used(&self) -> &Bitmap {
        &self.used
    }

    /// Replaces the stored bitmap (at load, or when fsck rebuilds it).
    pub fn set_used_bitmap(&mut self, used: Bitmap) {
        assert_eq!(
            used.len(),
            self.used.len(),
            "a data bitmap of another size (a dvrfs bug)"
        );
        self.busy = used.clone();
        self.used = used;
        self.free_blocks = self.used.len() - self.used.count_ones();
        self.pending_free.clear();
        self.committing_free = 0;
        self.windows.clear();
        let zb = self.zone_blocks;
        self.hints = (0..self.zone_count).map(|z| z * zb).collect();
    }

    pub fn used_blocks(&self) -> u64 {
        self.used.count_ones()
    }

    /// Blocks free now or at the next commit, held ones included: every block a file
    /// can still map (the dynamic area's reserve for file maps is sized from it).
    pub fn free_or_freeing(&self) -> u64 {
        self.free_blocks + self.pending_free() as u64
    }

    /// Blocks a new allocation for `ino` can get right now: the free blocks not held
    /// for other files, and its own window.
    pub fn available_for(&self, ino: Ino) -> u64 {
        let others = self.held_total - self.holds.get(&ino).copied().unwrap_or(0);
        self.free_blocks.saturating_sub(others)
            + self.windows.get(&ino).map_or(0, |w| w.end - w.next)
    }

    /// Blocks not held for anyone that are free now or will be at the next commit:
    /// what `df` should show. A block freed by an operation not yet committed cannot
    /// be allocated before that commit (a crash must not expose new data inside a
    /// file whose deletion did not reach the disk), but it is not lost either.
    pub fn available_after_commit(&self) -> u64 {
        (self.free_blocks + self.pending_free() as u64).saturating_sub(self.held_total)
    }

    /// Holds `blocks` free blocks for `ino` (a stream's space reservation): other files
    /// cannot take them, and each block `ino` allocates uses one up. Blocks freed by
    /// operations not yet committed count: the hold may then exceed the free blocks
    /// until that commit, and a write of `ino` that needs one waits for it (a
    /// recorder that deletes its oldest segment and opens the next one is not
    /// refused). False (nothing changed) if that many are not available.
    pub fn hold(&mut self, ino: Ino, blocks: u64) -> bool {
        if self.available_after_commit() < blocks {
            return false;
        }
        *self.holds.entry(ino).or_default() += blocks;
        self.held_total += blocks;
        true
    }

    /// Gives back what is left of `ino`'s hold.
    /// Blocks held for `ino` and not yet used.
    pub fn held_by(&self, ino: Ino) -> u64 {
        self.holds.get(&ino).copied().unwrap_or(0)
    }

    /// Moves what `from` holds beyond `keep` blocks to `to` (a recording that rolled
    /// on to its next file keeps what its last bytes in `from` still need). The
    /// total held does not change, so it cannot fail.
    pub fn move_hold(&mut self, from: Ino, to: Ino, keep: u64) {
        let moving = self.held_by(from).saturating_sub(keep);
        if moving == 0 || from == to {
            return;
        }
        let h = self.holds.get_mut(&from).expect("held_by found it");
        *h -= moving;
        if *h == 0 {
            self.holds.remove(&from);
        }
        *self.holds.entry(to).or_default() += moving;
    }

    pub fn release_hold(&mut self, ino: Ino) {
        if let Some(h) = self.holds.remove(&ino) {
            self.held_total -= h;
        }
    }

    /// Blocks held for files, not yet allocated.
    pub fn held_blocks(&self) -> u64 {
        self.held_total
    }

    fn use_hold(&mut self, ino: Ino) {
        if let Some(h) = self.holds.get_mut(&ino) {
            *h -= 1;
            self.held_total -= 1;
            if *h == 0 {
                self.holds.remove(&ino);
            }
        }
    }

    /// Blocks freed by operations that have not been committed yet.
    /// ...counting those of a transaction being committed: a write that needs them
    /// waits for a commit, it does not fail (before, a write planned while the
    /// commit that carried the frees was running found none pending and failed
    /// with "no space").
    pub fn pending_free(&self) -> usize {
        self.pending_free.len() + self.committing_free as usize
    }

    pub fn zrr_cursor(&self) -> u32 {
        self.cursor as u32
    }

    pub fn zone_of(&self, block: u64) -> u64 {
        block / self.zone_blocks
    }

    pub(crate) fn zone_range(&self, zone: u64) -> (u64, u64) {
        let start = zone * self.zone_blocks;
        (start, (start + self.zone_blocks).min(self.used.len()))
    }

    /// Allocates the next block for `ino` and marks it used: [`DataAlloc::reserve`]
    /// then [`DataAlloc::mark_used`] (for callers that map it at once).
    pub fn alloc(&mut self, ino: Ino, prev: Option<u64>) -> Option<u64> {
        let b = self.reserve(ino, prev)?;
        self.mark_used(b);
        Some(b)
    }

    /// Reserves the next block for `ino`, whose preceding file block (if any) lives in
    /// `prev`, by the volume's policy. The block is busy but not yet used. `None` when
    /// the data region is full.
    pub fn reserve(&mut self, ino: Ino, prev: Option<u64>) -> Option<u64> {
        let block = match self.policy {
            AllocPolicy::Zrr => zrr::pick(self, prev)?,
            AllocPolicy::Seq => seq::pick(self)?,
            AllocPolicy::Contig => {
                let b = contig::pick(self, ino, prev)?;
                self.use_hold(ino);
                return Some(b);
            }
        };
        self.take(block);
        self.use_hold(ino);
        Some(block)
    }

    /// Reserved for a write in progress: busy, not yet in the stored bitmap.
    pub fn is_reserved(&self, block: u64) -> bool {
        self.busy.get(block) && !self.used.get(block)
    }

    /// A reserved block now belongs to a file: it goes into the stored bitmap.
    pub fn mark_used(&mut self, block: u64) {
        assert!(
            self.busy.get(block) && !self.used.get(block),
            "data block {block} marked used without a reservation"
        );
        self.used.set(block, true);
    }

    /// A reserved block was never used (its write failed or was cancelled).
    pub fn cancel_reservation(&mut self, block: u64) {
        self.unreserve(block);
    }

    /// Marks a free block busy (reserved).
    fn take(&mut self, block: u64) {
        assert!(
            !self.busy.get(block),
            "data block {block} reserved while busy (a dvrfs bug)"
        );
        self.busy.set(block, true);
        self.free_blocks -= 1;
        let z = self.hint_zone(block);
        if self.hints[z] == block {
            self.hints[z] = block + 1;
        }
    }

    fn hint_zone(&self, block: u64) -> usize {
        if self.policy == AllocPolicy::Zrr {
            self.zone_of(block) as usize
        } else {
            0
        }
    }

    /// Releases a block of a file. It stays busy until [`DataAlloc::commit_done`].
    pub fn free(&mut self, block: u64) {
        // The loader refuses writable opens of a volume whose bitmap misses a file's
        // block or whose files share one (fsck frees tolerantly): a double free here
        // is a bug of the code.
        assert!(
            self.used.get(block),
            "double free of data block {block} (a dvrfs bug)"
        );
        self.used.set(block, false);
        self.pending_free.push(block);
    }

    /// The journal made every earlier free durable: the blocks can be reused.
    pub fn commit_done(&mut self) {
        let freed = self.take_pending_free();
        self.release_freed(freed);
    }

    /// The frees a transaction being built carries (released when it is durable).
    pub fn take_pending_free(&mut self) -> Vec<u64> {
        let freed = std::mem::take(&mut self.pending_free);
        self.committing_free += freed.len() as u64;
        freed
    }

    /// The transaction that freed `freed` is durable: the blocks can be reused.
    pub fn release_freed(&mut self, freed: Vec<u64>) {
        assert!(
            freed.len() as u64 <= self.committing_free,
            "{} blocks released, {} were being committed (a dvrfs bug)",
            freed.len(),
            self.committing_free
        );
        self.committing_free -= freed.len() as u64;
        for b in freed {
            if !self.used.get(b) && self.busy.get(b) {
                self.busy.set(b, false);
                self.free_blocks += 1;
                let z = self.hint_zone(b);
                self.hints[z] = self.hints[z].min(b);
            }
        }
    }

    /// `ino` was closed: its unused preallocation goes back to the free pool.
    pub fn release(&mut self, ino: Ino) {
        if let Some(w) = self.windows.remove(&ino) {
            for b in w.next..w.end {
                self.unreserve(b);
            }
        }
    }

    pub fn release_all(&mut self) {
        let inos: Vec<Ino> = self.windows.keys().copied().collect();
        for ino in inos {
            self.release(ino);
        }
    }

    fn unreserve(&mut self, b: u64) {
        assert!(
            self.busy.get(b) && !self.used.get(b),
            "data block {b} released but not reserved"
        );
        self.busy.set(b, false);
        self.free_blocks += 1;
        let z = self.hint_zone(b);
        self.hints[z] = self.hints[z].min(b);
    }

    /// Checks the allocator's own bookkeeping (used by tests and debug builds).
    pub fn check_invariants(&self) -> Result<(), String> {
        let busy = self.busy.count_ones();
        if self.used.len() - busy != self.free_blocks {
            return Err(format!(
                "free count {} but {} blocks not busy",
                self.free_blocks,
                self.used.len() - busy
            ));
        }
        for i in 0..self.used.len() {
            if self.used.get(i) && !self.busy.get(i) {
                return Err(format!("block {i} used but not busy"));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
