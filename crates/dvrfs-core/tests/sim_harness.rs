//! The simulation shell on a simple linear disk: determinism, the conservation law,
//! stream timing and the file-system traffic it drives.

use dvrfs_core::disk::{Access, AccessTiming};
use dvrfs_core::engine::EngineConfig;
use dvrfs_core::format::superblock::AllocPolicy;
use dvrfs_core::sched::{testing::LinearEstimate, SchedSettings};
use dvrfs_core::sim::{run, BestEffort, DiskTimer, SimConfig, Workload};

fn engine(policy: &str) -> EngineConfig {
    EngineConfig {
        scheduler: policy.into(),
        settings: SchedSettings::default(),
        estimator: Box::new(LinearEstimate::default()),
        ..EngineConfig::new(512)
    }
}

fn fifo() -> EngineConfig {
    engine("fifo")
}

/// A disk with a fixed positioning time for non-contiguous requests and a transfer rate
/// falling linearly from outer to inner edge.
struct LinearDisk {
    capacity_bytes: u64,
    position_ns: u64,
    outer_bytes_per_s: f64,
    inner_bytes_per_s: f64,
    next_lba: u64,
}

impl LinearDisk {
    fn new(capacity_bytes: u64) -> Self {
        LinearDisk {
            capacity_bytes,
            position_ns: 12_000_000,
            outer_bytes_per_s: 70e6,
            inner_bytes_per_s: 38.5e6,
            next_lba: 0,
        }
    }
}

impl DiskTimer for LinearDisk {
    fn service(&mut self, issue_ns: u64, a: &Access) -> AccessTiming {
        let frac = (a.lba * 512) as f64 / self.capacity_bytes as f64;
        let rate =
            self.outer_bytes_per_s - (self.outer_bytes_per_s - self.inner_bytes_per_s) * frac;
        let seek = if a.lba == self.next_lba {
            0
        } else {
            self.position_ns
        };
        let transfer = (a.sectors as f64 * 512.0 / rate * 1e9) as u64;
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
        self.capacity_bytes
    }
    fn sector_bytes(&self) -> u32 {
        512
    }
    fn name(&self) -> String {
        "linear".into()
    }
}

fn cfg(workload: &str) -> SimConfig {
    let mut c = SimConfig::new(Workload::parse(workload).unwrap());
    c.duration_ns = 60_000_000_000;
    c.fill = 0.5;
    c
}

#[test]
fn same_seed_same_outcome() {
    let c = cfg("2r2w");
    let a = run(&c, &mut LinearDisk::new(40 << 30), fifo()).unwrap();
    let b = run(&c, &mut LinearDisk::new(40 << 30), fifo()).unwrap();
    assert_eq!(a.margins_ns, b.margins_ns);
    assert_eq!(a.seek_distances_bytes, b.seek_distances_bytes);
    assert_eq!(a.busy_ns, b.busy_ns);
    let mut c2 = c.clone();
    c2.seed = 2;
    let d = run(&c2, &mut LinearDisk::new(40 << 30), fifo()).unwrap();
    assert_ne!(a.margins_ns, d.margins_ns, "another seed, another run");
}

#[test]
fn light_load_meets_every_deadline_and_counts_add_up() {
    let c = cfg("2r2w");
    let o = run(&c, &mut LinearDisk::new(40 << 30), fifo()).unwrap();
    // 60 s at 19.39 Mbit/s in 512 KiB requests: about 277 requests per stream.
    assert!((1000..1200).contains(&o.rt_requests), "{}", o.rt_requests);
    assert_eq!(o.margins_ns.len() as u64, o.rt_requests);
    assert_eq!(o.deadline_misses, 0);
    assert!(o.margins_ns.iter().all(|&m| m > 0));
    assert_eq!(
        o.counters.inserted,
        o.counters.completed + o.counters.failed + o.counters.cancelled
    );
    // Recordings were written through the file system: data and journal traffic.
    assert!(
        o.journal_requests > 0,
        "the journal committed the recordings' metadata"
    );
    let util = o.busy_ns as f64 / o.elapsed_ns as f64;
    assert!(util > 0.05 && util < 0.5, "utilization {util}");
}

