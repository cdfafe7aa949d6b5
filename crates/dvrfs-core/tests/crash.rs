//! Crash consistency: a random workload runs on a device that keeps a durable and a
//! live image, and the power is cut at every single write (the cut write torn at a
//! sector boundary; in one mode the unflushed writes also land in a random subset).
//! After journal replay, fsck must be clean, and the file system must equal the state
//! after some operation boundary that is no older than the last completed `sync`:
//! operations are atomic, and nothing committed is lost.
//!
//! The workload never overwrites bytes that an earlier state could show (appends,
//! writes past the end, truncation to block boundaries, namespace changes): dvrfs, like
//! ext4's ordered mode, writes file data in place without journaling it.

mod common;

use common::*;
use dvrfs_core::device::{CrashDevice, CrashMode, MemDevice};
use dvrfs_core::format::superblock::AllocPolicy;
use dvrfs_core::{Error, Fs, OpenOptions};
use rand_chacha::rand_core::{RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;

const BLOCK: u64 = 64 << 10;

#[derive(Clone, Debug)]
enum COp {
    Create(String),
    Append(String, usize, u64),
    WritePastEnd(String, u64, usize, u64),
    TruncateBlocks(String, u64),
    TruncateUp(String, u64),
    Unlink(String),
    Rename(String, String),
    Mkdir(String),
    Rmdir(String),
    Sync,
}

fn workload(seed: u64, n: usize) -> Vec<COp> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let names = ["/a", "/b", "/c", "/d/x", "/d/y", "/e"];
    let mut ops = vec![COp::Mkdir("/d".into())];
    for _ in 0..n {
        let r = rng.next_u32() % 100;
        let f = names[rng.next_u32() as usize % names.len()].to_string();
        let g = names[rng.next_u32() as usize % names.len()].to_string();
        let len = 1 + (rng.next_u64() % (2 * BLOCK + 5000)) as usize;
        ops.push(match r {
            0..=19 => COp::Create(f),
            20..=44 => COp::Append(f, len, rng.next_u64()),
            45..=52 => COp::WritePastEnd(f, rng.next_u64() % (2 * BLOCK), len, rng.next_u64()),
            53..=60 => COp::TruncateBlocks(f, rng.next_u64() % 3),
            61..=64 => COp::TruncateUp(f, rng.next_u64() % BLOCK),
            65..=72 => COp::Unlink(f),
            73..=80 => COp::Rename(f, g),
            81..=83 => COp::Mkdir(if rng.next_u32() % 2 == 0 {
                "/d".into()
            } else {
                "/e".into()
            }),
            84..=86 => COp::Rmdir(if rng.next_u32() % 2 == 0 {
                "/d".into()
            } else {
                "/e".into()
            }),
            _ => COp::Sync,
        });
    }
    ops
}

fn apply(fs: &mut Fs<CrashDevice>, op: &COp, t: i64) -> Result<(), Error> {
    let parent = |fs: &Fs<CrashDevice>, p: &str| fs.resolve_parent(p).map(|(d, n)| (d, n.to_vec()));
    match op {
        COp::Create(p) => {
            parent(fs, p).and_then(|(d, n)| fs.create(d, &n, 0o644, 0, 0, t).map(|_| ()))
        }
        COp::Append(p, len, seed) => {
            let ino = fs.resolve(p)?;
            let size = fs.stat(ino)?.size_bytes;
            fs.write(ino, size, &pattern(*seed, *len), t)
        }
        COp::WritePastEnd(p, gap, len, seed) => {
            let ino = fs.resolve(p)?;
            let size = fs.stat(ino)?.size_bytes;
            fs.write(ino, size + gap, &pattern(*seed, *len), t)
        }
        COp::TruncateBlocks(p, blocks) => {
            let ino = fs.resolve(p)?;
            let size = fs.stat(ino)?.size_bytes;
            fs.truncate(ino, (blocks * BLOCK).min(size / BLOCK * BLOCK), t)
        }
        COp::TruncateUp(p, extra) => {
            let ino = fs.resolve(p)?;
            let size = fs.stat(ino)?.size_bytes;
            fs.truncate(ino, size + extra, t)
        }
        COp::Unlink(p) => parent(fs, p).and_then(|(d, n)| fs.unlink(d, &n, t)),
        COp::Rename(a, b) => {
            let (sd, sn) = parent(fs, a)?;
            let (dd, dn) = parent(fs, b)?;
            fs.rename(sd, &sn, dd, &dn, t)
        }
        COp::Mkdir(p) => {
            parent(fs, p).and_then(|(d, n)| fs.mkdir(d, &n, 0o755, 0, 0, t).map(|_| ()))
        }
        COp::Rmdir(p) => parent(fs, p).and_then(|(d, n)| fs.rmdir(d, &n, t)),
        COp::Sync => fs.sync(),
    }
}

