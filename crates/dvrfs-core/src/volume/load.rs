//! Opening a file system: find a valid superblock, replay the journal, then read and
//! verify every metadata block in use.
//!
//! Recovery decisions, as a table (each case is tested):
//!
//! | primary sb | end-of-device sb | journal head        | action                                   |
//! |------------|------------------|---------------------|------------------------------------------|
//! | valid      | any              | none / torn / stale | use primary                              |
//! | invalid    | valid            | any                 | use the copy; fsck --repair rewrites it  |
//! | invalid    | invalid          | any                 | refuse: not dvrfs / corrupt              |
//! | any valid  |                  | complete txn        | apply its images over what was read; a   |
//! |            |                  |                     | writable open also checkpoints them      |
//!
//! For every other block: the journal image if the replayed transaction has one, else
//! the primary copy if it verifies, else the backup copy if it verifies (recorded in
//! the [`LoadReport`]), else the open fails naming the block.

use super::*;
use crate::alloc::Bitmap;
use crate::device::Device;
use crate::format::dir::decode_dir;
use crate::format::inode::{
    decode_runs, get_map_sum, get_tail_floor, map_sum, InodeRecord, Run, INDIRECT_SLOTS,
    INLINE_RUNS, INODES_PER_BLOCK, INODE_BYTES, MAX_RUNS, RUNS_PER_BLOCK,
};
use crate::format::journal::{decode_transaction, parse_head, transaction_blocks};
use crate::format::{payload, verify_block, BlockType, META_BLOCK_BYTES};

/// What the open found and did.
#[derive(Clone, Debug, Default)]
pub struct LoadReport {
    /// Which superblock copy was used: "primary", "end-of-device copy",
    /// "backup-region copy", or "journal" (the transaction to replay holds it).
    pub superblock_from: &'static str,
    /// Copies that were unreadable or disagreed with the one used, and why it won.
    pub superblock_note: Option<String>,
    /// The transaction replayed from the journal, if any, and the blocks it held.
    pub replayed_txn: Option<u64>,
    pub replayed_blocks: Vec<u64>,
    /// A transaction found whole in the journal but not replayed (its superblock
    /// image does not fit the volume), and why. `fsck` reports it; the repair's
    /// commit overwrites it.
    pub journal_note: Option<String>,
    /// Primary metadata blocks that failed verification and were read from the backup
    /// region: (block number, what was wrong).
    pub from_backup: Vec<(u64, String)>,
    /// Structural problems found while loading, with the inode concerned; the affected
    /// structure was cut back to its valid part in memory. `fsck` reports these.
    pub problems: Vec<(Option<Ino>, String)>,
    /// Files left unlinked-while-open by the last user of the volume, freed by this
    /// (writable) open.
    pub orphans_freed: usize,
    /// Metadata blocks unreadable in both copies, and why. The open went on without
    /// them (read-only, or `fsck --repair`): a lost bitmap block counts its blocks as
    /// used, a lost inode-table block loses its inodes, a lost directory block its
    /// entries (fsck moves the children it finds no name for to `/lost+found`).
    pub lost_blocks: Vec<(u64, String)>,
    /// Leading inode-table blocks read: the superblock's `inode_blocks_used` and a
    /// margin of [`INODE_MARK_MARGIN`] blocks past it (the whole table for a volume
    /// made before the mark existed).
    pub inode_blocks_read: u64,
    /// Event-area blocks or records that could not be read, skipped (the open goes
    /// on; fsck reports them and `--repair` rewrites the blocks from what was read).
    pub event_problems: Vec<(u64, String)>,
    /// The lost-tail record found (the last committed transaction's), on a volume
    /// with an event area.
    pub tails: Option<crate::format::events::Tails>,
    /// Its files, with their paths and sizes now: the files whose last accepted
    /// bytes did not survive the crash. Empty after a clean close.
    pub lost_tails: Vec<super::LostTail>,
    /// Files with a lost tail the record had no room to list.
    pub tails_left_out: u32,
    /// What the tail log held (`volume/tail_log.rs`): records, what replay writes, what
    /// could not be used.
    pub tail_log: super::tail_log::TailLogReport,
    /// The device is shorter than the volume: (the volume's bytes, the device's).
    /// Only a read-only open gets this far; reads past the device's end fail.
    pub truncated: Option<(u64, u64)>,
}

/// Inode-table blocks a loader reads past the superblock's mark (1 MiB, one bulk
/// read): a live inode there means the mark was stale (reported; fsck raises it).
pub const INODE_MARK_MARGIN: u64 = 256;

/// The size of one bulk metadata read (the loader's areas, fsck's copy comparison).
pub(super) const BULK_READ_BYTES: usize = 1 << 20;

struct Reader<'a, D: Device> {
    dev: &'a D,
    sb: &'a Superblock,
    overlay: &'a HashMap<u64, Vec<u8>>,
    report: &'a mut LoadReport,
}

impl<'a, D: Device> Reader<'a, D> {
    fn new(
        dev: &'a D,
        sb: &'a Superblock,
        overlay: &'a HashMap<u64, Vec<u8>>,
        report: &'a mut LoadReport,
    ) -> Self {
        Reader {
            dev,
            sb,
            overlay,
            report,
        }
    }

    fn pick(&mut self, n: u64, ty: BlockType, primary: &[u8]) -> Result<Vec<u8>> {
        if let Some(img) = self.overlay.get(&n) {
            if verify_block(img, ty, &self.sb.uuid, n).is_ok() {
                return Ok(img.clone());
            }
        }
        let why = match verify_block(primary, ty, &self.sb.uuid, n) {
            Ok(_) => return Ok(primary.to_vec()),
            Err(e) => e,
        };
        let mut backup = vec![0u8; META_BLOCK_BYTES];
        self.dev
            .read_at(self.sb.backup_offset(n), &mut backup)
            .map_err(|e| Error::io(format!("reading backup metadata block {n}"), e))?;
        match verify_block(&backup, ty, &self.sb.uuid, n) {
            Ok(_) => {
                self.report.from_backup.push((n, format!("{} block: {why}", ty.name())));
                Ok(backup)
            }
            Err(bwhy) => Err(Error::Corrupt(format!(
                "metadata block {n} ({}) is unreadable in both copies: primary: {why}; backup: {bwhy}",
                ty.name()
            ))),
        }
    }

