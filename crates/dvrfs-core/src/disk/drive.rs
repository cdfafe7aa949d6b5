//! A whole drive as a host sees it: commands arrive at any time, wait in the host's
//! queue and the drive's command queue (NCQ) and are served one at a time by the
//! mechanical model ([`super::Hdd`]). This is what `dvrfs emulate` runs in wall-clock
//! time and what the emulator's predictions (`predict.rs`) run in virtual time; it is
//! sans-I/O and deterministic (time comes in as arguments).
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
//! chooses the next command among those that have arrived by the time it becomes free
//! (a command handed in with a later arrival time is not considered before it arrived).
//!
//! # The command queue
//!
//! The drive holds at most `ncq` commands, the one in service included (SATA NCQ: one
//! tag per command, 32 tags). Commands beyond that wait in the host's queue in arrival
//! order and enter the drive as tags free. Each time the mechanism becomes free the
//! drive serves, among the commands in its queue that have arrived:
//!
//! 1. the oldest command that has waited in the drive's queue longer than
//!    [`AGE_LIMIT_NS`], if any (oldest first), else
//! 2. the command with the shortest positioning time (SPTF): the seek or head switch,
//!    the write settle and the rotational wait to its first sector from where the head
//!    is and where the platter is at that moment, and none for a read whose start the
//!    read-ahead cache holds ([`super::Hdd::positioning_ns`]). Ties go to the earlier
//!    arrival.
//!
//! With `ncq = 1` there is never more than one candidate, so commands are served in
//! arrival order exactly.
//!
//! A flush (SATA FLUSH CACHE) is not a queued command: it enters the drive only when
//! every command that arrived before it has completed, and the commands behind it in
//! the host's queue wait until it has completed.
//!
//! # Energy
//!
//! A model with power figures gets an [`EnergyMeter`] fed with every command as it
//! starts ([`Drive::energy`] reports it). With a standby timer
//! ([`Drive::with_standby`], `hdparm -S` on a real disk) the meter decides when the
//! disk spins down, and a command that finds it in standby starts only once it has
//! spun up again: the wait is part of the command's start, as a host sees it.
//!
//! Invariants, asserted as the drive runs: one command in service at a time; a command
//! starts no earlier than it arrived and no earlier than the previous one ended; the
//! drive's queue never holds more than `ncq` commands; every command that arrived is
//! waiting, in service or completed exactly once (a count); a flush starts only when
//! everything before it has completed, and nothing after it starts before it ends.

use std::collections::VecDeque;

use super::hdd::Hdd;
use super::model::DiskModel;
use super::power::{Energy, EnergyMeter, PowerModel};
use super::{Access, AccessTiming};

/// The deepest command queue a drive may model (SATA NCQ has 32 tags).
pub const MAX_NCQ: u32 = 32;

/// A command that has waited in the drive's queue longer than this goes next, before
/// any shorter positioning (oldest first). Drives bound the wait of a queued command so
/// that one far from where the head works is not starved; their firmware limits are
/// not published, so this is chosen: above the time arrival order takes to drain a full
/// queue of 32 random reads on the slowest built-in model (32 x 17.8 ms = 570 ms on
/// laptop-5400, 32 x 13.4 ms = 430 ms on avfs-250g) would make the limit act only on
/// real starvation, but 500 ms is also what Linux's mq-deadline allows a read
/// (`read_expire`), and a drive that held a command longer than the host's own
/// scheduler would defeat it. 500 ms sits at the former for the 7200 rpm models and
/// equals the latter.
pub const AGE_LIMIT_NS: u64 = 500_000_000;

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
    /// Commands in the host's queue and the drive (queued or in service) when this
    /// one arrived, itself included: what the host has outstanding, the depth a host
    /// tool such as fio sets with `iodepth`.
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
    /// Most commands outstanding at once (host queue and drive, as `queue_depth`).
    pub max_queue_depth: u32,
}

