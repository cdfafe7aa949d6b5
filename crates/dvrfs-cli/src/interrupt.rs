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
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicI32, Ordering};
use std::time::Duration;

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
    for sig in SIGNALS {
        // SAFETY: a zeroed sigaction with a handler that only stores an atomic; the
        // signal numbers are valid. No SA_RESTART: a wait the signal interrupts
        // returns EINTR.
        unsafe {
            let mut act: libc::sigaction = std::mem::zeroed();
            act.sa_sigaction = on_signal as *const () as usize;
            act.sa_flags = libc::SA_RESETHAND;
            libc::sigemptyset(&mut act.sa_mask);
            libc::sigaction(sig, &act, std::ptr::null_mut());
        }
    }
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
fn signal_set() -> libc::sigset_t {
    // SAFETY: sigemptyset initializes the set, sigaddset adds valid signal numbers.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for sig in SIGNALS {
            libc::sigaddset(&mut set, sig);
        }
        set
    }
}

/// Changes the calling thread's mask (`SIG_BLOCK`, `SIG_UNBLOCK` or `SIG_SETMASK`
/// with `set`; with no set it stays as it is); returns the mask it had.
fn mask(how: libc::c_int, set: Option<&libc::sigset_t>) -> libc::sigset_t {
    let set = set.map_or(std::ptr::null(), |s| s as *const libc::sigset_t);
    // SAFETY: `set` is null or a valid set, `old` a set to fill, both living across
    // the call, which only concerns the calling thread.
    unsafe {
        let mut old: libc::sigset_t = std::mem::zeroed();
        libc::pthread_sigmask(how, set, &mut old);
        old
    }
}

/// Blocks the signals in the calling thread (and in every thread it starts from now
/// on): they stay pending until [`wait_readable`] or [`unblock`] takes them.
pub fn block() {
    mask(libc::SIG_BLOCK, Some(&signal_set()));
}

/// Unblocks the signals in the calling thread: a pending one is taken at once.
pub fn unblock() {
    mask(libc::SIG_UNBLOCK, Some(&signal_set()));
}

/// Runs `f` with the signals blocked in the calling thread, so that the threads it
/// starts never take them; then the calling thread's mask is as it was.
pub fn blocked<T>(f: impl FnOnce() -> T) -> T {
    let old = mask(libc::SIG_BLOCK, Some(&signal_set()));
    let out = f();
    mask(libc::SIG_SETMASK, Some(&old));
    out
}

/// Waits until `fd` has something to read (or its end) or `timeout` passes, taking
/// the signals while it waits (the calling thread blocks them otherwise, see
/// [`block`]). True when `fd` is ready; false when the time passed or a signal came
/// (then [`received`] says which, if it was one of ours).
pub fn wait_readable(fd: RawFd, timeout: Duration) -> io::Result<bool> {
    // A signal that came since the last wait is taken first: `ppoll` gives one only
    // when it has to wait, and a regular file (or a busy pipe) never makes it wait.
    unblock();
    block();
    if received().is_some() {
        return Ok(false);
    }
    let mut pfd = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    let ts = libc::timespec {
        tv_sec: timeout.as_secs() as libc::time_t,
        tv_nsec: timeout.subsec_nanos() as libc::c_long,
    };
    // The thread's mask without the signals, for the wait.
    let mut waiting = mask(libc::SIG_BLOCK, None);
    for sig in SIGNALS {
        // SAFETY: a valid set and signal number.
        unsafe { libc::sigdelset(&mut waiting, sig) };
    }
    // SAFETY: one valid pollfd, a valid timespec and a valid signal set, all living
    // across the call.
    let n = unsafe { libc::ppoll(&mut pfd, 1, &ts, &waiting) };
    match n {
        -1 => match io::Error::last_os_error() {
            e if e.kind() == io::ErrorKind::Interrupted => Ok(false),
            e => Err(e),
        },
        0 => Ok(false),
        // POLLIN, or POLLHUP/POLLERR/POLLNVAL: the read says which.
        _ => Ok(true),
    }
}
