//! Damage that is not random (issue 9): fields edited "validly" (checksums recomputed),
//! so only range checks and cross-checks can catch them. Each test reproduces a case
//! that used to panic, lose data or mislead, and checks what must happen instead.
//!
//! This file: the superblock copies, lost or emptied metadata blocks, link counts, the
//! root inode, and a repair cut by a power cut. Damage to block maps (runs, indirect
//! extents, map checksums) is in `damage_maps.rs`; the shared helpers in
//! `common/damage.rs`.

mod common;

use common::damage::*;
use common::*;
use dvrfs_core::device::MemDevice;
use dvrfs_core::format::superblock::AllocPolicy;
use dvrfs_core::format::{parse_header, META_BLOCK_BYTES};
use dvrfs_core::fuzzing::{listing_of, stat_of};
use dvrfs_core::tools::fsck::fsck;
use dvrfs_core::{Fs, OpenOptions};
use std::cell::RefCell;
use std::rc::Rc;

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

/// Case 6 on a volume made before mkfs gave the dynamic area a share for frame
/// indexes (a smaller area, so its backup region is elsewhere): it still opens from
/// its backup region's copy.
#[test]
fn an_older_layouts_backup_superblock_serves_too() {
    let mut dev = common::formatted_with(8 << 30, 4 << 20, AllocPolicy::Zrr, 5, |p| {
        p.index_share = false
    });
    {
        let mut fs = Fs::open(dev.clone(), OpenOptions::writable()).unwrap();
        let f = fs.create(fs.root(), b"old.ts", 0o644, 0, 0, 1).unwrap();
        fs.write(f, 0, &pattern(3, 5000), 2).unwrap();
        fs.sync().unwrap();
        dev = fs.close().unwrap();
    }
    let sb = superblock(&dev);
    dev.poke(0, &[0u8; META_BLOCK_BYTES]);
    dev.poke(sb.last_copy_offset(), &[0u8; META_BLOCK_BYTES]);
    let mut fs = Fs::open(dev, OpenOptions::read_only()).unwrap();
    assert_eq!(fs.load_report().superblock_from, "backup-region copy");
    let f = fs.lookup(fs.root(), b"old.ts").unwrap();
    let mut buf = vec![0u8; 5000];
    assert_eq!(fs.read(f, 0, &mut buf).unwrap(), 5000);
    assert_eq!(buf, pattern(3, 5000));
}
