//! Who owns a reservation made through the mount, how long it lives, and how much one
//! user may hold (issue 22, item 7).
//!
//! A reservation ([`crate::stream`]) claims two shared things: a part of the disk's
//! real-time share (its rate) and, for a recording, free space held at admission.
//! Without bounds one user's `setfattr -v write:8M,size=1900M` on a 2 GiB volume made
//! root's writes fail with `ENOSPC` until the daemon stopped. So:
//!
//! - **Ownership.** A reservation set on a file some process has open belongs to the
//!   file's handles: it ends at their last close (a process that dies is closed by
//!   the kernel, so a `kill -9` ends it too). One set on a file nobody has open (the
//!   `setfattr FILE; ffplay FILE` pattern, where `setfattr` exits at once) is
//!   *pending*: the next open by the same user (or root) takes it, and if none does
//!   within the grace period ([`QuotaConfig::grace_ms`], `-o stream_grace=`) it
//!   *expires*: the reaper thread here ends it, logs a line, and `getfattr` shows its
//!   final figures with `state=expired`. Another user's open does not take it (nor
//!   does that open's close end it). A directory's default is persistent by intent
//!   (it is stored in the directory, set explicitly) and stays. Reservations made
//!   through the daemon's socket (`dvrfs record`, the C API) end with their
//!   connection (`dvrfs-remote`'s server closes them when it drops), and count in
//!   these books by the client's uid ([`Quota::admit_client`], called through the
//!   server's `StreamGate`), against the same caps and share.
//! - **Per-user limits.** A user's reservations may together reserve at most
//!   [`QuotaConfig::user_rate_bps`] (`-o user_rate=`) and hold at most
//!   [`QuotaConfig::user_space_bytes`] (`-o user_space=`); both unlimited unless set,
//!   since the right cap depends on the site (an NVR whose one recording user should
//!   have the whole disk, or a shared box). A reservation past either is refused with
//!   `EDQUOT`. Root is exempt unless [`QuotaConfig::limit_root`] (`-o limit_root`).
//! - **The share kept for root**, as ext4 keeps 5% of its blocks
//!   ([`QuotaConfig::root_share_pct`], `-o root_share=`, default 5): a non-root
//!   user's stream is refused if with it the admitted streams would use more than
//!   `100 - share` % of the real-time share (`EBUSY`), or its held space would leave
//!   less than `share` % of the data area free (`ENOSPC`). The check is the engine's
//!   ([`dvrfs_core::engine::Engine::check_keeping`]); the daemon says who is root.
//!   The same share is kept against a user's plain writes (`cp`, `dd`, a socket
//!   client's `put`) and shown by `statfs`: [`crate::share`].
//!
//! Every refusal is logged with what limit, the user's current total and how to
//! raise it. The books here (which uid holds which stream, and how much) are kept
//! beside the engine's: what is held is what the reservation asked at admission (a
//! recording that has written half its size still counts its whole size until it
//! ends), the simple bound a user can reason about.
//!
//! Fault model: the reaper takes the open-files map, then a file's lock, then the
//! books (the order every session thread takes them in), never the books first; an
//! admission holds [`Quota::admitting`] from its check until its stream is in the
//! books, so two of one user's streams cannot both pass a check on the same
//! headroom.

