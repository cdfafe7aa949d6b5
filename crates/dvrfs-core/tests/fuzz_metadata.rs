//! Structure-aware damage, bounded (issue 9): `dvrfs_core::fuzzing` damages one
//! metadata block of a populated volume per case (fields rewritten with both copies
//! resealed, so no checksum sees it) and checks the oracle: no panic, a read-only
//! open and a walk reading every file, and a `fsck --repair` that leaves a volume a
//! second `fsck` finds clean (one pass), unless it declines because two files claim
//! the same blocks (by design, docs/commands.md). A seeded xorshift picks the cases,
//! so a failure names its case and reproduces; `FUZZ_ITERS` runs more. The
//! coverage-guided run of the same oracle is `fuzz/` (`cargo +nightly fuzz run image`).

use dvrfs_core::fuzzing::{Damage, Outcome, Samples};

#[test]
fn damaged_metadata_never_panics_and_repairs_in_one_pass() {
    let samples = Samples::get();
    let mut seed = 12345u64;
    let mut rnd = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let iters: u64 = std::env::var("FUZZ_ITERS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(2000);
    let (mut failed, mut repaired, mut shared) = (vec![], 0, 0);
    for it in 0..iters {
        let damage = Damage::random(&mut rnd);
        let (dev, n) = damage.apply(samples);
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| samples.check(&dev)));
        match r {
            Err(_) => failed.push(format!("case {it} (block {n}, {damage:?}): PANIC")),
            Ok(Outcome::Failed(why)) => {
                failed.push(format!("case {it} (block {n}, {damage:?}): {why}"))
            }
            Ok(Outcome::Repaired) => repaired += 1,
            Ok(Outcome::SharedBlocks) => shared += 1,
            Ok(Outcome::Clean) => {}
        }
    }
    eprintln!(
        "{iters} cases: {repaired} repaired in one pass, {shared} declined (shared blocks), {} failed",
        failed.len()
    );
    assert!(
        repaired > iters / 10,
        "the cases must reach what matters: {repaired} of {iters} found something"
    );
    assert!(failed.is_empty(), "{failed:#?}");
}

/// The crash sample's transaction replays (its changes are visible, the clean sample
/// has none of them), and a resealed edit to any block of it still replays: damage to
/// the journal reaches the loader instead of being dropped as a torn transaction.
#[test]
fn journal_damage_is_replayed_not_ignored() {
    use dvrfs_core::fuzzing::Edit;
    use dvrfs_core::{Fs, OpenOptions};
    let s = Samples::get();
    let fs = Fs::open(s.crash.clone(), OpenOptions::read_only()).unwrap();
    assert!(fs.load_report().replayed_txn.is_some());
    assert!(fs.resolve("/cam3/moved.ts").is_ok());
    assert!(fs.resolve("/cam2/seg005.ts").is_err());
    let fs = Fs::open(s.clean.clone(), OpenOptions::read_only()).unwrap();
    assert!(fs.resolve("/cam3").is_err());

    let journal: Vec<usize> = (0..s.blocks.len())
        .filter(|&i| s.sb.in_journal(s.blocks[i]))
        .collect();
    assert!(
        journal.len() >= 5,
        "descriptor, images, commit: {journal:?}"
    );
    for i in journal {
        let d = Damage {
            block: i as u32,
            reseal: true,
            edits: vec![Edit {
                at: 2000,
                kind: 0,
                value: 0x5a,
            }],
        };
        let (dev, n) = d.apply(s);
        let fs = Fs::open(dev.clone(), OpenOptions::read_only()).unwrap();
        assert!(
            fs.load_report().replayed_txn.is_some(),
            "journal block {n}: the resealed transaction was not replayed"
        );
        drop(fs);
        assert!(
            !matches!(s.check(&dev), Outcome::Failed(_)),
            "journal block {n}"
        );
    }
}

/// A whole transaction (its commit checksum holds) whose superblock image does not
/// fit the volume is not replayed: the volume opens as its last checkpoint left it,
/// fsck reports the transaction, and one repair clears it (the fuzzer's first find
/// with the journal in the damage set: such an image failed every open, and the
/// repair gave up).
#[test]
fn a_transaction_whose_superblock_image_does_not_fit_is_not_replayed() {
    use dvrfs_core::format::journal::reseal_transaction;
    use dvrfs_core::format::superblock::Superblock;
    use dvrfs_core::format::{parse_header, META_BLOCK_BYTES};
    use dvrfs_core::tools::fsck::fsck;
    use dvrfs_core::{Fs, OpenOptions};
    let s = Samples::get();
    let mb = META_BLOCK_BYTES;
    let journal: Vec<u64> = s
        .blocks
        .iter()
        .copied()
        .filter(|&n| s.sb.in_journal(n))
        .collect();
    let mut txn = vec![0u8; journal.len() * mb];
    s.crash.peek(s.sb.journal_start * mb as u64, &mut txn);
    let k = (0..journal.len())
        .find(|&k| parse_header(&txn[k * mb..(k + 1) * mb]).is_ok_and(|h| h.block_no == 0))
        .expect("the transaction holds the superblock");
    let img = &mut txn[k * mb..(k + 1) * mb];
    let seq = parse_header(img).unwrap().seq;
    let mut sb = Superblock::decode(img).unwrap();
    sb.commit_interval_ms += 1;
    img.copy_from_slice(&sb.encode(seq)[..]);
    reseal_transaction(&mut txn);
    let mut dev = s.crash.clone();
    dev.poke(s.sb.journal_start * mb as u64, &txn);

    let fs = Fs::open(dev.clone(), OpenOptions::read_only()).unwrap();
    let note = fs.load_report().journal_note.clone().expect("a note");
    assert!(note.contains("another volume layout"), "{note}");
    assert!(fs.load_report().replayed_txn.is_none());
    assert!(fs.resolve("/cam3").is_err(), "the last checkpoint's state");
    assert!(fs.resolve("/cam2/seg005.ts").is_ok());
    drop(fs);
    let (r, _) = fsck(dev.clone(), false, &mut |_, _| {}).unwrap();
    assert_eq!(r.exit_code(), 4, "{:?}", r.errors);
    assert!(
        r.errors[0].starts_with("journal: transaction"),
        "{:?}",
        r.errors
    );
    let (r, fixed) = fsck(dev, true, &mut |_, _| {}).unwrap();
    assert_eq!(r.exit_code(), 1, "{:?}", r.errors);
    let (again, _) = fsck(fixed.unwrap(), false, &mut |_, _| {}).unwrap();
    assert_eq!(again.exit_code(), 0, "{:?}", again.errors);
}
