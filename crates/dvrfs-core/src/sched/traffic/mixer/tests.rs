//! The mixer's unit tests: each fix against the paper's behaviour, driven directly
//! (without the framework) on the linear eq. 1 estimate of `testing.rs`.
//!
//! **Invariant.** Each test names the fix it protects; none depends on another's state.

use super::*;
use crate::sched::avfs::Avfs;
use crate::sched::testing::{Direct, LinearEstimate};

const MS: u64 = 1_000_000;

fn rt(id: u64, lba: u64, sectors: u32, deadline_ns: u64, write: bool) -> Request {
    Request {
        id,
        lba,
        sectors,
        write,
        class: Class::RealTime,
        deadline_ns: Some(deadline_ns),
        owner: (id % 16) as u32,
        submit_ns: 0,
        drop_if_late: !write,
    }
}

/// 40 streams with 2 requests each (a heavy queue): work ~ 40 seeks + 80 transfers
/// ~ 1.1 s, deadlines 2.5 s out.
fn heavy<P: Policy>(s: &mut Direct<P>) {
    heavy_at(s, 0)
}

fn heavy_at<P: Policy>(s: &mut Direct<P>, t0: u64) {
    for i in 0..80u64 {
        let stream = i % 40;
        let lba = stream * 10_000_000 + (i / 40) * 1024;
        s.insert(rt(i + 1, lba, 1024, t0 + 2_500 * MS, false), t0);
    }
}

/// The load estimate starts as if the disk had been fully busy (fix 7), so at 0
/// fix 8 makes every batch saturated and fix 10 forbids holds; tests of the
/// batch rules below saturation start after a minute of idle disk.
const IDLE: u64 = 60_000 * MS;
/// After [`warm_up`]: the load estimate is about 0.76, below fix 8's threshold and
/// not light (fix 7), past fix 10's first time constant.
const MID: u64 = 6_500 * MS;

/// Keeps the disk busy with one command from 0 to 4 s.
fn warm_up<P: Policy>(s: &mut Direct<P>) {
    s.insert(rt(999_999, 400_000_000, 8, 60_000 * MS, true), 0);
    assert_eq!(id_of(s.dispatch(0)), 999_999);
    s.complete(999_999, 4_000 * MS);
    // The (saturated) batch it ran in ends.
    assert!(matches!(
        s.dispatch(4_000 * MS),
        Pick::Wait { until_ns: None }
    ));
}

#[test]
fn mixer_does_not_hold_when_the_queue_is_heavy() {
    let est = LinearEstimate::default();
    let mut avfs = Direct::new(Avfs::new(&SchedSettings::default(), est));
    heavy(&mut avfs);
    // The paper's mixer holds: H is still in the future.
    assert!(avfs.hold_ns(0).unwrap() > 0);
    assert!(matches!(avfs.dispatch(0), Pick::Wait { until_ns: Some(_) }));

    let mut mixer = Direct::new(Mixer::new(&SchedSettings::default(), est));
    heavy_at(&mut mixer, IDLE);
    let (h, work) = mixer.hold_and_work_ns(IDLE).unwrap();
    let h = h - IDLE as i64;
    assert!(h > 0 && h < work, "h {h} work {work}");
    assert!(matches!(mixer.dispatch(IDLE), Pick::Dispatch(_)));
    assert!(mixer.batch_active());
}

#[test]
fn mixer_still_holds_at_light_load() {
    let est = LinearEstimate::default();
    let mut mixer = Direct::new(Mixer::new(&SchedSettings::default(), est));
    warm_up(&mut mixer);
    mixer.insert(rt(1, 1_000_000, 1024, MID + 1_700 * MS, false), MID);
    mixer.insert(rt(2, 9_000_000, 1024, MID + 1_900 * MS, true), MID);
    let (h, work) = mixer.hold_and_work_ns(MID).unwrap();
    match mixer.dispatch(MID) {
        Pick::Wait { until_ns: Some(u) } => {
            assert_eq!(u as i64, h - work);
            assert!(u > MID + 1_000 * MS);
        }
        d => panic!("{d:?}"),
    }
}

