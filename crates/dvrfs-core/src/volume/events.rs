//! The event log and the lost-tail record of a volume in memory (FORMAT.md section
//! 10b): the ring of event-log blocks and the record every superblock image carries,
//! loaded at open and written by the commit like any other metadata block.
//!
//! The volume only keeps them; what an event says is decided by the engine
//! (`engine/events.rs`), which also gives it its times (the core reads no clock).
//! An event pushed between two cuts goes to the disk with the transaction cut next,
//! the one that carries the metadata change it describes, so after a crash the log
//! holds exactly the events of the committed state. A volume without
//! `FEATURE_EVENTS` (made before 2026-11-27) keeps the events of this open in memory
//! only, for the drivers to log.
//!
//! Fault model: an event block that fails verification in both copies, a record in
//! it that cannot be an event, or a lost-tail record that does not decode, is reported
//! ([`LoadReport::event_problems`]) and skipped: the log reads as if those slots were
//! empty and the open goes on, writable too (the next event written there rewrites
//! the whole block from memory). A lost event block is not a lost block of the file
//! system: nothing else depends on it.

use super::*;
use crate::device::Device;
use crate::format::events::{
    decode_event, decode_tails, encode_event, encode_tails, event_slot, max_tails, EventRecord,
    Tail, Tails, What, EVENTS_PER_BLOCK, EVENT_PATH_BYTES,
};
use crate::format::{
    parse_header, payload, payload_mut, seal_block, verify_block, BlockType, Header,
    META_BLOCK_BYTES,
};
use std::collections::VecDeque;

/// Events kept for the drivers to take ([`Volume::take_new_events`]) when none
/// takes them; past it the oldest go (they are still in the log).
pub const MAX_NEW_EVENTS: usize = 4096;

/// A file listed by the last committed lost-tail record found at open, with its
/// path in the loaded volume.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LostTail {
    pub ino: Ino,
    /// `None`: no directory names it (removed while open, freed at open).
    pub path: Option<String>,
    /// The size the file has now: what survived.
    pub size_bytes: u64,
    /// The size its writers had handed over by the commit, at least.
    pub accepted_bytes: u64,
}

impl LoadReport {
    /// The volume was not closed cleanly: a transaction was replayed, or the last
    /// commit's lost-tail record lists files (a crash after its checkpoint, while the
    /// next transaction was being written).
    pub fn crashed(&self) -> bool {
        self.replayed_txn.is_some()
            || !self.lost_tails.is_empty()
            || self.tails_left_out > 0
            || self.tail_log.replay_records > 0
    }
}

/// The event log and lost-tail record of a volume with `FEATURE_EVENTS`.
#[derive(Clone, Debug)]
pub(crate) struct EventArea {
    ring_blocks: u64,
    /// Slot `(seq - 1) % capacity` holds the event numbered `seq`.
    slots: Vec<Option<EventRecord>>,
    /// The lost-tail record the next transaction's superblock carries.
    tails: Tails,
}

/// Every event of this open and the log, as the volume keeps them.
#[derive(Clone, Debug, Default)]
pub(crate) struct Events {
    /// `None`: the volume has no event area.
    area: Option<EventArea>,
    /// The next event's number.
    next_seq: u64,
    /// Events since the drivers last took them.
    new: VecDeque<EventRecord>,
    /// Without an area: this open's events, for [`Volume::events`].
    memory: VecDeque<EventRecord>,
}

impl Volume {
    /// Whether the volume keeps an event log on disk (`FEATURE_EVENTS`).
    pub fn has_event_log(&self) -> bool {
        self.events.area.is_some()
    }

    /// Events a ring holds at most (0 without an event log).
    pub fn event_capacity(&self) -> usize {
        self.events.area.as_ref().map_or(0, |a| a.slots.len())
    }

    /// The events of the log, oldest first (committed ones and those the next commit
    /// writes), and those of this open that are not written: all of them without an
    /// event log, and on a read-only open the ones it found (a recovery the next
    /// writable open records). At most a ring's worth of the latter.
    pub fn events(&self) -> Vec<EventRecord> {
        // A read-only open keeps its own events (a recovery it found) in memory.
        let mut v: Vec<EventRecord> = self.events.memory.iter().cloned().collect();
        if let Some(a) = &self.events.area {
            v.extend(a.slots.iter().flatten().cloned());
        }
        v.sort_by_key(|e| e.seq);
        v
    }

