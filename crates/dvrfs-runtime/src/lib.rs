//! The runtime: the engine on a real device, in real time.
//!
//! The third driver of [`Engine`] (the simulator and the blocking driver are the
//! other two), so the code measured in virtual time is the code that runs. One
//! dispatcher thread owns the engine and the device. Everything else talks to it
//! with messages:
//!
//! ```text
//!   API threads ──Msg──▶ channel ─┐            ┌─ io_uring ring (O_DIRECT fd) ─┐
//!        ▲        (+ eventfd)     ▼            │                               │
//!        │                  dispatcher: submit ops, poll commands ──SQE──▶ kernel
//!        └── results ◀── shared table ◀── take completions ◀──CQE── complete ◀┘
//! ```
//!
//! The dispatcher loop: take the messages (start, cancel, query, close), hand every
//! command the engine has ready to the back end, file the finished operations where
//! the waiting threads find them, then sleep until a device completion, a message, or
//! the engine's [`Engine::next_wakeup`] (a held request, a commit interval), whichever
//! comes first. Time is the monotonic clock from the runtime's start; deadlines are
//! [`Instant`]s. The engine makes every decision: the driver only moves bytes and time.
//!
//! Two back ends do the I/O. **io_uring** (the `io-uring` crate): a command becomes
//! one `readv`/`writev` per run of contiguous pieces, a flush an `fsync(DATASYNC)`; the
//! eventfd read and the wait timeout (`IORING_ENTER_EXT_ARG`) wake the loop. Where
//! io_uring is unavailable (an old kernel, a seccomp filter, `io_uring_disabled`) a
//! pool of `queue_depth` threads doing `preadv`/`pwritev`/`fdatasync` takes its place;
//! [`Backend::Auto`] chooses, and [`Runtime::backend`] says which one runs.
//!
//! Buffers: a command's bytes live in the engine (the operation's buffer or one of the
//! engine's own), and the engine keeps every buffer of a command in flight alive and in
//! place until [`Engine::complete`] (a cancelled read waits for its pieces in flight),
//! so the kernel may read and write them meanwhile. A piece that `O_DIRECT` cannot
//! take (a buffer not aligned to the sector size) makes its whole command go through
//! the device's own bounce path, synchronously, in the dispatcher.

//!
//! ```no_run
//! use dvrfs_core::{IoBuf, Op, Output};
//! use dvrfs_runtime::{Options, Runtime};
//! use std::time::{Duration, Instant};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let rt = Runtime::open("cam.img".as_ref(), Options::default())?;
//! let root = rt.query(|v| v.resolve("/"))??;
//! let create = Op::Create { parent: root, name: b"cam1.ts".to_vec(), perm: 0o644, uid: 0, gid: 0 };
//! let Output::Ino(ino) = rt.run(create, None, 0)? else { unreachable!() };
//! // A recorder's write: 512 KiB, due within two seconds (owner 1 = this stream).
//! let data = IoBuf::from_slice(&[0u8; 512 << 10]);
//! let t = rt.start(Op::Write { ino, offset: 0, data }, Some(Instant::now() + Duration::from_secs(2)), 1)?;
//! // ... more requests ...
//! let done = rt.check(t, true)?.expect("waited"); // `check(t, false)` only looks
//! assert!(!done.late, "the write finished after its deadline");
//! rt.close()?; // commits and marks the journal clean
//! # Ok(())
//! # }
//! ```

use dvrfs_core::device::Device;
use dvrfs_core::disk::{Access, Admission, DiskModel, Energy, EnergyMeter};
use dvrfs_core::engine::{DevCommand, DevKind, Now, StreamId, StreamInfo, StreamSpec, StreamStats};
use dvrfs_core::sim::{DiskTimer, HddDisk};
use dvrfs_core::volume::OpenOptions;
use dvrfs_core::{Engine, EngineConfig, Op, OpId, Output, Volume};
use dvrfs_io::{FileDevice, LockMode, OpenError};
use std::collections::{HashMap, VecDeque};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

mod dispatcher;
mod status;
mod threads;
mod uring;

