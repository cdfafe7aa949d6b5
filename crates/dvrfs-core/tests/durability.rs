//! Durability bounded in time (issue 21): every byte a writer hands over is on the
//! disk and committed within the durability interval (the commit interval unless a
//! recording asks for longer), plus the gather lead and the commit's own time,
//! whatever its rate and whether or not it holds a reservation.
//!
//! Each test writes a pattern through the engine in virtual time as an application
//! would (a piece every 40 ms), keeps what every flush made durable
//! (`common::drive`), and then cuts the power at every quarter second: the volume
//! opened from the media as they were at that moment (journal replayed) must hold
//! every byte handed over before the cut minus the bound, exactly, and nothing else.

mod common;

use common::drive::{setup, Drive, MS};
use dvrfs_core::disk::Admission;
use dvrfs_core::driver::Fs;
use dvrfs_core::engine::{
    Engine, IoBuf, Op, Output, StreamDir, StreamSpec, StreamStats, GATHER_LEAD_NS,
};
use dvrfs_core::OpenOptions;

/// The application hands over a piece this often.
const TICK_NS: u64 = 40 * MS;
/// How long each test writes.
const RUN_NS: u64 = 12_000 * MS;
/// The commit's own time on the test drive: the data flush, the journal write and
/// its flush (2 ms each plus transfer), with room for the partial request written
/// before it.
const COMMIT_NS: u64 = 30 * MS;

fn pattern(from: u64, len: usize) -> Vec<u8> {
    (from..from + len as u64)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect()
}

/// Hands `rate_bytes_per_s` over every tick for `RUN_NS` through `write` (which
/// returns the operation to wait for); returns `(time accepted, bytes handed over
/// by then)` after each piece.
fn feed(
    e: &mut Engine,
    d: &mut Drive,
    rate_bytes_per_s: f64,
    mut write: impl FnMut(u64, Vec<u8>) -> Op,
) -> Vec<(u64, u64)> {
    let mut accepted = vec![(0, 0)];
    let mut total = 0u64;
    let mut tick = 1;
    while tick * TICK_NS <= RUN_NS {
        let due = (rate_bytes_per_s * (tick * TICK_NS) as f64 / 1e9) as u64;
        let n = (due - total) as usize;
        if n > 0 {
            let id = e
                .submit(write(total, pattern(total, n)), None, 1, d.now())
                .unwrap();
            let c = d.wait(e, id);
            c.result.unwrap();
            total += n as u64;
            accepted.push((d.t, total));
        }
        tick += 1;
        d.run_until(e, tick * TICK_NS);
    }
    accepted
}

/// Cuts the power every 250 ms from the second second on: the replayed volume
/// holds a prefix of the pattern at least as long as what was handed over
/// `bound_ns` before the cut. Returns the largest loss seen, in ns of writing.
fn check_cuts(d: &Drive, accepted: &[(u64, u64)], bound_ns: u64) -> u64 {
    let mut worst = 0;
    let mut cut = 2_000 * MS;
    while cut <= RUN_NS {
        let image = d.durable_at(cut);
        let mut fs = Fs::open(image, OpenOptions::writable()).expect("the volume opens");
        let ino = fs.resolve("/rec").expect("the file exists");
        let size = fs.stat(ino).unwrap().size_bytes;
        let mut got = vec![0; size as usize];
        assert_eq!(fs.read(ino, 0, &mut got).unwrap(), size as usize);
        assert!(
            got == pattern(0, size as usize),
            "cut at {} ms: the {size} bytes kept are not what was written",
            cut / MS
        );
        let handed = accepted
            .iter()
            .take_while(|(t, _)| *t <= cut)
            .last()
            .map_or(0, |a| a.1);
        assert!(
            size <= handed,
            "cut at {} ms: {size} bytes kept, only {handed} handed over",
            cut / MS
        );
        // The oldest piece that did not survive: when it was accepted.
        let lost_since = accepted
            .iter()
            .find(|(_, total)| *total > size)
            .map_or(cut, |a| a.0);
        let loss = cut.saturating_sub(lost_since);
        worst = worst.max(loss);
        let needed = accepted
            .iter()
            .take_while(|(t, _)| *t + bound_ns <= cut)
            .last()
            .map_or(0, |a| a.1);
        assert!(
            size >= needed,
            "cut at {} ms: {size} bytes survived, but {needed} had been handed over {} ms before (the bound)",
            cut / MS,
            bound_ns / MS
        );
        cut += 250 * MS;
    }
    worst
}

