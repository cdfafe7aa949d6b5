//! The benchmarks on a `dvrfs emulate` disk (issue 24's short form): `bench --dir`
//! on an ext4 on the emulated disk's loop device, and `bench /dev/loopN` (dvrfs
//! itself on the same loop device), each giving a valid report whose utilization
//! and energy come from the emulator, with nothing left mounted or attached after
//! `emulate --stop`. Wall-clock runs: the tests assert the reports' structure, their
//! conservation laws and their agreement with the emulator's own stats, never a
//! speed. Needs root, /dev/fuse, loop devices and mkfs.ext4 (each test says SKIP
//! with the reason when they are missing).

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::*;
use dvrfs_core::disk::DiskModel;

/// The emulated disk: the outer 4 GiB of the model (a sparse image).
const IMAGE_BYTES: u64 = 4 << 30;

/// Why these tests cannot run here, if they cannot.
fn missing() -> Option<String> {
    if let Some(why) = fuse_missing() {
        return Some(why);
    }
    for tool in ["losetup", "mkfs.ext4"] {
        if Command::new(tool).arg("-V").output().is_err() {
            return Some(format!("{tool} is missing"));
        }
    }
    if !Path::new("/dev/loop-control").exists() {
        return Some("/dev/loop-control is missing (no loop devices here)".into());
    }
    None
}

macro_rules! need_all {
    () => {
        if let Some(why) = missing() {
            println!("SKIP: {why}");
            return;
        }
    };
}

/// Whether anything is mounted on `dir`.
fn mounted_on(dir: &Path) -> bool {
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    info.lines()
        .any(|l| l.split(' ').nth(4) == Some(dir.to_str().unwrap()))
}

/// Whether a loop device is attached to `img`.
fn attached(img: &Path) -> bool {
    let out = Command::new("losetup").arg("-j").arg(img).output().unwrap();
    !String::from_utf8_lossy(&out.stdout).trim().is_empty()
}

/// A running emulator with its loop device, stopped when dropped (after a failed
/// assertion too); `stop` stops it and checks that nothing is left.
struct Emu {
    _dir: tempfile::TempDir,
    img: PathBuf,
    mnt: PathBuf,
    dev: String,
}

impl Emu {
    /// `dvrfs emulate IMG --model MODEL --attach`, run in the test's directory (so a
    /// model file may be named relative to it).
    fn start(model: impl FnOnce(&Path) -> String) -> Emu {
        let dir = tempdir();
        let img = dir.path().join("disk.img");
        std::fs::File::create(&img)
            .unwrap()
            .set_len(IMAGE_BYTES)
            .unwrap();
        let mnt = dir.path().join("emu");
        std::fs::create_dir(&mnt).unwrap();
        let model = model(dir.path());
        let out = Command::new(env!("CARGO_BIN_EXE_dvrfs"))
            .current_dir(dir.path())
            .args(["emulate", "disk.img", "--model", &model, "--attach"])
            .args(["--mount", "emu", "--log", "emu.log"])
            .output()
            .unwrap();
        let dev = ok(out).lines().next().unwrap().to_string();
        assert!(dev.starts_with("/dev/loop"), "--attach printed {dev:?}");
        Emu {
            img: std::fs::canonicalize(&img).unwrap(),
            mnt: std::fs::canonicalize(&mnt).unwrap(),
            dev,
            _dir: dir,
        }
    }

    fn stats(&self) -> serde_json::Value {
        json(&std::fs::read_to_string(self.mnt.join("stats")).unwrap())
    }

    fn set_timing(&self, on: bool) {
        std::fs::write(self.mnt.join("timing"), if on { "on" } else { "off" }).unwrap();
    }

    /// `emulate --stop`: nothing mounted or attached afterwards.
    fn stop(self) {
        ok(dvrfs(["emulate", "--stop", self.mnt.to_str().unwrap()]));
        assert!(!mounted_on(&self.mnt), "the emulator left its mount");
        assert!(!attached(&self.img), "the loop device is still attached");
    }
}

impl Drop for Emu {
    fn drop(&mut self) {
        if mounted_on(&self.mnt) {
            let _ = dvrfs(["emulate", "--stop", self.mnt.to_str().unwrap()]);
        }
    }
}

/// A file system mounted on a directory, unmounted when dropped.
struct Mounted(PathBuf);

