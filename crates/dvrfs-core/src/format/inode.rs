//! Inode records (256 bytes, 15 per inode-table block) and indirect run blocks.
//!
//! A file maps file blocks to device blocks with runs `(file_block, start, count)`:
//! file blocks `file_block .. file_block + count` live in blocks `start .. start + count`
//! (data blocks for regular files, metadata blocks for directories and symlinks). Blocks
//! not covered by any run are holes and read as zeros. The first [`INLINE_RUNS`] runs sit
//! in the inode; the rest in indirect run blocks, one level only (HERMES 3.2). Indirect
//! blocks come in [`INDIRECT_SLOTS`] contiguous extents whose sizes double (1, 2, 4, ...
//! metadata blocks), so the inode names them with one start number each and a 1 TiB ZRR
//! file (262,144 single-block runs at 4 MiB) still needs one level of indirection.

use super::*;

pub const INODE_BYTES: usize = 256;
pub const INODES_PER_BLOCK: usize = PAYLOAD_BYTES / INODE_BYTES;
/// After the 15 records of an inode-table block: one `u32` per record, the checksum
/// of its file's map ([`map_sum`]; 0: not kept, a volume written before 2026-11-25,
/// or not a regular file). A loader checks it against the size and runs it read: a
/// run moved, cut or dropped by damage (checksums resealed) would leave a hole that
/// reads as zeros, and the map checksum tells.
pub const MAP_SUM_OFFSET: usize = INODES_PER_BLOCK * INODE_BYTES;
const _: () = assert!(MAP_SUM_OFFSET == 3840);
const _: () = assert!(MAP_SUM_OFFSET + INODES_PER_BLOCK * 4 <= PAYLOAD_BYTES);

/// After the map checksums: one `u64` per record, the file's **tail-log floor** (on
/// a volume with `FEATURE_TAIL_LOG`, FORMAT.md section 11a): tail-log batches at log
/// positions below it hold nothing of this file any more. A truncation sets it to
/// the log position the next batch will take, so bytes logged before the cut are
/// never replayed over the shorter file. 0 elsewhere.
pub const TAIL_FLOOR_OFFSET: usize = MAP_SUM_OFFSET + INODES_PER_BLOCK * 4;
const _: () = assert!(TAIL_FLOOR_OFFSET == 3900);
const _: () = assert!(TAIL_FLOOR_OFFSET + INODES_PER_BLOCK * 8 <= PAYLOAD_BYTES);

/// Stores record `j`'s tail-log floor in an inode-table payload.
pub fn put_tail_floor(payload: &mut [u8], j: usize, floor: u64) {
    put_u64(payload, TAIL_FLOOR_OFFSET + 8 * j, floor);
}

/// Record `j`'s tail-log floor.
pub fn get_tail_floor(payload: &[u8], j: usize) -> u64 {
    get_u64(payload, TAIL_FLOOR_OFFSET + 8 * j)
}

/// CRC32C of a file's size (u64) and its runs as stored (16 bytes each, lost runs
/// included); never 0, which means "not kept".
pub fn map_sum<'a>(size_bytes: u64, runs: impl Iterator<Item = &'a Run>) -> u32 {
    let mut crc = crc32c::crc32c(&size_bytes.to_le_bytes());
    let mut b = [0u8; RUN_BYTES];
    for r in runs {
        r.encode(&mut b);
        crc = crc32c::crc32c_append(crc, &b);
    }
    crc.max(1)
}

/// Stores record `j`'s map checksum in an inode-table payload (0: none).
pub fn put_map_sum(payload: &mut [u8], j: usize, sum: u32) {
    put_u32(payload, MAP_SUM_OFFSET + 4 * j, sum);
}

/// Record `j`'s map checksum, if kept.
pub fn get_map_sum(payload: &[u8], j: usize) -> Option<u32> {
    match get_u32(payload, MAP_SUM_OFFSET + 4 * j) {
        0 => None,
        v => Some(v),
    }
}

pub const RUN_BYTES: usize = 16;
pub const RUNS_PER_BLOCK: usize = PAYLOAD_BYTES / RUN_BYTES;
/// Indirect extents per inode; extent `k` is `1 << k` metadata blocks long.
pub const INDIRECT_SLOTS: usize = 17;

const _: () = assert!(INODES_PER_BLOCK == 15);
const _: () = assert!(RUNS_PER_BLOCK == 253);

