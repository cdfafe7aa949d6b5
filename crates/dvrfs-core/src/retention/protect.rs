//! Protected clips (rule 2; `dvrfs protect`, docs/retention.md "Protected clips"):
//! a UTC range of a stream that retention never deletes, for a time or until
//! removed. A protection covers **whole chunks**: every chunk of the stream whose
//! span meets the range, a chunk's span running from its start to the next chunk's
//! start (the last one's to its end). Each covered chunk carries the protection in
//! its inode record ([`Protection`]: expiry and id, FORMAT.md section 7), so the
//! planner honours it from the snapshot alone, and a crash keeps it with the
//! chunk. A chunk in two protections carries the one that ends later; removing that
//! one leaves the chunk unprotected until the other is stated again, which
//! `dvrfs unprotect` does from the protections' list (`.protect`), in the same
//! command (a restatement is not checked against protected-max: what it holds was
//! counted when it was made).
//!
//! The volume's `protected-max` bounds what protections may hold: a protection
//! that would take the chunks held by protections past it is refused, saying how
//! much is held, how much it adds and the bound. Expired protections hold nothing.
//!
//! One protection (one operation) changes at most `max_blocks` inode-table blocks,
//! what one transaction of the journal can carry beside the rest: a wider one is
//! refused with that advice (split the range); a removal goes in parts
//! ([`Covered::more`]).

use std::collections::BTreeSet;

use crate::error::{Error, Result};
use crate::format::inode::Protection;
use crate::meta::Ino;
use crate::volume::{SetAttr, Volume};

use super::snapshot::{ChunkInfo, Snapshot};

/// What a protection (or its removal) covered.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Covered {
    pub chunks: u64,
    /// Their data blocks, in bytes.
    pub bytes: u64,
    /// The UTC span of the chunks covered (0 when none).
    pub first_utc_ns: i64,
    pub last_utc_ns: i64,
    /// A removal stopped at its bound: chunks still carry the protection.
    pub more: bool,
}

/// The inode-table blocks one protection (or one part of a removal) may change: a
/// quarter of the journal's transaction, so that it fits beside what the
/// transaction being built holds.
pub fn protect_blocks(v: &Volume) -> usize {
    v.max_transaction_images() / 4
}

/// The inode-table blocks holding `inos`' records.
fn inode_blocks<'a>(inos: impl Iterator<Item = &'a Ino>) -> usize {
    inos.map(|&i| i as usize / crate::format::inode::INODES_PER_BLOCK)
        .collect::<BTreeSet<_>>()
        .len()
}

/// Protects the chunks of the stream in `dir` that meet UTC `from_ns ..= to_ns`
/// with `p` (see the module docs), at UTC `now_ns`, changing at most `max_blocks`
/// inode-table blocks; checked against the volume's protected-max if `bounded`.
pub fn protect(
    v: &mut Volume,
    dir: Ino,
    (from_ns, to_ns): (i64, i64),
    p: Protection,
    now_ns: i64,
    (max_blocks, bounded): (usize, bool),
) -> Result<Covered> {
    if p.id == 0 {
        return Err(Error::InvalidArgument("protection id 0".into()));
    }
    if to_ns < from_ns {
        return Err(Error::InvalidArgument(
            "a protection's end is before its start".into(),
        ));
    }
    if p.until_s != Protection::FOREVER && i64::from(p.until_s) * 1_000_000_000 <= now_ns {
        return Err(Error::InvalidArgument(
            "a protection that has already ended".into(),
        ));
    }
    let snapshot = Snapshot::of(v, &BTreeSet::new(), now_ns);
    let Some(stream) = snapshot.streams.iter().find(|s| s.dir == dir) else {
        return Err(Error::InvalidArgument(format!(
            "directory inode {dir} holds no chunks of a stream (a protection covers a stream's chunks: its directory, with a retention policy or a .chain)"
        )));
    };
    let covered: Vec<&ChunkInfo> = meeting(&stream.chunks, from_ns, to_ns).collect();
    if covered.is_empty() {
        let (a, b) = span(&stream.chunks);
        return Err(Error::InvalidArgument(format!(
            "no chunk of {} lies in the range asked; its chunks span {} to {} UTC",
            stream.path,
            super::utc_rfc3339(a),
            super::utc_rfc3339(b),
        )));
    }
    if bounded {
        refuse_new(v, &snapshot, &covered, p)?;
    }
    // A chunk keeps the protection that ends later.
    let changes = |c: &ChunkInfo| {
        c.protection
            .filter(|_| c.protected)
            .is_none_or(|h| h.until_s < p.until_s)
    };
    let blocks = inode_blocks(covered.iter().filter(|c| changes(c)).map(|c| &c.ino));
    if blocks > max_blocks {
        return Err(Error::InvalidArgument(format!(
            "the range covers {} chunks in {blocks} inode-table blocks, more than one transaction carries ({max_blocks}): protect it in parts",
            covered.len()
        )));
    }
    let mut out = Covered::default();
    let stamps: Vec<(Ino, bool)> = covered.iter().map(|c| (c.ino, changes(c))).collect();
    for (k, (ino, change)) in stamps.into_iter().enumerate() {
        if change {
            let set = SetAttr {
                protection: Some(Some(p)),
                ..SetAttr::default()
            };
            v.set_attr(ino, &set, now_ns)?;
        }
        let c = covered[k];
        out.chunks += 1;
        out.bytes += c.bytes;
        if k == 0 {
            out.first_utc_ns = c.start_utc_ns;
        }
        out.last_utc_ns = c.end_utc_ns;
    }
    Ok(out)
}

