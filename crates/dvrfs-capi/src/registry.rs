//! What the C caller's numbers name: volume handles, file numbers and stream numbers,
//! each checked before anything is done with it.
//!
//! - **A volume handle is a token, not a pointer.** `dvrfs_open` gives the caller
//!   `dvrfs *`, but its value is a sequence number (shifted left by 4, so it looks
//!   like an aligned address and is never NULL) that the process never hands out
//!   again: each open takes the next one. Nothing ever dereferences it; the registry
//!   maps it to the volume. A handle that was closed is gone from the registry, so
//!   it is `-EBADF` for good, whatever `dvrfs_open` returns later: a later volume
//!   cannot reuse its number the way an allocator reuses an address (the defect
//!   this replaced: a closed handle whose memory a later open got acted on that
//!   volume). The number is the handle's generation, and no two handles share one.
//! - **A file number holds its file.** `dvrfs_file_open` opens the inode in the
//!   engine (`Op::OpenFile`, the open count the mount's handles take), and
//!   `dvrfs_file_close` closes it, so removing the file's last name while the number
//!   is open leaves an orphan that lives until the close: the number can never reach
//!   a file created later under a reused inode number. Numbers are not reused within
//!   a handle either.
//! - **A stream number is this handle's.** The streams a handle opened are listed
//!   here; any other number is `-EBADF` before a buffer is allocated or a byte
//!   copied. (The engine's stream holds its file by itself: `engine/stream/hold.rs`.)
//!
//! Limits: [`DVRFS_OPEN_FILES_MAX`] file numbers and as many streams open per handle
//! (`-EMFILE` beyond), and at most 2^28 handles in the life of a 32-bit process (the
//! token must fit a pointer; a 64-bit one never runs out).

use crate::{fail, Fail, DVRFS_OPEN_FILES_MAX};
use dvrfs_core::engine::StreamDir;
use dvrfs_core::meta::Ino;
use dvrfs_core::OpenMode;
use dvrfs_remote::Handle;
use std::collections::{HashMap, HashSet};
use std::ffi::c_int;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

/// The opaque type of a volume handle in C (`dvrfs *`). Never instantiated: a handle
/// is a token the registry looks up (module docs).
pub struct dvrfs {
    _never: [u8; 0],
}

/// How far a token's number is shifted: its low bits are 0, as an aligned address's.
const TOKEN_SHIFT: u32 = 4;

/// An open volume, as the registry holds it.
pub(crate) struct Vol {
    pub(crate) vol: Handle,
    /// File and stream numbers. Held while an asynchronous request on a file number
    /// is submitted (`aio.rs`), so a concurrent `dvrfs_file_close` comes after it.
    pub(crate) tables: Mutex<Tables>,
    /// Tickets of control blocks started and not yet reported done.
    pub(crate) running: Mutex<HashSet<u64>>,
}

/// A stream this handle opened.
#[derive(Clone, Copy, Debug)]
pub(crate) struct StreamEntry {
    pub(crate) dir: StreamDir,
}

