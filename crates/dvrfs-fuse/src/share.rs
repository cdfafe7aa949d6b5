//! The share of the data area kept for root against users' plain writes (issue 22,
//! item 7), as ext4 keeps its reserved blocks against every unprivileged allocation.
//!
//! [`crate::quota`] keeps `--root-share` percent (`-o root_share=`, default 5) of the
//! volume free of users' stream reservations; this module keeps it free of their
//! writes too, so a user's `cp` or `dd` cannot fill the volume to the last block and
//! make root's writes and recordings fail with `ENOSPC`:
//!
//! - A write by a uid other than 0 that needs new data blocks is refused with
//!   `ENOSPC` at its `write` call (never at a later `fsync` or close) if it would
//!   leave less than the share of the data area *available*: free now or at the next
//!   commit, and held for no recording ([`dvrfs_core::Volume::available_bytes`], what
//!   `statfs` counts as free). Blocks the file already has (an overwrite) and blocks
//!   held for its own recording are not new. Root's writes may use the share.
//! - A write through an admitted recording stream is not checked here: its space was
//!   held at admission, checked against the same share then.
//! - Where: buffered writes check once per chunk, when a write first reaches past
//!   what was checked ([`crate::file`]'s `check_space`, one engine query per chunk,
//!   the query that already asks whether the blocks exist); `O_DIRECT` writes,
//!   `fallocate` and the daemon's socket (`dvrfs put`, the C API: a client's plain
//!   `Op::Write`, by its `SO_PEERCRED` uid) check every call. A truncate that extends
//!   a file allocates nothing (the format reads a hole as zeros), so it is not
//!   checked.
//! - The bound: the check holds nothing. A buffered writer that passed it may gather
//!   up to one chunk (the mount's `--chunk`, at least 1 MiB) before the blocks are
//!   taken, and a checked `O_DIRECT` or socket write is in flight until it lands; so
//!   users together can eat into the share by at most one chunk per file they are
//!   writing at once plus their writes in flight, never more, and the share is whole
//!   again for the next check once those land.
//! - `statfs` reports the share as free but not available (`f_bfree` counts it,
//!   `f_bavail` does not), so `df` as a user shows what the user can write.
//! - A refusal is logged, at most once a minute per file ([`LOG_EVERY`]): a full disk
//!   does not flood the log.
//!
//! The decision is [`refused`], a pure function of [`Room`].

use crate::file::{errno_of, Errno};
use dvrfs_core::meta::Ino;
use dvrfs_core::Volume;
use dvrfs_runtime::Runtime;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How often a refusal of one file's writes is logged at most.
pub const LOG_EVERY: Duration = Duration::from_secs(60);

/// What the decision needs to know of the volume for one write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Room {
    /// Bytes of new data blocks the write needs: neither the file's nor held for it.
    pub need: u64,
    /// Bytes free now or at the next commit and held for nobody (`statfs`'s free).
    pub available: u64,
    /// Bytes kept for root.
    pub kept: u64,
}

/// Bytes kept of a data area of `total` bytes by a share of `pct` percent.
pub fn kept_bytes(total: u64, pct: u32) -> u64 {
    assert!(pct <= 100, "a share of {pct}%");
    (total as u128 * pct as u128 / 100) as u64
}

/// Whether `uid`'s write is refused for taking some of the share kept for root.
pub fn refused(uid: u32, room: &Room) -> bool {
    uid != 0 && room.need > 0 && room.available.saturating_sub(room.need) < room.kept
}

impl Room {
    /// The room for file `ino` to grow to `end` bytes on `v`, `pct` percent kept.
    pub fn to_extend(v: &Volume, ino: Ino, end: u64, pct: u32) -> dvrfs_core::Result<Room> {
        let bs = v.superblock().data_block_bytes;
        let have = v.planned_size(ino)?.div_ceil(bs);
        let blocks = end.div_ceil(bs).saturating_sub(have);
        Ok(Room::with_need(
            v,
            (blocks * bs).saturating_sub(v.held_for(ino)),
            pct,
        ))
    }

    /// The room for `need` bytes of new blocks on `v`, `pct` percent kept.
    pub fn with_need(v: &Volume, need: u64, pct: u32) -> Room {
        let sb = v.superblock();
        Room {
            need,
            available: v.available_bytes(),
            kept: kept_bytes(sb.data_blocks * sb.data_block_bytes, pct),
        }
    }
}

/// A mount's share kept for root, and when each file's refusal was last logged.
pub struct RootShare {
    pct: u32,
    logged: Mutex<HashMap<Ino, Instant>>,
}

