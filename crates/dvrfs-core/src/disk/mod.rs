//! Hard-disk models: the JSON model files, the mechanical simulation the simulator runs
//! requests on, the service-time estimator of the traffic mixer (AVFS eq. 1) and the
//! admission (capacity) bounds.
//!
//! One concept per file: `model` (the typed schema of `disks/SCHEMA.md` and its
//! limits, the lowest file here), `load` (reading a model from JSON: the shape check
//! and the built-ins), `validate` (a model's meaning against physics and the limits,
//! above `geometry` and `seek`), `geometry` (zones, LBA -> cylinder/surface/sector, sustained rates),
//! `seek` (the two-piece Ruemmler-Wilkes curve and its fit), `hdd` (the queue-depth-1
//! mechanical simulation), `estimator` (AVFS eq. 1), `capacity` (how many streams
//! like one fit), `admission` (whether one more stream fits beside a mix) and
//! `calibrate` (measuring a device into a model), `timer` (the disk the simulator and
//! the runtime's emulation serve commands on), `drive` (a whole drive with its command
//! queue, as `dvrfs emulate` serves it), `power` (the optional power model and the
//! energy meter a run's commands are accounted on), `predict` (what the model predicts
//! for fio on the emulated disk: the drive run in virtual time). All of it is sans-I/O and deterministic: time comes in as arguments and the
//! only randomness (rare slow accesses) is a seeded `ChaCha8Rng`. `docs/disk-models.md`
//! gives the figures the tests measure.

pub mod admission;
pub mod calibrate;
pub mod capacity;
pub mod drive;
pub mod estimator;
pub mod geometry;
pub mod hdd;
mod load;
pub mod model;
pub mod power;
pub mod predict;
pub mod seek;
pub mod timer;
mod validate;

pub use admission::{Admission, Durability, StreamAsk, StreamLoad};
pub use capacity::{capacity, durable_bounds, CapacityReport, DurableBounds, StreamParams};
pub use drive::{Command, CommandKind, Drive, DriveError, DriveStats, TraceRow};
pub use estimator::Estimator;
pub use hdd::Hdd;
pub use model::{DiskModel, ModelError};
pub use power::{Energy, EnergyMeter, PowerModel};
pub use timer::{DiskTimer, HddDisk};

/// One disk command: `sectors` logical sectors from `lba`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Access {
    pub lba: u64,
    pub sectors: u32,
    pub write: bool,
}

/// How the disk spent the time of one command (virtual nanoseconds).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AccessTiming {
    /// When the command started (not before it was issued) and ended.
    pub start_ns: u64,
    pub end_ns: u64,
    pub overhead_ns: u64,
    pub seek_ns: u64,
    pub rotation_ns: u64,
    pub transfer_ns: u64,
    /// Cylinders the head moved.
    pub seek_cylinders: u64,
    /// The whole read was served from a read-ahead cache segment, at interface speed.
    pub cache_hit: bool,
    /// Part of the read (its head) came from a read-ahead cache segment and the rest
    /// (its tail) from the media. Never set together with `cache_hit`; a read that
    /// merely continues a read-ahead stream with no sector buffered yet is neither.
    pub cache_partial_hit: bool,
}
