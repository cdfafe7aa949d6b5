//! `dvrfs emulate`: the emulated disk through a real loop device. Data written
//! through the loop device reads back byte-exact (and is in the image), a flush
//! reaches the image, a fixed command sequence appears in the trace with the times
//! a fresh `Drive` gives for the same arrivals, ext4 runs on it end to end, and bad
//! input is refused with nothing left mounted or attached.
//! Needs root, /dev/fuse and loop devices (each test says SKIP with the reason when
//! they are missing).

mod common;

use common::*;
use std::fs::{self, File, OpenOptions};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use dvrfs_core::disk::{Command as DriveCommand, CommandKind, DiskModel, Drive};

/// Why the emulator cannot be tested here, if it cannot.
fn emulate_missing() -> Option<String> {
    if let Some(why) = fuse_missing() {
        return Some(why);
    }
    if Command::new("losetup").arg("--version").output().is_err() {
        return Some("losetup (util-linux) is missing".into());
    }
    if !Path::new("/dev/loop-control").exists() {
        return Some("/dev/loop-control is missing (no loop devices here)".into());
    }
    None
}

macro_rules! need_emulate {
    () => {
        if let Some(why) = emulate_missing() {
            println!("SKIP: {why}");
            return;
        }
    };
}

/// A sparse image of `bytes` and an empty mount point in a fresh directory.
fn setup(bytes: u64) -> (tempfile::TempDir, PathBuf, PathBuf) {
    let dir = tempdir();
    let img = dir.path().join("disk.img");
    File::create(&img).unwrap().set_len(bytes).unwrap();
    let mnt = dir.path().join("mnt");
    fs::create_dir(&mnt).unwrap();
    (dir, img, mnt)
}

/// Whether anything is mounted on `dir` (canonical paths).
fn mounted_on(dir: &Path) -> bool {
    let d = fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
    let info = fs::read_to_string("/proc/self/mountinfo").unwrap();
    info.lines()
        .any(|l| l.split(' ').nth(4) == Some(d.to_str().unwrap()))
}

/// Whether a loop device is attached to a file under `dir`.
fn loop_on(dir: &Path) -> bool {
    let out = Command::new("losetup").arg("-a").output().unwrap();
    String::from_utf8_lossy(&out.stdout).contains(dir.to_str().unwrap())
}

/// A running emulator, stopped (with `--stop`, or forcibly) when dropped.
struct Emu {
    mnt: PathBuf,
    dev: Option<String>,
}

impl Emu {
    fn start(img: &Path, mnt: &Path, extra: &[&str]) -> Emu {
        let mut args: Vec<String> = vec![
            "emulate".into(),
            img.display().to_string(),
            "--mount".into(),
            mnt.display().to_string(),
            "--log".into(),
            img.with_extension("log").display().to_string(),
        ];
        args.extend(extra.iter().map(|s| s.to_string()));
        let out = ok(dvrfs(&args));
        let dev = out.lines().next().map(str::to_string);
        Emu {
            mnt: mnt.to_path_buf(),
            dev,
        }
    }

    fn dev(&self) -> &str {
        self.dev.as_deref().expect("attached")
    }

    fn stats(&self) -> serde_json::Value {
        json(&fs::read_to_string(self.mnt.join("stats")).unwrap())
    }

    /// `--stop`: the report.
    fn stop(mut self) -> String {
        let out = ok(dvrfs(["emulate", "--stop", self.mnt.to_str().unwrap()]));
        self.dev = None;
        assert!(!mounted_on(&self.mnt), "the emulator left its mount");
        out
    }
}

impl Drop for Emu {
    fn drop(&mut self) {
        if mounted_on(&self.mnt) {
            let _ = dvrfs(["emulate", "--stop", self.mnt.to_str().unwrap()]);
        }
    }
}

/// An aligned buffer for `O_DIRECT` (4 KiB alignment inside a larger `Vec`).
fn aligned(len: usize) -> (Vec<u8>, usize) {
    let v = vec![0u8; len + 4096];
    let at = v.as_ptr().align_offset(4096);
    (v, at)
}

fn open_direct(dev: &str) -> File {
    OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_DIRECT)
        .open(dev)
        .unwrap()
}

/// The trace as rows of fields.
fn trace_rows(path: &Path) -> Vec<Vec<String>> {
    let text = fs::read_to_string(path).unwrap();
    let mut lines = text.lines();
    assert_eq!(
        lines.next().unwrap(),
        "id,arrival_ns,start_ns,end_ns,offset_bytes,length_bytes,direction,queue_depth,seek_ns,rotation_ns,transfer_ns"
    );
    lines
        .map(|l| l.split(',').map(str::to_string).collect())
        .collect()
}

