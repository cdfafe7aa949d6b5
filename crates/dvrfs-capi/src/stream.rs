//! Stream reservations (ABISS 2.2) for C: open, read, write, close. A stream number
//! is checked against the streams this handle opened before a buffer is allocated or a
//! byte copied (`registry.rs`); a read takes at most [`DVRFS_STREAM_IO_MAX`] bytes per
//! call and a write is taken in pieces of that size, so no length a caller passes
//! makes dvrfs allocate more. The stream holds its file in the engine: removing the
//! file or closing the file number it was opened on does not end it.

use crate::registry::{self, lock, StreamEntry};
use crate::{
    dvrfs, dvrfs_stream_info, dvrfs_stream_spec, dvrfs_stream_stats, fail, guard, guard_int,
    DVRFS_STREAM_IO_MAX, DVRFS_STREAM_READ, DVRFS_STREAM_WRITE,
};
use dvrfs_core::engine::{StreamDir, StreamSpec};
use dvrfs_core::{IoBuf, Op, Output};
use std::ffi::{c_int, c_void};
use std::sync::Arc;

/// Opens a stream reservation on file `fd`: admitted (returns a stream number >= 0 and
/// fills `*info` when it is not NULL), or refused (`-EBUSY`: the device's real-time
/// share cannot take it, `dvrfs_last_error` says what is left; `-ENOSPC`: a recording's
/// `reserve_bytes` do not fit; `-EBUSY` too for a second recording on a file that
/// has one). The stream holds the file until `dvrfs_stream_close`, also after
/// `dvrfs_file_close(fd)` or `dvrfs_unlink` of its name.
///
/// # Safety
/// `fs` is any value (checked); `spec` is NULL or valid; `info` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn dvrfs_stream_open(
    fs: *mut dvrfs,
    fd: c_int,
    spec: *const dvrfs_stream_spec,
    info: *mut dvrfs_stream_info,
) -> c_int {
    guard_int(|| {
        let d = registry::volume(fs)?;
        // Held while the stream is admitted (a quick decision in the engine), so the
        // file number cannot be closed and its file freed under it.
        let mut tables = lock(&d.tables);
        let ino = tables.ino(fd)?;
        tables.streams_full()?;
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
        if dir == StreamDir::Write {
            tables.writable(fd, "take a recording")?;
        }
        let got = d.vol.open_stream(
            ino,
            StreamSpec {
                idle: false,
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
        let Ok(sid) = c_int::try_from(got.id) else {
            let _ = d.vol.run(Op::StreamClose { stream: got.id }, None, 0);
            return Err(fail(
                libc::EMFILE,
                "the volume has numbered more streams than a C int holds: open it again",
            ));
        };
        tables.add_stream(sid, StreamEntry { dir });
        drop(tables);
        // SAFETY: NULL or writable, by contract.
        if let Some(out) = unsafe { info.as_mut() } {
            *out = dvrfs_stream_info {
                depth: got.depth,
                buffer_bytes: got.buffer_bytes,
                slack_ns: got.slack_ns,
                load: got.load,
            };
        }
        Ok(sid as i64)
    })
}

/// Reads up to `len` bytes (at most `DVRFS_STREAM_IO_MAX` per call) from a playback
/// stream into `buf` (any alignment), at most at the stream's rate. Returns the bytes
/// read (0 at the end of the file) or a negative error code (`-EBADF`: not a stream
/// this handle has open).
///
/// # Safety
/// `fs` is any value (checked); `buf` holds `len` writable bytes.
#[no_mangle]
pub unsafe extern "C" fn dvrfs_stream_read(
    fs: *mut dvrfs,
    sid: c_int,
    buf: *mut c_void,
    len: usize,
) -> i64 {
    guard(|| {
        let d = stream_io(fs, sid, buf.is_null(), StreamDir::Read)?;
        let want = len.min(DVRFS_STREAM_IO_MAX as usize);
        let op = Op::StreamRead {
            stream: sid as u32,
            buf: IoBuf::zeroed(want),
        };
        match d.vol.run(op, None, 0)? {
            Output::Read { buf: b, bytes } => {
                assert!(bytes <= want, "stream {sid} read {bytes} bytes into {want}");
                let src = b.bytes().ok_or_else(|| fail(libc::EIO, "no bytes"))?;
                // SAFETY: `buf` holds `len >= want >= bytes` writable bytes, by contract.
                unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), buf.cast(), bytes) };
                Ok(bytes as i64)
            }
            o => Err(fail(libc::EIO, format!("stream read returned {o:?}"))),
        }
    })
}

