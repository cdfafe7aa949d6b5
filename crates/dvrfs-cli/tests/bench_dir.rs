//! `dvrfs bench --dir`: the workload on an ext4 on a loop device (needs root, losetup
//! and mkfs.ext4; prints `SKIP: <reason>` where they are missing). Wall-clock runs:
//! the tests assert the report's structure and its conservation laws, never that a
//! run had no misses. The emulator pairing is checked against a loop device whose
//! backing file sits beside a `stats` and a `timing` file as `dvrfs emulate` serves
//! them (static here: the disk is never busy, so utilization is exactly 0).

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::*;

/// An ext4 on a loop device over a sparse image, mounted; all undone on drop.
struct Ext4 {
    mnt: PathBuf,
    dev: String,
    _dir: tempfile::TempDir,
}

impl Ext4 {
    /// In `dir` (the image is `dir/disk`), `mib` MiB.
    fn new(mib: u64) -> Result<Ext4, String> {
        let dir = tempdir();
        let image = dir.path().join("disk");
        std::fs::File::create(&image)
            .and_then(|f| f.set_len(mib << 20))
            .map_err(|e| format!("image: {e}"))?;
        let run = |cmd: &mut Command| -> Result<String, String> {
            let out = cmd.output().map_err(|e| format!("{cmd:?}: {e}"))?;
            if !out.status.success() {
                return Err(format!(
                    "{cmd:?}: {}",
                    String::from_utf8_lossy(&out.stderr).trim()
                ));
            }
            Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
        };
        run(Command::new("mkfs.ext4").args(["-q", "-F"]).arg(&image))?;
        let dev = run(Command::new("losetup")
            .args(["--find", "--show"])
            .arg(&image))?;
        let mnt = dir.path().join("mnt");
        std::fs::create_dir(&mnt).map_err(|e| e.to_string())?;
        if let Err(e) = run(Command::new("mount").arg(&dev).arg(&mnt)) {
            let _ = Command::new("losetup").arg("-d").arg(&dev).status();
            return Err(e);
        }
        Ok(Ext4 {
            mnt,
            dev,
            _dir: dir,
        })
    }

    fn dir(&self) -> &Path {
        self._dir.path()
    }
}

impl Drop for Ext4 {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.mnt).status();
        let _ = Command::new("losetup").arg("-d").arg(&self.dev).status();
    }
}

fn ext4(mib: u64) -> Option<Ext4> {
    match Ext4::new(mib) {
        Ok(fs) => Some(fs),
        Err(e) => {
            eprintln!("SKIP: {e}");
            None
        }
    }
}

fn bench(fs: &Ext4, extra: &[&str]) -> std::process::Output {
    let mut args: Vec<String> = vec![
        "bench".into(),
        "--dir".into(),
        fs.mnt.display().to_string(),
        "--json".into(),
    ];
    args.extend(extra.iter().map(|s| s.to_string()));
    dvrfs(args)
}

/// What every report must hold: the keys of `sim`'s, misses by cause adding up,
/// nothing left in the directory.
fn check_report(fs: &Ext4, r: &serde_json::Value) {
    check_report_keys(r);
    assert!(r.get("page_cache_dropped").is_some(), "{r}");
    assert_eq!(r["alloc"], "ext4");
    assert!(r["scheduler"].as_str().unwrap().starts_with("kernel:"));
    assert!(
        r["seek_within_5gb"].is_null(),
        "not knowable from above ext4"
    );
    assert_eq!(r["page_cache_dropped"], true, "the tests run as root");
    let left: Vec<_> = std::fs::read_dir(&fs.mnt)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .filter(|n| n != "lost+found")
        .collect();
    assert!(left.is_empty(), "bench --dir left {left:?} behind");
}