fn num(row: &[String], i: usize) -> u64 {
    row[i].parse().unwrap()
}

#[test]
fn data_round_trips_flushes_reach_the_image_and_times_follow_the_model() {
    need_emulate!();
    let (dir, img, mnt) = setup(256 << 20);
    let trace = dir.path().join("trace.csv");
    let emu = Emu::start(
        &img,
        &mnt,
        &[
            "--model",
            "avfs-250g",
            "--ncq",
            "1",
            "--attach",
            "--trace",
            trace.to_str().unwrap(),
        ],
    );
    assert!(emu.dev().starts_with("/dev/loop"), "{:?}", emu.dev);
    let name = emu.dev().trim_start_matches("/dev/");
    assert_eq!(
        fs::read_to_string(format!("/sys/block/{name}/queue/rotational"))
            .unwrap()
            .trim(),
        "1"
    );
    // No discard: a hard disk has no TRIM.
    assert_eq!(
        fs::read_to_string(format!("/sys/block/{name}/queue/discard_max_bytes"))
            .unwrap()
            .trim(),
        "0"
    );
    assert_eq!(emu.stats()["loop"], emu.dev());

    // Round trip: 64 KiB pieces at scattered offsets, O_DIRECT both ways.
    let dev = open_direct(emu.dev());
    let (mut buf, at) = aligned(64 << 10);
    let mut x = 0x2545_f491_4f6c_dd1du64;
    let mut written = Vec::new();
    for i in 0..48u64 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let off = (x % ((256 << 20) / (64 << 10))) * (64 << 10);
        if written.iter().any(|&(o, _)| o == off) {
            continue;
        }
        let data: Vec<u8> = (0..64 << 10)
            .map(|j| (j as u64 ^ i ^ (off >> 16)) as u8)
            .collect();
        buf[at..at + (64 << 10)].copy_from_slice(&data);
        dev.write_all_at(&buf[at..at + (64 << 10)], off).unwrap();
        written.push((off, data));
    }
    for (off, data) in &written {
        dev.read_exact_at(&mut buf[at..at + (64 << 10)], *off)
            .unwrap();
        assert!(buf[at..at + (64 << 10)] == data[..], "at {off}");
    }

    // A flush reaches the drive (a Flush command) and the image.
    let before = emu.stats()["flushes"].as_u64().unwrap();
    dev.sync_all().unwrap();
    assert!(emu.stats()["flushes"].as_u64().unwrap() > before);
    let image = File::open(&img).unwrap();
    let mut back = vec![0u8; 64 << 10];
    for (off, data) in &written {
        image.read_exact_at(&mut back, *off).unwrap();
        assert!(back == *data, "the image holds the data at {off}");
    }

    // Nothing caches the disk: the same block read twice reaches the drive twice,
    // O_DIRECT and buffered (the block device's own page cache dropped between).
    let reads = |e: &Emu| e.stats()["reads"].as_u64().unwrap();
    let r0 = reads(&emu);
    dev.read_exact_at(&mut buf[at..at + 4096], 1 << 20).unwrap();
    dev.read_exact_at(&mut buf[at..at + 4096], 1 << 20).unwrap();
    assert_eq!(reads(&emu), r0 + 2, "two O_DIRECT reads, two commands");
    let buffered = File::open(emu.dev()).unwrap();
    let mut small = [0u8; 4096];
    for _ in 0..2 {
        assert!(Command::new("blockdev")
            .args(["--flushbufs", emu.dev()])
            .status()
            .unwrap()
            .success());
        let r = reads(&emu);
        buffered.read_exact_at(&mut small, 2 << 20).unwrap();
        assert!(reads(&emu) > r, "a buffered read reached the drive");
    }
    drop(buffered);

    // Timing: a fixed sequence at queue depth 1; each read's wall time covers the
    // model's latency (never less) and little more.
    let offsets: Vec<u64> = (0..24u64)
        .map(|i| (i * 9_973 + 17) * 4096 % (255 << 20))
        .collect();
    let mut waited_ns = Vec::new();
    for &off in &offsets {
        let t = Instant::now();
        dev.read_exact_at(&mut buf[at..at + 4096], off).unwrap();
        waited_ns.push((off, t.elapsed().as_nanos() as u64));
    }
    drop(dev);
    let stats = emu.stats();
    let report = emu.stop();
    assert!(!loop_on(dir.path()), "the loop device was detached");

    let rows = trace_rows(&trace);
    assert!(rows.iter().any(|r| r[6] == "flush"), "a Flush row");
    // The stop report's busy time is the trace's sum (the stats read at the stop).
    let busy: u64 = rows.iter().map(|r| num(r, 3) - num(r, 2)).sum();
    assert_eq!(stats["busy_ns"].as_u64().unwrap(), busy, "stats vs trace");
    let line = report.lines().find(|l| l.starts_with("busy: ")).unwrap();
    let shown: f64 = line[6..].split(' ').next().unwrap().parse().unwrap();
    assert!(
        (shown - busy as f64 / 1e9).abs() < 0.0006,
        "{line} vs {busy} ns"
    );

    // Each timed read: wall time >= the model's (arrival to end: never before the
    // model's end), and the median within HOST_SLACK_NS more (the host's wake-up and
    // the FUSE and loop round trips; a median, because this machine is shared and a
    // single read may wait for a CPU: the emulator counts those as late commands).
    const HOST_SLACK_NS: u64 = 2_000_000;
    let mut excess = Vec::new();
    for (off, wall) in &waited_ns {
        let r = rows
            .iter()
            .rev()
            .find(|r| num(r, 4) == *off && r[6] == "read" && num(r, 5) == 4096)
            .unwrap_or_else(|| panic!("no trace row for the read at {off}"));
        let model = num(r, 3) - num(r, 1);
        assert!(
            *wall >= model,
            "the read at {off} returned before the model's end"
        );
        excess.push(wall - model);
    }
    excess.sort_unstable();
    let median = excess[excess.len() / 2];
    println!(
        "reply after the model's end: median {median} ns, max {} ns over {} reads",
        excess[excess.len() - 1],
        excess.len()
    );
    assert!(
        median <= HOST_SLACK_NS,
        "median excess {median} ns over the model (all: {excess:?})"
    );

    // Replaying the trace's arrivals through a fresh Drive gives the same times.
    let model = DiskModel::builtin("avfs-250g").unwrap();
    let mut drive = Drive::new(&model, 1, dvrfs_emulate::SEED).unwrap();
    let sector = drive.sector_bytes();
    let mut by_arrival = rows.clone();
    by_arrival.sort_by_key(|r| (num(r, 1), num(r, 0)));
    let mut got = std::collections::BTreeMap::new();
    for r in &by_arrival {
        let arrival = num(r, 1);
        while let Some(end) = drive.next_completion_ns().filter(|&e| e <= arrival) {
            for d in drive.complete(end) {
                got.insert(d.id, (d.start_ns, d.end_ns));
            }
        }
        let (lba, sectors) = (num(r, 4) / sector, (num(r, 5) / sector) as u32);
        let kind = match r[6].as_str() {
            "read" => CommandKind::Read { lba, sectors },
            "write" => CommandKind::Write { lba, sectors },
            _ => CommandKind::Flush,
        };
        drive.arrive(
            arrival,
            DriveCommand {
                id: num(r, 0),
                kind,
            },
        );
    }
    for d in drive.complete(u64::MAX) {
        got.insert(d.id, (d.start_ns, d.end_ns));
    }
    for r in &rows {
        assert_eq!(
            got[&num(r, 0)],
            (num(r, 2), num(r, 3)),
            "command {} replays to other times",
            r[0]
        );
    }
}

