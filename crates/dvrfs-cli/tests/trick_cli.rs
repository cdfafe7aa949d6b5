//! `dvrfs play --speed N` on an indexed transport stream or MP4 (issue 25, test 3): trick
//! play shows keyframes only, the right number, over the source's duration / N to
//! within 5% by ffprobe, decoding without a word from `ffmpeg -v error`, having read
//! at most 10% of the recording's bytes; `--speed -8` shows the same pictures in
//! the reverse order; at 32x at most 8 keyframes a second; four live recordings
//! and two trick-play readers, each its own process, on a volume mounted over the
//! emulated `avfs-250g` miss nothing. Each run takes the output's duration in real
//! time (the keyframes are shown on time). Prints SKIP where ffmpeg or FUSE is
//! missing.

mod common;

use common::{
    av_recording, decode_errors, dvrfs, fails, ffmpeg_here, fuse_missing, json, mkfs, ok,
    picture_hashes, remux, tempdir, video_packets, Mount, AT_4_MBITS,
};
use std::path::Path;
use std::process::{Child, Command, Stdio};

/// `play --speed speed` of `/cam.ts` into `out`: its JSON report.
fn trick(img: &Path, speed: &str, out: &Path) -> serde_json::Value {
    trick_of(img, "/cam.ts", speed, out)
}

/// `play --speed speed` of `path` into `out`: its JSON report.
fn trick_of(img: &Path, path: &str, speed: &str, out: &Path) -> serde_json::Value {
    json(&ok(dvrfs([
        "play",
        img.to_str().unwrap(),
        path,
        "--rate",
        "4M",
        "--speed",
        speed,
        "--output",
        out.to_str().unwrap(),
        "--json",
    ])))
}

#[test]
fn fast_forward_and_rewind_show_keyframes_only_on_time() {
    if !ffmpeg_here() {
        return;
    }
    let d = tempdir();
    // 80 s at 4 Mbit/s, a keyframe every 2 s: 40 keyframes.
    let ts = av_recording(d.path(), "cam.ts", 80, AT_4_MBITS);
    let img = d.path().join("v.img");
    mkfs(&img, "1G", &[]);
    ok(dvrfs([
        "put",
        img.to_str().unwrap(),
        ts.to_str().unwrap(),
        "/cam.ts",
    ]));
    let size = std::fs::metadata(&ts).unwrap().len();

    let ff = d.path().join("ff.ts");
    let r = trick(&img, "8", &ff);
    assert_eq!(r["keyframes_shown"], 40, "{r}");
    assert_eq!(r["late_reads"], 0, "{r}");
    let bytes_read = r["bytes_read"].as_u64().unwrap();
    assert!(bytes_read * 10 <= size, "read {bytes_read} of {size} bytes");
    let p = video_packets(&ff);
    assert_eq!(p.len(), 40);
    assert!(p.iter().all(|x| x.0), "only keyframes");
    let (first, last) = (p[0].1, p[39].1);
    // 39 keyframe intervals of 2 s at 8x, and the last shown for one more.
    let shown = last - first + 0.25;
    assert!((shown - 10.0).abs() <= 0.5, "{shown} s, not 80 / 8");
    let errors = decode_errors(&ff);
    assert!(errors.is_empty(), "{errors}");

    // Rewinding: the same pictures, last first.
    let rw = d.path().join("rw.ts");
    let r = trick(&img, "-8", &rw);
    assert_eq!(r["keyframes_shown"], 40, "{r}");
    assert!(r["first_frame"].as_u64() > r["last_frame"].as_u64(), "{r}");
    let mut fwd = picture_hashes(&ff);
    let back = picture_hashes(&rw);
    assert_eq!(fwd.len(), 40);
    fwd.reverse();
    assert_eq!(back, fwd);

    // 32x: 16 keyframes a second would be due; at most 8 are shown.
    let fast = d.path().join("fast.ts");
    let r = trick(&img, "32", &fast);
    assert_eq!(r["keyframes_shown"], 20, "{r}");
    let p = video_packets(&fast);
    assert!(
        p.windows(2).all(|w| w[1].1 - w[0].1 >= 0.125 - 1e-3),
        "{p:?}"
    );

    // What cannot be.
    let out = d.path().join("x.ts");
    let s = img.to_str().unwrap();
    let o = out.to_str().unwrap();
    fails(
        dvrfs([
            "play", s, "/cam.ts", "--rate", "4M", "--speed", "40", "--output", o,
        ]),
        "a trick-play speed is 2 to 32",
    );
    std::fs::write(d.path().join("text"), b"not video".repeat(1000)).unwrap();
    ok(dvrfs([
        "put",
        s,
        d.path().join("text").to_str().unwrap(),
        "/text",
    ]));
    fails(
        dvrfs([
            "play", s, "/text", "--rate", "4M", "--speed", "-8", "--output", o,
        ]),
        "rewinding needs /text's frame index",
    );
}

