//! The event loop in virtual time: the engine, the workload client and one disk
//! timer at queue depth 1. Events (a command's end, an engine wake-up, a client's
//! next step) are ordered by time, then by the order they were pushed, so a run is
//! deterministic. The engine hands out at most one command at a time; the loop
//! asserts it. Metadata writes land on the device image when their command ends.

use super::{
    buffer_level, client_outcome, fill_outcome, load_engine, prepare, retention_outcome, validate,
    BestEffort, Client, ClientEv, CrashOutcome, DiskTimer, Host, SimConfig, SimOutcome, TraceRow,
    SIM_UTC_EPOCH_NS,
};
use crate::device::{CrashDevice, CrashMode, Device};
use crate::disk::{Access, EnergyMeter};
use crate::engine::{DevKind, Engine, EngineConfig, Now, Op, OpId, Output};
use crate::error::{Error, Result};
use crate::volume::Volume;
use rand_chacha::rand_core::SeedableRng;
use rand_chacha::ChaCha8Rng;
use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// The engine's clock at time `t` of a run: monotonic from 0, UTC from
/// [`SIM_UTC_EPOCH_NS`].
pub(super) fn sim_now(t: u64) -> Now {
    Now {
        mono_ns: t,
        wall_ns: SIM_UTC_EPOCH_NS + t as i64,
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Ev {
    DiskDone(u64),
    Wake,
    Client(ClientEv),
}

/// The simulator's side of the workload client: the engine, called directly, and
/// the event queue in virtual time.
struct SimHost {
    engine: Engine,
    events: BinaryHeap<Reverse<(u64, u64, Ev)>>,
    seq: u64,
}

impl SimHost {
    fn push(&mut self, t: u64, ev: Ev) {
        self.seq += 1;
        self.events.push(Reverse((t, self.seq, ev)));
    }
}

impl Host for SimHost {
    fn submit(&mut self, op: Op, deadline_ns: Option<u64>, owner: u32, now: u64) -> Result<OpId> {
        self.engine.submit(op, deadline_ns, owner, sim_now(now))
    }

    /// A namespace operation at time 0, before the run: it completes at once.
    fn namespace(&mut self, op: Op) -> Result<u32> {
        let id = self.engine.submit(op, None, 0, sim_now(0))?;
        while let Some(c) = self.engine.take_completion() {
            if c.op == id {
                return match c.result? {
                    Output::Ino(i) => Ok(i),
                    _ => Ok(0),
                };
            }
        }
        Err(Error::InvalidArgument(
            "a namespace operation did not complete at once".into(),
        ))
    }

    fn schedule(&mut self, at_ns: u64, ev: ClientEv) {
        self.push(at_ns, Ev::Client(ev));
    }

    fn not_issued(&mut self, count: u64, no_space: bool) {
        self.engine.qos_mut().not_issued(count, no_space);
    }

    fn query<R: Send + 'static>(
        &mut self,
        f: impl FnOnce(&Volume) -> R + Send + 'static,
    ) -> Result<R> {
        Ok(f(self.engine.volume()))
    }
}

pub(super) struct Sim<'a, T: DiskTimer, D: Device> {
    cfg: &'a SimConfig,
    host: SimHost,
    client: Client,
    dev: D,
    disk: &'a mut T,
    /// The command on the disk.
    busy: Option<(u64, DevKind)>,
    /// The disk's energy from time 0, when its model has power figures (no standby
    /// timer: a recorder under load never idles long enough to spin down).
    meter: Option<EnergyMeter>,
    next_wake: Option<u64>,
    out: SimOutcome,
    stopped: bool,
    /// The power was cut (crash runs): the loop ends.
    crashed: bool,
    /// The device is a crash device: a failed write is the power cut.
    crash_run: bool,
}

/// Runs one simulation: the engine built from `engine_cfg` over `disk`.
pub fn run<T: DiskTimer>(
    cfg: &SimConfig,
    disk: &mut T,
    engine_cfg: EngineConfig,
) -> Result<SimOutcome> {
    validate(cfg, disk.sector_bytes())?;
    let mut rng = ChaCha8Rng::seed_from_u64(cfg.seed);
    let (dev, recordings, used) = prepare(cfg, disk, &mut rng)?;
    let engine = load_engine(&dev, engine_cfg)?;
    let mut sim = Sim::new(cfg, engine, dev, disk, rng);
    sim.out.used_bytes_at_start = used;
    sim.start(&recordings)?;
    sim.run_loop()?;
    sim.finish()
}

