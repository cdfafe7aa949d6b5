//! The frame index through the mount (issue 25): ffmpeg's segment muxer writes
//! 10-second MPEG-TS segments into a stream directory on a mounted volume, each is
//! indexed as it is written, and its index, read through the `user.dvrfs.keyframes`
//! extended attribute, has exactly ffprobe's keyframes; a plain MP4 copied in, or
//! written by ffmpeg straight into the mount, is indexed from its sample tables at
//! its last close; each is sealed in the directory's integrity chain at its close
//! and `dvrfs verify` finds them intact. A recording appended to after a remount
//! has its index picked up again where it stopped. Needs root, /dev/fuse and
//! ffmpeg (SKIP with the reason where missing).

mod common;

use common::*;
use std::path::Path;
use std::process::Command;

/// `getfattr -n user.dvrfs.keyframes --only-values PATH`: the value, or what
/// getfattr said.
fn keyframes_attr(path: &Path) -> Result<String, String> {
    let o = Command::new("getfattr")
        .args(["-n", "user.dvrfs.keyframes", "--only-values"])
        .arg(path)
        .output()
        .unwrap();
    match o.status.success() {
        true => Ok(String::from_utf8_lossy(&o.stdout).into_owned()),
        false => Err(String::from_utf8_lossy(&o.stderr).into_owned()),
    }
}

