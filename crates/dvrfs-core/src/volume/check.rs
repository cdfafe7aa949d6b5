//! The checks fsck makes of a loaded volume (`tools/fsck.rs` drives them): the
//! findings of the load, the two copies of every metadata block (`volume/copies.rs`),
//! and the structure (data and metadata blocks claimed once and marked in the
//! bitmaps, every inode reachable, link counts); with repair, what can be fixed is
//! marked dirty for the next commit, checksums lost with their block are computed
//! again, and unreachable inodes are linked into `/lost+found`.
//!
//! The invariant it keeps: after a repair's commit the structure checks find nothing
//! (each check repairs what it reports, or reports it as not fixable), and every
//! message names what it found.

use super::*;
use crate::alloc::Bitmap;
use crate::device::Device;
use crate::format::META_BLOCK_BYTES;

/// The names the directory entries give: how many name each inode, and how many
/// subdirectories each directory has.
struct Names {
    refs: HashMap<Ino, u32>,
    subdirs: HashMap<Ino, u32>,
}

impl Volume {
    /// Everything fsck checks once the volume is open: what the load found (each
    /// finding marks the blocks a repair rewrites), the lost checksums (rebuilt with
    /// `repair`), the two copies of every metadata block, then the structure.
    pub(crate) fn check_all<D: Device>(
        &mut self,
        dev: &D,
        f: &mut Found,
        report: &LoadReport,
        repair: bool,
        progress: &mut dyn FnMut(u64, u64),
    ) -> Result<()> {
        self.in_fsck = true;
        self.check_load_findings(f, report)?;
        if repair {
            self.rebuild_lost_sums(dev)?;
        }
        self.check_copies(dev, f, report, progress)?;
        self.check_structure(f)?;
        Ok(())
    }

    /// What the load found, each finding reported and the blocks a repair rewrites
    /// for it marked dirty: the superblock copy used, a journal transaction not
    /// replayed, lost blocks, event-log damage, primaries served from the backup,
    /// orphans freed, and the structural problems.
    fn check_load_findings(&mut self, f: &mut Found, report: &LoadReport) -> Result<()> {
        let sb_fine = matches!(report.superblock_from, "primary" | "journal");
        if !sb_fine || report.superblock_note.is_some() {
            // Rewriting block 0 writes every copy (primary, backup region, end of device)
            // from the one chosen.
            f.err(
                true,
                format!(
                    "superblock: the {} was used ({}); every copy rewritten from it",
                    report.superblock_from,
                    report
                        .superblock_note
                        .as_deref()
                        .unwrap_or("the primary is invalid")
                ),
            );
            self.dirty.insert(0);
        }
        if let Some(note) = &report.journal_note {
            // Any repair commit starts a new transaction where this one lies.
            f.err(true, format!("journal: {note}; the journal is cleared"));
            self.dirty.insert(0);
        }
        for (n, why) in &report.lost_blocks {
            let sums = self.sb.sum_blocks > 0 && *n >= self.sb.sum_start;
            f.err(
                true,
                match sums {
                    false => format!("metadata block {n} is lost in both copies ({why}); rebuilt from what remains"),
                    true => format!("data checksum block {n} is lost in both copies ({why}); its checksums are computed again from the data as it is now"),
                },
            );
            if *n < self.sb.dynamic_start || sums {
                // Bitmaps and the inode table are rewritten from memory; a lost block of
                // the dynamic area is rewritten by its owner (the directory's problem).
                self.dirty.insert(*n);
            }
        }
        for (n, why) in &report.event_problems {
            // Rewritten from what was read: the skipped records become empty slots.
            f.err(true, why.clone());
            self.dirty.insert(*n);
        }
        for (n, why) in &report.from_backup {
            f.err(
                true,
                format!("primary metadata block {n} ({why}); served from the backup copy"),
            );
            self.dirty.insert(*n);
        }
        if report.orphans_freed > 0 {
            f.err(
                true,
                format!(
                    "{} files unlinked while open (orphans) were left by the last user; freed",
                    report.orphans_freed
                ),
            );
        }
        for (ino, p) in &report.problems {
            f.err(true, p.clone());
            match ino {
                Some(ino) => {
                    self.dirty_inode(*ino);
                    if let Some(inode) = self.inodes.get(ino) {
                        if inode.kind() == Some(Kind::Dir) {
                            let blocks: Vec<u64> = inode
                                .runs
                                .iter()
                                .flat_map(|r| r.start..r.start + r.count as u64)
                                .collect();
                            self.dirty.extend(blocks);
                        }
                        // Lost runs take the place of runs that could not be read: the
                        // extents their new list needs (the unusable ones were dropped).
                        let runs = inode.runs.len();
                        self.ensure_run_capacity(*ino, runs)?;
                        self.dirty_runs_from(*ino, 0)?;
                    }
                }
                // Volume-level problems (stray bitmap bits, a stale inode-table mark):
                // rewriting the bitmaps and the last inode-table block clears them.
                None => {
                    let sb = &self.sb;
                    let blocks: Vec<u64> = (sb.data_bitmap_start..sb.inode_table_start)
                        .chain(std::iter::once(sb.dynamic_start - 1))
                        .collect();
                    self.dirty.extend(blocks);
                }
            }
        }
        Ok(())
    }

