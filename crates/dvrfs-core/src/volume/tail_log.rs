//! The tail log of a volume (FORMAT.md section 11a, `format/tail_log.rs`) as the
//! metadata sees it: the committed `[tail, head)` in the superblock, each file's
//! floor (a truncation makes older records of the file dead), and at open the
//! replay plan: which logged bytes are not in their files and must be written.
//!
//! **Replay rule.** The batches in `[tail, head)` are read in log order; an entry
//! (bytes `[offset, end)` of a file) is replayed only into the file it was logged
//! for (the inode in use, a regular file, the same generation), only when its batch
//! lies at or above the file's floor (no truncation since), and only the part past
//! the file's size, and only when it continues the file (`offset <= size`): streams
//! append, so anything else is not a tail of this file and is reported, never
//! written. The plan is computed against the sizes the replayed entries before it
//! leave, so consecutive entries of one recording chain. The engine writes the plan
//! (`engine/tail_log.rs`) through its ordinary write path at a writable open.
//!
//! **A read-only open** (`ls`, `stat`, `get`, `play`, `fsck` without `--repair`)
//! computes the same plan with the same code and writes nothing: it keeps, per file,
//! the bytes the plan appends ([`LoggedTail`], one contiguous run from the committed
//! size, since the plan's writes of a file chain), and [`Volume::stat`] reports the
//! size the replay would leave, and the engine's reads serve those bytes past the
//! committed size (`Engine::overlay_logged_tail`). So every reader sees what was made
//! durable, crashed volume or not. They are bounded by the live part of the ring
//! (at most 256 MiB, `MAX_TAIL_LOG_BLOCKS`-sized rings aside: `[tail, head)` never
//! exceeds the ring).
//!
//! Fault model: a header block that does not verify (torn, damaged, or left from an
//! earlier lap of the ring where this lap wrote nothing) is reported and the reader
//! steps to the next block; an entry whose bytes fail their CRC is reported and
//! skipped. Nothing here fails an open: the worst a damaged log does is lose the
//! tails it held, which the lost-tail lines then report.

use super::*;
use crate::device::Device;
use crate::format::tail_log::{decode_header, entry_crc, BatchHeader};
use crate::format::META_BLOCK_BYTES;

/// Bytes of the ring read at once.
const READ_CHUNK_BLOCKS: u64 = 256;

/// Most logged bytes a read-only open keeps in memory to serve past the files'
/// committed sizes: the largest ring mkfs makes by default. A larger ring
/// (`mkfs --tail-log`) can hold more live bytes; past this, the rest of a file's
/// tail is reported and served after the next writable open replays it.
pub const MAX_READ_ONLY_TAIL_BYTES: u64 = crate::layout::MAX_DEFAULT_TAIL_LOG_BYTES;

/// Logged bytes to write into a file at open.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReplayWrite {
    pub ino: Ino,
    pub generation: u32,
    /// The log position of the batch that held them (the engine keeps the log's
    /// tail there until they are in place).
    pub batch_pos: u64,
    pub offset_bytes: u64,
    pub bytes: Vec<u8>,
}

/// Logged bytes a read-only open serves past a file's committed size: what the
/// replay would append, `[from_bytes, from_bytes + bytes.len())`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LoggedTail {
    /// The file's committed size, where the bytes start.
    pub from_bytes: u64,
    pub bytes: Vec<u8>,
}

impl LoggedTail {
    pub fn end_bytes(&self) -> u64 {
        self.from_bytes + self.bytes.len() as u64
    }
}

/// What the open found in the tail log.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TailLogReport {
    /// The committed live part, `[tail, head)` (log positions).
    pub tail: u64,
    pub head: u64,
    /// Batches and entries found there.
    pub batches: u64,
    pub records: u64,
    /// What replay writes (a writable open) or would write (a read-only one): the
    /// entries, bytes and files.
    pub replay_records: u64,
    pub replay_bytes: u64,
    pub replay_files: u64,
    /// Entries whose bytes were already in their file, or whose file was removed
    /// or truncated since: nothing to do.
    pub settled_records: u64,
    /// Blocks or entries that could not be used, and why (reported, skipped).
    pub problems: Vec<String>,
    /// Set by the engine once the replay's writes are applied.
    pub replayed: bool,
}

