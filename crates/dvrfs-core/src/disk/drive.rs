//! A whole drive as a host sees it: commands arrive at any time, wait in the drive's
//! command queue (NCQ) and are served one at a time by the mechanical model
//! ([`super::Hdd`]). This is what `dvrfs emulate` runs in wall-clock time and what the
//! emulator's predictions run in virtual time; it is sans-I/O and deterministic (time
//! comes in as arguments).
//!
//! The contract with a driver:
//! - [`Drive::arrive`] hands in a command at the time it arrived (never earlier than a
//!   time already passed to the drive);
//! - [`Drive::next_completion_ns`] says when the command in service ends;
//! - [`Drive::complete`] at or after that time returns every command that has ended by
//!   `now_ns`, in the order they ended, each with its [`TraceRow`], and starts the
//!   next ones.
//!
//! Hand in every arrival up to `now_ns` before calling `complete(now_ns)`: the drive
//! chooses the next command among those that have arrived by the time it becomes free.
//!
//! Scheduling (first version): the commands are served in arrival order whatever the
//! queue depth; a flush waits for every command that arrived before it, and commands
//! that arrive after it wait for it.

use std::collections::VecDeque;

use super::model::DiskModel;
use super::timer::{DiskTimer, HddDisk};
use super::{Access, AccessTiming};

/// The deepest command queue a drive may model (SATA NCQ has 32 tags).
pub const MAX_NCQ: u32 = 32;

/// What the host asks of the drive.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CommandKind {
    Read {
        lba: u64,
        sectors: u32,
    },
    Write {
        lba: u64,
        sectors: u32,
    },
    /// Write the drive's cache to the media (FLUSH CACHE: not queued).
    Flush,
}

/// One command, named by the driver's id (returned with its completion).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Command {
    pub id: u64,
    pub kind: CommandKind,
}

/// Direction of a command in a trace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Direction {
    Read,
    Write,
    Flush,
}

impl Direction {
    pub fn as_str(self) -> &'static str {
        match self {
            Direction::Read => "read",
            Direction::Write => "write",
            Direction::Flush => "flush",
        }
    }
}

/// One served command, as the emulator's `--trace` writes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TraceRow {
    pub id: u64,
    pub arrival_ns: u64,
    pub start_ns: u64,
    pub end_ns: u64,
    pub offset_bytes: u64,
    pub length_bytes: u64,
    pub direction: Direction,
    /// Commands in the drive (queued or in service) when this one arrived, itself
    /// included.
    pub queue_depth: u32,
    /// How the mechanism spent `start_ns..end_ns`.
    pub timing: AccessTiming,
}

/// Totals since the drive was made.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DriveStats {
    pub commands: u64,
    pub reads: u64,
    pub writes: u64,
    pub flushes: u64,
    pub bytes_read: u64,
    pub bytes_written: u64,
    /// Time the mechanism spent on commands (the sum of `end_ns - start_ns`).
    pub busy_ns: u64,
    /// Most commands in the drive at once.
    pub max_queue_depth: u32,
}

/// Why a drive cannot be made.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DriveError {
    #[error("a command queue of {0} is out of range: a drive queues 1 to {MAX_NCQ} commands")]
    QueueDepth(u32),
}

struct Queued {
    cmd: Command,
    arrival_ns: u64,
    queue_depth: u32,
}

struct InService {
    q: Queued,
    timing: AccessTiming,
}

/// The drive (see the module docs).
pub struct Drive {
    disk: HddDisk,
    ncq: u32,
    sector_bytes: u64,
    waiting: VecDeque<Queued>,
    in_service: Option<InService>,
    /// The latest time handed in.
    now_ns: u64,
    stats: DriveStats,
}

impl Drive {
    /// A drive of `model` with a command queue of `ncq` commands (1 = arrival order).
    /// `seed` seeds the model's rare slow accesses.
    pub fn new(model: &DiskModel, ncq: u32, seed: u64) -> Result<Drive, DriveError> {
        if !(1..=MAX_NCQ).contains(&ncq) {
            return Err(DriveError::QueueDepth(ncq));
        }
        Ok(Drive {
            disk: HddDisk::new(model, seed),
            ncq,
            sector_bytes: model.sector_bytes as u64,
            waiting: VecDeque::new(),
            in_service: None,
            now_ns: 0,
            stats: DriveStats::default(),
        })
    }

    pub fn ncq(&self) -> u32 {
        self.ncq
    }

    pub fn sector_bytes(&self) -> u64 {
        self.sector_bytes
    }

    pub fn capacity_bytes(&self) -> u64 {
        self.disk.capacity_bytes()
    }

    /// Commands in the drive (waiting or in service).
    pub fn depth(&self) -> u32 {
        self.waiting.len() as u32 + u32::from(self.in_service.is_some())
    }

    pub fn stats(&self) -> DriveStats {
        self.stats
    }

