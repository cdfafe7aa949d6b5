//! Typed errors of the core. Each message says what was wrong; the CLI adds what to do.

use std::io;

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("I/O error while {what}: {source}")]
    Io {
        what: String,
        #[source]
        source: io::Error,
    },
    #[error("not a dvrfs file system: {0}")]
    NotDvrfs(String),
    #[error("corrupt metadata: {0}")]
    Corrupt(String),
    #[error("device is too small: {device_bytes} bytes, a file system with these settings needs at least {need_bytes}")]
    TooSmall { device_bytes: u64, need_bytes: u64 },
    #[error("{0}: no such file or directory")]
    NotFound(String),
    #[error("{0}: already exists")]
    Exists(String),
    #[error("{0}: not a directory")]
    NotDir(String),
    #[error("{0}: is a directory")]
    IsDir(String),
    #[error("{0}: directory not empty")]
    NotEmpty(String),
    #[error("name is {len} bytes long; the limit is 255")]
    NameTooLong { len: usize },
    #[error(
        "invalid name {0:?}: names are 1 to 255 bytes without '/' or NUL, and not '.' or '..'"
    )]
    InvalidName(String),
    #[error("no space left: {need_bytes} bytes needed, {free_bytes} bytes free")]
    NoSpace { need_bytes: u64, free_bytes: u64 },
    #[error("no free inodes (all {0} are in use)")]
    NoInodes(u32),
    #[error("metadata area is full")]
    MetadataFull,
    /// A new directory block or symlink block would take one of the dynamic blocks
    /// kept for the block maps of files (`volume/room.rs`): ENOSPC. Recordings and other
    /// file writes can still grow their maps.
    #[error("the metadata area is full: {name_blocks} of its {total_blocks} blocks hold directories and symlinks, and the {reserve_blocks} free ones left are kept for the block maps of files")]
    NamesFull {
        name_blocks: u64,
        total_blocks: u64,
        reserve_blocks: u64,
    },
    #[error("file too large: {0} bytes is past the limit")]
    FileTooLarge(u64),
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    #[error("file system is open read-only")]
    ReadOnly,
    #[error("a directory cannot be moved into itself or below itself")]
    Loop,
    #[error("this write would rewrite {blocks} metadata blocks at once, more than one journal transaction holds ({limit}); the file is too fragmented to fill a hole this early")]
    TooFragmented { blocks: u64, limit: u64 },
    #[error(
        "deadline missed: the read was due at {deadline_ns} ns and could not be served in time"
    )]
    DeadlineMissed { deadline_ns: u64 },
    #[error("operation cancelled")]
    Cancelled,
    #[error("cannot cancel: {0}")]
    CannotCancel(String),
    #[error("the engine is full: {max} operations in flight; retry when some complete")]
    QueueFull { max: usize },
    /// A bound is full for now: the scheduler's queue has no room left for operations
    /// (the rest is kept for the commit pipeline), or the runtime holds as many
    /// uncollected results as it keeps. Nothing was started; retry when some
    /// operations complete (`EAGAIN`). Never fails a commit, an fsync or the unmount.
    #[error("busy: {0}; retry when some operations complete")]
    Busy(String),
    #[error("stream refused: {0}")]
    Refused(String),
    /// A stream past a per-user limit the daemon sets (`EDQUOT`).
    #[error("stream refused: over the user's limit: {0}")]
    OverQuota(String),
    /// A stream whose held space would take some of the share kept for root
    /// (`ENOSPC`).
    #[error("stream refused: {0}")]
    KeptForRoot(String),
    /// A recording whose size is more than the volume's free space and the space
    /// retention can reclaim, less what is promised to recordings already admitted
    /// (issue 26, rule 1; `ENOSPC`).
    #[error("stream refused: {0}")]
    SpaceNotKept(String),
    /// A file was deleted while it was read (a playback, or a handle opened for
    /// reading), its pin yielding to a recording's need for space (issue 26, rule
    /// 6; `ESTALE`): the bytes asked for are gone, and the reader gets nothing more
    /// rather than wrong data.
    #[error("range expired: {0}")]
    RangeExpired(String),
    /// A read (or a partial write) reached file bytes whose data blocks are unknown:
    /// the map naming them was damaged (see `Run::LOST_START`). Never served as zeros.
    #[error("inode {ino}: bytes {offset} to {end} were lost to metadata damage (which blocks held them is unknown)")]
    DataLost { ino: u32, offset: u64, end: u64 },
    /// File bytes read back do not match the checksum stored when they were written:
    /// damaged on the medium, a misdirected write, or an in-place rewrite cut by a
    /// power loss. Never served.
    #[error("inode {ino}: bytes {offset} to {end} fail their data checksum (damaged on the disk, or a rewrite cut by a power loss)")]
    Checksum { ino: u32, offset: u64, end: u64 },
    /// A symlink target longer than one metadata block holds
    /// ([`crate::format::dir::MAX_SYMLINK_BYTES`]): ENAMETOOLONG, as a name too long.
    #[error("symlink target is {len} bytes long; the limit is {max} bytes")]
    TargetTooLong { len: usize, max: usize },
    /// The device is shorter than the volume its superblock describes (an image file
    /// cut short by a full disk or a careless `truncate`, a copy that stopped). Only
    /// a read-only open goes on: it serves what lies on the device
    /// ([`Error::PastEnd`] for the rest). Writing would place data and metadata
    /// copies where the device has nothing.
    #[error("the volume spans {volume_bytes} bytes but the device holds only {device_bytes}: its last {} bytes are missing (a truncated image?)", volume_bytes - device_bytes)]
    Truncated {
        volume_bytes: u64,
        device_bytes: u64,
    },
    /// A read reached file bytes whose data block lies past the end of a truncated
    /// device ([`Error::Truncated`]). Never served as zeros.
    #[error("inode {ino}: bytes {offset} to {end} lie past the end of the device, which holds only {device_bytes} bytes of the volume (a truncated image)")]
    PastEnd {
        ino: u32,
        offset: u64,
        end: u64,
        device_bytes: u64,
    },
}