impl Drop for Mounted {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

/// What every report must hold: `sim`'s keys, misses by cause adding up, and
/// utilization and energy measured by the emulator.
fn check_report(r: &serde_json::Value) {
    check_report_keys(r);
    assert!(
        r["rt_requests"].as_u64().unwrap() > 0,
        "the streams ran: {r}"
    );
    let util = r["utilization"]
        .as_f64()
        .expect("utilization from the emulator");
    assert!(util > 0.0 && util <= 1.0, "utilization {util}");
    let energy = r["disk_energy_j"]
        .as_f64()
        .expect("energy from the emulator");
    assert!(energy > 0.0, "disk energy {energy}");
    let power = r["disk_power_w"].as_f64().unwrap();
    let duration = r["duration_s"].as_f64().unwrap();
    assert!(
        (power * duration - energy).abs() <= 1e-6 * energy.max(1.0),
        "mean power is energy over the run: {r}"
    );
}

#[test]
fn bench_dir_on_ext4_over_the_emulated_disk_gives_a_report_measured_by_the_emulator() {
    need_all!();
    let emu = Emu::start(|_| "avfs-250g".into());
    // Formatting is no part of the test's measurement: at host speed.
    emu.set_timing(false);
    let mkfs = Command::new("mkfs.ext4")
        .args(["-q", "-F", &emu.dev])
        .output()
        .unwrap();
    assert!(mkfs.status.success(), "mkfs.ext4: {mkfs:?}");
    emu.set_timing(true);
    let fs = emu._dir.path().join("fs");
    std::fs::create_dir(&fs).unwrap();
    let st = Command::new("mount")
        .arg(&emu.dev)
        .arg(&fs)
        .status()
        .unwrap();
    assert!(st.success(), "mount {} {}", emu.dev, fs.display());
    let mounted = Mounted(fs.clone());
    let r = json(&ok(dvrfs([
        "bench",
        "--dir",
        fs.to_str().unwrap(),
        "--workload",
        "1r1w",
        "--fill",
        "50%",
        "--duration",
        "20s",
        "--json",
    ])));
    check_report(&r);
    assert_eq!(r["alloc"], "ext4");
    assert_eq!(r["disk"], "avfs-250g (emulated)");
    assert!(r["utilization_unknown_because"].is_null());
    assert_eq!(
        emu.stats()["timing"],
        true,
        "timing is back on after the run"
    );
    drop(mounted);
    assert!(!mounted_on(&fs), "ext4 is unmounted");
    emu.stop();
}

#[test]
fn bench_on_the_emulated_loop_device_plans_with_the_emulators_model_file() {
    need_all!();
    // A model file, named relative to the emulator's directory: the emulator
    // publishes its absolute path (`model_file`) and bench loads it from there.
    let emu = Emu::start(|dir| {
        let mut m = DiskModel::builtin("avfs-250g").unwrap();
        m.name = "test-250g".into();
        std::fs::write(dir.join("model.json"), serde_json::to_string(&m).unwrap()).unwrap();
        "model.json".into()
    });
    let before = emu.stats();
    assert_eq!(
        before["model_file"],
        emu._dir
            .path()
            .canonicalize()
            .unwrap()
            .join("model.json")
            .to_str()
            .unwrap()
    );
    // The disk is already emulated: --device-model is refused before anything is
    // written.
    fails(
        dvrfs([
            "bench",
            &emu.dev,
            "--workload",
            "1r1w",
            "--device-model",
            "avfs-250g",
        ]),
        "--device-model does not apply",
    );
    fails(
        dvrfs([
            "bench",
            &emu.dev,
            "--workload",
            "1r1w",
            "--queue-depth",
            "4",
        ]),
        "--queue-depth 4",
    );
    assert_eq!(emu.stats()["bytes_written"], before["bytes_written"]);
    let r = json(&ok(dvrfs([
        "bench",
        &emu.dev,
        "--workload",
        "1r1w",
        "--duration",
        "10s",
        "--json",
    ])));
    check_report(&r);
    assert_eq!(r["disk"], format!("test-250g (emulated, {})", emu.dev));
    assert_eq!(r["scheduler"], "mixer");
    let after = emu.stats();
    // The preparation ran untimed; the run's busy time is the emulator's.
    let untimed = |s: &serde_json::Value| s["untimed_commands"].as_u64().unwrap();
    assert!(
        untimed(&after) > untimed(&before),
        "mkfs and fill went untimed"
    );
    assert_eq!(after["timing"], true);
    let busy_ns = after["busy_ns"].as_u64().unwrap() - before["busy_ns"].as_u64().unwrap();
    let measured_ns = r["utilization"].as_f64().unwrap() * r["duration_s"].as_f64().unwrap() * 1e9;
    assert!(
        measured_ns <= busy_ns as f64 + 1.0,
        "the run's busy time ({measured_ns} ns) is part of the emulator's ({busy_ns} ns)"
    );
    emu.stop();
}