    /// Events since the last call, oldest first, for a driver to log.
    pub fn take_new_events(&mut self) -> Vec<EventRecord> {
        self.events.new.drain(..).collect()
    }

    /// Records an event: numbered, placed in the ring (its block joins the next
    /// transaction) and queued for the drivers. Returns its number.
    pub fn push_event(&mut self, mono_ns: u64, wall_ns: i64, what: What) -> u64 {
        let (path, path_cut) = match what.ino() {
            Some(ino) => match self.path_of(ino) {
                Some(p) => cut_path(p.into_bytes()),
                None => (Vec::new(), false),
            },
            None => (Vec::new(), false),
        };
        self.push_record(mono_ns, wall_ns, what, path, path_cut)
    }

    /// [`Volume::push_event`] of an event about a file that no directory names any
    /// more (a deleted chunk), recorded under the path it had.
    pub fn push_event_at_path(
        &mut self,
        mono_ns: u64,
        wall_ns: i64,
        what: What,
        path: &[u8],
    ) -> u64 {
        let (path, path_cut) = cut_path(path.to_vec());
        self.push_record(mono_ns, wall_ns, what, path, path_cut)
    }

    fn push_record(
        &mut self,
        mono_ns: u64,
        wall_ns: i64,
        what: What,
        path: Vec<u8>,
        path_cut: bool,
    ) -> u64 {
        let seq = self.events.next_seq.max(1);
        self.events.next_seq = seq + 1;
        let rec = EventRecord {
            seq,
            mono_ns,
            wall_ns,
            what,
            path,
            path_cut,
        };
        if self.events.new.len() == MAX_NEW_EVENTS {
            self.events.new.pop_front();
        }
        self.events.new.push_back(rec.clone());
        match self.events.area.as_mut() {
            Some(a) if self.writable => {
                let (k, i) = event_slot(seq, a.ring_blocks);
                a.slots[k as usize * EVENTS_PER_BLOCK + i] = Some(rec);
                self.dirty.insert(self.sb.events_start + k);
            }
            _ => {
                let cap = self.event_capacity().max(EVENTS_PER_BLOCK);
                if self.events.memory.len() == cap {
                    self.events.memory.pop_front();
                }
                self.events.memory.push_back(rec);
            }
        }
        seq
    }

    /// Sets the lost-tail record the next transaction writes: the files whose
    /// accepted size is above their applied size now (at most `max_tails`, the
    /// largest losses first; the rest counted). It lies in the superblock, which every
    /// transaction carries; a change alone makes a transaction (the superblock
    /// dirty). Call right before [`Volume::snapshot`].
    pub fn set_tails(&mut self, mut files: Vec<Tail>) {
        let Some(a) = self.events.area.as_mut() else {
            return;
        };
        if !self.writable {
            return;
        }
        files.sort_by_key(|t| {
            (
                std::cmp::Reverse(t.accepted_bytes - t.committed_bytes),
                t.ino,
            )
        });
        let max = max_tails(self.sb.has_tail_log());
        let left_out = files.len().saturating_sub(max) as u32;
        files.truncate(max);
        if a.tails.files != files || a.tails.left_out != left_out {
            a.tails.files = files;
            a.tails.left_out = left_out;
            self.dirty.insert(0);
        }
    }

    /// The applied (committable) size of `ino`, or `None` for a file it does not
    /// hold: what a lost-tail entry compares the accepted size with.
    pub fn applied_size(&self, ino: Ino) -> Option<u64> {
        self.inodes.get(&ino).map(|i| i.attr.size_bytes)
    }

    /// Files with writes planned and not applied, with the size they will have.
    pub fn pending_sizes(&self) -> Vec<(Ino, u64)> {
        self.pending
            .iter()
            .map(|(&ino, p)| (ino, p.size_bytes))
            .collect()
    }

