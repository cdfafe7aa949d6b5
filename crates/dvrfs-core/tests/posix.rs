//! POSIX semantics the FUSE mount relies on, checked on the engine through the
//! blocking driver: hard links, files unlinked while open (orphans) and what a crash
//! leaves of them, and inode generations that change when a number is reused.

mod common;

use common::formatted;
use dvrfs_core::format::superblock::AllocPolicy;
use dvrfs_core::tools::fsck::fsck;
use dvrfs_core::{Error, Fs, OpenOptions};

const MIB: usize = 1 << 20;

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31) ^ seed)
        .collect()
}

fn read_all(fs: &mut Fs<dvrfs_core::device::MemDevice>, ino: u32, len: usize) -> Vec<u8> {
    let mut buf = vec![0; len + 4096];
    let n = fs.read(ino, 0, &mut buf).unwrap();
    buf.truncate(n);
    buf
}

#[test]
fn hard_links_share_the_data_and_the_last_unlink_frees_it() {
    let dev = formatted(256 << 20, MIB as u64, AllocPolicy::Zrr, 1);
    let mut fs = Fs::open(dev, OpenOptions::writable()).unwrap();
    let root = fs.root();
    let free0 = fs.free_bytes();
    let f = fs.create(root, b"a.ts", 0o644, 0, 0, 1).unwrap();
    let data = pattern(3 * MIB, 7);
    fs.write(f, 0, &data, 2).unwrap();
    let d = fs.mkdir(root, b"d", 0o755, 0, 0, 3).unwrap();
    fs.link(f, d, b"b.ts", 4).unwrap();
    assert_eq!(fs.stat(f).unwrap().nlink, 2);
    assert_eq!(fs.lookup(d, b"b.ts").unwrap(), f);
    // A second name where one exists, or for a directory: refused.
    assert!(matches!(fs.link(f, root, b"d", 5), Err(Error::Exists(_))));
    assert!(matches!(fs.link(d, root, b"d2", 5), Err(Error::IsDir(_))));
    fs.unlink(root, b"a.ts", 6).unwrap();
    assert_eq!(fs.stat(f).unwrap().nlink, 1);
    assert_eq!(read_all(&mut fs, f, data.len()), data);
    fs.sync().unwrap();
    let dev = fs.close().unwrap();
    let (report, dev) = fsck(dev, false, &mut |_, _| {}).unwrap();
    assert_eq!(report.errors, Vec::<String>::new());
    let mut fs = Fs::open(dev.unwrap(), OpenOptions::writable()).unwrap();
    assert_eq!(read_all(&mut fs, f, data.len()), data);
    fs.unlink(d, b"b.ts", 7).unwrap();
    assert!(!fs.inode_exists(f));
    fs.sync().unwrap();
    assert!(fs.free_bytes() >= free0 - MIB as u64, "the data came back");
}

#[test]
fn a_file_unlinked_while_open_lives_until_its_last_close() {
    let dev = formatted(256 << 20, MIB as u64, AllocPolicy::Zrr, 2);
    let mut fs = Fs::open(dev, OpenOptions::writable()).unwrap();
    let root = fs.root();
    let f = fs.create(root, b"rec.ts", 0o644, 0, 0, 1).unwrap();
    let data = pattern(2 * MIB, 3);
    fs.write(f, 0, &data, 2).unwrap();
    fs.open_file(f, dvrfs_core::OpenMode::Write).unwrap();
    fs.open_file(f, dvrfs_core::OpenMode::Write).unwrap();
    fs.unlink(root, b"rec.ts", 3).unwrap();
    assert!(fs.lookup(root, b"rec.ts").is_err(), "the name is gone");
    assert!(fs.is_orphan(f));
    assert_eq!(fs.stat(f).unwrap().nlink, 0);
    // Still readable and writable through the handles.
    assert_eq!(read_all(&mut fs, f, data.len()), data);
    fs.write(f, data.len() as u64, &[9; 4096], 4).unwrap();
    // A new file does not get its inode number.
    let g = fs.create(root, b"other", 0o644, 0, 0, 5).unwrap();
    assert_ne!(g, f);
    fs.close_file(f, dvrfs_core::OpenMode::Write).unwrap();
    assert!(fs.inode_exists(f), "one handle is still open");
    fs.close_file(f, dvrfs_core::OpenMode::Write).unwrap();
    assert!(!fs.inode_exists(f), "freed at the last close");
    fs.sync().unwrap();
    let dev = fs.close().unwrap();
    let (report, _) = fsck(dev, false, &mut |_, _| {}).unwrap();
    assert_eq!(report.errors, Vec::<String>::new());
}