#[test]
fn no_hold_before_the_load_is_measured_nor_at_saturation() {
    let est = LinearEstimate::default();
    let light = |s: &mut Direct<Mixer<LinearEstimate>>, t: u64| {
        s.insert(rt(1, 1_000_000, 1024, t + 1_700 * MS, false), t);
        s.insert(rt(2, 9_000_000, 1024, t + 1_900 * MS, true), t);
    };
    // One second in: the load is unknown, taken as saturated: no idle disk.
    let mut s = Direct::new(Mixer::new(&SchedSettings::default(), est));
    light(&mut s, 1_000 * MS);
    assert_eq!(id_of(s.dispatch(1_000 * MS)), 1);
    // The same queue after a minute of idle disk is held.
    let mut s = Direct::new(Mixer::new(&SchedSettings::default(), est));
    light(&mut s, IDLE);
    assert!(matches!(s.dispatch(IDLE), Pick::Wait { until_ns: Some(_) }));
    // After 20 s of a busy disk (a measured load above 99%) it is not.
    let mut s = Direct::new(Mixer::new(&SchedSettings::default(), est));
    s.insert(rt(3, 400_000_000, 8, 60_000 * MS, true), 0);
    assert_eq!(id_of(s.dispatch(0)), 3);
    s.complete(3, 20_000 * MS);
    light(&mut s, 20_000 * MS);
    assert_eq!(id_of(s.dispatch(20_000 * MS)), 1);
    assert_eq!(s.stats().holds, 0);
}

#[test]
fn a_saturated_batch_rescues_a_read_the_sweep_would_fail() {
    let est = LinearEstimate::default();
    let mut s = Direct::new(Mixer::new(&SchedSettings::default(), est));
    // At 0 the batch is saturated (fix 8); C-SCAN serves stream 0's first read
    // (LBA 0-1024), the head is at 1024.
    heavy(&mut s);
    assert_eq!(id_of(s.dispatch(0)), 1);
    assert_eq!(s.stats().saturated_batches, 1);
    // Two playback reads just behind the head: C-SCAN reaches them after the
    // wrap, about a second of work away. One has 3 s to go, the other 60 ms.
    s.insert(rt(1001, 600, 8, 3_000 * MS, false), 0);
    s.insert(rt(1000, 500, 8, 60 * MS, false), 0);
    s.complete(1, 10 * MS);
    // The urgent one goes first, as a detour: C-SCAN order goes on from where the
    // sweep was (stream 0's second read); the other waits for the wrap.
    assert_eq!(id_of(s.dispatch(10 * MS)), 1000);
    s.complete(1000, 30 * MS);
    // A second urgent read just behind: the detour already took more than 2% of
    // the sweep's 30 ms, so this one waits its turn (the cap that keeps an
    // overloaded sweep from turning into EDF).
    s.insert(rt(1002, 700, 8, 80 * MS, false), 30 * MS);
    assert_eq!(id_of(s.dispatch(30 * MS)), 41);
    assert_eq!(s.stats().rescued_reads, 1);
}

/// A saturated batch after stream 0's two reads: the head at LBA 2048, C-SCAN
/// order next serves stream 1 (LBA 10,000,000); t = 20 ms, nothing in flight.
fn swept_past_stream_0() -> Direct<Mixer<LinearEstimate>> {
    let mut s = Direct::new(Mixer::new(
        &SchedSettings::default(),
        LinearEstimate::default(),
    ));
    heavy(&mut s);
    assert_eq!(id_of(s.dispatch(0)), 1);
    s.complete(1, 10 * MS);
    assert_eq!(id_of(s.dispatch(10 * MS)), 41);
    s.complete(41, 20 * MS);
    s
}

