//! The device the simulator gives the real file-system code.
//!
//! Metadata (everything outside the data region) is stored, so the allocator, the
//! journal and the checkpoints run exactly as on a disk. File data is not stored (an
//! hour of streams is hundreds of gigabytes): data reads return zeros. Every write and
//! every flush is logged so the simulator can turn the file system's own I/O
//! (data of recordings, journal transactions, checkpoints) into disk requests.

use crate::device::{Device, MemDevice};
use std::io;
use std::ops::Range;

pub struct SimDevice {
    meta: MemDevice,
    data: Range<u64>,
    sector_bytes: u32,
    /// Writes since the last `take_writes`, as (offset, length) in bytes.
    writes: Vec<(u64, u64)>,
}

impl SimDevice {
    pub fn new(size_bytes: u64, sector_bytes: u32) -> Self {
        SimDevice {
            meta: MemDevice::with_sector(size_bytes, sector_bytes),
            data: 0..0,
            sector_bytes,
            writes: Vec::new(),
        }
    }

    /// Bytes in `range` are file data: not stored.
    pub fn set_data_region(&mut self, range: Range<u64>) {
        self.data = range;
    }

    /// The writes logged since the last call.
    pub fn take_writes(&mut self) -> Vec<(u64, u64)> {
        std::mem::take(&mut self.writes)
    }

    fn in_data(&self, offset: u64) -> bool {
        self.data.contains(&offset)
    }
}

impl Device for SimDevice {
    fn size_bytes(&self) -> u64 {
        self.meta.size_bytes()
    }
    fn sector_bytes(&self) -> u32 {
        self.sector_bytes
    }
    fn read_at(&self, offset_bytes: u64, buf: &mut [u8]) -> io::Result<()> {
        if self.in_data(offset_bytes) {
            buf.fill(0);
            return Ok(());
        }
        self.meta.read_at(offset_bytes, buf)
    }
    fn write_at(&mut self, offset_bytes: u64, buf: &[u8]) -> io::Result<()> {
        self.writes.push((offset_bytes, buf.len() as u64));
        if self.in_data(offset_bytes) {
            return Ok(());
        }
        self.meta.write_at(offset_bytes, buf)
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}
