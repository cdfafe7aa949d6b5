//! Frame-index blocks (block type 10, HERMES 4: the frame as a unit of the file
//! system): a file's keyframes, each with where a reader starts, its time and number,
//! in a tree rooted at the inode's `frame_index_root` (FORMAT.md section 10c).
//!
//! A **leaf** holds up to [`LEAF_ENTRIES`] entries in file order; a **branch** holds up
//! to [`BRANCH_CHILDREN`] children, each with its block and its first entry's offset,
//! time and frame number, so a lookup by offset, time or frame reads one block per
//! level. Every field is little-endian; offsets are chained below and checked at
//! compile time. A decode checks what a block can be checked for alone (its kind,
//! count, the order of its entries); what needs the file (the entries within its size,
//! the children's first keys) is checked by the volume.
//!
//! Status: defined and tested here; no volume writes these blocks yet (the store, its
//! feature bit and the engine's indexing come next, issue 25).

use super::*;

/// A leaf's kind byte.
pub const KIND_LEAF: u8 = 1;
/// A branch's kind byte.
pub const KIND_BRANCH: u8 = 2;

// The payload: a small header, then the entries or children.
const FI_KIND: usize = 0; // u8
const FI_LEVEL: usize = FI_KIND + 1; // u8: 0 for a leaf, the height above the leaves for a branch
const FI_RESERVED: usize = FI_LEVEL + 1; // u16, zero
const FI_COUNT: usize = FI_RESERVED + 2; // u32
const FI_ITEMS: usize = FI_COUNT + 4;

// One entry (`FrameEntry`).
const E_OFFSET: usize = 0; // u64: where a reader starts (TS packet, fMP4 moof)
const E_DATA_DELTA: usize = E_OFFSET + 8; // u32: the frame's own bytes start this far after
const E_LEN: usize = E_DATA_DELTA + 4; // u32: the keyframe's bytes
const E_NUMBER: usize = E_LEN + 4; // u32: frame number in the file
const E_FLAGS: usize = E_NUMBER + 4; // u32
const E_PTS: usize = E_FLAGS + 4; // i64: media time, 90 kHz, unwrapped
const E_UTC: usize = E_PTS + 8; // i64: ns since the Unix epoch
/// Bytes per entry.
pub const ENTRY_BYTES: usize = E_UTC + 8;

// One branch child.
const C_BLOCK: usize = 0; // u32: metadata block of the child
const C_BELOW: usize = C_BLOCK + 4; // u32: entries under the child
const C_OFFSET: usize = C_BELOW + 4; // u64: the child's first entry's offset
const C_NUMBER: usize = C_OFFSET + 8; // u32: ... its frame number
const C_RESERVED: usize = C_NUMBER + 4; // u32, zero
const C_UTC: usize = C_RESERVED + 4; // i64: ... its UTC
/// Bytes per branch child.
pub const CHILD_BYTES: usize = C_UTC + 8;

/// Entries per leaf.
pub const LEAF_ENTRIES: usize = (PAYLOAD_BYTES - FI_ITEMS) / ENTRY_BYTES;
/// Children per branch.
pub const BRANCH_CHILDREN: usize = (PAYLOAD_BYTES - FI_ITEMS) / CHILD_BYTES;
/// Levels of branches above the leaves at most: with two, a file indexes
/// 126 x 126 x 101 = 1,603,476 keyframes (18.5 days at one a second).
pub const MAX_BRANCH_LEVELS: u8 = 2;

const _: () = assert!(ENTRY_BYTES == 40);
const _: () = assert!(CHILD_BYTES == 32);
const _: () = assert!(LEAF_ENTRIES == 101);
const _: () = assert!(BRANCH_CHILDREN == 126);
const _: () = assert!(FI_ITEMS + LEAF_ENTRIES * ENTRY_BYTES <= PAYLOAD_BYTES);
const _: () = assert!(FI_ITEMS + BRANCH_CHILDREN * CHILD_BYTES <= PAYLOAD_BYTES);

/// Entry flag: the stream's time jumped before this keyframe.
pub const FLAG_DISCONTINUITY: u32 = 1;
/// Entry flag: the UTC anchor was moved here (a clock step or drift beyond 1 s).
pub const FLAG_CLOCK_STEP: u32 = 2;
/// Entry flag: written faster than real time (an import): the media time governs.
pub const FLAG_IMPORT: u32 = 4;
const KNOWN_FLAGS: u32 = FLAG_DISCONTINUITY | FLAG_CLOCK_STEP | FLAG_IMPORT;

