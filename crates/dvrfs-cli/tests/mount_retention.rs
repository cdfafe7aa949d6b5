//! Retention through the mount (issue 26): the `user.dvrfs.retention` attribute sets,
//! shows and removes a directory's policy and, at the root, the volume's, and the
//! mount's engine deletes by them: a stream over its max-size loses its oldest
//! chunks within seconds, each logged as a `chunk_deleted` event; a `kill -9` of the
//! daemon while it deletes leaves every chunk whole or gone (the oldest), the gone
//! logged, `fsck` clean. Needs root and
//! /dev/fuse (SKIP with the reason where missing).

mod common;

use common::*;
use std::path::Path;
use std::process::Command;

const NAME: &str = "user.dvrfs.retention";

fn get(path: &Path) -> Result<String, String> {
    let o = Command::new("getfattr")
        .args(["-n", NAME, "--only-values"])
        .arg(path)
        .output()
        .unwrap();
    match o.status.success() {
        true => Ok(stdout(&o)),
        false => Err(stderr(&o)),
    }
}

fn set(path: &Path, value: &str) -> Result<(), String> {
    let o = Command::new("setfattr")
        .args(["-n", NAME, "-v", value])
        .arg(path)
        .output()
        .unwrap();
    o.status.success().then_some(()).ok_or_else(|| stderr(&o))
}

#[test]
fn policies_through_the_attribute_and_deletions_by_the_mounts_engine() {
    need_fuse!();
    let dir = tempdir();
    let img = dir.path().join("fs.img");
    mkfs(&img, "1G", &[]);
    let m = Mount::new(dir.path(), &img, &[]);
    let cams = m.path("cams");
    let cam1 = cams.join("cam1");
    std::fs::create_dir_all(&cam1).unwrap();
    // A stream directory with its integrity chain: each chunk is sealed at close.
    std::fs::write(cam1.join(".chain"), b"").unwrap();
    // Three one-minute chunks of 1 MiB, named by their UTC start.
    let names: Vec<String> = (0..3)
        .map(|k| format!("20261128T18{:02}44.496Z.ts", 28 + k))
        .collect();
    for (k, n) in names.iter().enumerate() {
        std::fs::write(cam1.join(n), vec![k as u8; 1 << 20]).unwrap();
    }
    assert!(get(&cams).unwrap_err().contains("No such attribute"));
    set(&m.mnt, "high=95%,low=90%,protected-max=20%").unwrap();
    assert_eq!(get(&m.mnt).unwrap(), "high=95%,low=90%,protected-max=20%");
    // Refused: the volume's keys below the root, a bad value, a file.
    assert!(set(&cams, "high=95%,low=90%").is_err());
    assert!(set(&cams, "max-age=3w").is_err());
    assert!(set(&cam1.join(&names[0]), "max-age=1d").is_err());
    let list = Command::new("getfattr")
        .args(["-d", "-m", "-"])
        .arg(&m.mnt)
        .output()
        .unwrap();
    assert!(stdout(&list).contains(NAME), "{}", stdout(&list));
    // At most 2 MiB per stream: the oldest chunk goes, by the mount's engine.
    set(&cams, "max-age=30d,max-size=2M").unwrap();
    assert_eq!(get(&cams).unwrap(), "max-age=30d,max-size=2M");
    // The daemon plans at once when a policy is set; polled, for at most 30 s.
    let give_up = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let left = loop {
        let mut left: Vec<String> = std::fs::read_dir(&cam1)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        if left.len() < 4 || std::time::Instant::now() > give_up {
            break left;
        }
        std::thread::yield_now();
    };
    assert_eq!(left[0], ".chain");
    assert_eq!(left[1..], names[1..], "the oldest chunk went within 30 s");
    // Removed from the root: the volume's policy goes; the stream's stays.
    Command::new("setfattr")
        .args(["-x", NAME])
        .arg(&m.mnt)
        .output()
        .unwrap();
    assert!(get(&m.mnt).is_err());
    m.unmount();
    let v = json(&ok(dvrfs([
        "retention",
        img.to_str().unwrap(),
        "--list",
        "--json",
    ])));
    assert_eq!(v["volume"], serde_json::Value::Null);
    assert_eq!(v["streams"][0]["path"], "/cams");
    assert_eq!(v["streams"][0]["max_size_bytes"], 2 << 20);
    let ev = ok(dvrfs(["events", img.to_str().unwrap()]));
    let deleted: Vec<&str> = ev.lines().filter(|l| l.contains("chunk_deleted")).collect();
    assert_eq!(deleted.len(), 1, "{ev}");
    assert!(
        deleted[0].contains(&format!("/cams/cam1/{}", names[0])),
        "{ev}"
    );
    assert!(deleted[0].contains("max_size bytes="), "{ev}");
    // The chain records the deletion: verify says who removed it, not MISSING.
    let v = ok(dvrfs(["verify", img.to_str().unwrap(), "/cams/cam1"]));
    let line = v
        .lines()
        .find(|l| l.contains(&names[0]))
        .unwrap_or_default();
    assert!(
        line.trim_start().starts_with("deleted") && line.contains("dvrfs retention (max_size)"),
        "{v}"
    );
    assert!(!v.contains("MISSING"), "{v}");
    assert_eq!(v.lines().filter(|l| l.contains("intact")).count(), 2, "{v}");
    assert_clean(&img);
}

