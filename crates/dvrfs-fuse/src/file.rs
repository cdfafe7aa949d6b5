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
//!   when a write lands elsewhere, before anything that must see the data (a read,
//!   `flush` on close, `fsync`, truncate, getting the reservation state), and at the
//!   engine's gather point before each commit ([`crate::gather`]), so a slow writer's
//!   bytes are durable within the commit interval and a lead, like a recording's. One submitted
//!   write may be in flight while the next chunk gathers; the next submission waits for
//!   it. A failed background write is reported by the next write, `flush` or `fsync`
//!   of the file, as the kernel does for its own write-back.
//! - **Reads** are served from a small cache of chunks ([`CACHE_CHUNKS`]), each
//!   filled by one engine read of the aligned chunk around the requested offset; once
//!   a read reaches the second half of a chunk, the next [`READ_AHEAD_CHUNKS`] chunks
//!   are read ahead in the background, so a sequential reader keeps the disk busy
//!   while it copies: with two in flight the second is queued behind the first and
//!   follows it on the platter without a lost revolution. The kernel's own read-ahead
//!   sends reads out of order on several threads; a chunk read ahead is kept until it
//!   is used or evicted, never thrown away because a later one was asked first.
//! - A file opened with `O_DIRECT` bypasses both (its writes wait for the disk).
//! - **A full queue is waited out, never reported.** Programs that write regular
//!   files (`cp`, `ffmpeg`) do not retry `EAGAIN`, so every operation a request
//!   needs is started with [`Runtime::start_waiting`] / [`Runtime::run_waiting`]:
//!   when the runtime's ticket bound, the engine's operation bound or its disk queue
//!   is full, the dispatcher holds the start and makes it once completions free
//!   room (no polling). Room there frees as the disk works, never by a result
//!   being taken, so a request waiting with the file's lock cannot wait for one
//!   stuck behind it. Results the mount leaves untaken are bounded: one write and
//!   [`READ_AHEAD_CHUNKS`] x 2 reads ahead per open file. Only read-ahead, which
//!   nobody waits for, is skipped instead.
//!
//! Chunks live in huge-page buffers ([`dvrfs_io::HugeBuf`]) that go back to a pool
//! shared by all files once the engine returns them: the kernel's bytes are copied
//! once into a chunk and the chunk goes to the device as it is (no zeroing, no page
//! faults on fresh memory for every chunk), and a read is answered from the cached
//! chunk without another copy.
//!
//! Every operation is best-effort: no deadline, owner = the calling process, so the
//! scheduler's guaranteed best-effort share carries it and admitted streams keep
//! theirs. The engine plans reads against applied metadata, so a read first waits for
//! the file's submitted writes (read-after-write across handles is exact).

use crate::share::{refused, Room, Writer};
use dvrfs_core::engine::{ExternalBuf, IoBuf, Op, OpenMode, Output};
use dvrfs_core::meta::Ino;
use dvrfs_io::HugeBuf;
use dvrfs_runtime::{Runtime, RuntimeError, Ticket};
use std::sync::{Arc, Mutex};

/// Chunks read ahead of a sequential reader.
pub const READ_AHEAD_CHUNKS: usize = 2;
/// Chunks kept after they were read (least recently filled evicted first).
pub const CACHE_CHUNKS: usize = 4;

/// Most bytes of chunk buffers kept for reuse (the rest are unmapped when
/// returned): part of the daemon's fixed memory ([`crate::memory`]).
pub const POOL_MAX_BYTES: usize = 32 << 20;

/// Chunk buffers for reuse, and the read cache's shares ([`crate::memory`]), shared
/// by every open file of a mount.
#[derive(Clone)]
pub struct Pool {
    free: Arc<Mutex<Vec<HugeBuf>>>,
    reads: Arc<crate::memory::ReadCache>,
}

impl Pool {
    /// A mount's pool, its read cache `read_cache_bytes` of `chunk_bytes` chunks.
    pub fn new(read_cache_bytes: u64, chunk_bytes: u64) -> Pool {
        Pool {
            free: Arc::default(),
            reads: crate::memory::ReadCache::new(read_cache_bytes, chunk_bytes),
        }
    }

