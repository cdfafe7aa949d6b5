//! Loading the tree: the bitmaps and the inode table in bulk, every inode in use with
//! its runs (`runs.rs`), directories' entries and symlinks' targets; then the parents,
//! a stand-in root, and the block claims. Also the path-only load, which reads only
//! what resolving some paths needs.
//!
//! The invariant it keeps: after a full load every block a file or directory uses is
//! marked used in its bitmap and belongs to one structure, or the structure is
//! reported (so the allocators never hand out a block in use, and a writable open
//! waits for `fsck --repair`); the root is a directory.

use super::*;
use crate::alloc::Bitmap;
use crate::device::Device;
use crate::format::dir::decode_dir;
use crate::format::inode::{
    get_map_sum, get_tail_floor, map_sum, InodeRecord, INODES_PER_BLOCK, INODE_BYTES,
};
use crate::format::{payload, BlockType};

impl Volume {
    /// Loads every metadata structure in use (a full open).
    pub(super) fn load_all<D: Device>(
        &mut self,
        dev: &D,
        overlay: &HashMap<u64, Vec<u8>>,
        report: &mut LoadReport,
    ) -> Result<()> {
        let sb = self.sb.clone();
        let mut r = Reader::new(dev, &sb, overlay, report);
        let (used, stray_data) = read_bitmap(
            &mut r,
            sb.data_bitmap_start,
            sb.data_bitmap_blocks,
            BlockType::DataBitmap,
            sb.data_blocks,
        )?;
        let (mused, stray_meta) = read_bitmap(
            &mut r,
            sb.meta_bitmap_start,
            sb.meta_bitmap_blocks,
            BlockType::MetaBitmap,
            sb.dynamic_blocks,
        )?;
        let stray = stray_data || stray_meta;
        let mut records = Vec::new();
        let mut floors: Vec<(Ino, u64)> = Vec::new();
        let tail_log = sb.has_tail_log();
        let mut lost_inodes = vec![];
        let read = match sb.inode_blocks_used {
            0 => sb.inode_table_blocks,
            mark => (mark + INODE_MARK_MARGIN).min(sb.inode_table_blocks),
        };
        r.report.inode_blocks_read = read;
        r.area(
            sb.inode_table_start,
            read,
            BlockType::InodeTable,
            |k, img| {
                let Some(img) = img else {
                    let first = k * INODES_PER_BLOCK as u64;
                    lost_inodes.push((first, first + INODES_PER_BLOCK as u64 - 1));
                    return Ok(());
                };
                let p = payload(img);
                for j in 0..INODES_PER_BLOCK {
                    let ino = k * INODES_PER_BLOCK as u64 + j as u64;
                    let raw = &p[j * INODE_BYTES..(j + 1) * INODE_BYTES];
                    // A free record has mode 0 (its first field): skip decoding it.
                    if raw[..4] == [0; 4] {
                        continue;
                    }
                    let rec = InodeRecord::decode(raw);
                    if !rec.is_free() {
                        records.push((ino, rec, get_map_sum(p, j)));
                        let floor = get_tail_floor(p, j);
                        if floor > 0 && tail_log {
                            floors.push((ino as Ino, floor));
                        }
                    }
                }
                Ok(())
            },
        )?;
        self.tail_floors.extend(floors);
        if stray {
            r.report.problems.push((
                None,
                "a bitmap block has bits set past the end of its area".into(),
            ));
        }
        for (a, b) in lost_inodes {
            r.report.problems.push((
                None,
                format!("inodes {a} to {b} are lost with their inode-table block"),
            ));
        }
        self.data.set_used_bitmap(used);
        self.meta.set_used_bitmap(mused);

        let mark = sb.inode_blocks_used;
        if let Some((ino, _, _)) = records
            .iter()
            .rev()
            .find(|(ino, _, _)| mark != 0 && *ino / INODES_PER_BLOCK as u64 >= mark)
        {
            r.report.problems.push((
                None,
                format!("inode {ino} lies past the superblock's inode-table mark ({mark} blocks): the mark is stale"),
            ));
        }
        let contested = contested_extents(&r, &records)?;
        for (ino, rec, stored_sum) in records {
            self.load_inode(&mut r, ino, rec, stored_sum, true, &contested)?;
        }
        self.link_parents();
        self.stand_in_root(&mut r.report.problems);
        self.check_block_claims(&mut r.report.problems);
        Ok(())
    }

