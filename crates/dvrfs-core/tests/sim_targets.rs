//! The acceptance figures, in virtual time (deterministic, so asserted): the
//! AVFS paper's workloads on `avfs-250g` with the paper's parameters (19.39 Mbit/s,
//! 512 KiB requests, depth 8, m = 500 ms, e = 100 ms, 80% full, one hour).

use dvrfs_core::disk::{capacity, DiskModel, Estimator, StreamParams};
use dvrfs_core::engine::EngineConfig;
use dvrfs_core::format::superblock::AllocPolicy;
use dvrfs_core::qos::Report;
use dvrfs_core::sched::SchedSettings;
use dvrfs_core::sim::{find_max, run, BestEffort, HddDisk, SimConfig, SimOutcome, Workload};

const PAPER_WORKLOADS: [&str; 8] = [
    "2r0w", "4r0w", "6r0w", "8r0w", "0r2w", "2r2w", "4r2w", "6r2w",
];

fn config(workload: &str, alloc: AllocPolicy, seed: u64, be: Option<BestEffort>) -> SimConfig {
    let mut cfg = SimConfig::new(Workload::parse(workload).unwrap());
    cfg.alloc = alloc;
    cfg.seed = seed;
    cfg.best_effort = be;
    cfg
}

/// One run as `dvrfs sim` does it (merging up to 4 MiB, the CLI default).
fn run_cfg(cfg: &SimConfig, scheduler: &str) -> SimOutcome {
    let model = DiskModel::builtin("avfs-250g").unwrap();
    let engine = EngineConfig {
        scheduler: scheduler.into(),
        settings: SchedSettings::default(),
        estimator: Box::new(Estimator::from_model(&model)),
        ..EngineConfig::new(model.sector_bytes)
    };
    let mut disk = HddDisk::new(&model, cfg.seed);
    run(cfg, &mut disk, engine).unwrap()
}

fn sim(
    workload: &str,
    scheduler: &str,
    alloc: AllocPolicy,
    seed: u64,
    be: Option<BestEffort>,
) -> Report {
    let cfg = config(workload, alloc, seed, be);
    let o = run_cfg(&cfg, scheduler);
    Report::new(&o, workload, alloc.as_str(), cfg.duration_ns, seed)
}

fn max_streams(scheduler: &str, alloc: AllocPolicy) -> u32 {
    let cfg = config("8r0w", alloc, 1, None);
    find_max(
        &cfg,
        |c| Ok(run_cfg(c, scheduler)),
        |o| o.deadline_misses == 0 && o.be_guarantee_met(),
    )
    .unwrap()
    .count
}

#[test]
fn mixer_and_avfs_meet_every_deadline_with_half_the_margin_in_the_paper_workloads() {
    for w in PAPER_WORKLOADS {
        for s in ["avfs", "mixer"] {
            let r = sim(w, s, AllocPolicy::Zrr, 1, None);
            assert_eq!(r.deadline_misses, 0, "{s} {w}");
            assert!(
                r.margin_ms.min >= 250.0,
                "{s} {w}: min margin {} ms",
                r.margin_ms.min
            );
            assert_eq!(
                r.counters.inserted,
                r.counters.completed + r.counters.failed,
                "{s} {w}"
            );
        }
    }
}

#[test]
fn mixer_keeps_utilization_low_at_8r0w() {
    let mixer = sim("8r0w", "mixer", AllocPolicy::Zrr, 1, None).utilization;
    let cfq = sim("8r0w", "cfq", AllocPolicy::Seq, 1, None).utilization;
    let deadline = sim("8r0w", "deadline", AllocPolicy::Seq, 1, None).utilization;
    assert!(
        mixer <= 0.57,
        "mixer+zrr utilization {mixer} (the paper: 0.57)"
    );
    assert!(
        mixer <= 0.8 * cfq.min(deadline),
        "mixer {mixer}, cfq+seq {cfq}, deadline+seq {deadline}"
    );
}

#[test]
fn zrr_keeps_utilization_stable_across_file_sets() {
    let u: Vec<f64> = (1..=10)
        .map(|seed| sim("4r2w", "mixer", AllocPolicy::Zrr, seed, None).utilization)
        .collect();
    let spread =
        u.iter().cloned().fold(f64::MIN, f64::max) - u.iter().cloned().fold(f64::MAX, f64::min);
    assert!(
        spread <= 0.02,
        "4r2w utilization over ten file sets spreads {:.2} points: {u:?}",
        spread * 100.0
    );
}

#[test]
fn deleting_20_gb_during_2r0w_causes_no_miss() {
    let r = sim(
        "2r0w",
        "mixer",
        AllocPolicy::Zrr,
        1,
        Some(BestEffort::Delete),
    );
    assert_eq!(r.deadline_misses, 0);
    assert!(
        r.journal_requests > 0,
        "the deletion went through the journal"
    );
}

#[test]
fn mixer_carries_the_most_streams_and_nears_the_bandwidth_bound() {
    let model = DiskModel::builtin("avfs-250g").unwrap();
    let params = StreamParams {
        bitrate_bps: 19.39e6,
        request_bytes: 512 << 10,
        depth: 8,
        be_share: 0.1,
    };
    let bound = capacity(&model, &params).bandwidth_bound_streams;
    let mut best = 0;
    for alloc in [AllocPolicy::Zrr, AllocPolicy::Seq] {
        let mixer = max_streams("mixer", alloc);
        for other in [
            "avfs", "fifo", "cscan", "edf", "scan-edf", "deadline", "cfq",
        ] {
            let m = max_streams(other, alloc);
            assert!(
                mixer >= m,
                "{alloc:?}: mixer carries {mixer} streams, {other} {m}"
            );
        }
        best = best.max(mixer);
    }
    assert!(
        best as f64 >= 0.8 * bound as f64,
        "mixer's best {best} streams against a bandwidth bound of {bound}"
    );
}
