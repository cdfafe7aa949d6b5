//! The C API of dvrfs: the runtime's deadline-aware asynchronous I/O (AVFS 3.2.3,
//! Table 1: `dvrfs_aio_start`, `dvrfs_aio_check`, `dvrfs_aio_cancel`,
//! `dvrfs_aio_poll`, with an `aio_deadline` field), files, and stream reservations,
//! for C programs. The header `dvrfs.h` is generated from this file by cbindgen at
//! build time (`target/<profile>/include/dvrfs.h`, with `dvrfs.pc` for pkg-config).
//!
//! Rules every function keeps:
//! - Errors are negative errno-style codes (`-ENOENT`, `-ENOSPC`, `-ETIME` for a read
//!   that missed its deadline, `-EBUSY` for a refused stream, ...); `dvrfs_strerror`
//!   names a code, and `dvrfs_last_error` gives the full message of this thread's last
//!   failure (what was wrong, as the command-line tool would say it).
//! - A handle that was never returned by `dvrfs_open`, or was closed, a NULL pointer,
//!   a buffer not aligned to `DVRFS_ALIGN` bytes for asynchronous I/O, an unknown file
//!   or stream number: an error (`-EBADF`, `-EFAULT`, `-EINVAL`), never a crash. No
//!   Rust panic crosses the boundary: one becomes `-EIO` with a message.
//! - An asynchronous control block and its buffer belong to dvrfs from a successful
//!   `dvrfs_aio_start` until `dvrfs_aio_check` reports it done: the caller must keep
//!   both alive and untouched meanwhile (as with POSIX aio).
//! - Deadlines are absolute `CLOCK_MONOTONIC` times in nanoseconds (`dvrfs_now_ns`);
//!   0 means best effort. A read that cannot meet its deadline fails with `-ETIME`; a
//!   write is never dropped and reports `aio_late = 1` when it finished late.
//! - Everything is safe to call from many threads of one process.
//! - A volume that `dvrfs mount` holds is used through the mount's daemon, over its
//!   socket (`backend`, crate `dvrfs-remote`): same functions, codes and deadlines.

#![allow(non_camel_case_types)]

mod backend;

use dvrfs_core::alloc::Ino;
use dvrfs_core::engine::{ExternalBuf, StreamDir, StreamSpec};
use dvrfs_core::{Error as CoreError, IoBuf, Op, Output};
use dvrfs_remote::Handle;
use dvrfs_runtime::{RuntimeError, Ticket};
use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::Duration;

/// Alignment of an asynchronous I/O buffer (address), bytes.
pub const DVRFS_ALIGN: u32 = 4096;
/// `dvrfs_aiocb.aio_lio_opcode`: read.
pub const DVRFS_AIO_READ: c_int = 0;
/// `dvrfs_aiocb.aio_lio_opcode`: write.
pub const DVRFS_AIO_WRITE: c_int = 1;
/// `dvrfs_file_open` flags: create the file (it must not exist).
pub const DVRFS_O_CREAT: c_int = 1;
/// `dvrfs_stream_spec.direction`: playback.
pub const DVRFS_STREAM_READ: c_int = 0;
/// `dvrfs_stream_spec.direction`: recording.
pub const DVRFS_STREAM_WRITE: c_int = 1;

/// An open volume (opaque).
pub struct dvrfs {
    vol: Handle,
    files: Mutex<Files>,
    /// Tickets of control blocks started and not yet reported done.
    running: Mutex<HashSet<u64>>,
}

#[derive(Default)]
struct Files {
    next: c_int,
    by_fd: HashMap<c_int, Ino>,
}

/// How to open a volume (may be NULL: read-write, no device model, admission on a
/// bandwidth of 800 Mbit/s).
#[repr(C)]
pub struct dvrfs_options {
    /// Non-zero: open read-only (a shared lock; several readers may open it).
    pub read_only: c_int,
    /// NULL, or a built-in disk model name (`avfs-250g`, `nvr-8t`, `laptop-5400`) or
    /// the path of a model JSON file: the device is emulated on that model and streams
    /// are admitted on it.
    pub device_model: *const c_char,
    /// Admission bandwidth of a device without a model, bits per second (0: 800e6).
    pub bandwidth_bps: f64,
}

