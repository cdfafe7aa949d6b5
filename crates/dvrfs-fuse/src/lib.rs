//! `dvrfs mount`: a volume as an ordinary directory tree, over FUSE, served by the same
//! engine and runtime as the API.
//!
//! The kernel's requests arrive on a few session threads (`fuser`); each one becomes
//! engine operations through the [`Runtime`], and the thread waits for them, except
//! for a stream's read or write that must wait for the stream's rate: that one is
//! parked ([`park`]) and answered later, so no user's slow stream holds a thread. So this
//! driver decides nothing about the disk: it answers lookups from the metadata in
//! memory ([`Runtime::query`]), turns reads and writes into large best-effort
//! transfers ([`file`]) and leaves ordering, merging and the real-time share to the
//! engine's scheduler. Admitted streams keep their guarantee whatever the mount does.
//!
//! What POSIX gets (see `docs/mount.md` for the user's view):
//! - regular files, directories and symbolic links with mode, owner, group, mtime and
//!   ctime; the kernel checks permissions (`default_permissions`);
//! - no access time: `atime` reads as `mtime` and setting it is accepted and ignored;
//! - hard links for regular files (a directory or symbolic link gives `EPERM`); no
//!   device nodes, FIFOs or sockets (`mknod` gives `EPERM`), no `RENAME_EXCHANGE`
//!   (`EINVAL`);
//! - extended attributes: only `user.dvrfs.*` (others give `EOPNOTSUPP`).

mod attrs;
pub mod file;
pub mod gather;
mod handles;
mod keyframes;
pub mod memory;
mod nodes;
pub mod park;
pub mod quota;
mod read;
mod retention_xattr;
mod seal;
pub mod share;
mod size;
pub mod stream;
mod write;
mod xattr;
use xattr::reply_xattr;

use dvrfs_core::engine::{Op, OpenMode, Output, Reservation, StreamDir};
use dvrfs_core::format::dir::Kind;
use dvrfs_core::meta::Ino;
use dvrfs_core::volume::{SetAttr, Stat};
use dvrfs_runtime::Runtime;
use file::{errno_of, Errno, FileState, Pool};
use fuser::{
    Config, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo, InitFlags,
    KernelConfig, MountOption, OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData,
    ReplyDirectory, ReplyDirectoryPlus, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite,
    ReplyXattr, Request, SessionACL, TimeOrNow,
};
use keyframes::KEYFRAMES_XATTR;
use retention_xattr::RETENTION_XATTR;
use std::collections::HashMap;
use std::ffi::OsStr;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use stream::XATTR;

/// How long the kernel may keep attributes and names. Only this daemon changes the
/// volume while it is mounted (it holds the device's exclusive lock), and every change
/// comes through the kernel, which updates its own copies; so the kernel may keep them
/// as long as it likes. A minute bounds the memory it holds for files nobody looks at.
pub(crate) const TTL: Duration = Duration::from_secs(60);

/// Smallest transfer to the disk for buffered reads and writes.
const MIN_CHUNK_BYTES: u64 = 1 << 20;

/// Now as an ISO 8601 UTC time with milliseconds: the daemon log's line stamp.
pub fn stamp() -> String {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let secs = t.as_secs();
    let (days, rem) = ((secs / 86_400) as i64, secs % 86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        rem / 60 % 60,
        rem % 60,
        t.subsec_millis()
    )
}

/// How to mount.
#[derive(Clone, Debug)]
pub struct MountConfig {
    /// Let users other than the one who mounts in (`allow_other`).
    pub allow_other: bool,
    pub read_only: bool,
    /// Session threads: requests served at once (each waits for its disk operations).
    pub threads: usize,
    /// The source shown in `/proc/mounts` (the image or device path).
    pub fsname: String,
    /// Every open as if with `O_DIRECT`: no page cache in the kernel, no gathering or
    /// read cache in the daemon; each read and write goes to the engine as it came.
    pub direct_io: bool,
    /// The read cache of all open files together ([`memory`]).
    pub read_cache_bytes: u64,
    /// Grace of pending reservations, per-user limits, root's share ([`quota`]).
    pub quota: quota::QuotaConfig,
}

