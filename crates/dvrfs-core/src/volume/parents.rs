//! The parent of each directory, as a full load derives it from the tree.
//!
//! There are no `..` entries on disk (FORMAT.md section 9): a directory's parent is
//! the directory that names it. On an intact volume exactly one does. On a damaged
//! one (an entry rewritten to name another directory, checksums resealed) two
//! directories may name the same child directory; the rule is then the lowest
//! inode number among them (FORMAT.md section 13), so `..` resolves the same way at
//! every open whatever the hash seed, and it is the name fsck keeps (fsck walks the
//! directories in inode order and removes every later name of a directory).

use super::*;

impl Volume {
    /// Records, for every directory some loaded directory names, its parent: the
    /// lowest-numbered directory that names it (see the module docs). The root is its
    /// own parent.
    pub(super) fn link_parents(&mut self) {
        let mut namers: Vec<Ino> = self.dirs.keys().copied().collect();
        namers.sort_unstable();
        for parent in namers {
            for e in self.dirs[&parent].entries.values() {
                if e.kind == Kind::Dir {
                    // Ascending order: the first directory seen naming it is the lowest.
                    self.parents.entry(e.ino).or_insert(parent);
                }
            }
        }
        self.parents.insert(self.sb.root_ino, self.sb.root_ino);
    }
}
