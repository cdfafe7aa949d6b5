//! Behind `FEATURE_EVENTS` (FORMAT.md section 10b): the lost-tail record, kept in the
//! superblock's reserved bytes, and the event area, a ring of event-log blocks.
//!
//! **Lost-tail record** (superblock payload 240..4048). The superblock is part of every
//! transaction, so every transaction carries the record at no cost of its own (a block
//! of its own would add a checkpoint write, a seek on a hard disk, to nearly every
//! commit of a recorder): the files that had bytes accepted from their writers but not
//! yet in the committed size when the transaction was cut (a recording's buffer and partial
//! request, a plain file's writes still on their way to the disk), each with the size
//! the transaction commits and the size accepted so far. After a crash the last
//! committed transaction's record says which files came back shorter than their
//! writers had handed over, and by at least how much. At most [`MAX_TAILS`] files;
//! the record counts those left out.
//!
//! **Event-log blocks** (type 12, the event area). A ring of fixed-size records, each
//! with a sequence number that never repeats: the event numbered `seq` (from 1) lives
//! in slot `(seq - 1) % capacity`, so the ring needs no cursor, readers order by
//! `seq`, and a gap in the numbers says the ring wrapped. Blocks are written as
//! journal images in the commit that carries the change they describe, so an event is
//! atomic with it and a torn block is never read (its checksum fails; it is reported
//! and skipped, never trusted).
//!
//! Fault model: every block is checksummed like any metadata block; a record that
//! decodes to nonsense (unknown kind, a sequence number that does not belong in its
//! slot, a path longer than its field) is reported by the reader and skipped. Nothing
//! here can stop a volume from opening.

use super::*;

// ---- the lost-tail record, in the superblock ----

/// Where the record lies in the superblock's payload: right after its fields.
pub const TAILS_AT: usize = super::superblock::SUPERBLOCK_USED_BYTES;
/// Bytes the record may use: the rest of the superblock's payload.
pub const TAILS_BYTES: usize = PAYLOAD_BYTES - TAILS_AT;
const _: () = assert!(TAILS_AT == 240 && TAILS_BYTES == 3808);

const T_TXN: usize = 0; // u64: the transaction that wrote the record
const T_COUNT: usize = T_TXN + 8; // u32: files listed
const T_LEFT_OUT: usize = T_COUNT + 4; // u32: files with a lost tail not listed (no room)
const T_ENTRIES: usize = T_LEFT_OUT + 4;
// One entry: ino u32, zero u32, committed size u64, accepted size u64.
const TE_INO: usize = 0;
const TE_ZERO: usize = TE_INO + 4;
const TE_COMMITTED: usize = TE_ZERO + 4;
const TE_ACCEPTED: usize = TE_COMMITTED + 8;
/// Bytes of one lost-tail entry.
pub const TAIL_ENTRY_BYTES: usize = TE_ACCEPTED + 8;
/// Files one lost-tail record lists.
pub const MAX_TAILS: usize = (TAILS_BYTES - T_ENTRIES) / TAIL_ENTRY_BYTES;
const _: () = assert!(T_ENTRIES == 16);
const _: () = assert!(TAIL_ENTRY_BYTES == 24);
const _: () = assert!(MAX_TAILS == 158);
const _: () = assert!(T_ENTRIES + MAX_TAILS * TAIL_ENTRY_BYTES <= TAILS_BYTES);
/// Files one lost-tail record lists on a volume with a tail log, whose fields take
/// the payload's last 48 bytes (`tail_log::SB_TAIL_LOG_AT`).
pub const MAX_TAILS_WITH_TAIL_LOG: usize =
    (super::tail_log::SB_TAIL_LOG_AT - TAILS_AT - T_ENTRIES) / TAIL_ENTRY_BYTES;
const _: () = assert!(MAX_TAILS_WITH_TAIL_LOG == 156);
const _: () = assert!(
    TAILS_AT + T_ENTRIES + MAX_TAILS_WITH_TAIL_LOG * TAIL_ENTRY_BYTES
        <= super::tail_log::SB_TAIL_LOG_AT
);

