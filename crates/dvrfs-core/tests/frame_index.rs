//! The frame index as stored (FORMAT.md section 10c, `volume/frame_index.rs`): kept
//! across opens in the shape the placement defines, cut with its file, freed with
//! it, refused when out of order, dropped and flagged when its bytes are rewritten,
//! what a crash leaves of it, damage that fsck repairs, and older volumes.

mod common;

use common::damage::{edit_block, repair_once, superblock};
use common::{assert_fsck_clean, formatted, open_rw};
use dvrfs_core::device::MemDevice;
use dvrfs_core::format::frame_index::FrameEntry;
use dvrfs_core::format::superblock::{AllocPolicy, FEATURE_FRAME_INDEX};
use dvrfs_core::format::{payload_mut, PAYLOAD_BYTES};
use dvrfs_core::tools::fsck::fsck;
use dvrfs_core::volume::frame_index_shape;
use dvrfs_core::{Error, Fs, OpenOptions};

const GOP: u64 = 64 << 10;
const T0: i64 = 1_795_000_000_000_000_000;

/// Keyframe `i` of a recording with one GOP of 64 KiB every 2 s, its keyframe the
/// GOP's first 20 KiB.
fn key(i: u64) -> FrameEntry {
    FrameEntry {
        offset: i * GOP,
        data_delta: 0,
        len: 20 << 10,
        number: (i * 50) as u32,
        flags: 0,
        pts_90k: i as i64 * 180_000,
        utc_ns: T0 + i as i64 * 2_000_000_000,
    }
}

fn keys(from: u64, to: u64) -> Vec<FrameEntry> {
    (from..to).map(key).collect()
}

/// A recording of `gops` GOPs of zeros with its keyframes indexed, in batches as
/// a recorder would append them.
fn recorded(fs: &mut Fs<MemDevice>, name: &[u8], gops: u64) -> u32 {
    let root = fs.root();
    let f = fs.create(root, name, 0o644, 0, 0, 1).unwrap();
    let chunk = 400u64;
    let mut i = 0;
    while i < gops {
        let n = chunk.min(gops - i);
        fs.write(f, i * GOP, &vec![0u8; (n * GOP) as usize], 2)
            .unwrap();
        fs.append_frames(f, &keys(i, i + n), 3).unwrap();
        i += n;
    }
    f
}

fn volume() -> MemDevice {
    formatted(2 << 30, 4 << 20, AllocPolicy::Zrr, 7)
}

#[test]
fn an_index_is_kept_across_opens_in_its_placed_shape_and_fsck_finds_it_clean() {
    let mut fs = open_rw(volume());
    // One leaf, two levels, three levels (past 101 x 126 keyframes).
    let small = recorded(&mut fs, b"small.ts", 7);
    let mid = recorded(&mut fs, b"mid.ts", 5_000);
    let big = recorded(&mut fs, b"big.ts", 13_000);
    let used_before_close = fs.engine().volume().meta_room().used_blocks;
    fs.sync().unwrap();
    let dev = fs.close().unwrap();
    assert_fsck_clean(&dev);
    let fs = Fs::open(dev, OpenOptions::read_only()).unwrap();
    for (f, n) in [(small, 7u64), (mid, 5_000), (big, 13_000)] {
        let ix = fs.frame_index(f).unwrap().expect("indexed");
        assert_eq!(ix.entries(), &keys(0, n)[..], "inode {f}");
        let info = fs.frame_info(f).unwrap();
        let shape = frame_index_shape(n as usize);
        assert_eq!(info.blocks, shape.iter().sum::<usize>() as u64);
        assert!(info.complete);
        assert_eq!(info.last, Some(key(n - 1)));
    }
    assert_eq!(frame_index_shape(13_000), [129, 2, 1]);
    assert_eq!(
        fs.engine().volume().meta_room().used_blocks,
        used_before_close,
        "every index block is owned again after the open"
    );
    // Lookups through the index: the keyframe at or before a frame and a moment.
    let ix = fs.frame_index(big).unwrap().unwrap();
    assert_eq!(ix.at_or_before_frame(9_000 * 50 + 49).unwrap(), &key(9_000));
    assert_eq!(
        ix.at_or_before_utc(T0 + 12_345 * 2_000_000_000 + 1)
            .unwrap(),
        &key(12_345)
    );
    assert_eq!(ix.at_or_after_utc(T0 + 1).unwrap(), &key(1));
}

