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
//!   or stream number: an error (`-EBADF`, `-EFAULT`, `-EINVAL`), never a crash. A
//!   handle is a token the process never hands out twice, never a pointer
//!   (`registry.rs`): a closed one stays `-EBADF` whatever is opened later. Every
//!   number and length is checked before anything is allocated or copied. No Rust
//!   panic crosses the boundary: one becomes `-EIO` with a message.
//! - An open file number or stream holds its file: removing the file's last name
//!   leaves it alive, without a name, until the last of them closes (as an open file
//!   of the mount), so none ever reaches a file created later. A file takes one
//!   recording stream at a time (a second is `-EBUSY`).
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

mod aio;
mod backend;
mod index;
mod registry;
mod stream;

pub use aio::{dvrfs_aio_cancel, dvrfs_aio_check, dvrfs_aio_poll, dvrfs_aio_start};
pub use index::{dvrfs_keyframes, dvrfs_seek_frame, dvrfs_seek_stream_time, dvrfs_seek_time};
pub use registry::dvrfs;
pub use stream::{
    dvrfs_stream_close, dvrfs_stream_follow, dvrfs_stream_open, dvrfs_stream_queue,
    dvrfs_stream_read, dvrfs_stream_write,
};

use dvrfs_core::meta::Ino;
use dvrfs_core::{Error as CoreError, Op, OpenMode, Output};
use dvrfs_runtime::RuntimeError;
use registry::{lock, Tables, Vol};
use std::cell::RefCell;
use std::collections::HashSet;
use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Mutex};

/// Alignment of an asynchronous I/O buffer (address), bytes.
pub const DVRFS_ALIGN: u32 = 4096;
/// `dvrfs_aiocb.aio_lio_opcode`: read.
pub const DVRFS_AIO_READ: c_int = 0;
/// `dvrfs_aiocb.aio_lio_opcode`: write.
pub const DVRFS_AIO_WRITE: c_int = 1;
/// `dvrfs_file_open` flags: create the file (it must not exist).
pub const DVRFS_O_CREAT: c_int = 1;
/// `dvrfs_file_open` flags: the file number only reads (writes and recordings
/// through it fail with `-EBADF`). A file only read-only numbers and playbacks hold
/// may be deleted by retention for a recording that needs its space (rule 6): its
/// reads then fail with `-ESTALE` ("range expired"), never with other bytes.
pub const DVRFS_O_RDONLY: c_int = 2;
/// `dvrfs_stream_spec.direction`: playback.
pub const DVRFS_STREAM_READ: c_int = 0;
/// `dvrfs_stream_spec.direction`: recording.
pub const DVRFS_STREAM_WRITE: c_int = 1;

/// Files (and streams) open at once on one handle, at most: `-EMFILE` beyond.
pub const DVRFS_OPEN_FILES_MAX: c_int = 65536;
/// Control blocks one `dvrfs_aio_poll` looks at, at most.
pub const DVRFS_AIO_POLL_MAX: c_int = 4096;
/// Files a playback holds at once, at most (its own and those `dvrfs_stream_queue`
/// queued): `-EBUSY` beyond.
pub const DVRFS_PLAY_FILES_MAX: c_int = dvrfs_core::engine::MAX_PLAY_FILES as c_int;
/// Bytes one `dvrfs_stream_read` gives at most (a longer buffer gets this much); a
/// longer `dvrfs_stream_write` is taken in pieces of this size.
pub const DVRFS_STREAM_IO_MAX: u64 = 16 << 20;

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

/// One keyframe of a file's frame index (`dvrfs_keyframes`, `dvrfs_seek_frame`,
/// `dvrfs_seek_time`; FORMAT.md section 10c).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct dvrfs_keyframe {
    /// Where a player starts reading to show it: its first transport packet, or
    /// its fragment's `moof`. Read from here after the file's head (PAT and PMT, or
    /// the init segment) to play from this keyframe.
    pub offset: u64,
    /// Where the frame's own bytes start (the MP4 sample; `offset` in MPEG-TS).
    pub data_offset: u64,
    /// The keyframe's bytes from `data_offset`.
    pub length: u32,
    /// Its frame number in the file (0-based, every frame counted).
    pub frame: u32,
    /// `DVRFS_KEYFRAME_DISCONTINUITY`, `DVRFS_KEYFRAME_CLOCK_STEP`, `DVRFS_KEYFRAME_IMPORT`.
    pub flags: u32,
    /// Media time, 90 kHz, unwrapped past 2^33.
    pub pts_90k: i64,
    /// UTC, ns since the Unix epoch.
    pub utc_ns: i64,
}