#[derive(Default)]
pub(crate) struct Tables {
    next_fd: c_int,
    by_fd: HashMap<c_int, (Ino, OpenMode)>,
    streams: HashMap<c_int, StreamEntry>,
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Tables {
    /// The file behind number `fd`.
    pub(crate) fn ino(&self, fd: c_int) -> Result<Ino, Fail> {
        self.by_fd
            .get(&fd)
            .map(|&(ino, _)| ino)
            .ok_or_else(|| fail(libc::EBADF, format!("file number {fd} is not open")))
    }

    /// The file behind number `fd`, which must have been opened for writing (not
    /// `DVRFS_O_RDONLY`): `what` is what the caller wants to do.
    pub(crate) fn writable(&self, fd: c_int, what: &str) -> Result<Ino, Fail> {
        let ino = self.ino(fd)?;
        match self.by_fd[&fd].1 {
            OpenMode::Write => Ok(ino),
            OpenMode::Read => Err(fail(
                libc::EBADF,
                format!("file number {fd} was opened DVRFS_O_RDONLY: it cannot {what}; open the file without that flag"),
            )),
        }
    }

    /// Whether another file number fits ([`DVRFS_OPEN_FILES_MAX`]).
    pub(crate) fn check_room(&self) -> Result<(), Fail> {
        if self.by_fd.len() >= DVRFS_OPEN_FILES_MAX as usize {
            return Err(fail(
                libc::EMFILE,
                format!(
                    "{DVRFS_OPEN_FILES_MAX} files are open on this handle, the most it takes: close some with dvrfs_file_close"
                ),
            ));
        }
        Ok(())
    }

    /// Numbers file `ino` (which the caller has opened in the engine, `mode`).
    pub(crate) fn add_file(&mut self, ino: Ino, mode: OpenMode) -> Result<c_int, Fail> {
        self.check_room()?;
        let fd = self.next_fd;
        self.next_fd = fd.checked_add(1).ok_or_else(|| {
            fail(
                libc::EMFILE,
                "this handle has used up its file numbers (2^31 opens): open the volume again",
            )
        })?;
        assert!(
            self.by_fd.insert(fd, (ino, mode)).is_none(),
            "file numbers are not reused"
        );
        Ok(fd)
    }

    pub(crate) fn remove_file(&mut self, fd: c_int) -> Result<(Ino, OpenMode), Fail> {
        self.ino(fd)?;
        Ok(self.by_fd.remove(&fd).expect("checked"))
    }

    /// Every file still open, forgotten (the handle is closing).
    pub(crate) fn take_files(&mut self) -> Vec<(Ino, OpenMode)> {
        self.by_fd.drain().map(|(_, f)| f).collect()
    }

    /// The stream behind number `sid`, if this handle opened it.
    pub(crate) fn stream(&self, sid: c_int) -> Result<StreamEntry, Fail> {
        self.streams.get(&sid).copied().ok_or_else(|| {
            fail(
                libc::EBADF,
                format!("stream {sid} is not open on this handle (never opened here, or closed)"),
            )
        })
    }

    pub(crate) fn streams_full(&self) -> Result<(), Fail> {
        if self.streams.len() >= DVRFS_OPEN_FILES_MAX as usize {
            return Err(fail(
                libc::EMFILE,
                format!(
                    "{DVRFS_OPEN_FILES_MAX} streams are open on this handle, the most it takes"
                ),
            ));
        }
        Ok(())
    }

    pub(crate) fn add_stream(&mut self, sid: c_int, e: StreamEntry) {
        let old = self.streams.insert(sid, e);
        assert!(old.is_none(), "the engine gave stream number {sid} twice");
    }

    pub(crate) fn remove_stream(&mut self, sid: c_int) -> Result<StreamEntry, Fail> {
        let e = self.stream(sid)?;
        self.streams.remove(&sid);
        Ok(e)
    }

    /// Every stream still open, forgotten (the handle is closing).
    pub(crate) fn take_streams(&mut self) -> Vec<c_int> {
        let mut v: Vec<c_int> = self.streams.drain().map(|(sid, _)| sid).collect();
        v.sort_unstable();
        v
    }
}

#[derive(Default)]
struct Registry {
    /// The last number handed out (0: none yet; never handed out again).
    last: u64,
    open: HashMap<u64, Arc<Vol>>,
}

fn registry() -> MutexGuard<'static, Registry> {
    static R: OnceLock<Mutex<Registry>> = OnceLock::new();
    lock(R.get_or_init(Default::default))
}

/// The number a token stands for, or `None` for a value no token has.
fn number(fs: *const dvrfs) -> Option<u64> {
    let t = fs as usize;
    (t != 0 && t.trailing_zeros() >= TOKEN_SHIFT).then_some((t >> TOKEN_SHIFT) as u64)
}

/// Registers an opened volume: its token.
pub(crate) fn register(v: Vol) -> Result<*mut dvrfs, Fail> {
    let mut r = registry();
    let n = r.last + 1;
    let token = usize::try_from(n)
        .ok()
        .and_then(|n| n.checked_mul(1 << TOKEN_SHIFT))
        .ok_or_else(|| {
            fail(
                libc::EMFILE,
                "this process has opened as many dvrfs handles as a pointer can number",
            )
        })?;
    r.last = n;
    assert!(
        r.open.insert(n, Arc::new(v)).is_none(),
        "numbers are never reused"
    );
    let p = token as *mut dvrfs;
    debug_assert_eq!(number(p), Some(n));
    Ok(p)
}

fn bad_handle() -> Fail {
    fail(
        libc::EBADF,
        "not an open dvrfs handle (never opened, or already closed)",
    )
}

/// The volume behind `fs`, if it is an open handle. The returned `Arc` keeps it open
/// while the call runs, even if another thread closes the handle meanwhile.
pub(crate) fn volume(fs: *const dvrfs) -> Result<Arc<Vol>, Fail> {
    if fs.is_null() {
        return Err(fail(libc::EFAULT, "the dvrfs handle is NULL"));
    }
    let n = number(fs).ok_or_else(bad_handle)?;
    registry().open.get(&n).cloned().ok_or_else(bad_handle)
}

/// Takes `fs` out of the registry: from now on it is `-EBADF`.
pub(crate) fn unregister(fs: *const dvrfs) -> Result<Arc<Vol>, Fail> {
    if fs.is_null() {
        return Err(fail(libc::EFAULT, "the dvrfs handle is NULL"));
    }
    let n = number(fs).ok_or_else(bad_handle)?;
    registry().open.remove(&n).ok_or_else(bad_handle)
}
