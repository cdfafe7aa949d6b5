//! The engine: the whole file system as a sans-I/O state machine.
//!
//! [`Engine`] owns the in-memory metadata ([`Volume`]), the disk scheduler (the
//! framework of `sched` around one policy), the commit pipeline and the QoS
//! [`Recorder`]. It never reads a clock, sleeps, spawns a thread or touches a device.
//! A driver feeds it and moves bytes:
//!
//! ```text
//!   submit(op, deadline, owner, now) -> OpId        operations in (owned buffers)
//!   poll(now) -> Option<DevCommand>                   device commands out, one per call
//!   io_write / io_read(cmd, ...)                      the command's bytes (drivers that move data)
//!   complete(cmd, result, now)                        completions in
//!   take_completion() -> Option<Completion>           finished operations out
//!   next_wakeup() -> Option<mono ns>                  when to call poll again (hold timer, commit due)
//! ```
//!
//! Three drivers use it: the simulator (virtual time over the HDD model), the blocking
//! driver `driver::Fs` (CLI, tests) and the io_uring runtime.
//!
//! ## Time
//! [`Now`] carries a monotonic clock (`mono_ns`: scheduling, deadlines, the commit
//! interval) and the wall clock (`wall_ns`: only stamped into file times). A wall
//! clock that steps back changes timestamps, never when commits happen.
//!
//! ## Operations
//! - **Reads** are planned against the applied metadata ([`Volume::plan_read`]); holes
//!   read as zeros without touching the disk.
//! - **Writes** reserve their blocks when planned and are *applied* (blocks mapped,
//!   size set) only once their data is on the disk, and a file's writes in the order
//!   they were submitted; the operation completes when it is applied. So a commit
//!   never names data still in flight, and a crash never exposes stale disk contents.
//!   A write that would share a 4 KiB sector with one in flight on the same file waits
//!   for it (read-modify-write must see the earlier write). A failed write fails every
//!   later write of the same file still in flight ("poisons" the file until they are
//!   done), since they were planned on top of it.
//! - **Namespace operations** change the metadata at once and complete in the same
//!   call, except that an operation that frees a file's data (truncate, removing its
//!   last name) waits until that file has no I/O in flight, and any operation waits
//!   when the journal transaction being built has no room for it while a commit runs.
//! - A deadline makes an operation real-time (its device requests carry it); without
//!   one it is best-effort. Deferred operations keep their order per file.
//!
//! ## Limits
//! At most [`EngineConfig::max_ops`] operations in flight ([`Error::QueueFull`]
//! beyond), and the scheduler's own bound on queued requests, less a reserve that
//! keeps room for the largest commit ([`Error::Busy`] beyond; `bounds.rs`).

mod bounds;
mod buf;
mod commit;
mod events;
mod last_sector;
mod op;
mod reservation;
mod status;
mod stream;
mod tail_log;

pub use bounds::commit_reserve;
pub use buf::{ExternalBuf, IoBuf};
pub use events::SPACE_LEVELS_PCT;
pub use op::{Completion, Op, OpId, Output};
pub use reservation::{Reservation, DEFAULT_REQUEST_BYTES, MAX_RECORDING_DURATION_S};
pub use status::{
    admission_status, AdmissionStatus, DiskStatus, HeadroomAsk, SpaceStatus, Status, StreamStatus,
};
pub use stream::{
    gather_period_ns, stream_ask, GatherMode, KeptShare, StreamDir, StreamId, StreamInfo,
    StreamSpec, StreamStats, AUTO_SLACK_NS, GATHER_LEAD_NS, MAX_KEEP_FRACTION,
    MAX_STREAM_BUFFER_BYTES, MAX_STREAM_REQUEST_BYTES, RECORDING_BUSY,
};

use crate::disk::Admission;
use crate::error::{Error, Result};
use crate::meta::Ino;
use crate::qos::{Recorder, RtOutcome};
use crate::sched::{self, Class, Command, Event, ReqId, Request, SchedSettings, Scheduler};
use crate::volume::{Check, Fill, PlannedIo, Replay, Sum, Volume, WritePlan};
use commit::{CommitJob, CommitState};
use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};

/// The two clocks, as the driver read them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Now {
    /// Monotonic ns (virtual in the simulator): every schedule and timer.
    pub mono_ns: u64,
    /// Wall-clock ns since the epoch: file timestamps only.
    pub wall_ns: i64,
}

impl Now {
    pub fn mono(mono_ns: u64) -> Now {
        Now {
            mono_ns,
            wall_ns: mono_ns as i64,
        }
    }
}

/// Default bound on operations in flight.
pub const DEFAULT_MAX_OPS: usize = 1 << 16;
/// Owner id of the engine's own requests (journal, checkpoints) for per-issuer policies.
pub const JOURNAL_OWNER: u32 = u32::MAX;

/// How an engine is built.
pub struct EngineConfig {
    /// Policy name (`sched::NAMES`).
    pub scheduler: String,
    pub settings: SchedSettings,
    /// The service-time estimate the mixers plan with.
    pub estimator: Box<dyn sched::ServiceEstimate>,
    /// Logical sector size of the device (LBA unit of the scheduler).
    pub sector_bytes: u32,
    /// The class of journal and checkpoint writes. `Metadata` (the default) gives
    /// them a deadline of their own; `BestEffort` (an experiment) takes it away.
    pub metadata_class: Class,
    pub max_ops: usize,
    /// How stream reservations are admitted; `None`: every stream is refused.
    pub admission: Option<Admission>,
}

impl EngineConfig {
    /// The default policy with a generic estimate (a current 7200 rpm disk).
    pub fn new(sector_bytes: u32) -> EngineConfig {
        let model =
            crate::disk::DiskModel::builtin("nvr-8t").expect("built-in models load (tested)");
        EngineConfig {
            scheduler: sched::NAMES[0].to_string(),
            settings: SchedSettings::default(),
            estimator: Box::new(crate::disk::Estimator::from_model(&model)),
            sector_bytes,
            metadata_class: Class::Metadata,
            max_ops: DEFAULT_MAX_OPS,
            admission: None,
        }
    }
}

/// What a device command does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DevKind {
    Read,
    Write,
    /// Make every completed write durable.
    Flush,
}

/// A command for the device.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DevCommand {
    pub id: u64,
    pub kind: DevKind,
    pub offset_bytes: u64,
    pub len_bytes: u64,
    /// The traffic class (`None` for a flush).
    pub class: Option<Class>,
    /// How many requests the command serves (merged; 0 for a flush).
    pub requests: u32,
    /// The earliest deadline among them, if any has one (monotonic ns).
    pub deadline_ns: Option<u64>,
    /// Sent by the best-effort guarantee rather than chosen by the policy.
    pub forced: bool,
}

/// Where a request's bytes live.
enum PieceBuf {
    /// The operation's buffer at this offset.
    Op(usize),
    /// A buffer of the request's own (bounce, composed write, commit image).
    Own(IoBuf),
}

/// What to do when a request completes.
enum Then {
    Nothing,
    /// Check the data checksums on the own buffer, then copy `[skip, skip + len)` of
    /// it to the operation's buffer at `dst`.
    CopyOut {
        skip: usize,
        dst: usize,
        len: usize,
        checks: Vec<Check>,
    },
    /// A range read for read-modify-write of access `access`, at `at` within it.
    RmwRange {
        access: usize,
        at: usize,
    },
    /// Check these data checksums on the bytes read into the operation's buffer at
    /// the piece's offset there.
    Check {
        buf_offset: usize,
        checks: Vec<Check>,
    },
}

/// One request the engine gave the scheduler.
struct Piece {
    /// `None`: the commit pipeline's.
    op: Option<OpId>,
    offset_bytes: u64,
    len_bytes: u64,
    write: bool,
    buf: PieceBuf,
    then: Then,
}

/// A write access being composed (read-modify-write).
struct Access {
    io: PlannedIo,
    bounce: Option<IoBuf>,
    rmw_left: u32,
    /// CRC32C of each of `io.sums`, once the access's bytes are final (`None` for
    /// a virtual buffer).
    crcs: Vec<Option<u32>>,
}

