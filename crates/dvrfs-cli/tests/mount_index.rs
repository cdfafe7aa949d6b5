//! The frame index through the mount (issue 25): ffmpeg's segment muxer writes
//! 10-second MPEG-TS segments into a stream directory on a mounted volume, each is
//! indexed as it is written, and its index, read through the `user.dvrfs.keyframes`
//! extended attribute, has exactly ffprobe's keyframes. Needs root, /dev/fuse and
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
    // A file that is not media has no index to show.
    std::fs::write(cam.join("notes.txt"), b"not a video\n".repeat(1000)).unwrap();
    let e = keyframes_attr(&cam.join("notes.txt")).unwrap_err();
    assert!(e.contains("No such attribute"), "{e}");
    m.unmount();
    assert_clean(&img);
}
