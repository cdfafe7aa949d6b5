//! Retention through the mount (issue 26): the `user.dvrfs.retention` attribute sets,
//! shows and removes a directory's policy and, at the root, the volume's, and the
//! mount's engine deletes by them: a stream over its max-size loses its oldest
//! chunks within seconds, each logged as a `chunk_deleted` event. Needs root and
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
        if left.len() < 3 || std::time::Instant::now() > give_up {
            break left;
        }
        std::thread::yield_now();
    };
    assert_eq!(left, names[1..], "the oldest chunk went within 30 s");
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
    assert_clean(&img);
}