// Record layout.
const I_MODE: usize = 0; // u32, file type and permission bits; 0 = free
const I_NLINK: usize = I_MODE + 4;
const I_UID: usize = I_NLINK + 4;
const I_GID: usize = I_UID + 4;
const I_SIZE: usize = I_GID + 4; // u64
const I_MTIME: usize = I_SIZE + 8; // i64 ns
const I_CTIME: usize = I_MTIME + 8; // i64 ns
const I_GENERATION: usize = I_CTIME + 8; // u32
const I_FLAGS: usize = I_GENERATION + 4; // u32
const I_BITRATE: usize = I_FLAGS + 4; // u64 bits/s, stream property slot
const I_FRAME_NUM: usize = I_BITRATE + 8; // u32 frame rate numerator
const I_FRAME_DEN: usize = I_FRAME_NUM + 4; // u32 frame rate denominator
const I_FRAME_ROOT: usize = I_FRAME_DEN + 4; // u64 frame index root block (reserved)
const I_FRAME_COUNT: usize = I_FRAME_ROOT + 8; // u64 (reserved)
                                               // A directory with FLAG_RETENTION: its retention policy in the bytes a regular file
                                               // keeps its frame rate and frame index in (a directory has neither).
const I_RET_MAX_AGE: usize = I_FRAME_NUM; // u32 seconds, 0 = none
const I_RET_MIN_AGE: usize = I_RET_MAX_AGE + 4; // u32 seconds, 0 = none
const I_RET_MAX_BYTES: usize = I_RET_MIN_AGE + 4; // u64 bytes, 0 = none
const I_RET_RESERVED: usize = I_RET_MAX_BYTES + 8; // u64 zero
const _: () = assert!(I_RET_MAX_BYTES == I_FRAME_ROOT && I_RET_RESERVED + 8 == I_RUN_COUNT);
// A regular file with FLAG_PROTECTED: its protection in the frame-rate bytes (no
// recording stores a frame rate there; its frame index has its own fields).
const I_PROT_UNTIL: usize = I_FRAME_NUM; // u32 UTC seconds, u32::MAX = until unprotected
const I_PROT_ID: usize = I_PROT_UNTIL + 4; // u32, never 0
const _: () = assert!(I_PROT_ID + 4 == I_FRAME_ROOT);
const I_RUN_COUNT: usize = I_FRAME_COUNT + 8; // u32
const I_INDIRECT: usize = I_RUN_COUNT + 4; // [u32; INDIRECT_SLOTS]
const I_INLINE: usize = I_INDIRECT + 4 * INDIRECT_SLOTS; // [Run; INLINE_RUNS]
const I_STREAM_SECS: usize = I_INLINE + RUN_BYTES * INLINE_RUNS; // u32, directories
const I_STREAM_REQUEST_KIB: usize = I_STREAM_SECS + 4; // u32, directories
const _: () = assert!(I_STREAM_REQUEST_KIB + 4 == INODE_BYTES);
/// Runs stored in the inode itself.
pub const INLINE_RUNS: usize = (INODE_BYTES - I_INLINE) / RUN_BYTES;
const _: () = assert!(I_INLINE == 152 && INLINE_RUNS == 6);

/// A symbolic link's target stored in its record (a volume with
/// `FEATURE_INLINE_SYMLINKS`, FORMAT.md section 10): in the map bytes, the indirect
/// starts and the inline runs, which a link stored this way does not use (its
/// `run_count` is 0). `size_bytes` is the target's length, 1 to
/// [`MAX_INLINE_TARGET_BYTES`]; the bytes after it are zero. A longer target keeps
/// its symlink block (one run).
pub const INLINE_TARGET_OFFSET: usize = I_INDIRECT;
/// The longest target stored in the record: every map byte, 164.
pub const MAX_INLINE_TARGET_BYTES: usize = I_STREAM_SECS - I_INDIRECT;
const _: () = assert!(INLINE_TARGET_OFFSET == 84 && MAX_INLINE_TARGET_BYTES == 164);
const _: () = assert!(INLINE_TARGET_OFFSET + MAX_INLINE_TARGET_BYTES <= I_STREAM_SECS);
const _: () = assert!(MAX_INLINE_TARGET_BYTES < super::dir::MAX_SYMLINK_BYTES);

/// Maximum runs of one file: 33,160,969, enough for a 1 TiB ZRR file even with the
/// smallest (64 KiB) blocks, where every block is its own run (16,777,216 runs).
pub const MAX_RUNS: usize = INLINE_RUNS + RUNS_PER_BLOCK * ((1 << INDIRECT_SLOTS) - 1);
const _: () = assert!(MAX_RUNS >= (1 << 40) / (64 << 10));

