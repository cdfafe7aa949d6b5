//! The POSIX host of the workload client (`bench --dir`): the client's operations
//! become system calls on files of another file system, one thread per stream as the
//! AVFS generator ran them.
//!
//! Every owner the client names (stream `s`, the best-effort generator, the sync
//! client) gets its own worker thread, created at its first operation, which runs
//! that owner's operations in submission order with `pread`/`pwrite` (a stream's
//! files opened with `O_DIRECT` under `--direct`), `open`, `close` and `unlink`, and
//! sends each completion, stamped with the monotonic clock when the system call
//! returned, back to the driver. The client's inodes are indexes into the host's own
//! table of paths under the bench directory. The QoS [`Recorder`] is filled here, as
//! the engine fills its own: every stream request with its deadline and outcome,
//! every best-effort data operation with its latency.
//!
//! The application fsync (`--fsync-every`) is each recording's own `fdatasync`: it is
//! queued behind that recording's writes on its thread (a recorder that syncs
//! stalls its own writes meanwhile), and the client's sync completes when the last
//! recording's has.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use dvrfs_core::meta::Ino;
use dvrfs_core::qos::{Recorder, RtOutcome};
use dvrfs_core::sim::{ClientEv, Host};
use dvrfs_core::volume::Volume;
use dvrfs_core::{Error as CoreError, Op, OpId, Output, Result as CoreResult};
use dvrfs_io::process::IoClass;

use crate::error::CliResult;
use crate::wall_clock::{Completion, Timers, WallHost};

/// The root of the client's namespace: the bench directory.
const ROOT_INO: Ino = 1;

/// A finished operation, from a worker.
pub struct Done {
    pub id: OpId,
    pub result: CoreResult<Output>,
    /// When its system call returned (ns of the run).
    pub done_ns: u64,
}

/// The `fdatasync`s `--fsync-every` made: how many, and how long the longest took.
#[derive(Clone, Copy, Debug, Default)]
pub struct SyncCounts {
    pub count: u64,
    pub max_ns: u64,
    pub total_ns: u64,
}

/// One application fsync fanned out to the recordings' threads.
struct SyncGroup {
    id: OpId,
    left: AtomicUsize,
    error: Mutex<Option<CoreError>>,
}

enum Job {
    /// `op` on the file at `path`; `ino` is the file's (for a create: the new one).
    Op {
        id: OpId,
        op: Op,
        ino: Ino,
        path: PathBuf,
    },
    /// The recording `ino` at `path` syncs its data (one part of `group`).
    Datasync {
        ino: Ino,
        path: PathBuf,
        group: Arc<SyncGroup>,
    },
}

/// How the worker threads open files and what priority stream threads run at.
#[derive(Clone, Copy, Debug)]
pub struct HostOptions {
    /// Streams open their files with `O_DIRECT`.
    pub direct: bool,
    /// The I/O priority of the stream threads.
    pub ioprio: Option<(IoClass, u8)>,
}

/// What the driver keeps of an operation in flight.
struct InFlight {
    owner: u32,
    deadline_ns: Option<u64>,
    submit_ns: u64,
    /// Bytes a data operation moves (0 for the others).
    bytes: u64,
    data: bool,
}

struct Worker {
    tx: Sender<Job>,
    thread: JoinHandle<()>,
}

/// See the module docs.
pub struct PosixHost {
    start: Instant,
    /// Paths by inode (0 unused, 1 the bench directory).
    paths: Vec<PathBuf>,
    streams: u32,
    opts: HostOptions,
    workers: BTreeMap<u32, Worker>,
    done_tx: Sender<Done>,
    pub done_rx: Receiver<Done>,
    in_flight: BTreeMap<OpId, InFlight>,
    next_id: OpId,
    /// The file each recording stream writes (stream -> inode).
    recordings: BTreeMap<u32, Ino>,
    /// Client timers: (time, order, event).
    pub events: Timers,
    seq: u64,
    pub recorder: Recorder,
    pub syncs: Arc<Mutex<SyncCounts>>,
}

