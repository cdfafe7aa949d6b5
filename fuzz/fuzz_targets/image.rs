//! Coverage-guided damage of a populated volume's metadata (issue 9): every input is a
//! `dvrfs_core::fuzzing::Damage` (which block, which fields, resealed or torn), and
//! every case must pass the same oracle as the seeded test `tests/fuzz_metadata.rs`:
//! no panic, and a repair that finishes in one pass (or declines shared blocks).
//! Run: `cargo +nightly fuzz run image fuzz/corpus/image` (see docs/fuzzing.md).
#![no_main]

use std::sync::OnceLock;

use dvrfs_core::device::MemDevice;
use dvrfs_core::format::superblock::Superblock;
use dvrfs_core::fuzzing::{check, metadata_blocks, sample_volume, Damage, Outcome};
use libfuzzer_sys::fuzz_target;

struct Base {
    dev: MemDevice,
    sb: Superblock,
    blocks: Vec<u64>,
}

fn base() -> &'static Base {
    static BASE: OnceLock<Base> = OnceLock::new();
    BASE.get_or_init(|| {
        let dev = sample_volume();
        let (sb, blocks) = metadata_blocks(&dev);
        Base { dev, sb, blocks }
    })
}

fuzz_target!(|data: &[u8]| {
    let b = base();
    let damage = Damage::from_bytes(data);
    let (dev, n) = damage.apply(&b.dev, &b.sb, &b.blocks);
    if let Outcome::Failed(why) = check(&dev) {
        panic!("block {n}, {damage:?}: {why}");
    }
});
