//! The daemon's side: serves the runtime a mount already runs to the processes that
//! connect to its socket, so that they use the volume through the same engine (the
//! same scheduler, admission and commit pipeline) as the mount's own files.
//!
//! Threads: one accepts; one per connection reads its requests and answers those that
//! do not wait (starting an operation, a cancel, a metadata query) itself; a request
//! that waits (`Check` with `wait`, `Poll`) gets a thread of its own for as long as it
//! waits, at most [`MAX_WAITERS_PER_CONN`] at once per connection, so a client's
//! threads never queue behind each other. Replies are written whole under the
//! connection's writer lock.
//!
//! What a client may touch: only the operations (tickets) and streams it started on
//! its connection, and only what [`perm`](crate::perm) allows its uid. Every
//! operation's owner (the schedulers' per-issuer state) is the client's pid, as the
//! mount makes it the calling process's. When a connection ends (the client exits,
//! or is killed), its operations still running are cancelled or waited for and its
//! streams closed, as a process's files are closed when it exits.
//!
//! [`Server::stop`] removes the socket first (a new client then opens nothing, and
//! waits for the device as after any unmount), then ends every connection and waits
//! for their clean-up, after which the server holds no reference to the runtime.

use std::collections::HashSet;
use std::io::{self, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

use dvrfs_core::{Error as CoreError, Op, OpenMode, Output};
use dvrfs_runtime::{Runtime, RuntimeError, Ticket};

use crate::perm::{self, Peer};
use crate::proto::{self, Done, Figures, Reply, Request, WireOutput};
use crate::wire::{read_frame, write_frame, write_frame_parts};
use crate::{instant_of_mono_ns, socket};

/// Requests of one connection waiting at once (each holds a thread). A client past it
/// is told to retry, as the engine says when it is full.
pub const MAX_WAITERS_PER_CONN: usize = 256;

/// Connections served at once; one more is refused with a message.
pub const MAX_CONNECTIONS: usize = 1024;

/// How the daemon serves.
#[derive(Clone)]
pub struct ServerConfig {
    /// Let users other than the daemon's own (and root) connect, as `allow_other`
    /// lets them into the mount.
    pub allow_other: bool,
    /// The volume, for messages.
    pub volume: String,
    /// The per-user limits on clients' stream reservations ([`crate::gate`]); `None`:
    /// admitted against the whole capacity, whoever the client is.
    pub gate: Option<Arc<dyn crate::StreamGate>>,
}

impl std::fmt::Debug for ServerConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerConfig")
            .field("allow_other", &self.allow_other)
            .field("volume", &self.volume)
            .field("gate", &self.gate.is_some())
            .finish()
    }
}

type Log = Arc<dyn Fn(&str) + Send + Sync>;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

struct Conns {
    /// A handle on each connection's socket (to end it) and its thread.
    live: Vec<(UnixStream, JoinHandle<()>)>,
}

/// A running server; [`Server::stop`] ends it.
pub struct Server {
    path: PathBuf,
    stopping: Arc<AtomicBool>,
    accept: Option<JoinHandle<()>>,
    conns: Arc<Mutex<Conns>>,
}

impl Server {
    /// Binds the socket of the volume on `target` (see [`socket::bind`]) and serves
    /// `rt` on it.
    pub fn start(
        rt: Arc<Runtime>,
        target: &Path,
        cfg: ServerConfig,
        log: impl Fn(&str) + Send + Sync + 'static,
    ) -> io::Result<Server> {
        let (path, listener) = socket::bind(target)?;
        let log: Log = Arc::new(log);
        let stopping = Arc::new(AtomicBool::new(false));
        let conns = Arc::new(Mutex::new(Conns { live: vec![] }));
        let accept = {
            let (stopping, conns) = (stopping.clone(), conns.clone());
            std::thread::Builder::new()
                .name("dvrfs-remote-accept".into())
                .spawn(move || accept_loop(listener, rt, cfg, log, stopping, conns))?
        };
        Ok(Server {
            path,
            stopping,
            accept: Some(accept),
            conns,
        })
    }