#[test]
fn a_cut_keeps_the_keyframes_whose_bytes_remain_and_a_removal_frees_every_block() {
    let mut fs = open_rw(volume());
    // The root's first directory block, taken before the count.
    fs.create(fs.root(), b"x", 0o644, 0, 0, 1).unwrap();
    let empty = fs.engine().volume().meta_room().used_blocks;
    let f = recorded(&mut fs, b"rec.ts", 13_000);
    // Cut inside keyframe 200's bytes: 200 keyframes remain, in two leaves.
    fs.truncate(f, 200 * GOP + 100, 4).unwrap();
    assert_eq!(fs.frame_info(f).unwrap().keyframes, 200);
    assert_eq!(fs.frame_info(f).unwrap().blocks, 3);
    fs.sync().unwrap();
    let dev = fs.close().unwrap();
    assert_fsck_clean(&dev);
    let mut fs = open_rw(dev);
    assert_eq!(
        fs.frame_index(f).unwrap().unwrap().entries(),
        &keys(0, 200)[..]
    );
    // Bytes appended by a writer the engine did not follow (this open did not see
    // the file written from its start): the index is flagged, the keyframes stay.
    fs.write(f, 200 * GOP, &vec![0u8; (10 * GOP) as usize], 5)
        .unwrap();
    let info = fs.frame_info(f).unwrap();
    assert_eq!((info.keyframes, info.complete), (200, false));
    // Rebuilt whole, as a reindex does.
    fs.drop_frame_index(f, false, 6).unwrap();
    fs.append_frames(f, &keys(0, 210), 6).unwrap();
    assert_eq!(fs.frame_info(f).unwrap().keyframes, 210);
    let root = fs.root();
    fs.unlink(root, b"rec.ts", 7).unwrap();
    fs.sync().unwrap();
    assert_eq!(
        fs.engine().volume().meta_room().used_blocks,
        empty,
        "the index's blocks went with the file"
    );
    assert_fsck_clean(&fs.close().unwrap());
}

#[test]
fn an_append_out_of_order_or_past_the_data_is_refused_whole() {
    let mut fs = open_rw(volume());
    let f = recorded(&mut fs, b"rec.ts", 10);
    let refused = |r: Result<(), Error>| match r {
        Err(Error::InvalidArgument(why)) => why,
        other => panic!("not refused: {other:?}"),
    };
    // A batch whose second keyframe goes back: none of it is kept.
    let mut batch = vec![key(10), key(9)];
    fs.write(f, 10 * GOP, &vec![0u8; (GOP) as usize], 2)
        .unwrap();
    let why = refused(fs.append_frames(f, &batch, 3));
    assert!(why.contains("after one at"), "{why}");
    assert_eq!(fs.frame_info(f).unwrap().keyframes, 10);
    // Past the bytes applied so far.
    batch = vec![key(11)];
    let why = refused(fs.append_frames(f, &batch, 3));
    assert!(why.contains("past the file's size"), "{why}");
    // UTC going back.
    let mut back = key(10);
    back.utc_ns = key(3).utc_ns;
    let why = refused(fs.append_frames(f, &[back], 3));
    assert!(why.contains("UTC"), "{why}");
    fs.append_frames(f, &[key(10)], 3).unwrap();
    assert_eq!(fs.frame_info(f).unwrap().keyframes, 11);
}

