//! The dispatcher thread (`lib.rs` has the picture): it owns the engine and the
//! device, takes the API threads' messages, hands the engine's commands to the back
//! end (io_uring or the thread pool), files finished operations in the shared table
//! and tells those who asked to be notified; with a disk model it holds each
//! completion until the emulated disk would have finished the command.

use super::*;
/// A contiguous run of a command's pieces: where on the device, and the memory.
pub(crate) struct Run {
    pub offset: u64,
    pub iov: Vec<libc::iovec>,
}

/// The I/O of one command, as the back ends take it.
pub(crate) enum IoJob {
    Read(Vec<Run>),
    Write(Vec<Run>),
    Flush,
}

pub(crate) enum Io {
    Uring(Box<uring::Uring>),
    Threads(threads::Pool),
}

pub(crate) struct Dispatcher {
    pub(crate) engine: Engine,
    pub(crate) dev: FileDevice,
    pub(crate) io: Io,
    pub(crate) rx: Receiver<Msg>,
    /// Messages the thread-pool wait took while waiting for a completion.
    pub(crate) inbox: VecDeque<Msg>,
    pub(crate) shared: Arc<Shared>,
    pub(crate) origin: Instant,
    /// The unmount operation, once closing.
    pub(crate) closing: Option<Option<OpId>>,
    pub(crate) in_flight: usize,
    pub(crate) emulated: Option<Emulated>,
    /// Who is told when an operation finishes ([`Runtime::start_notify`]).
    pub(crate) notify: HashMap<OpId, Notify>,
    /// [`crate::Options::max_tickets`].
    pub(crate) max_tickets: usize,
    /// The engine's operation bound (`EngineConfig::max_ops`).
    pub(crate) max_ops: usize,
    /// Starts held for room ([`Runtime::start_waiting`]), oldest first; their
    /// callers wait for the reply.
    pub(crate) held: VecDeque<Start>,
}

/// The emulated hard disk's clock: when each command in flight is due, and the
/// commands the back end finished before then.
pub(crate) struct Emulated {
    pub(crate) sector_bytes: u64,
    pub(crate) disk: HddDisk,
    /// The disk's energy, fed every command as it is timed (one at a time: the
    /// emulated disk has queue depth 1, so they never overlap).
    pub(crate) meter: Option<EnergyMeter>,
    pub(crate) due: HashMap<u64, u64>,
    pub(crate) held: std::collections::BTreeMap<(u64, u64), io::Result<()>>,
}

impl Dispatcher {
    pub(crate) fn run(mut self) {
        let why = match self.serve() {
            Ok(()) => "closed".to_string(),
            Err(e) => format!("device failure: {e}"),
        };
        // Never drop the engine's buffers while the kernel may still use them.
        if self.in_flight > 0 && self.drain().is_err() {
            self.fail_all(&why);
            std::mem::forget(self.engine);
            return;
        }
        self.fail_all(&why);
    }

    fn fail_all(&mut self, why: &str) {
        let mut t = self.shared.lock();
        t.stopped = Some(why.to_string());
        t.running.clear();
        self.shared.cv.notify_all();
        drop(t);
        // Their callers' `start_waiting` says the runtime stopped.
        self.held.clear();
        // Their `check` now says why.
        for (id, n) in self.notify.drain() {
            n(Ticket(id));
        }
    }

    fn now(&self) -> Now {
        now(self.origin)
    }

