//! Many processes, one volume: while `dvrfs mount` holds a volume, other processes
//! (the `dvrfs` commands, C programs through `libdvrfs`) use it through the daemon,
//! over a Unix socket, instead of being refused.
//!
//! - [`socket`]: where a volume's daemon listens (derived from the volume, so the
//!   image's path finds it), stale sockets.
//! - [`wire`] and [`proto`]: the framing and the versioned protocol.
//! - [`server`]: the daemon's side, serving the runtime the mount runs, with the
//!   mount's permission checks for each client's uid ([`perm`]).
//! - [`client`]: the other side; [`Handle`] is a volume opened here or reached
//!   through its daemon, with one set of methods.
//!
//! Time: a request's deadline travels as an absolute `CLOCK_MONOTONIC` time in ns,
//! which every process of the machine shares (Rust's `Instant` is that clock on
//! Linux); each side converts it to and from an `Instant` against its own reading of
//! both clocks taken together, which costs the deadline the microseconds between two
//! clock reads.

pub mod client;
pub mod gate;
pub mod handle;
pub mod perm;
pub mod proto;
pub mod server;
pub mod socket;
pub mod wire;

use std::path::Path;
use std::time::{Duration, Instant};

use dvrfs_core::meta::Ino;
use dvrfs_core::Stat;
use dvrfs_runtime::{Runtime, RuntimeError};

pub use client::{Client, ConnectError};
pub use gate::StreamGate;
pub use handle::{Handle, StreamSeek};
pub use server::{Server, ServerConfig};

/// `CLOCK_MONOTONIC` now, ns.
pub fn mono_now_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec we own.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// The `Instant` of an absolute `CLOCK_MONOTONIC` time.
pub fn instant_of_mono_ns(ns: u64) -> Instant {
    instant_at(ns, mono_now_ns(), Instant::now())
}

/// The absolute `CLOCK_MONOTONIC` time of an `Instant`.
pub fn mono_ns_of_instant(t: Instant) -> u64 {
    mono_ns_at(t, mono_now_ns(), Instant::now())
}

/// [`instant_of_mono_ns`] given one moment read on both clocks.
fn instant_at(ns: u64, now_ns: u64, now: Instant) -> Instant {
    if ns >= now_ns {
        now + Duration::from_nanos(ns - now_ns)
    } else {
        now.checked_sub(Duration::from_nanos(now_ns - ns))
            .unwrap_or(now)
    }
}

/// [`mono_ns_of_instant`] given one moment read on both clocks.
fn mono_ns_at(t: Instant, now_ns: u64, now: Instant) -> u64 {
    if t >= now {
        now_ns.saturating_add((t - now).as_nanos() as u64)
    } else {
        now_ns.saturating_sub((now - t).as_nanos() as u64)
    }
}

/// `stat` of `ino` from the engine, the size of a file being recorded being what
/// its recorder wrote (`Engine::visible_size`), as the mount reports it.
pub fn stat_with_visible_size(rt: &Runtime, ino: Ino) -> Result<Stat, RuntimeError> {
    Ok(rt.inspect(move |e| -> dvrfs_core::Result<Stat> {
        let mut st = e.volume().stat(ino)?;
        if st.kind == dvrfs_core::format::dir::Kind::File {
            st.size_bytes = e.visible_size(ino)?;
        }
        Ok(st)
    })??)
}

/// What a command finds for its TARGET.
pub enum Reach {
    /// No daemon serves it: open it directly.
    Direct,
    /// Its daemon, connected.
    Daemon(Client),
    /// A daemon's socket that nobody listens on (the daemon was killed): open it
    /// directly; the path is for the message that says so.
    Stale(std::path::PathBuf),
    /// A daemon serves it and refused this client, saying why.
    Refused(String),
}

/// Finds the daemon serving the volume on `target`, if one does.
pub fn reach(target: &Path) -> Reach {
    match socket::find(target) {
        socket::Found::Nothing => Reach::Direct,
        socket::Found::Stale(p) => Reach::Stale(p),
        socket::Found::Live(p, s) => match Client::connect(s, &p) {
            Ok(c) => Reach::Daemon(c),
            Err(ConnectError::Refused(why)) => Reach::Refused(why),
            // It went away between the connect and the hello (an unmount): the
            // volume is being let go of, and the direct open waits for that.
            Err(ConnectError::Broken(_)) => Reach::Direct,
        },
    }
}

/// A client's stream refused by the gate ([`gate`]), as the error it gets: `EDQUOT` a
/// per-user cap, `EBUSY` or `ENOSPC` the share kept for root.
fn gate_refused(peer: &perm::Peer, errno: i32, why: String) -> dvrfs_runtime::RuntimeError {
    let why = format!("pid {} (uid {}): {why}", peer.pid, peer.uid);
    dvrfs_runtime::RuntimeError::Engine(match errno {
        libc::EDQUOT => dvrfs_core::Error::OverQuota(why),
        libc::ENOSPC => dvrfs_core::Error::KeptForRoot(why),
        _ => dvrfs_core::Error::Refused(why),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn monotonic_times_convert_both_ways_exactly_at_one_moment() {
        let (now_ns, now) = (5_000_000_000u64, Instant::now());
        for ahead_ns in [-500_000_000i64, -1, 0, 3, 2_000_000_000] {
            let ns = now_ns.checked_add_signed(ahead_ns).unwrap();
            let t = instant_at(ns, now_ns, now);
            assert_eq!(mono_ns_at(t, now_ns, now), ns, "{ahead_ns} ns ahead");
        }
        // A time before the process's clock could go is clamped, not a panic.
        let early = instant_at(0, u64::MAX / 2, now);
        assert!(early <= now);
    }
}
