//! What goes into the engine (operations) and what comes out (completions).

use super::buf::IoBuf;
use super::stream::{StreamId, StreamInfo, StreamSpec, StreamStats};
use crate::error::Error;
use crate::format::frame_index::FrameEntry;
use crate::format::inode::Protection;
use crate::format::superblock::VolumeRetention;
use crate::meta::Ino;
use crate::retention::Covered;
use crate::volume::{OpenMode, SetAttr};

/// Identifies an operation from submission to completion.
pub type OpId = u64;

/// An operation on the file system. Data operations carry owned buffers and get them
/// back in their completion. Namespace operations change the in-memory metadata at
/// once (durable at the next commit); `Fsync` completes when everything before it is
/// durable.
#[derive(Debug)]
pub enum Op {
    /// Read up to `buf.len()` bytes at `offset`.
    Read {
        ino: Ino,
        offset: u64,
        buf: IoBuf,
    },
    /// Write all of `data` at `offset`.
    Write {
        ino: Ino,
        offset: u64,
        data: IoBuf,
    },
    /// Write all of `data` at the file's end as it stands when the write starts,
    /// after every write to the file submitted before it was planned: appends from
    /// several submitters never overwrite each other (a stream's integrity chain,
    /// appended by its recorder and by retention). Completes as a write.
    Append {
        ino: Ino,
        data: IoBuf,
    },
    /// Set a regular file's size.
    Truncate {
        ino: Ino,
        size_bytes: u64,
    },
    Create {
        parent: Ino,
        name: Vec<u8>,
        perm: u32,
        uid: u32,
        gid: u32,
    },
    Mkdir {
        parent: Ino,
        name: Vec<u8>,
        perm: u32,
        uid: u32,
        gid: u32,
    },
    Symlink {
        parent: Ino,
        name: Vec<u8>,
        target: Vec<u8>,
        uid: u32,
        gid: u32,
    },
    /// A new name for a regular file (a hard link).
    Link {
        ino: Ino,
        parent: Ino,
        name: Vec<u8>,
    },
    Unlink {
        parent: Ino,
        name: Vec<u8>,
    },
    Rmdir {
        parent: Ino,
        name: Vec<u8>,
    },
    Rename {
        src_parent: Ino,
        src_name: Vec<u8>,
        dst_parent: Ino,
        dst_name: Vec<u8>,
    },
    SetAttr {
        ino: Ino,
        set: SetAttr,
    },
    /// A handle on a regular file is opened (drivers with POSIX handles: the FUSE
    /// mount). Until the matching `CloseFile`, removing the file's last name leaves it
    /// readable and writable through the handle (an orphan); the last close frees it.
    /// `mode` is how the handle was opened: a file only readers hold may be deleted
    /// under them for a recording that needs its space (retention's rule 6), and
    /// their reads then fail with [`Error::RangeExpired`](crate::Error::RangeExpired).
    OpenFile {
        ino: Ino,
        mode: OpenMode,
    },
    /// The file is closed (`mode` as it was opened): unused preallocation (contig)
    /// goes back to the free pool, and an orphan's last close frees it.
    CloseFile {
        ino: Ino,
        mode: OpenMode,
    },
    /// Everything completed before it becomes durable (the journal is global, so this
    /// is a whole-volume sync).
    Fsync,
    /// Open a stream reservation on a file (admission; a write stream's space is held).
    StreamOpen {
        ino: Ino,
        spec: StreamSpec,
    },
    /// Read `buf.len()` bytes at the stream's playout point (fewer at end of file),
    /// from its playout buffer, at most at its rate.
    StreamRead {
        stream: StreamId,
        buf: IoBuf,
    },
    /// Append `data` to the stream's write-behind buffer, at most at its rate.
    StreamWrite {
        stream: StreamId,
        data: IoBuf,
    },
    /// Close a stream: the last partial request is written and waited for, unused
    /// held space goes back.
    StreamClose {
        stream: StreamId,
    },
    /// A write stream's bytes so far on the disk and applied to the file: the partial
    /// request being filled is written now (an `fsync` of a recording; then
    /// `Op::Fsync` makes them durable). Completes at once for a read stream.
    StreamSync {
        stream: StreamId,
    },
    /// A recording goes on in another file (the next chunk of a stream): every
    /// byte written before it goes to the stream's file, every byte after it to the
    /// end of `ino`; the admission, the buffer and the held space stay the stream's
    /// (`engine/stream/roll.rs`). Waits its turn behind the stream's writes.
    StreamRoll {
        stream: StreamId,
        ino: Ino,
    },
    /// A playback goes on into another file (the next chunk of a stream) once it
    /// has fetched to the end of its file and of every file queued before this
    /// one: from byte `from` of `ino` (past a chunk's head), in one position space
    /// under the same admission, rate credit and buffer, so the boundary costs no
    /// start-up and no deadline (`engine/stream/playback.rs`). Completes at once.
    StreamQueue {
        stream: StreamId,
        ino: Ino,
        from: u64,
    },
    /// A playback follows its last file while a recording writes it (watching
    /// live): at the end of what is there its reads wait for the recording's next
    /// bytes instead of ending, without counting a stall, and when bytes come it
    /// starts again as at its open, the next byte due one slack later
    /// (`engine/stream/playback.rs`). Completes at once.
    StreamFollow {
        stream: StreamId,
    },
    /// Append keyframes to a regular file's frame index (`volume/frame_index.rs`):
    /// each within the file's size as applied, in order after the last. Goes to disk
    /// with the data it describes, in the next commit. An index that finds no room
    /// completes with `Done` and the file flagged incomplete (`frame_info`).
    AppendFrames {
        ino: Ino,
        entries: Vec<FrameEntry>,
    },
    /// Drop a file's frame index; `incomplete` sets its incomplete flag, clear
    /// clears it (a reindex starting over).
    DropFrameIndex {
        ino: Ino,
        incomplete: bool,
    },
    /// Set the volume's retention policy (`dvrfs retention TARGET / --high --low
    /// --protected-max`; all 0 clears it).
    SetVolumeRetention(VolumeRetention),
    /// Protect the chunks of the stream in `dir` that meet UTC `from_utc_ns ..=
    /// to_utc_ns` (`dvrfs protect`, `retention/protect.rs`): refused past the
    /// volume's protected-max, unless `restate` (a protection stated again after
    /// another was removed from some of its chunks: what it holds was counted
    /// when it was made). Completes with what it covered.
    Protect {
        dir: Ino,
        from_utc_ns: i64,
        to_utc_ns: i64,
        protection: Protection,
        restate: bool,
    },
    /// Remove protection `id` from the chunks that carry it (`dvrfs unprotect`), in
    /// parts: completes with what it uncovered, `more` while chunks are left.
    Unprotect {
        id: u32,
    },
    /// Commit everything and empty the journal (a clean unmount). The engine accepts no
    /// operation after it.
    Unmount,
}