    /// Every block a file or a directory uses must be marked used in its bitmap: a
    /// bitmap that says one is free (damage with its checksum intact) would hand it
    /// out again. And no data block may belong to two files: deleting both would
    /// free it twice. Each such file is reported (a writable open then waits for
    /// `fsck --repair`, which rebuilds the bitmaps and names shared blocks); a block
    /// marked used that nothing uses is only a leak, left to fsck. With these checked
    /// at every full load, the allocators' double-free assertions guard invariants
    /// of the code, not of the disk.
    fn check_block_claims(&self, problems: &mut Vec<(Option<Ino>, String)>) {
        let mut found: BTreeMap<Ino, String> = BTreeMap::new();
        let mut claimed = Bitmap::new(self.sb.data_blocks);
        for (&ino, inode) in &self.inodes {
            if inode.kind() != Some(Kind::File) {
                continue;
            }
            for b in inode
                .runs
                .iter()
                .filter(|r| !r.is_lost())
                .flat_map(|r| r.blocks())
            {
                let why = if !self.data.used().get(b) {
                    format!("uses data block {b}, which its bitmap marks free")
                } else if claimed.get(b) {
                    format!("uses data block {b}, which is claimed twice (by another file, or by this one again)")
                } else {
                    claimed.set(b, true);
                    continue;
                };
                found.entry(ino).or_insert(why);
            }
        }
        // In block order: an inode's first problem reported is its lowest block's.
        let mut owned: Vec<(&u64, &Owner)> = self.owners.iter().collect();
        owned.sort_unstable_by_key(|(b, _)| **b);
        for (&b, owner) in owned {
            let ino = owner.ino();
            if !self.meta.is_used(b) {
                found.entry(ino).or_insert_with(|| {
                    format!("uses metadata block {b}, which its bitmap marks free")
                });
            }
        }
        for (ino, why) in found {
            problems.push((Some(ino), format!("inode {ino} {why}")));
        }
    }
    /// A root whose inode went with a lost block, or whose record is not a directory
    /// any more: an empty root stands in, so what is intact stays reachable to fsck,
    /// which links it into /lost+found (a record that was there is dropped: the blocks
    /// it named are no longer in use).
    fn stand_in_root(&mut self, problems: &mut Vec<(Option<Ino>, String)>) {
        if self.dirs.contains_key(&self.sb.root_ino) {
            return;
        }
        let root = self.sb.root_ino;
        if self.inodes.remove(&root).is_some() {
            self.symlinks.remove(&root);
            self.frame_indexes.remove(&root);
            self.owners.retain(|_, o| o.ino() != root);
        }
        self.inodes.insert(
            root,
            Inode {
                attr: InodeRecord {
                    mode: crate::format::inode::S_IFDIR | 0o755,
                    nlink: 2,
                    ..Default::default()
                },
                runs: vec![],
            },
        );
        self.dirs.insert(root, Dir::default());
        self.parents.insert(root, root);
        problems.push((
            Some(root),
            "the root directory's inode is lost or not a directory: an empty root stands in".into(),
        ));
    }

