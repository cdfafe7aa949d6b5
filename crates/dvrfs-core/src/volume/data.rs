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
//! of an existing block holding bytes of the file it does not overwrite reads that
//! sector first (read-modify-write; past the old end of file there is nothing to keep,
//! so an append's last sector is not read); two writes whose
//! 4 KiB-rounded ranges overlap must therefore not be in flight together (the engine
//! orders them by [`WritePlan::span`]).

use super::*;
use crate::device::IO_ALIGN_BYTES;
pub use crate::format::sums::place_seed;

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
    /// Data checksums to check: on the bytes read (a read), or on the bytes a
    /// read-modify-write read before composing (a write).
    pub checks: Vec<Check>,
    /// Data checksums a write sets, computed on the bytes it writes.
    pub sums: Vec<Sum>,
}

impl PlannedIo {
    fn new(offset_bytes: u64, len_bytes: u64, fill: Fill) -> PlannedIo {
        PlannedIo {
            offset_bytes,
            len_bytes,
            fill,
            checks: vec![],
            sums: vec![],
        }
    }
}

/// Bytes `[at, at + len)` of an access, the file's bytes from `file_offset`, must
/// have checksum `crc`: the CRC32C of their place ([`place_seed`]) followed by them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Check {
    pub at: usize,
    pub len: usize,
    pub crc: u32,
    pub file_offset: u64,
    pub seed: u32,
}

/// A checksum a write sets: of bytes `[at, at + len)` of its access, for checksum
/// entry `entry`. `seed: None`: the bytes continue the granule's checked bytes (the
/// new checksum is the entry's continued with theirs, or none if the entry has
/// none); `Some(seed)`: they are the granule's checked bytes from its start, and the
/// checksum starts from their place's seed ([`place_seed`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sum {
    pub at: usize,
    pub len: usize,
    pub entry: u64,
    pub seed: Option<u32>,
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
    /// 4 KiB-aligned ranges `(at, len)` in `rmw` (within the access) are read from the
    /// disk into the bounce buffer: bytes of partly rewritten sectors that must be
    /// kept, and the checked bytes of granules whose checksum the write recomputes.
    /// Then for each `(at, src, len)`: the operation's bytes `[src, src + len)` at `at`,
    /// or zeros where `src` is `None`.
    Compose {
        pieces: Vec<(usize, Option<usize>, usize)>,
        rmw: Vec<(u64, u64)>,
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
    /// The write changes bytes the file already had (not only appends): reads of
    /// those bytes must not run beside it (their checksums change).
    pub rewrites: bool,
}

impl WritePlan {
    /// Checksums the plan sets, in the order [`Volume::apply_write`] takes their values.
    pub fn sum_count(&self) -> usize {
        self.io.iter().map(|io| io.sums.len()).sum()
    }
}

