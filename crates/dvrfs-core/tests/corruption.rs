//! Corruption: every primary metadata block in use, with one flipped byte, must be
//! detected, served from the backup region and repaired by fsck; a zeroed primary
//! superblock is survived through the end-of-device copy; a block written to the wrong
//! place is caught by its block number; damage to both copies is reported, not trusted.

mod common;

use common::*;
use dvrfs_core::device::{Device, MemDevice};
use dvrfs_core::format::superblock::{AllocPolicy, Superblock};
use dvrfs_core::format::{parse_header, payload_mut, seal_block, BlockType, META_BLOCK_BYTES};
use dvrfs_core::tools::fsck::fsck;
use dvrfs_core::{Error, Fs, OpenOptions};

const MB: u64 = META_BLOCK_BYTES as u64;

/// A file system with directories, symlinks (one inline, one with a block), and a ZRR file fragmented enough to use
/// indirect run blocks.
fn populated() -> (MemDevice, Model) {
    let dev = formatted(40 << 20, 64 << 10, AllocPolicy::Zrr, 9);
    let mut fs = open_rw(dev);
    let root = fs.root();
    let d = fs.mkdir(root, b"cam1", 0o755, 0, 0, 1).unwrap();
    for i in 0..40 {
        fs.create(d, format!("seg{i:03}.ts").as_bytes(), 0o644, 0, 0, 2)
            .unwrap();
    }
    let big = fs.create(root, b"big.ts", 0o644, 0, 0, 3).unwrap();
    fs.write(big, 0, &pattern(1, 30 * (64 << 10) + 123), 4)
        .unwrap();
    let small = fs.lookup(d, b"seg007.ts").unwrap();
    fs.write(small, 0, &pattern(2, 5000), 5).unwrap();
    fs.symlink(root, b"latest", b"/cam1/seg007.ts", 0, 0, 6)
        .unwrap();
    // A target too long for the inode record: a symlink block.
    let long = format!("{}/cam1/seg007.ts", "/.".repeat(90));
    fs.symlink(root, b"archive", long.as_bytes(), 0, 0, 6)
        .unwrap();
    assert!(
        fs.stat(big).unwrap().runs > 7,
        "the big file needs indirect runs"
    );
    let model = snapshot(&mut fs);
    (fs.close().unwrap(), model)
}

fn superblock(dev: &MemDevice) -> Superblock {
    let mut b = vec![0u8; META_BLOCK_BYTES];
    dev.peek(0, &mut b);
    Superblock::decode(&b).unwrap()
}

/// Every primary metadata block that holds live metadata.
fn blocks_in_use(dev: &MemDevice, sb: &Superblock) -> Vec<u64> {
    let mut v = vec![0];
    v.extend(sb.data_bitmap_start..sb.dynamic_start);
    let mut b = vec![0u8; META_BLOCK_BYTES];
    for n in sb.dynamic_start..sb.dynamic_start + sb.dynamic_blocks {
        dev.peek(n * MB, &mut b);
        if parse_header(&b).is_ok() {
            v.push(n);
        }
    }
    v
}

fn fsck_code(dev: &MemDevice, repair: bool) -> (i32, Option<MemDevice>, Vec<String>) {
    let (r, d) = fsck(dev.clone(), repair, &mut |_, _| {}).unwrap();
    (r.exit_code(), d, r.errors)
}

