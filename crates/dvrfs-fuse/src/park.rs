//! Parked replies: a read that waits for a stream's data holds no session thread.
//!
//! A read stream gives its bytes at its rate: a `read:1K` playback hands out 125 bytes
//! a second, so the kernel's 128 KiB read-ahead request for it takes over a quarter of
//! an hour. Were a session thread to wait for it, eight such reads by one user would
//! take every thread of the mount, and everyone's `ls`, `cat` and `umount` would wait
//! behind them (issue 22, item 5). So a read the stream must answer is *parked*: its
//! `fuser` reply (which may be answered later from any thread) goes into the stream's
//! waiting list ([`Waiting`]), one `Op::StreamRead` for the bytes the waiting reads
//! need is started with [`Runtime::start_notify`], and the session thread returns to
//! the kernel at once. When that operation finishes, the runtime tells the parker
//! thread ([`Parker`]), which takes the file's lock, puts the bytes in the stream's
//! stash, answers every waiting read they complete, and starts the next operation if
//! reads still wait. The file's lock is held only for these steps, never across a
//! wait, so another handle's reads, `getfattr`, `setfattr -x` and `close` go on
//! beside the playback.
//!
//! Every parked reply is answered exactly once, by one of:
//! - the data: the bytes it asked for (short at the end of the file);
//! - the stream's end (last close, `setfattr -x`, a seek, a truncate): the waiting
//!   reads are served best-effort by whoever ended it (`DvrfsFs::detach`), bounded by
//!   the disk's time, not the stream's rate;
//! - a signal to the requester: FUSE's `INTERRUPT` is answered `ENOSYS` by `fuser`
//!   0.18 (the kernel then sends none), so every [`CHECK_INTERVAL`] the parker looks
//!   at each waiting requester in `/proc` ([`requester_interrupted`]): one that is
//!   gone, a zombie, or has a signal pending that would interrupt it is answered
//!   `EINTR` (a write is withdrawn first), so a killed reader or writer exits
//!   instead of waiting for a rate it will never use;
//! - the unmount: what still waits is answered `EIO` (the kernel is tearing the
//!   connection down; nobody reads the answer).
//!
//! Fault model: the runtime calls [`Link::notify`]'s closure once per started
//! operation, also when it stops (its `check` then says why), so a parked reply
//! never waits for an operation nobody will report.

use crate::file::{errno_of, Errno, FileState};
use dvrfs_core::engine::{IoBuf, Op, Output};
use dvrfs_runtime::{Notify, Runtime, Ticket};
use fuser::ReplyData;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How often the parker looks for waiting readers that were killed: the longest a
/// killed reader of a slow stream waits before its read is answered `EINTR`.
pub const CHECK_INTERVAL: Duration = Duration::from_millis(100);

/// Reads one stream keeps waiting at most; more (the kernel sends a dozen at most
/// per file) are served best-effort.
pub const WAITING_MAX: usize = 64;

/// A read waiting for a stream's bytes `offset .. end`.
pub struct Waiting {
    pub offset: u64,
    pub end: u64,
    /// The requesting thread (FUSE's `pid`): checked for death.
    pub pid: u32,
    pub reply: ReplyData,
}

/// A write a write stream has not taken yet (its buffer is full: the recorder is
/// ahead of its rate).
pub struct WaitingWrite {
    pub ticket: Ticket,
    pub len: u32,
    pub pid: u32,
    pub reply: fuser::ReplyWrite,
}

enum Event {
    /// An operation started with a [`Link`] finished: the file's state handles it.
    Landed(Ticket, Weak<Mutex<FileState>>),
    /// A file has reads waiting: watch their requesters.
    Parked(Weak<Mutex<FileState>>),
    Stop,
}

/// How an open file's state reaches the parker: its own address and the channel.
#[derive(Clone)]
pub struct Link {
    tx: Sender<Event>,
    me: Weak<Mutex<FileState>>,
}

impl Link {
    /// Tells the parker, once the operation has finished, to hand it to this file.
    pub fn notify(&self) -> Notify {
        let (tx, me) = (self.tx.clone(), self.me.clone());
        Box::new(move |t| {
            let _ = tx.send(Event::Landed(t, me));
        })
    }

    /// This file has reads waiting.
    pub fn parked(&self) {
        let _ = self.tx.send(Event::Parked(self.me.clone()));
    }
}

/// The parker thread (see the module docs); stopped and joined on drop, answering
/// what still waits.
pub struct Parker {
    tx: Sender<Event>,
    thread: Option<JoinHandle<()>>,
}

impl Parker {
    pub fn spawn(rt: Arc<Runtime>) -> std::io::Result<Parker> {
        let (tx, rx) = mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("dvrfs-park".into())
            .spawn(move || serve(&rt, &rx))?;
        Ok(Parker {
            tx,
            thread: Some(thread),
        })
    }

