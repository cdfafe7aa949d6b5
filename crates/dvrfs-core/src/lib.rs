//! dvrfs engine core: the on-disk format, block allocators, in-memory metadata and the
//! journal. It never reads a clock, sleeps, spawns a thread or opens a file: time comes
//! in as arguments and storage through the [`device::Device`] trait.
#![forbid(unsafe_code)]

pub mod alloc;
pub mod chain;
pub mod device;
pub mod disk;
pub mod driver;
pub mod engine;
pub mod error;
pub mod format;
pub mod fuzzing;
pub mod layout;
pub mod media;
pub mod meta;
pub mod qos;
pub mod retention;
pub mod sched;
pub mod sim;
pub mod tools;
pub mod units;
pub mod volume;

pub use driver::Fs;
pub use engine::{Engine, EngineConfig, IoBuf, Now, Op, OpId, OpenMode, Output};
pub use error::{Error, Result};
pub use volume::{OpenOptions, Stat, Volume};
