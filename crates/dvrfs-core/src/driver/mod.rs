//! Drivers of the engine that live in the core: the blocking driver, which runs one
//! operation at a time over a [`crate::device::Device`] for the CLI, fsck and tests.
//! (The simulator, `sim/`, is the other in-core driver; the io_uring runtime, the FUSE
//! mount and the C API are crates of their own.)

pub mod blocking;

pub use blocking::{Clock, Fs, ManualClock, Now};
