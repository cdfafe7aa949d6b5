//! A file's runs and block map as loaded, with the damage handling: the runs read
//! inline and through the indirect extents, extents two records claim settled by
//! evidence, and what a damaged map keeps (`valid_file_runs`,
//! `lose_holes_of_a_damaged_map`; a directory's or symlink's runs: `valid_prefix`).
//!
//! The invariant it keeps: no pointer read from disk is used unchecked. A run kept lies
//! inside its region and after the previous one; an indirect extent kept lies in the
//! metadata area and belongs to one record only; a file whose map was damaged has its
//! holes lost (reads there fail), never read as zeros.

use super::*;
use crate::device::Device;
use crate::format::inode::{
    decode_runs, map_sum, InodeRecord, Run, INDIRECT_SLOTS, INLINE_RUNS, MAX_RUNS, RUNS_PER_BLOCK,
};
use crate::format::{payload, BlockType};

/// The runs of inode `rec` as stored: the inline ones, then those of its indirect
/// extents up to the first extent that is missing or lies outside the metadata area
/// (reported; the runs it held are lost, those before it kept). `None` stands for runs
/// that could not be read (past a bad extent, or in a run block lost in both copies).
/// Also returns how many leading extents are usable.
pub(super) fn load_runs<D: Device>(
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
pub(super) fn contested_extents<D: Device>(
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
pub(super) fn keep_needed_extents(
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
pub(super) fn valid_file_runs(
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
pub(super) struct MapState {
    /// The size and runs match the map checksum stored with the record (or the record
    /// has none, as on volumes made before it).
    pub(super) sum_ok: bool,
    /// Every block holding runs was read (none lost, no extent cut).
    pub(super) runs_read: bool,
    /// A run was invalid or outside the data region ([`valid_file_runs`] reported it).
    pub(super) run_damaged: bool,
}

/// A file whose size and runs do not match the map checksum stored with its record,
/// that maps a block past its end (which never happens: blocks past the end are
/// freed), or one of whose runs was damaged, had its map damaged: a run moved, cut or
/// dropped, or the size changed. A damaged run's own file range cannot be trusted
/// either (its `file_block` may be what was hit), so the holes inside the file may
/// have been data: they become lost (reads there fail) instead of reading as zeros;
/// the runs left are checked by the data checksums when read.
pub(super) fn lose_holes_of_a_damaged_map(
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
pub(super) fn valid_prefix(
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
