//! The disk model: the typed form of `disks/SCHEMA.md` (one hard disk's data sheet),
//! the limits every field is held to, and the loading error.
//!
//! This is the lowest file of `disk/`: `geometry` and `seek` derive from a model,
//! `load` reads one from JSON (shape check, then deserialization) and `validate` checks
//! its meaning against the limits below. A [`DiskModel`] obtained through
//! [`DiskModel::from_json`] or [`DiskModel::builtin`] has passed both checks.
//!
//! Fault model: none; these are plain data types.

use serde::{Deserialize, Serialize};

pub use super::power::PowerModel;

/// Names accepted by [`DiskModel::builtin`].
pub const BUILTIN_NAMES: &[&str] = &["avfs-250g", "nvr-8t", "laptop-5400"];

/// Longest accepted `name`, in bytes (it is printed in one-line reports).
pub const MAX_NAME_BYTES: usize = 64;
/// Longest accepted `description`, in bytes.
pub const MAX_DESCRIPTION_BYTES: usize = 1024;
/// Largest accepted capacity in logical blocks (2^48: 1 EiB of 4 KiB sectors), so that
/// byte counts never overflow a `u64`.
pub const MAX_LBAS: u64 = 1 << 48;
/// Fastest accepted spindle (no hard disk spins faster than 15,000 rpm).
pub const MAX_RPM: f64 = 30_000.0;
/// Most data surfaces (heads) accepted.
pub const MAX_SURFACES: u32 = 64;
/// Most recording zones accepted (real drives have 15 to 60).
pub const MAX_ZONES: u32 = 1024;
/// Most sectors per track accepted.
pub const MAX_SECTORS_PER_TRACK: u32 = 1 << 20;
/// Most cylinders the geometry may derive from `lbas`, `surfaces` and the zones (a
/// current 20 TB drive has about 500,000).
pub const MAX_CYLINDERS: u64 = 50_000_000;
/// Longest accepted seek, settle, switch or overhead time, in ms.
pub const MAX_MECHANICAL_MS: f64 = 1_000.0;
/// Fastest accepted host link, in MB/s (10^6 bytes).
pub const MAX_INTERFACE_MB_PER_S: f64 = 100_000.0;
/// Largest accepted read-ahead, in bytes.
pub const MAX_READ_AHEAD_BYTES: u64 = 1 << 30;
/// Most accepted cache segments.
pub const MAX_CACHE_SEGMENTS: u32 = 1024;
/// How far an explicit `seek_curve` may stray from the `seek_ms` figures (relative).
pub const SEEK_CURVE_TOLERANCE: f64 = 0.10;
/// Longest accepted slow-I/O extra time, in ms (a minute of error recovery).
pub const MAX_SLOW_IO_MS: f64 = 60_000.0;
/// Largest accepted power figure, in watts (a 3.5-inch disk's spin-up peak is about
/// 35 W; 100 W is no hard disk).
pub const MAX_POWER_W: f64 = 100.0;
/// Longest accepted spin-up or spin-down, in seconds (data sheets give 3 to 30 s).
pub const MAX_SPIN_S: f64 = 120.0;

/// A loading error. Every message names the field (dotted path) and what is wrong.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum ModelError {
    #[error("disk model is not valid JSON: {0}")]
    Syntax(String),
    #[error("unknown field `{field}`{hint}")]
    UnknownField { field: String, hint: String },
    #[error("missing field `{field}`")]
    MissingField { field: String },
    #[error("field `{field}`: {problem}")]
    Invalid { field: String, problem: String },
}

impl ModelError {
    pub(crate) fn invalid(field: &str, problem: impl Into<String>) -> ModelError {
        ModelError::Invalid {
            field: field.to_string(),
            problem: problem.into(),
        }
    }
}

/// A hard-disk model (see `disks/SCHEMA.md` for the meaning of each field). Field names
/// are the JSON names; units are in the names where the schema has them.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DiskModel {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Capacity in logical blocks.
    pub lbas: u64,
    /// Logical block size, 512 or 4096.
    pub sector_bytes: u32,
    /// Spindle speed; one revolution takes 60000 / rpm ms.
    pub rpm: f64,
    /// Data surfaces (heads).
    pub surfaces: u32,
    pub zones: Zones,
    pub seek_ms: SeekMs,
    /// Explicit seek curve instead of the fit to `seek_ms`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seek_curve: Option<SeekCurveSpec>,
    pub write_settle_ms: f64,
    pub head_switch_ms: f64,
    /// Skew between consecutive tracks of a cylinder, as a fraction of a revolution.
    pub track_skew: f64,
    /// Skew between the last track of a cylinder and the first of the next one.
    pub cylinder_skew: f64,
    pub command_overhead_ms: f64,
    /// Host link rate in MB/s (10^6 bytes).
    pub interface_mb_per_s: f64,
    pub cache: Cache,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slow_io: Option<SlowIo>,
    /// What the disk draws (`disk/power.rs`); without it a run's energy is unknown.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub power: Option<PowerModel>,
}

/// Zoned recording: `count` zones of equal cylinder count, sectors per track falling
/// linearly from `spt_outer` (zone 0, LBA 0) to `spt_inner` (the last zone).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Zones {
    pub count: u32,
    pub spt_outer: u32,
    pub spt_inner: u32,
}

/// The three seek figures of a data sheet, in ms.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SeekMs {
    /// One-cylinder seek.
    pub track: f64,
    /// Mean over uniformly random start and end cylinders.
    pub average: f64,
    /// Full stroke.
    pub full: f64,
}

/// An explicit two-piece Ruemmler-Wilkes curve (ms): t = t1 + b*sqrt(x) for x <= x0,
/// c + e*x above, x = distance / cylinders.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SeekCurveSpec {
    pub x0: f64,
    pub t1: f64,
    pub b: f64,
    pub c: f64,
    pub e: f64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Cache {
    /// Bytes the drive reads ahead after a read (0 = no read-ahead).
    pub read_ahead_bytes: u64,
    /// Cache segments (independent read-ahead buffers).
    pub segments: u32,
    /// Writes complete into the cache (true) or on the media (false).
    pub write_back: bool,
}

/// Rare slow accesses (error recovery).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SlowIo {
    /// Probability per command.
    pub probability: f64,
    /// [min, max] of the uniformly drawn extra time, in ms.
    pub extra_ms: [f64; 2],
}

impl DiskModel {
    /// Capacity in bytes.
    pub fn capacity_bytes(&self) -> u64 {
        self.lbas.saturating_mul(self.sector_bytes as u64)
    }

    /// One revolution, in ns (not rounded: 8,333,333.3 ns at 7200 rpm).
    pub fn rotation_ns(&self) -> f64 {
        60.0e9 / self.rpm
    }
}
