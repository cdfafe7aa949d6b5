//! The blocking driver: the engine over a [`Device`], one operation at a time.
//!
//! [`Fs`] submits an operation, performs the device commands the engine hands out
//! (synchronously, in order), feeds back the completions and returns when the
//! operation is done. When the engine waits for a timer (a scheduler holding a
//! request, a commit interval) the driver sleeps on its [`Clock`]: the wall-clock
//! [`Clock`] of the CLI really sleeps, the [`ManualClock`] of the tests jumps. That is
//! the whole driver; every decision (planning, ordering, the commit pipeline) is the
//! engine's, so every test that goes through `Fs` exercises the engine.
//!
//! Queries (lookup, stat, readdir, info) are answered from memory through
//! `Deref<Target = Volume>`.

use crate::device::Device;
pub use crate::engine::Now;
use crate::engine::{DevKind, Engine, EngineConfig, IoBuf, Op, OpId, Output};
use crate::error::Result;
use crate::meta::Ino;
use crate::volume::{OpenMode, OpenOptions, SetAttr, Volume};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// The monotonic clock of a blocking driver.
pub trait Clock: Send {
    fn mono_ns(&self) -> u64;
    /// Wall-clock ns since the epoch: stamped on the events of the open (a
    /// recovery). 0 for a clock that has none (the tests' [`ManualClock`]).
    fn wall_ns(&self) -> i64 {
        0
    }
    /// Returns once the clock reads at least `mono_ns`.
    fn sleep_until(&self, mono_ns: u64);
}

/// A clock that only moves when told to, or when the driver waits on it (it then
/// jumps to the wake-up time). Clones share the time.
#[derive(Clone, Debug, Default)]
pub struct ManualClock(Arc<AtomicU64>);

