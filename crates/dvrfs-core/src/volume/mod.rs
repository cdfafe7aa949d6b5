//! The file system's state: the whole metadata in memory ([`Volume`]). The engine
//! (`engine/`) drives it; the blocking driver (`driver/blocking.rs`), fsck and mkfs
//! (`tools/`) stand above the engine.
//!
//! A `Volume` never touches a device after it is loaded. Namespace operations change
//! it in memory; data operations are *planned* (blocks reserved, device accesses
//! listed) and *applied* once their data is on the disk; the dirty metadata blocks are
//! turned into journal transactions by the engine's commit pipeline
//! (`engine/commit.rs`). Every mutating operation is one atomic unit: all of its
//! metadata changes reach the journal in one transaction or none do.
//!
//! Order of writes, and why (the crash model of `device.rs`), enforced by the engine:
//! 1. file data, then a flush: data is durable before any metadata points at it (a
//!    write's metadata is applied only after its data completed, so a snapshot never
//!    names data still in flight);
//! 2. the journal transaction, then a flush: the commit point;
//! 3. the same blocks to the primary region, a flush, then to the backup region (and
//!    the superblock copy at the end of the device), a flush. Only then may the next
//!    transaction overwrite the journal.
//!
//! A crash anywhere leaves either the previous state or, after replay, the new one.

mod apply;
mod check;
mod commit;
mod copies;
mod data;
mod events;
mod found;
mod frame_index;
mod granules;
mod load;
mod ops;
mod parents;
mod read;
mod reader;
pub mod recovery;
mod retention;
mod room;
mod runs;
mod symlink;
pub mod tail_log;
mod tree;
mod truncate;
mod write;

pub(crate) use commit::inode_record;
pub use commit::{Transaction, BRIDGE_GAP_BLOCKS};
pub(crate) use found::Found;
/// A file's path and its lost byte ranges `[start, end)`.
pub type DamagedFile = (String, Vec<(u64, u64)>);

pub use data::{max_file_bytes, place_seed, Check, Fill, PlannedIo, ReadPlan, Sum, WritePlan};
pub use events::{LostTail, MAX_NEW_EVENTS};
pub use frame_index::{shape as frame_index_shape, FrameInfo, IndexAppend};
pub use load::{LoadReport, INODE_MARK_MARGIN};
pub use recovery::{Replay, BACKUP_SEARCH_BYTES, RECOVERY_CASES};
// The data files meet here: the plans, the granules, the writes.
use data::{align_down, align_up, aligned, covers, lost_error, Edit};
use granules::{attach_sums, GranulePlan};
use write::block_accesses;
// The loader's files meet here: recovery, the block reader, the runs, the tree.
pub use ops::{validate_name, OpenMode, SetAttr};
use reader::{claim, Claim, Reader, BULK_READ_BYTES};
use recovery::{decide, read_journal, read_superblock};
pub use retention::check_volume_retention;
pub use room::{MetaRoom, MAP_RESERVE_MARGIN_BLOCKS, MIN_NAMES_PER_BLOCK};
use runs::{
    contested_extents, keep_needed_extents, load_runs, lose_holes_of_a_damaged_map,
    valid_file_runs, valid_prefix, MapState,
};

use crate::alloc::meta::MetaAlloc;
use crate::alloc::{DataAlloc, BITS_PER_BITMAP_BLOCK};
use crate::error::{Error, Result};
use crate::format::dir::Kind;
use crate::format::inode::{run_location, S_IFMT};
use crate::format::superblock::Superblock;
use crate::meta::sums::Sums;
use crate::meta::Ino;
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
    /// Block `index` of level `level` of `ino`'s frame index (`frame_index.rs`).
    FrameIndex {
        ino: Ino,
        level: u8,
        index: u32,
    },
}

impl Owner {
    /// The inode whose block it is.
    pub(crate) fn ino(&self) -> Ino {
        match *self {
            Owner::DirBlock { ino, .. }
            | Owner::Indirect { ino, .. }
            | Owner::Symlink { ino }
            | Owner::FrameIndex { ino, .. } => ino,
        }
    }
}

/// Whether a file can grow by appending (`Volume::blocks_to_extend`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SpaceTo {
    /// The blocks are there.
    Fits,
    /// Only once the next commit makes the blocks of an uncommitted delete free.
    AfterCommit,
    /// Not even then.
    No { need_bytes: u64, free_bytes: u64 },
}