/// One keyframe of a file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FrameEntry {
    /// Where a reader starts to play from it (a transport packet, an fMP4 `moof`).
    pub offset: u64,
    /// Its own bytes start this far after `offset` (0 in a transport stream).
    pub data_delta: u32,
    /// The keyframe's bytes (what trick play reads).
    pub len: u32,
    /// Its frame number in the file.
    pub number: u32,
    pub flags: u32,
    /// Media time, 90 kHz, unwrapped.
    pub pts_90k: i64,
    /// UTC, ns since the Unix epoch.
    pub utc_ns: i64,
}

/// The median UTC interval between consecutive keyframes of `keys`, ns (0 with
/// fewer than two): what a recording's end is estimated by (its last keyframe plus
/// one interval), as the CLI's commands and the mount's seals count it.
pub fn median_interval_ns<'a>(keys: impl IntoIterator<Item = &'a FrameEntry>) -> i64 {
    let utcs: Vec<i64> = keys.into_iter().map(|k| k.utc_ns).collect();
    let mut gaps: Vec<i64> = utcs.windows(2).map(|w| w[1] - w[0]).collect();
    gaps.sort_unstable();
    gaps.get(gaps.len() / 2).copied().unwrap_or(0)
}

/// A branch's child.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Child {
    pub block: u32,
    /// Entries in the subtree.
    pub below: u32,
    /// The subtree's first entry's offset, frame number and UTC.
    pub offset: u64,
    pub number: u32,
    pub utc_ns: i64,
}

/// What a frame-index block holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum IndexBlock {
    Leaf(Vec<FrameEntry>),
    Branch { level: u8, children: Vec<Child> },
}

/// Why a frame-index payload was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BadIndex(pub String);

/// Writes a block's payload (zeros past what it holds). Asserts what a decode checks:
/// a block this encodes always decodes.
pub fn encode(block: &IndexBlock, payload: &mut [u8]) {
    payload[..PAYLOAD_BYTES].fill(0);
    match block {
        IndexBlock::Leaf(entries) => {
            assert!(
                entries.len() <= LEAF_ENTRIES,
                "a leaf holds at most {LEAF_ENTRIES}"
            );
            assert!(in_order(entries), "entries in file order");
            payload[FI_KIND] = KIND_LEAF;
            put_u32(payload, FI_COUNT, entries.len() as u32);
            for (i, e) in entries.iter().enumerate() {
                assert_eq!(e.flags & !KNOWN_FLAGS, 0, "known flags only");
                let at = FI_ITEMS + i * ENTRY_BYTES;
                put_u64(payload, at + E_OFFSET, e.offset);
                put_u32(payload, at + E_DATA_DELTA, e.data_delta);
                put_u32(payload, at + E_LEN, e.len);
                put_u32(payload, at + E_NUMBER, e.number);
                put_u32(payload, at + E_FLAGS, e.flags);
                put_i64(payload, at + E_PTS, e.pts_90k);
                put_i64(payload, at + E_UTC, e.utc_ns);
            }
        }
        IndexBlock::Branch { level, children } => {
            assert!((1..=MAX_BRANCH_LEVELS).contains(level), "a branch's level");
            assert!(children.len() <= BRANCH_CHILDREN && !children.is_empty());
            payload[FI_KIND] = KIND_BRANCH;
            payload[FI_LEVEL] = *level;
            put_u32(payload, FI_COUNT, children.len() as u32);
            for (i, c) in children.iter().enumerate() {
                let at = FI_ITEMS + i * CHILD_BYTES;
                put_u32(payload, at + C_BLOCK, c.block);
                put_u32(payload, at + C_BELOW, c.below);
                put_u64(payload, at + C_OFFSET, c.offset);
                put_u32(payload, at + C_NUMBER, c.number);
                put_i64(payload, at + C_UTC, c.utc_ns);
            }
        }
    }
}

/// Entries strictly increasing in offset and frame number.
fn in_order(entries: &[FrameEntry]) -> bool {
    entries
        .windows(2)
        .all(|w| w[0].offset < w[1].offset && w[0].number < w[1].number)
}