#[test]
fn backup_region_used_when_primary_checksum_fails() {
    let (dev, model) = populated();
    let sb = superblock(&dev);
    let blocks = blocks_in_use(&dev, &sb);
    let types: std::collections::BTreeSet<_> = blocks
        .iter()
        .map(|&n| {
            let mut b = vec![0u8; META_BLOCK_BYTES];
            dev.peek(n * MB, &mut b);
            parse_header(&b).unwrap().block_type
        })
        .collect();
    for t in [
        BlockType::Superblock,
        BlockType::DataBitmap,
        BlockType::MetaBitmap,
        BlockType::InodeTable,
        BlockType::Directory,
        BlockType::Runs,
        BlockType::Symlink,
    ] {
        assert!(types.contains(&t), "the test volume has a {t:?} block");
    }
    for (i, &n) in blocks.iter().enumerate() {
        let mut bad = dev.clone();
        let at = n * MB + (i as u64 * 977) % MB;
        let mut byte = [0u8];
        bad.peek(at, &mut byte);
        bad.poke(at, &[byte[0] ^ 0x40]);
        // Detected and served from the backup: the contents are intact.
        let mut fs = Fs::open(bad.clone(), OpenOptions::read_only())
            .unwrap_or_else(|e| panic!("block {n}: {e}"));
        let report = fs.load_report();
        if n == 0 {
            assert_eq!(report.superblock_from, "end-of-device copy");
        } else {
            assert!(
                report.from_backup.iter().any(|(b, _)| *b == n),
                "block {n}: flip at {at} not detected"
            );
        }
        assert_eq!(snapshot(&mut fs), model, "block {n}");
        // fsck without repair: errors left (4); with repair: corrected (1); then clean.
        assert_eq!(fsck_code(&bad, false).0, 4, "block {n}");
        let (code, repaired, _) = fsck_code(&bad, true);
        assert_eq!(code, 1, "block {n}");
        let repaired = repaired.unwrap();
        let (code, _, errors) = fsck_code(&repaired, false);
        assert_eq!(code, 0, "block {n} after repair: {errors:?}");
        let mut fs = Fs::open(repaired, OpenOptions::read_only()).unwrap();
        assert!(fs.load_report().from_backup.is_empty());
        assert_eq!(snapshot(&mut fs), model);
    }
}

#[test]
fn zeroed_primary_superblock_is_survived() {
    let (mut dev, model) = populated();
    dev.poke(0, &[0u8; META_BLOCK_BYTES]);
    let mut fs = Fs::open(dev, OpenOptions::writable()).unwrap();
    assert_eq!(fs.load_report().superblock_from, "end-of-device copy");
    assert_eq!(snapshot(&mut fs), model);
    // Still usable for writing; the next commit rewrites every superblock copy.
    let root = fs.root();
    fs.create(root, b"after", 0o644, 0, 0, 9).unwrap();
    let dev = fs.close().unwrap();
    assert_fsck_clean(&dev);
    let fs = Fs::open(dev, OpenOptions::read_only()).unwrap();
    assert_eq!(fs.load_report().superblock_from, "primary");
}

#[test]
fn misplaced_block_is_detected_by_its_number() {
    let (dev, model) = populated();
    let sb = superblock(&dev);
    // A misdirected write: inode-table block 0's image lands on inode-table block 1.
    let mut img = vec![0u8; META_BLOCK_BYTES];
    dev.peek(sb.inode_table_start * MB, &mut img);
    let mut bad = dev.clone();
    bad.poke((sb.inode_table_start + 1) * MB, &img);
    let mut fs = Fs::open(bad.clone(), OpenOptions::read_only()).unwrap();
    let (n, why) = &fs.load_report().from_backup[0];
    assert_eq!(*n, sb.inode_table_start + 1);
    assert!(why.contains("misplaced"), "{why}");
    assert_eq!(snapshot(&mut fs), model);
}

#[test]
fn damage_to_both_copies_is_reported_not_trusted() {
    let (dev, _) = populated();
    let sb = superblock(&dev);
    let n = sb.inode_table_start;
    let mut bad = dev.clone();
    bad.poke(n * MB + 100, &[0xEE; 8]);
    bad.poke(sb.backup_offset(n) + 100, &[0xEE; 8]);
    // Not trusted: the block is lost, not read. A read-only open goes on without it
    // (its inodes, here the root's, are gone: an empty root stands in), a writable one
    // is refused, and one repair gives a clean volume (tests/damage.rs has the cases).
    let fs = Fs::open(bad.clone(), OpenOptions::read_only()).unwrap();
    let lost = &fs.load_report().lost_blocks;
    assert_eq!(lost.len(), 1);
    assert_eq!(lost[0].0, n);
    drop(fs);
    match Fs::open(bad.clone(), OpenOptions::writable()) {
        Err(Error::Corrupt(msg)) => assert!(msg.contains(&format!("block {n}")), "{msg}"),
        Err(e) => panic!("unexpected error {e}"),
        Ok(_) => panic!("a volume with a lost block was opened for writing"),
    }
    let (code, fixed, _) = fsck_code(&bad, true);
    assert_eq!(code, 1);
    let (code, _, errors) = fsck_code(&fixed.unwrap(), false);
    assert_eq!(code, 0, "{errors:?}");
}

