//! File data: planning reads and writes, and applying a write once its data is on disk.
//!
//! What a reader may see is fixed by one rule: bytes of a file that were never written
//! read as zeros, never as old disk contents. Four mechanisms keep it:
//! - a newly allocated block is written from its start to the later of the write's end
//!   and the file's end, zeros where the caller gave no data;
//! - when a file grows past its old end (a write beyond it, or truncate upwards), the
//!   rest of the block holding the old end is zeroed in the same operation;
//! - blocks past the end of a file are always freed, so growth meets only holes;
//! - a write's metadata (the blocks it maps, the new size) is applied only after its
//!   data completed, and a file's writes are applied in the order they were planned, so
//!   no snapshot of the metadata names a block whose data is still in flight.
//!
//! A planned write *reserves* the blocks it needs ([`DataAlloc::reserve`]) and records
//! them in the file's [`PendingFile`]; later plans see those blocks as mapped and the
//! pending size as the file's size, exactly as if the earlier writes had been applied.
//! [`Volume::apply_write`] maps them; [`Volume::abort_write`] (newest first) gives them
//! back.
//!
//! Device accesses are 4 KiB aligned. A write that starts or ends inside a 4 KiB sector
//! of an existing block reads that sector first (read-modify-write); two writes whose
//! 4 KiB-rounded ranges overlap must therefore not be in flight together (the engine
//! orders them by [`WritePlan::span`]).

use super::*;
use crate::device::IO_ALIGN_BYTES;

/// Files are limited by the 32-bit file block numbers of runs.
pub fn max_file_bytes(block_bytes: u64) -> u64 {
    (u32::MAX as u64) * block_bytes
}

fn align_down(x: u64) -> u64 {
    x / IO_ALIGN_BYTES * IO_ALIGN_BYTES
}

fn align_up(x: u64) -> u64 {
    x.div_ceil(IO_ALIGN_BYTES) * IO_ALIGN_BYTES
}

/// The error for file block `fb` of `ino`, which lies in a lost run: names the lost
/// byte range (within the file's size).
fn lost_error(ino: Ino, inode: &Inode, fb: u64, bs: u64) -> Error {
    let r = inode.runs[inode.run_search(fb).expect("fb is in a lost run")];
    let size = inode.attr.size_bytes;
    Error::DataLost {
        ino,
        offset: (r.file_block as u64 * bs).min(size),
        end: (r.file_end() * bs).min(size),
    }
}

fn aligned(x: u64) -> bool {
    x.is_multiple_of(IO_ALIGN_BYTES)
}

/// One device access an operation needs. `offset_bytes` and `len_bytes` are 4 KiB
/// aligned.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlannedIo {
    pub offset_bytes: u64,
    pub len_bytes: u64,
    pub fill: Fill,
}

/// Where the bytes of a [`PlannedIo`] come from or go to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Fill {
    /// Exactly the operation's buffer at `buf_offset` (4 KiB aligned there too).
    Direct { buf_offset: usize },
    /// A read into a bounce buffer whose bytes `[skip, skip + len)` go to the
    /// operation's buffer at `dst`.
    ReadBounce { skip: usize, dst: usize, len: usize },
    /// A write composed in a zeroed bounce buffer of the access's length. First, the
    /// 4 KiB sectors at the offsets in `rmw` (within the access) are read from the disk
    /// into the bounce buffer: bytes of partly rewritten sectors that must be kept.
    /// Then for each `(at, src, len)`: the operation's bytes `[src, src + len)` at `at`,
    /// or zeros where `src` is `None`.
    Compose {
        pieces: Vec<(usize, Option<usize>, usize)>,
        rmw: Vec<u64>,
    },
}

/// What a read returns and the accesses it needs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReadPlan {
    /// Bytes the read returns (0 at or past the end of the file).
    pub bytes: usize,
    pub io: Vec<PlannedIo>,
    /// Ranges `(offset, len)` of the buffer that are holes: they read as zeros.
    pub zero: Vec<(usize, usize)>,
}

/// A planned write (or growing truncate): its accesses, and what applying it changes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WritePlan {
    pub ino: Ino,
    pub io: Vec<PlannedIo>,
    /// (file block, reserved data block) this write maps when applied.
    pub new_blocks: Vec<(u64, u64)>,
    /// The file's (pending) size before this write; restored if it is aborted.
    pub size_before: u64,
    pub new_size: u64,
    pub mtime_ns: i64,
    /// File byte range, rounded out to 4 KiB, that the accesses touch.
    pub span: (u64, u64),
    /// A zero-length write: nothing to do, nothing to apply.
    pub noop: bool,
}

/// Bytes `[s, e)` of a block to set: from the operation's buffer at `src`, or zeros.
#[derive(Clone, Copy, Debug)]
struct Edit {
    s: u64,
    e: u64,
    src: Option<usize>,
}

impl Volume {
    fn file(&self, ino: Ino) -> Result<&Inode> {
        let i = self.inode(ino)?;
        match i.kind() {
            Some(Kind::File) => Ok(i),
            Some(Kind::Dir) => Err(Error::IsDir(format!("inode {ino}"))),
            _ => Err(Error::InvalidArgument(format!(
                "inode {ino} is not a regular file"
            ))),
        }
    }

