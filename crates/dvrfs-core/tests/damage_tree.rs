//! Damage to the directory tree that no checksum sees (entries edited and resealed):
//! what a load makes of it must not depend on anything but the bytes on the disk.

mod common;

use common::damage::{edit_block, superblock};
use common::*;
use dvrfs_core::format::dir::{decode_dir, encode_dir, Kind};
use dvrfs_core::format::superblock::AllocPolicy;
use dvrfs_core::format::{payload, payload_mut};
use dvrfs_core::tools::fsck::fsck;
use dvrfs_core::{Fs, OpenOptions};

/// Two directories name one directory (issue 23: the parent used to be whichever of
/// them a `HashMap` yielded last, so it changed with the hash seed). The rule
/// (FORMAT.md section 13): the lowest-numbered directory naming it is its parent, at
/// every open; fsck keeps that name and removes the other.
#[test]
fn a_directory_two_directories_name_has_the_lowest_numbered_one_as_parent() {
    let mut fs = open_rw(formatted(40 << 20, 64 << 10, AllocPolicy::Zrr, 9));
    let root = fs.root();
    let a = fs.mkdir(root, b"a", 0o755, 0, 0, 1).unwrap();
    let b = fs.mkdir(root, b"b", 0o755, 0, 0, 1).unwrap();
    assert!(a < b);
    // x is made in the higher-numbered directory, so the rule, not where x was
    // made, decides: its parent becomes `a`.
    let x = fs.mkdir(b, b"x", 0o755, 0, 0, 2).unwrap();
    let y = fs.mkdir(a, b"y", 0o755, 0, 0, 2).unwrap();
    let a_block = fs.runs(a).unwrap()[0].start;
    let mut dev = fs.close().unwrap();
    // a's entry "y" now names x.
    let sb = superblock(&dev);
    edit_block(&mut dev, &sb, a_block, |blk| {
        let mut entries = decode_dir(payload(blk)).unwrap();
        assert_eq!(entries, vec![(b"y".to_vec(), y, Kind::Dir)]);
        entries[0].1 = x;
        let view: Vec<(&[u8], u32, Kind)> =
            entries.iter().map(|(n, i, k)| (&n[..], *i, *k)).collect();
        encode_dir(&view, payload_mut(blk));
    });
    // Each open builds its maps with a new hash seed: 32 opens would have met both
    // orders (the chance that all 32 pick the same one is 2^-31).
    for run in 0..32 {
        let fs = Fs::open(dev.clone(), OpenOptions::read_only()).unwrap();
        assert_eq!(fs.parent(x), Some(a), "open {run}: x's parent");
        assert_eq!(fs.resolve("/a/y").unwrap(), x, "open {run}");
        assert_eq!(fs.resolve("/b/x/..").unwrap(), a, "open {run}: /b/x/..");
        assert_eq!(fs.resolve("/a/y/..").unwrap(), a, "open {run}: /a/y/..");
    }
    // fsck keeps the name in the lowest-numbered directory and removes b's.
    let (report, fixed) = fsck(dev, true, &mut |_, _| {}).unwrap();
    let fixed = fixed.unwrap_or_else(|| panic!("repair gave up: {:?}", report.errors));
    let (again, _) = fsck(fixed.clone(), false, &mut |_, _| {}).unwrap();
    assert_eq!(again.exit_code(), 0, "{:?}", again.errors);
    let fs = Fs::open(fixed, OpenOptions::read_only()).unwrap();
    assert_eq!(fs.resolve("/a/y").unwrap(), x);
    assert!(fs.resolve("/b/x").is_err(), "b's name for x is removed");
    assert_eq!(fs.parent(x), Some(a));
}
