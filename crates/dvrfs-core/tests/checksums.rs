//! Data checksums (issue 9): every granule a file's bytes occupy carries a CRC32C set
//! by the write that put them there and checked by every read and every rewrite. A
//! flipped byte on the medium, a misdirected run or a torn rewrite is an error naming
//! the file's bytes, never data.

mod common;

use common::*;
use dvrfs_core::device::{Device, MemDevice};
use dvrfs_core::format::superblock::AllocPolicy;
use dvrfs_core::layout::MkfsParams;
use dvrfs_core::tools::mkfs;
use dvrfs_core::volume::OpenOptions;
use dvrfs_core::{Error, Fs};

const BS: u64 = 1 << 20;
const G: u64 = 512 << 10;

fn volume() -> MemDevice {
    let dev = formatted(64 << 20, BS, AllocPolicy::Zrr, 3);
    let fs = open_rw(dev);
    assert_eq!(
        fs.superblock().sum_granule_bytes,
        G,
        "checksums are on by default"
    );
    fs.close().unwrap()
}

/// Device offset of byte `offset` of file `ino`.
fn device_offset<D: Device>(fs: &Fs<D>, ino: u32, offset: u64) -> u64 {
    let fb = offset / BS;
    let r = fs
        .runs(ino)
        .unwrap()
        .into_iter()
        .find(|r| (r.file_block as u64) <= fb && fb < r.file_end())
        .expect("mapped");
    fs.superblock()
        .data_offset(r.start + fb - r.file_block as u64)
        + offset % BS
}

/// Flips one byte of file `ino` at `offset`, behind the file system's back.
fn flip(dev: &mut MemDevice, at: u64) {
    let mut b = [0u8; 1];
    dev.peek(at, &mut b);
    b[0] ^= 0x20;
    dev.poke(at, &b);
}

fn read_all<D: Device>(fs: &mut Fs<D>, ino: u32) -> dvrfs_core::Result<Vec<u8>> {
    let size = fs.stat(ino).unwrap().size_bytes as usize;
    let mut buf = vec![0u8; size];
    let n = fs.read(ino, 0, &mut buf)?;
    assert_eq!(n, size);
    Ok(buf)
}

fn expect_checksum_error(
    r: dvrfs_core::Result<impl std::fmt::Debug>,
    ino: u32,
    offset: u64,
    end: u64,
) {
    match r {
        Err(Error::Checksum {
            ino: i,
            offset: o,
            end: e,
        }) => {
            assert_eq!(
                (i, o, e),
                (ino, offset, end),
                "the error names the damaged granule"
            );
        }
        other => panic!("expected a checksum error for bytes {offset}..{end}, got {other:?}"),
    }
}

#[test]
fn a_flipped_byte_fails_the_read_of_its_granule_only() {
    let dev = volume();
    let mut fs = open_rw(dev);
    let root = fs.root();
    let f = fs.create(root, b"rec.ts", 0o644, 0, 0, 1).unwrap();
    let data = pattern(1, (3 * BS + 12_345) as usize);
    fs.write(f, 0, &data, 2).unwrap();
    let at = device_offset(&fs, f, BS + G + 777);
    let mut dev = fs.close().unwrap();
    flip(&mut dev, at);
    let mut fs = Fs::open(dev, OpenOptions::read_only()).unwrap();
    expect_checksum_error(read_all(&mut fs, f), f, BS + G, 2 * BS);
    // A small read inside the granule is checked too (the granule is read whole).
    let mut small = vec![0u8; 10];
    expect_checksum_error(fs.read(f, BS + G + 770, &mut small), f, BS + G, 2 * BS);
    // Everything else reads back as written.
    let mut before = vec![0u8; (BS + G) as usize];
    fs.read(f, 0, &mut before).unwrap();
    assert_eq!(before, data[..(BS + G) as usize]);
    let mut after = vec![0u8; data.len() - 2 * BS as usize];
    fs.read(f, 2 * BS, &mut after).unwrap();
    assert_eq!(after, data[2 * BS as usize..]);
    // The last, partial granule is checked up to the end of the file.
    let mut tail = vec![0u8; 100];
    fs.read(f, data.len() as u64 - 100, &mut tail).unwrap();
    assert_eq!(tail, data[data.len() - 100..]);
}