/// What a write does to the checksums of one block (offsets within the block).
#[derive(Default)]
struct GranulePlan {
    /// `(start, old_end, new_end)` of granules rewritten inside their checked bytes:
    /// the access covers `[start, new_end)` and reads `[start, old_end)` first.
    widen: Vec<(u64, u64, u64)>,
    /// `(start, len, entry, seed)`, see [`Sum`].
    sums: Vec<(u64, u64, u64, Option<u32>)>,
    /// `(start, len, crc, file_offset)` checked on the bytes read before rewriting.
    checks: Vec<(u64, u64, u32, u64)>,
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
                    // Checked granules are read whole (up to the end of the file).
                    let covered = bs.min(size - fb * bs);
                    let checks = self.read_checks(ino, block, fb, s, s + l as u64, covered)?;
                    let lo = checks.first().map_or(s, |c| s.min(c.0));
                    let hi = checks
                        .last()
                        .map_or(s + l as u64, |c| (s + l as u64).max(c.0 + c.1));
                    let (a, b) = (align_down(lo), align_up(hi).min(bs));
                    let fill = if a == s && b == s + l as u64 && aligned(done as u64) {
                        Fill::Direct { buf_offset: done }
                    } else {
                        Fill::ReadBounce {
                            skip: (s - a) as usize,
                            dst: done,
                            len: l,
                        }
                    };
                    if base + b > self.present_bytes {
                        return Err(Error::PastEnd {
                            ino,
                            offset: pos,
                            end: pos + l as u64,
                            device_bytes: self.present_bytes,
                        });
                    }
                    let mut io = PlannedIo::new(base + a, b - a, fill);
                    io.checks = checks
                        .into_iter()
                        .map(|(gs, len, crc, file_offset)| Check {
                            at: (gs - a) as usize,
                            len: len as usize,
                            crc,
                            file_offset,
                            seed: place_seed(ino, file_offset),
                        })
                        .collect();
                    plan.io.push(io);
                }
            }
            done += l;
        }
        Ok(plan)
    }

    /// Bytes of file `ino` whose granules carry a checksum, and bytes stored without
    /// one (written before the volume had checksums, cut by a truncation, or whose
    /// checksum block was lost); holes and lost ranges count in neither.
    pub fn checked_bytes(&self, ino: Ino) -> Result<(u64, u64)> {
        let inode = self.file(ino)?;
        let bs = self.sb.data_block_bytes;
        let size = inode.attr.size_bytes;
        let (mut checked, mut unchecked) = (0, 0);
        for r in inode.runs.iter().filter(|r| !r.is_lost()) {
            for i in 0..r.count as u64 {
                let fb = r.file_block as u64 + i;
                let covered = size.saturating_sub(fb * bs).min(bs);
                let Some(sums) = &self.sums else {
                    unchecked += covered;
                    continue;
                };
                let g = sums.granule_bytes();
                for k in 0..covered.div_ceil(g) {
                    let len = ((k + 1) * g).min(covered) - k * g;
                    match sums.get(sums.entry(r.start + i, k)) {
                        Some(_) => checked += len,
                        None => unchecked += len,
                    }
                }
            }
        }
        Ok((checked, unchecked))
    }

    /// The data checksum granule, if the volume's checksums are loaded.
    pub fn sum_granule_bytes(&self) -> Option<u64> {
        self.sums.as_ref().map(|s| s.granule_bytes())
    }

    /// `(start, len, crc, file_offset)` of the checked granules a read of bytes
    /// `[s, e)` of block `block` (file block `fb`, `covered` bytes of it in the file)
    /// touches, in order. A granule the file covers always has a checksum (a write
    /// sets it with the bytes); one without is an error like a mismatch (the bytes
    /// cannot be vouched for: a run pointing at a block no write of this file
    /// filled), unless its checksum block was lost, then it is served unchecked.
    fn read_checks(
        &self,
        ino: Ino,
        block: u64,
        fb: u64,
        s: u64,
        e: u64,
        covered: u64,
    ) -> Result<Vec<(u64, u64, u32, u64)>> {
        let Some(sums) = &self.sums else {
            return Ok(vec![]);
        };
        let g = sums.granule_bytes();
        let mut out = vec![];
        for k in s / g..e.div_ceil(g) {
            let gs = k * g;
            let len = ((k + 1) * g).min(covered) - gs;
            let file_offset = fb * self.sb.data_block_bytes + gs;
            let entry = sums.entry(block, k);
            match sums.get(entry) {
                Some(crc) => out.push((gs, len, crc, file_offset)),
                None if sums.in_lost_block(entry) => {}
                None => {
                    return Err(Error::Checksum {
                        ino,
                        offset: file_offset,
                        end: file_offset + len,
                    })
                }
            }
        }
        Ok(out)
    }

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
    fn granule_plan(
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
                rewrites: false,
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

    /// A truncation from `old` to `size` that ends inside a checksummed granule: the
    /// granule's covered bytes shrink, so its checksum is computed again on them. The
    /// plan reads the granule's old bytes (checked against the old checksum), writes
    /// them back unchanged and sets the new checksum; applying it does the truncation,
    /// in the same transaction. `None`: nothing to checksum again.
    fn cut_granule_plan(
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
            noop: false,
            rewrites: true,
        }))
    }

    /// Cuts file `ino` to `size_bytes` (not more than its size) at once: the blocks
    /// past the new end are freed; sets the times.
    fn shrink(&mut self, ino: Ino, size_bytes: u64, now_ns: i64) -> Result<()> {
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
        }
        let a = &mut self.inode_mut(ino)?.attr;
        a.size_bytes = size_bytes;
        a.mtime_ns = now_ns;
        a.ctime_ns = now_ns;
        self.dirty_inode(ino);
        Ok(())
    }
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
fn block_accesses(
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
fn rmw_ranges(edits: &[Edit], lo: u64, hi: u64, gp: &GranulePlan, keep: u64) -> Vec<(u64, u64)> {
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

/// Whether the edits together cover `[s, e)`.
fn covers(edits: &[Edit], s: u64, e: u64) -> bool {
    let mut r: Vec<(u64, u64)> = edits.iter().map(|x| (x.s, x.e)).collect();
    r.sort_unstable();
    let mut at = s;
    for (a, b) in r {
        if a <= at && b > at {
            at = b;
        }
    }
    at >= e
}

/// Moves the checksums of `gp` that lie in access `[lo, hi)` onto it.
fn attach_sums(io: &mut PlannedIo, ino: Ino, lo: u64, hi: u64, gp: &GranulePlan) {
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

/// `(at, src, len)` of the edits (zeros where `src` is `None`), `at` relative to `base`.
fn pieces_of(edits: &[Edit], base: u64) -> Vec<(usize, Option<usize>, usize)> {
    edits
        .iter()
        .map(|e| ((e.s - base) as usize, e.src, (e.e - e.s) as usize))
        .collect()
}