/// `dvrfs_keyframe.flags`: the stream's time jumped before this keyframe.
pub const DVRFS_KEYFRAME_DISCONTINUITY: u32 = 1;
/// `dvrfs_keyframe.flags`: the UTC anchor moved here (a clock step).
pub const DVRFS_KEYFRAME_CLOCK_STEP: u32 = 2;
/// `dvrfs_keyframe.flags`: timed by its media (written faster than real time, or
/// indexed after it was written).
pub const DVRFS_KEYFRAME_IMPORT: u32 = 4;

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

fn cstr<'a>(p: *const c_char, what: &str) -> Result<&'a str, Fail> {
    if p.is_null() {
        return Err(fail(libc::EFAULT, format!("{what} is NULL")));
    }
    // SAFETY: non-NULL and, by the API's contract, a NUL-terminated string.
    unsafe { CStr::from_ptr(p) }
        .to_str()
        .map_err(|_| fail(libc::EINVAL, format!("{what} is not UTF-8")))
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
/// The handle is a token, not an address: no later `dvrfs_open` returns it again.
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
        let p = registry::register(Vol {
            vol,
            tables: Mutex::new(Tables::default()),
            running: Mutex::new(HashSet::new()),
        })?;
        // SAFETY: `out` is non-NULL and writable by contract.
        unsafe { *out = p };
        Ok(0)
    })
}

/// Closes what the handle left open (its streams, their last bytes written, then its
/// files), commits everything, marks the journal clean and closes the handle;
/// operations still running finish first. Returns 0 or a negative error code; the
/// handle is gone either way (a second close, or any later use, is `-EBADF`).
///
/// # Safety
/// `fs` is any value: only handles from `dvrfs_open` are used.
#[no_mangle]
pub unsafe extern "C" fn dvrfs_close(fs: *mut dvrfs) -> c_int {
    guard_int(|| {
        let v = registry::unregister(fs)?;
        let (streams, files) = {
            let mut t = lock(&v.tables);
            (t.take_streams(), t.take_files())
        };
        // What the program left open goes as if it had closed it; the first failure
        // is the answer (the rest are still closed).
        let mut first: Result<(), Fail> = Ok(());
        for sid in streams {
            let r = v.vol.run(Op::StreamClose { stream: sid as u32 }, None, 0);
            if let (Err(e), Ok(())) = (r, &first) {
                first = Err(e.into());
            }
        }
        for (ino, mode) in files {
            let r = v.vol.run(Op::CloseFile { ino, mode }, None, 0);
            if let (Err(e), Ok(())) = (r, &first) {
                first = Err(e.into());
            }
        }
        // If another thread is inside a call on it, the last reference closes it
        // (the runtime commits and closes on drop).
        if let Ok(d) = Arc::try_unwrap(v) {
            d.vol.close()?;
        }
        first?;
        Ok(0)
    })
}

fn resolve_parent(d: &Vol, path: &[u8]) -> Result<(Ino, Vec<u8>), Fail> {
    Ok(d.vol.resolve_parent_bytes(path)?)
}

/// A path inside the volume: the bytes of a NUL-terminated string, UTF-8 or not (a
/// name is any bytes but `/` and NUL, and the mount creates whatever its programs
/// ask for).
pub(crate) fn cpath<'a>(p: *const c_char) -> Result<&'a [u8], Fail> {
    if p.is_null() {
        return Err(fail(libc::EFAULT, "the path is NULL"));
    }
    // SAFETY: non-NULL and, by the API's contract, a NUL-terminated string.
    Ok(unsafe { CStr::from_ptr(p) }.to_bytes())
}

/// Opens file `ino`, which `path` named a moment ago, in the engine, and checks that
/// `path` still names it: a file removed and another created under the same inode
/// number in between would otherwise be opened in its place. Tries again a few
/// times while other threads rename under it.
fn open_named(d: &Vol, path: &[u8], mut ino: Ino, mode: OpenMode) -> Result<Ino, Fail> {
    /// Attempts before giving up on a path that keeps changing.
    const OPEN_ATTEMPTS: u32 = 8;
    for _ in 0..OPEN_ATTEMPTS {
        d.vol.run(Op::OpenFile { ino, mode }, None, 0)?;
        let now = d.vol.resolve_bytes(path);
        if matches!(now, Ok(i) if i == ino) {
            return Ok(ino);
        }
        d.vol.run(Op::CloseFile { ino, mode }, None, 0)?;
        ino = now?;
    }
    Err(fail(
        libc::EBUSY,
        format!(
            "{} kept changing while it was being opened (renamed or replaced by other threads): try again",
            String::from_utf8_lossy(path)
        ),
    ))
}