#[test]
fn appends_of_any_size_keep_every_granule_checked_across_commits_and_reopens() {
    let mut dev = volume();
    let mut expect = vec![];
    let mut ino = 0;
    // Odd-sized appends, some spanning granules and blocks, with reopens between.
    for round in 0..4u64 {
        let mut fs = open_rw(dev);
        if round == 0 {
            let root = fs.root();
            ino = fs.create(root, b"grow.ts", 0o644, 0, 0, 1).unwrap();
        }
        for k in 0..7u64 {
            let piece = pattern(round * 10 + k, (70_001 + 91_337 * k) as usize);
            fs.write(ino, expect.len() as u64, &piece, 2).unwrap();
            expect.extend_from_slice(&piece);
            if k % 3 == 0 {
                fs.sync().unwrap();
            }
        }
        assert_eq!(read_all(&mut fs, ino).unwrap(), expect);
        dev = fs.close().unwrap();
    }
    let fs = Fs::open(dev.clone(), OpenOptions::read_only()).unwrap();
    // Damage anywhere in the file is found: the appended granules carry checksums.
    for &off in &[5u64, G - 1, G + 3, 2 * BS + 17, expect.len() as u64 - 1] {
        let mut d = dev.clone();
        flip(&mut d, device_offset(&fs, ino, off));
        let mut fs2 = Fs::open(d, OpenOptions::read_only()).unwrap();
        let g0 = off / G * G;
        let end = (g0 + G).min(expect.len() as u64);
        expect_checksum_error(read_all(&mut fs2, ino), ino, g0, end);
    }
    assert_fsck_clean(&dev);
}

#[test]
fn a_rewrite_recomputes_the_whole_granule_and_never_blesses_damaged_bytes() {
    let dev = volume();
    let mut fs = open_rw(dev);
    let root = fs.root();
    let f = fs.create(root, b"edit.ts", 0o644, 0, 0, 1).unwrap();
    let mut data = pattern(7, (2 * BS) as usize);
    fs.write(f, 0, &data, 2).unwrap();
    // An unaligned rewrite in the middle of the second granule.
    let patch = pattern(8, 1000);
    fs.write(f, G + 5000, &patch, 3).unwrap();
    data[(G + 5000) as usize..(G + 6000) as usize].copy_from_slice(&patch);
    assert_eq!(read_all(&mut fs, f).unwrap(), data);
    let dev = fs.close().unwrap();
    {
        let mut fs = open_rw(dev.clone());
        assert_eq!(read_all(&mut fs, f).unwrap(), data);
        // Damage elsewhere in the rewritten granule is still caught: its checksum
        // covers the whole granule, not only the patch.
        let at = device_offset(&fs, f, G + 100);
        let mut d = fs.crash();
        flip(&mut d, at);
        let mut fs = open_rw(d);
        expect_checksum_error(read_all(&mut fs, f), f, G, 2 * G);
        // A rewrite of part of the damaged granule fails: it would otherwise store
        // a checksum that vouches for the damaged bytes around it.
        expect_checksum_error(fs.write(f, G + 200, &[1, 2, 3], 4), f, G, 2 * G);
        // Rewriting the whole granule replaces the damage.
        fs.write(f, G, &data[G as usize..(2 * G) as usize], 5)
            .unwrap();
        assert_eq!(read_all(&mut fs, f).unwrap(), data);
        let d = fs.close().unwrap();
        assert_fsck_clean(&d);
    }
}

#[test]
fn a_truncation_inside_a_granule_checksums_what_is_left_and_growth_goes_on() {
    let dev = volume();
    let mut fs = open_rw(dev);
    let root = fs.root();
    let f = fs.create(root, b"cut.ts", 0o644, 0, 0, 1).unwrap();
    let mut data = pattern(3, (BS + G + 4096) as usize);
    fs.write(f, 0, &data, 2).unwrap();
    let cut = BS + 1234;
    fs.truncate(f, cut, 3).unwrap();
    data.truncate(cut as usize);
    assert_eq!(read_all(&mut fs, f).unwrap(), data);
    // Growing again: zeros past the old end, then new bytes.
    fs.truncate(f, cut + 5000, 4).unwrap();
    data.resize((cut + 5000) as usize, 0);
    let more = pattern(4, 3 * G as usize);
    fs.write(f, data.len() as u64, &more, 5).unwrap();
    data.extend_from_slice(&more);
    let dev = fs.close().unwrap();
    let mut fs = Fs::open(dev.clone(), OpenOptions::read_only()).unwrap();
    assert_eq!(read_all(&mut fs, f).unwrap(), data);
    assert_fsck_clean(&dev);
    // The cut granule was checksummed again on its remaining bytes: damage there is
    // found.
    let mut d = dev.clone();
    flip(&mut d, device_offset(&fs, f, BS + 100));
    let mut fs = Fs::open(d, OpenOptions::read_only()).unwrap();
    expect_checksum_error(read_all(&mut fs, f), f, BS, BS + G);
}