    /// The path of `ino` (a file: the first directory entry naming it, a scan of the
    /// directories: events are rare), or `None` when no directory names it.
    pub fn path_of(&self, ino: Ino) -> Option<String> {
        let root = self.sb.root_ino;
        if ino == root {
            return Some("/".into());
        }
        let (dir, name) = match self.dirs.contains_key(&ino) {
            true => {
                let parent = *self.parents.get(&ino)?;
                let name = self
                    .dirs
                    .get(&parent)?
                    .entries
                    .iter()
                    .find(|(_, e)| e.ino == ino)?
                    .0;
                (parent, name.clone())
            }
            false => {
                let mut found = None;
                // Deterministic: the lowest directory naming it.
                let mut dirs: Vec<(&Ino, &Dir)> = self.dirs.iter().collect();
                dirs.sort_by_key(|(d, _)| **d);
                for (d, dir) in dirs {
                    if let Some((n, _)) = dir.entries.iter().find(|(_, e)| e.ino == ino) {
                        found = Some((*d, n.clone()));
                        break;
                    }
                }
                found?
            }
        };
        let mut parts = vec![String::from_utf8_lossy(&name).into_owned()];
        let mut d = dir;
        // Bounded by the directory count: a damaged parent map cannot loop forever.
        for _ in 0..=self.dirs.len() {
            if d == root {
                parts.reverse();
                return Some(format!("/{}", parts.join("/")));
            }
            let p = *self.parents.get(&d)?;
            let n = self
                .dirs
                .get(&p)?
                .entries
                .iter()
                .find(|(_, e)| e.ino == d)?
                .0;
            parts.push(String::from_utf8_lossy(n).into_owned());
            d = p;
        }
        None
    }

    /// Reads the event log and the lost-tail record at open: the record from the
    /// superblock image the open chose (the journal's, when it replays one: the last
    /// committed transaction's), the ring from the event area.
    pub(super) fn load_events<D: Device>(
        &mut self,
        dev: &D,
        overlay: &HashMap<u64, Vec<u8>>,
        report: &mut LoadReport,
    ) -> Result<()> {
        let sb = self.sb.clone();
        if !sb.has_events() {
            return Ok(());
        }
        let ring_blocks = sb.events_blocks;
        let mut area = EventArea {
            ring_blocks,
            slots: vec![None; ring_blocks as usize * EVENTS_PER_BLOCK],
            tails: Tails::default(),
        };
        match superblock_image(dev, &sb, overlay)? {
            Some(img) => match decode_tails(payload(&img), sb.has_tail_log()) {
                Ok((t, bad)) => {
                    if bad > 0 {
                        report.event_problems.push((
                            0,
                            format!("the superblock's lost-tail record: {bad} entries that cannot be files skipped"),
                        ));
                    }
                    report.tails = Some(t);
                }
                Err(e) => report.event_problems.push((
                    0,
                    format!("the superblock's lost-tail record: {e}; skipped"),
                )),
            },
            None => report.event_problems.push((
                0,
                "no superblock copy that matches the one in use holds a lost-tail record; skipped"
                    .into(),
            )),
        }
        let mut max_seq = 0;
        for k in 0..ring_blocks {
            let n = sb.events_start + k;
            let Some(img) = read_event_block(dev, &sb, overlay, n, report)? else {
                continue;
            };
            let p = payload(&img);
            for i in 0..EVENTS_PER_BLOCK {
                match decode_event(p, i) {
                    Ok(None) => {}
                    Ok(Some(rec)) if event_slot(rec.seq, ring_blocks) == (k, i) => {
                        max_seq = max_seq.max(rec.seq);
                        area.slots[k as usize * EVENTS_PER_BLOCK + i] = Some(rec);
                    }
                    Ok(Some(rec)) => report.event_problems.push((
                        n,
                        format!(
                            "event log block {n}, record {i}: event {} does not belong in this slot; skipped",
                            rec.seq
                        ),
                    )),
                    Err(why) => report.event_problems.push((
                        n,
                        format!("event log block {n}, record {i}: {why}; skipped"),
                    )),
                }
            }
        }
        // What the last commit's record says was lost, by path in the loaded state.
        if let Some(t) = report.tails.clone() {
            report.lost_tails = t
                .files
                .iter()
                .map(|f| LostTail {
                    ino: f.ino,
                    path: self.path_of(f.ino),
                    size_bytes: self.applied_size(f.ino).unwrap_or(0),
                    accepted_bytes: f.accepted_bytes,
                })
                .collect();
            report.tails_left_out = t.left_out;
            // Shown once: the next commit writes the record of its own state.
            if self.writable && (!t.files.is_empty() || t.left_out > 0) {
                self.dirty.insert(0);
            }
        }
        self.events.next_seq = max_seq + 1;
        self.events.area = Some(area);
        Ok(())
    }