#[test]
fn overload_misses_deadlines_and_reads_fail() {
    let c = cfg("30r");
    let o = run(&c, &mut LinearDisk::new(40 << 30), fifo()).unwrap();
    assert!(o.deadline_misses > 0);
    assert!(
        o.failed_reads > 0,
        "reads past their deadline are failed, not served"
    );
}

#[test]
fn best_effort_generators_run() {
    for (be, policy) in [
        (BestEffort::Photos, AllocPolicy::Zrr),
        (BestEffort::GreedyRead, AllocPolicy::Seq),
        (BestEffort::GreedyWrite, AllocPolicy::Contig),
        (BestEffort::Delete, AllocPolicy::Zrr),
    ] {
        let mut c = cfg("1r1w");
        c.best_effort = Some(be);
        c.alloc = policy;
        c.delete_bytes = 2 << 30;
        let o = run(&c, &mut LinearDisk::new(40 << 30), fifo()).unwrap();
        match be {
            BestEffort::Delete => assert!(o.journal_requests > 0),
            BestEffort::Photos => assert!(
                o.be_bytes > 100 * 300_000 && o.be_bytes < 100 * 2_300_001,
                "{}",
                o.be_bytes
            ),
            _ => assert!(o.be_bytes > 100 << 20, "{be:?} moved {} bytes", o.be_bytes),
        }
    }
}

#[test]
fn bad_configurations_are_refused() {
    let mut c = cfg("2r");
    c.fill = 1.2;
    assert!(run(&c, &mut LinearDisk::new(40 << 30), fifo()).is_err());
    let mut c = cfg("2r");
    c.fill = 0.0;
    let e = run(&c, &mut LinearDisk::new(40 << 30), fifo()).unwrap_err();
    assert!(e.to_string().contains("--fill"), "{e}");
}

/// A recording that cannot go on (the disk is full) is not silence: every request it
/// could not issue is a miss with its cause, and the stop is reported.
#[test]
fn a_full_disk_stops_recordings_and_counts_every_request_it_could_not_issue() {
    let mut c = cfg("4w@80M");
    c.fill = 0.95;
    c.duration_ns = 120_000_000_000;
    let o = run(&c, &mut LinearDisk::new(8 << 30), fifo()).unwrap();
    assert!(o.recordings_stopped > 0, "the disk filled up: {o:?}");
    assert!(o.misses.no_space > 0);
    assert_eq!(o.deadline_misses, o.misses.total());
    // 4 streams * 120 s at 80 Mbit/s in 512 KiB requests, all counted.
    let expected = 4.0 * 120.0 * 80e6 / 8.0 / (512.0 * 1024.0);
    assert!(
        (o.rt_requests as f64 - expected).abs() < 0.01 * expected,
        "{} requests counted, {expected:.0} expected",
        o.rt_requests
    );
}

/// The first commit of a run comes one interval after it starts, not after whatever
/// clock the fill phase used.
#[test]
fn journal_commits_run_from_the_start_of_the_run() {
    let mut c = cfg("0r2w");
    c.duration_ns = 10_000_000_000;
    let o = run(&c, &mut LinearDisk::new(40 << 30), fifo()).unwrap();
    assert!(o.commits >= 8, "{} commits in 10 s", o.commits);
}

/// A playback's buffer is `depth` requests: its steady-state slack is `depth` periods
/// (AVFS 2.1: buffer size over rate), so on an idle disk without holding every
/// request completes with nearly `depth` periods to spare.
#[test]
fn playback_slack_is_depth_periods() {
    let c = cfg("1r");
    let o = run(&c, &mut LinearDisk::new(40 << 30), fifo()).unwrap();
    let period_ms = 512.0 * 1024.0 * 8.0 / 19.39e6 * 1e3;
    let mut m = o.margins_ns.clone();
    m.sort_unstable();
    let median_ms = m[m.len() / 2] as f64 / 1e6;
    assert!(
        median_ms > (c.depth as f64 - 0.5) * period_ms,
        "median margin {median_ms:.0} ms, period {period_ms:.0} ms"
    );
}
