//! A file's frame index for C (issue 25; HERMES 4's (file, frame) access): the
//! keyframes in batches (an iterator: `first` moves on by what came back), and the
//! keyframe a player starts from to show a frame number or a UTC moment. Each call
//! takes the file's index from the engine's memory (no device read); a file without
//! one has no keyframes (`dvrfs reindex` builds it).

use crate::registry::{self, lock};
use crate::{dvrfs, dvrfs_keyframe, fail, guard};
use dvrfs_core::format::frame_index::FrameEntry;
use std::ffi::{c_char, c_int};

fn to_c(e: &FrameEntry) -> dvrfs_keyframe {
    dvrfs_keyframe {
        offset: e.offset,
        data_offset: e.offset + u64::from(e.data_delta),
        length: e.len,
        frame: e.number,
        flags: e.flags,
        pts_90k: e.pts_90k,
        utc_ns: e.utc_ns,
    }
}

/// File `fd`'s keyframes, from a handle's volume.
fn keyframes(fs: *mut dvrfs, fd: c_int) -> Result<Vec<FrameEntry>, crate::Fail> {
    let d = registry::volume(fs)?;
    let ino = lock(&d.tables).ino(fd)?;
    Ok(d.vol.keyframes(ino)?.entries)
}

/// Copies keyframes `first`, `first + 1`, ... of file `fd` into `out` (at most `max`
/// of them) and returns how many the file's index holds in all (>= 0), or a
/// negative error code. An index is iterated by calling again with `first` moved on
/// by the `min(max, total - first)` copied; `max` 0 (and `out` NULL) asks the count.
///
/// # Safety
/// `fs` is any value (checked); `out` is NULL when `max` is 0, else writable for
/// `max` entries.
#[no_mangle]
pub unsafe extern "C" fn dvrfs_keyframes(
    fs: *mut dvrfs,
    fd: c_int,
    first: u64,
    out: *mut dvrfs_keyframe,
    max: u64,
) -> i64 {
    guard(|| {
        if max > 0 && out.is_null() {
            return Err(fail(libc::EFAULT, "the keyframe array is NULL"));
        }
        let keys = keyframes(fs, fd)?;
        let from = (first as usize).min(keys.len());
        for (i, e) in keys[from..].iter().take(max as usize).enumerate() {
            // SAFETY: writable for `max` entries, by contract; i < max.
            unsafe { out.add(i).write(to_c(e)) };
        }
        Ok(keys.len() as i64)
    })
}

/// The keyframe a player starts from to show entry `k` of `keys`: writes it to
/// `*out` (when not NULL) and returns its index, or -ENOENT with a message.
fn found(
    keys: &[FrameEntry],
    k: Option<usize>,
    out: *mut dvrfs_keyframe,
    what: impl FnOnce() -> String,
) -> Result<i64, crate::Fail> {
    let Some(k) = k else {
        return Err(fail(
            libc::ENOENT,
            if keys.is_empty() {
                "the file has no frame index (build it with `dvrfs reindex`)".to_string()
            } else {
                what()
            },
        ));
    };
    // SAFETY: NULL or writable, by contract.
    if let Some(o) = unsafe { out.as_mut() } {
        *o = to_c(&keys[k]);
    }
    Ok(k as i64)
}

/// The last keyframe of file `fd` at or before frame `frame` (0-based): where to read
/// from to show it. Fills `*out` (when not NULL) and returns the keyframe's index,
/// or a negative error code (`-ENOENT`: no index, or `frame` before the first
/// keyframe).
///
/// # Safety
/// `fs` is any value (checked); `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn dvrfs_seek_frame(
    fs: *mut dvrfs,
    fd: c_int,
    frame: u64,
    out: *mut dvrfs_keyframe,
) -> i64 {
    guard(|| {
        let keys = keyframes(fs, fd)?;
        let k = keys
            .partition_point(|e| u64::from(e.number) <= frame)
            .checked_sub(1);
        found(&keys, k, out, || {
            format!("frame {frame} is before the file's first keyframe")
        })
    })
}

/// The last keyframe of file `fd` at or before UTC `utc_ns` (ns since the Unix
/// epoch): where to read from to show that moment. Fills `*out` (when not NULL) and
/// returns the keyframe's index, or a negative error code (`-ENOENT`: no index, or
/// the moment is before the first keyframe).
///
/// # Safety
/// `fs` is any value (checked); `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn dvrfs_seek_time(
    fs: *mut dvrfs,
    fd: c_int,
    utc_ns: i64,
    out: *mut dvrfs_keyframe,
) -> i64 {
    guard(|| {
        let keys = keyframes(fs, fd)?;
        let k = keys.partition_point(|e| e.utc_ns <= utc_ns).checked_sub(1);
        found(&keys, k, out, || {
            format!("{utc_ns} ns since the epoch is before the file's first keyframe")
        })
    })
}

/// The last keyframe at or before UTC `utc_ns` across the recording at `path`: a
/// stream directory's chunks (its regular files not starting with `.`, in name
/// order) or one file. Writes the chunk's path (`path`, `/`, its name; `path`
/// itself for a file) as a NUL-terminated string into `chunk` (`chunk_len` bytes)
/// and the keyframe into `*out` (when not NULL), and returns the keyframe's index in
/// that chunk's index; a negative error code otherwise (`-ENOENT`: no index, or the
/// moment is before the first keyframe; `-ERANGE`: the chunk's path does not fit).
/// Open the chunk with `dvrfs_file_open` and read it from `out->offset` (after its
/// head), or play on with `dvrfs_stream_queue` for the chunks after it.
///
/// # Safety
/// `fs` is any value (checked); `path` is a NUL-terminated string; `chunk` is
/// writable for `chunk_len` bytes; `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn dvrfs_seek_stream_time(
    fs: *mut dvrfs,
    path: *const c_char,
    utc_ns: i64,
    chunk: *mut c_char,
    chunk_len: usize,
    out: *mut dvrfs_keyframe,
) -> i64 {
    guard(|| {
        let d = registry::volume(fs)?;
        let path = crate::cpath(path)?;
        if chunk.is_null() {
            return Err(fail(libc::EFAULT, "the chunk path buffer is NULL"));
        }
        let ino = d.vol.resolve_bytes(path)?;
        let shown = String::from_utf8_lossy(path);
        let Some(s) = d.vol.seek_stream_time(ino, utc_ns)? else {
            return Err(fail(
                libc::ENOENT,
                format!("{shown} has no keyframe at or before {utc_ns} ns since the epoch (no frame index, or the moment is before its first keyframe)"),
            ));
        };
        let mut full = path.to_vec();
        if !s.name.is_empty() {
            while full.last() == Some(&b'/') {
                full.pop();
            }
            full.push(b'/');
            full.extend_from_slice(&s.name);
        }
        if full.len() + 1 > chunk_len {
            return Err(fail(
                libc::ERANGE,
                format!(
                    "the chunk's path takes {} bytes with its NUL, the buffer {chunk_len}",
                    full.len() + 1
                ),
            ));
        }
        full.push(0);
        // SAFETY: writable for `chunk_len >= full.len()` bytes, by contract.
        unsafe { std::ptr::copy_nonoverlapping(full.as_ptr().cast(), chunk, full.len()) };
        // SAFETY: NULL or writable, by contract.
        if let Some(o) = unsafe { out.as_mut() } {
            *o = to_c(&s.entry);
        }
        Ok(s.key as i64)
    })
}
