//! A file's frame index through the C API: `dvrfs_keyframes` iterates it in
//! batches, `dvrfs_seek_frame` and `dvrfs_seek_time` find the keyframe a player
//! starts from; before the first keyframe, a file without an index, a NULL array
//! and a bad file number are errors with a message, never a crash.

mod common;

use common::{c, image, in_child, last_error, open};
use dvrfs::{
    dvrfs_close, dvrfs_file_open, dvrfs_keyframe, dvrfs_keyframes, dvrfs_seek_frame,
    dvrfs_seek_time,
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
