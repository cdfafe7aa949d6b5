//! Applying a write once its data is on disk (its blocks mapped, the size and the
//! checksums set), or aborting it (its reserved blocks given back).
//!
//! The invariant it keeps, the last mechanism of `volume/data.rs`'s rule: a write's
//! metadata is applied only after its data completed, and a file's writes are applied
//! in the order they were planned, so no snapshot of the metadata names a block whose
//! data is still in flight. Only the newest pending write of a file is aborted.

use super::*;

impl Volume {
    /// The write's data is on the disk: map its blocks, set the size, times and data
    /// checksums. `crcs` holds the CRC32C of each of the plan's [`Sum`]s, in plan
    /// order (`None` where the bytes were not there to compute it: the simulator's).
    /// Writes of a file are applied in the order they were planned.
    pub fn apply_write(&mut self, plan: &WritePlan, crcs: &[Option<u32>]) -> Result<()> {
        if plan.noop {
            return Ok(());
        }
        assert_eq!(
            crcs.len(),
            plan.sum_count(),
            "inode {}: a write applied with {} checksums for {} planned",
            plan.ino,
            crcs.len(),
            plan.sum_count()
        );
        let sums: Vec<&Sum> = plan.io.iter().flat_map(|io| &io.sums).collect();
        for (sum, &crc) in sums.into_iter().zip(crcs) {
            let old = self.sums.as_ref().and_then(|s| s.get(sum.entry));
            let new = match (sum.seed, old, crc) {
                (Some(seed), _, Some(c)) => Some(crc32c::crc32c_combine(seed, c, sum.len)),
                (None, Some(o), Some(c)) => Some(crc32c::crc32c_combine(o, c, sum.len)),
                // An append to a granule without a checksum (its block was lost).
                (None, None, Some(_)) => None,
                // The simulator's bytes are virtual: a placeholder no read checks
                // (the simulator's reads carry no bytes either).
                (_, _, None) => Some(0),
            };
            self.set_sum(sum.entry, new);
        }
        let ino = plan.ino;
        let size_now = self.inode(ino)?.attr.size_bytes;
        assert_eq!(
            size_now, plan.size_before,
            "inode {ino}: writes applied out of their planned order"
        );
        let mut lowest_changed = usize::MAX;
        for &(fb, block) in &plan.new_blocks {
            self.data.mark_used(block);
            self.dirty_data_bitmap(block);
            if let Some(p) = self.pending.get_mut(&ino) {
                p.blocks.remove(&fb);
            }
            let (changed, _) = self.inode_mut(ino)?.map_block(fb, block);
            lowest_changed = lowest_changed.min(changed);
        }
        if lowest_changed != usize::MAX {
            self.dirty_runs_from(ino, lowest_changed)?;
        }
        // A write over indexed keyframes: the index keeps what lies before it and is
        // flagged incomplete (the keyframes there may have moved or gone).
        self.overwrite_frame_index(ino, plan.first_changed);
        if plan.new_size < plan.size_before {
            // A truncation whose cut granule was checksummed again.
            self.shrink(ino, plan.new_size, plan.mtime_ns)?;
        } else {
            let a = &mut self.inode_mut(ino)?.attr;
            a.size_bytes = plan.new_size;
            a.mtime_ns = plan.mtime_ns;
            a.ctime_ns = plan.mtime_ns;
            self.dirty_inode(ino);
        }
        self.finish_pending(ino);
        Ok(())
    }

    /// The write failed or was cancelled before being applied: its reservations go
    /// back. Only the newest pending write of a file may be aborted (the engine aborts
    /// a failed write together with every later one).
    pub fn abort_write(&mut self, plan: &WritePlan) {
        if plan.noop {
            return;
        }
        for &(fb, b) in &plan.new_blocks {
            self.data.cancel_reservation(b);
            if let Some(p) = self.pending.get_mut(&plan.ino) {
                p.blocks.remove(&fb);
            }
        }
        if let Some(p) = self.pending.get_mut(&plan.ino) {
            p.size_bytes = plan.size_before;
        }
        self.finish_pending(plan.ino);
    }

    pub(super) fn finish_pending(&mut self, ino: Ino) {
        let Some(p) = self.pending.get_mut(&ino) else {
            panic!("inode {ino}: a write finished that was never pending");
        };
        p.writes -= 1;
        if p.writes == 0 {
            assert!(
                p.blocks.is_empty(),
                "inode {ino}: reserved blocks left after its last pending write"
            );
            self.pending.remove(&ino);
        }
    }
}
