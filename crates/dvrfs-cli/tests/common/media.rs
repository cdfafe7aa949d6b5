//! What the tests ask ffmpeg's tools about video files.

use std::path::Path;
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

/// ffprobe's keyframe packet positions (`pos`) in the first video track of `path`.
pub fn key_positions(path: &Path) -> Vec<u64> {
    let o = Command::new("ffprobe")
        .args(["-v", "error", "-select_streams", "v:0", "-show_packets"])
        .args(["-show_entries", "packet=pos,flags", "-of", "json"])
        .arg(path)
        .output()
        .unwrap();
    super::json(&String::from_utf8_lossy(&o.stdout))["packets"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["flags"].as_str().unwrap().starts_with('K'))
        .map(|p| p["pos"].as_str().unwrap().parse().unwrap())
        .collect()
}