#[test]
fn an_orphan_left_by_a_crash_is_freed_at_the_next_writable_open() {
    let dev = formatted(256 << 20, MIB as u64, AllocPolicy::Zrr, 3);
    let mut fs = Fs::open(dev, OpenOptions::writable()).unwrap();
    let root = fs.root();
    let free0 = fs.free_bytes();
    let f = fs.create(root, b"tmp", 0o600, 0, 0, 1).unwrap();
    fs.write(f, 0, &pattern(4 * MIB, 1), 2).unwrap();
    fs.open_file(f, dvrfs_core::OpenMode::Write).unwrap();
    fs.unlink(root, b"tmp", 3).unwrap();
    fs.sync().unwrap();
    let dev = fs.crash(); // the process ends with the file still open
                          // fsck (read-only) sees the orphan and says what repair does with it.
    let (report, dev) = fsck(dev, false, &mut |_, _| {}).unwrap();
    assert_eq!(report.errors.len(), 1, "{:?}", report.errors);
    assert!(
        report.errors[0].contains("unlinked while open"),
        "{:?}",
        report.errors
    );
    // A writable open frees it.
    let mut fs = Fs::open(dev.unwrap(), OpenOptions::writable()).unwrap();
    assert_eq!(fs.load_report().orphans_freed, 1);
    assert!(!fs.inode_exists(f));
    fs.sync().unwrap();
    assert_eq!(fs.free_bytes(), free0);
    let dev = fs.close().unwrap();
    let (report, _) = fsck(dev, false, &mut |_, _| {}).unwrap();
    assert_eq!(report.errors, Vec::<String>::new());
}

#[test]
fn a_reused_inode_number_gets_a_new_generation() {
    let dev = formatted(256 << 20, MIB as u64, AllocPolicy::Zrr, 4);
    let mut fs = Fs::open(dev, OpenOptions::writable()).unwrap();
    let root = fs.root();
    let a = fs.create(root, b"a", 0o644, 0, 0, 1).unwrap();
    let gen_a = fs.stat(a).unwrap().generation;
    fs.unlink(root, b"a", 2).unwrap();
    let b = fs.create(root, b"b", 0o644, 0, 0, 3).unwrap();
    assert_eq!(a, b, "the lowest free number is reused");
    assert_ne!(fs.stat(b).unwrap().generation, gen_a);
    // Across a remount too: the next generation is above every one on the disk.
    fs.sync().unwrap();
    let gen_b = fs.stat(b).unwrap().generation;
    let dev = fs.close().unwrap();
    let mut fs = Fs::open(dev, OpenOptions::writable()).unwrap();
    fs.unlink(root, b"b", 4).unwrap();
    let c = fs.create(root, b"c", 0o644, 0, 0, 5).unwrap();
    assert_eq!(c, b);
    assert!(fs.stat(c).unwrap().generation > gen_b);
}

#[test]
fn a_directory_default_reservation_persists_and_new_directories_inherit_it() {
    use dvrfs_core::engine::Reservation;
    use dvrfs_core::volume::SetAttr;
    let dev = formatted(256 << 20, MIB as u64, AllocPolicy::Zrr, 4);
    let mut fs = Fs::open(dev, OpenOptions::writable()).unwrap();
    let root = fs.root();
    let cams = fs.mkdir(root, b"cams", 0o755, 0, 0, 1).unwrap();
    let f = fs.create(root, b"f.ts", 0o644, 0, 0, 1).unwrap();
    let d = Reservation::parse("write:8M,duration=2h")
        .unwrap()
        .to_default()
        .unwrap();
    let set = |d| SetAttr {
        stream_default: Some(d),
        ..Default::default()
    };
    // Only directories carry one.
    assert!(matches!(
        fs.set_attr(f, &set(Some(d)), 2),
        Err(Error::InvalidArgument(_))
    ));
    fs.set_attr(cams, &set(Some(d)), 2).unwrap();
    let day = fs.mkdir(cams, b"2026-11-24", 0o755, 0, 0, 3).unwrap();
    assert_eq!(fs.stream_default(day), Some(d));
    assert_eq!(fs.stream_default(root), None);
    fs.sync().unwrap();
    let dev = fs.close().unwrap();
    let (report, dev) = fsck(dev, false, &mut |_, _| {}).unwrap();
    assert_eq!(report.errors, Vec::<String>::new());
    let mut fs = Fs::open(dev.unwrap(), OpenOptions::writable()).unwrap();
    assert_eq!(fs.stream_default(cams), Some(d));
    assert_eq!(fs.stream_default(day), Some(d));
    fs.set_attr(cams, &set(None), 4).unwrap();
    fs.sync().unwrap();
    let dev = fs.close().unwrap();
    let fs = Fs::open(dev, OpenOptions::writable()).unwrap();
    assert_eq!(fs.stream_default(cams), None);
    assert_eq!(fs.stream_default(day), Some(d));
}