/// What refuses a new protection `p` of chunks `covered` (not one stated again): an
/// id some chunk carries already (a record that lost it would otherwise merge two
/// protections under one id), and the volume's protected-max.
fn refuse_new(
    v: &Volume,
    snapshot: &Snapshot,
    covered: &[&ChunkInfo],
    p: Protection,
) -> Result<()> {
    if let Some(s) = snapshot.streams.iter().find(|s| {
        s.chunks
            .iter()
            .any(|c| c.protection.is_some_and(|q| q.id == p.id))
    }) {
        return Err(Error::Exists(format!(
            "protection id {} is on chunks of {} already: a new protection takes another id",
            p.id, s.path
        )));
    }
    let limit = u64::from(v.volume_retention().protected_max_permille) * snapshot.data_bytes / 1000;
    if limit == 0 {
        return Ok(());
    }
    let held: u64 = snapshot
        .streams
        .iter()
        .flat_map(|s| &s.chunks)
        .filter(|c| c.protected)
        .map(|c| c.bytes)
        .sum();
    let adds: u64 = covered
        .iter()
        .filter(|c| !c.protected)
        .map(|c| c.bytes)
        .sum();
    if held + adds > limit {
        return Err(Error::InvalidArgument(format!(
            "protected clips would hold {} bytes, beyond the volume's protected-max of {} bytes ({}% of the data region): {held} bytes are protected now and this adds {adds}; unprotect a clip (dvrfs protect --list) or raise --protected-max",
            held + adds,
            limit,
            f64::from(v.volume_retention().protected_max_permille) / 10.0
        )));
    }
    Ok(())
}

/// Removes protection `id` from the chunks that carry it, held or expired, as many
/// as `max_blocks` inode-table blocks hold (`more` says whether some are left).
pub fn unprotect(v: &mut Volume, id: u32, now_ns: i64, max_blocks: usize) -> Result<Covered> {
    let snapshot = Snapshot::of(v, &BTreeSet::new(), now_ns);
    let mut out = Covered::default();
    let mut blocks = BTreeSet::new();
    for c in snapshot.streams.iter().flat_map(|s| &s.chunks) {
        if c.protection.is_some_and(|p| p.id == id) {
            let block = c.ino as usize / crate::format::inode::INODES_PER_BLOCK;
            if !blocks.contains(&block) && blocks.len() == max_blocks {
                out.more = true;
                break;
            }
            blocks.insert(block);
            let set = SetAttr {
                protection: Some(None),
                ..SetAttr::default()
            };
            v.set_attr(c.ino, &set, now_ns)?;
            if out.chunks == 0 {
                out.first_utc_ns = c.start_utc_ns;
            }
            out.chunks += 1;
            out.bytes += c.bytes;
            out.last_utc_ns = out.last_utc_ns.max(c.end_utc_ns);
        }
    }
    Ok(out)
}

/// The chunks (by start) whose spans meet `from ..= to`: chunk `k` runs from its
/// start to chunk `k + 1`'s (exclusive), the last to its end (inclusive).
fn meeting(chunks: &[ChunkInfo], from: i64, to: i64) -> impl Iterator<Item = &ChunkInfo> {
    chunks.iter().enumerate().filter_map(move |(k, c)| {
        let meets = match chunks.get(k + 1) {
            Some(next) => c.start_utc_ns <= to && next.start_utc_ns > from,
            None => c.start_utc_ns <= to && c.end_utc_ns >= from,
        };
        meets.then_some(c)
    })
}

/// The UTC span of a stream's chunks (by start): the first's start, the last's end.
fn span(chunks: &[ChunkInfo]) -> (i64, i64) {
    let a = chunks.first().map_or(0, |c| c.start_utc_ns);
    let b = chunks.iter().map(|c| c.end_utc_ns).max().unwrap_or(0);
    (a, b)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(start: i64, end: i64) -> ChunkInfo {
        ChunkInfo {
            ino: start as u32,
            name: vec![],
            bytes: 1,
            size_bytes: 1,
            start_utc_ns: start,
            end_utc_ns: end,
            busy: false,
            yields: false,
            protected: false,
            protection: None,
        }
    }

    #[test]
    fn a_range_covers_every_chunk_whose_span_it_meets_whole() {
        // Chunks at 0, 10, 20; the last ends at 25 (its last keyframe).
        let c = [at(0, 8), at(10, 18), at(20, 25)];
        let starts =
            |from, to| -> Vec<i64> { meeting(&c, from, to).map(|c| c.start_utc_ns).collect() };
        // Inside one chunk's span (past its last keyframe too): that chunk.
        assert_eq!(starts(9, 9), [0]);
        assert_eq!(starts(12, 15), [10]);
        // Across a boundary: both.
        assert_eq!(starts(9, 10), [0, 10]);
        assert_eq!(starts(5, 22), [0, 10, 20]);
        // The next chunk's start is outside the one before.
        assert_eq!(starts(10, 10), [10]);
        // Past the end, before the start: none.
        assert!(starts(26, 30).is_empty());
        assert!(starts(-5, -1).is_empty());
        assert_eq!(starts(25, 30), [20]);
    }
}