/// A system call's failure as the client sees it: a full file system is
/// `NoSpace` (the recording stops, "disk was full"), anything else an I/O error.
fn core_io(what: &str, path: &Path, bytes: u64, e: std::io::Error) -> CoreError {
    match e.raw_os_error() {
        Some(libc::ENOSPC) | Some(libc::EDQUOT) => CoreError::NoSpace {
            need_bytes: bytes,
            free_bytes: 0,
        },
        _ => CoreError::io(format!("{what} {}", path.display()), e),
    }
}

impl PosixHost {
    /// A host over the bench directory `root` for a workload of `streams` streams.
    pub fn new(root: &Path, streams: u32, opts: HostOptions, start: Instant) -> PosixHost {
        let (done_tx, done_rx) = channel();
        PosixHost {
            start,
            paths: vec![PathBuf::new(), root.to_path_buf()],
            streams,
            opts,
            workers: BTreeMap::new(),
            done_tx,
            done_rx,
            in_flight: BTreeMap::new(),
            next_id: 1,
            recordings: BTreeMap::new(),
            events: std::collections::BinaryHeap::new(),
            seq: 0,
            recorder: Recorder::default(),
            syncs: Arc::new(Mutex::new(SyncCounts::default())),
        }
    }

    fn path(&self, ino: Ino) -> CoreResult<PathBuf> {
        self.paths
            .get(ino as usize)
            .filter(|p| !p.as_os_str().is_empty())
            .cloned()
            .ok_or_else(|| CoreError::NotFound(format!("inode {ino}")))
    }

    fn add_path(&mut self, path: PathBuf) -> Ino {
        if let Some(i) = self.paths.iter().position(|p| *p == path) {
            return i as Ino;
        }
        self.paths.push(path);
        (self.paths.len() - 1) as Ino
    }

    /// The path of `name` in directory `parent`.
    fn child(&self, parent: Ino, name: &[u8]) -> CoreResult<PathBuf> {
        let name = std::str::from_utf8(name)
            .map_err(|_| CoreError::InvalidName(String::from_utf8_lossy(name).into()))?;
        Ok(self.path(parent)?.join(name))
    }

    /// A path of the client's (`/rec/fill00001.ts`) under the bench directory.
    fn client_path(&self, path: &str) -> PathBuf {
        self.paths[ROOT_INO as usize].join(path.trim_start_matches('/'))
    }

    fn worker(&mut self, owner: u32) -> &Sender<Job> {
        let stream = owner < self.streams;
        let opts = self.opts;
        let done = self.done_tx.clone();
        let start = self.start;
        let syncs = self.syncs.clone();
        &self
            .workers
            .entry(owner)
            .or_insert_with(|| {
                let (tx, rx) = channel();
                let w = WorkerState {
                    direct: stream && opts.direct,
                    files: BTreeMap::new(),
                    done,
                    start,
                    syncs,
                };
                let ioprio = opts.ioprio.filter(|_| stream);
                let thread = std::thread::Builder::new()
                    .name(format!("bench-dir-{owner}"))
                    .spawn(move || w.run(rx, ioprio))
                    .expect("spawning a worker thread");
                Worker { tx, thread }
            })
            .tx
    }

    fn send(&mut self, owner: u32, job: Job) -> CoreResult<()> {
        self.worker(owner)
            .send(job)
            .map_err(|_| CoreError::io("a worker thread", std::io::Error::other("it ended")))
    }

