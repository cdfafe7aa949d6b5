//! Retention in virtual time (issue 26; docs/retention.md "In the simulator"): a
//! recorder on a full `avfs-250g` records on because retention deletes its oldest
//! chunks, paced, with no miss. Deterministic, so asserted. The suite runs two-hour
//! runs on two seeds; the docs have the 24-hour, ten-seed figures
//! (`scripts/retention-sim.sh`).

use dvrfs_core::disk::{DiskModel, Estimator};
use dvrfs_core::engine::{EngineConfig, RETENTION_DELETE_GAP_NS, RETENTION_MAX_PER_COMMIT};
use dvrfs_core::format::inode::StreamRetention;
use dvrfs_core::format::superblock::VolumeRetention;
use dvrfs_core::sim::{run, HddDisk, SimConfig, SimOutcome, SimRetention, Workload};
use dvrfs_core::sim::{SIM_CHUNK_NS, SIM_UTC_EPOCH_NS};
use std::thread;

const HOUR_NS: u64 = 3_600_000_000_000;

fn config(workload: &str, seed: u64, retention: Option<SimRetention>) -> SimConfig {
    let mut cfg = SimConfig::new(Workload::parse(workload).unwrap());
    cfg.fill = 0.95;
    cfg.duration_ns = 2 * HOUR_NS;
    cfg.seed = seed;
    cfg.retention = retention;
    cfg
}

fn marks(high: u16, low: u16) -> SimRetention {
    SimRetention {
        volume: VolumeRetention {
            high_permille: high,
            low_permille: low,
            protected_max_permille: 0,
        },
        stream: None,
        chunk_ns: SIM_CHUNK_NS,
        utc_epoch_ns: SIM_UTC_EPOCH_NS,
    }
}

fn run_cfg(cfg: &SimConfig) -> SimOutcome {
    let model = DiskModel::builtin("avfs-250g").unwrap();
    let engine = EngineConfig {
        estimator: Box::new(Estimator::from_model(&model)),
        ..EngineConfig::new(model.sector_bytes)
    };
    run(cfg, &mut HddDisk::new(&model, cfg.seed), engine).unwrap()
}