/// Trick play of an MP4, fragmented (a camera's or ffmpeg's fMP4) and plain (its
/// `moov` after the `mdat`, as ffmpeg writes by default): the output is a fragmented
/// MP4 of the video track's keyframes alone, one fragment each, that ffprobe sees
/// as keyframes only, shown over the source's duration / 8, decoding silently;
/// only the samples are read (under 10% of the bytes); rewinding shows the same
/// pictures last first.
#[test]
fn trick_play_of_fragmented_and_plain_mp4() {
    if !ffmpeg_here() {
        return;
    }
    let d = tempdir();
    // 40 s at 4 Mbit/s, a keyframe every 2 s: 20 keyframes.
    let frag = av_recording(d.path(), "cam.mp4", 40, AT_4_MBITS);
    let plain = d.path().join("plain.mp4");
    remux(&frag, &plain, &[]);
    let img = d.path().join("v.img");
    mkfs(&img, "1G", &[]);
    let s = img.to_str().unwrap();
    for (local, name) in [(&frag, "/frag.mp4"), (&plain, "/plain.mp4")] {
        ok(dvrfs(["put", s, local.to_str().unwrap(), name]));
        let size = std::fs::metadata(local).unwrap().len();
        let ff = d.path().join(format!("ff{}", &name[1..]));
        let r = trick_of(&img, name, "8", &ff);
        assert_eq!(r["keyframes_shown"], 20, "{name}: {r}");
        assert_eq!(r["late_reads"], 0, "{name}: {r}");
        let bytes_read = r["bytes_read"].as_u64().unwrap();
        assert!(
            bytes_read * 10 <= size,
            "{name}: read {bytes_read} of {size} bytes"
        );
        let p = video_packets(&ff);
        assert_eq!(p.len(), 20, "{name}: {p:?}");
        assert!(p.iter().all(|x| x.0), "{name}: only keyframes");
        // 19 keyframe intervals of 2 s at 8x, and the last shown for one more.
        let shown = p[19].1 - p[0].1 + 0.25;
        assert!((shown - 5.0).abs() <= 0.25, "{name}: {shown} s, not 40 / 8");
        let errors = decode_errors(&ff);
        assert!(errors.is_empty(), "{name}: {errors}");

        let rw = d.path().join(format!("rw{}", &name[1..]));
        let r = trick_of(&img, name, "-8", &rw);
        assert_eq!(r["keyframes_shown"], 20, "{name}: {r}");
        let mut fwd = picture_hashes(&ff);
        assert_eq!(fwd.len(), 20, "{name}");
        fwd.reverse();
        assert_eq!(picture_hashes(&rw), fwd, "{name}");

        // `dvrfs keyframe` of an MP4: the sample alone, one picture, the same one
        // trick play shows for that moment (the keyframe at 10 s, the sixth).
        let kf = d.path().join(format!("kf{}", &name[1..]));
        let o = kf.to_str().unwrap();
        ok(dvrfs(["keyframe", s, name, "--at", "+11s", "--output", o]));
        let p = video_packets(&kf);
        assert_eq!(p.len(), 1, "{name}: {p:?}");
        assert!(p[0].0, "{name}");
        assert!(decode_errors(&kf).is_empty(), "{name}");
        assert_eq!(picture_hashes(&kf), [fwd[20 - 1 - 5].clone()], "{name}");
    }
    // The same pictures from both sources: the plain MP4 is the fragmented one remuxed.
    assert_eq!(
        picture_hashes(&d.path().join("fffrag.mp4")),
        picture_hashes(&d.path().join("ffplain.mp4"))
    );
}