// The POSIX file-type bits live in `format/mod.rs` (directory entries read them too);
// re-exported here, where the mode field is.
pub use super::{S_IFDIR, S_IFLNK, S_IFMT, S_IFREG};

/// One run of a file's block map.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Run {
    pub file_block: u32,
    pub count: u32,
    pub start: u64,
}

impl Run {
    /// The `start` of a **lost run**: file blocks whose data blocks are unknown since
    /// the metadata naming them was damaged (fsck --repair writes it where the map was
    /// unreadable). A read there fails, never returning zeros; a whole-block write maps
    /// the block again. Only regular files have lost runs.
    pub const LOST_START: u64 = u64::MAX;

    /// A run of file blocks whose data blocks are unknown (see [`Run::LOST_START`]).
    pub fn lost(file_block: u64, count: u64) -> Run {
        Run {
            file_block: file_block as u32,
            count: count as u32,
            start: Run::LOST_START,
        }
    }

    pub fn is_lost(&self) -> bool {
        self.start == Run::LOST_START
    }

    pub fn file_end(&self) -> u64 {
        self.file_block as u64 + self.count as u64
    }

    /// The device blocks of a run that maps any (none for a lost run).
    pub fn blocks(&self) -> std::ops::Range<u64> {
        if self.is_lost() {
            0..0
        } else {
            self.start..self.start + self.count as u64
        }
    }
    fn encode(&self, b: &mut [u8]) {
        put_u32(b, 0, self.file_block);
        put_u32(b, 4, self.count);
        put_u64(b, 8, self.start);
    }
    fn decode(b: &[u8]) -> Run {
        Run {
            file_block: get_u32(b, 0),
            count: get_u32(b, 4),
            start: get_u64(b, 8),
        }
    }
}

/// Stream properties kept with a recording (filled by the streaming issues).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StreamProps {
    pub bitrate_bps: u64,
    pub frame_rate_num: u32,
    pub frame_rate_den: u32,
}

/// `flags` bit of a directory: it carries a default stream reservation for the files
/// created in it (`bitrate_bps`, the direction bit, `stream_secs`,
/// `stream_request_kib`).
pub const FLAG_STREAM_DEFAULT: u32 = 1 << 0;
/// `flags` bit of a directory with a default reservation: the files get write
/// streams (recordings); clear: read streams (playbacks).
pub const FLAG_STREAM_WRITE: u32 = 1 << 1;
/// `flags` bit of a regular file: its frame index (FORMAT.md section 10c) does not
/// cover every keyframe of its data: the index ran out of room while recording, a
/// write changed bytes it had indexed, or fsck dropped a damaged one. `dvrfs
/// reindex` builds it again and clears the bit.
pub const FLAG_INDEX_INCOMPLETE: u32 = 1 << 2;
/// `flags` bit of a directory: it carries a retention policy ([`StreamRetention`])
/// for the streams in and below it (a volume with `FEATURE_RETENTION`).
pub const FLAG_RETENTION: u32 = 1 << 2;

/// `flags` bit of a regular file: it is (part of) a protected clip
/// ([`Protection`], `dvrfs protect`; a volume with `FEATURE_PROTECTION`).
pub const FLAG_PROTECTED: u32 = 1 << 3;

/// A chunk's protection (FORMAT.md section 7, `dvrfs protect`): retention never
/// deletes it before `until_s`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Protection {
    /// UTC seconds it ends at; [`Protection::FOREVER`]: until unprotected.
    pub until_s: u32,
    /// The protection's number (`protect --list`, `unprotect --id`); never 0.
    pub id: u32,
}

impl Protection {
    /// No end: the protection holds until `unprotect` removes it.
    pub const FOREVER: u32 = u32::MAX;

    /// Whether it still holds at UTC `now_ns`.
    pub fn holds_at(&self, now_ns: i64) -> bool {
        self.until_s == Protection::FOREVER || i64::from(self.until_s) * 1_000_000_000 > now_ns
    }
}

/// A directory's retention policy (FORMAT.md section 7, `dvrfs retention`): for the
/// stream it is, or each stream below it that has none of its own. 0 = not set.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StreamRetention {
    /// Chunks older than this go, free space or not (a legal maximum).
    pub max_age_s: u32,
    /// Chunks younger than this are kept while older ones can go (a wish: reported
    /// when unmet, never a reason to stop a recording).
    pub min_age_s: u32,
    /// The stream's oldest chunks go while it holds more than this.
    pub max_bytes: u64,
}

impl StreamRetention {
    pub fn is_none(&self) -> bool {
        *self == StreamRetention::default()
    }
}

