//! Damage that is not random (issue 9), to block maps: runs out of range or moved,
//! zeroed map checksums, lost run blocks, indirect extents two records claim. Fields
//! are edited "validly" (checksums recomputed), so only range checks and cross-checks
//! can catch them. Each test reproduces a case that used to panic, lose data or
//! mislead, and checks what must happen instead. The rest of the cases are in
//! `damage.rs`.

mod common;

use common::damage::*;
use common::*;
use dvrfs_core::format::inode::MAP_SUM_OFFSET;
use dvrfs_core::fuzzing::stat_of;
use dvrfs_core::tools::fsck::fsck;
use dvrfs_core::{Fs, OpenOptions};

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