#[test]
fn ext4_on_the_emulated_disk_end_to_end() {
    need_emulate!();
    if Command::new("mkfs.ext4").arg("-V").output().is_err() {
        println!("SKIP: mkfs.ext4 is missing");
        return;
    }
    let (dir, img, mnt) = setup(512 << 20);
    let emu = Emu::start(&img, &mnt, &["--model", "nvr-8t", "--attach"]);
    // Formatting untimed (as a fill before a measurement would be).
    fs::write(mnt.join("timing"), "off\n").unwrap();
    assert_eq!(fs::read_to_string(mnt.join("timing")).unwrap(), "off\n");
    let out = Command::new("mkfs.ext4")
        .args(["-q", "-F", emu.dev()])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    fs::write(mnt.join("timing"), "on").unwrap();
    assert!(emu.stats()["untimed_commands"].as_u64().unwrap() > 0);
    let host = fs::metadata(&img).unwrap();
    assert!(
        std::os::unix::fs::MetadataExt::blocks(&host) * 512 < 256 << 20,
        "the image stays sparse"
    );

    let fsdir = dir.path().join("ext4");
    fs::create_dir(&fsdir).unwrap();
    let st = Command::new("mount")
        .args([emu.dev(), fsdir.to_str().unwrap()])
        .status()
        .unwrap();
    assert!(st.success());
    let src = random_file(&dir.path().join("src.bin"), 3 << 20, 7);
    fs::copy(&src, fsdir.join("copy.bin")).unwrap();
    File::open(fsdir.join("copy.bin"))
        .unwrap()
        .sync_all()
        .unwrap();

    // Stopping while ext4 is mounted on the loop device is refused, and harmless.
    let refused = fails(
        dvrfs(["emulate", "--stop", mnt.to_str().unwrap()]),
        "is mounted at",
    );
    assert!(refused.contains("umount"), "{refused}");
    assert!(mounted_on(&mnt) && mounted_on(&fsdir));

    assert!(Command::new("umount")
        .arg(&fsdir)
        .status()
        .unwrap()
        .success());
    let st = Command::new("mount")
        .args(["-o", "ro", emu.dev(), fsdir.to_str().unwrap()])
        .status()
        .unwrap();
    assert!(st.success());
    assert_eq!(
        sha256_file(&fsdir.join("copy.bin")),
        sha256_file(&src),
        "the copy reads back after a remount"
    );
    assert!(Command::new("umount")
        .arg(&fsdir)
        .status()
        .unwrap()
        .success());
    let stats = emu.stats();
    assert!(
        stats["writes"].as_u64().unwrap() > 0,
        "ext4's writes reached the drive"
    );
    // The kernel sends up to 128 at once; the drive never holds more than its tags.
    assert!(stats["max_queue_depth"].as_u64().unwrap() <= 32, "{stats}");
    let report = emu.stop();
    assert!(report.contains("utilization"), "{report}");
    assert!(report.contains("energy: "), "{report}");
    assert!(!loop_on(dir.path()));
}