/// An asynchronous request (AVFS Table 1).
#[repr(C)]
pub struct dvrfs_aiocb {
    /// A file number from `dvrfs_file_open`.
    pub aio_fildes: c_int,
    /// `DVRFS_AIO_READ` or `DVRFS_AIO_WRITE`.
    pub aio_lio_opcode: c_int,
    /// Byte offset in the file.
    pub aio_offset: u64,
    /// The buffer: `DVRFS_ALIGN`-aligned, `aio_nbytes` long.
    pub aio_buf: *mut c_void,
    pub aio_nbytes: u64,
    /// Absolute `CLOCK_MONOTONIC` deadline, ns (`dvrfs_now_ns`); 0: best effort.
    pub aio_deadline: i64,
    /// Out, once done: bytes read or written, or a negative error code.
    pub aio_result: i64,
    /// Out, once done: 1 if it had a deadline and finished after it.
    pub aio_late: c_int,
    /// dvrfs's own: do not touch.
    pub aio_private: u64,
}

/// A stream reservation (ABISS 2.2): rate, request size, buffer.
#[repr(C)]
pub struct dvrfs_stream_spec {
    /// `DVRFS_STREAM_READ` or `DVRFS_STREAM_WRITE`.
    pub direction: c_int,
    /// Bits per second.
    pub rate_bps: f64,
    /// Bytes per disk request (a multiple of 4096; 0: 512 KiB).
    pub request_bytes: u64,
    /// Buffer bytes (0: dvrfs chooses, at least a second of slack).
    pub buffer_bytes: u64,
    /// Recording: bytes to hold at admission (0: none held).
    pub reserve_bytes: u64,
    /// Playback: where in the file to start.
    pub start_bytes: u64,
    /// Recording: the longest an accepted byte may stay off the disk before it is
    /// committed, ns (0: the volume's commit interval; never shorter than it).
    pub durable_ns: u64,
}

/// What an admitted stream got.
#[repr(C)]
pub struct dvrfs_stream_info {
    pub depth: u32,
    pub buffer_bytes: u64,
    /// How long after it is issued each of the stream's requests is due, ns.
    pub slack_ns: u64,
    /// The device's real-time share in use with this stream (1.0 = full).
    pub load: f64,
}

/// How a stream fared.
#[repr(C)]
pub struct dvrfs_stream_stats {
    pub requests: u64,
    /// Requests completed after their deadline.
    pub late: u64,
    /// Times the application had to wait for data or buffer room.
    pub stalls: u64,
    /// Smallest deadline minus completion, ns (INT64_MAX if no request yet).
    pub min_margin_ns: i64,
    pub app_bytes: u64,
}

// ---- errors ----

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

fn set_last(msg: &str) {
    let c = CString::new(msg.replace('\0', " ")).unwrap_or_default();
    LAST_ERROR.with(|l| *l.borrow_mut() = c);
}

/// A failure: its code (negative errno) and message.
struct Fail(c_int, String);

impl From<CoreError> for Fail {
    fn from(e: CoreError) -> Fail {
        Fail(-e.errno(), e.to_string())
    }
}

impl From<RuntimeError> for Fail {
    fn from(e: RuntimeError) -> Fail {
        match e {
            RuntimeError::Engine(e) => e.into(),
            // The library's own words send a Rust caller to `create_image`, which C
            // does not have: the `dvrfs` command makes a volume.
            RuntimeError::Open(dvrfs_io::OpenError::NotFound { path }) => Fail(
                -libc::ENOENT,
                format!(
                    "{} does not exist: give dvrfs_open the image file or block device that holds the volume; make a new image with the dvrfs command, `dvrfs mkfs {} --size 64G`",
                    path.display(),
                    path.display()
                ),
            ),
            RuntimeError::Open(e) => {
                let code = match &e {
                    dvrfs_io::OpenError::NotFound { .. } => libc::ENOENT,
                    dvrfs_io::OpenError::InUse { .. } | dvrfs_io::OpenError::Busy { .. } => {
                        libc::EBUSY
                    }
                    dvrfs_io::OpenError::PermissionDenied { .. } => libc::EACCES,
                    dvrfs_io::OpenError::ReadOnly { .. } => libc::EROFS,
                    _ => libc::EINVAL,
                };
                Fail(-code, e.to_string())
            }
            RuntimeError::Io(e) => Fail(-e.raw_os_error().unwrap_or(libc::EIO), e.to_string()),
            RuntimeError::Stopped(why) => Fail(-libc::EIO, format!("dvrfs has stopped: {why}")),
            RuntimeError::UnknownTicket(id) => Fail(
                -libc::EINVAL,
                format!("request {id} is not running here (already reported done?)"),
            ),
        }
    }
}