/// Why a drive cannot be made.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DriveError {
    #[error("a command queue of {0} is out of range: a drive queues 1 to {MAX_NCQ} commands")]
    QueueDepth(u32),
    #[error("a standby timer needs the model's power figures (its spin-down and spin-up times): the model has no power section")]
    NoPowerFigures,
}

#[derive(Clone, Copy, Debug)]
struct Queued {
    cmd: Command,
    /// Arrival index: 0 for the first command handed in, then 1, 2, ...
    seq: u64,
    arrival_ns: u64,
    /// When it entered the drive's queue (took a tag); the age limit counts from here.
    /// Exact when the driver collects completions before handing in later arrivals
    /// (as the predictions do); a driver that hands in an arrival after a completion
    /// time it has not collected yet makes it late by at most that lag.
    entered_ns: u64,
    queue_depth: u32,
}

struct InService {
    q: Queued,
    timing: AccessTiming,
}

/// The drive (see the module docs).
pub struct Drive {
    hdd: Hdd,
    /// What a flush costs (see [`Drive::flush_timing`]).
    flush_overhead_ns: u64,
    capacity_bytes: u64,
    ncq: u32,
    sector_bytes: u64,
    /// Commands not yet in the drive, in arrival order.
    host: VecDeque<Queued>,
    /// Commands in the drive's queue, not in service, in arrival order.
    queued: Vec<Queued>,
    in_service: Option<InService>,
    /// Arrival indices of the flushes handed in and not yet completed, in order.
    pending_flushes: VecDeque<u64>,
    /// The latest time handed in.
    now_ns: u64,
    /// When the last command served ended (0 before the first).
    last_end_ns: u64,
    arrived: u64,
    aged: u64,
    stats: DriveStats,
    /// The disk's energy, when the model has power figures (`disk/power.rs`).
    meter: Option<EnergyMeter>,
    model_power: Option<PowerModel>,
}

impl Drive {
    /// A drive of `model` with a command queue of `ncq` commands (1 = arrival order).
    /// `seed` seeds the model's rare slow accesses.
    pub fn new(model: &DiskModel, ncq: u32, seed: u64) -> Result<Drive, DriveError> {
        if !(1..=MAX_NCQ).contains(&ncq) {
            return Err(DriveError::QueueDepth(ncq));
        }
        Ok(Drive {
            hdd: Hdd::new(model, seed),
            flush_overhead_ns: (model.command_overhead_ms * 1e6).round() as u64,
            capacity_bytes: model.capacity_bytes(),
            ncq,
            sector_bytes: model.sector_bytes as u64,
            host: VecDeque::new(),
            queued: Vec::with_capacity(ncq as usize),
            in_service: None,
            pending_flushes: VecDeque::new(),
            now_ns: 0,
            last_end_ns: 0,
            arrived: 0,
            aged: 0,
            stats: DriveStats::default(),
            meter: model.power.map(|p| EnergyMeter::new(&p, 0, None)),
            model_power: model.power,
        })
    }

    /// The same drive with a standby timer (`hdparm -S`): after `after_ns` without a
    /// command the disk spins down, and the next command waits for the spin-up. Only
    /// a model with power figures knows its spin times; for one without, the timer
    /// is refused.
    pub fn with_standby(mut self, after_ns: u64) -> Result<Drive, DriveError> {
        assert!(
            self.arrived == 0,
            "the standby timer is set before the first command"
        );
        let power = self.model_power.ok_or(DriveError::NoPowerFigures)?;
        self.meter = Some(EnergyMeter::new(&power, 0, Some(after_ns)));
        Ok(self)
    }

    /// The drive's energy meter (a copy can report at any later time: `dvrfs emulate`
    /// publishes one for its stats file).
    pub fn energy_meter(&self) -> Option<&EnergyMeter> {
        self.meter.as_ref()
    }

