//! Planning writes: the blocks a write maps (reserved when it is planned), the device
//! accesses it needs, the sectors it reads first to keep bytes it does not overwrite
//! (read-modify-write), and the room its metadata takes in the journal.
//!
//! The invariant it keeps, the first two mechanisms of `volume/data.rs`'s rule: a newly
//! allocated block is written from its start to the later of the write's end and the
//! file's end, zeros where the caller gave no data; a write past the old end zeroes the
//! rest of the block holding the old end in the same operation. A plan that fails
//! leaves nothing reserved.

use super::*;
use crate::device::IO_ALIGN_BYTES;

impl Volume {
    /// Plans a write of `len` bytes at `offset`. `Ok(None)`: it can only go ahead after
    /// a commit (blocks freed by uncommitted operations would make room, or the
    /// current transaction has no room for what it dirties): commit, then plan again.
    /// On `Ok(Some(_))` the blocks are reserved and the file's pending state includes
    /// the write; on `Err` nothing changed.
    pub fn plan_write(
        &mut self,
        ino: Ino,
        offset: u64,
        len: usize,
        now_ns: i64,
    ) -> Result<Option<WritePlan>> {
        self.check_writable()?;
        let bs = self.sb.data_block_bytes;
        let end = offset
            .checked_add(len as u64)
            .filter(|&e| e <= max_file_bytes(bs))
            .ok_or(Error::FileTooLarge(offset))?;
        let old_size = self.planned_size(ino)?;
        if len == 0 {
            return Ok(Some(WritePlan {
                ino,
                io: vec![],
                new_blocks: vec![],
                size_before: old_size,
                new_size: old_size,
                mtime_ns: now_ns,
                span: (0, 0),
                first_changed: u64::MAX,
                noop: true,
                rewrites: false,
            }));
        }
        // Everything that can fail for lack of space is checked first.
        let Some(needed) = self.room_for_write(ino, offset, end, old_size)? else {
            return Ok(None);
        };
        let edits = write_edits(offset, end, old_size, bs);
        let new_size = old_size.max(end);
        let mut plan = WritePlan {
            ino,
            io: vec![],
            new_blocks: vec![],
            size_before: old_size,
            new_size,
            mtime_ns: now_ns,
            span: (u64::MAX, 0),
            first_changed: offset,
            noop: false,
            rewrites: offset < old_size,
        };
        for (&fb, edits) in &edits {
            let existing = {
                let inode = self.file(ino)?;
                self.planned_lookup(ino, inode, fb)
            };
            let block = match existing {
                Some(b) => b,
                None => {
                    let prev = {
                        let inode = self.file(ino)?;
                        self.planned_block_before(ino, inode, fb)
                    };
                    let Some(b) = self.data.reserve(ino, prev) else {
                        // The count above said there was room: undo and report.
                        self.unreserve_plan(&plan);
                        return Err(Error::NoSpace {
                            need_bytes: needed * bs,
                            free_bytes: self.data.available_for(ino) * bs,
                        });
                    };
                    self.pending.entry(ino).or_default().blocks.insert(fb, b);
                    plan.new_blocks.push((fb, b));
                    b
                }
            };
            let base = self.sb.data_offset(block);
            let fresh = existing.is_none();
            let applied = self.file(ino)?.lookup(fb).is_some();
            let gp = self.granule_plan(ino, edits, fresh, applied, block, fb, old_size, new_size);
            for (s, e, io) in block_accesses(ino, edits, fresh, old_size, new_size, fb, bs, &gp) {
                plan.span.0 = plan.span.0.min(fb * bs + s);
                plan.span.1 = plan.span.1.max(fb * bs + e);
                plan.io.push(PlannedIo {
                    offset_bytes: base + io.offset_bytes,
                    ..io
                });
            }
        }
        let p = self.pending.entry(ino).or_default();
        p.writes += 1;
        p.size_bytes = new_size;
        Ok(Some(plan))
    }