    /// [`Reader::pick`], but a block bad in both copies is recorded as lost and
    /// `None` returned (I/O errors still fail).
    fn pick_or_lose(&mut self, n: u64, ty: BlockType, primary: &[u8]) -> Result<Option<Vec<u8>>> {
        match self.pick(n, ty, primary) {
            Ok(b) => Ok(Some(b)),
            Err(Error::Corrupt(why)) => {
                self.report.lost_blocks.push((n, why));
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }

    /// Block `n` as `ty` from the journal's overlay or either copy, or `None`, with
    /// nothing reported: for evidence gathered before the load proper reads it.
    fn peek(&self, n: u64, ty: BlockType) -> Result<Option<Vec<u8>>> {
        let ok = |b: &[u8]| verify_block(b, ty, &self.sb.uuid, n).is_ok();
        if let Some(img) = self.overlay.get(&n).filter(|img| ok(img)) {
            return Ok(Some(img.clone()));
        }
        let mut b = vec![0u8; META_BLOCK_BYTES];
        for off in [self.sb.primary_offset(n), self.sb.backup_offset(n)] {
            self.dev
                .read_at(off, &mut b)
                .map_err(|e| Error::io(format!("reading metadata block {n}"), e))?;
            if ok(&b) {
                return Ok(Some(b));
            }
        }
        Ok(None)
    }

    fn one_or_lose(&mut self, n: u64, ty: BlockType) -> Result<Option<Vec<u8>>> {
        let mut b = vec![0u8; META_BLOCK_BYTES];
        self.dev
            .read_at(self.sb.primary_offset(n), &mut b)
            .map_err(|e| Error::io(format!("reading metadata block {n}"), e))?;
        self.pick_or_lose(n, ty, &b)
    }

    /// Reads `count` blocks from `start` in large requests, verifying each; `f` gets
    /// `None` for a block lost in both copies.
    fn area(
        &mut self,
        start: u64,
        count: u64,
        ty: BlockType,
        mut f: impl FnMut(u64, Option<&[u8]>) -> Result<()>,
    ) -> Result<()> {
        let per = (BULK_READ_BYTES / META_BLOCK_BYTES) as u64;
        let mut buf = crate::device::AlignedBuf::zeroed(per.min(count) as usize * META_BLOCK_BYTES);
        let mut k = 0;
        while k < count {
            let n = per.min(count - k);
            let bytes = &mut buf[..n as usize * META_BLOCK_BYTES];
            self.dev
                .read_at(self.sb.primary_offset(start + k), bytes)
                .map_err(|e| Error::io(format!("reading the {} area", ty.name()), e))?;
            for j in 0..n {
                let raw =
                    &bytes[j as usize * META_BLOCK_BYTES..(j as usize + 1) * META_BLOCK_BYTES];
                let img = self.pick_or_lose(start + k + j, ty, raw)?;
                f(k + j, img.as_deref())?;
            }
            k += n;
        }
        Ok(())
    }
}

/// How far back from the end of the device the backup-region superblock is searched
/// for when no copy says where it is and no standard layout puts it there.
pub const BACKUP_SEARCH_BYTES: u64 = 1 << 30;

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
/// Returns the superblock, which copy it came from, and what the others were.
fn read_superblock<D: Device>(dev: &D) -> Result<(Superblock, &'static str, Option<String>)> {
    let size = dev.size_bytes() / META_BLOCK_BYTES as u64 * META_BLOCK_BYTES as u64;
    if size < 2 * META_BLOCK_BYTES as u64 {
        // `size` counts whole blocks only: a few bytes of text count as 0, which is
        // no size to show (the caller knows the file's own).
        return Err(Error::NotDvrfs(format!(
            "too small to be one: a dvrfs volume starts with a {META_BLOCK_BYTES}-byte superblock and ends with its copy, and {} whole blocks fit here",
            size / META_BLOCK_BYTES as u64
        )));
    }
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
    // The backup region's copy: where the copies say, else where a standard layout
    // of this size puts it, else searched for.
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
    if copies.is_empty() {
        let all_magic = bad
            .iter()
            .all(|(_, e)| *e == crate::format::BlockError::BadMagic);
        if all_magic {
            return Err(Error::NotDvrfs(
                "no dvrfs superblock at the start or the end of the device, nor a backup-region copy".into(),
            ));
        }
        let why: Vec<String> = bad.iter().map(|(n, e)| format!("{n}: {e}")).collect();
        return Err(Error::Corrupt(format!(
            "no valid superblock: {}",
            why.join("; ")
        )));
    }
    let votes = |sb: &Superblock| copies.iter().filter(|c| c.sb == *sb).count();
    let rank = |name: &str| match name {
        "primary" => 2,
        "end-of-device copy" => 1,
        _ => 0,
    };
    // A copy that describes a file system larger than the device cannot be this
    // device's (unless every copy does: a truncated image, reported by the caller),
    // however many copies agree on it.
    let fits = |sb: &Superblock| sb.device_bytes <= size;
    let best = copies
        .iter()
        .max_by_key(|c| (fits(&c.sb), votes(&c.sb), c.seq, rank(c.name)))
        .expect("non-empty");
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
    Ok((best.sb.clone(), best.name, note))
}

/// Where `mkfs` with each data block size (and its default inode count) puts the
/// backup region of a device of `size` bytes.
fn standard_backup_places(size: u64) -> Vec<u64> {
    let mut out = vec![];
    let mut bs = crate::layout::MIN_DATA_BLOCK_BYTES;
    while bs <= crate::layout::MAX_DATA_BLOCK_BYTES {
        // With the default checksums, and without (volumes made before them).
        for sums in [true, false] {
            let mut p = crate::layout::MkfsParams::new(size, [0; 16], 0);
            p.data_block_bytes = bs;
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

fn read_journal<D: Device>(dev: &D, sb: &Superblock) -> Result<Option<Replay>> {
    let mut b = vec![0u8; META_BLOCK_BYTES];
    dev.read_at(sb.primary_offset(sb.journal_start), &mut b)
        .map_err(|e| Error::io("reading the journal", e))?;
    let Some(head) = parse_head(&b, &sb.uuid, sb.journal_start) else {
        return Ok(None);
    };
    let blocks = transaction_blocks(head.images);
    // A transaction older than the superblock's last one was checkpointed long ago.
    if blocks as u64 > sb.journal_blocks || head.txn < sb.last_txn {
        return Ok(None);
    }
    let mut bytes = vec![0u8; blocks * META_BLOCK_BYTES];
    dev.read_at(sb.primary_offset(sb.journal_start), &mut bytes)
        .map_err(|e| Error::io("reading the journal", e))?;
    let txn = decode_transaction(&bytes, &sb.uuid, sb.journal_start, head).filter(|imgs| {
        imgs.iter()
            .all(|(n, _)| *n < sb.meta_blocks && !sb.in_journal(*n))
    });
    Ok(txn.map(|images| Replay {
        txn: head.txn,
        images,
    }))
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

impl Volume {
    /// Loads and verifies the whole metadata of the file system on `dev` (reads only),
    /// with the journal's complete transaction applied over what the regions hold.
    /// A writable volume must have the returned [`Replay`] checkpointed before anything
    /// else is committed (the engine does it first).
    pub fn load<D: Device>(dev: &D, opts: &OpenOptions) -> Result<(Volume, Option<Replay>)> {
        let (mut sb, superblock_from, superblock_note) = read_superblock(dev)?;
        let mut report = LoadReport {
            superblock_from,
            superblock_note,
            ..Default::default()
        };
        // A device shorter than the volume (a truncated image): a read-only open
        // serves what is there, each read past the end failing for its file
        // (`Error::PastEnd`); a writable one is refused, for its writes and its
        // metadata copies would go where the device has nothing.
        if sb.device_bytes > dev.size_bytes() {
            let truncated = Error::Truncated {
                volume_bytes: sb.device_bytes,
                device_bytes: dev.size_bytes(),
            };
            if opts.writable {
                return Err(truncated);
            }
            report.truncated = Some((sb.device_bytes, dev.size_bytes()));
        }
        let mut journal = read_journal(dev, &sb)?;
        if let Some(Err(why)) = journal.as_ref().map(|r| journal_superblock(r, &sb)) {
            // Written whole (its commit checksum holds) but not by dvrfs as it is:
            // the volume stays as its last checkpoint left it.
            let txn = journal.as_ref().map_or(0, |r| r.txn);
            report.journal_note = Some(format!(
                "transaction {txn} was not replayed: its superblock image {why}"
            ));
            journal = None;
        }
        let mut overlay = HashMap::new();
        if let Some(r) = &journal {
            if let Ok(Some(img)) = journal_superblock(r, &sb) {
                sb = img;
                // The journal's image is the current one; copies that differ were
                // being checkpointed when the power went, and the replay rewrites
                // them all.
                report.superblock_note = None;
                report.superblock_from = "journal";
            }
            report.replayed_txn = Some(r.txn);
            report.replayed_blocks = r.images.iter().map(|(n, _)| *n).collect();
            overlay.extend(r.images.iter().cloned());
        }
        let interval_ms = opts
            .commit_interval_ms
            .unwrap_or(sb.commit_interval_ms)
            .max(1);
        let fresh = |sb: &Superblock| Volume {
            data: DataAlloc::new(sb),
            meta: MetaAlloc::new(sb.dynamic_start, sb.dynamic_blocks),
            writable: opts.writable,
            inodes: BTreeMap::new(),
            dirs: HashMap::new(),
            symlinks: HashMap::new(),
            parents: HashMap::new(),
            owners: HashMap::new(),
            dirty: BTreeSet::new(),
            pending: BTreeMap::new(),
            commit_interval_ms: interval_ms,
            free_inode_hint: 1,
            next_generation: 1,
            open_refs: HashMap::new(),
            orphans: BTreeSet::new(),
            report: LoadReport::default(),
            // A repair open frees orphans before fsck proper starts: tolerantly too.
            in_fsck: opts.repair,
            sums: None,
            events: Default::default(),
            tail_floors: BTreeMap::new(),
            tail_replay: Vec::new(),
            tail_read: BTreeMap::new(),
            present_bytes: dev.size_bytes().min(sb.device_bytes),
            sb: sb.clone(),
        };
        let partial = match &opts.only_paths {
            Some(paths) => {
                // An invariant of the options, not of the disk: a partial volume must
                // never be written back.
                assert!(!opts.writable, "a path-only open is read-only");
                let mut v = fresh(&sb);
                let mut seen = report.clone();
                v.load_paths(dev, &overlay, &mut seen, paths, opts.path_children)?;
                // On a damaged volume what a structure keeps can depend on what was
                // loaded before it (two claims on one block: the first one loaded
                // wins, in inode order in a full load). A partial load that meets any
                // damage gives its answer up for the full load's.
                let clean = seen.problems.is_empty() && seen.lost_blocks.is_empty();
                clean.then(|| {
                    report = seen;
                    v
                })
            }
            None => None,
        };
        let mut v = match partial {
            Some(v) => v,
            None => {
                let mut v = fresh(&sb);
                v.load_all(dev, &overlay, &mut report)?;
                v
            }
        };
        if opts.writable || opts.verify_data {
            v.load_sums(dev, &overlay, &mut report)?;
        }
        if opts.only_paths.is_none() {
            v.load_events(dev, &overlay, &mut report)?;
        }
        // Every open plans the replay (a path-only one for the files it loaded): a
        // writable open writes it, a read-only one serves it (`volume/tail_log.rs`).
        v.load_tail_log(dev, &mut report)?;
        if !opts.writable {
            v.keep_tail_for_reading(&mut report);
        }
        // The inode-table mark: set on a volume made before it existed, raised where
        // it was stale (reported above), stored with the next commit.
        let need = v
            .inodes
            .keys()
            .next_back()
            .map_or(1, |&i| i as u64 / INODES_PER_BLOCK as u64 + 1);
        if opts.writable && v.sb.inode_blocks_used < need {
            v.sb.inode_blocks_used = need;
            v.dirty.insert(0);
        }
        // Files unlinked while open when the volume was last used (the process ended
        // before closing them): link count 0 and no directory names them. One that a
        // directory still names had its link count damaged: it is not freed (that
        // would lose a recording the directory lists), and fsck sets the count.
        let named: std::collections::HashSet<Ino> = v
            .dirs
            .values()
            .flat_map(|d| d.entries.values().map(|e| e.ino))
            .collect();
        let mut orphans = vec![];
        for (&ino, i) in &v.inodes {
            if i.kind() == Some(Kind::File) && i.attr.nlink == 0 {
                if named.contains(&ino) {
                    report.problems.push((
                        Some(ino),
                        format!("inode {ino}: link count 0, but a directory names it"),
                    ));
                } else {
                    orphans.push(ino);
                }
            }
        }
        if opts.writable && !opts.repair && !report.lost_blocks.is_empty() {
            let (n, why) = &report.lost_blocks[0];
            return Err(Error::Corrupt(format!(
                "{} metadata block(s) lost in both copies (block {n}: {why}); what is intact can be read (ls, get), but nothing may be written before `fsck --repair`",
                report.lost_blocks.len()
            )));
        }
        // What was loaded differs from what is stored (runs cut or lost, entries
        // dropped): writing on top would store half of each. Repair settles it first.
        if opts.writable && !opts.repair && !report.problems.is_empty() {
            let (_, why) = &report.problems[0];
            return Err(Error::Corrupt(format!(
                "{} problem(s) found while loading ({why}); what is intact can be read (ls, get), but nothing may be written before `fsck --repair`",
                report.problems.len()
            )));
        }
        v.next_generation = v
            .inodes
            .values()
            .map(|i| i.attr.generation)
            .max()
            .unwrap_or(0)
            .wrapping_add(1);
        if opts.writable {
            for &ino in &orphans {
                v.free_inode(ino)?;
            }
            report.orphans_freed = orphans.len();
        }
        v.report = report;
        let replay = if opts.writable { journal } else { None };
        Ok((v, replay))
    }

    /// Reads the data checksum area (a volume without one has no checksums). A block
    /// lost in both copies leaves its entries unchecked; `fsck --repair` stores that.
    fn load_sums<D: Device>(
        &mut self,
        dev: &D,
        overlay: &HashMap<u64, Vec<u8>>,
        report: &mut LoadReport,
    ) -> Result<()> {
        let sb = self.sb.clone();
        let Some(mut sums) = Sums::new(&sb) else {
            return Ok(());
        };
        let mut r = Reader::new(dev, &sb, overlay, report);
        r.area(sb.sum_start, sb.sum_blocks, BlockType::Sums, |k, img| {
            sums.decode_block(k, img.map(payload));
            Ok(())
        })?;
        self.sums = Some(sums);
        Ok(())
    }

    fn load_all<D: Device>(
        &mut self,
        dev: &D,
        overlay: &HashMap<u64, Vec<u8>>,
        report: &mut LoadReport,
    ) -> Result<()> {
        let sb = self.sb.clone();
        let mut r = Reader::new(dev, &sb, overlay, report);
        let mut used = Bitmap::new(sb.data_blocks);
        let mut stray = false;
        r.area(
            sb.data_bitmap_start,
            sb.data_bitmap_blocks,
            BlockType::DataBitmap,
            |k, img| {
                match img {
                    Some(img) => {
                        used.decode_block(k, payload(img));
                        stray |= used.block_has_stray_bits(k, payload(img));
                    }
                    // Lost: every block it covers counts as used (nothing is handed
                    // out twice); fsck rebuilds it from the files.
                    None => used.decode_block(k, &[0xFF; crate::format::PAYLOAD_BYTES]),
                }
                Ok(())
            },
        )?;
        let mut mused = Bitmap::new(sb.dynamic_blocks);
        r.area(
            sb.meta_bitmap_start,
            sb.meta_bitmap_blocks,
            BlockType::MetaBitmap,
            |k, img| {
                match img {
                    Some(img) => {
                        mused.decode_block(k, payload(img));
                        stray |= mused.block_has_stray_bits(k, payload(img));
                    }
                    None => mused.decode_block(k, &[0xFF; crate::format::PAYLOAD_BYTES]),
                }
                Ok(())
            },
        )?;
        let mut records = Vec::new();
        let mut floors: Vec<(Ino, u64)> = Vec::new();
        let tail_log = sb.has_tail_log();
        let mut lost_inodes = vec![];
        let read = match sb.inode_blocks_used {
            0 => sb.inode_table_blocks,
            mark => (mark + INODE_MARK_MARGIN).min(sb.inode_table_blocks),
        };
        r.report.inode_blocks_read = read;
        r.area(
            sb.inode_table_start,
            read,
            BlockType::InodeTable,
            |k, img| {
                let Some(img) = img else {
                    let first = k * INODES_PER_BLOCK as u64;
                    lost_inodes.push((first, first + INODES_PER_BLOCK as u64 - 1));
                    return Ok(());
                };
                let p = payload(img);
                for j in 0..INODES_PER_BLOCK {
                    let ino = k * INODES_PER_BLOCK as u64 + j as u64;
                    let raw = &p[j * INODE_BYTES..(j + 1) * INODE_BYTES];
                    // A free record has mode 0 (its first field): skip decoding it.
                    if raw[..4] == [0; 4] {
                        continue;
                    }
                    let rec = InodeRecord::decode(raw);
                    if !rec.is_free() {
                        records.push((ino, rec, get_map_sum(p, j)));
                        let floor = get_tail_floor(p, j);
                        if floor > 0 && tail_log {
                            floors.push((ino as Ino, floor));
                        }
                    }
                }
                Ok(())
            },
        )?;
        self.tail_floors.extend(floors);
        if stray {
            r.report.problems.push((
                None,
                "a bitmap block has bits set past the end of its area".into(),
            ));
        }
        for (a, b) in lost_inodes {
            r.report.problems.push((
                None,
                format!("inodes {a} to {b} are lost with their inode-table block"),
            ));
        }
        self.data.set_used_bitmap(used);
        self.meta.set_used_bitmap(mused);

        let mark = sb.inode_blocks_used;
        if let Some((ino, _, _)) = records
            .iter()
            .rev()
            .find(|(ino, _, _)| mark != 0 && *ino / INODES_PER_BLOCK as u64 >= mark)
        {
            r.report.problems.push((
                None,
                format!("inode {ino} lies past the superblock's inode-table mark ({mark} blocks): the mark is stale"),
            ));
        }
        let contested = contested_extents(&r, &records)?;
        for (ino, rec, stored_sum) in records {
            self.load_inode(&mut r, ino, rec, stored_sum, true, &contested)?;
        }
        self.link_parents();
        self.stand_in_root(&mut r.report.problems);
        self.check_block_claims(&mut r.report.problems);
        Ok(())
    }

    /// Every block a file or a directory uses must be marked used in its bitmap: a
    /// bitmap that says one is free (damage with its checksum intact) would hand it
    /// out again. And no data block may belong to two files: deleting both would
    /// free it twice. Each such file is reported (a writable open then waits for
    /// `fsck --repair`, which rebuilds the bitmaps and names shared blocks); a block
    /// marked used that nothing uses is only a leak, left to fsck. With these checked
    /// at every full load, the allocators' double-free assertions guard invariants
    /// of the code, not of the disk.
    fn check_block_claims(&self, problems: &mut Vec<(Option<Ino>, String)>) {
        let mut found: BTreeMap<Ino, String> = BTreeMap::new();
        let mut claimed = Bitmap::new(self.sb.data_blocks);
        for (&ino, inode) in &self.inodes {
            if inode.kind() != Some(Kind::File) {
                continue;
            }
            for b in inode
                .runs
                .iter()
                .filter(|r| !r.is_lost())
                .flat_map(|r| r.blocks())
            {
                let why = if !self.data.used().get(b) {
                    format!("uses data block {b}, which its bitmap marks free")
                } else if claimed.get(b) {
                    format!("uses data block {b}, which is claimed twice (by another file, or by this one again)")
                } else {
                    claimed.set(b, true);
                    continue;
                };
                found.entry(ino).or_insert(why);
            }
        }
        // In block order: an inode's first problem reported is its lowest block's.
        let mut owned: Vec<(&u64, &Owner)> = self.owners.iter().collect();
        owned.sort_unstable_by_key(|(b, _)| **b);
        for (&b, owner) in owned {
            let ino = owner.ino();
            if !self.meta.is_used(b) {
                found.entry(ino).or_insert_with(|| {
                    format!("uses metadata block {b}, which its bitmap marks free")
                });
            }
        }
        for (ino, why) in found {
            problems.push((Some(ino), format!("inode {ino} {why}")));
        }
    }
    /// A root whose inode went with a lost block, or whose record is not a directory
    /// any more: an empty root stands in, so what is intact stays reachable to fsck,
    /// which links it into /lost+found (a record that was there is dropped: the blocks
    /// it named are no longer in use).
    fn stand_in_root(&mut self, problems: &mut Vec<(Option<Ino>, String)>) {
        if self.dirs.contains_key(&self.sb.root_ino) {
            return;
        }
        let root = self.sb.root_ino;
        if self.inodes.remove(&root).is_some() {
            self.symlinks.remove(&root);
            self.owners.retain(|_, o| o.ino() != root);
        }
        self.inodes.insert(
            root,
            Inode {
                attr: InodeRecord {
                    mode: crate::format::inode::S_IFDIR | 0o755,
                    nlink: 2,
                    ..Default::default()
                },
                runs: vec![],
            },
        );
        self.dirs.insert(root, Dir::default());
        self.parents.insert(root, root);
        problems.push((
            Some(root),
            "the root directory's inode is lost or not a directory: an empty root stands in".into(),
        ));
    }

    /// Loads only what resolving `paths` reads (a read-only open for `stat`): the root,
    /// then for each component the directory's blocks and the named inode with its
    /// runs. Names outside those directories, the bitmaps and the inode table's other
    /// records are not read, so nothing is reported about them (fsck reads them all).
    fn load_paths<D: Device>(
        &mut self,
        dev: &D,
        overlay: &HashMap<u64, Vec<u8>>,
        report: &mut LoadReport,
        paths: &[String],
        children: bool,
    ) -> Result<()> {
        let sb = self.sb.clone();
        let mut r = Reader::new(dev, &sb, overlay, report);
        // Inode-table blocks read so far (a directory's children share them).
        let mut table = HashMap::new();
        let root = sb.root_ino;
        self.load_one(&mut r, &mut table, root as u64, true)?;
        self.stand_in_root(&mut r.report.problems);
        self.parents.insert(root, root);
        for path in paths {
            let mut ino = root;
            for comp in path.split('/').filter(|c| !c.is_empty() && *c != ".") {
                if comp == ".." {
                    ino = *self.parents.get(&ino).unwrap_or(&root);
                    continue;
                }
                let Some(e) = self
                    .dirs
                    .get(&ino)
                    .and_then(|d| d.entries.get(comp.as_bytes()))
                else {
                    break; // Resolving it says what is wrong.
                };
                let (child, kind) = (e.ino, e.kind);
                self.load_one(&mut r, &mut table, child as u64, true)?;
                if kind == Kind::Dir {
                    self.parents.entry(child).or_insert(ino);
                }
                ino = child;
            }
            if !children {
                continue;
            }
            let entries: Vec<(Ino, Kind)> = self
                .dirs
                .get(&ino)
                .map(|d| d.entries.values().map(|e| (e.ino, e.kind)).collect())
                .unwrap_or_default();
            for (child, kind) in entries {
                self.load_one(&mut r, &mut table, child as u64, false)?;
                if kind == Kind::Dir {
                    self.parents.entry(child).or_insert(ino);
                }
            }
        }
        Ok(())
    }

    /// Reads inode `ino`'s inode-table block and loads the record if it is in use
    /// (once; a free, lost or out-of-range record is left out, and resolving a name
    /// that leads to it fails as a name without a file does). `entries`: a directory's
    /// entries too (one loaded without them earlier is loaded again with them).
    fn load_one<D: Device>(
        &mut self,
        r: &mut Reader<'_, D>,
        table: &mut HashMap<u64, Option<Vec<u8>>>,
        ino: u64,
        entries: bool,
    ) -> Result<()> {
        let sb = r.sb;
        if ino >= sb.inode_count as u64 {
            return Ok(());
        }
        if let Some(i) = self.inodes.get(&(ino as Ino)) {
            let shallow = i.kind() == Some(Kind::Dir) && !self.dirs.contains_key(&(ino as Ino));
            if !(entries && shallow) {
                return Ok(());
            }
            let ino = ino as Ino;
            self.inodes.remove(&ino);
            self.owners.retain(|_, o| o.ino() != ino);
        }
        let k = ino / INODES_PER_BLOCK as u64;
        let img = match table.get(&k) {
            Some(img) => img.clone(),
            None => {
                let img = r.one_or_lose(sb.inode_table_start + k, BlockType::InodeTable)?;
                table.insert(k, img.clone());
                img
            }
        };
        let Some(img) = img else {
            let first = k * INODES_PER_BLOCK as u64;
            r.report.problems.push((
                None,
                format!(
                    "inodes {first} to {} are lost with their inode-table block",
                    first + INODES_PER_BLOCK as u64 - 1
                ),
            ));
            return Ok(());
        };
        let (p, j) = (payload(&img), (ino % INODES_PER_BLOCK as u64) as usize);
        let rec = InodeRecord::decode(&p[j * INODE_BYTES..(j + 1) * INODE_BYTES]);
        if rec.is_free() {
            return Ok(());
        }
        let floor = get_tail_floor(p, j);
        if floor > 0 && sb.has_tail_log() {
            self.tail_floors.insert(ino as Ino, floor);
        }
        // A path-only load sees too few records to settle contested extents; it gives
        // its answer up for the full load's on any damage it meets.
        self.load_inode(r, ino, rec, get_map_sum(p, j), entries, &HashMap::new())
    }

    /// Decodes and checks one inode record in use (its runs, and a directory's entries
    /// or a symlink's target), and adds it to the volume; what is wrong is reported.
    fn load_inode<D: Device>(
        &mut self,
        r: &mut Reader<'_, D>,
        ino: u64,
        rec: InodeRecord,
        stored_sum: Option<u32>,
        entries: bool,
        contested: &HashMap<u64, (Ino, usize)>,
    ) -> Result<()> {
        let sb = r.sb;
        if ino == 0 || ino >= sb.inode_count as u64 {
            // Named by its slot, so fsck rewrites the block holding it (free).
            r.report.problems.push((
                Some(ino as Ino),
                format!("inode slot {ino} is outside the usable inode range"),
            ));
            return Ok(());
        }
        let ino = ino as Ino;
        let Some(kind) = Kind::from_mode(rec.mode) else {
            r.report.problems.push((
                Some(ino),
                format!("inode {ino} has an unknown file type (mode {:o})", rec.mode),
            ));
            return Ok(());
        };
        let (runs, usable_slots) = load_runs(r, ino, &rec, contested, &self.owners)?;
        let runs = if kind == Kind::File {
            let end = rec.size_bytes.div_ceil(sb.data_block_bytes);
            // A record without a map checksum is an old one only on a volume that
            // does not keep them for every file; otherwise its checksum was damaged.
            let sum_ok = match stored_sum {
                Some(m) => m == map_sum(rec.size_bytes, runs.iter().flatten()),
                None => !sb.map_sums_kept(),
            };
            let runs_read = runs.iter().all(Option::is_some);
            let found = r.report.problems.len();
            let runs = valid_file_runs(runs, sb.data_blocks, end, ino, &mut r.report.problems);
            let run_damaged = r.report.problems.len() > found;
            let map = MapState {
                sum_ok,
                runs_read,
                run_damaged,
            };
            lose_holes_of_a_damaged_map(runs, map, end, ino, &mut r.report.problems)
        } else {
            let limit = (sb.dynamic_start, sb.dynamic_start + sb.dynamic_blocks);
            valid_prefix(runs, limit, ino, &mut r.report.problems)
        };
        let mut rec = rec;
        let inline_target = std::mem::take(&mut rec.inline_target);
        keep_needed_extents(&mut self.owners, ino, &mut rec, runs.len(), usable_slots);
        let inode = Inode { attr: rec, runs };
        match kind {
            // A directory listed but not opened (a path-only load): its record only.
            Kind::Dir if !entries => {}
            Kind::Dir => {
                let (dir, cut) = load_dir(r, &mut self.owners, ino, &inode)?;
                self.dirs.insert(ino, dir);
                if let Some(cut) = cut {
                    // The directory ends before a block that is another's.
                    let mut inode = inode;
                    inode.truncate_blocks(cut as u64);
                    self.inodes.insert(ino, inode);
                    return Ok(());
                }
            }
            Kind::Symlink => {
                // The block is the link's only if nothing else claims it and it holds
                // a target; otherwise the link has none (fsck removes it) and the
                // block stays with whoever owns it.
                let owners = &self.owners;
                let target = super::symlink::loaded_target(sb, &inode, inline_target, |b| {
                    if owners.contains_key(&b) {
                        return Ok(Err(format!("its target block {b} belongs to another file")));
                    }
                    Ok(r.one_or_lose(b, BlockType::Symlink)?
                        .ok_or_else(|| "its target block is lost".to_string()))
                })?;
                match target {
                    Ok((t, block)) => {
                        self.symlinks.insert(ino, t);
                        if let Some(b) = block {
                            self.owners.insert(b, Owner::Symlink { ino });
                        }
                    }
                    Err(e) => r
                        .report
                        .problems
                        .push((Some(ino), format!("symlink inode {ino}: {e}"))),
                }
            }
            Kind::File => {}
        }
        self.inodes.insert(ino, inode);
        Ok(())
    }
}

/// The runs of inode `rec` as stored: the inline ones, then those of its indirect
/// extents up to the first extent that is missing or lies outside the metadata area
/// (reported; the runs it held are lost, those before it kept). `None` stands for runs
/// that could not be read (past a bad extent, or in a run block lost in both copies).
/// Also returns how many leading extents are usable.
fn load_runs<D: Device>(
    r: &mut Reader<'_, D>,
    ino: Ino,
    rec: &InodeRecord,
    contested: &HashMap<u64, (Ino, usize)>,
    owners: &HashMap<u64, Owner>,
) -> Result<(Vec<Option<Run>>, usize)> {
    let mut total = rec.run_count as usize;
    let mut runs: Vec<Option<Run>> = rec.inline.iter().copied().map(Some).collect();
    if total > MAX_RUNS {
        r.report.problems.push((
            Some(ino),
            format!("inode {ino} claims {total} runs, more than the limit"),
        ));
        runs.push(None);
        return Ok((runs, 0));
    }
    let dynamic = r.sb.dynamic_start..r.sb.dynamic_start + r.sb.dynamic_blocks;
    let needed = crate::format::inode::slots_needed(total);
    let mut usable = needed;
    let mut cut = false;
    for slot in 0..needed {
        let start = rec.indirect[slot] as u64;
        let count = 1u64 << slot;
        let other =
            (start..start + count).find_map(|b| contested.get(&b).filter(|&&w| w != (ino, slot)));
        let why = if start == 0 {
            "is missing".to_string()
        } else if !dynamic.contains(&start) || !dynamic.contains(&(start + count - 1)) {
            "points outside the metadata area".to_string()
        } else if let Some(&(owner, _)) = other {
            format!("holds a block that inode {owner}'s runs hold")
        } else {
            continue;
        };
        // Runs held by extents 0..slot: INLINE_RUNS + RUNS_PER_BLOCK * (2^slot - 1).
        let kept = INLINE_RUNS + RUNS_PER_BLOCK * ((1usize << slot) - 1);
        r.report.problems.push((
            Some(ino),
            format!(
                "inode {ino}: indirect extent {slot} {why} (block {start}); its runs from run {kept} on are lost"
            ),
        ));
        total = total.min(kept);
        usable = slot;
        cut = true;
        break;
    }
    let mut idx = INLINE_RUNS;
    // How many entries `runs` had when the current extent began.
    let mut extent_begins = runs.len();
    while idx < total {
        let Some((slot, within, _)) = run_location(idx) else {
            break;
        };
        if within == 0 {
            extent_begins = runs.len();
        }
        let n = (total - idx).min(RUNS_PER_BLOCK);
        let start = rec.indirect[slot] as u64;
        let b = start + within;
        // Another structure's block (one loaded before, or a valid block of another
        // kind in both copies, as a directory's): the extent is not this record's, so
        // its runs are lost from the extent's first run on, as for a bad pointer.
        // Kept, the extent would be registered as this file's and a repair would
        // write the file's runs over the other structure's block.
        let taken = owners.get(&b).is_some_and(|o| o.ino() != ino);
        let Claim::Read(img) = claim(r, b, BlockType::Runs, taken)? else {
            let kept = INLINE_RUNS + RUNS_PER_BLOCK * ((1usize << slot) - 1);
            r.report.problems.push((
                Some(ino),
                format!(
                    "inode {ino}: indirect extent {slot} holds metadata block {b}, which belongs to another structure; its runs from run {kept} on are lost"
                ),
            ));
            runs.truncate(extent_begins);
            usable = slot;
            cut = true;
            break;
        };
        match img {
            Some(img) => runs.extend(decode_runs(payload(&img), n).into_iter().map(Some)),
            None => {
                r.report.problems.push((
                    Some(ino),
                    format!(
                        "inode {ino}: the block holding runs {idx} to {} is lost",
                        idx + n - 1
                    ),
                ));
                runs.push(None);
            }
        }
        idx += n;
    }
    if cut {
        runs.push(None);
    }
    Ok((runs, usable))
}

/// Indirect-extent blocks that two records claim (damage gave one record another's
/// pointer, or one record the same block in two slots), each with the one claimant,
/// an (inode, slot), that keeps it; the others lose their runs from that extent on
/// ([`load_runs`]). Without this the later claimant would silently take the block
/// over, and a repair that trims the damaged record's extents would free the block
/// the intact record's runs live in (found by libFuzzer: a second `fsck` then found
/// the intact file's map broken). Evidence decides, strongest first: the record's
/// map checksum verifies over the runs read through the block (the record and its
/// runs are as written); the record is plausible (a regular file cannot have more
/// runs than blocks, since every run covers at least one block of the file); then
/// the lowest inode and slot, as the full load's inode order settles every other
/// shared block. A claimant that loses has failed its checksum wherever the winner
/// passed it, so a path-only open that reaches it sees damage and gives its answer
/// up for this load's, and one that reaches only the winner answers as this load.
fn contested_extents<D: Device>(
    r: &Reader<'_, D>,
    records: &[(u64, InodeRecord, Option<u32>)],
) -> Result<HashMap<u64, (Ino, usize)>> {
    let sb = r.sb;
    let dynamic = sb.dynamic_start..sb.dynamic_start + sb.dynamic_blocks;
    // Block -> the records (index into `records`) and slots that claim it.
    // In block order, so the evidence is read (and a read error met) the same way at
    // every open.
    let mut claims: BTreeMap<u64, Vec<(usize, usize)>> = BTreeMap::new();
    for (k, (ino, rec, _)) in records.iter().enumerate() {
        // The records load_inode drops before reading runs claim nothing.
        let total = rec.run_count as usize;
        if Kind::from_mode(rec.mode).is_none()
            || total > MAX_RUNS
            || *ino == 0
            || *ino >= sb.inode_count as u64
        {
            continue;
        }
        for slot in 0..crate::format::inode::slots_needed(total) {
            let start = rec.indirect[slot] as u64;
            let count = 1u64 << slot;
            if start == 0 || !dynamic.contains(&start) || !dynamic.contains(&(start + count - 1)) {
                // load_runs cuts the runs here: later slots are never read.
                break;
            }
            for b in start..start + count {
                claims.entry(b).or_default().push((k, slot));
            }
        }
    }
    let mut evidence: HashMap<usize, (bool, bool)> = HashMap::new();
    let mut out = HashMap::new();
    for (b, c) in claims.into_iter().filter(|(_, c)| c.len() > 1) {
        let mut best: Option<((bool, bool), usize, usize)> = None;
        for &(k, slot) in &c {
            let e = match evidence.get(&k) {
                Some(&e) => e,
                None => {
                    let (_, rec, stored) = &records[k];
                    let file = Kind::from_mode(rec.mode) == Some(Kind::File);
                    let plausible = !file
                        || rec.run_count as u64 <= rec.size_bytes.div_ceil(sb.data_block_bytes);
                    let e = (
                        file && plausible && map_verifies(r, rec, *stored)?,
                        plausible,
                    );
                    evidence.insert(k, e);
                    e
                }
            };
            // Claims come in record (inode) and slot order: a tie keeps the first.
            if best.is_none_or(|(be, _, _)| e > be) {
                best = Some((e, k, slot));
            }
        }
        if let Some((_, k, slot)) = best {
            out.insert(b, (records[k].0 as Ino, slot));
        }
    }
    Ok(out)
}

/// Whether a file record's stored map checksum matches its size and its runs as
/// stored (inline and in its extents, each run block from either copy). A pointer
/// that could not hold runs (0, or outside the metadata area) is no evidence: `false`,
/// never a read outside the volume.
fn map_verifies<D: Device>(
    r: &Reader<'_, D>,
    rec: &InodeRecord,
    stored: Option<u32>,
) -> Result<bool> {
    let Some(stored) = stored else {
        return Ok(false);
    };
    let dynamic = r.sb.dynamic_start..r.sb.dynamic_start + r.sb.dynamic_blocks;
    let total = rec.run_count as usize;
    let mut runs = rec.inline.clone();
    let mut idx = INLINE_RUNS;
    while idx < total {
        let Some((slot, within, _)) = run_location(idx) else {
            return Ok(false);
        };
        let n = (total - idx).min(RUNS_PER_BLOCK);
        let b = rec.indirect[slot] as u64 + within;
        if rec.indirect[slot] == 0 || !dynamic.contains(&b) {
            return Ok(false);
        }
        let Some(img) = r.peek(b, BlockType::Runs)? else {
            return Ok(false);
        };
        runs.extend(decode_runs(payload(&img), n));
        idx += n;
    }
    Ok(map_sum(rec.size_bytes, runs.iter()) == stored)
}

/// The inode's indirect extents as its `runs` need them: extents past that (left by
/// runs lost to damage), and any from the first unusable one on, are dropped from the
/// record in memory, so nothing uses a pointer read from disk unchecked; their blocks
/// are no longer in use (fsck gives them back, and allocates new extents where the
/// runs need more than the usable ones). Registers the kept extents' owners.
fn keep_needed_extents(
    owners: &mut HashMap<u64, Owner>,
    ino: Ino,
    rec: &mut InodeRecord,
    runs: usize,
    usable: usize,
) {
    let need = crate::format::inode::slots_needed(runs).min(usable);
    for slot in 0..INDIRECT_SLOTS {
        if slot >= need {
            rec.indirect[slot] = 0;
            continue;
        }
        let start = rec.indirect[slot] as u64;
        for w in 0..1u64 << slot {
            owners.insert(
                start + w,
                Owner::Indirect {
                    ino,
                    slot: slot as u8,
                    within: w as u32,
                },
            );
        }
    }
}

/// A regular file's runs as loaded: every valid run is kept. A run whose blocks lie
/// outside the data region but whose file range is sound becomes a lost run (its
/// bytes are known to exist but not where); runs that could not be read, or whose
/// file range is unsound, leave the file range from the previous good run to the
/// next one lost. Lost runs stored on disk (written by an earlier repair) are kept.
/// Lost ranges past the file's end (`end_fb`) are dropped.
fn valid_file_runs(
    runs: Vec<Option<Run>>,
    data_blocks: u64,
    end_fb: u64,
    ino: Ino,
    problems: &mut Vec<(Option<Ino>, String)>,
) -> Vec<Run> {
    fn push_lost(out: &mut Vec<Run>, from: u64, to: u64) {
        if to <= from {
            return;
        }
        match out.last_mut() {
            Some(l) if l.is_lost() && l.file_end() == from => {
                l.count = (to - l.file_block as u64) as u32;
            }
            _ => out.push(Run::lost(from, to - from)),
        }
    }
    // File block numbers are u32 in a run: a lost range ends there whatever size a
    // damaged inode claims.
    let end_fb = end_fb.min(u32::MAX as u64);
    let mut out: Vec<Run> = Vec::with_capacity(runs.len());
    let mut gap = false;
    for r in runs {
        let prev_end = out.last().map_or(0, |p| p.file_end());
        let Some(r) = r else {
            gap = true;
            continue;
        };
        let file_ok = r.count > 0 && r.file_block as u64 >= prev_end;
        let blocks_ok = r.is_lost()
            || r.start
                .checked_add(r.count as u64)
                .is_some_and(|e| e <= data_blocks);
        if !file_ok {
            problems.push((
                Some(ino),
                format!("inode {ino}: invalid run {r:?}; the file's bytes from block {prev_end} to the next valid run are lost"),
            ));
            gap = true;
            continue;
        }
        if gap {
            push_lost(&mut out, prev_end, (r.file_block as u64).min(end_fb));
            gap = false;
        }
        if blocks_ok && !r.is_lost() {
            out.push(r);
            continue;
        }
        if !blocks_ok {
            problems.push((
                Some(ino),
                format!("inode {ino}: run {r:?} lies outside the data region; file blocks {} to {} are lost", r.file_block, r.file_end() - 1),
            ));
        }
        let from = (r.file_block as u64).max(out.last().map_or(0, |p| p.file_end()));
        push_lost(&mut out, from, r.file_end().min(end_fb));
    }
    if gap {
        let prev_end = out.last().map_or(0, |p| p.file_end());
        push_lost(&mut out, prev_end, end_fb);
    }
    out
}

/// What the loader found of a file's block map before [`lose_holes_of_a_damaged_map`].
struct MapState {
    /// The size and runs match the map checksum stored with the record (or the record
    /// has none, as on volumes made before it).
    sum_ok: bool,
    /// Every block holding runs was read (none lost, no extent cut).
    runs_read: bool,
    /// A run was invalid or outside the data region ([`valid_file_runs`] reported it).
    run_damaged: bool,
}

/// A file whose size and runs do not match the map checksum stored with its record,
/// that maps a block past its end (which never happens: blocks past the end are
/// freed), or one of whose runs was damaged, had its map damaged: a run moved, cut or
/// dropped, or the size changed. A damaged run's own file range cannot be trusted
/// either (its `file_block` may be what was hit), so the holes inside the file may
/// have been data: they become lost (reads there fail) instead of reading as zeros;
/// the runs left are checked by the data checksums when read.
fn lose_holes_of_a_damaged_map(
    runs: Vec<Run>,
    map: MapState,
    end_fb: u64,
    ino: Ino,
    problems: &mut Vec<(Option<Ino>, String)>,
) -> Vec<Run> {
    let past_end = runs.iter().any(|r| !r.is_lost() && r.file_end() > end_fb);
    let why = if !map.runs_read {
        "some of its runs could not be read"
    } else if !map.sum_ok {
        "its size and runs do not match their checksum"
    } else if past_end {
        "a run maps blocks past the end of the file"
    } else if map.run_damaged {
        "a run was damaged"
    } else {
        return runs;
    };
    problems.push((
        Some(ino),
        format!("inode {ino}: {why}: the block map was damaged, its holes are lost"),
    ));
    let end_fb = end_fb.min(u32::MAX as u64);
    let mut out: Vec<Run> = Vec::with_capacity(runs.len() + 1);
    let mut at = 0u64;
    for r in runs {
        let s = r.file_block as u64;
        if s > at && at < end_fb {
            out.push(Run::lost(at, s.min(end_fb) - at));
        }
        at = at.max(r.file_end());
        out.push(r);
    }
    if at < end_fb {
        out.push(Run::lost(at, end_fb - at));
    }
    // Adjacent lost runs join (a lost run next to a new one).
    let mut joined: Vec<Run> = Vec::with_capacity(out.len());
    for r in out {
        match joined.last_mut() {
            Some(l) if l.is_lost() && r.is_lost() && l.file_end() == r.file_block as u64 => {
                l.count += r.count;
            }
            _ => joined.push(r),
        }
    }
    joined
}

/// A directory's or symlink's runs: kept up to the first one that is empty, not
/// continuing the previous one in file space (their block indexes are dense from 0:
/// a directory only ever appends blocks), or outside `[lo, hi)`. Density also bounds
/// the block count by the dynamic area, so nothing sized from it can be huge.
fn valid_prefix(
    runs: Vec<Option<Run>>,
    (lo, hi): (u64, u64),
    ino: Ino,
    problems: &mut Vec<(Option<Ino>, String)>,
) -> Vec<Run> {
    let mut out: Vec<Run> = Vec::with_capacity(runs.len());
    for r in runs {
        let Some(r) = r else { break };
        let ok = r.count > 0
            && r.start >= lo
            && r.start.checked_add(r.count as u64).is_some_and(|e| e <= hi)
            && r.file_block as u64 == out.last().map_or(0, |p| p.file_end());
        if !ok {
            problems.push((
                Some(ino),
                format!("inode {ino}: invalid run {r:?}; the file is cut before it"),
            ));
            break;
        }
        out.push(r);
    }
    out
}

/// What a structure's pointer to a metadata block found there.
enum Claim {
    /// Another structure's block: one loaded before owns it (`taken`), or it holds a
    /// valid block of another kind in both copies.
    Foreign,
    /// The block as `ty`, or `None` when it is lost in both copies (reported).
    Read(Option<Vec<u8>>),
}

/// Reads metadata block `n`, which a structure's pointer names, as a block of type
/// `ty`, unless it is another structure's ([`Claim::Foreign`]: not lost, so not
/// reported as lost).
fn claim<D: Device>(r: &mut Reader<'_, D>, n: u64, ty: BlockType, taken: bool) -> Result<Claim> {
    if taken {
        return Ok(Claim::Foreign);
    }
    let img = r.one_or_lose(n, ty)?;
    // Not a block of its type: lost, or another structure's (checked only then).
    if img.is_none() && foreign(r, n, ty)? {
        r.report.lost_blocks.retain(|(b, _)| *b != n);
        return Ok(Claim::Foreign);
    }
    Ok(Claim::Read(img))
}

/// Whether metadata block `n` holds, in both copies, a valid block of another kind
/// than `ty` (another structure's block, which a damaged map names).
fn foreign<D: Device>(r: &mut Reader<'_, D>, n: u64, ty: BlockType) -> Result<bool> {
    let mut b = vec![0u8; META_BLOCK_BYTES];
    for off in [r.sb.primary_offset(n), r.sb.backup_offset(n)] {
        r.dev
            .read_at(off, &mut b)
            .map_err(|e| Error::io(format!("reading metadata block {n}"), e))?;
        if !matches!(
            verify_block(&b, ty, &r.sb.uuid, n),
            Err(crate::format::BlockError::WrongType { .. })
        ) {
            return Ok(false);
        }
    }
    Ok(true)
}

/// A directory's entries. `Some(cut)`: its block `cut` belongs to another structure
/// (another owner claims it, or it holds another kind of block in both copies): the
/// directory ends before it, and the caller cuts its runs there.
fn load_dir<D: Device>(
    r: &mut Reader<'_, D>,
    owners: &mut HashMap<u64, Owner>,
    ino: Ino,
    inode: &Inode,
) -> Result<(Dir, Option<u32>)> {
    let mut dir = Dir::default();
    let nblocks = inode.runs.last().map_or(0, |r| r.file_end());
    dir.blocks = vec![Default::default(); nblocks as usize];
    for run in &inode.runs {
        for k in 0..run.count as u64 {
            let index = (run.file_block as u64 + k) as u32;
            let n = run.start + k;
            let taken = owners
                .get(&n)
                .is_some_and(|o| *o != Owner::DirBlock { ino, index });
            let Claim::Read(img) = claim(r, n, BlockType::Directory, taken)? else {
                r.report.problems.push((
                    Some(ino),
                    format!("directory {ino}: its block {index} (metadata block {n}) belongs to another structure; the directory ends before it"),
                ));
                dir.blocks.truncate(index as usize);
                return Ok((dir, Some(index)));
            };
            owners.insert(n, Owner::DirBlock { ino, index });
            let Some(img) = img else {
                r.report.problems.push((
                    Some(ino),
                    format!("directory {ino} block {index} is lost: its entries are gone"),
                ));
                continue;
            };
            let entries = match decode_dir(payload(&img)) {
                Ok(e) => e,
                Err(e) => {
                    r.report
                        .problems
                        .push((Some(ino), format!("directory {ino} block {index}: {e}")));
                    continue;
                }
            };
            for (name, child, kind) in entries {
                if let Err(e) = super::ops::validate_name(&name) {
                    r.report
                        .problems
                        .push((Some(ino), format!("directory {ino}: {e}")));
                    continue;
                }
                if dir.entries.contains_key(&name) {
                    r.report.problems.push((
                        Some(ino),
                        format!(
                            "directory {ino}: duplicate name {:?}",
                            String::from_utf8_lossy(&name)
                        ),
                    ));
                    continue;
                }
                dir.insert(&name, child, kind, index);
            }
        }
    }
    Ok((dir, None))
}
