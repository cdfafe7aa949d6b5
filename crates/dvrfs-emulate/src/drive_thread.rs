//! The drive thread: the one owner of the [`Drive`], which completes each command in
//! wall-clock time when the model says the disk would finish it, and only then
//! answers the kernel.
//!
//! Contract: the FUSE threads send each command here with its arrival time on the
//! emulator's monotonic clock and its reply, then move its bytes in the image (in
//! arrival order) and say so ([`Moved`]), while the drive serves it. This thread hands every arrival to the drive before it asks the
//! drive what has completed (the drive's contract), sleeps in the channel's receive
//! until the next completion time or the next arrival (no busy-waiting), and replies
//! to each completed command once its bytes have moved. A flush's reply waits for the image's `fdatasync`
//! too. A reply that starts later than [`LATE_NS`] after the model's end time (the
//! host was slow: a late wake-up, a slow `pread` or `fdatasync`, the reply before it)
//! is counted, never hidden. The reply's own work is not: writing a read's reply runs
//! the kernel's completion of the request (the loop device's bio, and for a file
//! system's page cache the pages' end of I/O and the reader's wake-up), work a real
//! disk's interrupt starts at its end time too; 1 MiB into ext4's page cache took 2.5
//! ms here. Every
//! command the kernel sent is answered: when the channel closes (the session
//! ended) the queued commands still complete in their modelled time.
//!
//! The host's queue is the drive's own ([`Drive`] keeps at most `ncq` commands in
//! its queue and the rest in arrival order, as Linux's block layer holds what a SATA
//! disk's tags cannot take): every command goes to the drive when it arrives, so the
//! trace's queue depth is what the kernel had outstanding (up to the loop device's
//! 128).
//!
//! Energy: after each batch the drive's energy meter is copied into the shared
//! counters, from which `DIR/stats` reports the joules up to the moment it is read.

use std::collections::BTreeMap;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::Arc;
use std::thread::JoinHandle;

use dvrfs_core::disk::{Command, CommandKind, Drive, TraceRow};
use fuser::{Errno, ReplyData, ReplyEmpty, ReplyWrite};

use crate::image::Image;
use crate::stats::{Shared, LATE_NS};

/// A command's bytes as they moved in the image (or the error that got), sent by
/// the FUSE thread once they did: the command goes to the drive first, so the
/// host's `pread`/`pwrite` runs while the drive serves it, not before.
pub type Moved<T> = mpsc::Receiver<Result<T, Errno>>;

/// The reply a command waits to send, with what it carries.
pub enum Pending {
    /// The bytes read.
    Read(ReplyData, Moved<Vec<u8>>),
    /// The count of bytes written.
    Write(ReplyWrite, Moved<u32>),
    Flush(ReplyEmpty),
}

impl Pending {
    /// Answers the kernel: waits for the bytes to have moved (they usually have),
    /// and for a flush makes the image durable first. A FUSE thread that never
    /// said (it panicked) is an `EIO`. Returns `now()` as the reply started.
    pub fn answer(self, image: &Image, now: impl Fn() -> u64) -> u64 {
        match self {
            Pending::Read(reply, moved) => {
                let got = moved.recv();
                let at = now();
                match got {
                    Ok(Ok(data)) => reply.data(&data),
                    Ok(Err(e)) => reply.error(e),
                    Err(_) => reply.error(Errno::EIO),
                }
                at
            }
            Pending::Write(reply, moved) => {
                let got = moved.recv();
                let at = now();
                match got {
                    Ok(Ok(n)) => reply.written(n),
                    Ok(Err(e)) => reply.error(e),
                    Err(_) => reply.error(Errno::EIO),
                }
                at
            }
            Pending::Flush(reply) => {
                let synced = image.sync();
                let at = now();
                match synced {
                    Ok(()) => reply.ok(),
                    Err(_) => reply.error(Errno::EIO),
                }
                at
            }
        }
    }
}

/// A command for the drive.
pub struct Arrival {
    pub at_ns: u64,
    pub kind: CommandKind,
    pub pending: Pending,
}

/// The running drive thread.
pub struct DriveThread {
    tx: mpsc::Sender<Arrival>,
    join: JoinHandle<()>,
}

