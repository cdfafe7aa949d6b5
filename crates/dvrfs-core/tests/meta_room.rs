//! The dynamic metadata area (issue 22 item 9): short symlink targets live in their
//! inode records and take no dynamic block, and directories and long symlinks may not
//! take the blocks kept for the block maps of files, so a file always grows past its
//! six inline runs while the data area has room.

mod common;

use common::*;
use dvrfs_core::device::{CrashDevice, CrashMode, MemDevice};
use dvrfs_core::format::inode::MAX_INLINE_TARGET_BYTES;
use dvrfs_core::format::superblock::{
    AllocPolicy, Superblock, FEATURE_INLINE_SYMLINKS, KNOWN_FEATURES,
};
use dvrfs_core::format::{parse_header, payload_mut, seal_block, META_BLOCK_BYTES};
use dvrfs_core::tools::fsck::fsck;
use dvrfs_core::{Error, Fs, OpenOptions};

const MB: u64 = META_BLOCK_BYTES as u64;
const BLOCK: u64 = 64 << 10;
/// Where an inode record starts in its inode-table block, and its size field.
const RECORD_BASE: usize = 48;
const INODE_BYTES: usize = 256;
const I_SIZE: usize = 16;

/// 128 MiB of 64 KiB blocks, ZRR (several zones: one run per block of a file), 2,048
/// inodes: a dynamic area of 256 + 256 + 43 (frame indexes: 128 MiB / 3 MiB) + 17 =
/// 572 blocks.
fn small_volume() -> MemDevice {
    formatted_with(128 << 20, BLOCK, AllocPolicy::Zrr, 3, |p| {
        p.inodes = Some(2048)
    })
}

fn superblock(dev: &MemDevice) -> Superblock {
    let mut b = vec![0u8; META_BLOCK_BYTES];
    dev.peek(0, &mut b);
    Superblock::decode(&b).unwrap()
}

/// Makes `dev` look like a volume made before inline symlinks.
fn without_inline_symlinks(dev: &mut MemDevice) {
    let mut sb = superblock(dev);
    sb.features &= !FEATURE_INLINE_SYMLINKS;
    let image = sb.encode(0);
    for off in [0, sb.backup_offset(0), sb.device_bytes - MB] {
        dev.poke(off, &image[..]);
    }
}

/// A target longer than an inode record holds; `i` makes it unique.
fn long_target(i: usize) -> Vec<u8> {
    format!("/cam1/{}/{i:05}.ts", "x".repeat(200)).into_bytes()
}

/// Writes `blocks` blocks to a new file `name` and checks that they read back.
fn write_fragmented(fs: &mut Fs<MemDevice>, name: &[u8], blocks: u64) {
    let ino = fs.create(fs.root(), name, 0o644, 0, 0, 9).unwrap();
    let want = pattern(7, (blocks * BLOCK) as usize);
    for (k, chunk) in want.chunks(1 << 20).enumerate() {
        fs.write(ino, k as u64 * (1 << 20), chunk, 10)
            .unwrap_or_else(|e| panic!("write at {} MiB: {e}", k));
    }
    let runs = fs.stat(ino).unwrap().runs;
    assert!(
        runs as u64 > blocks / 2,
        "ZRR fragments the file: {runs} runs"
    );
    let mut got = vec![0u8; want.len()];
    assert_eq!(fs.read(ino, 0, &mut got).unwrap(), want.len());
    assert!(got == want, "the file reads back as written");
}

#[test]
fn long_symlinks_stop_at_the_reserve_and_a_fragmented_file_still_grows() {
    let mut fs = open_rw(small_volume());
    let root = fs.root();
    let total = fs.superblock().dynamic_blocks;
    let mut made = 0;
    let err = loop {
        match fs.symlink(
            root,
            format!("l{made}").as_bytes(),
            &long_target(made),
            0,
            0,
            1,
        ) {
            Ok(_) => made += 1,
            Err(e) => break e,
        }
        assert!(made < total as usize, "the area has {total} blocks");
    };
    assert!(matches!(err, Error::NamesFull { .. }), "{err:?}");
    assert_eq!(err.errno(), 28, "ENOSPC");
    let msg = err.to_string();
    assert!(msg.starts_with("the metadata area is full: "), "{msg}");
    assert!(msg.contains("kept for the block maps of files"), "{msg}");
    let room = fs.meta_room();
    eprintln!("{made} long symlinks; {room:?}");
    assert!(room.is_names_limit());
    assert_eq!(fs.names_left(), 0);
    assert!(room.reserve_blocks >= fs.map_reserve_blocks().min(room.total_blocks));
    // Nothing half-made: the failed link has no name.
    assert!(fs.lookup(root, format!("l{made}").as_bytes()).is_err());
    // Short links still fit (they need no block while the directory has room).
    fs.symlink(root, b"short", b"/cam1/a.ts", 0, 0, 2).unwrap();
    // 1,200 blocks of ZRR: about 1,200 runs, 5 run blocks in extents of 1, 2 and 4.
    write_fragmented(&mut fs, b"big.ts", 1200);
    for i in (0..made).step_by(97) {
        let l = fs.lookup(root, format!("l{i}").as_bytes()).unwrap();
        assert_eq!(fs.readlink(l).unwrap(), long_target(i));
    }
    let dev = fs.close().unwrap();
    assert_fsck_clean(&dev);
}