/// Files the lost-tail record of a volume lists (`tail_log`: it has a tail log).
pub fn max_tails(tail_log: bool) -> usize {
    if tail_log {
        MAX_TAILS_WITH_TAIL_LOG
    } else {
        MAX_TAILS
    }
}

/// A file whose accepted bytes were not all in the committed size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tail {
    pub ino: u32,
    /// The size the transaction commits.
    pub committed_bytes: u64,
    /// The size the file would have had with everything its writers handed over.
    pub accepted_bytes: u64,
}

/// The lost-tail record of one transaction.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Tails {
    pub txn: u64,
    pub files: Vec<Tail>,
    /// Files with a tail that did not fit in the record.
    pub left_out: u32,
}

/// Encodes a lost-tail record into its place of a superblock payload (at most
/// [`MAX_TAILS`] files; the caller counts the rest in `left_out`).
pub fn encode_tails(t: &Tails, sb_payload: &mut [u8], tail_log: bool) {
    assert!(
        t.files.len() <= max_tails(tail_log),
        "{} tails",
        t.files.len()
    );
    let payload = &mut sb_payload[TAILS_AT..];
    put_u64(payload, T_TXN, t.txn);
    put_u32(payload, T_COUNT, t.files.len() as u32);
    put_u32(payload, T_LEFT_OUT, t.left_out);
    for (i, f) in t.files.iter().enumerate() {
        assert!(f.accepted_bytes > f.committed_bytes, "{f:?} lost nothing");
        let at = T_ENTRIES + i * TAIL_ENTRY_BYTES;
        put_u32(payload, at + TE_INO, f.ino);
        put_u64(payload, at + TE_COMMITTED, f.committed_bytes);
        put_u64(payload, at + TE_ACCEPTED, f.accepted_bytes);
    }
}

/// Decodes the lost-tail record of a superblock payload; entries that make no sense
/// (inode 0, nothing lost) are dropped and counted in the second value.
pub fn decode_tails(sb_payload: &[u8], tail_log: bool) -> Result<(Tails, usize), BlockError> {
    let payload = &sb_payload[TAILS_AT..];
    let count = get_u32(payload, T_COUNT) as usize;
    if count > max_tails(tail_log) {
        return Err(BlockError::Malformed("lost-tail count"));
    }
    let mut bad = 0;
    let mut files = Vec::with_capacity(count);
    for i in 0..count {
        let at = T_ENTRIES + i * TAIL_ENTRY_BYTES;
        let f = Tail {
            ino: get_u32(payload, at + TE_INO),
            committed_bytes: get_u64(payload, at + TE_COMMITTED),
            accepted_bytes: get_u64(payload, at + TE_ACCEPTED),
        };
        if f.ino == 0 || f.accepted_bytes <= f.committed_bytes {
            bad += 1;
        } else {
            files.push(f);
        }
    }
    Ok((
        Tails {
            txn: get_u64(payload, T_TXN),
            files,
            left_out: get_u32(payload, T_LEFT_OUT),
        },
        bad,
    ))
}

// ---- event-log blocks ----

const E_SEQ: usize = 0; // u64, 0 = an empty slot
const E_MONO: usize = E_SEQ + 8; // u64, monotonic ns of the engine's clock
const E_WALL: usize = E_MONO + 8; // i64, wall-clock ns since the epoch
const E_KIND: usize = E_WALL + 8; // u16
const E_CODE: usize = E_KIND + 2; // u16, kind-specific (direction, cause, level)
const E_INO: usize = E_CODE + 2; // u32, the file, 0 when none
const E_VALUES: usize = E_INO + 4; // 5 x u64, kind-specific
const E_PATH_LEN: usize = E_VALUES + 5 * 8; // u8
const E_FLAGS: usize = E_PATH_LEN + 1; // u8, bit 0: the path's start was cut
const E_PATH: usize = E_FLAGS + 1; // the file's path, its last EVENT_PATH_BYTES bytes
/// Path bytes an event keeps (the end of a longer path).
pub const EVENT_PATH_BYTES: usize = 54;
/// Bytes of one event record.
pub const EVENT_BYTES: usize = E_PATH + EVENT_PATH_BYTES;
/// Event records per event-log block.
pub const EVENTS_PER_BLOCK: usize = PAYLOAD_BYTES / EVENT_BYTES;
const _: () = assert!(E_VALUES == 32);
const _: () = assert!(E_PATH == 74);
const _: () = assert!(EVENT_BYTES == 128);
const _: () = assert!(EVENTS_PER_BLOCK == 31);
const FLAG_PATH_CUT: u8 = 1;

