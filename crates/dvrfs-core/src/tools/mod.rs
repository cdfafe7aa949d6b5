//! Tools that work on a whole volume or file: creating one (`mkfs`), checking and
//! repairing one (`fsck`), building a file's frame index from its bytes (`reindex`).
//! They stand above the engine: fsck and reindex go through the blocking driver.

pub mod fsck;
mod mkfs;
pub mod reindex;

pub use mkfs::mkfs;