/// Runs a refused `emulate` and checks that nothing was left behind.
#[track_caller]
fn refused(dir: &Path, mnt: &Path, args: &[&str], needle: &str) -> String {
    let err = fails(dvrfs(args), needle);
    assert!(
        !mounted_on(mnt) || needle.contains("mount point"),
        "left mounted"
    );
    assert!(!loop_on(dir), "left attached");
    err
}

#[test]
fn bad_input_is_refused_with_nothing_left_behind() {
    need_emulate!();
    let (dir, img, mnt) = setup(64 << 20);
    let d = dir.path();
    let (i, m) = (img.to_str().unwrap(), mnt.to_str().unwrap());
    let base = |extra: &[&'static str]| {
        let mut v = vec!["emulate", i, "--mount", m];
        v.extend_from_slice(extra);
        v
    };

    let missing = d.join("none.img");
    let err = refused(
        d,
        &mnt,
        &[
            "emulate",
            missing.to_str().unwrap(),
            "--model",
            "avfs-250g",
            "--mount",
            m,
        ],
        "no such image",
    );
    assert!(err.contains("truncate -s 250059350016"), "{err}");
    let err = refused(d, &mnt, &base(&["--model", "wd-nope"]), "unknown disk");
    assert!(err.contains("avfs-250g"), "{err}");
    refused(
        d,
        &mnt,
        &base(&["--model", "avfs-250g", "--ncq", "0"]),
        "--ncq 0",
    );
    refused(
        d,
        &mnt,
        &base(&["--model", "avfs-250g", "--ncq", "33"]),
        "--ncq 33",
    );

    let big = d.join("big.img");
    File::create(&big).unwrap().set_len(300 << 30).unwrap();
    let err = refused(
        d,
        &mnt,
        &[
            "emulate",
            big.to_str().unwrap(),
            "--model",
            "avfs-250g",
            "--mount",
            m,
        ],
        "more than the avfs-250g model's capacity",
    );
    assert!(err.contains("truncate -s"), "{err}");
    fs::remove_file(&big).unwrap();

    // A mount point that is not empty, then one already mounted.
    fs::write(mnt.join("x"), "x").unwrap();
    refused(d, &mnt, &base(&["--model", "avfs-250g"]), "not empty");
    fs::remove_file(mnt.join("x")).unwrap();
    let busy = d.join("busy");
    fs::create_dir(&busy).unwrap();
    assert!(Command::new("mount")
        .args(["-t", "tmpfs", "none", busy.to_str().unwrap()])
        .status()
        .unwrap()
        .success());
    let out = dvrfs([
        "emulate",
        i,
        "--model",
        "avfs-250g",
        "--mount",
        busy.to_str().unwrap(),
    ]);
    let _ = Command::new("umount").arg(&busy).status();
    fails(out, "already a mount point");

    // A second emulator of the same image.
    let first = Emu::start(&img, &mnt, &["--model", "avfs-250g"]);
    let other = d.join("other");
    fs::create_dir(&other).unwrap();
    let err = fails(
        dvrfs([
            "emulate",
            i,
            "--model",
            "avfs-250g",
            "--mount",
            other.to_str().unwrap(),
            "--log",
            d.join("second.log").to_str().unwrap(),
        ]),
        "in use",
    );
    assert!(err.contains("--stop"), "{err}");
    assert!(!mounted_on(&other), "the second emulator left a mount");
    first.stop();

    // --stop on a directory no emulator serves.
    let err = fails(
        dvrfs(["emulate", "--stop", other.to_str().unwrap()]),
        "not a dvrfs emulator",
    );
    assert!(err.contains("hint: "), "{err}");
    assert!(!mounted_on(&mnt) && !loop_on(d));
}