/// How a file system is opened.
#[derive(Clone, Debug)]
pub struct OpenOptions {
    pub writable: bool,
    /// Overrides the commit interval stored in the superblock.
    pub commit_interval_ms: Option<u32>,
    /// A writable open of a volume that lost metadata blocks (both copies) is
    /// allowed: `fsck --repair`. Other writable opens are refused until it ran; a
    /// read-only open serves what is intact.
    pub repair: bool,
    /// Load the data checksums and check every read against them. A read-only open
    /// that reads no file data (`info`, `ls`, `stat`) may skip them: on a large volume
    /// they are most of the metadata. A writable open always loads them.
    pub verify_data: bool,
    /// Load only the metadata that resolving these paths reads (the directories along
    /// each and the inodes they name), not the whole volume: `stat` of one file costs
    /// the same on a volume of 100,000 files as on an empty one. Read-only; the volume
    /// then knows nothing else (listing another directory finds it empty, `info`'s
    /// counts are wrong), and damage elsewhere is not reported.
    pub only_paths: Option<Vec<String>>,
    /// With `only_paths`: also the entries of each path that is a directory, with
    /// their inodes (`ls`, `ls -l`).
    pub path_children: bool,
}

impl OpenOptions {
    pub fn read_only() -> Self {
        OpenOptions {
            writable: false,
            commit_interval_ms: None,
            repair: false,
            verify_data: true,
            only_paths: None,
            path_children: false,
        }
    }
    pub fn writable() -> Self {
        OpenOptions {
            writable: true,
            commit_interval_ms: None,
            repair: false,
            verify_data: true,
            only_paths: None,
            path_children: false,
        }
    }
    /// Read-only, without the data checksums: for commands that read no file data.
    pub fn metadata_only() -> Self {
        OpenOptions {
            verify_data: false,
            ..OpenOptions::read_only()
        }
    }
    /// [`OpenOptions::metadata_only`], loading only what resolving `paths` reads.
    pub fn paths_only(paths: &[String]) -> Self {
        OpenOptions {
            only_paths: Some(paths.to_vec()),
            ..OpenOptions::metadata_only()
        }
    }
    /// [`OpenOptions::paths_only`], and the entries of the paths that are
    /// directories with their inodes: what listing them reads.
    pub fn listing(paths: &[String]) -> Self {
        OpenOptions {
            path_children: true,
            ..OpenOptions::paths_only(paths)
        }
    }
}

/// Blocks reserved by planned writes of one file that have not been applied yet.
#[derive(Clone, Debug, Default)]
pub(crate) struct PendingFile {
    /// File block -> reserved data block.
    pub blocks: BTreeMap<u64, u64>,
    /// The file size once every pending write is applied.
    pub size_bytes: u64,
    /// Planned, not yet applied or aborted.
    pub writes: u32,
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
    /// Bytes of the file lost to metadata damage (reads there fail; `get --salvage`).
    pub lost_bytes: u64,
    /// Bumped each time the inode number is reused (NFS-style file handles, FUSE).
    pub generation: u32,
}

/// Whole-volume figures for `dvrfs info`.
#[derive(Clone, Debug)]
pub struct Info {
    pub sb: Superblock,
    pub used_blocks: u64,
    pub files: u64,
    pub dirs: u64,
    pub meta_free_blocks: u64,
    /// How the dynamic area is used, and what is kept for file maps.
    pub meta_room: MetaRoom,
}