#[test]
fn rewriting_indexed_bytes_cuts_the_index_and_flags_it_until_a_reindex() {
    let mut fs = open_rw(volume());
    let f = recorded(&mut fs, b"rec.ts", 300);
    // Bytes after the last keyframe's: no keyframe goes (the engine, which did not
    // write them as the next append, flags the index: tests/live_index.rs).
    fs.write(f, 299 * GOP + (40 << 10), &[1u8; 100], 4).unwrap();
    assert_eq!(fs.frame_info(f).unwrap().keyframes, 300);
    // Inside keyframe 120: it and every later one go, and the index is incomplete.
    fs.write(f, 120 * GOP + 10, &[1u8; 100], 5).unwrap();
    let info = fs.frame_info(f).unwrap();
    assert_eq!((info.keyframes, info.complete), (120, false));
    assert!(fs.append_frames(f, &keys(120, 121), 6).is_err());
    fs.sync().unwrap();
    let dev = fs.close().unwrap();
    assert_fsck_clean(&dev);
    let mut fs = open_rw(dev);
    assert!(
        !fs.frame_info(f).unwrap().complete,
        "the flag is on the disk"
    );
    // A reindex: drop with the flag cleared, append from the start.
    fs.drop_frame_index(f, false, 7).unwrap();
    assert_eq!(fs.frame_info(f).unwrap().keyframes, 0);
    fs.append_frames(f, &keys(0, 300), 8).unwrap();
    let info = fs.frame_info(f).unwrap();
    assert_eq!((info.keyframes, info.complete), (300, true));
    fs.sync().unwrap();
    assert_fsck_clean(&fs.close().unwrap());
}

#[test]
fn after_a_crash_the_index_covers_exactly_the_committed_data() {
    let mut fs = open_rw(volume());
    let f = recorded(&mut fs, b"rec.ts", 150);
    fs.sync().unwrap();
    // More data and keyframes, applied but not committed: the crash image is the
    // device as it is now (the data is there, the commit is not).
    fs.write(f, 150 * GOP, &vec![0u8; (100 * GOP) as usize], 9)
        .unwrap();
    fs.append_frames(f, &keys(150, 250), 10).unwrap();
    let crashed = fs.engine().volume().frame_info(f).unwrap();
    assert_eq!(crashed.keyframes, 250);
    let dev = fs.crash();
    let fs = open_rw(dev);
    assert_eq!(fs.stat(f).unwrap().size_bytes, 150 * GOP);
    assert_eq!(
        fs.frame_index(f).unwrap().unwrap().entries(),
        &keys(0, 150)[..]
    );
    assert_fsck_clean(&fs.close().unwrap());
}

#[test]
fn a_damaged_index_is_reported_and_fsck_drops_it_flagging_the_file() {
    let mut fs = open_rw(volume());
    let f = recorded(&mut fs, b"rec.ts", 500);
    let other = recorded(&mut fs, b"other.ts", 50);
    fs.sync().unwrap();
    let mut dev = fs.close().unwrap();
    let sb = superblock(&dev);
    // The root is a branch; its first child a leaf. Swap two entries' offsets in
    // that leaf, resealed: only the loader's order check sees it.
    let root = {
        let fs = Fs::open(dev.clone(), OpenOptions::read_only()).unwrap();
        fs.stat(f).unwrap();
        let info = fs.frame_info(f).unwrap();
        assert_eq!(info.blocks, 6);
        info.root
    };
    let mut leaf = 0u64;
    let mut root_img = vec![0u8; 4096];
    dev.peek(root * 4096, &mut root_img);
    if let dvrfs_core::format::frame_index::IndexBlock::Branch { children, .. } =
        dvrfs_core::format::frame_index::decode(dvrfs_core::format::payload(&root_img)).unwrap()
    {
        leaf = u64::from(children[0].block);
    }
    assert_ne!(leaf, 0, "the root is a branch");
    edit_block(&mut dev, &sb, leaf, |b| {
        let p = payload_mut(b);
        assert_eq!(p.len(), PAYLOAD_BYTES);
        // Entry 1's offset (payload 8 + 40) set below entry 0's.
        p[48..56].copy_from_slice(&0u64.to_le_bytes());
    });
    match Fs::open(dev.clone(), OpenOptions::writable()) {
        Err(e) => assert!(e.to_string().contains("fsck"), "{e}"),
        Ok(_) => panic!("a writable open of a damaged index was allowed"),
    }
    let (report, _) = fsck(dev.clone(), false, &mut |_, _| {}).unwrap();
    assert!(
        report
            .errors
            .iter()
            .any(|e| e.contains("frame index is damaged")),
        "{:?}",
        report.errors
    );
    let (_, _, fixed) = repair_once(dev, "damaged frame index");
    let mut fs = open_rw(fixed);
    let info = fs.frame_info(f).unwrap();
    assert_eq!((info.keyframes, info.complete), (0, false));
    assert_eq!(
        fs.frame_info(other).unwrap().keyframes,
        50,
        "the other file's index stands"
    );
    assert_eq!(fs.stat(f).unwrap().size_bytes, 500 * GOP, "the data stands");
    fs.drop_frame_index(f, false, 1).unwrap();
    fs.append_frames(f, &keys(0, 500), 2).unwrap();
    fs.sync().unwrap();
    assert_fsck_clean(&fs.close().unwrap());
}