impl Volume {
    /// Log positions: the committed tail and head (`[tail, head)` is live).
    pub fn tail_log_bounds(&self) -> (u64, u64) {
        (self.sb.tail_log_tail, self.sb.tail_log_head)
    }

    /// Sets the tail and head the next transaction commits (the superblock joins it
    /// when they change).
    pub fn set_tail_log_bounds(&mut self, tail: u64, head: u64) {
        assert!(self.sb.has_tail_log(), "a tail log on a volume without one");
        assert!(
            tail <= head && head - tail <= self.sb.tail_log_blocks,
            "tail log [{tail}, {head}) does not fit a ring of {}",
            self.sb.tail_log_blocks
        );
        assert!(
            tail >= self.sb.tail_log_tail && head >= self.sb.tail_log_head,
            "the tail log moves forward only"
        );
        if (tail, head) != (self.sb.tail_log_tail, self.sb.tail_log_head) {
            self.sb.tail_log_tail = tail;
            self.sb.tail_log_head = head;
            self.dirty.insert(0);
        }
    }

    /// The tail-log floor of `ino`: its records in batches below it are dead.
    pub fn tail_floor(&self, ino: Ino) -> u64 {
        self.tail_floors.get(&ino).copied().unwrap_or(0)
    }

    /// A truncation of `ino`: nothing logged for it before now may be replayed.
    /// The floor goes into the inode's record with the truncation itself.
    pub(super) fn raise_tail_floor(&mut self, ino: Ino) {
        if self.sb.has_tail_log() {
            self.tail_floors.insert(ino, self.sb.tail_log_head);
            self.dirty_inode(ino);
        }
    }

    /// The generation of file `ino`, if it is a regular file in use.
    pub fn file_generation(&self, ino: Ino) -> Option<u32> {
        self.inodes
            .get(&ino)
            .filter(|i| i.kind() == Some(Kind::File))
            .map(|i| i.attr.generation)
    }

    /// The replay plan found at open (taken once, by the engine).
    pub fn take_tail_replay(&mut self) -> Vec<ReplayWrite> {
        std::mem::take(&mut self.tail_replay)
    }

    /// A read-only open: the replay plan becomes, per file, the bytes served past
    /// its committed size (nothing is written). The plan's writes of one file chain
    /// (each starts where the one before ended, the first at the committed size):
    /// `plan_batch` makes them so, and this checks it.
    pub(super) fn keep_tail_for_reading(&mut self, report: &mut LoadReport) {
        assert!(!self.writable, "a writable open replays its tail log");
        let mut kept_bytes = 0u64;
        let mut cut: BTreeSet<Ino> = BTreeSet::new();
        for w in std::mem::take(&mut self.tail_replay) {
            if cut.contains(&w.ino) || kept_bytes + w.bytes.len() as u64 > MAX_READ_ONLY_TAIL_BYTES
            {
                // A file's bytes chain: once one is left out, so are the rest.
                if cut.insert(w.ino) {
                    report.tail_log.problems.push(format!(
                        "inode {}: logged bytes from {} on are past the {} MiB a read-only open serves; a writable open replays them",
                        w.ino,
                        w.offset_bytes,
                        MAX_READ_ONLY_TAIL_BYTES >> 20
                    ));
                }
                continue;
            }
            kept_bytes += w.bytes.len() as u64;
            let committed = self.inodes[&w.ino].attr.size_bytes;
            let t = self.tail_read.entry(w.ino).or_insert(LoggedTail {
                from_bytes: committed,
                bytes: Vec::new(),
            });
            assert_eq!(
                w.offset_bytes,
                t.end_bytes(),
                "inode {}: the replay plan's writes do not chain",
                w.ino
            );
            assert!(!w.bytes.is_empty(), "an empty replay write");
            t.bytes.extend_from_slice(&w.bytes);
        }
    }