use crate::file::{errno_of, Errno};
use crate::stream::{describe, Ended, Refusal, Streamed};
use dvrfs_core::engine::{
    KeptShare, Op, Reservation, StreamDir, StreamId, StreamInfo, StreamSpec, MAX_KEEP_FRACTION,
};
use dvrfs_core::meta::Ino;
use dvrfs_runtime::Runtime;
use std::collections::HashMap;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How long a reservation set on a closed file waits for an open by default: long
/// enough for a person to type the player's command after `setfattr`, short enough
/// that a forgotten one gives its bandwidth back soon.
pub const DEFAULT_GRACE_MS: u64 = 30_000;
/// The grace's range: from 100 ms (a script that sets and opens at once) to an hour.
pub const MIN_GRACE_MS: u64 = 100;
pub const MAX_GRACE_MS: u64 = 3_600_000;
/// The share kept for root by default, in percent (ext4's reserved blocks).
pub const DEFAULT_ROOT_SHARE_PCT: u32 = 5;
/// The largest share kept for root, in percent (the engine's [`MAX_KEEP_FRACTION`]).
pub const MAX_ROOT_SHARE_PCT: u32 = 50;
const _: () = assert!(MAX_ROOT_SHARE_PCT as f64 / 100.0 == MAX_KEEP_FRACTION);
/// The range of `-o user_rate=` (bits per second): a stream's own range, 8 kbit/s to
/// 100 Gbit/s.
pub const MIN_USER_RATE_BPS: u64 = 8_000;
pub const MAX_USER_RATE_BPS: u64 = 100_000_000_000;
/// The range of `-o user_space=`: one 4 KiB block to 1 PiB.
pub const MIN_USER_SPACE_BYTES: u64 = 4096;
pub const MAX_USER_SPACE_BYTES: u64 = 1 << 50;

/// The limits, as the mount options give them.
#[derive(Clone, Debug, PartialEq)]
pub struct QuotaConfig {
    /// How long a reservation set on a file nobody has open waits for an open.
    pub grace_ms: u64,
    /// A user's reservations' rates together, bits per second (`None`: no cap).
    pub user_rate_bps: Option<u64>,
    /// The bytes a user's recordings hold together (`None`: no cap).
    pub user_space_bytes: Option<u64>,
    /// Root's reservations count against the per-user caps too.
    pub limit_root: bool,
    /// Percent of the real-time share and of the data area kept for root.
    pub root_share_pct: u32,
}

impl Default for QuotaConfig {
    fn default() -> Self {
        QuotaConfig {
            grace_ms: DEFAULT_GRACE_MS,
            user_rate_bps: None,
            user_space_bytes: None,
            limit_root: false,
            root_share_pct: DEFAULT_ROOT_SHARE_PCT,
        }
    }
}

impl QuotaConfig {
    /// Why the configuration is out of range (the CLI checks before mounting; this
    /// is the library's own check).
    pub fn check(&self) -> Result<(), String> {
        if !(MIN_GRACE_MS..=MAX_GRACE_MS).contains(&self.grace_ms) {
            return Err(format!(
                "a grace of {} ms is outside 100ms..1h",
                self.grace_ms
            ));
        }
        if self.root_share_pct > MAX_ROOT_SHARE_PCT {
            return Err(format!(
                "a root share of {}% is over 50%",
                self.root_share_pct
            ));
        }
        if self
            .user_rate_bps
            .is_some_and(|r| !(MIN_USER_RATE_BPS..=MAX_USER_RATE_BPS).contains(&r))
        {
            return Err("a per-user rate is from 8K to 100G bits per second".into());
        }
        if self
            .user_space_bytes
            .is_some_and(|s| !(MIN_USER_SPACE_BYTES..=MAX_USER_SPACE_BYTES).contains(&s))
        {
            return Err("a per-user space is from 4K to 1P bytes".into());
        }
        Ok(())
    }
}

/// Whose a reservation in the books is: a file's through the mount, or a socket
/// client's (the token [`Quota::admit_client`] gave, until the client's stream closes).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Key {
    File(Ino),
    Client(u64),
}

/// One live or pending reservation in the books.
#[derive(Clone, Debug)]
struct Held {
    uid: u32,
    /// `None`: a client's open the engine has not answered yet.
    sid: Option<StreamId>,
    rate_bps: u64,
    space_bytes: u64,
    /// Pending (set on a closed file, no open took it yet): when it expires.
    expires: Option<Instant>,
}

/// The books and the reaper's wake-up.
#[derive(Default)]
struct Books {
    by_key: HashMap<Key, Held>,
    next_token: u64,
    stopped: bool,
}

/// The mount's per-user books of reservations.
pub struct Quota {
    cfg: QuotaConfig,
    books: Mutex<Books>,
    wake: Condvar,
    /// Held from an admission's check until its stream is in the books.
    admitting: Mutex<()>,
    /// The same share kept for root against users' plain writes.
    share: crate::share::RootShare,
}