#[test]
fn a_volume_made_before_frame_indexes_gains_the_feature_with_its_first_index() {
    let mut dev = volume();
    let mut sb = superblock(&dev);
    sb.features &= !FEATURE_FRAME_INDEX;
    let image = sb.encode(0);
    for off in [0, sb.backup_offset(0), sb.device_bytes - 4096] {
        dev.poke(off, &image[..]);
    }
    let mut fs = open_rw(dev);
    let plain = fs.create(fs.root(), b"plain.ts", 0o644, 0, 0, 1).unwrap();
    fs.write(plain, 0, &[0u8; 4096], 1).unwrap();
    fs.sync().unwrap();
    let dev = fs.close().unwrap();
    assert_eq!(
        superblock(&dev).features & FEATURE_FRAME_INDEX,
        0,
        "not without an index"
    );
    let mut fs = open_rw(dev);
    recorded(&mut fs, b"rec.ts", 20);
    fs.sync().unwrap();
    let dev = fs.close().unwrap();
    assert_ne!(superblock(&dev).features & FEATURE_FRAME_INDEX, 0);
    assert_fsck_clean(&dev);
}

#[test]
fn a_default_volume_has_index_room_for_a_chunk_in_every_data_block() {
    // 4 GiB of 4 MiB blocks, default inodes: a chunk per data block (a minute at
    // 530 kbit/s), each with a one-leaf index, in stream directories of 60. Before
    // the dynamic area had an index share (256 + one block per 8 inodes for names
    // and indexes), the 364th index found no room.
    let mut fs = open_rw(volume_of(4 << 30));
    let data_blocks = fs.superblock().data_blocks;
    let root = fs.root();
    let mut dir = root;
    let mut made = 0u64;
    loop {
        if made.is_multiple_of(60) {
            match fs.mkdir(root, format!("cam{made}").as_bytes(), 0o755, 0, 0, 1) {
                Ok(d) => dir = d,
                Err(e) => panic!("directory after {made} chunks: {e}"),
            }
        }
        let f = match fs.create(dir, format!("{made:05}.ts").as_bytes(), 0o644, 0, 0, 1) {
            Ok(f) => f,
            Err(Error::NoInodes(_)) => break,
            Err(e) => panic!("chunk {made}: {e}"),
        };
        match fs.write(f, 0, &[0u8; 4096], 2) {
            Ok(()) => {}
            Err(Error::NoSpace { .. }) => break,
            Err(e) => panic!("chunk {made}: {e}"),
        }
        fs.append_frames(f, &[FrameEntry { len: 100, ..key(0) }], 3)
            .unwrap_or_else(|e| panic!("chunk {made}'s index: {e}"));
        assert_eq!(fs.frame_info(f).unwrap().keyframes, 1, "chunk {made}");
        made += 1;
    }
    // Every data block (less the directories' inodes) holds an indexed chunk.
    assert!(
        made + 30 >= data_blocks,
        "{made} chunks of {data_blocks} blocks"
    );
    fs.sync().unwrap();
    assert_fsck_clean(&fs.close().unwrap());
}

fn volume_of(bytes: u64) -> MemDevice {
    formatted(bytes, 4 << 20, AllocPolicy::Zrr, 7)
}
