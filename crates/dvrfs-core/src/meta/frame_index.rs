//! A file's frame index in memory: its keyframes in file order, appended as the
//! recording grows, cut when the file is cut, and looked up by frame number, UTC or
//! file offset; and laid out as the tree of frame-index blocks FORMAT.md section 10c
//! defines (`format/frame_index.rs`), for the volume to write.
//!
//! Invariants (checked on every append, asserted on every layout): entries strictly
//! increase in offset and frame number, UTC never goes backwards (a host clock step
//! back is flagged and held, never applied), and every entry's bytes lie within the
//! size the caller gives. An append that would break one is refused with the reason:
//! the caller (the engine, indexing a recording) stops indexing that file rather
//! than keep a wrong index.

use crate::format::frame_index::{
    Child, FrameEntry, IndexBlock, BRANCH_CHILDREN, LEAF_ENTRIES, MAX_BRANCH_LEVELS,
};

/// The most keyframes one file's index holds: what two branch levels reach.
pub const MAX_ENTRIES: usize = BRANCH_CHILDREN * BRANCH_CHILDREN * LEAF_ENTRIES;

/// Why an entry was not appended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AppendError {
    /// Not after the last entry (offset, frame number) or UTC going backwards.
    OutOfOrder(String),
    /// Its bytes end past the size the caller commits.
    PastSize { end: u64, size: u64 },
    /// The index holds [`MAX_ENTRIES`] already.
    Full,
}

impl std::fmt::Display for AppendError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AppendError::OutOfOrder(why) => write!(f, "{why}"),
            AppendError::PastSize { end, size } => {
                write!(
                    f,
                    "a keyframe's bytes end at {end}, past the file's size {size}"
                )
            }
            AppendError::Full => write!(f, "the index holds {MAX_ENTRIES} keyframes, its most"),
        }
    }
}

/// See the module docs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FrameIndex {
    entries: Vec<FrameEntry>,
}

/// Where an entry's bytes end.
fn end(e: &FrameEntry) -> u64 {
    e.offset
        .saturating_add(u64::from(e.data_delta))
        .saturating_add(u64::from(e.len))
}