    /// Takes a finished operation's place in the books: fills the recorder (as the
    /// engine does) and returns what the client gets.
    pub fn finish(&mut self, d: Done) -> Done {
        let f = self
            .in_flight
            .remove(&d.id)
            .expect("a completion of an operation in flight");
        if let Some(deadline) = f.deadline_ns {
            assert!(
                f.owner < self.streams,
                "only stream requests have deadlines"
            );
            let outcome = match &d.result {
                Ok(_) => RtOutcome::Done,
                Err(CoreError::NoSpace { .. }) => RtOutcome::NoSpace,
                Err(_) => RtOutcome::Other,
            };
            self.recorder
                .realtime(deadline, d.done_ns, f.bytes, outcome);
        } else if f.data && d.result.is_ok() {
            self.recorder.best_effort(f.submit_ns, d.done_ns, f.bytes);
        }
        d
    }

    /// Stops the worker threads (after every operation has finished).
    pub fn close(&mut self) {
        for (_, w) in std::mem::take(&mut self.workers) {
            drop(w.tx);
            // A worker that panicked has already said so on stderr.
            let _ = w.thread.join();
        }
    }

    /// The client's fsync: each recording syncs on its own thread.
    fn fan_out_sync(&mut self, id: OpId) -> CoreResult<()> {
        let recs: Vec<(u32, Ino)> = self.recordings.iter().map(|(s, i)| (*s, *i)).collect();
        if recs.is_empty() {
            let done_ns = self.now_ns();
            self.done_tx
                .send(Done {
                    id,
                    result: Ok(Output::Done),
                    done_ns,
                })
                .expect("the driver holds the receiver");
            return Ok(());
        }
        let group = Arc::new(SyncGroup {
            id,
            left: AtomicUsize::new(recs.len()),
            error: Mutex::new(None),
        });
        for (s, ino) in recs {
            let path = self.path(ino)?;
            let group = group.clone();
            self.send(s, Job::Datasync { ino, path, group })?;
        }
        Ok(())
    }
}

impl Drop for PosixHost {
    fn drop(&mut self) {
        self.close();
    }
}

impl Host for PosixHost {
    fn submit(
        &mut self,
        op: Op,
        deadline_ns: Option<u64>,
        owner: u32,
        now: u64,
    ) -> CoreResult<OpId> {
        let id = self.next_id;
        self.next_id += 1;
        let (bytes, data) = match &op {
            Op::Read { buf, .. } => (buf.len() as u64, true),
            Op::Write { data, .. } => (data.len() as u64, true),
            _ => (0, false),
        };
        self.in_flight.insert(
            id,
            InFlight {
                owner,
                deadline_ns,
                submit_ns: now,
                bytes,
                data,
            },
        );
        let (ino, path) = match &op {
            Op::Read { ino, .. } | Op::CloseFile { ino, .. } => (*ino, self.path(*ino)?),
            Op::Write { ino, .. } => {
                if owner < self.streams {
                    self.recordings.insert(owner, *ino);
                }
                (*ino, self.path(*ino)?)
            }
            Op::Create { parent, name, .. } => {
                let p = self.child(*parent, name)?;
                (self.add_path(p.clone()), p)
            }
            Op::Unlink { parent, name } => (0, self.child(*parent, name)?),
            Op::Fsync => {
                self.fan_out_sync(id)?;
                return Ok(id);
            }
            other => {
                return Err(CoreError::InvalidArgument(format!(
                    "bench --dir cannot run a {} operation",
                    other.name()
                )))
            }
        };
        self.send(owner, Job::Op { id, op, ino, path })?;
        Ok(id)
    }

    /// Makes a directory or a file at once, before the run.
    fn namespace(&mut self, op: Op) -> CoreResult<Ino> {
        let (parent, name, dir) = match &op {
            Op::Mkdir { parent, name, .. } => (*parent, name, true),
            Op::Create { parent, name, .. } => (*parent, name, false),
            other => {
                return Err(CoreError::InvalidArgument(format!(
                    "bench --dir cannot run a {} operation before the run",
                    other.name()
                )))
            }
        };
        let path = self.child(parent, name)?;
        let made = if dir {
            std::fs::create_dir_all(&path)
        } else {
            File::create(&path).map(drop)
        };
        made.map_err(|e| core_io("cannot create", &path, 0, e))?;
        Ok(self.add_path(path))
    }