fn fail(code: c_int, msg: impl Into<String>) -> Fail {
    Fail(-code, msg.into())
}

/// Runs `f`, turning a failure or a panic into a negative code (message kept).
fn guard(f: impl FnOnce() -> Result<i64, Fail>) -> i64 {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(v)) => v,
        Ok(Err(Fail(code, msg))) => {
            set_last(&msg);
            code as i64
        }
        Err(p) => {
            let what = p
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| p.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown".into());
            set_last(&format!(
                "internal error in dvrfs (a bug; please report it): {what}"
            ));
            -(libc::EIO as i64)
        }
    }
}

fn guard_int(f: impl FnOnce() -> Result<i64, Fail>) -> c_int {
    guard(f) as c_int
}

// ---- handles ----

/// Addresses of the open handles: a pointer is dereferenced only if it is one.
fn handles() -> MutexGuard<'static, HashSet<usize>> {
    static H: OnceLock<Mutex<HashSet<usize>>> = OnceLock::new();
    H.get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner())
}

/// The volume behind `fs`, if it is an open handle. The returned `Arc` keeps it alive
/// while the call runs, even if another thread closes it meanwhile.
fn volume(fs: *const dvrfs) -> Result<Arc<dvrfs>, Fail> {
    if fs.is_null() {
        return Err(fail(libc::EFAULT, "the dvrfs handle is NULL"));
    }
    let registry = handles();
    if !registry.contains(&(fs as usize)) {
        return Err(fail(
            libc::EBADF,
            "not an open dvrfs handle (never opened, or already closed)",
        ));
    }
    // SAFETY: `fs` is in the registry, so it came from `Arc::into_raw` in `dvrfs_open`
    // and the registry's reference has not been given back: `dvrfs_close` removes it
    // under the lock held here before giving it back. The count is raised under that
    // lock, so the value outlives this call whatever another thread does.
    unsafe {
        Arc::increment_strong_count(fs);
    }
    drop(registry);
    // SAFETY: the reference counted just above.
    Ok(unsafe { Arc::from_raw(fs) })
}

fn cstr<'a>(p: *const c_char, what: &str) -> Result<&'a str, Fail> {
    if p.is_null() {
        return Err(fail(libc::EFAULT, format!("{what} is NULL")));
    }
    // SAFETY: non-NULL and, by the API's contract, a NUL-terminated string.
    unsafe { CStr::from_ptr(p) }
        .to_str()
        .map_err(|_| fail(libc::EINVAL, format!("{what} is not UTF-8")))
}

impl dvrfs {
    fn ino(&self, fd: c_int) -> Result<Ino, Fail> {
        self.files
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .by_fd
            .get(&fd)
            .copied()
            .ok_or_else(|| fail(libc::EBADF, format!("file number {fd} is not open")))
    }
}

/// The current `CLOCK_MONOTONIC` time, ns: the clock of `aio_deadline`.
#[no_mangle]
pub extern "C" fn dvrfs_now_ns() -> i64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: writes one timespec we own.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec * 1_000_000_000 + ts.tv_nsec
}

