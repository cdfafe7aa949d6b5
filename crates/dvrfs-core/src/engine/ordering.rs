//! Ordering: which operations may start, and in what order, per file.
//!
//! Operations wait, deferred, in submission order; each orders on keys
//! ([`OrderKey`]: its file, or the namespace as a whole), and one that must wait keeps
//! every later one with a key of its own waiting. Per file, [`FileIo`] records the
//! reads and writes running. Invariants: a file's writes are applied in the order
//! they started (`FileIo::writes`); no two running writes of a file share a 4 KiB
//! sector, and no running read checks bytes a running rewrite changes (their spans
//! never overlap); an operation that frees a file's data starts only when the file
//! has no I/O running; an operation starts only when the transaction being built has
//! room for what it dirties.

use super::{Body, Engine, Now, Op, OpId};
use crate::meta::Ino;
use std::collections::{BTreeSet, VecDeque};

/// Per-file ordering state.
#[derive(Default)]
pub(super) struct FileIo {
    /// Reads and writes running (planned, not finished).
    pub(super) data_ops: u32,
    /// Running writes in the order they must be applied.
    pub(super) writes: VecDeque<OpId>,
    /// 4 KiB-rounded file ranges of the running writes, and whether each rewrites
    /// bytes the file had (changing their checksums).
    pub(super) spans: Vec<(OpId, (u64, u64), bool)>,
    /// File ranges (whole checksum granules) of the running reads: a rewrite of
    /// bytes they check waits for them.
    pub(super) reads: Vec<(OpId, (u64, u64))>,
    /// A write failed: it and every later write of the file fail, and new writes wait
    /// until those are gone (they were planned on top of it).
    pub(super) poisoned_from: Option<(OpId, String)>,
}

impl FileIo {
    pub(super) fn idle(&self) -> bool {
        self.data_ops == 0 && self.writes.is_empty()
    }

    /// A read or write of file `ino` that `data_ops` counted is over.
    pub(super) fn data_op_over(&mut self, ino: Ino) {
        assert!(
            self.data_ops > 0,
            "file {ino}: a read or write ended that was not counted as running"
        );
        self.data_ops -= 1;
    }
}

/// What deferred operations order on: a file, or the namespace as a whole.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum OrderKey {
    File(Ino),
    Namespace,
}

pub(super) fn align_down(x: u64) -> u64 {
    x / 4096 * 4096
}

pub(super) fn align_up(x: u64) -> u64 {
    x.div_ceil(4096) * 4096
}

pub(super) fn overlap(a: (u64, u64), b: (u64, u64)) -> bool {
    a.0 < b.1 && b.0 < a.1
}

impl Engine {
    pub(super) fn order_keys(&self, id: OpId) -> Vec<OrderKey> {
        let Some(st) = self.ops.get(&id) else {
            return vec![];
        };
        match &st.body {
            Body::Read { ino, .. } | Body::Write { ino, .. } | Body::Truncate { ino, .. } => {
                vec![OrderKey::File(*ino)]
            }
            Body::Other(op) => match op {
                Op::Fsync | Op::OpenFile { .. } => vec![],
                // The last close of an orphan frees its data: after the file's I/O.
                Op::CloseFile { ino } => match self.vol.frees_on_close(*ino) {
                    Some(v) => vec![OrderKey::Namespace, OrderKey::File(v)],
                    None => vec![],
                },
                Op::Unmount => vec![OrderKey::Namespace],
                Op::Unlink { parent, name } => {
                    let mut k = vec![OrderKey::Namespace];
                    if let Some(v) = self.vol.frees_on_unlink(*parent, name) {
                        k.push(OrderKey::File(v));
                    }
                    k
                }
                Op::Rename {
                    dst_parent,
                    dst_name,
                    ..
                } => {
                    let mut k = vec![OrderKey::Namespace];
                    if let Some(v) = self.vol.frees_on_unlink(*dst_parent, dst_name) {
                        k.push(OrderKey::File(v));
                    }
                    k
                }
                _ => vec![OrderKey::Namespace],
            },
        }
    }

    /// Tries the deferred operations in order; one blocked on a key keeps every later
    /// one with that key waiting. Returns whether any started or finished.
    pub(super) fn retry_deferred(&mut self, now: Now) -> bool {
        if self.deferred.is_empty() {
            return false;
        }
        let mut changed = false;
        let mut blocked: BTreeSet<OrderKey> = BTreeSet::new();
        let list: Vec<OpId> = self.deferred.drain(..).collect();
        let mut keep = VecDeque::new();
        for id in list {
            if !self.ops.contains_key(&id) {
                continue;
            }
            let keys = self.order_keys(id);
            if keys.iter().any(|k| blocked.contains(k)) || !self.try_start(id, now) {
                blocked.extend(keys);
                keep.push_back(id);
            } else {
                changed = true;
            }
        }
        // try_start may have deferred nothing new, but keep any pushed meanwhile.
        keep.extend(self.deferred.drain(..));
        self.deferred = keep;
        changed
    }

    /// Starts (or finishes) a deferred operation; false if it must wait.
    pub(super) fn try_start(&mut self, id: OpId, now: Now) -> bool {
        let kind = match &self.ops[&id].body {
            Body::Read { .. } => 0,
            Body::Write { .. } => 1,
            Body::Truncate { .. } => 2,
            Body::Other(_) => 3,
        };
        if kind < 3 && self.op_queue_full() {
            return false; // waits for room in the queue (`bounds.rs`)
        }
        match kind {
            0 => self.start_read(id, now),
            1 => self.start_write(id, now),
            2 => self.start_truncate(id, now),
            _ => self.start_other(id, now),
        }
    }

    pub(super) fn file_io(&mut self, ino: Ino) -> &mut FileIo {
        self.files.entry(ino).or_default()
    }

    /// Blocks an operation that frees a file's data may dirty at most.
    pub(super) fn destructive_estimate(&self) -> usize {
        let sb = self.vol.superblock();
        16 + sb.data_bitmap_blocks as usize + sb.meta_bitmap_blocks as usize
    }

    /// Whether the transaction being built has room for `estimate` more dirty blocks.
    /// If not and no commit runs, one is cut now (then there is room); if one runs,
    /// the caller waits for it.
    pub(super) fn room_for(&mut self, estimate: usize, now: Now) -> bool {
        let limit = self.vol.max_transaction_images() / 2;
        let dirty = self.vol.dirty_blocks();
        if dirty == 0 || dirty + estimate <= limit {
            return true;
        }
        self.commit.want_by(now.mono_ns);
        if self.commit.busy() {
            return false;
        }
        self.commit_step(now);
        self.vol.dirty_blocks() + estimate <= limit || self.vol.dirty_blocks() == 0
    }
}