/// Writes `len` bytes from `buf` (any alignment) to a recording stream, at most at its
/// rate (the call returns once they are in the stream's buffer; more than
/// `DVRFS_STREAM_IO_MAX` are taken in pieces of that size). Returns `len` or a
/// negative error code (`-EBADF`: not a stream this handle has open; after a failure
/// part way through a long write, `dvrfs_last_error` says how many bytes went in).
///
/// # Safety
/// `fs` is any value (checked); `buf` holds `len` readable bytes.
#[no_mangle]
pub unsafe extern "C" fn dvrfs_stream_write(
    fs: *mut dvrfs,
    sid: c_int,
    buf: *const c_void,
    len: usize,
) -> i64 {
    guard(|| {
        let d = stream_io(fs, sid, buf.is_null(), StreamDir::Write)?;
        if len > isize::MAX as usize {
            return Err(fail(libc::EINVAL, format!("len {len} is past any buffer")));
        }
        let mut done = 0;
        while done < len {
            let n = (len - done).min(DVRFS_STREAM_IO_MAX as usize);
            // SAFETY: `buf` holds `len` readable bytes, by contract, and
            // `done + n <= len`.
            let piece = unsafe { std::slice::from_raw_parts(buf.cast::<u8>().add(done), n) };
            let r = d.vol.run(
                Op::StreamWrite {
                    stream: sid as u32,
                    data: IoBuf::from_slice(piece),
                },
                None,
                0,
            );
            if let Err(e) = r {
                let mut f: crate::Fail = e.into();
                if done > 0 {
                    f.1 = format!("{} (the first {done} of the {len} bytes went in)", f.1);
                }
                return Err(f);
            }
            done += n;
        }
        Ok(len as i64)
    })
}

/// Closes a stream (a recording's last requests are written and waited for) and fills
/// `*stats` when it is not NULL. Returns 0 or a negative error code (`-EBADF`: not a
/// stream this handle has open).
///
/// # Safety
/// `fs` is any value (checked); `stats` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn dvrfs_stream_close(
    fs: *mut dvrfs,
    sid: c_int,
    stats: *mut dvrfs_stream_stats,
) -> c_int {
    guard_int(|| {
        let d = registry::volume(fs)?;
        lock(&d.tables).remove_stream(sid)?;
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

/// Queues file `fd` on playback stream `sid`, from byte `from`: once the playback has
/// read to the end of its file (and of the files queued before), it goes on into
/// this one, under the same reservation and buffer, so a stream directory's chunks
/// play as one stream with no new admission and no gap at a boundary (pass a chunk's
/// first keyframe offset as `from` to leave its head out). The playback holds the
/// file from now on, also after `dvrfs_file_close(fd)` or `dvrfs_unlink` of its name.
/// Returns 0 or a negative error code (`-EBADF`: not a stream or file number of this
/// handle; `-EINVAL`: a recording, `from` past the file's end; `-EBUSY`: the playback
/// holds `DVRFS_PLAY_FILES_MAX` files, queue it once it has played some).
///
/// # Safety
/// `fs` is any value (checked).
#[no_mangle]
pub unsafe extern "C" fn dvrfs_stream_queue(
    fs: *mut dvrfs,
    sid: c_int,
    fd: c_int,
    from: u64,
) -> c_int {
    guard_int(|| {
        let d = registry::volume(fs)?;
        // Held while the file is queued, so its number cannot be closed and the file
        // freed under it.
        let tables = lock(&d.tables);
        let s = tables.stream(sid)?;
        if s.dir != StreamDir::Read {
            return Err(fail(
                libc::EINVAL,
                format!("stream {sid} is a recording: only a playback goes on into another file"),
            ));
        }
        let ino = tables.ino(fd)?;
        d.vol.run(
            Op::StreamQueue {
                stream: sid as u32,
                ino,
                from,
            },
            None,
            0,
        )?;
        Ok(0)
    })
}

/// Makes playback stream `sid` follow its last file while a recording writes it
/// (watching live): at the end of what is there, `dvrfs_stream_read` waits for the
/// recording's next bytes instead of returning 0 (not counted as a stall), and
/// returns 0 once the recording has ended. A reader that catches up with the
/// recording starts again one slack behind it. Returns 0 or a negative error code
/// (`-EBADF`: not a stream of this handle; `-EINVAL`: a recording).
///
/// # Safety
/// `fs` is any value (checked).
#[no_mangle]
pub unsafe extern "C" fn dvrfs_stream_follow(fs: *mut dvrfs, sid: c_int) -> c_int {
    guard_int(|| {
        let d = registry::volume(fs)?;
        let s = lock(&d.tables).stream(sid)?;
        if s.dir != StreamDir::Read {
            return Err(fail(
                libc::EINVAL,
                format!("stream {sid} is a recording: only a playback follows one"),
            ));
        }
        d.vol
            .run(Op::StreamFollow { stream: sid as u32 }, None, 0)?;
        Ok(0)
    })
}

/// The volume of a stream read or write: the handle, a buffer, and stream `sid`
/// open on this handle in direction `dir`, checked before anything is allocated.
fn stream_io(
    fs: *mut dvrfs,
    sid: c_int,
    null_buf: bool,
    dir: StreamDir,
) -> Result<Arc<registry::Vol>, crate::Fail> {
    let d = registry::volume(fs)?;
    if null_buf {
        return Err(fail(libc::EFAULT, "the buffer is NULL"));
    }
    let s = lock(&d.tables).stream(sid)?;
    if s.dir != dir {
        let why = match dir {
            StreamDir::Read => "is a recording: read it with dvrfs_aio_start or a playback stream",
            StreamDir::Write => "is a playback: it cannot write",
        };
        return Err(fail(libc::EINVAL, format!("stream {sid} {why}")));
    }
    Ok(d)
}