impl ManualClock {
    pub fn new() -> ManualClock {
        ManualClock::default()
    }
    pub fn set(&self, mono_ns: u64) {
        self.0.fetch_max(mono_ns, Ordering::SeqCst);
    }
    pub fn advance(&self, ns: u64) {
        self.0.fetch_add(ns, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn mono_ns(&self) -> u64 {
        self.0.load(Ordering::SeqCst)
    }
    fn sleep_until(&self, mono_ns: u64) {
        self.set(mono_ns);
    }
}

/// Owner id of the blocking driver's operations.
const OWNER: u32 = 0;

/// The file system on a device, driven synchronously (see the module docs).
pub struct Fs<D: Device> {
    engine: Engine,
    dev: D,
    clock: Box<dyn Clock>,
    /// The wall-clock time of the operation being run (file timestamps).
    wall_ns: i64,
}

impl<D: Device> std::ops::Deref for Fs<D> {
    type Target = Volume;
    fn deref(&self) -> &Volume {
        self.engine.volume()
    }
}

impl<D: Device> Fs<D> {
    /// Opens the file system on `dev` with a [`ManualClock`] and the default engine,
    /// replaying the journal.
    pub fn open(dev: D, opts: OpenOptions) -> Result<Fs<D>> {
        Self::open_with(dev, opts, Box::new(ManualClock::new()), None)
    }

    /// Opens with a clock and an engine configuration of the caller's.
    pub fn open_with(
        dev: D,
        opts: OpenOptions,
        clock: Box<dyn Clock>,
        cfg: Option<EngineConfig>,
    ) -> Result<Fs<D>> {
        let (vol, replay) = Volume::load(&dev, &opts)?;
        let cfg = cfg.unwrap_or_else(|| EngineConfig::new(dev.sector_bytes()));
        let now = Now {
            mono_ns: clock.mono_ns(),
            wall_ns: clock.wall_ns(),
        };
        let engine = Engine::new(vol, replay, cfg, now)?;
        let mut fs = Fs {
            engine,
            dev,
            clock,
            wall_ns: now.wall_ns,
        };
        // A replayed transaction is checkpointed before open returns.
        while fs.engine.has_uncommitted() {
            fs.pump()?;
            if !fs.engine.has_uncommitted() {
                break;
            }
            let Some(t) = fs.engine.next_wakeup() else {
                panic!("engine stalled while checkpointing a replayed transaction (a dvrfs bug)");
            };
            fs.clock.sleep_until(t);
        }
        Ok(fs)
    }

    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    pub fn engine_mut(&mut self) -> &mut Engine {
        &mut self.engine
    }

    /// The metadata (mutable) and the device, for fsck.
    pub(crate) fn parts_mut(&mut self) -> (&mut Volume, &D) {
        (self.engine.volume_mut(), &self.dev)
    }

    pub fn device(&self) -> &D {
        &self.dev
    }

    pub fn device_mut(&mut self) -> &mut D {
        &mut self.dev
    }

    fn now(&self) -> Now {
        Now {
            mono_ns: self.clock.mono_ns(),
            wall_ns: self.wall_ns,
        }
    }

    /// Performs every device command the engine has ready now.
    fn pump(&mut self) -> Result<()> {
        loop {
            let now = self.now();
            let Some(cmd) = self.engine.poll(now) else {
                return Ok(());
            };
            let dev = &mut self.dev;
            let r = match cmd.kind {
                DevKind::Flush => dev.flush(),
                DevKind::Write => self.engine.io_write(cmd.id, |o, b| dev.write_at(o, b)),
                DevKind::Read => self.engine.io_read(cmd.id, |o, b| dev.read_at(o, b)),
            };
            let now = self.now();
            self.engine.complete(cmd.id, r, now);
        }
    }

    /// Runs one operation to its completion.
    fn run(&mut self, op: Op, deadline_ns: Option<u64>, wall_ns: i64) -> Result<Output> {
        self.wall_ns = wall_ns;
        let id = self.engine.submit(op, deadline_ns, OWNER, self.now())?;
        self.wait_for(id)
    }

    fn wait_for(&mut self, id: OpId) -> Result<Output> {
        loop {
            self.pump()?;
            while let Some(c) = self.engine.take_completion() {
                if c.op == id {
                    return c.result;
                }
            }
            match self.engine.next_wakeup() {
                Some(t) => self.clock.sleep_until(t),
                None => panic!("engine stalled: operation {id} cannot progress (a dvrfs bug)"),
            }
        }
    }

    /// [`Fs::tick`] with the wall clock at `wall_ns` (what retention's max-age is
    /// measured against).
    pub fn tick_at(&mut self, wall_ns: i64) -> Result<()> {
        self.wall_ns = wall_ns;
        self.tick()
    }

    /// Runs due work (a commit whose interval has passed) at the clock's time.
    pub fn tick(&mut self) -> Result<()> {
        self.pump()?;
        while self.engine.take_completion().is_some() {}
        Ok(())
    }

    /// Reads up to `buf.len()` bytes at `offset`; returns the count (0 at or past EOF).
    pub fn read(&mut self, ino: Ino, offset: u64, buf: &mut [u8]) -> Result<usize> {
        let (b, n) = self.read_buf(ino, offset, IoBuf::zeroed(buf.len()))?;
        if let Some(bytes) = b.bytes() {
            buf[..n].copy_from_slice(&bytes[..n]);
        }
        Ok(n)
    }

    /// Reads into an owned buffer without copying; returns it and the byte count.
    pub fn read_buf(&mut self, ino: Ino, offset: u64, buf: IoBuf) -> Result<(IoBuf, usize)> {
        match self.run(Op::Read { ino, offset, buf }, None, self.wall_ns)? {
            Output::Read { buf, bytes } => Ok((buf, bytes)),
            o => unreachable!("a read returned {o:?}"),
        }
    }

    /// Writes `data` at `offset`, allocating blocks as needed. Either the whole write
    /// is done or, on an error found before any change (no space), nothing is.
    pub fn write(&mut self, ino: Ino, offset: u64, data: &[u8], now_ns: i64) -> Result<()> {
        self.write_buf(ino, offset, IoBuf::from_slice(data), now_ns)
            .map(|_| ())
    }

    /// Writes an owned buffer without copying it; returns it for reuse.
    pub fn write_buf(&mut self, ino: Ino, offset: u64, data: IoBuf, now_ns: i64) -> Result<IoBuf> {
        match self.run(Op::Write { ino, offset, data }, None, now_ns)? {
            Output::Write { data } => Ok(data),
            o => unreachable!("a write returned {o:?}"),
        }
    }

    /// Sets the size of a file: blocks past the new end are freed; growing reads as zeros.
    pub fn truncate(&mut self, ino: Ino, size_bytes: u64, now_ns: i64) -> Result<()> {
        self.run(Op::Truncate { ino, size_bytes }, None, now_ns)
            .map(|_| ())
    }

    fn new_ino(&mut self, op: Op, now_ns: i64) -> Result<Ino> {
        match self.run(op, None, now_ns)? {
            Output::Ino(i) => Ok(i),
            o => unreachable!("a create returned {o:?}"),
        }
    }

    /// Creates an empty regular file.
    pub fn create(
        &mut self,
        parent: Ino,
        name: &[u8],
        perm: u32,
        uid: u32,
        gid: u32,
        now_ns: i64,
    ) -> Result<Ino> {
        let name = name.to_vec();
        self.new_ino(
            Op::Create {
                parent,
                name,
                perm,
                uid,
                gid,
            },
            now_ns,
        )
    }

    pub fn mkdir(
        &mut self,
        parent: Ino,
        name: &[u8],
        perm: u32,
        uid: u32,
        gid: u32,
        now_ns: i64,
    ) -> Result<Ino> {
        let name = name.to_vec();
        self.new_ino(
            Op::Mkdir {
                parent,
                name,
                perm,
                uid,
                gid,
            },
            now_ns,
        )
    }

    pub fn symlink(
        &mut self,
        parent: Ino,
        name: &[u8],
        target: &[u8],
        uid: u32,
        gid: u32,
        now_ns: i64,
    ) -> Result<Ino> {
        let (name, target) = (name.to_vec(), target.to_vec());
        self.new_ino(
            Op::Symlink {
                parent,
                name,
                target,
                uid,
                gid,
            },
            now_ns,
        )
    }

    /// Removes a name of a file or symlink; the inode goes when its last name does.
    pub fn unlink(&mut self, parent: Ino, name: &[u8], now_ns: i64) -> Result<()> {
        let name = name.to_vec();
        self.run(Op::Unlink { parent, name }, None, now_ns)
            .map(|_| ())
    }

    pub fn rmdir(&mut self, parent: Ino, name: &[u8], now_ns: i64) -> Result<()> {
        let name = name.to_vec();
        self.run(Op::Rmdir { parent, name }, None, now_ns)
            .map(|_| ())
    }

    /// Moves `src_parent/src_name` to `dst_parent/dst_name` (POSIX rename).
    pub fn rename(
        &mut self,
        src_parent: Ino,
        src_name: &[u8],
        dst_parent: Ino,
        dst_name: &[u8],
        now_ns: i64,
    ) -> Result<()> {
        let op = Op::Rename {
            src_parent,
            src_name: src_name.to_vec(),
            dst_parent,
            dst_name: dst_name.to_vec(),
        };
        self.run(op, None, now_ns).map(|_| ())
    }

    pub fn set_attr(&mut self, ino: Ino, set: &SetAttr, now_ns: i64) -> Result<()> {
        let set = set.clone();
        self.run(Op::SetAttr { ino, set }, None, now_ns).map(|_| ())
    }

    /// Appends keyframes to file `ino`'s frame index (`Op::AppendFrames`).
    pub fn append_frames(
        &mut self,
        ino: Ino,
        entries: &[crate::format::frame_index::FrameEntry],
        now_ns: i64,
    ) -> Result<()> {
        let entries = entries.to_vec();
        self.run(Op::AppendFrames { ino, entries }, None, now_ns)
            .map(|_| ())
    }

    /// Sets the volume's retention policy (`Op::SetVolumeRetention`).
    pub fn set_volume_retention(
        &mut self,
        r: crate::format::superblock::VolumeRetention,
        now_ns: i64,
    ) -> Result<()> {
        self.run(Op::SetVolumeRetention(r), None, now_ns)
            .map(|_| ())
    }

    /// Protects the chunks of the stream in `dir` that meet UTC `from ..= to`
    /// (`Op::Protect`).
    pub fn protect(
        &mut self,
        dir: Ino,
        (from_utc_ns, to_utc_ns): (i64, i64),
        protection: crate::format::inode::Protection,
        now_ns: i64,
    ) -> Result<crate::retention::Covered> {
        let op = Op::Protect {
            dir,
            from_utc_ns,
            to_utc_ns,
            protection,
            restate: false,
        };
        match self.run(op, None, now_ns)? {
            Output::Covered(c) => Ok(c),
            o => unreachable!("protect gave {o:?}"),
        }
    }

    /// Removes protection `id` from every chunk that carries it (`Op::Unprotect`,
    /// its parts one after another): what it uncovered in all.
    pub fn unprotect(&mut self, id: u32, now_ns: i64) -> Result<crate::retention::Covered> {
        let mut all = crate::retention::Covered::default();
        loop {
            let c = match self.run(Op::Unprotect { id }, None, now_ns)? {
                Output::Covered(c) => c,
                o => unreachable!("unprotect gave {o:?}"),
            };
            if all.chunks == 0 {
                all.first_utc_ns = c.first_utc_ns;
            }
            all.chunks += c.chunks;
            all.bytes += c.bytes;
            all.last_utc_ns = all.last_utc_ns.max(c.last_utc_ns);
            if !c.more {
                return Ok(all);
            }
        }
    }

    /// Drops file `ino`'s frame index (`Op::DropFrameIndex`).
    pub fn drop_frame_index(&mut self, ino: Ino, incomplete: bool, now_ns: i64) -> Result<()> {
        self.run(Op::DropFrameIndex { ino, incomplete }, None, now_ns)
            .map(|_| ())
    }

    /// File `ino`'s frame index, if it has one.
    pub fn frame_index(&self, ino: Ino) -> Result<Option<&crate::meta::frame_index::FrameIndex>> {
        self.engine.volume().frame_index(ino)
    }

    /// What file `ino`'s frame index holds.
    pub fn frame_info(&self, ino: Ino) -> Result<crate::volume::FrameInfo> {
        self.engine.volume().frame_info(ino)
    }

    /// A new name `parent/name` for regular file `ino` (a hard link).
    pub fn link(&mut self, ino: Ino, parent: Ino, name: &[u8], now_ns: i64) -> Result<()> {
        let name = name.to_vec();
        self.run(Op::Link { ino, parent, name }, None, now_ns)
            .map(|_| ())
    }

    /// A handle on the file is opened (`mode`: see [`OpenMode`]): removing its last
    /// name keeps it until the matching [`Fs::close_file`].
    pub fn open_file(&mut self, ino: Ino, mode: OpenMode) -> Result<()> {
        self.run(Op::OpenFile { ino, mode }, None, self.wall_ns)
            .map(|_| ())
    }

    /// The file is closed: unused preallocation (contig) goes back to the free pool,
    /// and a file unlinked while open is freed at its last close.
    pub fn close_file(&mut self, ino: Ino, mode: OpenMode) -> Result<()> {
        self.run(Op::CloseFile { ino, mode }, None, self.wall_ns)
            .map(|_| ())
    }

    /// Commits every operation so far (data flushed, journal written, checkpointed),
    /// now.
    pub fn sync(&mut self) -> Result<()> {
        let now = self.clock.mono_ns();
        self.run(Op::Fsync, Some(now), self.wall_ns).map(|_| ())
    }

    /// Commits pending operations, marks the journal empty (a clean unmount: the next
    /// open replays nothing and reads every block from its home) and gives the device
    /// back.
    pub fn close(mut self) -> Result<D> {
        if self.engine.volume().is_writable() {
            let now = self.clock.mono_ns();
            self.run(Op::Unmount, Some(now), self.wall_ns)?;
        }
        Ok(self.dev)
    }

    /// Drops all state without committing: what a crash does to memory.
    pub fn crash(self) -> D {
        self.dev
    }
}
