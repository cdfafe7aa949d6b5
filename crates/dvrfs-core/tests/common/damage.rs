//! Damage no checksum can see: metadata blocks edited and resealed.

use super::{formatted, open_rw, pattern};
use dvrfs_core::device::{Device, MemDevice};
use dvrfs_core::format::superblock::{AllocPolicy, Superblock};
use dvrfs_core::format::{parse_header, seal_block, META_BLOCK_BYTES};
use dvrfs_core::tools::fsck::{fsck, FsckReport};
use dvrfs_core::Fs;

/// The primary superblock of `dev`.
pub fn superblock(dev: &MemDevice) -> Superblock {
    let mut b = vec![0u8; META_BLOCK_BYTES];
    dev.peek(0, &mut b);
    Superblock::decode(&b).unwrap()
}

/// Edits metadata block `n` in both copies (primary and backup region) and reseals
/// them: damage no checksum can see.
pub fn edit_block(dev: &mut MemDevice, sb: &Superblock, n: u64, edit: impl Fn(&mut [u8])) {
    for off in [n * META_BLOCK_BYTES as u64, sb.backup_offset(n)] {
        let mut b = vec![0u8; META_BLOCK_BYTES];
        dev.peek(off, &mut b);
        let h = parse_header(&b).unwrap();
        edit(&mut b);
        seal_block(&mut b, &h);
        dev.poke(off, &b);
    }
}

// ---- helpers of damage.rs and damage_maps.rs ----

pub const MB: u64 = META_BLOCK_BYTES as u64;
/// Where an inode record starts in its inode-table block.
pub const RECORD_BASE: usize = 48;
pub const INODE_BYTES: usize = 256;
pub const I_INDIRECT: usize = 84;
pub const I_INLINE: usize = I_INDIRECT + 4 * 17;
pub const I_RUN_COUNT: usize = 80;

/// `fsck --repair`, which must finish in one pass: it returns a repaired volume on
/// which a second fsck finds nothing. Gives the repair's report, the second fsck's
/// and the repaired volume; `what` names the case in a failure.
pub fn repair_once<D: Device + Clone>(dev: D, what: &str) -> (FsckReport, FsckReport, D) {
    let (r, fixed) = fsck(dev, true, &mut |_, _| {}).unwrap_or_else(|e| panic!("{what}: {e}"));
    let fixed = fixed.unwrap_or_else(|| panic!("{what}: repair gave up: {:?}", r.errors));
    let (again, _) = fsck(fixed.clone(), false, &mut |_, _| {}).unwrap();
    assert_eq!(
        again.exit_code(),
        0,
        "{what}: first repair {:?}; second fsck {:?}",
        r.errors,
        again.errors
    );
    (r, again, fixed)
}

/// A volume with a directory of small files and a fragmented file with indirect runs.
pub fn populated() -> (MemDevice, u32) {
    let dev = formatted(40 << 20, 64 << 10, AllocPolicy::Zrr, 9);
    let mut fs = open_rw(dev);
    let root = fs.root();
    let d = fs.mkdir(root, b"cam1", 0o755, 0, 0, 1).unwrap();
    for i in 0..10 {
        let f = fs
            .create(d, format!("seg{i:03}.ts").as_bytes(), 0o644, 0, 0, 2)
            .unwrap();
        fs.write(f, 0, &pattern(i, 5000), 3).unwrap();
    }
    let big = fs.create(root, b"big.ts", 0o644, 0, 0, 3).unwrap();
    fs.write(big, 0, &pattern(99, 30 * (64 << 10) + 123), 4)
        .unwrap();
    assert!(
        fs.stat(big).unwrap().runs > 7,
        "the big file needs indirect runs"
    );
    // A second directory whose files' inodes lie in the second inode-table block.
    let d2 = fs.mkdir(root, b"cam2", 0o755, 0, 0, 5).unwrap();
    for i in 0..10 {
        let f = fs
            .create(d2, format!("clip{i:02}.ts").as_bytes(), 0o644, 0, 0, 6)
            .unwrap();
        fs.write(f, 0, &pattern(100 + i, 3000), 7).unwrap();
    }
    (fs.close().unwrap(), big)
}