/// Opens the dvrfs volume on `target` (an image file or block device) and stores a
/// handle in `*out`. `opts` may be NULL. Returns 0 or a negative error code.
/// While `dvrfs mount` holds the volume, the handle works through the mount's daemon
/// (its socket): every function works as on a volume opened here, deadlines
/// included, with the daemon's device and admission (`opts` does not apply) and the
/// mount's permission checks for this process's user (`-EACCES`).
///
/// # Safety
/// `target` is a NUL-terminated string; `opts` is NULL or points to a valid
/// `dvrfs_options`; `out` points to writable storage for a pointer.
#[no_mangle]
pub unsafe extern "C" fn dvrfs_open(
    target: *const c_char,
    opts: *const dvrfs_options,
    out: *mut *mut dvrfs,
) -> c_int {
    guard_int(|| {
        if out.is_null() {
            return Err(fail(libc::EFAULT, "the handle's destination is NULL"));
        }
        let path = cstr(target, "the target path")?;
        // SAFETY: NULL or a valid dvrfs_options, by contract.
        let o = unsafe { opts.as_ref() };
        let vol = backend::open(path, o)?;
        let fs = Arc::new(dvrfs {
            vol,
            files: Mutex::new(Files::default()),
            running: Mutex::new(HashSet::new()),
        });
        let p = Arc::into_raw(fs) as *mut dvrfs;
        handles().insert(p as usize);
        // SAFETY: `out` is non-NULL and writable by contract.
        unsafe { *out = p };
        Ok(0)
    })
}

/// Commits everything, marks the journal clean and closes the handle; operations still
/// running finish first. Returns 0 or a negative error code; the handle is gone either
/// way (a second close is `-EBADF`).
///
/// # Safety
/// `fs` is any pointer: only handles from `dvrfs_open` are used.
#[no_mangle]
pub unsafe extern "C" fn dvrfs_close(fs: *mut dvrfs) -> c_int {
    guard_int(|| {
        let v = volume(fs)?;
        if !handles().remove(&(fs as usize)) {
            return Err(fail(libc::EBADF, "the dvrfs handle was closed meanwhile"));
        }
        // SAFETY: the registry held this reference (from `Arc::into_raw`); it was just
        // removed, so it is given back exactly once.
        drop(unsafe { Arc::from_raw(fs as *const dvrfs) });
        // If another thread is inside a call on it, the last reference closes it
        // (the runtime commits and closes on drop).
        if let Ok(d) = Arc::try_unwrap(v) {
            d.vol.close()?;
        }
        Ok(0)
    })
}

fn resolve_parent(d: &dvrfs, path: &str) -> Result<(Ino, Vec<u8>), Fail> {
    Ok(d.vol.resolve_parent(path)?)
}

/// Opens the file at `path` (with `DVRFS_O_CREAT`: creates it, mode `mode`; it must
/// not exist) and returns its file number (>= 0) or a negative error code.
///
/// # Safety
/// `fs` is any pointer (checked); `path` is a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn dvrfs_file_open(
    fs: *mut dvrfs,
    path: *const c_char,
    flags: c_int,
    mode: u32,
) -> c_int {
    guard_int(|| {
        let d = volume(fs)?;
        let path = cstr(path, "the path")?;
        let ino = if flags & DVRFS_O_CREAT != 0 {
            let (parent, name) = resolve_parent(&d, path)?;
            let op = Op::Create {
                parent,
                name,
                perm: mode & 0o7777,
                uid: 0,
                gid: 0,
            };
            match d.vol.run(op, None, 0)? {
                Output::Ino(i) => i,
                o => return Err(fail(libc::EIO, format!("create returned {o:?}"))),
            }
        } else {
            let ino = d.vol.resolve(path)?;
            let kind = d.vol.stat(ino)?.kind;
            if kind != dvrfs_core::format::dir::Kind::File {
                return Err(fail(libc::EISDIR, format!("{path} is not a regular file")));
            }
            ino
        };
        let mut f = d.files.lock().unwrap_or_else(|e| e.into_inner());
        let fd = f.next;
        f.next += 1;
        f.by_fd.insert(fd, ino);
        Ok(fd as i64)
    })
}

/// Closes a file number. Returns 0 or a negative error code.
///
/// # Safety
/// `fs` is any pointer (checked).
#[no_mangle]
pub unsafe extern "C" fn dvrfs_file_close(fs: *mut dvrfs, fd: c_int) -> c_int {
    guard_int(|| {
        let d = volume(fs)?;
        let ino = d.ino(fd)?;
        d.files
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .by_fd
            .remove(&fd);
        d.vol.run(Op::CloseFile { ino }, None, 0)?;
        Ok(0)
    })
}