/// An admission that passed the checks: record its stream with [`Quota::record`]
/// while holding it.
pub struct Permit<'a> {
    _serial: MutexGuard<'a, ()>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn mbit(bps: u64) -> String {
    format!("{:.2} Mbit/s", bps as f64 / 1e6)
}

impl Quota {
    pub fn new(cfg: QuotaConfig) -> Quota {
        assert!(cfg.check().is_ok(), "{:?}: {:?}", cfg, cfg.check());
        Quota {
            books: Mutex::new(Books::default()),
            wake: Condvar::new(),
            admitting: Mutex::new(()),
            share: crate::share::RootShare::new(cfg.root_share_pct),
            cfg,
        }
    }

    pub fn config(&self) -> &QuotaConfig {
        &self.cfg
    }

    /// The share kept for root as plain writes see it ([`crate::share`]).
    pub fn root_share(&self) -> &crate::share::RootShare {
        &self.share
    }

    /// What `uid` holds now: rates (bits per second) and space (bytes).
    fn totals(&self, uid: u32) -> (u64, u64) {
        lock(&self.books)
            .by_key
            .values()
            .filter(|h| h.uid == uid)
            .fold((0, 0), |(r, s), h| {
                (
                    r.saturating_add(h.rate_bps),
                    s.saturating_add(h.space_bytes),
                )
            })
    }

