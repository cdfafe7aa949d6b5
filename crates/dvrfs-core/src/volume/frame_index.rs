//! Files' frame indexes as stored: each indexed file's keyframes
//! (`meta/frame_index.rs`) and the frame-index blocks of the dynamic area that hold
//! them (FORMAT.md section 10c), kept in the same transactions as the data they
//! describe.
//!
//! **Placement.** An index of `n` entries has a fixed shape ([`shape`]): leaves of
//! 101 entries in file order, all full but the last, and above them as many branch
//! levels as needed for a single root (none for one leaf). Block `k` of level `l`
//! always holds the entries `k * span(l) ..`, so an append rewrites only the last
//! leaf, the last block of each branch level and any block it adds; block numbers,
//! once given, stay until a cut or a removal frees them. The inode's
//! `frame_index_root` names the top block and `frame_count` the entries.
//!
//! **Room.** Index blocks come from the dynamic area as directory blocks do, never
//! from the share kept for file maps (`room.rs`): a recording whose index finds no
//! room goes on without it, its file flagged `FLAG_INDEX_INCOMPLETE` (`dvrfs
//! reindex` builds it again once there is room). An index is never a reason for a
//! recording to stop.
//!
//! **Loading.** A full open reads every index and accepts it only in the canonical
//! form the placement would write: every block decoded, re-encoded from the loaded
//! entries and compared, the entries in order and within the file's size, the count
//! the inode's. Anything else is damage: reported (a writable open then waits for
//! `fsck --repair`, which drops the index and flags the file incomplete), never a
//! wrong seek.
//!
//! Invariants (asserted on every change): `blocks[l].len() == shape(n)[l]`, every
//! block is owned by `Owner::FrameIndex` of its file at its place, and the inode's
//! `frame_index_root` and `frame_count` are the root's block and `n`.

use super::*;
use crate::format::frame_index::{
    Child, FrameEntry, IndexBlock, BRANCH_CHILDREN, LEAF_ENTRIES, MAX_BRANCH_LEVELS,
};
use crate::format::inode::FLAG_INDEX_INCOMPLETE;
use crate::format::superblock::FEATURE_FRAME_INDEX;
use crate::format::{payload, BlockType};
use crate::meta::frame_index::{FrameIndex, MAX_ENTRIES};

/// Levels of an index: the leaves and up to [`MAX_BRANCH_LEVELS`] of branches.
pub const LEVELS: usize = MAX_BRANCH_LEVELS as usize + 1;

/// Blocks per level of an index of `n` entries (leaves first).
pub fn shape(n: usize) -> [usize; LEVELS] {
    assert!(n <= MAX_ENTRIES, "{n} entries: more than an index holds");
    let mut s = [0; LEVELS];
    s[0] = n.div_ceil(LEAF_ENTRIES);
    for l in 1..LEVELS {
        s[l] = if s[l - 1] > 1 {
            s[l - 1].div_ceil(BRANCH_CHILDREN)
        } else {
            0
        };
    }
    s
}

/// Entries under one block of level `l`.
fn span(l: usize) -> usize {
    LEAF_ENTRIES * BRANCH_CHILDREN.pow(l as u32)
}

/// One file's index and its blocks.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct StoredIndex {
    pub(crate) index: FrameIndex,
    /// Per level (leaves first), the metadata block of each block of the shape.
    pub(crate) blocks: [Vec<u64>; LEVELS],
}

impl StoredIndex {
    /// The top block (0 for an empty index).
    fn root(&self) -> u64 {
        self.blocks
            .iter()
            .rev()
            .find(|b| !b.is_empty())
            .map_or(0, |b| {
                assert_eq!(b.len(), 1, "the top level of an index is one block");
                b[0]
            })
    }

    /// What block `k` of level `l` holds.
    pub(crate) fn image(&self, l: usize, k: usize) -> IndexBlock {
        let e = self.index.entries();
        if l == 0 {
            let from = k * LEAF_ENTRIES;
            return IndexBlock::Leaf(e[from..e.len().min(from + LEAF_ENTRIES)].to_vec());
        }
        let below = &self.blocks[l - 1];
        let children = (k * BRANCH_CHILDREN..below.len().min((k + 1) * BRANCH_CHILDREN))
            .map(|c| {
                let first = c * span(l - 1);
                Child {
                    block: u32::try_from(below[c]).expect("metadata block numbers fit in u32"),
                    below: (e.len() - first).min(span(l - 1)) as u32,
                    offset: e[first].offset,
                    number: e[first].number,
                    utc_ns: e[first].utc_ns,
                }
            })
            .collect();
        IndexBlock::Branch {
            level: l as u8,
            children,
        }
    }

