//! Who a client is, and what it may do: the permission checks the kernel makes for
//! the mount (`default_permissions`), made by the daemon for its socket's clients.
//!
//! A client is known by the kernel's word for it (`SO_PEERCRED`: the uid, gid and pid
//! of the process that connected), never by what it says, and its supplementary
//! groups are read from `/proc/<pid>/status`. Root may do anything; anyone else is
//! checked against the mode bits of the inodes an operation touches, as POSIX does:
//! search permission on every directory of a path, write and search permission on a
//! directory whose entries change (and, in a sticky directory, ownership of the
//! entry or the directory), read or write permission on a file whose data moves,
//! ownership for attribute changes.

use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;

use dvrfs_core::engine::StreamDir;
use dvrfs_core::meta::Ino;
use dvrfs_core::{Op, Stat, Volume};
use dvrfs_io::OpenError;
use dvrfs_runtime::RuntimeError;

pub const R: u32 = 4;
pub const W: u32 = 2;
pub const X: u32 = 1;

/// A connected client, as the kernel names it.
#[derive(Clone, Debug)]
pub struct Peer {
    pub pid: u32,
    pub uid: u32,
    pub gid: u32,
    /// Supplementary groups (empty when `/proc` does not say).
    pub groups: Vec<u32>,
}

impl Peer {
    /// The process at the other end of `s`.
    pub fn of(s: &UnixStream) -> std::io::Result<Peer> {
        let mut cred = libc::ucred {
            pid: 0,
            uid: 0,
            gid: 0,
        };
        let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
        // SAFETY: getsockopt writes at most `len` bytes into `cred`, a ucred we own,
        // on a descriptor `s` keeps open for the call.
        let r = unsafe {
            libc::getsockopt(
                s.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_PEERCRED,
                (&mut cred as *mut libc::ucred).cast(),
                &mut len,
            )
        };
        if r != 0 {
            return Err(std::io::Error::last_os_error());
        }
        let groups = std::fs::read_to_string(format!("/proc/{}/status", cred.pid))
            .ok()
            .and_then(|s| {
                s.lines().find_map(|l| l.strip_prefix("Groups:")).map(|g| {
                    g.split_whitespace()
                        .filter_map(|x| x.parse().ok())
                        .collect()
                })
            })
            .unwrap_or_default();
        Ok(Peer {
            pid: cred.pid as u32,
            uid: cred.uid,
            gid: cred.gid,
            groups,
        })
    }

    pub fn is_root(&self) -> bool {
        self.uid == 0
    }

    /// Whether the mode bits of `st` grant all of `want` (`R`, `W`, `X` or'd).
    pub fn may(&self, st: &Stat, want: u32) -> bool {
        if self.is_root() {
            return true;
        }
        let bits = if st.uid == self.uid {
            st.mode >> 6
        } else if st.gid == self.gid || self.groups.contains(&st.gid) {
            st.mode >> 3
        } else {
            st.mode
        } & 7;
        bits & want == want
    }
}

/// The refusal of a client, as the runtime's permission error (`EACCES` in C, the
/// CLI's "permission denied").
pub fn denied(what: impl Into<String>) -> RuntimeError {
    RuntimeError::Open(OpenError::PermissionDenied {
        path: PathBuf::from(what.into()),
    })
}

fn need(v: &Volume, peer: &Peer, ino: Ino, want: u32, what: &str) -> Result<(), RuntimeError> {
    let st = v.stat(ino)?;
    match peer.may(&st, want) {
        true => Ok(()),
        false => Err(denied(format!(
            "inode {ino} {what} (mode {:04o}, owner {}:{}; uid {} asked)",
            st.mode & 0o7777,
            st.uid,
            st.gid,
            peer.uid
        ))),
    }
}

