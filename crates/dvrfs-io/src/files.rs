//! File calls std has no safe form for: where a sparse file's data lies
//! (`SEEK_DATA`/`SEEK_HOLE`), whether a path is writable (`access(2)`), a
//! descriptor that names a directory without opening it (`O_PATH`), the size and
//! free space of the file system that holds a path (`statvfs(3)`), writing back
//! everything dirty (`sync(2)`), and punching a hole in a sparse file
//! (`fallocate(PUNCH_HOLE)`).
//!
//! Contract: each function makes the system call it names and reports its failure
//! as `io::Error` (or, where the answer is a yes or no, as no); only
//! [`punch_hole`] changes a file, and only as writing zeros would.

use std::ffi::CString;
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::Path;

fn c_path(path: &Path) -> io::Result<CString> {
    CString::new(path.as_os_str().as_encoded_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a NUL byte in the path"))
}

/// The first run of data at or after `at` in `file`: `Some((start, end))` with `end`
/// the next hole (or `len` when the file system cannot say), `None` when no data
/// lies past `at` (`ENXIO`), the file system has no `SEEK_DATA`, or `at` is past
/// what `off_t` holds. Moves the file's offset.
pub fn next_data(file: &File, at: u64, len: u64) -> Option<(u64, u64)> {
    let at = libc::off_t::try_from(at).ok()?;
    // SAFETY: lseek on a descriptor `file` keeps open across the call; no memory
    // is passed.
    let data = unsafe { libc::lseek(file.as_raw_fd(), at, libc::SEEK_DATA) };
    if data < 0 {
        return None;
    }
    // SAFETY: as above.
    let hole = unsafe { libc::lseek(file.as_raw_fd(), data, libc::SEEK_HOLE) };
    Some((data as u64, if hole < 0 { len } else { hole as u64 }))
}

/// The size and space of a file system, from `statvfs(3)`, in bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FsSpace {
    /// Its size (`f_blocks`).
    pub total_bytes: u64,
    /// Free blocks (`f_bfree`, root's reserve included).
    pub free_bytes: u64,
    /// Free blocks an unprivileged process may use (`f_bavail`).
    pub avail_bytes: u64,
    /// Mounted read-only (`ST_RDONLY`).
    pub read_only: bool,
}

/// The size and space of the file system that holds `path`.
pub fn fs_space(path: &Path) -> io::Result<FsSpace> {
    let c = c_path(path)?;
    let mut st = std::mem::MaybeUninit::<libc::statvfs>::zeroed();
    // SAFETY: a valid C string and a pointer to a statvfs the call fills; both live
    // across the call.
    if unsafe { libc::statvfs(c.as_ptr(), st.as_mut_ptr()) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: statvfs returned 0, so it filled the struct (zeroed before, anyway).
    let st = unsafe { st.assume_init() };
    let unit = st.f_frsize;
    Ok(FsSpace {
        total_bytes: st.f_blocks * unit,
        free_bytes: st.f_bfree * unit,
        avail_bytes: st.f_bavail * unit,
        read_only: st.f_flag & libc::ST_RDONLY != 0,
    })
}

/// Writes every dirty page and inode of every file system back (`sync(2)`; it
/// cannot fail).
pub fn sync_everything() {
    // SAFETY: sync takes no arguments and touches no memory of ours.
    unsafe { libc::sync() }
}

/// Makes `len` bytes at `offset` of `file` read as zeros by freeing their storage
/// (`fallocate(FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE)`): the file keeps its
/// size; partial blocks at either end are zeroed in place. Fails (`EOPNOTSUPP`) on a
/// file system without holes: the caller then writes the zeros.
pub fn punch_hole(file: &File, offset: u64, len: u64) -> io::Result<()> {
    let (Ok(off), Ok(n)) = (libc::off_t::try_from(offset), libc::off_t::try_from(len)) else {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "a range past what off_t holds",
        ));
    };
    // SAFETY: fallocate on a descriptor `file` keeps open across the call; no memory
    // is passed.
    let r = unsafe {
        libc::fallocate(
            file.as_raw_fd(),
            libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
            off,
            n,
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Whether the calling process may write `path` (`access(W_OK)`, with the real user
/// and group ids); false for a path that does not exist or holds a NUL.
pub fn writable(path: &Path) -> bool {
    let Ok(c) = c_path(path) else {
        return false;
    };
    // SAFETY: a valid C string living across the call.
    unsafe { libc::access(c.as_ptr(), libc::W_OK) == 0 }
}

/// A descriptor naming the directory `path` (`O_PATH | O_DIRECTORY`): it opens no
/// file and reads nothing, but keeps the mount that holds the directory busy, and
/// `/proc/self/fdinfo` tells which mount that is. Symbolic links are followed.
pub fn open_dir_path(path: &Path) -> io::Result<OwnedFd> {
    let c = c_path(path)?;
    // SAFETY: a valid C string; O_PATH opens no file, it names the directory.
    let fd = unsafe {
        libc::open(
            c.as_ptr(),
            libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: just opened, owned here only.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn next_data_finds_the_data_after_a_hole() {
        let dir = std::env::temp_dir().join(format!("dvrfs-io-files-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("sparse");
        let f = File::create(&p).unwrap();
        use std::os::unix::fs::FileExt;
        f.write_all_at(&[7u8; 4096], 1 << 20).unwrap();
        let len = f.metadata().unwrap().len();
        let (start, end) = next_data(&f, 0, len).expect("data");
        assert!(start <= 1 << 20 && end == len, "{start}..{end}");
        assert_eq!(next_data(&f, len, len), None);
        assert!(writable(&p));
        assert!(!writable(&dir.join("missing")));
        assert!(open_dir_path(&dir).is_ok());
        assert!(open_dir_path(&p).is_err(), "a file is not a directory");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