/// A directory's default stream reservation, as stored in its inode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StreamDefault {
    pub write: bool,
    pub rate_bps: u64,
    /// A write default: the seconds of recording each file reserves space for.
    pub secs: u32,
    /// Request size in KiB; 0: dvrfs's default.
    pub request_kib: u32,
}

/// The fixed part of an inode as stored; the runs travel separately.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct InodeRecord {
    pub mode: u32,
    pub nlink: u32,
    pub uid: u32,
    pub gid: u32,
    pub size_bytes: u64,
    pub mtime_ns: i64,
    pub ctime_ns: i64,
    pub generation: u32,
    pub flags: u32,
    pub stream: StreamProps,
    pub frame_index_root: u64,
    pub frame_count: u64,
    pub run_count: u32,
    pub indirect: [u32; INDIRECT_SLOTS],
    pub inline: Vec<Run>,
    /// A symlink record with `run_count` 0: the map bytes, up to `size_bytes` of them
    /// ([`MAX_INLINE_TARGET_BYTES`] at most), which hold its target on a volume with
    /// `FEATURE_INLINE_SYMLINKS` (the loader checks the length and moves them out; a
    /// record in memory keeps this empty). Empty for every other record.
    pub inline_target: Vec<u8>,
    /// Directories with [`FLAG_STREAM_DEFAULT`]: see [`StreamDefault`]; 0 otherwise.
    pub stream_secs: u32,
    pub stream_request_kib: u32,
    /// Directories with [`FLAG_RETENTION`]: their policy; zero otherwise.
    pub retention: StreamRetention,
    /// Regular files with [`FLAG_PROTECTED`]: their protection.
    pub protection: Option<Protection>,
}

impl InodeRecord {
    pub fn is_free(&self) -> bool {
        self.mode == 0
    }

    /// A directory's default reservation, if it carries one (a zero rate is none).
    pub fn stream_default(&self) -> Option<StreamDefault> {
        (self.mode & S_IFMT == S_IFDIR
            && self.flags & FLAG_STREAM_DEFAULT != 0
            && self.stream.bitrate_bps > 0)
            .then_some(StreamDefault {
                write: self.flags & FLAG_STREAM_WRITE != 0,
                rate_bps: self.stream.bitrate_bps,
                secs: self.stream_secs,
                request_kib: self.stream_request_kib,
            })
    }

    /// A directory's retention policy, if it carries one.
    pub fn retention(&self) -> Option<StreamRetention> {
        (self.mode & S_IFMT == S_IFDIR && self.flags & FLAG_RETENTION != 0)
            .then_some(self.retention)
            .filter(|r| !r.is_none())
    }

    /// Sets (or, with none or an empty one, clears) a directory's retention policy.
    pub fn set_retention(&mut self, r: Option<StreamRetention>) {
        debug_assert_eq!(self.mode & S_IFMT, S_IFDIR, "a policy on a directory only");
        match r.filter(|r| !r.is_none()) {
            Some(r) => {
                self.flags |= FLAG_RETENTION;
                self.retention = r;
            }
            None => {
                self.flags &= !FLAG_RETENTION;
                self.retention = StreamRetention::default();
            }
        }
    }

    /// Sets (or, with none, clears) a regular file's protection.
    pub fn set_protection(&mut self, p: Option<Protection>) {
        debug_assert_eq!(self.mode & S_IFMT, S_IFREG, "a protection on a file only");
        debug_assert!(p.is_none_or(|p| p.id != 0), "protection id 0");
        if p.is_some() {
            self.flags |= FLAG_PROTECTED;
        } else {
            self.flags &= !FLAG_PROTECTED;
        }
        self.protection = p;
    }

    /// Sets or clears a directory's default reservation.
    pub fn set_stream_default(&mut self, d: Option<StreamDefault>) {
        self.flags &= !(FLAG_STREAM_DEFAULT | FLAG_STREAM_WRITE);
        match d {
            Some(d) => {
                self.flags |= FLAG_STREAM_DEFAULT;
                if d.write {
                    self.flags |= FLAG_STREAM_WRITE;
                }
                self.stream.bitrate_bps = d.rate_bps;
                self.stream_secs = d.secs;
                self.stream_request_kib = d.request_kib;
            }
            None => {
                self.stream.bitrate_bps = 0;
                self.stream_secs = 0;
                self.stream_request_kib = 0;
            }
        }
    }

