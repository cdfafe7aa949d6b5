//! Handles that cannot outlive their object (issue 22, items 1-4): a file number or a
//! stream holds its file after the file's name is removed, so it never writes into a
//! file created later; a file takes one recording; a closed volume handle stays
//! `-EBADF` whatever is opened after it; an unknown stream number or an absurd length
//! is an error before anything is allocated. Each runs in a child process
//! (`common::in_child`): a crash of the library fails the test, not the run.

mod common;

use ::dvrfs::{
    dvrfs as Dvrfs, dvrfs_aio_check, dvrfs_aio_poll, dvrfs_aio_start, dvrfs_aiocb, dvrfs_close,
    dvrfs_file_close, dvrfs_file_open, dvrfs_file_size, dvrfs_fsync, dvrfs_stream_close,
    dvrfs_stream_open, dvrfs_stream_read, dvrfs_stream_write, dvrfs_unlink, DVRFS_O_CREAT,
    DVRFS_O_RDONLY, DVRFS_STREAM_IO_MAX, DVRFS_STREAM_READ, DVRFS_STREAM_WRITE,
};
use common::{
    aio, assert_fsck_clean, c, image, in_child, last_error, open, read_at, spec, Aligned,
};
use std::ptr::null_mut;

fn create(fs: *mut Dvrfs, path: &str) -> i32 {
    let p = c(path);
    // SAFETY: a handle from dvrfs_open and a NUL-terminated path.
    let fd = unsafe { dvrfs_file_open(fs, p.as_ptr(), DVRFS_O_CREAT, 0o644) };
    assert!(fd >= 0, "create {path}: {fd} {}", last_error());
    fd
}

fn unlink(fs: *mut Dvrfs, path: &str) {
    let p = c(path);
    // SAFETY: as in `create`.
    let r = unsafe { dvrfs_unlink(fs, p.as_ptr()) };
    assert_eq!(r, 0, "unlink {path}: {}", last_error());
}

fn size(fs: *mut Dvrfs, fd: i32) -> i64 {
    // SAFETY: any handle and number are checked.
    unsafe { dvrfs_file_size(fs, fd) }
}

fn close_file(fs: *mut Dvrfs, fd: i32) {
    // SAFETY: any handle and number are checked.
    let r = unsafe { dvrfs_file_close(fs, fd) };
    assert_eq!(r, 0, "close file {fd}: {}", last_error());
}

fn close(fs: *mut Dvrfs) {
    // SAFETY: any handle is checked.
    let r = unsafe { dvrfs_close(fs) };
    assert_eq!(r, 0, "dvrfs_close: {}", last_error());
}

fn stream_open(fs: *mut Dvrfs, fd: i32, direction: i32) -> i32 {
    // SAFETY: a valid spec; NULL info is allowed.
    unsafe { dvrfs_stream_open(fs, fd, &spec(direction), null_mut()) }
}

fn stream_write(fs: *mut Dvrfs, sid: i32, bytes: &[u8]) -> i64 {
    // SAFETY: `bytes` holds `len` readable bytes.
    unsafe { dvrfs_stream_write(fs, sid, bytes.as_ptr().cast(), bytes.len()) }
}

fn stream_close(fs: *mut Dvrfs, sid: i32) {
    // SAFETY: NULL stats are allowed.
    let r = unsafe { dvrfs_stream_close(fs, sid, null_mut()) };
    assert_eq!(r, 0, "close stream {sid}: {}", last_error());
}

fn file_open(fs: *mut Dvrfs, path: &str) -> i32 {
    let p = c(path);
    // SAFETY: a NUL-terminated path; any handle is checked.
    unsafe { dvrfs_file_open(fs, p.as_ptr(), 0, 0) }
}

#[test]
fn a_file_number_writes_into_its_own_file_after_the_name_is_removed() {
    in_child(
        "a_file_number_writes_into_its_own_file_after_the_name_is_removed",
        || {
            let dir = tempfile::tempdir().unwrap();
            let img = dir.path().join("v.img");
            image(&img, 256 << 20, 1);
            let fs = open(&img);
            let old = create(fs, "/old");
            assert_eq!(
                aio(fs, old, true, 0, &mut Aligned::from(&[b'A'; 8192])),
                8192
            );
            unlink(fs, "/old");
            let new = create(fs, "/new");
            // Through the old number: into the removed file, which it holds.
            let n = aio(fs, old, true, 0, &mut Aligned::from(&[b'B'; 8192]));
            assert_eq!(n, 8192, "{}", last_error());
            assert_eq!(size(fs, new), 0, "the write went into /new");
            assert!(read_at(fs, new, 0, 8192).is_empty());
            assert_eq!(read_at(fs, old, 0, 8192), vec![b'B'; 8192]);
            close_file(fs, old);
            close_file(fs, new);
            close(fs);
            assert_fsck_clean(&img);
            let fs = open(&img);
            assert_eq!(file_open(fs, "/old"), -libc::ENOENT);
            let new = file_open(fs, "/new");
            assert!(new >= 0, "{}", last_error());
            assert_eq!(size(fs, new), 0);
            close(fs);
        },
    );
}