/// The whole metadata of a volume, in memory, with the allocators (see the module
/// docs). It knows the layout but never touches a device after [`Volume::load`].
pub struct Volume {
    sb: Superblock,
    /// The bytes of the volume the device holds: all of it (`sb.device_bytes`), or
    /// less on a truncated image opened read-only, whose reads past it fail.
    present_bytes: u64,
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
    /// Files with planned writes not yet applied.
    pending: BTreeMap<Ino, PendingFile>,
    /// The commit interval to use (superblock value or the open option), ms.
    commit_interval_ms: u32,
    free_inode_hint: Ino,
    /// Generation of the next new inode: above every generation loaded, so an inode
    /// number reused in this mount never repeats a (number, generation) pair a client
    /// (the FUSE kernel module) may still hold.
    next_generation: u32,
    /// Open handles per file, for drivers that say when a file is opened
    /// ([`Volume::open_file`]): a file whose last name is removed while it is open
    /// lives on, nameless, until the last close.
    open_refs: HashMap<Ino, u32>,
    /// Of those, the handles open for writing ([`OpenMode::Write`]): a file with
    /// none is held only by readers, whose pins yield to a recording (retention's
    /// rule 6).
    write_refs: HashMap<Ino, u32>,
    /// Files with no name left that are still open ("orphans"): their inode records
    /// carry link count 0 on the disk, and the next writable open of the volume frees
    /// any that a crash left behind.
    orphans: BTreeSet<Ino>,
    report: LoadReport,
    /// Set by fsck: the stored bitmaps may disagree with the files (fsck rebuilds
    /// them afterwards), so freeing a block already marked free is not a double free.
    in_fsck: bool,
    /// The data checksums (`None`: the volume has none, or they were not loaded).
    sums: Option<Sums>,
    /// The event log and the lost-tail record (`volume/events.rs`).
    events: events::Events,
    /// Files' tail-log floors (`volume/tail_log.rs`): batches below hold nothing of them.
    tail_floors: BTreeMap<Ino, u64>,
    /// What the tail log holds to replay, found at open (`volume/tail_log.rs`).
    tail_replay: Vec<tail_log::ReplayWrite>,
    /// A read-only open's view of the same plan: per file, the logged bytes the
    /// replay would append, served past the committed size (`volume/tail_log.rs`).
    tail_read: BTreeMap<Ino, tail_log::LoggedTail>,
    /// Files' frame indexes (`volume/frame_index.rs`): only files that have one.
    frame_indexes: BTreeMap<Ino, frame_index::StoredIndex>,
}

impl Volume {
    pub fn superblock(&self) -> &Superblock {
        &self.sb
    }

