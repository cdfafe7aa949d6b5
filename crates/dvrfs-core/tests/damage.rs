//! Damage that is not random (issue 9): fields edited "validly" (checksums recomputed),
//! so only range checks and cross-checks can catch them. Each test reproduces a case
//! that used to panic, lose data or mislead, and checks what must happen instead.

mod common;

use common::*;
use dvrfs_core::device::MemDevice;
use dvrfs_core::format::superblock::{AllocPolicy, Superblock};
use dvrfs_core::format::{parse_header, seal_block, META_BLOCK_BYTES};
use dvrfs_core::fs::fsck::fsck;
use dvrfs_core::{Fs, OpenOptions};

const MB: u64 = META_BLOCK_BYTES as u64;
/// Where an inode record starts in its inode-table block.
const RECORD_BASE: usize = 48;
const INODE_BYTES: usize = 256;
const I_INDIRECT: usize = 84;

fn superblock(dev: &MemDevice) -> Superblock {
    let mut b = vec![0u8; META_BLOCK_BYTES];
    dev.peek(0, &mut b);
    Superblock::decode(&b).unwrap()
}

/// A volume with a directory of small files and a fragmented file with indirect runs.
fn populated() -> (MemDevice, u32) {
    let dev = formatted(40 << 20, 64 << 10, AllocPolicy::Zrr, 9);
    let mut fs = open_rw(dev);
    let root = fs.root();
    let d = fs.mkdir(root, b"cam1", 0o755, 0, 0, 1).unwrap();
    for i in 0..10 {
        let f = fs
            .create(d, format!("seg{i:03}.ts").as_bytes(), 0o644, 0, 0, 2)
            .unwrap();
        fs.write(f, 0, &pattern(i, 5000), 3).unwrap();
    }
    let big = fs.create(root, b"big.ts", 0o644, 0, 0, 3).unwrap();
    fs.write(big, 0, &pattern(99, 30 * (64 << 10) + 123), 4)
        .unwrap();
    assert!(
        fs.stat(big).unwrap().runs > 7,
        "the big file needs indirect runs"
    );
    (fs.close().unwrap(), big)
}

/// Edits metadata block `n` in both copies (primary and backup region) and reseals
/// them: damage no checksum can see.
fn edit_block(dev: &mut MemDevice, sb: &Superblock, n: u64, edit: impl Fn(&mut [u8])) {
    for off in [n * MB, sb.backup_offset(n)] {
        let mut b = vec![0u8; META_BLOCK_BYTES];
        dev.peek(off, &mut b);
        let h = parse_header(&b).unwrap();
        edit(&mut b);
        seal_block(&mut b, &h);
        dev.poke(off, &b);
    }
}

/// Sets field `at` (u32) of inode `ino`'s record.
fn edit_inode_u32(dev: &mut MemDevice, ino: u32, at: usize, v: u32) {
    let sb = superblock(dev);
    let n = sb.inode_table_start + ino as u64 / 15;
    let base = RECORD_BASE + INODE_BYTES * (ino as usize % 15) + at;
    edit_block(dev, &sb, n, |b| {
        b[base..base + 4].copy_from_slice(&v.to_le_bytes())
    });
}

/// Case 1: an indirect-extent pointer below the dynamic area or 0xFFFFFFFF. No panic;
/// the open says which file is damaged, fsck reports it, `--repair` fixes the volume
/// in one pass and keeps every other file.
#[test]
fn an_indirect_pointer_out_of_range_is_reported_and_repaired_without_a_panic() {
    for bad in [0xFFFF_FFFFu32, 3] {
        let (mut dev, big) = populated();
        edit_inode_u32(&mut dev, big, I_INDIRECT, bad);
        // Opening does not panic; a read-only open either refuses with a message
        // or serves the intact files.
        if let Ok(mut fs) = Fs::open(dev.clone(), OpenOptions::read_only()) {
            let root = fs.root();
            let d = fs.lookup(root, b"cam1").unwrap();
            let f = fs.lookup(d, b"seg003.ts").unwrap();
            let mut buf = vec![0u8; 5000];
            assert_eq!(fs.read(f, 0, &mut buf).unwrap(), 5000);
            assert_eq!(buf, pattern(3, 5000));
        }
        let (report, _) = fsck(dev.clone(), false, &mut |_, _| {}).unwrap();
        assert!(
            report.exit_code() != 0,
            "pointer {bad:#x}: fsck found nothing"
        );
        assert!(
            report
                .errors
                .iter()
                .any(|e| e.contains(&format!("inode {big}"))),
            "pointer {bad:#x}: {:?}",
            report.errors
        );
        let (r, fixed) = fsck(dev.clone(), true, &mut |_, _| {}).unwrap();
        let fixed =
            fixed.unwrap_or_else(|| panic!("pointer {bad:#x}: repair gave up: {:?}", r.errors));
        let (again, _) = fsck(fixed.clone(), false, &mut |_, _| {}).unwrap();
        assert_eq!(
            again.exit_code(),
            0,
            "pointer {bad:#x}: a second fsck found {:?}",
            again.errors
        );
        let mut fs = Fs::open(fixed, OpenOptions::read_only()).unwrap();
        let root = fs.root();
        let d = fs.lookup(root, b"cam1").unwrap();
        let f = fs.lookup(d, b"seg009.ts").unwrap();
        let mut buf = vec![0u8; 5000];
        assert_eq!(fs.read(f, 0, &mut buf).unwrap(), 5000);
        assert_eq!(buf, pattern(9, 5000));
    }
}

