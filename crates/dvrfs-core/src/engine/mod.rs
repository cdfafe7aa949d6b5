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
//!
//! ## Files
//! Each concern in a file of its own, every one an `impl Engine` block over the state
//! declared here; each opens with the invariant it keeps:
//! - `ordering.rs`: which deferred operations may start, in what order, per file;
//! - `planning.rs`: a read, write or truncate turned into device requests;
//! - `device.rs`: device commands handed out and completed;
//! - `apply.rs`: finished operations applied to the [`Volume`] and completed;
//! - `checksums.rs`: data checksums computed for writes and verified on reads;
//! - `commit.rs`: the commit pipeline; `bounds.rs`: the scheduler queue's shares;
//! - `op_state.rs`: an operation as the engine holds it while it runs;
//! - `check.rs`: the bookkeeping checked after completions and at unmount;
//! - `stream.rs` (and `stream/`), `tail_log.rs`, `last_sector.rs`, `events.rs`,
//!   `status.rs`: streams, the tail log, appends' last sectors, events, status.

mod apply;
mod bounds;
mod buf;
mod check;
mod checksums;
mod commit;
mod device;
mod events;
mod expire;
mod index_resume;
mod indexing;
mod last_sector;
mod live_index;
mod op;
mod op_state;
mod ordering;
mod planning;
mod reclaim;
mod reservation;
mod retention;
mod status;
mod stream;
mod tail_log;

pub use crate::volume::OpenMode;
pub use bounds::commit_reserve;
pub use buf::{ExternalBuf, IoBuf};
pub use device::{DevCommand, DevKind};
pub use events::SPACE_LEVELS_PCT;
pub use op::{Completion, Op, OpId, Output};
pub use reservation::{Reservation, DEFAULT_REQUEST_BYTES, MAX_RECORDING_DURATION_S};
pub use retention::{
    RetentionFigures, CHECK_BUSY_NS as RETENTION_CHECK_BUSY_NS, CHECK_NS as RETENTION_CHECK_NS,
    DELETE_GAP_NS as RETENTION_DELETE_GAP_NS, MAX_PER_COMMIT as RETENTION_MAX_PER_COMMIT,
    USAGE_SAMPLE_NS,
};
pub use status::{
    admission_status, AdmissionStatus, DiskStatus, HeadroomAsk, SpaceStatus, Status, StreamStatus,
};
pub use stream::{
    gather_period_ns, stream_ask, GatherMode, KeptShare, StreamDir, StreamId, StreamInfo,
    StreamSpec, StreamStats, AUTO_SLACK_NS, GATHER_LEAD_NS, MAX_KEEP_FRACTION, MAX_PLAY_FILES,
    MAX_STREAM_BUFFER_BYTES, MAX_STREAM_REQUEST_BYTES, RECORDING_BUSY,
};

use crate::disk::Admission;
use crate::error::{Error, Result};
use crate::meta::Ino;
use crate::qos::Recorder;
use crate::sched::{self, Class, ReqId, SchedSettings, Scheduler};
use crate::volume::{Replay, Volume};
use commit::{CommitJob, CommitState};
use device::{InFlight, Piece};
use op_state::{Body, OpState, Stage};
use ordering::FileIo;
use std::collections::{BTreeMap, HashMap, VecDeque};

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
    /// Files indexed as they are written (`indexing.rs`).
    live_indexes: live_index::LiveIndexes,
    /// Retention's deletions (`retention.rs`).
    retention: retention::RetentionRun,
    streams: BTreeMap<StreamId, stream::Stream>,
    next_stream: StreamId,
    admission: Option<Admission>,
    /// The stream buffers' budget (`stream/memory.rs`); `None`: unlimited.
    stream_memory_bytes: Option<u64>,
    /// The highest space level (`events::SPACE_LEVELS_PCT`) the used space has
    /// crossed, 0 for none: `space_low` / `space_ok` events mark the crossings.
    space_level_pct: u16,
    /// Device completions checked in this debug build (`check.rs` spaces the volume's
    /// scan by it).
    completions_checked: u64,
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
            live_indexes: live_index::LiveIndexes::new(),
            retention: retention::RetentionRun::default(),
            streams: BTreeMap::new(),
            next_stream: 1,
            admission: cfg.admission,
            stream_memory_bytes: None,
            space_level_pct: 0,
            completions_checked: 0,
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
            | Op::StreamSync { .. }
            | Op::StreamRoll { .. }
            | Op::StreamQueue { .. }
            | Op::StreamFollow { .. }) => {
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
                let newest = self.is_newest_write(id, ino);
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
                self.newest_write_dropped(id, ino);
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
        self.ops.get(&id).map_or("done", |s| s.body.name())
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
}
