//! Size limits and metadata cost: a 1 TiB ZRR file (every block its own run) fits one
//! level of indirect run blocks; deleting a file costs metadata in proportion to its
//! runs, not its size.

mod common;

use common::*;
use dvrfs_core::device::{Device, MemDevice};
use dvrfs_core::format::superblock::AllocPolicy;
use dvrfs_core::layout::MkfsParams;
use dvrfs_core::tools::mkfs;
use dvrfs_core::{Fs, IoBuf, OpenOptions};
use std::io;

/// Keeps the metadata regions and throws file data away (reads of data read zeros),
/// so a terabyte file can be tested in memory.
struct MetadataOnly {
    inner: MemDevice,
    data: std::ops::Range<u64>,
}

impl Device for MetadataOnly {
    fn size_bytes(&self) -> u64 {
        self.inner.size_bytes()
    }
    fn sector_bytes(&self) -> u32 {
        512
    }
    fn read_at(&self, offset_bytes: u64, buf: &mut [u8]) -> io::Result<()> {
        if self.data.contains(&offset_bytes) {
            buf.fill(0);
            return Ok(());
        }
        self.inner.read_at(offset_bytes, buf)
    }
    fn write_at(&mut self, offset_bytes: u64, buf: &[u8]) -> io::Result<()> {
        if self.data.contains(&offset_bytes) {
            return Ok(());
        }
        self.inner.write_at(offset_bytes, buf)
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[test]
fn one_tib_zrr_file_fits_one_level_of_indirection() {
    let block: u64 = 4 << 20;
    let device_bytes = (1u64 << 40) + (8u64 << 30);
    let mut dev = MemDevice::new(device_bytes);
    let mut p = MkfsParams::new(device_bytes, [7; 16], 7);
    p.data_block_bytes = block;
    p.alloc = AllocPolicy::Zrr;
    // The writes carry no bytes (virtual buffers, as the simulator's): a volume
    // without data checksums, as data-less volumes are made.
    p.sum_granule_bytes = None;
    let sb = mkfs(&mut dev, &p, &mut |_, _| {}).unwrap();
    let data = sb.data_start_bytes..sb.data_start_bytes + sb.data_blocks * block;
    let mut fs = Fs::open(
        MetadataOnly {
            inner: dev,
            data: data.clone(),
        },
        OpenOptions::writable(),
    )
    .unwrap();
    let root = fs.root();
    let ino = fs.create(root, b"one-tib.ts", 0o644, 0, 0, 0).unwrap();
    let blocks = (1u64 << 40) / block;
    for k in 0..blocks {
        fs.write_buf(ino, k * block, IoBuf::Virtual(block as usize), 0)
            .unwrap();
    }
    let st = fs.stat(ino).unwrap();
    assert_eq!(st.blocks, blocks);
    assert_eq!(
        st.runs as u64, blocks,
        "ZRR puts every block of a file in the next zone"
    );
    let dev = fs.close().unwrap();
    let fs = Fs::open(dev, OpenOptions::read_only()).unwrap();
    assert_eq!(fs.stat(ino).unwrap().size_bytes, 1 << 40);
    assert_eq!(fs.runs(ino).unwrap().len() as u64, blocks);
    let (report, _) = dvrfs_core::tools::fsck::fsck(fs.crash(), false, &mut |_, _| {}).unwrap();
    assert!(
        report.clean(),
        "{:?}",
        &report.errors[..report.errors.len().min(8)]
    );
}

#[test]
fn deleting_a_file_costs_metadata_proportional_to_runs() {
    let block = 64 << 10;
    let dev = formatted(512 << 20, block, AllocPolicy::Contig, 3);
    let mut fs = open_rw(dev);
    let root = fs.root();
    let ino = fs.create(root, b"big", 0o644, 0, 0, 0).unwrap();
    // 6000 blocks (375 MiB) written in one go: contiguous, a handful of runs.
    let chunk = pattern(1, 64 * block as usize);
    for k in 0..6000 / 64 {
        fs.write(ino, k as u64 * chunk.len() as u64, &chunk, 0)
            .unwrap();
    }
    fs.close_file(ino, dvrfs_core::OpenMode::Write).unwrap();
    let runs = fs.stat(ino).unwrap().runs;
    assert!(runs <= 2, "contig keeps the file in {runs} runs");
    fs.sync().unwrap();
    fs.unlink(root, b"big", 1).unwrap();
    // inode block + directory block + superblock + the bitmap blocks the runs touch.
    let dirty = fs.dirty_blocks();
    assert!(
        dirty <= 3 + 2 * runs,
        "deleting a {runs}-run file of 6000 blocks dirtied {dirty} blocks"
    );
    let dev = fs.close().unwrap();
    assert_fsck_clean(&dev);
}