/// `dvrfs record IMG /NAME --chunk 4s` fed in real time by ffmpeg with the first
/// `secs` seconds of `src`: (ffmpeg, record).
fn live_recording(img: &Path, src: &Path, name: &str, secs: u32) -> (Child, Child) {
    let mut feed = Command::new("ffmpeg")
        .args(["-v", "error", "-re", "-i"])
        .arg(src)
        .args(["-t", &secs.to_string(), "-c", "copy", "-f", "mpegts", "-"])
        .stdout(Stdio::piped())
        .spawn()
        .expect("run ffmpeg");
    let rec = Command::new(env!("CARGO_BIN_EXE_dvrfs"))
        .args(["record", img.to_str().unwrap(), name, "--chunk", "4s"])
        .args(["--rate", "6M", "--json"])
        .stdin(feed.stdout.take().unwrap())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run dvrfs record");
    (feed, rec)
}

#[test]
fn four_recordings_and_two_trick_players_on_the_emulated_disk_miss_nothing() {
    if !ffmpeg_here() {
        return;
    }
    if let Some(why) = fuse_missing() {
        println!("SKIP: {why}");
        return;
    }
    let d = tempdir();
    // 64 s at 4 Mbit/s, a keyframe every 2 s: 32 keyframes, 8 s at 8x.
    let ts = av_recording(d.path(), "cam.ts", 64, AT_4_MBITS);
    let img = d.path().join("v.img");
    mkfs(&img, "2G", &[]);
    let s = img.to_str().unwrap();
    ok(dvrfs(["put", s, ts.to_str().unwrap(), "/cam.ts"]));
    let m = Mount::new(d.path(), &img, &["--device-model", "avfs-250g"]);

    // Four cameras for 16 s, and two viewers fast-forwarding beside them.
    let recs: Vec<(Child, Child)> = (0..4)
        .map(|i| live_recording(&img, &ts, &format!("/cam{i}"), 16))
        .collect();
    let players: Vec<(std::path::PathBuf, Child)> = (0..2)
        .map(|i| {
            let out = d.path().join(format!("ff{i}.ts"));
            let c = Command::new(env!("CARGO_BIN_EXE_dvrfs"))
                .args(["play", s, "/cam.ts", "--rate", "4M", "--speed", "8"])
                .args(["--output", out.to_str().unwrap(), "--json"])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("run dvrfs play");
            (out, c)
        })
        .collect();

    for (out, c) in players {
        let r = json(&ok(c.wait_with_output().unwrap()));
        assert_eq!(r["keyframes_shown"], 32, "{r}");
        assert_eq!(r["late_reads"], 0, "{r}");
        let p = video_packets(&out);
        assert_eq!(p.len(), 32);
        assert!(p.iter().all(|x| x.0), "only keyframes");
        let errors = decode_errors(&out);
        assert!(errors.is_empty(), "{errors}");
    }
    for (i, (mut feed, rec)) in recs.into_iter().enumerate() {
        let r = json(&ok(rec.wait_with_output().unwrap()));
        assert!(feed.wait().unwrap().success());
        assert_eq!(r["deadline_misses"], 0, "cam{i}: {r}");
        assert_eq!(r["stalls"], 0, "cam{i}: {r}");
        // Complete: one span of the 16 s, by the chunks' indexes.
        let name = format!("/cam{i}");
        let t = json(&ok(dvrfs(["timeline", s, &name, "--json"])));
        assert_eq!(t["gaps"].as_array().unwrap().len(), 0, "cam{i}: {t}");
        let secs = t["spans"][0]["seconds"].as_f64().unwrap();
        assert!((secs - 16.0).abs() <= 2.0, "cam{i}: {t}");
    }
    m.unmount();
    ok(dvrfs(["fsck", s]));
}