impl FrameIndex {
    pub fn entries(&self) -> &[FrameEntry] {
        &self.entries
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Appends `e`, for a file whose size will be `size` when this is committed.
    pub fn append(&mut self, e: FrameEntry, size: u64) -> Result<(), AppendError> {
        if self.entries.len() >= MAX_ENTRIES {
            return Err(AppendError::Full);
        }
        if end(&e) > size {
            return Err(AppendError::PastSize { end: end(&e), size });
        }
        if let Some(last) = self.entries.last() {
            if e.offset <= last.offset || e.number <= last.number {
                return Err(AppendError::OutOfOrder(format!(
                    "keyframe at {} (frame {}) after one at {} (frame {})",
                    e.offset, e.number, last.offset, last.number
                )));
            }
            if e.utc_ns < last.utc_ns {
                return Err(AppendError::OutOfOrder(format!(
                    "UTC {} before the previous keyframe's {}",
                    e.utc_ns, last.utc_ns
                )));
            }
        }
        self.entries.push(e);
        Ok(())
    }

    /// The file was cut to `size`: the index keeps the entries before the first
    /// whose bytes do not all remain (a keyframe's bytes end before the next one's
    /// start in both containers, so these are the ones within `size`).
    pub fn truncate(&mut self, size: u64) {
        let keep = self
            .entries
            .iter()
            .position(|e| end(e) > size)
            .unwrap_or(self.entries.len());
        self.entries.truncate(keep);
    }

    /// Keeps the first `len` entries (an append given back).
    pub fn cut_to(&mut self, len: usize) {
        self.entries.truncate(len);
    }

    /// The first keyframe at or after file offset `offset` (where a reader that
    /// starts at `offset` can begin).
    pub fn at_or_after_offset(&self, offset: u64) -> Option<&FrameEntry> {
        let i = self.entries.partition_point(|e| e.offset < offset);
        self.entries.get(i)
    }

    /// The first keyframe at or after the moment `utc_ns` (where an export that ends
    /// at `utc_ns` ends its last GOP).
    pub fn at_or_after_utc(&self, utc_ns: i64) -> Option<&FrameEntry> {
        let i = self.entries.partition_point(|e| e.utc_ns < utc_ns);
        self.entries.get(i)
    }

    /// The last keyframe at or before frame `number`: where a player of frame
    /// `number` starts decoding.
    pub fn at_or_before_frame(&self, number: u32) -> Option<&FrameEntry> {
        let i = self.entries.partition_point(|e| e.number <= number);
        i.checked_sub(1).map(|i| &self.entries[i])
    }

    /// The last keyframe at or before the moment `utc_ns`.
    pub fn at_or_before_utc(&self, utc_ns: i64) -> Option<&FrameEntry> {
        let i = self.entries.partition_point(|e| e.utc_ns <= utc_ns);
        i.checked_sub(1).map(|i| &self.entries[i])
    }

    /// The last keyframe starting at or before file offset `offset`.
    pub fn at_or_before_offset(&self, offset: u64) -> Option<&FrameEntry> {
        let i = self.entries.partition_point(|e| e.offset <= offset);
        i.checked_sub(1).map(|i| &self.entries[i])
    }

    /// The index as frame-index blocks, leaves first then each level of branches up
    /// to the root (the last block), with the block numbers `alloc` gives them in
    /// that order. An empty index has no blocks.
    pub fn layout(&self, mut alloc: impl FnMut() -> u32) -> Vec<(u32, IndexBlock)> {
        let mut out = Vec::new();
        let mut level: Vec<Child> = Vec::new();
        for leaf in self.entries.chunks(LEAF_ENTRIES) {
            let block = alloc();
            level.push(Child {
                block,
                below: leaf.len() as u32,
                offset: leaf[0].offset,
                number: leaf[0].number,
                utc_ns: leaf[0].utc_ns,
            });
            out.push((block, IndexBlock::Leaf(leaf.to_vec())));
        }
        let mut height = 0u8;
        while level.len() > 1 {
            height += 1;
            assert!(height <= MAX_BRANCH_LEVELS, "MAX_ENTRIES bounds the height");
            let mut up = Vec::new();
            for group in level.chunks(BRANCH_CHILDREN) {
                let block = alloc();
                up.push(Child {
                    block,
                    below: group.iter().map(|c| c.below).sum(),
                    offset: group[0].offset,
                    number: group[0].number,
                    utc_ns: group[0].utc_ns,
                });
                out.push((
                    block,
                    IndexBlock::Branch {
                        level: height,
                        children: group.to_vec(),
                    },
                ));
            }
            level = up;
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(i: u32) -> FrameEntry {
        FrameEntry {
            offset: u64::from(i) * 2_000_000,
            data_delta: 0,
            len: 300_000,
            number: i * 50,
            flags: 0,
            pts_90k: i64::from(i) * 180_000,
            utc_ns: 1_795_000_000_000_000_000 + i64::from(i) * 2_000_000_000,
        }
    }

    fn index(n: u32) -> FrameIndex {
        let mut ix = FrameIndex::default();
        for i in 0..n {
            ix.append(key(i), u64::MAX).unwrap();
        }
        ix
    }

    #[test]
    fn lookups_find_the_keyframe_at_or_before_the_target() {
        let ix = index(1000);
        assert_eq!(ix.at_or_before_frame(0).unwrap().number, 0);
        assert_eq!(ix.at_or_before_frame(9000).unwrap().number, 9000);
        assert_eq!(ix.at_or_before_frame(9049).unwrap().number, 9000);
        let t = key(300).utc_ns + 1_999_999_999;
        assert_eq!(ix.at_or_before_utc(t).unwrap().number, 300 * 50);
        assert!(ix.at_or_before_utc(key(0).utc_ns - 1).is_none());
        assert_eq!(
            ix.at_or_before_offset(2_000_000 * 7 + 5).unwrap().number,
            350
        );
        assert_eq!(FrameIndex::default().at_or_before_frame(5), None);
    }

    #[test]
    fn an_append_out_of_order_past_the_size_or_back_in_time_is_refused() {
        let mut ix = index(3);
        assert!(matches!(
            ix.append(key(1), u64::MAX),
            Err(AppendError::OutOfOrder(_))
        ));
        let mut back = key(3);
        back.utc_ns = key(1).utc_ns;
        assert!(matches!(
            ix.append(back, u64::MAX),
            Err(AppendError::OutOfOrder(_))
        ));
        assert_eq!(
            ix.append(key(3), 6_000_000),
            Err(AppendError::PastSize {
                end: 6_300_000,
                size: 6_000_000
            })
        );
        assert_eq!(ix.len(), 3, "nothing refused was kept");
        ix.append(key(3), 6_300_000).unwrap();
    }

    #[test]
    fn a_cut_keeps_exactly_the_keyframes_whose_bytes_remain() {
        let mut ix = index(10);
        ix.truncate(2_000_000 * 5 + 300_000);
        assert_eq!(ix.len(), 6);
        ix.truncate(2_000_000 * 5 + 299_999);
        assert_eq!(ix.len(), 5);
        ix.truncate(0);
        assert!(ix.is_empty());
    }

    #[test]
    fn the_layout_is_a_tree_of_full_blocks_whose_root_counts_every_entry() {
        for n in [0u32, 1, 101, 102, 12_726, 12_727, 30_000] {
            let ix = index(n);
            let mut next = 100u32;
            let blocks = ix.layout(|| {
                next += 1;
                next
            });
            let leaves = blocks
                .iter()
                .filter(|(_, b)| matches!(b, IndexBlock::Leaf(_)))
                .count();
            assert_eq!(leaves, (n as usize).div_ceil(LEAF_ENTRIES), "{n}");
            match blocks.last() {
                None => assert_eq!(n, 0),
                Some((_, IndexBlock::Leaf(e))) => assert_eq!(e.len(), n as usize),
                Some((_, IndexBlock::Branch { children, level })) => {
                    let below: u32 = children.iter().map(|c| c.below).sum();
                    assert_eq!(below, n);
                    assert_eq!(
                        *level,
                        if n as usize > LEAF_ENTRIES * BRANCH_CHILDREN {
                            2
                        } else {
                            1
                        }
                    );
                }
            }
            // Every block encodes and decodes to itself.
            let mut p = vec![0u8; crate::format::PAYLOAD_BYTES];
            for (_, b) in &blocks {
                crate::format::frame_index::encode(b, &mut p);
                assert_eq!(&crate::format::frame_index::decode(&p).unwrap(), b);
            }
        }
    }
}
