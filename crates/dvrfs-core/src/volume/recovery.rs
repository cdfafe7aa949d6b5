//! Recovery at open: which superblock copy the volume is read with, and whether the
//! journal's transaction is replayed over it (FORMAT.md section 13).
//!
//! Fault model: any copy of the superblock may be unreadable (torn, zeroed, bit rot),
//! stale (its region's checkpoint was cut short by the power going) or, rarely, valid
//! but wrong (damage behind an intact checksum); the journal's first block may hold
//! nothing, an old transaction, a torn one, or a whole one.
//!
//! The decision is a table, [`RECOVERY_CASES`]: each row is an observed state of the
//! three superblock copies (the primary, the end-of-device copy and the backup region's)
//! and of the journal, and says which superblock is used and what becomes of the
//! journal's transaction. The loader observes, looks the row up and does what it says;
//! `tests/corruption.rs` builds an image for every row and checks the open does the
//! same, and a unit test below checks FORMAT.md's copy of the table.
//!
//! The invariant it keeps: every state that can be observed matches exactly one row
//! ([`recovery_case`] asserts it at each open), and a minority of copies never
//! outvotes a majority.

use super::*;
use crate::device::Device;
use crate::format::journal::{decode_transaction, parse_head, transaction_blocks};
use crate::format::META_BLOCK_BYTES;

/// How the superblock copies voted. The copies that decode are grouped by the
/// superblock they hold; "the newest" is the group holding the highest block sequence
/// (on a tie, the primary's, then the end copy's), "the older" the newest of the
/// other groups. A copy describing a volume larger than the device does not vote
/// while another copy fits it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Copies {
    /// How many of the three copies hold the newest superblock (0: none decodes).
    pub newest: u8,
    /// How many hold the older one (0: every copy that decodes agrees).
    pub older: u8,
}

/// What the journal's first block starts, read where the voted superblock says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum JournalHead {
    /// Not read: no superblock says where the journal is.
    NotRead,
    /// Not a valid first descriptor of this volume: nothing was committed since the
    /// journal was emptied, or mkfs.
    Absent,
    /// A transaction longer than the journal, or older than the superblock's last
    /// one: checkpointed long ago.
    Stale,
    /// A transaction that is incomplete, torn, or fails a check of FORMAT.md section 11.
    Torn,
    /// A whole transaction (its commit checksum holds) whose superblock image is
    /// malformed or describes another layout than the superblock's: not dvrfs's.
    Mismatched,
    /// A whole transaction without a superblock image (dvrfs always writes one; the
    /// case is decided all the same).
    Whole,
    /// A whole transaction with a superblock image that fits the volume.
    WholeWithSuperblock,
}

/// The superblock copy a row chooses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Use {
    /// None decodes: the open is refused (not a dvrfs, or corrupt).
    Refuse,
    /// The newest superblock.
    Newest,
    /// The older one: two copies agree on it against one.
    Older,
}

/// What a row does with the journal's transaction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Apply {
    /// Nothing is replayed (a mismatched transaction is reported).
    Nothing,
    /// Its images override what the regions hold.
    Images,
    /// Its images override what the regions hold, and its superblock image replaces
    /// the copy's.
    ImagesAndSuperblock,
}

/// One row of the recovery table: the states it matches, and the decision.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecoveryCase {
    /// [`Copies::newest`] in this range (inclusive).
    pub newest: (u8, u8),
    /// [`Copies::older`] in this range (inclusive).
    pub older: (u8, u8),
    /// The journal heads it matches.
    pub journal: &'static [JournalHead],
    pub superblock: Use,
    pub apply: Apply,
}

use JournalHead as J;

/// The journal heads whose transaction is not replayed.
const NOT_WHOLE: &[JournalHead] = &[J::Absent, J::Stale, J::Torn, J::Mismatched];

