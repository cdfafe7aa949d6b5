//! Where a volume's daemon listens, and finding it from the TARGET a command was given.
//!
//! The socket's name is derived from the volume itself, not from the path used to
//! name it: an image file by its device and inode number (`img-<dev>-<ino>.sock`), a
//! block device by its device number (`blk-<major>-<minor>.sock`). So `rec.img`,
//! `./rec.img` and a symbolic link to it all find the daemon, and two images never
//! share a name. The directory is [`RUN_DIR`] (`/run/dvrfs`), or, when the daemon
//! cannot create it there (not root, no `/run`), [`fallback_dir`]; a client looks in
//! both, in that order.
//!
//! A daemon killed with `kill -9` leaves its socket behind. Connecting to it is
//! refused (nobody listens), which is how both sides tell a stale socket from a live
//! one: the next daemon replaces it, and a client ignores it (and says so).

use std::io;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};

/// The usual directory of the daemons' sockets.
pub const RUN_DIR: &str = "/run/dvrfs";

/// Where sockets go when [`RUN_DIR`] cannot be created: a fixed directory under the
/// temporary directory, so that every user's client finds it.
pub fn fallback_dir() -> PathBuf {
    std::env::temp_dir().join("dvrfs-run")
}

/// The socket's file name for the volume on `target` (an image file or a block
/// device).
pub fn socket_name(target: &Path) -> io::Result<String> {
    let md = std::fs::metadata(target)?;
    Ok(if md.file_type().is_block_device() {
        format!(
            "blk-{}-{}.sock",
            libc::major(md.rdev()),
            libc::minor(md.rdev())
        )
    } else {
        format!("img-{:x}-{}.sock", md.dev(), md.ino())
    })
}

/// Where a client looks for the daemon of `target`, in order.
pub fn candidates(target: &Path) -> io::Result<Vec<PathBuf>> {
    let name = socket_name(target)?;
    Ok(vec![
        Path::new(RUN_DIR).join(&name),
        fallback_dir().join(&name),
    ])
}

/// What a client finds for a volume.
pub enum Found {
    /// No daemon has a socket for it: open the volume directly.
    Nothing,
    /// A daemon listens here (the connection is made).
    Live(PathBuf, UnixStream),
    /// A socket nobody listens on any more (its daemon was killed).
    Stale(PathBuf),
}

/// Looks for the daemon of `target`. A target that does not exist has no daemon
/// (the direct open then says it does not exist).
pub fn find(target: &Path) -> Found {
    let Ok(paths) = candidates(target) else {
        return Found::Nothing;
    };
    let mut stale = None;
    for p in paths {
        if !std::fs::symlink_metadata(&p).is_ok_and(|m| m.file_type().is_socket()) {
            continue;
        }
        match UnixStream::connect(&p) {
            Ok(s) => return Found::Live(p, s),
            Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => stale = Some(p),
            // Not allowed to connect, or anything else: not ours to judge here; the
            // direct open says what is wrong with the volume.
            Err(_) => {}
        }
    }
    stale.map_or(Found::Nothing, Found::Stale)
}

/// Binds the daemon's socket for `target`: in [`RUN_DIR`] if it can be created
/// there, else in [`fallback_dir`]. A stale socket of the same name is replaced; a
/// live one (another daemon serving the volume, as two read-only mounts may) is an
/// error saying so. The socket is made connectable by every user (mode 0666): the
/// daemon checks each client's identity itself (`server`).
pub fn bind(target: &Path) -> io::Result<(PathBuf, UnixListener)> {
    let name = socket_name(target)?;
    let mut last = None;
    for dir in [PathBuf::from(RUN_DIR), fallback_dir()] {
        if let Err(e) = make_dir(&dir) {
            last = Some(io::Error::new(
                e.kind(),
                format!("cannot create {}: {e}", dir.display()),
            ));
            continue;
        }
        let path = dir.join(&name);
        if std::fs::symlink_metadata(&path).is_ok() {
            match UnixStream::connect(&path) {
                Ok(_) => {
                    return Err(io::Error::new(
                        io::ErrorKind::AddrInUse,
                        format!("{} is served by another daemon already", path.display()),
                    ))
                }
                Err(_) => std::fs::remove_file(&path)?,
            }
        }
        match UnixListener::bind(&path) {
            Ok(l) => {
                std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666))?;
                return Ok((path, l));
            }
            Err(e) => {
                last = Some(io::Error::new(
                    e.kind(),
                    format!("cannot bind {}: {e}", path.display()),
                ))
            }
        }
    }
    Err(last.unwrap_or_else(|| io::Error::other("no directory for the socket")))
}

/// Creates a socket directory readable by all (each client must reach its socket).
/// The fallback in the shared temporary directory is sticky, as `/tmp` is, so one
/// user cannot remove another's socket.
fn make_dir(dir: &Path) -> io::Result<()> {
    if !dir.is_dir() {
        std::fs::create_dir_all(dir)?;
        let mode = if dir == Path::new(RUN_DIR) {
            0o755
        } else {
            0o1777
        };
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(mode))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_volume_has_one_name_whatever_path_names_it() {
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("a.img");
        let b = dir.path().join("b.img");
        std::fs::write(&a, b"x").unwrap();
        std::fs::write(&b, b"y").unwrap();
        let link = dir.path().join("link.img");
        std::os::unix::fs::symlink(&a, &link).unwrap();
        let n = socket_name(&a).unwrap();
        assert_eq!(socket_name(&link).unwrap(), n);
        assert_eq!(
            socket_name(&dir.path().join("./a.img")).unwrap(),
            n,
            "another spelling of the path"
        );
        assert_ne!(socket_name(&b).unwrap(), n);
        assert!(n.starts_with("img-") && n.ends_with(".sock"), "{n}");
        // Short enough for sun_path (108 bytes) in either directory.
        for p in candidates(&a).unwrap() {
            assert!(p.as_os_str().len() < 108, "{}", p.display());
        }
    }
}
