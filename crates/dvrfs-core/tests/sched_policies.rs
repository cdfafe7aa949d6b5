//! Properties every scheduling policy keeps inside the framework, whatever its ordering
//! rules:
//! - the conservation law (`inserted == dispatched + failed + cancelled + queued`,
//!   `dispatched == completed + in_flight`) after every call, `queued()` exact, and the
//!   policy's entry count equal to the framework's;
//! - every dispatched command serves requests that were inserted and not yet handed
//!   out, contiguous, one class and one direction, within the merge limit; nothing is
//!   lost or duplicated, and a drain empties the scheduler;
//! - only reads of read operations whose deadline has passed are failed; writes are
//!   never dropped;
//! - `Wait { until_ns: None }` only with nothing queued, and a timer lies in the future;
//! - cancelled requests never come out again.

use dvrfs_core::sched::testing::LinearEstimate;
use dvrfs_core::sched::{by_name, Class, Event, ReqId, Request, SchedSettings, Scheduler, NAMES};
use proptest::prelude::*;
use std::collections::BTreeMap;

const MS: u64 = 1_000_000;
const MERGE_MAX: u32 = 4096;

fn make(name: &str, merge: bool, be_share: f64) -> Scheduler {
    let settings = SchedSettings {
        merge_max_sectors: if merge { MERGE_MAX } else { 0 },
        be_share,
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
        class: Class,
        deadline_in_ms: u64,
        owner: u32,
    },
    Dispatch,
    Complete,
    Cancel(prop::sample::Index),
    Advance(u64),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        5 => (
            0u64..48,
            prop_oneof![Just(8u32), Just(1024u32)],
            any::<bool>(),
            prop_oneof![
                3 => Just(Class::RealTime),
                1 => Just(Class::BestEffort),
                1 => Just(Class::Metadata),
            ],
            0u64..6_000,
            0u32..5,
        )
            .prop_map(|(slot, sectors, write, class, deadline_in_ms, owner)| Op::Insert {
                slot,
                sectors,
                write,
                class,
                deadline_in_ms,
                owner,
            }),
        4 => Just(Op::Dispatch),
        3 => Just(Op::Complete),
        1 => any::<prop::sample::Index>().prop_map(Op::Cancel),
        2 => (0u64..300).prop_map(|ms| Op::Advance(ms * MS)),
    ]
}

/// The harness: a disk of queue depth 1 around one scheduler, checking every answer.
struct Harness {
    s: Scheduler,
    merge: bool,
    now_ns: u64,
    next_id: ReqId,
    /// Inserted, neither dispatched, failed nor cancelled.
    queued: BTreeMap<ReqId, Request>,
    /// The command on the disk.
    in_flight: Option<u64>,
}

impl Harness {
    fn check(&self) -> Result<(), TestCaseError> {
        prop_assert_eq!(self.s.queued(), self.queued.len() as u64);
        prop_assert_eq!(self.s.has_work(), !self.queued.is_empty());
        if let Err(e) = self.s.check() {
            return Err(TestCaseError::fail(e));
        }
        Ok(())
    }

    fn failed(&mut self, rs: &[Request]) -> Result<(), TestCaseError> {
        for r in rs {
            let orig = self.queued.remove(&r.id);
            prop_assert_eq!(orig.as_ref(), Some(r));
            prop_assert!(!r.write, "a write was dropped");
            prop_assert!(r.drop_if_late, "a read that must complete was dropped");
            prop_assert!(r.deadline_ns.is_some_and(|d| d <= self.now_ns));
        }
        Ok(())
    }