impl Op {
    pub fn name(&self) -> &'static str {
        match self {
            Op::Read { .. } => "read",
            Op::Write { .. } => "write",
            Op::Append { .. } => "append",
            Op::Truncate { .. } => "truncate",
            Op::Create { .. } => "create",
            Op::Mkdir { .. } => "mkdir",
            Op::Symlink { .. } => "symlink",
            Op::Link { .. } => "link",
            Op::Unlink { .. } => "unlink",
            Op::Rmdir { .. } => "rmdir",
            Op::Rename { .. } => "rename",
            Op::SetAttr { .. } => "setattr",
            Op::OpenFile { .. } => "open",
            Op::CloseFile { .. } => "close",
            Op::StreamOpen { .. } => "stream open",
            Op::StreamRead { .. } => "stream read",
            Op::StreamWrite { .. } => "stream write",
            Op::StreamClose { .. } => "stream close",
            Op::StreamSync { .. } => "stream sync",
            Op::StreamRoll { .. } => "stream roll",
            Op::StreamQueue { .. } => "stream queue",
            Op::StreamFollow { .. } => "stream follow",
            Op::AppendFrames { .. } => "append frames",
            Op::DropFrameIndex { .. } => "drop frame index",
            Op::SetVolumeRetention(_) => "set volume retention",
            Op::Protect { .. } => "protect",
            Op::Unprotect { .. } => "unprotect",
            Op::Fsync => "fsync",
            Op::Unmount => "unmount",
        }
    }
}

/// What a successful operation returns.
#[derive(Debug)]
pub enum Output {
    /// The buffer and how many bytes of it the read filled (0 at end of file).
    Read {
        buf: IoBuf,
        bytes: usize,
    },
    /// The written buffer, back for reuse.
    Write {
        data: IoBuf,
    },
    /// The new inode (create, mkdir, symlink).
    Ino(Ino),
    /// An admitted stream.
    Stream(StreamInfo),
    /// A closed stream: how it fared, every request counted.
    StreamClosed(StreamStats),
    /// What a protection (or a part of its removal) covered.
    Covered(Covered),
    Done,
}

/// A finished operation.
#[derive(Debug)]
pub struct Completion {
    pub op: OpId,
    pub result: Result<Output, Error>,
    /// The deadline it was submitted with.
    pub deadline_ns: Option<u64>,
    pub submit_ns: u64,
    /// Monotonic time of completion.
    pub done_ns: u64,
}
