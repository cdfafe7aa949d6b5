//! Properties every scheduling policy must keep, whatever its ordering rules:
//! - the conservation law (`inserted == dispatched + failed + queued`,
//!   `dispatched == completed + in_flight`) after every call, and `queued()` exact;
//! - every `Dispatch` hands out requests that were inserted and not yet handed out
//!   (merged commands: exactly their constituents, contiguous), nothing is lost or
//!   duplicated, and a drain empties the scheduler;
//! - only reads whose deadline has passed are failed; writes are never dropped;
//! - `Wait { until_ns: None }` only with nothing queued, and a hold timer lies in the
//!   future.

use dvrfs_core::sched::mixer::RUN_OVERLAP_SECTORS;
use dvrfs_core::sched::testing::LinearEstimate;
use dvrfs_core::sched::{
    by_name, Decision, ReqId, Request, SchedSettings, Scheduler, MERGED_ID_BASE, NAMES,
};
use proptest::prelude::*;
use std::collections::BTreeMap;

const MS: u64 = 1_000_000;

fn make(name: &str, merge: bool) -> Box<dyn Scheduler> {
    let settings = SchedSettings {
        merge_max_sectors: if merge { 4096 } else { 0 },
        ..SchedSettings::default()
    };
    by_name(name, settings, Box::new(LinearEstimate::default())).expect("known name")
}

#[derive(Clone, Debug)]
enum Op {
    Insert {
        slot: u64,
        sectors: u32,
        write: bool,
        deadline_in_ms: Option<u64>,
        owner: u32,
    },
    Dispatch,
    Complete,
    Advance(u64),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        5 => (
            0u64..48,
            prop_oneof![Just(8u32), Just(1024u32)],
            any::<bool>(),
            prop_oneof![1 => Just(None), 3 => (0u64..6_000).prop_map(Some)],
            0u32..5,
        )
            .prop_map(|(slot, sectors, write, deadline_in_ms, owner)| Op::Insert {
                slot,
                sectors,
                write,
                deadline_in_ms,
                owner,
            }),
        4 => Just(Op::Dispatch),
        3 => Just(Op::Complete),
        2 => (0u64..300).prop_map(|ms| Op::Advance(ms * MS)),
    ]
}

/// The harness: a disk of queue depth 1 around one policy, checking every answer.
struct Harness {
    s: Box<dyn Scheduler>,
    now_ns: u64,
    next_id: ReqId,
    /// Inserted, neither dispatched nor failed.
    queued: BTreeMap<ReqId, Request>,
    /// The command on the disk and the requests it stands for.
    in_flight: Option<(ReqId, Vec<ReqId>)>,
    handed_out: u64,
}

impl Harness {
    fn new(s: Box<dyn Scheduler>) -> Self {
        Harness {
            s,
            now_ns: 0,
            next_id: 1,
            queued: BTreeMap::new(),
            in_flight: None,
            handed_out: 0,
        }
    }

    fn check(&self) -> Result<(), TestCaseError> {
        let in_flight = self.in_flight.as_ref().map_or(0, |(_, v)| v.len() as u64);
        prop_assert_eq!(self.s.queued(), self.queued.len() as u64);
        prop_assert_eq!(self.s.has_work(), !self.queued.is_empty());
        let c = self.s.counters();
        if let Err(e) = c.check(self.s.queued(), in_flight) {
            return Err(TestCaseError::fail(e));
        }
        Ok(())
    }

    fn insert(&mut self, r: Request) {
        self.queued.insert(r.id, r.clone());
        self.s.insert(r, self.now_ns);
    }

    /// Asks the idle disk for work; returns the decision's hold timer if any.
    fn dispatch(&mut self) -> Result<Option<Option<u64>>, TestCaseError> {
        prop_assert!(self.in_flight.is_none());
        match self.s.dispatch(self.now_ns) {
            Decision::Dispatch(cmd) => {
                let parts = self.s.take_merged(cmd.id);
                if parts.is_empty() {
                    prop_assert!(cmd.id < MERGED_ID_BASE);
                    let orig = self.queued.remove(&cmd.id);
                    prop_assert_eq!(orig.as_ref(), Some(&cmd), "unknown or altered request");
                    self.in_flight = Some((cmd.id, vec![cmd.id]));
                } else {
                    prop_assert!(cmd.id >= MERGED_ID_BASE);
                    prop_assert!(parts.len() >= 2);
                    let mut end = cmd.lba;
                    for id in &parts {
                        let r = self.queued.remove(id);
                        prop_assert!(r.is_some(), "merged an unknown or handed-out request");
                        let r = r.unwrap();
                        if r.lba == end || end == cmd.lba {
                            prop_assert_eq!(r.lba, end, "merged requests are contiguous");
                        } else {
                            // `mixer` fix 6: a read may overlap the run's tail by up
                            // to RUN_OVERLAP_SECTORS and must reach beyond it.
                            prop_assert!(!r.write, "only reads overlap-merge");
                            prop_assert!(
                                r.lba < end && r.lba + RUN_OVERLAP_SECTORS >= end,
                                "merged requests are contiguous or overlap by at most a page"
                            );
                            prop_assert!(r.end_lba() > end, "an overlapping part extends the run");
                        }
                        prop_assert_eq!(r.write, cmd.write);
                        end = end.max(r.end_lba());
                    }
                    prop_assert_eq!(end, cmd.end_lba());
                    self.in_flight = Some((cmd.id, parts));
                }
                self.handed_out += 1;
                Ok(None)
            }
            Decision::Fail(r) => {
                let orig = self.queued.remove(&r.id);
                prop_assert_eq!(orig.as_ref(), Some(&r));
                prop_assert!(!r.write, "a write was dropped");
                prop_assert!(r.deadline_ns.is_some_and(|d| d <= self.now_ns));
                Ok(None)
            }
            Decision::Wait { until_ns } => {
                if let Some(u) = until_ns {
                    prop_assert!(
                        u > self.now_ns,
                        "hold timer {} not after now {}",
                        u,
                        self.now_ns
                    );
                } else {
                    prop_assert!(
                        self.queued.is_empty(),
                        "idle with {} queued",
                        self.queued.len()
                    );
                }
                Ok(Some(until_ns))
            }
        }
    }