    /// The energy the disk used from time 0 to `now_ns` (at least the last time handed
    /// in), if the model has power figures.
    pub fn energy(&self, now_ns: u64) -> Option<Energy> {
        self.meter
            .as_ref()
            .map(|m| m.report(now_ns.max(self.now_ns)))
    }

    pub fn ncq(&self) -> u32 {
        self.ncq
    }

    pub fn sector_bytes(&self) -> u64 {
        self.sector_bytes
    }

    pub fn capacity_bytes(&self) -> u64 {
        self.capacity_bytes
    }

    /// Commands outstanding: in the host's queue, in the drive's queue or in service.
    pub fn depth(&self) -> u32 {
        (self.host.len() + self.queued.len()) as u32 + u32::from(self.in_service.is_some())
    }

    /// Commands in the drive (its queue and the one in service): at most `ncq`.
    pub fn drive_depth(&self) -> u32 {
        self.queued.len() as u32 + u32::from(self.in_service.is_some())
    }

    /// Commands served because they reached [`AGE_LIMIT_NS`] rather than by SPTF.
    pub fn aged_commands(&self) -> u64 {
        self.aged
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
        if cmd.kind == CommandKind::Flush {
            self.pending_flushes.push_back(self.arrived);
        }
        self.host.push_back(Queued {
            cmd,
            seq: self.arrived,
            arrival_ns: now_ns,
            entered_ns: now_ns,
            queue_depth,
        });
        self.arrived += 1;
        if self.in_service.is_none() {
            self.start_next(now_ns);
        } else {
            self.admit(now_ns);
        }
        self.check_conservation();
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
            if s.q.cmd.kind == CommandKind::Flush {
                assert_eq!(
                    self.pending_flushes.pop_front(),
                    Some(s.q.seq),
                    "flushes complete in arrival order"
                );
            }
            done.push(self.finish(s));
            self.start_next(end_ns);
        }
        self.check_conservation();
        done
    }

    /// Every command handed in is outstanding or has completed, exactly once.
    fn check_conservation(&self) {
        assert_eq!(
            self.arrived,
            self.stats.commands + self.depth() as u64,
            "arrived = completed + outstanding"
        );
        assert!(
            self.drive_depth() <= self.ncq,
            "the drive holds at most ncq"
        );
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

    /// Moves commands that have arrived by `t_ns` from the host's queue into the
    /// drive's while it has free tags. A flush at the head of the host's queue stops
    /// this (it is not queued; see `start_next`).
    fn admit(&mut self, t_ns: u64) {
        while self.drive_depth() < self.ncq {
            match self.host.front() {
                Some(q) if q.arrival_ns <= t_ns && q.cmd.kind != CommandKind::Flush => {
                    let mut q = self.host.pop_front().expect("front exists");
                    q.entered_ns = t_ns.max(q.arrival_ns);
                    self.queued.push(q);
                }
                _ => break,
            }
        }
        assert!(
            self.drive_depth() <= self.ncq,
            "the drive holds at most ncq"
        );
    }

    /// The drive became free at `free_ns`: starts the next command, if any, at the
    /// first time at or after `free_ns` that one has arrived.
    fn start_next(&mut self, free_ns: u64) {
        assert!(
            self.in_service.is_none(),
            "the drive serves one command at a time"
        );
        let mut t_ns = free_ns;
        loop {
            self.admit(t_ns);
            if let Some(i) = self.choose(t_ns) {
                let q = self.queued.remove(i);
                self.serve(t_ns, q);
                return;
            }
            if self.queued.is_empty() {
                if let Some(q) = self.host.front() {
                    if q.cmd.kind == CommandKind::Flush && q.arrival_ns <= t_ns {
                        let q = self.host.pop_front().expect("front exists");
                        self.serve(t_ns, q);
                        return;
                    }
                }
            }
            // Nothing has arrived by `t_ns`: wait for the next arrival.
            let next = self
                .queued
                .iter()
                .map(|q| q.arrival_ns)
                .chain(self.host.front().map(|q| q.arrival_ns))
                .min();
            match next {
                Some(n) => {
                    assert!(
                        n > t_ns,
                        "a waiting command that had arrived was not served"
                    );
                    t_ns = n;
                }
                None => return,
            }
        }
    }

    /// The index in `queued` of the command to serve at `t_ns` (see the module docs),
    /// among those that have arrived by then.
    fn choose(&mut self, t_ns: u64) -> Option<usize> {
        let ready = |q: &Queued| q.arrival_ns <= t_ns;
        // `queued` is in arrival order, so the first aged one is the oldest.
        let aged = self
            .queued
            .iter()
            .position(|q| ready(q) && t_ns.saturating_sub(q.entered_ns) > AGE_LIMIT_NS);
        if aged.is_some() {
            self.aged += 1;
            return aged;
        }
        let mut best: Option<(usize, f64)> = None;
        for (i, q) in self.queued.iter().enumerate() {
            if !ready(q) {
                continue;
            }
            let p = match access_of(&q.cmd.kind) {
                Some(a) => self.hdd.positioning_ns(t_ns, &a),
                None => unreachable!("a flush never enters the drive's queue"),
            };
            // Strictly shorter wins: ties keep the earlier arrival.
            if best.is_none_or(|(_, b)| p < b) {
                best = Some((i, p));
            }
        }
        best.map(|(i, _)| i)
    }

    /// Starts `q` at `t_ns`, or once the disk has spun up if it was in standby.
    fn serve(&mut self, t_ns: u64, q: Queued) {
        assert!(
            t_ns >= q.arrival_ns && t_ns >= self.last_end_ns,
            "a command starts after it arrived and after the previous one ended"
        );
        let t_ns = t_ns + self.meter.as_mut().map_or(0, |m| m.wake(t_ns));
        let first_flush = self.pending_flushes.front().copied();
        let timing = match access_of(&q.cmd.kind) {
            Some(a) => {
                assert!(
                    first_flush.is_none_or(|f| q.seq < f),
                    "no command passes a flush that arrived before it"
                );
                self.hdd.service(t_ns, &a)
            }
            None => {
                assert!(
                    first_flush == Some(q.seq)
                        && self.stats.commands == q.seq
                        && self.queued.is_empty(),
                    "a flush starts when everything before it has completed"
                );
                self.flush_timing(t_ns)
            }
        };
        assert!(
            timing.start_ns == t_ns && timing.end_ns >= timing.start_ns,
            "a command starts when served and ends after it starts"
        );
        if let Some(m) = self.meter.as_mut() {
            m.command(&timing);
        }
        self.last_end_ns = timing.end_ns;
        self.in_service = Some(InService { q, timing });
    }

    /// A flush, timed as [`super::HddDisk::flush`] times it for the simulator (the
    /// write-back cache is modelled as interface time only, so a flush has nothing to
    /// destage: the controller's overhead). `flush_matches_the_simulators` keeps the
    /// two equal.
    fn flush_timing(&self, t_ns: u64) -> AccessTiming {
        AccessTiming {
            start_ns: t_ns,
            end_ns: t_ns + self.flush_overhead_ns,
            overhead_ns: self.flush_overhead_ns,
            ..Default::default()
        }
    }
}