/// Runs `cfgs` two at a time.
fn run_all(cfgs: Vec<SimConfig>) -> Vec<SimOutcome> {
    thread::scope(|s| {
        let handles: Vec<_> = cfgs.iter().map(|c| s.spawn(|| run_cfg(c))).collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

/// The bytes eight recordings at 8 Mbit/s write in `ns` (`rt_bytes` counts the
/// playbacks' too).
fn recorded_bytes(ns: u64) -> u64 {
    8 * 1_000_000 * (ns / 1_000_000_000)
}

#[test]
fn a_full_recorder_records_on_with_high_and_low_marks() {
    let workload = "8w@8M,2r@8M";
    let with: Vec<SimConfig> = (1..=2)
        .map(|seed| config(workload, seed, Some(marks(950, 900))))
        .collect();
    let mut cfgs = with.clone();
    cfgs.push(config(workload, 1, None));
    let outs = run_all(cfgs);
    for (cfg, o) in with.iter().zip(&outs) {
        let seed = cfg.seed;
        let r = o.retention.as_ref().expect("a run with retention");
        assert_eq!(o.deadline_misses, 0, "seed {seed}: {:?}", o.misses);
        assert_eq!(o.recordings_stopped, 0, "seed {seed}");
        // Use never above high by more than one commit's worth of recording
        // (8 x 1 MB/s for the 1 s commit interval) and one data block.
        let data = o.data_bytes;
        let bound = data * 950 / 1000 + 8_000_000 + o.data_block_bytes;
        assert!(
            o.usage_max_bytes <= bound,
            "seed {seed}: use reached {} of {data} bytes",
            o.usage_max_bytes
        );
        assert!(
            o.usage_max_bytes * 1000 > data * 949,
            "seed {seed}: never reached high"
        );
        // What was recorded went, but for what the run ended above low with.
        let f = &r.figures;
        let ended_at_most = data * 950 / 1000 + 8_000_000 + o.data_block_bytes;
        assert!(
            f.deleted_bytes + ended_at_most
                >= o.used_bytes_at_start + recorded_bytes(cfg.duration_ns),
            "seed {seed}: {} bytes deleted, {} recorded from {} in use",
            f.deleted_bytes,
            recorded_bytes(cfg.duration_ns),
            o.used_bytes_at_start
        );
        // Paced: a commit carries at most its bound of deletions (a commit
        // interval's worth at 1 s), however many are queued.
        assert_eq!(
            RETENTION_MAX_PER_COMMIT,
            1_000_000_000u64.div_ceil(RETENTION_DELETE_GAP_NS)
        );
        assert!(f.commits > 0, "seed {seed}");
        assert!(
            f.commit_max_chunks <= RETENTION_MAX_PER_COMMIT,
            "seed {seed}: {f:?}"
        );
        assert_eq!(f.shortfall_ns, 0, "seed {seed}");
        assert!(f.min_age_unmet.is_empty(), "seed {seed}");
        // Every recording made its chunks: two hours of ten-minute chunks.
        assert_eq!(r.chunks_started, 8 * 12, "seed {seed}");
        // The oldest went: every stream's chunks left are the newest ones.
        for (path, _, chunks) in &r.streams_end {
            assert!(*chunks >= 2, "{path}: {chunks} chunks left");
        }
    }
    // The same without retention: the recordings stop for space, with their misses.
    let without = &outs[2];
    assert!(without.retention.is_none());
    assert_eq!(without.recordings_stopped, 8);
    assert!(without.misses.no_space > 0);
}

#[test]
fn max_size_keeps_every_stream_within_its_size_plus_a_chunk() {
    let max_bytes: u64 = 25 << 30;
    let r = SimRetention {
        stream: Some(StreamRetention {
            max_age_s: 0,
            min_age_s: 0,
            max_bytes,
        }),
        ..marks(0, 0)
    };
    let cfg = config("7w@8M,1w@16M", 1, Some(r));
    let o = &run_all(vec![cfg])[0];
    assert_eq!(o.deadline_misses, 0, "{:?}", o.misses);
    assert_eq!(o.recordings_stopped, 0);
    let ret = o.retention.as_ref().unwrap();
    assert_eq!(ret.streams_end.len(), 8);
    for (path, bytes, _) in &ret.streams_end {
        let rate_bps = if path.ends_with("s0007") { 16e6 } else { 8e6 };
        let chunk = (rate_bps / 8.0 * SIM_CHUNK_NS as f64 / 1e9) as u64;
        assert!(
            *bytes <= max_bytes + chunk,
            "{path}: {bytes} bytes, over {max_bytes} plus a chunk of {chunk}"
        );
        // And not far under: it deleted only what it had to.
        assert!(
            *bytes + chunk > max_bytes,
            "{path}: only {bytes} bytes kept"
        );
    }
    assert!(ret.figures.deleted_bytes > 0);
}

#[test]
fn a_long_commit_interval_slows_deletion_instead_of_growing_commits() {
    // Two playbacks on a 95% full volume whose whole history is past its max-age:
    // all of it goes at once, but at most 20 chunks in any commit even when a
    // commit comes only every 5 s; the two chunks being played stay.
    let r = SimRetention {
        stream: Some(StreamRetention {
            max_age_s: 60,
            min_age_s: 0,
            max_bytes: 0,
        }),
        ..marks(0, 0)
    };
    let mut cfg = config("2r@8M", 1, Some(r));
    cfg.commit_interval_ms = 5000;
    cfg.duration_ns = 120_000_000_000;
    let o = &run_all(vec![cfg])[0];
    assert_eq!(o.deadline_misses, 0, "{:?}", o.misses);
    let ret = o.retention.as_ref().unwrap();
    let f = &ret.figures;
    assert_eq!(f.commit_max_chunks, RETENTION_MAX_PER_COMMIT, "{f:?}");
    assert!(f.commits >= f.deleted_chunks.div_ceil(RETENTION_MAX_PER_COMMIT));
    let left: u64 = ret.streams_end.iter().map(|s| s.2).sum();
    assert_eq!(left, 2, "the played chunks stay: {:?}", ret.streams_end);
    assert!(o.usage_max_bytes * 100 >= o.data_bytes * 94);
}
