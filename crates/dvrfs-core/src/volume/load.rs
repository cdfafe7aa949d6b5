//! Opening a file system: recovery chooses the superblock and the journal's
//! transaction to replay (the decision table [`RECOVERY_CASES`] in
//! `volume/recovery.rs`), then every metadata block in use is read and verified
//! (`volume/reader.rs` says which copy serves, `volume/tree.rs` and `volume/runs.rs`
//! what each structure keeps), then the checksums, the events and the tail log.
//!
//! The invariant it keeps: what was loaded is what is stored, or the difference is in
//! the [`LoadReport`]; a writable open of a volume with blocks lost or problems found
//! is refused (only `fsck --repair` writes on it), so nothing is ever written on top
//! of half a structure.

use super::*;
use crate::device::Device;
use crate::format::inode::INODES_PER_BLOCK;
use crate::format::{payload, BlockType};

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

impl Volume {
    /// Loads and verifies the whole metadata of the file system on `dev` (reads only),
    /// with the journal's complete transaction applied over what the regions hold.
    /// A writable volume must have the returned [`Replay`] checkpointed before anything
    /// else is committed (the engine does it first).
    pub fn load<D: Device>(dev: &D, opts: &OpenOptions) -> Result<(Volume, Option<Replay>)> {
        // Which superblock and which journal transaction: the recovery table's
        // decision (`volume/recovery.rs`).
        let chosen = read_superblock(dev)?;
        let mut report = LoadReport::default();
        // A device shorter than the volume (a truncated image): a read-only open
        // serves what is there, each read past the end failing for its file
        // (`Error::PastEnd`); a writable one is refused, for its writes and its
        // metadata copies would go where the device has nothing.
        if chosen.sb.device_bytes > dev.size_bytes() {
            let truncated = Error::Truncated {
                volume_bytes: chosen.sb.device_bytes,
                device_bytes: dev.size_bytes(),
            };
            if opts.writable {
                return Err(truncated);
            }
            report.truncated = Some((chosen.sb.device_bytes, dev.size_bytes()));
        }
        let found = read_journal(dev, &chosen.sb)?;
        let (sb, journal) = decide(chosen, found, &mut report);
        let mut overlay = HashMap::new();
        if let Some(r) = &journal {
            overlay.extend(r.images.iter().cloned());
        }
        let fresh = |sb: &Superblock| Volume::empty(sb, opts, dev.size_bytes());
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
        let orphans = v.find_orphans(&mut report);
        if opts.writable && !opts.repair {
            refuse_unrepaired(&report)?;
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

    /// A volume with nothing loaded yet, for superblock `sb` on a device of
    /// `device_bytes`.
    fn empty(sb: &Superblock, opts: &OpenOptions, device_bytes: u64) -> Volume {
        let interval_ms = opts
            .commit_interval_ms
            .unwrap_or(sb.commit_interval_ms)
            .max(1);
        Volume {
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
            write_refs: HashMap::new(),
            orphans: BTreeSet::new(),
            report: LoadReport::default(),
            // A repair open frees orphans before fsck proper starts: tolerantly too.
            in_fsck: opts.repair,
            sums: None,
            events: Default::default(),
            tail_floors: BTreeMap::new(),
            tail_replay: Vec::new(),
            tail_read: BTreeMap::new(),
            frame_indexes: BTreeMap::new(),
            present_bytes: device_bytes.min(sb.device_bytes),
            sb: sb.clone(),
        }
    }

    /// Files unlinked while open when the volume was last used (the process ended
    /// before closing them): link count 0 and no directory names them. One that a
    /// directory still names had its link count damaged: it is not freed (that would
    /// lose a recording the directory lists), it is reported, and fsck sets the count.
    fn find_orphans(&self, report: &mut LoadReport) -> Vec<Ino> {
        let named: std::collections::HashSet<Ino> = self
            .dirs
            .values()
            .flat_map(|d| d.entries.values().map(|e| e.ino))
            .collect();
        let mut orphans = vec![];
        for (&ino, i) in &self.inodes {
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
        orphans
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
}

/// A writable open (not fsck's) of a volume with blocks lost or problems found is
/// refused: what was loaded differs from what is stored (runs cut or lost, entries
/// dropped), and writing on top would store half of each. Repair settles it first.
fn refuse_unrepaired(report: &LoadReport) -> Result<()> {
    if !report.lost_blocks.is_empty() {
        let (n, why) = &report.lost_blocks[0];
        return Err(Error::Corrupt(format!(
            "{} metadata block(s) lost in both copies (block {n}: {why}); what is intact can be read (ls, get), but nothing may be written before `fsck --repair`",
            report.lost_blocks.len()
        )));
    }
    if !report.problems.is_empty() {
        let (_, why) = &report.problems[0];
        return Err(Error::Corrupt(format!(
            "{} problem(s) found while loading ({why}); what is intact can be read (ls, get), but nothing may be written before `fsck --repair`",
            report.problems.len()
        )));
    }
    Ok(())
}
