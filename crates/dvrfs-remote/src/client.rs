//! The client's side: a connection to a volume's daemon with the runtime's methods
//! (`start`, `check`, `run`, `cancel`, `poll`, streams) and the metadata queries the
//! CLI and the C API make, each a request and its reply.
//!
//! Many threads share one client. Each request gets an id; a reader thread files the
//! replies, which come back in any order, and wakes the thread waiting for each.
//! Buffers keep the runtime's contract: the caller's buffer of a read or write is
//! kept here while the operation runs (its bytes travel; for a write they were copied
//! into the request) and comes back in the operation's output, a read's filled with
//! the bytes the daemon read. When the connection ends (the daemon unmounted or
//! died), every waiting and later call fails with `RuntimeError::Stopped` saying so.

use std::collections::HashMap;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use dvrfs_core::engine::{HeadroomAsk, Status, StreamId, StreamInfo, StreamSpec, StreamStats};
use dvrfs_core::format::dir::Kind;
use dvrfs_core::meta::Ino;
use dvrfs_core::{IoBuf, Op, Output, Stat};
use dvrfs_runtime::{Done, RuntimeError, Ticket};

use crate::proto::{self, Figures, Reply, Request, WireOutput};
use crate::wire::{read_frame, write_frame};

pub type Result<T> = std::result::Result<T, RuntimeError>;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[derive(Default)]
struct Replies {
    by_id: HashMap<u64, Result<Reply>>,
    /// Why the connection ended, once it has.
    ended: Option<String>,
}

struct Shared {
    replies: Mutex<Replies>,
    cv: Condvar,
}

/// A connection to the daemon that serves a volume.
pub struct Client {
    writer: Mutex<UnixStream>,
    shared: Arc<Shared>,
    next_id: AtomicU64,
    /// The callers' buffers of the operations running, by ticket.
    bufs: Mutex<HashMap<u64, IoBuf>>,
    reader: Option<JoinHandle<()>>,
    socket: PathBuf,
}

/// Why a connection could not be made into a client.
#[derive(Debug)]
pub enum ConnectError {
    /// The daemon refused this client, saying why (another protocol version, a user
    /// the mount does not let in).
    Refused(String),
    /// The socket did not answer as a daemon does (it went away meanwhile).
    Broken(String),
}

impl Client {
    /// Greets the daemon on `s` (connected to `socket`) and starts the reader.
    pub fn connect(s: UnixStream, socket: &Path) -> std::result::Result<Client, ConnectError> {
        let mut s = s;
        let broken = |e: String| ConnectError::Broken(format!("{}: {e}", socket.display()));
        write_frame(&mut s, &proto::hello()).map_err(|e| broken(e.to_string()))?;
        match read_frame(&mut s) {
            Ok(Some(body)) => proto::read_hello_reply(&body).map_err(ConnectError::Refused)?,
            Ok(None) => return Err(broken("the daemon closed the connection".into())),
            Err(e) => return Err(broken(e.to_string())),
        }
        let shared = Arc::new(Shared {
            replies: Mutex::new(Replies::default()),
            cv: Condvar::new(),
        });
        let mut rd = s.try_clone().map_err(|e| broken(e.to_string()))?;
        let sh = shared.clone();
        let reader = std::thread::Builder::new()
            .name("dvrfs-remote-client".into())
            .spawn(move || {
                let why = loop {
                    match read_frame(&mut rd) {
                        Ok(Some(body)) => match proto::decode_reply(body) {
                            Ok((id, r)) => {
                                lock(&sh.replies).by_id.insert(id, r);
                                sh.cv.notify_all();
                            }
                            Err(e) => break format!("the daemon's reply did not decode: {e}"),
                        },
                        Ok(None) => break "the dvrfs daemon closed the connection (the volume was unmounted, or the daemon stopped)".to_string(),
                        Err(e) => break format!("the connection to the dvrfs daemon failed: {e}"),
                    }
                };
                lock(&sh.replies).ended = Some(why);
                sh.cv.notify_all();
            })
            .map_err(|e| broken(e.to_string()))?;
        Ok(Client {
            writer: Mutex::new(s),
            shared,
            next_id: AtomicU64::new(1),
            bufs: Mutex::new(HashMap::new()),
            reader: Some(reader),
            socket: socket.to_path_buf(),
        })
    }

    /// The daemon's socket.
    pub fn socket(&self) -> &Path {
        &self.socket
    }