    fn complete(&mut self) {
        if let Some((id, _)) = self.in_flight.take() {
            self.now_ns += 5 * MS;
            self.s.complete(id, self.now_ns);
        }
    }

    fn drain(&mut self) -> Result<(), TestCaseError> {
        for _ in 0..100_000 {
            self.complete();
            match self.dispatch()? {
                None => {}
                Some(Some(u)) => self.now_ns = u,
                Some(None) => break,
            }
            self.check()?;
        }
        prop_assert!(
            self.queued.is_empty(),
            "{} requests never served",
            self.queued.len()
        );
        prop_assert!(self.in_flight.is_none());
        let c = self.s.counters();
        prop_assert_eq!(c.inserted, c.completed + c.failed);
        self.check()
    }
}

fn run(name: &str, merge: bool, ops: Vec<Op>) -> Result<(), TestCaseError> {
    let mut h = Harness::new(make(name, merge));
    prop_assert_eq!(h.s.name(), name);
    for op in ops {
        match op {
            Op::Insert {
                slot,
                sectors,
                write,
                deadline_in_ms,
                owner,
            } => {
                let r = Request {
                    id: h.next_id,
                    // Slots 1024 sectors apart: contiguous neighbours are common.
                    lba: slot * 1024,
                    sectors,
                    write,
                    deadline_ns: deadline_in_ms.map(|ms| h.now_ns + ms * MS),
                    owner,
                    submit_ns: h.now_ns,
                };
                h.next_id += 1;
                h.insert(r);
            }
            Op::Dispatch => {
                if h.in_flight.is_none() {
                    h.dispatch()?;
                }
            }
            Op::Complete => h.complete(),
            Op::Advance(dt) => h.now_ns += dt,
        }
        h.check()?;
    }
    h.drain()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn sched_every_policy_conserves_requests(ops in prop::collection::vec(op(), 1..300)) {
        for name in NAMES {
            run(name, false, ops.clone())?;
        }
        run("mixer", true, ops)?;
    }
}

#[test]
fn sched_by_name_builds_every_policy_and_rejects_others() {
    for name in NAMES {
        assert_eq!(make(name, false).name(), *name);
    }
    let err = by_name(
        "noop",
        SchedSettings::default(),
        Box::new(LinearEstimate::default()),
    )
    .err()
    .expect("unknown name is an error")
    .to_string();
    assert!(err.contains("noop"));
    for name in NAMES {
        assert!(err.contains(name), "{err}");
    }
}

#[test]
fn sched_every_policy_fails_late_reads_and_serves_late_writes() {
    for name in NAMES {
        let mut s = make(name, false);
        let req = |id, write| Request {
            id,
            lba: 1000 * id,
            sectors: 8,
            write,
            deadline_ns: Some(10 * MS),
            owner: 1,
            submit_ns: 0,
        };
        s.insert(req(1, false), 0);
        assert!(
            matches!(s.dispatch(20 * MS), Decision::Fail(r) if r.id == 1),
            "{name}"
        );
        s.insert(req(2, true), 20 * MS);
        assert!(
            matches!(s.dispatch(20 * MS), Decision::Dispatch(r) if r.id == 2),
            "{name}"
        );
        s.complete(2, 30 * MS);
        let c = s.counters();
        assert_eq!((c.inserted, c.failed, c.completed), (2, 1, 1), "{name}");
        c.check(0, 0).unwrap();
    }
}

/// With a heavy real-time queue the paper's mixer holds the disk idle; `mixer` starts.
#[test]
fn sched_mixer_does_not_hold_a_heavy_queue_but_avfs_does() {
    let load = |s: &mut Box<dyn Scheduler>| {
        for i in 0..96u64 {
            s.insert(
                Request {
                    id: i + 1,
                    lba: (i % 48) * 9_000_000 + (i / 48) * 1024,
                    sectors: 1024,
                    write: i % 3 == 0,
                    deadline_ns: Some(3_000 * MS),
                    owner: (i % 48) as u32,
                    submit_ns: 0,
                },
                0,
            );
        }
    };
    let mut avfs = make("avfs", false);
    load(&mut avfs);
    assert!(matches!(
        avfs.dispatch(0),
        Decision::Wait { until_ns: Some(_) }
    ));
    let mut mixer = make("mixer", false);
    load(&mut mixer);
    assert!(matches!(mixer.dispatch(0), Decision::Dispatch(_)));
}
