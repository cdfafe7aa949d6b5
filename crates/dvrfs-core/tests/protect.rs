//! Protected clips (rule 2 of retention; `retention/protect.rs`): the chunks a
//! UTC range meets are kept past the stream's max-age until the protection ends
//! (on the wall clock the driver is given: an injected clock here) or is removed,
//! kept across a reopen, and refused beyond the volume's protected-max.

mod common;

use common::{assert_fsck_clean, clocked};
use dvrfs_core::driver::blocking::ManualClock;
use dvrfs_core::engine::{RETENTION_CHECK_BUSY_NS, RETENTION_CHECK_NS};
use dvrfs_core::format::inode::{Protection, StreamRetention};
use dvrfs_core::format::superblock::VolumeRetention;
use dvrfs_core::volume::SetAttr;
use dvrfs_core::{Error, Fs};

/// 2026-11-28T18:28:44.496Z.
const T0: i64 = 1_795_890_524_496_000_000;
const S: i64 = 1_000_000_000;
const MIN: i64 = 60 * S;

/// `/cam` with six 1 MiB chunks named by their starts, a minute apart from T0,
/// each last written a minute after its start; returns the directory and chunks.
fn six_chunks(fs: &mut Fs<dvrfs_core::device::MemDevice>) -> (u32, Vec<u32>) {
    let root = fs.root();
    let cam = fs.mkdir(root, b"cam", 0o755, 0, 0, T0).unwrap();
    let chunks = (0..6i64)
        .map(|k| {
            let name = format!("20261128T18{:02}44.496Z.ts", 28 + k);
            let f = fs.create(cam, name.as_bytes(), 0o644, 0, 0, T0).unwrap();
            fs.write(f, 0, &vec![k as u8; 1 << 20], T0 + (k + 1) * MIN)
                .unwrap();
            f
        })
        .collect();
    (cam, chunks)
}

/// Runs the engine at wall time `wall` for a few plans and their deletions.
fn retention_runs(fs: &mut Fs<dvrfs_core::device::MemDevice>, clock: &ManualClock, wall: i64) {
    clock.advance(RETENTION_CHECK_NS);
    fs.tick_at(wall).unwrap();
    for _ in 0..10 {
        clock.advance(RETENTION_CHECK_BUSY_NS);
        fs.tick_at(wall).unwrap();
    }
}

/// Sets `dir`'s max-age.
fn policy(fs: &mut Fs<dvrfs_core::device::MemDevice>, dir: u32, max_age_s: u32, now: i64) {
    let set = SetAttr {
        retention: Some(Some(StreamRetention {
            max_age_s,
            ..StreamRetention::default()
        })),
        ..SetAttr::default()
    };
    fs.set_attr(dir, &set, now).unwrap();
}

fn left(fs: &Fs<dvrfs_core::device::MemDevice>, dir: u32) -> Vec<u32> {
    let mut v: Vec<u32> = fs
        .engine()
        .volume()
        .readdir(dir)
        .unwrap()
        .iter()
        .map(|e| e.1)
        .collect();
    v.sort();
    v
}

#[test]
fn a_protected_range_outlives_max_age_until_it_ends_or_is_removed() {
    let (mut fs, clock) = clocked();
    let (cam, c) = six_chunks(&mut fs);
    let now = T0 + 10 * MIN;
    // A stream is a directory with a policy (or a chain): a day's max-age first.
    policy(&mut fs, cam, 86_400, now);
    let hour = Protection {
        until_s: ((now / S) + 3600) as u32,
        id: 1,
    };
    // 18:30:00 to 18:30:30 lies inside chunk 1 (18:29:44 to 18:30:44): it alone.
    let at = |m: i64, s: i64| T0 + m * MIN + s * S;
    let one = fs.protect(cam, (at(1, 16), at(1, 46)), hour, now).unwrap();
    assert_eq!((one.chunks, one.bytes), (1, 1 << 20));
    // 18:31:50 to 18:32:50 meets chunks 3 and 4, whole: until removed.
    let forever = Protection {
        until_s: Protection::FOREVER,
        id: 2,
    };
    let two = fs.protect(cam, (at(3, 6), at(4, 6)), forever, now).unwrap();
    assert_eq!((two.chunks, two.bytes), (2, 2 << 20));
    // A range that meets no chunk is refused, saying where the chunks are.
    match fs.protect(cam, (at(-10, 0), at(-9, 0)), forever, now) {
        Err(Error::InvalidArgument(m)) => {
            assert!(
                m.contains("no chunk of /cam") && m.contains("2026-11-28T18:28:44"),
                "{m}"
            )
        }
        r => panic!("not refused: {r:?}"),
    }
    // A max-age of 5 minutes: chunks 0 to 3 are past it, and 1 and 3 protected.
    policy(&mut fs, cam, 300, now);
    retention_runs(&mut fs, &clock, now);
    assert_eq!(left(&fs, cam), [c[1], c[3], c[4], c[5]]);
    // Kept with the chunks across a reopen.
    fs.sync().unwrap();
    let dev = fs.close().unwrap();
    assert_fsck_clean(&dev);
    let opts = dvrfs_core::volume::OpenOptions::writable();
    let mut fs = Fs::open_with(dev, opts, Box::new(clock.clone()), None).unwrap();
    let v = fs.engine().volume();
    assert_eq!(v.protection(c[1]), Some(hour));
    assert_eq!(
        (v.protection(c[3]), v.protection(c[4])),
        (Some(forever), Some(forever))
    );
    assert_eq!(v.protection(c[5]), None);
    // An hour later the first has ended: chunk 1 goes at the next plan, and chunk
    // 5 (past max-age now); the second holds.
    let later = now + 3600 * S + S;
    retention_runs(&mut fs, &clock, later);
    assert_eq!(left(&fs, cam), [c[3], c[4]]);
    // Removed, its chunks go too.
    let gone = fs.unprotect(2, later).unwrap();
    assert_eq!((gone.chunks, gone.bytes), (2, 2 << 20));
    retention_runs(&mut fs, &clock, later);
    assert!(left(&fs, cam).is_empty());
    fs.sync().unwrap();
    assert_fsck_clean(&fs.close().unwrap());
}

