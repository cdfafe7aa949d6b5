//! `bench` in wall-clock time on the emulated `avfs-250g` agrees with `sim` for the
//! same workload and seed; `demo` runs and leaves its plots; bad input is refused.

mod common;

use common::*;

fn load_note() -> String {
    std::fs::read_to_string("/proc/loadavg").unwrap_or_default()
}

/// The emulated-disk comparison runs in wall-clock time: a busy CPU delays the
/// dispatcher and moves its figures. The other tests of this file (a demo, a
/// calibration, both CPU-heavy) take this lock too, so they never run beside it.
static WALL_CLOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn alone() -> std::sync::MutexGuard<'static, ()> {
    WALL_CLOCK.lock().unwrap_or_else(|e| e.into_inner())
}

#[test]
fn bench_on_the_emulated_disk_agrees_with_sim() {
    let _alone = alone();
    let dir = tempdir();
    let img = dir.path().join("bench.img");
    let run = [
        "--workload",
        "2r2w",
        "--best-effort",
        "photos",
        "--duration",
        "15s",
        "--seed",
        "4",
        "--json",
    ];
    let mut b = vec![
        "bench".to_string(),
        img.display().to_string(),
        "--device-model".into(),
        "avfs-250g".into(),
    ];
    b.extend(run.iter().map(|s| s.to_string()));
    let bench = json(&ok(dvrfs(&b)));
    let mut s = vec!["sim".to_string(), "--disk".into(), "avfs-250g".into()];
    s.extend(run.iter().map(|s| s.to_string()));
    let sim = json(&ok(dvrfs(&s)));
    check_report_keys(&bench);
    assert_eq!(bench["disk"], "avfs-250g (emulated)");
    // The same operations: the same requests, and the same misses.
    assert_eq!(
        bench["rt_requests"], sim["rt_requests"],
        "bench {bench}\nsim {sim}"
    );
    assert_eq!(
        bench["deadline_misses"],
        sim["deadline_misses"],
        "bench {bench}\nsim {sim}\nload average {}: a busy machine delays the dispatcher",
        load_note()
    );
    let (ub, us) = (
        bench["utilization"].as_f64().unwrap(),
        sim["utilization"].as_f64().unwrap(),
    );
    assert!(
        (ub - us).abs() <= 0.03,
        "utilization: bench {ub:.4}, sim {us:.4} (more than 3 points apart); load average {}",
        load_note()
    );
    // The emulated disk's energy is metered as the simulator's: the mean power
    // differs by at most what 3 points of utilization spent seeking would cost
    // (avfs-250g: 3% of seek_w - idle_w = 0.15 W) and a little idle drain time.
    let (pb, ps) = (
        bench["disk_power_w"].as_f64().unwrap(),
        sim["disk_power_w"].as_f64().unwrap(),
    );
    assert!(
        (pb - ps).abs() <= 0.25,
        "disk power: bench {pb:.3} W, sim {ps:.3} W; load average {}",
        load_note()
    );
    assert!(
        bench["be_throughput_mbps"].as_f64().unwrap() > 0.0,
        "{bench}"
    );
}

#[test]
fn bench_refuses_a_target_with_a_file_system_and_an_image_larger_than_the_model() {
    let dir = tempdir();
    let img = dir.path().join("fs.img");
    mkfs(&img, "256M", &[]);
    fails(
        dvrfs([
            "bench".as_ref(),
            img.as_os_str(),
            "--workload".as_ref(),
            "1w".as_ref(),
        ]),
        "already holds",
    );
    // Still there, untouched.
    assert_clean(&img);
    let big = dir.path().join("big.img");
    fails(
        dvrfs([
            "bench".as_ref(),
            big.as_os_str(),
            "--size".as_ref(),
            "300G".as_ref(),
            "--device-model".as_ref(),
            "avfs-250g".as_ref(),
            "--workload".as_ref(),
            "1w".as_ref(),
        ]),
        "larger than the emulated disk",
    );
    fails(
        dvrfs([
            "bench".as_ref(),
            big.as_os_str(),
            "--workload".as_ref(),
            "many".as_ref(),
        ]),
        "workload",
    );
}

#[test]
fn demo_runs_the_dvr_workload_and_writes_its_plots() {
    let _alone = alone();
    let dir = tempdir();
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_dvrfs"))
        .args(["demo", "--duration", "8s"])
        .current_dir(dir.path())
        .output()
        .unwrap();
    let out = ok(o);
    assert!(
        out.contains("dvrfs bench: 4r2w on avfs-250g (emulated)"),
        "{out}"
    );
    assert!(
        out.contains("plots: dvrfs-demo-plots/margin_cdf.svg"),
        "{out}"
    );
    assert!(out.contains("/dev/sdX"), "{out}");
    for f in ["margin_cdf.svg", "buffer_level.svg", "seek_distance.svg"] {
        assert!(dir.path().join("dvrfs-demo-plots").join(f).exists(), "{f}");
    }
    // A second run reuses its own image, here on another disk model.
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_dvrfs"))
        .args(["demo", "--duration", "2s", "--device-model", "laptop-5400"])
        .current_dir(dir.path())
        .output()
        .unwrap();
    ok(o);
}