impl Default for MountConfig {
    fn default() -> Self {
        MountConfig {
            allow_other: false,
            read_only: false,
            threads: 8,
            fsname: "dvrfs".into(),
            direct_io: false,
            read_cache_bytes: memory::DEFAULT_READ_CACHE_BYTES,
            quota: quota::QuotaConfig::default(),
        }
    }
}

impl MountConfig {
    /// The `fuser` session configuration: the kernel checks permissions, the mount
    /// shows as `fuse.dvrfs` with the image as its source.
    pub fn fuser_config(&self) -> Config {
        let mut c = Config::default();
        c.mount_options = vec![
            MountOption::FSName(self.fsname.clone()),
            // The kernel takes the subtype itself: the mount shows as `fuse.dvrfs`.
            MountOption::CUSTOM("subtype=dvrfs".into()),
            MountOption::DefaultPermissions,
            MountOption::NoDev,
            if self.read_only {
                MountOption::RO
            } else {
                MountOption::RW
            },
        ];
        c.acl = if self.allow_other {
            SessionACL::All
        } else {
            SessionACL::Owner
        };
        c.n_threads = Some(self.threads.max(1));
        c
    }
}

/// An open file handle.
#[derive(Clone, Copy)]
struct Handle {
    ino: Ino,
    direct: bool,
}

/// The file system the kernel talks to.
pub struct DvrfsFs {
    rt: Arc<Runtime>,
    /// Transfer unit of buffered I/O (a multiple of the data block, >= 1 MiB).
    chunk: u64,
    block_bytes: u64,
    read_only: bool,
    direct_io: bool,
    pool: Pool,
    files: gather::Files,
    floors: Arc<size::Floors>,
    /// Hands gathered chunks to the engine before each commit (`None` read-only or
    /// with `direct_io`: nothing gathers); stopped and joined on drop.
    _gatherer: Option<gather::Gatherer>,
    /// Answers the reads parked for a stream's bytes ([`park`]); stopped and joined
    /// on drop.
    parker: park::Parker,
    handles: Mutex<HashMap<u64, Handle>>,
    next_fh: AtomicU64,
    /// Open files with a stream: its reservation and id (`getfattr` reads them
    /// without the file's lock, which a stream operation may hold while it waits for
    /// its rate), and the file's size is the engine's (see `attr`).
    streamed: stream::Streamed,
    /// Final figures of streams that ended, for `getfattr` until the file gets a
    /// stream again, the attribute is removed or the file is truncated to nothing;
    /// the latest [`stream::ENDED_KEPT`].
    ended: Arc<Mutex<stream::Ended>>,
    /// Per-user books of reservations, and the reaper of pending ones ([`quota`]).
    quota: Arc<quota::Quota>,
    _reaper: quota::Reaper,
    /// Files finished and removed in stream directories: their chain ([`seal`]).
    seals: seal::Sealing,
    /// The generation of each inode number the kernel was given ([`nodes`]).
    given: nodes::Given,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Every update under these locks leaves them consistent, so a panic elsewhere does
    // not make them unusable.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn time(ns: i64) -> SystemTime {
    if ns >= 0 {
        UNIX_EPOCH + Duration::from_nanos(ns as u64)
    } else {
        UNIX_EPOCH - Duration::from_nanos(ns.unsigned_abs())
    }
}

fn wall_ns(t: SystemTime) -> i64 {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => d.as_nanos() as i64,
        Err(e) => -(e.duration().as_nanos() as i64),
    }
}

fn file_type(k: Kind) -> FileType {
    match k {
        Kind::File => FileType::RegularFile,
        Kind::Dir => FileType::Directory,
        Kind::Symlink => FileType::Symlink,
    }
}

pub(crate) fn err(e: Errno) -> fuser::Errno {
    fuser::Errno::from_i32(e)
}

