//! Truncation: cutting a file (the blocks past the new end freed at once) and growing
//! it (the rest of the old last block zeroed on disk first).
//!
//! The invariant it keeps, two mechanisms of `volume/data.rs`'s rule: blocks past the
//! end of a file are always freed, so growth meets only holes; the bytes between an
//! old end and a new one read as zeros.

use super::*;

impl Volume {
    /// Sets the size of a file. Shrinking (or keeping the size) is done at once: blocks
    /// past the new end are freed; unless the new end cuts a checksummed granule, whose
    /// checksum must be computed again on what is left: then, as when growing, a plan is
    /// returned and the truncation happens when it is applied (like a write). Growing
    /// needs the rest of the old last block zeroed on disk first. The file must have no
    /// pending writes (the engine waits for them).
    pub fn truncate(
        &mut self,
        ino: Ino,
        size_bytes: u64,
        now_ns: i64,
    ) -> Result<Option<WritePlan>> {
        self.check_writable()?;
        let bs = self.sb.data_block_bytes;
        if size_bytes > max_file_bytes(bs) {
            return Err(Error::FileTooLarge(size_bytes));
        }
        let old = self.file(ino)?.attr.size_bytes;
        assert_eq!(
            self.pending_writes(ino),
            0,
            "inode {ino}: truncated with writes in flight"
        );
        // Nothing logged for the file before the truncation is replayed over it.
        self.raise_tail_floor(ino);
        if size_bytes > old {
            let mut plan = WritePlan {
                ino,
                io: vec![],
                new_blocks: vec![],
                size_before: old,
                new_size: size_bytes,
                mtime_ns: now_ns,
                span: (u64::MAX, 0),
                first_changed: u64::MAX,
                noop: false,
                rewrites: false,
            };
            if !old.is_multiple_of(bs) {
                let fb = old / bs;
                if let Some(block) = self.file(ino)?.lookup(fb) {
                    let e = size_bytes.min((fb + 1) * bs) - fb * bs;
                    let edits = [Edit {
                        s: old % bs,
                        e,
                        src: None,
                    }];
                    let base = self.sb.data_offset(block);
                    let gp =
                        self.granule_plan(ino, &edits, false, true, block, fb, old, size_bytes);
                    for (s, e, io) in
                        block_accesses(ino, &edits, false, old, size_bytes, fb, bs, &gp)
                    {
                        plan.span = (fb * bs + s, fb * bs + e);
                        plan.io.push(PlannedIo {
                            offset_bytes: base + io.offset_bytes,
                            ..io
                        });
                    }
                }
            }
            let p = self.pending.entry(ino).or_default();
            p.writes += 1;
            p.size_bytes = size_bytes;
            return Ok(Some(plan));
        }
        if size_bytes < old {
            if let Some(plan) = self.cut_granule_plan(ino, old, size_bytes, now_ns)? {
                let p = self.pending.entry(ino).or_default();
                p.writes += 1;
                p.size_bytes = size_bytes;
                return Ok(Some(plan));
            }
        }
        self.shrink(ino, size_bytes, now_ns)?;
        Ok(None)
    }

    /// Cuts file `ino` to `size_bytes` (not more than its size) at once: the blocks
    /// past the new end are freed; sets the times.
    pub(super) fn shrink(&mut self, ino: Ino, size_bytes: u64, now_ns: i64) -> Result<()> {
        let bs = self.sb.data_block_bytes;
        let old = self.file(ino)?.attr.size_bytes;
        if size_bytes < old {
            let keep = size_bytes.div_ceil(bs);
            let (freed, first) = self.inode_mut(ino)?.truncate_blocks(keep);
            for (start, count) in freed {
                for b in start..start + count {
                    // fsck frees tolerantly: it rebuilds the bitmaps afterwards.
                    if !self.in_fsck || self.data.used().get(b) {
                        self.data.free(b);
                    }
                    self.dirty_data_bitmap(b);
                }
            }
            self.dirty_runs_from(ino, first)?;
            self.trim_run_capacity(ino)?;
            self.data.release(ino);
            self.cut_frame_index(ino, size_bytes);
        }
        let a = &mut self.inode_mut(ino)?.attr;
        a.size_bytes = size_bytes;
        a.mtime_ns = now_ns;
        a.ctime_ns = now_ns;
        self.dirty_inode(ino);
        Ok(())
    }
}