/// What the reference run saw: the state after each operation, the device write count
/// when each operation started, and after each completed sync the operations covered.
struct Reference {
    states: Vec<Model>,
    op_start_write: Vec<u64>,
    synced: Vec<(u64, usize)>,
    total_writes: u64,
}

fn reference(image: &MemDevice, ops: &[COp]) -> Reference {
    let mut fs = Fs::open(
        CrashDevice::new(image.clone(), CrashMode::InOrderTorn, 0),
        OpenOptions::writable(),
    )
    .unwrap();
    let mut r = Reference {
        states: vec![snapshot(&mut fs)],
        op_start_write: vec![],
        synced: vec![(0, 0)],
        total_writes: 0,
    };
    for (i, op) in ops.iter().enumerate() {
        r.op_start_write.push(fs.device().writes);
        match apply(&mut fs, op, i as i64) {
            Ok(())
            | Err(
                Error::NotFound(_)
                | Error::Exists(_)
                | Error::NotEmpty(_)
                | Error::IsDir(_)
                | Error::NotDir(_)
                | Error::Loop,
            ) => {}
            Err(e) => panic!("op {i} {op:?}: {e}"),
        }
        r.states.push(snapshot(&mut fs));
        if matches!(op, COp::Sync) {
            r.synced.push((fs.device().writes, i + 1));
        }
    }
    fs.sync().unwrap();
    r.total_writes = fs.device().writes;
    r.synced.push((r.total_writes, ops.len()));
    r
}

fn crash_at(image: &MemDevice, ops: &[COp], k: u64, mode: CrashMode, seed: u64) -> MemDevice {
    let mut dev = CrashDevice::new(image.clone(), mode, seed);
    dev.crash_after_writes(k);
    let mut fs = Fs::open(dev, OpenOptions::writable()).unwrap();
    for (i, op) in ops.iter().enumerate() {
        if let Err(Error::Io { .. }) = apply(&mut fs, op, i as i64) {
            break;
        }
    }
    let _ = fs.sync();
    fs.crash().crash_image().expect("the power cut happened")
}

fn check_all_crash_points(alloc: AllocPolicy, mode: CrashMode, seed: u64) {
    let image = formatted(25 << 20, BLOCK, alloc, seed);
    let ops = workload(seed, 110);
    let r = reference(&image, &ops);
    eprintln!(
        "{alloc:?} {mode:?}: {} ops, {} device writes, {} syncs",
        ops.len(),
        r.total_writes,
        r.synced.len()
    );
    assert!(
        r.total_writes > 50,
        "the workload writes enough to be interesting"
    );
    for k in 0..r.total_writes {
        let crashed = crash_at(&image, &ops, k, mode, seed ^ k);
        assert_fsck_clean(&crashed);
        let mut fs = open_rw(crashed);
        let got = snapshot(&mut fs);
        // Operations that had started by write k, and the last sync completed before it.
        let started = r.op_start_write.iter().filter(|&&w| w <= k).count();
        let floor = r
            .synced
            .iter()
            .filter(|(w, _)| *w <= k)
            .map(|(_, i)| *i)
            .max()
            .unwrap_or(0);
        let ok = (floor..=started.min(ops.len())).any(|j| r.states[j] == got);
        assert!(
            ok,
            "{alloc:?} {mode:?}: crash at write {k}: state matches no operation boundary in {floor}..={started}\n got {:?}",
            short(&got)
        );
        // Replay was written back; the volume is clean again after closing.
        let dev = fs.close().unwrap();
        assert_fsck_clean(&dev);
    }
}

#[test]
fn every_crash_point_recovers_zrr_in_order() {
    check_all_crash_points(AllocPolicy::Zrr, CrashMode::InOrderTorn, 1);
}

#[test]
fn every_crash_point_recovers_zrr_random_subset() {
    check_all_crash_points(AllocPolicy::Zrr, CrashMode::RandomSubsetTorn, 2);
}

#[test]
fn every_crash_point_recovers_contig_random_subset() {
    check_all_crash_points(AllocPolicy::Contig, CrashMode::RandomSubsetTorn, 3);
}

#[test]
fn every_crash_point_recovers_seq_in_order() {
    check_all_crash_points(AllocPolicy::Seq, CrashMode::InOrderTorn, 4);
}