#[test]
fn corrupt_backup_copy_is_found_and_rewritten() {
    let (dev, model) = populated();
    let sb = superblock(&dev);
    let mut bad = dev.clone();
    bad.poke(sb.backup_offset(sb.data_bitmap_start) + 300, &[1, 2, 3]);
    let (code, repaired, errors) = fsck_code(&bad, false);
    assert_eq!(code, 4);
    assert!(errors[0].contains("backup copy"), "{errors:?}");
    let (code, repaired2, _) = fsck_code(&bad, true);
    assert_eq!(code, 1);
    drop(repaired);
    let repaired2 = repaired2.unwrap();
    assert_eq!(fsck_code(&repaired2, false).0, 0);
    assert_eq!(snapshot(&mut open_rw(repaired2)), model);
}

#[test]
fn leaked_data_block_is_reclaimed_by_fsck() {
    let (dev, model) = populated();
    let sb = superblock(&dev);
    // Mark the last data block used in both bitmap copies, with valid checksums.
    let mut bad = dev.clone();
    let n = sb.data_bitmap_start + (sb.data_blocks - 1) / dvrfs_core::alloc::BITS_PER_BITMAP_BLOCK;
    for off in [sb.primary_offset(n), sb.backup_offset(n)] {
        let mut b = vec![0u8; META_BLOCK_BYTES];
        bad.peek(off, &mut b);
        let h = parse_header(&b).unwrap();
        let bit = (sb.data_blocks - 1) % dvrfs_core::alloc::BITS_PER_BITMAP_BLOCK;
        payload_mut(&mut b)[(bit / 8) as usize] |= 1 << (bit % 8);
        seal_block(&mut b, &h);
        bad.write_at(off, &b).unwrap();
    }
    let (code, _, errors) = fsck_code(&bad, false);
    assert_eq!(code, 4);
    assert!(
        errors.iter().any(|e| e.contains("data bitmap")),
        "{errors:?}"
    );
    let (code, fixed, _) = fsck_code(&bad, true);
    assert_eq!(code, 1);
    let fixed = fixed.unwrap();
    assert_eq!(fsck_code(&fixed, false).0, 0);
    assert_eq!(snapshot(&mut open_rw(fixed)), model);
}

#[test]
fn random_bytes_are_not_a_dvrfs() {
    let mut dev = MemDevice::new(8 << 20);
    dev.poke(0, &pattern(5, 8 << 20));
    assert!(matches!(
        Fs::open(dev, OpenOptions::read_only()),
        Err(Error::NotDvrfs(_))
    ));
    let empty = MemDevice::new(8 << 20);
    assert!(matches!(
        Fs::open(empty, OpenOptions::read_only()),
        Err(Error::NotDvrfs(_))
    ));
}

#[test]
fn stray_bitmap_bits_are_cleared_by_repair() {
    let (dev, model) = populated();
    let sb = superblock(&dev);
    let last = sb.data_bitmap_start + sb.data_bitmap_blocks - 1;
    let stray_bit = (sb.data_blocks % dvrfs_core::alloc::BITS_PER_BITMAP_BLOCK) + 5;
    let mut bad = dev.clone();
    for off in [sb.primary_offset(last), sb.backup_offset(last)] {
        let mut b = vec![0u8; META_BLOCK_BYTES];
        bad.peek(off, &mut b);
        let h = parse_header(&b).unwrap();
        payload_mut(&mut b)[(stray_bit / 8) as usize] |= 1 << (stray_bit % 8);
        seal_block(&mut b, &h);
        bad.write_at(off, &b).unwrap();
    }
    let (code, _, errors) = fsck_code(&bad, false);
    assert_eq!(code, 4, "{errors:?}");
    let (code, fixed, _) = fsck_code(&bad, true);
    assert_eq!(code, 1);
    let fixed = fixed.unwrap();
    let (code, _, errors) = fsck_code(&fixed, false);
    assert_eq!(code, 0, "{errors:?}");
    assert_eq!(snapshot(&mut open_rw(fixed)), model);
}