    pub fn encode(&self, b: &mut [u8]) {
        debug_assert_eq!(b.len(), INODE_BYTES);
        debug_assert!(self.inline.len() <= INLINE_RUNS);
        b.fill(0);
        put_u32(b, I_MODE, self.mode);
        put_u32(b, I_NLINK, self.nlink);
        put_u32(b, I_UID, self.uid);
        put_u32(b, I_GID, self.gid);
        put_u64(b, I_SIZE, self.size_bytes);
        put_i64(b, I_MTIME, self.mtime_ns);
        put_i64(b, I_CTIME, self.ctime_ns);
        put_u32(b, I_GENERATION, self.generation);
        put_u32(b, I_FLAGS, self.flags);
        put_u64(b, I_BITRATE, self.stream.bitrate_bps);
        put_u32(b, I_FRAME_NUM, self.stream.frame_rate_num);
        put_u32(b, I_FRAME_DEN, self.stream.frame_rate_den);
        put_u64(b, I_FRAME_ROOT, self.frame_index_root);
        put_u64(b, I_FRAME_COUNT, self.frame_count);
        put_u32(b, I_RUN_COUNT, self.run_count);
        for (k, s) in self.indirect.iter().enumerate() {
            put_u32(b, I_INDIRECT + 4 * k, *s);
        }
        for (k, r) in self.inline.iter().enumerate() {
            r.encode(&mut b[I_INLINE + RUN_BYTES * k..I_INLINE + RUN_BYTES * (k + 1)]);
        }
        if !self.inline_target.is_empty() {
            // The target takes the map bytes: a record with a map cannot have one.
            let t = &self.inline_target;
            assert!(
                self.mode & S_IFMT == S_IFLNK
                    && self.run_count == 0
                    && self.indirect == [0; INDIRECT_SLOTS]
                    && t.len() <= MAX_INLINE_TARGET_BYTES
                    && t.len() as u64 == self.size_bytes,
                "an inline symlink target in a record with a map (a dvrfs bug)"
            );
            b[INLINE_TARGET_OFFSET..INLINE_TARGET_OFFSET + t.len()].copy_from_slice(t);
        }
        put_u32(b, I_STREAM_SECS, self.stream_secs);
        put_u32(b, I_STREAM_REQUEST_KIB, self.stream_request_kib);
        if self.mode & S_IFMT == S_IFDIR && self.flags & FLAG_RETENTION != 0 {
            assert!(
                self.stream.frame_rate_num == 0
                    && self.stream.frame_rate_den == 0
                    && self.frame_index_root == 0
                    && self.frame_count == 0,
                "a directory with frame fields (a dvrfs bug)"
            );
            put_u32(b, I_RET_MAX_AGE, self.retention.max_age_s);
            put_u32(b, I_RET_MIN_AGE, self.retention.min_age_s);
            put_u64(b, I_RET_MAX_BYTES, self.retention.max_bytes);
            put_u64(b, I_RET_RESERVED, 0);
        }
        if self.mode & S_IFMT == S_IFREG && self.flags & FLAG_PROTECTED != 0 {
            let p = self
                .protection
                .expect("a protected file without its protection (a dvrfs bug)");
            assert!(
                self.stream.frame_rate_num == 0 && self.stream.frame_rate_den == 0 && p.id != 0,
                "a protected file with a frame rate or id 0 (a dvrfs bug)"
            );
            put_u32(b, I_PROT_UNTIL, p.until_s);
            put_u32(b, I_PROT_ID, p.id);
        }
    }

    pub fn decode(b: &[u8]) -> InodeRecord {
        let run_count = get_u32(b, I_RUN_COUNT);
        let mode = get_u32(b, I_MODE);
        let size_bytes = get_u64(b, I_SIZE);
        let mut indirect = [0u32; INDIRECT_SLOTS];
        // A symlink without runs has no map: its map bytes are its target (or, on a
        // volume without inline symlinks, nothing the loader uses).
        let inline_target = if mode & S_IFMT == S_IFLNK && run_count == 0 {
            let n = size_bytes.min(MAX_INLINE_TARGET_BYTES as u64) as usize;
            b[INLINE_TARGET_OFFSET..INLINE_TARGET_OFFSET + n].to_vec()
        } else {
            for (k, s) in indirect.iter_mut().enumerate() {
                *s = get_u32(b, I_INDIRECT + 4 * k);
            }
            vec![]
        };
        let inline_n = (run_count as usize).min(INLINE_RUNS);
        let inline = (0..inline_n)
            .map(|k| Run::decode(&b[I_INLINE + RUN_BYTES * k..I_INLINE + RUN_BYTES * (k + 1)]))
            .collect();
        let flags = get_u32(b, I_FLAGS);
        if mode & S_IFMT == S_IFDIR && flags & FLAG_RETENTION != 0 {
            let mut rec = InodeRecord::decode_fields(b, mode, size_bytes, run_count);
            rec.indirect = indirect;
            rec.inline = inline;
            rec.stream.frame_rate_num = 0;
            rec.stream.frame_rate_den = 0;
            rec.frame_index_root = 0;
            rec.frame_count = 0;
            rec.retention = StreamRetention {
                max_age_s: get_u32(b, I_RET_MAX_AGE),
                min_age_s: get_u32(b, I_RET_MIN_AGE),
                max_bytes: get_u64(b, I_RET_MAX_BYTES),
            };
            return rec;
        }
        let mut rec = InodeRecord {
            indirect,
            inline,
            inline_target,
            ..InodeRecord::decode_fields(b, mode, size_bytes, run_count)
        };
        if mode & S_IFMT == S_IFREG && flags & FLAG_PROTECTED != 0 {
            rec.stream.frame_rate_num = 0;
            rec.stream.frame_rate_den = 0;
            rec.protection = Some(Protection {
                until_s: get_u32(b, I_PROT_UNTIL),
                id: get_u32(b, I_PROT_ID),
            });
        }
        rec
    }