/// Which way a stream moves data, as events store it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dir {
    Read,
    Write,
}

impl Dir {
    fn code(self) -> u16 {
        match self {
            Dir::Read => 1,
            Dir::Write => 2,
        }
    }
    fn from_code(c: u16) -> Option<Dir> {
        match c {
            1 => Some(Dir::Read),
            2 => Some(Dir::Write),
            _ => None,
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            Dir::Read => "read",
            Dir::Write => "write",
        }
    }
}

/// Why a stream was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RefuseCause {
    /// Admission: the disk's real-time capacity.
    Capacity,
    /// No room for the space it asked to hold.
    NoSpace,
    /// Anything else (a bad specification, a read-only volume).
    Other,
}

/// What moved a live recording's UTC against its media time (`What::ClockStep`;
/// `media::keyframes`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClockChange {
    /// The host's wall clock stepped forward: applied (the recording's UTC jumps).
    HostForward,
    /// The host's wall clock stepped back: not applied (UTC never goes back; the
    /// recording's UTC goes on by its media time).
    HostBack,
    /// The source's media time fell behind the monotonic clock: re-anchored
    /// forward.
    SourceBehind,
    /// The source's media time ran ahead of the monotonic clock (a fast clock, not
    /// an import): re-anchored, its UTC held until real time catches up.
    SourceAhead,
}

impl ClockChange {
    fn code(self) -> u16 {
        match self {
            ClockChange::HostForward => 1,
            ClockChange::HostBack => 2,
            ClockChange::SourceBehind => 3,
            ClockChange::SourceAhead => 4,
        }
    }
    fn from_code(c: u16) -> Option<ClockChange> {
        match c {
            1 => Some(ClockChange::HostForward),
            2 => Some(ClockChange::HostBack),
            3 => Some(ClockChange::SourceBehind),
            4 => Some(ClockChange::SourceAhead),
            _ => None,
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            ClockChange::HostForward => "host_forward",
            ClockChange::HostBack => "host_back",
            ClockChange::SourceBehind => "source_behind",
            ClockChange::SourceAhead => "source_ahead",
        }
    }
    /// Whether the recording's UTC anchor moved (the keyframe index flags it).
    pub fn applied(self) -> bool {
        self != ClockChange::HostBack
    }
}

/// Why retention deleted a chunk (`What::ChunkDeleted`; `crate::retention`, the
/// precedence of docs/retention.md).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum DeleteCause {
    /// Older than its stream's max-age.
    MaxAge,
    /// Its stream was over its max-size.
    MaxSize,
    /// The volume was above its high mark.
    HighWater,
    /// Space an admitted recording needed.
    Needed,
}

impl DeleteCause {
    fn code(self) -> u16 {
        match self {
            DeleteCause::MaxAge => 1,
            DeleteCause::MaxSize => 2,
            DeleteCause::HighWater => 3,
            DeleteCause::Needed => 4,
        }
    }
    fn from_code(c: u16) -> Option<DeleteCause> {
        match c {
            1 => Some(DeleteCause::MaxAge),
            2 => Some(DeleteCause::MaxSize),
            3 => Some(DeleteCause::HighWater),
            4 => Some(DeleteCause::Needed),
            _ => None,
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            DeleteCause::MaxAge => "max_age",
            DeleteCause::MaxSize => "max_size",
            DeleteCause::HighWater => "high_water",
            DeleteCause::Needed => "needed",
        }
    }
}

impl RefuseCause {
    fn code(self) -> u16 {
        match self {
            RefuseCause::Capacity => 1,
            RefuseCause::NoSpace => 2,
            RefuseCause::Other => 3,
        }
    }
    fn from_code(c: u16) -> Option<RefuseCause> {
        match c {
            1 => Some(RefuseCause::Capacity),
            2 => Some(RefuseCause::NoSpace),
            3 => Some(RefuseCause::Other),
            _ => None,
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            RefuseCause::Capacity => "capacity",
            RefuseCause::NoSpace => "no_space",
            RefuseCause::Other => "other",
        }
    }
}