    fn serve(&mut self) -> io::Result<()> {
        loop {
            while let Some(m) = self.inbox.pop_front().or_else(|| self.rx.try_recv().ok()) {
                self.handle(m);
            }
            let held = self.release_held();
            self.pump()?;
            self.deliver();
            self.start_held();
            if let Some(unmount) = self.closing {
                if self.engine.ops_in_flight() == 0 && self.in_flight == 0 {
                    match unmount {
                        // The final commit's own result: a broken engine (a commit
                        // that failed earlier) or a failing last commit is a failed
                        // close, never "closed" (`close` then returns the error).
                        Some(id) => {
                            return match self.shared.lock().done.remove(&id) {
                                Some(Err(e)) => Err(io::Error::other(e.to_string())),
                                _ => Ok(()),
                            }
                        }
                        None if !self.engine.volume().is_writable() => return Ok(()),
                        None => {
                            let now = self.now();
                            let id = self
                                .engine
                                .submit(Op::Unmount, Some(now.mono_ns), u32::MAX, now)
                                .map_err(io::Error::other)?;
                            self.shared.lock().running.insert(id);
                            self.closing = Some(Some(id));
                            continue;
                        }
                    }
                }
            }
            let wake = match (self.engine.next_wakeup(), held) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            let timeout = wake.map(|t| Duration::from_nanos(t.saturating_sub(self.now().mono_ns)));
            self.wait(timeout)?;
        }
    }

    fn handle(&mut self, m: Msg) {
        let now = self.now();
        match m {
            // Behind the starts already held, so they go first.
            Msg::Start(s) if s.wait_room && (!self.held.is_empty() || self.full(&s.op)) => {
                self.held.push_back(s);
                self.shared.held.fetch_add(1, Ordering::Relaxed);
            }
            Msg::Start(s) => self.start(s, now),
            Msg::Cancel { id, reply } => {
                let _ = reply.send(self.engine.cancel(id, now));
            }
            Msg::Query(f) => f(&self.engine),
            Msg::Energy(reply) => {
                let at = now.mono_ns;
                let e = self.emulated.as_ref().and_then(|e| e.meter.as_ref());
                let _ = reply.send(e.map(|m| m.report(at)));
            }
            Msg::Close => {
                if self.closing.is_none() {
                    self.closing = Some(None);
                }
            }
            Msg::IoDone(id, r) => self.io_done(id, r),
        }
    }

    /// Whether a start held for room ([`Runtime::start_waiting`]) must wait on:
    /// `max_tickets` operations running (results waiting to be taken do not count,
    /// see `start_waiting`), the engine's operation bound (counting the stream
    /// operations waiting for their rate too, so it errs towards waiting), or, for a
    /// read, write or truncate, the operations' share of the disk queue
    /// (`dvrfs_core::engine::bounds`). Each frees as operations finish.
    fn full(&self, op: &Op) -> bool {
        let running = self.shared.lock().running.len();
        let data = matches!(
            op,
            Op::Read { .. } | Op::Write { .. } | Op::Append { .. } | Op::Truncate { .. }
        );
        running >= self.max_tickets
            || self.engine.ops_in_flight() >= self.max_ops
            || (data && self.engine.scheduler().queued() >= self.engine.op_queue_limit())
    }

    /// Starts the held starts that now find room, oldest first; a closing runtime
    /// refuses them all.
    fn start_held(&mut self) {
        while let Some(s) = self.held.front() {
            if self.closing.is_none() && self.full(&s.op) {
                return;
            }
            let s = self.held.pop_front().expect("just seen");
            let now = self.now();
            self.start(s, now);
        }
    }

    fn start(&mut self, s: Start, now: Now) {
        let Start {
            op,
            deadline_ns,
            owner,
            reply,
            notify,
            wait_room,
        } = s;
        let tracked = {
            let t = self.shared.lock();
            // A held start counts only the running operations (`full`).
            t.running.len() + if wait_room { 0 } else { t.done.len() }
        };
        let r = if self.closing.is_some() {
            Err(dvrfs_core::Error::InvalidArgument(
                "the runtime is closing".into(),
            ))
        } else if tracked >= self.max_tickets {
            Err(dvrfs_core::Error::Busy(format!(
                "the runtime tracks {tracked} operations whose results are not taken yet"
            )))
        } else {
            self.engine.submit(op, deadline_ns, owner, now)
        };
        if let Ok(id) = &r {
            self.shared.lock().running.insert(*id);
            if let Some(n) = notify {
                self.notify.insert(*id, n);
            }
        }
        let _ = reply.send(r);
    }