enum Body {
    Read {
        ino: Ino,
        offset: u64,
        buf: IoBuf,
        bytes: usize,
    },
    /// A write, or a truncate (whose plan, when it grows the file, zeroes the rest of
    /// the old last block and is applied like a write).
    Write {
        ino: Ino,
        offset: u64,
        data: IoBuf,
        /// The file's bytes from the start of the 4 KiB sector holding `offset` up to
        /// it, when the engine remembers them from the file's last append
        /// (`last_sector.rs`): the sector is composed from them instead of read back.
        head: Option<IoBuf>,
        plan: Option<WritePlan>,
        accesses: Vec<Access>,
    },
    Truncate {
        ino: Ino,
        size_bytes: u64,
        plan: Option<WritePlan>,
        accesses: Vec<Access>,
    },
    Other(Op),
}

impl Body {
    /// An operation as the engine holds it while it runs.
    fn of(op: Op) -> Body {
        match op {
            Op::Read { ino, offset, buf } => Body::Read {
                ino,
                offset,
                buf,
                bytes: 0,
            },
            Op::Write { ino, offset, data } => Body::Write {
                ino,
                offset,
                data,
                head: None,
                plan: None,
                accesses: vec![],
            },
            Op::Truncate { ino, size_bytes } => Body::Truncate {
                ino,
                size_bytes,
                plan: None,
                accesses: vec![],
            },
            other => Body::Other(other),
        }
    }

    fn file(&self) -> Option<Ino> {
        match self {
            Body::Read { ino, .. } | Body::Write { ino, .. } | Body::Truncate { ino, .. } => {
                Some(*ino)
            }
            Body::Other(_) => None,
        }
    }

    fn accesses_mut(&mut self) -> Option<&mut Vec<Access>> {
        match self {
            Body::Write { accesses, .. } | Body::Truncate { accesses, .. } => Some(accesses),
            _ => None,
        }
    }

