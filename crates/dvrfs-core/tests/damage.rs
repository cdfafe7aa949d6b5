//! Damage that is not random (issue 9): fields edited "validly" (checksums recomputed),
//! so only range checks and cross-checks can catch them. Each test reproduces a case
//! that used to panic, lose data or mislead, and checks what must happen instead.

mod common;

use common::damage::{edit_block, superblock};
use common::*;
use dvrfs_core::device::{Device, MemDevice};
use dvrfs_core::format::inode::MAP_SUM_OFFSET;
use dvrfs_core::format::superblock::{AllocPolicy, Superblock};
use dvrfs_core::format::{parse_header, META_BLOCK_BYTES};
use dvrfs_core::fuzzing::{listing_of, stat_of};
use dvrfs_core::tools::fsck::{fsck, FsckReport};
use dvrfs_core::{Fs, OpenOptions};
use std::cell::RefCell;
use std::rc::Rc;

const MB: u64 = META_BLOCK_BYTES as u64;
/// Where an inode record starts in its inode-table block.
const RECORD_BASE: usize = 48;
const INODE_BYTES: usize = 256;
const I_INDIRECT: usize = 84;
const I_INLINE: usize = I_INDIRECT + 4 * 17;
const I_RUN_COUNT: usize = 80;

/// `fsck --repair`, which must finish in one pass: it returns a repaired volume on
/// which a second fsck finds nothing. Gives the repair's report, the second fsck's
/// and the repaired volume; `what` names the case in a failure.
fn repair_once<D: Device + Clone>(dev: D, what: &str) -> (FsckReport, FsckReport, D) {
    let (r, fixed) = fsck(dev, true, &mut |_, _| {}).unwrap_or_else(|e| panic!("{what}: {e}"));
    let fixed = fixed.unwrap_or_else(|| panic!("{what}: repair gave up: {:?}", r.errors));
    let (again, _) = fsck(fixed.clone(), false, &mut |_, _| {}).unwrap();
    assert_eq!(
        again.exit_code(),
        0,
        "{what}: first repair {:?}; second fsck {:?}",
        r.errors,
        again.errors
    );
    (r, again, fixed)
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
    // A second directory whose files' inodes lie in the second inode-table block.
    let d2 = fs.mkdir(root, b"cam2", 0o755, 0, 0, 5).unwrap();
    for i in 0..10 {
        let f = fs
            .create(d2, format!("clip{i:02}.ts").as_bytes(), 0o644, 0, 0, 6)
            .unwrap();
        fs.write(f, 0, &pattern(100 + i, 3000), 7).unwrap();
    }
    (fs.close().unwrap(), big)
}