    /// The socket's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Stops serving (see the module docs); returns when no connection is left.
    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        let Some(accept) = self.accept.take() else {
            return;
        };
        self.stopping.store(true, Ordering::SeqCst);
        // Wake the accept (a connection it sees the flag after), then take the name
        // away.
        let _ = UnixStream::connect(&self.path);
        let _ = std::fs::remove_file(&self.path);
        let _ = accept.join();
        let live = std::mem::take(&mut lock(&self.conns).live);
        for (s, _) in &live {
            let _ = s.shutdown(std::net::Shutdown::Both);
        }
        for (_, t) in live {
            let _ = t.join();
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.shutdown();
    }
}

fn accept_loop(
    listener: UnixListener,
    rt: Arc<Runtime>,
    cfg: ServerConfig,
    log: Log,
    stopping: Arc<AtomicBool>,
    conns: Arc<Mutex<Conns>>,
) {
    for s in listener.incoming() {
        if stopping.load(Ordering::SeqCst) {
            break;
        }
        let Ok(s) = s else { continue };
        let mut c = lock(&conns);
        c.live.retain(|(_, t)| !t.is_finished());
        let full = c.live.len() >= MAX_CONNECTIONS;
        let (Ok(handle), false) = (s.try_clone(), full) else {
            let mut s = s;
            let _ = write_frame(
                &mut s,
                &proto::hello_reply(
                    false,
                    "the dvrfs daemon serves too many clients now; try again later",
                ),
            );
            continue;
        };
        let (rt, cfg, conn_log) = (rt.clone(), cfg.clone(), log.clone());
        match std::thread::Builder::new()
            .name("dvrfs-remote-conn".into())
            .spawn(move || serve_conn(s, rt, &cfg, &conn_log))
        {
            Ok(t) => c.live.push((handle, t)),
            Err(e) => log(&format!("cannot start a thread for a client: {e}")),
        }
    }
}

/// One connection's state, shared by its reader and its waiters.
struct Conn {
    rt: Arc<Runtime>,
    peer: Peer,
    /// The volume, for messages.
    volume: String,
    writer: Mutex<UnixStream>,
    /// Operations started here and not yet reported done.
    tickets: Mutex<HashSet<u64>>,
    /// Streams opened here and not closed.
    streams: Mutex<HashSet<u32>>,
    /// The gate ([`crate::gate`]) and the stream opens it counted whose outcome this
    /// connection has not seen yet: ticket -> the gate's token.
    gate: Option<Arc<dyn crate::StreamGate>>,
    opening: Mutex<std::collections::HashMap<u64, u64>>,
    /// Files it opened (`Op::OpenFile`, once per open) and has not closed: a file
    /// removed while open stays until its last close, which the clean-up gives.
    opened: Mutex<Vec<(dvrfs_core::meta::Ino, OpenMode)>>,
    waiters: AtomicUsize,
}