    /// The fields every record decodes alike (no map, no retention).
    fn decode_fields(b: &[u8], mode: u32, size_bytes: u64, run_count: u32) -> InodeRecord {
        InodeRecord {
            mode,
            nlink: get_u32(b, I_NLINK),
            uid: get_u32(b, I_UID),
            gid: get_u32(b, I_GID),
            size_bytes,
            mtime_ns: get_i64(b, I_MTIME),
            ctime_ns: get_i64(b, I_CTIME),
            generation: get_u32(b, I_GENERATION),
            flags: get_u32(b, I_FLAGS),
            stream: StreamProps {
                bitrate_bps: get_u64(b, I_BITRATE),
                frame_rate_num: get_u32(b, I_FRAME_NUM),
                frame_rate_den: get_u32(b, I_FRAME_DEN),
            },
            frame_index_root: get_u64(b, I_FRAME_ROOT),
            frame_count: get_u64(b, I_FRAME_COUNT),
            run_count,
            indirect: [0; INDIRECT_SLOTS],
            inline: Vec::new(),
            inline_target: Vec::new(),
            stream_secs: get_u32(b, I_STREAM_SECS),
            stream_request_kib: get_u32(b, I_STREAM_REQUEST_KIB),
            retention: StreamRetention::default(),
            protection: None,
        }
    }
}

/// Where run number `index` (counted from 0, inline runs first) of a file lives:
/// `None` for an inline run, else (indirect slot, block within slot, entry in block).
pub fn run_location(index: usize) -> Option<(usize, u64, usize)> {
    if index < INLINE_RUNS {
        return None;
    }
    let i = index - INLINE_RUNS;
    let block = (i / RUNS_PER_BLOCK) as u64; // block number across all slots
    let entry = i % RUNS_PER_BLOCK;
    // Slot k covers blocks (2^k - 1) .. (2^(k+1) - 1).
    let slot = (64 - (block + 1).leading_zeros() - 1) as usize;
    let within = block + 1 - (1u64 << slot);
    Some((slot, within, entry))
}

/// Indirect metadata blocks a file with `runs` runs needs, as slot count.
pub fn slots_needed(runs: usize) -> usize {
    if runs <= INLINE_RUNS {
        return 0;
    }
    let blocks = (runs - INLINE_RUNS).div_ceil(RUNS_PER_BLOCK) as u64;
    (64 - blocks.leading_zeros()) as usize
}

/// Encodes up to [`RUNS_PER_BLOCK`] runs into an indirect block payload.
pub fn encode_runs(runs: &[Run], payload: &mut [u8]) {
    debug_assert!(runs.len() <= RUNS_PER_BLOCK);
    payload.fill(0);
    for (k, r) in runs.iter().enumerate() {
        r.encode(&mut payload[RUN_BYTES * k..RUN_BYTES * (k + 1)]);
    }
}