    /// Checks `res` (from byte `start`) on `ino` for `uid` against the per-user caps
    /// and the share kept for root; a refusal says why in words.
    pub fn admit(
        &self,
        rt: &Runtime,
        ino: Ino,
        uid: u32,
        res: &Reservation,
        start: u64,
    ) -> Result<Permit<'_>, Refusal> {
        let permit = Permit {
            _serial: lock(&self.admitting),
        };
        self.check(rt, ino, uid, &res.spec(start))?;
        Ok(permit)
    }

    /// A socket client's stream `spec` on `ino` for `uid` (its `SO_PEERCRED`):
    /// checked as [`Quota::admit`] does, and counted as the user's under the token
    /// returned until [`Quota::client_settled`] and [`Quota::client_closed`] say
    /// otherwise (`dvrfs_remote::gate`). A refusal is logged.
    pub fn admit_client(
        &self,
        rt: &Runtime,
        uid: u32,
        ino: Ino,
        spec: &StreamSpec,
    ) -> Result<u64, Refusal> {
        let _serial = lock(&self.admitting);
        if let Err((e, why)) = self.check(rt, ino, uid, spec) {
            eprintln!(
                "{} dvrfs: inode {ino}: a client's {} stream of {} refused (errno {e}): {why}",
                crate::stamp(),
                spec.dir.name(),
                mbit(spec.rate_bps as u64)
            );
            return Err((e, why));
        }
        let mut b = lock(&self.books);
        b.next_token += 1;
        let token = b.next_token;
        let held = Held {
            uid,
            sid: None,
            rate_bps: spec.rate_bps as u64,
            space_bytes: match spec.dir {
                StreamDir::Write => spec.reserve_bytes,
                StreamDir::Read => 0,
            },
            expires: None,
        };
        b.by_key.insert(Key::Client(token), held);
        Ok(token)
    }

    /// The client's open counted under `token` gave stream `sid`, or failed.
    pub fn client_settled(&self, token: u64, sid: Option<StreamId>) {
        let mut b = lock(&self.books);
        match sid {
            Some(sid) => {
                if let Some(h) = b.by_key.get_mut(&Key::Client(token)) {
                    h.sid = Some(sid);
                }
            }
            None => {
                b.by_key.remove(&Key::Client(token));
            }
        }
    }

    /// A client's stream `sid` closed.
    pub fn client_closed(&self, sid: StreamId) {
        lock(&self.books)
            .by_key
            .retain(|k, h| !(matches!(k, Key::Client(_)) && h.sid == Some(sid)));
    }

    /// The per-user caps and the share kept for root, for `spec` on `ino` by `uid`.
    fn check(&self, rt: &Runtime, ino: Ino, uid: u32, spec: &StreamSpec) -> Result<(), Refusal> {
        let rate_bps = spec.rate_bps as u64;
        let want = match spec.dir {
            StreamDir::Write => spec.reserve_bytes,
            StreamDir::Read => 0,
        };
        if uid != 0 || self.cfg.limit_root {
            let (rate, space) = self.totals(uid);
            if let Some(cap) = self.cfg.user_rate_bps {
                if rate.saturating_add(rate_bps) > cap {
                    return Err((libc::EDQUOT, format!(
                        "uid {uid} already reserves {} and may reserve {} in all (-o user_rate={cap}); this one asks {}: end one of the user's streams, or mount with a higher user_rate",
                        mbit(rate), mbit(cap), mbit(rate_bps)
                    )));
                }
            }
            if let Some(cap) = self.cfg.user_space_bytes {
                if space.saturating_add(want) > cap {
                    return Err((libc::EDQUOT, format!(
                        "uid {uid}'s recordings already hold {space} bytes and may hold {cap} in all (-o user_space={cap}); this one asks {want}: end one of the user's recordings, or mount with a higher user_space"
                    )));
                }
            }
        }
        if uid != 0 && self.cfg.root_share_pct > 0 {
            let keep = self.cfg.root_share_pct as f64 / 100.0;
            let spec = spec.clone();
            let found = rt
                .inspect(move |e| e.check_keeping(ino, &spec, keep))
                .map_err(|e| (errno_of(&e), e.to_string()))?
                .map_err(|e| (e.errno(), e.to_string()))?;
            let how = "root's own reservations may use it; mount with a smaller -o root_share= to give users more";
            match found {
                KeptShare::Fits => {}
                KeptShare::Busy(why) => {
                    return Err((libc::EBUSY, format!("uid {uid}: {why}; {how}")))
                }
                KeptShare::NoSpace(why) => {
                    return Err((libc::ENOSPC, format!("uid {uid}: {why}; {how}")))
                }
            }
        }
        Ok(())
    }

    /// Puts the admitted stream `info` of `res` in `uid`'s books; `pending`: set on a
    /// file nobody has open, it expires after the grace unless an open takes it.
    pub fn record(
        &self,
        _permit: Permit<'_>,
        ino: Ino,
        uid: u32,
        res: &Reservation,
        info: &StreamInfo,
        pending: bool,
    ) {
        let held = Held {
            uid,
            sid: Some(info.id),
            rate_bps: res.rate_bps,
            space_bytes: info.reserved_bytes,
            expires: pending.then(|| Instant::now() + Duration::from_millis(self.cfg.grace_ms)),
        };
        let mut b = lock(&self.books);
        let old = b.by_key.insert(Key::File(ino), held);
        assert!(old.is_none(), "inode {ino}: a second stream in the books");
        if pending {
            self.wake.notify_all();
        }
    }

    /// The stream of `ino` ended: out of the books.
    pub fn release(&self, ino: Ino) {
        lock(&self.books).by_key.remove(&Key::File(ino));
    }

    /// Whether an open of `ino` by `uid` takes its pending stream: the user who set
    /// it, or root. Taken, it is no longer pending.
    pub fn adopt(&self, ino: Ino, uid: u32) -> bool {
        let mut b = lock(&self.books);
        match b.by_key.get_mut(&Key::File(ino)) {
            Some(h) if h.uid == uid || uid == 0 => {
                h.expires = None;
                true
            }
            Some(_) => false,
            // Not in the books: nothing to keep from this open.
            None => true,
        }
    }

    /// The pending streams past their grace, oldest first; waits until one is, or
    /// the reaper is stopped (`None`).
    fn next_expired(&self) -> Option<Vec<(Ino, StreamId, u32)>> {
        let mut b = lock(&self.books);
        loop {
            if b.stopped {
                return None;
            }
            let now = Instant::now();
            let due: Vec<_> = b
                .by_key
                .iter()
                .filter(|(_, h)| h.expires.is_some_and(|t| t <= now))
                .filter_map(|(k, h)| match (k, h.sid) {
                    (Key::File(i), Some(sid)) => Some((*i, sid, h.uid)),
                    _ => None,
                })
                .collect();
            if !due.is_empty() {
                return Some(due);
            }
            let next = b.by_key.values().filter_map(|h| h.expires).min();
            b = match next {
                Some(t) => {
                    self.wake
                        .wait_timeout(b, t.saturating_duration_since(now))
                        .unwrap_or_else(|e| e.into_inner())
                        .0
                }
                None => self.wake.wait(b).unwrap_or_else(|e| e.into_inner()),
            };
        }
    }

    /// Tries a stream whose expiry could not be done now again a little later.
    fn postpone(&self, ino: Ino, sid: StreamId) {
        if let Some(h) = lock(&self.books)
            .by_key
            .get_mut(&Key::File(ino))
            .filter(|h| h.sid == Some(sid))
        {
            h.expires = Some(Instant::now() + Duration::from_millis(MIN_GRACE_MS));
        }
    }
}

