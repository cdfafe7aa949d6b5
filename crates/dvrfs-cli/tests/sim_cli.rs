//! `dvrfs sim` and `dvrfs capacity` through the real binary: the JSON contract, plots,
//! byte-for-byte determinism, and clear errors for bad input.

mod common;

use std::process::{Command, Output};

use common::check_report_keys;

fn dvrfs(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_dvrfs"))
        .args(args)
        .output()
        .expect("run dvrfs")
}

fn ok_json(args: &[&str]) -> (serde_json::Value, String) {
    let out = dvrfs(args);
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    (
        serde_json::from_str(&stdout).expect("one JSON object"),
        stdout,
    )
}

fn fails_with(args: &[&str], needle: &str) {
    let out = dvrfs(args);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{args:?} succeeded");
    assert!(
        err.contains(needle),
        "{args:?}: stderr {err:?} lacks {needle:?}"
    );
    assert!(!err.contains("panicked"), "{args:?} panicked: {err}");
}

const SHORT: [&str; 7] = [
    "sim",
    "--disk",
    "avfs-250g",
    "--duration",
    "2m",
    "--workload",
    "4r2w",
];

#[test]
fn sim_json_has_every_contract_key_and_is_deterministic() {
    let mut args = SHORT.to_vec();
    args.push("--json");
    let (v, text) = ok_json(&args);
    check_report_keys(&v);
    for key in ["min", "p0001", "p001", "p01", "p50"] {
        assert!(v["margin_ms"].get(key).is_some(), "missing margin_ms.{key}");
    }
    assert_eq!(v["workload"], "4r2w");
    assert_eq!(v["scheduler"], "mixer");
    assert_eq!(v["alloc"], "zrr");
    assert_eq!(v["duration_s"], 120.0);
    assert!(v["rt_requests"].as_u64().unwrap() > 3000);
    let (_, again) = ok_json(&args);
    assert_eq!(text, again, "same seed, same JSON, byte for byte");
    args.extend(["--seed", "7"]);
    let (_, other) = ok_json(&args);
    assert_ne!(text, other);
}

#[test]
fn sim_text_report_and_plots() {
    let dir = tempfile::tempdir().unwrap();
    let plot = dir.path().join("plots");
    let mut args = SHORT.to_vec();
    args.extend(["--plot", plot.to_str().unwrap(), "--best-effort", "photos"]);
    let out = dvrfs(&args);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains("margin (ms)")
            && text.contains("disk utilization")
            && text.contains("disk energy       ")
            && text.contains(" W ("),
        "{text}"
    );
    for f in ["margin_cdf.svg", "buffer_level.svg", "seek_distance.svg"] {
        let svg = std::fs::read_to_string(plot.join(f)).unwrap();
        assert!(
            svg.starts_with("<svg") && svg.len() > 2000,
            "{f} is not a drawn SVG"
        );
    }
}

/// `--trace` writes one row per device command; the rows agree with the report: as
/// many commands and flushes, and the smallest real-time margin is the report's.
#[test]
fn sim_trace_has_a_row_per_command_that_agrees_with_the_report() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("trace.csv");
    let mut args = SHORT.to_vec();
    args.extend([
        "--json",
        "--best-effort",
        "photos",
        "--trace",
        trace.to_str().unwrap(),
    ]);
    let (v, _) = ok_json(&args);
    let text = std::fs::read_to_string(&trace).unwrap();
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    let col = |name: &str| header.iter().position(|h| *h == name).unwrap();
    let (kind, class, margin, start, end) = (
        col("kind"),
        col("class"),
        col("margin_ms"),
        col("start_ms"),
        col("end_ms"),
    );
    let rows: Vec<Vec<&str>> = lines.map(|l| l.split(',').collect()).collect();
    assert!(rows.iter().all(|r| r.len() == header.len()));
    let flushes = rows.iter().filter(|r| r[kind] == "flush").count();
    assert_eq!(flushes as u64, v["flushes"].as_u64().unwrap());
    assert_eq!(
        (rows.len() - flushes) as u64,
        v["command_ms"]["count"].as_u64().unwrap()
    );
    assert!(rows.iter().any(|r| r[class] == "best-effort"));
    // One disk: each command starts when the previous one ended, or later.
    let f = |s: &str| s.parse::<f64>().unwrap();
    assert!(rows.windows(2).all(|w| f(w[1][start]) >= f(w[0][end])));
    let min_margin = rows
        .iter()
        .filter(|r| r[class] == "real-time")
        .map(|r| f(r[margin]))
        .fold(f64::INFINITY, f64::min);
    let reported = v["margin_ms"]["min"].as_f64().unwrap();
    assert!(
        (min_margin - reported).abs() < 0.01,
        "{min_margin} {reported}"
    );
    // A trace that cannot be written is a clear error.
    let mut bad = SHORT.to_vec();
    bad.extend(["--trace", "/nonexistent-dir/trace.csv"]);
    fails_with(&bad, "cannot write the trace");
}