/// Makes `dev` look like a volume made before map checksums (`FEATURE_MAP_SUMS`).
pub fn clear_features(dev: &mut MemDevice) {
    let mut sb = superblock(dev);
    // The map-checksum bit; the event area (FEATURE_EVENTS) is a layout of its own,
    // unrelated to what these tests look at.
    sb.features &= !dvrfs_core::format::superblock::FEATURE_MAP_SUMS;
    let image = sb.encode(0);
    for off in [0, sb.backup_offset(0), sb.device_bytes - MB] {
        dev.poke(off, &image[..]);
    }
}

/// Sets field `at` (u32) of inode `ino`'s record.
pub fn edit_inode_u32(dev: &mut MemDevice, ino: u32, at: usize, v: u32) {
    let sb = superblock(dev);
    let n = sb.inode_table_start + ino as u64 / 15;
    let base = RECORD_BASE + INODE_BYTES * (ino as usize % 15) + at;
    edit_block(dev, &sb, n, |b| {
        b[base..base + 4].copy_from_slice(&v.to_le_bytes())
    });
}

/// Zeroes metadata block `n` in both copies: lost.
pub fn lose_block(dev: &mut MemDevice, sb: &Superblock, n: u64) {
    dev.poke(n * MB, &[0u8; META_BLOCK_BYTES]);
    dev.poke(sb.backup_offset(n), &[0u8; META_BLOCK_BYTES]);
}

pub fn read_file(fs: &mut Fs<MemDevice>, path: &str, len: usize) -> Vec<u8> {
    let ino = fs.resolve(path).unwrap_or_else(|e| panic!("{path}: {e}"));
    read_ino(fs, ino, len)
}

pub fn read_ino(fs: &mut Fs<MemDevice>, ino: u32, len: usize) -> Vec<u8> {
    let mut buf = vec![0u8; len + 1];
    let n = fs.read(ino, 0, &mut buf).unwrap();
    buf.truncate(n);
    buf
}

/// Reads field `at` (u32) of inode `ino`'s record.
pub fn inode_u32(dev: &MemDevice, ino: u32, at: usize) -> u32 {
    let sb = superblock(dev);
    let n = sb.inode_table_start + ino as u64 / 15;
    let base = RECORD_BASE + INODE_BYTES * (ino as usize % 15) + at;
    let mut b = vec![0u8; META_BLOCK_BYTES];
    dev.peek(n * MB, &mut b);
    u32::from_le_bytes(b[base..base + 4].try_into().unwrap())
}

pub fn read_at(
    fs: &mut Fs<MemDevice>,
    ino: u32,
    offset: u64,
    len: usize,
) -> dvrfs_core::Result<Vec<u8>> {
    let mut buf = vec![0u8; len];
    let n = fs.read(ino, offset, &mut buf)?;
    buf.truncate(n);
    Ok(buf)
}

/// Checks what a file with lost range `lost` (bytes) must do: a read reaching it fails
/// with an error naming the range, every other byte reads back as written.
pub fn check_lost_range(fs: &mut Fs<MemDevice>, ino: u32, want: &[u8], lost: (u64, u64)) {
    let (ls, le) = lost;
    match read_at(fs, ino, 0, want.len()) {
        Err(dvrfs_core::Error::DataLost {
            ino: i,
            offset,
            end,
        }) => {
            assert_eq!((i, offset, end), (ino, ls, le));
        }
        other => panic!(
            "a read across the lost range must fail, got {:?}",
            other.map(|b| b.len())
        ),
    }
    assert!(
        read_at(fs, ino, le - 1, 1).is_err(),
        "the range's last byte"
    );
    assert_eq!(
        read_at(fs, ino, 0, ls as usize).unwrap(),
        want[..ls as usize]
    );
    assert_eq!(
        read_at(fs, ino, le, want.len()).unwrap(),
        want[le as usize..]
    );
    assert_eq!(fs.stat(ino).unwrap().lost_bytes, le - ls);
}