    /// The read cache: chunks held by all open files, and the most that may be.
    pub fn read_cache_usage(&self) -> (usize, usize) {
        self.reads.usage()
    }

    fn take(&self, chunk: usize) -> Chunk {
        let mem = self
            .free
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .pop()
            .filter(|b| b.len() == chunk)
            .or_else(|| HugeBuf::zeroed(chunk));
        Chunk {
            mem: mem.map_or_else(|| Mem::Plain(vec![0; chunk]), Mem::Huge),
            len: 0,
        }
    }

    /// A buffer the engine gave back (in a completed read or write).
    fn give(&self, buf: IoBuf) {
        if let IoBuf::External(b) = buf {
            let any: Box<dyn std::any::Any + Send> = b;
            if let Ok(c) = any.downcast::<Chunk>() {
                if let Mem::Huge(h) = c.mem {
                    let mut pool = self.free.lock().unwrap_or_else(|e| e.into_inner());
                    if (pool.len() + 1) * h.len() <= POOL_MAX_BYTES {
                        pool.push(h);
                    }
                }
            }
        }
    }
}

enum Mem {
    Huge(HugeBuf),
    /// When the kernel refuses a mapping: ordinary memory (the engine bounces it).
    Plain(Vec<u8>),
}

/// A chunk buffer holding `len` valid bytes (what the engine sees).
pub struct Chunk {
    mem: Mem,
    len: usize,
}

impl Chunk {
    fn cap(&self) -> usize {
        match &self.mem {
            Mem::Huge(h) => h.len(),
            Mem::Plain(v) => v.len(),
        }
    }
    fn all_mut(&mut self) -> &mut [u8] {
        match &mut self.mem {
            Mem::Huge(h) => h,
            Mem::Plain(v) => v,
        }
    }
}

impl ExternalBuf for Chunk {
    fn bytes(&self) -> &[u8] {
        match &self.mem {
            Mem::Huge(h) => &h[..self.len],
            Mem::Plain(v) => &v[..self.len],
        }
    }
    fn bytes_mut(&mut self) -> &mut [u8] {
        let len = self.len;
        &mut self.all_mut()[..len]
    }
}

/// A failure as the errno FUSE gives back.
pub type Errno = i32;

pub fn errno_of(e: &RuntimeError) -> Errno {
    errno_logged(None, e)
}

/// [`errno_of`] for a failed read of a file: the log line names the file by its
/// path (looked up in `rt`'s metadata) as well as by its inode.
pub fn read_errno(rt: &Runtime, e: &RuntimeError) -> Errno {
    errno_logged(Some(rt), e)
}