/// What happened. Byte counts are bytes, rates bits per second.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum What {
    /// The volume was not closed cleanly: journal transaction `txn` was replayed
    /// (0: none was, the last checkpoint stood), and `tails` files came back shorter
    /// than their writers had handed over (`left_out` of them not listed).
    Recovery {
        txn: u64,
        tails: u32,
        left_out: u32,
    },
    /// One file of a recovery: `committed_bytes` survive, at least `accepted_bytes`
    /// had been accepted (as of the transaction `txn` replayed).
    TailLost {
        ino: u32,
        txn: u64,
        committed_bytes: u64,
        accepted_bytes: u64,
    },
    StreamAdmitted {
        ino: u32,
        dir: Dir,
        rate_bps: u64,
        request_bytes: u64,
        buffer_bytes: u64,
        durable_ns: u64,
        reserved_bytes: u64,
    },
    /// `fits_bps`: the rate a stream like it would be admitted at (0: none).
    StreamRefused {
        ino: u32,
        dir: Dir,
        cause: RefuseCause,
        rate_bps: u64,
        fits_bps: u64,
    },
    StreamEnded {
        ino: u32,
        dir: Dir,
        bytes: u64,
        requests: u64,
        late: u64,
        no_space: u64,
        durability_late: u64,
    },
    StreamFailed {
        ino: u32,
        dir: Dir,
        errno: u32,
    },
    /// A write refused whole for want of space.
    WriteNoSpace {
        ino: u32,
        need_bytes: u64,
        free_bytes: u64,
    },
    /// Used space (holds counted) crossed `level_pct` upwards (`up`) or fell back below
    /// it; `used_bytes` of `data_bytes`.
    Space {
        up: bool,
        level_pct: u16,
        used_bytes: u64,
        data_bytes: u64,
    },
    /// A live recording's clock moved against its media time by `step_ns` (the
    /// magnitude), seen at byte `offset` of the file (`media::keyframes`).
    ClockStep {
        ino: u32,
        change: ClockChange,
        step_ns: u64,
        offset: u64,
    },
    /// Retention deleted a chunk of `bytes` whose data ran from `start_utc_ns` to
    /// `end_utc_ns` (the record's path is the chunk's).
    ChunkDeleted {
        ino: u32,
        cause: DeleteCause,
        bytes: u64,
        start_utc_ns: i64,
        end_utc_ns: i64,
    },
}

/// One event as stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EventRecord {
    /// From 1, one more for every event of the volume.
    pub seq: u64,
    pub mono_ns: u64,
    pub wall_ns: i64,
    pub what: What,
    /// The file's path when the event happened (its last [`EVENT_PATH_BYTES`] bytes;
    /// `path_cut` says the start is missing). Empty without a file.
    pub path: Vec<u8>,
    pub path_cut: bool,
}

impl What {
    /// The kind's on-disk code and name.
    pub fn kind(&self) -> (u16, &'static str) {
        match self {
            What::Recovery { .. } => (1, "recovery"),
            What::TailLost { .. } => (2, "tail_lost"),
            What::StreamAdmitted { .. } => (3, "stream_admitted"),
            What::StreamRefused { .. } => (4, "stream_refused"),
            What::StreamEnded { .. } => (5, "stream_ended"),
            What::StreamFailed { .. } => (6, "stream_failed"),
            What::WriteNoSpace { .. } => (7, "write_no_space"),
            What::Space { up: true, .. } => (8, "space_low"),
            What::Space { up: false, .. } => (9, "space_ok"),
            What::ClockStep { .. } => (10, "clock_step"),
            What::ChunkDeleted { .. } => (11, "chunk_deleted"),
        }
    }

    /// The file the event is about.
    pub fn ino(&self) -> Option<u32> {
        match *self {
            What::TailLost { ino, .. }
            | What::StreamAdmitted { ino, .. }
            | What::StreamRefused { ino, .. }
            | What::StreamEnded { ino, .. }
            | What::StreamFailed { ino, .. }
            | What::WriteNoSpace { ino, .. }
            | What::ClockStep { ino, .. }
            | What::ChunkDeleted { ino, .. } => Some(ino),
            What::Recovery { .. } | What::Space { .. } => None,
        }
    }

