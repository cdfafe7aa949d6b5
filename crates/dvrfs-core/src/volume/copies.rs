//! fsck's comparison of the two copies of the metadata: every metadata block in use
//! is read from the primary and the backup region in bulk and each copy verified;
//! a bad or differing backup copy is reported (the first [`LISTED_COPIES`] of each
//! kind by name, the rest as block ranges) and marked for rewriting.
//!
//! The invariant it keeps: after a repair both copies of every block in use verify
//! and agree (the primary, as loaded, is what both get).

use super::*;
use crate::device::Device;
use crate::format::superblock::Area;
use crate::format::{verify_block, BlockType, META_BLOCK_BYTES};

/// Backup copies found bad while comparing the two regions. An image cut short and
/// extended again (FORMAT.md section 13) has a backup region of zeros: thousands of
/// blocks with one cause, so the report names the first [`LISTED_COPIES`] of each
/// kind and sums up the rest in one line with their block ranges.
#[derive(Default)]
struct BadCopies {
    invalid: Vec<String>,
    invalid_blocks: Vec<u64>,
    differ: Vec<String>,
    differ_blocks: Vec<u64>,
}

/// Bad backup copies of one kind named one by one in a report.
const LISTED_COPIES: usize = 8;

impl BadCopies {
    fn report(self, f: &mut Found) {
        let kinds = [
            (
                self.invalid,
                self.invalid_blocks,
                "backup copies fail verification",
            ),
            (
                self.differ,
                self.differ_blocks,
                "backup copies differ from the primary",
            ),
        ];
        for (msgs, blocks, what) in kinds {
            debug_assert_eq!(msgs.len(), blocks.len(), "one message per block");
            for m in msgs.iter().take(LISTED_COPIES) {
                f.err(true, m.clone());
            }
            if msgs.len() > LISTED_COPIES {
                f.err(
                    true,
                    format!(
                        "{} more {what} (metadata blocks {}); the same repair rewrites them",
                        msgs.len() - LISTED_COPIES,
                        block_ranges(&blocks[LISTED_COPIES..]),
                    ),
                );
            }
        }
    }
}

/// `3..=9, 12, 20..=21` for sorted block numbers (at most 6 ranges, then `...`).
fn block_ranges(blocks: &[u64]) -> String {
    let mut ranges: Vec<(u64, u64)> = vec![];
    for &b in blocks {
        match ranges.last_mut() {
            Some((_, end)) if *end + 1 == b => *end = b,
            _ => ranges.push((b, b)),
        }
    }
    let mut out: Vec<String> = ranges
        .iter()
        .take(6)
        .map(|&(a, z)| {
            if a == z {
                a.to_string()
            } else {
                format!("{a}..={z}")
            }
        })
        .collect();
    if ranges.len() > 6 {
        out.push("...".into());
    }
    out.join(", ")
}

impl Volume {
    /// Every metadata block in use.
    pub(super) fn blocks_in_use(&self) -> Vec<u64> {
        let sb = &self.sb;
        let mut v = vec![0];
        // The inode table as far as the loader read it (the superblock's mark and a
        // margin): past it no block may hold a live inode, and none is read.
        let itable_end = sb.inode_table_start + self.report.inode_blocks_read;
        v.extend(sb.data_bitmap_start..itable_end);
        // An indirect extent's blocks past the file's last run were never written.
        let holds_runs = |o: &Owner| match *o {
            Owner::Indirect { ino, slot, within } => {
                let first = crate::format::inode::INLINE_RUNS
                    + (((1usize << slot) - 1) + within as usize)
                        * crate::format::inode::RUNS_PER_BLOCK;
                self.inodes.get(&ino).is_some_and(|i| first < i.runs.len())
            }
            _ => true,
        };
        let mut dynamic: Vec<u64> = self
            .owners
            .iter()
            .filter(|(_, o)| holds_runs(o))
            .map(|(n, _)| *n)
            .collect();
        dynamic.sort_unstable();
        v.extend(dynamic);
        if self.sums.is_some() {
            v.extend(sb.sum_start..sb.sum_start + sb.sum_blocks);
        }
        if self.has_event_log() {
            v.extend(sb.events_start..sb.events_start + sb.events_blocks);
        }
        v
    }

