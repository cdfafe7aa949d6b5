//! `dvrfs export`, `dvrfs keyframe` and `dvrfs timeline` on recordings made by
//! ffmpeg (issue 25, test 4): a clip cut by time out of a chunked recording, across
//! chunk boundaries, in the source's container, lasts what was asked to within a
//! GOP by ffprobe, decodes without a word from `ffmpeg -v error`, and its manifest's
//! SHA-256 is the file's; an fMP4 clip starts at time 0; a keyframe decodes to one
//! picture; the timeline shows one span, and a gap where a chunk was removed. Prints
//! SKIP where ffmpeg is missing (the test command installs it).

mod common;

use common::{
    assert_clean, av_recording, decode_errors, dvrfs, fails, ffmpeg_here, json, mkfs, ok, probe,
    record_chunked, tempdir, video_packets, AT_4_MBITS,
};
use sha2::{Digest, Sha256};
use std::path::Path;
use std::process::Command;

fn sha256(path: &Path) -> String {
    Sha256::digest(std::fs::read(path).unwrap())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// `export` of `path` from `from` to `to` into `out`: its manifest.
fn export(img: &Path, path: &str, from: &str, to: &str, out: &Path) -> serde_json::Value {
    let manifest = out.with_extension("json");
    ok(dvrfs([
        "export",
        img.to_str().unwrap(),
        path,
        "--from",
        from,
        "--to",
        to,
        "--output",
        out.to_str().unwrap(),
        "--manifest",
        manifest.to_str().unwrap(),
    ]));
    json(&std::fs::read_to_string(&manifest).unwrap())
}

/// How long the video stream of `path` lasts by ffprobe: from its first frame's
/// PTS to its last frame's end.
fn video_duration(path: &Path) -> f64 {
    let f = video_packets(path);
    let (first, last) = f
        .iter()
        .fold((f64::MAX, f64::MIN), |(a, b), x| (a.min(x.1), b.max(x.1)));
    last - first + 1.0 / 25.0
}

#[test]
fn a_clip_across_chunks_lasts_what_was_asked_decodes_and_matches_its_manifest() {
    if !ffmpeg_here() {
        return;
    }
    let d = tempdir();
    // Ten minutes at 4 Mbit/s, a keyframe every 2 s, in one-minute chunks.
    let ts = av_recording(d.path(), "cam.ts", 600, AT_4_MBITS);
    let img = d.path().join("v.img");
    mkfs(&img, "2G", &[]);
    let r = record_chunked(&img, "/cam", &ts, "1m");
    assert_eq!(r["chunks"].as_u64(), Some(10), "{r}");

    // 61 s to 245 s crosses the chunks at 120 s, 180 s and 240 s.
    let clip = d.path().join("clip.ts");
    let m = export(&img, "/cam", "+61s", "+245s", &clip);
    // The video lasts 184 s to within the keyframe rounding at each end (2 s);
    // the audio muxed up to 0.7 s ahead of the video (ffmpeg's TS muxer) past its
    // end is trimmed, so the container lasts as long as the video, to within an
    // audio frame.
    let (dur, first_key) = probe(&clip);
    assert!(first_key, "the clip starts at a keyframe");
    let video = video_duration(&clip);
    assert!(
        (video - 184.0).abs() <= 2.0,
        "ffprobe says {video} s of video, not 184"
    );
    assert!(
        (dur - video).abs() <= 0.1,
        "ffprobe says the container lasts {dur} s, the video {video} s"
    );
    assert!(m["trimmed_packets"].as_u64().unwrap() > 0, "{m}");
    let errors = decode_errors(&clip);
    assert!(
        errors.is_empty(),
        "the clip does not decode cleanly: {errors}"
    );
    assert_eq!(m["sha256"].as_str(), Some(sha256(&clip).as_str()), "{m}");
    assert_eq!(
        m["bytes"].as_u64(),
        Some(std::fs::metadata(&clip).unwrap().len())
    );
    assert_eq!(m["sources"].as_array().unwrap().len(), 4, "{m}");
    // Each source names its chunk's seal in the chain, which verify checks.
    let v = json(&ok(dvrfs([
        "verify",
        img.to_str().unwrap(),
        "/cam",
        "--json",
    ])));
    for s in m["sources"].as_array().unwrap() {
        let name = s["path"].as_str().unwrap().rsplit('/').next().unwrap();
        let c = v["chunks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["chunk"] == name)
            .unwrap();
        assert_eq!(
            (&s["chunk_sha256"], &c["state"]),
            (&c["sha256"], &serde_json::json!("intact"))
        );
    }
    assert_eq!(m["stream"], "/cam");
    let info = ok(dvrfs(["info", img.to_str().unwrap()]));
    assert!(
        info.contains(m["volume_uuid"].as_str().unwrap()),
        "{info}\n{m}"
    );
    // The keyframes at 60 s and 246 s: 186 s by the index.
    assert_eq!(m["seconds"].as_f64(), Some(186.0), "{m}");
    // The clip's frames are the source's from its keyframe at 60 s (TS keeps the
    // source's times).
    let src = video_packets(&ts);
    let got = video_packets(&clip);
    let t0 = src[0].1;
    let at60 = src
        .iter()
        .position(|f| f.0 && f.1 - t0 >= 60.0 - 0.01)
        .unwrap();
    assert!(
        (got[0].1 - src[at60].1).abs() < 0.001,
        "{:?} vs {:?}",
        got[0],
        src[at60]
    );
    assert_eq!(got.len(), 186 * 25, "frames in the clip");

    // From the very first keyframe (after the file's own 564-byte head): the
    // clip still starts with the PAT.
    let start = d.path().join("start.ts");
    export(&img, "/cam", "+0s", "+10s", &start);
    let b = std::fs::read(&start).unwrap();
    assert_eq!(b[..3], [0x47, 0x40, 0x00], "a PAT first");
    assert!(decode_errors(&start).is_empty());

    // A keyframe: one picture, the one at or before 100 s.
    let kf = d.path().join("kf.ts");
    ok(dvrfs([
        "keyframe",
        img.to_str().unwrap(),
        "/cam",
        "--at",
        "+101s",
        "--output",
        kf.to_str().unwrap(),
    ]));
    let frames = video_packets(&kf);
    assert_eq!(frames.len(), 1, "{frames:?}");
    assert!(frames[0].0);
    let at100 = src
        .iter()
        .position(|f| f.0 && f.1 - t0 >= 100.0 - 0.01)
        .unwrap();
    assert!((frames[0].1 - src[at100].1).abs() < 0.001);
    let png = d.path().join("kf.png");
    let o = Command::new("ffmpeg")
        .args(["-v", "error", "-i"])
        .arg(&kf)
        .args(["-frames:v", "1"])
        .arg(&png)
        .output()
        .unwrap();
    assert!(
        o.status.success() && o.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );

    // The timeline: one span of 600 s over ten chunks; a chunk removed is a gap.
    let t = json(&ok(dvrfs([
        "timeline",
        img.to_str().unwrap(),
        "/cam",
        "--json",
    ])));
    assert_eq!(t["spans"].as_array().unwrap().len(), 1, "{t}");
    assert_eq!(t["spans"][0]["chunks"], 10);
    assert_eq!(t["spans"][0]["seconds"].as_f64(), Some(600.0), "{t}");
    assert_eq!(t["keyframes"], 300);
    let mut names: Vec<String> = ok(dvrfs(["ls", img.to_str().unwrap(), "/cam"]))
        .lines()
        .filter_map(|l| l.split_whitespace().last())
        .filter(|n| n.ends_with("Z.ts"))
        .map(str::to_string)
        .collect();
    names.sort();
    assert_eq!(names.len(), 10, "{names:?}");
    ok(dvrfs([
        "rm",
        img.to_str().unwrap(),
        &format!("/cam/{}", names[2]),
    ]));
    let t = json(&ok(dvrfs([
        "timeline",
        img.to_str().unwrap(),
        "/cam",
        "--json",
    ])));
    assert_eq!(t["spans"].as_array().unwrap().len(), 2, "{t}");
    assert_eq!(t["gaps"][0]["seconds"].as_f64(), Some(60.0), "{t}");
    let cause = t["gaps"][0]["cause"].as_str().unwrap();
    assert!(
        cause.contains(&names[1]) && cause.contains(&names[3]),
        "{cause}"
    );

    // A clip of a one-file recording, by frame number and by UTC.
    ok(dvrfs([
        "put",
        img.to_str().unwrap(),
        ts.to_str().unwrap(),
        "/whole.ts",
    ]));
    let one = d.path().join("one.ts");
    let m1 = export(&img, "/whole.ts", "frame:1500", "frame:2000", &one);
    assert_eq!(m1["first_frame"]["frame"], 1500);
    assert_eq!(m1["seconds"].as_f64(), Some(20.0), "{m1}");
    assert!(decode_errors(&one).is_empty());

    // What cannot be.
    let s = img.to_str().unwrap();
    let out = d.path().join("x.ts");
    let o = out.to_str().unwrap();
    fails(
        dvrfs([
            "export", s, "/cam", "--from", "+90s", "--to", "+30s", "--output", o,
        ]),
        "is not after --from",
    );
    fails(
        dvrfs([
            "export", s, "/cam", "--from", "frame:10", "--to", "+30s", "--output", o,
        ]),
        "stream directory",
    );
    fails(
        dvrfs([
            "export",
            s,
            "/cam",
            "--from",
            "2001-01-01T00:00:00Z",
            "--to",
            "+30s",
            "--output",
            o,
        ]),
        "before /cam's first keyframe",
    );
    fails(
        dvrfs([
            "export", s, "/nothing", "--from", "+1s", "--to", "+30s", "--output", o,
        ]),
        "/nothing",
    );
    assert!(!out.exists(), "a refused export leaves no file");
    assert_clean(&img);
}

#[test]
fn an_fmp4_clip_across_chunks_starts_at_zero_and_decodes() {
    if !ffmpeg_here() {
        return;
    }
    let d = tempdir();
    let mp4 = av_recording(d.path(), "cam.mp4", 120, &["-preset", "ultrafast"]);
    let img = d.path().join("v.img");
    mkfs(&img, "1G", &[]);
    let r = record_chunked(&img, "/cam", &mp4, "30s");
    assert_eq!(r["chunks"].as_u64(), Some(4), "{r}");
    // 21 s to 69 s: the keyframes at 20 s and 70 s, across the chunks at 30 s and 60 s.
    let clip = d.path().join("clip.mp4");
    let m = export(&img, "/cam", "+21s", "+69s", &clip);
    assert_eq!(m["seconds"].as_f64(), Some(50.0), "{m}");
    let (dur, first_key) = probe(&clip);
    assert!((dur - 50.0).abs() <= 1.0, "ffprobe says {dur} s, not 50");
    assert!(first_key);
    let frames = video_packets(&clip);
    assert!(
        frames[0].1.abs() < 0.2,
        "the clip starts at {} s",
        frames[0].1
    );
    assert_eq!(frames.len(), 50 * 25);
    let errors = decode_errors(&clip);
    assert!(errors.is_empty(), "{errors}");
    assert_eq!(m["sha256"].as_str(), Some(sha256(&clip).as_str()));
    // To the end: the chunks' last, and its fragments, all there.
    let tail = d.path().join("tail.mp4");
    let m = export(&img, "/cam", "-15s", "+10h", &tail);
    assert_eq!(m["to_is_end"], true, "{m}");
    assert_eq!(video_packets(&tail).len(), 16 * 25);
    assert!(decode_errors(&tail).is_empty());
    // A keyframe of an MP4: its sample alone in a fragment after the init segment.
    let kf = d.path().join("kf.mp4");
    ok(dvrfs([
        "keyframe",
        img.to_str().unwrap(),
        "/cam",
        "--at",
        "+45s",
        "--output",
        kf.to_str().unwrap(),
    ]));
    let frames = video_packets(&kf);
    assert_eq!(frames.len(), 1, "{frames:?}");
    assert!(frames[0].0, "{frames:?}");
    assert!(decode_errors(&kf).is_empty());
    assert_clean(&img);
}