    /// Every file with lost ranges, by path (after the structure check, every inode
    /// is reachable), in path order.
    pub(crate) fn damaged_files(&self) -> Result<Vec<DamagedFile>> {
        let mut out = vec![];
        let mut stack = vec![(self.sb.root_ino, String::new())];
        while let Some((d, path)) = stack.pop() {
            let Some(dir) = self.dirs.get(&d) else {
                continue;
            };
            for (name, e) in &dir.entries {
                let p = format!("{path}/{}", String::from_utf8_lossy(name));
                match e.kind {
                    Kind::Dir => stack.push((e.ino, p)),
                    Kind::File => {
                        let lost = self.lost_ranges(e.ino)?;
                        if !lost.is_empty() {
                            out.push((p, lost));
                        }
                    }
                    Kind::Symlink => {}
                }
            }
        }
        out.sort();
        Ok(out)
    }

    /// Checksum blocks lost in both copies: their entries are computed again from the
    /// data as it is now (the most a repair can vouch for: those bytes were never
    /// checked since the loss). Returns the granules set.
    fn rebuild_lost_sums<D: Device>(&mut self, dev: &D) -> Result<u64> {
        let Some(sums) = self.sums.as_ref() else {
            return Ok(0);
        };
        let lost: Vec<u64> = sums.lost_blocks().collect();
        if lost.is_empty() {
            return Ok(0);
        }
        let (per, g, bs) = (
            sums.per_block(),
            sums.granule_bytes(),
            self.sb.data_block_bytes,
        );
        let wanted: BTreeSet<u64> = lost
            .iter()
            .flat_map(|&k| sums.entries_of(k))
            .map(|e| e / per)
            .collect();
        // (ino, file block, data block, bytes of it the file covers)
        let mut jobs = vec![];
        for (&ino, inode) in &self.inodes {
            if inode.kind() != Some(Kind::File) {
                continue;
            }
            let size = inode.attr.size_bytes;
            for r in inode.runs.iter().filter(|r| !r.is_lost()) {
                for i in 0..r.count as u64 {
                    let (fb, b) = (r.file_block as u64 + i, r.start + i);
                    if wanted.contains(&b) {
                        jobs.push((ino, fb, b, size.saturating_sub(fb * bs).min(bs)));
                    }
                }
            }
        }
        let mut buf = crate::device::AlignedBuf::zeroed(g as usize);
        let mut n = 0;
        for (ino, fb, b, covered) in jobs {
            for k in 0..covered.div_ceil(g) {
                let e = b * per + k;
                if !self.sums.as_ref().is_some_and(|s| s.in_lost_block(e)) {
                    continue;
                }
                let len = (((k + 1) * g).min(covered) - k * g) as usize;
                let read = len.div_ceil(META_BLOCK_BYTES) * META_BLOCK_BYTES;
                dev.read_at(self.sb.data_offset(b) + k * g, &mut buf[..read])
                    .map_err(|e| Error::io("reading file data to checksum it again", e))?;
                let seed = super::data::place_seed(ino, fb * bs + k * g);
                self.set_sum(e, Some(crc32c::crc32c_append(seed, &buf[..len])));
                n += 1;
            }
        }
        for k in lost {
            if let Some(s) = self.sums.as_mut() {
                s.found(k);
            }
            self.dirty.insert(self.sb.sum_start + k);
        }
        Ok(n)
    }