#[test]
fn a_chunk_in_two_protections_keeps_the_later_one_and_ended_ones_are_refused() {
    let (mut fs, _clock) = clocked();
    let (cam, c) = six_chunks(&mut fs);
    let now = T0 + 10 * MIN;
    policy(&mut fs, cam, 86_400, now);
    let until = |h: i64, id| Protection {
        until_s: ((now / S) + h * 3600) as u32,
        id,
    };
    fs.protect(cam, (T0, T0 + 2 * MIN), until(2, 1), now)
        .unwrap();
    // Chunk 1 and 2: chunk 1 takes the later protection, chunk 0 keeps the first.
    fs.protect(cam, (T0 + MIN, T0 + 2 * MIN + S), until(5, 2), now)
        .unwrap();
    let v = fs.engine().volume();
    assert_eq!(v.protection(c[0]), Some(until(2, 1)));
    assert_eq!(v.protection(c[1]), Some(until(5, 2)));
    assert_eq!(v.protection(c[2]), Some(until(5, 2)));
    // A shorter one over chunk 2 changes nothing.
    fs.protect(cam, (T0 + 2 * MIN, T0 + 2 * MIN), until(1, 3), now)
        .unwrap();
    assert_eq!(fs.engine().volume().protection(c[2]), Some(until(5, 2)));
    match fs.protect(cam, (T0, T0), until(-1, 4), now) {
        Err(Error::InvalidArgument(m)) => assert!(m.contains("already ended"), "{m}"),
        r => panic!("not refused: {r:?}"),
    }
    // Not a stream: refused.
    let root = fs.root();
    let other = fs.mkdir(root, b"docs", 0o755, 0, 0, now).unwrap();
    match fs.protect(other, (T0, now), until(1, 5), now) {
        Err(Error::InvalidArgument(m)) => assert!(m.contains("holds no chunks"), "{m}"),
        r => panic!("not refused: {r:?}"),
    }
}

#[test]
fn protection_beyond_protected_max_is_refused_saying_why() {
    let (mut fs, _clock) = clocked();
    let (cam, c) = six_chunks(&mut fs);
    let now = T0 + 10 * MIN;
    policy(&mut fs, cam, 86_400, now);
    // 1% of a 256 MiB volume's data region holds two 1 MiB chunks, not three.
    let vol = VolumeRetention {
        protected_max_permille: 10,
        ..VolumeRetention::default()
    };
    fs.set_volume_retention(vol, now).unwrap();
    let p = |id| Protection {
        until_s: Protection::FOREVER,
        id,
    };
    let two = fs.protect(cam, (T0, T0 + MIN), p(1), now).unwrap();
    assert_eq!(two.chunks, 2);
    match fs.protect(cam, (T0 + 3 * MIN, T0 + 3 * MIN), p(2), now) {
        Err(Error::InvalidArgument(m)) => assert!(
            m.contains("protected-max")
                && m.contains(&format!("{} bytes are protected now", 2 << 20))
                && m.contains(&format!("this adds {}", 1 << 20)),
            "{m}"
        ),
        r => panic!("not refused: {r:?}"),
    }
    assert_eq!(fs.engine().volume().protection(c[3]), None);
    // What is protected already counts once: the same range again is taken.
    fs.protect(cam, (T0, T0 + MIN), p(3), now).unwrap();
    // Removed, the room is there again.
    assert_eq!(fs.unprotect(1, now).unwrap().chunks, 2);
    fs.protect(cam, (T0 + 3 * MIN, T0 + 3 * MIN), p(2), now)
        .unwrap();
    assert_eq!(fs.engine().volume().protection(c[3]), Some(p(2)));
}

#[test]
fn a_protection_stamp_that_cannot_be_one_is_reported_and_dropped_by_fsck() {
    use common::damage::{edit_inode_u32, inode_u32, repair_once};
    let (mut fs, _clock) = clocked();
    let (cam, c) = six_chunks(&mut fs);
    let now = T0 + 10 * MIN;
    policy(&mut fs, cam, 86_400, now);
    let p = Protection {
        until_s: Protection::FOREVER,
        id: 9,
    };
    fs.protect(cam, (T0, T0), p, now).unwrap();
    fs.sync().unwrap();
    let mut dev = fs.close().unwrap();
    // Bytes 56..64 hold the protection, flags bit 3 says so.
    assert_eq!(inode_u32(&dev, c[0], 60), 9);
    assert_ne!(inode_u32(&dev, c[0], 44) & (1 << 3), 0);
    edit_inode_u32(&mut dev, c[0], 60, 0);
    let (r, _, fixed) = repair_once(dev, "protection id 0");
    assert!(
        r.errors
            .iter()
            .any(|e| e.contains("carries a protection that cannot be one")),
        "{:?}",
        r.errors
    );
    let fs = common::open_rw(fixed);
    assert_eq!(fs.engine().volume().protection(c[0]), None);
}
