//! The file system: in-memory metadata plus the device it lives on.
//!
//! `Fs` loads and verifies the whole metadata at open, serves namespace and data
//! operations, and turns the metadata blocks they dirty into journal transactions.
//! Every public mutating call is one atomic operation: either all of its metadata
//! changes reach the journal in one transaction or none do. Operations are grouped
//! into a transaction until [`Fs::tick`] finds the commit interval elapsed, or
//! [`Fs::sync`] is called.
//!
//! Order of writes, and why (the crash model of `device.rs`):
//! 1. file data, then a flush: data is durable before any metadata points at it;
//! 2. the journal transaction, then a flush: the commit point;
//! 3. the same blocks to the primary region, a flush, then to the backup region (and
//!    the superblock copy at the end of the device), a flush. Only then may the next
//!    transaction overwrite the journal.
//!
//! A crash anywhere leaves either the previous state or, after replay, the new one.

mod commit;
mod data;
pub mod fsck;
mod load;
mod mkfs;
mod ops;

pub use load::LoadReport;
pub use mkfs::mkfs;

use crate::alloc::meta::MetaAlloc;
use crate::alloc::{DataAlloc, Ino, BITS_PER_BITMAP_BLOCK};
use crate::device::Device;
use crate::error::{Error, Result};
use crate::format::dir::Kind;
use crate::format::inode::{run_location, S_IFMT};
use crate::format::superblock::Superblock;
use crate::meta::{Dir, Inode};
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// What a dynamic metadata block holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Owner {
    /// Block `index` of directory `ino`.
    DirBlock {
        ino: Ino,
        index: u32,
    },
    /// Block `within` of indirect extent `slot` of `ino`.
    Indirect {
        ino: Ino,
        slot: u8,
        within: u32,
    },
    Symlink {
        ino: Ino,
    },
}

/// How a file system is opened.
#[derive(Clone, Debug)]
pub struct OpenOptions {
    pub writable: bool,
    /// Overrides the commit interval stored in the superblock.
    pub commit_interval_ms: Option<u32>,
}

impl OpenOptions {
    pub fn read_only() -> Self {
        OpenOptions {
            writable: false,
            commit_interval_ms: None,
        }
    }
    pub fn writable() -> Self {
        OpenOptions {
            writable: true,
            commit_interval_ms: None,
        }
    }
}

/// Attributes of a file, as `stat` shows them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stat {
    pub ino: Ino,
    pub kind: Kind,
    pub mode: u32,
    pub nlink: u32,
    pub uid: u32,
    pub gid: u32,
    pub size_bytes: u64,
    pub mtime_ns: i64,
    pub ctime_ns: i64,
    /// Data blocks held (directories and symlinks hold metadata blocks only: 0).
    pub blocks: u64,
    pub runs: usize,
}

/// Whole-volume figures for `dvrfs info`.
#[derive(Clone, Debug)]
pub struct Info {
    pub sb: Superblock,
    pub used_blocks: u64,
    pub files: u64,
    pub dirs: u64,
    pub meta_free_blocks: u64,
}

pub struct Fs<D: Device> {
    dev: D,
    sb: Superblock,
    writable: bool,
    inodes: BTreeMap<Ino, Inode>,
    dirs: HashMap<Ino, Dir>,
    symlinks: HashMap<Ino, Vec<u8>>,
    /// Parent of each directory (the root is its own parent).
    parents: HashMap<Ino, Ino>,
    owners: HashMap<u64, Owner>,
    data: DataAlloc,
    meta: MetaAlloc,
    dirty: BTreeSet<u64>,
    /// File data was written since the last flush.
    data_unflushed: bool,
    commit_interval_ns: i64,
    last_commit_ns: Option<i64>,
    free_inode_hint: Ino,
    report: LoadReport,
}

impl<D: Device> Fs<D> {
    pub fn superblock(&self) -> &Superblock {
        &self.sb
    }

    pub fn device(&self) -> &D {
        &self.dev
    }

    /// The device, for shells that inspect what the file system wrote (the simulator).
    pub fn device_mut(&mut self) -> &mut D {
        &mut self.dev
    }

    pub fn is_writable(&self) -> bool {
        self.writable
    }

    /// What happened at open: journal replay, blocks served from the backup region.
    pub fn load_report(&self) -> &LoadReport {
        &self.report
    }

    pub fn root(&self) -> Ino {
        self.sb.root_ino
    }

    pub fn info(&self) -> Info {
        Info {
            sb: self.sb.clone(),
            used_blocks: self.data.used_blocks(),
            files: self
                .inodes
                .values()
                .filter(|i| i.kind() != Some(Kind::Dir))
                .count() as u64,
            dirs: self
                .inodes
                .values()
                .filter(|i| i.kind() == Some(Kind::Dir))
                .count() as u64,
            meta_free_blocks: self.meta.free_blocks(),
        }
    }

    /// Metadata blocks changed since the last commit (the next transaction's size).
    pub fn dirty_blocks(&self) -> usize {
        self.dirty.len()
    }

    /// Data bytes that new writes can still get.
    pub fn free_bytes(&self) -> u64 {
        self.data.available_for(0) * self.sb.data_block_bytes
    }

    /// Commits pending operations, marks the journal empty (a clean unmount: the next
    /// open replays nothing and reads every block from its home) and gives the device
    /// back.
    pub fn close(mut self) -> Result<D> {
        if self.writable {
            self.sync()?;
            commit::invalidate_journal(&mut self.dev, &self.sb)?;
        }
        Ok(self.dev)
    }

    /// Drops all state without committing: what a crash does to memory.
    pub fn crash(self) -> D {
        self.dev
    }