    fn plan(&self) -> Option<&WritePlan> {
        match self {
            Body::Write { plan, .. } | Body::Truncate { plan, .. } => plan.as_ref(),
            _ => None,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stage {
    Deferred,
    Running,
    /// Data on disk; waiting for earlier writes of the file to be applied.
    DataDone,
}

struct OpState {
    body: Body,
    deadline_ns: Option<u64>,
    owner: u32,
    submit: Now,
    stage: Stage,
    /// Requests not yet completed (queued or in flight).
    pieces_left: u32,
    error: Option<Error>,
    cancelled: bool,
    /// The stream this operation moves data for (its completion goes to the stream).
    stream: Option<StreamId>,
}

impl OpState {
    fn class(&self) -> Class {
        if self.deadline_ns.is_some() {
            Class::RealTime
        } else {
            Class::BestEffort
        }
    }
}

/// Per-file ordering state.
#[derive(Default)]
struct FileIo {
    /// Reads and writes running (planned, not finished).
    data_ops: u32,
    /// Running writes in the order they must be applied.
    writes: VecDeque<OpId>,
    /// 4 KiB-rounded file ranges of the running writes, and whether each rewrites
    /// bytes the file had (changing their checksums).
    spans: Vec<(OpId, (u64, u64), bool)>,
    /// File ranges (whole checksum granules) of the running reads: a rewrite of
    /// bytes they check waits for them.
    reads: Vec<(OpId, (u64, u64))>,
    /// A write failed: it and every later write of the file fail, and new writes wait
    /// until those are gone (they were planned on top of it).
    poisoned_from: Option<(OpId, String)>,
}

impl FileIo {
    fn idle(&self) -> bool {
        self.data_ops == 0 && self.writes.is_empty()
    }
}

/// A device command handed to the driver.
enum InFlight {
    Sched(Command),
    Flush,
}

/// What deferred operations order on: a file, or the namespace as a whole.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum OrderKey {
    File(Ino),
    Namespace,
}

fn align_down(x: u64) -> u64 {
    x / 4096 * 4096
}

fn align_up(x: u64) -> u64 {
    x.div_ceil(4096) * 4096
}

fn io_error(what: &str, e: &std::io::Error) -> Error {
    Error::io(what, std::io::Error::new(e.kind(), e.to_string()))
}

/// See the module docs.
pub struct Engine {
    vol: Volume,
    sched: Scheduler,
    sector_bytes: u64,
    metadata_class: Class,
    max_ops: usize,
    ops: BTreeMap<OpId, OpState>,
    next_op: OpId,
    pieces: HashMap<ReqId, Piece>,
    next_req: ReqId,
    files: HashMap<Ino, FileIo>,
    deferred: VecDeque<OpId>,
    completions: VecDeque<Completion>,
    commit: CommitState,
    /// A data write completed since the last flush was issued.
    data_unflushed: bool,
    cmds: HashMap<u64, InFlight>,
    next_cmd: u64,
    flush_in_flight: bool,
    sched_wake_ns: Option<u64>,
    busy_since_ns: Option<u64>,
    qos: Recorder,
    /// An unmount was submitted: nothing more is accepted.
    closing: bool,
    /// A commit failed: the device is suspect; further commits are refused.
    broken: Option<String>,
    last_mono_ns: u64,
    /// When the engine was made (`dvrfs status`: the time since mount).
    started_ns: u64,
    /// How long before a commit is due the recordings' partial requests are written
    /// (`stream/recording.rs`), as of the last stream opened or closed.
    gather_lead_ns: u64,
    /// The last sector of files being appended to (`last_sector.rs`).
    last_sectors: last_sector::LastSectors,
    streams: BTreeMap<StreamId, stream::Stream>,
    next_stream: StreamId,
    admission: Option<Admission>,
    /// The stream buffers' budget (`stream/memory.rs`); `None`: unlimited.
    stream_memory_bytes: Option<u64>,
    /// The highest space level (`events::SPACE_LEVELS_PCT`) the used space has
    /// crossed, 0 for none: `space_low` / `space_ok` events mark the crossings.
    space_level_pct: u16,
    /// The tail log, on a volume with one (`tail_log.rs`).
    tail: Option<tail_log::TailLog>,
}

impl Engine {
    /// An engine over a loaded volume. With `replay` (a writable open that found a
    /// complete transaction), the first job checkpoints it and empties the journal.
    pub fn new(vol: Volume, replay: Option<Replay>, cfg: EngineConfig, now: Now) -> Result<Engine> {
        if cfg.sector_bytes == 0 || 4096 % cfg.sector_bytes != 0 {
            return Err(Error::InvalidArgument(format!(
                "sector size {} bytes: must divide 4096",
                cfg.sector_bytes
            )));
        }
        bounds::check_queue_bound(&vol, &cfg.settings)?;
        let sched = sched::by_name(&cfg.scheduler, cfg.settings, cfg.estimator)
            .map_err(|e| Error::InvalidArgument(e.to_string()))?;
        let interval_ns = vol.commit_interval_ms() as u64 * 1_000_000;
        let sb = vol.superblock();
        let tail = sb
            .has_tail_log()
            .then(|| tail_log::TailLog::new(sb.tail_log_blocks, sb.tail_log_head));
        let mut e = Engine {
            vol,
            sched,
            sector_bytes: cfg.sector_bytes as u64,
            metadata_class: cfg.metadata_class,
            max_ops: cfg.max_ops.max(1),
            ops: BTreeMap::new(),
            next_op: 1,
            pieces: HashMap::new(),
            next_req: 1,
            files: HashMap::new(),
            deferred: VecDeque::new(),
            completions: VecDeque::new(),
            commit: CommitState::new(interval_ns, now.mono_ns),
            data_unflushed: false,
            cmds: HashMap::new(),
            next_cmd: 1,
            flush_in_flight: false,
            sched_wake_ns: None,
            busy_since_ns: None,
            qos: Recorder::default(),
            closing: false,
            broken: None,
            last_mono_ns: now.mono_ns,
            started_ns: now.mono_ns,
            gather_lead_ns: stream::GATHER_LEAD_NS.min(interval_ns / 4),
            last_sectors: last_sector::LastSectors::default(),
            streams: BTreeMap::new(),
            next_stream: 1,
            admission: cfg.admission,
            stream_memory_bytes: None,
            space_level_pct: 0,
            tail,
        };
        e.space_level_pct = e.space_level_now(e.space_level_pct);
        e.recovery_events(now);
        if let Some(r) = replay {
            let (primary, backup) = e.vol.replay_writes(&r);
            let invalidate = e.vol.invalidate_journal_write();
            e.commit
                .start(CommitJob::replay(primary, backup, invalidate), now.mono_ns);
            e.progress(now);
        }
        e.tail_log_start_replay(now);
        e.progress(now);
        Ok(e)
    }

    /// The metadata, for queries (lookup, stat, readdir: all in memory).
    pub fn volume(&self) -> &Volume {
        &self.vol
    }

    /// The metadata, mutable, for offline repair (fsck) between operations.
    pub(crate) fn volume_mut(&mut self) -> &mut Volume {
        &mut self.vol
    }

    pub fn scheduler(&self) -> &Scheduler {
        &self.sched
    }

    pub fn qos(&self) -> &Recorder {
        &self.qos
    }

    pub fn qos_mut(&mut self) -> &mut Recorder {
        &mut self.qos
    }

    /// Operations submitted and not yet completed.
    pub fn ops_in_flight(&self) -> usize {
        self.ops.len() + self.stream_ops_waiting()
    }

    /// How stream reservations are admitted.
    pub fn admission(&self) -> Option<&Admission> {
        self.admission.as_ref()
    }

    /// Nothing is queued, in flight or being committed, and nothing waits to be read.
    pub fn is_idle(&self) -> bool {
        self.ops.is_empty()
            && self.stream_ops_waiting() == 0
            && self.cmds.is_empty()
            && !self.commit.busy()
            && !self.sched.has_work()
            && self.completions.is_empty()
    }

    /// Whether anything dirty awaits a commit.
    pub fn has_uncommitted(&self) -> bool {
        self.vol.dirty_blocks() > 0 || self.commit.busy() || self.tail_log_replaying()
    }

    /// The engine's bookkeeping, checked (the simulator calls it after every run).
    pub fn check(&self) -> std::result::Result<(), String> {
        self.sched.check()?;
        self.vol.check_invariants()?;
        self.check_holds()?;
        let held = self.pieces.len() as u64;
        let sched_held = self.sched.queued() + self.sched.in_flight_requests();
        if held != sched_held {
            return Err(format!(
                "engine holds {held} requests, the scheduler {sched_held}"
            ));
        }
        Ok(())
    }

    fn tick(&mut self, now: Now) -> Now {
        let mono = now.mono_ns.max(self.last_mono_ns);
        self.last_mono_ns = mono;
        Now {
            mono_ns: mono,
            wall_ns: now.wall_ns,
        }
    }

    // ---- operations in ----

    /// Submits an operation. `deadline_ns` (monotonic) makes it real-time; `owner`
    /// identifies the issuer (a stream, a client) for per-issuer policies.
    pub fn submit(
        &mut self,
        op: Op,
        deadline_ns: Option<u64>,
        owner: u32,
        now: Now,
    ) -> Result<OpId> {
        let now = self.tick(now);
        if self.closing {
            return Err(Error::InvalidArgument(
                "the file system is being unmounted".into(),
            ));
        }
        if self.ops.len() >= self.max_ops {
            return Err(Error::QueueFull { max: self.max_ops });
        }
        self.admit_op(&op)?;
        let id = self.next_op;
        self.next_op += 1;
        match op {
            Op::StreamOpen { ino, spec } => {
                let result = self.stream_open(ino, spec, now);
                self.completions.push_back(Completion {
                    op: id,
                    result,
                    deadline_ns,
                    submit_ns: now.mono_ns,
                    done_ns: now.mono_ns,
                });
                self.progress(now);
                return Ok(id);
            }
            op @ (Op::StreamRead { .. }
            | Op::StreamWrite { .. }
            | Op::StreamClose { .. }
            | Op::StreamSync { .. }) => {
                if let Err(e) = self.stream_submit(id, op, now) {
                    self.completions.push_back(Completion {
                        op: id,
                        result: Err(e),
                        deadline_ns,
                        submit_ns: now.mono_ns,
                        done_ns: now.mono_ns,
                    });
                }
                self.progress(now);
                return Ok(id);
            }
            _ => {}
        }
        let body = match op {
            Op::Unmount => {
                self.closing = true;
                self.streams_shutdown(now);
                Body::Other(Op::Unmount)
            }
            op => Body::of(op),
        };
        self.ops.insert(
            id,
            OpState {
                body,
                deadline_ns,
                owner,
                submit: now,
                stage: Stage::Deferred,
                pieces_left: 0,
                error: None,
                cancelled: false,
                stream: None,
            },
        );
        self.deferred.push_back(id);
        self.progress(now);
        Ok(id)
    }

    /// Cancels an operation. A deferred one, a read, or the newest write of a file
    /// none of whose requests reached the device completes with [`Error::Cancelled`]
    /// (a read with requests on the device completes when they are back). Anything
    /// else (an operation already done, a write other writes were planned on) is an
    /// error, and the operation goes on.
    pub fn cancel(&mut self, id: OpId, now: Now) -> Result<()> {
        let now = self.tick(now);
        if let Some(sid) = self.stream_waiting_op(id) {
            self.stream_cancel(sid, id, now);
            self.progress(now);
            return Ok(());
        }
        let Some(st) = self.ops.get(&id).filter(|st| st.stream.is_none()) else {
            return Err(Error::CannotCancel(format!(
                "operation {id} is not in flight"
            )));
        };
        match (st.stage, &st.body) {
            (Stage::Deferred, _) => {
                self.deferred.retain(|&d| d != id);
                self.commit.forget_waiter(id);
                self.finish(id, Err(Error::Cancelled), now);
            }
            (Stage::Running, Body::Read { .. }) => {
                self.cancel_queued_pieces(id, now);
                let st = self.ops.get_mut(&id).expect("checked above");
                st.cancelled = true;
                if st.pieces_left == 0 {
                    self.op_data_done(id, now);
                }
            }
            (Stage::Running, Body::Write { ino, .. }) => {
                let ino = *ino;
                let newest = self.files.get(&ino).and_then(|f| f.writes.back()) == Some(&id);
                let on_device = self
                    .pieces
                    .iter()
                    .any(|(rid, p)| p.op == Some(id) && !self.sched_queued(*rid));
                if !newest || on_device {
                    return Err(Error::CannotCancel(format!(
                        "write {id} is {}",
                        if on_device {
                            "already on the device"
                        } else {
                            "followed by later writes to the same file"
                        }
                    )));
                }
                self.cancel_queued_pieces(id, now);
                let st = self.ops.get_mut(&id).expect("checked above");
                st.pieces_left = 0;
                st.error = Some(Error::Cancelled);
                let plan = st.body.plan().cloned();
                if let Some(plan) = plan {
                    self.vol.abort_write(&plan);
                }
                self.last_sectors.forget(ino);
                let f = self.files.get_mut(&ino).expect("running write has a file");
                f.writes.pop_back();
                f.spans.retain(|(o, _, _)| *o != id);
                f.data_ops -= 1;
                self.finish(id, Err(Error::Cancelled), now);
            }
            _ => {
                return Err(Error::CannotCancel(format!(
                    "operation {id} ({}) can no longer be cancelled",
                    self.op_name(id)
                )))
            }
        }
        self.progress(now);
        Ok(())
    }

    fn op_name(&self, id: OpId) -> &'static str {
        match self.ops.get(&id).map(|s| &s.body) {
            Some(Body::Read { .. }) => "read",
            Some(Body::Write { .. }) => "write",
            Some(Body::Truncate { .. }) => "truncate",
            Some(Body::Other(op)) => op.name(),
            None => "done",
        }
    }

    fn sched_queued(&self, req: ReqId) -> bool {
        // A request still in the scheduler's queue (not on the device).
        !self
            .cmds
            .values()
            .any(|c| matches!(c, InFlight::Sched(cmd) if cmd.members.iter().any(|m| m.id == req)))
    }

    fn cancel_queued_pieces(&mut self, id: OpId, now: Now) {
        let mut mine: Vec<ReqId> = self
            .pieces
            .iter()
            .filter(|(_, p)| p.op == Some(id))
            .map(|(r, _)| *r)
            .collect();
        // In request order, not the map's: a cancel can split a merged entry and queue
        // the rest again, so the order shapes the queue.
        mine.sort_unstable();
        for r in mine {
            if self.sched.cancel(r, now.mono_ns).is_some() {
                self.pieces.remove(&r);
                if let Some(st) = self.ops.get_mut(&id) {
                    st.pieces_left -= 1;
                }
            }
        }
    }

    /// The next finished operation.
    pub fn take_completion(&mut self) -> Option<Completion> {
        self.completions.pop_front()
    }

    // ---- the loop ----

    /// Starts whatever can start (deferred operations, commits) until nothing changes.
    fn progress(&mut self, now: Now) {
        loop {
            let mut changed = self.retry_deferred(now);
            changed |= self.commit_step(now);
            changed |= self.streams_step(now);
            if !changed {
                break;
            }
        }
    }

    fn order_keys(&self, id: OpId) -> Vec<OrderKey> {
        let Some(st) = self.ops.get(&id) else {
            return vec![];
        };
        match &st.body {
            Body::Read { ino, .. } | Body::Write { ino, .. } | Body::Truncate { ino, .. } => {
                vec![OrderKey::File(*ino)]
            }
            Body::Other(op) => match op {
                Op::Fsync | Op::OpenFile { .. } => vec![],
                // The last close of an orphan frees its data: after the file's I/O.
                Op::CloseFile { ino } => match self.vol.frees_on_close(*ino) {
                    Some(v) => vec![OrderKey::Namespace, OrderKey::File(v)],
                    None => vec![],
                },
                Op::Unmount => vec![OrderKey::Namespace],
                Op::Unlink { parent, name } => {
                    let mut k = vec![OrderKey::Namespace];
                    if let Some(v) = self.vol.frees_on_unlink(*parent, name) {
                        k.push(OrderKey::File(v));
                    }
                    k
                }
                Op::Rename {
                    dst_parent,
                    dst_name,
                    ..
                } => {
                    let mut k = vec![OrderKey::Namespace];
                    if let Some(v) = self.vol.frees_on_unlink(*dst_parent, dst_name) {
                        k.push(OrderKey::File(v));
                    }
                    k
                }
                _ => vec![OrderKey::Namespace],
            },
        }
    }

    /// Tries the deferred operations in order; one blocked on a key keeps every later
    /// one with that key waiting. Returns whether any started or finished.
    fn retry_deferred(&mut self, now: Now) -> bool {
        if self.deferred.is_empty() {
            return false;
        }
        let mut changed = false;
        let mut blocked: BTreeSet<OrderKey> = BTreeSet::new();
        let list: Vec<OpId> = self.deferred.drain(..).collect();
        let mut keep = VecDeque::new();
        for id in list {
            if !self.ops.contains_key(&id) {
                continue;
            }
            let keys = self.order_keys(id);
            if keys.iter().any(|k| blocked.contains(k)) || !self.try_start(id, now) {
                blocked.extend(keys);
                keep.push_back(id);
            } else {
                changed = true;
            }
        }
        // try_start may have deferred nothing new, but keep any pushed meanwhile.
        keep.extend(self.deferred.drain(..));
        self.deferred = keep;
        changed
    }

    /// Starts (or finishes) a deferred operation; false if it must wait.
    fn try_start(&mut self, id: OpId, now: Now) -> bool {
        let kind = match &self.ops[&id].body {
            Body::Read { .. } => 0,
            Body::Write { .. } => 1,
            Body::Truncate { .. } => 2,
            Body::Other(_) => 3,
        };
        if kind < 3 && self.op_queue_full() {
            return false; // waits for room in the queue (`bounds.rs`)
        }
        match kind {
            0 => self.start_read(id, now),
            1 => self.start_write(id, now),
            2 => self.start_truncate(id, now),
            _ => self.start_other(id, now),
        }
    }

    fn file_io(&mut self, ino: Ino) -> &mut FileIo {
        self.files.entry(ino).or_default()
    }

    fn start_read(&mut self, id: OpId, now: Now) -> bool {
        let (ino, offset, len) = match &self.ops[&id].body {
            Body::Read {
                ino, offset, buf, ..
            } => (*ino, *offset, buf.len()),
            _ => unreachable!("start_read of a read"),
        };
        // A read checks whole checksum granules: none may be rewritten meanwhile.
        let range = self.granule_range(offset, len as u64);
        if self
            .files
            .get(&ino)
            .is_some_and(|f| f.spans.iter().any(|(_, s, rw)| *rw && overlap(*s, range)))
        {
            return false;
        }
        let plan = match self.vol.plan_read(ino, offset, len) {
            Ok(p) => p,
            Err(e) => {
                self.finish(id, Err(e), now);
                return true;
            }
        };
        // Bytes of a recording still in its write stream's buffer are read from
        // there (a player following a recording), and on a read-only open the bytes
        // the tail log holds past the committed size (`engine/tail_log.rs`): taken
        // out of the op for the copy.
        let mut overlay = None;
        if self.has_write_stream(ino) || self.vol.logged_tail(ino).is_some() {
            let st = self.ops.get_mut(&id).expect("op exists");
            let Body::Read { buf, .. } = &mut st.body else {
                unreachable!()
            };
            let mut b = std::mem::replace(buf, IoBuf::Virtual(0));
            for &(d, l) in &plan.zero {
                buf::zero(&mut b, d, l);
            }
            let n = self.overlay_stream_writes(ino, offset, &mut b, plan.bytes);
            let n = self.overlay_logged_tail(ino, offset, &mut b, n);
            overlay = Some((b, n));
        }
        let st = self.ops.get_mut(&id).expect("op exists");
        let Body::Read { buf, bytes, .. } = &mut st.body else {
            unreachable!()
        };
        match overlay {
            Some((b, n)) => {
                *buf = b;
                *bytes = n;
            }
            None => {
                *bytes = plan.bytes;
                for &(d, l) in &plan.zero {
                    buf::zero(buf, d, l);
                }
            }
        }
        let proto = buf.sibling(0);
        st.stage = Stage::Running;
        let f = self.file_io(ino);
        f.data_ops += 1;
        f.reads.push((id, range));
        if plan.io.is_empty() {
            self.op_data_done(id, now);
            return true;
        }
        for io in plan.io {
            let checks = io.checks;
            let (pb, then) = match io.fill {
                Fill::Direct { buf_offset } if checks.is_empty() => {
                    (PieceBuf::Op(buf_offset), Then::Nothing)
                }
                Fill::Direct { buf_offset } => {
                    (PieceBuf::Op(buf_offset), Then::Check { buf_offset, checks })
                }
                Fill::ReadBounce { skip, dst, len } => (
                    PieceBuf::Own(proto.sibling(io.len_bytes as usize)),
                    Then::CopyOut {
                        skip,
                        dst,
                        len,
                        checks,
                    },
                ),
                Fill::Compose { .. } => unreachable!("reads are not composed"),
            };
            self.add_op_piece(id, io.offset_bytes, io.len_bytes, false, pb, then, now);
        }
        true
    }

    fn start_write(&mut self, id: OpId, now: Now) -> bool {
        let (ino, offset, len) = match &self.ops[&id].body {
            Body::Write {
                ino, offset, data, ..
            } => (*ino, *offset, data.len()),
            _ => unreachable!("start_write of a write"),
        };
        if self
            .files
            .get(&ino)
            .is_some_and(|f| f.poisoned_from.is_some())
        {
            return false;
        }
        // A write sharing a 4 KiB sector with one in flight waits for it.
        let planned = match self.vol.planned_size(ino) {
            Ok(s) => s,
            Err(e) => {
                self.finish(id, Err(e), now);
                return true;
            }
        };
        let end = offset.saturating_add(len as u64);
        let rewrites = offset < planned;
        // A rewrite of checked bytes rewrites their whole granules, and waits for the
        // reads checking them.
        let span = if rewrites {
            let g = self.granule_range(offset, len as u64);
            (g.0.min(align_down(offset)), g.1.max(align_up(end)))
        } else {
            (align_down(offset.min(planned)), align_up(end))
        };
        if self.files.get(&ino).is_some_and(|f| {
            f.spans.iter().any(|(_, s, _)| overlap(*s, span))
                || (rewrites && f.reads.iter().any(|(_, r)| overlap(*r, span)))
        }) {
            return false;
        }
        let plan = match self.vol.plan_write(ino, offset, len, now.wall_ns) {
            Err(e) => {
                self.finish(id, Err(e), now);
                return true;
            }
            Ok(None) => {
                // Blocked until a commit frees blocks or makes room: soon.
                let by = self.ops[&id].deadline_ns.unwrap_or(now.mono_ns);
                self.commit.want_by(by);
                return false;
            }
            Ok(Some(p)) => p,
        };
        if let Some(Body::Write { data, head, .. }) = self.ops.get_mut(&id).map(|o| &mut o.body) {
            *head = self.last_sectors.plan_write(ino, offset, data, planned);
        }
        self.run_write_plan(id, plan, now);
        true
    }

    /// Registers a planned write (or growing truncate) and issues its requests.
    fn run_write_plan(&mut self, id: OpId, plan: WritePlan, now: Now) {
        let ino = plan.ino;
        let f = self.file_io(ino);
        f.writes.push_back(id);
        f.spans.push((id, plan.span, plan.rewrites));
        f.data_ops += 1;
        let st = self.ops.get_mut(&id).expect("op exists");
        st.stage = Stage::Running;
        let io_list = plan.io.clone();
        let proto = match &st.body {
            Body::Write { data, .. } => data.sibling(0),
            _ => IoBuf::zeroed(0),
        };
        match &mut st.body {
            Body::Write { plan: p, .. } | Body::Truncate { plan: p, .. } => *p = Some(plan),
            _ => unreachable!("write plans belong to writes"),
        }
        for (k, io) in io_list.into_iter().enumerate() {
            match io.fill.clone() {
                Fill::Direct { buf_offset } => {
                    let crcs = match &self.ops[&id].body {
                        Body::Write { data, .. } => {
                            sum_crcs(&io.sums, data.bytes().map(|b| &b[buf_offset..]))
                        }
                        _ => sum_crcs(&io.sums, None),
                    };
                    self.add_op_piece(
                        id,
                        io.offset_bytes,
                        io.len_bytes,
                        true,
                        PieceBuf::Op(buf_offset),
                        Then::Nothing,
                        now,
                    );
                    self.push_access(id, io, None, 0, crcs);
                }
                Fill::Compose { pieces, mut rmw } => {
                    let mut bounce = proto.sibling(io.len_bytes as usize);
                    if k == 0 {
                        self.compose_known_head(id, &io, &pieces, &mut rmw, &mut bounce);
                    }
                    if rmw.is_empty() {
                        self.compose(id, &pieces, &mut bounce);
                        let crcs = sum_crcs(&io.sums, bounce.bytes());
                        self.add_op_piece(
                            id,
                            io.offset_bytes,
                            io.len_bytes,
                            true,
                            PieceBuf::Own(bounce),
                            Then::Nothing,
                            now,
                        );
                        self.push_access(id, io, None, 0, crcs);
                    } else {
                        let n = rmw.len() as u32;
                        let base = io.offset_bytes;
                        self.push_access(id, io, Some(bounce), n, vec![]);
                        for (at, len) in rmw {
                            self.add_op_piece(
                                id,
                                base + at,
                                len,
                                false,
                                PieceBuf::Own(proto.sibling(len as usize)),
                                Then::RmwRange {
                                    access: k,
                                    at: at as usize,
                                },
                                now,
                            );
                        }
                    }
                }
                Fill::ReadBounce { .. } => unreachable!("writes do not read into bounces"),
            }
        }
        if self.ops[&id].pieces_left == 0 {
            self.op_data_done(id, now);
        }
    }

    fn push_access(
        &mut self,
        id: OpId,
        io: PlannedIo,
        bounce: Option<IoBuf>,
        rmw_left: u32,
        crcs: Vec<Option<u32>>,
    ) {
        if let Some(a) = self.ops.get_mut(&id).and_then(|s| s.body.accesses_mut()) {
            a.push(Access {
                io,
                bounce,
                rmw_left,
                crcs,
            });
        }
    }

    /// File range `[offset, offset + len)` rounded out to whole checksum granules (to
    /// 4 KiB without checksums).
    fn granule_range(&self, offset: u64, len: u64) -> (u64, u64) {
        let g = self.vol.sum_granule_bytes().unwrap_or(4096);
        let end = offset.saturating_add(len);
        (offset / g * g, end.div_ceil(g).saturating_mul(g))
    }

    /// Fills a composed write buffer: the operation's bytes, and zeros.
    /// A write whose first sector holds file bytes before its offset that its
    /// submitter knows (`Body::Write::head`, a write stream's last request) takes them
    /// into the bounce buffer instead of reading the sector back: the sector's read
    /// is dropped from `rmw`. Only when that read is exactly the head's sector (the
    /// access starts at it: the write's first byte lies `head` bytes into the access)
    /// and nothing read there is checked (a granule rewritten whole reads it anyway).
    fn compose_known_head(
        &self,
        id: OpId,
        io: &PlannedIo,
        pieces: &[(usize, Option<usize>, usize)],
        rmw: &mut Vec<(u64, u64)>,
        bounce: &mut IoBuf,
    ) {
        let Some(Body::Write {
            head: Some(head), ..
        }) = self.ops.get(&id).map(|s| &s.body)
        else {
            return;
        };
        let sector = crate::device::IO_ALIGN_BYTES;
        let starts_at_head = pieces
            .iter()
            .any(|&(at, src, _)| src == Some(0) && at == head.len());
        if !starts_at_head || !io.checks.is_empty() || rmw.first().is_none_or(|r| r.0 != 0) {
            return;
        }
        assert!(
            (head.len() as u64) < sector,
            "a stream's head is what precedes its offset in one sector"
        );
        buf::copy(head, 0, bounce, 0, head.len());
        let first = &mut rmw[0];
        if first.1 <= sector {
            rmw.remove(0);
        } else {
            *first = (sector, first.1 - sector);
        }
    }

    fn compose(&self, id: OpId, pieces: &[(usize, Option<usize>, usize)], bounce: &mut IoBuf) {
        let data = match self.ops.get(&id).map(|s| &s.body) {
            Some(Body::Write { data, .. }) => Some(data),
            _ => None,
        };
        for &(at, src, len) in pieces {
            match (src, data) {
                (Some(src), Some(data)) => buf::copy(data, src, bounce, at, len),
                _ => buf::zero(bounce, at, len),
            }
        }
    }

    fn start_truncate(&mut self, id: OpId, now: Now) -> bool {
        let (ino, size) = match &self.ops[&id].body {
            Body::Truncate {
                ino, size_bytes, ..
            } => (*ino, *size_bytes),
            _ => unreachable!("start_truncate of a truncate"),
        };
        if !self.files.get(&ino).is_none_or(FileIo::idle) {
            return false;
        }
        if !self.room_for(self.destructive_estimate(), now) {
            return false;
        }
        self.last_sectors.forget(ino);
        self.tail_log_forget(ino);
        match self.vol.truncate(ino, size, now.wall_ns) {
            Err(e) => self.finish(id, Err(e), now),
            Ok(None) => self.finish(id, Ok(Output::Done), now),
            Ok(Some(plan)) => self.run_write_plan(id, plan, now),
        }
        true
    }

    /// Blocks an operation that frees a file's data may dirty at most.
    fn destructive_estimate(&self) -> usize {
        let sb = self.vol.superblock();
        16 + sb.data_bitmap_blocks as usize + sb.meta_bitmap_blocks as usize
    }

    /// Whether the transaction being built has room for `estimate` more dirty blocks.
    /// If not and no commit runs, one is cut now (then there is room); if one runs,
    /// the caller waits for it.
    fn room_for(&mut self, estimate: usize, now: Now) -> bool {
        let limit = self.vol.max_transaction_images() / 2;
        let dirty = self.vol.dirty_blocks();
        if dirty == 0 || dirty + estimate <= limit {
            return true;
        }
        self.commit.want_by(now.mono_ns);
        if self.commit.busy() {
            return false;
        }
        self.commit_step(now);
        self.vol.dirty_blocks() + estimate <= limit || self.vol.dirty_blocks() == 0
    }

    fn start_other(&mut self, id: OpId, now: Now) -> bool {
        let victim = match &self.ops[&id].body {
            Body::Other(Op::Unlink { parent, name }) => self.vol.frees_on_unlink(*parent, name),
            Body::Other(Op::Rename {
                dst_parent,
                dst_name,
                ..
            }) => self.vol.frees_on_unlink(*dst_parent, dst_name),
            Body::Other(Op::CloseFile { ino }) => self.vol.frees_on_close(*ino),
            Body::Other(Op::Fsync) => return self.start_fsync(id, now),
            Body::Other(Op::Unmount) => return self.start_unmount(id, now),
            _ => None,
        };
        if let Some(v) = victim {
            if !self.files.get(&v).is_none_or(FileIo::idle) {
                return false;
            }
        }
        let mutates = victim.is_some()
            || !matches!(
                &self.ops[&id].body,
                Body::Other(Op::CloseFile { .. } | Op::OpenFile { .. })
            );
        if mutates {
            let estimate = if victim.is_some() {
                self.destructive_estimate()
            } else {
                16
            };
            if !self.room_for(estimate, now) {
                return false;
            }
        }
        let st = self.ops.get_mut(&id).expect("op exists");
        let op = std::mem::replace(&mut st.body, Body::Other(Op::Fsync));
        let Body::Other(op) = op else { unreachable!() };
        let t = now.wall_ns;
        let v = &mut self.vol;
        let result = match op {
            Op::Create {
                parent,
                name,
                perm,
                uid,
                gid,
            } => v.create(parent, &name, perm, uid, gid, t).map(Output::Ino),
            Op::Mkdir {
                parent,
                name,
                perm,
                uid,
                gid,
            } => v.mkdir(parent, &name, perm, uid, gid, t).map(Output::Ino),
            Op::Symlink {
                parent,
                name,
                target,
                uid,
                gid,
            } => v
                .symlink(parent, &name, &target, uid, gid, t)
                .map(Output::Ino),
            Op::Link { ino, parent, name } => v.link(ino, parent, &name, t).map(|_| Output::Done),
            Op::Unlink { parent, name } => v.unlink(parent, &name, t).map(|_| Output::Done),
            Op::Rmdir { parent, name } => v.rmdir(parent, &name, t).map(|_| Output::Done),
            Op::Rename {
                src_parent,
                src_name,
                dst_parent,
                dst_name,
            } => v
                .rename(src_parent, &src_name, dst_parent, &dst_name, t)
                .map(|_| Output::Done),
            Op::SetAttr { ino, set } => v.set_attr(ino, &set, t).map(|_| Output::Done),
            Op::OpenFile { ino } => v.open_file(ino).map(|_| Output::Done),
            Op::CloseFile { ino } => v.close_file(ino).map(|_| Output::Done),
            Op::Read { .. }
            | Op::Write { .. }
            | Op::Truncate { .. }
            | Op::Fsync
            | Op::Unmount
            | Op::StreamOpen { .. }
            | Op::StreamRead { .. }
            | Op::StreamWrite { .. }
            | Op::StreamClose { .. }
            | Op::StreamSync { .. } => {
                unreachable!("handled elsewhere")
            }
        };
        if let Some(v) = victim {
            self.last_sectors.forget(v);
            if !self.vol.inode_exists(v) {
                self.files.remove(&v);
            }
        }
        if self.vol.wants_commit_now() {
            self.commit.want_now();
        }
        self.finish(id, result, now);
        true
    }

    fn start_fsync(&mut self, id: OpId, now: Now) -> bool {
        if let Some(b) = &self.broken {
            let msg = b.clone();
            self.finish(
                id,
                Err(Error::io("committing", std::io::Error::other(msg))),
                now,
            );
            return true;
        }
        if self.vol.dirty_blocks() == 0 && !self.data_unflushed && !self.commit.busy() {
            self.finish(id, Ok(Output::Done), now);
            return true;
        }
        let deadline = self.ops[&id].deadline_ns;
        self.ops.get_mut(&id).expect("op exists").stage = Stage::Running;
        // Changes already cut into a running commit are covered by it; anything dirty
        // needs the next one.
        let next = self.vol.dirty_blocks() > 0 || self.data_unflushed || !self.commit.busy();
        self.commit.add_waiter(id, deadline, next);
        true
    }

    fn start_unmount(&mut self, id: OpId, now: Now) -> bool {
        // Everything else finishes first, streams included: a stream's end may still
        // free the orphan it held last (`stream/hold.rs`), for the final commit.
        if self.ops.len() > 1 || !self.streams.is_empty() {
            return false;
        }
        self.ops.get_mut(&id).expect("op exists").stage = Stage::Running;
        let deadline = Some(now.mono_ns);
        self.commit.add_final(id, deadline);
        true
    }

    // ---- requests ----

    // ---- device commands ----

    fn free_slots(&self) -> u32 {
        self.sched
            .settings()
            .queue_depth
            .saturating_sub(self.sched.in_flight() + self.flush_in_flight as u32)
    }

    /// The next device command, if a slot is free and something is ready. Call it
    /// until it returns `None`, then again at [`Engine::next_wakeup`] or after a
    /// completion or submission.
    pub fn poll(&mut self, now: Now) -> Option<DevCommand> {
        let now = self.tick(now);
        self.progress(now);
        loop {
            if self.free_slots() == 0 {
                return None;
            }
            if self.commit.flush_wanted() && !self.flush_in_flight {
                self.commit.flush_issued();
                self.data_unflushed = false;
                self.flush_in_flight = true;
                return Some(self.hand_out(InFlight::Flush, now));
            }
            match self.sched.dispatch(now.mono_ns) {
                Event::Dispatch(cmd) => {
                    // The scheduler is asked again when a slot frees.
                    self.sched_wake_ns = None;
                    let failed = self.sched.take_failed();
                    for r in failed {
                        self.piece_failed(r, now);
                    }
                    let offset = cmd.lba * self.sector_bytes;
                    let len = cmd.sectors as u64 * self.sector_bytes;
                    let metadata = cmd
                        .members
                        .iter()
                        .all(|m| self.pieces.get(&m.id).is_some_and(|p| p.op.is_none()));
                    self.qos.command(offset, len, metadata);
                    let c = self.hand_out(InFlight::Sched(cmd), now);
                    self.progress(now);
                    return Some(c);
                }
                Event::Fail(rs) => {
                    for r in rs {
                        self.piece_failed(r, now);
                    }
                    self.progress(now);
                }
                Event::Wait { until_ns } => {
                    self.sched_wake_ns = until_ns;
                    return None;
                }
            }
        }
    }

    fn hand_out(&mut self, what: InFlight, now: Now) -> DevCommand {
        let id = self.next_cmd;
        self.next_cmd += 1;
        if self.cmds.is_empty() {
            self.busy_since_ns = Some(now.mono_ns);
        }
        let c = match &what {
            InFlight::Flush => DevCommand {
                id,
                kind: DevKind::Flush,
                offset_bytes: 0,
                len_bytes: 0,
                class: None,
                requests: 0,
                deadline_ns: None,
                forced: false,
            },
            InFlight::Sched(cmd) => DevCommand {
                id,
                kind: if cmd.write {
                    DevKind::Write
                } else {
                    DevKind::Read
                },
                offset_bytes: cmd.lba * self.sector_bytes,
                len_bytes: cmd.sectors as u64 * self.sector_bytes,
                class: Some(cmd.class),
                requests: cmd.members.len() as u32,
                deadline_ns: cmd.deadline_ns,
                forced: cmd.forced,
            },
        };
        self.cmds.insert(id, what);
        c
    }

    /// The bytes a write command carries: `f(device offset, bytes)` for each of its
    /// requests in order (requests with virtual buffers are skipped).
    pub fn io_write(
        &self,
        cmd: u64,
        mut f: impl FnMut(u64, &[u8]) -> std::io::Result<()>,
    ) -> std::io::Result<()> {
        let Some(InFlight::Sched(c)) = self.cmds.get(&cmd) else {
            return Err(std::io::Error::other(format!(
                "no write command {cmd} in flight"
            )));
        };
        for m in &c.members {
            let p = self
                .pieces
                .get(&m.id)
                .expect("members of a command in flight are held");
            let bytes = match &p.buf {
                PieceBuf::Own(b) => b.bytes(),
                PieceBuf::Op(off) => match p.op.and_then(|o| self.ops.get(&o)).map(|s| &s.body) {
                    Some(Body::Write { data, .. }) => {
                        data.bytes().map(|d| &d[*off..*off + p.len_bytes as usize])
                    }
                    _ => None,
                },
            };
            if let Some(b) = bytes {
                f(p.offset_bytes, b)?;
            }
        }
        Ok(())
    }

    /// Where a read command's bytes go: `f(device offset, buffer)` for each of its
    /// requests in order (virtual buffers are skipped).
    pub fn io_read(
        &mut self,
        cmd: u64,
        mut f: impl FnMut(u64, &mut [u8]) -> std::io::Result<()>,
    ) -> std::io::Result<()> {
        let Some(InFlight::Sched(c)) = self.cmds.get(&cmd) else {
            return Err(std::io::Error::other(format!(
                "no read command {cmd} in flight"
            )));
        };
        let members: Vec<ReqId> = c.members.iter().map(|m| m.id).collect();
        for id in members {
            let p = self
                .pieces
                .get_mut(&id)
                .expect("members of a command in flight are held");
            let (offset, len) = (p.offset_bytes, p.len_bytes as usize);
            let target: Option<&mut [u8]> = match &mut p.buf {
                PieceBuf::Own(b) => b.bytes_mut(),
                PieceBuf::Op(off) => {
                    let off = *off;
                    match p.op.and_then(|o| self.ops.get_mut(&o)).map(|s| &mut s.body) {
                        Some(Body::Read { buf, .. }) => {
                            buf.bytes_mut().map(|d| &mut d[off..off + len])
                        }
                        _ => None,
                    }
                }
            };
            if let Some(t) = target {
                f(offset, t)?;
            }
        }
        Ok(())
    }

    /// The device finished command `cmd`.
    pub fn complete(&mut self, cmd: u64, result: std::io::Result<()>, now: Now) {
        let now = self.tick(now);
        let Some(what) = self.cmds.remove(&cmd) else {
            panic!("the driver completed command {cmd}, which is not in flight");
        };
        if self.cmds.is_empty() {
            if let Some(since) = self.busy_since_ns.take() {
                self.qos.busy_ns += now.mono_ns.saturating_sub(since);
            }
        }
        match what {
            InFlight::Flush => {
                self.flush_in_flight = false;
                self.qos.flushes += 1;
                let err = result.err().map(|e| e.to_string());
                if let Some(e) = &err {
                    self.broken
                        .get_or_insert_with(|| format!("a flush failed: {e}"));
                }
                self.commit.flush_done(err);
            }
            InFlight::Sched(c) => {
                let done = self
                    .sched
                    .complete(c.id, now.mono_ns)
                    .expect("the scheduler knows every command in flight");
                for m in done.members {
                    let r = match &result {
                        Ok(()) => Ok(()),
                        Err(e) => Err(io_error(
                            if c.write {
                                "writing to the device"
                            } else {
                                "reading from the device"
                            },
                            e,
                        )),
                    };
                    self.piece_done(m.id, r, now);
                }
            }
        }
        self.progress(now);
    }

    /// When the driver must call [`Engine::poll`] again without any other event: a
    /// hold timer of the scheduler, or the commit interval.
    pub fn next_wakeup(&self) -> Option<u64> {
        let sched = self
            .sched_wake_ns
            .filter(|_| self.sched.has_work() && self.free_slots() > 0);
        let commit = self.commit.due_ns(self.vol.dirty_blocks() > 0);
        [sched, commit, self.stream_wakeup()]
            .into_iter()
            .flatten()
            .min()
    }

    // ---- completions ----

    fn piece_failed(&mut self, r: Request, now: Now) {
        let deadline_ns = r.deadline_ns.unwrap_or(0);
        self.piece_done(r.id, Err(Error::DeadlineMissed { deadline_ns }), now);
    }

    fn piece_done(&mut self, req: ReqId, result: Result<()>, now: Now) {
        let piece = self
            .pieces
            .remove(&req)
            .unwrap_or_else(|| panic!("request {req} completed twice or never issued"));
        let Some(id) = piece.op else {
            self.commit.piece_done(result.err().map(|e| {
                let msg = e.to_string();
                self.broken
                    .get_or_insert_with(|| format!("a commit write failed: {msg}"));
                msg
            }));
            return;
        };
        let ino = self.ops[&id].body.file();
        match result {
            Err(e) => {
                let is_write = matches!(
                    self.ops[&id].body,
                    Body::Write { .. } | Body::Truncate { .. }
                );
                if is_write {
                    if let Some(ino) = ino {
                        let msg = e.to_string();
                        let f = self.file_io(ino);
                        if f.poisoned_from.is_none() {
                            f.poisoned_from = Some((id, msg));
                            self.last_sectors.forget(ino);
                        }
                    }
                }
                self.ops
                    .get_mut(&id)
                    .expect("op of a held request")
                    .error
                    .get_or_insert(e);
            }
            Ok(()) => {
                if piece.write {
                    self.data_unflushed = true;
                }
                match piece.then {
                    Then::Nothing => {}
                    Then::CopyOut {
                        skip,
                        dst,
                        len,
                        ref checks,
                    } => {
                        let st = self.ops.get_mut(&id).expect("op of a held request");
                        if let (PieceBuf::Own(b), Body::Read { buf, ino, .. }) =
                            (&piece.buf, &mut st.body)
                        {
                            match failed_check(*ino, checks, b.bytes()) {
                                None => buf::copy(b, skip, buf, dst, len),
                                Some(e) => {
                                    st.error.get_or_insert(e);
                                }
                            }
                        }
                    }
                    Then::Check {
                        buf_offset,
                        ref checks,
                    } => {
                        let st = self.ops.get_mut(&id).expect("op of a held request");
                        if let Body::Read { buf, ino, .. } = &st.body {
                            let bytes = buf.bytes().map(|b| &b[buf_offset..]);
                            if let Some(e) = failed_check(*ino, checks, bytes) {
                                st.error.get_or_insert(e);
                            }
                        }
                    }
                    Then::RmwRange { access, at } => {
                        self.rmw_range_done(id, access, at, &piece, now)
                    }
                }
            }
        }
        let st = self.ops.get_mut(&id).expect("op of a held request");
        st.pieces_left -= 1;
        if st.pieces_left == 0 {
            self.op_data_done(id, now);
        }
    }

    fn rmw_range_done(&mut self, id: OpId, access: usize, at: usize, piece: &Piece, now: Now) {
        let ready = {
            let st = self.ops.get_mut(&id).expect("op of a held request");
            let Some(acc) = st.body.accesses_mut().and_then(|a| a.get_mut(access)) else {
                return;
            };
            if let (PieceBuf::Own(src), Some(b)) = (&piece.buf, acc.bounce.as_mut()) {
                buf::copy(src, 0, b, at, src.len());
            }
            acc.rmw_left -= 1;
            (acc.rmw_left == 0).then(|| (acc.io.clone(), acc.bounce.take()))
        };
        let Some((io, Some(mut bounce))) = ready else {
            return;
        };
        if self.ops[&id].error.is_some() {
            return;
        }
        // The bytes a rewrite keeps must be the ones their checksum vouches for: a
        // rewrite never blesses damaged data with a new checksum.
        let ino = self.ops[&id].body.file().unwrap_or(0);
        if let Some(e) = failed_check(ino, &io.checks, bounce.bytes()) {
            self.ops
                .get_mut(&id)
                .expect("op of a held request")
                .error
                .get_or_insert(e);
            return;
        }
        if let Fill::Compose { pieces, .. } = &io.fill {
            self.compose(id, pieces, &mut bounce);
        }
        let crcs = sum_crcs(&io.sums, bounce.bytes());
        if let Some(acc) = self
            .ops
            .get_mut(&id)
            .and_then(|s| s.body.accesses_mut())
            .and_then(|a| a.get_mut(access))
        {
            acc.crcs = crcs;
        }
        self.add_op_piece(
            id,
            io.offset_bytes,
            io.len_bytes,
            true,
            PieceBuf::Own(bounce),
            Then::Nothing,
            now,
        );
    }

    /// Every request of an operation is back.
    fn op_data_done(&mut self, id: OpId, now: Now) {
        let st = self.ops.get_mut(&id).expect("op exists");
        match &st.body {
            Body::Read { ino, .. } => {
                let ino = *ino;
                if let Some(f) = self.files.get_mut(&ino) {
                    f.data_ops -= 1;
                    f.reads.retain(|(o, _)| *o != id);
                    if f.idle() && f.poisoned_from.is_none() {
                        self.files.remove(&ino);
                    }
                }
                let st = self.ops.get_mut(&id).expect("op exists");
                let result = if st.cancelled {
                    Err(Error::Cancelled)
                } else if let Some(e) = st.error.take() {
                    Err(e)
                } else {
                    let Body::Read { buf, bytes, .. } =
                        std::mem::replace(&mut st.body, Body::Other(Op::Fsync))
                    else {
                        unreachable!()
                    };
                    self.finish_read(id, buf, bytes, now);
                    return;
                };
                self.finish(id, result, now);
            }
            Body::Write { ino, .. } | Body::Truncate { ino, .. } => {
                let ino = *ino;
                st.stage = Stage::DataDone;
                self.apply_ready(ino, now);
            }
            Body::Other(_) => {}
        }
    }

    /// Applies the file's finished writes at the front of its queue, in order.
    fn apply_ready(&mut self, ino: Ino, now: Now) {
        while let Some(&front) = self.files.get(&ino).and_then(|f| f.writes.front()) {
            if self.ops[&front].stage != Stage::DataDone {
                break;
            }
            let f = self.files.get_mut(&ino).expect("file with writes");
            f.writes.pop_front();
            f.spans.retain(|(o, _, _)| *o != front);
            f.data_ops -= 1;
            let poison = f
                .poisoned_from
                .as_ref()
                .filter(|(from, _)| front >= *from)
                .map(|(_, m)| m.clone());
            let st = self.ops.get_mut(&front).expect("op exists");
            let own_error = st.error.take();
            let plan = st.body.plan().cloned().expect("a running write has a plan");
            let result = match (own_error, poison) {
                (Some(e), _) => {
                    self.vol.abort_write(&plan);
                    Err(e)
                }
                (None, Some(msg)) => {
                    self.vol.abort_write(&plan);
                    Err(Error::io(
                        "writing after an earlier write to the same file failed",
                        std::io::Error::other(msg),
                    ))
                }
                (None, None) => match self.vol.apply_write(&plan, &access_crcs(&mut st.body)) {
                    Ok(()) => {
                        let st = self.ops.get_mut(&front).expect("op exists");
                        match std::mem::replace(&mut st.body, Body::Other(Op::Fsync)) {
                            Body::Write { data, .. } => Ok(Output::Write { data }),
                            _ => Ok(Output::Done),
                        }
                    }
                    Err(e) => Err(e),
                },
            };
            if self.vol.wants_commit_now() {
                self.commit.want_now();
            }
            self.finish(front, result, now);
        }
        if let Some(f) = self.files.get_mut(&ino) {
            if f.writes.is_empty() {
                f.poisoned_from = None;
            }
            if f.idle() && f.poisoned_from.is_none() {
                self.files.remove(&ino);
            }
        }
    }

    fn finish_read(&mut self, id: OpId, buf: IoBuf, bytes: usize, now: Now) {
        self.finish(id, Ok(Output::Read { buf, bytes }), now);
    }

    /// An operation is done: record it and hand out its completion.
    fn finish(&mut self, id: OpId, result: Result<Output>, now: Now) {
        let Some(st) = self.ops.remove(&id) else {
            return;
        };
        let data_op = matches!(&st.body, Body::Read { .. } | Body::Write { .. })
            || matches!(result, Ok(Output::Read { .. } | Output::Write { .. }));
        let bytes = match &result {
            Ok(Output::Read { bytes, .. }) => *bytes as u64,
            Ok(Output::Write { data }) => data.len() as u64,
            _ => 0,
        };
        if data_op {
            match (st.deadline_ns, &result) {
                (_, Err(Error::Cancelled)) => {}
                (Some(d), r) => {
                    let outcome = match r {
                        Ok(_) => RtOutcome::Done,
                        Err(Error::DeadlineMissed { .. }) => RtOutcome::DeadlineFailed,
                        Err(Error::NoSpace { .. }) => RtOutcome::NoSpace,
                        Err(_) => RtOutcome::Other,
                    };
                    self.qos.realtime(d, now.mono_ns, bytes, outcome);
                }
                (None, Ok(_)) => self.qos.best_effort(st.submit.mono_ns, now.mono_ns, bytes),
                (None, Err(_)) => {}
            }
        }
        if let Some(sid) = st.stream {
            self.stream_io_done(sid, id, st.deadline_ns, result, now);
            return;
        }
        if st.owner == stream::STREAM_RELEASE_OWNER {
            // A finished stream's last hold on an orphan: nobody waits for it, and a
            // failure leaves the orphan for the next mount to free (`stream/hold.rs`).
            return;
        }
        if st.owner == tail_log::TAIL_REPLAY_OWNER {
            self.tail_replay_write_done(result);
            return;
        }
        if let (Err(Error::NoSpace { .. }), Some(ino)) = (&result, st.body.file()) {
            self.no_space_event(ino, &result, now);
        }
        self.completions.push_back(Completion {
            op: id,
            result,
            deadline_ns: st.deadline_ns,
            submit_ns: st.submit.mono_ns,
            done_ns: now.mono_ns,
        });
    }
}

fn overlap(a: (u64, u64), b: (u64, u64)) -> bool {
    a.0 < b.1 && b.0 < a.1
}

/// CRC32C of each checksummed range of an access's bytes (`None`: a virtual buffer).
fn sum_crcs(sums: &[Sum], bytes: Option<&[u8]>) -> Vec<Option<u32>> {
    sums.iter()
        .map(|s| bytes.map(|b| crc32c::crc32c(&b[s.at..s.at + s.len])))
        .collect()
}

/// The first of `checks` the bytes fail, as the error a reader gets (`None` when all
/// hold, or for a virtual buffer, which holds no bytes to check).
fn failed_check(ino: Ino, checks: &[Check], bytes: Option<&[u8]>) -> Option<Error> {
    let b = bytes?;
    let c = checks
        .iter()
        .find(|c| crc32c::crc32c_append(c.seed, &b[c.at..c.at + c.len]) != c.crc)?;
    Some(Error::Checksum {
        ino,
        offset: c.file_offset,
        end: c.file_offset + c.len as u64,
    })
}

/// The checksums a write's accesses computed, in plan order.
fn access_crcs(body: &mut Body) -> Vec<Option<u32>> {
    body.accesses_mut()
        .map(|a| a.iter().flat_map(|a| a.crcs.iter().copied()).collect())
        .unwrap_or_default()
}