/// A file's size in bytes, or a negative error code.
///
/// # Safety
/// `fs` is any pointer (checked).
#[no_mangle]
pub unsafe extern "C" fn dvrfs_file_size(fs: *mut dvrfs, fd: c_int) -> i64 {
    guard(|| {
        let d = volume(fs)?;
        let ino = d.ino(fd)?;
        let size = d.vol.stat(ino)?.size_bytes;
        Ok(size as i64)
    })
}

/// Removes the file at `path`. Returns 0 or a negative error code.
///
/// # Safety
/// `fs` is any pointer (checked); `path` is a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn dvrfs_unlink(fs: *mut dvrfs, path: *const c_char) -> c_int {
    guard_int(|| {
        let d = volume(fs)?;
        let (parent, name) = resolve_parent(&d, cstr(path, "the path")?)?;
        d.vol.run(Op::Unlink { parent, name }, None, 0)?;
        Ok(0)
    })
}

/// Makes everything completed so far durable. Returns 0 or a negative error code.
///
/// # Safety
/// `fs` is any pointer (checked).
#[no_mangle]
pub unsafe extern "C" fn dvrfs_fsync(fs: *mut dvrfs) -> c_int {
    guard_int(|| {
        let d = volume(fs)?;
        // Due now (a commit without a deadline waits most of the commit interval).
        d.vol.run(Op::Fsync, Some(std::time::Instant::now()), 0)?;
        Ok(0)
    })
}

// ---- asynchronous I/O ----