#[test]
fn directories_stop_at_the_reserve_and_a_fragmented_file_still_grows() {
    let mut fs = open_rw(small_volume());
    let mut parent = fs.root();
    let mut made = 0u64;
    let err = loop {
        // Each level is a non-empty directory: one directory block each.
        match fs.mkdir(parent, format!("d{made}").as_bytes(), 0o755, 0, 0, 1) {
            Ok(d) => {
                parent = d;
                made += 1;
            }
            Err(e) => break e,
        }
        assert!(made < 2000);
    };
    assert!(matches!(err, Error::NamesFull { .. }), "{err:?}");
    eprintln!("{made} nested directories; {:?}", fs.meta_room());
    write_fragmented(&mut fs, b"big.ts", 1200);
    let dev = fs.close().unwrap();
    assert_fsck_clean(&dev);
}

#[test]
fn short_symlinks_take_no_dynamic_block_and_survive_a_reopen() {
    let mut fs = open_rw(small_volume());
    let root = fs.root();
    let total = fs.superblock().dynamic_blocks;
    let before = fs.meta_room().used_blocks;
    let n = total as usize + 500;
    let target = |i: usize| format!("cam{}/2026-11-27/seg{i:05}.ts", i % 16).into_bytes();
    for i in 0..n {
        fs.symlink(root, format!("l{i:05}").as_bytes(), &target(i), 0, 0, 1)
            .unwrap();
    }
    let longest = vec![b'a'; MAX_INLINE_TARGET_BYTES];
    let l = fs.symlink(root, b"longest", &longest, 0, 0, 1).unwrap();
    assert_eq!(fs.stat(l).unwrap().runs, 0, "an inline link has no run");
    // Only the root directory's blocks: 12-byte entries, 340 to a block.
    let used = fs.meta_room().used_blocks - before;
    assert!(
        used <= (n as u64).div_ceil(300) + 1,
        "{used} blocks for {n} links"
    );
    let dev = fs.close().unwrap();
    assert_fsck_clean(&dev);
    let check = |fs: &Fs<MemDevice>| {
        for i in 0..n {
            let l = fs.lookup(fs.root(), format!("l{i:05}").as_bytes()).unwrap();
            assert_eq!(fs.readlink(l).unwrap(), target(i));
        }
        let l = fs.lookup(fs.root(), b"longest").unwrap();
        assert_eq!(fs.readlink(l).unwrap(), longest);
    };
    let fs = Fs::open(dev.clone(), OpenOptions::read_only()).unwrap();
    check(&fs);
    // A path-only open (stat, ls) reads the target from the record too.
    let fs = Fs::open(dev.clone(), OpenOptions::listing(&["/".into()])).unwrap();
    check(&fs);
    // Removing them frees their inodes and takes no block back (none was taken).
    let mut fs = open_rw(dev);
    for i in 0..n {
        fs.unlink(fs.root(), format!("l{i:05}").as_bytes(), 3)
            .unwrap();
    }
    let dev = fs.close().unwrap();
    assert_fsck_clean(&dev);
}

/// An inline link's record reaches the disk through the journal: a power cut at any
/// write after the link was made leaves either no link or the whole link.
#[test]
fn an_inline_symlink_survives_journal_replay_at_every_cut() {
    let image = small_volume();
    let run = |cut: Option<u64>| {
        let mut dev = CrashDevice::new(image.clone(), CrashMode::InOrderTorn, 5);
        if let Some(k) = cut {
            dev.crash_after_writes(k);
        }
        let mut fs = Fs::open(dev, OpenOptions::writable()).unwrap();
        let root = fs.root();
        let r = fs
            .symlink(root, b"latest", b"cam1/seg0412.ts", 0, 0, 1)
            .and_then(|_| fs.sync());
        match cut {
            None => {
                r.unwrap();
                let writes = fs.device().writes;
                fs.close().unwrap();
                (writes, None)
            }
            Some(_) => (0, Some(fs.crash().crash_image().expect("the cut happened"))),
        }
    };
    let (writes, _) = run(None);
    assert!(writes > 3, "{writes} writes");
    let mut replayed = 0;
    for k in 0..writes {
        let img = run(Some(k)).1.unwrap();
        assert_fsck_clean(&img);
        let fs = open_rw(img);
        match fs.lookup(fs.root(), b"latest") {
            Ok(l) => {
                assert_eq!(fs.readlink(l).unwrap(), b"cam1/seg0412.ts");
                replayed += fs.load_report().replayed_txn.is_some() as u32;
            }
            Err(Error::NotFound(_)) => {}
            Err(e) => panic!("cut at write {k}: {e}"),
        }
    }
    assert!(
        replayed > 0,
        "some cut fell between the commit and the checkpoint"
    );
}