/// The errno of `e`. An error in a file's data (bytes lost to metadata damage,
/// failing their data checksum, past the end of a truncated image) is logged too:
/// EIO alone would not say which file and which bytes, and the log does.
fn errno_logged(rt: Option<&Runtime>, e: &RuntimeError) -> Errno {
    use dvrfs_core::Error as E;
    match e {
        RuntimeError::Engine(
            e @ (E::DataLost { ino, .. } | E::Checksum { ino, .. } | E::PastEnd { ino, .. }),
        ) => {
            let ino = *ino;
            let path = rt
                .and_then(|rt| rt.query(move |v| v.path_of(ino)).ok().flatten())
                .map_or(String::new(), |p| format!("{p}: "));
            eprintln!("{} dvrfs: {path}{e}", crate::stamp());
            e.errno()
        }
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
    /// Its share of the mount's read cache.
    _held: crate::memory::Held,
}

/// State of one regular file while it is open (see the module docs).
pub struct FileState {
    pub ino: Ino,
    /// Open handles (the state is dropped when the last is released).
    pub opens: u32,
    /// The engine's opens of the file this state holds, one per mode it needed: a
    /// reader's first, a writer's added by the first handle that may write (a file
    /// held only for reading yields to a recording: retention's rule 6). All are
    /// closed with the state.
    pub engine_opens: Vec<OpenMode>,
    chunk: u64,
    pool: Pool,
    /// Gathered, not yet submitted: bytes for `wstart ..`.
    wbuf: Option<Chunk>,
    wstart: u64,
    /// When the first gathered byte came (the runtime's clock), and from whom.
    wfirst_ns: u64,
    wowner: u32,
    /// The submitted write and where it ends.
    inflight: Option<(Ticket, u64)>,
    cache: std::collections::VecDeque<Cache>,
    /// Chunks being read ahead, in file order: their starts.
    ahead: std::collections::VecDeque<(u64, Ticket, crate::memory::Held)>,
    /// A background write failed: given to the next write, flush or fsync.
    error: Option<Errno>,
    /// Where the volume was last seen to have room for this file's gathered bytes:
    /// writes up to here were checked (`write`); each new chunk checks again.
    space_to: u64,
    /// A stream reservation on the file (`user.dvrfs.stream`, see [`crate::stream`]).
    pub stream: Option<crate::stream::FileStream>,
    /// A stream ended by a close while a handle stays open, and that handle:
    /// admitted again at the handle's next read or write (not another handle's: a
    /// file opened since reads and writes best-effort).
    pub resume: Option<(dvrfs_core::engine::Reservation, u64)>,
    /// How reads parked on this file's stream are woken ([`crate::park`]); `None`:
    /// stream reads that must wait are served best-effort.
    pub link: Option<crate::park::Link>,
    /// The end of what `write` gathered, for `getattr` without this lock (size.rs).
    floor: Arc<std::sync::atomic::AtomicU64>,
    /// The user whose reservation the file's stream is (its per-user limits, who may
    /// take it when pending: [`crate::quota`]).
    pub stream_uid: u32,
}

impl FileState {
    pub fn new(
        ino: Ino,
        chunk: u64,
        pool: Pool,
        floor: Arc<std::sync::atomic::AtomicU64>,
    ) -> FileState {
        FileState {
            ino,
            opens: 0,
            engine_opens: vec![],
            chunk,
            pool,
            wbuf: None,
            wstart: 0,
            wfirst_ns: 0,
            wowner: 0,
            inflight: None,
            cache: std::collections::VecDeque::new(),
            ahead: std::collections::VecDeque::new(),
            error: None,
            space_to: 0,
            stream: None,
            resume: None,
            link: None,
            floor,
            stream_uid: 0,
        }
    }

    /// The size the file will have once what is gathered and in flight lands.
    pub fn size_with_pending(&self, applied: u64) -> u64 {
        let mut s = applied;
        if let Some(w) = &self.wbuf {
            s = s.max(self.wstart + w.len as u64);
        }
        if let Some((_, end)) = self.inflight {
            s = s.max(end);
        }
        if let Some(st) = &self.stream {
            if st.res.dir == dvrfs_core::engine::StreamDir::Write {
                s = s.max(st.next);
            }
        }
        s
    }

    /// Whether anything of this file is gathered or in flight.
    pub fn has_pending(&self) -> bool {
        self.wbuf.is_some() || self.inflight.is_some() || !self.ahead.is_empty()
    }

    fn wait_inflight(&mut self, rt: &Runtime) {
        if let Some((t, _)) = self.inflight.take() {
            match rt.check(t, true) {
                Ok(Some(done)) => {
                    if let Output::Write { data } = done.output {
                        self.pool.give(data);
                    }
                }
                Ok(None) => {}
                Err(e) => {
                    self.error.get_or_insert(errno_of(&e));
                    crate::size::failed(&self.floor);
                }
            }
        }
    }

    /// Submits the gathered chunk (waiting for the previous write first).
    fn submit(&mut self, rt: &Runtime, owner: u32) {
        let Some(chunk) = self.wbuf.take() else {
            return;
        };
        self.space_to = 0;
        self.wait_inflight(rt);
        let offset = self.wstart;
        let n = chunk.len as u64;
        match rt.start_waiting(
            Op::Write {
                ino: self.ino,
                offset,
                data: IoBuf::External(Box::new(chunk)),
            },
            None,
            owner,
        ) {
            Ok(t) => self.inflight = Some((t, offset + n)),
            Err(e) => {
                self.error.get_or_insert(errno_of(&e));
            }
        }
        self.wstart = offset + n;
    }

    /// Everything gathered submitted and on the disk; the first error since the last
    /// report, if any.
    pub fn settle(&mut self, rt: &Runtime, owner: u32) -> Result<(), Errno> {
        if self.wbuf.is_some() {
            // Cached chunks were read with the gathered bytes laid over them only in
            // the copies given out; from now on the disk has the bytes.
            self.drop_reads(rt);
        }
        self.submit(rt, owner);
        self.wait_inflight(rt);
        self.error.take().map_or(Ok(()), Err)
    }

    /// Forgets what was read (a write or truncate changed the file).
    pub fn drop_reads(&mut self, rt: &Runtime) {
        while let Some(c) = self.cache.pop_front() {
            self.pool.give(c.buf);
        }
        while let Some((_, t, _)) = self.ahead.pop_front() {
            self.drop_ahead(rt, t);
        }
    }

    /// A buffered write of `data` at `offset`.
    pub fn write(
        &mut self,
        rt: &Runtime,
        offset: u64,
        data: &[u8],
        owner: u32,
        who: Writer<'_>,
    ) -> Result<usize, Errno> {
        if let Some(e) = self.error.take() {
            return Err(e);
        }
        self.drop_reads(rt);
        let contiguous = self
            .wbuf
            .as_ref()
            .is_some_and(|w| offset == self.wstart + w.len as u64);
        if !contiguous {
            self.submit(rt, owner);
            self.wstart = offset;
        }
        let mut rest = data;
        while !rest.is_empty() {
            if self.wbuf.is_none() {
                self.wbuf = Some(self.pool.take(self.chunk as usize));
                self.wfirst_ns = rt.now_ns();
                self.wowner = owner;
            }
            let w = self.wbuf.as_ref().expect("just made");
            let at = self.wstart + w.len as u64;
            // Up to the next chunk boundary, so every submitted chunk is aligned.
            let boundary = (self.wstart / self.chunk + 1) * self.chunk;
            let room = ((boundary - at) as usize).min(w.cap() - w.len);
            let take = room.min(rest.len());
            if at + take as u64 > self.space_to {
                if let Err(e) = self.check_space(rt, at + take as u64, boundary, who) {
                    // Refused before a byte of it was gathered; a write partly taken
                    // returns its count (the next one gets the error).
                    let taken = data.len() - rest.len();
                    return if taken > 0 { Ok(taken) } else { Err(e) };
                }
            }
            let w = self.wbuf.as_mut().expect("just made");
            let from = w.len;
            w.all_mut()[from..from + take].copy_from_slice(&rest[..take]);
            w.len += take;
            crate::size::raise(&self.floor, self.wstart + w.len as u64);
            rest = &rest[take..];
            if self.wstart + w.len as u64 == boundary || w.len == w.cap() {
                self.submit(rt, owner);
            }
        }
        Ok(data.len())
    }

    /// Whether the volume has room for this file to reach `end` (gathered bytes take
    /// their blocks only when their chunk is written): the whole chunk up to
    /// `boundary` is checked first (one question per chunk), then `end` alone. A file
    /// that cannot grow to `end` gets `ENOSPC` at the `write` call, before a byte of
    /// it is taken, instead of a chunk that fails on the disk after its `write`
    /// returned. So too a user's write that would take some of the share kept for
    /// root ([`crate::share`]), asked in the same query. The room is not held:
    /// writers racing for the last blocks can still see the later failure, reported
    /// at the next write, fsync or close.
    fn check_space(
        &mut self,
        rt: &Runtime,
        end: u64,
        boundary: u64,
        who: Writer<'_>,
    ) -> Result<(), Errno> {
        use dvrfs_core::volume::SpaceTo;
        let ino = self.ino;
        let pct = if who.checked() { who.share.pct() } else { 0 };
        let room = |to: u64| -> Result<(bool, Option<Room>), Errno> {
            let r = rt
                .query(move |v| {
                    let room = match pct {
                        0 => None,
                        _ => Some(Room::to_extend(v, ino, to, pct)?),
                    };
                    Ok::<_, dvrfs_core::Error>((v.blocks_to_extend(ino, to)?, room))
                })
                .map_err(|e| errno_of(&e))?;
            match r {
                Ok((SpaceTo::Fits | SpaceTo::AfterCommit, room)) => Ok((true, room)),
                Ok((SpaceTo::No { .. }, room)) => Ok((false, room)),
                Err(e) => Err(e.errno()),
            }
        };
        let fits = |r: &(bool, Option<Room>)| r.0 && !r.1.is_some_and(|r| refused(who.uid, &r));
        let chunk = room(boundary)?;
        if fits(&chunk) {
            self.space_to = boundary;
            return Ok(());
        }
        let this = room(end)?;
        if fits(&this) {
            self.space_to = end;
            return Ok(());
        }
        if let (true, Some(r)) = this {
            // Blocks there, but only in the share kept for root: said why, at most
            // once a minute per file.
            return Err(who.share.decide(rt, who.uid, ino, &r).expect_err("refused"));
        }
        eprintln!(
            "{} dvrfs: inode {ino}: no space left for a write up to byte {end}: refused with ENOSPC; the bytes accepted before it are kept",
            crate::stamp()
        );
        Err(libc::ENOSPC)
    }

    /// A write that goes to the disk before it returns (`O_DIRECT` handles).
    pub fn write_through(
        &mut self,
        rt: &Runtime,
        offset: u64,
        data: &[u8],
        owner: u32,
        who: Writer<'_>,
    ) -> Result<usize, Errno> {
        self.settle(rt, owner)?;
        if who.checked() {
            let end = offset + data.len() as u64;
            who.share.check_write(rt, who.uid, self.ino, end)?;
        }
        self.drop_reads(rt);
        rt.run_waiting(
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

    /// Hands the gathered bytes to the engine if the first of them came by
    /// `before_ns` (the runtime's clock): a gather point ([`crate::gather`]), so the
    /// commit after it takes them in. A partial chunk is written as it is; the next
    /// bytes gather up to the same chunk boundary, so later writes stay aligned.
    pub fn gather(&mut self, rt: &Runtime, before_ns: u64) {
        if self.wbuf.is_none() || self.wfirst_ns > before_ns {
            return;
        }
        // As in `settle`: cached chunks had the gathered bytes only in the copies
        // given out.
        self.drop_reads(rt);
        let owner = self.wowner;
        self.submit(rt, owner);
    }

    /// Whether bytes are gathered (not yet given to the engine).
    pub fn has_gathered(&self) -> bool {
        self.wbuf.is_some()
    }

    /// Waits for the submitted write, if any (its buffer is the engine's until then).
    /// A failure stays for the next write, `flush` or `fsync` to report.
    pub fn land_inflight(&mut self, rt: &Runtime) {
        self.wait_inflight(rt);
    }

    /// A buffered read of a file with gathered bytes, without sending them to the disk:
    /// what the disk holds (`applied` bytes, the engine's size once the submitted write
    /// landed) with the gathered bytes laid over it. So a reader following a file that
    /// is being written (a player behind a recorder) never forces a partial chunk.
    #[allow(clippy::too_many_arguments)]
    pub fn read_with_gathered<R>(
        &mut self,
        rt: &Runtime,
        offset: u64,
        len: usize,
        applied: u64,
        owner: u32,
        reply: impl FnOnce(&[u8]) -> R,
    ) -> Result<R, Errno> {
        let (wstart, wend) = match &self.wbuf {
            Some(w) => (self.wstart, self.wstart + w.len as u64),
            None => return self.read(rt, offset, len, applied, false, owner, reply),
        };
        let size = applied.max(wend);
        if offset >= size {
            return Ok(reply(&[]));
        }
        let end = size.min(offset + len as u64);
        if end <= applied && (end <= wstart || offset >= wend) {
            return self.read(rt, offset, len, applied, false, owner, reply);
        }
        let mut out = vec![0u8; (end - offset) as usize];
        let disk_end = end.min(applied);
        if offset < disk_end {
            self.read(
                rt,
                offset,
                (disk_end - offset) as usize,
                applied,
                false,
                owner,
                |b| out[..b.len()].copy_from_slice(b),
            )?;
        }
        let (from, to) = (offset.max(wstart), end.min(wend));
        if from < to {
            let w = self.wbuf.as_ref().expect("checked above").bytes();
            out[(from - offset) as usize..(to - offset) as usize]
                .copy_from_slice(&w[(from - wstart) as usize..(to - wstart) as usize]);
        }
        Ok(reply(&out))
    }

    /// Reads up to `len` bytes at `offset` of a file of `size` bytes (the caller
    /// settled the file first, so `size` is current) and hands them to `reply`
    /// (straight from the cached chunk when it holds them all). `direct`: no cache,
    /// no read-ahead.
    #[allow(clippy::too_many_arguments)]
    pub fn read<R>(
        &mut self,
        rt: &Runtime,
        offset: u64,
        len: usize,
        size: u64,
        direct: bool,
        owner: u32,
        reply: impl FnOnce(&[u8]) -> R,
    ) -> Result<R, Errno> {
        if offset >= size {
            return Ok(reply(&[]));
        }
        let end = size.min(offset + len as u64);
        if direct {
            let (buf, n) =
                self.engine_read(rt, offset, IoBuf::zeroed((end - offset) as usize), owner)?;
            return Ok(reply(&buf.bytes().expect("real memory")[..n]));
        }
        let mut out: Option<Vec<u8>> = None;
        let mut pos = offset;
        while pos < end {
            let i = match self.cached(pos) {
                Some(i) => i,
                None => {
                    let start = pos - pos % self.chunk;
                    let fetched = match self.ahead.iter().position(|(s, _, _)| *s == start) {
                        Some(k) => {
                            let (_, t, held) = self.ahead.remove(k).expect("found");
                            match rt.check(t, true) {
                                Ok(Some(done)) => match done.output {
                                    Output::Read { buf, bytes } => Ok((buf, bytes, held)),
                                    other => panic!("a read completed as {other:?}"),
                                },
                                Ok(None) => unreachable!("a waited check has a result"),
                                Err(e) => Err(read_errno(rt, &e)),
                            }
                        }
                        None => match self.hold_chunk() {
                            Some(held) => self
                                .chunk_read(rt, start, owner)
                                .map(|(buf, len)| (buf, len, held)),
                            // The mount's read cache is all taken (`crate::memory`):
                            // the bytes asked for, straight into the reply.
                            None => Err(0),
                        },
                    };
                    let Ok((buf, len, held)) = fetched else {
                        // Part of the chunk cannot be read (a checksum mismatch, a
                        // device error): only the bytes asked for are read, so a read
                        // clear of the bad part still succeeds; one that touches it
                        // gets the error. So too when the read cache is all taken.
                        let want = IoBuf::zeroed((end - pos) as usize);
                        let (buf, n) = self.engine_read(rt, pos, want, owner)?;
                        let bytes = &buf.bytes().expect("real memory")[..n];
                        if out.is_none() && pos == offset {
                            return Ok(reply(bytes));
                        }
                        out.get_or_insert_with(|| Vec::with_capacity((end - offset) as usize))
                            .extend_from_slice(bytes);
                        break;
                    };
                    if len == 0 || start + (len as u64) <= pos {
                        self.pool.give(buf);
                        break; // the file is shorter than its size said
                    }
                    self.cache.push_back(Cache {
                        start,
                        buf,
                        len,
                        _held: held,
                    });
                    while self.cache.len() > CACHE_CHUNKS {
                        let old = self.cache.pop_front().expect("non-empty");
                        self.pool.give(old.buf);
                    }
                    self.cache.len() - 1
                }
            };
            let c = &self.cache[i];
            let c_end = c.start + c.len as u64;
            let take_end = end.min(c_end);
            let bytes = &c.buf.bytes().expect("real memory")
                [(pos - c.start) as usize..(take_end - c.start) as usize];
            if out.is_none() && pos == offset && take_end == end {
                // All of it in one chunk: no copy.
                let r = reply(bytes);
                self.read_ahead(rt, end, size, owner);
                return Ok(r);
            }
            out.get_or_insert_with(|| Vec::with_capacity((end - offset) as usize))
                .extend_from_slice(bytes);
            pos = take_end;
        }
        self.read_ahead(rt, pos, size, owner);
        Ok(reply(out.as_deref().unwrap_or(&[])))
    }

    /// The cached chunk holding byte `pos`.
    fn cached(&self, pos: u64) -> Option<usize> {
        self.cache
            .iter()
            .position(|c| c.start <= pos && pos < c.start + c.len as u64)
    }

    /// Once the reader is in the second half of a chunk, the next
    /// [`READ_AHEAD_CHUNKS`] chunks not cached are kept in flight.
    fn read_ahead(&mut self, rt: &Runtime, pos: u64, size: u64, owner: u32) {
        let this = pos.saturating_sub(1) - pos.saturating_sub(1) % self.chunk;
        if pos < this + self.chunk / 2 {
            return;
        }
        for k in 1..=READ_AHEAD_CHUNKS as u64 {
            let next = this + k * self.chunk;
            if next >= size {
                break;
            }
            if self.cached(next).is_some() || self.ahead.iter().any(|(s, _, _)| *s == next) {
                continue;
            }
            // No read-ahead once the mount's read cache is all taken.
            let Some(held) = self.pool.reads.try_hold() else {
                return;
            };
            let mut buf = self.pool.take(self.chunk as usize);
            buf.len = buf.cap();
            // Never held for room (`start`, not `start_waiting`): a read-ahead the
            // full queue refuses (`EAGAIN`) is skipped; nobody waits for it.
            let Ok(t) = rt.start(
                Op::Read {
                    ino: self.ino,
                    offset: next,
                    buf: IoBuf::External(Box::new(buf)),
                },
                None,
                owner,
            ) else {
                return;
            };
            self.ahead.push_back((next, t, held));
        }
        // Read-ahead far behind the reader (it moved on) goes.
        while self.ahead.len() > 2 * READ_AHEAD_CHUNKS {
            let (_, t, _) = self.ahead.pop_front().expect("non-empty");
            self.drop_ahead(rt, t);
        }
    }

    /// A share of the mount's read cache for one more chunk of this file: a new one,
    /// else this file's oldest cached chunk's (the chunk dropped), else none.
    fn hold_chunk(&mut self) -> Option<crate::memory::Held> {
        if let Some(h) = self.pool.reads.try_hold() {
            return Some(h);
        }
        let old = self.cache.pop_front()?;
        self.pool.give(old.buf);
        Some(old._held)
    }

    /// Waits for a read-ahead nobody wants any more and keeps its buffer.
    fn drop_ahead(&self, rt: &Runtime, t: Ticket) {
        if let Ok(Some(done)) = rt.check(t, true) {
            if let Output::Read { buf, .. } = done.output {
                self.pool.give(buf);
            }
        }
    }

    /// One chunk read into a pooled buffer.
    fn chunk_read(&self, rt: &Runtime, offset: u64, owner: u32) -> Result<(IoBuf, usize), Errno> {
        let mut buf = self.pool.take(self.chunk as usize);
        buf.len = buf.cap();
        self.engine_read(rt, offset, IoBuf::External(Box::new(buf)), owner)
    }

    /// A read of `buf.len()` bytes at `offset`, waited for: the buffer back and how
    /// much of it the file filled.
    fn engine_read(
        &self,
        rt: &Runtime,
        offset: u64,
        buf: IoBuf,
        owner: u32,
    ) -> Result<(IoBuf, usize), Errno> {
        let op = Op::Read {
            ino: self.ino,
            offset,
            buf,
        };
        match rt.run_waiting(op, None, owner) {
            Ok(Output::Read { buf, bytes }) => Ok((buf, bytes)),
            Ok(other) => panic!("a read completed as {other:?}"),
            Err(e) => Err(read_errno(rt, &e)),
        }
    }
}