    fn inode(&self, ino: Ino) -> Result<&Inode> {
        self.inodes
            .get(&ino)
            .ok_or_else(|| Error::Corrupt(format!("inode {ino} is referenced but free")))
    }

    fn inode_mut(&mut self, ino: Ino) -> Result<&mut Inode> {
        self.inodes
            .get_mut(&ino)
            .ok_or_else(|| Error::Corrupt(format!("inode {ino} is referenced but free")))
    }

    fn check_writable(&self) -> Result<()> {
        if self.writable {
            Ok(())
        } else {
            Err(Error::ReadOnly)
        }
    }

    // ---- dirty tracking: which metadata blocks a change touches ----

    fn dirty_inode(&mut self, ino: Ino) {
        let b =
            self.sb.inode_table_start + ino as u64 / crate::format::inode::INODES_PER_BLOCK as u64;
        self.dirty.insert(b);
    }

    fn dirty_data_bitmap(&mut self, block: u64) {
        self.dirty
            .insert(self.sb.data_bitmap_start + block / BITS_PER_BITMAP_BLOCK);
    }

    fn dirty_meta_bitmap(&mut self, meta_block: u64) {
        let i = self.meta.index(meta_block);
        self.dirty
            .insert(self.sb.meta_bitmap_start + i / BITS_PER_BITMAP_BLOCK);
    }

    /// Marks the blocks holding runs `from..` of `ino` (the inode for inline runs).
    fn dirty_runs_from(&mut self, ino: Ino, from: usize) -> Result<()> {
        self.dirty_inode(ino);
        let (len, indirect) = {
            let i = self.inode(ino)?;
            (i.runs.len(), i.attr.indirect)
        };
        let per = crate::format::inode::RUNS_PER_BLOCK;
        let mut idx = from.max(crate::format::inode::INLINE_RUNS);
        while idx < len {
            if let Some((slot, within, _)) = run_location(idx) {
                self.dirty.insert(indirect[slot] as u64 + within);
            }
            idx = (idx - crate::format::inode::INLINE_RUNS) / per * per
                + per
                + crate::format::inode::INLINE_RUNS;
        }
        Ok(())
    }

    /// Allocates `count` contiguous dynamic blocks. Only the bitmap is dirtied: the
    /// caller dirties each block once it has contents (an indirect extent's unused tail
    /// is never read, so it is never written).
    fn alloc_meta_block(&mut self, count: u64) -> Result<u64> {
        let b = self
            .meta
            .alloc_contiguous(count)
            .ok_or(Error::MetadataFull)?;
        for m in b..b + count {
            self.dirty_meta_bitmap(m);
        }
        Ok(b)
    }

    fn free_meta_block(&mut self, block: u64, count: u64) {
        self.meta.free(block, count);
        for m in block..block + count {
            self.owners.remove(&m);
            self.dirty_meta_bitmap(m);
            self.dirty.remove(&m);
        }
    }

    /// Makes sure `ino`'s indirect extents can hold `runs` runs, allocating slots.
    fn ensure_run_capacity(&mut self, ino: Ino, runs: usize) -> Result<()> {
        if runs > crate::format::inode::MAX_RUNS {
            return Err(Error::FileTooLarge(self.inode(ino)?.attr.size_bytes));
        }
        let need = crate::format::inode::slots_needed(runs);
        for slot in 0..need {
            if self.inode(ino)?.attr.indirect[slot] != 0 {
                continue;
            }
            let count = 1u64 << slot;
            let start = self.alloc_meta_block(count)?;
            for w in 0..count {
                self.owners.insert(
                    start + w,
                    Owner::Indirect {
                        ino,
                        slot: slot as u8,
                        within: w as u32,
                    },
                );
            }
            self.inode_mut(ino)?.attr.indirect[slot] = start as u32;
            self.dirty_inode(ino);
        }
        Ok(())
    }

    /// Frees indirect extents that `ino`'s run count no longer needs.
    fn trim_run_capacity(&mut self, ino: Ino) -> Result<()> {
        let need = crate::format::inode::slots_needed(self.inode(ino)?.runs.len());
        for slot in need..crate::format::inode::INDIRECT_SLOTS {
            let start = self.inode(ino)?.attr.indirect[slot];
            if start != 0 {
                self.free_meta_block(start as u64, 1 << slot);
                self.inode_mut(ino)?.attr.indirect[slot] = 0;
                self.dirty_inode(ino);
            }
        }
        Ok(())
    }

    /// Frees every block of `ino` and the inode itself.
    fn free_inode(&mut self, ino: Ino) -> Result<()> {
        let inode = self
            .inodes
            .remove(&ino)
            .ok_or_else(|| Error::Corrupt(format!("inode {ino} freed twice")))?;
        let is_file = inode.kind() == Some(Kind::File);
        for r in &inode.runs {
            for b in r.start..r.start + r.count as u64 {
                if is_file {
                    self.data.free(b);
                    self.dirty_data_bitmap(b);
                } else {
                    self.free_meta_block(b, 1);
                }
            }
        }
        for (slot, start) in inode.attr.indirect.iter().enumerate() {
            if *start != 0 {
                self.free_meta_block(*start as u64, 1 << slot);
            }
        }
        if is_file {
            self.data.release(ino);
        }
        self.dirs.remove(&ino);
        self.symlinks.remove(&ino);
        self.parents.remove(&ino);
        self.dirty_inode(ino);
        self.free_inode_hint = self.free_inode_hint.min(ino);
        Ok(())
    }

    fn find_free_inode(&self) -> Result<Ino> {
        let n = self.sb.inode_count;
        let start = self.free_inode_hint.max(1);
        (start..n)
            .chain(1..start)
            .find(|i| !self.inodes.contains_key(i))
            .ok_or(Error::NoInodes(n - 1))
    }
}