    /// A command arrives at `now_ns`. An arrival before a time already handed in is
    /// taken as arriving at that time.
    pub fn arrive(&mut self, now_ns: u64, cmd: Command) {
        let now_ns = now_ns.max(self.now_ns);
        self.now_ns = now_ns;
        let queue_depth = self.depth() + 1;
        self.stats.max_queue_depth = self.stats.max_queue_depth.max(queue_depth);
        self.waiting.push_back(Queued {
            cmd,
            arrival_ns: now_ns,
            queue_depth,
        });
        if self.in_service.is_none() {
            self.start_next(now_ns);
        }
    }

    /// When the command in service ends, if there is one.
    pub fn next_completion_ns(&self) -> Option<u64> {
        self.in_service.as_ref().map(|s| s.timing.end_ns)
    }

    /// Every command that has ended by `now_ns`, in the order they ended.
    pub fn complete(&mut self, now_ns: u64) -> Vec<TraceRow> {
        let now_ns = now_ns.max(self.now_ns);
        self.now_ns = now_ns;
        let mut done = Vec::new();
        while let Some(s) = self.in_service.take_if(|s| s.timing.end_ns <= now_ns) {
            let end_ns = s.timing.end_ns;
            done.push(self.finish(s));
            self.start_next(end_ns);
        }
        done
    }

    fn finish(&mut self, s: InService) -> TraceRow {
        let (offset_bytes, length_bytes, direction) = match s.q.cmd.kind {
            CommandKind::Read { lba, sectors } => (lba, sectors, Direction::Read),
            CommandKind::Write { lba, sectors } => (lba, sectors, Direction::Write),
            CommandKind::Flush => (0, 0, Direction::Flush),
        };
        let length_bytes = length_bytes as u64 * self.sector_bytes;
        let st = &mut self.stats;
        st.commands += 1;
        st.busy_ns += s.timing.end_ns - s.timing.start_ns;
        match direction {
            Direction::Read => {
                st.reads += 1;
                st.bytes_read += length_bytes;
            }
            Direction::Write => {
                st.writes += 1;
                st.bytes_written += length_bytes;
            }
            Direction::Flush => st.flushes += 1,
        }
        TraceRow {
            id: s.q.cmd.id,
            arrival_ns: s.q.arrival_ns,
            start_ns: s.timing.start_ns,
            end_ns: s.timing.end_ns,
            offset_bytes: offset_bytes * self.sector_bytes,
            length_bytes,
            direction,
            queue_depth: s.q.queue_depth,
            timing: s.timing,
        }
    }

    /// The drive became free at `free_ns`: starts the next command, if any.
    fn start_next(&mut self, free_ns: u64) {
        assert!(
            self.in_service.is_none(),
            "the drive serves one command at a time"
        );
        let Some(q) = self.waiting.pop_front() else {
            return;
        };
        let issue_ns = free_ns.max(q.arrival_ns);
        let timing = match q.cmd.kind {
            CommandKind::Read { lba, sectors } => self.disk.service(
                issue_ns,
                &Access {
                    lba,
                    sectors,
                    write: false,
                },
            ),
            CommandKind::Write { lba, sectors } => self.disk.service(
                issue_ns,
                &Access {
                    lba,
                    sectors,
                    write: true,
                },
            ),
            CommandKind::Flush => self.disk.flush(issue_ns),
        };
        assert!(
            timing.start_ns >= q.arrival_ns && timing.end_ns >= timing.start_ns,
            "a command starts after it arrived and ends after it starts"
        );
        self.in_service = Some(InService { q, timing });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn drive(ncq: u32) -> Drive {
        Drive::new(&DiskModel::builtin("avfs-250g").unwrap(), ncq, 1).unwrap()
    }

    #[test]
    fn queue_depth_out_of_range_is_refused() {
        let m = DiskModel::builtin("avfs-250g").unwrap();
        assert!(matches!(
            Drive::new(&m, 0, 1),
            Err(DriveError::QueueDepth(0))
        ));
        assert!(matches!(
            Drive::new(&m, 33, 1),
            Err(DriveError::QueueDepth(33))
        ));
    }

    #[test]
    fn commands_complete_one_after_another() {
        let mut d = drive(1);
        for id in 0..3 {
            d.arrive(
                0,
                Command {
                    id,
                    kind: CommandKind::Read {
                        lba: id * 1_000_000,
                        sectors: 8,
                    },
                },
            );
        }
        assert_eq!(d.depth(), 3);
        let mut rows = Vec::new();
        while let Some(t) = d.next_completion_ns() {
            rows.extend(d.complete(t));
        }
        assert_eq!(rows.iter().map(|r| r.id).collect::<Vec<_>>(), vec![0, 1, 2]);
        for w in rows.windows(2) {
            assert_eq!(w[1].start_ns, w[0].end_ns);
        }
        assert_eq!(rows[2].queue_depth, 3);
        let st = d.stats();
        assert_eq!((st.commands, st.reads, st.bytes_read), (3, 3, 3 * 8 * 512));
        assert_eq!(st.busy_ns, rows[2].end_ns);
    }
}