#[test]
fn a_short_buffered_run_with_photos_gives_a_full_report() {
    let Some(fs) = ext4(1024) else { return };
    let o = bench(
        &fs,
        &[
            "--workload",
            "1r1w",
            "--bitrate",
            "8M",
            "--fill",
            "50%",
            "--duration",
            "6s",
            "--best-effort",
            "photos",
        ],
    );
    let r = json(&ok(o));
    check_report(&fs, &r);
    assert_eq!(r["streams"], 2);
    assert_eq!(r["direct"], false);
    // 1 playback and 1 recording of 512 KiB requests at 8 Mbit/s for 6 s: the
    // playback issues its depth at once, then one per period; the recording one per
    // period after its first.
    let rt = r["rt_requests"].as_u64().unwrap();
    assert!((8..=30).contains(&rt), "{rt} requests");
    assert!(
        r["be_throughput_mbps"].as_f64().unwrap() > 0.0,
        "photos were copied"
    );
    assert!(
        r["fill_bytes"].as_u64().unwrap() >= 400 << 20,
        "filled to about half"
    );
    assert!(r["utilization"].is_null() && r["disk_energy_j"].is_null());
    assert!(r["utilization_unknown_because"]
        .as_str()
        .unwrap()
        .contains("not an emulated disk"));
}

#[test]
fn direct_io_and_fsyncs_are_used_and_counted() {
    let Some(fs) = ext4(512) else { return };
    let o = bench(
        &fs,
        &[
            "--workload",
            "1r1w",
            "--bitrate",
            "8M",
            "--fill",
            "20%",
            "--duration",
            "4s",
            "--direct",
            "--fsync-every",
            "1s",
            "--ioprio",
            "rt",
        ],
    );
    let r = json(&ok(o));
    check_report(&fs, &r);
    assert_eq!(r["direct"], true);
    assert_eq!(r["ioprio"], "rt");
    assert_eq!(r["fsync_every_s"], 1.0);
    // Syncs at 1, 2 and 3 s (the one at 4 s is past the end), one per recording.
    assert_eq!(r["fsyncs"], 3);
}

#[test]
fn a_file_system_that_fills_up_stops_the_recordings_with_the_cause() {
    let Some(fs) = ext4(256) else { return };
    let o = bench(
        &fs,
        &[
            "--workload",
            "0r2w",
            "--bitrate",
            "200M",
            "--fill",
            "90%",
            "--duration",
            "5s",
        ],
    );
    assert_eq!(code(&o), 3, "the exit status of stopped streams");
    assert!(stderr(&o).contains("the disk was full"), "{}", stderr(&o));
    let r = json(&stdout(&o));
    check_report(&fs, &r);
    assert_eq!(r["recordings_stopped"], 2);
    assert!(r["misses"]["no_space"].as_u64().unwrap() > 0);
}

#[test]
fn a_fill_made_once_serves_runs_that_remove_only_their_own_files() {
    let Some(fs) = ext4(512) else { return };
    let base = [
        "--workload",
        "1r1w",
        "--bitrate",
        "8M",
        "--fill",
        "40%",
        "--seed",
        "3",
    ];
    let made = json(&ok(bench(&fs, &[&base[..], &["--fill-only"]].concat())));
    assert_eq!(made["fill_only"], true);
    let bench_dir = fs.mnt.join("dvrfs-bench");
    let manifest = bench_dir.join("fill.json");
    assert!(manifest.exists(), "{made}");
    let fill: Vec<_> = std::fs::read_dir(bench_dir.join("rec"))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(made["recordings"].as_u64().unwrap() as usize, fill.len());
    assert!(made["used_bytes"].as_u64().unwrap() >= 150 << 20, "{made}");

    // A run without --reuse-fill does not touch it and says how to use it.
    fails(bench(&fs, &base), "--reuse-fill");
    // Another seed, or a delete victim the fill does not have, is refused by name.
    let mut other = base.to_vec();
    other[7] = "4";
    fails(
        bench(&fs, &[&other[..], &["--reuse-fill"]].concat()),
        "--seed",
    );
    fails(
        bench(
            &fs,
            &[&base[..], &["--reuse-fill", "--best-effort", "delete"]].concat(),
        ),
        "delete victim",
    );

    // Two runs on it: each a full report; afterwards the fill and its manifest are
    // all that is left.
    for _ in 0..2 {
        let r = json(&ok(bench(
            &fs,
            &[
                &base[..],
                &[
                    "--reuse-fill",
                    "--duration",
                    "8s",
                    "--best-effort",
                    "photos",
                ],
            ]
            .concat(),
        )));
        assert!(r["rt_requests"].as_u64().unwrap() > 0, "{r}");
        assert!(
            r["be_throughput_mbps"].as_f64().unwrap() > 0.0,
            "photos were copied"
        );
        let mut left: Vec<_> = std::fs::read_dir(&bench_dir)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        left.sort();
        assert_eq!(left, ["fill.json", "rec"]);
        let after: Vec<_> = std::fs::read_dir(bench_dir.join("rec"))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(
            after.len(),
            fill.len(),
            "the run's recordings are gone, the fill's kept"
        );
    }

    // A recording of the fill changed behind its back: refused, naming the file.
    let victim = bench_dir.join("rec").join(&fill[0]);
    std::fs::OpenOptions::new()
        .append(true)
        .open(&victim)
        .unwrap()
        .set_len(1)
        .unwrap();
    fails(
        bench(&fs, &[&base[..], &["--reuse-fill"]].concat()),
        &fill[0].to_string_lossy(),
    );
    std::fs::remove_dir_all(&bench_dir).unwrap();
    fails(
        bench(&fs, &[&base[..], &["--reuse-fill"]].concat()),
        "no fill to reuse",
    );
}