    /// (code, ino, values).
    fn fields(&self) -> (u16, u32, [u64; 5]) {
        match *self {
            What::Recovery {
                txn,
                tails,
                left_out,
            } => (0, 0, [txn, tails as u64, left_out as u64, 0, 0]),
            What::TailLost {
                ino,
                txn,
                committed_bytes,
                accepted_bytes,
            } => (0, ino, [txn, committed_bytes, accepted_bytes, 0, 0]),
            What::StreamAdmitted {
                ino,
                dir,
                rate_bps,
                request_bytes,
                buffer_bytes,
                durable_ns,
                reserved_bytes,
            } => (
                dir.code(),
                ino,
                [
                    rate_bps,
                    request_bytes,
                    buffer_bytes,
                    durable_ns,
                    reserved_bytes,
                ],
            ),
            What::StreamRefused {
                ino,
                dir,
                cause,
                rate_bps,
                fits_bps,
            } => (
                dir.code() | cause.code() << 8,
                ino,
                [rate_bps, fits_bps, 0, 0, 0],
            ),
            What::StreamEnded {
                ino,
                dir,
                bytes,
                requests,
                late,
                no_space,
                durability_late,
            } => (
                dir.code(),
                ino,
                [bytes, requests, late, no_space, durability_late],
            ),
            What::StreamFailed { ino, dir, errno } => (dir.code(), ino, [errno as u64, 0, 0, 0, 0]),
            What::WriteNoSpace {
                ino,
                need_bytes,
                free_bytes,
            } => (0, ino, [need_bytes, free_bytes, 0, 0, 0]),
            What::Space {
                level_pct,
                used_bytes,
                data_bytes,
                ..
            } => (level_pct, 0, [used_bytes, data_bytes, 0, 0, 0]),
            What::ClockStep {
                ino,
                change,
                step_ns,
                offset,
            } => (change.code(), ino, [step_ns, offset, 0, 0, 0]),
            What::ChunkDeleted {
                ino,
                cause,
                bytes,
                start_utc_ns,
                end_utc_ns,
            } => (
                cause.code(),
                ino,
                [bytes, start_utc_ns as u64, end_utc_ns as u64, 0, 0],
            ),
        }
    }

    fn from_fields(kind: u16, code: u16, ino: u32, v: [u64; 5]) -> Option<What> {
        let dir = || Dir::from_code(code & 0xff);
        let small = |x: u64| u32::try_from(x).ok();
        Some(match kind {
            1 => What::Recovery {
                txn: v[0],
                tails: small(v[1])?,
                left_out: small(v[2])?,
            },
            2 => What::TailLost {
                ino,
                txn: v[0],
                committed_bytes: v[1],
                accepted_bytes: v[2],
            },
            3 => What::StreamAdmitted {
                ino,
                dir: dir()?,
                rate_bps: v[0],
                request_bytes: v[1],
                buffer_bytes: v[2],
                durable_ns: v[3],
                reserved_bytes: v[4],
            },
            4 => What::StreamRefused {
                ino,
                dir: dir()?,
                cause: RefuseCause::from_code(code >> 8)?,
                rate_bps: v[0],
                fits_bps: v[1],
            },
            5 => What::StreamEnded {
                ino,
                dir: dir()?,
                bytes: v[0],
                requests: v[1],
                late: v[2],
                no_space: v[3],
                durability_late: v[4],
            },
            6 => What::StreamFailed {
                ino,
                dir: dir()?,
                errno: small(v[0])?,
            },
            7 => What::WriteNoSpace {
                ino,
                need_bytes: v[0],
                free_bytes: v[1],
            },
            8 | 9 => What::Space {
                up: kind == 8,
                level_pct: code,
                used_bytes: v[0],
                data_bytes: v[1],
            },
            10 => What::ClockStep {
                ino,
                change: ClockChange::from_code(code)?,
                step_ns: v[0],
                offset: v[1],
            },
            11 => What::ChunkDeleted {
                ino,
                cause: DeleteCause::from_code(code)?,
                bytes: v[0],
                start_utc_ns: v[1] as i64,
                end_utc_ns: v[2] as i64,
            },
            _ => return None,
        })
    }
}