    /// Loads only what resolving `paths` reads (a read-only open for `stat`): the root,
    /// then for each component the directory's blocks and the named inode with its
    /// runs. Names outside those directories, the bitmaps and the inode table's other
    /// records are not read, so nothing is reported about them (fsck reads them all).
    pub(super) fn load_paths<D: Device>(
        &mut self,
        dev: &D,
        overlay: &HashMap<u64, Vec<u8>>,
        report: &mut LoadReport,
        paths: &[String],
        children: bool,
    ) -> Result<()> {
        let sb = self.sb.clone();
        let mut r = Reader::new(dev, &sb, overlay, report);
        // Inode-table blocks read so far (a directory's children share them).
        let mut table = HashMap::new();
        let root = sb.root_ino;
        self.load_one(&mut r, &mut table, root as u64, true)?;
        self.stand_in_root(&mut r.report.problems);
        self.parents.insert(root, root);
        for path in paths {
            let mut ino = root;
            for comp in path.split('/').filter(|c| !c.is_empty() && *c != ".") {
                if comp == ".." {
                    ino = *self.parents.get(&ino).unwrap_or(&root);
                    continue;
                }
                let Some(e) = self
                    .dirs
                    .get(&ino)
                    .and_then(|d| d.entries.get(comp.as_bytes()))
                else {
                    break; // Resolving it says what is wrong.
                };
                let (child, kind) = (e.ino, e.kind);
                self.load_one(&mut r, &mut table, child as u64, true)?;
                if kind == Kind::Dir {
                    self.parents.entry(child).or_insert(ino);
                }
                ino = child;
            }
            if !children {
                continue;
            }
            let entries: Vec<(Ino, Kind)> = self
                .dirs
                .get(&ino)
                .map(|d| d.entries.values().map(|e| (e.ino, e.kind)).collect())
                .unwrap_or_default();
            for (child, kind) in entries {
                self.load_one(&mut r, &mut table, child as u64, false)?;
                if kind == Kind::Dir {
                    self.parents.entry(child).or_insert(ino);
                }
            }
        }
        Ok(())
    }

    /// Reads inode `ino`'s inode-table block and loads the record if it is in use
    /// (once; a free, lost or out-of-range record is left out, and resolving a name
    /// that leads to it fails as a name without a file does). `entries`: a directory's
    /// entries too (one loaded without them earlier is loaded again with them).
    fn load_one<D: Device>(
        &mut self,
        r: &mut Reader<'_, D>,
        table: &mut HashMap<u64, Option<Vec<u8>>>,
        ino: u64,
        entries: bool,
    ) -> Result<()> {
        let sb = r.sb;
        if ino >= sb.inode_count as u64 {
            return Ok(());
        }
        if let Some(i) = self.inodes.get(&(ino as Ino)) {
            let shallow = i.kind() == Some(Kind::Dir) && !self.dirs.contains_key(&(ino as Ino));
            if !(entries && shallow) {
                return Ok(());
            }
            let ino = ino as Ino;
            self.inodes.remove(&ino);
            self.owners.retain(|_, o| o.ino() != ino);
        }
        let k = ino / INODES_PER_BLOCK as u64;
        let img = match table.get(&k) {
            Some(img) => img.clone(),
            None => {
                let img = r.one_or_lose(sb.inode_table_start + k, BlockType::InodeTable)?;
                table.insert(k, img.clone());
                img
            }
        };
        let Some(img) = img else {
            let first = k * INODES_PER_BLOCK as u64;
            r.report.problems.push((
                None,
                format!(
                    "inodes {first} to {} are lost with their inode-table block",
                    first + INODES_PER_BLOCK as u64 - 1
                ),
            ));
            return Ok(());
        };
        let (p, j) = (payload(&img), (ino % INODES_PER_BLOCK as u64) as usize);
        let rec = InodeRecord::decode(&p[j * INODE_BYTES..(j + 1) * INODE_BYTES]);
        if rec.is_free() {
            return Ok(());
        }
        let floor = get_tail_floor(p, j);
        if floor > 0 && sb.has_tail_log() {
            self.tail_floors.insert(ino as Ino, floor);
        }
        // A path-only load sees too few records to settle contested extents; it gives
        // its answer up for the full load's on any damage it meets.
        self.load_inode(r, ino, rec, get_map_sum(p, j), entries, &HashMap::new())
    }