pub fn decode_runs(payload: &[u8], n: usize) -> Vec<Run> {
    (0..n.min(RUNS_PER_BLOCK))
        .map(|k| Run::decode(&payload[RUN_BYTES * k..RUN_BYTES * (k + 1)]))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inode_round_trips() {
        let rec = InodeRecord {
            mode: S_IFREG | 0o644,
            nlink: 1,
            uid: 1000,
            gid: 100,
            size_bytes: 123456789,
            mtime_ns: -5,
            ctime_ns: 99,
            generation: 3,
            flags: 0,
            stream: StreamProps {
                bitrate_bps: 19_390_000,
                frame_rate_num: 30000,
                frame_rate_den: 1001,
            },
            frame_index_root: 0,
            frame_count: 0,
            run_count: 9,
            indirect: [5; INDIRECT_SLOTS],
            inline: (0..6)
                .map(|k| Run {
                    file_block: k,
                    count: 1,
                    start: 1000 + k as u64,
                })
                .collect(),
            inline_target: vec![],
            stream_secs: 7200,
            stream_request_kib: 512,
            retention: StreamRetention::default(),
            protection: None,
        };
        let mut b = [0u8; INODE_BYTES];
        rec.encode(&mut b);
        assert_eq!(InodeRecord::decode(&b), rec);
    }

    #[test]
    fn an_inline_symlink_target_fills_the_map_bytes_and_round_trips() {
        let target: Vec<u8> = (0..MAX_INLINE_TARGET_BYTES as u8).map(|k| k | 1).collect();
        let rec = InodeRecord {
            mode: S_IFLNK | 0o777,
            nlink: 1,
            size_bytes: target.len() as u64,
            inline_target: target.clone(),
            stream_secs: 0,
            ..Default::default()
        };
        let mut b = [0u8; INODE_BYTES];
        rec.encode(&mut b);
        assert_eq!(&b[84..248], &target[..]);
        assert_eq!(&b[248..], &[0; 8]);
        let back = InodeRecord::decode(&b);
        assert_eq!(back, rec);
        // Its map bytes are not read as indirect starts.
        assert_eq!(back.indirect, [0; INDIRECT_SLOTS]);
        // A damaged length never reads past the map bytes.
        let mut long = rec.clone();
        long.size_bytes = 10_000;
        long.inline_target.clear();
        long.encode(&mut b);
        b[84..248].copy_from_slice(&target);
        assert_eq!(InodeRecord::decode(&b).inline_target, target);
        // A block symlink (one run) keeps its map.
        let mut block = InodeRecord {
            mode: S_IFLNK | 0o777,
            size_bytes: 300,
            run_count: 1,
            ..Default::default()
        };
        block.inline.push(Run {
            file_block: 0,
            count: 1,
            start: 77,
        });
        block.encode(&mut b);
        let back = InodeRecord::decode(&b);
        assert_eq!(back, block);
        assert!(back.inline_target.is_empty());
    }

    #[test]
    #[should_panic(expected = "inline symlink target in a record with a map")]
    fn an_inline_target_beside_runs_is_refused() {
        let rec = InodeRecord {
            mode: S_IFLNK | 0o777,
            size_bytes: 1,
            run_count: 1,
            inline_target: b"x".to_vec(),
            ..Default::default()
        };
        rec.encode(&mut [0u8; INODE_BYTES]);
    }

    #[test]
    fn a_directory_default_reservation_round_trips_and_clears() {
        let mut rec = InodeRecord {
            mode: S_IFDIR | 0o755,
            nlink: 2,
            ..Default::default()
        };
        assert_eq!(rec.stream_default(), None);
        let d = StreamDefault {
            write: true,
            rate_bps: 8_000_000,
            secs: 7200,
            request_kib: 1024,
        };
        rec.set_stream_default(Some(d));
        let mut b = [0u8; INODE_BYTES];
        rec.encode(&mut b);
        assert_eq!(InodeRecord::decode(&b).stream_default(), Some(d));
        assert_eq!(u32::from_le_bytes(b[248..252].try_into().unwrap()), 7200);
        assert_eq!(u32::from_le_bytes(b[252..256].try_into().unwrap()), 1024);
        assert_eq!(u32::from_le_bytes(b[44..48].try_into().unwrap()), 3);
        rec.set_stream_default(None);
        rec.encode(&mut b);
        assert_eq!(InodeRecord::decode(&b).stream_default(), None);
        assert!(b[248..256].iter().all(|&x| x == 0));
        // A file never carries one, whatever its flags say.
        let mut f = InodeRecord::decode(&b);
        f.mode = S_IFREG | 0o644;
        f.set_stream_default(Some(d));
        assert_eq!(f.stream_default(), None);
    }

    #[test]
    fn a_directory_retention_policy_round_trips_and_clears() {
        let mut rec = InodeRecord {
            mode: S_IFDIR | 0o755,
            nlink: 2,
            ..Default::default()
        };
        assert_eq!(rec.retention(), None);
        let r = StreamRetention {
            max_age_s: 30 * 86_400,
            min_age_s: 7 * 86_400,
            max_bytes: 500 << 30,
        };
        rec.set_retention(Some(r));
        let mut b = [0u8; INODE_BYTES];
        rec.encode(&mut b);
        assert_eq!(InodeRecord::decode(&b).retention(), Some(r));
        assert_eq!(
            u32::from_le_bytes(b[56..60].try_into().unwrap()),
            30 * 86_400
        );
        assert_eq!(
            u32::from_le_bytes(b[60..64].try_into().unwrap()),
            7 * 86_400
        );
        assert_eq!(u64::from_le_bytes(b[64..72].try_into().unwrap()), 500 << 30);
        assert_eq!(
            u32::from_le_bytes(b[44..48].try_into().unwrap()),
            FLAG_RETENTION
        );
        // Decoded, a directory's policy bytes are not a frame index.
        assert_eq!(InodeRecord::decode(&b).frame_index_root, 0);
        rec.set_retention(Some(StreamRetention::default()));
        rec.encode(&mut b);
        assert_eq!(InodeRecord::decode(&b).retention(), None);
        assert!(b[44..48].iter().chain(&b[56..80]).all(|&x| x == 0));
        // A regular file's bit 2 is its index flag, never a policy.
        let mut f = InodeRecord::decode(&b);
        f.mode = S_IFREG | 0o644;
        f.flags = FLAG_INDEX_INCOMPLETE;
        f.frame_index_root = 9;
        f.encode(&mut b);
        let back = InodeRecord::decode(&b);
        assert_eq!((back.retention(), back.frame_index_root), (None, 9));
    }

    #[test]
    fn a_protection_round_trips_in_the_frame_rate_bytes_and_clears() {
        let mut rec = InodeRecord {
            mode: S_IFREG | 0o644,
            nlink: 1,
            frame_index_root: 77,
            frame_count: 5,
            flags: FLAG_INDEX_INCOMPLETE,
            ..Default::default()
        };
        let p = Protection {
            until_s: 1_790_000_000,
            id: 7,
        };
        rec.set_protection(Some(p));
        let mut b = [0u8; INODE_BYTES];
        rec.encode(&mut b);
        let back = InodeRecord::decode(&b);
        assert_eq!(back.protection, Some(p));
        assert_eq!(back.stream.frame_rate_num, 0);
        // The frame index and the other flags stay the file's.
        assert_eq!((back.frame_index_root, back.frame_count), (77, 5));
        assert_eq!(back.flags, FLAG_INDEX_INCOMPLETE | FLAG_PROTECTED);
        assert_eq!(
            u32::from_le_bytes(b[56..60].try_into().unwrap()),
            1_790_000_000
        );
        assert_eq!(u32::from_le_bytes(b[60..64].try_into().unwrap()), 7);
        rec.set_protection(None);
        rec.encode(&mut b);
        let back = InodeRecord::decode(&b);
        assert_eq!((back.protection, back.flags), (None, FLAG_INDEX_INCOMPLETE));
        assert!(b[56..64].iter().all(|&x| x == 0));
        // A directory's bit 3 is nothing of a protection.
        let d = InodeRecord {
            mode: S_IFDIR | 0o755,
            flags: FLAG_PROTECTED,
            ..Default::default()
        };
        d.encode(&mut b);
        assert_eq!(InodeRecord::decode(&b).protection, None);
        // Expiry: at its second it no longer holds; FOREVER always does.
        assert!(p.holds_at(1_789_999_999_999_999_999));
        assert!(!p.holds_at(1_790_000_000_000_000_000));
        let forever = Protection {
            until_s: Protection::FOREVER,
            id: 1,
        };
        assert!(forever.holds_at(i64::MAX));
    }

    #[test]
    fn run_locations_cover_slots_in_order() {
        assert_eq!(run_location(5), None);
        assert_eq!(run_location(6), Some((0, 0, 0)));
        assert_eq!(run_location(6 + 252), Some((0, 0, 252)));
        assert_eq!(run_location(6 + 253), Some((1, 0, 0)));
        assert_eq!(run_location(6 + 253 * 2), Some((1, 1, 0)));
        assert_eq!(run_location(6 + 253 * 3), Some((2, 0, 0)));
        assert_eq!(run_location(MAX_RUNS - 1), Some((16, 65535, 252)));
        assert_eq!(slots_needed(6), 0);
        assert_eq!(slots_needed(7), 1);
        assert_eq!(slots_needed(6 + 253), 1);
        assert_eq!(slots_needed(6 + 254), 2);
        assert_eq!(slots_needed(MAX_RUNS), INDIRECT_SLOTS);
    }
}