impl DvrfsFs {
    /// Serves the volume the runtime has open.
    pub fn new(rt: Arc<Runtime>, cfg: &MountConfig) -> io::Result<DvrfsFs> {
        let block_bytes = rt
            .query(|v| v.superblock().data_block_bytes)
            .map_err(io::Error::other)?;
        let chunk = block_bytes * MIN_CHUNK_BYTES.div_ceil(block_bytes);
        let files: gather::Files = Arc::new(Mutex::new(HashMap::new()));
        let gatherer = if cfg.read_only || cfg.direct_io {
            None
        } else {
            Some(gather::Gatherer::spawn(rt.clone(), files.clone())?)
        };
        let floors = Arc::<size::Floors>::default();
        let (streamed, ended, quota, _reaper) = quota::start(&rt, &files, &floors, cfg)?;
        Ok(DvrfsFs {
            rt: rt.clone(),
            chunk,
            block_bytes,
            read_only: cfg.read_only,
            direct_io: cfg.direct_io,
            pool: Pool::new(cfg.read_cache_bytes, chunk),
            files,
            floors,
            _gatherer: gatherer,
            parker: park::Parker::spawn(rt.clone())?,
            handles: Mutex::new(HashMap::new()),
            next_fh: AtomicU64::new(1),
            streamed,
            ended,
            quota,
            _reaper,
            seals: seal::Sealing::default(),
            given: nodes::Given::default(),
        })
    }

    pub fn runtime(&self) -> &Arc<Runtime> {
        &self.rt
    }

    /// The per-user books, which the daemon's socket shares ([`quota`]).
    pub fn quota(&self) -> Arc<quota::Quota> {
        self.quota.clone()
    }

    fn ino(i: INodeNo) -> Result<Ino, Errno> {
        Ino::try_from(i.0).map_err(|_| libc::ENOENT)
    }

    fn stat(&self, ino: Ino) -> Result<Stat, Errno> {
        self.rt
            .query(move |v| v.stat(ino))
            .map_err(|e| errno_of(&e))?
            .map_err(|e| match e {
                dvrfs_core::Error::NotFound(_) => libc::ENOENT,
                e => e.errno(),
            })
    }

    fn state(&self, ino: Ino) -> Option<Arc<Mutex<FileState>>> {
        lock(&self.files).get(&ino).cloned()
    }

    fn attr(&self, s: &Stat) -> FileAttr {
        let mut size = s.size_bytes;
        if s.kind == Kind::File && lock(&self.streamed).contains_key(&s.ino) {
            // A stream's operations may wait for its rate with the file's lock held:
            // the engine knows the size (everything a write stream accepted).
            let ino = s.ino;
            if let Ok(Ok(v)) = self.rt.inspect(move |e| e.visible_size(ino)) {
                size = v;
            }
        } else if s.kind == Kind::File {
            // Not under the file's lock, which a writer holds while a chunk lands (size.rs).
            let applied = || self.stat(s.ino).map_or(size, |f| f.size_bytes);
            size = self.floors.size(s.ino, applied).unwrap_or(size);
        }
        let blocks = if s.kind == Kind::File {
            s.blocks * self.block_bytes / 512
        } else {
            (size.div_ceil(512)).max(8)
        };
        FileAttr {
            ino: INodeNo(s.ino as u64),
            size,
            blocks,
            atime: time(s.mtime_ns),
            mtime: time(s.mtime_ns),
            ctime: time(s.ctime_ns),
            crtime: time(s.ctime_ns),
            kind: file_type(s.kind),
            perm: (s.mode & 0o7777) as u16,
            nlink: s.nlink,
            uid: s.uid,
            gid: s.gid,
            rdev: 0,
            blksize: self.chunk.min(u32::MAX as u64) as u32,
            flags: 0,
        }
    }

    fn getattr_of(&self, ino: Ino) -> Result<FileAttr, Errno> {
        Ok(self.attr(&self.fresh(ino)?))
    }

    fn run(&self, op: Op, owner: u32) -> Result<Output, Errno> {
        if self.read_only {
            return Err(libc::EROFS);
        }
        self.rt
            .run_waiting(op, None, owner)
            .map_err(|e| errno_of(&e))
    }

