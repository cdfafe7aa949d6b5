//! In-memory metadata: inodes with their run lists, directories and symlink targets.
//!
//! The whole metadata of a dvrfs volume lives in memory (large data blocks keep it
//! small: see `ARCHITECTURE.md` for the bound). These types know nothing of blocks on
//! disk beyond the numbers stored in them; `volume` decides what to write.

pub mod frame_index;
pub mod sums;

use crate::format::dir::{entry_bytes, Kind, DIR_SPACE_BYTES};
use crate::format::inode::{InodeRecord, Run};
use std::collections::BTreeMap;

/// Inode number: the index of an inode record in the inode table (0 is never used).
pub type Ino = u32;

/// An inode in memory: the stored attributes and the full run list.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Inode {
    /// Attributes; its `run_count` and `inline` fields are filled only when encoding.
    pub attr: InodeRecord,
    pub runs: Vec<Run>,
}

impl Inode {
    pub fn kind(&self) -> Option<Kind> {
        Kind::from_mode(self.attr.mode)
    }

    /// The index of the run holding file block `fb`, or where it would be inserted.
    pub fn run_search(&self, fb: u64) -> Result<usize, usize> {
        let i = self.runs.partition_point(|r| r.file_end() <= fb);
        if i < self.runs.len() && (self.runs[i].file_block as u64) <= fb {
            Ok(i)
        } else {
            Err(i)
        }
    }

    /// The device block (data or metadata) holding file block `fb`; `None` for a hole
    /// and for a lost block (see [`Inode::is_lost`]).
    pub fn lookup(&self, fb: u64) -> Option<u64> {
        let r = &self.runs[self.run_search(fb).ok()?];
        (!r.is_lost()).then(|| r.start + (fb - r.file_block as u64))
    }

    /// Whether file block `fb` lies in a lost run: its data block is unknown since
    /// the map naming it was damaged. Reading it is an error, never zeros.
    pub fn is_lost(&self, fb: u64) -> bool {
        self.run_search(fb).is_ok_and(|i| self.runs[i].is_lost())
    }

    /// The lost ranges of the file, as (first file block, count).
    pub fn lost_ranges(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.runs
            .iter()
            .filter(|r| r.is_lost())
            .map(|r| (r.file_block as u64, r.count as u64))
    }

    /// The device block of the last mapped file block before `fb` (lost runs skipped).
    pub fn block_before(&self, fb: u64) -> Option<u64> {
        let i = self.runs.partition_point(|r| (r.file_block as u64) < fb);
        let r = self.runs[..i].iter().rev().find(|r| !r.is_lost())?;
        let last = (r.file_end() - 1).min(fb - 1);
        Some(r.start + (last - r.file_block as u64))
    }

    /// Maps file block `fb` (a hole, or a lost block: its lost run is split around it)
    /// to `block`. Returns the lowest run index whose stored value changed; every index
    /// from there to the end may have moved.
    pub fn map_block(&mut self, fb: u64, block: u64) -> (usize, bool) {
        assert_ne!(
            block,
            Run::LOST_START,
            "mapping file block {fb} to the lost marker"
        );
        let Ok(j) = self.run_search(fb) else {
            return self.map_hole(fb, block);
        };
        assert!(self.runs[j].is_lost(), "file block {fb} is already mapped");
        let split = self.unlose(j, fb);
        let (i, grew) = self.map_hole(fb, block);
        (i.min(split), grew)
    }

    /// Takes file block `fb` out of lost run `j`; returns the lowest changed index.
    fn unlose(&mut self, j: usize, fb: u64) -> usize {
        let r = self.runs[j];
        let (head, tail) = (fb - r.file_block as u64, r.file_end() - fb - 1);
        match (head, tail) {
            (0, 0) => {
                self.runs.remove(j);
            }
            (0, t) => self.runs[j] = Run::lost(fb + 1, t),
            (h, 0) => self.runs[j] = Run::lost(r.file_block as u64, h),
            (h, t) => {
                self.runs[j] = Run::lost(r.file_block as u64, h);
                self.runs.insert(j + 1, Run::lost(fb + 1, t));
            }
        }
        j
    }

    fn map_hole(&mut self, fb: u64, block: u64) -> (usize, bool) {
        let i = match self.run_search(fb) {
            Ok(_) => unreachable!("file block {fb} is already mapped"),
            Err(i) => i,
        };
        let joins_prev = i > 0 && {
            let p = &self.runs[i - 1];
            !p.is_lost()
                && p.file_end() == fb
                && p.start + p.count as u64 == block
                && p.count < u32::MAX
        };
        let joins_next = i < self.runs.len() && {
            let n = &self.runs[i];
            !n.is_lost()
                && n.file_block as u64 == fb + 1
                && n.start == block + 1
                && n.count < u32::MAX
        };
        match (joins_prev, joins_next) {
            (true, true) => {
                let next = self.runs.remove(i);
                self.runs[i - 1].count += 1 + next.count;
                (i - 1, true)
            }
            (true, false) => {
                self.runs[i - 1].count += 1;
                (i - 1, false)
            }
            (false, true) => {
                let n = &mut self.runs[i];
                n.file_block -= 1;
                n.start -= 1;
                n.count += 1;
                (i, false)
            }
            (false, false) => {
                self.runs.insert(
                    i,
                    Run {
                        file_block: fb as u32,
                        count: 1,
                        start: block,
                    },
                );
                (i, true)
            }
        }
    }