    /// The size readers see of file `ino` whose committed size is `committed`: on a
    /// read-only open, where the replay would leave it.
    pub(super) fn size_with_log(&self, ino: Ino, committed: u64) -> u64 {
        self.tail_read
            .get(&ino)
            .map_or(committed, |t| t.end_bytes().max(committed))
    }

    /// The logged bytes a read-only open serves past `ino`'s committed size.
    pub fn logged_tail(&self, ino: Ino) -> Option<&LoggedTail> {
        self.tail_read.get(&ino)
    }

    /// Makes the next commit cut a transaction (its superblock carries the tail
    /// log's bounds): bytes were handed to the log.
    pub fn touch_superblock(&mut self) {
        if self.writable {
            self.dirty.insert(0);
        }
    }

    /// A replay write failed (reported with the open's tail-log figures).
    pub fn tail_replay_problem(&mut self, why: String) {
        self.report.tail_log.problems.push(why);
    }

    /// The engine applied the replay's writes.
    pub fn tail_replay_done(&mut self) {
        self.report.tail_log.replayed = true;
    }

    /// Reads `[tail, head)` of the ring at open and plans the replay (module docs).
    /// The lost-tail record's files are then given the size they will have after
    /// the replay: logged bytes survive the crash.
    pub(super) fn load_tail_log<D: Device>(
        &mut self,
        dev: &D,
        report: &mut LoadReport,
    ) -> Result<()> {
        let sb = self.sb.clone();
        if !sb.has_tail_log() {
            return Ok(());
        }
        let (tail, head) = (sb.tail_log_tail, sb.tail_log_head);
        let mut rep = TailLogReport {
            tail,
            head,
            ..Default::default()
        };
        let mut sizes: BTreeMap<Ino, u64> = BTreeMap::new();
        let mut plan: Vec<ReplayWrite> = Vec::new();
        let mut p = tail;
        let mut unreadable_from: Option<(u64, String)> = None;
        while p < head {
            let block = read_positions(dev, &sb, p, 1)?;
            let h = match decode_header(&block, &sb.uuid, p) {
                Ok(h) if h.index == 0 && h.batch_pos + h.batch_blocks as u64 <= head => h,
                Ok(h) if h.index != 0 => {
                    note_unreadable(
                        &mut unreadable_from,
                        p,
                        "a batch's later header block".into(),
                    );
                    p += 1;
                    continue;
                }
                Ok(_) => {
                    note_unreadable(
                        &mut unreadable_from,
                        p,
                        "a batch running past the head".into(),
                    );
                    p += 1;
                    continue;
                }
                Err(e) => {
                    note_unreadable(&mut unreadable_from, p, e.to_string());
                    p += 1;
                    continue;
                }
            };
            if let Some((from, why)) = unreadable_from.take() {
                rep.problems.push(format!(
                    "tail log positions {from}..{p}: no batch header ({why}); skipped"
                ));
            }
            rep.batches += 1;
            let bytes = read_positions(dev, &sb, p, h.batch_blocks as u64)?;
            let mut headers = vec![h.clone()];
            for i in 1..h.headers as u64 {
                let at = (i as usize) * META_BLOCK_BYTES;
                match decode_header(&bytes[at..at + META_BLOCK_BYTES], &sb.uuid, p + i) {
                    Ok(x) if x.batch_pos == p && x.txn == h.txn && x.index as u64 == i => {
                        headers.push(x)
                    }
                    Ok(_) => rep.problems.push(format!(
                        "tail log position {}: header {i} of the batch at {p} belongs to another batch; its entries skipped",
                        p + i
                    )),
                    Err(e) => rep.problems.push(format!(
                        "tail log position {}: header {i} of the batch at {p}: {e}; its entries skipped",
                        p + i
                    )),
                }
            }
            self.plan_batch(p, &headers, &bytes, &mut sizes, &mut plan, &mut rep);
            p += h.batch_blocks as u64;
        }
        if let Some((from, why)) = unreadable_from.take() {
            rep.problems.push(format!(
                "tail log positions {from}..{head}: no batch header ({why}); skipped"
            ));
        }
        rep.replay_records = plan.len() as u64;
        rep.replay_bytes = plan.iter().map(|w| w.bytes.len() as u64).sum();
        rep.replay_files = sizes.len() as u64;
        // What survives is what the replay leaves: the lost-tail lines count it.
        for t in &mut report.lost_tails {
            if let Some(&s) = sizes.get(&t.ino) {
                t.size_bytes = t.size_bytes.max(s);
            }
        }
        report
            .lost_tails
            .retain(|t| t.size_bytes < t.accepted_bytes);
        report.tail_log = rep;
        self.tail_replay = plan;
        Ok(())
    }

