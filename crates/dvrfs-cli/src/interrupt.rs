//! SIGINT, SIGTERM and SIGHUP as a request to stop cleanly, for the commands that must
//! not die half-way: `put` and `get` clean up and fail, `record` stops taking input,
//! writes and commits what it accepted and reports.
//!
//! The handler only stores the signal in an atomic (async-signal-safe); the command
//! looks at it where it can stop ([`check`], [`received`]). It is installed with
//! `SA_RESETHAND`, so a second signal kills as usual, and without `SA_RESTART`, so a
//! wait the signal lands in fails with `EINTR` instead of going on.
//!
//! A signal sent to the process goes to any one thread that does not block it, and
//! only that thread's wait is cut short. A command that must stop while its input is
//! quiet (`record` on a pipe) therefore blocks the signals in every thread ([`blocked`]
//! around the runtime's start, [`block`] after it) and takes them only at its own wait
//! for input ([`wait_readable`]: pending ones first, then a `ppoll` that unblocks them
//! atomically): a signal that arrives between two waits stays pending and is taken at
//! the next one, so none is missed or left waiting however it falls.

use std::io;
use std::os::fd::BorrowedFd;
use std::sync::atomic::{AtomicI32, Ordering};
use std::time::Duration;

use dvrfs_io::signals::{self, MaskHow, Readable, SignalSet};

use crate::error::{CliError, CliResult};

/// The signals that stop a command cleanly.
const SIGNALS: [libc::c_int; 3] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP];

/// The signal (one of [`SIGNALS`]) that asked the command to stop, 0 if none.
static RECEIVED: AtomicI32 = AtomicI32::new(0);

extern "C" fn on_signal(sig: libc::c_int) {
    // Only an atomic store: async-signal-safe.
    RECEIVED.store(sig, Ordering::Relaxed);
}

/// From now on SIGINT, SIGTERM and SIGHUP set a flag instead of killing the process;
/// a second one kills as usual (`SA_RESETHAND`).
pub fn catch() {
    // The handler only stores an atomic; no SA_RESTART: a wait the signal interrupts
    // returns EINTR. The signal numbers are valid, so this cannot fail.
    let _ = signals::catch(&SIGNALS, on_signal);
}

/// The signal that asked the command to stop, if one did.
pub fn received() -> Option<libc::c_int> {
    match RECEIVED.load(Ordering::Relaxed) {
        0 => None,
        sig => Some(sig),
    }
}

/// The signal's name, as the report and the error messages give it.
pub fn name(sig: libc::c_int) -> &'static str {
    match sig {
        libc::SIGINT => "SIGINT",
        libc::SIGTERM => "SIGTERM",
        libc::SIGHUP => "SIGHUP",
        _ => "a signal",
    }
}

/// The exit status of a command stopped by `sig`: 128 + the signal, as a shell
/// reports a process it killed.
pub fn exit_status(sig: libc::c_int) -> u8 {
    128 + sig as u8
}

/// An error if a signal asked `what` to stop; exit status 128 + the signal.
pub fn check(what: &str) -> CliResult<()> {
    match received() {
        None => Ok(()),
        Some(sig) => Err(
            CliError::new(format!("{what} interrupted by {}", name(sig)))
                .exit_code(exit_status(sig)),
        ),
    }
}

/// The signals as a set.
fn signal_set() -> SignalSet {
    SignalSet::of(&SIGNALS).expect("valid signal numbers")
}

/// Blocks the signals in the calling thread (and in every thread it starts from now
/// on): they stay pending until [`wait_readable`] or [`unblock`] takes them.
pub fn block() {
    signals::mask(MaskHow::Block, Some(&signal_set()));
}

/// Unblocks the signals in the calling thread: a pending one is taken at once.
pub fn unblock() {
    signals::mask(MaskHow::Unblock, Some(&signal_set()));
}

/// Runs `f` with the signals blocked in the calling thread, so that the threads it
/// starts never take them; then the calling thread's mask is as it was.
pub fn blocked<T>(f: impl FnOnce() -> T) -> T {
    let old = signals::mask(MaskHow::Block, Some(&signal_set()));
    let out = f();
    signals::mask(MaskHow::Set, Some(&old));
    out
}

/// Waits until `fd` has something to read (or its end) or `timeout` passes, taking
/// the signals while it waits (the calling thread blocks them otherwise, see
/// [`block`]). True when `fd` is ready; false when the time passed or a signal came
/// (then [`received`] says which, if it was one of ours).
pub fn wait_readable(fd: BorrowedFd<'_>, timeout: Duration) -> io::Result<bool> {
    // A signal that came since the last wait is taken first: `ppoll` gives one only
    // when it has to wait, and a regular file (or a busy pipe) never makes it wait.
    unblock();
    block();
    if received().is_some() {
        return Ok(false);
    }
    // The thread's mask without the signals, for the wait.
    let mut waiting = signals::mask(MaskHow::Block, None);
    for sig in SIGNALS {
        waiting.remove(sig)?;
    }
    Ok(signals::poll_readable(fd, timeout, &waiting)? == Readable::Ready)
}