    /// `fsync`: the journal commit it waits for is due now. (Without a deadline the
    /// commit's writes would keep the commit interval's deadline and the scheduler
    /// would hold them for most of it: half a second per fsync.) Commits are small and
    /// group: every fsync that arrives while one runs shares the next.
    fn sync(&self, owner: u32) -> Result<(), Errno> {
        if self.read_only {
            return Ok(());
        }
        self.rt
            .run_waiting(Op::Fsync, Some(std::time::Instant::now()), owner)
            .map(|_| ())
            .map_err(|e| errno_of(&e))
    }

    fn lookup_of(&self, parent: Ino, name: &[u8]) -> Result<Ino, Errno> {
        if name.len() > dvrfs_core::format::dir::MAX_NAME_BYTES {
            return Err(libc::ENAMETOOLONG);
        }
        let name = name.to_vec();
        self.rt
            .query(move |v| v.lookup(parent, &name))
            .map_err(|e| errno_of(&e))?
            .map_err(|e| match e {
                dvrfs_core::Error::NotFound(_) => libc::ENOENT,
                e => e.errno(),
            })
    }

    /// The owner and group a new entry in `parent` gets: the caller's, or the
    /// directory's group when it has set-group-ID (and then a new directory keeps
    /// the bit).
    fn new_owner(&self, req: &Request, parent: Ino, mode: u32, dir: bool) -> (u32, u32, u32) {
        match self.stat(parent) {
            Ok(p) if p.mode & libc::S_ISGID != 0 => {
                let mode = if dir { mode | libc::S_ISGID } else { mode };
                (req.uid(), p.gid, mode)
            }
            _ => (req.uid(), req.gid(), mode),
        }
    }

    fn entry(&self, ino: Ino, reply: ReplyEntry) {
        match self.stat(ino) {
            Ok(s) => {
                self.given.give(&s);
                reply.entry(&TTL, &self.attr(&s), Generation(s.generation as u64))
            }
            Err(e) => reply.error(err(e)),
        }
    }
}

macro_rules! reply_result {
    ($reply:expr, $r:expr, $ok:expr) => {
        match $r {
            Ok(v) => $ok(v),
            Err(e) => $reply.error(err(e)),
        }
    };
}

impl Filesystem for DvrfsFs {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> io::Result<()> {
        // Requests as large as a chunk: the kernel caps them at its
        // `fs.fuse.max_pages_limit` (256 pages, 1 MiB, unless raised), and read-ahead
        // at what the kernel offers.
        let want = self.chunk.min(u32::MAX as u64) as u32;
        if let Err(max) = config.set_max_write(want) {
            let _ = config.set_max_write(max);
        }
        if let Err(max) = config.set_max_readahead(want) {
            let _ = config.set_max_readahead(max);
        }
        // `ls -l` in one request per directory block (names with attributes), lookups in
        // one directory from several threads at once (the engine orders namespace ops),
        // symlink targets cached, shared mmap of direct-I/O handles (read.rs::open_flags).
        // A kernel without one of them simply does not offer it.
        for flag in [
            InitFlags::FUSE_DO_READDIRPLUS,
            InitFlags::FUSE_READDIRPLUS_AUTO,
            InitFlags::FUSE_PARALLEL_DIROPS,
            InitFlags::FUSE_CACHE_SYMLINKS,
            InitFlags::FUSE_DIRECT_IO_ALLOW_MMAP,
        ] {
            let _ = config.add_capabilities(flag);
        }
        Ok(())
    }

