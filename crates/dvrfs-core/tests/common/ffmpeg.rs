//! ffmpeg-made fixtures and ffprobe's view of them, for the media tests (the parser,
//! reindex). A test that needs them calls [`tools`] first and returns (printing
//! SKIP with the reason) where ffmpeg or ffprobe is missing; the test command
//! installs them.

use std::path::{Path, PathBuf};
use std::process::Command;

pub fn have(tool: &str) -> bool {
    Command::new(tool)
        .arg("-version")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Whether ffmpeg and ffprobe are here; when not, the test says SKIP and why.
pub fn tools() -> bool {
    let here = have("ffmpeg") && have("ffprobe");
    if !here {
        eprintln!("SKIP: ffmpeg or ffprobe missing (apt-get install ffmpeg)");
    }
    here
}

/// A scratch directory for the fixtures (removed at the end).
pub fn scratch() -> tempdir::Dir {
    tempdir::Dir::new()
}

pub mod tempdir {
    pub struct Dir(pub std::path::PathBuf);
    impl Dir {
        pub fn new() -> Dir {
            let p = std::env::temp_dir().join(format!(
                "dvrfs-media-{}-{}",
                std::process::id(),
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .unwrap()
                    .as_nanos()
            ));
            std::fs::create_dir_all(&p).unwrap();
            Dir(p)
        }
    }
    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

/// Makes `name` with ffmpeg from test sources: `secs` seconds of 320x240 at 25 fps
/// with a sine tone, video options `video`, muxer options `mux`.
pub fn fixture(dir: &Path, name: &str, secs: u32, video: &[&str], mux: &[&str]) -> PathBuf {
    let out = dir.join(name);
    let mut c = Command::new("ffmpeg");
    c.args(["-v", "error", "-y", "-f", "lavfi", "-i"])
        .arg(format!("testsrc2=size=320x240:rate=25:duration={secs}"))
        .args(["-f", "lavfi", "-i"])
        .arg(format!("sine=frequency=440:duration={secs}"))
        .args(video)
        .args(["-c:a", "aac", "-b:a", "64k"])
        .args(mux)
        .arg(&out);
    let o = c.output().expect("run ffmpeg");
    assert!(
        o.status.success(),
        "ffmpeg {name}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    out
}

/// ffprobe's video packets: (pos, keyframe, pts).
pub fn probe(path: &Path) -> Vec<(u64, bool, Option<i64>)> {
    let o = Command::new("ffprobe")
        .args(["-v", "error", "-select_streams", "v:0", "-show_packets"])
        .args(["-show_entries", "packet=pos,flags,pts", "-of", "json"])
        .arg(path)
        .output()
        .expect("run ffprobe");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    v["packets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["pos"].as_str().unwrap().parse().unwrap(),
                p["flags"].as_str().unwrap().starts_with('K'),
                p["pts"].as_i64(),
            )
        })
        .collect()
}
