//! Checksum bookkeeping: which data-checksum granules a write or a truncation
//! touches, which get a checksum computed over the new bytes, and which must be read
//! (and their old checksum checked) first because the change covers them only in part.
//!
//! The invariant it keeps: a granule's stored checksum covers the bytes on disk. One a
//! write covers whole gets a new checksum; one it covers in part is read whole, checked,
//! and computed again with the new bytes; one a truncation cuts is checksummed again
//! over what is left, its tail zeroed, in the same transaction as the truncation.

use super::*;

/// What a write does to the checksums of one block (offsets within the block).
#[derive(Default)]
pub(super) struct GranulePlan {
    /// `(start, old_end, new_end)` of granules rewritten inside their checked bytes:
    /// the access covers `[start, new_end)` and reads `[start, old_end)` first.
    pub(super) widen: Vec<(u64, u64, u64)>,
    /// `(start, len, entry, seed)`, see [`Sum`].
    pub(super) sums: Vec<(u64, u64, u64, Option<u32>)>,
    /// `(start, len, crc, file_offset)` checked on the bytes read before rewriting.
    pub(super) checks: Vec<(u64, u64, u32, u64)>,
}

impl Volume {
    /// What a write's `edits` of block `block` (file block `fb`; `fresh`: mapped by
    /// this write) do to its checksums, the file growing from `old_size` to
    /// `new_size`. Per granule with checked bytes after the write:
    /// - a fresh block: every granule is written from its start (the block is written
    ///   from its start to the end of the file), its checksum set;
    /// - edits only at or past the granule's old end (appends, zeros after the old end
    ///   of file): the checksum of the new bytes is combined with the old one;
    /// - edits that cover the granule's bytes: its checksum is theirs;
    /// - edits inside the checked bytes: the granule is read (and checked) and written
    ///   whole, its checksum computed again.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn granule_plan(
        &self,
        ino: Ino,
        edits: &[Edit],
        fresh: bool,
        applied: bool,
        block: u64,
        fb: u64,
        old_size: u64,
        new_size: u64,
    ) -> GranulePlan {
        let mut gp = GranulePlan::default();
        let Some(sums) = &self.sums else {
            return gp;
        };
        let (g, bs) = (sums.granule_bytes(), self.sb.data_block_bytes);
        let base = fb * bs;
        let new_c = new_size.saturating_sub(base).min(bs);
        let old_c = if fresh {
            0
        } else {
            old_size.saturating_sub(base).min(bs)
        };
        for k in 0..new_c.div_ceil(g) {
            let (gs, ge) = (k * g, ((k + 1) * g).min(new_c));
            let entry = sums.entry(block, k);
            let seed = Some(place_seed(ino, base + gs));
            if fresh {
                gp.sums.push((gs, ge - gs, entry, seed));
                continue;
            }
            let Some(first) = edits
                .iter()
                .filter(|e| e.s < ge && e.e > gs)
                .map(|e| e.s.max(gs))
                .min()
            else {
                continue;
            };
            let old_e = old_c.clamp(gs, ge);
            if covers(edits, gs, ge) {
                // Written whole: nothing of the old bytes is kept.
                gp.sums.push((gs, ge - gs, entry, seed));
            } else if first >= old_e {
                match old_e == gs {
                    true => gp.sums.push((gs, ge - gs, entry, seed)),
                    false => gp.sums.push((old_e, ge - old_e, entry, None)),
                }
            } else {
                gp.widen.push((gs, old_e, ge));
                if let Some(crc) = sums.get(entry).filter(|_| applied) {
                    gp.checks.push((gs, old_e - gs, crc, base + gs));
                }
                gp.sums.push((gs, ge - gs, entry, seed));
            }
        }
        gp
    }

    /// A truncation from `old` to `size` that ends inside a checksummed granule: the
    /// granule's covered bytes shrink, so its checksum is computed again on them. The
    /// plan reads the granule's old bytes (checked against the old checksum), writes
    /// them back unchanged and sets the new checksum; applying it does the truncation,
    /// in the same transaction. `None`: nothing to checksum again.
    pub(super) fn cut_granule_plan(
        &mut self,
        ino: Ino,
        old: u64,
        size: u64,
        now_ns: i64,
    ) -> Result<Option<WritePlan>> {
        let bs = self.sb.data_block_bytes;
        let (Some(sums), Some(block)) = (&self.sums, self.file(ino)?.lookup(size / bs)) else {
            return Ok(None);
        };
        let (g, fb, within) = (sums.granule_bytes(), size / bs, size % bs);
        if within.is_multiple_of(g) {
            return Ok(None);
        }
        let gs = within / g * g;
        let entry = sums.entry(block, within / g);
        let Some(crc) = sums.get(entry) else {
            // No checksum to keep (its block was lost): nothing to vouch for.
            return Ok(None);
        };
        let old_e = (old - fb * bs).min(bs).min(gs + g);
        let end = align_up(old_e).min(bs);
        let seed = place_seed(ino, fb * bs + gs);
        let mut io = PlannedIo::new(
            self.sb.data_offset(block) + gs,
            end - gs,
            Fill::Compose {
                pieces: vec![],
                rmw: vec![(0, end - gs)],
            },
        );
        io.checks.push(Check {
            at: 0,
            len: (old_e - gs) as usize,
            crc,
            file_offset: fb * bs + gs,
            seed,
        });
        io.sums.push(Sum {
            at: 0,
            len: (within - gs) as usize,
            entry,
            seed: Some(seed),
        });
        Ok(Some(WritePlan {
            ino,
            io: vec![io],
            new_blocks: vec![],
            size_before: old,
            new_size: size,
            mtime_ns: now_ns,
            span: (fb * bs + gs, fb * bs + end),
            // The cut granule's bytes stay; the shrink cuts the index.
            first_changed: u64::MAX,
            noop: false,
            rewrites: true,
        }))
    }
}

/// Moves the checksums of `gp` that lie in access `[lo, hi)` onto it.
pub(super) fn attach_sums(io: &mut PlannedIo, ino: Ino, lo: u64, hi: u64, gp: &GranulePlan) {
    for &(s, len, entry, seed) in &gp.sums {
        if s >= lo && s + len <= hi {
            io.sums.push(Sum {
                at: (s - lo) as usize,
                len: len as usize,
                entry,
                seed,
            });
        }
    }
    for &(s, len, crc, file_offset) in &gp.checks {
        if s >= lo && s + len <= hi {
            io.checks.push(Check {
                at: (s - lo) as usize,
                len: len as usize,
                crc,
                file_offset,
                seed: place_seed(ino, file_offset),
            });
        }
    }
}
