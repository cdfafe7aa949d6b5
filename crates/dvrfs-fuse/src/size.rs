//! A file's size as `getattr` reports it, read without the file's lock.
//!
//! A writer holds its file's lock while it hands a full chunk to the engine, and the
//! hand-over first waits for the previous chunk to land (tens of milliseconds on a
//! hard disk). `getattr` used to read the pending size under that lock, so an `ls -l`
//! beside a `cp` waited for the copy's disk writes (the slowest of the `ls -lR` beside
//! the stress test's `cp`, mount.md). Instead each open file keeps a *floor*: the end
//! of the furthest byte a `write` gathered since the file was opened or truncated,
//! raised before the `write` returns. `getattr` reads the floor, then the size the
//! engine has applied, and reports the larger:
//!
//! - never smaller than what a completed `write` made the file: the floor was raised
//!   before that write returned, and it only comes down at a truncate (or when a
//!   chunk failed to reach the disk: its bytes are not in the file);
//! - never a size that goes backwards between two `getattr` calls: a chunk that lands
//!   raises the applied size to its end before the floor could be lowered, and the
//!   applied size is read after the floor.

use dvrfs_core::meta::Ino;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// The floors of the open files (those with a `FileState`).
#[derive(Default)]
pub struct Floors(Mutex<HashMap<Ino, Arc<AtomicU64>>>);

impl Floors {
    /// The floor of a file whose state is being made: 0, nothing gathered yet.
    pub fn make(&self, ino: Ino) -> Arc<AtomicU64> {
        let f = Arc::new(AtomicU64::new(0));
        crate::lock(&self.0).insert(ino, f.clone());
        f
    }

    /// The file's state is gone (its last close landed everything it gathered).
    pub fn forget(&self, ino: Ino) {
        crate::lock(&self.0).remove(&ino);
    }

    /// The file was truncated (after everything gathered landed): nothing of it is
    /// pending.
    pub fn truncated(&self, ino: Ino) {
        if let Some(f) = crate::lock(&self.0).get(&ino) {
            f.store(0, Ordering::SeqCst);
        }
    }

    /// The size of `ino` to report: the larger of its floor and the applied size
    /// `applied` reads (called after the floor is read); `None` for a file not open.
    pub fn size(&self, ino: Ino, applied: impl FnOnce() -> u64) -> Option<u64> {
        let floor = crate::lock(&self.0).get(&ino).cloned()?;
        let pending = floor.load(Ordering::SeqCst);
        Some(applied().max(pending))
    }
}

/// Raises a floor to `end` (a `write` gathered bytes up to it).
pub fn raise(floor: &AtomicU64, end: u64) {
    floor.fetch_max(end, Ordering::SeqCst);
}

/// A chunk failed to reach the disk: its bytes are not in the file, and the size is
/// what the engine applied (and what is still gathered, raised again by its writes).
pub fn failed(floor: &AtomicU64) {
    floor.store(0, Ordering::SeqCst);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_size_is_never_below_a_gathered_end_nor_below_what_landed() {
        let floors = Floors::default();
        assert_eq!(floors.size(7, || 10), None, "not open");
        let f = floors.make(7);
        raise(&f, 4096);
        assert_eq!(floors.size(7, || 0), Some(4096), "gathered, not landed");
        raise(&f, 100);
        assert_eq!(floors.size(7, || 0), Some(4096), "a floor only rises");
        assert_eq!(floors.size(7, || 8192), Some(8192), "landed beyond it");
        floors.truncated(7);
        assert_eq!(floors.size(7, || 10), Some(10), "cut to 10");
        raise(&f, 20);
        failed(&f);
        assert_eq!(
            floors.size(7, || 10),
            Some(10),
            "the failed chunk is not in it"
        );
        floors.forget(7);
        assert_eq!(floors.size(7, || 10), None);
    }
}
