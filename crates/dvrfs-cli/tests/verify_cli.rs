//! `dvrfs verify` (issue 25, test 5): the chunks `record --chunk` sealed in a
//! stream directory's chain check intact; one byte flipped in a chunk through the
//! mount fails verify naming the chunk and its UTC range (it is never sealed
//! again); a chunk removed with `dvrfs rm` or through the mount, or renamed away
//! through it, is deleted with a record, one whose record is gone is missing; a file
//! written through the mount is sealed at its close (under the name a rename gave it
//! before), one still open is unsealed; a chain line altered breaks the
//! chain there; a file renamed onto a sealed name records the replaced chunk's
//! removal and is sealed under the name, a second generation. Prints SKIP where ffmpeg or FUSE is missing.

mod common;

use common::{
    assert_clean, av_recording, dvrfs, ffmpeg_here, fuse_missing, json, mkfs, ok, tempdir, Mount,
};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::Path;

/// `verify --json` of `/cam`: its report and the exit status.
fn verify(target: &Path) -> (serde_json::Value, i32) {
    let o = dvrfs(["verify", target.to_str().unwrap(), "/cam", "--json"]);
    (
        json(&String::from_utf8_lossy(&o.stdout)),
        o.status.code().unwrap(),
    )
}

fn states(v: &serde_json::Value) -> Vec<String> {
    v["chunks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["state"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn verify_tells_intact_deleted_missing_and_modified_apart() {
    need_fuse!();
    if !ffmpeg_here() {
        return;
    }
    let d = tempdir();
    let ts = av_recording(d.path(), "cam.ts", 50, &["-preset", "ultrafast"]);
    let img = d.path().join("v.img");
    mkfs(&img, "1G", &[]);
    let r = json(&ok(dvrfs([
        "record",
        img.to_str().unwrap(),
        "/cam",
        "--chunk",
        "10s",
        "--input",
        ts.to_str().unwrap(),
        "--rate",
        "200M",
        "--json",
    ])));
    assert_eq!(r["chunks"], 5, "{r}");
    let (v, status) = verify(&img);
    assert_eq!(status, 0, "{v}");
    assert_eq!(states(&v), vec!["intact"; 5]);
    assert_eq!(v["chain_intact"], true);
    let names: Vec<String> = v["chunks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["chunk"].as_str().unwrap().to_string())
        .collect();
    // Sealed times follow each other.
    for w in v["chunks"].as_array().unwrap().windows(2) {
        assert_eq!(w[0]["to"], w[1]["from"], "{v}");
    }

    // Removed with `dvrfs rm`: deleted, with the record; verify still passes.
    ok(dvrfs([
        "rm",
        img.to_str().unwrap(),
        &format!("/cam/{}", names[0]),
    ]));
    let (v, status) = verify(&img);
    assert_eq!(status, 0, "{v}");
    assert_eq!(v["chunks"][0]["state"], "deleted");
    assert_eq!(v["chunks"][0]["deleted_by"], "dvrfs rm");
    // The chain itself goes only with --force.
    let o = dvrfs(["rm", img.to_str().unwrap(), "/cam/.chain"]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("--force"));
    assert_eq!(verify(&img).1, 0, "the refused rm left the chain");

    // Through the mount: one byte flipped in the third chunk (opened and written
    // again: never sealed again), the fourth removed (recorded by the mount), a note
    // written (sealed at its close, as a camera's segment would be), a file still
    // open (unsealed); verify through the daemon.
    let m = Mount::new(d.path(), &img, &[]);
    let third = m.path(&format!("cam/{}", names[2]));
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&third)
        .unwrap();
    let mut b = [0u8];
    f.seek(SeekFrom::Start(100_000)).unwrap();
    f.read_exact(&mut b).unwrap();
    f.seek(SeekFrom::Start(100_000)).unwrap();
    f.write_all(&[b[0] ^ 0x20]).unwrap();
    drop(f);
    std::fs::remove_file(m.path(&format!("cam/{}", names[3]))).unwrap();
    std::fs::write(m.path("cam/notes.txt"), b"a note").unwrap();
    // The fifth renamed away: recorded as removed by the rename.
    std::fs::rename(m.path(&format!("cam/{}", names[4])), m.path("cam/moved.ts")).unwrap();
    // A muxer's temporary name, renamed before its close: sealed as its final name.
    let mut tmp = std::fs::File::create(m.path("cam/seg.ts.tmp")).unwrap();
    tmp.write_all(&[7u8; 5000]).unwrap();
    std::fs::rename(m.path("cam/seg.ts.tmp"), m.path("cam/seg.ts")).unwrap();
    drop(tmp);
    let mut open = std::fs::File::create(m.path("cam/open.ts")).unwrap();
    open.write_all(b"in progress").unwrap();
    open.flush().unwrap();
    // The mount seals a file when the kernel releases it, just after close(2)
    // returns: polled until the two closed files are sealed.
    let mut polls = 0;
    let (v, status) = loop {
        let (v, status) = verify(&m.mnt);
        if v["chunks"].as_array().unwrap().len() == 7 {
            break (v, status);
        }
        polls += 1;
        assert!(polls < 1_000, "never sealed: {v}");
        std::thread::yield_now();
    };
    assert_eq!(status, 4, "{v}");
    let state = |name: &str| {
        v["chunks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["chunk"] == name)
            .map(|c| c["state"].as_str().unwrap().to_string())
            .unwrap_or_else(|| panic!("{name} not sealed: {v}"))
    };
    let want = [
        (names[0].as_str(), "deleted"),
        (names[1].as_str(), "intact"),
        (names[2].as_str(), "modified"),
        (names[3].as_str(), "deleted"),
        (names[4].as_str(), "deleted"),
        ("notes.txt", "intact"),
        ("seg.ts", "intact"),
    ];
    for (name, st) in want {
        assert_eq!(state(name), st, "{name}: {v}");
    }
    assert_eq!(
        v["unsealed"],
        serde_json::json!(["moved.ts", "open.ts"]),
        "{v}"
    );
    let chain = m.path("cam/.chain");
    let text = std::fs::read_to_string(&chain).unwrap();
    let by_mount = text
        .lines()
        .find(|l| l.contains(&format!("\"deleted\":\"{}\"", names[3])))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(by_mount.contains("dvrfs mount (uid 0, pid "), "{by_mount}");
    let renamed = text
        .lines()
        .find(|l| l.contains(&format!("\"deleted\":\"{}\"", names[4])))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(renamed.contains("renamed to moved.ts"), "{renamed}");
    // The mount's record removed from the chain: the fourth chunk is missing.
    std::fs::write(&chain, text.replace(&format!("{by_mount}\n"), "")).unwrap();
    let (v, _) = verify(&m.mnt);
    assert_eq!(states(&v)[3], "missing", "{v}");
    drop(open);
    // The text names the modified chunk and its UTC range, and fails.
    let o = dvrfs(["verify", m.mnt.to_str().unwrap(), "/cam"]);
    let out = String::from_utf8_lossy(&o.stdout);
    let line = out
        .lines()
        .find(|l| l.contains("MODIFIED"))
        .unwrap_or_else(|| panic!("{out}"));
    let c = &v["chunks"][2];
    for want in [
        names[2].as_str(),
        c["from"].as_str().unwrap(),
        c["to"].as_str().unwrap(),
    ] {
        assert!(line.contains(want), "{line} lacks {want}");
    }
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("1 modified, 1 missing"), "{err}");

    // The chain altered to hide the change: its line's hash rewritten.
    let text = std::fs::read_to_string(&chain).unwrap();
    let found = c["found_sha256"].as_str().unwrap();
    let sealed = c["sha256"].as_str().unwrap();
    std::fs::write(&chain, text.replace(sealed, found)).unwrap();
    let (v, status) = verify(&m.mnt);
    assert_eq!(status, 4);
    assert_eq!(v["chunks"][2]["state"], "intact", "{v}");
    assert_eq!(v["chain_intact"], false);
    assert_eq!(v["chain_breaks"][0]["chunk"], names[2].as_str(), "{v}");

    // A muxer's temporary file renamed onto the sealed `seg.ts` before its close:
    // the replaced chunk is recorded as removed, and the new file is sealed under
    // the name at its close, a second generation of it.
    let mut tmp = std::fs::File::create(m.path("cam/seg.ts.tmp2")).unwrap();
    tmp.write_all(&[9u8; 7000]).unwrap();
    std::fs::rename(m.path("cam/seg.ts.tmp2"), m.path("cam/seg.ts")).unwrap();
    drop(tmp);
    let generations = |v: &serde_json::Value| -> Vec<serde_json::Value> {
        let chunks = v["chunks"].as_array().unwrap().iter();
        chunks.filter(|c| c["chunk"] == "seg.ts").cloned().collect()
    };
    let mut polls = 0;
    let (v, seg) = loop {
        let (v, _) = verify(&m.mnt);
        let seg = generations(&v);
        if seg.len() == 2 {
            break (v, seg);
        }
        polls += 1;
        assert!(polls < 1_000, "never sealed again: {v}");
        std::thread::yield_now();
    };
    assert_eq!(seg[0]["state"], "deleted", "{v}");
    let by = seg[0]["deleted_by"].as_str().unwrap();
    assert!(
        by.contains("replaced by seg.ts.tmp2 renamed onto it"),
        "{by}"
    );
    assert_eq!(
        (&seg[1]["state"], &seg[1]["bytes"]),
        (&"intact".into(), &7000.into()),
        "{v}"
    );
    assert!(
        !v["unsealed"].as_array().unwrap().contains(&"seg.ts".into()),
        "{v}"
    );
    m.unmount();
    assert_clean(&img);
}