    /// The link of the file whose state is `me`.
    pub fn link(&self, me: Weak<Mutex<FileState>>) -> Link {
        Link {
            tx: self.tx.clone(),
            me,
        }
    }
}

impl Drop for Parker {
    fn drop(&mut self) {
        let _ = self.tx.send(Event::Stop);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn serve(rt: &Runtime, rx: &Receiver<Event>) {
    let mut watched: Vec<Weak<Mutex<FileState>>> = vec![];
    let mut last_check = Instant::now();
    loop {
        match rx.recv_timeout(CHECK_INTERVAL) {
            Ok(Event::Landed(t, me)) => match me.upgrade() {
                Some(st) => crate::lock(&st).stream_landed(rt, t),
                // The file was closed: only the result is collected.
                None => {
                    let _ = rt.check(t, false);
                }
            },
            Ok(Event::Parked(me)) => {
                if !watched.iter().any(|w| w.ptr_eq(&me)) {
                    watched.push(me);
                }
            }
            Ok(Event::Stop) | Err(RecvTimeoutError::Disconnected) => break,
            Err(RecvTimeoutError::Timeout) => {}
        }
        if last_check.elapsed() >= CHECK_INTERVAL {
            last_check = Instant::now();
            watched.retain(|w| {
                w.upgrade()
                    .is_some_and(|st| crate::lock(&st).answer_killed(rt))
            });
        }
    }
    // Unmounting: what still waits gets an error.
    for w in watched {
        if let Some(st) = w.upgrade() {
            crate::lock(&st).fail_waiting(libc::EIO);
        }
    }
}

/// Whether the thread `pid` (FUSE's requester) is gone or has a signal waiting for
/// it: no such thread, a zombie, or a pending signal that is neither blocked nor
/// ignored and would interrupt it (caught, or one whose default is to end the
/// process; a fatal one may still show as itself, not yet as `SIGKILL`). This is the
/// kernel's own rule for sending FUSE's `INTERRUPT`, read from `/proc`. Pid 0 (a
/// requester outside the daemon's pid namespace) is never taken for interrupted.
pub fn requester_interrupted(pid: u32) -> bool {
    if pid == 0 {
        return false;
    }
    let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
        return true;
    };
    let mask = |key: &str| -> u64 {
        status
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
            .unwrap_or(0)
    };
    let state = status
        .lines()
        .find_map(|l| l.strip_prefix("State:"))
        .map(str::trim_start);
    if state.is_some_and(|s| s.starts_with('Z') || s.starts_with('X')) {
        return true;
    }
    let pending = (mask("SigPnd:") | mask("ShdPnd:")) & !mask("SigBlk:") & !mask("SigIgn:");
    let caught = mask("SigCgt:");
    let bit = |sig: i32| 1u64 << (sig - 1);
    // Ignored, or stopping, when nobody catches them.
    let harmless = [
        libc::SIGCHLD,
        libc::SIGCONT,
        libc::SIGURG,
        libc::SIGWINCH,
        libc::SIGSTOP,
        libc::SIGTSTP,
        libc::SIGTTIN,
        libc::SIGTTOU,
    ]
    .iter()
    .fold(0, |m, &s| m | bit(s));
    pending & (caught | !harmless) != 0
}

impl FileState {
    /// Parks a read of the stream's bytes `offset .. end` (past its position) and
    /// makes sure an operation is on its way for them. A stream with
    /// [`WAITING_MAX`] reads waiting gives the reply back: the caller reads it
    /// best-effort.
    pub(crate) fn stream_park(
        &mut self,
        rt: &Runtime,
        w: Waiting,
        owner: u32,
    ) -> Result<(), ReplyData> {
        let Some(s) = self.stream.as_mut() else {
            return Err(w.reply);
        };
        if s.waiting.len() >= WAITING_MAX {
            return Err(w.reply);
        }
        s.waiting.push(w);
        if let Some(l) = &self.link {
            l.parked();
        }
        self.stream_kick(rt, owner);
        Ok(())
    }

    /// Starts the stream read the waiting reads need, unless one is on its way.
    fn stream_kick(&mut self, rt: &Runtime, owner: u32) {
        let Some(link) = self.link.clone() else {
            return;
        };
        let Some(s) = self.stream.as_mut() else {
            return;
        };
        if s.inflight.is_some() {
            return;
        }
        let Some(end) = s.waiting.iter().map(|w| w.end).max() else {
            return;
        };
        if end <= s.next {
            return;
        }
        let op = Op::StreamRead {
            stream: s.info.id,
            buf: IoBuf::zeroed((end - s.next) as usize),
        };
        match rt.start_notify(op, None, owner, link.notify()) {
            Ok(t) => s.inflight = Some(t),
            Err(e) => self.fail_waiting(errno_of(&e)),
        }
    }

