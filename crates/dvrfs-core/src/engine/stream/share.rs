//! The share kept for a privileged user: admission as [`Engine::admit`] does it, with
//! a fraction of the disk's real-time share and of the data area kept back.
//!
//! ext4 keeps 5% of a volume's blocks for root so that a user who fills it cannot stop
//! the system's own writes. A reservation is a claim on two things, the disk's
//! real-time share (a playback's or a recording's rate) and free space (a recording's
//! held bytes), so a daemon that lets unprivileged users reserve keeps a share of both
//! for root: an unprivileged stream is admitted only if, with it, the admitted
//! streams need at most `1 - keep` of the real-time share and the data area keeps at
//! least `keep` of its blocks free (not written, not held; on a volume with a
//! retention policy, or reclaimable by retention and not promised to a recording:
//! `reclaim.rs`). The engine decides;
//! who is privileged is the daemon's to say (a uid is not the engine's concept).
//!
//! This is a check, not an admission: nothing is held. A daemon that checks then
//! opens serializes its unprivileged admissions itself, so two cannot both pass the
//! check on the same headroom (a privileged one admitted in between makes the
//! unprivileged one fit less, never the guarantee of anything admitted: the open
//! still admits against the whole capacity).

use super::{Engine, StreamDir, StreamSpec};
use crate::error::Result;
use crate::meta::Ino;

/// The largest share that can be kept: half. Past it the unprivileged users have
/// less of the disk than the one it is kept for.
pub const MAX_KEEP_FRACTION: f64 = 0.5;

/// What [`Engine::check_keeping`] found.
#[derive(Clone, Debug, PartialEq)]
pub enum KeptShare {
    /// The stream fits beside the share kept.
    Fits,
    /// It would take some of the real-time share kept (`EBUSY`), why in words.
    Busy(String),
    /// Its held space would take some of the space kept (`ENOSPC`), why in words.
    NoSpace(String),
}

impl Engine {
    /// Whether `spec` on `ino` is admitted with `keep` (0 to [`MAX_KEEP_FRACTION`]) of
    /// the real-time share and of the data area kept back. An error is admission's
    /// own refusal (the stream does not fit at all, or the request is invalid).
    pub fn check_keeping(&self, ino: Ino, spec: &StreamSpec, keep: f64) -> Result<KeptShare> {
        assert!(
            (0.0..=MAX_KEEP_FRACTION).contains(&keep),
            "a kept share of {keep} is outside 0..={MAX_KEEP_FRACTION} (the caller checks)"
        );
        let (_, load) = self.admit(ino, spec)?;
        let pct = keep * 100.0;
        if load > 1.0 - keep {
            return Ok(KeptShare::Busy(format!(
                "with it the admitted streams would use {:.0}% of the disk's real-time share; {pct:.0}% is kept for root, so other users' streams may use {:.0}%",
                load * 100.0,
                100.0 - pct
            )));
        }
        if spec.dir == StreamDir::Write && spec.reserve_bytes > 0 {
            let vol = &self.vol;
            let bs = vol.superblock().data_block_bytes;
            let total = vol.superblock().data_blocks * bs;
            let kept = (total as f64 * keep) as u64;
            // Free, and on a volume with retention reclaimable (`reclaim.rs`).
            let available = self.space_for_recordings();
            let held = spec.reserve_bytes.next_multiple_of(bs);
            if available.saturating_sub(held) < kept {
                return Ok(KeptShare::NoSpace(format!(
                    "holding {held} bytes would leave {} of the volume's {total} bytes free; {pct:.0}% ({kept} bytes) is kept for root",
                    available.saturating_sub(held)
                )));
            }
        }
        Ok(KeptShare::Fits)
    }
}