/// Runs a simulation and cuts the power during the `n`-th metadata write (journal,
/// checkpoint or invalidation) from the start of the run; returns the media as the
/// cut left them. `Ok(None)` if the run ended before that write.
pub fn run_until_crash<T: DiskTimer>(
    cfg: &SimConfig,
    disk: &mut T,
    engine_cfg: EngineConfig,
    crash_at_write: u64,
    mode: CrashMode,
) -> Result<Option<CrashOutcome>> {
    validate(cfg, disk.sector_bytes())?;
    let mut rng = ChaCha8Rng::seed_from_u64(cfg.seed);
    let (image, recordings, used) = prepare(cfg, disk, &mut rng)?;
    let mut dev = CrashDevice::new(image, mode, cfg.seed ^ crash_at_write);
    dev.crash_after_writes(crash_at_write);
    let engine = load_engine(&dev, engine_cfg)?;
    let mut sim = Sim::new(cfg, engine, dev, disk, rng);
    sim.crash_run = true;
    sim.out.used_bytes_at_start = used;
    sim.start(&recordings)?;
    sim.run_loop()?;
    let Some(image) = sim.dev.crash_image() else {
        return Ok(None);
    };
    let durable = sim
        .client
        .streams
        .iter()
        .zip(&sim.client.durable_sizes)
        .enumerate()
        .filter(|(_, (st, _))| st.write)
        .map(|(s, (_, &size))| (format!("/live/s{s:04}.ts"), size))
        .collect();
    let victim = recordings
        .last()
        .filter(|_| cfg.best_effort == Some(BestEffort::Delete))
        .map(|v| (v.clone(), sim.client.victim_gone_durably));
    Ok(Some(CrashOutcome {
        image,
        durable,
        victim,
        at_ns: sim.out.elapsed_ns,
    }))
}

impl<'a, T: DiskTimer, D: Device> Sim<'a, T, D> {
    fn new(cfg: &'a SimConfig, engine: Engine, dev: D, disk: &'a mut T, rng: ChaCha8Rng) -> Self {
        let settings = *engine.scheduler().settings();
        let meter = disk.power().map(|p| EnergyMeter::new(&p, 0, None));
        Sim {
            cfg,
            out: SimOutcome {
                data_block_bytes: engine.volume().superblock().data_block_bytes,
                be_share: settings.be_share,
                be_latency_target_ns: settings.be_latency_ns,
                ..Default::default()
            },
            host: SimHost {
                engine,
                events: BinaryHeap::new(),
                seq: 0,
            },
            client: Client::new(cfg, rng, false),
            dev,
            disk,
            busy: None,
            meter,
            next_wake: None,
            stopped: false,
            crashed: false,
            crash_run: false,
        }
    }

    fn start(&mut self, recordings: &[String]) -> Result<()> {
        self.client.start(&mut self.host, recordings)?;
        self.out.streams = self.client.streams();
        self.pump(0)
    }

    fn completions(&mut self, now: u64) -> Result<()> {
        while let Some(c) = self.host.engine.take_completion() {
            self.client.completed(&mut self.host, c.op, c.result, now)?;
        }
        Ok(())
    }

    /// Hands the next command to the idle disk.
    fn pump(&mut self, now: u64) -> Result<()> {
        if self.crashed {
            return Ok(());
        }
        self.completions(now)?;
        // Polled on every event, busy or not: the engine starts due work (a commit)
        // then, and only hands out a command when a slot is free.
        let next = self.host.engine.poll(sim_now(now));
        assert!(
            next.is_none() || self.busy.is_none(),
            "the engine handed out a second command to a queue-depth-1 disk"
        );
        if self.busy.is_none() {
            if let Some(cmd) = next {
                let t = match cmd.kind {
                    DevKind::Flush => self.disk.flush(now),
                    kind => {
                        let sector = self.disk.sector_bytes() as u64;
                        let a = Access {
                            lba: cmd.offset_bytes / sector,
                            sectors: (cmd.len_bytes / sector) as u32,
                            write: kind == DevKind::Write,
                        };
                        self.disk.service(now, &a)
                    }
                };
                if let Some(m) = &mut self.meter {
                    m.command(&t);
                }
                self.out.seek_ns += t.seek_ns;
                self.out.rotation_ns += t.rotation_ns;
                self.out.transfer_ns += t.transfer_ns;
                self.out.overhead_ns += t.overhead_ns;
                self.out.cache_hits += t.cache_hit as u64;
                self.out.cache_partial_hits += t.cache_partial_hit as u64;
                if self.cfg.trace {
                    self.out.trace.push(TraceRow {
                        start_ns: now,
                        end_ns: t.end_ns,
                        kind: cmd.kind,
                        class: cmd.class,
                        offset_bytes: cmd.offset_bytes,
                        len_bytes: cmd.len_bytes,
                        requests: cmd.requests,
                        deadline_ns: cmd.deadline_ns,
                        forced: cmd.forced,
                        seek_ns: t.seek_ns,
                        rotation_ns: t.rotation_ns,
                        transfer_ns: t.transfer_ns,
                        cache_hit: t.cache_hit,
                        cache_partial_hit: t.cache_partial_hit,
                    });
                }
                self.busy = Some((cmd.id, cmd.kind));
                self.host.push(t.end_ns, Ev::DiskDone(cmd.id));
            }
            self.completions(now)?;
        }
        if let Some(w) = self.host.engine.next_wakeup() {
            let w = w.max(now + 1);
            if self.next_wake.is_none_or(|x| w < x || x <= now) {
                self.next_wake = Some(w);
                self.host.push(w, Ev::Wake);
            }
        }
        Ok(())
    }

