//! The daemon's say over a client's stream reservations: the same per-user limits as
//! the mount's (`dvrfs-fuse`'s `quota`), by the uid the kernel gives for the
//! connection (`SO_PEERCRED`).
//!
//! The server asks [`StreamGate::admit`] before it starts a client's
//! `Op::StreamOpen`; the gate counts the reservation as the user's from then on
//! (under the token it returns), so two opens of one user cannot both pass on the same
//! headroom while the engine admits them. The server tells it what became of the open
//! when it learns it (the client's `Check`, or the connection's end): the stream's id,
//! or none (refused by the engine, cancelled); and when the stream closes (the
//! client's `StreamClose`, or the connection's end). An open whose outcome the client
//! never asks for stays counted until the connection ends: over-counting for a while,
//! never under.
//!
//! The server asks [`StreamGate::write`] before it starts a client's plain write, so
//! a user's `dvrfs put` cannot take the share of the volume kept for root either.

use dvrfs_core::engine::{StreamId, StreamSpec};
use dvrfs_core::meta::Ino;

/// A refusal: the errno the client gets and the reason for the daemon's log.
pub type GateRefusal = (i32, String);

/// The daemon's per-user bookkeeping of reservations, as the server sees it.
pub trait StreamGate: Send + Sync {
    /// Whether `uid` may open the stream `spec` on `ino`; admitted, it counts as the
    /// user's under the token returned.
    fn admit(&self, uid: u32, ino: Ino, spec: &StreamSpec) -> Result<u64, GateRefusal>;
    /// The open counted under `token` gave stream `sid`, or failed (`None`).
    fn settled(&self, token: u64, sid: Option<StreamId>);
    /// Stream `sid` of a client closed.
    fn closed(&self, sid: StreamId);
    /// Whether `uid`'s plain write (`Op::Write`) that grows `ino` to `end` bytes may
    /// take the new blocks it needs: a daemon keeping a share of the volume for root
    /// refuses a user's write into it (`ENOSPC`). The check holds nothing: writes in
    /// flight at once may together go past it by their own size. Not a stream's
    /// writes: a recording's space was held (and checked) at admission. The default
    /// allows every write.
    fn write(&self, uid: u32, ino: Ino, end: u64) -> Result<(), GateRefusal> {
        let _ = (uid, ino, end);
        Ok(())
    }
}
