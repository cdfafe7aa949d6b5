//! Image files on the real disk: O_DIRECT, aligned and unaligned buffers, range checks.

mod common;

use std::io::ErrorKind;

use common::{pattern, TempDir};
use dvrfs_core::device::{AlignedBuf, Device, IO_ALIGN_BYTES};
use dvrfs_io::{is_block_device, FileDevice, LockMode, OpenError, BOUNCE_MAX_BYTES};

const IMAGE_BYTES: u64 = 64 << 20;

/// A slice of `len` bytes whose start is deliberately one byte past a 4096 boundary.
fn misaligned(storage: &mut AlignedBuf, len: usize) -> &mut [u8] {
    let s = &mut storage[1..1 + len];
    assert_ne!(s.as_ptr() as usize % IO_ALIGN_BYTES as usize, 0);
    s
}

#[test]
fn direct_io_is_in_effect_on_this_disk() {
    let dir = TempDir::new("direct");
    let path = dir.path().join("a.img");
    FileDevice::create_image(&path, IMAGE_BYTES).expect("create");
    let dev = FileDevice::open(&path, true, LockMode::Exclusive).expect("open");
    assert!(
        dev.is_direct(),
        "O_DIRECT fell back to buffered on {}",
        path.display()
    );
    assert!(!dev.is_block_device());
    assert!(!is_block_device(&path));
    assert_eq!(dev.size_bytes(), IMAGE_BYTES);
    assert!(matches!(dev.sector_bytes(), 512 | 4096));
    eprintln!("image on temp dir: {dev:?}");
}

#[test]
fn create_image_rounds_down_grows_and_refuses_to_shrink() {
    let dir = TempDir::new("create");
    let path = dir.path().join("b.img");
    FileDevice::create_image(&path, 1_000_000).expect("create");
    assert_eq!(
        std::fs::metadata(&path).expect("stat").len(),
        1_000_000 / 4096 * 4096
    );

    // Grow keeps existing data.
    let data = pattern(4096, 1);
    {
        let mut dev = FileDevice::open(&path, true, LockMode::Exclusive).expect("open");
        dev.write_at(8192, &data).expect("write");
        dev.flush().expect("flush");
    }
    FileDevice::create_image(&path, 2 << 20).expect("grow");
    let dev = FileDevice::open(&path, false, LockMode::Shared).expect("reopen");
    assert_eq!(dev.size_bytes(), 2 << 20);
    let mut back = AlignedBuf::zeroed(4096);
    dev.read_at(8192, &mut back).expect("read");
    assert_eq!(&back[..], &data[..]);
    drop(dev);

    // Same size again is fine; smaller is refused.
    FileDevice::create_image(&path, 2 << 20).expect("same size");
    let err = FileDevice::create_image(&path, 1 << 20).expect_err("shrink must fail");
    assert!(matches!(err, OpenError::WouldShrink { .. }), "{err}");
    assert_eq!(std::fs::metadata(&path).expect("stat").len(), 2 << 20);

    let err = FileDevice::create_image(&dir.path().join("tiny.img"), 100).expect_err("tiny");
    assert!(matches!(err, OpenError::TooSmall { .. }), "{err}");

    let err = FileDevice::create_image(dir.path(), 1 << 20).expect_err("a directory");
    assert!(
        matches!(err, OpenError::NotFileOrBlockDevice { .. }),
        "{err}"
    );
}

#[test]
fn open_errors_say_what_is_wrong() {
    let dir = TempDir::new("errors");
    let missing = dir.path().join("missing.img");
    let err = FileDevice::open(&missing, false, LockMode::Shared).expect_err("missing");
    assert!(matches!(err, OpenError::NotFound { .. }), "{err}");
    assert!(err.to_string().contains("missing.img"), "{err}");

    let err = FileDevice::open(dir.path(), false, LockMode::Shared).expect_err("directory");
    assert!(
        matches!(err, OpenError::NotFileOrBlockDevice { .. }),
        "{err}"
    );
}

