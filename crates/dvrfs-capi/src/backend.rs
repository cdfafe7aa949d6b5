//! What a C handle runs on: the volume opened in this process (the runtime), or the
//! `dvrfs mount` daemon that holds it (`dvrfs-remote`), chosen when the handle is
//! opened. Every other function of the API is the same either way: both are a
//! [`Handle`], with the same results and the same errors (the daemon's failures keep
//! their variant across the socket, so they map to the same codes and messages).

use std::time::{Duration, Instant};

use dvrfs_core::disk::{Admission, DiskModel};
use dvrfs_core::Op;
use dvrfs_remote::{Handle, Reach};
use dvrfs_runtime::{Options, Runtime, Ticket};

use crate::{cstr, dvrfs_now_ns, dvrfs_options, fail, Fail};

/// Opens the volume on `path`: through its daemon when it is mounted, else here with
/// `o`'s options. A mounted volume keeps the daemon's device, admission and access
/// (its `read_only`, `device_model` and `bandwidth_bps` do not apply then); a daemon
/// that refuses this process is `-EACCES` with its reason. A socket left by a daemon
/// that was killed is ignored: the volume is opened here.
pub(crate) fn open(path: &str, o: Option<&dvrfs_options>) -> Result<Handle, Fail> {
    // The options are checked whichever way the volume is reached, so a bad one is
    // the same error mounted or not.
    let opts = options(o)?;
    match dvrfs_remote::reach(path.as_ref()) {
        Reach::Daemon(c) => Ok(Handle::Remote(c)),
        Reach::Refused(why) => Err(fail(
            libc::EACCES,
            format!("the dvrfs mount daemon of {path} refused this program: {why}"),
        )),
        Reach::Direct | Reach::Stale(_) => Ok(Handle::Local(Runtime::open(path.as_ref(), opts)?)),
    }
}

/// The runtime's options from the C ones (NULL: read-write, admission on 800 Mbit/s).
fn options(o: Option<&dvrfs_options>) -> Result<Options, Fail> {
    let read_only = o.is_some_and(|o| o.read_only != 0);
    let model = match o.map(|o| o.device_model).filter(|p| !p.is_null()) {
        None => None,
        Some(p) => {
            let name = cstr(p, "the device model")?;
            Some(match DiskModel::builtin(name) {
                Some(m) => m,
                None => {
                    let text = std::fs::read_to_string(name)
                        .map_err(|e| fail(libc::ENOENT, format!("device model {name:?}: {e}")))?;
                    DiskModel::from_json(&text)
                        .map_err(|e| fail(libc::EINVAL, format!("{name}: {e}")))?
                }
            })
        }
    };
    let be_share = dvrfs_core::sched::SchedSettings::default().be_share;
    let bandwidth = o.map_or(0.0, |o| o.bandwidth_bps);
    if !(bandwidth.is_finite() && bandwidth >= 0.0) {
        return Err(fail(libc::EINVAL, "bandwidth_bps must be 0 or positive"));
    }
    let admission = match &model {
        Some(m) => Admission::from_model(m, be_share),
        None => Admission::bandwidth(
            if bandwidth > 0.0 { bandwidth } else { 800e6 } / 8.0,
            be_share,
        ),
    };
    Ok(Options {
        writable: !read_only,
        device_model: model,
        admission: Some(admission),
        // A C program may record for months: counters, not a sample per request.
        keep_samples: false,
        ..Options::default()
    })
}

/// Starts an asynchronous request with its `aio_deadline` (absolute
/// `CLOCK_MONOTONIC` ns, 0: best effort). Through the daemon the deadline travels as
/// it is; here it becomes the runtime's `Instant`.
pub(crate) fn start_aio(
    vol: &Handle,
    op: Op,
    deadline_ns: i64,
    owner: u32,
) -> Result<Ticket, Fail> {
    let deadline = (deadline_ns > 0).then_some(deadline_ns as u64);
    Ok(match vol {
        Handle::Remote(c) => c.start_mono(op, deadline)?,
        Handle::Local(_) => vol.start(op, deadline.map(deadline_instant), owner)?,
    })
}

fn deadline_instant(ns: u64) -> Instant {
    let now = dvrfs_now_ns() as u64;
    let now_i = Instant::now();
    if ns >= now {
        now_i + Duration::from_nanos(ns - now)
    } else {
        now_i
            .checked_sub(Duration::from_nanos(now - ns))
            .unwrap_or(now_i)
    }
}