/// Makes `dev` look like a volume made before map checksums (`FEATURE_MAP_SUMS`).
fn clear_features(dev: &mut MemDevice) {
    let mut sb = superblock(dev);
    // The map-checksum bit; the event area (FEATURE_EVENTS) is a layout of its own,
    // unrelated to what these tests look at.
    sb.features &= !dvrfs_core::format::superblock::FEATURE_MAP_SUMS;
    let image = sb.encode(0);
    for off in [0, sb.backup_offset(0), sb.device_bytes - MB] {
        dev.poke(off, &image[..]);
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
        let (_, _, fixed) = repair_once(dev.clone(), &format!("pointer {bad:#x}"));
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
    let (r, _, fixed) = repair_once(dev.clone(), "");
    assert_eq!(r.exit_code(), 1, "{:?}", r.errors);
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
    bad.zone_blocks = bad.data_blocks.div_ceil(bad.zone_count as u64);
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
    let (r, _, fixed) = repair_once(dev.clone(), "");
    assert_eq!(r.exit_code(), 1, "{:?}", r.errors);
    assert_eq!(superblock(&fixed).data_blocks, sb.data_blocks);
    let mut fs = Fs::open(fixed, OpenOptions::read_only()).unwrap();
    assert_eq!(snapshot(&mut fs), want);
}

/// Case 4: the root directory block's entry count set to 0 (checksums valid). One
/// `--repair` must leave a volume that a second fsck finds clean.
#[test]
fn a_root_directory_block_with_no_entries_is_repaired_in_one_pass() {
    let (mut dev, _) = populated();
    let sb = superblock(&dev);
    // The root's first directory block: the first run of inode root_ino.
    let root_block = {
        let fs = Fs::open(dev.clone(), OpenOptions::read_only()).unwrap();
        let runs = fs.runs(sb.root_ino).unwrap();
        runs[0].start
    };
    edit_block(&mut dev, &sb, root_block, |b| {
        b[48..50].copy_from_slice(&0u16.to_le_bytes());
    });
    let (r, _, _) = repair_once(dev.clone(), "");
    assert!(r.exit_code() != 0);
}

/// Zeroes metadata block `n` in both copies: lost.
fn lose_block(dev: &mut MemDevice, sb: &Superblock, n: u64) {
    dev.poke(n * MB, &[0u8; META_BLOCK_BYTES]);
    dev.poke(sb.backup_offset(n), &[0u8; META_BLOCK_BYTES]);
}

fn read_file(fs: &mut Fs<MemDevice>, path: &str, len: usize) -> Vec<u8> {
    let ino = fs.resolve(path).unwrap_or_else(|e| panic!("{path}: {e}"));
    read_ino(fs, ino, len)
}

fn read_ino(fs: &mut Fs<MemDevice>, ino: u32, len: usize) -> Vec<u8> {
    let mut buf = vec![0u8; len + 1];
    let n = fs.read(ino, 0, &mut buf).unwrap();
    buf.truncate(n);
    buf
}

/// Case 5: losing both copies of one data-bitmap block, inode-table block or
/// directory block no longer makes the volume unreadable. A read-only open serves
/// what is intact, a writable open is refused until `fsck --repair`, and one repair
/// gives a clean volume that keeps every file it could name (a lost directory block's
/// children in /lost+found).
#[test]
fn a_lost_bitmap_inode_table_or_directory_block_leaves_the_rest_readable() {
    let (base, _) = populated();
    let sb = superblock(&base);
    let (cam1, seg_ino, clip_ino) = {
        let fs = Fs::open(base.clone(), OpenOptions::read_only()).unwrap();
        (
            fs.resolve("/cam1").unwrap(),
            fs.resolve("/cam1/seg004.ts").unwrap(),
            fs.resolve("/cam2/clip07.ts").unwrap(),
        )
    };
    assert!(clip_ino >= 15, "clip07 in the second inode-table block");
    let dir_block = {
        let fs = Fs::open(base.clone(), OpenOptions::read_only()).unwrap();
        fs.runs(cam1).unwrap()[0].start
    };
    let cases = [
        ("data bitmap", sb.data_bitmap_start),
        ("inode table", sb.inode_table_start + clip_ino as u64 / 15),
        ("inode table with the root", sb.inode_table_start),
        ("directory", dir_block),
    ];
    let big_len = 30 * (64 << 10) + 123;
    for (what, n) in cases {
        let root_lost = what == "inode table with the root";
        let mut dev = base.clone();
        lose_block(&mut dev, &sb, n);
        let mut fs = Fs::open(dev.clone(), OpenOptions::read_only())
            .unwrap_or_else(|e| panic!("{what}: read-only open refused: {e}"));
        assert_eq!(fs.load_report().lost_blocks.len(), 1, "{what}");
        if root_lost {
            // The root, cam2 and big went with the block; cam2's files did not.
            assert_eq!(read_ino(&mut fs, clip_ino, 3000), pattern(107, 3000));
        } else {
            assert_eq!(
                read_file(&mut fs, "/big.ts", big_len),
                pattern(99, big_len),
                "{what}"
            );
        }
        drop(fs);
        match Fs::open(dev.clone(), OpenOptions::writable()) {
            Err(dvrfs_core::Error::Corrupt(m)) => {
                assert!(m.contains("fsck --repair"), "{what}: {m}")
            }
            Err(e) => panic!("{what}: {e}"),
            Ok(_) => panic!("{what}: a writable open of a damaged volume was allowed"),
        }
        let (r, _, fixed) = repair_once(dev.clone(), what);
        assert_eq!(r.exit_code(), 1, "{what}: {:?}", r.errors);
        let mut fs = Fs::open(fixed, OpenOptions::writable()).unwrap();
        match what {
            "inode table with the root" => {
                let back = read_file(&mut fs, &format!("/lost+found/#{clip_ino}"), 3000);
                assert_eq!(back, pattern(107, 3000));
            }
            _ => assert_eq!(
                read_file(&mut fs, "/big.ts", big_len),
                pattern(99, big_len),
                "{what}"
            ),
        }
        match what {
            "directory" => {
                let back = read_file(&mut fs, &format!("/lost+found/#{seg_ino}"), 5000);
                assert_eq!(back, pattern(4, 5000), "{what}");
            }
            "data bitmap" => {
                assert_eq!(
                    read_file(&mut fs, "/cam1/seg004.ts", 5000),
                    pattern(4, 5000)
                );
            }
            "inode table" => {
                assert!(
                    fs.resolve("/cam2/clip07.ts").is_err(),
                    "a lost inode is gone"
                );
                assert_eq!(
                    read_file(&mut fs, "/cam1/seg004.ts", 5000),
                    pattern(4, 5000)
                );
            }
            _ => {}
        }
        // The repaired volume takes writes again.
        let root = fs.root();
        fs.create(root, b"after.ts", 0o644, 0, 0, 9).unwrap();
        fs.sync().unwrap();
    }
}

/// Reads field `at` (u32) of inode `ino`'s record.
fn inode_u32(dev: &MemDevice, ino: u32, at: usize) -> u32 {
    let sb = superblock(dev);
    let n = sb.inode_table_start + ino as u64 / 15;
    let base = RECORD_BASE + INODE_BYTES * (ino as usize % 15) + at;
    let mut b = vec![0u8; META_BLOCK_BYTES];
    dev.peek(n * MB, &mut b);
    u32::from_le_bytes(b[base..base + 4].try_into().unwrap())
}

fn read_at(
    fs: &mut Fs<MemDevice>,
    ino: u32,
    offset: u64,
    len: usize,
) -> dvrfs_core::Result<Vec<u8>> {
    let mut buf = vec![0u8; len];
    let n = fs.read(ino, offset, &mut buf)?;
    buf.truncate(n);
    Ok(buf)
}

/// Checks what a file with lost range `lost` (bytes) must do: a read reaching it fails
/// with an error naming the range, every other byte reads back as written.
fn check_lost_range(fs: &mut Fs<MemDevice>, ino: u32, want: &[u8], lost: (u64, u64)) {
    let (ls, le) = lost;
    match read_at(fs, ino, 0, want.len()) {
        Err(dvrfs_core::Error::DataLost {
            ino: i,
            offset,
            end,
        }) => {
            assert_eq!((i, offset, end), (ino, ls, le));
        }
        other => panic!(
            "a read across the lost range must fail, got {:?}",
            other.map(|b| b.len())
        ),
    }
    assert!(
        read_at(fs, ino, le - 1, 1).is_err(),
        "the range's last byte"
    );
    assert_eq!(
        read_at(fs, ino, 0, ls as usize).unwrap(),
        want[..ls as usize]
    );
    assert_eq!(
        read_at(fs, ino, le, want.len()).unwrap(),
        want[le as usize..]
    );
    assert_eq!(fs.stat(ino).unwrap().lost_bytes, le - ls);
}

/// Case 2: one run of a fragmented file points outside the data region. A read there
/// fails with an error naming the bytes (it used to return zeros, and the whole file
/// after it); every other byte reads back. `fsck --repair` keeps every intact run and
/// stores the range as lost, in one pass (it used to drop all the runs); after it the
/// range still fails to read, a partial write there is refused, a whole-block write
/// maps it again, and the volume checks clean.
#[test]
fn a_run_out_of_range_fails_its_reads_and_repair_keeps_every_intact_run() {
    let (mut dev, big) = populated();
    let sb = superblock(&dev);
    let bs = sb.data_block_bytes;
    let want = pattern(99, 30 * (64 << 10) + 123);
    let before = Fs::open(dev.clone(), OpenOptions::read_only())
        .unwrap()
        .runs(big)
        .unwrap();
    // Run 10 is entry 4 of the first indirect run block.
    let victim = before[10];
    let runs_block = inode_u32(&dev, big, I_INDIRECT) as u64;
    edit_block(&mut dev, &sb, runs_block, |b| {
        let at = dvrfs_core::format::HEADER_BYTES + 16 * 4 + 8;
        b[at..at + 8].copy_from_slice(&(sb.data_blocks + 7).to_le_bytes());
    });
    let lost = (victim.file_block as u64 * bs, victim.file_end() * bs);

    let mut fs = Fs::open(dev.clone(), OpenOptions::read_only()).unwrap();
    check_lost_range(&mut fs, big, &want, lost);
    assert_eq!(
        fs.runs(big).unwrap().len(),
        before.len(),
        "every other run kept"
    );
    drop(fs);
    assert!(
        matches!(
            Fs::open(dev.clone(), OpenOptions::writable()),
            Err(dvrfs_core::Error::Corrupt(_))
        ),
        "nothing may be written on top of a damaged map before a repair"
    );

    let (report, _) = fsck(dev.clone(), false, &mut |_, _| {}).unwrap();
    assert_eq!(report.exit_code(), 4, "{:?}", report.errors);
    let (r, again, fixed) = repair_once(dev.clone(), "");
    assert_eq!(r.exit_code(), 1, "{:?}", r.errors);
    assert_eq!(again.damaged, vec![("/big.ts".to_string(), vec![lost])]);

    // The lost range is stored: a writable open keeps it, reads there still fail.
    let mut fs = open_rw(fixed);
    check_lost_range(&mut fs, big, &want, lost);
    assert!(matches!(
        fs.write(big, lost.0 + 10, &[1u8; 100], 9),
        Err(dvrfs_core::Error::DataLost { .. })
    ));
    let block = pattern(7, bs as usize);
    fs.write(big, lost.0, &block, 9).unwrap();
    let mut now = want.clone();
    now[lost.0 as usize..lost.1 as usize].copy_from_slice(&block);
    assert_eq!(read_at(&mut fs, big, 0, now.len()).unwrap(), now);
    assert_eq!(fs.stat(big).unwrap().lost_bytes, 0);
    let dev = fs.close().unwrap();
    let (last, _) = fsck(dev, false, &mut |_, _| {}).unwrap();
    assert_eq!(last.exit_code(), 0, "{:?}", last.errors);
    assert!(last.damaged.is_empty());
}

/// Found by the fuzzer: a file's only run with its `file_block` and `count` rewritten
/// (resealed), on a record without a map checksum, here on a volume made before the
/// superblock said every file keeps one (so only the run itself tells). The run lies
/// past the file's end and outside the data region, so the loader dropped it, and the
/// file's bytes then read as zeros (a hole) with no error. A damaged run means the
/// map cannot be trusted: the file's holes are lost, the read fails naming the bytes,
/// and one repair stores that.
#[test]
fn a_run_moved_past_the_end_of_its_file_makes_the_file_lost_not_zeros() {
    let (mut dev, _) = populated();
    clear_features(&mut dev);
    let sb = superblock(&dev);
    let ino = {
        let fs = Fs::open(dev.clone(), OpenOptions::read_only()).unwrap();
        fs.resolve("/cam1/seg003.ts").unwrap()
    };
    let j = ino as usize % 15;
    edit_block(&mut dev, &sb, sb.inode_table_start + ino as u64 / 15, |b| {
        let run = RECORD_BASE + INODE_BYTES * j + I_INLINE;
        b[run..run + 8].copy_from_slice(&[0x00, 0x00, 0xff, 0xff, 0xff, 0xff, 0x00, 0x00]);
        let sum = RECORD_BASE + dvrfs_core::format::inode::MAP_SUM_OFFSET + 4 * j;
        b[sum..sum + 4].copy_from_slice(&[0; 4]);
    });
    let want = pattern(3, 5000);
    let mut fs = Fs::open(dev.clone(), OpenOptions::read_only()).unwrap();
    check_lost_range(&mut fs, ino, &want, (0, 5000));
    drop(fs);
    let (r, again, fixed) = repair_once(dev, "");
    assert_eq!(r.exit_code(), 1, "{:?}", r.errors);
    assert_eq!(again.damaged.len(), 1, "{:?}", again.damaged);
    let mut fs = Fs::open(fixed, OpenOptions::read_only()).unwrap();
    check_lost_range(&mut fs, ino, &want, (0, 5000));
    assert_eq!(
        read_file(&mut fs, "/cam1/seg004.ts", 5000),
        pattern(4, 5000)
    );
}

/// The same class with the run dropped instead of moved: `run_count` lowered by one
/// and the record's map checksum zeroed (resealed). A volume made by mkfs keeps a map
/// checksum for every file (superblock feature bit), so a zero there is damage: the
/// dropped run's range fails to read instead of reading as zeros, and one repair
/// stores it. A volume made before the feature bit (zero map checksums, bit clear)
/// opens and checks clean as before.
#[test]
fn a_zeroed_map_checksum_counts_as_damage_where_every_file_keeps_one() {
    let (mut dev, big) = populated();
    let sb = superblock(&dev);
    assert!(sb.map_sums_kept(), "mkfs sets the feature");
    let bs = sb.data_block_bytes;
    let want = pattern(99, 30 * (64 << 10) + 123);
    let runs = inode_u32(&dev, big, I_RUN_COUNT);
    let last = {
        let fs = Fs::open(dev.clone(), OpenOptions::read_only()).unwrap();
        *fs.runs(big).unwrap().last().unwrap()
    };
    let j = big as usize % 15;
    edit_block(&mut dev, &sb, sb.inode_table_start + big as u64 / 15, |b| {
        let count = RECORD_BASE + INODE_BYTES * j + I_RUN_COUNT;
        b[count..count + 4].copy_from_slice(&(runs - 1).to_le_bytes());
        let sum = RECORD_BASE + MAP_SUM_OFFSET + 4 * j;
        b[sum..sum + 4].copy_from_slice(&[0; 4]);
    });
    let lost = (last.file_block as u64 * bs, want.len() as u64);
    let mut fs = Fs::open(dev.clone(), OpenOptions::read_only()).unwrap();
    check_lost_range(&mut fs, big, &want, lost);
    drop(fs);
    let (_, again, fixed) = repair_once(dev, "");
    assert_eq!(again.damaged, vec![("/big.ts".to_string(), vec![lost])]);
    let mut fs = Fs::open(fixed, OpenOptions::read_only()).unwrap();
    check_lost_range(&mut fs, big, &want, lost);

    // An older volume: no feature bit, no map checksums anywhere.
    let (mut old, big) = populated();
    clear_features(&mut old);
    let sb = superblock(&old);
    for n in sb.inode_table_start..sb.inode_table_start + sb.inode_blocks_used {
        edit_block(&mut old, &sb, n, |b| {
            b[RECORD_BASE + MAP_SUM_OFFSET..RECORD_BASE + MAP_SUM_OFFSET + 60].fill(0)
        });
    }
    let mut fs = Fs::open(old.clone(), OpenOptions::read_only()).unwrap();
    assert!(!fs.superblock().map_sums_kept());
    assert!(
        fs.load_report().problems.is_empty(),
        "{:?}",
        fs.load_report().problems
    );
    assert_eq!(read_at(&mut fs, big, 0, want.len()).unwrap(), want);
    drop(fs);
    assert_fsck_clean(&old);
}

/// Found by the fuzzer: on a damaged volume where two structures claim one metadata
/// block, which keeps it depends on which is loaded first (inode order in a full
/// load). `stat` and `ls` load only their paths, in path order, and answered
/// differently from the full open. Here `/cam1`'s directory run is pointed at
/// `/cam2`'s block (resealed): a partial open that meets any damage now gives its
/// answer up for the full load's, so every path answers as the full open does.
#[test]
fn partial_opens_answer_as_the_full_open_when_two_directories_claim_one_block() {
    let dev = formatted(40 << 20, 64 << 10, AllocPolicy::Zrr, 9);
    let mut fs = open_rw(dev);
    let root = fs.root();
    for d in [&b"cam1"[..], b"cam2"] {
        let dir = fs.mkdir(root, d, 0o755, 0, 0, 1).unwrap();
        for i in 0..3 {
            let f = fs
                .create(dir, format!("seg{i}.ts").as_bytes(), 0o644, 0, 0, 2)
                .unwrap();
            fs.write(f, 0, &pattern(i, 3000), 3).unwrap();
        }
    }
    let (cam1, cam2_block) = (
        fs.resolve("/cam1").unwrap(),
        fs.runs(fs.resolve("/cam2").unwrap()).unwrap()[0].start,
    );
    let mut dev = fs.close().unwrap();
    let sb = superblock(&dev);
    let j = cam1 as usize % 15;
    edit_block(
        &mut dev,
        &sb,
        sb.inode_table_start + cam1 as u64 / 15,
        |b| {
            let start = RECORD_BASE + INODE_BYTES * j + I_INLINE + 8;
            b[start..start + 8].copy_from_slice(&cam2_block.to_le_bytes());
        },
    );
    let full = Fs::open(dev.clone(), OpenOptions::read_only()).unwrap();
    assert!(
        !full.load_report().problems.is_empty(),
        "the damage is seen"
    );
    // Paths in an order that loads /cam2's entries before /cam1's.
    let paths: Vec<String> = ["/cam2/seg0.ts", "/cam1/seg0.ts", "/cam1", "/cam2", "/"]
        .map(String::from)
        .to_vec();
    let part = Fs::open(dev.clone(), OpenOptions::paths_only(&paths)).unwrap();
    for p in &paths {
        assert_eq!(stat_of(&part, p), stat_of(&full, p), "stat {p}");
    }
    let dirs: Vec<String> = ["/cam2", "/cam1", "/"].map(String::from).to_vec();
    let part = Fs::open(dev, OpenOptions::listing(&dirs)).unwrap();
    for p in &dirs {
        assert_eq!(listing_of(&part, p), listing_of(&full, p), "ls -l {p}");
    }
}

/// Found by the fuzzer: a file that a directory names, with its link count damaged to
/// 0 (resealed). Link count 0 is how a file unlinked while open is left, so opens
/// freed it as an orphan: a repair freed the recording's data while its entry stayed
/// (a second fsck then found the entry naming a free inode). A file a directory names
/// is not an orphan: the open reports the count, a writable open waits for repair,
/// and the repair sets the count and keeps every byte.
#[test]
fn a_named_file_with_link_count_zero_is_kept_not_freed_as_an_orphan() {
    let (mut dev, big) = populated();
    edit_inode_u32(&mut dev, big, 4, 0);
    let want = pattern(99, 30 * (64 << 10) + 123);
    let mut fs = Fs::open(dev.clone(), OpenOptions::read_only()).unwrap();
    assert_eq!(read_at(&mut fs, big, 0, want.len()).unwrap(), want);
    drop(fs);
    assert!(matches!(
        Fs::open(dev.clone(), OpenOptions::writable()),
        Err(dvrfs_core::Error::Corrupt(_))
    ));
    let (r, _, fixed) = repair_once(dev, "");
    assert_eq!(r.exit_code(), 1, "{:?}", r.errors);
    let mut fs = Fs::open(fixed, OpenOptions::read_only()).unwrap();
    assert_eq!(fs.stat(big).unwrap().nlink, 1);
    assert_eq!(read_file(&mut fs, "/big.ts", want.len()), want);
}

/// A run block and a symlink block lost in both copies used to fail the open. Now
/// the file keeps its other runs (the lost block's range fails to read), the link is
/// gone, and one repair gives a clean volume that keeps the lost range marked.
#[test]
fn a_lost_run_block_or_symlink_block_loses_only_what_it_held() {
    let (dev, big) = populated();
    let mut fs = open_rw(dev);
    let root = fs.root();
    // A target too long for the inode record, so the link has a block.
    let target = format!("{}/big.ts", "/.".repeat(90));
    fs.symlink(root, b"link", target.as_bytes(), 0, 0, 8)
        .unwrap();
    let link = fs.lookup(root, b"link").unwrap();
    let link_block = fs.runs(link).unwrap()[0].start;
    let mut dev = fs.close().unwrap();
    let sb = superblock(&dev);
    let bs = sb.data_block_bytes;
    let want = pattern(99, 30 * (64 << 10) + 123);
    let runs = Fs::open(dev.clone(), OpenOptions::read_only())
        .unwrap()
        .runs(big)
        .unwrap();
    let runs_block = inode_u32(&dev, big, I_INDIRECT) as u64;
    lose_block(&mut dev, &sb, runs_block);
    lose_block(&mut dev, &sb, link_block);
    // Runs 6.. were in the lost block: from the end of run 5 to the file's end.
    let lost = (runs[5].file_end() * bs, want.len() as u64);

    let mut fs = Fs::open(dev.clone(), OpenOptions::read_only()).unwrap();
    check_lost_range(&mut fs, big, &want, lost);
    assert!(fs.readlink(link).is_err(), "the link's target is gone");
    drop(fs);
    let (_, again, fixed) = repair_once(dev, "");
    assert_eq!(again.damaged, vec![("/big.ts".to_string(), vec![lost])]);
    let mut fs = Fs::open(fixed, OpenOptions::read_only()).unwrap();
    check_lost_range(&mut fs, big, &want, lost);
    assert!(
        fs.lookup(fs.root(), b"link").is_err(),
        "fsck removed the link"
    );
}

/// A device the test keeps a handle on while fsck owns it (to take the media after
/// a power cut that failed the repair).
#[derive(Clone)]
struct Shared(Rc<RefCell<dvrfs_core::device::CrashDevice>>);

impl dvrfs_core::device::Device for Shared {
    fn size_bytes(&self) -> u64 {
        self.0.borrow().size_bytes()
    }
    fn sector_bytes(&self) -> u32 {
        self.0.borrow().sector_bytes()
    }
    fn read_at(&self, offset_bytes: u64, buf: &mut [u8]) -> std::io::Result<()> {
        self.0.borrow().read_at(offset_bytes, buf)
    }
    fn write_at(&mut self, offset_bytes: u64, buf: &[u8]) -> std::io::Result<()> {
        self.0.borrow_mut().write_at(offset_bytes, buf)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.0.borrow_mut().flush()
    }
}

/// A repair interrupted by a power cut (or `kill -9`) at any of its writes: the next
/// `fsck --repair` finishes the job in one pass (it used to need two), and the files
/// that were intact read back. Checked at every write of the repair of four kinds
/// of damage, with in-order and random-subset tearing.
#[test]
fn a_repair_cut_at_any_write_is_finished_by_one_more_repair() {
    use dvrfs_core::device::{CrashDevice, CrashMode};
    let (base, big) = populated();
    let sb = superblock(&base);
    let (cam1, clip_ino) = {
        let fs = Fs::open(base.clone(), OpenOptions::read_only()).unwrap();
        (
            fs.resolve("/cam1").unwrap(),
            fs.resolve("/cam2/clip07.ts").unwrap(),
        )
    };
    let dir_block = Fs::open(base.clone(), OpenOptions::read_only())
        .unwrap()
        .runs(cam1)
        .unwrap()[0]
        .start;
    let runs_block = inode_u32(&base, big, I_INDIRECT) as u64;
    type Hurt<'a> = Box<dyn Fn(&mut MemDevice) + 'a>;
    let damage: [(&str, Hurt); 4] = [
        (
            "data bitmap",
            Box::new(|d| lose_block(d, &sb, sb.data_bitmap_start)),
        ),
        (
            "inode table",
            Box::new(|d| lose_block(d, &sb, sb.inode_table_start + clip_ino as u64 / 15)),
        ),
        ("directory", Box::new(|d| lose_block(d, &sb, dir_block))),
        (
            "run out of range",
            Box::new(|d| {
                edit_block(d, &sb, runs_block, |b| {
                    let at = dvrfs_core::format::HEADER_BYTES + 16 * 4 + 8;
                    b[at..at + 8].copy_from_slice(&(sb.data_blocks + 7).to_le_bytes());
                })
            }),
        ),
    ];
    let seg = |fs: &mut Fs<MemDevice>| {
        let ino = fs.resolve("/cam1/seg009.ts").or_else(|_| {
            // A lost directory block sends its children to /lost+found.
            let lf = fs.resolve("/lost+found")?;
            let list = fs.readdir(lf)?;
            let want = pattern(9, 5000);
            list.into_iter()
                .map(|(_, i, _)| i)
                .find(|&i| read_ino(fs, i, 5000) == want)
                .ok_or(dvrfs_core::Error::NotFound("seg009".into()))
        });
        ino.map(|i| read_ino(fs, i, 5000))
    };
    for (what, hurt) in &damage {
        let mut dev = base.clone();
        hurt(&mut dev);
        let writes = {
            let c = CrashDevice::new(dev.clone(), CrashMode::InOrderTorn, 1);
            let (_, d) = fsck(c, true, &mut |_, _| {}).unwrap();
            d.expect("repair ran").writes
        };
        assert!(writes > 0, "{what}: the repair wrote nothing");
        for cut in 0..writes {
            for mode in [CrashMode::InOrderTorn, CrashMode::RandomSubsetTorn] {
                let mut c = CrashDevice::new(dev.clone(), mode, cut);
                c.crash_after_writes(cut);
                let c = Shared(Rc::new(RefCell::new(c)));
                // The cut fails the repair with an I/O error (the device is dead).
                assert!(
                    fsck(c.clone(), true, &mut |_, _| {}).is_err(),
                    "{what}, cut {cut}: the repair did not notice the power cut"
                );
                let Some(img) = c.0.borrow().crash_image() else {
                    panic!("{what}, cut {cut}: the repair finished before the cut")
                };
                // After the interrupted repair, one more finishes it.
                let (_, _, fixed) = repair_once(img, &format!("{what}, cut {cut} {mode:?}"));
                let mut fs = Fs::open(fixed, OpenOptions::read_only()).unwrap();
                assert_eq!(
                    seg(&mut fs).unwrap_or_else(|e| panic!("{what}, cut {cut}: {e}")),
                    pattern(9, 5000),
                    "{what}, cut {cut} {mode:?}"
                );
            }
        }
    }
}

/// Found by the fuzzer: a root inode whose record is valid but not a directory (its
/// mode rewritten) made every open and fsck fail with "the root directory is missing".
/// Now an empty root stands in and one repair links what the old root named into
/// /lost+found.
#[test]
fn a_root_inode_that_is_not_a_directory_is_replaced_in_one_repair() {
    for mode in [0o100644u32, 0o170777] {
        let (mut dev, big) = populated();
        let sb = superblock(&dev);
        edit_inode_u32(&mut dev, sb.root_ino, 0, mode);
        let fs = Fs::open(dev.clone(), OpenOptions::read_only())
            .unwrap_or_else(|e| panic!("mode {mode:o}: a read-only open failed: {e}"));
        drop(fs);
        let (_, _, fixed) = repair_once(dev, &format!("mode {mode:o}"));
        let mut fs = Fs::open(fixed, OpenOptions::read_only()).unwrap();
        let len = 30 * (64 << 10) + 123;
        let back = read_file(&mut fs, &format!("/lost+found/#{big}"), len);
        assert_eq!(back, pattern(99, len), "mode {mode:o}");
    }
}

/// Found by libFuzzer (the eighth run): a small file's record damaged (resealed) so
/// that it claims 26 runs and its first indirect extent points at the block that holds
/// a large file's runs, whose own record is damaged too (two inline runs made
/// invalid, so its run list shrinks by one when the repair stores it). The loader
/// let the later record take the block over silently, and the repair, trimming the
/// small file's extents, freed the block the large file's runs live in, so the
/// large file's new list was never written: a second fsck found its map broken. Now
/// the claim with evidence keeps the block (a file cannot have more runs than
/// blocks), the other loses its runs from that extent on, and one repair gives a
/// clean volume on which the large file keeps every intact run.
#[test]
fn an_indirect_extent_two_records_claim_stays_with_the_file_it_belongs_to() {
    let (mut dev, big) = populated();
    let sb = superblock(&dev);
    let bs = sb.data_block_bytes;
    let want = pattern(99, 30 * (64 << 10) + 123);
    let (small, runs) = {
        let fs = Fs::open(dev.clone(), OpenOptions::read_only()).unwrap();
        (
            fs.resolve("/cam1/seg003.ts").unwrap(),
            fs.runs(big).unwrap(),
        )
    };
    assert!(small < big, "the small file loads first");
    assert!(runs.len() > 7 && runs[4].file_end() == runs[5].file_block as u64);
    let extent = inode_u32(&dev, big, I_INDIRECT);
    // The small file: 26 runs, 20 of them in the large file's extent (so that its
    // loaded runs need the extent: the large file's runs are sound file ranges).
    edit_inode_u32(&mut dev, small, I_RUN_COUNT, 26);
    edit_inode_u32(&mut dev, small, I_INDIRECT, extent);
    // The large file: inline run 4 outside the data region, run 5 out of order.
    let (j, n) = (big as usize % 15, sb.inode_table_start + big as u64 / 15);
    edit_block(&mut dev, &sb, n, |b| {
        let run = |k: usize| RECORD_BASE + INODE_BYTES * j + I_INLINE + 16 * k;
        b[run(4) + 8..run(4) + 16].copy_from_slice(&(sb.data_blocks + 7).to_le_bytes());
        b[run(5)..run(5) + 4].copy_from_slice(&0u32.to_le_bytes());
    });
    let lost = (runs[4].file_block as u64 * bs, runs[5].file_end() * bs);

    let mut fs = Fs::open(dev.clone(), OpenOptions::read_only()).unwrap();
    assert!(
        fs.load_report()
            .problems
            .iter()
            .any(|(i, p)| *i == Some(small) && p.contains(&format!("inode {big}'s runs"))),
        "the small file's claim is reported: {:?}",
        fs.load_report().problems
    );
    check_lost_range(&mut fs, big, &want, lost);
    assert_eq!(
        read_file(&mut fs, "/cam1/seg003.ts", 5000),
        pattern(3, 5000)
    );
    drop(fs);

    let (_, again, fixed) = repair_once(dev, "");
    assert_eq!(again.damaged, vec![("/big.ts".to_string(), vec![lost])]);
    let mut fs = Fs::open(fixed, OpenOptions::read_only()).unwrap();
    check_lost_range(&mut fs, big, &want, lost);
    assert_eq!(
        read_file(&mut fs, "/cam1/seg003.ts", 5000),
        pattern(3, 5000)
    );
    assert_eq!(
        read_file(&mut fs, "/cam1/seg009.ts", 5000),
        pattern(9, 5000)
    );
}

/// A file's indirect-extent pointer edited (resealed) to a directory's block: the
/// loader kept the extent as the file's (the block read as lost), so the repair wrote
/// the file's runs over the directory and its files went to `/lost+found`, and a
/// second fsck found more. An extent block that holds a valid block of another kind
/// in both copies, or that a structure loaded before owns, is another's: the file
/// loses its runs from that extent on, the directory keeps its block, one repair.
#[test]
fn an_indirect_extent_on_a_directory_block_leaves_the_directory_whole() {
    let (dev, big) = populated();
    let sb = superblock(&dev);
    let bs = sb.data_block_bytes;
    let want = pattern(99, 30 * (64 << 10) + 123);
    let (cam1, cam2, runs) = {
        let fs = Fs::open(dev.clone(), OpenOptions::read_only()).unwrap();
        let dir_block = |p: &str| fs.runs(fs.resolve(p).unwrap()).unwrap()[0].start;
        (
            dir_block("/cam1"),
            dir_block("/cam2"),
            fs.runs(big).unwrap(),
        )
    };
    // /cam1's inode comes before big.ts's and /cam2's after it: both load orders.
    for (dir, block) in [("/cam1", cam1), ("/cam2", cam2)] {
        let mut dev = dev.clone();
        edit_inode_u32(&mut dev, big, I_INDIRECT, block as u32);
        // Runs 6.. were in the extent: lost from the end of run 5 to the file's end.
        let lost = (runs[5].file_end() * bs, want.len() as u64);
        let mut fs = Fs::open(dev.clone(), OpenOptions::read_only()).unwrap();
        check_lost_range(&mut fs, big, &want, lost);
        assert!(
            fs.load_report().lost_blocks.is_empty(),
            "{dir}: a directory's block is not lost"
        );
        drop(fs);
        let (_, again, fixed) = repair_once(dev, dir);
        assert_eq!(
            again.damaged,
            vec![("/big.ts".to_string(), vec![lost])],
            "{dir}"
        );
        let mut fs = Fs::open(fixed, OpenOptions::read_only()).unwrap();
        check_lost_range(&mut fs, big, &want, lost);
        assert_eq!(
            read_file(&mut fs, "/cam1/seg009.ts", 5000),
            pattern(9, 5000),
            "{dir}"
        );
        assert_eq!(
            read_file(&mut fs, "/cam2/clip09.ts", 3000),
            pattern(109, 3000),
            "{dir}"
        );
        assert!(
            fs.lookup(fs.root(), b"lost+found").is_err(),
            "{dir}: nothing was cut off"
        );
    }
}

/// The same claim where the damaged record is plausible (its size raised with its run
/// count, so a file of that size could have that many runs) and comes first in inode
/// order: the intact file's map checksum, which verifies over the runs in the block,
/// is the stronger evidence, so the intact file keeps its runs, a path-only `stat`
/// answers as the full open, and one repair gives a clean volume with it whole.
#[test]
fn an_indirect_extent_two_records_claim_stays_with_the_record_its_checksum_proves() {
    let (mut dev, big) = populated();
    let want = pattern(99, 30 * (64 << 10) + 123);
    let small = Fs::open(dev.clone(), OpenOptions::read_only())
        .unwrap()
        .resolve("/cam1/seg003.ts")
        .unwrap();
    assert!(small < big, "the damaged record loads first");
    let extent = inode_u32(&dev, big, I_INDIRECT);
    edit_inode_u32(&mut dev, small, I_RUN_COUNT, 26);
    edit_inode_u32(&mut dev, small, I_INDIRECT, extent);
    // Size (a u64 at offset 16 of the record; its high half is 0): 30 blocks, room
    // for 26 runs.
    edit_inode_u32(&mut dev, small, 16, 30 * (64 << 10));

    let mut fs = Fs::open(dev.clone(), OpenOptions::read_only()).unwrap();
    assert_eq!(read_file(&mut fs, "/big.ts", want.len()), want);
    let paths = vec!["/big.ts".to_string()];
    let part = Fs::open(dev.clone(), OpenOptions::paths_only(&paths)).unwrap();
    assert_eq!(stat_of(&part, "/big.ts"), stat_of(&fs, "/big.ts"));
    drop((fs, part));

    let (_, again, fixed) = repair_once(dev, "");
    assert!(
        again.damaged.iter().all(|(p, _)| p != "/big.ts"),
        "{:?}",
        again.damaged
    );
    let mut fs = Fs::open(fixed, OpenOptions::read_only()).unwrap();
    assert_eq!(read_file(&mut fs, "/big.ts", want.len()), want);
    assert_eq!(
        read_file(&mut fs, "/cam1/seg009.ts", 5000),
        pattern(9, 5000)
    );
}

/// The same claim by a record whose second extent pointer lies far outside the volume:
/// weighing the claim reads the claimant's runs, and a pointer that cannot hold runs
/// is no evidence, never a read outside the device (which failed the open and the
/// repair with an I/O error).
#[test]
fn weighing_a_contested_extent_never_reads_outside_the_volume() {
    let (mut dev, big) = populated();
    let want = pattern(99, 30 * (64 << 10) + 123);
    let small = Fs::open(dev.clone(), OpenOptions::read_only())
        .unwrap()
        .resolve("/cam1/seg003.ts")
        .unwrap();
    let extent = inode_u32(&dev, big, I_INDIRECT);
    // 300 runs need extents 0 and 1; the file's size (300 blocks) makes it plausible.
    edit_inode_u32(&mut dev, small, I_RUN_COUNT, 300);
    edit_inode_u32(&mut dev, small, 16, 300 * (64 << 10));
    edit_inode_u32(&mut dev, small, I_INDIRECT, extent);
    edit_inode_u32(&mut dev, small, I_INDIRECT + 4, 0xFFFF_FFF0);

    let mut fs = Fs::open(dev.clone(), OpenOptions::read_only()).unwrap();
    assert_eq!(read_file(&mut fs, "/big.ts", want.len()), want);
    drop(fs);
    let (_, _, fixed) = repair_once(dev, "");
    let mut fs = Fs::open(fixed, OpenOptions::read_only()).unwrap();
    assert_eq!(read_file(&mut fs, "/big.ts", want.len()), want);
}
