//! One open regular file's traffic between the kernel and the engine.
//!
//! The kernel hands a FUSE file system writes of at most 1 MiB (often 4 KiB from a
//! program that writes small pieces) and reads of at most its read-ahead window. A hard
//! disk wants neither: every command costs a seek and a rotation, so dvrfs lays files
//! out in large blocks and wants them moved whole. This module turns the kernel's
//! pieces into transfers of one *chunk* (a multiple of the volume's data block, at
//! least 1 MiB), each one engine operation and so one scheduled device command:
//!
//! - **Writes** gather in a per-file buffer while they are contiguous; the buffer is
//!   submitted when it reaches a chunk boundary (so disk writes are block-aligned),
//!   when a write lands elsewhere, and before anything that must see the data (a read,
//!   `flush` on close, `fsync`, truncate, getting the reservation state). One submitted
//!   write may be in flight while the next chunk gathers; the next submission waits for
//!   it. A failed background write is reported by the next write, `flush` or `fsync`
//!   of the file, as the kernel does for its own write-back.
//! - **Reads** are served from a one-chunk cache filled by one engine read of the
//!   aligned chunk around the requested offset; once a read has consumed the second
//!   half of the cache, the next chunk is read ahead in the background, so a
//!   sequential reader keeps the disk busy while it copies.
//! - A file opened with `O_DIRECT` bypasses both (its writes wait for the disk).
//!
//! Every operation is best-effort: no deadline, owner = the calling process, so the
//! scheduler's guaranteed best-effort share carries it and admitted streams keep
//! theirs. The engine plans reads against applied metadata, so a read first waits for
//! the file's submitted writes (read-after-write across handles is exact).

use dvrfs_core::alloc::Ino;
use dvrfs_core::engine::{IoBuf, Op, Output};
use dvrfs_runtime::{Runtime, RuntimeError, Ticket};

/// A failure as the errno FUSE gives back.
pub type Errno = i32;

pub fn errno_of(e: &RuntimeError) -> Errno {
    match e {
        RuntimeError::Engine(e) => e.errno(),
        RuntimeError::Io(e) => e.raw_os_error().unwrap_or(libc::EIO),
        _ => libc::EIO,
    }
}

/// The chunk read around some offset, still valid (no write since).
struct Cache {
    start: u64,
    buf: IoBuf,
    len: usize,
}

/// State of one regular file while it is open (see the module docs).
pub struct FileState {
    pub ino: Ino,
    /// Open handles (the state is dropped when the last is released).
    pub opens: u32,
    chunk: u64,
    /// Gathered, not yet submitted: bytes for `wstart ..`.
    wbuf: Vec<u8>,
    wstart: u64,
    /// The submitted write and where it ends.
    inflight: Option<(Ticket, u64)>,
    cache: Option<Cache>,
    /// A chunk being read ahead: its start.
    ahead: Option<(u64, Ticket)>,
    /// A background write failed: given to the next write, flush or fsync.
    error: Option<Errno>,
}

impl FileState {
    pub fn new(ino: Ino, chunk: u64) -> FileState {
        FileState {
            ino,
            opens: 0,
            chunk,
            wbuf: Vec::new(),
            wstart: 0,
            inflight: None,
            cache: None,
            ahead: None,
            error: None,
        }
    }

    /// The size the file will have once what is gathered and in flight lands.
    pub fn size_with_pending(&self, applied: u64) -> u64 {
        let mut s = applied;
        if !self.wbuf.is_empty() {
            s = s.max(self.wstart + self.wbuf.len() as u64);
        }
        if let Some((_, end)) = self.inflight {
            s = s.max(end);
        }
        s
    }

    /// Whether anything of this file is gathered or in flight.
    pub fn has_pending(&self) -> bool {
        !self.wbuf.is_empty() || self.inflight.is_some() || self.ahead.is_some()
    }

    fn wait_inflight(&mut self, rt: &Runtime) {
        if let Some((t, _)) = self.inflight.take() {
            if let Err(e) = rt.check(t, true) {
                self.error.get_or_insert(errno_of(&e));
            }
        }
    }

    /// Submits `wbuf[..n]` (waiting for the previous write first).
    fn submit(&mut self, rt: &Runtime, n: usize, owner: u32) {
        self.wait_inflight(rt);
        let data = IoBuf::from_slice(&self.wbuf[..n]);
        let offset = self.wstart;
        match rt.start(
            Op::Write {
                ino: self.ino,
                offset,
                data,
            },
            None,
            owner,
        ) {
            Ok(t) => self.inflight = Some((t, offset + n as u64)),
            Err(e) => {
                self.error.get_or_insert(errno_of(&e));
            }
        }
        self.wbuf.drain(..n);
        self.wstart = offset + n as u64;
    }

    /// Everything gathered submitted and on the disk; the first error since the last
    /// report, if any.
    pub fn settle(&mut self, rt: &Runtime, owner: u32) -> Result<(), Errno> {
        if !self.wbuf.is_empty() {
            self.submit(rt, self.wbuf.len(), owner);
        }
        self.wait_inflight(rt);
        self.error.take().map_or(Ok(()), Err)
    }