    pub fn commit_interval_ms(&self) -> u32 {
        self.commit_interval_ms
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
            meta_room: self.meta_room(),
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

    /// Whether file `ino` can grow to `end_bytes` by appending (the blocks from its
    /// planned end on): with the blocks it may take now (free ones not held for
    /// others, and its own hold), after the next commit (blocks an uncommitted
    /// delete freed), or not at all.
    pub fn blocks_to_extend(&self, ino: Ino, end_bytes: u64) -> Result<SpaceTo> {
        let bs = self.sb.data_block_bytes;
        let have = self.planned_size(ino)?.div_ceil(bs);
        let need = end_bytes.div_ceil(bs).saturating_sub(have);
        let now = self.data.available_for(ino);
        if need <= now {
            return Ok(SpaceTo::Fits);
        }
        if need <= now + self.data.pending_free() as u64 {
            return Ok(SpaceTo::AfterCommit);
        }
        Ok(SpaceTo::No {
            need_bytes: need * bs,
            free_bytes: now * bs,
        })
    }

    /// Data bytes free now or at the next commit (freed by operations not yet
    /// committed) and held for nobody: what `df` shows. A write that needs the
    /// blocks of an uncommitted free waits for that commit; it does not fail.
    pub fn available_bytes(&self) -> u64 {
        self.data.available_after_commit() * self.sb.data_block_bytes
    }

    /// Holds `bytes` of free data space for `ino` (a recording's reservation): no
    /// other file's write can take it, and the file's own writes use it up. On
    /// [`Error::NoSpace`] nothing is held.
    pub fn hold_space(&mut self, ino: Ino, bytes: u64) -> Result<()> {
        let bs = self.sb.data_block_bytes;
        let blocks = bytes.div_ceil(bs);
        if self.data.hold(ino, blocks) {
            Ok(())
        } else {
            Err(Error::NoSpace {
                need_bytes: blocks * bs,
                free_bytes: self.available_bytes(),
            })
        }
    }

    /// Moves `from`'s held space to `to`, except what `from` still needs to grow
    /// from its planned size to `from_end_bytes`: a recording that rolls on to its
    /// next file keeps its reservation, and its last bytes in `from` their blocks.
    pub fn move_held_space(&mut self, from: Ino, to: Ino, from_end_bytes: u64) -> Result<()> {
        let bs = self.sb.data_block_bytes;
        let have = self.planned_size(from)?.div_ceil(bs);
        let keep = from_end_bytes.div_ceil(bs).saturating_sub(have);
        self.data.move_hold(from, to, keep);
        Ok(())
    }

    /// Gives back what is left of `ino`'s held space.
    pub fn release_space(&mut self, ino: Ino) {
        self.data.release_hold(ino);
    }

    /// Data bytes in files (written, or allocated to a write not yet committed).
    pub fn used_data_bytes(&self) -> u64 {
        self.data.used_blocks() * self.sb.data_block_bytes
    }

    /// Data bytes held for recordings and not yet written.
    pub fn held_bytes(&self) -> u64 {
        self.data.held_blocks() * self.sb.data_block_bytes
    }

    /// Data bytes held for `ino`'s recording and not yet written.
    pub fn held_for(&self, ino: Ino) -> u64 {
        self.data.held_by(ino) * self.sb.data_block_bytes
    }

    /// Blocks freed by operations not yet committed (they become free at the commit).
    pub fn pending_free_blocks(&self) -> usize {
        self.data.pending_free()
    }

    /// Whether the dirty set is large enough that a commit should start now, rather
    /// than at the end of the interval (a quarter of the journal).
    pub fn wants_commit_now(&self) -> bool {
        self.dirty.len() as u64 * 4 > self.sb.journal_blocks
    }

    /// Checks the allocators' own bookkeeping; a broken invariant is a bug.
    pub fn check_invariants(&self) -> std::result::Result<(), String> {
        self.data.check_invariants()?;
        for (ino, p) in &self.pending {
            if p.writes == 0 {
                return Err(format!("inode {ino} is pending without pending writes"));
            }
            if let Some((fb, b)) = p.blocks.iter().find(|(_, &b)| !self.data.is_reserved(b)) {
                return Err(format!(
                    "inode {ino}: file block {fb} waits for data block {b}, which is not reserved"
                ));
            }
        }
        self.check_frame_indexes()
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

    pub(crate) fn check_writable(&self) -> Result<()> {
        if self.writable {
            Ok(())
        } else {
            Err(Error::ReadOnly)
        }
    }

    // ---- dirty tracking: which metadata blocks a change touches ----

    fn dirty_inode(&mut self, ino: Ino) {
        let k = ino as u64 / crate::format::inode::INODES_PER_BLOCK as u64;
        self.dirty.insert(self.sb.inode_table_start + k);
        // The superblock's mark covers every block that may hold a live inode; it
        // goes to disk in the same transaction as the inode (0: not kept yet, only
        // in a read-only open of an older volume).
        if self.sb.inode_blocks_used != 0 && k >= self.sb.inode_blocks_used {
            self.sb.inode_blocks_used = k + 1;
            self.dirty.insert(0);
        }
    }

    fn dirty_data_bitmap(&mut self, block: u64) {
        self.dirty
            .insert(self.sb.data_bitmap_start + block / BITS_PER_BITMAP_BLOCK);
    }

    /// Sets checksum entry `e` and marks its checksum block.
    fn set_sum(&mut self, e: u64, v: Option<u32>) {
        if let Some(s) = self.sums.as_mut() {
            s.set(e, v);
            self.dirty.insert(self.sb.sum_start + Sums::block_of(e));
        }
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
        for b in block..block + count {
            if !self.in_fsck || self.meta.is_used(b) {
                self.meta.free(b, 1);
            }
        }
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
        self.tail_floors.remove(&ino);
        self.free_frame_index(ino);
        // A metadata block goes only if it is this inode's (a damaged map may name a
        // block another structure owns: fsck frees the damaged inode, not the block).
        let mine =
            |owners: &HashMap<u64, Owner>, b: u64| owners.get(&b).is_none_or(|o| o.ino() == ino);
        for r in &inode.runs {
            for b in r.blocks() {
                if is_file {
                    if !self.in_fsck || self.data.used().get(b) {
                        self.data.free(b);
                    }
                    self.dirty_data_bitmap(b);
                } else if mine(&self.owners, b) {
                    self.free_meta_block(b, 1);
                }
            }
        }
        for (slot, &start) in inode.attr.indirect.iter().enumerate() {
            if start == 0 {
                continue;
            }
            for b in start as u64..start as u64 + (1 << slot) {
                if mine(&self.owners, b) {
                    self.free_meta_block(b, 1);
                }
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
