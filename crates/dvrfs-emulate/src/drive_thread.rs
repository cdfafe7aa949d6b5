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
//! too. A reply later than [`LATE_NS`] after the model's end time (the host was
//! slow: a late wake-up, a slow `pread` or `fdatasync`) is counted, never hidden. Every
//! command the kernel sent is answered: when the channel closes (the session
//! ended) the queued commands still complete in their modelled time.
//!
//! The host's tags: a SATA host keeps at most `ncq` commands in the drive and the
//! rest in its own queue (Linux: the block layer, the disk's `queue_depth`). The
//! kernel sends the emulator up to 128 at once (the loop device's queue), so this
//! thread keeps the same host queue: at most `ncq` commands are in the drive, the
//! others wait here in arrival order and go in when a command completes (at the
//! time it is answered, when a host would learn of the free tag). The drive, and
//! the trace, see a command from the time it went in.

use std::collections::{BTreeMap, VecDeque};
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
    /// said (it panicked) is an `EIO`.
    pub fn answer(self, image: &Image) {
        match self {
            Pending::Read(reply, moved) => match moved.recv() {
                Ok(Ok(data)) => reply.data(&data),
                Ok(Err(e)) => reply.error(e),
                Err(_) => reply.error(Errno::EIO),
            },
            Pending::Write(reply, moved) => match moved.recv() {
                Ok(Ok(n)) => reply.written(n),
                Ok(Err(e)) => reply.error(e),
                Err(_) => reply.error(Errno::EIO),
            },
            Pending::Flush(reply) => match image.sync() {
                Ok(()) => reply.ok(),
                Err(_) => reply.error(Errno::EIO),
            },
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
                    held: VecDeque::new(),
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
    /// Commands beyond the drive's `ncq`, in arrival order (the host's queue).
    held: VecDeque<Arrival>,
    next_id: u64,
}

impl Runner {
    fn run(mut self, rx: mpsc::Receiver<Arrival>) {
        let mut open = true;
        while open || self.drive.depth() > 0 || !self.held.is_empty() {
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
                (false, None) => unreachable!("a held command waits only for a busy drive"),
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
                // Tags freed: held commands go in, as the host learns of it.
                while self.drive.depth() < self.drive.ncq() {
                    let Some(mut a) = self.held.pop_front() else {
                        break;
                    };
                    a.at_ns = self.shared.now_ns();
                    self.hand_in(a);
                }
            }
        }
        assert!(
            self.waiting.is_empty() && self.held.is_empty(),
            "every command handed to the drive was answered"
        );
    }

    /// A command from the FUSE threads: into the drive if a tag is free and no
    /// earlier command waits for one, else into the host's queue.
    fn arrive(&mut self, a: Arrival) {
        if self.held.is_empty() && self.drive.depth() < self.drive.ncq() {
            self.hand_in(a);
        } else {
            self.held.push_back(a);
        }
    }

    fn hand_in(&mut self, a: Arrival) {
        assert!(
            self.drive.depth() < self.drive.ncq(),
            "at most ncq commands in the drive"
        );
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
            pending.answer(&self.image);
            // POWER: the lead feeds the power helper's EnergyMeter here with
            // `row.timing` (and the idle time before `row.start_ns`), and stores its
            // joules in `Counters::energy_j` below.
            let late_ns = self.shared.now_ns().saturating_sub(row.end_ns);
            if late_ns > LATE_NS {
                late.0 += 1;
                late.1 = late.1.max(late_ns);
            }
        }
        let drive = self.drive.stats();
        self.shared.update(|c| {
            c.drive = drive;
            c.late_commands += late.0;
            c.max_late_ns = c.max_late_ns.max(late.1);
        });
        if let Some(t) = &self.trace {
            // A trace writer that failed reports it at the stop; serving goes on.
            let _ = t.send(done);
        }
    }
}