#[test]
fn a_stream_writes_into_its_own_file_after_the_number_closes_and_the_name_goes() {
    in_child(
        "a_stream_writes_into_its_own_file_after_the_number_closes_and_the_name_goes",
        || {
            let dir = tempfile::tempdir().unwrap();
            let img = dir.path().join("v.img");
            image(&img, 256 << 20, 2);
            let fs = open(&img);
            let old = create(fs, "/old.ts");
            let sid = stream_open(fs, old, DVRFS_STREAM_WRITE);
            assert!(sid >= 0, "{}", last_error());
            assert_eq!(stream_write(fs, sid, &[1; 100_000]), 100_000);
            close_file(fs, old);
            unlink(fs, "/old.ts");
            let new = create(fs, "/new.ts");
            assert_eq!(
                stream_write(fs, sid, &[2; 1 << 20]),
                1 << 20,
                "{}",
                last_error()
            );
            stream_close(fs, sid);
            assert_eq!(size(fs, new), 0, "the recording went into /new.ts");
            close_file(fs, new);
            close(fs);
            assert_fsck_clean(&img);
        },
    );
}

#[test]
fn a_second_recording_on_a_file_is_busy() {
    in_child("a_second_recording_on_a_file_is_busy", || {
        let dir = tempfile::tempdir().unwrap();
        let img = dir.path().join("v.img");
        image(&img, 256 << 20, 3);
        let fs = open(&img);
        let fd = create(fs, "/cam.ts");
        let first = stream_open(fs, fd, DVRFS_STREAM_WRITE);
        assert!(first >= 0, "{}", last_error());
        // Through another number of the same file too.
        let other = file_open(fs, "/cam.ts");
        assert!(other >= 0, "{}", last_error());
        for f in [fd, other] {
            assert_eq!(stream_open(fs, f, DVRFS_STREAM_WRITE), -libc::EBUSY);
            let msg = last_error();
            assert!(msg.contains("already has a recording"), "{msg}");
        }
        // A playback beside it is admitted.
        let play = stream_open(fs, other, DVRFS_STREAM_READ);
        assert!(play >= 0, "{}", last_error());
        assert_eq!(stream_write(fs, first, &[5; 300_000]), 300_000);
        stream_close(fs, play);
        stream_close(fs, first);
        // The first closed, the next recording is admitted and appends.
        let second = stream_open(fs, other, DVRFS_STREAM_WRITE);
        assert!(second >= 0, "{}", last_error());
        assert_eq!(stream_write(fs, second, &[6; 100_000]), 100_000);
        stream_close(fs, second);
        let mut want = vec![5u8; 300_000];
        want.extend_from_slice(&[6; 100_000]);
        assert!(read_at(fs, fd, 0, 512 << 10) == want, "bytes differ");
        close(fs);
    });
}

#[test]
fn a_closed_handle_stays_bad_after_a_later_open_of_another_volume() {
    in_child(
        "a_closed_handle_stays_bad_after_a_later_open_of_another_volume",
        || {
            let dir = tempfile::tempdir().unwrap();
            let (a, b) = (dir.path().join("a.img"), dir.path().join("b.img"));
            image(&a, 128 << 20, 4);
            image(&b, 128 << 20, 5);
            let fa = open(&a);
            close(fa);
            // Memory the first handle used may go to the next open: its token may not.
            let fb = open(&b);
            assert_ne!(fa, fb, "a later open gave the closed handle's value again");
            let x = c("/x");
            // SAFETY: any handle value is checked.
            unsafe {
                assert_eq!(
                    dvrfs_file_open(fa, x.as_ptr(), DVRFS_O_CREAT, 0o644),
                    -libc::EBADF
                );
                assert_eq!(dvrfs_fsync(fa), -libc::EBADF);
                assert_eq!(dvrfs_close(fa), -libc::EBADF);
                // Values no handle ever had: refused, not dereferenced.
                for bogus in [1usize, 0x1234, 0x7fff_0000, usize::MAX] {
                    assert_eq!(dvrfs_fsync(bogus as *mut Dvrfs), -libc::EBADF);
                }
            }
            assert_eq!(
                file_open(fb, "/x"),
                -libc::ENOENT,
                "the closed handle acted on b"
            );
            // File numbers are not reused either: a closed one stays closed.
            let f1 = create(fb, "/y");
            close_file(fb, f1);
            let f2 = file_open(fb, "/y");
            assert_ne!(f1, f2);
            assert_eq!(size(fb, f1), -(libc::EBADF as i64));
            close(fb);
        },
    );
}