/// What the reaper needs of the file system: the open files and the stream tables.
pub struct Shared {
    pub rt: Arc<Runtime>,
    pub files: crate::gather::Files,
    pub streamed: Streamed,
    pub ended: Arc<Mutex<Ended>>,
    pub quota: Arc<Quota>,
    /// A read-only mount told the engine of no open (nothing to close).
    pub read_only: bool,
    /// The files' size floors (`crate::size`), forgotten with a file's state.
    pub floors: Arc<crate::size::Floors>,
}

/// The mount's stream tables, its books and their reaper, started.
pub type Started = (Streamed, Arc<Mutex<Ended>>, Arc<Quota>, Reaper);

/// Makes the stream tables and the books of a mount with `cfg` and starts the reaper.
pub fn start(
    rt: &Arc<Runtime>,
    files: &crate::gather::Files,
    floors: &Arc<crate::size::Floors>,
    cfg: &crate::MountConfig,
) -> std::io::Result<Started> {
    let sh = Shared {
        rt: rt.clone(),
        files: files.clone(),
        streamed: Streamed::default(),
        ended: Arc::default(),
        quota: Arc::new(Quota::new(cfg.quota.clone())),
        read_only: cfg.read_only,
        floors: floors.clone(),
    };
    let (streamed, ended, quota) = (sh.streamed.clone(), sh.ended.clone(), sh.quota.clone());
    Ok((streamed, ended, quota, Reaper::spawn(sh)?))
}

/// The thread that ends pending reservations past their grace; stopped and joined
/// when dropped.
pub struct Reaper {
    quota: Arc<Quota>,
    thread: Option<JoinHandle<()>>,
}

impl Reaper {
    pub fn spawn(sh: Shared) -> std::io::Result<Reaper> {
        let quota = sh.quota.clone();
        let thread = std::thread::Builder::new()
            .name("dvrfs-reaper".into())
            .spawn(move || {
                while let Some(due) = sh.quota.next_expired() {
                    for (ino, sid, uid) in due {
                        expire(&sh, ino, sid, uid);
                    }
                }
            })?;
        Ok(Reaper {
            quota,
            thread: Some(thread),
        })
    }
}