    /// The back end finished command `id`: complete it, or, on an emulated disk, hold
    /// it until the model's end of the command.
    fn io_done(&mut self, id: u64, r: io::Result<()>) {
        let now = self.now().mono_ns;
        if let Some(e) = &mut self.emulated {
            let due = e
                .due
                .remove(&id)
                .expect("an emulated command has its end time");
            if due > now {
                e.held.insert((due, id), r);
                return;
            }
        }
        self.complete(id, r);
    }

    /// Completes the held commands whose model time has come; the next one's time.
    fn release_held(&mut self) -> Option<u64> {
        loop {
            let now = self.now().mono_ns;
            let e = self.emulated.as_mut()?;
            let (&(due, id), _) = e.held.first_key_value()?;
            if due > now {
                return Some(due);
            }
            let r = e.held.remove(&(due, id)).expect("just seen");
            self.complete(id, r);
        }
    }

    /// On an emulated disk, when the model says command `cmd` ends.
    fn model_time(&mut self, cmd: &DevCommand) {
        let now = self.now().mono_ns;
        let Some(e) = &mut self.emulated else { return };
        let t = match cmd.kind {
            DevKind::Flush => e.disk.flush(now),
            kind => e.disk.service(
                now,
                &Access {
                    lba: cmd.offset_bytes / e.sector_bytes,
                    sectors: (cmd.len_bytes / e.sector_bytes) as u32,
                    write: kind == DevKind::Write,
                },
            ),
        };
        if let Some(m) = &mut e.meter {
            m.command(&t);
        }
        e.due.insert(cmd.id, t.end_ns);
    }

    fn complete(&mut self, id: u64, r: io::Result<()>) {
        self.in_flight -= 1;
        let now = self.now();
        self.engine.complete(id, r, now);
    }

    /// Hands every ready command to the back end.
    fn pump(&mut self) -> io::Result<()> {
        loop {
            let now = self.now();
            let Some(cmd) = self.engine.poll(now) else {
                return Ok(());
            };
            self.shared.commands.fetch_add(1, Ordering::Relaxed);
            self.model_time(&cmd);
            let job = match self.job(&cmd) {
                Some(job) => job,
                None => {
                    self.shared.bounced.fetch_add(1, Ordering::Relaxed);
                    // Not for O_DIRECT as it is: through the device's bounce path.
                    let r = self.sync_io(&cmd);
                    self.in_flight += 1;
                    self.io_done(cmd.id, r);
                    continue;
                }
            };
            if matches!(&job, IoJob::Read(r) | IoJob::Write(r) if r.is_empty()) {
                // Every piece is virtual (nothing to move).
                self.in_flight += 1;
                self.io_done(cmd.id, Ok(()));
                continue;
            }
            self.in_flight += 1;
            match &mut self.io {
                Io::Uring(u) => u.submit(cmd.id, job)?,
                Io::Threads(p) => p.submit(cmd.id, job),
            }
        }
    }

    /// The command's memory as runs of iovecs; `None` if a piece is not aligned for
    /// `O_DIRECT` (address or length not a multiple of the sector size).
    fn job(&mut self, cmd: &DevCommand) -> Option<IoJob> {
        let align = self.dev.sector_bytes() as usize;
        let mut runs: Vec<Run> = Vec::new();
        let mut ok = true;
        // Where the last run ends on the device.
        let mut end = u64::MAX;
        let mut add = |offset: u64, ptr: *mut u8, len: usize| {
            if !(ptr as usize).is_multiple_of(align) || !len.is_multiple_of(align) {
                ok = false;
            }
            let iov = libc::iovec {
                iov_base: ptr.cast(),
                iov_len: len,
            };
            match runs.last_mut() {
                Some(r) if end == offset && r.iov.len() < 512 => r.iov.push(iov),
                _ => runs.push(Run {
                    offset,
                    iov: vec![iov],
                }),
            }
            end = offset + len as u64;
        };
        let r = match cmd.kind {
            DevKind::Flush => return Some(IoJob::Flush),
            DevKind::Read => self.engine.io_read(cmd.id, |o, b| {
                add(o, b.as_mut_ptr(), b.len());
                Ok(())
            }),
            DevKind::Write => self.engine.io_write(cmd.id, |o, b| {
                add(o, b.as_ptr() as *mut u8, b.len());
                Ok(())
            }),
        };
        if r.is_err() || !ok {
            return None;
        }
        Some(match cmd.kind {
            DevKind::Read => IoJob::Read(runs),
            _ => IoJob::Write(runs),
        })
    }