    /// The file's size once its pending writes are applied.
    pub fn planned_size(&self, ino: Ino) -> Result<u64> {
        let applied = self.file(ino)?.attr.size_bytes;
        Ok(self.pending.get(&ino).map_or(applied, |p| p.size_bytes))
    }

    /// Planned writes of `ino` not yet applied or aborted.
    pub fn pending_writes(&self, ino: Ino) -> u32 {
        self.pending.get(&ino).map_or(0, |p| p.writes)
    }

    /// The device block of file block `fb`, counting blocks reserved by pending writes.
    fn planned_lookup(&self, ino: Ino, inode: &Inode, fb: u64) -> Option<u64> {
        inode
            .lookup(fb)
            .or_else(|| self.pending.get(&ino)?.blocks.get(&fb).copied())
    }

    /// The byte ranges of `[offset, offset + len)` of file `ino` that no data block
    /// backs (holes, and anything past the end), counting blocks reserved by pending
    /// writes; in order, adjacent ranges joined. What `fallocate` must allocate.
    pub fn unallocated(&self, ino: Ino, offset: u64, len: u64) -> Result<Vec<(u64, u64)>> {
        let inode = self.file(ino)?;
        let bs = self.sb.data_block_bytes;
        let end = offset
            .checked_add(len)
            .filter(|&e| e <= max_file_bytes(bs))
            .ok_or(Error::FileTooLarge(offset))?;
        let mut out: Vec<(u64, u64)> = vec![];
        if len == 0 {
            return Ok(out);
        }
        for fb in offset / bs..=(end - 1) / bs {
            if self.planned_lookup(ino, inode, fb).is_some() {
                continue;
            }
            let (s, e) = (offset.max(fb * bs), end.min((fb + 1) * bs));
            match out.last_mut() {
                Some(last) if last.1 == s => last.1 = e,
                _ => out.push((s, e)),
            }
        }
        Ok(out)
    }

    /// The device block of the last mapped (or reserved) file block before `fb`.
    fn planned_block_before(&self, ino: Ino, inode: &Inode, fb: u64) -> Option<u64> {
        let applied = {
            let i = inode.runs.partition_point(|r| (r.file_block as u64) < fb);
            inode.runs[..i]
                .iter()
                .rev()
                .find(|r| !r.is_lost())
                .map(|r| {
                    let last = (r.file_end() - 1).min(fb - 1);
                    (last, r.start + (last - r.file_block as u64))
                })
        };
        let pending = self
            .pending
            .get(&ino)
            .and_then(|p| p.blocks.range(..fb).next_back())
            .map(|(&f, &b)| (f, b));
        match (applied, pending) {
            (Some(a), Some(p)) => Some(if p.0 > a.0 { p.1 } else { a.1 }),
            (a, p) => a.or(p).map(|x| x.1),
        }
    }