fn serve_conn(s: UnixStream, rt: Arc<Runtime>, cfg: &ServerConfig, log: &Log) {
    let mut reader = s;
    let Ok(writer) = reader.try_clone() else {
        return;
    };
    let peer = match Peer::of(&reader) {
        Ok(p) => p,
        Err(e) => {
            log(&format!("a client's credentials cannot be read: {e}"));
            return;
        }
    };
    let refuse = |w: &mut UnixStream, why: &str| {
        let _ = write_frame(w, &proto::hello_reply(false, why));
    };
    let mut w = writer;
    let version = match read_frame(&mut reader) {
        Ok(Some(body)) => proto::read_hello(&body),
        _ => return,
    };
    match version {
        Ok(v) if v == proto::VERSION => {}
        Ok(v) => {
            return refuse(
                &mut w,
                &format!(
                    "the dvrfs daemon serving {} speaks protocol version {}, the client version {v}: use the dvrfs command and libdvrfs of the daemon's version",
                    cfg.volume,
                    proto::VERSION
                ),
            )
        }
        Err(why) => return refuse(&mut w, &why),
    }
    // SAFETY: geteuid has no preconditions.
    let daemon_uid = unsafe { libc::geteuid() };
    if !cfg.allow_other && !peer.is_root() && peer.uid != daemon_uid {
        log(&format!(
            "refused pid {} (uid {}): mounted without --allow-other",
            peer.pid, peer.uid
        ));
        return refuse(
            &mut w,
            &format!(
                "{} is mounted without --allow-other: only uid {daemon_uid} and root may use it, not uid {}",
                cfg.volume, peer.uid
            ),
        );
    }
    if write_frame(&mut w, &proto::hello_reply(true, "")).is_err() {
        return;
    }
    let conn = Arc::new(Conn {
        rt,
        peer,
        volume: cfg.volume.clone(),
        writer: Mutex::new(w),
        tickets: Mutex::new(HashSet::new()),
        streams: Mutex::new(HashSet::new()),
        gate: cfg.gate.clone(),
        opening: Mutex::new(std::collections::HashMap::new()),
        opened: Mutex::new(Vec::new()),
        waiters: AtomicUsize::new(0),
    });
    let mut waiters: Vec<JoinHandle<()>> = vec![];
    while let Ok(Some(body)) = read_frame(&mut reader) {
        let (id, req) = match Request::decode(&body) {
            Ok(r) => r,
            Err((id, e)) => {
                let err =
                    RuntimeError::Io(io::Error::new(io::ErrorKind::InvalidData, e.to_string()));
                match id {
                    Some(id) => conn.reply(id, Err(err)),
                    // Not even an id: the connection is not speaking this protocol.
                    None => break,
                }
                continue;
            }
        };
        let waits = matches!(
            req,
            Request::Check { wait: true, .. } | Request::Poll { .. }
        );
        if !waits {
            let r = conn.answer(req);
            conn.reply(id, r);
            continue;
        }
        waiters.retain(|t| !t.is_finished());
        if conn.waiters.load(Ordering::SeqCst) >= MAX_WAITERS_PER_CONN {
            conn.reply(
                id,
                Err(RuntimeError::Engine(CoreError::QueueFull {
                    max: MAX_WAITERS_PER_CONN,
                })),
            );
            continue;
        }
        conn.waiters.fetch_add(1, Ordering::SeqCst);
        let c = conn.clone();
        let spawned = std::thread::Builder::new()
            .name("dvrfs-remote-wait".into())
            .spawn(move || {
                let r = c.answer(req);
                c.reply(id, r);
                c.waiters.fetch_sub(1, Ordering::SeqCst);
            });
        match spawned {
            Ok(t) => waiters.push(t),
            Err(e) => {
                conn.waiters.fetch_sub(1, Ordering::SeqCst);
                conn.reply(id, Err(RuntimeError::Io(e)));
            }
        }
    }
    for t in waiters {
        let _ = t.join();
    }
    conn.clean_up();
}

impl Conn {
    fn reply(&self, id: u64, r: Result<Reply, RuntimeError>) {
        // The engine's "opened read-only" means, to a client, that the volume is
        // mounted read-only: say so (the CLI's read-only message, `-EROFS` in C).
        let r = match r {
            Err(RuntimeError::Engine(CoreError::ReadOnly)) => {
                Err(RuntimeError::Open(dvrfs_io::OpenError::ReadOnly {
                    path: format!("{} (mounted with --read-only)", self.volume).into(),
                }))
            }
            r => r,
        };
        let (head, tail) = proto::encode_reply_parts(id, &r);
        // A client that went away reads no more replies; its clean-up follows.
        let _ = write_frame_parts(&mut *lock(&self.writer), &head, tail);
    }

    /// The outcome of the operation `ticket`, for the gate if it counted it.
    fn settle(&self, ticket: u64, sid: Option<u32>) {
        let token = lock(&self.opening).remove(&ticket);
        self.settle_token(token, sid);
    }

    fn settle_token(&self, token: Option<u64>, sid: Option<u32>) {
        if let (Some(g), Some(k)) = (&self.gate, token) {
            g.settled(k, sid);
        }
    }

    fn owned(&self, ticket: u64) -> Result<Ticket, RuntimeError> {
        match lock(&self.tickets).contains(&ticket) {
            true => Ok(Ticket(ticket)),
            false => Err(RuntimeError::UnknownTicket(ticket)),
        }
    }

    fn own_stream(&self, stream: u32, closing: bool) -> Result<(), RuntimeError> {
        let mut s = lock(&self.streams);
        let mine = match closing {
            true => s.remove(&stream),
            false => s.contains(&stream),
        };
        match mine {
            true => Ok(()),
            false => Err(RuntimeError::Engine(CoreError::InvalidArgument(format!(
                "stream {stream} is not open on this connection"
            )))),
        }
    }