    fn destroy(&mut self) {
        // Gathered writes go to the disk before the runtime is closed by the caller.
        let states: Vec<_> = lock(&self.files).values().cloned().collect();
        for st in states {
            let mut st = lock(&st);
            let _ = st.settle(&self.rt, 0);
            // Reads parked for a stream's bytes get an error: nobody reads the answer.
            st.fail_waiting(libc::EIO);
        }
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let r = Self::ino(parent).and_then(|p| self.lookup_of(p, name.as_bytes()));
        match r {
            Ok(ino) => self.entry(ino, reply),
            Err(e) => reply.error(err(e)),
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        let r = Self::ino(ino).and_then(|i| self.getattr_of(i));
        reply_result!(reply, r, |a| reply.attr(&TTL, &a))
    }

    fn setattr(
        &self,
        req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        _atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let set = SetAttr {
            mode,
            uid,
            gid,
            stream_default: None,
            retention: None,
            protection: None,
            mtime_ns: mtime.map(|t| match t {
                TimeOrNow::SpecificTime(t) => wall_ns(t),
                TimeOrNow::Now => wall_ns(SystemTime::now()),
            }),
        };
        let r = Self::ino(ino)
            .and_then(|i| self.fresh(i).map(|_| i))
            .and_then(|i| self.do_setattr(req, i, size, set));
        reply_result!(reply, r, |a| reply.attr(&TTL, &a))
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        let r = Self::ino(ino).and_then(|i| {
            self.rt
                .query(move |v| v.readlink(i))
                .map_err(|e| errno_of(&e))?
                .map_err(|_| libc::EINVAL)
        });
        reply_result!(reply, r, |t: Vec<u8>| reply.data(&t))
    }

    fn mknod(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        _rdev: u32,
        reply: ReplyEntry,
    ) {
        if mode & libc::S_IFMT != libc::S_IFREG && mode & libc::S_IFMT != 0 {
            // Device nodes, FIFOs and sockets are not kept on a dvrfs volume.
            return reply.error(fuser::Errno::EPERM);
        }
        let r = Self::ino(parent)
            .and_then(|p| self.do_create(req, p, name.as_bytes(), mode, Kind::File));
        match r {
            Ok(ino) => self.entry(ino, reply),
            Err(e) => reply.error(err(e)),
        }
    }

    fn mkdir(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        reply: ReplyEntry,
    ) {
        let r = Self::ino(parent)
            .and_then(|p| self.do_create(req, p, name.as_bytes(), mode, Kind::Dir));
        match r {
            Ok(ino) => self.entry(ino, reply),
            Err(e) => reply.error(err(e)),
        }
    }

    fn unlink(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let r = Self::ino(parent).and_then(|p| {
            let op = Op::Unlink {
                parent: p,
                name: name.as_bytes().to_vec(),
            };
            self.run(op, req.pid())?;
            let (uid, pid) = (req.uid(), req.pid());
            self.seals.removed(&self.rt, p, name.as_bytes(), uid, pid);
            Ok(())
        });
        reply_result!(reply, r, |_| reply.ok())
    }

    fn rmdir(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let r = Self::ino(parent).and_then(|p| {
            self.run(
                Op::Rmdir {
                    parent: p,
                    name: name.as_bytes().to_vec(),
                },
                req.pid(),
            )
        });
        reply_result!(reply, r, |_| reply.ok())
    }

    fn symlink(
        &self,
        req: &Request,
        parent: INodeNo,
        link_name: &OsStr,
        target: &Path,
        reply: ReplyEntry,
    ) {
        let r = Self::ino(parent).and_then(|p| {
            let (uid, gid, _) = self.new_owner(req, p, 0o777, false);
            match self.run(
                Op::Symlink {
                    parent: p,
                    name: link_name.as_bytes().to_vec(),
                    target: target.as_os_str().as_bytes().to_vec(),
                    uid,
                    gid,
                },
                req.pid(),
            )? {
                Output::Ino(ino) => Ok(ino),
                other => panic!("symlink completed as {other:?}"),
            }
        });
        match r {
            Ok(ino) => self.entry(ino, reply),
            Err(e) => reply.error(err(e)),
        }
    }

    fn rename(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        let r = (|| {
            let (p, np) = (Self::ino(parent)?, Self::ino(newparent)?);
            if flags.contains(RenameFlags::RENAME_EXCHANGE)
                || flags.contains(RenameFlags::RENAME_WHITEOUT)
            {
                return Err(libc::EINVAL);
            }
            if flags.contains(RenameFlags::RENAME_NOREPLACE) {
                match self.lookup_of(np, newname.as_bytes()) {
                    Ok(_) => return Err(libc::EEXIST),
                    Err(libc::ENOENT) => {}
                    Err(e) => return Err(e),
                }
            }
            // A file the rename replaces: its removal is recorded if it was sealed.
            let dst = self.lookup_of(np, newname.as_bytes()).ok();
            let replaced = dst.is_some() && dst != self.lookup_of(p, name.as_bytes()).ok();
            self.run(
                Op::Rename {
                    src_parent: p,
                    src_name: name.as_bytes().to_vec(),
                    dst_parent: np,
                    dst_name: newname.as_bytes().to_vec(),
                },
                req.pid(),
            )?;
            let (from, to) = ((p, name.as_bytes()), (np, newname.as_bytes()));
            let who = (req.uid(), req.pid());
            self.seals.renamed(&self.rt, from, to, replaced, who);
            Ok(())
        })();
        reply_result!(reply, r, |_| reply.ok())
    }

    fn link(
        &self,
        req: &Request,
        ino: INodeNo,
        newparent: INodeNo,
        newname: &OsStr,
        reply: ReplyEntry,
    ) {
        let r = (|| {
            let (i, p) = (Self::ino(ino)?, Self::ino(newparent)?);
            self.fresh(i)?;
            self.run(
                Op::Link {
                    ino: i,
                    parent: p,
                    name: newname.as_bytes().to_vec(),
                },
                req.pid(),
            )?;
            Ok(i)
        })();
        match r {
            // Directories and symbolic links take no second name.
            Err(libc::EISDIR) | Err(libc::EINVAL) => reply.error(fuser::Errno::EPERM),
            Ok(i) => self.entry(i, reply),
            Err(e) => reply.error(err(e)),
        }
    }

    fn open(&self, req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        let r = Self::ino(ino).and_then(|i| {
            let s = self.fresh(i)?;
            if s.kind == Kind::Dir {
                return Err(libc::EISDIR);
            }
            let write = flags.0 & libc::O_ACCMODE != libc::O_RDONLY;
            if write && self.read_only {
                return Err(libc::EROFS);
            }
            Ok(i)
        });
        match r {
            Ok(i) => {
                let direct = flags.0 & libc::O_DIRECT != 0;
                let write = flags.0 & libc::O_ACCMODE != libc::O_RDONLY;
                match self.open_handle(req, i, direct, write) {
                    Ok((fh, plays)) => reply.opened(
                        FileHandle(fh),
                        read::open_flags(direct || self.direct_io, plays),
                    ),
                    Err(e) => reply.error(err(e)),
                }
            }
            Err(e) => reply.error(err(e)),
        }
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        let direct = flags & libc::O_DIRECT != 0;
        let r = Self::ino(parent).and_then(|p| {
            let ino = self.do_create(req, p, name.as_bytes(), mode, Kind::File)?;
            lock(&self.ended).remove(ino);
            self.seals.created(&self.rt, p, name.as_bytes(), ino);
            // A new file has no read stream (a directory's default is a recording's).
            let (fh, _) = self.open_handle(req, ino, direct, true)?;
            if let Err(e) = self.inherit_reservation(req, p, ino) {
                // Refused: the file is not left behind half-made.
                let _ = self.close_handle(fh, req.pid());
                let _ = self.run(
                    Op::Unlink {
                        parent: p,
                        name: name.as_bytes().to_vec(),
                    },
                    req.pid(),
                );
                return Err(e);
            }
            Ok((fh, self.stat(ino)?))
        });
        match r {
            Ok((fh, s)) => {
                self.given.give(&s);
                reply.created(
                    &TTL,
                    &self.attr(&s),
                    Generation(s.generation as u64),
                    FileHandle(fh),
                    read::open_flags(direct || self.direct_io, false),
                )
            }
            Err(e) => reply.error(err(e)),
        }
    }

    fn read(
        &self,
        req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<fuser::LockOwner>,
        reply: ReplyData,
    ) {
        if let Err((e, reply)) = self.do_read(req, fh, offset, size, reply) {
            reply.error(err(e));
        }
    }

    fn write(
        &self,
        req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: fuser::WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<fuser::LockOwner>,
        reply: ReplyWrite,
    ) {
        self.do_write(req, fh, offset, data, reply)
    }

    fn flush(
        &self,
        req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _lock_owner: fuser::LockOwner,
        reply: ReplyEmpty,
    ) {
        // close(2): what this handle wrote reaches the disk, and a failed background
        // write is reported here (durability is fsync's). The close of the file's
        // only handle ends its stream here, not at the release the kernel sends
        // later: when the recorder's close returns, its recording is on the disk and
        // `getfattr` has the final figures.
        let r = self.handle(fh).and_then(|h| {
            self.settle(h.ino, req.pid())?;
            let Some(st) = self.state(h.ino) else {
                return Ok(());
            };
            let mut st = lock(&st);
            if st.opens == 1
                && st
                    .stream
                    .as_ref()
                    .is_some_and(|s| s.ends_at_close_by(req.pid()))
            {
                let res = st.stream.as_ref().map(|s| (s.res.clone(), fh.0));
                self.detach(&mut st, "the file's last close")?;
                // The handle lives on when a copy of the descriptor (a forked child's)
                // was the one closed: its next read or write admits the stream again.
                st.resume = res;
            }
            Ok(())
        });
        reply_result!(reply, r, |_| reply.ok())
    }

    fn release(
        &self,
        req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<fuser::LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        let r = self.close_handle(fh.0, req.pid());
        reply_result!(reply, r, |_| reply.ok())
    }

    fn fsync(
        &self,
        req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        let r = self
            .handle(fh)
            .and_then(|h| {
                self.settle(h.ino, req.pid())?;
                // A recording's partial request goes to the disk too.
                let sid = lock(&self.streamed).get(&h.ino).map(|(_, i)| i.id);
                if let Some(stream) = sid {
                    self.run(Op::StreamSync { stream }, req.pid())?;
                }
                Ok(())
            })
            .and_then(|_| self.sync(req.pid()));
        reply_result!(reply, r, |_| reply.ok())
    }

    fn opendir(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        let r = Self::ino(ino).and_then(|i| self.fresh(i));
        match r {
            Ok(s) if s.kind == Kind::Dir => reply.opened(FileHandle(0), FopenFlags::empty()),
            Ok(_) => reply.error(fuser::Errno::ENOTDIR),
            Err(e) => reply.error(err(e)),
        }
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        reply: ReplyDirectory,
    ) {
        self.list(ino, offset, reply)
    }

    fn readdirplus(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        reply: ReplyDirectoryPlus,
    ) {
        self.list_plus(ino, offset, reply)
    }

    fn fsyncdir(
        &self,
        req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        let r = self.sync(req.pid());
        reply_result!(reply, r, |_| reply.ok())
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        self.do_statfs(reply)
    }

    fn setxattr(
        &self,
        req: &Request,
        ino: INodeNo,
        name: &OsStr,
        value: &[u8],
        flags: i32,
        _position: u32,
        reply: ReplyEmpty,
    ) {
        let r = Self::ino(ino)
            .and_then(|i| self.fresh(i).map(|_| i))
            .and_then(|i| self.xattr_set(req, i, name.as_bytes(), value, flags));
        reply_result!(reply, r, |_| reply.ok())
    }

    fn getxattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        match Self::ino(ino).and_then(|i| self.xattr_get(i, name.as_bytes())) {
            Ok(text) => reply_xattr(reply, text.as_bytes(), size),
            Err(e) => reply.error(err(e)),
        }
    }

    fn listxattr(&self, _req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        let names = Self::ino(ino).map_or_else(|_| Vec::new(), |i| self.xattr_names(i));
        reply_xattr(reply, &names, size)
    }

    fn removexattr(&self, req: &Request, ino: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let r = Self::ino(ino)
            .and_then(|i| self.fresh(i).map(|_| i))
            .and_then(|i| self.xattr_remove(req, i, name.as_bytes()));
        reply_result!(reply, r, |_| reply.ok())
    }

    fn access(&self, _req: &Request, _ino: INodeNo, _mask: fuser::AccessFlags, reply: ReplyEmpty) {
        // default_permissions: the kernel has checked already.
        reply.ok()
    }

    fn fallocate(
        &self,
        req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        let r = self.do_fallocate(req, fh, offset, length, mode);
        reply_result!(reply, r, |_| reply.ok())
    }
}