/// The media access of a read or write; none for a flush.
fn access_of(kind: &CommandKind) -> Option<Access> {
    match *kind {
        CommandKind::Read { lba, sectors } => Some(Access {
            lba,
            sectors,
            write: false,
        }),
        CommandKind::Write { lba, sectors } => Some(Access {
            lba,
            sectors,
            write: true,
        }),
        CommandKind::Flush => None,
    }
}

#[cfg(test)]
mod tests {
    use rand_chacha::ChaCha8Rng;
    use rand_core::{RngCore, SeedableRng};

    use super::super::timer::{DiskTimer, HddDisk};
    use super::*;

    fn model() -> DiskModel {
        DiskModel::builtin("avfs-250g").unwrap()
    }

    fn drive(ncq: u32) -> Drive {
        Drive::new(&model(), ncq, 1).unwrap()
    }

    fn read(id: u64, lba: u64) -> Command {
        Command {
            id,
            kind: CommandKind::Read { lba, sectors: 8 },
        }
    }

    /// Runs the drive until it is idle, returning the rows in completion order.
    fn drain(d: &mut Drive) -> Vec<TraceRow> {
        let mut rows = Vec::new();
        while let Some(t) = d.next_completion_ns() {
            rows.extend(d.complete(t));
        }
        assert_eq!(d.depth(), 0);
        rows
    }