    /// Forgets what was read (a write or truncate changed the file).
    pub fn drop_reads(&mut self, rt: &Runtime) {
        self.cache = None;
        if let Some((_, t)) = self.ahead.take() {
            let _ = rt.check(t, true);
        }
    }

    /// A buffered write of `data` at `offset`.
    pub fn write(
        &mut self,
        rt: &Runtime,
        offset: u64,
        data: &[u8],
        owner: u32,
    ) -> Result<usize, Errno> {
        if let Some(e) = self.error.take() {
            return Err(e);
        }
        self.drop_reads(rt);
        let contiguous = !self.wbuf.is_empty() && offset == self.wstart + self.wbuf.len() as u64;
        if !contiguous {
            if !self.wbuf.is_empty() {
                self.submit(rt, self.wbuf.len(), owner);
            }
            self.wstart = offset;
        }
        self.wbuf.extend_from_slice(data);
        loop {
            let boundary = (self.wstart / self.chunk + 1) * self.chunk;
            if self.wstart + (self.wbuf.len() as u64) < boundary {
                break;
            }
            self.submit(rt, (boundary - self.wstart) as usize, owner);
        }
        Ok(data.len())
    }

    /// A write that goes to the disk before it returns (`O_DIRECT` handles).
    pub fn write_through(
        &mut self,
        rt: &Runtime,
        offset: u64,
        data: &[u8],
        owner: u32,
    ) -> Result<usize, Errno> {
        self.settle(rt, owner)?;
        self.drop_reads(rt);
        rt.run(
            Op::Write {
                ino: self.ino,
                offset,
                data: IoBuf::from_slice(data),
            },
            None,
            owner,
        )
        .map_err(|e| errno_of(&e))?;
        Ok(data.len())
    }

    /// Reads up to `len` bytes at `offset` of a file of `size` bytes (the caller
    /// settled the file first, so `size` is current). `direct`: no cache, no
    /// read-ahead.
    pub fn read(
        &mut self,
        rt: &Runtime,
        offset: u64,
        len: usize,
        size: u64,
        direct: bool,
        owner: u32,
    ) -> Result<Vec<u8>, Errno> {
        if offset >= size {
            return Ok(Vec::new());
        }
        let end = size.min(offset + len as u64);
        if direct {
            let (buf, n) = self.engine_read(rt, offset, (end - offset) as usize, owner)?;
            return Ok(buf.bytes().expect("real memory")[..n].to_vec());
        }
        let mut out = Vec::with_capacity((end - offset) as usize);
        let mut pos = offset;
        while pos < end {
            let hit = self
                .cache
                .as_ref()
                .is_some_and(|c| c.start <= pos && pos < c.start + c.len as u64);
            if !hit {
                let start = pos - pos % self.chunk;
                let (buf, len) = match self.ahead.take() {
                    Some((s, t)) if s == start => match rt.check(t, true) {
                        Ok(Some(done)) => match done.output {
                            Output::Read { buf, bytes } => (buf, bytes),
                            other => panic!("a read completed as {other:?}"),
                        },
                        Ok(None) => unreachable!("a waited check has a result"),
                        Err(e) => return Err(errno_of(&e)),
                    },
                    other => {
                        if let Some((_, t)) = other {
                            let _ = rt.check(t, true);
                        }
                        self.engine_read(rt, start, self.chunk as usize, owner)?
                    }
                };
                if len == 0 || start + (len as u64) <= pos {
                    break; // the file is shorter than its size said: a hole at the end
                }
                self.cache = Some(Cache { start, buf, len });
            }
            let c = self.cache.as_ref().expect("filled above");
            let c_end = c.start + c.len as u64;
            let take_end = end.min(c_end);
            let bytes = c.buf.bytes().expect("real memory");
            out.extend_from_slice(&bytes[(pos - c.start) as usize..(take_end - c.start) as usize]);
            pos = take_end;
        }
        // Read ahead once the reader is in the second half of the cached chunk.
        if let Some(c) = &self.cache {
            let c_end = c.start + c.len as u64;
            if self.ahead.is_none() && pos >= c.start + c.len as u64 / 2 && c_end < size {
                let t = rt.start(
                    Op::Read {
                        ino: self.ino,
                        offset: c_end,
                        buf: IoBuf::zeroed(self.chunk as usize),
                    },
                    None,
                    owner,
                );
                if let Ok(t) = t {
                    self.ahead = Some((c_end, t));
                }
            }
        }
        Ok(out)
    }

    fn engine_read(
        &self,
        rt: &Runtime,
        offset: u64,
        len: usize,
        owner: u32,
    ) -> Result<(IoBuf, usize), Errno> {
        match rt.run(
            Op::Read {
                ino: self.ino,
                offset,
                buf: IoBuf::zeroed(len),
            },
            None,
            owner,
        ) {
            Ok(Output::Read { buf, bytes }) => Ok((buf, bytes)),
            Ok(other) => panic!("a read completed as {other:?}"),
            Err(e) => Err(errno_of(&e)),
        }
    }
}