#[test]
fn a_delete_run_on_a_reused_fill_removes_the_fill_it_changed() {
    let Some(fs) = ext4(512) else { return };
    let base = [
        "--workload",
        "0r1w",
        "--bitrate",
        "8M",
        "--fill",
        "30%",
        "--best-effort",
        "delete",
    ];
    ok(bench(&fs, &[&base[..], &["--fill-only"]].concat()));
    let o = bench(
        &fs,
        &[&base[..], &["--reuse-fill", "--duration", "8s"]].concat(),
    );
    let err = stderr(&o);
    let r = json(&ok(o));
    assert!(r["rt_requests"].as_u64().unwrap() > 0, "{r}");
    assert!(r["delete"].is_object(), "the victim is deleted 5 s in: {r}");
    assert!(err.contains("no longer reusable"), "{err}");
    check_report(&fs, &r);
}

#[test]
fn a_read_only_file_system_is_refused_before_anything_runs() {
    let Some(fs) = ext4(64) else { return };
    let st = Command::new("mount")
        .args(["-o", "remount,ro"])
        .arg(&fs.mnt)
        .status()
        .unwrap();
    assert!(st.success());
    let o = bench(&fs, &["--workload", "1r1w"]);
    fails(o, "read-only file system");
    assert!(!fs.mnt.join("dvrfs-bench").exists());
}

#[test]
fn flags_of_a_dvrfs_target_are_refused_with_dir() {
    let dir = tempdir();
    for flag in [
        ["--scheduler", "cfq"],
        ["--alloc", "contig"],
        ["--device-model", "avfs-250g"],
        ["--commit-interval", "5s"],
    ] {
        let o = dvrfs([
            "bench",
            "--dir",
            dir.path().to_str().unwrap(),
            "--workload",
            "1r1w",
            flag[0],
            flag[1],
        ]);
        assert_eq!(code(&o), 2, "{flag:?}");
        assert!(stderr(&o).contains("cannot be used with"), "{flag:?}");
    }
    let o = dvrfs(["bench", "--dir", "/nonexistent/x", "--workload", "1r1w"]);
    fails(o, "No such file");
}

#[test]
fn on_an_emulated_disk_the_timing_is_switched_and_utilization_comes_from_its_stats() {
    let Some(fs) = ext4(256) else { return };
    // The emulator's files beside the loop device's backing file (`disk`).
    std::fs::write(
        fs.dir().join("stats"),
        r#"{"model":"avfs-250g","busy_ns":5000000,"energy_j":100.0}"#,
    )
    .unwrap();
    std::fs::write(fs.dir().join("timing"), "untouched").unwrap();
    let o = bench(
        &fs,
        &[
            "--workload",
            "1r0w",
            "--bitrate",
            "8M",
            "--fill",
            "10%",
            "--duration",
            "2s",
        ],
    );
    let r = json(&ok(o));
    check_report(&fs, &r);
    assert_eq!(r["disk"], "avfs-250g (emulated)");
    assert_eq!(r["utilization"], 0.0);
    assert_eq!(r["disk_energy_j"], 0.0);
    assert!(r["utilization_unknown_because"].is_null());
    let timing = std::fs::read_to_string(fs.dir().join("timing")).unwrap();
    assert_eq!(
        timing, "on",
        "the emulator's timing is back on after the run"
    );
}
