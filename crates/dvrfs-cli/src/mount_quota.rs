//! The mount's limits on stream reservations (`dvrfs_fuse::quota`): the flags and
//! `-o` options turned into a [`QuotaConfig`], each in its range, and the gate that
//! applies the same books, and the share kept for root against plain writes
//! (`dvrfs_fuse::share`), to the daemon's socket clients (`dvrfs_remote::gate`).

use std::sync::Arc;

use dvrfs_core::engine::{StreamId, StreamSpec};
use dvrfs_core::meta::Ino;
use dvrfs_fuse::quota::{Quota, QuotaConfig};
use dvrfs_runtime::Runtime;

use crate::cmd_mount::MountArgs;
use crate::error::{CliError, CliResult};

/// The grace of pending reservations and the per-user limits (`dvrfs_fuse::quota`),
/// each in its range.
pub fn quota_config(a: &MountArgs) -> CliResult<QuotaConfig> {
    use dvrfs_fuse::quota as q;
    let grace_ms = crate::args::parse_duration_in(
        "--stream-grace (-o stream_grace=)",
        &a.stream_grace,
        q::MIN_GRACE_MS..=q::MAX_GRACE_MS,
    )?;
    let user_rate_bps = match &a.user_rate {
        None => None,
        Some(t) => {
            let flag = "--user-rate (-o user_rate=)";
            let r = crate::limits::bit_rate(flag, t)?;
            if !(q::MIN_USER_RATE_BPS as f64..=q::MAX_USER_RATE_BPS as f64).contains(&r) {
                return Err(CliError::usage(
                    format!("{flag} {t}: out of range: from 8K to 100G bits per second"),
                    "give bits per second with K/M/G (decimal), e.g. user_rate=40M",
                ));
            }
            Some(r as u64)
        }
    };
    let user_space_bytes = match &a.user_space {
        None => None,
        Some(t) => {
            let flag = "--user-space (-o user_space=)";
            let s = crate::args::parse_size(flag, t)?;
            if !(q::MIN_USER_SPACE_BYTES..=q::MAX_USER_SPACE_BYTES).contains(&s) {
                return Err(CliError::usage(
                    format!("{flag} {t}: out of range: from 4K to 1P bytes"),
                    "give a size with K, M, G or T, e.g. user_space=100G",
                ));
            }
            Some(s)
        }
    };
    let root_share_pct = crate::args::check_range(
        "--root-share (-o root_share=)",
        a.root_share,
        0..=q::MAX_ROOT_SHARE_PCT,
    )?;
    let cfg = QuotaConfig {
        grace_ms,
        user_rate_bps,
        user_space_bytes,
        limit_root: a.limit_root,
        root_share_pct,
    };
    debug_assert!(cfg.check().is_ok(), "checked above");
    Ok(cfg)
}

/// The mount's books as the socket server's gate: a client's stream counts as its
/// uid's, against the same caps and root share as the user's mount reservations.
pub struct Gate {
    quota: Arc<Quota>,
    rt: Arc<Runtime>,
}

impl Gate {
    pub fn new(quota: Arc<Quota>, rt: Arc<Runtime>) -> Gate {
        Gate { quota, rt }
    }
}

impl dvrfs_remote::StreamGate for Gate {
    fn admit(&self, uid: u32, ino: Ino, spec: &StreamSpec) -> Result<u64, (i32, String)> {
        self.quota.admit_client(&self.rt, uid, ino, spec)
    }

    fn settled(&self, token: u64, sid: Option<StreamId>) {
        self.quota.client_settled(token, sid);
    }

    fn closed(&self, sid: StreamId) {
        self.quota.client_closed(sid);
    }

    fn write(&self, uid: u32, ino: Ino, end: u64) -> Result<(), (i32, String)> {
        let share = self.quota.root_share();
        match share.check_write(&self.rt, uid, ino, end) {
            Err(libc::ENOSPC) => Err((
                libc::ENOSPC,
                format!(
                    "a write to inode {ino} would take some of the volume's last {}% kept for root (--root-share)",
                    share.pct()
                ),
            )),
            // Anything else (an inode that is not a file) is the write's own to report.
            _ => Ok(()),
        }
    }
}
