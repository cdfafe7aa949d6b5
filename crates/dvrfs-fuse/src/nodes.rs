//! The kernel's view of inode numbers: which generation of each number it was
//! given, so that a name it still holds for a deleted file never reaches the file
//! that took the number since.
//!
//! The kernel caches a name and its inode ([`crate::TTL`], a minute) and then asks
//! by inode number alone (`getattr`, `open`, `setattr`, ...). A file deleted beside
//! the mount (by retention, or by a client of the daemon's socket) is not told to
//! the kernel, and its number may at once be another file's: a file made through
//! the socket, or a time-shift ring's next chunk. Every reply that gives the kernel
//! an inode (`lookup`, `create`, `mkdir`, `readdirplus`, ...) records its
//! generation here; a request on a number whose current generation differs from
//! the one the kernel was given is `ESTALE`. A new entry replied for the number
//! (the kernel then drops its old inode) records the new generation. Numbers never
//! given (the root, or a number the kernel has not been told of) pass.

use std::collections::HashMap;
use std::sync::Mutex;

use dvrfs_core::meta::Ino;
use dvrfs_core::volume::Stat;

use crate::file::Errno;
use crate::{lock, DvrfsFs};

/// The generation each inode number was last given to the kernel with.
#[derive(Default)]
pub(crate) struct Given(Mutex<HashMap<Ino, u32>>);

impl Given {
    /// The kernel was given `s` (its number and generation).
    pub(crate) fn give(&self, s: &Stat) {
        lock(&self.0).insert(s.ino, s.generation);
    }

    /// Whether `s` is the file the kernel was given under its number.
    fn is_given(&self, s: &Stat) -> bool {
        lock(&self.0).get(&s.ino).is_none_or(|&g| g == s.generation)
    }
}

impl DvrfsFs {
    /// The file the kernel means by number `ino`: `ESTALE` when the number is
    /// another file's now than the one the kernel was given (module docs).
    pub(crate) fn fresh(&self, ino: Ino) -> Result<Stat, Errno> {
        let s = self.stat(ino)?;
        match self.given.is_given(&s) {
            true => Ok(s),
            false => Err(libc::ESTALE),
        }
    }
}
