//! The mount daemon's own mount: which one it is, unmounting that one and no other,
//! and keeping it mounted once its journal can no longer be committed.
//!
//! A directory can hold several mounts stacked on one another, and `umount DIR`
//! takes the top one. The daemon knows its mount by the mount id and the device
//! number (the FUSE connection's own) it had when it was made, from
//! `/proc/self/mountinfo`, never by the path alone: on a signal it unmounts only
//! when its mount is the one on top of the directory, and says what covers it
//! otherwise (another file system mounted over the volume must not be taken away
//! in its place).
//!
//! When a commit fails the engine is broken: nothing reaches the journal any more,
//! and what was written since the last commit is lost when the volume is let go.
//! Then the daemon pins its mount (an `O_PATH` descriptor on its root), so that a
//! plain `umount DIR` fails with "target is busy" instead of reporting success,
//! while the files can still be read (and copied elsewhere) through it. SIGTERM
//! (or `umount -l`) lets it go; the daemon then exits with status 1 and the cause
//! in its log.

use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use crate::target::{mounts, MountEntry};

pub struct OwnMount {
    dir: PathBuf,
    /// The mount's id in this namespace and its device number (`0:NN`).
    id: u64,
    dev: String,
    /// Held while the volume cannot be committed (see the module docs).
    pin: Mutex<Option<OwnedFd>>,
}

impl OwnMount {
    /// The mount just made on `dir` (canonical): the newest FUSE mount there.
    pub fn find(dir: &Path) -> Option<OwnMount> {
        let m = mounts()
            .into_iter()
            .rev()
            .find(|m| m.mountpoint == dir && m.fstype.starts_with("fuse"))?;
        Some(OwnMount {
            dir: dir.to_path_buf(),
            id: m.id,
            dev: m.dev,
            pin: Mutex::new(None),
        })
    }

    /// Whether the mount is still there.
    pub fn is_mounted(&self) -> bool {
        mounts().iter().any(|m| self.is_ours(m))
    }

    fn is_ours(&self, m: &MountEntry) -> bool {
        m.id == self.id && m.dev == self.dev
    }

    /// What is mounted over this mount on its directory, if anything (the newest).
    pub fn covered_by(&self) -> Option<MountEntry> {
        let all = mounts();
        // Walk up the stack on the directory: each mount over ours has the one
        // below it as its parent.
        let mut top = self.id;
        let mut over = None;
        while let Some(m) = all
            .iter()
            .find(|m| m.parent == top && m.mountpoint == self.dir)
        {
            top = m.id;
            over = Some(m);
        }
        over.cloned()
    }

    /// Unmounts this mount (through `unmount`, fuser's, which falls back to
    /// `fusermount3 -u` for a user), if it is on top of its directory. Gone already
    /// is success; covered by another mount is an error saying by what.
    pub fn unmount(&self, unmount: impl FnOnce() -> std::io::Result<()>) -> Result<(), String> {
        if !self.is_mounted() {
            return Ok(());
        }
        if let Some(c) = self.covered_by() {
            return Err(format!(
                "cannot unmount {}: {} ({}) is mounted over it; unmount that first (umount {}), then this volume (umount {} again, or kill -TERM {})",
                self.dir.display(),
                c.source,
                c.fstype,
                self.dir.display(),
                self.dir.display(),
                std::process::id()
            ));
        }
        self.unpin();
        unmount().map_err(|e| format!("cannot unmount {}: {e}", self.dir.display()))
    }

    /// Keeps the mount busy (see the module docs). Only when the directory shows
    /// this mount: a pin on a mount over it would hold the wrong one.
    pub fn pin(&self) -> Result<(), String> {
        let mut pin = self.pin.lock().unwrap_or_else(|e| e.into_inner());
        if pin.is_some() {
            return Ok(());
        }
        let fd = dvrfs_io::files::open_dir_path(&self.dir)
            .map_err(|e| format!("cannot hold {}: {e}", self.dir.display()))?;
        let info = std::fs::read_to_string(format!("/proc/self/fdinfo/{}", fd.as_raw_fd()))
            .unwrap_or_default();
        let mnt_id = info
            .lines()
            .find_map(|l| l.strip_prefix("mnt_id:"))
            .and_then(|v| v.trim().parse::<u64>().ok());
        if mnt_id != Some(self.id) {
            return Err(format!(
                "cannot hold {}: another mount covers it",
                self.dir.display()
            ));
        }
        *pin = Some(fd);
        Ok(())
    }

    /// Lets the mount go again.
    pub fn unpin(&self) {
        self.pin.lock().unwrap_or_else(|e| e.into_inner()).take();
    }
}