/// The recovery decision table, `RECOVERY_CASES` in `volume/recovery.rs`: every state
/// the three superblock copies and the journal can be observed in matches exactly one
/// row, and an image built in each of a row's states opens as the row says (which
/// superblock, from which copy, and whether the journal's transaction is replayed).
#[test]
fn recovery_decision_table_covers_every_combination() {
    use dvrfs_core::volume::recovery::{Apply, Copies, JournalHead, Use, RECOVERY_CASES};

    // Every combination: each copy (primary, end, backup) is bad (0) or holds the
    // newest (1), the older (2) or the oldest (3) of up to three superblocks; the
    // ranks in use are dense (an older one only beside a newest one).
    let mut hits = vec![0usize; RECOVERY_CASES.len()];
    for k in 0..64 {
        let copies = [k % 4, k / 4 % 4, k / 16];
        let top = *copies.iter().max().unwrap();
        if (1..=top).any(|rank| !copies.contains(&rank)) {
            continue;
        }
        let holding = |rank| copies.iter().filter(|&&c| c == rank).count() as u8;
        let c = Copies {
            newest: holding(1),
            older: holding(2),
        };
        for j in JournalHead::ALL {
            // The journal is read where a superblock says, so exactly when one decodes.
            if (j == JournalHead::NotRead) != (c.newest == 0) {
                continue;
            }
            let rows: Vec<usize> = (0..RECOVERY_CASES.len())
                .filter(|&r| RECOVERY_CASES[r].matches(c, j))
                .collect();
            assert_eq!(
                rows.len(),
                1,
                "copies {copies:?} journal {j:?}: rows {rows:?}"
            );
            hits[rows[0]] += 1;
        }
    }
    assert!(
        hits.iter().all(|&h| h > 0),
        "every row is some state's: {hits:?}"
    );

    // The images. Superblocks of three ages: `older` and `newest` are the volume after
    // two and three more commits (closed); `early` a transaction committed on the
    // base before them (stale under both), `late` one committed on `newest`, creating
    // "/new" (whole under both).
    let (base, _) = populated();
    let sb = superblock(&base);
    let jbytes = (sb.journal_blocks * MB) as usize;
    let journal_of = |dev: &MemDevice| {
        let mut j = vec![0u8; jbytes];
        dev.peek(sb.primary_offset(sb.journal_start), &mut j);
        j
    };
    let commit = |dev: &MemDevice, name: &[u8]| {
        let mut fs = open_rw(dev.clone());
        let root = fs.root();
        fs.create(root, name, 0o644, 0, 0, 1).unwrap();
        fs.sync().unwrap();
        fs
    };
    let early = journal_of(&commit(&base, b"early").crash());
    let mut fs = commit(&base, b"a");
    let root = fs.root();
    fs.create(root, b"b", 0o644, 0, 0, 1).unwrap();
    fs.sync().unwrap();
    let older = fs.close().unwrap();
    let newest = commit(&older, b"c").close().unwrap();
    let late = journal_of(&commit(&newest, b"new").crash());
    let block0 = |dev: &MemDevice| {
        let mut b = vec![0u8; META_BLOCK_BYTES];
        dev.peek(0, &mut b);
        b
    };
    let (older_sb, newest_sb) = (superblock(&older), superblock(&newest));
    let late_txn = dvrfs_core::format::journal::parse_head(
        &late[..META_BLOCK_BYTES],
        &sb.uuid,
        sb.journal_start,
    )
    .expect("a transaction")
    .txn;
    let journal_in = |j: JournalHead| -> Vec<u8> {
        use dvrfs_core::format::journal::reseal_transaction;
        use dvrfs_core::format::journal::transaction_blocks;
        use dvrfs_core::format::journal::{decode_transaction, encode_transaction, parse_head};
        let head = parse_head(&late[..META_BLOCK_BYTES], &sb.uuid, sb.journal_start).unwrap();
        let whole = &late[..transaction_blocks(head.images) * META_BLOCK_BYTES];
        let images = decode_transaction(whole, &sb.uuid, sb.journal_start, head).unwrap();
        let mut out = vec![0u8; jbytes];
        let txn = match j {
            JournalHead::NotRead | JournalHead::Absent => return out,
            JournalHead::Stale => return early.clone(),
            JournalHead::WholeWithSuperblock => return late.clone(),
            JournalHead::Torn => {
                // The commit record (after the descriptor and the images) torn.
                let mut t = late.clone();
                t[(1 + images.len()) * META_BLOCK_BYTES + 1000] ^= 0xFF;
                return t;
            }
            JournalHead::Whole => {
                let refs: Vec<(u64, &[u8])> = images
                    .iter()
                    .filter(|(n, _)| *n != 0)
                    .map(|(n, b)| (*n, &b[..]))
                    .collect();
                encode_transaction(&sb.uuid, sb.journal_start, head.txn, &refs)
            }
            JournalHead::Mismatched => {
                // Its superblock image another layout's, resealed: whole.
                let mut t = whole.to_vec();
                let k = (0..t.len() / META_BLOCK_BYTES)
                    .find(|&k| {
                        parse_header(&t[k * META_BLOCK_BYTES..(k + 1) * META_BLOCK_BYTES])
                            .is_ok_and(|h| h.block_no == 0)
                    })
                    .unwrap();
                let img = &mut t[k * META_BLOCK_BYTES..(k + 1) * META_BLOCK_BYTES];
                let seq = parse_header(img).unwrap().seq;
                let mut s = Superblock::decode(img).unwrap();
                s.commit_interval_ms += 1;
                img.copy_from_slice(&s.encode(seq)[..]);
                reseal_transaction(&mut t);
                t
            }
        };
        out[..txn.len()].copy_from_slice(&txn);
        out
    };
    // Arrangements of the copies (primary, end, backup), each Some(image) or None for
    // zeroed, with the copy the row's superblock is expected from.
    let zero = vec![0u8; META_BLOCK_BYTES];
    let (n0, o0) = (block0(&newest), block0(&older));
    type Arrangement<'a> = ([&'a [u8]; 3], &'static str);
    let arrangements = |c: Use| -> Vec<Arrangement<'_>> {
        match c {
            Use::Refuse => vec![([&zero, &zero, &zero], "")],
            Use::Newest => vec![
                ([&n0, &n0, &n0], "primary"),
                ([&zero, &n0, &n0], "end-of-device copy"),
                ([&zero, &zero, &n0], "backup-region copy"),
                ([&n0, &o0, &zero], "primary"),
                ([&o0, &n0, &zero], "end-of-device copy"),
            ],
            Use::Older => vec![([&n0, &o0, &o0], "end-of-device copy")],
        }
    };
    for row in RECOVERY_CASES {
        for &j in row.journal {
            for (copies, from) in arrangements(row.superblock) {
                let mut dev = newest.clone();
                dev.poke(sb.primary_offset(sb.journal_start), &journal_in(j));
                dev.poke(0, copies[0]);
                dev.poke(sb.last_copy_offset(), copies[1]);
                dev.poke(sb.backup_offset(0), copies[2]);
                let what = format!("row {} journal {j:?} from {from}", row.markdown());
                let fs = match Fs::open(dev, OpenOptions::read_only()) {
                    Err(e) => {
                        assert_eq!(row.superblock, Use::Refuse, "{what}: {e}");
                        assert!(matches!(e, Error::NotDvrfs(_)), "{what}: {e}");
                        continue;
                    }
                    Ok(fs) => fs,
                };
                assert_ne!(row.superblock, Use::Refuse, "{what}");
                let report = fs.load_report();
                let last_txn = fs.engine().volume().superblock().last_txn;
                let (want_from, want_txn) = match (row.apply, row.superblock) {
                    (Apply::ImagesAndSuperblock, _) => ("journal", late_txn),
                    (_, Use::Older) => (from, older_sb.last_txn),
                    _ => (from, newest_sb.last_txn),
                };
                assert_eq!(report.superblock_from, want_from, "{what}");
                assert_eq!(last_txn, want_txn, "{what}");
                let replayed = row.apply != Apply::Nothing;
                assert_eq!(report.replayed_txn.is_some(), replayed, "{what}");
                assert_eq!(
                    fs.lookup(fs.root(), b"new").is_ok(),
                    replayed,
                    "{what}: the transaction's file"
                );
                assert_eq!(
                    report.journal_note.is_some(),
                    j == JournalHead::Mismatched,
                    "{what}"
                );
            }
        }
    }
}

