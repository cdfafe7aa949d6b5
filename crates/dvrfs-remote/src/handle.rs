//! A volume as a command or a C program uses it: opened here (the runtime), or
//! through the daemon that has it mounted (a [`Client`]). Both answer the same
//! methods with the same results and errors, so the code above does not care which.

use std::time::{Duration, Instant};

use dvrfs_core::engine::{StreamId, StreamInfo, StreamSpec, StreamStats};
use dvrfs_core::format::dir::Kind;
use dvrfs_core::format::frame_index::FrameEntry;
use dvrfs_core::meta::Ino;
use dvrfs_core::{Error as CoreError, Op, Output, Stat};
use dvrfs_runtime::{Done, Runtime, RuntimeError, Ticket};

use crate::client::Client;
use crate::proto::Figures;

/// A file of a stream directory: its name, inode, size and frame index
/// ([`Handle::chunks_of`]).
pub type ChunkFile = (Vec<u8>, Ino, u64, crate::proto::Keyframes);

/// A keyframe of a stream found by time ([`Handle::seek_stream_time`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StreamSeek {
    /// Its chunk: the place in name order, the name in the directory (empty for a
    /// file) and the inode.
    pub chunk: usize,
    pub name: Vec<u8>,
    pub ino: Ino,
    /// Its place in the chunk's index, and the entry (read the chunk from
    /// `entry.offset`, after its head, to play from it).
    pub key: usize,
    pub entry: FrameEntry,
}

pub type Result<T> = std::result::Result<T, RuntimeError>;

/// The volume, local or through its daemon.
pub enum Handle {
    Local(Runtime),
    Remote(Client),
}

impl Handle {
    pub fn is_remote(&self) -> bool {
        matches!(self, Handle::Remote(_))
    }

    /// Starts an operation; `owner` identifies the issuer locally (a remote
    /// operation's owner is this process, as the daemon sees it).
    pub fn start(&self, op: Op, deadline: Option<Instant>, owner: u32) -> Result<Ticket> {
        match self {
            Handle::Local(rt) => rt.start(op, deadline, owner),
            Handle::Remote(c) => c.start(op, deadline),
        }
    }

    pub fn check(&self, t: Ticket, wait: bool) -> Result<Option<Done>> {
        match self {
            Handle::Local(rt) => rt.check(t, wait),
            Handle::Remote(c) => c.check(t, wait),
        }
    }

    pub fn run(&self, op: Op, deadline: Option<Instant>, owner: u32) -> Result<Output> {
        match self {
            Handle::Local(rt) => rt.run(op, deadline, owner),
            Handle::Remote(c) => c.run(op, deadline),
        }
    }

    pub fn cancel(&self, t: Ticket) -> Result<()> {
        match self {
            Handle::Local(rt) => rt.cancel(t),
            Handle::Remote(c) => c.cancel(t),
        }
    }

    pub fn poll(&self, tickets: &[Ticket], timeout: Option<Duration>) -> Result<Vec<usize>> {
        match self {
            Handle::Local(rt) => rt.poll(tickets, timeout),
            Handle::Remote(c) => c.poll(tickets, timeout),
        }
    }

    pub fn open_stream(&self, ino: Ino, spec: StreamSpec) -> Result<StreamInfo> {
        match self {
            Handle::Local(rt) => rt.open_stream(ino, spec),
            Handle::Remote(c) => c.open_stream(ino, spec),
        }
    }

    pub fn stream(&self, sid: StreamId) -> Result<Option<(StreamInfo, StreamStats)>> {
        match self {
            Handle::Local(rt) => rt.stream(sid),
            Handle::Remote(c) => c.stream(sid),
        }
    }

    /// What stream admission checks against, described (`None`: streams are
    /// refused).
    pub fn admission(&self) -> Result<Option<String>> {
        match self {
            Handle::Local(rt) => Ok(rt.admission()?.map(|a| a.describe())),
            Handle::Remote(c) => c.admission(),
        }
    }

    pub fn resolve(&self, path: &str) -> Result<Ino> {
        match self {
            Handle::Local(rt) => {
                let p = path.to_string();
                Ok(rt.query(move |v| v.resolve(&p))??)
            }
            Handle::Remote(c) => c.resolve(path),
        }
    }