    /// Plans a read of up to `len` bytes at `offset` of a regular file.
    pub fn plan_read(&self, ino: Ino, offset: u64, len: usize) -> Result<ReadPlan> {
        let inode = self.file(ino)?;
        let size = inode.attr.size_bytes;
        if offset >= size || len == 0 {
            return Ok(ReadPlan::default());
        }
        let n = (len as u64).min(size - offset) as usize;
        let bs = self.sb.data_block_bytes;
        let mut plan = ReadPlan {
            bytes: n,
            ..Default::default()
        };
        let mut done = 0usize;
        while done < n {
            let pos = offset + done as u64;
            let fb = pos / bs;
            let s = pos % bs;
            let l = ((bs - s) as usize).min(n - done);
            if inode.is_lost(fb) {
                return Err(lost_error(ino, inode, fb, bs));
            }
            match inode.lookup(fb) {
                None => plan.zero.push((done, l)),
                Some(block) => {
                    let base = self.sb.data_offset(block);
                    if aligned(s) && aligned(l as u64) && aligned(done as u64) {
                        plan.io.push(PlannedIo {
                            offset_bytes: base + s,
                            len_bytes: l as u64,
                            fill: Fill::Direct { buf_offset: done },
                        });
                    } else {
                        let (a, b) = (align_down(s), align_up(s + l as u64));
                        plan.io.push(PlannedIo {
                            offset_bytes: base + a,
                            len_bytes: b - a,
                            fill: Fill::ReadBounce {
                                skip: (s - a) as usize,
                                dst: done,
                                len: l,
                            },
                        });
                    }
                }
            }
            done += l;
        }
        Ok(plan)
    }

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
                noop: true,
            }));
        }
        // Everything that can fail for lack of space is checked first.
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
        // too, when the file has lost runs).
        let pending = self.pending.get(&ino).map_or(0, |p| p.blocks.len());
        let inode = self.inode(ino)?;
        let splits = if inode.lost_ranges().next().is_some() {
            pending + relost
        } else {
            0
        };
        let runs = inode.runs.len() + pending + needed as usize + splits;
        self.ensure_run_capacity(ino, runs)?;

        // The edits, block by block: zeros after the old end of file, then the data.
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
        let new_size = old_size.max(end);
        let mut plan = WritePlan {
            ino,
            io: vec![],
            new_blocks: vec![],
            size_before: old_size,
            new_size,
            mtime_ns: now_ns,
            span: (u64::MAX, 0),
            noop: false,
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
            for (s, e, io) in block_accesses(edits, fresh, new_size, fb, bs) {
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

    /// Gives back the blocks a plan reserved (before it was registered as pending).
    fn unreserve_plan(&mut self, plan: &WritePlan) {
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
    fn room_in_journal(&self, ino: Ino, first: u64, last: u64, new_blocks: u64) -> Result<bool> {
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

    /// The write's data is on the disk: map its blocks, set the size and times. Writes
    /// of a file are applied in the order they were planned.
    pub fn apply_write(&mut self, plan: &WritePlan) -> Result<()> {
        if plan.noop {
            return Ok(());
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
        let a = &mut self.inode_mut(ino)?.attr;
        a.size_bytes = plan.new_size;
        a.mtime_ns = plan.mtime_ns;
        a.ctime_ns = plan.mtime_ns;
        self.dirty_inode(ino);
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

    fn finish_pending(&mut self, ino: Ino) {
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

    /// Sets the size of a file. Shrinking (or keeping the size) is done at once: blocks
    /// past the new end are freed. Growing needs the rest of the old last block zeroed
    /// on disk first: that is returned as a plan, applied like a write. The file must
    /// have no pending writes (the engine waits for them).
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
        if size_bytes > old {
            let mut plan = WritePlan {
                ino,
                io: vec![],
                new_blocks: vec![],
                size_before: old,
                new_size: size_bytes,
                mtime_ns: now_ns,
                span: (u64::MAX, 0),
                noop: false,
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
                    for (s, e, io) in block_accesses(&edits, false, size_bytes, fb, bs) {
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
            let keep = size_bytes.div_ceil(bs);
            let (freed, first) = self.inode_mut(ino)?.truncate_blocks(keep);
            for (start, count) in freed {
                for b in start..start + count {
                    self.data.free(b);
                    self.dirty_data_bitmap(b);
                }
            }
            self.dirty_runs_from(ino, first)?;
            self.trim_run_capacity(ino)?;
            self.data.release(ino);
        }
        let a = &mut self.inode_mut(ino)?.attr;
        a.size_bytes = size_bytes;
        a.mtime_ns = now_ns;
        a.ctime_ns = now_ns;
        self.dirty_inode(ino);
        Ok(None)
    }
}

/// The device accesses (offsets relative to the block) for a block's edits, with the
/// 4 KiB-rounded block range `(s, e)` each covers. `fresh`: the block was just
/// allocated, so it is written from its start up to the later of the edits' end and
/// the file's end, zeros elsewhere, and nothing of it needs reading.
fn block_accesses(
    edits: &[Edit],
    fresh: bool,
    new_size: u64,
    fb: u64,
    bs: u64,
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
        out.push((
            0,
            fill_end,
            PlannedIo {
                offset_bytes: 0,
                len_bytes: fill_end,
                fill,
            },
        ));
        return out;
    }
    // Existing block: each run of adjacent edits is one access, with the partly
    // rewritten sectors at its ends read first.
    let mut sorted: Vec<Edit> = edits.to_vec();
    sorted.sort_by_key(|e| e.s);
    let mut i = 0;
    while i < sorted.len() {
        let mut j = i + 1;
        while j < sorted.len() && sorted[j].s == sorted[j - 1].e {
            j += 1;
        }
        let group = &sorted[i..j];
        let (a, b) = (group[0].s, group[group.len() - 1].e);
        let (lo, hi) = (align_down(a), align_up(b).min(bs));
        let direct = match group {
            [Edit {
                s,
                e,
                src: Some(src),
            }] if *s == lo && *e == hi && aligned(*src as u64) => Some(*src),
            _ => None,
        };
        let fill = match direct {
            Some(src) => Fill::Direct { buf_offset: src },
            None => {
                let mut rmw = vec![];
                if a != lo {
                    rmw.push(0);
                }
                if b != hi && (hi - lo > IO_ALIGN_BYTES || a == lo) {
                    rmw.push(hi - lo - IO_ALIGN_BYTES);
                }
                Fill::Compose {
                    pieces: pieces_of(group, lo),
                    rmw,
                }
            }
        };
        out.push((
            lo,
            hi,
            PlannedIo {
                offset_bytes: lo,
                len_bytes: hi - lo,
                fill,
            },
        ));
        i = j;
    }
    out
}

/// `(at, src, len)` of the edits (zeros where `src` is `None`), `at` relative to `base`.
fn pieces_of(edits: &[Edit], base: u64) -> Vec<(usize, Option<usize>, usize)> {
    edits
        .iter()
        .map(|e| ((e.s - base) as usize, e.src, (e.e - e.s) as usize))
        .collect()
}
