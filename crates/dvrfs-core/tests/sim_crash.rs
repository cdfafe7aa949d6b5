//! Power cuts during a simulated run. A run with recordings, playbacks, a periodic
//! application `fsync` and the deletion of a large recording is cut at seeded random
//! metadata writes (journal, checkpoint, invalidation), the last one torn, the writes
//! since the last flush landing in order or as a random subset. The media left behind
//! must recover: the journal replays, fsck is clean, every recording is at least as
//! long as it was at the last completed fsync (nothing durable is lost), and the
//! deleted recording is either whole or gone (gone for sure once an fsync after the
//! unlink completed).

mod common;

use common::assert_fsck_clean;
use dvrfs_core::device::CrashMode;
use dvrfs_core::disk::Access;
use dvrfs_core::disk::AccessTiming;
use dvrfs_core::engine::EngineConfig;
use dvrfs_core::sched::testing::LinearEstimate;
use dvrfs_core::sim::{run, run_until_crash, BestEffort, DiskTimer, SimConfig, Workload};
use dvrfs_core::{Fs, OpenOptions};
use rand_chacha::rand_core::{RngCore, SeedableRng};

/// A small disk: fixed positioning time, constant rate.
struct SmallDisk {
    next_lba: u64,
}

impl DiskTimer for SmallDisk {
    fn service(&mut self, issue_ns: u64, a: &Access) -> AccessTiming {
        let seek = if a.lba == self.next_lba { 0 } else { 8_000_000 };
        let transfer = a.sectors as u64 * 512 * 1_000_000_000 / 80_000_000;
        self.next_lba = a.lba + a.sectors as u64;
        AccessTiming {
            start_ns: issue_ns,
            end_ns: issue_ns + seek + transfer,
            seek_ns: seek,
            transfer_ns: transfer,
            ..Default::default()
        }
    }
    fn capacity_bytes(&self) -> u64 {
        16 << 30
    }
    fn sector_bytes(&self) -> u32 {
        512
    }
    fn name(&self) -> String {
        "small".into()
    }
}

fn engine() -> EngineConfig {
    EngineConfig {
        estimator: Box::new(LinearEstimate::default()),
        ..EngineConfig::new(512)
    }
}

fn config() -> SimConfig {
    let mut c = SimConfig::new(Workload::parse("2r3w").unwrap());
    c.fill = 0.6;
    c.block_bytes = 1 << 20;
    c.duration_ns = 40_000_000_000;
    c.best_effort = Some(BestEffort::Delete);
    c.delete_bytes = 1 << 30;
    c.fsync_every_ns = 3_000_000_000;
    c
}

#[test]
fn a_power_cut_anywhere_in_a_run_recovers_with_nothing_durable_lost() {
    let c = config();
    // How many metadata writes the run makes without a cut.
    let clean = run(&c, &mut SmallDisk { next_lba: 0 }, engine()).unwrap();
    assert_eq!(clean.deadline_misses, 0);
    let writes = clean.journal_requests;
    assert!(writes > 40, "the run commits: {writes} metadata writes");
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
    let mut checked = 0;
    for i in 0..14 {
        let at = rng.next_u64() % writes;
        let mode = if i % 2 == 0 {
            CrashMode::InOrderTorn
        } else {
            CrashMode::RandomSubsetTorn
        };
        let Some(cut) =
            run_until_crash(&c, &mut SmallDisk { next_lba: 0 }, engine(), at, mode).unwrap()
        else {
            continue;
        };
        checked += 1;
        let fs = Fs::open(cut.image, OpenOptions::writable())
            .unwrap_or_else(|e| panic!("cut at write {at} ({mode:?}): open failed: {e}"));
        for (path, durable) in &cut.durable {
            let ino = fs
                .resolve(path)
                .unwrap_or_else(|e| panic!("cut at write {at}: {path} lost: {e}"));
            let size = fs.stat(ino).unwrap().size_bytes;
            assert!(
                size >= *durable,
                "cut at write {at} ({mode:?}): {path} has {size} bytes, {durable} were durable"
            );
        }
        if let Some((victim, gone)) = &cut.victim {
            if let Ok(ino) = fs.resolve(victim) {
                assert!(
                    !gone,
                    "cut at write {at}: {victim} came back after a durable unlink"
                );
                assert_eq!(fs.stat(ino).unwrap().size_bytes, c.delete_bytes);
            }
        }
        let dev = fs.close().unwrap();
        assert_fsck_clean(&dev);
    }
    assert!(checked >= 10, "only {checked} cuts happened inside the run");
}