#[test]
fn unknown_streams_and_absurd_lengths_are_refused_before_anything_is_allocated() {
    in_child(
        "unknown_streams_and_absurd_lengths_are_refused_before_anything_is_allocated",
        || {
            let dir = tempfile::tempdir().unwrap();
            let img = dir.path().join("v.img");
            image(&img, 256 << 20, 6);
            let fs = open(&img);
            let mut buf = vec![0u8; 4096];
            // SAFETY: the calls are refused before `buf` is touched; the lengths are
            // the attack (issue 22, item 4).
            unsafe {
                for sid in [9999, -1, i32::MAX] {
                    let r = dvrfs_stream_read(fs, sid, buf.as_mut_ptr().cast(), 1 << 40);
                    assert_eq!(r, -(libc::EBADF as i64), "{}", last_error());
                    let r = dvrfs_stream_write(fs, sid, buf.as_ptr().cast(), 1 << 40);
                    assert_eq!(r, -(libc::EBADF as i64), "{}", last_error());
                    assert_eq!(dvrfs_stream_close(fs, sid, null_mut()), -libc::EBADF);
                }
            }
            // A real playback asked for far more than its file: at most
            // DVRFS_STREAM_IO_MAX per call, the file's bytes, then the end.
            let fd = create(fs, "/f");
            let data: Vec<u8> = (0..100_000u32).map(|i| (i % 253) as u8).collect();
            let mut w = Aligned::zeroed(100_000);
            w.as_mut().copy_from_slice(&data);
            assert_eq!(aio(fs, fd, true, 0, &mut w), 100_000);
            let sid = stream_open(fs, fd, DVRFS_STREAM_READ);
            assert!(sid >= 0, "{}", last_error());
            let mut big = vec![0u8; DVRFS_STREAM_IO_MAX as usize];
            let mut got = vec![];
            loop {
                // SAFETY: `big` holds DVRFS_STREAM_IO_MAX bytes, all a read may fill
                // whatever length it is given.
                let n = unsafe { dvrfs_stream_read(fs, sid, big.as_mut_ptr().cast(), 1 << 40) };
                assert!(n >= 0, "{}", last_error());
                if n == 0 {
                    break;
                }
                got.extend_from_slice(&big[..n as usize]);
            }
            assert!(got == data, "the playback read other bytes");
            // A recording stream cannot be read, a playback not written.
            // SAFETY: the calls are refused before `buf` is touched.
            unsafe {
                let r = dvrfs_stream_write(fs, sid, buf.as_ptr().cast(), 1 << 40);
                assert_eq!(r, -(libc::EINVAL as i64), "{}", last_error());
            }
            stream_close(fs, sid);
            // SAFETY: a closed stream's number is refused.
            unsafe {
                let r = dvrfs_stream_read(fs, sid, buf.as_mut_ptr().cast(), 1 << 40);
                assert_eq!(r, -(libc::EBADF as i64));
            }
            // A poll of more control blocks than any list holds.
            let mut b = Aligned::zeroed(4096);
            let mut cb = common::cb(fd, false, 0, &mut b);
            // SAFETY: `cb` lives until it is reported done; the poll's count is the
            // attack and is refused before the list is read.
            unsafe {
                assert_eq!(dvrfs_aio_start(fs, &mut cb), 0);
                let list = [&cb as *const dvrfs_aiocb];
                assert_eq!(
                    dvrfs_aio_poll(fs, list.as_ptr(), i32::MAX, 0),
                    -libc::EINVAL
                );
                assert_eq!(dvrfs_aio_check(fs, &mut cb, 1), 1);
            }
            close_file(fs, fd);
            close(fs);
        },
    );
}

#[test]
fn a_read_only_number_reads_and_refuses_writes_and_recordings() {
    in_child(
        "a_read_only_number_reads_and_refuses_writes_and_recordings",
        || {
            let dir = tempfile::tempdir().unwrap();
            let img = dir.path().join("v.img");
            image(&img, 256 << 20, 1);
            let fs = open(&img);
            let w = create(fs, "/clip");
            assert_eq!(aio(fs, w, true, 0, &mut Aligned::from(&[b'A'; 8192])), 8192);
            close_file(fs, w);
            let p = c("/clip");
            let open_with = |flags| {
                // SAFETY: a NUL-terminated path; any handle is checked.
                unsafe { dvrfs_file_open(fs, p.as_ptr(), flags, 0o644) }
            };
            let r = open_with(DVRFS_O_RDONLY);
            assert!(r >= 0, "{}", last_error());
            assert_eq!(read_at(fs, r, 0, 8192), vec![b'A'; 8192]);
            let n = aio(fs, r, true, 0, &mut Aligned::from(&[b'B'; 4096]));
            assert_eq!(n, -libc::EBADF as i64);
            assert!(last_error().contains("DVRFS_O_RDONLY"), "{}", last_error());
            assert_eq!(stream_open(fs, r, DVRFS_STREAM_WRITE), -libc::EBADF);
            let play = stream_open(fs, r, DVRFS_STREAM_READ);
            assert!(play >= 0, "a playback reads: {}", last_error());
            stream_close(fs, play);
            assert_eq!(open_with(DVRFS_O_CREAT | DVRFS_O_RDONLY), -libc::EINVAL);
            assert_eq!(open_with(8), -libc::EINVAL);
            close_file(fs, r);
            close(fs);
            assert_fsck_clean(&img);
        },
    );
}