/// A 12-second plain MP4 (its `moov` last) by ffmpeg at `out`, a keyframe every 2 s.
fn plain_mp4(out: &Path) {
    let o = Command::new("ffmpeg")
        .args(["-v", "error", "-f", "lavfi", "-i"])
        .arg("testsrc2=size=320x240:rate=25:duration=12")
        .args(["-c:v", "libx264", "-g", "50"])
        .arg(out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

/// The keyframe offsets in `path`'s `user.dvrfs.keyframes`, once it has a complete
/// index: the mount learns of a file's last close when the kernel releases it,
/// after close(2) returns, so the attribute is polled until it shows one.
fn indexed_offsets(path: &Path) -> Vec<u64> {
    let mut polls = 0;
    let text = loop {
        let t = keyframes_attr(path).unwrap_or_default();
        if t.starts_with("keyframes=") {
            break t;
        }
        polls += 1;
        assert!(polls < 10_000, "{} never indexed: {t}", path.display());
        std::thread::yield_now();
    };
    let offsets: Vec<u64> = text
        .lines()
        .skip(1)
        .map(|l| l.split_whitespace().nth(1).unwrap().parse().unwrap())
        .collect();
    assert!(
        text.starts_with(&format!("keyframes={} complete=yes", offsets.len())),
        "{text}"
    );
    offsets
}

/// `dvrfs verify MNT /cam --json` once `count` files are sealed: the mount seals a
/// file at its release, which the kernel sends after close(2) returns, so verify is
/// polled until nothing it lists is unsealed.
fn sealed(mnt: &Path, count: usize) -> serde_json::Value {
    let mut polls = 0;
    loop {
        let o = dvrfs(["verify", mnt.to_str().unwrap(), "/cam", "--json"]);
        let v = json(&String::from_utf8_lossy(&o.stdout));
        let n = v["chunks"].as_array().map_or(0, |c| c.len());
        if n == count && v["unsealed"].as_array().is_some_and(|u| u.is_empty()) {
            assert!(o.status.success(), "{v}");
            return v;
        }
        polls += 1;
        assert!(polls < 1_000, "never all sealed: {v}");
        std::thread::yield_now();
    }
}

#[test]
fn segments_written_by_ffmpeg_through_the_mount_show_ffprobes_keyframes() {
    need_fuse!();
    if !ffmpeg_here() {
        return;
    }
    let dir = tempdir();
    let img = dir.path().join("fs.img");
    mkfs(&img, "2G", &[]);
    let m = Mount::new(dir.path(), &img, &[]);
    let cam = m.path("cam");
    std::fs::create_dir(&cam).unwrap();
    // A stream directory: what is written in it through the mount is sealed.
    std::fs::write(cam.join(".chain"), b"").unwrap();
    // 35 s at 25 fps, a keyframe every 2 s, cut into 10 s segments.
    let o = Command::new("ffmpeg")
        .args(["-v", "error", "-f", "lavfi", "-i"])
        .arg("testsrc2=size=320x240:rate=25:duration=35")
        .args([
            "-c:v",
            "libx264",
            "-g",
            "50",
            "-f",
            "segment",
            "-segment_time",
            "10",
        ])
        .args(["-segment_format", "mpegts"])
        .arg(cam.join("%03d.ts"))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let mut names: Vec<String> = std::fs::read_dir(&cam)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| !n.starts_with('.'))
        .collect();
    names.sort();
    assert_eq!(names, ["000.ts", "001.ts", "002.ts", "003.ts"]);
    for n in &names {
        let seg = cam.join(n);
        let text = keyframes_attr(&seg).unwrap_or_else(|e| panic!("{n}: {e}"));
        let mut lines = text.lines();
        let head = lines.next().unwrap();
        let offsets: Vec<u64> = lines
            .map(|l| l.split_whitespace().nth(1).unwrap().parse().unwrap())
            .collect();
        let want = key_positions(&seg);
        assert!(!want.is_empty(), "{n}: ffprobe found no keyframe");
        assert_eq!(offsets, want, "{n}: {text}");
        assert_eq!(
            head,
            format!("keyframes={} complete=yes", want.len()),
            "{n}"
        );
        // Listed among the file's attributes, and not to be written.
        let list = Command::new("getfattr")
            .args(["-d", "-m", "-"])
            .arg(&seg)
            .output()
            .unwrap();
        assert!(
            stdout(&list).contains("user.dvrfs.keyframes"),
            "{}",
            stdout(&list)
        );
        let set = Command::new("setfattr")
            .args(["-n", "user.dvrfs.keyframes", "-v", "0 0 0 0 0 -"])
            .arg(&seg)
            .output()
            .unwrap();
        assert!(
            !set.status.success(),
            "{n}: the index was written through the attribute"
        );
    }
    // A plain MP4 (its sample tables last) copied in is indexed whole at its last
    // close.
    let mp4 = dir.path().join("plain.mp4");
    plain_mp4(&mp4);
    std::fs::copy(&mp4, cam.join("plain.mp4")).unwrap();
    let want = key_positions(&mp4);
    assert_eq!(want.len(), 6, "12 s, a keyframe every 2 s");
    assert_eq!(indexed_offsets(&cam.join("plain.mp4")), want);
    // ffmpeg writing one straight into the mount: it leaves the `mdat` open and
    // sets its size before it writes the `moov`.
    let direct = cam.join("direct.mp4");
    plain_mp4(&direct);
    let want = key_positions(&direct);
    assert_eq!(want.len(), 6);
    assert_eq!(indexed_offsets(&direct), want);

    // A file that is not media has no index to show.
    std::fs::write(cam.join("notes.txt"), b"not a video\n".repeat(1000)).unwrap();
    let e = keyframes_attr(&cam.join("notes.txt")).unwrap_err();
    assert!(e.contains("No such attribute"), "{e}");

    // Each file was sealed at its last close (the segments hashed as they were
    // written, the MP4 ffmpeg went back into read back): verify finds every one
    // intact, each segment with its UTC range from its index.
    let v = sealed(&m.mnt, 7);
    let chunks = v["chunks"].as_array().unwrap();
    for c in chunks {
        assert_eq!(c["state"], "intact", "{v}");
    }
    let mut sealed_names: Vec<&str> = chunks
        .iter()
        .map(|c| c["chunk"].as_str().unwrap())
        .collect();
    sealed_names.sort();
    assert_eq!(
        sealed_names,
        [
            "000.ts",
            "001.ts",
            "002.ts",
            "003.ts",
            "direct.mp4",
            "notes.txt",
            "plain.mp4"
        ]
    );
    for c in chunks
        .iter()
        .filter(|c| c["chunk"].as_str().unwrap().ends_with(".ts"))
    {
        assert!(!c["from"].as_str().unwrap().is_empty(), "{c}");
    }
    assert_eq!(v["chain_intact"], true, "{v}");
    m.unmount();
    assert_clean(&img);
}

#[test]
fn a_recording_appended_to_after_a_remount_has_its_index_picked_up_again() {
    need_fuse!();
    if !ffmpeg_here() {
        return;
    }
    let dir = tempdir();
    let img = dir.path().join("fs.img");
    mkfs(&img, "1G", &[]);
    // 20 s of MPEG-TS, a keyframe every 2 s.
    let src = dir.path().join("rec.ts");
    let o = Command::new("ffmpeg")
        .args(["-v", "error", "-f", "lavfi", "-i"])
        .arg("testsrc2=size=320x240:rate=25:duration=20")
        .args(["-c:v", "libx264", "-g", "50"])
        .arg(&src)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let bytes = std::fs::read(&src).unwrap();
    let want = key_positions(&src);
    assert_eq!(want.len(), 10);
    let half = bytes.len() / 2 / 188 * 188;
    // The first half written, the volume unmounted (the daemon, and with it what it
    // knew of the file, gone), mounted again, and the second half appended.
    let m = Mount::new(dir.path(), &img, &[]);
    std::fs::write(m.path("rec.ts"), &bytes[..half]).unwrap();
    m.unmount();
    let m = Mount::new(dir.path(), &img, &[]);
    let rec = m.path("rec.ts");
    let first = indexed_offsets(&rec);
    assert!(
        first.len() < want.len() && want.starts_with(&first),
        "{first:?}"
    );
    {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new().append(true).open(&rec).unwrap();
        f.write_all(&bytes[half..]).unwrap();
    }
    // The whole file's keyframes, the index complete: it is flagged incomplete
    // while the daemon reads the file back from its last keyframe, so polled.
    let whole = format!("keyframes={} complete=yes", want.len());
    let mut polls = 0;
    let text = loop {
        let t = keyframes_attr(&rec).unwrap_or_default();
        if t.starts_with(&whole) || polls == 10_000 {
            break t;
        }
        polls += 1;
        std::thread::yield_now();
    };
    let got: Vec<u64> = text
        .lines()
        .skip(1)
        .map(|l| l.split_whitespace().nth(1).unwrap().parse().unwrap())
        .collect();
    assert!(text.starts_with(&whole), "{text}");
    assert_eq!(got, want);
    m.unmount();
    assert_clean(&img);
}