impl DriveThread {
    /// Starts the thread; `trace` gets every completed command's row.
    pub fn start(
        drive: Drive,
        image: Arc<Image>,
        shared: Arc<Shared>,
        trace: Option<mpsc::Sender<Vec<TraceRow>>>,
    ) -> std::io::Result<DriveThread> {
        let (tx, rx) = mpsc::channel::<Arrival>();
        let join = std::thread::Builder::new()
            .name("emulate-drive".into())
            .spawn(move || {
                Runner {
                    drive,
                    image,
                    shared,
                    trace,
                    waiting: BTreeMap::new(),
                    next_id: 0,
                }
                .run(rx)
            })?;
        Ok(DriveThread { tx, join })
    }

    /// A sender for a FUSE thread.
    pub fn sender(&self) -> mpsc::Sender<Arrival> {
        self.tx.clone()
    }

    /// Waits until every command sent has completed and been answered (every other
    /// sender must be gone first).
    pub fn finish(self) {
        drop(self.tx);
        let _ = self.join.join();
    }
}

struct Runner {
    drive: Drive,
    image: Arc<Image>,
    shared: Arc<Shared>,
    trace: Option<mpsc::Sender<Vec<TraceRow>>>,
    /// Replies of the commands in the drive, by command id.
    waiting: BTreeMap<u64, Pending>,
    next_id: u64,
}

impl Runner {
    fn run(mut self, rx: mpsc::Receiver<Arrival>) {
        let mut open = true;
        while open || self.drive.depth() > 0 {
            // Wait for an arrival, or for the next completion.
            let got = match (open, self.drive.next_completion_ns()) {
                (true, None) => rx.recv().map_err(|_| RecvTimeoutError::Disconnected),
                (true, Some(end_ns)) => {
                    let wait = self.shared.instant_at(end_ns);
                    rx.recv_timeout(wait.saturating_duration_since(std::time::Instant::now()))
                }
                (false, Some(end_ns)) => {
                    std::thread::sleep(
                        self.shared
                            .instant_at(end_ns)
                            .saturating_duration_since(std::time::Instant::now()),
                    );
                    Err(RecvTimeoutError::Timeout)
                }
                (false, None) => unreachable!("a drive with commands has one in service"),
            };
            match got {
                Ok(a) => self.arrive(a),
                Err(RecvTimeoutError::Disconnected) => open = false,
                Err(RecvTimeoutError::Timeout) => {}
            }
            // Every arrival already sent goes in before the drive is asked.
            while open {
                match rx.try_recv() {
                    Ok(a) => self.arrive(a),
                    Err(mpsc::TryRecvError::Empty) => break,
                    Err(mpsc::TryRecvError::Disconnected) => open = false,
                }
            }
            let done = self.drive.complete(self.shared.now_ns());
            if !done.is_empty() {
                self.answer(done);
            }
        }
        assert!(
            self.waiting.is_empty(),
            "every command handed to the drive was answered"
        );
    }

    /// A command from the FUSE threads, into the drive (whose host queue holds what
    /// its tags cannot).
    fn arrive(&mut self, a: Arrival) {
        let id = self.next_id;
        self.next_id += 1;
        self.waiting.insert(id, a.pending);
        self.drive.arrive(a.at_ns, Command { id, kind: a.kind });
    }

    fn answer(&mut self, done: Vec<TraceRow>) {
        let mut late = (0u64, 0u64);
        for row in &done {
            let pending = self
                .waiting
                .remove(&row.id)
                .expect("a completed command was waiting for its reply");
            let replied_ns = pending.answer(&self.image, || self.shared.now_ns());
            let late_ns = replied_ns.saturating_sub(row.end_ns);
            if late_ns > LATE_NS {
                late.0 += 1;
                late.1 = late.1.max(late_ns);
            }
        }
        let drive = self.drive.stats();
        let meter = self.drive.energy_meter().cloned();
        self.shared.update(|c| {
            c.drive = drive;
            c.meter = meter;
            c.late_commands += late.0;
            c.max_late_ns = c.max_late_ns.max(late.1);
        });
        if let Some(t) = &self.trace {
            // A trace writer that failed reports it at the stop; serving goes on.
            let _ = t.send(done);
        }
    }
}
