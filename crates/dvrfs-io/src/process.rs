//! The process calls the mount daemon needs: a pipe to its parent, the fork that
//! makes the daemon, and the daemon's detached standard descriptors; the I/O
//! priority of the calling thread (`ioprio_set(2)`, for `bench --dir --ioprio`); and
//! the signal `dvrfs emulate --stop` sends its daemon.
//!
//! Contract: each function makes the system call it is named after and reports its
//! failure as `io::Error`. [`fork`] is the one with a precondition the compiler
//! cannot see (a child of a multi-threaded process may only call async-signal-safe
//! functions, not run Rust code that allocates): it checks it at run time and
//! refuses, with an error, a process that has more than one thread.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

/// A pipe: (read end, write end), both close-on-exec.
pub fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: pipe2(2) writes two descriptors into the array it is given.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: both descriptors were just created and are owned here only.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// Which side of a [`fork`] this is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Forked {
    /// The parent; the child's process id.
    Parent(libc::pid_t),
    Child,
}

/// Threads of the calling process (from `/proc/self/status`).
fn threads() -> io::Result<usize> {
    let status = std::fs::read_to_string("/proc/self/status")?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("Threads:"))
        .and_then(|n| n.trim().parse().ok())
        .ok_or_else(|| io::Error::other("/proc/self/status has no thread count"))
}

/// Forks the process. Only a process with a single thread may: then the child is a
/// full copy and may go on running Rust code. With more threads (or when the count
/// cannot be read) it refuses with an error and forks nothing.
pub fn fork() -> io::Result<Forked> {
    let n = threads()?;
    if n != 1 {
        return Err(io::Error::other(format!(
            "cannot fork a process with {n} threads (the child could deadlock on a lock another thread held)"
        )));
    }
    // SAFETY: the process has one thread (checked just above; only this thread
    // could start another), so the child inherits no lock held by a thread that
    // does not exist in it, and may run any code.
    match unsafe { libc::fork() } {
        -1 => Err(io::Error::last_os_error()),
        0 => Ok(Forked::Child),
        pid => Ok(Forked::Parent(pid)),
    }
}

/// Detaches a daemon: a new session (no controlling terminal), standard input and
/// output on `/dev/null`, standard error on `log`. Best effort, as daemons do: a
/// descriptor that cannot be replaced stays as it was.
pub fn detach_stdio(log: BorrowedFd<'_>) {
    // SAFETY: setsid takes no arguments; open gets a valid C string; dup2 and
    // close get descriptors that are open (`null` checked, `log` borrowed for the
    // call). Replacing 0, 1 and 2 closes whatever they were, which nothing in this
    // process owns as an `OwnedFd` (the standard streams are not).
    unsafe {
        libc::setsid();
        let null = libc::open(c"/dev/null".as_ptr(), libc::O_RDWR);
        if null >= 0 {
            libc::dup2(null, 0);
            libc::dup2(null, 1);
            libc::close(null);
        }
        libc::dup2(log.as_raw_fd(), 2);
    }
}

/// An I/O scheduling class of `ioprio_set(2)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IoClass {
    /// Real-time: served before every other class (needs `CAP_SYS_ADMIN` or
    /// `CAP_SYS_NICE`).
    RealTime,
    BestEffort,
    /// Served only when the disk has nothing else to do.
    Idle,
}

/// Sets the I/O priority of the calling thread: `class` at `level` (0, the highest,
/// to 7; the idle class has no levels). Schedulers that honour priorities (BFQ; the
/// mq-deadline of recent kernels) then serve the thread's requests by it. Fails with
/// `PermissionDenied` for the real-time class without the privilege.
pub fn set_io_priority(class: IoClass, level: u8) -> io::Result<()> {
    const IOPRIO_CLASS_SHIFT: u32 = 13;
    const IOPRIO_WHO_PROCESS: libc::c_long = 1;
    if level > 7 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "an I/O priority level is 0 to 7",
        ));
    }
    let (class, level) = match class {
        IoClass::RealTime => (1u32, level),
        IoClass::BestEffort => (2, level),
        IoClass::Idle => (3, 0),
    };
    let prio = (class << IOPRIO_CLASS_SHIFT) | level as u32;
    // SAFETY: ioprio_set takes three integers (who 0 with IOPRIO_WHO_PROCESS: the
    // calling thread) and touches no memory.
    let r = unsafe {
        libc::syscall(
            libc::SYS_ioprio_set,
            IOPRIO_WHO_PROCESS,
            0 as libc::c_long,
            prio as libc::c_long,
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Sends `sig` to the process `pid` (`kill(2)`); `Ok(false)` when no such process
/// exists (`ESRCH`).
pub fn signal(pid: libc::pid_t, sig: libc::c_int) -> io::Result<bool> {
    if pid <= 0 {
        // 0 and negative ids name process groups: never what a caller means here.
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "a process id must be positive",
        ));
    }
    // SAFETY: kill takes two integers and touches no memory of ours.
    if unsafe { libc::kill(pid, sig) } == 0 {
        return Ok(true);
    }
    let e = io::Error::last_os_error();
    if e.raw_os_error() == Some(libc::ESRCH) {
        return Ok(false);
    }
    Err(e)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signal_zero_finds_a_live_process_and_refuses_groups() {
        // Signal 0 checks that the process exists without sending anything.
        assert!(signal(std::process::id() as libc::pid_t, 0).unwrap());
        assert!(signal(0, 0).is_err(), "0 names a process group");
        assert!(signal(-1, 0).is_err(), "-1 names every process");
    }
}
