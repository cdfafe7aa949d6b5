//! Opening a large volume reads the metadata in use, not the whole inode table (issue
//! 9, scale): the superblock's `inode_blocks_used` mark bounds what the loader reads.
//! Asserted as bytes read from the device (deterministic), not as time; the timings
//! are measured by `scripts/scale.sh` and reported in docs/commands.md.

mod common;

use common::*;
use dvrfs_core::device::{Device, MemDevice};
use dvrfs_core::format::inode::INODES_PER_BLOCK;
use dvrfs_core::format::superblock::{AllocPolicy, Superblock};
use dvrfs_core::format::META_BLOCK_BYTES;
use dvrfs_core::fuzzing::{listing_of, stat_of};
use dvrfs_core::tools::fsck::fsck;
use dvrfs_core::volume::INODE_MARK_MARGIN;
use dvrfs_core::{Fs, OpenOptions};
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};

/// A device that counts the bytes read from it.
struct Counting {
    dev: MemDevice,
    read: AtomicU64,
}

impl Device for Counting {
    fn size_bytes(&self) -> u64 {
        self.dev.size_bytes()
    }
    fn sector_bytes(&self) -> u32 {
        self.dev.sector_bytes()
    }
    fn read_at(&self, offset_bytes: u64, buf: &mut [u8]) -> io::Result<()> {
        self.read.fetch_add(buf.len() as u64, Ordering::Relaxed);
        self.dev.read_at(offset_bytes, buf)
    }
    fn write_at(&mut self, offset_bytes: u64, buf: &[u8]) -> io::Result<()> {
        self.dev.write_at(offset_bytes, buf)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.dev.flush()
    }
}

/// A copy of `dev` that counts what is read from it.
fn counting(dev: &MemDevice) -> Counting {
    Counting {
        dev: dev.clone(),
        read: AtomicU64::new(0),
    }
}

/// Bytes a read-only open of `dev` reads.
fn open_reads(dev: &MemDevice) -> u64 {
    let c = counting(dev);
    let fs = Fs::open(c, OpenOptions::read_only()).expect("open");
    let dev = fs.crash();
    dev.read.load(Ordering::Relaxed)
}

fn superblock(dev: &MemDevice) -> Superblock {
    let mut b = vec![0u8; META_BLOCK_BYTES];
    dev.peek(0, &mut b);
    Superblock::decode(&b).unwrap()
}

/// Rewrites all three superblock copies with `edit` applied.
fn edit_superblock(dev: &mut MemDevice, edit: impl Fn(&mut Superblock)) {
    let mut sb = superblock(dev);
    edit(&mut sb);
    let img = sb.encode(sb.last_txn);
    for off in [0, sb.backup_offset(0), sb.last_copy_offset()] {
        dev.poke(off, &img[..]);
    }
}

/// A 256 GiB volume (65,536 inodes, 4,370 inode-table blocks).
fn big_volume() -> MemDevice {
    formatted(256 << 30, 4 << 20, AllocPolicy::Zrr, 3)
}

#[test]
fn an_open_reads_the_inode_table_only_as_far_as_it_is_used() {
    let dev = big_volume();
    let sb = superblock(&dev);
    assert_eq!(sb.inode_blocks_used, 1, "mkfs: the root's block");
    let table = sb.inode_table_blocks * META_BLOCK_BYTES as u64;
    let empty = open_reads(&dev);
    assert!(
        empty < table / 4,
        "an empty volume's open read {empty} bytes; its inode table is {table}"
    );

    // 6,000 files: the mark follows the inodes allocated, the open reads those
    // blocks (and the margin), and every file is there.
    let mut fs = open_rw(dev);
    let root = fs.root();
    let d = fs.mkdir(root, b"cam", 0o755, 0, 0, 1).unwrap();
    for i in 0..6000 {
        fs.create(d, format!("{i:05}.ts").as_bytes(), 0o644, 0, 0, 2)
            .unwrap();
    }
    let dev = fs.close().unwrap();
    let sb = superblock(&dev);
    let last = 6001 / INODES_PER_BLOCK as u64;
    assert_eq!(sb.inode_blocks_used, last + 1);
    let used = open_reads(&dev);
    let read_table = (sb.inode_blocks_used + INODE_MARK_MARGIN) * META_BLOCK_BYTES as u64;
    assert!(
        used - empty <= read_table,
        "6,000 files: {used} bytes read, {empty} when empty"
    );
    let fs = Fs::open(dev.clone(), OpenOptions::read_only()).unwrap();
    let d = fs.lookup(fs.root(), b"cam").unwrap();
    assert_eq!(fs.readdir(d).unwrap().len(), 6000);
    assert!(fs.lookup(d, b"05999.ts").is_ok());
    drop(fs);
    assert_fsck_clean(&dev);
}