    /// The structure, one check after another (each one's repair is marked dirty for
    /// the next commit): symlinks without a target, directory entries, reachability
    /// from the root, link counts, the blocks each inode uses, the bitmaps.
    fn check_structure(&mut self, f: &mut Found) -> Result<()> {
        self.remove_targetless_symlinks(f)?;
        let mut names = self.check_entries(f)?;
        let mut reach = BTreeSet::from([self.sb.root_ino]);
        self.reach_from(&mut reach, self.sb.root_ino);
        self.adopt_unreachable(f, &mut reach, &mut names)?;
        self.check_link_counts(f, &names.refs)?;
        let (data_ref, meta_ref) = self.check_block_use(f)?;
        self.check_bitmaps(f, data_ref, meta_ref);
        Ok(())
    }

    fn remove_targetless_symlinks(&mut self, f: &mut Found) -> Result<()> {
        // A symbolic link whose target block could not be read has nothing to point
        // at: it goes (its entries are dropped below as naming a free inode).
        let targetless: Vec<Ino> = self
            .inodes
            .iter()
            .filter(|(ino, i)| i.kind() == Some(Kind::Symlink) && !self.symlinks.contains_key(ino))
            .map(|(&ino, _)| ino)
            .collect();
        for ino in targetless {
            f.err(true, format!("symlink inode {ino} has no target; removed"));
            self.free_inode(ino)?;
        }
        Ok(())
    }

    /// Entries: each must name a live inode of the right kind, and a directory has one
    /// name only; the others are removed. Returns the names counted.
    fn check_entries(&mut self, f: &mut Found) -> Result<Names> {
        let sb = self.sb.clone();
        let mut refs: HashMap<Ino, u32> = HashMap::new();
        let mut subdirs: HashMap<Ino, u32> = HashMap::new();
        let mut bad_entries = vec![];
        let mut dir_seen: BTreeSet<Ino> = BTreeSet::new();
        let mut dir_list: Vec<Ino> = self.dirs.keys().copied().collect();
        dir_list.sort_unstable();
        for &d in &dir_list {
            for (name, e) in &self.dirs[&d].entries {
                let ok_kind = self.inodes.get(&e.ino).and_then(|i| i.kind());
                let show = String::from_utf8_lossy(name);
                if ok_kind.is_none() || e.ino == sb.root_ino {
                    f.err(
                        true,
                        format!(
                            "directory {d}: entry {show:?} names inode {} which is free or invalid",
                            e.ino
                        ),
                    );
                    bad_entries.push((d, name.clone()));
                } else if ok_kind != Some(e.kind) {
                    f.err(
                        true,
                        format!("directory {d}: entry {show:?} has the wrong file type"),
                    );
                    bad_entries.push((d, name.clone()));
                } else if e.kind == Kind::Dir && !dir_seen.insert(e.ino) {
                    f.err(
                        true,
                        format!(
                            "directory {} has a second name {show:?} in directory {d}",
                            e.ino
                        ),
                    );
                    bad_entries.push((d, name.clone()));
                } else {
                    *refs.entry(e.ino).or_default() += 1;
                    if e.kind == Kind::Dir {
                        *subdirs.entry(d).or_default() += 1;
                    }
                }
            }
        }
        for (d, name) in bad_entries {
            if let Some(e) = self.dirs.get_mut(&d).and_then(|dir| dir.remove(&name)) {
                self.dirty_dir_block(d, e.block)?;
            }
        }
        Ok(Names { refs, subdirs })
    }

    /// Adds to `reach` everything reachable from directory `top` (a directory cycle
    /// not linked to it stays unreachable).
    fn reach_from(&self, reach: &mut BTreeSet<Ino>, top: Ino) {
        let mut stack = vec![top];
        while let Some(d) = stack.pop() {
            if let Some(dir) = self.dirs.get(&d) {
                for e in dir.entries.values() {
                    if reach.insert(e.ino) && e.kind == Kind::Dir {
                        stack.push(e.ino);
                    }
                }
            }
        }
    }