    /// The disk finished command `id`: its metadata bytes land on the image (data is
    /// virtual), a flush makes them durable.
    fn disk_done(&mut self, id: u64, now: u64) -> Result<()> {
        let Some((busy, kind)) = self.busy.take() else {
            return Ok(());
        };
        debug_assert_eq!(busy, id, "one command at a time");
        let dev = &mut self.dev;
        let r = match kind {
            DevKind::Flush => dev.flush(),
            DevKind::Write => self.host.engine.io_write(id, |o, b| dev.write_at(o, b)),
            // Data reads are virtual; the engine never reads metadata after load.
            DevKind::Read => Ok(()),
        };
        if r.is_err() && self.crash_run {
            self.crashed = true;
            return Ok(());
        }
        self.host.engine.complete(id, r, sim_now(now));
        Ok(())
    }

    fn run_loop(&mut self) -> Result<()> {
        while let Some(Reverse((t, _, ev))) = self.host.events.pop() {
            if t >= self.cfg.duration_ns && !self.stopped {
                self.stopped = true;
                self.client.stop();
            }
            match ev {
                Ev::DiskDone(id) => self.disk_done(id, t)?,
                Ev::Wake => {
                    if self.next_wake == Some(t) {
                        self.next_wake = None;
                    }
                }
                Ev::Client(e) => self.client.event(&mut self.host, e, t)?,
            }
            if self.crashed {
                self.out.elapsed_ns = t;
                return Ok(());
            }
            self.pump(t)?;
            self.out.elapsed_ns = self.out.elapsed_ns.max(t);
            if self.stopped
                && self.busy.is_none()
                && self.client.idle()
                && !self.host.engine.scheduler().has_work()
            {
                break;
            }
        }
        Ok(())
    }

    fn finish(mut self) -> Result<SimOutcome> {
        self.host.engine.check().map_err(|e| {
            Error::Corrupt(format!(
                "scheduler {} or engine broke an invariant: {e}",
                self.host.engine.scheduler().name()
            ))
        })?;
        self.out.disk = self.disk.name();
        self.out.disk_energy = self.meter.as_ref().map(|m| m.report(self.out.elapsed_ns));
        // Requests still outstanding when the run was cut count as late.
        let pending = self.client.outstanding();
        if pending > 0 {
            self.host.engine.qos_mut().not_issued(pending, false);
        }
        self.out.stream_recordings = self.cfg.stream_recordings;
        for (_, st) in self.host.engine.streams() {
            self.out.stream_requests += st.requests;
            self.out.stream_late += st.late;
            self.out.stream_durability_late += st.durability_late;
        }
        let q = self.host.engine.qos();
        self.out.stream_tail_logged_bytes = q.tail_logged_bytes;
        self.out.stream_tail_log_full = q.tail_log_full;
        let q = self.host.engine.qos().clone();
        fill_outcome(&mut self.out, self.host.engine.scheduler(), q);
        client_outcome(&mut self.out, &self.client);
        retention_outcome(
            &mut self.out,
            &self.host.engine,
            self.client.chunks_started(),
            self.cfg.retention.is_some(),
        );
        (self.out.buffer_level, self.out.buffer_stream) = buffer_level(
            self.cfg,
            &self.client,
            self.cfg.duration_ns.min(self.out.elapsed_ns),
        );
        Ok(self.out)
    }
}
