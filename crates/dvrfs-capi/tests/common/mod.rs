//! What the C API's tests share: a fresh volume image, this thread's last error, and
//! running a test's body in a child process, so that a crash of the library (an
//! abort, a segmentation fault) fails that test instead of ending the whole run.

#![allow(dead_code)] // not every test binary uses every helper

use dvrfs_core::layout::MkfsParams;
use dvrfs_core::tools::mkfs;
use dvrfs_io::{FileDevice, LockMode};
use std::ffi::{CStr, CString};
use std::path::Path;
use std::process::Command;

/// Set in the child: the name of the test whose body it runs.
const CHILD_VAR: &str = "DVRFS_CAPI_TEST_CHILD";

/// Runs `body` in a child process (this test binary again, running only the test
/// `name`, with `CHILD_VAR` set to it), and fails unless the child exits 0. In the
/// child, runs `body` itself. `name` is the test function's name.
pub fn in_child(name: &str, body: impl FnOnce()) {
    if std::env::var(CHILD_VAR).as_deref() == Ok(name) {
        body();
        return;
    }
    let exe = std::env::current_exe().expect("the test binary's path");
    let out = Command::new(exe)
        .args([name, "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD_VAR, name)
        .output()
        .expect("run the test binary again as a child");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "{name} failed in its child process ({}):\n--- stdout\n{stdout}\n--- stderr\n{stderr}",
        describe(&out.status)
    );
    // The filter matched: the child ran exactly this test.
    assert!(
        stdout.contains("1 passed"),
        "the child did not run {name}:\n{stdout}"
    );
}

fn describe(s: &std::process::ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (s.code(), s.signal()) {
        (Some(c), _) => format!("exit code {c}"),
        (None, Some(sig)) => format!("killed by signal {sig} (a crash)"),
        _ => "no status".into(),
    }
}

/// Makes a fresh `size_bytes` volume image at `path` (seeded `seed`).
pub fn image(path: &Path, size_bytes: u64, seed: u8) {
    FileDevice::create_image(path, size_bytes).unwrap();
    let mut dev = FileDevice::open(path, true, LockMode::Exclusive).unwrap();
    mkfs(
        &mut dev,
        &MkfsParams::new(size_bytes, [seed; 16], 5),
        &mut |_, _| {},
    )
    .unwrap();
}

/// fsck of the (closed) image at `path`: clean, or the test fails with what it found.
pub fn assert_fsck_clean(path: &Path) {
    let dev = FileDevice::open(path, false, LockMode::Shared).unwrap();
    let (report, _) = dvrfs_core::tools::fsck::fsck(dev, false, &mut |_, _| {}).expect("fsck ran");
    assert!(
        report.clean(),
        "fsck found {} errors, first: {:#?}",
        report.errors.len(),
        &report.errors[..report.errors.len().min(8)]
    );
}

pub fn c(s: &str) -> CString {
    CString::new(s).expect("no NUL in a test string")
}

/// This thread's last error from the library.
pub fn last_error() -> String {
    // SAFETY: a NUL-terminated string valid until the next dvrfs call on this thread;
    // copied at once.
    unsafe { CStr::from_ptr(dvrfs::dvrfs_last_error()) }
        .to_string_lossy()
        .into_owned()
}

/// Opens the volume at `path` (NULL options): the handle.
pub fn open(path: &Path) -> *mut dvrfs::dvrfs {
    let target = c(path.to_str().expect("a UTF-8 path"));
    let mut fs = std::ptr::null_mut();
    // SAFETY: a NUL-terminated path, NULL options, a writable out pointer.
    let r = unsafe { dvrfs::dvrfs_open(target.as_ptr(), std::ptr::null(), &mut fs) };
    assert_eq!(r, 0, "dvrfs_open: {}", last_error());
    fs
}

/// A `DVRFS_ALIGN`-aligned buffer for asynchronous I/O.
pub struct Aligned {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: the buffer is owned memory, used by one thread at a time.
unsafe impl Send for Aligned {}

impl Aligned {
    fn layout(len: usize) -> std::alloc::Layout {
        std::alloc::Layout::from_size_align(len.max(1), dvrfs::DVRFS_ALIGN as usize).unwrap()
    }

    pub fn zeroed(len: usize) -> Aligned {
        // SAFETY: a non-zero size.
        let ptr = unsafe { std::alloc::alloc_zeroed(Self::layout(len)) };
        assert!(!ptr.is_null(), "out of memory");
        Aligned { ptr, len }
    }

    pub fn from(bytes: &[u8]) -> Aligned {
        let mut b = Aligned::zeroed(bytes.len());
        b.as_mut().copy_from_slice(bytes);
        b
    }

    pub fn as_ref(&self) -> &[u8] {
        // SAFETY: `len` bytes allocated and initialised (zeroed) by `zeroed`.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }

    pub fn as_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `as_ref`, and borrowed mutably.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }

    pub fn ptr(&mut self) -> *mut std::ffi::c_void {
        self.ptr.cast()
    }

    pub fn len(&self) -> usize {
        self.len
    }
}

impl Drop for Aligned {
    fn drop(&mut self) {
        // SAFETY: allocated in `zeroed` with this layout.
        unsafe { std::alloc::dealloc(self.ptr, Self::layout(self.len)) }
    }
}

/// A control block for `len` bytes of `buf` at `offset` of file `fd`.
pub fn cb(fd: i32, write: bool, offset: u64, buf: &mut Aligned) -> dvrfs::dvrfs_aiocb {
    dvrfs::dvrfs_aiocb {
        aio_fildes: fd,
        aio_lio_opcode: if write {
            dvrfs::DVRFS_AIO_WRITE
        } else {
            dvrfs::DVRFS_AIO_READ
        },
        aio_offset: offset,
        aio_buf: buf.ptr(),
        aio_nbytes: buf.len() as u64,
        aio_deadline: 0,
        aio_result: 0,
        aio_late: 0,
        aio_private: 0,
    }
}

/// One asynchronous request, waited for: its `aio_result`, or the start's error.
pub fn aio(fs: *mut dvrfs::dvrfs, fd: i32, write: bool, offset: u64, buf: &mut Aligned) -> i64 {
    let mut b = cb(fd, write, offset, buf);
    // SAFETY: `b` and its buffer live until the check reports it done.
    unsafe {
        let r = dvrfs::dvrfs_aio_start(fs, &mut b);
        if r != 0 {
            return r as i64;
        }
        assert_eq!(dvrfs::dvrfs_aio_check(fs, &mut b, 1), 1, "{}", last_error());
    }
    b.aio_result
}

/// The first `len` bytes of file `fd` (fewer at its end), read asynchronously.
pub fn read_at(fs: *mut dvrfs::dvrfs, fd: i32, offset: u64, len: usize) -> Vec<u8> {
    let mut buf = Aligned::zeroed(len);
    let n = aio(fs, fd, false, offset, &mut buf);
    assert!(n >= 0, "read of file {fd}: {n} {}", last_error());
    buf.as_ref()[..n as usize].to_vec()
}

/// The streams the tests open: 40 Mbit/s in 64 KiB requests, a 256 KiB buffer.
pub fn spec(direction: i32) -> dvrfs::dvrfs_stream_spec {
    dvrfs::dvrfs_stream_spec {
        direction,
        rate_bps: 40e6,
        request_bytes: 64 << 10,
        buffer_bytes: 256 << 10,
        reserve_bytes: 0,
        start_bytes: 0,
        durable_ns: 0,
    }
}