/// The application's buffer, lent for one request.
struct CBuf {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: the buffer is the caller's for the request's lifetime and touched only by
// the dispatcher thread meanwhile (the API's contract).
unsafe impl Send for CBuf {}

impl ExternalBuf for CBuf {
    fn bytes(&self) -> &[u8] {
        // SAFETY: `ptr` is non-NULL, aligned and `len` bytes long, and stays valid and
        // untouched by the caller until the request is reported done (the contract of
        // `dvrfs_aio_start`).
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
    fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `bytes`; only the engine writes it meanwhile.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

/// Starts the request `cb` describes. Returns 0 (then `cb` and its buffer are dvrfs's
/// until `dvrfs_aio_check` reports it done) or a negative error code (nothing started).
///
/// # Safety
/// `fs` is any pointer (checked); `cb` is NULL or a valid, writable control block whose
/// `aio_buf` holds `aio_nbytes` bytes.
#[no_mangle]
pub unsafe extern "C" fn dvrfs_aio_start(fs: *mut dvrfs, cb: *mut dvrfs_aiocb) -> c_int {
    guard_int(|| {
        let d = volume(fs)?;
        // SAFETY: NULL or valid and writable, by contract.
        let cb = unsafe { cb.as_mut() }
            .ok_or_else(|| fail(libc::EFAULT, "the control block is NULL"))?;
        if cb.aio_buf.is_null() {
            return Err(fail(libc::EFAULT, "aio_buf is NULL"));
        }
        if !(cb.aio_buf as usize).is_multiple_of(DVRFS_ALIGN as usize) {
            return Err(fail(
                libc::EINVAL,
                format!(
                    "aio_buf {:p} is not aligned to {DVRFS_ALIGN} bytes (allocate it with posix_memalign or aligned_alloc)",
                    cb.aio_buf
                ),
            ));
        }
        let len = usize::try_from(cb.aio_nbytes)
            .ok()
            .filter(|&n| n > 0 && n <= 1 << 30)
            .ok_or_else(|| {
                fail(
                    libc::EINVAL,
                    format!("aio_nbytes {} is not 1 to 1 GiB", cb.aio_nbytes),
                )
            })?;
        let ino = d.ino(cb.aio_fildes)?;
        let buf = IoBuf::External(Box::new(CBuf {
            ptr: cb.aio_buf.cast(),
            len,
        }));
        let op = match cb.aio_lio_opcode {
            DVRFS_AIO_READ => Op::Read {
                ino,
                offset: cb.aio_offset,
                buf,
            },
            DVRFS_AIO_WRITE => Op::Write {
                ino,
                offset: cb.aio_offset,
                data: buf,
            },
            other => {
                return Err(fail(
                    libc::EINVAL,
                    format!("aio_lio_opcode {other} is neither DVRFS_AIO_READ nor DVRFS_AIO_WRITE"),
                ))
            }
        };
        let t = backend::start_aio(&d.vol, op, cb.aio_deadline, cb.aio_fildes as u32)?;
        d.running
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(t.0);
        cb.aio_private = t.0;
        cb.aio_result = -(libc::EINPROGRESS as i64);
        cb.aio_late = 0;
        Ok(0)
    })
}

/// Checks request `cb`: 1 when it is done (`aio_result`, `aio_late` set; the block and
/// buffer are the caller's again), 0 while it runs (with `wait` non-zero: waits until
/// it is done), or a negative error code (`cb` was not started here, or was already
/// reported done).
///
/// # Safety
/// `fs` is any pointer (checked); `cb` is NULL or a valid, writable control block.
#[no_mangle]
pub unsafe extern "C" fn dvrfs_aio_check(
    fs: *mut dvrfs,
    cb: *mut dvrfs_aiocb,
    wait: c_int,
) -> c_int {
    guard_int(|| {
        let d = volume(fs)?;
        // SAFETY: NULL or valid and writable, by contract.
        let cb = unsafe { cb.as_mut() }
            .ok_or_else(|| fail(libc::EFAULT, "the control block is NULL"))?;
        let id = cb.aio_private;
        if !d
            .running
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .contains(&id)
        {
            return Err(fail(
                libc::EINVAL,
                "this control block is not running here (never started, or already reported done)",
            ));
        }
        let r = d.vol.check(Ticket(id), wait != 0);
        let (result, late) = match r {
            Ok(None) => return Ok(0),
            Ok(Some(done)) => {
                let n = match &done.output {
                    Output::Read { bytes, .. } => *bytes as i64,
                    Output::Write { data } => data.len() as i64,
                    _ => 0,
                };
                (n, done.late)
            }
            Err(RuntimeError::Engine(e)) => {
                set_last(&e.to_string());
                (
                    -(e.errno() as i64),
                    matches!(e, CoreError::DeadlineMissed { .. }),
                )
            }
            Err(e) => return Err(e.into()),
        };
        d.running
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&id);
        cb.aio_result = result;
        cb.aio_late = late as c_int;
        Ok(1)
    })
}

/// Withdraws request `cb` if it has not reached the device (it then completes with
/// `-ECANCELED`, reported by `dvrfs_aio_check`). Returns 0, or a negative error code
/// (`-EBUSY`: too late to cancel; it completes normally).
///
/// # Safety
/// `fs` is any pointer (checked); `cb` is NULL or a valid control block.
#[no_mangle]
pub unsafe extern "C" fn dvrfs_aio_cancel(fs: *mut dvrfs, cb: *mut dvrfs_aiocb) -> c_int {
    guard_int(|| {
        let d = volume(fs)?;
        // SAFETY: NULL or valid, by contract.
        let cb = unsafe { cb.as_ref() }
            .ok_or_else(|| fail(libc::EFAULT, "the control block is NULL"))?;
        if !d
            .running
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .contains(&cb.aio_private)
        {
            return Err(fail(libc::EINVAL, "this control block is not running here"));
        }
        d.vol.cancel(Ticket(cb.aio_private))?;
        Ok(0)
    })
}

/// Waits until at least one of the `n` requests in `cbs` is done or `timeout_ns`
/// passes (negative: no limit; 0: just look). Returns how many are done (then
/// `dvrfs_aio_check` each), or a negative error code.
///
/// # Safety
/// `fs` is any pointer (checked); `cbs` points to `n` pointers to valid control blocks.
#[no_mangle]
pub unsafe extern "C" fn dvrfs_aio_poll(
    fs: *mut dvrfs,
    cbs: *const *const dvrfs_aiocb,
    n: c_int,
    timeout_ns: i64,
) -> c_int {
    guard_int(|| {
        let d = volume(fs)?;
        if cbs.is_null() || n <= 0 {
            return Err(fail(libc::EINVAL, "give at least one control block"));
        }
        // SAFETY: `cbs` holds `n` pointers, by contract.
        let list = unsafe { std::slice::from_raw_parts(cbs, n as usize) };
        let mut tickets = Vec::with_capacity(list.len());
        {
            let running = d.running.lock().unwrap_or_else(|e| e.into_inner());
            for (i, &p) in list.iter().enumerate() {
                // SAFETY: each is NULL or a valid control block, by contract.
                let cb = unsafe { p.as_ref() }
                    .ok_or_else(|| fail(libc::EFAULT, format!("control block {i} is NULL")))?;
                if !running.contains(&cb.aio_private) {
                    return Err(fail(
                        libc::EINVAL,
                        format!("control block {i} is not running here"),
                    ));
                }
                tickets.push(Ticket(cb.aio_private));
            }
        }
        let timeout = (timeout_ns >= 0).then(|| Duration::from_nanos(timeout_ns as u64));
        Ok(d.vol.poll(&tickets, timeout)?.len() as i64)
    })
}

// ---- streams ----

/// Opens a stream reservation on file `fd`: admitted (returns a stream number >= 0 and
/// fills `*info` when it is not NULL), or refused (`-EBUSY`: the device's real-time
/// share cannot take it, `dvrfs_last_error` says what is left; `-ENOSPC`: a recording's
/// `reserve_bytes` do not fit).
///
/// # Safety
/// `fs` is any pointer (checked); `spec` is NULL or valid; `info` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn dvrfs_stream_open(
    fs: *mut dvrfs,
    fd: c_int,
    spec: *const dvrfs_stream_spec,
    info: *mut dvrfs_stream_info,
) -> c_int {
    guard_int(|| {
        let d = volume(fs)?;
        let ino = d.ino(fd)?;
        // SAFETY: NULL or valid, by contract.
        let s = unsafe { spec.as_ref() }
            .ok_or_else(|| fail(libc::EFAULT, "the stream spec is NULL"))?;
        let dir = match s.direction {
            DVRFS_STREAM_READ => StreamDir::Read,
            DVRFS_STREAM_WRITE => StreamDir::Write,
            other => {
                return Err(fail(
                    libc::EINVAL,
                    format!(
                        "direction {other} is neither DVRFS_STREAM_READ nor DVRFS_STREAM_WRITE"
                    ),
                ))
            }
        };
        let got = d.vol.open_stream(
            ino,
            StreamSpec {
                dir,
                rate_bps: s.rate_bps,
                request_bytes: if s.request_bytes == 0 {
                    512 << 10
                } else {
                    s.request_bytes
                },
                buffer_bytes: (s.buffer_bytes > 0).then_some(s.buffer_bytes),
                reserve_bytes: s.reserve_bytes,
                start_bytes: s.start_bytes,
                durable_ns: (s.durable_ns > 0).then_some(s.durable_ns),
            },
        )?;
        // SAFETY: NULL or writable, by contract.
        if let Some(out) = unsafe { info.as_mut() } {
            *out = dvrfs_stream_info {
                depth: got.depth,
                buffer_bytes: got.buffer_bytes,
                slack_ns: got.slack_ns,
                load: got.load,
            };
        }
        Ok(got.id as i64)
    })
}

/// Reads up to `len` bytes from a playback stream into `buf` (any alignment), at most
/// at the stream's rate. Returns the bytes read (0 at the end of the file) or a negative
/// error code.
///
/// # Safety
/// `fs` is any pointer (checked); `buf` holds `len` writable bytes.
#[no_mangle]
pub unsafe extern "C" fn dvrfs_stream_read(
    fs: *mut dvrfs,
    sid: c_int,
    buf: *mut c_void,
    len: usize,
) -> i64 {
    guard(|| {
        let d = volume(fs)?;
        if buf.is_null() {
            return Err(fail(libc::EFAULT, "the buffer is NULL"));
        }
        let op = Op::StreamRead {
            stream: sid as u32,
            buf: IoBuf::zeroed(len),
        };
        match d.vol.run(op, None, 0)? {
            Output::Read { buf: b, bytes } => {
                let src = b.bytes().ok_or_else(|| fail(libc::EIO, "no bytes"))?;
                // SAFETY: `buf` holds `len >= bytes` writable bytes, by contract.
                unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), buf.cast(), bytes) };
                Ok(bytes as i64)
            }
            o => Err(fail(libc::EIO, format!("stream read returned {o:?}"))),
        }
    })
}