#[test]
fn round_trips_aligned_buffers_without_copy() {
    let dir = TempDir::new("aligned");
    let path = dir.path().join("c.img");
    FileDevice::create_image(&path, IMAGE_BYTES).expect("create");
    let mut dev = FileDevice::open(&path, true, LockMode::Exclusive).expect("open");
    assert!(dev.is_direct());

    for (offset_bytes, len_bytes, seed) in [
        (0u64, 4096usize, 1u64),
        (4096, 3 * 4096, 2),
        (1 << 20, 1 << 20, 3),
        (IMAGE_BYTES - 4096, 4096, 4),
    ] {
        let mut buf = AlignedBuf::zeroed(len_bytes);
        buf.copy_from_slice(&pattern(len_bytes, seed));
        dev.write_at(offset_bytes, &buf).expect("write");
    }
    dev.flush().expect("flush");

    // Read back through a fresh open so nothing can come from this handle.
    drop(dev);
    let dev = FileDevice::open(&path, false, LockMode::Shared).expect("reopen");
    for (offset_bytes, len_bytes, seed) in [
        (0u64, 4096usize, 1u64),
        (4096, 3 * 4096, 2),
        (1 << 20, 1 << 20, 3),
        (IMAGE_BYTES - 4096, 4096, 4),
    ] {
        let mut buf = AlignedBuf::zeroed(len_bytes);
        dev.read_at(offset_bytes, &mut buf).expect("read");
        assert!(
            buf[..] == pattern(len_bytes, seed)[..],
            "mismatch at {offset_bytes}"
        );
    }
    // Never-written space reads as zeros (sparse file).
    let mut buf = AlignedBuf::zeroed(8192);
    buf.fill(0xAA);
    dev.read_at(32 << 20, &mut buf).expect("read hole");
    assert!(buf.iter().all(|&b| b == 0));
}

#[test]
fn round_trips_unaligned_memory_buffers_through_bounce() {
    let dir = TempDir::new("unaligned");
    let path = dir.path().join("d.img");
    FileDevice::create_image(&path, IMAGE_BYTES).expect("create");
    let mut dev = FileDevice::open(&path, true, LockMode::Exclusive).expect("open");
    assert!(dev.is_direct());

    // Small, then larger than one bounce chunk (not a multiple of it), then small again
    // (the bounce buffer is reused, not shrunk).
    let cases = [
        (8192u64, 4096usize, 11u64),
        (4 << 20, 2 * BOUNCE_MAX_BYTES + 5 * 4096, 12),
        (IMAGE_BYTES - 2 * 4096, 2 * 4096, 13),
    ];
    let mut storage = AlignedBuf::zeroed(2 * BOUNCE_MAX_BYTES + 6 * 4096);
    for (offset_bytes, len_bytes, seed) in cases {
        let buf = misaligned(&mut storage, len_bytes);
        buf.copy_from_slice(&pattern(len_bytes, seed));
        dev.write_at(offset_bytes, buf).expect("write unaligned");
    }
    dev.flush().expect("flush");

    for (offset_bytes, len_bytes, seed) in cases {
        // Unaligned read of what was written...
        let buf = misaligned(&mut storage, len_bytes);
        buf.fill(0);
        dev.read_at(offset_bytes, buf).expect("read unaligned");
        assert!(
            buf[..] == pattern(len_bytes, seed)[..],
            "mismatch at {offset_bytes}"
        );
        // ...and an aligned read agrees.
        let mut aligned = AlignedBuf::zeroed(len_bytes);
        dev.read_at(offset_bytes, &mut aligned)
            .expect("read aligned");
        assert!(aligned[..] == pattern(len_bytes, seed)[..]);
    }

    // And the bytes really are in the file where they should be.
    drop(dev);
    let raw = std::fs::read(&path).expect("read image");
    let (offset_bytes, len_bytes, seed) = cases[1];
    let at = offset_bytes as usize;
    assert!(raw[at..at + len_bytes] == pattern(len_bytes, seed)[..]);
}