/// A volume made before the mark existed (0 in the superblock) is read whole, and
/// its first writable open sets the mark.
#[test]
fn a_volume_without_the_mark_is_read_whole_until_a_writable_open_sets_it() {
    let mut fs = open_rw(big_volume());
    let root = fs.root();
    for i in 0..40 {
        fs.create(root, format!("f{i}").as_bytes(), 0o644, 0, 0, 2)
            .unwrap();
    }
    let mut dev = fs.close().unwrap();
    edit_superblock(&mut dev, |sb| sb.inode_blocks_used = 0);
    let sb = superblock(&dev);
    let whole = open_reads(&dev);
    assert!(whole > sb.inode_table_blocks * META_BLOCK_BYTES as u64);
    assert_fsck_clean(&dev);
    let fs = open_rw(dev);
    let dev = fs.close().unwrap();
    assert_eq!(
        superblock(&dev).inode_blocks_used,
        41 / INODES_PER_BLOCK as u64 + 1
    );
    assert!(open_reads(&dev) < whole / 4);
    assert_fsck_clean(&dev);
}

/// A mark below a live inode (inside the margin) is reported, not trusted silently:
/// a writable open waits for the repair, which raises it in one pass.
#[test]
fn a_stale_mark_is_found_and_raised_by_one_repair() {
    let mut fs = open_rw(big_volume());
    let root = fs.root();
    for i in 0..100 {
        fs.create(root, format!("f{i}").as_bytes(), 0o644, 0, 0, 2)
            .unwrap();
    }
    let mut dev = fs.close().unwrap();
    edit_superblock(&mut dev, |sb| sb.inode_blocks_used = 1);
    let fs = Fs::open(dev.clone(), OpenOptions::read_only()).unwrap();
    assert_eq!(
        fs.readdir(fs.root()).unwrap().len(),
        100,
        "the margin still finds them"
    );
    drop(fs);
    assert!(Fs::open(dev.clone(), OpenOptions::writable()).is_err());
    let (report, _) = fsck(dev.clone(), false, &mut |_, _| {}).unwrap();
    assert!(
        report.errors.iter().any(|e| e.contains("inode-table mark")),
        "{:?}",
        report.errors
    );
    let (r, fixed) = fsck(dev, true, &mut |_, _| {}).unwrap();
    let fixed = fixed.unwrap_or_else(|| panic!("repair gave up: {:?}", r.errors));
    assert_fsck_clean(&fixed);
    assert_eq!(
        superblock(&fixed).inode_blocks_used,
        101 / INODES_PER_BLOCK as u64 + 1
    );
}

/// Bytes a path-only open of `dev` for `paths` reads, and the open itself.
fn paths_open(dev: &MemDevice, paths: &[&str]) -> (Fs<Counting>, u64) {
    let c = counting(dev);
    let paths: Vec<String> = paths.iter().map(|p| p.to_string()).collect();
    let fs = Fs::open(c, OpenOptions::paths_only(&paths)).expect("open");
    let n = fs.device().read.load(Ordering::Relaxed);
    (fs, n)
}

/// `stat` opens with only the metadata its paths need: the answers are the full
/// open's, for files, directories, `..`, missing names, a file used as a directory
/// and a symlink, and the bytes read do not grow with the files elsewhere.
/// Three directories; `cam1` holds 2,000 files (one with data, named by a symlink),
/// `cam0` and `cam2` hold `others` each.
fn cameras(others: usize) -> MemDevice {
    let mut fs = open_rw(big_volume());
    let root = fs.root();
    for d in 0..3 {
        let dir = fs
            .mkdir(root, format!("cam{d}").as_bytes(), 0o755, 0, 0, 1)
            .unwrap();
        for i in 0..if d == 1 { 2000 } else { others } {
            fs.create(dir, format!("{i:05}.ts").as_bytes(), 0o644, 0, 0, 2)
                .unwrap();
        }
    }
    let cam1 = fs.lookup(root, b"cam1").unwrap();
    let f = fs.lookup(cam1, b"01234.ts").unwrap();
    fs.write(f, 0, &pattern(7, 3 << 20), 3).unwrap();
    fs.symlink(root, b"latest", b"/cam1/01234.ts", 0, 0, 4)
        .unwrap();
    fs.close().unwrap()
}