/// Case 6: the primary and the end-of-device superblocks zeroed, the backup region's
/// copy intact. The volume opens from that copy (it used to be "not a dvrfs"), every
/// file reads back, and `--repair` restores the other copies in one pass.
#[test]
fn the_backup_region_superblock_serves_when_the_other_two_are_gone() {
    let (mut dev, big) = populated();
    let sb = superblock(&dev);
    let want = {
        let mut fs = Fs::open(dev.clone(), OpenOptions::read_only()).unwrap();
        snapshot(&mut fs)
    };
    dev.poke(0, &[0u8; META_BLOCK_BYTES]);
    dev.poke(sb.last_copy_offset(), &[0u8; META_BLOCK_BYTES]);
    let mut fs = Fs::open(dev.clone(), OpenOptions::read_only()).unwrap();
    assert_eq!(fs.load_report().superblock_from, "backup-region copy");
    assert_eq!(snapshot(&mut fs), want);
    assert!(fs.stat(big).is_ok());
    drop(fs);
    let (r, fixed) = fsck(dev.clone(), true, &mut |_, _| {}).unwrap();
    assert_eq!(r.exit_code(), 1, "{:?}", r.errors);
    let fixed = fixed.unwrap();
    let (again, _) = fsck(fixed.clone(), false, &mut |_, _| {}).unwrap();
    assert_eq!(again.exit_code(), 0, "{:?}", again.errors);
    let fs = Fs::open(fixed, OpenOptions::read_only()).unwrap();
    assert_eq!(fs.load_report().superblock_from, "primary");
    assert_eq!(fs.load_report().superblock_note, None);
}

/// Case 3: a primary superblock with a valid checksum but a wrong `data_blocks`
/// loses to the two intact copies; `--repair` rewrites it from them and loses no
/// file (it used to overwrite the good copies, free the data of files past the wrong
/// end and shrink the volume).
#[test]
fn a_wrong_primary_superblock_is_outvoted_by_the_two_intact_copies() {
    let (mut dev, _) = populated();
    let sb = superblock(&dev);
    let want = {
        let mut fs = Fs::open(dev.clone(), OpenOptions::read_only()).unwrap();
        snapshot(&mut fs)
    };
    let mut bad = sb.clone();
    bad.data_blocks /= 4;
    let mut b = vec![0u8; META_BLOCK_BYTES];
    dev.peek(0, &mut b);
    let seq = parse_header(&b).unwrap().seq;
    dev.poke(0, &bad.encode(seq)[..]);
    assert_eq!(
        superblock(&dev).data_blocks,
        bad.data_blocks,
        "the edit holds a valid checksum"
    );
    let mut fs = Fs::open(dev.clone(), OpenOptions::read_only()).unwrap();
    assert_ne!(fs.load_report().superblock_from, "primary");
    let note = fs.load_report().superblock_note.clone().unwrap();
    assert!(note.contains("primary"), "{note}");
    assert_eq!(fs.superblock().data_blocks, sb.data_blocks);
    assert_eq!(snapshot(&mut fs), want);
    drop(fs);
    let (r, fixed) = fsck(dev.clone(), true, &mut |_, _| {}).unwrap();
    assert_eq!(r.exit_code(), 1, "{:?}", r.errors);
    let fixed = fixed.unwrap();
    assert_eq!(superblock(&fixed).data_blocks, sb.data_blocks);
    let (again, _) = fsck(fixed.clone(), false, &mut |_, _| {}).unwrap();
    assert_eq!(again.exit_code(), 0, "{:?}", again.errors);
    let mut fs = Fs::open(fixed, OpenOptions::read_only()).unwrap();
    assert_eq!(snapshot(&mut fs), want);
}