    /// The stream read `t` finished (the parker's call): its bytes go to the stash,
    /// the reads they complete are answered, and the next read is started for those
    /// still waiting.
    pub(crate) fn stream_landed(&mut self, rt: &Runtime, t: Ticket) {
        let r = rt.check(t, false);
        if let Some(k) = self
            .stream
            .as_ref()
            .and_then(|s| s.writes.iter().position(|w| w.ticket == t))
        {
            return self.stream_write_landed(k, r);
        }
        let Some(s) = self.stream.as_mut().filter(|s| s.inflight == Some(t)) else {
            // The stream it was for ended (its waiting reads were answered then).
            return;
        };
        s.inflight = None;
        let got = match r {
            Ok(Some(done)) => match done.output {
                Output::Read { buf, bytes } => match buf.bytes() {
                    Some(b) => {
                        s.stash.extend_from_slice(&b[..bytes]);
                        s.next += bytes as u64;
                        bytes
                    }
                    None => return self.fail_waiting(libc::EIO),
                },
                _ => return self.fail_waiting(libc::EIO),
            },
            Ok(None) => return self.fail_waiting(libc::EIO),
            Err(e) => return self.fail_waiting(errno_of(&e)),
        };
        // Nothing more to give (the file's end): every waiting read gets what there is.
        self.answer_ready(got == 0);
        let owner = self
            .stream
            .as_ref()
            .and_then(|s| s.waiting.first())
            .map_or(0, |w| w.pid);
        self.stream_kick(rt, owner);
    }

    /// The parked write `k` was taken (or refused): its reply.
    fn stream_write_landed(
        &mut self,
        k: usize,
        r: dvrfs_runtime::Result<Option<dvrfs_runtime::Done>>,
    ) {
        let w = self.stream.as_mut().expect("found in it").writes.remove(k);
        let e = match r {
            Ok(Some(_)) => {
                self.stream.as_mut().expect("found in it").writer = Some(w.pid);
                return w.reply.written(w.len);
            }
            Ok(None) => dvrfs_runtime::RuntimeError::Io(std::io::Error::other(
                "a finished stream write had no result",
            )),
            Err(e) => e,
        };
        let errno = self.write_refused(&e, w.len as usize);
        self.stream.as_mut().expect("found in it").resync = true;
        w.reply.error(fuser::Errno::from_i32(errno));
    }

    /// Answers the waiting reads the stash holds to their end (with `all`, every one,
    /// with what it holds of them), then trims the stash.
    fn answer_ready(&mut self, all: bool) {
        let Some(s) = self.stream.as_mut() else {
            return;
        };
        let stash_start = s.next - s.stash.len() as u64;
        let mut k = 0;
        while k < s.waiting.len() {
            if !all && s.waiting[k].end > s.next {
                k += 1;
                continue;
            }
            let w = s.waiting.swap_remove(k);
            let from = w.offset.max(stash_start).min(s.next);
            let to = w.end.min(s.next).max(from);
            w.reply
                .data(&s.stash[(from - stash_start) as usize..(to - stash_start) as usize]);
        }
        s.trim_stash();
    }

    /// Answers every waiting read and write with `errno`.
    pub(crate) fn fail_waiting(&mut self, errno: Errno) {
        if let Some(s) = self.stream.as_mut() {
            for w in s.waiting.drain(..) {
                w.reply.error(fuser::Errno::from_i32(errno));
            }
            if !s.writes.is_empty() {
                s.resync = true;
            }
            for w in s.writes.drain(..) {
                w.reply.error(fuser::Errno::from_i32(errno));
            }
        }
    }

    /// Answers `EINTR` to the waiting reads and writes whose requester was killed (a
    /// write is withdrawn; what of it the buffer took stays); whether any still wait.
    fn answer_killed(&mut self, rt: &Runtime) -> bool {
        let Some(s) = self.stream.as_mut() else {
            return false;
        };
        let mut k = 0;
        while k < s.writes.len() {
            if requester_interrupted(s.writes[k].pid) {
                let w = s.writes.swap_remove(k);
                let _ = rt.cancel(w.ticket);
                s.resync = true;
                w.reply.error(fuser::Errno::from_i32(libc::EINTR));
            } else {
                k += 1;
            }
        }
        let mut k = 0;
        while k < s.waiting.len() {
            if requester_interrupted(s.waiting[k].pid) {
                s.waiting
                    .swap_remove(k)
                    .reply
                    .error(fuser::Errno::from_i32(libc::EINTR));
            } else {
                k += 1;
            }
        }
        !s.waiting.is_empty() || !s.writes.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::requester_interrupted;

    #[test]
    fn a_live_thread_is_not_interrupted_and_a_reaped_child_is() {
        assert!(!requester_interrupted(std::process::id()));
        assert!(!requester_interrupted(0), "pid 0 is never taken for dead");
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        assert!(requester_interrupted(pid));
    }
}