/// The recovery decision table. The copies' vote: most copies win, a tie goes to the
/// newest; with three copies the older superblock wins only when the two others agree
/// on it against the newest (1 against 2). A whole transaction is replayed over
/// whichever superblock won, and its own superblock image, the current one, replaces it.
pub const RECOVERY_CASES: &[RecoveryCase] = &[
    RecoveryCase {
        newest: (0, 0),
        older: (0, 0),
        journal: &[J::NotRead],
        superblock: Use::Refuse,
        apply: Apply::Nothing,
    },
    RecoveryCase {
        newest: (1, 3),
        older: (0, 1),
        journal: NOT_WHOLE,
        superblock: Use::Newest,
        apply: Apply::Nothing,
    },
    RecoveryCase {
        newest: (1, 3),
        older: (0, 1),
        journal: &[J::Whole],
        superblock: Use::Newest,
        apply: Apply::Images,
    },
    RecoveryCase {
        newest: (1, 3),
        older: (0, 1),
        journal: &[J::WholeWithSuperblock],
        superblock: Use::Newest,
        apply: Apply::ImagesAndSuperblock,
    },
    RecoveryCase {
        newest: (1, 1),
        older: (2, 2),
        journal: NOT_WHOLE,
        superblock: Use::Older,
        apply: Apply::Nothing,
    },
    RecoveryCase {
        newest: (1, 1),
        older: (2, 2),
        journal: &[J::Whole],
        superblock: Use::Older,
        apply: Apply::Images,
    },
    RecoveryCase {
        newest: (1, 1),
        older: (2, 2),
        journal: &[J::WholeWithSuperblock],
        superblock: Use::Older,
        apply: Apply::ImagesAndSuperblock,
    },
];

impl RecoveryCase {
    fn matches_copies(&self, c: Copies) -> bool {
        (self.newest.0..=self.newest.1).contains(&c.newest)
            && (self.older.0..=self.older.1).contains(&c.older)
    }

    /// Whether the row is for this observed state.
    pub fn matches(&self, c: Copies, j: JournalHead) -> bool {
        self.matches_copies(c) && self.journal.contains(&j)
    }

    /// The row as FORMAT.md's table shows it.
    pub fn markdown(&self) -> String {
        let range = |(lo, hi): (u8, u8)| match lo == hi {
            true => lo.to_string(),
            false => format!("{lo} to {hi}"),
        };
        let journal: Vec<&str> = self.journal.iter().map(|j| j.words()).collect();
        format!(
            "| {} | {} | {} | {} | {} |",
            range(self.newest),
            range(self.older),
            journal.join(", "),
            self.superblock.words(),
            self.apply.words()
        )
    }
}

impl JournalHead {
    /// Every journal head, for tests that go over every observed state.
    pub const ALL: [JournalHead; 7] = [
        J::NotRead,
        J::Absent,
        J::Stale,
        J::Torn,
        J::Mismatched,
        J::Whole,
        J::WholeWithSuperblock,
    ];

    fn words(self) -> &'static str {
        match self {
            J::NotRead => "not read",
            J::Absent => "absent",
            J::Stale => "stale",
            J::Torn => "torn",
            J::Mismatched => "mismatched",
            J::Whole => "whole",
            J::WholeWithSuperblock => "whole, with a superblock image",
        }
    }
}

impl Use {
    fn words(self) -> &'static str {
        match self {
            Use::Refuse => "none: refuse",
            Use::Newest => "the newest",
            Use::Older => "the older",
        }
    }
}

impl Apply {
    fn words(self) -> &'static str {
        match self {
            Apply::Nothing => "nothing replayed",
            Apply::Images => "replay its images",
            Apply::ImagesAndSuperblock => "replay its images and its superblock",
        }
    }
}

/// The row for an observed state. Panics unless exactly one row matches: the table
/// is complete and its rows do not overlap (`tests/corruption.rs` checks it for every
/// state that can be observed).
pub fn recovery_case(c: Copies, j: JournalHead) -> &'static RecoveryCase {
    let mut rows = RECOVERY_CASES.iter().filter(|r| r.matches(c, j));
    let row = rows.next();
    let more = rows.count();
    match row {
        Some(row) if more == 0 => row,
        _ => panic!(
            "recovery: {} rows of RECOVERY_CASES match copies {c:?} and journal {j:?}, not one",
            usize::from(row.is_some()) + more
        ),
    }
}

