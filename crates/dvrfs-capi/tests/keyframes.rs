//! A file's frame index through the C API: `dvrfs_keyframes` iterates it in
//! batches, `dvrfs_seek_frame` and `dvrfs_seek_time` find the keyframe a player
//! starts from; before the first keyframe, a file without an index, a NULL array
//! and a bad file number are errors with a message, never a crash. A stream
//! directory is sought by time across its chunks (`dvrfs_seek_stream_time`) and
//! played on through them (`dvrfs_stream_queue`).

mod common;

use common::{c, image, in_child, last_error, open};
use dvrfs::{
    dvrfs_close, dvrfs_file_open, dvrfs_keyframe, dvrfs_keyframes, dvrfs_seek_frame,
    dvrfs_seek_stream_time, dvrfs_seek_time, dvrfs_stream_close, dvrfs_stream_follow,
    dvrfs_stream_open, dvrfs_stream_queue, dvrfs_stream_read, dvrfs_stream_spec, DVRFS_STREAM_READ,
};
use dvrfs_core::driver::Fs;
use dvrfs_core::format::frame_index::FrameEntry;
use dvrfs_core::OpenOptions;
use dvrfs_io::{FileDevice, LockMode};

const T0: i64 = 1_800_000_000_000_000_000;

/// Keyframe `i`: every 2 s (50 frames), 100 KiB apart.
fn entry(i: u32) -> FrameEntry {
    FrameEntry {
        offset: u64::from(i) * 100 * 1024 + 376,
        data_delta: 0,
        len: 20_000,
        number: i * 50,
        flags: 0,
        pts_90k: i64::from(i) * 180_000,
        utc_ns: T0 + i64::from(i) * 2_000_000_000,
    }
}

#[test]
fn keyframes_iterate_and_seek_by_frame_and_time() {
    in_child("keyframes_iterate_and_seek_by_frame_and_time", || {
        let dir = tempfile::tempdir().unwrap();
        let img = dir.path().join("k.img");
        image(&img, 512 << 20, 9);
        // A file of 10 keyframes' bytes with its index, and one without an index.
        {
            let dev = FileDevice::open(&img, true, LockMode::Exclusive).unwrap();
            let mut fs = Fs::open(dev, OpenOptions::writable()).unwrap();
            let root = fs.root();
            let ino = fs.create(root, b"rec.ts", 0o644, 0, 0, T0).unwrap();
            fs.write(ino, 0, &vec![0u8; 1 << 20], T0).unwrap();
            let entries: Vec<FrameEntry> = (0..10).map(entry).collect();
            fs.append_frames(ino, &entries, T0).unwrap();
            let plain = fs.create(root, b"plain", 0o644, 0, 0, T0).unwrap();
            fs.write(plain, 0, b"no frames here", T0).unwrap();
            fs.close().unwrap();
        }
        let fs = open(&img);
        // SAFETY: a handle from dvrfs_open, valid C strings, arrays of the sizes given.
        unsafe {
            let fd = dvrfs_file_open(fs, c("/rec.ts").as_ptr(), 0, 0);
            assert!(fd >= 0, "{}", last_error());
            assert_eq!(dvrfs_keyframes(fs, fd, 0, std::ptr::null_mut(), 0), 10);
            // In batches of 4: 4, 4, 2.
            let mut all = vec![];
            let mut batch = [dvrfs_keyframe::default(); 4];
            let mut first = 0u64;
            loop {
                let total = dvrfs_keyframes(fs, fd, first, batch.as_mut_ptr(), 4) as u64;
                let got = (total - first).min(4) as usize;
                all.extend_from_slice(&batch[..got]);
                first += got as u64;
                if first >= total {
                    break;
                }
            }
            assert_eq!(all.len(), 10);
            for (i, k) in all.iter().enumerate() {
                let e = entry(i as u32);
                assert_eq!(
                    (k.offset, k.frame, k.utc_ns),
                    (e.offset, e.number, e.utc_ns)
                );
            }
            let mut k = dvrfs_keyframe::default();
            // Frame 175 is shown from the keyframe of frame 150.
            assert_eq!(dvrfs_seek_frame(fs, fd, 175, &mut k), 3);
            assert_eq!(k.frame, 150);
            assert_eq!(dvrfs_seek_frame(fs, fd, 150, &mut k), 3);
            // 9.5 s after the first keyframe: the one at 8 s.
            assert_eq!(dvrfs_seek_time(fs, fd, T0 + 9_500_000_000, &mut k), 4);
            assert_eq!(k.utc_ns, T0 + 8_000_000_000);
            assert_eq!(
                dvrfs_seek_time(fs, fd, T0 + 3_600_000_000_000, std::ptr::null_mut()),
                9
            );
            // Before the first keyframe.
            assert_eq!(
                dvrfs_seek_time(fs, fd, T0 - 1, &mut k),
                -(libc::ENOENT as i64)
            );
            assert!(
                last_error().contains("before the file's first keyframe"),
                "{}",
                last_error()
            );
            // No index.
            let plain = dvrfs_file_open(fs, c("/plain").as_ptr(), 0, 0);
            assert_eq!(dvrfs_keyframes(fs, plain, 0, std::ptr::null_mut(), 0), 0);
            assert_eq!(
                dvrfs_seek_frame(fs, plain, 0, &mut k),
                -(libc::ENOENT as i64)
            );
            assert!(last_error().contains("dvrfs reindex"), "{}", last_error());
            // A NULL array, a bad file number.
            assert_eq!(
                dvrfs_keyframes(fs, fd, 0, std::ptr::null_mut(), 3),
                -(libc::EFAULT as i64)
            );
            assert_eq!(dvrfs_seek_frame(fs, 999, 0, &mut k), -(libc::EBADF as i64));
            assert_eq!(dvrfs_close(fs), 0);
        }
    });
}