    fn assert_shape(&self, ino: Ino) {
        let s = shape(self.index.len());
        for (l, b) in self.blocks.iter().enumerate() {
            assert_eq!(b.len(), s[l], "inode {ino}: frame-index level {l}");
        }
    }
}

/// What a file's index holds (`dvrfs info`, the keyframe commands).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FrameInfo {
    /// Keyframes indexed.
    pub keyframes: u64,
    /// Frame-index blocks they take.
    pub blocks: u64,
    /// The top block (the inode's `frame_index_root`), 0 without an index.
    pub root: u64,
    /// The index covers every keyframe of the file's data (no `FLAG_INDEX_INCOMPLETE`).
    pub complete: bool,
    pub first: Option<FrameEntry>,
    pub last: Option<FrameEntry>,
}

/// How an append went.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IndexAppend {
    /// Stored; it goes to disk with the next commit.
    Stored,
    /// The dynamic area had no room for the blocks: nothing was appended, the file is
    /// flagged incomplete and later appends are refused until a reindex.
    OutOfRoom,
}

impl Volume {
    /// The keyframes of file `ino`, if it has an index.
    pub fn frame_index(&self, ino: Ino) -> Result<Option<&FrameIndex>> {
        self.file(ino)?;
        Ok(self.frame_indexes.get(&ino).map(|s| &s.index))
    }

    /// What file `ino`'s index holds.
    pub fn frame_info(&self, ino: Ino) -> Result<FrameInfo> {
        let attr = &self.file(ino)?.attr;
        let complete = attr.flags & FLAG_INDEX_INCOMPLETE == 0;
        Ok(match self.frame_indexes.get(&ino) {
            None => FrameInfo {
                complete,
                ..FrameInfo::default()
            },
            Some(s) => FrameInfo {
                keyframes: s.index.len() as u64,
                blocks: s.blocks.iter().map(|b| b.len() as u64).sum(),
                root: s.root(),
                complete,
                first: s.index.entries().first().copied(),
                last: s.index.entries().last().copied(),
            },
        })
    }

    /// Whether file `ino`'s index misses keyframes of its data.
    pub fn frame_index_incomplete(&self, ino: Ino) -> Result<bool> {
        Ok(self.file(ino)?.attr.flags & FLAG_INDEX_INCOMPLETE != 0)
    }

    /// Appends keyframes to file `ino`'s index. Each must follow the last (offset and
    /// frame number increasing, UTC never back) and end within the file's size as it
    /// is now, so the index never describes bytes its commit does not hold; one that
    /// does not is refused with the reason, and then nothing is appended. A file
    /// flagged incomplete takes no appends (`reindex` rebuilds it whole).
    pub fn append_frames(&mut self, ino: Ino, entries: &[FrameEntry]) -> Result<IndexAppend> {
        self.check_writable()?;
        let attr = &self.file(ino)?.attr;
        if attr.flags & FLAG_INDEX_INCOMPLETE != 0 {
            return Err(Error::InvalidArgument(format!(
                "inode {ino}: its frame index is incomplete; `dvrfs reindex` builds it again"
            )));
        }
        if entries.is_empty() {
            return Ok(IndexAppend::Stored);
        }
        let size = attr.size_bytes;
        let mut stored = self.frame_indexes.remove(&ino).unwrap_or_default();
        let old = stored.index.len();
        let mut refused = None;
        for e in entries {
            if let Err(why) = stored.index.append(*e, size) {
                refused = Some(why);
                break;
            }
        }
        if let Some(why) = refused {
            stored.index.cut_to(old);
            self.put_back(ino, stored);
            return Err(Error::InvalidArgument(format!(
                "inode {ino}: keyframe refused by its index: {why}"
            )));
        }
        let (before, after) = (shape(old), shape(stored.index.len()));
        let need: u64 = (0..LEVELS).map(|l| (after[l] - before[l]) as u64).sum();
        if need > 0 && (self.check_name_room(need).is_err() || self.meta.free_blocks() < need) {
            stored.index.cut_to(old);
            self.put_back(ino, stored);
            self.inode_mut(ino)?.attr.flags |= FLAG_INDEX_INCOMPLETE;
            self.dirty_inode(ino);
            return Ok(IndexAppend::OutOfRoom);
        }
        if !self.sb.has_frame_index() {
            // The first index on an older volume: from this commit on, builds that do
            // not know indexes refuse it rather than leak its blocks.
            self.sb.features |= FEATURE_FRAME_INDEX;
            self.dirty.insert(0);
        }
        for l in 0..LEVELS {
            for k in before[l]..after[l] {
                let m = self.alloc_meta_block(1)?;
                self.owners.insert(
                    m,
                    Owner::FrameIndex {
                        ino,
                        level: l as u8,
                        index: k as u32,
                    },
                );
                stored.blocks[l].push(m);
            }
        }
        // The blocks whose contents changed: from the one the first new entry went
        // to, at every level (a branch above it counts one more child, or more below).
        for (l, blocks) in stored.blocks.iter().enumerate() {
            self.dirty
                .extend(blocks.iter().skip(old / span(l)).copied());
        }
        self.put_back(ino, stored);
        Ok(IndexAppend::Stored)
    }

