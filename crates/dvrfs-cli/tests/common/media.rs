//! What the tests ask ffmpeg's tools about video files.

use std::path::{Path, PathBuf};
use std::process::Command;

/// Whether ffmpeg and ffprobe are here; prints SKIP with the reason when not (the
/// test command installs them).
pub fn ffmpeg_here() -> bool {
    let here = Command::new("ffprobe")
        .arg("-version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !here {
        eprintln!("SKIP: ffmpeg or ffprobe missing (apt-get install ffmpeg)");
    }
    here
}

/// ffprobe's packets of the first video track of `path`, in file order, with the
/// fields `entries` names (`flags` always comes too).
fn packets(path: &Path, entries: &str) -> Vec<serde_json::Value> {
    let o = Command::new("ffprobe")
        .args(["-v", "error", "-select_streams", "v:0", "-show_packets"])
        .args([
            "-show_entries",
            &format!("packet={entries},flags"),
            "-of",
            "json",
        ])
        .arg(path)
        .output()
        .unwrap();
    super::json(&String::from_utf8_lossy(&o.stdout))["packets"]
        .as_array()
        .unwrap()
        .clone()
}

fn is_key(p: &serde_json::Value) -> bool {
    p["flags"].as_str().unwrap().starts_with('K')
}

/// ffprobe's keyframe packet positions (`pos`) in the first video track of `path`.
pub fn key_positions(path: &Path) -> Vec<u64> {
    packets(path, "pos")
        .iter()
        .filter(|p| is_key(p))
        .map(|p| p["pos"].as_str().unwrap().parse().unwrap())
        .collect()
}

/// `secs` seconds of H.264 and AAC at 25 fps with a keyframe every 2 s, made by
/// ffmpeg in `dir` as `name` (its extension says the container: `.ts`, or `.mp4`
/// for fragmented MP4), with `extra` encoder options (a bitrate, a preset).
pub fn av_recording(dir: &Path, name: &str, secs: u32, extra: &[&str]) -> PathBuf {
    let out = dir.join(name);
    let mut c = Command::new("ffmpeg");
    c.args(["-v", "error", "-f", "lavfi", "-i"])
        .arg(format!("testsrc2=size=320x240:rate=25:duration={secs}"))
        .args(["-f", "lavfi", "-i"])
        .arg(format!("sine=frequency=440:duration={secs}"))
        .args(["-c:v", "libx264", "-g", "50", "-c:a", "aac"])
        .args(extra);
    if name.ends_with(".mp4") {
        c.args(["-movflags", "frag_keyframe+empty_moov+default_base_moof"]);
    }
    let o = c.arg(&out).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    out
}

/// What ffprobe says of a file: its duration (s) and whether its first video
/// packet is a keyframe.
pub fn probe(path: &Path) -> (f64, bool) {
    let o = Command::new("ffprobe")
        .args(["-v", "error", "-select_streams", "v:0", "-show_packets"])
        .args([
            "-show_entries",
            "packet=flags:format=duration",
            "-of",
            "json",
        ])
        .arg(path)
        .output()
        .unwrap();
    let v = super::json(&String::from_utf8_lossy(&o.stdout));
    let first_key = v["packets"][0]["flags"]
        .as_str()
        .is_some_and(|f| f.starts_with('K'));
    let dur = v["format"]["duration"]
        .as_str()
        .and_then(|d| d.parse().ok())
        .unwrap_or(0.0);
    (dur, first_key)
}

/// ffmpeg decodes `path` from its first byte: what it said at `-v error` (nothing
/// for a clean decode).
pub fn decode_errors(path: &Path) -> String {
    let o = Command::new("ffmpeg")
        .args(["-v", "error", "-i"])
        .arg(path)
        .args(["-f", "null", "-"])
        .output()
        .unwrap();
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// `av_recording` options for 4 Mbit/s video, encoded fast (the fixture rate).
pub const AT_4_MBITS: &[&str] = &[
    "-preset",
    "ultrafast",
    "-b:v",
    "4M",
    "-maxrate",
    "4M",
    "-bufsize",
    "2M",
];

/// ffprobe's packets of the first video track of `path`, in file order: (keyframe,
/// PTS in seconds).
pub fn video_packets(path: &Path) -> Vec<(bool, f64)> {
    packets(path, "pts_time")
        .iter()
        .map(|p| (is_key(p), p["pts_time"].as_str().unwrap().parse().unwrap()))
        .collect()
}

/// `dvrfs record IMG DIR --chunk CHUNK --input INPUT` at a rate far above the
/// input's (an import): its JSON report.
pub fn record_chunked(img: &Path, dir: &str, input: &Path, chunk: &str) -> serde_json::Value {
    let o = super::dvrfs([
        "record",
        img.to_str().unwrap(),
        dir,
        "--chunk",
        chunk,
        "--input",
        input.to_str().unwrap(),
        "--rate",
        "200M",
        "--json",
    ]);
    super::json(&super::ok(o))
}

/// The decoded pictures' MD5s of the first video stream of `path`, in order (ffmpeg's
/// `framemd5`): two files show the same pictures when these are equal.
pub fn picture_hashes(path: &Path) -> Vec<String> {
    let o = Command::new("ffmpeg")
        .args(["-v", "error", "-i"])
        .arg(path)
        .args(["-map", "0:v", "-f", "framemd5", "-"])
        .output()
        .unwrap();
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.rsplit(',').next().map(|h| h.trim().to_string()))
        .collect()
}

/// `src` remuxed by ffmpeg (`-c copy`, nothing re-encoded) into `dst`, whose
/// extension and `extra` options say the container: `plain.mp4` without options is
/// a plain MP4, its `moov` after its `mdat`, as ffmpeg writes by default.
pub fn remux(src: &Path, dst: &Path, extra: &[&str]) {
    let o = Command::new("ffmpeg")
        .args(["-v", "error", "-i"])
        .arg(src)
        .args(["-c", "copy"])
        .args(extra)
        .arg(dst)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}