/// `--predict` prints what the core's `disk::predict` computes for the fio checks
/// (virtual time: exact), and `--standby` is refused where it cannot work.
#[test]
fn predictions_and_the_standby_timer() {
    use dvrfs_core::disk::predict::{self, Edge};
    let out = dvrfs([
        "emulate",
        "--model",
        "nvr-8t",
        "--ncq",
        "32",
        "--predict",
        "--json",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let m = DiskModel::builtin("nvr-8t").unwrap();
    let cap = m.capacity_bytes();
    let qd1 = predict::random_read(&m, 32, 1, 4096, 0..cap, 20_000, 1).unwrap();
    let qd32 = predict::random_read(&m, 32, 32, 4096, 0..cap, 20_000, 1).unwrap();
    let inner = predict::sequential_read(&m, 32, 4, 1 << 20, Edge::Inner, 2 << 30, 1).unwrap();
    // The same figures (up to JSON's float parsing: serde_json's default parser may
    // round the last bit).
    let same = |a: &serde_json::Value, b: f64| {
        let a = a.as_f64().unwrap();
        assert!((a - b).abs() <= 1e-12 * b.abs(), "{a} != {b}");
    };
    assert_eq!(v["capacity_bytes"], cap);
    same(&v["random_4k_qd1"]["iops"], qd1.iops);
    same(&v["random_4k_qd32"]["iops"], qd32.iops);
    same(&v["sequential_inner"]["mb_per_s"], inner.mb_per_s);
    assert_eq!(v["inner_offset_bytes"], (m.lbas - m.lbas / 100) * 512);
    // NCQ off: a deeper queue gains nothing.
    let out = dvrfs([
        "emulate",
        "--model",
        "nvr-8t",
        "--ncq",
        "1",
        "--predict",
        "--json",
    ]);
    let v1: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v1["random_4k_qd32"]["iops"], v1["random_4k_qd1"]["iops"]);
    fails(dvrfs(["emulate", "--predict"]), "--predict needs --model");

    // The standby timer needs the model's spin times, and a sane duration.
    let dir = tempdir();
    let img = dir.path().join("d.img");
    File::create(&img).unwrap().set_len(64 << 20).unwrap();
    let mnt = dir.path().join("mnt");
    fs::create_dir(&mnt).unwrap();
    let mut bare: serde_json::Value = serde_json::from_str(
        &serde_json::to_string(&DiskModel::builtin("avfs-250g").unwrap()).unwrap(),
    )
    .unwrap();
    bare.as_object_mut().unwrap().remove("power");
    let model = dir.path().join("bare.json");
    fs::write(&model, bare.to_string()).unwrap();
    let (i, mt) = (img.to_str().unwrap(), mnt.to_str().unwrap());
    fails(
        dvrfs([
            "emulate",
            i,
            "--model",
            model.to_str().unwrap(),
            "--mount",
            mt,
            "--standby",
            "10m",
        ]),
        "has no power section",
    );
    fails(
        dvrfs([
            "emulate",
            i,
            "--model",
            "avfs-250g",
            "--mount",
            mt,
            "--standby",
            "10ms",
        ]),
        "out of range",
    );
    assert!(!mounted_on(&mnt));
}