#[test]
fn find_max_reports_max_streams() {
    let (v, _) = ok_json(&[
        "sim",
        "--disk",
        "avfs-250g",
        "--duration",
        "1m",
        "--workload",
        "20r",
        "--scheduler",
        "cscan",
        "--find-max",
        "--json",
    ]);
    let max = v["max_streams"].as_u64().unwrap();
    assert!((5..30).contains(&max), "max_streams {max}");
    assert_eq!(
        v["deadline_misses"], 0,
        "the reported run is the largest one without a miss"
    );
    // Its neighbourhood was simulated: the two counts below passed, the two above failed.
    let n = v["neighbours"].as_array().unwrap();
    for x in n {
        let streams = x["streams"].as_u64().unwrap();
        assert_eq!(x["passed"].as_bool().unwrap(), streams < max, "{n:?}");
    }
}

#[test]
fn find_max_over_seeds_reports_minimum_and_median() {
    let (v, _) = ok_json(&[
        "sim",
        "--disk",
        "avfs-250g",
        "--duration",
        "1m",
        "--workload",
        "4r",
        "--find-max",
        "--seeds",
        "1-3",
        "--json",
    ]);
    let by: Vec<u64> = v["max_streams_by_seed"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p[1].as_u64().unwrap())
        .collect();
    assert_eq!(by.len(), 3);
    assert_eq!(
        v["max_streams"].as_u64().unwrap(),
        *by.iter().min().unwrap()
    );
    let median = v["max_streams_median"].as_f64().unwrap();
    assert!(median >= *by.iter().min().unwrap() as f64);
}

#[test]
fn capacity_json_has_both_bounds() {
    let (v, _) = ok_json(&["capacity", "--disk", "avfs-250g", "--json"]);
    // 22 streams with the whole disk, 20 once 10% is kept for best effort.
    assert_eq!(v["bandwidth_bound_streams_full"], 22);
    assert_eq!(v["bandwidth_bound_streams"], 20);
    assert_eq!(v["be_share"], 0.1);
    let (v0, _) = ok_json(&[
        "capacity",
        "--disk",
        "avfs-250g",
        "--be-share",
        "0",
        "--json",
    ]);
    assert_eq!(v0["bandwidth_bound_streams"], 22);
    assert!(v["round_bound_streams"].as_u64().unwrap() >= 1);
    let (v8, _) = ok_json(&["capacity", "--disk", "nvr-8t", "--bitrate", "8M", "--json"]);
    assert!(v8["bandwidth_bound_streams"].as_u64().unwrap() > 100);
    // What admission takes (tests/streams.rs in the core checks it against the engine):
    // never more than the bandwidth allows.
    for v in [&v, &v8] {
        let bw = v["bandwidth_bound_streams"].as_u64().unwrap();
        for k in [
            "admission_streams",
            "admission_streams_auto_buffer",
            "admission_streams_durable",
            "admission_streams_auto_buffer_durable",
        ] {
            let n = v[k].as_u64().unwrap_or_else(|| panic!("{k} missing: {v}"));
            assert!((1..=bw).contains(&n), "{k} = {n}, bandwidth bound {bw}");
        }
    }
}

