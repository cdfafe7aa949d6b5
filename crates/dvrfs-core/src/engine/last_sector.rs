//! The last sector of files being appended to, so that the next append does not read
//! it back.
//!
//! Device accesses are 4 KiB sectors. A write that starts inside a sector holding
//! bytes of the file must keep them: the plan reads the sector first
//! (read-modify-write, `volume/data.rs`), a positioning of its own on a hard disk. Appends
//! that do not end on a sector boundary are common where durability is bounded in
//! time: a recording's short request at each gather point, the FUSE mount's partial
//! chunk handed over at a gather point, a small `write` of a plain writer. Each left
//! the next append a read.
//!
//! So the engine keeps, per file, the bytes of the sector where its last append
//! ended, from the sector's start up to the end: a [`Tail`]. The next write that
//! starts exactly there is composed with them instead (`Body::Write::head`). Writes
//! are planned in the order a file's writes were submitted and each plan sees the
//! pending writes before it, so the tail is the planned file's bytes; it is dropped
//! whenever anything else could change them: a write that does not end at the file's
//! end and touches the sector, a truncate, a name removal that may free the inode, a
//! failed write. At most [`MAX_FILES`] files are remembered (the oldest is forgotten
//! first): a forgotten tail only costs the read it would have saved.

use super::buf::{self, IoBuf};
use crate::device::IO_ALIGN_BYTES;
use crate::meta::Ino;
use std::collections::BTreeMap;

/// Files whose last sector the engine remembers at most (4 KiB each at most).
pub const MAX_FILES: usize = 1024;

/// A file's bytes from `at` (a sector start) to `at + bytes.len()` (its planned end).
struct Tail {
    at: u64,
    bytes: IoBuf,
    /// When it was last set, for forgetting the oldest.
    seq: u64,
}

#[derive(Default)]
pub(super) struct LastSectors {
    map: BTreeMap<Ino, Tail>,
    seq: u64,
}

fn sector_start(x: u64) -> u64 {
    x / IO_ALIGN_BYTES * IO_ALIGN_BYTES
}

impl LastSectors {
    /// A write of `data` at `offset` on file `ino` whose planned size before it is
    /// `planned` is being planned: returns the head it is composed with (the file's
    /// bytes from the start of the sector holding `offset` up to it), and remembers
    /// the tail the file has after it.
    pub(super) fn plan_write(
        &mut self,
        ino: Ino,
        offset: u64,
        data: &IoBuf,
        planned: u64,
    ) -> Option<IoBuf> {
        let start = sector_start(offset);
        let kept = self.map.remove(&ino);
        let head = kept
            .filter(|t| {
                // Every plan of the file updates or drops its tail, so a tail ending
                // at `offset` is the planned end; checked all the same, since a stale
                // tail would write old bytes.
                t.at == start && t.at + t.bytes.len() as u64 == offset && offset == planned
            })
            .filter(|_| offset > start)
            .map(|t| t.bytes);
        let end = offset + data.len() as u64;
        if end < planned {
            // Inside the file: whatever tail it had may be stale now (dropped above).
            return head;
        }
        let last = sector_start(end);
        let bytes = if end == last {
            None
        } else if last >= offset {
            let n = (end - last) as usize;
            let mut t = data.sibling(n);
            buf::copy(data, (last - offset) as usize, &mut t, 0, n);
            Some(t)
        } else {
            // The whole write lies inside the sector the head began: head and write.
            head.as_ref().map(|h| {
                let mut t = data.sibling(h.len() + data.len());
                buf::copy(h, 0, &mut t, 0, h.len());
                buf::copy(data, 0, &mut t, h.len(), data.len());
                t
            })
        };
        if let Some(bytes) = bytes {
            self.seq += 1;
            self.map.insert(
                ino,
                Tail {
                    at: last,
                    bytes,
                    seq: self.seq,
                },
            );
            if self.map.len() > MAX_FILES {
                let oldest = self
                    .map
                    .iter()
                    .min_by_key(|(_, t)| t.seq)
                    .map(|(i, _)| *i)
                    .expect("more than MAX_FILES entries");
                self.map.remove(&oldest);
            }
        }
        head
    }

    /// File `ino`'s bytes may change other than by an append the engine plans
    /// (truncate, a failed write, the inode freed).
    pub(super) fn forget(&mut self, ino: Ino) {
        self.map.remove(&ino);
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.map.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes(b: &[u8]) -> IoBuf {
        IoBuf::from_slice(b)
    }

    #[test]
    fn an_append_after_a_short_one_gets_the_shared_sector() {
        let mut t = LastSectors::default();
        let first: Vec<u8> = (0..5000u32).map(|i| i as u8).collect();
        assert!(t.plan_write(7, 0, &bytes(&first), 0).is_none());
        let head = t
            .plan_write(7, 5000, &bytes(&[1; 100]), 5000)
            .expect("head");
        assert_eq!(head.bytes().unwrap(), &first[4096..]);
        // Inside one sector: the head grows by the write.
        let head = t.plan_write(7, 5100, &bytes(&[2; 10]), 5100).expect("head");
        assert_eq!(head.len(), 5100 - 4096);
        assert_eq!(&head.bytes().unwrap()[..904], &first[4096..]);
        assert_eq!(&head.bytes().unwrap()[904..], &[1; 100][..]);
    }

    #[test]
    fn a_write_elsewhere_or_a_forget_drops_the_tail() {
        let mut t = LastSectors::default();
        t.plan_write(1, 0, &bytes(&[0; 100]), 0);
        // A rewrite inside the file.
        assert!(t.plan_write(1, 10, &bytes(&[9; 10]), 100).is_none());
        assert!(t.plan_write(1, 100, &bytes(&[9; 10]), 100).is_none());
        t.forget(1);
        assert!(t.plan_write(1, 110, &bytes(&[9; 10]), 110).is_none());
        // Ending on a sector boundary leaves nothing to remember.
        t.plan_write(2, 0, &bytes(&[0; 4096]), 0);
        assert!(t.plan_write(2, 4096, &bytes(&[0; 10]), 4096).is_none());
    }

    #[test]
    fn the_oldest_tail_is_forgotten_past_the_limit() {
        let mut t = LastSectors::default();
        for ino in 0..=MAX_FILES as u32 {
            t.plan_write(ino, 0, &bytes(&[1; 10]), 0);
        }
        assert_eq!(t.len(), MAX_FILES);
        assert!(t.plan_write(0, 10, &bytes(&[1; 10]), 10).is_none());
        assert!(t
            .plan_write(MAX_FILES as u32, 10, &bytes(&[1; 10]), 10)
            .is_some());
    }
}