    /// Drops every mapping (and lost run) at or past file block `fb`; returns the device
    /// block ranges released as (start, count) and the lowest changed run index.
    pub fn truncate_blocks(&mut self, fb: u64) -> (Vec<(u64, u64)>, usize) {
        let mut freed = Vec::new();
        let i = self.runs.partition_point(|r| r.file_end() <= fb);
        let mut first_changed = self.runs.len();
        if let Some(r) = self.runs.get_mut(i) {
            if (r.file_block as u64) < fb {
                let keep = fb - r.file_block as u64;
                if !r.is_lost() {
                    freed.push((r.start + keep, r.count as u64 - keep));
                }
                r.count = keep as u32;
                first_changed = i;
                for r in self.runs.drain(i + 1..).filter(|r| !r.is_lost()) {
                    freed.push((r.start, r.count as u64));
                }
                return (freed, first_changed);
            }
            first_changed = i;
        }
        for r in self.runs.drain(i..).filter(|r| !r.is_lost()) {
            freed.push((r.start, r.count as u64));
        }
        (freed, first_changed)
    }
}

/// Where an entry lives: which of the directory's blocks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Entry {
    pub ino: Ino,
    pub kind: Kind,
    pub block: u32,
}

/// A directory: the entries by name, and for each of its blocks the names stored there
/// in on-disk order and the bytes they take.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Dir {
    pub entries: BTreeMap<Vec<u8>, Entry>,
    pub blocks: Vec<DirBlock>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DirBlock {
    pub names: Vec<Vec<u8>>,
    pub used_bytes: usize,
}

impl Dir {
    /// A block with room for `name`, if any.
    pub fn block_with_room(&self, name: &[u8]) -> Option<u32> {
        let need = entry_bytes(name);
        self.blocks
            .iter()
            .position(|b| b.used_bytes + need <= DIR_SPACE_BYTES)
            .map(|i| i as u32)
    }

    pub fn insert(&mut self, name: &[u8], ino: Ino, kind: Kind, block: u32) {
        let b = &mut self.blocks[block as usize];
        b.used_bytes += entry_bytes(name);
        debug_assert!(b.used_bytes <= DIR_SPACE_BYTES);
        b.names.push(name.to_vec());
        self.entries
            .insert(name.to_vec(), Entry { ino, kind, block });
    }

    pub fn remove(&mut self, name: &[u8]) -> Option<Entry> {
        let e = self.entries.remove(name)?;
        let b = &mut self.blocks[e.block as usize];
        if let Some(p) = b.names.iter().position(|n| n == name) {
            b.names.remove(p);
            b.used_bytes -= entry_bytes(name);
        }
        Some(e)
    }

    /// The (name, ino, kind) triples of block `k` in stored order.
    pub fn block_entries(&self, k: u32) -> Vec<(&[u8], Ino, Kind)> {
        self.blocks[k as usize]
            .names
            .iter()
            .filter_map(|n| self.entries.get(n).map(|e| (&n[..], e.ino, e.kind)))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(runs: Vec<Run>) -> Inode {
        Inode {
            attr: InodeRecord::default(),
            runs,
        }
    }

    #[test]
    fn mapping_merges_adjacent_runs() {
        let mut f = file(vec![]);
        assert_eq!(f.map_block(0, 100), (0, true));
        assert_eq!(f.map_block(1, 101), (0, false));
        assert_eq!(f.map_block(3, 103), (1, true));
        assert_eq!(f.runs.len(), 2);
        // Filling the hole joins all three.
        assert_eq!(f.map_block(2, 102), (0, true));
        assert_eq!(
            f.runs,
            vec![Run {
                file_block: 0,
                count: 4,
                start: 100
            }]
        );
        assert_eq!(f.lookup(3), Some(103));
        assert_eq!(f.lookup(4), None);
        assert_eq!(f.block_before(10), Some(103));
    }

    #[test]
    fn truncation_splits_a_run_and_reports_freed_blocks() {
        let mut f = file(vec![
            Run {
                file_block: 0,
                count: 4,
                start: 100,
            },
            Run {
                file_block: 6,
                count: 2,
                start: 50,
            },
        ]);
        let (freed, first) = f.truncate_blocks(2);
        assert_eq!(freed, vec![(102, 2), (50, 2)]);
        assert_eq!(first, 0);
        assert_eq!(
            f.runs,
            vec![Run {
                file_block: 0,
                count: 2,
                start: 100
            }]
        );
        let (freed, _) = f.truncate_blocks(5);
        assert!(freed.is_empty());
    }

    #[test]
    fn a_lost_run_reads_as_lost_and_is_split_by_a_write_into_it() {
        let mut f = file(vec![
            Run {
                file_block: 0,
                count: 2,
                start: 100,
            },
            Run::lost(2, 4),
            Run {
                file_block: 6,
                count: 1,
                start: 106,
            },
        ]);
        assert_eq!(f.lookup(3), None);
        assert!(f.is_lost(3) && !f.is_lost(1) && !f.is_lost(6) && !f.is_lost(7));
        assert_eq!(f.block_before(6), Some(101), "lost runs are skipped");
        // A block in the middle: the lost run splits around it.
        assert_eq!(f.map_block(3, 50).0, 1);
        assert_eq!(f.lost_ranges().collect::<Vec<_>>(), vec![(2, 1), (4, 2)]);
        assert_eq!(f.lookup(3), Some(50));
        // At the run's ends, and the last block: the lost run shrinks, then goes.
        f.map_block(2, 102);
        f.map_block(5, 105);
        f.map_block(4, 104);
        assert_eq!(f.lost_ranges().count(), 0);
        assert_eq!(f.runs.len(), 3, "merged where contiguous: {:?}", f.runs);
        // Truncation frees mapped blocks only, never the lost marker.
        let mut g = file(vec![
            Run::lost(0, 3),
            Run {
                file_block: 3,
                count: 1,
                start: 9,
            },
        ]);
        assert_eq!(g.truncate_blocks(1).0, vec![(9, 1)]);
        assert_eq!(g.runs, vec![Run::lost(0, 1)]);
    }
}