    /// Asks for work for the free slot; returns the wait's timer if it waits.
    fn dispatch(&mut self) -> Result<Option<Option<u64>>, TestCaseError> {
        prop_assert!(self.in_flight.is_none());
        let ev = self.s.dispatch(self.now_ns);
        let failed = self.s.take_failed();
        self.failed(&failed)?;
        match ev {
            Event::Dispatch(cmd) => {
                prop_assert!(!cmd.members.is_empty());
                let mut end = cmd.members[0].lba;
                prop_assert_eq!(end, cmd.lba);
                for m in &cmd.members {
                    let r = self.queued.remove(&m.id);
                    prop_assert_eq!(r.as_ref(), Some(m), "unknown, altered or repeated request");
                    prop_assert_eq!(m.write, cmd.write);
                    prop_assert_eq!(m.class, cmd.class);
                    // Contiguous, except where a failed late read left a hole.
                    prop_assert!(m.lba >= end, "members overlap");
                    if m.lba > end {
                        prop_assert!(!cmd.write && !failed.is_empty());
                    }
                    end = m.end_lba();
                }
                prop_assert_eq!(end, cmd.end_lba());
                if self.merge {
                    prop_assert!(cmd.sectors <= MERGE_MAX || cmd.members.len() == 1);
                } else {
                    prop_assert_eq!(cmd.members.len(), 1);
                }
                self.in_flight = Some(cmd.id);
                Ok(None)
            }
            Event::Fail(rs) => {
                prop_assert!(!rs.is_empty());
                self.failed(&rs)?;
                Ok(None)
            }
            Event::Wait { until_ns } => {
                if let Some(u) = until_ns {
                    prop_assert!(u > self.now_ns, "timer {} not after now {}", u, self.now_ns);
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

    fn complete(&mut self) -> Result<(), TestCaseError> {
        if let Some(id) = self.in_flight.take() {
            self.now_ns += 5 * MS;
            prop_assert!(self.s.complete(id, self.now_ns).is_some());
            prop_assert!(self.s.complete(id, self.now_ns).is_none());
        }
        Ok(())
    }

    fn drain(&mut self) -> Result<(), TestCaseError> {
        for _ in 0..100_000 {
            self.complete()?;
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
        prop_assert_eq!(c.inserted, c.completed + c.failed + c.cancelled);
        self.check()
    }
}

fn run(name: &str, merge: bool, be_share: f64, ops: Vec<Op>) -> Result<(), TestCaseError> {
    let mut h = Harness {
        s: make(name, merge, be_share),
        merge,
        now_ns: 0,
        next_id: 1,
        queued: BTreeMap::new(),
        in_flight: None,
    };
    prop_assert_eq!(h.s.name(), name);
    for op in ops {
        match op {
            Op::Insert {
                slot,
                sectors,
                write,
                class,
                deadline_in_ms,
                owner,
            } => {
                let r = Request {
                    id: h.next_id,
                    // Slots 1024 sectors apart: contiguous neighbours are common.
                    lba: slot * 1024,
                    sectors,
                    write,
                    class,
                    deadline_ns: class
                        .has_deadline()
                        .then_some(h.now_ns + deadline_in_ms * MS),
                    owner,
                    submit_ns: h.now_ns,
                    drop_if_late: !write && class == Class::RealTime && slot % 3 != 0,
                };
                h.next_id += 1;
                h.queued.insert(r.id, r);
                prop_assert!(h.s.insert(r, h.now_ns).is_ok());
            }
            Op::Dispatch => {
                if h.in_flight.is_none() {
                    h.dispatch()?;
                }
            }
            Op::Complete => h.complete()?,
            Op::Cancel(i) => {
                if !h.queued.is_empty() {
                    let id = *h.queued.keys().nth(i.index(h.queued.len())).unwrap();
                    let got = h.s.cancel(id, h.now_ns);
                    prop_assert_eq!(got.as_ref(), h.queued.get(&id));
                    h.queued.remove(&id);
                    prop_assert!(h.s.cancel(id, h.now_ns).is_none());
                }
            }
            Op::Advance(dt) => h.now_ns += dt,
        }
        h.check()?;
    }
    h.drain()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    #[test]
    fn sched_every_policy_conserves_requests(ops in prop::collection::vec(op(), 1..300)) {
        for name in NAMES {
            run(name, true, 0.1, ops.clone())?;
        }
        run("mixer", false, 0.0, ops.clone())?;
        run("cfq", false, 0.3, ops)?;
    }
}

#[test]
fn sched_by_name_builds_every_policy_and_rejects_others() {
    for name in NAMES {
        assert_eq!(make(name, false, 0.1).name(), *name);
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
        let mut s = make(name, false, 0.1);
        let req = |id, write| Request {
            id,
            lba: 1000 * id,
            sectors: 8,
            write,
            class: Class::RealTime,
            deadline_ns: Some(10 * MS),
            owner: 1,
            submit_ns: 0,
            drop_if_late: !write,
        };
        s.insert(req(1, false), 0).unwrap();
        assert!(
            matches!(s.dispatch(20 * MS), Event::Fail(r) if r[0].id == 1),
            "{name}"
        );
        s.insert(req(2, true), 20 * MS).unwrap();
        let c = match s.dispatch(20 * MS) {
            Event::Dispatch(c) => c,
            e => panic!("{name}: {e:?}"),
        };
        assert_eq!(c.members[0].id, 2, "{name}");
        s.complete(c.id, 30 * MS).unwrap();
        let c = s.counters();
        assert_eq!((c.inserted, c.failed, c.completed), (2, 1, 1), "{name}");
        s.check().unwrap();
    }
}

/// Every policy gets the framework's merging: a stream's contiguous writes queued
/// together go out as one command.
#[test]
fn sched_every_policy_gets_merged_commands() {
    for name in NAMES {
        let mut s = make(name, true, 0.1);
        for i in 0..4u64 {
            s.insert(
                Request {
                    id: i + 1,
                    lba: 10_000 + i * 1024,
                    sectors: 1024,
                    write: true,
                    class: Class::RealTime,
                    deadline_ns: Some(100 * MS),
                    owner: 7,
                    submit_ns: 0,
                    drop_if_late: false,
                },
                0,
            )
            .unwrap();
        }
        let c = match s.dispatch(80 * MS) {
            Event::Dispatch(c) => c,
            e => panic!("{name}: {e:?}"),
        };
        assert_eq!(
            (c.lba, c.sectors, c.members.len()),
            (10_000, 4096, 4),
            "{name}"
        );
    }
}

/// With a heavy real-time queue the paper's mixer holds the disk idle; `mixer` starts.
#[test]
fn sched_mixer_does_not_hold_a_heavy_queue_but_avfs_does() {
    let load = |s: &mut Scheduler| {
        for i in 0..96u64 {
            s.insert(
                Request {
                    id: i + 1,
                    lba: (i % 48) * 9_000_000 + (i / 48) * 2048,
                    sectors: 1024,
                    write: i % 3 == 0,
                    class: Class::RealTime,
                    deadline_ns: Some(3_000 * MS),
                    owner: (i % 48) as u32,
                    submit_ns: 0,
                    drop_if_late: i % 3 != 0,
                },
                0,
            )
            .unwrap();
        }
    };
    let mut avfs = make("avfs", true, 0.1);
    load(&mut avfs);
    assert!(matches!(
        avfs.dispatch(0),
        Event::Wait { until_ns: Some(_) }
    ));
    let mut mixer = make("mixer", true, 0.1);
    load(&mut mixer);
    assert!(matches!(mixer.dispatch(0), Event::Dispatch(_)));
}
