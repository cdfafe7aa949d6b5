//! Stream reservations through the C API: a recording's durability interval
//! (`dvrfs_stream_spec::durable_ns`) is the engine's, and one shorter than the
//! volume's commit interval is refused with `-EINVAL` and a message saying why.

use dvrfs::{
    dvrfs_close, dvrfs_file_close, dvrfs_file_open, dvrfs_last_error, dvrfs_open,
    dvrfs_stream_close, dvrfs_stream_info, dvrfs_stream_open, dvrfs_stream_spec, DVRFS_O_CREAT,
    DVRFS_STREAM_WRITE,
};
use dvrfs_core::layout::MkfsParams;
use dvrfs_core::tools::mkfs;
use dvrfs_io::{FileDevice, LockMode};
use std::ffi::{CStr, CString};

fn last_error() -> String {
    // SAFETY: a NUL-terminated string valid until the next dvrfs call on this thread.
    unsafe { CStr::from_ptr(dvrfs_last_error()) }
        .to_string_lossy()
        .into_owned()
}

fn spec(durable_ns: u64) -> dvrfs_stream_spec {
    dvrfs_stream_spec {
        direction: DVRFS_STREAM_WRITE,
        rate_bps: 1e6,
        request_bytes: 0,
        buffer_bytes: 0,
        reserve_bytes: 0,
        start_bytes: 0,
        durable_ns,
    }
}

#[test]
fn a_recordings_durability_interval_is_taken_and_a_too_short_one_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.img");
    let size = 512 << 20;
    FileDevice::create_image(&path, size).unwrap();
    let mut dev = FileDevice::open(&path, true, LockMode::Exclusive).unwrap();
    mkfs(&mut dev, &MkfsParams::new(size, [3; 16], 5), &mut |_, _| {}).unwrap();
    drop(dev);
    let target = CString::new(path.to_str().unwrap()).unwrap();
    let mut fs = std::ptr::null_mut();
    // SAFETY: valid C strings, NULL options, writable out pointers; the handle is
    // used only until dvrfs_close.
    unsafe {
        assert_eq!(dvrfs_open(target.as_ptr(), std::ptr::null(), &mut fs), 0);
        let name = CString::new("/cam.ts").unwrap();
        let fd = dvrfs_file_open(fs, name.as_ptr(), DVRFS_O_CREAT, 0o644);
        assert!(fd >= 0, "{}", last_error());
        let mut info: dvrfs_stream_info = std::mem::zeroed();
        let refused = dvrfs_stream_open(fs, fd, &spec(500_000_000), &mut info);
        assert_eq!(refused, -libc::EINVAL);
        let msg = last_error();
        assert!(
            msg.contains("cannot be shorter than the volume's commit interval"),
            "{msg}"
        );
        let sid = dvrfs_stream_open(fs, fd, &spec(3_000_000_000), &mut info);
        assert!(sid >= 0, "{}", last_error());
        assert!(info.buffer_bytes > 0);
        assert_eq!(dvrfs_stream_close(fs, sid, std::ptr::null_mut()), 0);
        // 0: the commit interval (the default), admitted too.
        let sid = dvrfs_stream_open(fs, fd, &spec(0), &mut info);
        assert!(sid >= 0, "{}", last_error());
        assert_eq!(dvrfs_stream_close(fs, sid, std::ptr::null_mut()), 0);
        assert_eq!(dvrfs_file_close(fs, fd), 0);
        assert_eq!(dvrfs_close(fs), 0);
    }
}
