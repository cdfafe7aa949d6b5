//! A volume mounted by `dvrfs mount` for a test: mounted as a daemon, unmounted (or
//! lazily unmounted and its daemon killed) when the test is done.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use super::{dvrfs, mounted, ok, stderr, wait_exit};

/// A volume mounted by `dvrfs mount` (daemon mode) for one test.
pub struct Mount {
    pub mnt: PathBuf,
    pub log: PathBuf,
    /// The daemon's pid (0 once it has exited).
    pub pid: i32,
}

impl Mount {
    pub fn new(dir: &Path, img: &Path, extra: &[&str]) -> Mount {
        let mnt = dir.join("mnt");
        fs::create_dir_all(&mnt).unwrap();
        let log = dir.join("mount.log");
        let pid_file = dir.join("mount.pid");
        let mut args: Vec<&std::ffi::OsStr> = vec![
            "mount".as_ref(),
            img.as_os_str(),
            mnt.as_os_str(),
            "--log".as_ref(),
            log.as_os_str(),
            "--pid-file".as_ref(),
            pid_file.as_os_str(),
        ];
        args.extend(extra.iter().map(|s| std::ffi::OsStr::new(*s)));
        ok(dvrfs(args));
        // The command returns once the volume is mounted (the daemon said so).
        assert!(
            mounted(&mnt),
            "not in /proc/self/mountinfo after mount returned"
        );
        let pid = fs::read_to_string(&pid_file)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        Mount { mnt, log, pid }
    }

    pub fn path(&self, p: &str) -> PathBuf {
        self.mnt.join(p)
    }

    /// `umount`, then the daemon commits and exits.
    pub fn unmount(mut self) {
        let o = Command::new("umount").arg(&self.mnt).output().unwrap();
        assert!(o.status.success(), "umount: {}", stderr(&o));
        wait_exit(self.pid);
        self.pid = 0;
        let log = fs::read_to_string(&self.log).unwrap();
        assert!(log.contains("unmounted, journal committed"), "{log}");
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        if mounted(&self.mnt) {
            let _ = Command::new("umount").arg("-l").arg(&self.mnt).output();
        }
        if self.pid > 0 {
            // SAFETY: signalling a pid.
            unsafe { libc::kill(self.pid, libc::SIGKILL) };
            wait_exit(self.pid);
        }
    }
}

/// `getfattr -n user.dvrfs.stream --only-values PATH` (a mounted file's stream
/// figures), or `None` when it fails.
pub fn getfattr(path: &Path) -> Option<String> {
    let o = Command::new("getfattr")
        .args(["-n", "user.dvrfs.stream", "--only-values"])
        .arg(path)
        .output()
        .unwrap();
    o.status.success().then(|| super::stdout(&o))
}

/// `setfattr -n user.dvrfs.stream -v VALUE PATH` (asks a mounted file or directory
/// for a stream reservation).
pub fn setfattr(path: &Path, value: &str) -> std::process::Output {
    Command::new("setfattr")
        .args(["-n", "user.dvrfs.stream", "-v", value])
        .arg(path)
        .output()
        .unwrap()
}

/// `key=value` from a `getfattr` state line.
pub fn field<'a>(state: &'a str, key: &str) -> &'a str {
    state
        .split_whitespace()
        .find_map(|kv| kv.strip_prefix(key).and_then(|v| v.strip_prefix('=')))
        .unwrap_or_else(|| panic!("no {key} in {state:?}"))
}