    /// What is not reachable goes to /lost+found, a subtree at a time: first the
    /// inodes no directory names (the tops of what a lost block or a lost root cut
    /// off), then, for a directory cycle, any one of it. Moving a directory makes its
    /// whole subtree reachable with it, so its children keep their names (and a
    /// directory is never given a second one). Orphans are freed instead.
    fn adopt_unreachable(
        &mut self,
        f: &mut Found,
        reach: &mut BTreeSet<Ino>,
        names: &mut Names,
    ) -> Result<()> {
        let Names { refs, subdirs } = names;
        let unreachable: Vec<Ino> = self
            .inodes
            .keys()
            .copied()
            .filter(|i| !reach.contains(i))
            .collect();
        let mut named_by: HashMap<Ino, (Ino, Vec<u8>)> = HashMap::new();
        for &d in &unreachable {
            if let Some(dir) = self.dirs.get(&d) {
                for (name, e) in &dir.entries {
                    named_by.entry(e.ino).or_insert((d, name.clone()));
                }
            }
        }
        let tops = unreachable.iter().filter(|i| !named_by.contains_key(i));
        let rest = unreachable.iter().filter(|i| named_by.contains_key(i));
        let order: Vec<Ino> = tops.chain(rest).copied().collect();
        for ino in order {
            if reach.contains(&ino) {
                continue;
            }
            let i = &self.inodes[&ino];
            if i.kind() == Some(Kind::File) && i.attr.nlink == 0 && !named_by.contains_key(&ino) {
                // Unlinked while open, and the volume's user ended before closing it
                // (a writable open frees these too).
                f.err(
                    true,
                    format!("inode {ino} is a file unlinked while open (an orphan); freed"),
                );
                self.free_inode(ino)?;
                continue;
            }
            if i.kind() == Some(Kind::Dir) {
                // A directory in a cycle of unreachable ones: its old name goes.
                if let Some((d, name)) = named_by.get(&ino) {
                    if let Some(e) = self.dirs.get_mut(d).and_then(|dir| dir.remove(name)) {
                        self.dirty_dir_block(*d, e.block)?;
                        *refs.entry(ino).or_default() -= 1;
                        if let Some(n) = subdirs.get_mut(d) {
                            *n -= 1;
                        }
                    }
                }
            }
            f.err(
                true,
                format!("inode {ino} is not reachable from the root; moved to /lost+found"),
            );
            self.adopt(ino)?;
            *refs.entry(ino).or_default() += 1;
            reach.insert(ino);
            self.reach_from(reach, ino);
        }
        Ok(())
    }

    /// Link counts: a directory's is 2 and its subdirectories, a file's the names it
    /// has (at least 1).
    fn check_link_counts(&mut self, f: &mut Found, refs: &HashMap<Ino, u32>) -> Result<()> {
        let inos: Vec<Ino> = self.inodes.keys().copied().collect();
        for ino in inos {
            let i = &self.inodes[&ino];
            let want = match i.kind() {
                Some(Kind::Dir) => {
                    2 + self.dirs.get(&ino).map_or(0, |d| {
                        d.entries.values().filter(|e| e.kind == Kind::Dir).count() as u32
                    })
                }
                _ => refs.get(&ino).copied().unwrap_or(0).max(1),
            };
            if i.attr.nlink != want {
                f.err(
                    true,
                    format!("inode {ino}: link count {} should be {want}", i.attr.nlink),
                );
                self.inode_mut(ino)?.attr.nlink = want;
                self.dirty_inode(ino);
            }
        }
        Ok(())
    }

