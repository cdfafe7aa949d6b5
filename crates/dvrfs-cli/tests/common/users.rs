//! Tests where two users share a mount: root and `nobody` (uid and gid 65534,
//! through `setpriv`) on a volume mounted with `--allow-other`.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::process::Command;

use super::{fuse_missing, mkfs, tempdir, Mount};

/// `setpriv` missing: the tests cannot switch users (said as SKIP).
pub fn no_setpriv() -> bool {
    let missing = Command::new("setpriv").arg("--version").output().is_err();
    if missing {
        println!("SKIP: setpriv (util-linux) is missing");
    }
    missing
}

/// `PROGRAM` as user and group 65534 (nobody), no supplementary groups.
pub fn as_nobody(program: &str) -> Command {
    let mut c = Command::new("setpriv");
    c.args(["--reuid=65534", "--regid=65534", "--clear-groups", program]);
    c
}

/// A temporary directory everyone can enter (the mount point lies in it).
pub fn dir_for_everyone() -> tempfile::TempDir {
    let dir = tempdir();
    fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o755)).unwrap();
    dir
}

/// A volume of `size` mounted with `--allow-other` (and `extra`) in a directory
/// everyone can enter, for tests where nobody and root share the mount; `None`
/// (having said SKIP) without setpriv or FUSE.
pub fn users_mount(size: &str, extra: &[&str]) -> Option<(tempfile::TempDir, PathBuf, Mount)> {
    if no_setpriv() {
        return None;
    }
    if let Some(why) = fuse_missing() {
        println!("SKIP: {why}");
        return None;
    }
    let dir = dir_for_everyone();
    let img = dir.path().join("v.img");
    mkfs(&img, size, &[]);
    let m = Mount::new(dir.path(), &img, &[&["--allow-other"][..], extra].concat());
    Some((dir, img, m))
}