    /// The entries of one batch against the files as the replay so far leaves them.
    fn plan_batch(
        &self,
        pos: u64,
        headers: &[BatchHeader],
        bytes: &[u8],
        sizes: &mut BTreeMap<Ino, u64>,
        plan: &mut Vec<ReplayWrite>,
        rep: &mut TailLogReport,
    ) {
        for e in headers.iter().flat_map(|h| h.entries.iter()) {
            rep.records += 1;
            let at = (e.data_pos - pos) as usize * META_BLOCK_BYTES;
            let data = &bytes[at..at + e.len_bytes as usize];
            if entry_crc(data) != e.crc {
                rep.problems.push(format!(
                    "tail log batch at {pos}: the bytes of inode {} at {}..{} fail their checksum; skipped",
                    e.ino,
                    e.offset_bytes,
                    e.end_bytes()
                ));
                continue;
            }
            let ino = e.ino as Ino;
            let same_file = self.file_generation(ino) == Some(e.generation);
            if !same_file || self.tail_floor(ino) > pos {
                rep.settled_records += 1;
                continue;
            }
            let size = *sizes
                .entry(ino)
                .or_insert_with(|| self.inodes[&ino].attr.size_bytes);
            if e.end_bytes() <= size {
                rep.settled_records += 1;
                continue;
            }
            if e.offset_bytes > size {
                rep.problems.push(format!(
                    "tail log batch at {pos}: bytes {}..{} of inode {ino} do not continue the file (its size is {size}); not replayed",
                    e.offset_bytes,
                    e.end_bytes()
                ));
                continue;
            }
            let skip = (size - e.offset_bytes) as usize;
            plan.push(ReplayWrite {
                ino,
                generation: e.generation,
                batch_pos: pos,
                offset_bytes: size,
                bytes: data[skip..].to_vec(),
            });
            sizes.insert(ino, e.end_bytes());
        }
        // Files the batch only settled leave the size map as they were read.
        sizes.retain(|ino, s| self.inodes.get(ino).is_some_and(|i| *s > i.attr.size_bytes));
    }
}

fn note_unreadable(from: &mut Option<(u64, String)>, p: u64, why: String) {
    if from.is_none() {
        *from = Some((p, why));
    }
}

/// Reads `count` blocks of the ring from log position `from` (wrapping).
fn read_positions<D: Device>(dev: &D, sb: &Superblock, from: u64, count: u64) -> Result<Vec<u8>> {
    let mut out = vec![0u8; count as usize * META_BLOCK_BYTES];
    let mut done = 0;
    while done < count {
        let p = from + done;
        let to_end = sb.tail_log_blocks - p % sb.tail_log_blocks;
        let n = (count - done).min(to_end).min(READ_CHUNK_BLOCKS);
        let at = done as usize * META_BLOCK_BYTES;
        dev.read_at(
            sb.tail_log_offset(p),
            &mut out[at..at + n as usize * META_BLOCK_BYTES],
        )
        .map_err(|e| Error::io("reading the tail log", e))?;
        done += n;
    }
    Ok(out)
}
