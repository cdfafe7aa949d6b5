//! Structure-aware damage, bounded (issue 9): `dvrfs_core::fuzzing` damages one
//! metadata block of a populated volume per case (fields rewritten with both copies
//! resealed, so no checksum sees it) and checks the oracle: no panic, a read-only
//! open and a walk reading every file, and a `fsck --repair` that leaves a volume a
//! second `fsck` finds clean (one pass), unless it declines because two files claim
//! the same blocks (by design, docs/commands.md). A seeded xorshift picks the cases,
//! so a failure names its case and reproduces; `FUZZ_ITERS` runs more. The
//! coverage-guided run of the same oracle is `fuzz/` (`cargo +nightly fuzz run image`).

use dvrfs_core::fuzzing::{check, metadata_blocks, sample_volume, Damage, Outcome};

#[test]
fn damaged_metadata_never_panics_and_repairs_in_one_pass() {
    let base = sample_volume();
    let (sb, blocks) = metadata_blocks(&base);
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
        let (dev, n) = damage.apply(&base, &sb, &blocks);
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| check(&dev)));
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