/// Who writes: the uid the kernel (or the socket's peer credentials) gives, and the
/// mount's share.
#[derive(Clone, Copy)]
pub struct Writer<'a> {
    pub uid: u32,
    pub share: &'a RootShare,
}

impl Writer<'_> {
    /// Whether this writer's writes are checked at all.
    pub fn checked(&self) -> bool {
        self.uid != 0 && self.share.pct > 0
    }
}

fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1u64 << 20) as f64)
}

impl RootShare {
    pub fn new(pct: u32) -> RootShare {
        assert!(pct <= 100, "a share of {pct}% (the caller checks)");
        RootShare {
            pct,
            logged: Mutex::default(),
        }
    }

    pub fn pct(&self) -> u32 {
        self.pct
    }

    /// Whether `uid`'s write growing `ino` to `end` bytes fits beside the share (one
    /// engine query); refused, it is logged and the answer is `ENOSPC`.
    pub fn check_write(&self, rt: &Runtime, uid: u32, ino: Ino, end: u64) -> Result<(), Errno> {
        if uid == 0 || self.pct == 0 {
            return Ok(());
        }
        let pct = self.pct;
        let room = rt
            .query(move |v| Room::to_extend(v, ino, end, pct))
            .map_err(|e| errno_of(&e))?
            .map_err(|e| e.errno())?;
        self.decide(rt, uid, ino, &room)
    }

    /// [`refused`], logged (at most once a minute per file) and as an errno.
    pub fn decide(&self, rt: &Runtime, uid: u32, ino: Ino, room: &Room) -> Result<(), Errno> {
        if self.pct == 0 || !refused(uid, room) {
            return Ok(());
        }
        if self.first_in_a_while(ino, Instant::now()) {
            let path = rt
                .query(move |v| v.path_of(ino))
                .ok()
                .flatten()
                .unwrap_or_else(|| format!("inode {ino}"));
            eprintln!(
                "{} dvrfs: uid {uid}: a write to {path} refused: the volume's last {}% ({}) is kept for root (--root-share); free space: {} ({} bytes), the write needs {} more; root's writes may use the share; mount with a smaller --root-share to give users more (further refusals of this file's writes are not logged for a minute)",
                crate::stamp(),
                self.pct,
                mib(room.kept),
                mib(room.available),
                room.available,
                room.need
            );
        }
        Err(libc::ENOSPC)
    }

    /// Whether a refusal of `ino`'s write at `now` is to be logged: none was within
    /// [`LOG_EVERY`]. Entries older than that are forgotten, so the map holds only
    /// the files refused in the last minute.
    fn first_in_a_while(&self, ino: Ino, now: Instant) -> bool {
        let mut logged = self.logged.lock().unwrap_or_else(|e| e.into_inner());
        logged.retain(|_, t| now.saturating_duration_since(*t) < LOG_EVERY);
        if logged.contains_key(&ino) {
            return false;
        }
        logged.insert(ino, now);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn room(need: u64, available: u64) -> Room {
        Room {
            need,
            available,
            kept: 50,
        }
    }

    #[test]
    fn a_users_write_may_not_take_the_share_roots_may() {
        // Leaves exactly the share: fits; one byte more: refused.
        assert!(!refused(1000, &room(50, 100)));
        assert!(refused(1000, &room(51, 100)));
        // Past the free space altogether (the plain ENOSPC is the caller's).
        assert!(refused(1000, &room(200, 100)));
        // Already inside the share: only writes that need no new blocks.
        assert!(refused(1000, &room(1, 40)));
        assert!(!refused(1000, &room(0, 40)));
        // Root may use it all.
        assert!(!refused(0, &room(100, 100)));
        // No share kept.
        let none = Room {
            need: 100,
            available: 100,
            kept: 0,
        };
        assert!(!refused(1000, &none));
    }

    #[test]
    fn the_share_is_a_percent_of_the_data_area_without_overflow() {
        assert_eq!(kept_bytes(1000, 5), 50);
        assert_eq!(kept_bytes(1000, 0), 0);
        assert_eq!(kept_bytes(u64::MAX, 50), u64::MAX / 2);
    }

    #[test]
    fn a_files_refusal_is_logged_once_a_minute() {
        let s = RootShare::new(5);
        let t0 = Instant::now();
        assert!(s.first_in_a_while(7, t0));
        assert!(!s.first_in_a_while(7, t0 + Duration::from_secs(59)));
        assert!(s.first_in_a_while(8, t0 + Duration::from_secs(59)));
        assert!(s.first_in_a_while(7, t0 + LOG_EVERY));
        // Only the files refused within the last minute are remembered.
        assert!(s.first_in_a_while(9, t0 + 3 * LOG_EVERY));
        assert_eq!(s.logged.lock().unwrap().len(), 1);
    }
}