#[test]
fn capacity_counts_slow_recordings_by_the_short_requests_of_their_durability_interval() {
    // docs/durability.md's tables ("What it costs"): 250 kbit/s on nvr-8t.
    let at = |durable: &str, extra: &[&str]| {
        let mut args = vec![
            "capacity",
            "--disk",
            "nvr-8t",
            "--bitrate",
            "250K",
            "--durable",
            durable,
            "--json",
        ];
        args.extend_from_slice(extra);
        ok_json(&args).0
    };
    // In place: a short request of 32 KiB a second each.
    let (v1, v10) = (at("1s", &["--no-tail-log"]), at("10s", &["--no-tail-log"]));
    assert_eq!(v1["tail_log"], false);
    assert_eq!(v1["durable_ms"], 1000);
    assert_eq!(v1["gather_period_ms"], 1000);
    assert_eq!(v1["durable_gathered_bytes"], 32768);
    assert_eq!(v1["durable_request_bytes"], 32768);
    assert_eq!(v1["round_bound_streams_durable"], 94, "{v1}");
    assert_eq!(v10["round_bound_streams_durable"], 779, "{v10}");
    // What admission takes of such recordings: the same 94 at 1 s.
    assert_eq!(v1["admission_streams_auto_buffer_durable"], 94, "{v1}");
    // With the tail log (mkfs's default, and capacity's): every byte logged, whole
    // requests in place due at the buffer's overflow, whatever the interval.
    let (l1, l10) = (at("1s", &[]), at("10s", &[]));
    assert_eq!(l1["tail_log"], true);
    assert_eq!(l1["durable_gathered_bytes"], 32768);
    assert_eq!(l1["durable_logged_bytes"], 31250.0);
    assert_eq!(l1["durable_request_bytes"], 524288);
    assert_eq!(l1["round_bound_streams_durable"], 861, "{l1}");
    assert_eq!(l10["round_bound_streams_durable"], 861, "{l10}");
    // ... as many as the 256 MiB ring mkfs gives this disk holds while each holds
    // its tail: its fill, its buffer's slack and two periods, so with the buffer of
    // two requests that dvrfs chooses, 277; with eight, far fewer.
    assert_eq!(l1["tail_log_ring_bytes"], 256u64 << 20, "{l1}");
    let l1_depth2 = at("1s", &["--depth", "2"]);
    assert_eq!(l1_depth2["ring_bound_streams_durable"], 277, "{l1_depth2}");
    assert_eq!(l1["ring_bound_streams_durable"], 59, "{l1}");
    assert_eq!(l1["admission_streams_auto_buffer_durable"], 277, "{l1}");
    assert!(v1["ring_bound_streams_durable"].is_null(), "{v1}");
    // The whole-request figures do not depend on either.
    for v in [&v10, &l1, &l10] {
        assert_eq!(v["round_bound_streams"], 1140, "{v}");
        assert_eq!(v["admission_streams"], v1["admission_streams"]);
    }
    // 2.5 s gathers every 2 s (gather points lie a commit interval apart).
    assert_eq!(at("2500ms", &[])["gather_period_ms"], 2000);
    // The default interval is the commit interval.
    let (d, _) = ok_json(&[
        "capacity",
        "--disk",
        "nvr-8t",
        "--bitrate",
        "250K",
        "--json",
    ]);
    assert_eq!(d["round_bound_streams_durable"], 861, "{d}");
    let out = dvrfs(&[
        "capacity",
        "--disk",
        "nvr-8t",
        "--bitrate",
        "250K",
        "--no-tail-log",
    ]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("durable within 1s (gathering up to 32 KiB every 1000 ms, written in place): round bound 94 streams; admission admits 94"),
        "{text}"
    );
    fails_with(
        &["capacity", "--disk", "nvr-8t", "--durable", "0s"],
        "--durable 0s: out of range: from 1ms to 24h",
    );
}

