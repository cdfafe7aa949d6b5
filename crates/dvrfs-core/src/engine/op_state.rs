//! An operation as the engine holds it while it runs.
//!
//! [`OpState`] is the engine's record of a submitted operation from submission to
//! completion: its [`Body`] (what it works on, and the plan once it has one), its
//! [`Stage`] and how many of its requests are still out. Invariant: the stage only
//! moves forward (`Deferred`, `Running`, `DataDone`), and `pieces_left` counts the
//! requests of the operation the engine holds (queued or on the device); an operation
//! is done, and its record dropped, exactly once (`apply.rs`).

use super::{IoBuf, Now, Op, OpId, StreamId};
use crate::error::Error;
use crate::meta::Ino;
use crate::sched::Class;
use crate::volume::{PlannedIo, WritePlan};

/// A write access being composed (read-modify-write).
pub(super) struct Access {
    pub(super) io: PlannedIo,
    pub(super) bounce: Option<IoBuf>,
    pub(super) rmw_left: u32,
    /// CRC32C of each of `io.sums`, once the access's bytes are final (`None` for
    /// a virtual buffer).
    pub(super) crcs: Vec<Option<u32>>,
}

pub(super) enum Body {
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
        /// An `Op::Append`: `offset` is set to the file's planned size when the
        /// write starts (`start_write`).
        append: bool,
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
    pub(super) fn of(op: Op) -> Body {
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
                append: false,
            },
            Op::Append { ino, data } => Body::Write {
                ino,
                offset: 0,
                data,
                head: None,
                plan: None,
                accesses: vec![],
                append: true,
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

    pub(super) fn file(&self) -> Option<Ino> {
        match self {
            Body::Read { ino, .. } | Body::Write { ino, .. } | Body::Truncate { ino, .. } => {
                Some(*ino)
            }
            Body::Other(_) => None,
        }
    }

    pub(super) fn accesses_mut(&mut self) -> Option<&mut Vec<Access>> {
        match self {
            Body::Write { accesses, .. } | Body::Truncate { accesses, .. } => Some(accesses),
            _ => None,
        }
    }

    /// The operation's name, for messages.
    pub(super) fn name(&self) -> &'static str {
        match self {
            Body::Read { .. } => "read",
            Body::Write { .. } => "write",
            Body::Truncate { .. } => "truncate",
            Body::Other(op) => op.name(),
        }
    }

    pub(super) fn plan(&self) -> Option<&WritePlan> {
        match self {
            Body::Write { plan, .. } | Body::Truncate { plan, .. } => plan.as_ref(),
            _ => None,
        }
    }
}

/// Where an operation is; declared in the order it moves through them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Stage {
    Deferred,
    Running,
    /// Data on disk; waiting for earlier writes of the file to be applied.
    DataDone,
}

pub(super) struct OpState {
    pub(super) body: Body,
    pub(super) deadline_ns: Option<u64>,
    pub(super) owner: u32,
    pub(super) submit: Now,
    pub(super) stage: Stage,
    /// Requests not yet completed (queued or in flight).
    pub(super) pieces_left: u32,
    pub(super) error: Option<Error>,
    pub(super) cancelled: bool,
    /// The stream this operation moves data for (its completion goes to the stream).
    pub(super) stream: Option<StreamId>,
}

impl OpState {
    pub(super) fn class(&self) -> Class {
        if self.deadline_ns.is_some() {
            Class::RealTime
        } else {
            Class::BestEffort
        }
    }

    /// Moves operation `id` on to stage `to`: stages only move forward (a deferred
    /// operation started twice would issue its requests twice).
    pub(super) fn advance(&mut self, id: OpId, to: Stage) {
        assert!(
            self.stage < to,
            "operation {id} ({}) moved from stage {:?} to {to:?}: stages only move forward",
            self.body.name(),
            self.stage
        );
        self.stage = to;
    }

    /// One request of operation `id` is back (done, failed or cancelled); returns how
    /// many are still out.
    pub(super) fn piece_back(&mut self, id: OpId) -> u32 {
        assert!(
            self.pieces_left > 0,
            "operation {id} ({}) got back a request it did not have out",
            self.body.name()
        );
        self.pieces_left -= 1;
        self.pieces_left
    }
}