/// A recording at `mbit` through a stream reservation; the bound is its durability
/// interval plus the gather lead and the commit's time. Returns the stream's figures
/// and the worst loss.
fn recording(mbit: f64, durable_ns: Option<u64>) -> (StreamStats, u64) {
    let (mut e, mut d) = setup(Some(Admission::bandwidth(100e6, 0.1)), 7);
    let ino = d.create(&mut e, "rec");
    let rate = mbit * 1e6 / 8.0;
    let spec = StreamSpec {
        idle: false,
        dir: StreamDir::Write,
        rate_bps: mbit * 1e6,
        request_bytes: 512 << 10,
        buffer_bytes: None,
        reserve_bytes: (rate * 20.0) as u64,
        start_bytes: 0,
        durable_ns,
    };
    let info = match d.run(&mut e, Op::StreamOpen { ino, spec }) {
        Ok(Output::Stream(i)) => i,
        o => panic!("{o:?}"),
    };
    assert_eq!(info.durable_ns, durable_ns.unwrap_or(1_000 * MS));
    let sid = info.id;
    let accepted = feed(&mut e, &mut d, rate, |_, data| Op::StreamWrite {
        stream: sid,
        data: IoBuf::from_slice(&data),
    });
    let stats = e.stream_info(sid).unwrap().1.clone();
    assert_eq!(stats.app_bytes, accepted.last().unwrap().1);
    // After a short request the next one starts inside a sector: the stream
    // composes it with the bytes it wrote there, never reads the sector back.
    assert_eq!(
        d.reads,
        (0, 0),
        "reads (commands, bytes) of a fresh recording"
    );
    // On an idle disk every request lands by the commit it was due for.
    assert_eq!(stats.durability_late, 0, "{stats:?}");
    let bound = info.durable_ns + GATHER_LEAD_NS + COMMIT_NS;
    let worst = check_cuts(&d, &accepted, bound);
    eprintln!(
        "{mbit} Mbit/s, durable {} ms: worst loss {} ms of writing, {} requests",
        info.durable_ns / MS,
        worst / MS,
        stats.requests
    );
    (stats, worst)
}

#[test]
fn a_slow_recording_is_durable_within_the_commit_interval() {
    // 250 kbit/s fills a 512 KiB request in 16.8 s: before, nothing survived a cut
    // in the first 16 s.
    let (stats, worst) = recording(0.25, None);
    assert!(
        worst <= 1_000 * MS + GATHER_LEAD_NS + COMMIT_NS,
        "lost {} ms",
        worst / MS
    );
    // One partial request per commit interval, no more.
    assert!(
        stats.requests <= RUN_NS / (1_000 * MS) + 1,
        "{} requests",
        stats.requests
    );
    assert_eq!(stats.late, 0);
}

#[test]
fn a_4_mbit_recording_is_durable_within_the_commit_interval() {
    let (stats, worst) = recording(4.0, None);
    assert!(
        worst <= 1_000 * MS + GATHER_LEAD_NS + COMMIT_NS,
        "lost {} ms",
        worst / MS
    );
    assert_eq!(stats.late, 0);
}

#[test]
fn a_40_mbit_recording_is_durable_within_the_commit_interval() {
    let (stats, worst) = recording(40.0, None);
    assert!(
        worst <= 1_000 * MS + GATHER_LEAD_NS + COMMIT_NS,
        "lost {} ms",
        worst / MS
    );
    assert_eq!(stats.late, 0);
}

#[test]
fn a_longer_durability_interval_spares_the_disk_partial_requests() {
    let (fast, _) = recording(0.25, None);
    let (slow, worst) = recording(0.25, Some(4_000 * MS));
    assert!(
        worst <= 4_000 * MS + GATHER_LEAD_NS + COMMIT_NS,
        "lost {} ms",
        worst / MS
    );
    assert!(
        slow.requests * 3 <= fast.requests,
        "durable=4s: {} requests, durable=1s: {}",
        slow.requests,
        fast.requests
    );
}

#[test]
fn a_durability_interval_below_the_commit_interval_is_refused() {
    let (mut e, mut d) = setup(Some(Admission::bandwidth(100e6, 0.1)), 7);
    let ino = d.create(&mut e, "rec");
    let spec = StreamSpec {
        idle: false,
        dir: StreamDir::Write,
        rate_bps: 4e6,
        request_bytes: 512 << 10,
        buffer_bytes: None,
        reserve_bytes: 1 << 20,
        start_bytes: 0,
        durable_ns: Some(300 * MS),
    };
    let err = d.run(&mut e, Op::StreamOpen { ino, spec }).unwrap_err();
    assert!(err.to_string().contains("commit interval"), "{err}");
}

#[test]
fn plain_appends_are_durable_within_the_commit_interval() {
    // A writer without a reservation: its writes are best-effort operations,
    // applied when their data is on the disk and committed at the next commit.
    let (mut e, mut d) = setup(Some(Admission::bandwidth(100e6, 0.1)), 7);
    let ino = d.create(&mut e, "rec");
    let accepted = feed(&mut e, &mut d, 0.5e6 / 8.0, |offset, data| Op::Write {
        ino,
        offset,
        data: IoBuf::from_slice(&data),
    });
    // Each write starts inside the sector the last one ended in: composed from the
    // bytes the engine remembers, never read back.
    assert_eq!(d.reads, (0, 0), "reads (commands, bytes) of plain appends");
    let worst = check_cuts(&d, &accepted, 1_000 * MS + COMMIT_NS);
    assert!(worst <= 1_000 * MS + COMMIT_NS, "lost {} ms", worst / MS);
}