#[test]
fn a_run_pointing_at_another_files_block_reads_as_an_error_not_as_its_bytes() {
    let dev = volume();
    let mut fs = open_rw(dev);
    let root = fs.root();
    let a = fs.create(root, b"a.ts", 0o644, 0, 0, 1).unwrap();
    let b = fs.create(root, b"b.ts", 0o644, 0, 0, 1).unwrap();
    fs.write(a, 0, &pattern(1, BS as usize), 2).unwrap();
    fs.write(b, 0, &pattern(2, BS as usize), 2).unwrap();
    // Swap the two files' data behind the file system (what a misdirected run or a
    // misplaced write would do): every granule of both now fails its check.
    let (pa, pb) = (device_offset(&fs, a, 0), device_offset(&fs, b, 0));
    let mut dev = fs.close().unwrap();
    let (mut x, mut y) = (vec![0u8; BS as usize], vec![0u8; BS as usize]);
    dev.peek(pa, &mut x);
    dev.peek(pb, &mut y);
    dev.poke(pa, &y);
    dev.poke(pb, &x);
    let mut fs = Fs::open(dev, OpenOptions::read_only()).unwrap();
    expect_checksum_error(read_all(&mut fs, a), a, 0, G);
    expect_checksum_error(read_all(&mut fs, b), b, 0, G);
}

#[test]
fn a_volume_without_checksums_reads_and_writes_as_before() {
    let mut dev = MemDevice::new(64 << 20);
    let mut p = MkfsParams::new(64 << 20, [1; 16], 1);
    p.data_block_bytes = BS;
    p.sum_granule_bytes = None;
    mkfs(&mut dev, &p, &mut |_, _| {}).unwrap();
    let mut fs = open_rw(dev);
    assert_eq!(fs.superblock().sum_blocks, 0);
    let root = fs.root();
    let f = fs.create(root, b"plain.ts", 0o644, 0, 0, 1).unwrap();
    let data = pattern(5, (BS + 999) as usize);
    fs.write(f, 0, &data, 2).unwrap();
    fs.write(f, 100, &[9; 50], 3).unwrap();
    let at = device_offset(&fs, f, 10);
    let mut dev = fs.close().unwrap();
    flip(&mut dev, at);
    let mut fs = Fs::open(dev.clone(), OpenOptions::read_only()).unwrap();
    let got = read_all(&mut fs, f).unwrap();
    assert_ne!(
        got, data,
        "nothing checks the bytes of a volume without checksums"
    );
    assert_fsck_clean(&dev);
}

/// Points inline run `k` of inode `ino` at data block `start`, in both metadata copies,
/// resealed: damage only the data checksums can see.
fn redirect_run(dev: &mut MemDevice, ino: u32, k: usize, start: u64) {
    use dvrfs_core::format::superblock::Superblock;
    use dvrfs_core::format::{parse_header, seal_block, META_BLOCK_BYTES};
    let mut b = vec![0u8; META_BLOCK_BYTES];
    dev.peek(0, &mut b);
    let sb = Superblock::decode(&b).unwrap();
    let n = sb.inode_table_start + ino as u64 / 15;
    // Record base 48 in the block, 256 bytes per record, inline runs at 152, `start`
    // 8 bytes into a 16-byte run (FORMAT.md sections 7 and 8).
    let at = 48 + 256 * (ino as usize % 15) + 152 + 16 * k + 8;
    for off in [n * META_BLOCK_BYTES as u64, sb.backup_offset(n)] {
        dev.peek(off, &mut b);
        let h = parse_header(&b).unwrap();
        b[at..at + 8].copy_from_slice(&start.to_le_bytes());
        seal_block(&mut b, &h);
        dev.poke(off, &b);
    }
}