    fn schedule(&mut self, at_ns: u64, ev: ClientEv) {
        self.seq += 1;
        self.events.push(std::cmp::Reverse((at_ns, self.seq, ev)));
    }

    fn not_issued(&mut self, count: u64, no_space: bool) {
        self.recorder.not_issued(count, no_space);
    }

    fn query<R: Send + 'static>(
        &mut self,
        _f: impl FnOnce(&Volume) -> R + Send + 'static,
    ) -> CoreResult<R> {
        Err(CoreError::InvalidArgument(
            "bench --dir has no dvrfs volume to query".into(),
        ))
    }

    fn root(&mut self) -> CoreResult<Ino> {
        Ok(ROOT_INO)
    }

    fn lookup(&mut self, parent: Ino, name: Vec<u8>) -> CoreResult<Option<Ino>> {
        let path = self.child(parent, &name)?;
        Ok(path.exists().then(|| self.add_path(path)))
    }

    fn file(&mut self, path: &str) -> CoreResult<(Ino, u64)> {
        let p = self.client_path(path);
        let size = std::fs::metadata(&p)
            .map_err(|e| core_io("cannot stat", &p, 0, e))?
            .len();
        Ok((self.add_path(p), size))
    }

    fn unlink_target(&mut self, path: &str) -> CoreResult<(Ino, Vec<u8>, u64)> {
        let p = self.client_path(path);
        let size = std::fs::metadata(&p)
            .map_err(|e| core_io("cannot stat", &p, 0, e))?
            .len();
        let name = p
            .file_name()
            .map(|n| n.as_encoded_bytes().to_vec())
            .ok_or_else(|| CoreError::InvalidArgument(format!("{path} names no file")))?;
        let parent = p.parent().map(Path::to_path_buf).unwrap_or_default();
        Ok((self.add_path(parent), name, size))
    }

    fn sizes(&mut self, inos: Vec<Option<Ino>>) -> CoreResult<Vec<u64>> {
        Ok(inos
            .iter()
            .map(|i| {
                i.and_then(|ino| self.paths.get(ino as usize))
                    .and_then(|p| std::fs::metadata(p).ok())
                    .map_or(0, |m| m.len())
            })
            .collect())
    }
}

/// A worker thread's own state: its open files.
struct WorkerState {
    direct: bool,
    files: BTreeMap<Ino, File>,
    done: Sender<Done>,
    start: Instant,
    syncs: Arc<Mutex<SyncCounts>>,
}

impl WorkerState {
    fn run(mut self, rx: Receiver<Job>, ioprio: Option<(IoClass, u8)>) {
        if let Some((class, level)) = ioprio {
            // Checked before the run (`prepare::check_ioprio`); a thread that still
            // cannot have it says so rather than running at another priority unseen.
            if let Err(e) = dvrfs_io::process::set_io_priority(class, level) {
                eprintln!("dvrfs: warning: a stream thread could not take --ioprio: {e}");
            }
        }
        while let Ok(job) = rx.recv() {
            match job {
                Job::Op { id, op, ino, path } => {
                    let result = self.op(op, ino, &path);
                    let done_ns = self.start.elapsed().as_nanos() as u64;
                    if self
                        .done
                        .send(Done {
                            id,
                            result,
                            done_ns,
                        })
                        .is_err()
                    {
                        return;
                    }
                }
                Job::Datasync { ino, path, group } => self.datasync(ino, &path, &group),
            }
        }
    }

    fn open(&mut self, ino: Ino, path: &Path, write: bool) -> CoreResult<&File> {
        if !self.files.contains_key(&ino) {
            let mut o = OpenOptions::new();
            o.read(true).write(write);
            if self.direct {
                o.custom_flags(libc::O_DIRECT);
            }
            let f = o
                .open(path)
                .map_err(|e| core_io("cannot open", path, 0, e))?;
            self.files.insert(ino, f);
        }
        Ok(&self.files[&ino])
    }