/// fsck compares the two copies of the metadata in 1 MiB stretches of consecutive
/// blocks: a damaged backup copy is found wherever it falls in a stretch (first block,
/// last block, the first of the next stretch, the last block of an area).
#[test]
fn a_damaged_backup_copy_is_found_anywhere_in_a_bulk_comparison() {
    // 4 MiB blocks with 512 KiB checksum granules: 120 data blocks per checksum block,
    // so 128 GiB (sparse in memory) gives a checksum area of more than 256 blocks.
    let dev = formatted(128 << 30, 4 << 20, AllocPolicy::Zrr, 3);
    let sb = superblock(&dev);
    assert!(sb.sum_blocks > 258, "{} checksum blocks", sb.sum_blocks);
    let (s, e) = (sb.sum_start, sb.sum_start + sb.sum_blocks - 1);
    for n in [
        sb.data_bitmap_start,
        sb.inode_table_start,
        s,
        s + 255,
        s + 256,
        s + 257,
        e,
    ] {
        let mut bad = dev.clone();
        bad.poke(sb.backup_offset(n) + 200, &[0xA5; 4]);
        let (code, _, errors) = fsck_code(&bad, false);
        assert_eq!(code, 4, "block {n}: {errors:?}");
        assert_eq!(errors.len(), 1, "block {n}: {errors:?}");
        assert!(
            errors[0].contains(&format!("backup copy of metadata block {n} ")),
            "block {n}: {errors:?}"
        );
    }
    // A primary that verifies but differs from its backup (an interrupted checkpoint
    // would leave one): found in the middle of the checksum area too.
    let n = s + 256;
    let mut bad = dev.clone();
    let mut img = vec![0u8; META_BLOCK_BYTES];
    bad.peek(sb.primary_offset(n), &mut img);
    let mut h = parse_header(&img).unwrap();
    h.seq += 1;
    seal_block(&mut img, &h);
    bad.poke(sb.primary_offset(n), &img);
    let (code, _, errors) = fsck_code(&bad, false);
    assert_eq!(code, 4, "{errors:?}");
    assert!(
        errors
            .iter()
            .any(|e| e.contains(&format!("metadata block {n} (")) && e.contains("differs")),
        "{errors:?}"
    );
}