#[test]
fn a_long_read_is_urgent_while_a_detour_can_still_save_it() {
    let mut s = swept_past_stream_0();
    // A merged playback read of 3.5 MiB behind the head (about 65 ms of service)
    // with 150 ms to its deadline: beyond e = 100 ms, but within e of the moment
    // its own service must start, and the sweep reaches it only after the wrap.
    s.insert(rt(1000, 100, 7168, 170 * MS, false), 20 * MS);
    assert_eq!(id_of(s.dispatch(20 * MS)), 1000);
    assert_eq!(s.stats().rescued_reads, 1);
}

#[test]
fn no_rescue_makes_an_earlier_deadline_read_late() {
    // A read next in the sweep, on time with `spare_ms` less its 13 ms of service to
    // spare, and a read behind the head with a later deadline that the sweep would
    // fail (13 ms of service, 60 ms to go).
    let run = |spare_ms: u64| {
        let mut s = swept_past_stream_0();
        s.insert(rt(1000, 3_000_000, 8, (20 + spare_ms) * MS, false), 20 * MS);
        s.insert(rt(1001, 100, 8, 80 * MS, false), 20 * MS);
        (id_of(s.dispatch(20 * MS)), s.stats().rescued_reads)
    };
    // 7 ms to spare: the detour would make the first read late in the second's
    // place, so the sweep goes on.
    assert_eq!(run(20), (1000, 0));
    // 37 ms to spare: the detour costs nobody a deadline.
    assert_eq!(run(50), (1001, 1));
}

fn id_of(d: Pick) -> u64 {
    match d {
        Pick::Dispatch(r) => r.id,
        d => panic!("expected a dispatch, got {d:?}"),
    }
}

#[test]
fn runs_ride_along_in_a_batch_that_is_not_saturated() {
    let est = LinearEstimate::default();
    let mut s = Direct::new(Mixer::new(&SchedSettings::default(), est));
    heavy_at(&mut s, IDLE);
    let first = match s.dispatch(IDLE) {
        Pick::Dispatch(r) => r,
        d => panic!("{d:?}"),
    };
    // Continues stream 5's run (its 2nd request ends at 50M + 2048), later deadline
    // than every batch member: joins.
    s.insert(
        rt(1000, 50_000_000 + 2048, 1024, IDLE + 9_000 * MS, false),
        IDLE,
    );
    // Ahead of the head but not continuing a run: waits for the next batch.
    s.insert(
        rt(
            1001,
            first.end_lba() + 5_000_000,
            1024,
            IDLE + 9_000 * MS,
            false,
        ),
        IDLE,
    );
    // Behind the head: waits too.
    s.insert(rt(1002, 0, 8, IDLE + 9_000 * MS, false), IDLE);
    assert_eq!(s.stats().joined, 1);
    s.complete(first.id, IDLE + 10 * MS);
    let mut served = vec![first.id];
    let mut t = IDLE + 10 * MS;
    while s.batch_active() {
        match s.dispatch(t) {
            Pick::Dispatch(r) => {
                served.push(r.id);
                s.complete(r.id, t + 10 * MS);
            }
            Pick::Wait { .. } => break,
        }
        t += 10 * MS;
    }
    // Request 1000 was served right after stream 5's run.
    let p = served.iter().position(|&id| id == 1000).unwrap();
    assert_eq!(served[p - 1], 46); // stream 5's 2nd request (i = 45)
    assert!(!served.contains(&1001) && !served.contains(&1002));
}

#[test]
fn near_saturation_every_batch_starts_saturated() {
    let est = LinearEstimate::default();
    // At 0 the load estimate says the disk has been fully busy: the first batch is
    // saturated although no batch ran before it, and takes a request behind the
    // head that does not continue any run.
    let mut busy = Direct::new(Mixer::new(&SchedSettings::default(), est));
    heavy(&mut busy);
    assert!(matches!(busy.dispatch(0), Pick::Dispatch(_)));
    assert_eq!(busy.stats().saturated_batches, 1);
    busy.insert(rt(1000, 0, 8, 9_000 * MS, false), 0);
    assert_eq!(busy.stats().joined, 1);
    // After a minute of idle disk the same queue starts a batch that is not.
    let mut idle = Direct::new(Mixer::new(&SchedSettings::default(), est));
    heavy_at(&mut idle, IDLE);
    assert!(matches!(idle.dispatch(IDLE), Pick::Dispatch(_)));
    assert_eq!(idle.stats().saturated_batches, 0);
    idle.insert(rt(1000, 0, 8, IDLE + 9_000 * MS, false), IDLE);
    assert_eq!(idle.stats().joined, 0);
}