    /// Drops file `ino`'s index (its blocks freed with the next commit) and sets or
    /// clears its incomplete flag: `reindex` clears it to build the index again, fsck
    /// and the engine set it when the index can no longer be trusted to be whole.
    pub fn drop_frame_index(&mut self, ino: Ino, incomplete: bool) -> Result<()> {
        self.check_writable()?;
        self.file(ino)?;
        self.cut_frame_index(ino, 0);
        let a = &mut self.inode_mut(ino)?.attr;
        if incomplete {
            a.flags |= FLAG_INDEX_INCOMPLETE;
        } else {
            a.flags &= !FLAG_INDEX_INCOMPLETE;
        }
        self.dirty_inode(ino);
        Ok(())
    }

    /// Flags file `ino`'s index incomplete (keyframes of its data are missing from
    /// it); the keyframes it holds stay.
    pub fn mark_index_incomplete(&mut self, ino: Ino) -> Result<()> {
        self.check_writable()?;
        self.file(ino)?;
        self.inode_mut(ino)?.attr.flags |= FLAG_INDEX_INCOMPLETE;
        self.dirty_inode(ino);
        Ok(())
    }

    /// The engine picked file `ino`'s index up again after a reopen and has found
    /// every keyframe of its data since the last one stored (`entries`): the
    /// incomplete flag it set when it started is cleared and they are appended, in
    /// the same transaction. Refused as [`Volume::append_frames`] refuses, and then
    /// the file stays flagged.
    pub fn complete_frame_index(
        &mut self,
        ino: Ino,
        entries: &[FrameEntry],
    ) -> Result<IndexAppend> {
        self.check_writable()?;
        self.file(ino)?;
        self.inode_mut(ino)?.attr.flags &= !FLAG_INDEX_INCOMPLETE;
        self.dirty_inode(ino);
        let appended = self.append_frames(ino, entries);
        if appended.is_err() {
            self.inode_mut(ino)?.attr.flags |= FLAG_INDEX_INCOMPLETE;
        }
        appended
    }

    /// File `ino` was cut to `size`: its index keeps the keyframes whose bytes remain
    /// and frees the blocks it no longer needs. (A cut to 0 drops it.)
    pub(super) fn cut_frame_index(&mut self, ino: Ino, size: u64) {
        let Some(mut stored) = self.frame_indexes.remove(&ino) else {
            return;
        };
        let old = stored.index.len();
        stored.index.truncate(size);
        let n = stored.index.len();
        if n == old {
            self.frame_indexes.insert(ino, stored);
            return;
        }
        let after = shape(n);
        for (blocks, keep) in stored.blocks.iter_mut().zip(after) {
            for m in blocks.split_off(keep) {
                self.free_meta_block(m, 1);
            }
            // The new last block of each level holds less (or counts fewer below).
            if let Some(&m) = blocks.last() {
                self.dirty.insert(m);
            }
        }
        self.put_back(ino, stored);
    }

    /// A write to file `ino` starting at byte `from` was applied: keyframes whose
    /// bytes reach past `from` go, and if any did the file is flagged incomplete.
    pub(super) fn overwrite_frame_index(&mut self, ino: Ino, from: u64) {
        let Some(n) = self.frame_indexes.get(&ino).map(|s| s.index.len()) else {
            return;
        };
        self.cut_frame_index(ino, from);
        if self.frame_indexes.get(&ino).map_or(0, |s| s.index.len()) < n {
            if let Some(i) = self.inodes.get_mut(&ino) {
                i.attr.flags |= FLAG_INDEX_INCOMPLETE;
            }
            self.dirty_inode(ino);
        }
    }