    pub(super) fn check_copies<D: Device>(
        &mut self,
        dev: &D,
        f: &mut Found,
        report: &LoadReport,
        progress: &mut dyn FnMut(u64, u64),
    ) -> Result<()> {
        let blocks = self.blocks_in_use();
        let total = blocks.len() as u64;
        let pending: BTreeSet<u64> = if self.writable {
            BTreeSet::new()
        } else {
            report.replayed_blocks.iter().copied().collect()
        };
        let bad_primary: BTreeSet<u64> = report.from_backup.iter().map(|(n, _)| *n).collect();
        // Both copies of a stretch of consecutive blocks are read in one request each
        // (1 MiB): an 8 TiB volume's checksum area alone is 15,898 blocks.
        let per = BULK_READ_BYTES / META_BLOCK_BYTES;
        let room = per.min(blocks.len()).max(1) * META_BLOCK_BYTES;
        let mut p = crate::device::AlignedBuf::zeroed(room);
        let mut b = crate::device::AlignedBuf::zeroed(room);
        let mut bad = BadCopies::default();
        let mut k = 0;
        while k < blocks.len() {
            let first = blocks[k];
            let mut len = 1;
            while len < per && k + len < blocks.len() && blocks[k + len] == first + len as u64 {
                len += 1;
            }
            if k == 0 || k / 1024 != (k + len) / 1024 {
                progress(k as u64, total);
            }
            let bytes = len * META_BLOCK_BYTES;
            dev.read_at(self.sb.backup_offset(first), &mut b[..bytes])
                .map_err(|e| Error::io("reading the backup region", e))?;
            dev.read_at(self.sb.primary_offset(first), &mut p[..bytes])
                .map_err(|e| Error::io("reading the primary region", e))?;
            for j in 0..len {
                let n = first + j as u64;
                let at = j * META_BLOCK_BYTES..(j + 1) * META_BLOCK_BYTES;
                self.compare_copies(
                    n,
                    &p[at.clone()],
                    &b[at],
                    &mut bad,
                    report,
                    &pending,
                    &bad_primary,
                );
            }
            k += len;
        }
        progress(total, total);
        bad.report(f);
        // The superblock copy at the end of the device.
        let (p, b) = (&mut p[..META_BLOCK_BYTES], &mut b[..META_BLOCK_BYTES]);
        dev.read_at(self.sb.last_copy_offset(), b)
            .map_err(|e| Error::io("reading the end-of-device superblock", e))?;
        if !pending.contains(&0) {
            dev.read_at(0, p)
                .map_err(|e| Error::io("reading the superblock", e))?;
            let ok = crate::format::superblock::Superblock::decode(b).is_ok_and(|s| s == self.sb)
                && (b == p || report.superblock_from != "primary");
            if !ok {
                f.err(
                    true,
                    "the end-of-device superblock copy is invalid or differs from the primary"
                        .into(),
                );
                self.dirty.insert(0);
            }
        }
        Ok(())
    }

    /// One metadata block's two copies: the backup must verify, and (unless the
    /// primary was already found bad on load, or the journal holds the current image)
    /// equal the primary.
    #[allow(clippy::too_many_arguments)]
    fn compare_copies(
        &mut self,
        n: u64,
        p: &[u8],
        b: &[u8],
        bad: &mut BadCopies,
        report: &LoadReport,
        pending: &BTreeSet<u64>,
        bad_primary: &BTreeSet<u64>,
    ) {
        if pending.contains(&n) {
            return; // Not checkpointed yet: the journal holds the current image.
        }
        let ty = self.block_type_of(n);
        if let Err(why) = verify_block(b, ty, &self.sb.uuid, n) {
            bad.invalid.push(format!(
                "backup copy of metadata block {n} ({}): {why}",
                ty.name()
            ));
            bad.invalid_blocks.push(n);
            self.dirty.insert(n);
            return;
        }
        if bad_primary.contains(&n) {
            return;
        }
        if p != b && (n != 0 || report.superblock_from == "primary") {
            bad.differ.push(format!(
                "metadata block {n} ({}): the backup copy differs from the primary",
                ty.name()
            ));
            bad.differ_blocks.push(n);
            self.dirty.insert(n);
        }
    }

    fn block_type_of(&self, n: u64) -> BlockType {
        match self.sb.area_of(n) {
            Area::Superblock => BlockType::Superblock,
            // Not compared (one copy), named as what its head block would be.
            Area::Journal => BlockType::JournalDescriptor,
            Area::DataBitmap(_) => BlockType::DataBitmap,
            Area::MetaBitmap(_) => BlockType::MetaBitmap,
            Area::InodeTable(_) => BlockType::InodeTable,
            Area::Sums(_) => BlockType::Sums,
            Area::Events(_) => BlockType::EventLog,
            // Not compared either (one copy).
            Area::TailLog(_) => BlockType::TailLog,
            Area::Dynamic => match self.owners.get(&n) {
                Some(Owner::DirBlock { .. }) => BlockType::Directory,
                Some(Owner::Indirect { .. }) => BlockType::Runs,
                Some(Owner::FrameIndex { .. }) => BlockType::FrameIndex,
                _ => BlockType::Symlink,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{block_ranges, BadCopies, Found};

    #[test]
    fn bad_copies_past_the_first_eight_read_as_ranges() {
        assert_eq!(block_ranges(&[3, 4, 5, 9, 11, 12]), "3..=5, 9, 11..=12");
        let many: Vec<u64> = (0..20).map(|i| i * 2).collect();
        assert_eq!(block_ranges(&many), "0, 2, 4, 6, 8, 10, ...");
        let mut f = Found {
            errors: vec![],
            fixable: vec![],
        };
        let mut bad = BadCopies::default();
        for n in 100..130 {
            bad.invalid
                .push(format!("backup copy of metadata block {n}"));
            bad.invalid_blocks.push(n);
        }
        bad.report(&mut f);
        assert_eq!(f.errors.len(), 9, "{:?}", f.errors);
        assert!(
            f.errors[8]
                .starts_with("22 more backup copies fail verification (metadata blocks 108..=129)"),
            "{}",
            f.errors[8]
        );
        assert!(f.fixable.iter().all(|&x| x));
    }
}
