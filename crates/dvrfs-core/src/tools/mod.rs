//! Tools that work on a whole volume: creating one (`mkfs`) and checking and repairing
//! one (`fsck`). They stand above the engine: fsck opens the volume through the
//! blocking driver.

pub mod fsck;
mod mkfs;

pub use mkfs::mkfs;
