//! The FUSE file system of the emulator: a directory of three files.
//!
//! - `disk`: the emulated disk. Opened with `FOPEN_DIRECT_IO` (no page cache: every
//!   read and write reaches the drive) and parallel direct writes. A read or write
//!   goes to the drive thread, then moves its bytes in the image while the drive
//!   serves it; the drive thread replies when the model says the command
//!   completed (and the bytes moved). `fsync` is a Flush command. Any offset and size is served (a file may be read by anyone); the loop device
//!   sends whole sectors. With timing off, a command replies as soon as its bytes
//!   moved and is counted apart (`untimed_commands`).
//! - `stats`: JSON ([`Shared::stats_json`]), a snapshot taken at each open.
//! - `timing`: `on` or `off`; writing one of them switches timing.
//!
//! Contract: the kernel may keep many requests in flight (async direct I/O,
//! [`MAX_BACKGROUND`]); nothing here blocks on the drive: the FUSE threads only
//! move bytes and hand replies to the drive thread.

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::io;
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, SystemTime};

use dvrfs_core::disk::CommandKind;
use fuser::{
    Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo, InitFlags,
    KernelConfig, LockOwner, OpenFlags, ReplyAttr, ReplyData, ReplyDirectory, ReplyEmpty,
    ReplyEntry, ReplyOpen, ReplyWrite, Request, WriteFlags,
};

use crate::drive_thread::{Arrival, Moved, Pending};
use crate::image::Image;
use crate::stats::Shared;

/// Requests the kernel keeps in flight in the background (async direct I/O, the
/// loop device's requests): above the drive's 32 tags and the loop device's 128.
pub const MAX_BACKGROUND: u16 = 256;

/// The largest request the emulator asks the kernel for (the kernel caps it at its
/// `fs.fuse.max_pages_limit`, 256 pages = 1 MiB by default).
pub const MAX_REQUEST_BYTES: u32 = 1 << 20;

const ROOT: u64 = 1;
const DISK: u64 = 2;
const STATS: u64 = 3;
const TIMING: u64 = 4;

const FILES: [(u64, &str); 3] = [(DISK, "disk"), (STATS, "stats"), (TIMING, "timing")];

/// Attributes are never cached: `stats` changes on every look.
const TTL: Duration = Duration::ZERO;

pub struct EmuFs {
    image: Arc<Image>,
    shared: Arc<Shared>,
    /// The drive's sector (commands are whole sectors of the model).
    model_sector_bytes: u64,
    drive: Mutex<Option<mpsc::Sender<Arrival>>>,
    /// `stats` snapshots by file handle.
    snapshots: Mutex<BTreeMap<u64, Arc<Vec<u8>>>>,
    next_fh: std::sync::atomic::AtomicU64,
}

impl EmuFs {
    pub fn new(
        image: Arc<Image>,
        shared: Arc<Shared>,
        model_sector_bytes: u64,
        drive: mpsc::Sender<Arrival>,
    ) -> EmuFs {
        assert!(model_sector_bytes > 0, "a sector has bytes");
        EmuFs {
            image,
            shared,
            model_sector_bytes,
            drive: Mutex::new(Some(drive)),
            snapshots: Mutex::new(BTreeMap::new()),
            next_fh: std::sync::atomic::AtomicU64::new(1),
        }
    }

    fn attr(&self, ino: u64) -> Option<FileAttr> {
        let (kind, perm, size) = match ino {
            ROOT => (FileType::Directory, 0o755, 0),
            DISK => (FileType::RegularFile, 0o600, self.image.size_bytes()),
            STATS => (
                FileType::RegularFile,
                0o444,
                self.stats_bytes().len() as u64,
            ),
            TIMING => (
                FileType::RegularFile,
                0o644,
                self.timing_bytes().len() as u64,
            ),
            _ => return None,
        };
        let now = SystemTime::now();
        Some(FileAttr {
            ino: INodeNo(ino),
            size,
            blocks: size.div_ceil(512),
            atime: now,
            mtime: now,
            ctime: now,
            crtime: now,
            kind,
            perm,
            nlink: if kind == FileType::Directory { 2 } else { 1 },
            uid: 0,
            gid: 0,
            rdev: 0,
            blksize: 4096,
            flags: 0,
        })
    }