#[test]
fn a_run_redirected_to_another_block_fails_by_the_place_in_its_checksum() {
    let dev = volume();
    let mut fs = open_rw(dev);
    let root = fs.root();
    let a = fs.create(root, b"a.ts", 0o644, 0, 0, 1).unwrap();
    let b = fs.create(root, b"b.ts", 0o644, 0, 0, 1).unwrap();
    fs.write(a, 0, &pattern(1, (2 * BS) as usize), 2).unwrap();
    fs.write(b, 0, &pattern(2, (2 * BS) as usize), 2).unwrap();
    let (ra, rb) = (fs.runs(a).unwrap(), fs.runs(b).unwrap());
    let mut dev = fs.close().unwrap();
    // a's first block now names b's first block: intact bytes, checksummed as b's.
    let mut other = dev.clone();
    redirect_run(&mut other, a, 0, rb[0].start);
    let mut fs = Fs::open(other, OpenOptions::read_only()).unwrap();
    expect_checksum_error(read_all(&mut fs, a), a, 0, G);
    // a's first block now names its own second block: the right file, wrong offset.
    assert!(ra.len() >= 2, "one run per block (zrr)");
    redirect_run(&mut dev, a, 0, ra[1].start);
    let mut fs = Fs::open(dev, OpenOptions::read_only()).unwrap();
    expect_checksum_error(read_all(&mut fs, a), a, 0, G);
    let mut second = vec![0u8; BS as usize];
    fs.read(a, BS, &mut second).unwrap();
    assert_eq!(second, pattern(1, (2 * BS) as usize)[BS as usize..]);
}

#[test]
fn a_run_redirected_to_a_block_no_write_filled_is_an_error_not_its_bytes() {
    let dev = volume();
    let mut fs = open_rw(dev);
    let root = fs.root();
    let a = fs.create(root, b"a.ts", 0o644, 0, 0, 1).unwrap();
    fs.write(a, 0, &pattern(1, BS as usize), 2).unwrap();
    let used: Vec<u64> = fs.runs(a).unwrap().iter().map(|r| r.start).collect();
    let mut dev = fs.close().unwrap();
    // A data block never written since mkfs: its checksums were never set.
    let free = (0..40).find(|b| !used.contains(b)).unwrap();
    redirect_run(&mut dev, a, 0, free);
    let mut fs = Fs::open(dev, OpenOptions::read_only()).unwrap();
    expect_checksum_error(read_all(&mut fs, a), a, 0, G);
}

#[test]
fn a_lost_checksum_block_leaves_data_readable_and_repair_checksums_it_again() {
    use dvrfs_core::format::META_BLOCK_BYTES;
    let dev = volume();
    let mut fs = open_rw(dev);
    let root = fs.root();
    let f = fs.create(root, b"rec.ts", 0o644, 0, 0, 1).unwrap();
    let data = pattern(4, (2 * BS + 5000) as usize);
    fs.write(f, 0, &data, 2).unwrap();
    let sb = fs.superblock().clone();
    let at = device_offset(&fs, f, 10);
    let mut dev = fs.close().unwrap();
    // Every checksum block, both copies, destroyed.
    for k in 0..sb.sum_blocks {
        let n = sb.sum_start + k;
        let junk = vec![0xA5u8; META_BLOCK_BYTES];
        dev.poke(n * META_BLOCK_BYTES as u64, &junk);
        dev.poke(sb.backup_offset(n), &junk);
    }
    // Read-only: served unchecked; writable opens wait for the repair.
    let mut fs = Fs::open(dev.clone(), OpenOptions::read_only()).unwrap();
    assert_eq!(read_all(&mut fs, f).unwrap(), data);
    assert!(Fs::open(dev.clone(), OpenOptions::writable()).is_err());
    let (r, fixed) = dvrfs_core::tools::fsck::fsck(dev, true, &mut |_, _| {}).unwrap();
    assert!(
        r.errors.iter().any(|e| e.contains("data checksum block")),
        "{:?}",
        r.errors
    );
    let dev = fixed.expect("repaired");
    assert_fsck_clean(&dev);
    let mut fs = Fs::open(dev.clone(), OpenOptions::read_only()).unwrap();
    assert_eq!(read_all(&mut fs, f).unwrap(), data);
    // Checked again: damage is found.
    let mut d = dev;
    flip(&mut d, at);
    let mut fs = Fs::open(d, OpenOptions::read_only()).unwrap();
    expect_checksum_error(read_all(&mut fs, f), f, 0, G);
}
