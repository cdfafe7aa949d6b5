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
//! - the requester's death: FUSE's `INTERRUPT` is answered `ENOSYS` by `fuser` 0.18
//!   (the kernel then sends none), so every [`CHECK_INTERVAL`] the parker looks at
//!   each waiting reader in `/proc`: one that is gone, a zombie, or has `SIGKILL`
//!   pending (the kernel turns every fatal signal into one) is answered `EINTR`, and
//!   a killed reader exits instead of waiting for a rate it will never use;
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

/// Whether the thread `pid` (FUSE's requester) is gone or dying: no such thread, a
/// zombie, or `SIGKILL` pending (a fatal signal is turned into one by the kernel).
/// Pid 0 (a requester outside the daemon's pid namespace) is never taken for dead.
pub fn requester_gone(pid: u32) -> bool {
    if pid == 0 {
        return false;
    }
    let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
        return true;
    };
    const SIGKILL_BIT: u64 = 1 << (libc::SIGKILL - 1);
    status.lines().any(|l| {
        if let Some(s) = l.strip_prefix("State:") {
            let s = s.trim_start();
            return s.starts_with('Z') || s.starts_with('X');
        }
        ["SigPnd:", "ShdPnd:"].iter().any(|k| {
            l.strip_prefix(k)
                .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
                .is_some_and(|m| m & SIGKILL_BIT != 0)
        })
    })
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

    /// Answers every waiting read with `errno`.
    pub(crate) fn fail_waiting(&mut self, errno: Errno) {
        if let Some(s) = self.stream.as_mut() {
            for w in s.waiting.drain(..) {
                w.reply.error(fuser::Errno::from_i32(errno));
            }
        }
    }

    /// Answers `EINTR` to the waiting reads whose requester was killed; whether reads
    /// still wait.
    fn answer_killed(&mut self, _rt: &Runtime) -> bool {
        let Some(s) = self.stream.as_mut() else {
            return false;
        };
        let mut k = 0;
        while k < s.waiting.len() {
            if requester_gone(s.waiting[k].pid) {
                s.waiting
                    .swap_remove(k)
                    .reply
                    .error(fuser::Errno::from_i32(libc::EINTR));
            } else {
                k += 1;
            }
        }
        !s.waiting.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::requester_gone;

    #[test]
    fn a_live_thread_is_not_gone_and_a_reaped_child_is() {
        assert!(!requester_gone(std::process::id()));
        assert!(!requester_gone(0), "pid 0 is never taken for dead");
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        assert!(requester_gone(pid));
    }
}