/// Writes `rec` into record slot `index` of an event-log block payload.
pub fn encode_event(rec: &EventRecord, index: usize, payload: &mut [u8]) {
    assert!(index < EVENTS_PER_BLOCK && rec.seq != 0);
    assert!(
        rec.path.len() <= EVENT_PATH_BYTES,
        "path of {}",
        rec.path.len()
    );
    let r = &mut payload[index * EVENT_BYTES..(index + 1) * EVENT_BYTES];
    let (kind, _) = rec.what.kind();
    let (code, ino, v) = rec.what.fields();
    put_u64(r, E_SEQ, rec.seq);
    put_u64(r, E_MONO, rec.mono_ns);
    put_i64(r, E_WALL, rec.wall_ns);
    put_u16(r, E_KIND, kind);
    put_u16(r, E_CODE, code);
    put_u32(r, E_INO, ino);
    for (i, x) in v.iter().enumerate() {
        put_u64(r, E_VALUES + i * 8, *x);
    }
    r[E_PATH_LEN] = rec.path.len() as u8;
    r[E_FLAGS] = if rec.path_cut { FLAG_PATH_CUT } else { 0 };
    r[E_PATH..E_PATH + rec.path.len()].copy_from_slice(&rec.path);
    debug_assert_eq!(decode_event(payload, index), Ok(Some(rec.clone())));
}

/// Record slot `index` of an event-log block payload: `None` for an empty slot, an
/// error naming what is wrong for a record that cannot be an event.
pub fn decode_event(payload: &[u8], index: usize) -> Result<Option<EventRecord>, &'static str> {
    let r = &payload[index * EVENT_BYTES..(index + 1) * EVENT_BYTES];
    let seq = get_u64(r, E_SEQ);
    if seq == 0 {
        return Ok(None);
    }
    let mut v = [0u64; 5];
    for (i, x) in v.iter_mut().enumerate() {
        *x = get_u64(r, E_VALUES + i * 8);
    }
    let len = r[E_PATH_LEN] as usize;
    if len > EVENT_PATH_BYTES || r[E_FLAGS] & !FLAG_PATH_CUT != 0 {
        return Err("path field");
    }
    let what = What::from_fields(get_u16(r, E_KIND), get_u16(r, E_CODE), get_u32(r, E_INO), v)
        .ok_or("unknown kind or code")?;
    Ok(Some(EventRecord {
        seq,
        mono_ns: get_u64(r, E_MONO),
        wall_ns: get_i64(r, E_WALL),
        what,
        path: r[E_PATH..E_PATH + len].to_vec(),
        path_cut: r[E_FLAGS] & FLAG_PATH_CUT != 0,
    }))
}