use dispatcher::{Dispatcher, Emulated, Io};
pub(crate) use dispatcher::{IoJob, Run};

/// Which back end does the I/O.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    /// io_uring where the kernel allows it, else the thread pool.
    Auto,
    IoUring,
    Threads,
}

impl Backend {
    pub fn name(self) -> &'static str {
        match self {
            Backend::Auto => "auto",
            Backend::IoUring => "io_uring",
            Backend::Threads => "threads",
        }
    }
}

/// The back end [`Backend::Auto`] would choose on this kernel, and why not io_uring
/// when it is the thread pool.
pub fn available_backend() -> (Backend, Option<String>) {
    match uring::probe() {
        Ok(()) => (Backend::IoUring, None),
        Err(why) => (Backend::Threads, Some(why)),
    }
}

/// How to open a runtime.
pub struct Options {
    pub writable: bool,
    pub backend: Backend,
    /// Device commands in flight at once: 1 for a hard disk (the scheduler decides
    /// the order, not the drive), more for an SSD.
    pub queue_depth: u32,
    /// The engine's configuration (scheduler, settings, estimate); `None`: the default.
    pub engine: Option<EngineConfig>,
    /// Emulate this hard disk: the data is real (in the image), but each command is
    /// completed only when the model says the disk would have finished it, in
    /// wall-clock time. Byte offsets of the image are the model's (a small image lies
    /// on the outer tracks). Needs `queue_depth` 1, like the disk it stands for.
    pub device_model: Option<DiskModel>,
    /// How stream reservations are admitted. `None`: on the emulated disk's model
    /// when there is one, else as the engine configuration says (by default every
    /// stream is refused, with a message saying how to give a model or bandwidth).
    pub admission: Option<Admission>,
    /// Seed of the emulated disk's rare slow accesses (the simulator's `--seed`).
    pub device_seed: u64,
    /// Keep the per-request samples of the engine's recorder (margins, latencies, seek
    /// distances) that `bench` reports from. A long-running driver (the mount) keeps
    /// the counters only: a sample per request would grow without bound.
    pub keep_samples: bool,
    /// The budget of the stream buffers (`Engine::set_stream_memory_bytes`): a
    /// stream whose buffer would take them past it is refused. `None`: unlimited.
    pub stream_memory_bytes: Option<u64>,
    /// Operations tracked at once, started and finished ones whose result no one has
    /// taken yet: past it [`Runtime::start`] refuses with `Busy`. At least 1;
    /// [`MAX_TICKETS`] by default.
    pub max_tickets: usize,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            writable: true,
            backend: Backend::Auto,
            queue_depth: 1,
            engine: None,
            device_model: None,
            admission: None,
            device_seed: 1,
            keep_samples: true,
            stream_memory_bytes: None,
            max_tickets: MAX_TICKETS,
        }
    }
}

/// What went wrong, for a caller of the runtime.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    #[error(transparent)]
    Open(#[from] OpenError),
    /// The engine refused or failed the operation (its own message says why).
    #[error(transparent)]
    Engine(#[from] dvrfs_core::Error),
    #[error("{0}")]
    Io(#[from] io::Error),
    /// The dispatcher has stopped (closed, or a device failure it could not survive).
    #[error("the dvrfs runtime has stopped: {0}")]
    Stopped(String),
    #[error(
        "no such operation: ticket {0} was never started here, or its result was already taken"
    )]
    UnknownTicket(OpId),
}

pub type Result<T> = std::result::Result<T, RuntimeError>;

/// Most operations the runtime tracks at once by default ([`Options::max_tickets`]),
/// started and finished ones whose result no one has taken yet ([`Runtime::check`]).
/// Past it [`Runtime::start`] refuses with
/// [`dvrfs_core::Error::Busy`] (`EAGAIN`) until results are taken. A ticket whose
/// result is never collected keeps its place until the runtime closes: a caller that
/// drops tickets leaks its places and is refused in the end, never anyone's result.
pub const MAX_TICKETS: usize = 1 << 16;

/// A started operation; [`Runtime::check`] gives its result once. Its result stays
/// in the runtime's table (one of [`MAX_TICKETS`] places) until it is taken.
#[must_use = "a ticket's result holds a place in the runtime until `check` takes it"]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Ticket(pub OpId);