    fn ids(rows: &[TraceRow]) -> Vec<u64> {
        rows.iter().map(|r| r.id).collect()
    }

    /// `n` random 4 KiB reads over the whole disk, ids 0..n.
    fn random_reads(n: u64, seed: u64) -> Vec<Command> {
        let lbas = model().lbas;
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        (0..n)
            .map(|id| read(id, rng.next_u64() % (lbas - 8)))
            .collect()
    }

    #[test]
    fn energy_is_metered_and_standby_delays_the_next_command() {
        let m = DiskModel::builtin("avfs-250g").unwrap();
        let p = m.power.expect("the built-in models carry power figures");
        let read = |id, lba| Command {
            id,
            kind: CommandKind::Read { lba, sectors: 8 },
        };
        // Without a timer: idle power between commands, no spin-up.
        let mut d = Drive::new(&m, 1, 1).unwrap();
        d.arrive(0, read(0, 0));
        let end = d.next_completion_ns().unwrap();
        d.complete(end);
        let e = d.energy(10_000_000_000).unwrap();
        assert_eq!(e.spin_ups, 0);
        assert_eq!(e.span_ns, 10_000_000_000);
        assert!(e.joules > p.idle_w * 10.0 * 0.999, "{} J", e.joules);
        // With a 1 s timer: a command 10 s later waits for the spin-up.
        let mut d = Drive::new(&m, 1, 1)
            .unwrap()
            .with_standby(1_000_000_000)
            .unwrap();
        d.arrive(0, read(0, 0));
        let end = d.next_completion_ns().unwrap();
        d.complete(end);
        d.arrive(30_000_000_000, read(1, 1_000_000));
        let rows = d.complete(u64::MAX);
        assert_eq!(rows.len(), 1);
        // Spun down 1 s after the first command (done long before 30 s): the second
        // starts after a whole spin-up.
        let spin_up_ns = (p.spin_up_s * 1e9).round() as u64;
        assert!(end + 1_000_000_000 + (p.spin_down_s * 1e9) as u64 <= 30_000_000_000);
        assert_eq!(rows[0].start_ns, 30_000_000_000 + spin_up_ns);
        assert_eq!(d.energy(rows[0].end_ns).unwrap().spin_ups, 1);
        // A model without power figures has no meter and refuses a timer.
        let mut bare = m.clone();
        bare.power = None;
        assert!(Drive::new(&bare, 1, 1).unwrap().energy(0).is_none());
        assert!(matches!(
            Drive::new(&bare, 1, 1).unwrap().with_standby(1),
            Err(DriveError::NoPowerFigures)
        ));
    }

