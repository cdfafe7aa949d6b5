//! Allocation of blocks in the dynamic metadata area (directory blocks, indirect run
//! extents, symlink targets). Block numbers are absolute metadata block numbers.
//! A freed metadata block may be reused at once: its new contents reach the disk only
//! through the journal, in the same transaction as the free or a later one.

use super::Bitmap;

#[derive(Clone, Debug)]
pub struct MetaAlloc {
    start: u64,
    used: Bitmap,
    hint: u64,
}

impl MetaAlloc {
    pub fn new(start: u64, blocks: u64) -> Self {
        MetaAlloc {
            start,
            used: Bitmap::new(blocks),
            hint: 0,
        }
    }

    pub fn used(&self) -> &Bitmap {
        &self.used
    }

    pub fn set_used_bitmap(&mut self, used: Bitmap) {
        assert_eq!(
            used.len(),
            self.used.len(),
            "a metadata bitmap of another size (a dvrfs bug)"
        );
        self.used = used;
        self.hint = 0;
    }

    pub fn contains(&self, block: u64) -> bool {
        block >= self.start && block < self.start + self.used.len()
    }

    pub fn is_used(&self, block: u64) -> bool {
        self.contains(block) && self.used.get(block - self.start)
    }

    pub fn free_blocks(&self) -> u64 {
        self.used.len() - self.used.count_ones()
    }

    /// Index of `block` in the bitmap.
    pub fn index(&self, block: u64) -> u64 {
        block - self.start
    }

    pub fn alloc_one(&mut self) -> Option<u64> {
        let i = self.used.first_clear(self.hint, self.used.len())?;
        assert!(
            !self.used.get(i),
            "metadata block {} allocated while used (a dvrfs bug)",
            self.start + i
        );
        self.used.set(i, true);
        self.hint = i + 1;
        Some(self.start + i)
    }

    /// `count` contiguous blocks, or `None`.
    pub fn alloc_contiguous(&mut self, count: u64) -> Option<u64> {
        if count == 1 {
            return self.alloc_one();
        }
        let (i, n) = self.used.find_clear_run(count)?;
        if n < count {
            return None;
        }
        for j in i..i + count {
            assert!(
                !self.used.get(j),
                "metadata block {} allocated while used (a dvrfs bug)",
                self.start + j
            );
            self.used.set(j, true);
        }
        Some(self.start + i)
    }

    pub fn free(&mut self, block: u64, count: u64) {
        for b in block..block + count {
            assert!(
                self.contains(b),
                "metadata block {b} freed outside the dynamic area (a dvrfs bug)"
            );
            let i = b - self.start;
            // As for data blocks: the loader checks the bitmap covers every owned
            // block, so a double free is a bug of the code.
            assert!(
                self.used.get(i),
                "double free of metadata block {b} (a dvrfs bug)"
            );
            self.used.set(i, false);
            self.hint = self.hint.min(i);
        }
    }
}