/// Reads a block's payload, refusing what no encode makes.
pub fn decode(payload: &[u8]) -> Result<IndexBlock, BadIndex> {
    let bad = |why: String| Err(BadIndex(why));
    let count = get_u32(payload, FI_COUNT) as usize;
    if get_u16(payload, FI_RESERVED) != 0 {
        return bad("reserved bytes are not zero".into());
    }
    match payload[FI_KIND] {
        KIND_LEAF => {
            if count > LEAF_ENTRIES || payload[FI_LEVEL] != 0 {
                return bad(format!(
                    "a leaf with {count} entries at level {}",
                    payload[FI_LEVEL]
                ));
            }
            let entries: Vec<FrameEntry> = (0..count)
                .map(|i| {
                    let at = FI_ITEMS + i * ENTRY_BYTES;
                    FrameEntry {
                        offset: get_u64(payload, at + E_OFFSET),
                        data_delta: get_u32(payload, at + E_DATA_DELTA),
                        len: get_u32(payload, at + E_LEN),
                        number: get_u32(payload, at + E_NUMBER),
                        flags: get_u32(payload, at + E_FLAGS),
                        pts_90k: get_i64(payload, at + E_PTS),
                        utc_ns: get_i64(payload, at + E_UTC),
                    }
                })
                .collect();
            if !in_order(&entries) {
                return bad("entries out of file order".into());
            }
            if let Some(e) = entries.iter().find(|e| e.flags & !KNOWN_FLAGS != 0) {
                return bad(format!(
                    "unknown flags {:#x} at offset {}",
                    e.flags, e.offset
                ));
            }
            Ok(IndexBlock::Leaf(entries))
        }
        KIND_BRANCH => {
            let level = payload[FI_LEVEL];
            if !(1..=MAX_BRANCH_LEVELS).contains(&level) || count == 0 || count > BRANCH_CHILDREN {
                return bad(format!("a branch with {count} children at level {level}"));
            }
            let children: Vec<Child> = (0..count)
                .map(|i| {
                    let at = FI_ITEMS + i * CHILD_BYTES;
                    Child {
                        block: get_u32(payload, at + C_BLOCK),
                        below: get_u32(payload, at + C_BELOW),
                        offset: get_u64(payload, at + C_OFFSET),
                        number: get_u32(payload, at + C_NUMBER),
                        utc_ns: get_i64(payload, at + C_UTC),
                    }
                })
                .collect();
            let ordered = children
                .windows(2)
                .all(|w| w[0].offset < w[1].offset && w[0].number < w[1].number);
            if !ordered || children.iter().any(|c| c.block == 0 || c.below == 0) {
                return bad("children out of order, empty, or at block 0".into());
            }
            Ok(IndexBlock::Branch { level, children })
        }
        k => bad(format!("unknown kind {k}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(i: u32) -> FrameEntry {
        FrameEntry {
            offset: u64::from(i) * 1_000_000 + 376,
            data_delta: i % 2 * 1200,
            len: 150_000 + i,
            number: i * 50,
            flags: if i == 7 {
                FLAG_DISCONTINUITY | FLAG_CLOCK_STEP
            } else {
                0
            },
            pts_90k: (1 << 33) + i64::from(i) * 180_000,
            utc_ns: 1_795_000_000_000_000_000 + i64::from(i) * 2_000_000_000,
        }
    }

    #[test]
    fn a_full_leaf_and_a_full_branch_round_trip() {
        let mut p = vec![0u8; PAYLOAD_BYTES];
        let leaf = IndexBlock::Leaf((0..LEAF_ENTRIES as u32).map(entry).collect());
        encode(&leaf, &mut p);
        assert_eq!(decode(&p), Ok(leaf));
        let children = (0..BRANCH_CHILDREN as u32)
            .map(|i| Child {
                block: 100 + i,
                below: 101,
                offset: u64::from(i) << 30,
                number: i * 5050,
                utc_ns: i64::from(i) * 202_000_000_000,
            })
            .collect();
        let branch = IndexBlock::Branch { level: 2, children };
        encode(&branch, &mut p);
        assert_eq!(decode(&p), Ok(branch));
        let empty = IndexBlock::Leaf(vec![]);
        encode(&empty, &mut p);
        assert_eq!(decode(&p), Ok(empty));
    }

    #[test]
    fn a_damaged_block_is_refused_never_read_as_an_index() {
        let mut p = vec![0u8; PAYLOAD_BYTES];
        encode(&IndexBlock::Leaf((0..10).map(entry).collect()), &mut p);
        let good = p.clone();
        // Entries swapped: out of file order.
        p[FI_ITEMS..FI_ITEMS + ENTRY_BYTES]
            .copy_from_slice(&good[FI_ITEMS + ENTRY_BYTES..FI_ITEMS + 2 * ENTRY_BYTES]);
        assert!(decode(&p).is_err());
        for (at, v) in [
            (FI_KIND, 9u8),
            (FI_LEVEL, 1),
            (FI_RESERVED, 1),
            (FI_COUNT, 200),
        ] {
            let mut q = good.clone();
            q[at] = v;
            assert!(decode(&q).is_err(), "byte {at} = {v}");
        }
        let mut q = good.clone();
        put_u32(&mut q, FI_ITEMS + E_FLAGS, 0x80);
        assert!(decode(&q).unwrap_err().0.contains("unknown flags"));
    }
}
