//! Recordings as engine streams in the simulator (`dvrfs sim --stream-recordings`):
//! the engine's write-behind and its time-bounded durability run in virtual time on
//! a hard-disk model, so their disk time is measured rather than assumed
//! (docs/durability.md, "What it costs").

use dvrfs_core::disk::{Admission, DiskModel, Estimator};
use dvrfs_core::engine::EngineConfig;
use dvrfs_core::layout::TailLogSize;
use dvrfs_core::sched::SchedSettings;
use dvrfs_core::sim::{run, HddDisk, SimConfig, SimOutcome, StreamRecordings, Workload};

/// Recordings on a volume without a tail log: the in-place gather.
fn run_streams(workload: &str, mbit: f64, durable_ns: Option<u64>) -> SimOutcome {
    run_streams_with(workload, mbit, durable_ns, false)
}

fn run_streams_with(
    workload: &str,
    mbit: f64,
    durable_ns: Option<u64>,
    tail_log: bool,
) -> SimOutcome {
    let mut cfg = SimConfig::new(Workload::parse(workload).unwrap());
    if !tail_log {
        cfg.tail_log = TailLogSize::Off;
    }
    cfg.duration_ns = 30_000_000_000;
    run_config(cfg, mbit, durable_ns)
}

fn run_config(mut cfg: SimConfig, mbit: f64, durable_ns: Option<u64>) -> SimOutcome {
    let model = DiskModel::builtin("avfs-250g").unwrap();
    cfg.fill = 0.0;
    cfg.bitrate_bps = mbit * 1e6;
    cfg.stream_recordings = Some(StreamRecordings {
        durable_ns,
        frame_ns: 40_000_000,
    });
    let settings = SchedSettings::default();
    let engine = EngineConfig {
        scheduler: "mixer".into(),
        settings,
        estimator: Box::new(Estimator::from_model(&model)),
        admission: Some(Admission::from_model(&model, settings.be_share)),
        ..EngineConfig::new(model.sector_bytes)
    };
    run(&cfg, &mut HddDisk::new(&model, cfg.seed), engine).unwrap()
}

#[test]
fn slow_recordings_write_a_partial_request_per_durability_interval_and_no_more() {
    // 250 kbit/s fills a 512 KiB request in about 17 s: with whole requests only
    // (a durability interval longer than the run), each of the 4 streams writes at
    // most two in 30 s; with the default interval (the 1 s commit interval) about
    // one per second each.
    let long = run_streams("0r4w", 0.25, Some(3_600_000_000_000));
    let every_second = run_streams("0r4w", 0.25, None);
    let every_5s = run_streams("0r4w", 0.25, Some(5_000_000_000));
    for o in [&long, &every_second, &every_5s] {
        eprintln!(
            "requests {} late {} durability_late {} busy {:.1} s",
            o.stream_requests,
            o.stream_late,
            o.stream_durability_late,
            o.busy_ns as f64 / 1e9
        );
    }
    for o in [&long, &every_second, &every_5s] {
        assert_eq!(o.streams, 4);
        assert_eq!(o.recordings_stopped, 0);
        assert_eq!(o.stream_late, 0, "an idle disk misses nothing");
    }
    // Every request lands before the commit it was due for: with `durable=5s` the
    // four streams' short requests are 156 KiB each, and the gather lead grows to
    // fit them (with the fixed 0.1 s lead, 10 of 24 landed after their commit).
    for o in [&long, &every_second, &every_5s] {
        assert_eq!(o.stream_durability_late, 0);
        assert_eq!(o.deadline_misses, 0);
    }
    assert!(long.stream_requests <= 8, "{}", long.stream_requests);
    assert!(
        (100..=124).contains(&every_second.stream_requests),
        "{}",
        every_second.stream_requests
    );
    assert!(
        (20..=30).contains(&every_5s.stream_requests),
        "{}",
        every_5s.stream_requests
    );
    // The disk time it costs: one positioning per stream per interval.
    assert!(every_second.busy_ns > 3 * long.busy_ns);
    assert!(every_5s.busy_ns < every_second.busy_ns);
    // Deterministic in virtual time.
    let again = run_streams("0r4w", 0.25, None);
    assert_eq!(again.stream_requests, every_second.stream_requests);
    assert_eq!(again.busy_ns, every_second.busy_ns);
}

#[test]
fn a_fast_recording_fills_whole_requests_before_its_interval_ends() {
    // 8 Mbit/s fills 512 KiB in about half a second: the interval adds few requests
    // (a request still partial at a gather point is written short).
    let long = run_streams("0r2w", 8.0, Some(3_600_000_000_000));
    let every_second = run_streams("0r2w", 8.0, None);
    assert_eq!(every_second.stream_late, 0);
    let whole = (2.0 * 30.0 * 1e6 / (512.0 * 1024.0)) as u64;
    assert!(
        long.stream_requests.abs_diff(whole) <= 2,
        "{}",
        long.stream_requests
    );
    assert!(
        every_second.stream_requests * 10 <= long.stream_requests * 11,
        "{} vs {}",
        every_second.stream_requests,
        long.stream_requests
    );
}

#[test]
fn recordings_started_together_gather_at_their_own_phases() {
    // 40 recordings opened at once with durable=10s: all in one gather point every
    // 10 s would be 40 short requests of 312 KiB in one lead, more than this disk
    // serves in half a second; spread over their ten phases, each point has four.
    let o = run_streams("0r40w", 0.25, Some(10_000_000_000));
    assert_eq!(o.streams, 40);
    assert_eq!(o.recordings_stopped, 0);
    assert_eq!(o.stream_late, 0);
    assert_eq!(
        o.stream_durability_late, 0,
        "{} requests",
        o.stream_requests
    );
    // About one partial request per stream per 10 s.
    assert!(
        (80..=160).contains(&o.stream_requests),
        "{}",
        o.stream_requests
    );
}

#[test]
fn with_the_tail_log_slow_recordings_write_whole_requests_only() {
    // The same 4 recordings of 250 kbit/s at the default interval: their partial
    // requests go into the commits' batches, one sequential write each, and the
    // disk sees at most two whole requests per stream in 30 s.
    let logged = run_streams_with("0r4w", 0.25, None, true);
    let in_place = run_streams("0r4w", 0.25, None);
    eprintln!(
        "tail log: requests {} busy {:.1} s logged {} bytes; in place: requests {} busy {:.1} s",
        logged.stream_requests,
        logged.busy_ns as f64 / 1e9,
        logged.stream_tail_logged_bytes,
        in_place.stream_requests,
        in_place.busy_ns as f64 / 1e9
    );
    assert_eq!(logged.stream_late, 0);
    assert_eq!(logged.stream_durability_late, 0);
    assert_eq!(logged.deadline_misses, 0);
    assert_eq!(logged.stream_tail_log_full, 0);
    assert!(logged.stream_requests <= 8, "{}", logged.stream_requests);
    // About 29 s of 4 x 31 KB/s went through the log.
    assert!(
        logged.stream_tail_logged_bytes > 3_000_000,
        "{}",
        logged.stream_tail_logged_bytes
    );
    // The commits themselves (journal, checkpoint, flushes) cost the same; the
    // 116 short writes in place are what the log saves (2.2 s busy against 3.7 s).
    assert!(logged.busy_ns < in_place.busy_ns);
}