/// Writes `len` bytes from `buf` (any alignment) to a recording stream, at most at its
/// rate (the call returns once they are in the stream's buffer). Returns `len` or a
/// negative error code.
///
/// # Safety
/// `fs` is any pointer (checked); `buf` holds `len` readable bytes.
#[no_mangle]
pub unsafe extern "C" fn dvrfs_stream_write(
    fs: *mut dvrfs,
    sid: c_int,
    buf: *const c_void,
    len: usize,
) -> i64 {
    guard(|| {
        let d = volume(fs)?;
        if buf.is_null() {
            return Err(fail(libc::EFAULT, "the buffer is NULL"));
        }
        // SAFETY: `buf` holds `len` readable bytes, by contract.
        let data = IoBuf::from_slice(unsafe { std::slice::from_raw_parts(buf.cast::<u8>(), len) });
        d.vol.run(
            Op::StreamWrite {
                stream: sid as u32,
                data,
            },
            None,
            0,
        )?;
        Ok(len as i64)
    })
}

/// Closes a stream (a recording's last requests are written and waited for) and fills
/// `*stats` when it is not NULL. Returns 0 or a negative error code.
///
/// # Safety
/// `fs` is any pointer (checked); `stats` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn dvrfs_stream_close(
    fs: *mut dvrfs,
    sid: c_int,
    stats: *mut dvrfs_stream_stats,
) -> c_int {
    guard_int(|| {
        let d = volume(fs)?;
        match d.vol.run(Op::StreamClose { stream: sid as u32 }, None, 0)? {
            Output::StreamClosed(s) => {
                // SAFETY: NULL or writable, by contract.
                if let Some(out) = unsafe { stats.as_mut() } {
                    *out = dvrfs_stream_stats {
                        requests: s.requests,
                        late: s.late,
                        stalls: s.stalls,
                        min_margin_ns: s.min_margin_ns.unwrap_or(i64::MAX),
                        app_bytes: s.app_bytes,
                    };
                }
                Ok(0)
            }
            o => Err(fail(libc::EIO, format!("stream close returned {o:?}"))),
        }
    })
}

