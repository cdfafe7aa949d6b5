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

use super::{Body, Engine, Now, Op, OpId, Stage};
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

fn align_down(x: u64) -> u64 {
    x / 4096 * 4096
}

fn align_up(x: u64) -> u64 {
    x.div_ceil(4096) * 4096
}

fn overlap(a: (u64, u64), b: (u64, u64)) -> bool {
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
                Op::CloseFile { ino, .. } => match self.vol.frees_on_close(*ino) {
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

    fn file_io(&mut self, ino: Ino) -> &mut FileIo {
        self.files.entry(ino).or_default()
    }

    /// Whether file `ino` has no read or write running: an operation that frees its
    /// data may start.
    pub(super) fn file_idle(&self, ino: Ino) -> bool {
        self.files.get(&ino).is_none_or(FileIo::idle)
    }

    /// Whether a read checking `range` of file `ino` (whole checksum granules) must
    /// wait: a running rewrite changes bytes in it.
    pub(super) fn read_must_wait(&self, ino: Ino, range: (u64, u64)) -> bool {
        self.files
            .get(&ino)
            .is_some_and(|f| f.spans.iter().any(|(_, s, rw)| *rw && overlap(*s, range)))
    }

    /// Whether a new write of file `ino` must wait for an earlier failed one and the
    /// writes planned on top of it to be gone.
    pub(super) fn file_poisoned(&self, ino: Ino) -> bool {
        self.files
            .get(&ino)
            .is_some_and(|f| f.poisoned_from.is_some())
    }

    /// The file range a write of `[offset, offset + len)` occupies while it runs
    /// (`planned`: the file's size with the writes planned so far), and whether it
    /// rewrites bytes the file has.
    pub(super) fn write_span(&self, offset: u64, len: u64, planned: u64) -> ((u64, u64), bool) {
        let end = offset.saturating_add(len);
        let rewrites = offset < planned;
        // A rewrite of checked bytes rewrites their whole granules, and waits for the
        // reads checking them.
        let span = if rewrites {
            let g = self.granule_range(offset, len);
            (g.0.min(align_down(offset)), g.1.max(align_up(end)))
        } else {
            (align_down(offset.min(planned)), align_up(end))
        };
        (span, rewrites)
    }

    /// Whether a write of file `ino` over `span` must wait: it shares a 4 KiB sector
    /// with a running write, or (a rewrite) changes bytes a running read checks.
    pub(super) fn write_must_wait(&self, ino: Ino, span: (u64, u64), rewrites: bool) -> bool {
        self.files.get(&ino).is_some_and(|f| {
            f.spans.iter().any(|(_, s, _)| overlap(*s, span))
                || (rewrites && f.reads.iter().any(|(_, r)| overlap(*r, span)))
        })
    }

    /// Read `id` of file `ino`, checking `range`, runs.
    pub(super) fn read_started(&mut self, id: OpId, ino: Ino, range: (u64, u64)) {
        let f = self.file_io(ino);
        f.data_ops += 1;
        f.reads.push((id, range));
    }

    /// Read `id` of file `ino` has all its requests back.
    pub(super) fn read_ended(&mut self, id: OpId, ino: Ino) {
        if let Some(f) = self.files.get_mut(&ino) {
            f.data_op_over(ino);
            let before = f.reads.len();
            f.reads.retain(|(o, _)| *o != id);
            debug_assert_eq!(
                before,
                f.reads.len() + 1,
                "file {ino}: read {id} ended holding other than one checked range"
            );
            if f.idle() && f.poisoned_from.is_none() {
                self.files.remove(&ino);
            }
        }
    }

    /// Write (or growing truncate) `id` of file `ino` runs over `span`: it is applied
    /// after every write of the file that started before it.
    pub(super) fn write_started(&mut self, id: OpId, ino: Ino, span: (u64, u64), rewrites: bool) {
        let f = self.file_io(ino);
        f.writes.push_back(id);
        f.spans.push((id, span, rewrites));
        f.data_ops += 1;
    }

    /// Whether write `id` is the newest running write of file `ino` (the only one a
    /// cancel may take back: no later write was planned on top of it).
    pub(super) fn is_newest_write(&self, id: OpId, ino: Ino) -> bool {
        self.files.get(&ino).and_then(|f| f.writes.back()) == Some(&id)
    }

    /// The newest running write of file `ino`, `id`, is cancelled.
    pub(super) fn newest_write_dropped(&mut self, id: OpId, ino: Ino) {
        let f = self.files.get_mut(&ino).expect("running write has a file");
        let back = f.writes.pop_back();
        assert_eq!(
            back,
            Some(id),
            "file {ino}: write {id} dropped while not the newest"
        );
        let before = f.spans.len();
        f.spans.retain(|(o, _, _)| *o != id);
        debug_assert_eq!(
            before,
            f.spans.len() + 1,
            "file {ino}: write {id} dropped holding other than one span"
        );
        f.data_op_over(ino);
    }

    /// A request of write `id` of file `ino` failed: unless an earlier write did, it
    /// fails every later write of the file still running (they were planned on top of
    /// it). Returns whether this write poisoned the file.
    pub(super) fn poison_file(&mut self, id: OpId, ino: Ino, msg: String) -> bool {
        let f = self.file_io(ino);
        if f.poisoned_from.is_some() {
            return false;
        }
        f.poisoned_from = Some((id, msg));
        true
    }

    /// The oldest running write of file `ino`, taken off the file's queue if its data
    /// is on the disk (writes apply in the order they started), with the failure of an
    /// earlier write it inherits.
    pub(super) fn take_applicable_write(&mut self, ino: Ino) -> Option<(OpId, Option<String>)> {
        let &front = self.files.get(&ino)?.writes.front()?;
        if self.ops[&front].stage != Stage::DataDone {
            return None;
        }
        let f = self.files.get_mut(&ino).expect("file with writes");
        f.writes.pop_front();
        let before = f.spans.len();
        f.spans.retain(|(o, _, _)| *o != front);
        debug_assert_eq!(
            before,
            f.spans.len() + 1,
            "file {ino}: write {front} applied holding other than one span"
        );
        f.data_op_over(ino);
        let poison = f
            .poisoned_from
            .as_ref()
            .filter(|(from, _)| front >= *from)
            .map(|(_, m)| m.clone());
        Some((front, poison))
    }

    /// After file `ino`'s applicable writes were applied: a failure's poison ends with
    /// the last write planned on top of it, and an idle file's record goes.
    pub(super) fn writes_settled(&mut self, ino: Ino) {
        if let Some(f) = self.files.get_mut(&ino) {
            if f.writes.is_empty() {
                f.poisoned_from = None;
            }
            if f.idle() && f.poisoned_from.is_none() {
                self.files.remove(&ino);
            }
        }
    }

    /// File `ino` is gone: its record too.
    pub(super) fn forget_file(&mut self, ino: Ino) {
        self.files.remove(&ino);
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