#[test]
fn rejects_unaligned_and_out_of_range_access() {
    let dir = TempDir::new("range");
    let path = dir.path().join("e.img");
    FileDevice::create_image(&path, 1 << 20).expect("create");
    let mut dev = FileDevice::open(&path, true, LockMode::Exclusive).expect("open");
    let mut buf = AlignedBuf::zeroed(8192);

    let kind = |r: std::io::Result<()>| r.expect_err("must fail").kind();
    assert_eq!(
        kind(dev.write_at(512, &buf[..4096])),
        ErrorKind::InvalidInput
    );
    assert_eq!(kind(dev.write_at(0, &buf[..512])), ErrorKind::InvalidInput);
    assert_eq!(
        kind(dev.read_at(1, &mut buf[..4096])),
        ErrorKind::InvalidInput
    );
    assert_eq!(
        kind(dev.read_at(0, &mut buf[..100])),
        ErrorKind::InvalidInput
    );
    assert_eq!(
        kind(dev.write_at(1 << 20, &buf[..4096])),
        ErrorKind::UnexpectedEof
    );
    assert_eq!(
        kind(dev.read_at((1 << 20) - 4096, &mut buf)),
        ErrorKind::UnexpectedEof
    );
    assert_eq!(
        kind(dev.read_at(u64::MAX - 4095, &mut buf[..4096])),
        ErrorKind::UnexpectedEof
    );
    // Empty access at the very end is in range.
    dev.read_at(1 << 20, &mut buf[..0]).expect("empty read");

    // Nothing past the end was created.
    assert_eq!(std::fs::metadata(&path).expect("stat").len(), 1 << 20);
}

#[test]
fn size_rounds_down_to_alignment() {
    let dir = TempDir::new("odd");
    let path = dir.path().join("odd.img");
    std::fs::write(&path, vec![0u8; 3 * 4096 + 700]).expect("write odd file");
    let dev = FileDevice::open(&path, false, LockMode::Shared).expect("open");
    assert_eq!(dev.size_bytes(), 3 * 4096);
}

#[test]
fn a_file_shrunk_under_us_reads_as_an_error_not_zeros() {
    let dir = TempDir::new("shrunk");
    let path = dir.path().join("f.img");
    FileDevice::create_image(&path, 1 << 20).expect("create");
    let dev = FileDevice::open(&path, false, LockMode::Shared).expect("open");
    assert_eq!(dev.size_bytes(), 1 << 20);

    // Someone truncates the image behind our back.
    let other = std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .expect("open other");
    other.set_len(64 * 1024).expect("truncate");

    let mut buf = AlignedBuf::zeroed(8192);
    let err = dev
        .read_at(512 * 1024, &mut buf)
        .expect_err("short read must fail");
    assert_eq!(err.kind(), ErrorKind::UnexpectedEof, "{err}");
    // Straddling the new end fails too (partial read, then EOF).
    let err = dev
        .read_at(60 * 1024, &mut buf)
        .expect_err("straddling read must fail");
    assert_eq!(err.kind(), ErrorKind::UnexpectedEof, "{err}");
    // Unaligned memory path as well.
    let mut storage = AlignedBuf::zeroed(3 * 4096);
    let err = dev
        .read_at(512 * 1024, misaligned(&mut storage, 8192))
        .expect_err("bounced short read must fail");
    assert_eq!(err.kind(), ErrorKind::UnexpectedEof, "{err}");
}

#[test]
fn read_only_open_refuses_writes() {
    let dir = TempDir::new("ro");
    let path = dir.path().join("g.img");
    FileDevice::create_image(&path, 1 << 20).expect("create");
    let mut dev = FileDevice::open(&path, false, LockMode::Shared).expect("open");
    assert!(!dev.is_writable());
    let buf = AlignedBuf::zeroed(4096);
    let err = dev.write_at(0, &buf).expect_err("write on read-only");
    assert_eq!(err.kind(), ErrorKind::PermissionDenied);
    dev.flush()
        .expect("flush of a read-only device is harmless");
}