#[test]
fn bad_input_gets_a_clear_message() {
    fails_with(
        &[
            "sim",
            "--disk",
            "avfs-250g",
            "--workload",
            "4r",
            "--scheduler",
            "noop",
        ],
        "unknown scheduler",
    );
    fails_with(
        &["sim", "--disk", "floppy", "--workload", "4r"],
        "unknown disk",
    );
    fails_with(&["capacity", "--disk", "floppy"], "unknown disk");
    fails_with(
        &["sim", "--disk", "avfs-250g", "--workload", "4x"],
        "workload",
    );
    fails_with(
        &[
            "sim",
            "--disk",
            "avfs-250g",
            "--workload",
            "4r",
            "--fill",
            "120%",
        ],
        "--fill",
    );
    fails_with(
        &[
            "sim",
            "--disk",
            "avfs-250g",
            "--workload",
            "4r",
            "--best-effort",
            "torrent",
        ],
        "best-effort",
    );
    fails_with(
        &[
            "sim",
            "--disk",
            "avfs-250g",
            "--workload",
            "4r",
            "--alloc",
            "random",
        ],
        "allocation policy",
    );
    let dir = tempfile::tempdir().unwrap();
    let model = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../dvrfs-core/disks/avfs-250g.json"
    ))
    .unwrap();
    let typo = dir.path().join("typo.json");
    std::fs::write(&typo, model.replace("\"rpm\"", "\"rmp\"")).unwrap();
    fails_with(
        &["sim", "--disk", typo.to_str().unwrap(), "--workload", "4r"],
        "rmp",
    );
    let bad = dir.path().join("bad.json");
    std::fs::write(
        &bad,
        model.replace("\"spt_inner\": 671", "\"spt_inner\": 5000"),
    )
    .unwrap();
    fails_with(&["capacity", "--disk", bad.to_str().unwrap()], "spt_inner");
}

/// The bad input: a zero or negative margin, an urgent threshold above the
/// margin, a best-effort share outside 0..1, an unknown class.
#[test]
fn bad_scheduler_settings_get_a_clear_message() {
    let sim = |extra: &[&str]| {
        let mut v = vec!["sim", "--disk", "avfs-250g", "--workload", "2r"];
        v.extend_from_slice(extra);
        v.iter().map(|s| s.to_string()).collect::<Vec<String>>()
    };
    for (extra, needle) in [
        (vec!["--margin", "0ms"], "--margin"),
        (vec!["--margin", "-5ms"], "--margin"),
        (vec!["--urgent", "600ms"], "--urgent"),
        (vec!["--margin", "200ms", "--urgent", "200ms"], "--urgent"),
        (vec!["--be-share", "1.5"], "--be-share"),
        (vec!["--be-share", "-0.1"], "--be-share"),
        (vec!["--be-share", "1"], "--be-share"),
        (vec!["--be-share", "lots"], "--be-share"),
        (vec!["--journal-class", "urgent"], "unknown request class"),
        (vec!["--be-latency", "0ms"], "--be-latency"),
        (vec!["--seeds", "9-3"], "--seeds"),
    ] {
        let args = sim(&extra);
        let refs: Vec<&str> = args.iter().map(|s| s.as_str()).collect();
        fails_with(&refs, needle);
    }
    fails_with(
        &["capacity", "--disk", "avfs-250g", "--be-share", "2"],
        "--be-share",
    );
}