impl Drop for Reaper {
    fn drop(&mut self) {
        lock(&self.quota.books).stopped = true;
        self.quota.wake.notify_all();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Ends the pending stream `sid` of `ino` (set by `uid`), if it still is pending.
fn expire(sh: &Shared, ino: Ino, sid: StreamId, uid: u32) {
    let mut files = lock(&sh.files);
    let Some(st) = files.get(&ino).cloned() else {
        // The state went (never without its stream ending): stale books.
        sh.quota.release(ino);
        return;
    };
    let mut s = lock(&st);
    let Some(f) = s.stream.as_ref().filter(|f| f.info.id == sid) else {
        return; // replaced or ended meanwhile: its own release did the books
    };
    if f.used {
        return; // taken by an open meanwhile
    }
    if !f.waiting.is_empty() || !f.writes.is_empty() {
        // Another user's open is reading or writing through it: those requests are
        // answered first.
        drop(s);
        drop(files);
        sh.quota.postpone(ino, sid);
        return;
    }
    let Some((f, r)) = s.stream_detach(&sh.rt) else {
        unreachable!("checked above")
    };
    lock(&sh.streamed).remove(&ino);
    sh.quota.release(ino);
    let text = match &r {
        Ok(stats) => describe(&f.res, "expired", Some(&f.info), Some(stats)),
        Err(e) => describe(&f.res, &format!("failed(errno {e})"), Some(&f.info), None),
    };
    eprintln!(
        "{} dvrfs: inode {ino}: stream {sid} expired: uid {uid} set it on the file with nobody holding it open and no open by that user took it within the grace ({} ms, -o stream_grace=); its bandwidth and held space are free again: {text}",
        crate::stamp(),
        sh.quota.cfg.grace_ms
    );
    lock(&sh.ended).insert(ino, text);
    let last = s.opens == 0;
    if last {
        files.remove(&ino);
        sh.floors.forget(ino);
    }
    let closes = match last {
        true => std::mem::take(&mut s.engine_opens),
        false => vec![],
    };
    drop(s);
    drop(files);
    // As the last close does: unused preallocation goes back, a file whose name was
    // removed is freed.
    for mode in closes {
        if let Err(e) = sh.rt.run_waiting(Op::CloseFile { ino, mode }, None, 0) {
            let e: Errno = errno_of(&e);
            eprintln!(
                "{} dvrfs: inode {ino}: closing the file after its stream expired failed (errno {e})",
                crate::stamp()
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pending(q: &Quota, ino: Ino, uid: u32) {
        let held = Held {
            uid,
            sid: Some(ino),
            rate_bps: 1_000_000,
            space_bytes: 0,
            expires: Some(Instant::now() + Duration::from_secs(3600)),
        };
        lock(&q.books).by_key.insert(Key::File(ino), held);
    }

    #[test]
    fn a_pending_reservation_is_taken_only_by_its_user_or_root() {
        let q = Quota::new(QuotaConfig::default());
        pending(&q, 5, 1000);
        assert!(!q.adopt(5, 1001), "another user's open took it");
        assert!(lock(&q.books).by_key[&Key::File(5)].expires.is_some());
        assert!(q.adopt(5, 1000));
        assert!(lock(&q.books).by_key[&Key::File(5)].expires.is_none());
        pending(&q, 6, 1000);
        assert!(q.adopt(6, 0), "root takes any");
        q.release(5);
        q.release(6);
        assert!(lock(&q.books).by_key.is_empty());
    }

    #[test]
    fn a_clients_stream_counts_until_it_closes_or_its_open_failed() {
        let q = Quota::new(QuotaConfig::default());
        let mut b = lock(&q.books);
        for token in [1, 2] {
            let held = Held {
                uid: 7,
                sid: None,
                rate_bps: 10,
                space_bytes: 100,
                expires: None,
            };
            b.by_key.insert(Key::Client(token), held);
        }
        drop(b);
        assert_eq!(q.totals(7), (20, 200));
        q.client_settled(1, Some(42));
        q.client_settled(2, None);
        assert_eq!(q.totals(7), (10, 100));
        q.client_closed(42);
        assert_eq!(q.totals(7), (0, 0));
    }

    #[test]
    fn out_of_range_settings_are_refused() {
        let ok = QuotaConfig::default();
        assert!(ok.check().is_ok());
        for bad in [
            QuotaConfig {
                grace_ms: MIN_GRACE_MS - 1,
                ..ok.clone()
            },
            QuotaConfig {
                root_share_pct: MAX_ROOT_SHARE_PCT + 1,
                ..ok.clone()
            },
            QuotaConfig {
                user_rate_bps: Some(MIN_USER_RATE_BPS - 1),
                ..ok.clone()
            },
            QuotaConfig {
                user_space_bytes: Some(MAX_USER_SPACE_BYTES + 1),
                ..ok.clone()
            },
        ] {
            assert!(bad.check().is_err(), "{bad:?}");
        }
    }
}