    /// Decodes and checks one inode record in use (its runs, and a directory's entries
    /// or a symlink's target), and adds it to the volume; what is wrong is reported.
    fn load_inode<D: Device>(
        &mut self,
        r: &mut Reader<'_, D>,
        ino: u64,
        rec: InodeRecord,
        stored_sum: Option<u32>,
        entries: bool,
        contested: &HashMap<u64, (Ino, usize)>,
    ) -> Result<()> {
        let sb = r.sb;
        if ino == 0 || ino >= sb.inode_count as u64 {
            // Named by its slot, so fsck rewrites the block holding it (free).
            r.report.problems.push((
                Some(ino as Ino),
                format!("inode slot {ino} is outside the usable inode range"),
            ));
            return Ok(());
        }
        let ino = ino as Ino;
        let Some(kind) = Kind::from_mode(rec.mode) else {
            r.report.problems.push((
                Some(ino),
                format!("inode {ino} has an unknown file type (mode {:o})", rec.mode),
            ));
            return Ok(());
        };
        let (runs, usable_slots) = load_runs(r, ino, &rec, contested, &self.owners)?;
        let runs = if kind == Kind::File {
            let end = rec.size_bytes.div_ceil(sb.data_block_bytes);
            // A record without a map checksum is an old one only on a volume that
            // does not keep them for every file; otherwise its checksum was damaged.
            let sum_ok = match stored_sum {
                Some(m) => m == map_sum(rec.size_bytes, runs.iter().flatten()),
                None => !sb.map_sums_kept(),
            };
            let runs_read = runs.iter().all(Option::is_some);
            let found = r.report.problems.len();
            let runs = valid_file_runs(runs, sb.data_blocks, end, ino, &mut r.report.problems);
            let run_damaged = r.report.problems.len() > found;
            let map = MapState {
                sum_ok,
                runs_read,
                run_damaged,
            };
            lose_holes_of_a_damaged_map(runs, map, end, ino, &mut r.report.problems)
        } else {
            let limit = (sb.dynamic_start, sb.dynamic_start + sb.dynamic_blocks);
            valid_prefix(runs, limit, ino, &mut r.report.problems)
        };
        let mut rec = rec;
        drop_false_protection(sb, ino, &mut rec, &mut r.report.problems);
        let inline_target = std::mem::take(&mut rec.inline_target);
        keep_needed_extents(&mut self.owners, ino, &mut rec, runs.len(), usable_slots);
        let inode = Inode { attr: rec, runs };
        let inode = self.with_frame_index(r, ino, inode, kind, entries)?;
        match kind {
            // A directory listed but not opened (a path-only load): its record only.
            Kind::Dir if !entries => {}
            Kind::Dir => {
                let (dir, cut) = load_dir(r, &mut self.owners, ino, &inode)?;
                self.dirs.insert(ino, dir);
                if let Some(cut) = cut {
                    // The directory ends before a block that is another's.
                    let mut inode = inode;
                    inode.truncate_blocks(cut as u64);
                    self.inodes.insert(ino, inode);
                    return Ok(());
                }
            }
            Kind::Symlink => {
                // The block is the link's only if nothing else claims it and it holds
                // a target; otherwise the link has none (fsck removes it) and the
                // block stays with whoever owns it.
                let owners = &self.owners;
                let target = super::symlink::loaded_target(sb, &inode, inline_target, |b| {
                    if owners.contains_key(&b) {
                        return Ok(Err(format!("its target block {b} belongs to another file")));
                    }
                    Ok(r.one_or_lose(b, BlockType::Symlink)?
                        .ok_or_else(|| "its target block is lost".to_string()))
                })?;
                match target {
                    Ok((t, block)) => {
                        self.symlinks.insert(ino, t);
                        if let Some(b) = block {
                            self.owners.insert(b, Owner::Symlink { ino });
                        }
                    }
                    Err(e) => r
                        .report
                        .problems
                        .push((Some(ino), format!("symlink inode {ino}: {e}"))),
                }
            }
            Kind::File => {}
        }
        self.inodes.insert(ino, inode);
        Ok(())
    }
}