    fn op(&mut self, op: Op, ino: Ino, path: &Path) -> CoreResult<Output> {
        match op {
            Op::Read {
                offset, mut buf, ..
            } => {
                let f = self.open(ino, path, false)?;
                let mem = buf.bytes_mut().expect("bench --dir gives real buffers");
                let mut got = 0;
                while got < mem.len() {
                    match f.read_at(&mut mem[got..], offset + got as u64) {
                        Ok(0) => break,
                        Ok(n) => got += n,
                        Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                        Err(e) => return Err(core_io("cannot read", path, 0, e)),
                    }
                }
                Ok(Output::Read { buf, bytes: got })
            }
            Op::Write { offset, data, .. } => {
                let len = data.len() as u64;
                let f = self.open(ino, path, true)?;
                let mem = data.bytes().expect("bench --dir gives real buffers");
                f.write_all_at(mem, offset)
                    .map_err(|e| core_io("cannot write", path, len, e))?;
                Ok(Output::Write { data })
            }
            Op::Create { .. } => {
                let f = File::create(path).map_err(|e| core_io("cannot create", path, 0, e))?;
                self.files.insert(ino, f);
                Ok(Output::Ino(ino))
            }
            Op::CloseFile { .. } => {
                self.files.remove(&ino);
                Ok(Output::Done)
            }
            Op::Unlink { .. } => {
                std::fs::remove_file(path).map_err(|e| core_io("cannot remove", path, 0, e))?;
                Ok(Output::Done)
            }
            other => Err(CoreError::InvalidArgument(format!(
                "bench --dir cannot run a {} operation",
                other.name()
            ))),
        }
    }

    fn datasync(&mut self, ino: Ino, path: &Path, group: &SyncGroup) {
        let t = Instant::now();
        let r = self.open(ino, path, true).and_then(|f| {
            f.sync_data()
                .map_err(|e| core_io("cannot sync", path, 0, e))
        });
        let took = t.elapsed().as_nanos() as u64;
        {
            let mut c = self.syncs.lock().expect("sync counts");
            c.count += 1;
            c.total_ns += took;
            c.max_ns = c.max_ns.max(took);
        }
        if let Err(e) = r {
            group.error.lock().expect("sync error").get_or_insert(e);
        }
        if group.left.fetch_sub(1, Ordering::AcqRel) == 1 {
            let result = match group.error.lock().expect("sync error").take() {
                Some(e) => Err(e),
                None => Ok(Output::Done),
            };
            let done_ns = self.start.elapsed().as_nanos() as u64;
            let _ = self.done.send(Done {
                id: group.id,
                result,
                done_ns,
            });
        }
    }
}

impl WallHost for PosixHost {
    fn now_ns(&self) -> u64 {
        self.start.elapsed().as_nanos() as u64
    }

    fn timers(&mut self) -> &mut Timers {
        &mut self.events
    }

    fn wait(&mut self, wait_ns: u64) -> CliResult<Vec<Completion>> {
        let first = match self.done_rx.recv_timeout(Duration::from_nanos(wait_ns)) {
            Ok(d) => Some(d),
            Err(RecvTimeoutError::Timeout) => None,
            Err(RecvTimeoutError::Disconnected) => unreachable!("the host holds a sender"),
        };
        let done: Vec<Done> = first.into_iter().chain(self.done_rx.try_iter()).collect();
        Ok(done
            .into_iter()
            .map(|d| {
                let d = self.finish(d);
                Completion {
                    id: d.id,
                    result: d.result,
                    at_ns: d.done_ns,
                }
            })
            .collect())
    }

    /// Operations submitted and not yet finished.
    fn in_flight(&self) -> usize {
        self.in_flight.len()
    }

    fn status(&self) -> String {
        format!("{} missed so far", self.recorder.deadline_misses())
    }
}