/// Chunk `k`'s byte `i` (each chunk its own bytes).
fn chunk_byte(k: u32, i: usize) -> u8 {
    (i * 7 + k as usize * 101) as u8
}

/// A stream directory of three 20-second chunks: `dvrfs_seek_stream_time` finds the
/// chunk and keyframe of a moment across them and names the chunk; a playback opened
/// there goes on into the next chunk queued with `dvrfs_stream_queue`, its head left
/// out, as one stream.
#[test]
fn a_stream_seeks_by_time_across_chunks_and_plays_on_through_them() {
    in_child(
        "a_stream_seeks_by_time_across_chunks_and_plays_on_through_them",
        || {
            let dir = tempfile::tempdir().unwrap();
            let img = dir.path().join("s.img");
            image(&img, 512 << 20, 4);
            let names = [
                "20271115T080000.000Z.ts",
                "20271115T080020.000Z.ts",
                "20271115T080040.000Z.ts",
            ];
            const CHUNK_BYTES: usize = 1_100_000;
            {
                let dev = FileDevice::open(&img, true, LockMode::Exclusive).unwrap();
                let mut fs = Fs::open(dev, OpenOptions::writable()).unwrap();
                let root = fs.root();
                let cam = fs.mkdir(root, b"cam", 0o755, 0, 0, T0).unwrap();
                let chain = fs.create(cam, b".chain", 0o644, 0, 0, T0).unwrap();
                fs.write(chain, 0, b"not a chunk", T0).unwrap();
                for (k, name) in names.iter().enumerate() {
                    let k = k as u32;
                    let ino = fs.create(cam, name.as_bytes(), 0o644, 0, 0, T0).unwrap();
                    let bytes: Vec<u8> = (0..CHUNK_BYTES).map(|i| chunk_byte(k, i)).collect();
                    fs.write(ino, 0, &bytes, T0).unwrap();
                    let entries: Vec<FrameEntry> = (0..10)
                        .map(|i| FrameEntry {
                            utc_ns: T0 + i64::from(k * 10 + i) * 2_000_000_000,
                            ..entry(i)
                        })
                        .collect();
                    fs.append_frames(ino, &entries, T0).unwrap();
                }
                fs.close().unwrap();
            }
            let fs = open(&img);
            // SAFETY: a handle from dvrfs_open, valid C strings, buffers of the sizes given.
            unsafe {
                let mut k = dvrfs_keyframe::default();
                let mut path = [0 as std::ffi::c_char; 128];
                // 25 s in: the second chunk's keyframe at 24 s, its third.
                let at = T0 + 25_000_000_000;
                let r = dvrfs_seek_stream_time(
                    fs,
                    c("/cam").as_ptr(),
                    at,
                    path.as_mut_ptr(),
                    path.len(),
                    &mut k,
                );
                assert_eq!(r, 2, "{}", last_error());
                assert_eq!(k.utc_ns, T0 + 24_000_000_000);
                let chunk = std::ffi::CStr::from_ptr(path.as_ptr()).to_str().unwrap();
                assert_eq!(chunk, format!("/cam/{}", names[1]));
                // Before the first keyframe; a buffer too short for the path.
                let before = dvrfs_seek_stream_time(
                    fs,
                    c("/cam").as_ptr(),
                    T0 - 1,
                    path.as_mut_ptr(),
                    path.len(),
                    &mut k,
                );
                assert_eq!(before, -(libc::ENOENT as i64));
                let short = dvrfs_seek_stream_time(
                    fs,
                    c("/cam").as_ptr(),
                    at,
                    path.as_mut_ptr(),
                    10,
                    std::ptr::null_mut(),
                );
                assert_eq!(short, -(libc::ERANGE as i64));
                assert!(last_error().contains("buffer 10"), "{}", last_error());
                // Play from there (the failed calls wrote nothing: `path` and `k`
                // are the first's), on into the third chunk past its head.
                assert_eq!(k.utc_ns, T0 + 24_000_000_000);
                let fd = dvrfs_file_open(fs, path.as_ptr(), 0, 0);
                let next = dvrfs_file_open(fs, c(&format!("/cam/{}", names[2])).as_ptr(), 0, 0);
                assert!(fd >= 0 && next >= 0, "{}", last_error());
                let spec = dvrfs_stream_spec {
                    direction: DVRFS_STREAM_READ,
                    rate_bps: 400e6,
                    request_bytes: 0,
                    buffer_bytes: 0,
                    reserve_bytes: 0,
                    start_bytes: k.offset,
                    durable_ns: 0,
                };
                let sid = dvrfs_stream_open(fs, fd, &spec, std::ptr::null_mut());
                assert!(sid >= 0, "{}", last_error());
                let head = entry(0).offset;
                assert_eq!(
                    dvrfs_stream_queue(fs, sid, next, head),
                    0,
                    "{}",
                    last_error()
                );
                assert_eq!(dvrfs_stream_queue(fs, sid, 999, 0), -libc::EBADF);
                assert_eq!(
                    dvrfs_stream_queue(fs, sid, next, CHUNK_BYTES as u64 + 1),
                    -libc::EINVAL
                );
                assert!(last_error().contains("past the end"), "{}", last_error());
                // Following: no recording on these chunks, so the end is the end.
                assert_eq!(dvrfs_stream_follow(fs, sid), 0, "{}", last_error());
                assert_eq!(dvrfs_stream_follow(fs, 999), -libc::EBADF);
                let mut got = vec![];
                let mut buf = vec![0u8; 300_000];
                loop {
                    let n = dvrfs_stream_read(fs, sid, buf.as_mut_ptr().cast(), buf.len());
                    assert!(n >= 0, "{}", last_error());
                    if n == 0 {
                        break;
                    }
                    got.extend_from_slice(&buf[..n as usize]);
                }
                let want: Vec<u8> = (k.offset as usize..CHUNK_BYTES)
                    .map(|i| chunk_byte(1, i))
                    .chain((head as usize..CHUNK_BYTES).map(|i| chunk_byte(2, i)))
                    .collect();
                assert_eq!(got.len(), want.len());
                assert!(
                    got == want,
                    "the second chunk from 24 s, then the third past its head"
                );
                assert_eq!(dvrfs_stream_close(fs, sid, std::ptr::null_mut()), 0);
                assert_eq!(dvrfs_close(fs), 0);
            }
        },
    );
}