    fn answer(&self, req: Request) -> Result<Reply, RuntimeError> {
        let peer = self.peer.clone();
        let rt = &self.rt;
        Ok(match req {
            Request::Start {
                mut op,
                deadline_mono_ns,
            } => {
                match &op {
                    Op::StreamRead { stream, .. }
                    | Op::StreamWrite { stream, .. }
                    | Op::StreamSync { stream }
                    | Op::StreamRoll { stream, .. }
                    | Op::StreamQueue { stream, .. }
                    | Op::StreamFollow { stream } => self.own_stream(*stream, false)?,
                    Op::StreamClose { stream } => {
                        self.own_stream(*stream, true)?;
                        if let Some(g) = &self.gate {
                            g.closed(*stream);
                        }
                    }
                    _ => {}
                }
                // Checked in the dispatcher, between its steps, against the metadata
                // as it is then (the op travels there and back; its buffer is not
                // copied).
                let p = peer.clone();
                let (op_back, r) = rt.query(move |v| {
                    let r = perm::check_op(v, &p, &op).and_then(|()| perm::own_new(v, &p, &mut op));
                    (op, r)
                })?;
                op = op_back;
                r?;
                match &op {
                    Op::OpenFile { ino, mode } => lock(&self.opened).push((*ino, *mode)),
                    Op::CloseFile { ino, mode } => {
                        let mut o = lock(&self.opened);
                        if let Some(i) = o.iter().position(|x| x == &(*ino, *mode)) {
                            o.swap_remove(i);
                        }
                    }
                    _ => {}
                }
                if let (Some(g), Op::Write { ino, offset, data }) = (&self.gate, &op) {
                    let end = offset.saturating_add(data.len() as u64);
                    g.write(peer.uid, *ino, end)
                        .map_err(|(errno, why)| crate::gate_refused(&peer, errno, why))?;
                }
                if let (Some(g), Op::Append { ino, data }) = (&self.gate, &op) {
                    // The end it will have: its size now plus the data (an append
                    // racing another may land a little further).
                    let i = *ino;
                    let size = rt
                        .query(move |v| v.stat(i).map(|s| s.size_bytes))
                        .ok()
                        .and_then(|r| r.ok())
                        .unwrap_or(0);
                    g.write(peer.uid, *ino, size.saturating_add(data.len() as u64))
                        .map_err(|(errno, why)| crate::gate_refused(&peer, errno, why))?;
                }
                let token = match (&self.gate, &op) {
                    (Some(g), Op::StreamOpen { ino, spec }) => Some(
                        g.admit(peer.uid, *ino, spec)
                            .map_err(|(errno, why)| crate::gate_refused(&peer, errno, why))?,
                    ),
                    _ => None,
                };
                let deadline = deadline_mono_ns.map(instant_of_mono_ns);
                let t = match rt.start(op, deadline, peer.pid) {
                    Ok(t) => t,
                    Err(e) => {
                        self.settle_token(token, None);
                        return Err(e);
                    }
                };
                lock(&self.tickets).insert(t.0);
                if let Some(k) = token {
                    lock(&self.opening).insert(t.0, k);
                }
                Reply::Ticket(t.0)
            }
            Request::Check { ticket, wait } => {
                let t = self.owned(ticket)?;
                let r = rt.check(t, wait);
                if !matches!(r, Ok(None)) {
                    lock(&self.tickets).remove(&ticket);
                    let sid = match &r {
                        Ok(Some(d)) => match &d.output {
                            Output::Stream(info) => Some(info.id),
                            _ => None,
                        },
                        _ => None,
                    };
                    self.settle(ticket, sid);
                }
                match r? {
                    None => Reply::Done(None),
                    Some(dvrfs_runtime::Done {
                        output: Output::Read { buf, bytes },
                        late,
                        submit_ns,
                        done_ns,
                    }) => Reply::ReadDone {
                        late,
                        submit_ns,
                        done_ns,
                        buf,
                        bytes,
                    },
                    Some(d) => {
                        if let Output::Stream(info) = &d.output {
                            lock(&self.streams).insert(info.id);
                        }
                        Reply::Done(Some(Done {
                            output: WireOutput::of(&d.output),
                            late: d.late,
                            submit_ns: d.submit_ns,
                            done_ns: d.done_ns,
                        }))
                    }
                }
            }
            Request::Cancel { ticket } => {
                rt.cancel(self.owned(ticket)?)?;
                Reply::Unit
            }
            Request::Poll {
                tickets,
                timeout_ns,
            } => {
                if tickets.is_empty() {
                    // Nothing could ever end the wait.
                    return Err(RuntimeError::Engine(CoreError::InvalidArgument(
                        "a poll needs at least one operation to wait for".into(),
                    )));
                }
                let ts = tickets
                    .iter()
                    .map(|&t| self.owned(t))
                    .collect::<Result<Vec<_>, _>>()?;
                let ready = rt.poll(&ts, timeout_ns.map(Duration::from_nanos))?;
                Reply::Ready(ready.into_iter().map(|i| i as u64).collect())
            }
            Request::Resolve { path } => {
                Reply::Ino(rt.query(move |v| perm::resolve(v, &peer, &path))??)
            }
            Request::ResolveParent { path } => {
                let (p, n) = rt.query(move |v| perm::resolve_parent(v, &peer, &path))??;
                Reply::Parent(p, n)
            }
            Request::Lookup { parent, name } => Reply::Ino(rt.query(move |v| {
                let dir = v.stat(parent)?;
                if !peer.may(&dir, perm::X) {
                    return Err(perm::denied(format!(
                        "directory inode {parent} to look up a name"
                    )));
                }
                Ok(v.lookup(parent, &name)?)
            })??),
            Request::Stat { ino } => Reply::Stat(crate::stat_with_visible_size(rt, ino)?),
            Request::Readdir { ino } => Reply::Entries(rt.query(move |v| {
                let dir = v.stat(ino)?;
                if !peer.may(&dir, perm::R) {
                    return Err(perm::denied(format!("directory inode {ino} to list it")));
                }
                Ok(v.readdir(ino)?)
            })??),
            Request::Readlink { ino } => Reply::Bytes(rt.query(move |v| v.readlink(ino))??),
            Request::LostRanges { ino } => Reply::Ranges(rt.query(move |v| v.lost_ranges(ino))??),
            Request::Figures => Reply::Figures(rt.query(|v| Figures {
                data_block_bytes: v.superblock().data_block_bytes,
                free_bytes: v.free_bytes(),
            })?),
            Request::StreamState { stream } => {
                self.own_stream(stream, false)?;
                Reply::Stream(rt.stream(stream)?)
            }
            Request::Admission => Reply::Text(rt.admission()?.map(|a| a.describe())),
            Request::Status { ask } => {
                let st = rt.status(ask)?;
                let json = serde_json::to_string(&st).map_err(|e| {
                    RuntimeError::Io(io::Error::other(format!("status as JSON: {e}")))
                })?;
                Reply::Text(Some(json))
            }
            Request::VolumeUuid => Reply::Bytes(rt.query(|v| v.superblock().uuid.to_vec())?),
            Request::Keyframes { ino } => Reply::Bytes(
                rt.query(move |v| crate::proto::Keyframes::of(v, ino))??
                    .encode(),
            ),
            Request::Events => Reply::Bytes(
                rt.query(|v| crate::proto::EventLog {
                    has_log: v.has_event_log(),
                    capacity: v.event_capacity() as u64,
                    events: v.events(),
                    problems: v
                        .load_report()
                        .event_problems
                        .iter()
                        .map(|(_, w)| w.clone())
                        .collect(),
                })?
                .encode(),
            ),
        })
    }

    /// The client is gone: what it left running is cancelled (or waited for), its
    /// streams and the files it opened are closed, so the engine keeps nothing of it.
    fn clean_up(&self) {
        let tickets: Vec<u64> = lock(&self.tickets).drain().collect();
        for t in tickets {
            let _ = self.rt.cancel(Ticket(t));
            // A stream it opened but never heard of is closed below with the rest.
            let mut sid = None;
            if let Ok(Some(d)) = self.rt.check(Ticket(t), true) {
                if let Output::Stream(info) = &d.output {
                    lock(&self.streams).insert(info.id);
                    sid = Some(info.id);
                }
            }
            self.settle(t, sid);
        }
        let streams: Vec<u32> = lock(&self.streams).drain().collect();
        for s in streams {
            let _ = self
                .rt
                .run(Op::StreamClose { stream: s }, None, self.peer.pid);
            if let Some(g) = &self.gate {
                g.closed(s);
            }
        }
        let opened: Vec<_> = lock(&self.opened).drain(..).collect();
        for (ino, mode) in opened {
            let _ = self
                .rt
                .run(Op::CloseFile { ino, mode }, None, self.peer.pid);
        }
        let _ = lock(&self.writer).flush();
    }
}