    /// File `ino` is being freed: its index blocks go with it.
    pub(super) fn free_frame_index(&mut self, ino: Ino) {
        if let Some(stored) = self.frame_indexes.remove(&ino) {
            for m in stored.blocks.iter().flatten() {
                if self.owners.get(m).is_some_and(|o| o.ino() == ino) {
                    self.free_meta_block(*m, 1);
                }
            }
        }
    }

    /// Keeps `stored` as `ino`'s index (none if empty), with the inode naming it.
    fn put_back(&mut self, ino: Ino, stored: StoredIndex) {
        stored.assert_shape(ino);
        let (root, count) = (stored.root(), stored.index.len() as u64);
        if count > 0 {
            self.frame_indexes.insert(ino, stored);
        }
        let a = &mut self
            .inodes
            .get_mut(&ino)
            .expect("an indexed file is in use")
            .attr;
        if (a.frame_index_root, a.frame_count) != (root, count) {
            a.frame_index_root = root;
            a.frame_count = count;
            self.dirty_inode(ino);
        }
    }

    /// The module's invariants, for `check_invariants`.
    pub(super) fn check_frame_indexes(&self) -> std::result::Result<(), String> {
        for (&ino, s) in &self.frame_indexes {
            let attr = &self
                .inodes
                .get(&ino)
                .ok_or(format!("inode {ino} has a frame index but is free"))?
                .attr;
            if (attr.frame_index_root, attr.frame_count) != (s.root(), s.index.len() as u64) {
                return Err(format!(
                    "inode {ino}: its record names a frame index at {} of {} keyframes, its index is at {} with {}",
                    attr.frame_index_root,
                    attr.frame_count,
                    s.root(),
                    s.index.len()
                ));
            }
            let want = shape(s.index.len());
            for (l, blocks) in s.blocks.iter().enumerate() {
                if blocks.len() != want[l] {
                    return Err(format!("inode {ino}: frame-index level {l} out of shape"));
                }
                for (k, b) in blocks.iter().enumerate() {
                    let mine = Owner::FrameIndex {
                        ino,
                        level: l as u8,
                        index: k as u32,
                    };
                    if self.owners.get(b) != Some(&mine) {
                        return Err(format!("inode {ino}: frame-index block {b} is not its own"));
                    }
                }
            }
        }
        Ok(())
    }

    /// The image of a frame-index block (`commit.rs`), or `None` if the owner has
    /// no such block (never, while the invariants hold).
    pub(super) fn frame_index_image(&self, ino: Ino, level: u8, index: u32) -> Option<IndexBlock> {
        let s = self.frame_indexes.get(&ino)?;
        let (l, k) = (level as usize, index as usize);
        (k < s.blocks.get(l)?.len()).then(|| s.image(l, k))
    }
}