/// Opens the file at `path` (with `DVRFS_O_CREAT`: creates it, mode `mode`; it must
/// not exist) and returns its file number (>= 0) or a negative error code. The number
/// holds the file: removed while it is open, the file lives on without a name until
/// `dvrfs_file_close`. Numbers are not reused within a handle; at most
/// `DVRFS_OPEN_FILES_MAX` are open at once (`-EMFILE`).
///
/// # Safety
/// `fs` is any value (checked); `path` is a NUL-terminated string, its bytes the
/// path (UTF-8 or not).
#[no_mangle]
pub unsafe extern "C" fn dvrfs_file_open(
    fs: *mut dvrfs,
    path: *const c_char,
    flags: c_int,
    mode: u32,
) -> c_int {
    guard_int(|| {
        let d = registry::volume(fs)?;
        let path = cpath(path)?;
        lock(&d.tables).check_room()?;
        if flags & !(DVRFS_O_CREAT | DVRFS_O_RDONLY) != 0 {
            return Err(fail(
                libc::EINVAL,
                format!("flags {flags:#x}: only DVRFS_O_CREAT and DVRFS_O_RDONLY are known"),
            ));
        }
        let open_mode = match flags & DVRFS_O_RDONLY {
            0 => OpenMode::Write,
            _ if flags & DVRFS_O_CREAT != 0 => {
                return Err(fail(
                    libc::EINVAL,
                    "DVRFS_O_CREAT with DVRFS_O_RDONLY: a file created is opened to be written",
                ))
            }
            _ => OpenMode::Read,
        };
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
            let ino = d.vol.resolve_bytes(path)?;
            let kind = d.vol.stat(ino)?.kind;
            if kind != dvrfs_core::format::dir::Kind::File {
                let path = String::from_utf8_lossy(path);
                return Err(fail(libc::EISDIR, format!("{path} is not a regular file")));
            }
            ino
        };
        let ino = open_named(&d, path, ino, open_mode)?;
        let fd = lock(&d.tables).add_file(ino, open_mode);
        if fd.is_err() {
            // Another thread took the last number meanwhile.
            let close = Op::CloseFile {
                ino,
                mode: open_mode,
            };
            let _ = d.vol.run(close, None, 0);
        }
        Ok(fd? as i64)
    })
}

/// Closes a file number (the file is freed now if it was removed and nothing else
/// holds it). Returns 0 or a negative error code.
///
/// # Safety
/// `fs` is any value (checked).
#[no_mangle]
pub unsafe extern "C" fn dvrfs_file_close(fs: *mut dvrfs, fd: c_int) -> c_int {
    guard_int(|| {
        let d = registry::volume(fs)?;
        // Out of the table first: a request started on `fd` from now on is -EBADF,
        // and one started before was submitted before this close (`aio.rs`).
        let (ino, mode) = lock(&d.tables).remove_file(fd)?;
        d.vol.run(Op::CloseFile { ino, mode }, None, 0)?;
        Ok(0)
    })
}

/// A file's size in bytes, or a negative error code.
///
/// # Safety
/// `fs` is any value (checked).
#[no_mangle]
pub unsafe extern "C" fn dvrfs_file_size(fs: *mut dvrfs, fd: c_int) -> i64 {
    guard(|| {
        let d = registry::volume(fs)?;
        let ino = lock(&d.tables).ino(fd)?;
        let size = d.vol.stat(ino)?.size_bytes;
        Ok(size as i64)
    })
}

/// Removes the file at `path`. Returns 0 or a negative error code. A file still open
/// (a file number or a stream on it) loses its name only: its bytes stay readable and
/// writable through them, and it is freed when the last of them closes.
///
/// # Safety
/// `fs` is any value (checked); `path` is a NUL-terminated string, its bytes the
/// path (UTF-8 or not).
#[no_mangle]
pub unsafe extern "C" fn dvrfs_unlink(fs: *mut dvrfs, path: *const c_char) -> c_int {
    guard_int(|| {
        let d = registry::volume(fs)?;
        let (parent, name) = resolve_parent(&d, cpath(path)?)?;
        d.vol.run(Op::Unlink { parent, name }, None, 0)?;
        Ok(0)
    })
}

/// Makes everything completed so far durable. Returns 0 or a negative error code.
///
/// # Safety
/// `fs` is any value (checked).
#[no_mangle]
pub unsafe extern "C" fn dvrfs_fsync(fs: *mut dvrfs) -> c_int {
    guard_int(|| {
        let d = registry::volume(fs)?;
        // Due now (a commit without a deadline waits most of the commit interval).
        d.vol.run(Op::Fsync, Some(std::time::Instant::now()), 0)?;
        Ok(0)
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
        libc::EAGAIN => {
            c"busy: too many requests in flight or queued for the disk; retry when some complete"
        }
        libc::EISDIR => c"is a directory",
        libc::ENOTDIR => c"not a directory",
        libc::EROFS => c"the volume is open read-only",
        libc::EACCES => c"permission denied",
        libc::EFBIG => c"file too large",
        libc::ENAMETOOLONG => c"name too long",
        libc::EMFILE => c"too many files or streams open on this handle",
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