/// Rewrites bit `bit` of the data bitmap to `on` in both copies, resealed (damage no
/// checksum sees).
fn set_data_bitmap_bit(dev: &mut MemDevice, sb: &Superblock, block: u64, on: bool) {
    let per = dvrfs_core::alloc::BITS_PER_BITMAP_BLOCK;
    let n = sb.data_bitmap_start + block / per;
    for off in [sb.primary_offset(n), sb.backup_offset(n)] {
        let mut b = vec![0u8; META_BLOCK_BYTES];
        dev.peek(off, &mut b);
        let h = parse_header(&b).unwrap();
        let bit = block % per;
        let byte = &mut payload_mut(&mut b)[(bit / 8) as usize];
        match on {
            true => *byte |= 1 << (bit % 8),
            false => *byte &= !(1 << (bit % 8)),
        }
        seal_block(&mut b, &h);
        dev.write_at(off, &b).unwrap();
    }
}

/// A data block a file uses but the bitmap marks free would be handed out again (and
/// deleting the file would free it twice): the load finds it, every file still reads,
/// a writable open waits for the repair, which rebuilds the bitmap in one pass.
#[test]
fn a_used_block_the_bitmap_marks_free_is_found_before_it_is_handed_out() {
    let (dev, model) = populated();
    let sb = superblock(&dev);
    let fs = Fs::open(dev.clone(), OpenOptions::read_only()).unwrap();
    let big = fs.resolve("/big.ts").unwrap();
    let b = fs.runs(big).unwrap()[3].start;
    drop(fs);
    let mut bad = dev.clone();
    set_data_bitmap_bit(&mut bad, &sb, b, false);

    let fs = Fs::open(bad.clone(), OpenOptions::read_only()).unwrap();
    let problems = &fs.load_report().problems;
    assert!(
        problems.iter().any(|(i, why)| *i == Some(big)
            && why.contains(&format!("data block {b}, which its bitmap marks free"))),
        "{problems:?}"
    );
    drop(fs);
    let mut ro = Fs::open(bad.clone(), OpenOptions::read_only()).unwrap();
    assert_eq!(snapshot(&mut ro), model);
    drop(ro);
    let err = Fs::open(bad.clone(), OpenOptions::writable())
        .err()
        .expect("refused");
    assert!(err.to_string().contains("fsck --repair"), "{err}");
    let (code, _, errors) = fsck_code(&bad, false);
    assert_eq!(code, 4, "{errors:?}");
    let (code, fixed, errors) = fsck_code(&bad, true);
    assert_eq!(code, 1, "{errors:?}");
    let fixed = fixed.unwrap();
    assert_eq!(fsck_code(&fixed, false).0, 0);
    assert_eq!(snapshot(&mut open_rw(fixed)), model);
}