// ---- messages ----

/// A short description of error code `err` (negative or positive errno). The string is
/// static.
#[no_mangle]
pub extern "C" fn dvrfs_strerror(err: c_int) -> *const c_char {
    let e = err.unsigned_abs() as i32;
    let s: &'static CStr = match e {
        0 => c"success",
        libc::ENOENT => c"no such file or directory",
        libc::EEXIST => c"file exists",
        libc::ENOSPC => c"no space left on the volume",
        libc::EBADF => c"not an open dvrfs handle, file or stream",
        libc::EFAULT => c"NULL pointer",
        libc::EINVAL => c"invalid argument (see dvrfs_last_error)",
        libc::ETIME => c"deadline missed: the read could not be served in time",
        libc::ECANCELED => c"request cancelled",
        libc::EBUSY => {
            c"busy: the volume is in use, the request is on the device, or the stream does not fit"
        }
        libc::EAGAIN => c"too many requests in flight; retry when some complete",
        libc::EISDIR => c"is a directory",
        libc::ENOTDIR => c"not a directory",
        libc::EROFS => c"the volume is open read-only",
        libc::EACCES => c"permission denied",
        libc::EFBIG => c"file too large",
        libc::ENAMETOOLONG => c"name too long",
        libc::EIO => c"I/O error or internal error (see dvrfs_last_error)",
        libc::EINPROGRESS => c"request in progress",
        _ => c"unknown error",
    };
    s.as_ptr()
}

/// The full message of this thread's last failure (empty if none). Valid until the
/// next dvrfs call on this thread.
#[no_mangle]
pub extern "C" fn dvrfs_last_error() -> *const c_char {
    LAST_ERROR.with(|l| l.borrow().as_ptr())
}
