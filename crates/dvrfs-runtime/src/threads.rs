//! The thread-pool back end, for kernels without a usable io_uring: `queue_depth`
//! threads doing `preadv`/`pwritev`/`fdatasync` on a duplicate of the device's
//! descriptor, each finished command reported through a callback.

use crate::{dup_fd, IoJob, Run};
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::mpsc::{self, Sender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

struct Job(u64, IoJob);

// SAFETY: the iovecs point into the engine's buffers, kept alive and in place by the
// dispatcher until the command's completion comes back from this pool.
unsafe impl Send for Job {}

pub(crate) struct Pool {
    tx: Option<Sender<Job>>,
    threads: Vec<JoinHandle<()>>,
}

impl Pool {
    pub(crate) fn new(
        fd: RawFd,
        depth: u32,
        done: impl Fn(u64, io::Result<()>) + Send + Sync + 'static,
    ) -> io::Result<Pool> {
        let fd = Arc::new(dup_fd(fd)?);
        let (tx, rx) = mpsc::channel::<Job>();
        let rx = Arc::new(Mutex::new(rx));
        let done = Arc::new(done);
        let mut threads = Vec::new();
        for i in 0..depth.max(1) {
            let (fd, rx, done) = (fd.clone(), rx.clone(), done.clone());
            threads.push(
                std::thread::Builder::new()
                    .name(format!("dvrfs-io-{i}"))
                    .spawn(move || loop {
                        let job = rx.lock().unwrap_or_else(|e| e.into_inner()).recv();
                        let Ok(Job(id, job)) = job else { return };
                        done(id, perform(&fd, job));
                    })?,
            );
        }
        Ok(Pool {
            tx: Some(tx),
            threads,
        })
    }

    pub(crate) fn submit(&mut self, id: u64, job: IoJob) {
        if let Some(tx) = &self.tx {
            // The workers live as long as the pool.
            let _ = tx.send(Job(id, job));
        }
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        self.tx.take();
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

fn perform(fd: &OwnedFd, job: IoJob) -> io::Result<()> {
    let fd = fd.as_raw_fd();
    match job {
        IoJob::Flush => {
            // SAFETY: no pointers.
            if unsafe { libc::fdatasync(fd) } < 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        }
        IoJob::Read(runs) => runs.iter().try_for_each(|r| transfer(fd, r, false)),
        IoJob::Write(runs) => runs.iter().try_for_each(|r| transfer(fd, r, true)),
    }
}

/// One run, all of it (a short transfer goes on from where it stopped).
fn transfer(fd: RawFd, r: &Run, write: bool) -> io::Result<()> {
    let mut iov = r.iov.clone();
    let mut offset = r.offset;
    let mut first = 0;
    while first < iov.len() {
        let v = &iov[first..];
        // SAFETY: the iovecs describe live buffers of the engine (see `Job`).
        let n = unsafe {
            if write {
                libc::pwritev(fd, v.as_ptr(), v.len() as i32, offset as libc::off_t)
            } else {
                libc::preadv(fd, v.as_ptr(), v.len() as i32, offset as libc::off_t)
            }
        };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the device ended before the transfer",
            ));
        }
        let mut n = n as usize;
        offset += n as u64;
        while n > 0 && first < iov.len() {
            let l = iov[first].iov_len;
            if n >= l {
                n -= l;
                first += 1;
            } else {
                iov[first].iov_base = iov[first].iov_base.wrapping_byte_add(n);
                iov[first].iov_len -= n;
                n = 0;
            }
        }
    }
    Ok(())
}