/// The superblock the copies' vote chooses, before the journal is read (the journal
/// is found through it): every row for these copies agrees (asserted).
pub fn superblock_choice(c: Copies) -> Use {
    let mut uses = RECOVERY_CASES
        .iter()
        .filter(|r| r.matches_copies(c))
        .map(|r| r.superblock);
    let first = uses
        .next()
        .unwrap_or_else(|| panic!("recovery: no row of RECOVERY_CASES for copies {c:?}"));
    assert!(
        uses.all(|u| u == first),
        "recovery: the rows for copies {c:?} choose different superblocks"
    );
    first
}

/// The superblock the copies' vote chose: its copy, what the other copies were, and
/// the vote.
pub(super) struct Chosen {
    pub(super) sb: Superblock,
    pub(super) from: &'static str,
    pub(super) note: Option<String>,
    pub(super) copies: Copies,
}

/// How far back from the end of the device the backup-region superblock is searched
/// for when no copy says where it is and no standard layout puts it there.
pub const BACKUP_SEARCH_BYTES: u64 = 1 << 30;

/// A superblock copy that does not decode: which, and why.
type Unreadable = (&'static str, crate::format::BlockError);

/// A superblock copy that decodes: where it was, the superblock, its block sequence.
struct SbCopy {
    name: &'static str,
    sb: Superblock,
    seq: u64,
}

fn read_block<D: Device>(dev: &D, off: u64, what: &str) -> Result<Vec<u8>> {
    let mut b = vec![0u8; META_BLOCK_BYTES];
    dev.read_at(off, &mut b).map_err(|e| Error::io(what, e))?;
    Ok(b)
}

fn decode_copy(
    b: &[u8],
    name: &'static str,
) -> std::result::Result<SbCopy, crate::format::BlockError> {
    let sb = Superblock::decode(b)?;
    let seq = crate::format::parse_header(b)?.seq;
    Ok(SbCopy { name, sb, seq })
}

/// The superblock, chosen by evidence (FORMAT.md section 4): the copies at the start,
/// at the end of the device and at the start of the backup region are read; the one
/// most copies agree with wins, a tie going to the higher block sequence, then to the
/// primary. A minority never outvotes a majority, and the backup-region copy serves
/// when both others are gone (found where a copy says, where a standard layout of
/// this device size puts it, or by searching the last [`BACKUP_SEARCH_BYTES`]).
/// The vote is the table's ([`RECOVERY_CASES`], through [`superblock_choice`]).
pub(super) fn read_superblock<D: Device>(dev: &D) -> Result<Chosen> {
    let size = dev.size_bytes() / META_BLOCK_BYTES as u64 * META_BLOCK_BYTES as u64;
    if size < 2 * META_BLOCK_BYTES as u64 {
        // `size` counts whole blocks only: a few bytes of text count as 0, which is
        // no size to show (the caller knows the file's own).
        return Err(Error::NotDvrfs(format!(
            "too small to be one: a dvrfs volume starts with a {META_BLOCK_BYTES}-byte superblock and ends with its copy, and {} whole blocks fit here",
            size / META_BLOCK_BYTES as u64
        )));
    }
    let (copies, bad) = read_copies(dev, size)?;
    let rank = |name: &str| match name {
        "primary" => 2,
        "end-of-device copy" => 1,
        _ => 0,
    };
    // A copy that describes a file system larger than the device cannot be this
    // device's (unless every copy does: a truncated image, reported by the caller),
    // however many copies agree on it.
    let fits = |sb: &Superblock| sb.device_bytes <= size;
    let any_fits = copies.iter().any(|c| fits(&c.sb));
    let mut voters: Vec<&SbCopy> = copies.iter().filter(|c| fits(&c.sb) || !any_fits).collect();
    // Newest first: the highest block sequence, then the primary, the end copy.
    voters.sort_by_key(|c| std::cmp::Reverse((c.seq, rank(c.name))));
    let newest = voters.first().map(|c| &c.sb);
    let older = newest.and_then(|n| voters.iter().map(|c| &c.sb).find(|sb| *sb != n));
    let holding = |sb: Option<&Superblock>| voters.iter().filter(|c| Some(&c.sb) == sb).count();
    let observed = Copies {
        newest: holding(newest) as u8,
        older: holding(older) as u8,
    };
    let chosen = match superblock_choice(observed) {
        Use::Refuse => return Err(refusal(&bad)),
        Use::Newest => newest,
        Use::Older => older,
    }
    .expect("the table chooses a superblock some copy holds");
    // Of the copies holding it, the newest (the primary first on a tie).
    let best = *voters
        .iter()
        .find(|c| c.sb == *chosen)
        .expect("a voter holds it");
    let votes = |sb: &Superblock| copies.iter().filter(|c| c.sb == *sb).count();
    let mut notes: Vec<String> = bad.iter().map(|(n, e)| format!("{n}: {e}")).collect();
    for c in &copies {
        if c.sb != best.sb {
            notes.push(format!(
                "{} (sequence {}) disagrees with {} of the {} readable copies",
                c.name,
                c.seq,
                votes(&best.sb),
                copies.len()
            ));
        }
    }
    if !copies.iter().any(|c| c.name == "backup-region copy") {
        notes.push("backup-region copy: not found or invalid".into());
    }
    let note = (!notes.is_empty()).then(|| notes.join("; "));
    Ok(Chosen {
        sb: best.sb.clone(),
        from: best.name,
        note,
        copies: observed,
    })
}

/// The superblock copies that decode, and why the others do not: the primary, the
/// end-of-device copy, and the backup region's (where the copies say, else where a
/// standard layout of this size puts it, else searched for).
fn read_copies<D: Device>(dev: &D, size: u64) -> Result<(Vec<SbCopy>, Vec<Unreadable>)> {
    let end = size - META_BLOCK_BYTES as u64;
    let mut copies: Vec<SbCopy> = vec![];
    let mut bad: Vec<(&'static str, crate::format::BlockError)> = vec![];
    for (name, off, what) in [
        ("primary", 0, "reading the superblock"),
        (
            "end-of-device copy",
            end,
            "reading the end-of-device superblock copy",
        ),
    ] {
        match decode_copy(&read_block(dev, off, what)?, name) {
            Ok(c) => copies.push(c),
            Err(e) => bad.push((name, e)),
        }
    }
    let valid_at = |off: u64| off > 0 && off < end && off.is_multiple_of(META_BLOCK_BYTES as u64);
    let mut places: Vec<u64> = copies
        .iter()
        .map(|c| c.sb.backup_start_bytes)
        .filter(|&o| valid_at(o))
        .collect();
    if places.is_empty() {
        places = standard_backup_places(size);
    }
    places.sort_unstable();
    places.dedup();
    let mut found = false;
    for off in places {
        let b = read_block(dev, off, "reading the backup-region superblock copy")?;
        if let Ok(c) = decode_copy(&b, "backup-region copy") {
            if c.sb.backup_start_bytes == off {
                copies.push(c);
                found = true;
                break;
            }
        }
    }
    if !found && copies.is_empty() {
        if let Some(c) = search_backup(dev, end)? {
            copies.push(c);
        }
    }
    Ok((copies, bad))
}

/// The error when no copy decodes: not a dvrfs when every copy lacks the magic,
/// else corrupt, naming every reason.
fn refusal(bad: &[(&'static str, crate::format::BlockError)]) -> Error {
    let all_magic = bad
        .iter()
        .all(|(_, e)| *e == crate::format::BlockError::BadMagic);
    if all_magic {
        return Error::NotDvrfs(
            "no dvrfs superblock at the start or the end of the device, nor a backup-region copy"
                .into(),
        );
    }
    let why: Vec<String> = bad.iter().map(|(n, e)| format!("{n}: {e}")).collect();
    Error::Corrupt(format!("no valid superblock: {}", why.join("; ")))
}

/// Where `mkfs` with each data block size (and its default inode count) puts the
/// backup region of a device of `size` bytes.
fn standard_backup_places(size: u64) -> Vec<u64> {
    let mut out = vec![];
    let mut bs = crate::layout::MIN_DATA_BLOCK_BYTES;
    while bs <= crate::layout::MAX_DATA_BLOCK_BYTES {
        // With the default checksums, and without (volumes made before them); with
        // the frame indexes' share, and without (made before it).
        for (sums, index_share) in [(true, true), (true, false), (false, false)] {
            let mut p = crate::layout::MkfsParams::new(size, [0; 16], 0);
            p.data_block_bytes = bs;
            p.index_share = index_share;
            if !sums {
                p.sum_granule_bytes = None;
            }
            if let Ok(sb) = crate::layout::plan(&p) {
                out.push(sb.backup_start_bytes);
            }
        }
        bs *= 2;
    }
    out
}

/// Searches backwards from the end-of-device copy for a superblock that names its own
/// offset as the backup region's start.
fn search_backup<D: Device>(dev: &D, end: u64) -> Result<Option<SbCopy>> {
    const CHUNK: u64 = 1 << 20;
    let lowest = end.saturating_sub(BACKUP_SEARCH_BYTES);
    let mut hi = end;
    let mut buf = vec![0u8; CHUNK as usize];
    while hi > lowest {
        let lo = hi.saturating_sub(CHUNK).max(lowest);
        let chunk = &mut buf[..(hi - lo) as usize];
        dev.read_at(lo, chunk)
            .map_err(|e| Error::io("searching for the backup-region superblock", e))?;
        for k in (0..chunk.len() / META_BLOCK_BYTES).rev() {
            let b = &chunk[k * META_BLOCK_BYTES..(k + 1) * META_BLOCK_BYTES];
            if let Ok(c) = decode_copy(b, "backup-region copy") {
                if c.sb.backup_start_bytes == lo + (k * META_BLOCK_BYTES) as u64 {
                    return Ok(Some(c));
                }
            }
        }
        hi = lo;
    }
    Ok(None)
}

/// The complete transaction found at the head of the journal: its number and its
/// (block, image) pairs. A writable open checkpoints it to both regions and empties the
/// journal (the engine's first job) before anything else is committed.
#[derive(Clone, Debug)]
pub struct Replay {
    pub txn: u64,
    pub images: Vec<(u64, Vec<u8>)>,
}

/// What the journal's first block and the transaction it starts were found to be,
/// read at the superblock the copies' vote chose.
pub(super) struct JournalFound {
    pub(super) head: JournalHead,
    /// The transaction, when it is whole ([`JournalHead::Mismatched`] included).
    replay: Option<Replay>,
    /// Its superblock image, when it holds one that fits the volume.
    superblock: Option<Superblock>,
    /// Why a whole transaction's superblock image does not fit.
    why: Option<String>,
}

pub(super) fn read_journal<D: Device>(dev: &D, sb: &Superblock) -> Result<JournalFound> {
    let found = |head| JournalFound {
        head,
        replay: None,
        superblock: None,
        why: None,
    };
    let mut b = vec![0u8; META_BLOCK_BYTES];
    dev.read_at(sb.primary_offset(sb.journal_start), &mut b)
        .map_err(|e| Error::io("reading the journal", e))?;
    let Some(head) = parse_head(&b, &sb.uuid, sb.journal_start) else {
        return Ok(found(JournalHead::Absent));
    };
    let blocks = transaction_blocks(head.images);
    // A transaction older than the superblock's last one was checkpointed long ago.
    if blocks as u64 > sb.journal_blocks || head.txn < sb.last_txn {
        return Ok(found(JournalHead::Stale));
    }
    let mut bytes = vec![0u8; blocks * META_BLOCK_BYTES];
    dev.read_at(sb.primary_offset(sb.journal_start), &mut bytes)
        .map_err(|e| Error::io("reading the journal", e))?;
    let txn = decode_transaction(&bytes, &sb.uuid, sb.journal_start, head).filter(|imgs| {
        imgs.iter()
            .all(|(n, _)| *n < sb.meta_blocks && !sb.in_journal(*n))
    });
    let Some(images) = txn else {
        return Ok(found(JournalHead::Torn));
    };
    let replay = Replay {
        txn: head.txn,
        images,
    };
    Ok(match journal_superblock(&replay, sb) {
        // Written whole (its commit checksum holds) but not by dvrfs as it is.
        Err(why) => JournalFound {
            why: Some(why),
            replay: Some(replay),
            ..found(JournalHead::Mismatched)
        },
        Ok(None) => JournalFound {
            replay: Some(replay),
            ..found(JournalHead::Whole)
        },
        Ok(Some(img)) => JournalFound {
            replay: Some(replay),
            superblock: Some(img),
            ..found(JournalHead::WholeWithSuperblock)
        },
    })
}

/// Does what the table's row for the copies and the journal says: returns the
/// superblock to load with and the transaction to replay, and fills the report's
/// account of them.
pub(super) fn decide(
    chosen: Chosen,
    journal: JournalFound,
    report: &mut LoadReport,
) -> (Superblock, Option<Replay>) {
    let case = recovery_case(chosen.copies, journal.head);
    assert_eq!(
        case.superblock,
        superblock_choice(chosen.copies),
        "the vote does not depend on the journal"
    );
    report.superblock_from = chosen.from;
    report.superblock_note = chosen.note;
    let mut sb = chosen.sb;
    if case.apply == Apply::Nothing {
        if let (Some(r), Some(why)) = (&journal.replay, &journal.why) {
            // The volume stays as its last checkpoint left it.
            report.journal_note = Some(format!(
                "transaction {} was not replayed: its superblock image {why}",
                r.txn
            ));
        }
        return (sb, None);
    }
    if case.apply == Apply::ImagesAndSuperblock {
        // The journal's image is the current one; copies that differ were being
        // checkpointed when the power went, and the replay rewrites them all.
        sb = journal
            .superblock
            .expect("the row is for a superblock image");
        report.superblock_note = None;
        report.superblock_from = "journal";
    }
    let r = journal.replay.expect("the row is for a whole transaction");
    report.replayed_txn = Some(r.txn);
    report.replayed_blocks = r.images.iter().map(|(n, _)| *n).collect();
    (sb, Some(r))
}

/// The superblock image a transaction holds, if any: it must decode, and agree with
/// the volume's superblock in everything but what a commit changes (the ZRR cursor,
/// the last transaction, the inode-table mark, the tail log's tail and head).
fn journal_superblock(
    r: &Replay,
    sb: &Superblock,
) -> std::result::Result<Option<Superblock>, String> {
    let Some((_, img)) = r.images.iter().find(|(n, _)| *n == 0) else {
        return Ok(None);
    };
    let new = Superblock::decode(img).map_err(|e| format!("is malformed: {e}"))?;
    let mut same = new.clone();
    same.zrr_cursor = sb.zrr_cursor;
    same.last_txn = sb.last_txn;
    same.inode_blocks_used = sb.inode_blocks_used;
    same.tail_log_tail = sb.tail_log_tail;
    same.tail_log_head = sb.tail_log_head;
    if same != *sb {
        return Err("describes another volume layout than the superblock's".into());
    }
    Ok(Some(new))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// FORMAT.md's recovery table is this one, row for row: the prose cannot drift.
    #[test]
    fn format_md_shows_recovery_cases() {
        let doc = include_str!("../../../../FORMAT.md");
        let header = "| Copies holding the newest | Copies holding the older |";
        let at = doc.find(header).expect("FORMAT.md has the recovery table");
        let rows: Vec<&str> = doc[at..]
            .lines()
            .skip(2)
            .take_while(|l| l.starts_with('|'))
            .collect();
        let want: Vec<String> = RECOVERY_CASES.iter().map(|r| r.markdown()).collect();
        assert_eq!(rows, want, "FORMAT.md section 13 and RECOVERY_CASES differ");
    }
}
