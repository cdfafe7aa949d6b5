//! Signals for the command-line tool: catching a stop request, masking it in a
//! thread, and waiting for it (`sigwait`) or for input with it unmasked (`ppoll`).
//!
//! Contract: every function here acts on the calling thread's mask or on the
//! process's dispositions exactly as the system call it wraps, and reports a failure
//! of that call as `io::Error`; none keeps state of its own. The handler given to
//! [`catch`] runs in signal context: it must be async-signal-safe (store an atomic,
//! nothing more).

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::time::Duration;

/// A set of signals (`sigset_t`), built from signal numbers.
#[derive(Clone, Copy)]
pub struct SignalSet(libc::sigset_t);

impl SignalSet {
    /// The set of `signals`; an invalid signal number is an error.
    pub fn of(signals: &[libc::c_int]) -> io::Result<SignalSet> {
        let mut set = SignalSet::empty();
        for &sig in signals {
            set.add(sig)?;
        }
        Ok(set)
    }

    fn empty() -> SignalSet {
        // SAFETY: `sigemptyset` initializes the zeroed set it is given.
        unsafe {
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            SignalSet(set)
        }
    }

    /// Adds `sig` (an error if it is not a valid signal number).
    pub fn add(&mut self, sig: libc::c_int) -> io::Result<()> {
        // SAFETY: `self.0` is an initialized set; the call only writes it.
        check(unsafe { libc::sigaddset(&mut self.0, sig) })
    }

    /// Removes `sig` (an error if it is not a valid signal number).
    pub fn remove(&mut self, sig: libc::c_int) -> io::Result<()> {
        // SAFETY: as in `add`.
        check(unsafe { libc::sigdelset(&mut self.0, sig) })
    }
}

fn check(r: libc::c_int) -> io::Result<()> {
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// How [`mask`] changes the calling thread's signal mask.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MaskHow {
    /// Add the set to the mask (`SIG_BLOCK`).
    Block,
    /// Take the set out of the mask (`SIG_UNBLOCK`).
    Unblock,
    /// The mask becomes the set (`SIG_SETMASK`).
    Set,
}

/// Changes the calling thread's signal mask (and so that of the threads it starts
/// from now on) as `how` says with `set`; with no set the mask stays as it is.
/// Returns the mask it had.
pub fn mask(how: MaskHow, set: Option<&SignalSet>) -> SignalSet {
    let how = match how {
        MaskHow::Block => libc::SIG_BLOCK,
        MaskHow::Unblock => libc::SIG_UNBLOCK,
        MaskHow::Set => libc::SIG_SETMASK,
    };
    let set = set.map_or(std::ptr::null(), |s| &s.0 as *const libc::sigset_t);
    let mut old = SignalSet::empty();
    // SAFETY: `set` is null or a valid set, `old` a set to fill, both living across
    // the call, which only concerns the calling thread. `how` is one of the three
    // valid values, so the call cannot fail.
    unsafe { libc::pthread_sigmask(how, set, &mut old.0) };
    old
}

/// From now on each signal of `signals` runs `handler` instead of its default
/// action, once: the disposition goes back to the default as the handler starts
/// (`SA_RESETHAND`), so a second signal acts as usual. Without `SA_RESTART`, a
/// system call the signal interrupts fails with `EINTR` instead of going on.
/// `handler` runs in signal context and must be async-signal-safe.
pub fn catch(signals: &[libc::c_int], handler: extern "C" fn(libc::c_int)) -> io::Result<()> {
    for &sig in signals {
        // SAFETY: a zeroed `sigaction` is valid; its mask is initialized by
        // `sigemptyset`; the handler is an `extern "C" fn(c_int)`, the type the
        // kernel calls without `SA_SIGINFO`. `sigaction` reads `act` only.
        let r = unsafe {
            let mut act: libc::sigaction = std::mem::zeroed();
            act.sa_sigaction = handler as *const () as usize;
            act.sa_flags = libc::SA_RESETHAND;
            libc::sigemptyset(&mut act.sa_mask);
            libc::sigaction(sig, &act, std::ptr::null_mut())
        };
        check(r)?;
    }
    Ok(())
}

/// Waits for one of the signals in `set` (which the calling thread must block, or
/// the signal acts first) and returns its number (`sigwait`).
pub fn wait(set: &SignalSet) -> io::Result<libc::c_int> {
    let mut sig = 0;
    // SAFETY: `set` is a valid set; `sigwait` writes the signal number to `sig`.
    let r = unsafe { libc::sigwait(&set.0, &mut sig) };
    if r != 0 {
        return Err(io::Error::from_raw_os_error(r));
    }
    Ok(sig)
}

/// What [`poll_readable`] saw.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Readable {
    /// `fd` has something to read, its end, or an error the read will report.
    Ready,
    /// `timeout` passed.
    TimedOut,
    /// A signal came (`EINTR`).
    Interrupted,
}

/// Waits until `fd` is readable or `timeout` passes, with the thread's mask replaced
/// by `mask` for the wait only, atomically (`ppoll`): a signal `mask` leaves
/// unblocked and pending or arriving cuts the wait short.
pub fn poll_readable(
    fd: BorrowedFd<'_>,
    timeout: Duration,
    mask: &SignalSet,
) -> io::Result<Readable> {
    let mut pfd = libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    let ts = libc::timespec {
        tv_sec: libc::time_t::try_from(timeout.as_secs()).unwrap_or(libc::time_t::MAX),
        tv_nsec: timeout.subsec_nanos() as libc::c_long,
    };
    // SAFETY: one valid pollfd (its descriptor borrowed for the call), a valid
    // timespec and a valid signal set, all living across the call.
    let n = unsafe { libc::ppoll(&mut pfd, 1, &ts, &mask.0) };
    match n {
        -1 => match io::Error::last_os_error() {
            e if e.kind() == io::ErrorKind::Interrupted => Ok(Readable::Interrupted),
            e => Err(e),
        },
        0 => Ok(Readable::TimedOut),
        // POLLIN, or POLLHUP/POLLERR/POLLNVAL: the read says which.
        _ => Ok(Readable::Ready),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_invalid_signal_number_is_an_error_not_a_panic() {
        assert!(SignalSet::of(&[libc::SIGTERM]).is_ok());
        assert!(SignalSet::of(&[100_000]).is_err());
    }

    #[test]
    fn mask_returns_the_mask_it_replaced() {
        let set = SignalSet::of(&[libc::SIGUSR2]).unwrap();
        let old = mask(MaskHow::Block, Some(&set));
        let now = mask(MaskHow::Set, Some(&old));
        // SAFETY: `now.0` is an initialized set.
        assert_eq!(unsafe { libc::sigismember(&now.0, libc::SIGUSR2) }, 1);
    }
}