    fn sync_io(&mut self, cmd: &DevCommand) -> io::Result<()> {
        let dev = &mut self.dev;
        match cmd.kind {
            DevKind::Flush => dev.flush(),
            DevKind::Write => self.engine.io_write(cmd.id, |o, b| dev.write_at(o, b)),
            DevKind::Read => self.engine.io_read(cmd.id, |o, b| dev.read_at(o, b)),
        }
    }

    /// Files finished operations for their callers.
    fn deliver(&mut self) {
        let mut any = false;
        let mut table = None;
        let mut told = vec![];
        while let Some(c) = self.engine.take_completion() {
            if let Some(n) = self.notify.remove(&c.op) {
                told.push((c.op, n));
            }
            let t = table.get_or_insert_with(|| self.shared.lock());
            if t.running.remove(&c.op) {
                let late = c.deadline_ns.is_some_and(|d| c.done_ns > d);
                let (submit_ns, done_ns) = (c.submit_ns, c.done_ns);
                let r = c.result.map(|output| Done {
                    output,
                    late,
                    submit_ns,
                    done_ns,
                });
                t.done.insert(c.op, r);
            }
            any = true;
        }
        drop(table);
        if any {
            self.shared.cv.notify_all();
        }
        // After the results are in the table, so `check` finds them.
        for (id, n) in told {
            n(Ticket(id));
        }
    }

    fn wait(&mut self, timeout: Option<Duration>) -> io::Result<()> {
        match &mut self.io {
            Io::Uring(u) => {
                let done = u.wait(timeout)?;
                for (id, r) in done {
                    self.io_done(id, r);
                }
            }
            Io::Threads(_) => {
                let m = match timeout {
                    None => self.rx.recv().map_err(|_| ()),
                    Some(t) => match self.rx.recv_timeout(t) {
                        Ok(m) => Ok(m),
                        Err(RecvTimeoutError::Timeout) => return Ok(()),
                        Err(RecvTimeoutError::Disconnected) => Err(()),
                    },
                };
                match m {
                    Ok(m) => self.inbox.push_back(m),
                    // Every sender is gone: the Runtime was dropped without close.
                    Err(()) => {
                        if self.closing.is_none() {
                            self.closing = Some(None);
                        }
                        if self.in_flight > 0 {
                            return Err(io::Error::other(
                                "runtime dropped with commands in flight",
                            ));
                        }
                    }
                }
            }
        }
        Ok(())
    }

    /// Waits for the commands still in flight (after a failure).
    fn drain(&mut self) -> io::Result<()> {
        while self.in_flight > 0 {
            // An emulated disk's held commands are done: let them go now.
            if let Some(e) = &mut self.emulated {
                for ((_, id), r) in std::mem::take(&mut e.held) {
                    self.complete(id, r);
                }
                if self.in_flight == 0 {
                    break;
                }
            }
            match &mut self.io {
                Io::Uring(u) => {
                    for (id, r) in u.wait(Some(Duration::from_secs(30)))? {
                        self.io_done(id, r);
                    }
                }
                Io::Threads(_) => match self.rx.recv_timeout(Duration::from_secs(30)) {
                    Ok(Msg::IoDone(id, r)) => self.io_done(id, r),
                    Ok(_) => {}
                    Err(_) => return Err(io::Error::other("commands did not finish")),
                },
            }
        }
        Ok(())
    }
}