#[test]
fn a_back_to_back_batch_is_saturated_takes_every_arrival_and_then_holds_again() {
    let est = LinearEstimate::default();
    let mut s = Direct::new(Mixer::new(&SchedSettings::default(), est));
    warm_up(&mut s);
    // The warm-up's one command ran in a saturated batch (the load was unknown).
    let before = s.stats().saturated_batches;
    s.insert(rt(1, 1_000_000, 1024, MID + 520 * MS, false), MID);
    s.insert(rt(2, 2_000_000, 1024, MID + 520 * MS, false), MID);
    assert_eq!(id_of(s.dispatch(MID)), 1);
    // Later deadline, no run to continue: pending for the next batch.
    s.insert(rt(3, 5_000_000, 1024, MID + 540 * MS, false), MID);
    s.complete(1, MID + 20 * MS);
    assert_eq!(id_of(s.dispatch(MID + 20 * MS)), 2);
    s.complete(2, MID + 40 * MS);
    // Request 3 cannot be held (H < now): the next batch starts back-to-back.
    assert_eq!(id_of(s.dispatch(MID + 40 * MS)), 3);
    assert_eq!(s.stats().saturated_batches, before + 1);
    // Saturated: even a request behind the head with a late deadline joins.
    s.insert(rt(4, 0, 1024, MID + 5_000 * MS, false), MID + 45 * MS);
    assert_eq!(s.stats().joined, 1);
    s.complete(3, MID + 60 * MS);
    // The batch is light again (request 4 has 4.4 s of slack): back to holding.
    assert!(matches!(
        s.dispatch(MID + 60 * MS),
        Pick::Wait { until_ns: Some(_) }
    ));
    assert_eq!(s.stats().desaturations, 1);
    assert!(!s.batch_active());
}

#[test]
fn overlapping_reads_continue_the_run() {
    let est = LinearEstimate::default();
    let mut s = Direct::new(Mixer::new(&SchedSettings::default(), est));
    // A read ending at 1640, then the stream's next read starting 7 sectors before
    // that end; a write that overlaps (writes never continue across an overlap)
    // and a read too far back to be an unaligned continuation.
    s.insert(rt(1, 1_000, 640, 700 * MS, false), 0);
    s.insert(rt(2, 1_633, 1024, 700 * MS, false), 0);
    s.insert(rt(3, 2_650, 1024, 700 * MS, true), 0);
    s.insert(rt(4, 2_640, 1024, 700 * MS, false), 0);
    let mut order = Vec::new();
    let mut t = 200 * MS;
    while let Pick::Dispatch(r) = s.dispatch(t) {
        order.push(r.id);
        s.complete(r.id, t + 10 * MS);
        t += 10 * MS;
    }
    // 2 starts behind the head left by 1 but continues it; after 2 the head is at
    // 2657: the write at 2650 (7 back) counts as ahead, the read at 2640 does not.
    assert_eq!(order, vec![1, 2, 3, 4]);
}

#[test]
fn an_overlapping_read_rides_along_with_the_command_just_sent() {
    let est = LinearEstimate::default();
    let mut s = Direct::new(Mixer::new(&SchedSettings::default(), est));
    heavy(&mut s);
    let first = match s.dispatch(0) {
        Pick::Dispatch(r) => r,
        d => panic!("{d:?}"),
    };
    // Starts 4 sectors before the end of the command in flight, late deadline.
    s.insert(rt(1000, first.end_lba() - 4, 1024, 9_000 * MS, false), 0);
    assert_eq!(s.stats().joined, 1);
    s.complete(first.id, 10 * MS);
    assert_eq!(id_of(s.dispatch(10 * MS)), 1000);
}