    /// The room a write of `[offset, end)` needs, checked before anything is
    /// reserved: the data blocks it maps (returned), the journal's room for what it
    /// dirties, the run capacity of the file. `None`: not now (blocks being freed, or
    /// the transaction full: commit first). A partial write of a lost block fails.
    fn room_for_write(
        &mut self,
        ino: Ino,
        offset: u64,
        end: u64,
        old_size: u64,
    ) -> Result<Option<u64>> {
        let bs = self.sb.data_block_bytes;
        let (first, last) = (offset / bs, (end - 1) / bs);
        // A lost block is mapped again by a write of all its bytes; a partial write
        // would leave the rest of it zeros where the data is unknown, so it fails.
        let mut relost = 0;
        {
            let inode = self.file(ino)?;
            let new_size = old_size.max(end);
            for fb in first..=last {
                if !inode.is_lost(fb) || self.planned_lookup(ino, inode, fb).is_some() {
                    continue;
                }
                if offset > fb * bs || end < ((fb + 1) * bs).min(new_size) {
                    return Err(lost_error(ino, inode, fb, bs));
                }
                relost += 1;
            }
        }
        let needed = {
            let inode = self.file(ino)?;
            (first..=last)
                .filter(|&fb| self.planned_lookup(ino, inode, fb).is_none())
                .count() as u64
        };
        let free = self.data.available_for(ino);
        if free < needed {
            if self.data.pending_free() > 0 {
                return Ok(None);
            }
            return Err(Error::NoSpace {
                need_bytes: needed * bs,
                free_bytes: free * bs,
            });
        }
        if !self.room_in_journal(ino, first, last, needed)? {
            return Ok(None);
        }
        // Each block mapped inside a lost run may split it: one run more (pending ones
        // too). Only the blocks in question are looked up: scanning the runs for a lost
        // one made every write cost the file's run count (a 1 TiB ZRR file has 262,144).
        let inode = self.inode(ino)?;
        let (pending, pending_in_lost) = self.pending.get(&ino).map_or((0, 0), |p| {
            let in_lost = p.blocks.keys().filter(|&&fb| inode.is_lost(fb)).count();
            (p.blocks.len(), in_lost)
        });
        let splits = pending_in_lost + relost;
        let runs = inode.runs.len() + pending + needed as usize + splits;
        self.ensure_run_capacity(ino, runs)?;
        Ok(Some(needed))
    }

    /// Gives back the blocks a plan reserved (before it was registered as pending).
    pub(super) fn unreserve_plan(&mut self, plan: &WritePlan) {
        for &(fb, b) in &plan.new_blocks {
            self.data.cancel_reservation(b);
            if let Some(p) = self.pending.get_mut(&plan.ino) {
                p.blocks.remove(&fb);
            }
        }
        if self
            .pending
            .get(&plan.ino)
            .is_some_and(|p| p.writes == 0 && p.blocks.is_empty())
        {
            self.pending.remove(&plan.ino);
        }
    }

    /// Mapping a block into a hole shifts every later run, and with it every later
    /// indirect run block. Whether what this write dirties fits the current transaction
    /// (`false`: commit first); an error if it would not fit any.
    pub(super) fn room_in_journal(
        &self,
        ino: Ino,
        first: u64,
        last: u64,
        new_blocks: u64,
    ) -> Result<bool> {
        use crate::format::inode::{INLINE_RUNS, RUNS_PER_BLOCK};
        if new_blocks == 0 {
            return Ok(true);
        }
        let inode = self.inode(ino)?;
        let Some(fb) = (first..=last).find(|&fb| self.planned_lookup(ino, inode, fb).is_none())
        else {
            return Ok(true);
        };
        let runs = inode.runs.len() + self.pending.get(&ino).map_or(0, |p| p.blocks.len());
        let idx = inode.run_search(fb).err().unwrap_or(inode.runs.len());
        let shifted = (runs + new_blocks as usize).saturating_sub(idx.max(INLINE_RUNS));
        let estimate = (shifted / RUNS_PER_BLOCK + 2) as u64
            + new_blocks.min(self.sb.data_bitmap_blocks)
            + self.sb.meta_bitmap_blocks
            + 4;
        let limit = self.max_transaction_images() as u64 / 2;
        if estimate > limit {
            return Err(Error::TooFragmented {
                blocks: estimate,
                limit,
            });
        }
        Ok(self.dirty.len() as u64 + estimate <= limit)
    }
}

/// The edits of a write of `[offset, end)`, block by block: zeros from the old end of
/// file (`old_size`) to the write's start within the block holding the old end, then
/// the data.
fn write_edits(offset: u64, end: u64, old_size: u64, bs: u64) -> BTreeMap<u64, Vec<Edit>> {
    let (first, last) = (offset / bs, (end - 1) / bs);
    let mut edits: BTreeMap<u64, Vec<Edit>> = BTreeMap::new();
    if offset > old_size && !old_size.is_multiple_of(bs) {
        let fb = old_size / bs;
        let e = offset.min((fb + 1) * bs) - fb * bs;
        edits.entry(fb).or_default().push(Edit {
            s: old_size % bs,
            e,
            src: None,
        });
    }
    for fb in first..=last {
        let s = offset.max(fb * bs) - fb * bs;
        let e = end.min((fb + 1) * bs) - fb * bs;
        edits.entry(fb).or_default().push(Edit {
            s,
            e,
            src: Some((fb * bs + s - offset) as usize),
        });
    }
    edits
}

