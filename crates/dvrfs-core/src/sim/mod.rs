//! The simulation shell: the engine, a disk timer and an event loop in virtual time.
//!
//! Nothing here models the file system or the scheduler. The simulator formats a
//! volume, fills and ages it through the blocking driver (the real allocator and
//! journal, with virtual buffers that carry no bytes), loads it into an [`Engine`] and
//! then only submits operations (stream requests, best-effort traffic), times the
//! device commands the engine hands out on a [`DiskTimer`] (the HDD model), and feeds
//! the completions back. Reads are planned by the file system's own read path, writes
//! by its write path; journal and checkpoint writes are the commit pipeline's, with
//! their flushes, in its order. The metadata the engine writes lands in a real
//! in-memory device image (so a simulated power cut can be recovered from); file data
//! is virtual.
//!
//! Stream clients follow AVFS 2.1. A stream moves `request_bytes` per request at
//! `bitrate` (period `P = request_bytes / rate`) and may have `depth` requests
//! outstanding: its buffer holds `depth` requests, so a request's deadline is its
//! submission plus `depth * P`, the buffer size over the rate (AVFS 2.1: "dividing the
//! buffer size by the rate ... gives the deadline"):
//! - a **read** (playback) stream issues requests `0..depth` when it starts, at `t0`;
//!   request `k` plays from `t_play + k*P` with `t_play = t0 + depth*P` (the player
//!   starts once its buffer could be full), which is its deadline; request
//!   `k >= depth` is issued when request `k - depth` starts playing (its slot frees),
//!   at `t0 + k*P`, so every steady-state request has `depth * P` of slack;
//! - a **write** (recording) stream issues request `k` when its data is complete,
//!   `t0 + (k+1)*P`, with the deadline `depth*P` later.
//!
//! A stream never has more than `depth` requests outstanding: if the slot is still busy
//! the issue waits for it, and the deadline does not move. Playback and recording do
//! not stop for a late request; the late request is a glitch. A recording that cannot
//! go on (the disk is full) stops, and every request it would have issued until the
//! end of the run counts as missed, with its cause (`recordings_stopped`).
//! Everything random comes from one seed (ChaCha8), so a run is reproducible byte for
//! byte.

pub mod client;
pub mod report;
pub mod workload;

mod buffer;
mod config;
mod find_max;
mod history;
mod outcome;
mod run;
mod setup;

pub use crate::disk::{DiskTimer, HddDisk};
pub use buffer::buffer_level;
pub use client::{Client, ClientEv, Host};
pub use config::{
    BestEffort, SimConfig, SimRetention, StreamRecordings, BE_REQUEST_BYTES, BE_START_NS,
    FILL_RECORDING_MAX_S, FILL_RECORDING_MIN_S, PHOTO_COUNT, PHOTO_MEAN_BYTES, SIM_CHUNK_NS,
    SIM_UTC_EPOCH_NS,
};
pub use find_max::{find_max, FindMax};
pub use outcome::{
    client_outcome, fill_outcome, retention_outcome, stream_lengths, CrashOutcome, DeleteOutcome,
    RetentionOutcome, Series, SimOutcome, TraceRow,
};
pub use report::BE_SHARE_TOLERANCE;
pub use run::{run, run_until_crash};
pub use setup::{fill_recording_bytes, prepare_device, run_rng};
pub use workload::{StreamGroup, Workload, WorkloadError};

use config::validate;
use setup::{load_engine, prepare};
