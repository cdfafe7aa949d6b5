//! Cost of the traffic mixers per request with many pending real-time requests.
//!
//! Steady state: `n` real-time requests pending (512 KiB at random LBAs of avfs-250g,
//! deadlines spread so that the mixer alternates between holding and batches). One
//! measured step = insert one new request + dispatch until the disk gets a request
//! (following hold timers in virtual time) + complete it, so `n` stays constant.
//! Run: `cargo bench -p dvrfs-core --bench mixer`.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use dvrfs_core::sched::testing::{LinearEstimate, LBAS};
use dvrfs_core::sched::{by_name, Class, Event, Request, SchedSettings, Scheduler};
use std::hint::black_box;
use std::time::Duration;

const MS: u64 = 1_000_000;
/// Virtual time one request keeps the disk busy (512 KiB with a short seek).
const SERVICE_NS: u64 = 10 * MS;

struct Rig {
    sched: Scheduler,
    now_ns: u64,
    next_id: u64,
    rng: u64,
    pending: u64,
}

impl Rig {
    fn new(name: &str, n: u64) -> Self {
        // No best effort here.
        let settings = SchedSettings {
            be_share: 0.0,
            ..SchedSettings::default()
        };
        let sched =
            by_name(name, settings, Box::new(LinearEstimate::default())).expect("known scheduler");
        let mut rig = Rig {
            sched,
            now_ns: 0,
            next_id: 1,
            rng: 0x1234_5678_9abc_def1,
            pending: n,
        };
        for _ in 0..n {
            rig.insert();
        }
        // Warm up into the steady state.
        for _ in 0..(2 * n).max(100) {
            rig.step();
        }
        rig
    }

    fn rand(&mut self) -> u64 {
        let mut x = self.rng;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.rng = x;
        x
    }

    fn insert(&mut self) {
        // 1024 sectors at the start of a 2048-sector slot: no two requests are ever
        // contiguous, so none merge and every step serves exactly one.
        let lba = (self.rand() % (LBAS / 2048)) * 2048;
        // Deadline: the queue's drain time plus a buffer of 1.7 s, jittered.
        let deadline =
            self.now_ns + self.pending * SERVICE_NS + 1_700 * MS + self.rand() % (200 * MS);
        let req = Request {
            id: self.next_id,
            lba,
            sectors: 1024,
            write: self.next_id.is_multiple_of(4),
            class: Class::RealTime,
            deadline_ns: Some(deadline),
            owner: (self.next_id % 64) as u32,
            submit_ns: self.now_ns,
            drop_if_late: !self.next_id.is_multiple_of(4),
        };
        self.next_id += 1;
        self.sched
            .insert(req, self.now_ns)
            .expect("a valid request");
    }

    fn step(&mut self) {
        self.insert();
        loop {
            match self.sched.dispatch(self.now_ns) {
                Event::Dispatch(r) => {
                    self.now_ns += SERVICE_NS;
                    self.sched.complete(black_box(r.id), self.now_ns);
                    return;
                }
                Event::Fail(_) => return,
                Event::Wait { until_ns: Some(u) } => self.now_ns = u.max(self.now_ns + 1),
                Event::Wait { until_ns: None } => unreachable!("requests are pending"),
            }
        }
    }
}

fn bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("insert+dispatch+complete");
    group
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(1))
        .sample_size(20);
    for name in ["avfs", "mixer"] {
        for n in [10u64, 100, 1_000, 10_000] {
            let mut rig = Rig::new(name, n);
            group.bench_with_input(BenchmarkId::new(name, n), &n, |b, _| b.iter(|| rig.step()));
            assert_eq!(rig.sched.queued(), n, "steady state keeps n pending");
        }
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