/// The device accesses (offsets relative to the block) for a block's edits, with the
/// 4 KiB-rounded block range `(s, e)` each covers, and the checksums of `gp` each
/// sets and checks. `fresh`: the block was just allocated, so it is written from its
/// start up to the later of the edits' end and the file's end, zeros elsewhere, and
/// nothing of it needs reading. Otherwise only the file's bytes (below `old_size`, the
/// size before the write) that the edits leave need reading: from `old_size` on the
/// edits cover every byte up to the new end (zeros in a gap), and bytes past the new
/// end are written as zeros.
#[allow(clippy::too_many_arguments)]
pub(super) fn block_accesses(
    ino: Ino,
    edits: &[Edit],
    fresh: bool,
    old_size: u64,
    new_size: u64,
    fb: u64,
    bs: u64,
    gp: &GranulePlan,
) -> Vec<(u64, u64, PlannedIo)> {
    let mut out = Vec::new();
    if fresh {
        let e_max = edits.iter().map(|e| e.e).max().unwrap_or(0);
        let file_end = new_size.min((fb + 1) * bs) - fb * bs;
        let fill_end = align_up(e_max.max(file_end)).min(bs);
        let direct = match edits {
            [Edit {
                s: 0,
                e,
                src: Some(src),
            }] if *e == fill_end && aligned(*src as u64) => Some(*src),
            _ => None,
        };
        let fill = match direct {
            Some(src) => Fill::Direct { buf_offset: src },
            None => Fill::Compose {
                pieces: pieces_of(edits, 0),
                rmw: vec![],
            },
        };
        let mut io = PlannedIo::new(0, fill_end, fill);
        attach_sums(&mut io, ino, 0, fill_end, gp);
        out.push((0, fill_end, io));
        return out;
    }
    // Existing block: each run of adjacent edits (and granules rewritten whole) is one
    // access; the sectors of the file it only partly rewrites, and the checked bytes of
    // granules it rewrites, are read first.
    let keep = old_size.saturating_sub(fb * bs).min(bs);
    let mut ranges: Vec<(u64, u64)> = edits.iter().map(|e| (e.s, e.e)).collect();
    ranges.extend(gp.widen.iter().map(|&(s, _, e)| (s, e)));
    ranges.sort();
    let mut groups: Vec<(u64, u64)> = vec![];
    for (a, b) in ranges {
        match groups.last_mut() {
            Some(last) if a <= last.1 => last.1 = last.1.max(b),
            _ => groups.push((a, b)),
        }
    }
    for (a, b) in groups {
        let (lo, hi) = (align_down(a), align_up(b).min(bs));
        let group: Vec<Edit> = edits
            .iter()
            .filter(|e| e.s >= a && e.e <= b)
            .copied()
            .collect();
        let widened = gp.widen.iter().any(|w| w.0 >= lo && w.0 < hi);
        let direct = match group.as_slice() {
            [Edit {
                s,
                e,
                src: Some(src),
            }] if !widened && *s == lo && *e == hi && aligned(*src as u64) => Some(*src),
            _ => None,
        };
        let fill = match direct {
            Some(src) => Fill::Direct { buf_offset: src },
            None => Fill::Compose {
                pieces: pieces_of(&group, lo),
                rmw: rmw_ranges(&group, lo, hi, gp, keep),
            },
        };
        let mut io = PlannedIo::new(lo, hi - lo, fill);
        attach_sums(&mut io, ino, lo, hi, gp);
        out.push((lo, hi, io));
    }
    let placed: usize = out.iter().map(|(_, _, io)| io.sums.len()).sum();
    assert_eq!(
        placed,
        gp.sums.len(),
        "file block {fb}: a checksum the write sets lies outside its accesses"
    );
    out
}

/// The ranges `(at, len)` of access `[lo, hi)` to read before composing it: every
/// 4 KiB sector holding bytes of the file (below `keep`, the old end of file within
/// the block) that the edits do not cover, and the checked bytes of the granules
/// rewritten whole (read in full, so their old checksum is checked). A sector the
/// write only extends the file into is not read: the last write of a copy whose size
/// is not a multiple of 4 KiB used to cost a read (about a revolution) for bytes past
/// the file's end.
pub(super) fn rmw_ranges(
    edits: &[Edit],
    lo: u64,
    hi: u64,
    gp: &GranulePlan,
    keep: u64,
) -> Vec<(u64, u64)> {
    let sector = IO_ALIGN_BYTES;
    let mut out: Vec<(u64, u64)> = vec![];
    let mut add = |s: u64, e: u64| match out.last_mut() {
        Some(last) if last.0 + last.1 >= s => last.1 = last.1.max(e - last.0),
        _ => out.push((s, e - s)),
    };
    let mut x = lo;
    while x < hi {
        let file_end = (x + sector).min(keep);
        let covered = file_end <= x || covers(edits, x, file_end);
        let old = gp
            .widen
            .iter()
            .any(|&(s, old_e, _)| x >= s && x < align_up(old_e));
        if !covered || old {
            add(x - lo, x + sector - lo);
        }
        x += sector;
    }
    out
}

/// `(at, src, len)` of the edits (zeros where `src` is `None`), `at` relative to `base`.
pub(super) fn pieces_of(edits: &[Edit], base: u64) -> Vec<(usize, Option<usize>, usize)> {
    edits
        .iter()
        .map(|e| ((e.s - base) as usize, e.src, (e.e - e.s) as usize))
        .collect()
}