    fn call(&self, req: Request) -> Result<Reply> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        self.send(id, &req.encode(id))
    }

    /// Sends a request's frame and waits for the reply with its id.
    fn send(&self, id: u64, body: &[u8]) -> Result<Reply> {
        if let Err(e) = write_frame(&mut *lock(&self.writer), body) {
            let ended = lock(&self.shared.replies).ended.clone();
            return Err(RuntimeError::Stopped(ended.unwrap_or_else(|| {
                format!("the connection to the dvrfs daemon failed: {e}")
            })));
        }
        let mut r = lock(&self.shared.replies);
        loop {
            if let Some(reply) = r.by_id.remove(&id) {
                return reply;
            }
            if let Some(why) = &r.ended {
                return Err(RuntimeError::Stopped(why.clone()));
            }
            r = self.shared.cv.wait(r).unwrap_or_else(|e| e.into_inner());
        }
    }

    /// An answer of another shape than the request's: the two sides disagree.
    fn unexpected(what: &str, r: Reply) -> RuntimeError {
        RuntimeError::Io(std::io::Error::other(format!(
            "the dvrfs daemon answered {what} with {r:?}"
        )))
    }

    /// `Runtime::start`. The owner is the daemon's to set (this process's id).
    pub fn start(&self, op: Op, deadline: Option<Instant>) -> Result<Ticket> {
        let deadline_mono_ns = deadline.map(crate::mono_ns_of_instant);
        self.start_mono(op, deadline_mono_ns)
    }

    /// [`Client::start`] with the deadline as an absolute `CLOCK_MONOTONIC` time (ns).
    pub fn start_mono(&self, op: Op, deadline_mono_ns: Option<u64>) -> Result<Ticket> {
        // The request carries a write's bytes and a read's length; the buffer stays
        // here until the operation is done.
        let req = Request::Start {
            op,
            deadline_mono_ns,
        };
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let body = req.encode(id);
        let Request::Start { op, .. } = req else {
            unreachable!("built above")
        };
        let buf = match op {
            Op::Read { buf, .. } | Op::StreamRead { buf, .. } => Some(buf),
            Op::Write { data, .. } | Op::Append { data, .. } | Op::StreamWrite { data, .. } => {
                Some(data)
            }
            _ => None,
        };
        let reply = self.send(id, &body);
        match reply? {
            Reply::Ticket(t) => {
                if let Some(b) = buf {
                    lock(&self.bufs).insert(t, b);
                }
                Ok(Ticket(t))
            }
            other => Err(Self::unexpected("a start", other)),
        }
    }

    /// `Runtime::check`.
    pub fn check(&self, t: Ticket, wait: bool) -> Result<Option<Done>> {
        let r = self.call(Request::Check { ticket: t.0, wait });
        let done = match r {
            Ok(Reply::Done(None)) => return Ok(None),
            Ok(Reply::Done(Some(d))) => d,
            Ok(other) => return Err(Self::unexpected("a check", other)),
            Err(e) => {
                if !matches!(e, RuntimeError::Stopped(_)) {
                    lock(&self.bufs).remove(&t.0);
                }
                return Err(e);
            }
        };
        let kept = lock(&self.bufs).remove(&t.0);
        let output = match done.output {
            WireOutput::Read(bytes) => {
                let bytes = bytes.as_slice();
                let mut buf = kept.unwrap_or_else(|| IoBuf::zeroed(bytes.len()));
                let n = bytes.len();
                let dst = buf.bytes_mut().expect("a read's buffer is real memory");
                assert!(
                    n <= dst.len(),
                    "the daemon read {n} bytes into {}",
                    dst.len()
                );
                dst[..n].copy_from_slice(bytes);
                Output::Read { buf, bytes: n }
            }
            WireOutput::Write { .. } => Output::Write {
                data: kept.unwrap_or_else(|| IoBuf::zeroed(0)),
            },
            WireOutput::Ino(i) => Output::Ino(i),
            WireOutput::Stream(i) => Output::Stream(i),
            WireOutput::StreamClosed(s) => Output::StreamClosed(s),
            WireOutput::Covered(c) => Output::Covered(c),
            WireOutput::Done => Output::Done,
        };
        Ok(Some(Done {
            output,
            late: done.late,
            submit_ns: done.submit_ns,
            done_ns: done.done_ns,
        }))
    }

    /// `Runtime::run`: start and wait.
    pub fn run(&self, op: Op, deadline: Option<Instant>) -> Result<Output> {
        let t = self.start(op, deadline)?;
        Ok(self
            .check(t, true)?
            .expect("a waited result is present")
            .output)
    }

    pub fn cancel(&self, t: Ticket) -> Result<()> {
        match self.call(Request::Cancel { ticket: t.0 })? {
            Reply::Unit => Ok(()),
            other => Err(Self::unexpected("a cancel", other)),
        }
    }

    pub fn poll(&self, tickets: &[Ticket], timeout: Option<Duration>) -> Result<Vec<usize>> {
        let req = Request::Poll {
            tickets: tickets.iter().map(|t| t.0).collect(),
            timeout_ns: timeout.map(|t| t.as_nanos().min(u64::MAX as u128) as u64),
        };
        match self.call(req)? {
            Reply::Ready(v) => Ok(v.into_iter().map(|i| i as usize).collect()),
            other => Err(Self::unexpected("a poll", other)),
        }
    }

    pub fn open_stream(&self, ino: Ino, spec: StreamSpec) -> Result<StreamInfo> {
        match self.run(Op::StreamOpen { ino, spec }, None)? {
            Output::Stream(info) => Ok(info),
            other => Err(RuntimeError::Io(std::io::Error::other(format!(
                "stream open returned {other:?}"
            )))),
        }
    }

    pub fn stream(&self, stream: StreamId) -> Result<Option<(StreamInfo, StreamStats)>> {
        match self.call(Request::StreamState { stream })? {
            Reply::Stream(s) => Ok(s),
            other => Err(Self::unexpected("a stream's state", other)),
        }
    }

    /// What the daemon's stream admission checks against, described.
    pub fn admission(&self) -> Result<Option<String>> {
        match self.call(Request::Admission)? {
            Reply::Text(t) => Ok(t),
            other => Err(Self::unexpected("admission", other)),
        }
    }

    /// The daemon engine's status (`dvrfs status`), its headroom counted for `ask`.
    pub fn status(&self, ask: HeadroomAsk) -> Result<Status> {
        match self.call(Request::Status { ask })? {
            Reply::Text(Some(json)) => serde_json::from_str(&json).map_err(|e| {
                RuntimeError::Io(std::io::Error::other(format!(
                    "the dvrfs daemon's status did not decode: {e}"
                )))
            }),
            other => Err(Self::unexpected("status", other)),
        }
    }

    /// The volume's event log, as the daemon has it in memory (`dvrfs events`).
    pub fn events(&self) -> Result<crate::proto::EventLog> {
        match self.call(Request::Events)? {
            Reply::Bytes(b) => crate::proto::EventLog::decode(&b).map_err(|e| {
                RuntimeError::Io(std::io::Error::other(format!(
                    "the dvrfs daemon's event log did not decode: {e}"
                )))
            }),
            other => Err(Self::unexpected("the event log", other)),
        }
    }

    /// The volume's UUID.
    pub fn volume_uuid(&self) -> Result<dvrfs_core::format::Uuid> {
        match self.call(Request::VolumeUuid)? {
            Reply::Bytes(b) => b.as_slice().try_into().map_err(|_| {
                RuntimeError::Io(std::io::Error::other(format!(
                    "the dvrfs daemon's volume UUID has {} bytes, not 16",
                    b.len()
                )))
            }),
            other => Err(Self::unexpected("the volume UUID", other)),
        }
    }

    /// File `ino`'s frame index.
    pub fn keyframes(&self, ino: Ino) -> Result<crate::proto::Keyframes> {
        match self.call(Request::Keyframes { ino })? {
            Reply::Bytes(b) => crate::proto::Keyframes::decode(&b).map_err(|e| {
                RuntimeError::Io(std::io::Error::other(format!(
                    "the dvrfs daemon's frame index did not decode: {e}"
                )))
            }),
            other => Err(Self::unexpected("a frame index", other)),
        }
    }

    pub fn resolve(&self, path: &str) -> Result<Ino> {
        match self.call(Request::Resolve { path: path.into() })? {
            Reply::Ino(i) => Ok(i),
            other => Err(Self::unexpected("a path", other)),
        }
    }

    pub fn resolve_parent(&self, path: &str) -> Result<(Ino, Vec<u8>)> {
        match self.call(Request::ResolveParent { path: path.into() })? {
            Reply::Parent(p, n) => Ok((p, n)),
            other => Err(Self::unexpected("a path's parent", other)),
        }
    }

    pub fn lookup(&self, parent: Ino, name: &[u8]) -> Result<Ino> {
        let req = Request::Lookup {
            parent,
            name: name.to_vec(),
        };
        match self.call(req)? {
            Reply::Ino(i) => Ok(i),
            other => Err(Self::unexpected("a lookup", other)),
        }
    }

    pub fn stat(&self, ino: Ino) -> Result<Stat> {
        match self.call(Request::Stat { ino })? {
            Reply::Stat(s) => Ok(s),
            other => Err(Self::unexpected("a stat", other)),
        }
    }

    pub fn readdir(&self, ino: Ino) -> Result<Vec<(Vec<u8>, Ino, Kind)>> {
        match self.call(Request::Readdir { ino })? {
            Reply::Entries(v) => Ok(v),
            other => Err(Self::unexpected("a listing", other)),
        }
    }

    pub fn readlink(&self, ino: Ino) -> Result<Vec<u8>> {
        match self.call(Request::Readlink { ino })? {
            Reply::Bytes(b) => Ok(b),
            other => Err(Self::unexpected("a readlink", other)),
        }
    }

    pub fn lost_ranges(&self, ino: Ino) -> Result<Vec<(u64, u64)>> {
        match self.call(Request::LostRanges { ino })? {
            Reply::Ranges(v) => Ok(v),
            other => Err(Self::unexpected("lost ranges", other)),
        }
    }

    pub fn figures(&self) -> Result<Figures> {
        match self.call(Request::Figures)? {
            Reply::Figures(f) => Ok(f),
            other => Err(Self::unexpected("figures", other)),
        }
    }

    /// Ends the connection (the daemon closes whatever this client left open).
    pub fn close(mut self) -> Result<()> {
        self.end();
        Ok(())
    }

    fn end(&mut self) {
        let _ = lock(&self.writer).shutdown(std::net::Shutdown::Both);
        if let Some(r) = self.reader.take() {
            let _ = r.join();
        }
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        self.end();
    }
}