    /// The superblock image of the next transaction `seq`: its fields, and with
    /// `FEATURE_EVENTS` the lost-tail record in its reserved bytes.
    pub(super) fn encode_superblock(&self, seq: u64) -> Vec<u8> {
        let mut b = self.sb.encode(seq).to_vec();
        if let Some(a) = self.events.area.as_ref() {
            let h = parse_header(&b).expect("encode sealed it");
            let mut t = a.tails.clone();
            t.txn = seq;
            encode_tails(&t, payload_mut(&mut b), self.sb.has_tail_log());
            seal_block(&mut b, &h);
        }
        b
    }

    /// The image of event-log block `k` (`None` without an event log).
    pub(super) fn encode_event_block(&self, k: u64, seq: u64) -> Option<Vec<u8>> {
        let a = self.events.area.as_ref()?;
        let n = self.sb.events_start + k;
        let mut b = crate::format::new_block();
        let first = k as usize * EVENTS_PER_BLOCK;
        let p = payload_mut(&mut b[..]);
        for (i, rec) in a.slots[first..first + EVENTS_PER_BLOCK].iter().enumerate() {
            if let Some(rec) = rec {
                encode_event(rec, i, p);
            }
        }
        seal_block(
            &mut b[..],
            &Header {
                block_type: BlockType::EventLog,
                uuid: self.sb.uuid,
                block_no: n,
                seq,
            },
        );
        Some(b.to_vec())
    }
}

/// The superblock image the open chose, to read its lost-tail record: the journal's
/// when it replays one, else the first copy (primary, end of device, backup region)
/// that decodes to the superblock in use. Only I/O errors fail.
fn superblock_image<D: Device>(
    dev: &D,
    sb: &Superblock,
    overlay: &HashMap<u64, Vec<u8>>,
) -> Result<Option<Vec<u8>>> {
    let same = |b: &[u8]| Superblock::decode(b).is_ok_and(|d| d == *sb);
    if let Some(img) = overlay.get(&0).filter(|b| same(b)) {
        return Ok(Some(img.clone()));
    }
    let mut b = vec![0u8; META_BLOCK_BYTES];
    for off in [0, sb.last_copy_offset(), sb.backup_offset(0)] {
        dev.read_at(off, &mut b)
            .map_err(|e| Error::io("reading a superblock copy", e))?;
        if same(&b) {
            return Ok(Some(b));
        }
    }
    Ok(None)
}

/// An event-area block from the journal's image, the primary or the backup copy;
/// `None` (reported) when no copy verifies. Only I/O errors fail.
fn read_event_block<D: Device>(
    dev: &D,
    sb: &Superblock,
    overlay: &HashMap<u64, Vec<u8>>,
    n: u64,
    report: &mut LoadReport,
) -> Result<Option<Vec<u8>>> {
    let ty = BlockType::EventLog;
    if let Some(img) = overlay.get(&n) {
        if verify_block(img, ty, &sb.uuid, n).is_ok() {
            return Ok(Some(img.clone()));
        }
    }
    let mut b = vec![0u8; crate::format::META_BLOCK_BYTES];
    dev.read_at(sb.primary_offset(n), &mut b)
        .map_err(|e| Error::io(format!("reading event block {n}"), e))?;
    let why = match verify_block(&b, ty, &sb.uuid, n) {
        Ok(_) => return Ok(Some(b)),
        Err(e) => e,
    };
    dev.read_at(sb.backup_offset(n), &mut b)
        .map_err(|e| Error::io(format!("reading the backup of event block {n}"), e))?;
    match verify_block(&b, ty, &sb.uuid, n) {
        Ok(_) => {
            report
                .from_backup
                .push((n, format!("{} block: {why}", ty.name())));
            Ok(Some(b))
        }
        Err(bwhy) => {
            report.event_problems.push((
                n,
                format!(
                    "{} block {n} is unreadable in both copies (primary: {why}; backup: {bwhy}); its contents are skipped",
                    ty.name()
                ),
            ));
            Ok(None)
        }
    }
}

/// A path as an event stores it: its last [`EVENT_PATH_BYTES`] bytes, cut on a
/// character boundary (the stored bytes stay UTF-8 when the path was), and whether
/// it was cut.
fn cut_path(b: Vec<u8>) -> (Vec<u8>, bool) {
    if b.len() <= EVENT_PATH_BYTES {
        return (b, false);
    }
    let mut from = b.len() - EVENT_PATH_BYTES;
    while from < b.len() && (b[from] & 0xC0) == 0x80 {
        from += 1;
    }
    (b[from..].to_vec(), true)
}