/// The slot (block of the ring, record in it) of the event numbered `seq`.
pub fn event_slot(seq: u64, ring_blocks: u64) -> (u64, usize) {
    assert!(seq > 0 && ring_blocks > 0);
    let slot = (seq - 1) % (ring_blocks * EVENTS_PER_BLOCK as u64);
    (
        slot / EVENTS_PER_BLOCK as u64,
        (slot % EVENTS_PER_BLOCK as u64) as usize,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn every_kind() -> Vec<What> {
        vec![
            What::Recovery {
                txn: 7,
                tails: 2,
                left_out: 1,
            },
            What::TailLost {
                ino: 3,
                txn: 7,
                committed_bytes: 10,
                accepted_bytes: 20,
            },
            What::StreamAdmitted {
                ino: 4,
                dir: Dir::Write,
                rate_bps: 4_000_000,
                request_bytes: 512 << 10,
                buffer_bytes: 2 << 20,
                durable_ns: 1_000_000_000,
                reserved_bytes: 1 << 30,
            },
            What::StreamRefused {
                ino: 5,
                dir: Dir::Read,
                cause: RefuseCause::Capacity,
                rate_bps: 9,
                fits_bps: 8,
            },
            What::StreamEnded {
                ino: 6,
                dir: Dir::Write,
                bytes: 1,
                requests: 2,
                late: 3,
                no_space: 4,
                durability_late: 5,
            },
            What::StreamFailed {
                ino: 7,
                dir: Dir::Write,
                errno: 5,
            },
            What::WriteNoSpace {
                ino: 8,
                need_bytes: 1,
                free_bytes: 0,
            },
            What::Space {
                up: true,
                level_pct: 95,
                used_bytes: 96,
                data_bytes: 100,
            },
            What::Space {
                up: false,
                level_pct: 90,
                used_bytes: 80,
                data_bytes: 100,
            },
            What::ClockStep {
                ino: 9,
                change: ClockChange::HostForward,
                step_ns: 3_600_000_000_000,
                offset: 1 << 20,
            },
            What::ClockStep {
                ino: 9,
                change: ClockChange::SourceAhead,
                step_ns: 1_200_000_000,
                offset: 0,
            },
            What::ChunkDeleted {
                ino: 10,
                cause: DeleteCause::HighWater,
                bytes: 512 << 20,
                start_utc_ns: 1_795_890_524_496_000_000,
                end_utc_ns: -5,
            },
        ]
    }

    #[test]
    fn every_kind_round_trips_in_every_slot() {
        let mut p = vec![0u8; PAYLOAD_BYTES];
        for (i, what) in every_kind()
            .into_iter()
            .cycle()
            .take(EVENTS_PER_BLOCK)
            .enumerate()
        {
            let rec = EventRecord {
                seq: i as u64 + 1,
                mono_ns: 1000 + i as u64,
                wall_ns: -5,
                what,
                path: vec![b'a'; i % (EVENT_PATH_BYTES + 1)],
                path_cut: i % 2 == 0,
            };
            encode_event(&rec, i, &mut p);
            assert_eq!(decode_event(&p, i), Ok(Some(rec)));
        }
        assert!(p[EVENTS_PER_BLOCK * EVENT_BYTES..].iter().all(|&b| b == 0));
    }

    #[test]
    fn nonsense_records_are_errors_not_events() {
        let mut p = vec![0u8; PAYLOAD_BYTES];
        assert_eq!(decode_event(&p, 0), Ok(None));
        put_u64(&mut p, E_SEQ, 1);
        put_u16(&mut p, E_KIND, 99);
        assert!(decode_event(&p, 0).is_err());
        put_u16(&mut p, E_KIND, 3);
        put_u16(&mut p, E_CODE, 7); // no such direction
        assert!(decode_event(&p, 0).is_err());
        put_u16(&mut p, E_CODE, 1);
        p[E_PATH_LEN] = EVENT_PATH_BYTES as u8 + 1;
        assert!(decode_event(&p, 0).is_err());
    }

    #[test]
    fn tails_round_trip_and_nonsense_entries_are_dropped() {
        let t = Tails {
            txn: 9,
            files: (1..=MAX_TAILS as u32)
                .map(|i| Tail {
                    ino: i,
                    committed_bytes: i as u64,
                    accepted_bytes: 2 * i as u64,
                })
                .collect(),
            left_out: 3,
        };
        let mut p = vec![0u8; PAYLOAD_BYTES];
        encode_tails(&t, &mut p, false);
        assert!(
            p[..TAILS_AT].iter().all(|&b| b == 0),
            "the superblock's fields untouched"
        );
        assert_eq!(decode_tails(&p, false), Ok((t, 0)));
        // An entry that lost nothing is damage: dropped, counted.
        put_u64(&mut p, TAILS_AT + T_ENTRIES + TE_ACCEPTED, 0);
        let (back, bad) = decode_tails(&p, false).unwrap();
        assert_eq!((back.files.len(), bad), (MAX_TAILS - 1, 1));
        put_u32(&mut p, TAILS_AT + T_COUNT, MAX_TAILS as u32 + 1);
        assert!(decode_tails(&p, false).is_err());
    }

    #[test]
    fn slots_follow_the_sequence_number_and_wrap() {
        assert_eq!(event_slot(1, 2), (0, 0));
        assert_eq!(event_slot(32, 2), (1, 0));
        assert_eq!(event_slot(62, 2), (1, 30));
        assert_eq!(event_slot(63, 2), (0, 0));
    }
}
