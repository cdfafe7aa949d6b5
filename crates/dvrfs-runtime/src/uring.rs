//! The io_uring back end: one ring on the device's `O_DIRECT` descriptor, an eventfd
//! that API threads write to wake the dispatcher, and the engine's next wake-up as the
//! wait's timeout (`IORING_ENTER_EXT_ARG`, Linux 5.11).

use crate::{dup_fd, IoJob};
use io_uring::{opcode, types, IoUring};
use std::collections::HashMap;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::Arc;
use std::time::Duration;

/// `user_data` of the eventfd read.
const WAKE: u64 = u64::MAX;

/// One submitted `readv`/`writev`/`fsync`.
struct Sqe {
    cmd: u64,
    expect: u64,
}

/// A command whose SQEs are in the ring.
struct Cmd {
    left: u32,
    err: Option<io::Error>,
    /// The iovec arrays the kernel reads until the SQEs complete.
    _iovs: Vec<Vec<libc::iovec>>,
}

pub(crate) struct Uring {
    ring: IoUring,
    fd: OwnedFd,
    wake: Arc<OwnedFd>,
    /// The eventfd read's target, alive while the read is armed.
    wake_buf: Box<u64>,
    wake_armed: bool,
    next_sqe: u64,
    sqes: HashMap<u64, Sqe>,
    cmds: HashMap<u64, Cmd>,
    done: Vec<(u64, io::Result<()>)>,
}

// SAFETY: the raw pointers inside (iovecs) point into the engine's buffers, which the
// dispatcher thread that owns both this and the engine keeps alive; `Uring` moves to
// that thread once, before any I/O.
unsafe impl Send for Uring {}

/// Writes the eventfd: the dispatcher wakes up and reads its messages.
pub(crate) fn wake(efd: RawFd) {
    let one: u64 = 1;
    // SAFETY: writes 8 bytes from a live u64 to an eventfd; a failure (the counter
    // full, which takes 2^64 - 1 wake-ups) changes nothing.
    unsafe {
        libc::write(efd, (&one as *const u64).cast(), 8);
    }
}

/// Whether a ring as the runtime needs it can be set up here; why not, if not.
pub(crate) fn probe() -> Result<(), String> {
    ring(8).map(|_| ()).map_err(|e| e.to_string())
}

fn ring(entries: u32) -> io::Result<IoUring> {
    let ring = IoUring::new(entries)
        .map_err(|e| io::Error::new(e.kind(), format!("io_uring_setup: {e}")))?;
    if !ring.params().is_feature_ext_arg() {
        return Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "io_uring without IORING_FEAT_EXT_ARG (Linux 5.11)",
        ));
    }
    Ok(ring)
}