/// Resolves `path` as `Volume::resolve` does, with search permission checked on
/// every directory passed through.
pub fn resolve(v: &Volume, peer: &Peer, path: &str) -> Result<Ino, RuntimeError> {
    let mut ino = v.superblock().root_ino;
    let mut walked = String::new();
    for comp in path.split('/').filter(|c| !c.is_empty() && *c != ".") {
        walked.push('/');
        walked.push_str(comp);
        need(v, peer, ino, X, &format!("to look up {walked}"))?;
        // The volume's own walk gives its own errors (not found, not a directory).
        ino = v.resolve(&walked)?;
    }
    Ok(ino)
}

/// [`resolve`] for the directory part of `path`, then its last name.
pub fn resolve_parent(v: &Volume, peer: &Peer, path: &str) -> Result<(Ino, Vec<u8>), RuntimeError> {
    let (parent, name) = v.resolve_parent(path)?;
    let trimmed = path.trim_end_matches('/');
    let dir = &trimmed[..trimmed.rfind('/').unwrap_or(0)];
    let checked = resolve(v, peer, dir)?;
    assert_eq!(checked, parent, "two walks of {dir:?} disagree");
    Ok((parent, name.to_vec()))
}

/// A change to the entries of directory `parent`: write and search permission, and
/// in a sticky directory, ownership of the entry `name` or of the directory.
fn change_entries(
    v: &Volume,
    peer: &Peer,
    parent: Ino,
    name: Option<&[u8]>,
) -> Result<(), RuntimeError> {
    need(v, peer, parent, W | X, "to change its entries")?;
    let dir = v.stat(parent)?;
    if let (Some(name), false) = (name, peer.is_root()) {
        if dir.mode & 0o1000 != 0 && dir.uid != peer.uid {
            let entry = v.stat(v.lookup(parent, name)?)?;
            if entry.uid != peer.uid {
                return Err(denied(format!(
                    "{} to remove it: a sticky directory, and it belongs to uid {}, not to uid {}",
                    String::from_utf8_lossy(name),
                    entry.uid,
                    peer.uid
                )));
            }
        }
    }
    Ok(())
}

/// Whether `peer` may submit `op`; the checks the kernel would make before the mount
/// saw the same request. Streams are checked by the server (a client uses only the
/// streams it opened).
pub fn check_op(v: &Volume, peer: &Peer, op: &Op) -> Result<(), RuntimeError> {
    match op {
        Op::Read { ino, .. } => need(v, peer, *ino, R, "for reading"),
        Op::Write { ino, .. }
        | Op::Append { ino, .. }
        | Op::Truncate { ino, .. }
        | Op::AppendFrames { ino, .. }
        | Op::DropFrameIndex { ino, .. } => need(v, peer, *ino, W, "for writing"),
        Op::Create { parent, .. } | Op::Mkdir { parent, .. } | Op::Symlink { parent, .. } => {
            change_entries(v, peer, *parent, None)
        }
        Op::Link { parent, .. } => change_entries(v, peer, *parent, None),
        Op::Unlink { parent, name } | Op::Rmdir { parent, name } => {
            change_entries(v, peer, *parent, Some(name))
        }
        Op::Rename {
            src_parent,
            src_name,
            dst_parent,
            ..
        } => {
            change_entries(v, peer, *src_parent, Some(src_name))?;
            change_entries(v, peer, *dst_parent, None)
        }
        Op::SetAttr { ino, set } => {
            let st = v.stat(*ino)?;
            let owner = peer.is_root() || st.uid == peer.uid;
            let chown = set.uid.is_some_and(|u| u != st.uid);
            if !owner || (chown && !peer.is_root()) {
                return Err(denied(format!(
                    "inode {ino} to change its attributes (owner uid {}; uid {} asked)",
                    st.uid, peer.uid
                )));
            }
            Ok(())
        }
        Op::OpenFile { ino, .. } | Op::CloseFile { ino, .. } => {
            let st = v.stat(*ino)?;
            match peer.may(&st, R) || peer.may(&st, W) {
                true => Ok(()),
                false => Err(denied(format!("inode {ino}"))),
            }
        }
        Op::StreamOpen { ino, spec } => match spec.dir {
            StreamDir::Read => need(v, peer, *ino, R, "for a playback"),
            StreamDir::Write => need(v, peer, *ino, W, "for a recording"),
        },
        Op::StreamRoll { ino, .. } => need(v, peer, *ino, W, "for a recording to roll on to"),
        Op::StreamQueue { ino, .. } => need(v, peer, *ino, R, "for a playback to go on into"),
        Op::Fsync
        | Op::StreamRead { .. }
        | Op::StreamWrite { .. }
        | Op::StreamClose { .. }
        | Op::StreamSync { .. }
        | Op::StreamFollow { .. } => Ok(()),
        Op::Unmount => Err(denied(
            "unmounting through the socket (unmount the mount point: umount)",
        )),
        Op::Protect { restate: true, .. } if !peer.is_root() => Err(denied(
            "stating a protection again beyond protected-max (only root may, as it removes protections)",
        )),
        Op::Protect { dir, .. } => need(v, peer, *dir, W, "to protect its chunks"),
        Op::Unprotect { .. } if peer.is_root() => Ok(()),
        Op::Unprotect { .. } => Err(denied(
            "removing a protection (only root may: a protected clip is kept as evidence)",
        )),
        Op::SetVolumeRetention(_) if peer.is_root() => Ok(()),
        Op::SetVolumeRetention(_) => Err(denied(
            "setting the volume's retention policy (only root may: it decides what is deleted on the whole volume)",
        )),
    }
}