#[test]
fn calibrate_measures_an_image_into_a_model_the_other_commands_load() {
    let _alone = alone();
    let dir = tempdir();
    let img = dir.path().join("disk.img");
    mkfs(&img, "512M", &[]);
    let before = sha256_file(&img);
    let text = ok(dvrfs([
        "calibrate".as_ref(),
        img.as_os_str(),
        "--json".as_ref(),
        "--name".as_ref(),
        "mine".as_ref(),
    ]));
    let model = json(&text);
    assert_eq!(model["name"], "mine");
    assert_eq!(
        model["lbas"].as_u64().unwrap() * model["sector_bytes"].as_u64().unwrap(),
        512 << 20
    );
    assert!(model["description"]
        .as_str()
        .unwrap()
        .contains("measured by dvrfs calibrate"));
    // Read only: the image is unchanged, and the model is one `sim` and `capacity` take.
    assert_eq!(sha256_file(&img), before);
    let path = dir.path().join("mine.json");
    std::fs::write(&path, text).unwrap();
    ok(dvrfs([
        "capacity".as_ref(),
        "--disk".as_ref(),
        path.as_os_str(),
        "--bitrate".as_ref(),
        "8M".as_ref(),
    ]));
    let out = ok(dvrfs(["calibrate".as_ref(), img.as_os_str()]));
    assert!(
        out.contains("--device-model mine") || out.contains("--device-model disk.img.json"),
        "{out}"
    );
    // Too small to measure: a clear error.
    let small = dir.path().join("small.img");
    mkfs(&small, "64M", &[]);
    fails(
        dvrfs(["calibrate".as_ref(), small.as_os_str()]),
        "at least 256 MiB",
    );
}

#[test]
fn disk_names_the_model_of_a_real_target_and_is_refused_with_device_model() {
    let dir = tempdir();
    let img = dir.path().join("real.img");
    let img_s = img.to_str().unwrap();
    let o = dvrfs([
        "bench",
        img_s,
        "--workload",
        "1w",
        "--disk",
        "avfs-250g",
        "--device-model",
        "avfs-250g",
    ]);
    assert_eq!(code(&o), 2);
    assert!(stderr(&o).contains("cannot be used with"), "{}", stderr(&o));
    fails(
        dvrfs(["bench", img_s, "--workload", "1w", "--disk", "no-such-disk"]),
        "unknown disk",
    );
    assert!(!img.exists(), "nothing was created for refused input");
    // The mixer plans with the named model; the image runs at its own speed and is
    // not metered.
    let _alone = alone();
    let r = json(&ok(dvrfs([
        "bench",
        img_s,
        "--size",
        "2G",
        "--disk",
        "avfs-250g",
        "--workload",
        "1r1w",
        "--duration",
        "2s",
        "--json",
    ])));
    assert_eq!(r["disk"], format!("{img_s} (avfs-250g)"));
    assert!(r["disk_energy_j"].is_null(), "a real device is not metered");
    assert!(r["rt_requests"].as_u64().unwrap() > 0);
}

#[test]
fn bench_with_retention_deletes_down_to_low_while_recordings_run() {
    let _alone = alone();
    let dir = tempdir();
    let img = dir.path().join("bench.img");
    let img = img.display().to_string();
    let run = [
        "--workload",
        "4w@8M",
        "--fill",
        "99%",
        "--retention",
        "high=95%,low=90%",
        "--duration",
        "15s",
        "--json",
    ];
    let mut b = vec!["bench", &img, "--device-model", "avfs-250g"];
    b.extend(run);
    let v = json(&ok(dvrfs(&b)));
    check_report_keys(&v);
    assert_eq!(v["recordings_stopped"], 0, "{v}");
    // From 99% to 90% of the data region: at least 8% of 250 GB went, in
    // ten-minute chunks, while four recordings ran on the emulated disk.
    let deleted = v["retention_deleted_bytes"].as_u64().unwrap();
    assert!(deleted >= 20_000_000_000, "{v}");
    let chunks = v["retention_deleted_chunks"].as_u64().unwrap();
    assert!(chunks >= 20_000_000_000 / 600_000_000, "{v}");
    assert_eq!(v["retention_shortfall_s"], 0.0, "{v}");
    // Misses, if any, are a busy machine's, and counted: never a stopped recording.
    let misses = v["deadline_misses"].as_u64().unwrap();
    assert_eq!(
        v["misses"]["no_space"],
        0,
        "{v}; load average {}",
        load_note()
    );
    assert!(misses <= v["rt_requests"].as_u64().unwrap());
    // The bench refuses --retention on another file system.
    let o = dvrfs([
        "bench",
        "--dir",
        "/tmp",
        "--workload",
        "1w",
        "--retention",
        "high=95%,low=90%",
    ]);
    fails(o, "no meaning on another file system");
}
