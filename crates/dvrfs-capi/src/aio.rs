//! Asynchronous I/O (AVFS 3.2.3, Table 1): `dvrfs_aio_start`, `dvrfs_aio_check`,
//! `dvrfs_aio_cancel`, `dvrfs_aio_poll`. A request on a file number is submitted
//! while the handle's tables are locked, so it reaches the engine before any
//! `dvrfs_file_close` of that number: the engine then orders the close (and the
//! freeing of a removed file) after it.

use crate::registry::{self, lock};
use crate::{
    backend, dvrfs, dvrfs_aiocb, fail, guard_int, set_last, DVRFS_AIO_POLL_MAX, DVRFS_AIO_READ,
    DVRFS_AIO_WRITE, DVRFS_ALIGN,
};
use dvrfs_core::engine::ExternalBuf;
use dvrfs_core::{Error as CoreError, IoBuf, Op, Output};
use dvrfs_runtime::{RuntimeError, Ticket};
use std::ffi::c_int;
use std::time::Duration;

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
/// `fs` is any value (checked); `cb` is NULL or a valid, writable control block whose
/// `aio_buf` holds `aio_nbytes` bytes.
#[no_mangle]
pub unsafe extern "C" fn dvrfs_aio_start(fs: *mut dvrfs, cb: *mut dvrfs_aiocb) -> c_int {
    guard_int(|| {
        let d = registry::volume(fs)?;
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
        // Held until the request is submitted (module docs).
        let tables = lock(&d.tables);
        let ino = match cb.aio_lio_opcode {
            DVRFS_AIO_WRITE => tables.writable(cb.aio_fildes, "write")?,
            _ => tables.ino(cb.aio_fildes)?,
        };
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
        drop(tables);
        lock(&d.running).insert(t.0);
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
/// `fs` is any value (checked); `cb` is NULL or a valid, writable control block.
#[no_mangle]
pub unsafe extern "C" fn dvrfs_aio_check(
    fs: *mut dvrfs,
    cb: *mut dvrfs_aiocb,
    wait: c_int,
) -> c_int {
    guard_int(|| {
        let d = registry::volume(fs)?;
        // SAFETY: NULL or valid and writable, by contract.
        let cb = unsafe { cb.as_mut() }
            .ok_or_else(|| fail(libc::EFAULT, "the control block is NULL"))?;
        let id = cb.aio_private;
        if !lock(&d.running).contains(&id) {
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
        lock(&d.running).remove(&id);
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
/// `fs` is any value (checked); `cb` is NULL or a valid control block.
#[no_mangle]
pub unsafe extern "C" fn dvrfs_aio_cancel(fs: *mut dvrfs, cb: *mut dvrfs_aiocb) -> c_int {
    guard_int(|| {
        let d = registry::volume(fs)?;
        // SAFETY: NULL or valid, by contract.
        let cb = unsafe { cb.as_ref() }
            .ok_or_else(|| fail(libc::EFAULT, "the control block is NULL"))?;
        if !lock(&d.running).contains(&cb.aio_private) {
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
/// `fs` is any value (checked); `cbs` points to `n` pointers to valid control blocks.
#[no_mangle]
pub unsafe extern "C" fn dvrfs_aio_poll(
    fs: *mut dvrfs,
    cbs: *const *const dvrfs_aiocb,
    n: c_int,
    timeout_ns: i64,
) -> c_int {
    guard_int(|| {
        let d = registry::volume(fs)?;
        if cbs.is_null() {
            return Err(fail(libc::EFAULT, "the control block list is NULL"));
        }
        if !(1..=DVRFS_AIO_POLL_MAX).contains(&n) {
            return Err(fail(
                libc::EINVAL,
                format!("give 1 to {DVRFS_AIO_POLL_MAX} control blocks, not {n}"),
            ));
        }
        // SAFETY: `cbs` holds `n` pointers, by contract.
        let list = unsafe { std::slice::from_raw_parts(cbs, n as usize) };
        let mut tickets = Vec::with_capacity(list.len());
        {
            let running = lock(&d.running);
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