impl Error {
    pub fn io(what: impl Into<String>, source: io::Error) -> Error {
        Error::Io {
            what: what.into(),
            source,
        }
    }

    /// The POSIX errno closest to this error (for the FUSE and C boundaries).
    pub fn errno(&self) -> i32 {
        match self {
            Error::Io { .. } | Error::Corrupt(_) | Error::NotDvrfs(_) => 5, // EIO
            Error::TooSmall { .. } | Error::InvalidArgument(_) | Error::InvalidName(_) => 22, // EINVAL
            Error::NotFound(_) => 2,         // ENOENT
            Error::Exists(_) => 17,          // EEXIST
            Error::NotDir(_) => 20,          // ENOTDIR
            Error::IsDir(_) => 21,           // EISDIR
            Error::NotEmpty(_) => 39,        // ENOTEMPTY
            Error::NameTooLong { .. } => 36, // ENAMETOOLONG
            Error::NoSpace { .. } | Error::NoInodes(_) | Error::MetadataFull => 28, // ENOSPC
            Error::NamesFull { .. } => 28,   // ENOSPC
            Error::FileTooLarge(_) => 27,    // EFBIG
            Error::ReadOnly => 30,           // EROFS
            Error::Loop => 22,
            Error::TooFragmented { .. } => 27,
            Error::DeadlineMissed { .. } => 62, // ETIME
            Error::Cancelled => 125,            // ECANCELED
            Error::CannotCancel(_) => 16,       // EBUSY
            Error::QueueFull { .. } => 11,      // EAGAIN
            Error::Busy(_) => 11,               // EAGAIN
            Error::Refused(_) => 16,            // EBUSY: the disk's real-time share is taken
            Error::OverQuota(_) => 122,         // EDQUOT
            Error::KeptForRoot(_) => 28,        // ENOSPC
            Error::SpaceNotKept(_) => 28,       // ENOSPC
            Error::RangeExpired(_) => 116,      // ESTALE
            Error::DataLost { .. } | Error::Checksum { .. } => 5, // EIO
            Error::Truncated { .. } | Error::PastEnd { .. } => 5, // EIO
            Error::TargetTooLong { .. } => 36,  // ENAMETOOLONG
        }
    }
}