    fn stats_bytes(&self) -> Vec<u8> {
        let mut v = self.shared.stats_json().to_string().into_bytes();
        v.push(b'\n');
        v
    }

    fn timing_bytes(&self) -> &'static [u8] {
        if self.shared.timing() {
            b"on\n"
        } else {
            b"off\n"
        }
    }

    /// The model's sectors a byte range touches.
    fn sectors(&self, offset: u64, len: u64) -> (u64, u32) {
        let s = self.model_sector_bytes;
        let first = offset / s;
        let end = (offset + len).div_ceil(s);
        (first, (end - first) as u32)
    }

    /// Hands a command to the drive thread, then moves its bytes (`move_data`)
    /// while the drive serves it; with timing off (or the drive gone) moves them
    /// and answers at once.
    fn submit<T>(
        &self,
        at_ns: u64,
        kind: CommandKind,
        pending: impl FnOnce(Moved<T>) -> Pending,
        move_data: impl FnOnce() -> Result<T, Errno>,
    ) {
        let (moved, said) = mpsc::sync_channel(1);
        let pending = pending(said);
        let tx = if self.shared.timing() {
            self.drive.lock().unwrap_or_else(|e| e.into_inner()).clone()
        } else {
            self.shared.count_untimed();
            None
        };
        let unsent = match tx {
            Some(tx) => match tx.send(Arrival {
                at_ns,
                kind,
                pending,
            }) {
                Ok(()) => None,
                Err(mpsc::SendError(a)) => Some(a.pending),
            },
            // Timing off, or the session is ending.
            None => Some(pending),
        };
        // The drive thread waits for this before it replies.
        let _ = moved.send(move_data());
        if let Some(p) = unsent {
            p.answer(&self.image, || 0);
        }
    }
}

fn errno(e: &io::Error) -> Errno {
    Errno::from_i32(e.raw_os_error().unwrap_or(libc::EIO))
}

impl Filesystem for EmuFs {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> io::Result<()> {
        if let Err(max) = config.set_max_write(MAX_REQUEST_BYTES) {
            let _ = config.set_max_write(max);
        }
        if let Err(max) = config.set_max_readahead(MAX_REQUEST_BYTES) {
            let _ = config.set_max_readahead(max);
        }
        let _ = config.set_max_background(MAX_BACKGROUND);
        let _ = config.set_congestion_threshold(MAX_BACKGROUND * 3 / 4);
        // Async direct I/O: a loop device's requests are sent to us without each
        // waiting for the one before (otherwise the queue depth is 1).
        if config.add_capabilities(InitFlags::FUSE_ASYNC_DIO).is_err() {
            eprintln!(
                "dvrfs emulate: the kernel does not offer FUSE_ASYNC_DIO: commands reach the drive one at a time"
            );
        }
        Ok(())
    }