#[test]
fn a_volume_made_before_inline_symlinks_keeps_block_symlinks() {
    let mut dev = small_volume();
    without_inline_symlinks(&mut dev);
    let mut fs = open_rw(dev);
    assert!(!fs.superblock().has_inline_symlinks());
    let root = fs.root();
    let before = fs.meta_room().used_blocks;
    let l = fs
        .symlink(root, b"latest", b"cam1/seg.ts", 0, 0, 1)
        .unwrap();
    assert_eq!(fs.stat(l).unwrap().runs, 1, "the target has its block");
    assert_eq!(
        fs.meta_room().used_blocks,
        before + 2,
        "the link's and the root's"
    );
    let dev = fs.close().unwrap();
    assert_eq!(superblock(&dev).features & FEATURE_INLINE_SYMLINKS, 0);
    assert_fsck_clean(&dev);
    let fs = Fs::open(dev, OpenOptions::read_only()).unwrap();
    let l = fs.lookup(fs.root(), b"latest").unwrap();
    assert_eq!(fs.readlink(l).unwrap(), b"cam1/seg.ts");
}

/// Sets inode `ino`'s size field in both copies of its inode-table block, resealed:
/// damage only the length check can catch.
fn set_size(dev: &mut MemDevice, ino: u32, size: u64) {
    let sb = superblock(dev);
    let n = sb.inode_table_start + ino as u64 / 15;
    let at = RECORD_BASE + INODE_BYTES * (ino as usize % 15) + I_SIZE;
    for off in [n * MB, sb.backup_offset(n)] {
        let mut b = vec![0u8; META_BLOCK_BYTES];
        dev.peek(off, &mut b);
        let h = parse_header(&b).unwrap();
        b[at..at + 8].copy_from_slice(&size.to_le_bytes());
        seal_block(&mut b, &h);
        dev.poke(off, &b);
    }
}

#[test]
fn fsck_reports_an_inline_symlink_of_a_bad_length_and_removes_it() {
    let mut fs = open_rw(small_volume());
    let root = fs.root();
    let l = fs
        .symlink(root, b"latest", b"cam1/seg.ts", 0, 0, 1)
        .unwrap();
    let dev = fs.close().unwrap();
    for size in [0, MAX_INLINE_TARGET_BYTES as u64 + 1, u64::MAX] {
        let mut bad = dev.clone();
        set_size(&mut bad, l, size);
        let (r, _) = fsck(bad.clone(), false, &mut |_, _| {}).unwrap();
        assert!(!r.clean(), "size {size}");
        assert!(
            r.errors
                .iter()
                .any(|e| e.contains(&format!("symlink inode {l}")) && e.contains("inline target")),
            "size {size}: {:?}",
            r.errors
        );
        let (r, fixed) = fsck(bad, true, &mut |_, _| {}).unwrap();
        assert!(r.repaired > 0, "{:?}", r.errors);
        let fixed = fixed.expect("repaired");
        assert_fsck_clean(&fixed);
        let fs = Fs::open(fixed, OpenOptions::read_only()).unwrap();
        assert!(fs.lookup(fs.root(), b"latest").is_err(), "the link is gone");
    }
}

/// What a build older than inline symlinks does with a new volume: a feature bit it
/// does not know makes every superblock copy malformed, so it refuses the volume
/// rather than read inline links as links without a target. (Checked here with the
/// lowest bit this build does not know.)
#[test]
fn a_feature_bit_the_build_does_not_know_refuses_the_volume() {
    let mut dev = small_volume();
    let sb = superblock(&dev);
    assert!(sb.has_inline_symlinks(), "mkfs sets the bit");
    // `encode` refuses a superblock that fails validation (as one with an unknown
    // feature bit does), so the bit goes into the bytes: `features` is at payload
    // offset 216 (FORMAT.md section 5), and the block is resealed.
    let mut image = sb.encode(0).to_vec();
    let h = parse_header(&image).unwrap();
    let field = &mut payload_mut(&mut image)[216..220];
    let features = u32::from_le_bytes(field.try_into().unwrap());
    assert_eq!(features, sb.features, "the field's offset");
    let unknown = 1u32 << KNOWN_FEATURES.trailing_ones();
    assert_eq!(unknown & KNOWN_FEATURES, 0);
    field.copy_from_slice(&(features | unknown).to_le_bytes());
    seal_block(&mut image, &h);
    for off in [0, sb.backup_offset(0), sb.device_bytes - MB] {
        dev.poke(off, &image[..]);
    }
    let err = Fs::open(dev, OpenOptions::read_only())
        .err()
        .expect("refused");
    assert!(err.to_string().contains("feature bits"), "{err}");
}
