//! Coverage-guided damage of a populated volume's metadata (issue 9): every input is a
//! `dvrfs_core::fuzzing::Damage` (which block, which fields, resealed or torn), and
//! every case must pass the same oracle as the seeded test `tests/fuzz_metadata.rs`:
//! no panic, and a repair that finishes in one pass (or declines shared blocks).
//! Run: `cargo +nightly fuzz run image fuzz/corpus/image` (see docs/fuzzing.md).
#![no_main]

use dvrfs_core::fuzzing::{Damage, Outcome, Samples};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let samples = Samples::get();
    let damage = Damage::from_bytes(data);
    let (dev, n) = damage.apply(samples);
    if let Outcome::Failed(why) = samples.check(&dev) {
        panic!("block {n}, {damage:?}: {why}");
    }
});