/// `stat` opens with only the metadata its paths need: the answers are the full
/// open's, for files, directories, `..`, missing names, a file used as a directory
/// and a symlink, and the bytes read do not grow with the files elsewhere.
#[test]
fn a_path_only_open_answers_stat_as_the_full_open_does_and_reads_only_the_path() {
    let dev = cameras(2000);
    let paths = [
        "/",
        "/cam1",
        "/cam1/01234.ts",
        "cam2/00000.ts",
        "/cam0/../cam2/01999.ts",
        "/cam1/./01234.ts/",
        "/../cam0",
        "/cam1/nope.ts",
        "/cam1/01234.ts/x",
        "/nope/x",
        "/latest",
        "/latest/x",
    ];
    let full = Fs::open(dev.clone(), OpenOptions::metadata_only()).unwrap();
    for p in paths {
        let (part, _) = paths_open(&dev, &[p]);
        assert_eq!(stat_of(&part, p), stat_of(&full, p), "{p}");
    }
    // All at once, as `stat A B C` opens.
    let (part, _) = paths_open(&dev, &paths);
    for p in paths {
        assert_eq!(stat_of(&part, p), stat_of(&full, p), "{p}");
    }
    drop(full);

    // `ls`'s open (the paths' directories listed, with their entries' inodes):
    // every listing and every long-form line as the full open gives them.
    let dirs = [
        "/",
        "/cam1",
        "/cam0/../cam2",
        "/latest",
        "/nope",
        "/cam1/01234.ts",
    ];
    let full = Fs::open(dev.clone(), OpenOptions::metadata_only()).unwrap();
    for p in dirs {
        let c = counting(&dev);
        let part = Fs::open(c, OpenOptions::listing(&[p.to_string()])).unwrap();
        assert_eq!(listing_of(&part, p), listing_of(&full, p), "{p}");
    }
    let paths: Vec<String> = dirs.iter().map(|p| p.to_string()).collect();
    let c = counting(&dev);
    let part = Fs::open(c, OpenOptions::listing(&paths)).unwrap();
    for p in dirs {
        assert_eq!(listing_of(&part, p), listing_of(&full, p), "{p}");
    }
    drop(full);

    // What it reads: the path's directories and three inode records, the same
    // with 4,000 files elsewhere as without them (a full open reads them all).
    let (_, one) = paths_open(&dev, &["/cam1/01234.ts"]);
    let (_, alone) = paths_open(&cameras(0), &["/cam1/01234.ts"]);
    // (Equal but for one inode-table block: without the other files, cam1's inode
    // shares the root's block.)
    assert!(
        one.abs_diff(alone) <= META_BLOCK_BYTES as u64,
        "path-only bytes read: {one} with other files, {alone} without"
    );
    let all = open_reads(&dev);
    assert!(one < all / 10, "path-only {one} bytes, full open {all}");
    // Listing `/` reads its three directories' records, not their entries.
    let list_root = |dev: &MemDevice| {
        let c = counting(dev);
        let fs = Fs::open(c, OpenOptions::listing(&["/".to_string()])).unwrap();
        fs.device().read.load(Ordering::Relaxed)
    };
    let (with, without) = (list_root(&dev), list_root(&cameras(0)));
    assert!(
        with.abs_diff(without) <= 2 * META_BLOCK_BYTES as u64,
        "ls / read {with} bytes with files below, {without} without"
    );
}

/// Damage on the path is met as the full open meets it: a lost inode-table block
/// (both copies) makes the file it held unreachable in both opens alike.
#[test]
fn a_path_only_open_meets_a_lost_inode_block_as_the_full_open_does() {
    let mut fs = open_rw(big_volume());
    let root = fs.root();
    let d = fs.mkdir(root, b"cam", 0o755, 0, 0, 1).unwrap();
    for i in 0..100 {
        fs.create(d, format!("{i:03}.ts").as_bytes(), 0o644, 0, 0, 2)
            .unwrap();
    }
    let victim = fs.lookup(d, b"050.ts").unwrap();
    let mut dev = fs.close().unwrap();
    let sb = superblock(&dev);
    let n = sb.inode_table_start + victim as u64 / INODES_PER_BLOCK as u64;
    for off in [sb.primary_offset(n), sb.backup_offset(n)] {
        dev.poke(off + 100, &[0xEE; 8]);
    }
    let full = Fs::open(dev.clone(), OpenOptions::metadata_only()).unwrap();
    for p in ["/cam/050.ts", "/cam/000.ts", "/cam/099.ts", "/cam"] {
        let (part, _) = paths_open(&dev, &[p]);
        assert_eq!(stat_of(&part, p), stat_of(&full, p), "{p}");
    }
    assert!(stat_of(&full, "/cam/050.ts").starts_with("error"));
}