/// A finished operation, as [`Runtime::check`] gives it.
#[derive(Debug)]
pub struct Done {
    pub output: Output,
    /// It had a deadline and finished after it: a write is done all the same (never
    /// dropped), and this says it was late; a late read fails instead.
    pub late: bool,
    /// When it was started and when it finished, ns of [`Runtime::now_ns`].
    pub submit_ns: u64,
    pub done_ns: u64,
}

type Query = Box<dyn FnOnce(&Engine) + Send>;

/// Told an operation's ticket once its result is ready (see [`Runtime::start_notify`]).
pub type Notify = Box<dyn FnOnce(Ticket) + Send>;

/// A request to start an operation, as the dispatcher receives it.
struct Start {
    op: Op,
    deadline_ns: Option<u64>,
    owner: u32,
    reply: Sender<dvrfs_core::Result<OpId>>,
    notify: Option<Notify>,
    /// Hold it while the runtime or the engine is full instead of refusing it
    /// ([`Runtime::start_waiting`]).
    wait_room: bool,
}

enum Msg {
    Start(Start),
    Cancel {
        id: OpId,
        reply: Sender<dvrfs_core::Result<()>>,
    },
    Query(Query),
    /// The emulated disk's energy so far (`None`: no model, or one without power).
    Energy(Sender<Option<Energy>>),
    /// Commit, mark the journal clean and stop.
    Close,
    /// A thread-pool command finished.
    IoDone(u64, io::Result<()>),
}

/// Results of finished operations, waiting for their callers.
#[derive(Default)]
struct Table {
    done: HashMap<OpId, dvrfs_core::Result<Done>>,
    /// Started and not yet finished.
    running: std::collections::HashSet<OpId>,
    /// Why the dispatcher stopped, once it has.
    stopped: Option<String>,
}

struct Shared {
    table: Mutex<Table>,
    cv: Condvar,
    /// Commands handed to the back end, and those that took the bounce path.
    commands: AtomicU64,
    bounced: AtomicU64,
    /// Starts held for room ([`Runtime::start_waiting`]).
    held: AtomicU64,
}