/// A new inode belongs to the client that makes it: the uid and gid it claims are
/// replaced by its own unless it is root (as the mount gives a new file the caller's),
/// and a set-group-ID directory gives its group.
pub fn own_new(v: &Volume, peer: &Peer, op: &mut Op) -> Result<(), RuntimeError> {
    let (parent, uid, gid) = match op {
        Op::Create {
            parent, uid, gid, ..
        }
        | Op::Mkdir {
            parent, uid, gid, ..
        }
        | Op::Symlink {
            parent, uid, gid, ..
        } => (*parent, uid, gid),
        _ => return Ok(()),
    };
    if peer.is_root() {
        return Ok(());
    }
    *uid = peer.uid;
    let dir = v.stat(parent)?;
    *gid = if dir.mode & 0o2000 != 0 {
        dir.gid
    } else {
        peer.gid
    };
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use dvrfs_core::format::dir::Kind;

    fn stat(mode: u32, uid: u32, gid: u32) -> Stat {
        Stat {
            ino: 5,
            kind: Kind::File,
            mode,
            nlink: 1,
            uid,
            gid,
            size_bytes: 0,
            mtime_ns: 0,
            ctime_ns: 0,
            blocks: 0,
            runs: 0,
            lost_bytes: 0,
            generation: 0,
        }
    }

    #[test]
    fn mode_bits_are_read_for_owner_group_and_others() {
        let peer = Peer {
            pid: 1,
            uid: 1000,
            gid: 100,
            groups: vec![44],
        };
        assert!(peer.may(&stat(0o600, 1000, 0), R | W));
        assert!(!peer.may(&stat(0o600, 0, 0), R));
        assert!(peer.may(&stat(0o640, 0, 100), R));
        assert!(peer.may(&stat(0o640, 0, 44), R), "a supplementary group");
        assert!(!peer.may(&stat(0o640, 0, 44), W));
        assert!(peer.may(&stat(0o604, 0, 0), R));
        // The owner's bits apply to the owner even when others have more.
        assert!(!peer.may(&stat(0o066, 1000, 0), R));
        let root = Peer {
            pid: 1,
            uid: 0,
            gid: 0,
            groups: vec![],
        };
        assert!(root.may(&stat(0o000, 7, 7), R | W));
    }
}