    #[test]
    fn queue_depth_out_of_range_is_refused() {
        let m = model();
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
            d.arrive(0, read(id, id * 1_000_000));
        }
        assert_eq!(d.depth(), 3);
        let rows = drain(&mut d);
        assert_eq!(ids(&rows), vec![0, 1, 2]);
        for w in rows.windows(2) {
            assert_eq!(w[1].start_ns, w[0].end_ns);
        }
        assert_eq!(rows[2].queue_depth, 3);
        let st = d.stats();
        assert_eq!((st.commands, st.reads, st.bytes_read), (3, 3, 3 * 8 * 512));
        assert_eq!(st.busy_ns, rows[2].end_ns);
    }

    #[test]
    fn ncq_1_serves_in_arrival_order_and_times_as_the_model_does() {
        let cmds = random_reads(32, 3);
        let mut d = drive(1);
        for c in &cmds {
            d.arrive(0, *c);
        }
        let rows = drain(&mut d);
        assert_eq!(ids(&rows), (0..32).collect::<Vec<_>>());
        // Exactly what the queue-depth-1 model gives back to back.
        let mut hdd = Hdd::new(&model(), 1);
        let mut t = 0;
        for (r, c) in rows.iter().zip(&cmds) {
            let want = hdd.service(t, &access_of(&c.kind).unwrap());
            assert_eq!(r.timing, want);
            t = want.end_ns;
        }
    }

    #[test]
    fn ncq_32_reorders_32_random_reads_and_finishes_sooner() {
        let run = |ncq| {
            let mut d = drive(ncq);
            for c in random_reads(32, 3) {
                d.arrive(0, c);
            }
            drain(&mut d)
        };
        let (fifo, sptf) = (run(1), run(32));
        let (t_fifo, t_sptf) = (fifo[31].end_ns, sptf[31].end_ns);
        assert!(
            (t_sptf as f64) < 0.7 * t_fifo as f64,
            "NCQ 32: {t_sptf} ns, arrival order: {t_fifo} ns"
        );
        assert_ne!(ids(&sptf), ids(&fifo));
        let mut sorted = ids(&sptf);
        sorted.sort_unstable();
        assert_eq!(sorted, ids(&fifo), "every command once");
        // SPTF serves each command at the least positioning of those waiting: its
        // positioning (seek and rotation) in all is well below arrival order's (the
        // queue drains, so the last few choose among few).
        let pos = |rows: &[TraceRow]| {
            rows.iter()
                .map(|r| r.timing.seek_ns + r.timing.rotation_ns)
                .sum::<u64>()
        };
        assert!(
            (pos(&sptf) as f64) < 0.7 * pos(&fifo) as f64,
            "{} vs {}",
            pos(&sptf),
            pos(&fifo)
        );
    }

    #[test]
    fn the_age_limit_bounds_the_wait_of_a_far_command_among_near_ones() {
        // A read at the inner edge arrives with 8 reads near the outer edge; each near
        // read that completes is replaced by another, so a near one is always closer
        // than the far one and SPTF alone would never serve it.
        let m = model();
        let near_span = m.lbas / 1000;
        let mut rng = ChaCha8Rng::seed_from_u64(11);
        let mut d = drive(32);
        const FAR: u64 = 1_000_000;
        let mut next_id = 0;
        for _ in 0..8 {
            d.arrive(0, read(next_id, rng.next_u64() % near_span));
            next_id += 1;
        }
        d.arrive(0, read(FAR, m.lbas - 1000));
        let mut far = None;
        while far.is_none() {
            let t = d.next_completion_ns().unwrap();
            for r in d.complete(t) {
                if r.id == FAR {
                    far = Some(r);
                } else {
                    d.arrive(t, read(next_id, rng.next_u64() % near_span));
                    next_id += 1;
                }
            }
            assert!(t < 10 * AGE_LIMIT_NS, "the far read starved");
        }
        let far = far.unwrap();
        // It waited out the limit (SPTF passed it over) and then went next: the
        // limit plus at most one command in service.
        assert!(far.start_ns > AGE_LIMIT_NS, "{far:?}");
        assert!(far.start_ns <= AGE_LIMIT_NS + 30_000_000, "{far:?}");
        assert_eq!(d.aged_commands(), 1);
        assert!(next_id > 50, "{next_id} near reads served first");
    }

    #[test]
    fn a_flush_waits_for_everything_before_it_and_holds_everything_after() {
        let cmds = random_reads(20, 5);
        let mut d = drive(32);
        for c in &cmds[..10] {
            d.arrive(0, *c);
        }
        let flush = Command {
            id: 100,
            kind: CommandKind::Flush,
        };
        d.arrive(0, flush);
        for c in &cmds[10..] {
            d.arrive(0, *c);
        }
        // The later reads stay in the host's queue behind the flush.
        assert_eq!((d.depth(), d.drive_depth()), (21, 10));
        let rows = drain(&mut d);
        let f = rows.iter().position(|r| r.id == 100).unwrap();
        assert_eq!(f, 10, "{:?}", ids(&rows));
        assert!(rows[..10]
            .iter()
            .all(|r| r.id < 10 && r.end_ns <= rows[f].start_ns));
        assert!(rows[11..]
            .iter()
            .all(|r| r.id >= 10 && r.start_ns >= rows[f].end_ns));
        assert_eq!(rows[f].direction, Direction::Flush);
        // Timed as the simulator times a flush.
        let mut disk = HddDisk::new(&model(), 1);
        assert_eq!(rows[f].timing, disk.flush(rows[f].start_ns));
        assert_eq!(d.stats().flushes, 1);
    }

    #[test]
    fn commands_beyond_ncq_wait_in_the_host_queue_in_arrival_order() {
        let ncq = 4;
        let mut d = drive(ncq);
        for c in random_reads(12, 7) {
            d.arrive(0, c);
            assert!(d.drive_depth() <= ncq);
        }
        assert_eq!((d.depth(), d.drive_depth()), (12, ncq));
        let mut rows = Vec::new();
        while let Some(t) = d.next_completion_ns() {
            rows.extend(d.complete(t));
            assert!(d.drive_depth() <= ncq);
        }
        // Command k enters the drive only when k + 1 - ncq commands have completed.
        for r in &rows {
            let done_before = rows.iter().filter(|o| o.end_ns <= r.start_ns).count() as u64;
            assert!(
                done_before + ncq as u64 > r.id,
                "{} after {done_before}",
                r.id
            );
        }
        assert_eq!(
            rows.iter().map(|r| r.queue_depth).collect::<Vec<_>>().len(),
            12
        );
        let mut depths: Vec<u32> = rows.iter().map(|r| r.queue_depth).collect();
        depths.sort_unstable();
        assert_eq!(depths, (1..=12).collect::<Vec<_>>());
    }

    #[test]
    fn a_random_mix_keeps_every_invariant() {
        // Reads, writes and flushes arriving at random times, collected exactly in
        // virtual time: each command completes once, after it arrived, one at a time.
        let m = model();
        for ncq in [1, 2, 8, 32] {
            let mut d = Drive::new(&m, ncq, 9).unwrap();
            let mut rng = ChaCha8Rng::seed_from_u64(ncq as u64);
            let mut t = 0;
            let mut rows = Vec::new();
            for id in 0..2_000u64 {
                t += rng.next_u64() % 6_000_000;
                while let Some(e) = d.next_completion_ns().filter(|&e| e <= t) {
                    rows.extend(d.complete(e));
                }
                let lba = rng.next_u64() % (m.lbas - 256);
                let sectors = 8 << (rng.next_u64() % 5);
                let kind = match rng.next_u64() % 20 {
                    0 => CommandKind::Flush,
                    1..=6 => CommandKind::Write { lba, sectors },
                    _ => CommandKind::Read { lba, sectors },
                };
                d.arrive(t, Command { id, kind });
            }
            rows.extend(drain(&mut d));
            let mut seen: Vec<u64> = ids(&rows);
            seen.sort_unstable();
            assert_eq!(seen, (0..2_000).collect::<Vec<_>>(), "ncq {ncq}");
            for w in rows.windows(2) {
                assert!(w[1].start_ns >= w[0].end_ns);
            }
            assert!(rows.iter().all(|r| r.start_ns >= r.arrival_ns));
            let st = d.stats();
            assert_eq!(st.commands, 2_000);
            assert_eq!(st.reads + st.writes + st.flushes, 2_000);
            assert!(st.max_queue_depth > 1);
        }
    }
}