/// A run whose recordings stop (the disk is full) says so, counts every request they
/// could not issue as missed, and exits non-zero.
#[test]
fn stopped_recordings_are_reported_and_fail_the_run() {
    let out = dvrfs(&[
        "sim",
        "--disk",
        "avfs-250g",
        "--workload",
        "8w@80M",
        "--fill",
        "99%",
        "--duration",
        "10m",
        "--json",
    ]);
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(v["recordings_stopped"].as_u64().unwrap() > 0, "{v}");
    assert!(v["misses"]["no_space"].as_u64().unwrap() > 0, "{v}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("stopped"));
}

/// Engine-stream recordings beyond what admission takes are refused at open, and the
/// run says so (not "the disk was full"): 94 of 250 kbit/s at 1 s on nvr-8t without
/// a tail log, as `capacity --no-tail-log` counts them.
#[test]
fn recordings_admission_refuses_are_reported_as_refused() {
    let out = dvrfs(&[
        "sim",
        "--disk",
        "nvr-8t",
        "--workload",
        "0r100w",
        "--bitrate",
        "250K",
        "--fill",
        "0%",
        "--duration",
        "5s",
        "--stream-recordings",
        "--no-tail-log",
        "--json",
    ]);
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["recordings_stopped"], 6, "{v}");
    assert_eq!(v["recordings_refused"], 6, "{v}");
    assert_eq!(v["misses"]["no_space"], 0, "{v}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("admission refused 6 recording(s)"), "{err}");
    assert!(!err.contains("disk was full"), "{err}");
}

/// As many slow recordings as `capacity` says a tail log's ring holds, started
/// together (their requests fill together and wait together for their overflow,
/// the worst case for the ring), run three fills on the engine without a gather
/// finding the ring full, a request past its buffer or a byte durable late
/// (docs/durability.md: the count that left out the wait admitted 401 of them on a
/// 256 MiB ring, which then filled).
#[test]
fn recordings_admitted_on_a_tail_log_never_find_its_ring_full() {
    let (cap, _) = ok_json(&[
        "capacity",
        "--disk",
        "nvr-8t",
        "--bitrate",
        "250K",
        "--depth",
        "2",
        "--durable",
        "1s",
        "--tail-log",
        "128M",
        "--json",
    ]);
    let n = cap["ring_bound_streams_durable"].as_u64().unwrap();
    assert!((100..200).contains(&n), "{cap}");
    let workload = format!("0r{n}w");
    let (v, _) = ok_json(&[
        "sim",
        "--disk",
        "nvr-8t",
        "--workload",
        &workload,
        "--bitrate",
        "250K",
        "--depth",
        "2",
        "--fill",
        "0%",
        "--duration",
        "60s",
        "--stream-recordings",
        "--tail-log",
        "128M",
        "--json",
    ]);
    let r = &v["stream_recordings"];
    assert_eq!(v["recordings_refused"], 0, "{v}");
    assert_eq!(r["tail_log_full"], 0, "{r}");
    assert_eq!(r["late"], 0, "{r}");
    assert_eq!(r["durability_late"], 0, "{r}");
    assert_eq!(v["deadline_misses"], 0, "{v}");
    // Three requests each: the ring turned over.
    assert_eq!(r["requests"], 3 * n, "{r}");
    assert!(r["tail_logged_bytes"].as_u64().unwrap() > 128 << 20, "{r}");
    // A ring mkfs would refuse is a usage error...
    let bad = |extra: &[&str]| {
        let out = dvrfs(
            &[
                &[
                    "sim",
                    "--disk",
                    "nvr-8t",
                    "--workload",
                    "0r1w",
                    "--duration",
                    "1s",
                ][..],
                extra,
            ]
            .concat(),
        );
        assert_eq!(out.status.code(), Some(2), "{out:?}");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let err = bad(&["--stream-recordings", "--tail-log", "5000"]);
    assert!(err.contains("invalid --tail-log"), "{err}");
    // ... and so is a ring for recordings that log nothing.
    let err = bad(&["--tail-log", "64M"]);
    assert!(err.contains("apply to engine-stream recordings"), "{err}");
    let err = bad(&["--no-tail-log"]);
    assert!(err.contains("apply to engine-stream recordings"), "{err}");
}

/// Issue 9's report items: `--best-effort delete` is in the report, the buffer plot of
/// a recordings-only workload shows a recording (named), `capacity` takes no mixer
/// settings, and a bad block size is a usage error (exit 2).
#[test]
fn the_report_says_what_delete_did_and_plots_name_their_stream() {
    let run = [
        "sim",
        "--disk",
        "avfs-250g",
        "--workload",
        "2r0w",
        "--duration",
        "60s",
        "--best-effort",
        "delete",
    ];
    let (v, _) = ok_json(&[&run[..], &["--json"]].concat());
    assert_eq!(v["delete"]["submitted_s"], 5.0, "{}", v["delete"]);
    assert!(
        v["delete"]["bytes"].as_u64().unwrap() > 0,
        "{}",
        v["delete"]
    );
    assert!(
        v["delete"]["unlink_ms"].as_f64().is_some(),
        "{}",
        v["delete"]
    );
    let text = String::from_utf8(dvrfs(&run).stdout).unwrap();
    assert!(text.contains("  delete            a "), "{text}");

    let dir = tempfile::tempdir().unwrap();
    let plots = dir.path().join("plots");
    let out = dvrfs(&[
        "sim",
        "--disk",
        "avfs-250g",
        "--workload",
        "2w",
        "--duration",
        "30s",
        "--plot",
        plots.to_str().unwrap(),
    ]);
    assert!(out.status.success());
    let svg = std::fs::read_to_string(plots.join("buffer_level.svg")).unwrap();
    assert!(
        svg.contains("write-behind of stream 0 (recording)"),
        "caption"
    );

    let out = dvrfs(&["capacity", "--disk", "avfs-250g", "--margin", "900ms"]);
    assert_eq!(out.status.code(), Some(2));
    let bad = [
        "sim",
        "--disk",
        "avfs-250g",
        "--workload",
        "1r0w",
        "--block-size",
        "3M",
    ];
    assert_eq!(dvrfs(&bad).status.code(), Some(2));
    fails_with(&bad, "not a power of two");
}

#[test]
fn the_commit_interval_sets_how_often_the_simulated_volume_commits() {
    let run = |interval: &str| {
        let mut args = SHORT.to_vec();
        args.extend(["--commit-interval", interval, "--json"]);
        ok_json(&args).0
    };
    let every_second = run("1s");
    let every_five = run("5s");
    // Two minutes of virtual time: a commit per interval (and one at the end).
    let commits = |v: &serde_json::Value| v["commits"].as_u64().unwrap();
    assert!(
        (118..=122).contains(&commits(&every_second)),
        "{every_second}"
    );
    assert!((23..=26).contains(&commits(&every_five)), "{every_five}");
    assert!(
        every_five["journal_requests"].as_u64() < every_second["journal_requests"].as_u64(),
        "fewer commits write less journal"
    );
    let mut args = SHORT.to_vec();
    args.extend(["--commit-interval", "0s"]);
    fails_with(&args, "--commit-interval");
}

#[test]
fn a_trick_play_reader_reads_keyframes_at_its_period_and_costs_more_disk_time_than_playback() {
    let run = |workload: &str, speed: &str| {
        ok_json(&[
            "sim",
            "--disk",
            "avfs-250g",
            "--duration",
            "2m",
            "--workload",
            workload,
            "--speed",
            speed,
            "--json",
        ])
        .0
    };
    // 8 Mbit/s, 2 s GOPs, 8x: a 296 KiB keyframe read every 250 ms per reader.
    let fast = run("4w@8M,2t@8M", "8");
    let rewind = run("4w@8M,2t@8M", "-8");
    let plain = run("4w@8M,2r@8M", "8");
    let reads = |v: &serde_json::Value| v["rt_requests"].as_u64().unwrap();
    // The four recordings issue 8 Mbit/s of 512 KiB requests: 228 or 229 each in 2
    // minutes; each reader about 480 (one every 250 ms, less its random start).
    let recording_requests = 4 * 229;
    for v in [&fast, &rewind] {
        let trick = reads(v) - recording_requests;
        assert!(
            (2 * 470..=2 * 482).contains(&trick),
            "{trick} keyframe reads: {v}"
        );
        assert_eq!(v["deadline_misses"], 0, "{v}");
    }
    assert_eq!(fast["workload"], "4w@8M,2t@8M");
    // At 8x with keyframes 15% of a GOP a reader moves 1.2 times a playback's bytes,
    // with a positioning per keyframe read: more disk time than two playbacks.
    assert!(fast["utilization"].as_f64() > plain["utilization"].as_f64());
    fails_with(
        &[
            "sim",
            "--disk",
            "avfs-250g",
            "--workload",
            "2t",
            "--speed",
            "40",
        ],
        "--speed",
    );
    fails_with(
        &[
            "sim",
            "--disk",
            "avfs-250g",
            "--workload",
            "2t",
            "--gop",
            "20s",
        ],
        "--gop",
    );
}

#[test]
fn sim_with_retention_records_on_where_without_it_the_recordings_stop() {
    let base = [
        "sim",
        "--disk",
        "avfs-250g",
        "--workload",
        "4w@8M,1r@8M",
        "--fill",
        "95%",
        "--duration",
        "1h",
        "--json",
    ];
    let mut args = base.to_vec();
    args.extend(["--retention", "high=95%,low=90%", "--chunk", "5m"]);
    let (v, _) = ok_json(&args);
    check_report_keys(&v);
    assert_eq!(v["recordings_stopped"], 0, "{v}");
    assert_eq!(v["deadline_misses"], 0, "{v}");
    let deleted = v["retention_deleted_bytes"].as_u64().unwrap();
    // At least what an hour of four 8 Mbit/s recordings wrote, less the 5% of
    // the disk between the marks.
    assert!(deleted > 4_000_000 * 3600 - 12_500_000_000, "{v}");
    assert!(v["usage_max_pct"].as_f64().unwrap() < 95.01, "{v}");
    for key in [
        "retention_deleted_chunks",
        "retention_shortfall_s",
        "retention_commits",
        "retention_commit_max_chunks",
        "retention_commit_max_kib",
        "chunks_started",
    ] {
        assert!(v[key].is_number(), "{key} missing: {v}");
    }
    // Four recordings of an hour in 5-minute chunks, in their stream directories.
    assert_eq!(v["chunks_started"], 4 * 12, "{v}");
    let streams = v["retention_streams"].as_array().unwrap();
    let paths: Vec<&str> = streams
        .iter()
        .map(|s| s["path"].as_str().unwrap())
        .collect();
    assert_eq!(
        paths,
        ["/live/s0000", "/live/s0001", "/live/s0002", "/live/s0003"]
    );
    // Without retention the same run stops its recordings, says so and exits 3.
    let out = dvrfs(&base);
    assert_eq!(out.status.code(), Some(3));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["recordings_stopped"], 4, "{v}");
    assert!(v.get("retention_deleted_bytes").is_none(), "{v}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("the disk was full"));
}

#[test]
fn sim_retention_flags_that_make_no_sense_are_refused() {
    let run = |extra: &[&str], needle: &str| {
        let mut args = SHORT.to_vec();
        args.extend(extra);
        fails_with(&args, needle);
    };
    run(&["--chunk", "5m"], "--chunk applies to runs with retention");
    run(&["--retention", "high=90%,low=95%"], "is above --high");
    run(&["--retention", "high=95%"], "both --high and --low");
    run(&["--retention", "deep=1"], "unknown key");
    run(&["--retention", "max-size=lots"], "max-size=lots");
    run(&["--retention", ""], "sets no policy");
    run(
        &["--retention", "high=95%,low=90%", "--chunk", "0s"],
        "--chunk",
    );
    run(
        &["--retention", "high=95%,low=90%", "--age", "3"],
        "--age does not apply",
    );
}