/// What the dispatcher has done so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Device commands handed to the back end (reads, writes, flushes).
    pub commands: u64,
    /// Commands with a piece `O_DIRECT` could not take as it was, done through the
    /// device's aligned bounce buffer instead.
    pub bounced: u64,
    /// Starts [`Runtime::start_waiting`] held until room freed (they would have been
    /// refused with `EAGAIN`).
    pub held: u64,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Table> {
        // A panic elsewhere while holding the lock leaves a table that is still
        // consistent (every update is a single insert or remove).
        self.table.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The engine on a device, driven by a dispatcher thread (see the module docs).
/// Safe to use from many threads at once (`&Runtime` is `Sync`).
pub struct Runtime {
    tx: Mutex<Sender<Msg>>,
    waker: Option<Arc<OwnedFd>>,
    shared: Arc<Shared>,
    origin: Instant,
    backend: Backend,
    thread: Option<JoinHandle<()>>,
}

impl Runtime {
    /// Opens the file system on `path` (an image file or block device, `O_DIRECT`),
    /// replays its journal, and starts the dispatcher.
    pub fn open(path: &Path, opts: Options) -> Result<Runtime> {
        let lock = if opts.writable {
            LockMode::Exclusive
        } else {
            LockMode::Shared
        };
        let dev = FileDevice::open(path, opts.writable, lock)?;
        Self::with_device(dev, opts)
    }

    /// As [`Runtime::open`], on a device the caller opened (`opts.writable` must match
    /// how it was opened).
    pub fn with_device(dev: FileDevice, opts: Options) -> Result<Runtime> {
        let open_opts = if opts.writable {
            OpenOptions::writable()
        } else {
            OpenOptions::read_only()
        };
        let (vol, replay) = Volume::load(&dev, &open_opts)?;
        let mut cfg = opts
            .engine
            .unwrap_or_else(|| EngineConfig::new(dev.sector_bytes()));
        cfg.sector_bytes = dev.sector_bytes();
        if opts.queue_depth == 0 {
            return Err(dvrfs_core::Error::InvalidArgument(
                "queue depth 0: at least one command must be able to run".into(),
            )
            .into());
        }
        if opts.max_tickets == 0 {
            return Err(dvrfs_core::Error::InvalidArgument(
                "max_tickets 0: the runtime must be able to track one operation".into(),
            )
            .into());
        }
        if opts.device_model.is_some() && opts.queue_depth != 1 {
            return Err(dvrfs_core::Error::InvalidArgument(format!(
                "queue depth {}: an emulated hard disk takes one command at a time",
                opts.queue_depth
            ))
            .into());
        }
        cfg.settings.queue_depth = opts.queue_depth;
        let be_share = cfg.settings.be_share;
        cfg.admission = opts
            .admission
            .clone()
            .or_else(|| {
                opts.device_model
                    .as_ref()
                    .map(|m| Admission::from_model(m, be_share))
            })
            .or(cfg.admission);
        let cfg_max_ops = cfg.max_ops.max(1);
        let origin = Instant::now();
        let mut engine = Engine::new(vol, replay, cfg, now(origin))?;
        engine.qos_mut().counts_only = !opts.keep_samples;
        engine.set_stream_memory_bytes(opts.stream_memory_bytes);
        let (tx, rx) = mpsc::channel();
        let (io, backend, waker) = match opts.backend {
            Backend::Threads => (
                threads_io(&dev, opts.queue_depth, &tx)?,
                Backend::Threads,
                None,
            ),
            Backend::IoUring => {
                let u = uring::Uring::new(dev.as_raw_fd(), opts.queue_depth)?;
                let w = u.waker();
                (Io::Uring(Box::new(u)), Backend::IoUring, Some(w))
            }
            Backend::Auto => match uring::Uring::new(dev.as_raw_fd(), opts.queue_depth) {
                Ok(u) => {
                    let w = u.waker();
                    (Io::Uring(Box::new(u)), Backend::IoUring, Some(w))
                }
                Err(_) => (
                    threads_io(&dev, opts.queue_depth, &tx)?,
                    Backend::Threads,
                    None,
                ),
            },
        };
        let shared = Arc::new(Shared {
            table: Mutex::new(Table::default()),
            cv: Condvar::new(),
            commands: AtomicU64::new(0),
            bounced: AtomicU64::new(0),
            held: AtomicU64::new(0),
        });
        let d = Dispatcher {
            engine,
            dev,
            io,
            rx,
            inbox: VecDeque::new(),
            shared: shared.clone(),
            origin,
            closing: None,
            in_flight: 0,
            emulated: opts.device_model.map(|m| Emulated {
                sector_bytes: m.sector_bytes as u64,
                disk: HddDisk::new(&m, opts.device_seed),
                // From now, never spinning down (a runtime under load does not idle
                // that long; `dvrfs emulate` models standby).
                meter: m
                    .power
                    .map(|p| EnergyMeter::new(&p, now(origin).mono_ns, None)),
                due: HashMap::new(),
                held: std::collections::BTreeMap::new(),
            }),
            notify: HashMap::new(),
            max_tickets: opts.max_tickets,
            max_ops: cfg_max_ops,
            held: VecDeque::new(),
        };
        let thread = std::thread::Builder::new()
            .name("dvrfs-dispatch".into())
            .spawn(move || d.run())?;
        Ok(Runtime {
            tx: Mutex::new(tx),
            waker,
            shared,
            origin,
            backend,
            thread: Some(thread),
        })
    }

    /// The back end doing the I/O (`IoUring` or `Threads`, never `Auto`).
    pub fn backend(&self) -> Backend {
        self.backend
    }

    pub fn stats(&self) -> Stats {
        Stats {
            commands: self.shared.commands.load(Ordering::Relaxed),
            bounced: self.shared.bounced.load(Ordering::Relaxed),
            held: self.shared.held.load(Ordering::Relaxed),
        }
    }

    /// The runtime's monotonic time, ns since it started (the engine's clock).
    pub fn now_ns(&self) -> u64 {
        now(self.origin).mono_ns
    }

    fn send(&self, m: Msg) -> Result<()> {
        let sent = self
            .tx
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .send(m)
            .is_ok();
        if !sent {
            return Err(self.stopped());
        }
        if let Some(w) = &self.waker {
            uring::wake(w.as_raw_fd());
        }
        Ok(())
    }

    fn stopped(&self) -> RuntimeError {
        let why = self.shared.lock().stopped.clone();
        RuntimeError::Stopped(why.unwrap_or_else(|| "closed".into()))
    }

    /// Starts an operation (AVFS `aio_start`). `deadline`: when it must be done; a
    /// read that cannot make it fails with `DeadlineMissed`, a write is never dropped
    /// and is reported late. `None`: best effort. `owner` identifies the stream or
    /// client (the schedulers keep per-owner state).
    pub fn start(&self, op: Op, deadline: Option<Instant>, owner: u32) -> Result<Ticket> {
        self.start_with(op, deadline, owner, None)
    }

    /// As [`Runtime::start`], and `notify` is called with the ticket once the result
    /// is ready for [`Runtime::check`] (or the runtime stopped, when `check` says
    /// why). A caller that must not hold a thread while the operation waits (a FUSE
    /// request waiting for a stream's rate) parks its work and lets `notify` wake it.
    /// `notify` runs on the dispatcher's thread: it must be quick and must not call
    /// the runtime (a channel send).
    pub fn start_notify(
        &self,
        op: Op,
        deadline: Option<Instant>,
        owner: u32,
        notify: Notify,
    ) -> Result<Ticket> {
        self.start_with(op, deadline, owner, Some(notify))
    }

    /// As [`Runtime::start`], but where the runtime or the engine is full, the
    /// dispatcher holds the request and starts it once room frees, and this call
    /// returns then: the caller never sees `EAGAIN`. For a driver whose callers do not
    /// retry (the FUSE mount: `cp` and `ffmpeg` fail on a write's `EAGAIN`); the C
    /// API refuses with `EAGAIN` instead. Full means: [`Options::max_tickets`]
    /// operations *running*, the engine's operation bound
    /// ([`dvrfs_core::Error::QueueFull`]), or, for a read, write or truncate, the
    /// operations' share of its disk queue ([`dvrfs_core::Error::Busy`]).
    ///
    /// Every one of these frees as the disk works, whoever takes the results: the
    /// ticket bound counts only running operations here, not finished ones whose
    /// results wait to be taken (as it does for [`Runtime::start`]). Otherwise a
    /// waiting request could wait for a result that only another request, stuck
    /// behind it (a FUSE session thread, a file's lock), would take. So the caller
    /// must bound its own untaken results (the mount: one write and a few reads
    /// ahead per open file), as it bounds its memory.
    ///
    /// No polling: the held starts are tried, oldest first, each time the
    /// dispatcher has taken a device completion or a message and filed the finished
    /// operations. An operation that plans more disk requests than the queue has
    /// room for when it starts still fails with `Busy`
    /// (`dvrfs_core::engine::bounds`; far past the default bound).
    pub fn start_waiting(&self, op: Op, deadline: Option<Instant>, owner: u32) -> Result<Ticket> {
        self.start_msg(op, deadline, owner, None, true)
    }

    /// As [`Runtime::run`], waiting for room as [`Runtime::start_waiting`] does.
    pub fn run_waiting(&self, op: Op, deadline: Option<Instant>, owner: u32) -> Result<Output> {
        let t = self.start_waiting(op, deadline, owner)?;
        Ok(self
            .check(t, true)?
            .expect("a waited result is present")
            .output)
    }

    fn start_with(
        &self,
        op: Op,
        deadline: Option<Instant>,
        owner: u32,
        notify: Option<Notify>,
    ) -> Result<Ticket> {
        self.start_msg(op, deadline, owner, notify, false)
    }

    fn start_msg(
        &self,
        op: Op,
        deadline: Option<Instant>,
        owner: u32,
        notify: Option<Notify>,
        wait_room: bool,
    ) -> Result<Ticket> {
        let deadline_ns =
            deadline.map(|d| d.saturating_duration_since(self.origin).as_nanos() as u64);
        let (reply, rx) = mpsc::channel();
        self.send(Msg::Start(Start {
            op,
            deadline_ns,
            owner,
            reply,
            notify,
            wait_room,
        }))?;
        let id = rx.recv().map_err(|_| self.stopped())??;
        Ok(Ticket(id))
    }

    /// The operation's result if it has finished (AVFS `aio_check`); with `wait`,
    /// waits for it. A result is given once.
    pub fn check(&self, t: Ticket, wait: bool) -> Result<Option<Done>> {
        let mut table = self.shared.lock();
        loop {
            if let Some(r) = table.done.remove(&t.0) {
                return Ok(Some(r?));
            }
            if !table.running.contains(&t.0) {
                if let Some(why) = &table.stopped {
                    return Err(RuntimeError::Stopped(why.clone()));
                }
                return Err(RuntimeError::UnknownTicket(t.0));
            }
            if !wait {
                return Ok(None);
            }
            table = self
                .shared
                .cv
                .wait(table)
                .unwrap_or_else(|e| e.into_inner());
        }
    }

    /// Runs one operation to its end.
    pub fn run(&self, op: Op, deadline: Option<Instant>, owner: u32) -> Result<Output> {
        let t = self.start(op, deadline, owner)?;
        Ok(self
            .check(t, true)?
            .expect("a waited result is present")
            .output)
    }

    /// Cancels an operation (AVFS `aio_cancel`): a queued read or the newest queued
    /// write of a file is withdrawn and finishes with `Cancelled`; one already on the
    /// device cannot be (an error says so).
    pub fn cancel(&self, t: Ticket) -> Result<()> {
        let (reply, rx) = mpsc::channel();
        self.send(Msg::Cancel { id: t.0, reply })?;
        Ok(rx.recv().map_err(|_| self.stopped())??)
    }

    /// Waits until at least one of `tickets` has finished, or `timeout` passes (AVFS
    /// `aio_poll`); returns the indices of the finished ones (empty on timeout).
    pub fn poll(&self, tickets: &[Ticket], timeout: Option<Duration>) -> Result<Vec<usize>> {
        let until = timeout.map(|t| Instant::now() + t);
        let mut table = self.shared.lock();
        loop {
            let ready: Vec<usize> = (0..tickets.len())
                .filter(|&i| table.done.contains_key(&tickets[i].0))
                .collect();
            if !ready.is_empty() {
                return Ok(ready);
            }
            if let Some(why) = &table.stopped {
                return Err(RuntimeError::Stopped(why.clone()));
            }
            if let Some(t) = tickets.iter().find(|t| !table.running.contains(&t.0)) {
                return Err(RuntimeError::UnknownTicket(t.0));
            }
            match until {
                None => {
                    table = self
                        .shared
                        .cv
                        .wait(table)
                        .unwrap_or_else(|e| e.into_inner())
                }
                Some(u) => {
                    let left = u.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return Ok(Vec::new());
                    }
                    table = self
                        .shared
                        .cv
                        .wait_timeout(table, left)
                        .unwrap_or_else(|e| e.into_inner())
                        .0;
                }
            }
        }
    }

    /// Answers a question from the metadata in memory (lookup, stat, readdir), in
    /// the dispatcher, between its steps.
    pub fn query<R: Send + 'static>(
        &self,
        f: impl FnOnce(&Volume) -> R + Send + 'static,
    ) -> Result<R> {
        let (reply, rx) = mpsc::channel();
        self.send(Msg::Query(Box::new(move |e: &Engine| {
            let _ = reply.send(f(e.volume()));
        })))?;
        rx.recv().map_err(|_| self.stopped())
    }

    /// Opens a stream reservation on file `ino` (see `dvrfs_core::engine::StreamSpec`):
    /// admitted, or refused with [`dvrfs_core::Error::Refused`] saying what was asked
    /// and what is left ([`dvrfs_core::Error::NoSpace`] when a recording's size does
    /// not fit). Then `Op::StreamRead` / `Op::StreamWrite` move its data at its rate
    /// and `Op::StreamClose` ends it.
    pub fn open_stream(&self, ino: dvrfs_core::meta::Ino, spec: StreamSpec) -> Result<StreamInfo> {
        match self.run(Op::StreamOpen { ino, spec }, None, 0)? {
            Output::Stream(info) => Ok(info),
            other => Err(RuntimeError::Io(io::Error::other(format!(
                "stream open returned {other:?}"
            )))),
        }
    }

    /// A stream's reservation and how it has fared so far (`None` once it is closed).
    pub fn stream(&self, sid: StreamId) -> Result<Option<(StreamInfo, StreamStats)>> {
        let (reply, rx) = mpsc::channel();
        self.send(Msg::Query(Box::new(move |e: &Engine| {
            let _ = reply.send(e.stream_info(sid).map(|(i, s)| (i.clone(), s.clone())));
        })))?;
        rx.recv().map_err(|_| self.stopped())
    }

    /// Runs `f` on the engine in the dispatcher, between its steps (its QoS recorder,
    /// its scheduler's figures): what `bench` reports from.
    pub fn inspect<R: Send + 'static>(
        &self,
        f: impl FnOnce(&Engine) -> R + Send + 'static,
    ) -> Result<R> {
        let (reply, rx) = mpsc::channel();
        self.send(Msg::Query(Box::new(move |e: &Engine| {
            let _ = reply.send(f(e));
        })))?;
        rx.recv().map_err(|_| self.stopped())
    }

    /// What stream admission is checked against (`None`: streams are refused).
    pub fn admission(&self) -> Result<Option<Admission>> {
        let (reply, rx) = mpsc::channel();
        self.send(Msg::Query(Box::new(move |e: &Engine| {
            let _ = reply.send(e.admission().cloned());
        })))?;
        rx.recv().map_err(|_| self.stopped())
    }

    /// The emulated disk's energy from the runtime's start to now, by the model's
    /// `power` figures (`None`: no `device_model`, or a model without power figures).
    /// Two reports subtract ([`Energy::since`]) to the energy of the time between.
    pub fn disk_energy(&self) -> Result<Option<Energy>> {
        let (reply, rx) = mpsc::channel();
        self.send(Msg::Energy(reply))?;
        rx.recv().map_err(|_| self.stopped())
    }

    /// Commits everything, marks the journal clean (the next open replays nothing)
    /// and stops the dispatcher. Operations still running finish first.
    pub fn close(mut self) -> Result<()> {
        self.shutdown()
    }

    fn shutdown(&mut self) -> Result<()> {
        let Some(thread) = self.thread.take() else {
            return Ok(());
        };
        let _ = self.send(Msg::Close);
        let _ = thread.join();
        let why = self.shared.lock().stopped.clone();
        match why.as_deref() {
            Some("closed") | None => Ok(()),
            Some(w) => Err(RuntimeError::Stopped(w.to_string())),
        }
    }
}

impl Drop for Runtime {
    fn drop(&mut self) {
        let _ = self.shutdown();
    }
}

fn now(origin: Instant) -> Now {
    let wall_ns = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX));
    Now {
        mono_ns: origin.elapsed().as_nanos() as u64,
        wall_ns,
    }
}

fn threads_io(dev: &FileDevice, depth: u32, tx: &Sender<Msg>) -> Result<Io> {
    let tx = tx.clone();
    let pool = threads::Pool::new(dev.as_raw_fd(), depth, move |id, r| {
        let _ = tx.send(Msg::IoDone(id, r));
    })?;
    Ok(Io::Threads(pool))
}

/// Duplicates a descriptor for a back end (closed when the back end is dropped).
pub(crate) fn dup_fd(fd: RawFd) -> io::Result<OwnedFd> {
    // SAFETY: `fcntl(F_DUPFD_CLOEXEC)` only reads `fd`; a non-negative result is a new
    // descriptor that nothing else owns.
    let n = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 0) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `n` was just created and is owned here alone.
    Ok(unsafe { OwnedFd::from_raw_fd(n) })
}
