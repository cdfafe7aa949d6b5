//! A small closed loop: periodic streams on a disk that takes exactly the estimated
//! service time (the linear eq. 1 estimate, "sequential" = continues the previous
//! command). Not the simulator (no mechanics); it checks the policies' dynamics:
//! the mixers keep every margin at light load with less disk time than C-SCAN, and
//! near capacity `mixer` does not miss more than `avfs`. Merging and the best-effort
//! share are off: this loop looks at the policies' own dynamics.

use dvrfs_core::sched::testing::{LinearEstimate, LBAS};
use dvrfs_core::sched::{
    by_name, Class, Command, Event, Request, SchedSettings, Scheduler, ServiceEstimate,
};

const MS: u64 = 1_000_000;
/// 512 KiB of a 19.39 Mbit/s stream.
const PERIOD_NS: u64 = 217 * MS;
const DEPTH: u64 = 8;
const SECTORS: u32 = 1024;
/// 4 MiB blocks: 8 requests per block, then a jump (zone round robin).
const BLOCK_SECTORS: u64 = 8192;

#[derive(Debug, Default)]
struct Outcome {
    misses: u64,
    completed: u64,
    min_margin_ms: i64,
    utilization: f64,
}

fn run(name: &str, streams: u64, writers: u64, secs: u64) -> Outcome {
    let settings = SchedSettings {
        merge_max_sectors: 0,
        be_share: 0.0,
        ..SchedSettings::default()
    };
    let mut s = by_name(name, settings, Box::new(LinearEstimate::default())).unwrap();
    run_with(&mut s, streams, writers, secs)
}

fn run_with(s: &mut Scheduler, streams: u64, writers: u64, secs: u64) -> Outcome {
    let est = LinearEstimate::default();
    let mut rng = 0x2545_F491_4F6C_DD1Du64;
    let mut rand = move || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    let blocks = LBAS / BLOCK_SECTORS;
    // Per stream: (phase, current block, index within block, next request number).
    let mut st: Vec<(u64, u64, u64, u64)> = (0..streams)
        .map(|k| (k * PERIOD_NS / streams, rand() % blocks, 0, 0))
        .collect();
    let end_ns = secs * 1_000 * MS;
    let mut now;
    let mut busy: Option<(u64, Command)> = None;
    let mut timer: Option<u64> = None;
    let mut prev_end = u64::MAX;
    let mut busy_ns = 0u64;
    let mut next_id = 1u64;
    let mut out = Outcome {
        min_margin_ms: i64::MAX,
        ..Default::default()
    };
    loop {
        let next_sub = st.iter().map(|x| x.0 + x.3 * PERIOD_NS).min().unwrap();
        let mut t = next_sub;
        if let Some((done, _)) = &busy {
            t = t.min(*done);
        }
        if let Some(u) = timer {
            t = t.min(u);
        }
        now = t;
        if now >= end_ns {
            break;
        }
        if let Some((done, r)) = busy.take() {
            if done == now {
                s.complete(r.id, now).unwrap();
                let margin = r.deadline_ns.unwrap() as i64 - now as i64;
                out.min_margin_ms = out.min_margin_ms.min(margin / MS as i64);
                out.completed += 1;
                if margin < 0 {
                    out.misses += 1;
                }
            } else {
                busy = Some((done, r));
            }
        }
        for (k, x) in st.iter_mut().enumerate() {
            let submit = x.0 + x.3 * PERIOD_NS;
            if submit == now {
                let lba = x.1 * BLOCK_SECTORS + x.2 * SECTORS as u64;
                x.2 += 1;
                if x.2 * SECTORS as u64 == BLOCK_SECTORS {
                    x.2 = 0;
                    x.1 = rand() % blocks;
                }
                x.3 += 1;
                s.insert(
                    Request {
                        id: next_id,
                        lba,
                        sectors: SECTORS,
                        write: (k as u64) < writers,
                        class: Class::RealTime,
                        deadline_ns: Some(submit + DEPTH * PERIOD_NS),
                        owner: k as u32,
                        submit_ns: submit,
                        drop_if_late: (k as u64) >= writers,
                    },
                    now,
                )
                .unwrap();
                next_id += 1;
            }
        }
        if timer == Some(now) {
            timer = None;
        }
        if busy.is_none() {
            loop {
                match s.dispatch(now) {
                    Event::Dispatch(r) => {
                        let t_s = est.service_ns(r.lba, r.sectors, r.write, r.lba == prev_end);
                        prev_end = r.end_lba();
                        busy_ns += t_s;
                        busy = Some((now + t_s, r));
                        timer = None;
                        break;
                    }
                    Event::Fail(rs) => out.misses += rs.len() as u64,
                    Event::Wait { until_ns } => {
                        timer = until_ns;
                        break;
                    }
                }
            }
        }
    }
    out.utilization = busy_ns as f64 / end_ns as f64;
    out
}

/// 120 s of `n` streams (a third of them recording) under the named policy.
fn outcome(name: &str, n: u64) -> Outcome {
    let o = run(name, n, n / 3, 120);
    eprintln!("{n:2} streams {name:6} {o:?}");
    o
}

#[test]
fn sched_streams_mixer_holds_at_light_load() {
    let (avfs, mixer, cscan) = (outcome("avfs", 8), outcome("mixer", 8), outcome("cscan", 8));
    assert_eq!((avfs.misses, mixer.misses, cscan.misses), (0, 0, 0));
    // Holding builds sequential runs: far less disk time than C-SCAN, about avfs's.
    assert!(
        mixer.utilization < cscan.utilization - 0.2,
        "{mixer:?} {cscan:?}"
    );
    assert!(
        mixer.utilization < avfs.utilization + 0.05,
        "{mixer:?} {avfs:?}"
    );
    // With no best-effort work, fix 7 lets the hold use a tenth of the 500 ms margin;
    // the hold is decided between commands, so one command (about 25 ms here) may come
    // on top.
    let light_margin_ms = 500 * dvrfs_core::sched::mixer::LIGHT_HOLD_MARGIN_PERCENT / 100;
    assert!(mixer.min_margin_ms >= light_margin_ms - 30, "{mixer:?}");
}

#[test]
fn sched_streams_mixer_keeps_cscan_capacity_where_avfs_collapses() {
    let (avfs, mixer, cscan) = (
        outcome("avfs", 16),
        outcome("mixer", 16),
        outcome("cscan", 16),
    );
    assert_eq!(cscan.misses, 0);
    assert_eq!(mixer.misses, 0, "{mixer:?}");
    assert!(avfs.misses > 0, "{avfs:?}");
    // Past capacity the mixer degrades like C-SCAN, not into an EDF collapse.
    let (mixer, cscan) = (outcome("mixer", 18), outcome("cscan", 18));
    assert!(
        mixer.misses <= cscan.misses + cscan.misses / 10 + 10,
        "{mixer:?} {cscan:?}"
    );
}