/// Reads the frame index a loaded file record names: `Ok` with the index and its
/// blocks, or `Err` with what is wrong (the caller reports it and loads the file
/// without one). `read` reads and verifies a frame-index block, `None` if lost in
/// both copies; `taken` tells a block that another structure owns.
pub(super) fn load_index(
    sb: &Superblock,
    rec: &crate::format::inode::InodeRecord,
    mut read: impl FnMut(u64) -> Result<Option<Vec<u8>>>,
    taken: impl Fn(u64) -> bool,
) -> Result<std::result::Result<StoredIndex, String>> {
    let (root, count) = (rec.frame_index_root, rec.frame_count);
    if !sb.has_frame_index() {
        return Ok(Err(format!(
            "the record names one (root {root}, {count} keyframes) on a volume without frame indexes"
        )));
    }
    if root == 0 || count == 0 || count > MAX_ENTRIES as u64 {
        return Ok(Err(format!(
            "the record names {count} keyframes at block {root}"
        )));
    }
    let want = shape(count as usize);
    let height = want.iter().rposition(|&b| b > 0).expect("count > 0");
    let mut stored = StoredIndex::default();
    let mut decoded: Vec<Vec<IndexBlock>> = vec![vec![]; LEVELS];
    // Breadth-first from the root: each level's blocks in order.
    let mut level_blocks = vec![root];
    let mut seen = BTreeSet::new();
    for l in (0..=height).rev() {
        let mut next = vec![];
        for &b in &level_blocks {
            if b < sb.dynamic_start || b >= sb.dynamic_start + sb.dynamic_blocks {
                return Ok(Err(format!(
                    "frame-index block {b} lies outside the dynamic area"
                )));
            }
            if taken(b) || !seen.insert(b) {
                return Ok(Err(format!("frame-index block {b} is claimed twice")));
            }
            let Some(img) = read(b)? else {
                return Ok(Err(format!("frame-index block {b} is lost in both copies")));
            };
            let block = match crate::format::frame_index::decode(payload(&img)) {
                Ok(x) => x,
                Err(e) => return Ok(Err(format!("frame-index block {b}: {}", e.0))),
            };
            match (&block, l) {
                (IndexBlock::Leaf(entries), 0) => {
                    for e in entries {
                        if let Err(why) = stored.index.append(*e, rec.size_bytes) {
                            return Ok(Err(format!("frame-index block {b}: {why}")));
                        }
                    }
                }
                (IndexBlock::Branch { level, children }, l) if *level as usize == l => {
                    next.extend(children.iter().map(|c| u64::from(c.block)));
                }
                _ => return Ok(Err(format!("frame-index block {b} is not at level {l}"))),
            }
            decoded[l].push(block);
            stored.blocks[l].push(b);
        }
        level_blocks = next;
    }
    if stored.index.len() as u64 != count {
        return Ok(Err(format!(
            "it holds {} keyframes, the record says {count}",
            stored.index.len()
        )));
    }
    for l in 0..LEVELS {
        if stored.blocks[l].len() != want[l] {
            return Ok(Err(format!(
                "it has {} blocks at level {l}, {} keyframes take {}",
                stored.blocks[l].len(),
                count,
                want[l]
            )));
        }
        for (k, block) in decoded[l].iter().enumerate() {
            if *block != stored.image(l, k) {
                return Ok(Err(format!(
                    "frame-index block {} does not hold what its entries make",
                    stored.blocks[l][k]
                )));
            }
        }
    }
    Ok(Ok(stored))
}

impl Volume {
    /// `inode` with the index its record names loaded, if it names one and this is
    /// a full open (`entries`) of a regular file (anything else naming one is
    /// reported and cleared): kept with
    /// its blocks owned, or, damaged, reported and left out (the record then says
    /// none, flagged incomplete: what `fsck --repair` stores; the blocks become
    /// leaks it frees).
    pub(super) fn with_frame_index<D: crate::device::Device>(
        &mut self,
        r: &mut Reader<'_, D>,
        ino: Ino,
        mut inode: crate::meta::Inode,
        kind: Kind,
        entries: bool,
    ) -> Result<crate::meta::Inode> {
        if inode.attr.frame_index_root == 0 && inode.attr.frame_count == 0 {
            return Ok(inode);
        }
        if kind != Kind::File {
            r.report.problems.push((
                Some(ino),
                format!("inode {ino} is not a regular file but names a frame index; fsck --repair clears it"),
            ));
            inode.attr.frame_index_root = 0;
            inode.attr.frame_count = 0;
            return Ok(inode);
        }
        if !entries {
            return Ok(inode);
        }
        let owners = &self.owners;
        let loaded = load_index(
            r.sb,
            &inode.attr,
            |b| r.one_or_lose(b, BlockType::FrameIndex),
            |b| owners.contains_key(&b),
        )?;
        match loaded {
            Ok(stored) => {
                for (l, blocks) in stored.blocks.iter().enumerate() {
                    for (k, &b) in blocks.iter().enumerate() {
                        let at = Owner::FrameIndex {
                            ino,
                            level: l as u8,
                            index: k as u32,
                        };
                        self.owners.insert(b, at);
                    }
                }
                self.frame_indexes.insert(ino, stored);
            }
            Err(e) => {
                r.report.problems.push((
                    Some(ino),
                    format!("file inode {ino}: its frame index is damaged ({e}); fsck --repair drops it and `dvrfs reindex` builds it again"),
                ));
                inode.attr.frame_index_root = 0;
                inode.attr.frame_count = 0;
                inode.attr.flags |= FLAG_INDEX_INCOMPLETE;
            }
        }
        Ok(inode)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shape_grows_a_level_only_past_a_full_one() {
        assert_eq!(shape(0), [0, 0, 0]);
        assert_eq!(shape(1), [1, 0, 0]);
        assert_eq!(shape(101), [1, 0, 0]);
        assert_eq!(shape(102), [2, 1, 0]);
        assert_eq!(shape(101 * 126), [126, 1, 0]);
        assert_eq!(shape(101 * 126 + 1), [127, 2, 1]);
        assert_eq!(shape(MAX_ENTRIES), [126 * 126, 126, 1]);
    }
}
