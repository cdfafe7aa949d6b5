//! `dvrfs status` through the real binary: on a volume at rest (space, and the
//! headroom of an idle disk, the same count `capacity` prints), and clear errors for
//! bad flags. The mounted case (streams seen through the daemon) is in
//! `remote_cli.rs` beside the other commands that go through the daemon.

mod common;

use common::*;

#[test]
fn status_at_rest_shows_the_space_and_the_headroom_capacity_counts() {
    let dir = tempdir();
    let img = dir.path().join("rest.img");
    mkfs(&img, "4G", &[]);
    let local = random_file(&dir.path().join("clip"), 9 << 20, 3);
    ok(dvrfs([
        "put".as_ref(),
        img.as_os_str(),
        local.as_os_str(),
        "/clip".as_ref(),
    ]));
    let v = json(&ok(dvrfs([
        "status".as_ref(),
        img.as_os_str(),
        "--device-model".as_ref(),
        "avfs-250g".as_ref(),
        "--rate".as_ref(),
        "6M".as_ref(),
        "--json".as_ref(),
    ])));
    assert!(v["mounted_at"].is_null(), "{v}");
    let st = &v["status"];
    let used = st["space"]["used_bytes"].as_u64().unwrap();
    let free = st["space"]["free_bytes"].as_u64().unwrap();
    let total = st["space"]["total_bytes"].as_u64().unwrap();
    assert!(used >= 9 << 20, "{v}");
    assert_eq!(used + free, total, "{v}");
    assert_eq!(st["streams"].as_array().unwrap().len(), 0);
    // The ring mkfs gave this 4 GiB volume: 4 MiB.
    let cap = json(&ok(dvrfs([
        "capacity",
        "--disk",
        "avfs-250g",
        "--bitrate",
        "6M",
        "--tail-log",
        "4M",
        "--json",
    ])));
    // Recordings at the volume's commit interval (1 s), as capacity's default.
    assert_eq!(
        st["admission"]["more_streams"], cap["admission_streams_auto_buffer_durable"],
        "status {v}\ncapacity {cap}"
    );
    assert_eq!(st["admission"]["asked"]["dir"], "write", "{v}");
    assert_eq!(
        st["admission"]["asked"]["durable_ns"], 1_000_000_000u64,
        "{v}"
    );
    assert!(st["admission"]["largest_rate_bps"].as_f64().unwrap() > 6e6);
    // Playbacks: whole requests, capacity's admission_streams_auto_buffer.
    let status_of = |extra: &[&str]| {
        let mut args = vec![
            "status",
            img.to_str().unwrap(),
            "--device-model",
            "avfs-250g",
            "--json",
        ];
        args.extend_from_slice(extra);
        json(&ok(dvrfs(args)))
    };
    let reads = status_of(&["--rate", "6M", "--dir", "read"]);
    assert_eq!(
        reads["status"]["admission"]["more_streams"], cap["admission_streams_auto_buffer"],
        "status {reads}\ncapacity {cap}"
    );
    // Slow recordings, as capacity counts them: this volume's 4 MiB ring holds what
    // a few of them log, the rest are planned in place, where more fit at 10 s.
    let slow = |durable: &str| {
        let st = status_of(&["--rate", "250K", "--durable", durable]);
        let cap = json(&ok(dvrfs([
            "capacity",
            "--disk",
            "avfs-250g",
            "--bitrate",
            "250K",
            "--durable",
            durable,
            "--tail-log",
            "4M",
            "--json",
        ])));
        let more = st["status"]["admission"]["more_streams"].as_u64().unwrap();
        assert_eq!(
            more, cap["admission_streams_auto_buffer_durable"],
            "{st}\n{cap}"
        );
        more
    };
    assert!(slow("1s") < slow("10s"));

    let text = ok(dvrfs([
        "status".as_ref(),
        img.as_os_str(),
        "--device-model".as_ref(),
        "avfs-250g".as_ref(),
        "--rate".as_ref(),
        "6M".as_ref(),
    ]));
    assert!(text.contains("not mounted"), "{text}");
    assert!(
        text.contains(&format!(
            "headroom:  {} more stream(s) of 6.00 Mbit/s in 512 KiB requests with the buffer dvrfs chooses (recordings durable within 1.0 s)",
            cap["admission_streams_auto_buffer_durable"]
        )),
        "{text}"
    );
}

#[test]
fn status_refuses_bad_flags_clearly() {
    let dir = tempdir();
    let img = dir.path().join("bad.img");
    mkfs(&img, "1G", &[]);
    fails(
        dvrfs([
            "status".as_ref(),
            img.as_os_str(),
            "--request".as_ref(),
            "1000".as_ref(),
        ]),
        "invalid --request",
    );
    fails(
        dvrfs([
            "status".as_ref(),
            img.as_os_str(),
            "--rate".as_ref(),
            "fast".as_ref(),
        ]),
        "--rate",
    );
    fails(
        dvrfs(["status".as_ref(), dir.path().join("none.img").as_os_str()]),
        "none.img",
    );
    let img = img.to_str().unwrap();
    fails(
        dvrfs(["status", img, "--dir", "sideways"]),
        "invalid --dir \"sideways\"",
    );
    fails(
        dvrfs(["status", img, "--dir", "read", "--durable", "5s"]),
        "--durable applies to recordings",
    );
    fails(
        dvrfs(["status", img, "--durable", "500ms"]),
        "cannot be shorter than the volume's commit interval (1000 ms)",
    );
}

#[test]
fn status_warns_once_the_volume_is_nine_tenths_full() {
    let dir = tempdir();
    let img = dir.path().join("full.img");
    mkfs(&img, "256M", &["--block-size", "1M"]);
    let quiet = ok(dvrfs(["status".as_ref(), img.as_os_str()]));
    assert!(!quiet.contains("WARNING"), "{quiet}");
    let free = info(&img)["free_bytes"].as_u64().unwrap();
    let local = random_file(&dir.path().join("big"), free / 100 * 93, 5);
    ok(dvrfs([
        "put".as_ref(),
        img.as_os_str(),
        local.as_os_str(),
        "/big".as_ref(),
    ]));
    let text = ok(dvrfs(["status".as_ref(), img.as_os_str()]));
    assert!(
        text.contains("WARNING:   9") && text.contains("of the data region is used or held"),
        "{text}"
    );
}