/// A protection stamp of id 0, or on a volume that never had one, is damage:
/// reported and dropped (the chunk is then deleted by the policies like any other).
fn drop_false_protection(
    sb: &Superblock,
    ino: Ino,
    rec: &mut InodeRecord,
    problems: &mut Vec<(Option<Ino>, String)>,
) {
    if let Some(p) = rec.protection {
        if p.id == 0 || !sb.has_protection() {
            problems.push((
                Some(ino),
                format!("inode {ino} carries a protection that cannot be one (id {}, or a volume without protected clips): dropped", p.id),
            ));
            rec.set_protection(None);
        }
    }
}

/// A bitmap of `bits` bits read from its `blocks` blocks at `start`, and whether a
/// block has bits set past the end of its area. A block lost in both copies counts
/// every block it covers as used (nothing is handed out twice); fsck rebuilds it from
/// the files.
fn read_bitmap<D: Device>(
    r: &mut Reader<'_, D>,
    start: u64,
    blocks: u64,
    ty: BlockType,
    bits: u64,
) -> Result<(Bitmap, bool)> {
    let mut map = Bitmap::new(bits);
    let mut stray = false;
    r.area(start, blocks, ty, |k, img| {
        match img {
            Some(img) => {
                map.decode_block(k, payload(img));
                stray |= map.block_has_stray_bits(k, payload(img));
            }
            None => map.decode_block(k, &[0xFF; crate::format::PAYLOAD_BYTES]),
        }
        Ok(())
    })?;
    Ok((map, stray))
}

/// A directory's entries. `Some(cut)`: its block `cut` belongs to another structure
/// (another owner claims it, or it holds another kind of block in both copies): the
/// directory ends before it, and the caller cuts its runs there.
fn load_dir<D: Device>(
    r: &mut Reader<'_, D>,
    owners: &mut HashMap<u64, Owner>,
    ino: Ino,
    inode: &Inode,
) -> Result<(Dir, Option<u32>)> {
    let mut dir = Dir::default();
    let nblocks = inode.runs.last().map_or(0, |r| r.file_end());
    dir.blocks = vec![Default::default(); nblocks as usize];
    for run in &inode.runs {
        for k in 0..run.count as u64 {
            let index = (run.file_block as u64 + k) as u32;
            let n = run.start + k;
            let taken = owners
                .get(&n)
                .is_some_and(|o| *o != Owner::DirBlock { ino, index });
            let Claim::Read(img) = claim(r, n, BlockType::Directory, taken)? else {
                r.report.problems.push((
                    Some(ino),
                    format!("directory {ino}: its block {index} (metadata block {n}) belongs to another structure; the directory ends before it"),
                ));
                dir.blocks.truncate(index as usize);
                return Ok((dir, Some(index)));
            };
            owners.insert(n, Owner::DirBlock { ino, index });
            let Some(img) = img else {
                r.report.problems.push((
                    Some(ino),
                    format!("directory {ino} block {index} is lost: its entries are gone"),
                ));
                continue;
            };
            let entries = match decode_dir(payload(&img)) {
                Ok(e) => e,
                Err(e) => {
                    r.report
                        .problems
                        .push((Some(ino), format!("directory {ino} block {index}: {e}")));
                    continue;
                }
            };
            for (name, child, kind) in entries {
                if let Err(e) = super::ops::validate_name(&name) {
                    r.report
                        .problems
                        .push((Some(ino), format!("directory {ino}: {e}")));
                    continue;
                }
                if dir.entries.contains_key(&name) {
                    r.report.problems.push((
                        Some(ino),
                        format!(
                            "directory {ino}: duplicate name {:?}",
                            String::from_utf8_lossy(&name)
                        ),
                    ));
                    continue;
                }
                dir.insert(&name, child, kind, index);
            }
        }
    }
    Ok((dir, None))
}