    pub fn resolve_parent(&self, path: &str) -> Result<(Ino, Vec<u8>)> {
        match self {
            Handle::Local(rt) => {
                let p = path.to_string();
                Ok(rt.query(move |v| v.resolve_parent(&p).map(|(i, n)| (i, n.to_vec())))??)
            }
            Handle::Remote(c) => c.resolve_parent(path),
        }
    }

    /// [`Handle::resolve`] for a path of any bytes (names need not be UTF-8). The
    /// daemon's protocol carries UTF-8 paths; another path is resolved through it
    /// name by name, `..` going up the path written (symlinks are never followed).
    pub fn resolve_bytes(&self, path: &[u8]) -> Result<Ino> {
        match (self, std::str::from_utf8(path)) {
            (_, Ok(p)) => self.resolve(p),
            (Handle::Local(rt), Err(_)) => {
                let p = path.to_vec();
                Ok(rt.query(move |v| v.resolve_bytes(&p))??)
            }
            (Handle::Remote(c), Err(_)) => {
                let mut names: Vec<&[u8]> = vec![];
                for comp in path.split(|&b| b == b'/') {
                    match comp {
                        b"" | b"." => {}
                        b".." => {
                            names.pop();
                        }
                        c => names.push(c),
                    }
                }
                let mut ino = c.resolve("/")?;
                for name in names {
                    ino = c.lookup(ino, name).map_err(|e| match e {
                        RuntimeError::Engine(CoreError::NotFound(_)) => RuntimeError::Engine(
                            CoreError::NotFound(String::from_utf8_lossy(path).into_owned()),
                        ),
                        e => e,
                    })?;
                }
                Ok(ino)
            }
        }
    }

    /// [`Handle::resolve_parent`] for a path of any bytes.
    pub fn resolve_parent_bytes(&self, path: &[u8]) -> Result<(Ino, Vec<u8>)> {
        match (self, std::str::from_utf8(path)) {
            (_, Ok(p)) => self.resolve_parent(p),
            (Handle::Local(rt), Err(_)) => {
                let p = path.to_vec();
                Ok(rt.query(move |v| v.resolve_parent_bytes(&p).map(|(i, n)| (i, n.to_vec())))??)
            }
            (Handle::Remote(_), Err(_)) => {
                let end = path.iter().rposition(|&b| b != b'/').map_or(0, |i| i + 1);
                let trimmed = &path[..end];
                let (dir, name) = match trimmed.iter().rposition(|&b| b == b'/') {
                    Some(i) => (&trimmed[..i], &trimmed[i + 1..]),
                    None => (&trimmed[..0], trimmed),
                };
                dvrfs_core::volume::validate_name(name).map_err(RuntimeError::Engine)?;
                Ok((self.resolve_bytes(dir)?, name.to_vec()))
            }
        }
    }

    pub fn lookup(&self, parent: Ino, name: &[u8]) -> Result<Ino> {
        match self {
            Handle::Local(rt) => {
                let n = name.to_vec();
                Ok(rt.query(move |v| v.lookup(parent, &n))??)
            }
            Handle::Remote(c) => c.lookup(parent, name),
        }
    }

    /// `stat`, with a file being recorded at the size its recorder wrote.
    pub fn stat(&self, ino: Ino) -> Result<Stat> {
        match self {
            Handle::Local(rt) => crate::stat_with_visible_size(rt, ino),
            Handle::Remote(c) => c.stat(ino),
        }
    }

    pub fn readdir(&self, ino: Ino) -> Result<Vec<(Vec<u8>, Ino, Kind)>> {
        match self {
            Handle::Local(rt) => Ok(rt.query(move |v| v.readdir(ino))??),
            Handle::Remote(c) => c.readdir(ino),
        }
    }

    pub fn readlink(&self, ino: Ino) -> Result<Vec<u8>> {
        match self {
            Handle::Local(rt) => Ok(rt.query(move |v| v.readlink(ino))??),
            Handle::Remote(c) => c.readlink(ino),
        }
    }