    fn destroy(&mut self) {
        // The drive thread ends once the last sender is gone.
        self.drive.lock().unwrap_or_else(|e| e.into_inner()).take();
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let found = FILES.iter().find(|(_, n)| OsStr::new(n) == name);
        match (parent.0, found) {
            (ROOT, Some(&(ino, _))) => match self.attr(ino) {
                Some(a) => reply.entry(&TTL, &a, Generation(0)),
                None => reply.error(Errno::ENOENT),
            },
            _ => reply.error(Errno::ENOENT),
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        match self.attr(ino.0) {
            Some(a) => reply.attr(&TTL, &a),
            None => reply.error(Errno::ENOENT),
        }
    }

    fn open(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        let fh = self
            .next_fh
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        match ino.0 {
            DISK => reply.opened(
                FileHandle(fh),
                FopenFlags::FOPEN_DIRECT_IO | FopenFlags::FOPEN_PARALLEL_DIRECT_WRITES,
            ),
            STATS => {
                let snap = Arc::new(self.stats_bytes());
                self.snapshots
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .insert(fh, snap);
                reply.opened(FileHandle(fh), FopenFlags::FOPEN_DIRECT_IO)
            }
            TIMING => reply.opened(FileHandle(fh), FopenFlags::FOPEN_DIRECT_IO),
            ROOT => reply.error(Errno::EISDIR),
            _ => reply.error(Errno::ENOENT),
        }
    }

    fn release(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        self.snapshots
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&fh.0);
        reply.ok();
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let at_ns = self.shared.now_ns();
        let small = |bytes: &[u8]| {
            let from = (offset as usize).min(bytes.len());
            let to = (from + size as usize).min(bytes.len());
            bytes[from..to].to_vec()
        };
        match ino.0 {
            DISK => {}
            STATS => {
                let snap = self
                    .snapshots
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .get(&fh.0)
                    .cloned()
                    .unwrap_or_else(|| Arc::new(self.stats_bytes()));
                return reply.data(&small(&snap));
            }
            TIMING => return reply.data(&small(self.timing_bytes())),
            _ => return reply.error(Errno::ENOENT),
        }
        // Past the end: an empty read, no command (as a disk refuses it, the
        // kernel never sends one through the loop device).
        let len = (size as u64).min(self.image.size_bytes().saturating_sub(offset));
        if len == 0 {
            return reply.data(&[]);
        }
        let (lba, sectors) = self.sectors(offset, len);
        self.submit(
            at_ns,
            CommandKind::Read { lba, sectors },
            |moved| Pending::Read(reply, moved),
            || {
                let mut buf = vec![0u8; len as usize];
                self.image
                    .read_at(&mut buf, offset)
                    .map(|()| buf)
                    .map_err(|e| errno(&e))
            },
        );
    }

    fn write(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        let at_ns = self.shared.now_ns();
        match ino.0 {
            DISK => {}
            TIMING => {
                return match std::str::from_utf8(data).map(str::trim) {
                    Ok("on") => {
                        self.shared.set_timing(true);
                        reply.written(data.len() as u32)
                    }
                    Ok("off") => {
                        self.shared.set_timing(false);
                        reply.written(data.len() as u32)
                    }
                    _ => reply.error(Errno::EINVAL),
                }
            }
            STATS => return reply.error(Errno::EACCES),
            _ => return reply.error(Errno::ENOENT),
        }
        if data.is_empty() {
            return reply.written(0);
        }
        // A disk does not grow: a write past its end is refused whole.
        if offset + data.len() as u64 > self.image.size_bytes() {
            return reply.error(Errno::ENOSPC);
        }
        let (lba, sectors) = self.sectors(offset, data.len() as u64);
        self.submit(
            at_ns,
            CommandKind::Write { lba, sectors },
            |moved| Pending::Write(reply, moved),
            || {
                self.image
                    .write_at(data, offset)
                    .map(|_| data.len() as u32)
                    .map_err(|e| errno(&e))
            },
        );
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        // close(2): nothing is buffered here.
        reply.ok();
    }

    fn fsync(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        let at_ns = self.shared.now_ns();
        if ino.0 != DISK {
            return reply.ok();
        }
        self.submit(
            at_ns,
            CommandKind::Flush,
            |_: Moved<()>| Pending::Flush(reply),
            || Ok(()),
        );
    }

    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        _mode: Option<u32>,
        _uid: Option<u32>,
        _gid: Option<u32>,
        size: Option<u64>,
        _atime: Option<fuser::TimeOrNow>,
        _mtime: Option<fuser::TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        // `echo off > timing` truncates first; the disk's size is fixed.
        match (ino.0, size) {
            (DISK, Some(s)) if s != self.image.size_bytes() => reply.error(Errno::EPERM),
            (STATS, Some(_)) => reply.error(Errno::EACCES),
            _ => match self.attr(ino.0) {
                Some(a) => reply.attr(&TTL, &a),
                None => reply.error(Errno::ENOENT),
            },
        }
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        if ino.0 != ROOT {
            return reply.error(Errno::ENOTDIR);
        }
        let mut entries = vec![
            (ROOT, FileType::Directory, "."),
            (ROOT, FileType::Directory, ".."),
        ];
        entries.extend(FILES.iter().map(|&(i, n)| (i, FileType::RegularFile, n)));
        for (i, (ino, kind, name)) in entries.into_iter().enumerate().skip(offset as usize) {
            if reply.add(INodeNo(ino), (i + 1) as u64, kind, name) {
                break;
            }
        }
        reply.ok();
    }
}