#[test]
fn kill_9_of_the_mount_while_it_deletes_leaves_every_chunk_whole_or_gone_and_logged() {
    need_fuse!();
    let dir = tempdir();
    let img = dir.path().join("fs.img");
    mkfs(&img, "1G", &[]);
    let mut m = Mount::new(dir.path(), &img, &[]);
    let cam = m.path("cams/cam1");
    std::fs::create_dir_all(&cam).unwrap();
    // Sixty one-minute chunks of 256 KiB, each filled with its own byte, durable.
    let names: Vec<String> = (0..60)
        .map(|k| format!("20261128T{:02}{:02}00.000Z.ts", 10 + k / 60, k % 60))
        .collect();
    for (k, n) in names.iter().enumerate() {
        use std::io::Write;
        let mut f = std::fs::File::create(cam.join(n)).unwrap();
        f.write_all(&vec![k as u8 + 1; 256 << 10]).unwrap();
        f.sync_all().unwrap();
    }
    // At most 1 MiB: 56 chunks must go, one every 50 ms at most, 20 per commit.
    set(&m.path("cams"), "max-size=1M").unwrap();
    let give_up = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let left = std::fs::read_dir(&cam).unwrap().count();
        assert!(left > 4, "every deletion was done before the kill");
        // Past the first commit's 20 deletions: some committed (almost surely
        // durable by now), the latest not.
        if left < 30 {
            break;
        }
        assert!(
            std::time::Instant::now() < give_up,
            "nothing deleted in 60 s"
        );
        std::thread::yield_now();
    }
    // SAFETY: signalling the daemon's pid.
    unsafe { libc::kill(m.pid, libc::SIGKILL) };
    wait_exit(m.pid);
    m.pid = 0;
    Command::new("umount")
        .arg("-l")
        .arg(&m.mnt)
        .output()
        .unwrap();
    drop(m);
    wait_unlocked(&img);
    // Reopened: the journal replayed, fsck clean.
    assert_clean(&img);
    let ls = ok(dvrfs(["ls", img.to_str().unwrap(), "/cams/cam1"]));
    let left: Vec<&String> = names.iter().filter(|n| ls.contains(n.as_str())).collect();
    let gone: Vec<&String> = names.iter().filter(|n| !ls.contains(n.as_str())).collect();
    // The oldest went, in order: what is left is the newest ones, whole. (Whether
    // the kill found the first commit of deletions durable is the machine's
    // timing; the checks below hold either way.)
    assert!(left.len() >= 4, "{ls}");
    eprintln!(
        "after the kill: {} chunks gone for good, {} left",
        gone.len(),
        left.len()
    );
    assert_eq!(
        left[..],
        names.iter().collect::<Vec<_>>()[gone.len()..],
        "{ls}"
    );
    for n in &left {
        let k = names.iter().position(|x| x == *n).unwrap();
        let local = dir.path().join(format!("chunk{k}"));
        get_to(&img, &format!("/cams/cam1/{n}"), &local);
        let bytes = std::fs::read(&local).unwrap();
        assert_eq!(bytes.len(), 256 << 10, "{n}");
        assert!(bytes.iter().all(|&b| b == k as u8 + 1), "{n} is not whole");
    }
    // The deletion log names exactly what went: each unlink and its event are in one
    // transaction, so a deletion the kill undid is neither gone nor logged.
    let ev = ok(dvrfs(["events", img.to_str().unwrap()]));
    let mut logged: Vec<&str> = ev
        .lines()
        .filter(|l| l.contains("chunk_deleted"))
        .map(|l| {
            let at = l.find("/cams/cam1/").unwrap() + "/cams/cam1/".len();
            l[at..].split_whitespace().next().unwrap()
        })
        .collect();
    logged.sort();
    let gone: Vec<&str> = gone.iter().map(|s| s.as_str()).collect();
    assert_eq!(logged, gone, "{ev}");
}
