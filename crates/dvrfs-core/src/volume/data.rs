//! File data: the plans (what a read or a write does on the device) and the planned
//! view of a file, with the rule every file of the data layer keeps.
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
//!
//! This file holds the plans' types and the planned view of a file (its size and map
//! with the pending writes included); planning reads is `volume/read.rs`, planning
//! writes `volume/write.rs`, the checksum granules `volume/granules.rs`, applying and
//! aborting `volume/apply.rs`, truncation `volume/truncate.rs`.

use super::*;
use crate::device::IO_ALIGN_BYTES;
pub use crate::format::sums::place_seed;

/// Files are limited by the 32-bit file block numbers of runs.
pub fn max_file_bytes(block_bytes: u64) -> u64 {
    (u32::MAX as u64) * block_bytes
}

pub(super) fn align_down(x: u64) -> u64 {
    x / IO_ALIGN_BYTES * IO_ALIGN_BYTES
}

pub(super) fn align_up(x: u64) -> u64 {
    x.div_ceil(IO_ALIGN_BYTES) * IO_ALIGN_BYTES
}

/// The error for file block `fb` of `ino`, which lies in a lost run: names the lost
/// byte range (within the file's size).
pub(super) fn lost_error(ino: Ino, inode: &Inode, fb: u64, bs: u64) -> Error {
    let r = inode.runs[inode.run_search(fb).expect("fb is in a lost run")];
    let size = inode.attr.size_bytes;
    Error::DataLost {
        ino,
        offset: (r.file_block as u64 * bs).min(size),
        end: (r.file_end() * bs).min(size),
    }
}

pub(super) fn aligned(x: u64) -> bool {
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
    pub(super) fn new(offset_bytes: u64, len_bytes: u64, fill: Fill) -> PlannedIo {
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
    /// The first byte of the file whose contents the write changes: its offset;
    /// `u64::MAX` for a truncation (growing adds zeros past the old end, a cut keeps
    /// what remains). What lies before it is as it was, so a frame index keeps the
    /// keyframes there.
    pub first_changed: u64,
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

impl Volume {
    pub(super) fn file(&self, ino: Ino) -> Result<&Inode> {
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
    pub(super) fn planned_lookup(&self, ino: Ino, inode: &Inode, fb: u64) -> Option<u64> {
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
    pub(super) fn planned_block_before(&self, ino: Ino, inode: &Inode, fb: u64) -> Option<u64> {
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
}

/// Bytes `[s, e)` of a block to set: from the operation's buffer at `src`, or zeros.
#[derive(Clone, Copy, Debug)]
pub(super) struct Edit {
    pub(super) s: u64,
    pub(super) e: u64,
    pub(super) src: Option<usize>,
}

/// Whether the edits together cover `[s, e)`.
pub(super) fn covers(edits: &[Edit], s: u64, e: u64) -> bool {
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