    /// The volume's UUID.
    pub fn volume_uuid(&self) -> Result<dvrfs_core::format::Uuid> {
        match self {
            Handle::Local(rt) => Ok(rt.query(|v| v.superblock().uuid)?),
            Handle::Remote(c) => c.volume_uuid(),
        }
    }

    /// Directory `dir`'s regular files whose names do not start with `.` (a stream
    /// directory's chunks), in name order, each with its size and frame index: in
    /// one engine query on a local volume (a recording of thousands of chunks takes
    /// milliseconds), a request per file through a daemon.
    pub fn chunks_of(&self, dir: Ino) -> Result<Vec<ChunkFile>> {
        let mut out = match self {
            Handle::Local(rt) => rt.query(move |v| -> dvrfs_core::Result<Vec<_>> {
                let mut out = vec![];
                for (name, ino, kind) in v.readdir(dir)? {
                    if kind != Kind::File || name.starts_with(b".") {
                        continue;
                    }
                    let size = v.stat(ino)?.size_bytes;
                    out.push((name, ino, size, crate::proto::Keyframes::of(v, ino)?));
                }
                Ok(out)
            })??,
            Handle::Remote(c) => {
                let mut out = vec![];
                for (name, ino, kind) in c.readdir(dir)? {
                    if kind != Kind::File || name.starts_with(b".") {
                        continue;
                    }
                    out.push((name, ino, c.stat(ino)?.size_bytes, c.keyframes(ino)?));
                }
                out
            }
        };
        out.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(out)
    }

    /// Where a player starts to show UTC `utc_ns` of the recording at `ino`: the last
    /// keyframe at or before it across a stream directory's chunks (as
    /// [`Handle::chunks_of`] lists them), or in a file (a one-chunk stream, `name`
    /// empty). None before the first keyframe or without an index.
    pub fn seek_stream_time(&self, ino: Ino, utc_ns: i64) -> Result<Option<StreamSeek>> {
        let chunks = match self.stat(ino)?.kind {
            Kind::Dir => self.chunks_of(ino)?,
            _ => vec![(vec![], ino, 0, self.keyframes(ino)?)],
        };
        let keys: Vec<&[FrameEntry]> = chunks.iter().map(|c| c.3.entries.as_slice()).collect();
        Ok(
            crate::proto::seek_chunks_time(&keys, utc_ns).map(|(chunk, key)| {
                let c = &chunks[chunk];
                StreamSeek {
                    chunk,
                    name: c.0.clone(),
                    ino: c.1,
                    key,
                    entry: c.3.entries[key],
                }
            }),
        )
    }

    /// File `ino`'s frame index (its keyframes, and whether it covers them all).
    pub fn keyframes(&self, ino: Ino) -> Result<crate::proto::Keyframes> {
        match self {
            Handle::Local(rt) => Ok(rt.query(move |v| crate::proto::Keyframes::of(v, ino))??),
            Handle::Remote(c) => c.keyframes(ino),
        }
    }

    pub fn lost_ranges(&self, ino: Ino) -> Result<Vec<(u64, u64)>> {
        match self {
            Handle::Local(rt) => Ok(rt.query(move |v| v.lost_ranges(ino))??),
            Handle::Remote(c) => c.lost_ranges(ino),
        }
    }

    pub fn figures(&self) -> Result<Figures> {
        match self {
            Handle::Local(rt) => Ok(rt.query(|v| Figures {
                data_block_bytes: v.superblock().data_block_bytes,
                free_bytes: v.free_bytes(),
            })?),
            Handle::Remote(c) => c.figures(),
        }
    }

    /// Local: commits, marks the journal clean and closes the device. Remote:
    /// commits too (what this process wrote is durable when `close` returns, as
    /// after a local close; a read-only mount has nothing to commit), then ends the
    /// connection; the daemon keeps the volume.
    pub fn close(self) -> Result<()> {
        match self {
            Handle::Local(rt) => rt.close(),
            Handle::Remote(c) => {
                match c.run(Op::Fsync, Some(Instant::now())) {
                    Ok(_)
                    | Err(RuntimeError::Engine(dvrfs_core::Error::ReadOnly))
                    | Err(RuntimeError::Open(dvrfs_io::OpenError::ReadOnly { .. })) => {}
                    Err(e) => return Err(e),
                }
                c.close()
            }
        }
    }
}