impl Uring {
    pub(crate) fn new(fd: RawFd, depth: u32) -> io::Result<Uring> {
        let ring = ring((4 * depth).clamp(16, 1024).next_power_of_two())?;
        // SAFETY: `eventfd` takes no pointers; a non-negative result is a new
        // descriptor owned here alone.
        let efd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) };
        if efd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: just created, owned here alone.
        let wake = Arc::new(unsafe { OwnedFd::from_raw_fd(efd) });
        Ok(Uring {
            ring,
            fd: dup_fd(fd)?,
            wake,
            wake_buf: Box::new(0),
            wake_armed: false,
            next_sqe: 0,
            sqes: HashMap::new(),
            cmds: HashMap::new(),
            done: Vec::new(),
        })
    }

    pub(crate) fn waker(&self) -> Arc<OwnedFd> {
        self.wake.clone()
    }

    fn push(&mut self, e: io_uring::squeue::Entry) -> io::Result<()> {
        loop {
            // SAFETY: every entry's pointers (iovec arrays, buffers, the eventfd
            // target) stay valid until its completion is reaped: the arrays in
            // `cmds`, the buffers in the engine (see the crate docs), `wake_buf` in
            // `self`, which lives until the ring is dropped.
            if unsafe { self.ring.submission().push(&e) }.is_ok() {
                return Ok(());
            }
            self.ring.submit()?;
        }
    }

    pub(crate) fn submit(&mut self, cmd: u64, job: IoJob) -> io::Result<()> {
        let fd = types::Fd(self.fd.as_raw_fd());
        let mut entries = Vec::new();
        let mut iovs = Vec::new();
        let write = matches!(job, IoJob::Write(_));
        match job {
            IoJob::Flush => entries.push((
                opcode::Fsync::new(fd)
                    .flags(types::FsyncFlags::DATASYNC)
                    .build(),
                0,
            )),
            IoJob::Read(runs) | IoJob::Write(runs) => {
                for r in runs {
                    let n: u64 = r.iov.iter().map(|v| v.iov_len as u64).sum();
                    let (iov, len) = (r.iov.as_ptr(), r.iov.len() as u32);
                    // One buffer: plain read/write (the kernel's single-buffer path);
                    // several: the vectored form.
                    let e = match (write, &r.iov[..]) {
                        (true, [v]) => {
                            opcode::Write::new(fd, v.iov_base as *const u8, v.iov_len as u32)
                                .offset(r.offset)
                                .build()
                        }
                        (false, [v]) => opcode::Read::new(fd, v.iov_base.cast(), v.iov_len as u32)
                            .offset(r.offset)
                            .build(),
                        (true, _) => opcode::Writev::new(fd, iov, len).offset(r.offset).build(),
                        (false, _) => opcode::Readv::new(fd, iov, len).offset(r.offset).build(),
                    };
                    entries.push((e, n));
                    iovs.push(r.iov);
                }
            }
        }
        if entries.is_empty() {
            // Nothing to move (the dispatcher normally completes such a command itself).
            self.done.push((cmd, Ok(())));
            return Ok(());
        }
        self.cmds.insert(
            cmd,
            Cmd {
                left: entries.len() as u32,
                err: None,
                _iovs: iovs,
            },
        );
        for (e, expect) in entries {
            let id = self.next_sqe;
            self.next_sqe += 1;
            self.sqes.insert(id, Sqe { cmd, expect });
            self.push(e.user_data(id))?;
        }
        self.ring.submit()?;
        Ok(())
    }

    /// Waits for a completion, a wake-up or the timeout; returns the finished
    /// commands.
    pub(crate) fn wait(
        &mut self,
        timeout: Option<Duration>,
    ) -> io::Result<Vec<(u64, io::Result<()>)>> {
        if !self.wake_armed {
            let buf: *mut u64 = &mut *self.wake_buf;
            let e = opcode::Read::new(types::Fd(self.wake.as_raw_fd()), buf.cast(), 8)
                .build()
                .user_data(WAKE);
            self.push(e)?;
            self.wake_armed = true;
        }
        if self.done.is_empty() {
            let r = match timeout {
                Some(t) => {
                    let ts = types::Timespec::from(t);
                    let args = types::SubmitArgs::new().timespec(&ts);
                    self.ring.submitter().submit_with_args(1, &args)
                }
                None => self.ring.submit_and_wait(1),
            };
            match r {
                Ok(_) => {}
                Err(e) if matches!(e.raw_os_error(), Some(libc::ETIME) | Some(libc::EINTR)) => {}
                Err(e) => return Err(e),
            }
        }
        let cqes: Vec<(u64, i32)> = self
            .ring
            .completion()
            .map(|c| (c.user_data(), c.result()))
            .collect();
        for (id, res) in cqes {
            if id == WAKE {
                self.wake_armed = false;
                continue;
            }
            let sqe = self
                .sqes
                .remove(&id)
                .expect("a completion of a submitted entry");
            let c = self
                .cmds
                .get_mut(&sqe.cmd)
                .expect("its command is in flight");
            if res < 0 {
                c.err.get_or_insert(io::Error::from_raw_os_error(-res));
            } else if (res as u64) < sqe.expect {
                c.err.get_or_insert(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    format!("short transfer: {res} of {} bytes", sqe.expect),
                ));
            }
            c.left -= 1;
            if c.left == 0 {
                let c = self.cmds.remove(&sqe.cmd).expect("present");
                self.done.push((sqe.cmd, c.err.map_or(Ok(()), Err)));
            }
        }
        Ok(std::mem::take(&mut self.done))
    }
}

impl Drop for Uring {
    /// The eventfd read targets `wake_buf`: complete it (write the eventfd) and reap it
    /// before the buffer goes, rather than trusting the ring's teardown to cancel it.
    fn drop(&mut self) {
        if !self.wake_armed {
            return;
        }
        wake(self.wake.as_raw_fd());
        for _ in 0..1000 {
            if self.ring.submit_and_wait(1).is_err() {
                break;
            }
            let seen = self.ring.completion().any(|c| c.user_data() == WAKE);
            if seen {
                return;
            }
        }
        // Could not reap it: leak the buffer rather than free memory the kernel may
        // still write.
        std::mem::forget(std::mem::take(&mut self.wake_buf));
    }
}