    /// Blocks: mapped past the end of a file (cut), used twice (reported). Returns the
    /// data and metadata blocks in use, as the files and directories say.
    fn check_block_use(&mut self, f: &mut Found) -> Result<(Bitmap, Bitmap)> {
        let sb = self.sb.clone();
        let bs = sb.data_block_bytes;
        let mut data_ref = Bitmap::new(sb.data_blocks);
        let mut meta_ref = Bitmap::new(sb.dynamic_blocks);
        let inos: Vec<Ino> = self.inodes.keys().copied().collect();
        for ino in inos {
            let kind = self.inodes[&ino].kind();
            if kind == Some(Kind::File) {
                let keep = self.inodes[&ino].attr.size_bytes.div_ceil(bs);
                if self.inodes[&ino]
                    .runs
                    .last()
                    .is_some_and(|r| r.file_end() > keep)
                {
                    f.err(
                        true,
                        format!("inode {ino}: blocks mapped past the end of the file"),
                    );
                    let (_, first) = self.inode_mut(ino)?.truncate_blocks(keep);
                    self.dirty_runs_from(ino, first)?;
                    // Indirect extents the shorter run list no longer needs go too
                    // (a later open would count them free: one pass must settle it).
                    self.trim_run_capacity(ino)?;
                }
            }
            let i = &self.inodes[&ino];
            let mut dup = false;
            for r in &i.runs {
                for b in r.blocks() {
                    let (map, idx) = if kind == Some(Kind::File) {
                        (&mut data_ref, b)
                    } else {
                        (&mut meta_ref, b - sb.dynamic_start)
                    };
                    dup |= map.get(idx);
                    map.set(idx, true);
                }
            }
            for (slot, &s) in i.attr.indirect.iter().enumerate() {
                if s != 0 {
                    for b in s as u64..s as u64 + (1 << slot) {
                        dup |= meta_ref.get(b - sb.dynamic_start);
                        meta_ref.set(b - sb.dynamic_start, true);
                    }
                }
            }
            // Its frame index's blocks (the loader checked they are its own).
            if let Some(ix) = self.frame_indexes.get(&ino) {
                for &b in ix.blocks.iter().flatten() {
                    dup |= meta_ref.get(b - sb.dynamic_start);
                    meta_ref.set(b - sb.dynamic_start, true);
                }
            }
            if dup {
                f.err(
                    false,
                    format!("inode {ino} uses blocks that another file uses too"),
                );
            }
        }
        Ok((data_ref, meta_ref))
    }

    /// The bitmaps must say what the files and directories use; repair sets them so.
    fn check_bitmaps(&mut self, f: &mut Found, data_ref: Bitmap, meta_ref: Bitmap) {
        let sb = self.sb.clone();
        if &data_ref != self.data.used() {
            let diff: Vec<u64> = (0..sb.data_blocks)
                .filter(|&b| data_ref.get(b) != self.data.used().get(b))
                .collect();
            f.err(
                true,
                format!(
                    "data bitmap disagrees with the files on {} blocks",
                    diff.len()
                ),
            );
            for b in diff {
                self.dirty_data_bitmap(b);
            }
            self.data.set_used_bitmap(data_ref);
        }
        if &meta_ref != self.meta.used() {
            let diff = (0..sb.dynamic_blocks)
                .filter(|&b| meta_ref.get(b) != self.meta.used().get(b))
                .count();
            f.err(
                true,
                format!("metadata bitmap disagrees with the metadata in use on {diff} blocks"),
            );
            for b in (0..sb.dynamic_blocks).filter(|&b| meta_ref.get(b) != self.meta.used().get(b))
            {
                self.dirty
                    .insert(sb.meta_bitmap_start + b / crate::alloc::BITS_PER_BITMAP_BLOCK);
            }
            self.meta.set_used_bitmap(meta_ref);
        }
    }

    /// Links an unreachable inode into `/lost+found` as `#<ino>`.
    fn adopt(&mut self, ino: Ino) -> Result<()> {
        let root = self.sb.root_ino;
        let lf = match self.lookup(root, b"lost+found") {
            Ok(i) if self.dirs.contains_key(&i) => i,
            _ => {
                let was = self.writable;
                self.writable = true;
                let r = self.new_inode(
                    root,
                    b"lost+found",
                    crate::format::inode::S_IFDIR | 0o700,
                    0,
                    0,
                    0,
                );
                self.writable = was;
                let lf = r?;
                self.dirs.insert(lf, Dir::default());
                self.parents.insert(lf, root);
                let n = &mut self.inode_mut(root)?.attr.nlink;
                *n = n.saturating_add(1); // damaged counts are recomputed after
                lf
            }
        };
        let kind = self.inodes[&ino].kind().unwrap_or(Kind::File);
        let name = format!("#{ino}");
        self.dir_add(lf, name.as_bytes(), ino, kind)?;
        if kind == Kind::Dir {
            self.parents.insert(ino, lf);
            let n = &mut self.inode_mut(lf)?.attr.nlink;
            *n = n.saturating_add(1);
        }
        Ok(())
    }
}
