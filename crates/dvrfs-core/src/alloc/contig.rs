//! Contiguous allocation with aggressive preallocation (HERMES 5).
//!
//! A file that needs a block takes the next one of its preallocation window. When it
//! has none left, it reserves a new window of `prealloc_blocks` (default 64) free
//! blocks: right after its last block if that block is free (so the file stays
//! contiguous), else the first run of that many free blocks, else the longest free run.
//! Closing the file returns the unused part of the window.

use super::{DataAlloc, Ino, Window};

pub(super) fn pick(a: &mut DataAlloc, ino: Ino, prev: Option<u64>) -> Option<u64> {
    if let Some(w) = a.windows.get_mut(&ino) {
        // Only continue a window where the file continues; a write elsewhere in the
        // file (a hole being filled) starts a fresh window.
        if w.next < w.end && prev.is_none_or(|p| p + 1 == w.next) {
            let b = w.next;
            // The window's blocks were reserved when it was made and nothing else
            // takes a busy block.
            assert!(
                a.busy.get(b) && !a.used.get(b),
                "data block {b} of inode {ino}'s window is not reserved (a dvrfs bug)"
            );
            w.next += 1;
            return Some(b);
        }
    }
    a.release(ino);
    // A window never takes blocks held for other files.
    let others = a.held_total - a.holds.get(&ino).copied().unwrap_or(0);
    let want = a
        .prealloc_blocks
        .min(a.free_blocks.saturating_sub(others))
        .max(1);
    let n = a.used.len();
    let after_prev = prev.map(|p| p + 1).filter(|&s| s < n && !a.busy.get(s));
    let (start, len) = match after_prev {
        Some(s) => (s, a.busy.clear_run_at(s, want)),
        None => a.busy.find_clear_run(want)?,
    };
    debug_assert!(len >= 1);
    for b in start..start + len {
        assert!(
            !a.busy.get(b),
            "data block {b} taken for a window while busy (a dvrfs bug)"
        );
        a.busy.set(b, true);
    }
    a.free_blocks -= len;
    a.windows.insert(
        ino,
        Window {
            next: start + 1,
            end: start + len,
        },
    );
    Some(start)
}
