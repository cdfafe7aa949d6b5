//! Paths through the C API are bytes: a name that is not UTF-8 (as the mount creates
//! for a program that asks for one) can be created, opened and removed, and is
//! stored with exactly its bytes.

use dvrfs::{
    dvrfs_close, dvrfs_file_close, dvrfs_file_open, dvrfs_file_size, dvrfs_last_error, dvrfs_open,
    dvrfs_unlink, DVRFS_O_CREAT,
};
use dvrfs_core::layout::MkfsParams;
use dvrfs_core::tools::mkfs;
use dvrfs_core::{Fs, OpenOptions};
use dvrfs_io::{FileDevice, LockMode, SystemClock};
use std::ffi::{CStr, CString};

fn last_error() -> String {
    // SAFETY: a NUL-terminated string valid until the next dvrfs call on this thread.
    unsafe { CStr::from_ptr(dvrfs_last_error()) }
        .to_string_lossy()
        .into_owned()
}

/// The names in the root directory of the image at `path`, as stored.
fn root_names(path: &std::path::Path) -> Vec<Vec<u8>> {
    let dev = FileDevice::open(path, false, LockMode::Shared).unwrap();
    let fs = Fs::open_with(
        dev,
        OpenOptions::read_only(),
        Box::new(SystemClock::new()),
        None,
    )
    .unwrap();
    let root = fs.resolve("/").unwrap();
    fs.readdir(root)
        .unwrap()
        .into_iter()
        .map(|(name, _, _)| name)
        .collect()
}

#[test]
fn a_name_that_is_not_utf8_is_created_opened_and_removed_with_its_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("p.img");
    let size = 256 << 20;
    FileDevice::create_image(&path, size).unwrap();
    let mut dev = FileDevice::open(&path, true, LockMode::Exclusive).unwrap();
    mkfs(&mut dev, &MkfsParams::new(size, [4; 16], 5), &mut |_, _| {}).unwrap();
    drop(dev);
    let target = CString::new(path.to_str().unwrap()).unwrap();
    let latin1 = CString::new(&b"/caf\xe9.ts"[..]).unwrap();
    let missing = CString::new(&b"/gone\xff.ts"[..]).unwrap();
    let mut fs = std::ptr::null_mut();
    // SAFETY: valid C strings, NULL options, writable out pointers; the handle is
    // used only until dvrfs_close.
    unsafe {
        assert_eq!(dvrfs_open(target.as_ptr(), std::ptr::null(), &mut fs), 0);
        let fd = dvrfs_file_open(fs, latin1.as_ptr(), DVRFS_O_CREAT, 0o644);
        assert!(fd >= 0, "create: {}", last_error());
        assert_eq!(dvrfs_file_close(fs, fd), 0, "{}", last_error());
        let fd = dvrfs_file_open(fs, latin1.as_ptr(), 0, 0);
        assert!(fd >= 0, "open: {}", last_error());
        assert_eq!(dvrfs_file_size(fs, fd), 0);
        assert_eq!(dvrfs_file_close(fs, fd), 0, "{}", last_error());
        assert_eq!(
            dvrfs_file_open(fs, missing.as_ptr(), 0, 0),
            -libc::ENOENT,
            "{}",
            last_error()
        );
        assert_eq!(dvrfs_close(fs), 0);
    }
    assert_eq!(root_names(&path), [b"caf\xe9.ts".to_vec()]);
    // SAFETY: as above.
    unsafe {
        assert_eq!(dvrfs_open(target.as_ptr(), std::ptr::null(), &mut fs), 0);
        assert_eq!(dvrfs_unlink(fs, latin1.as_ptr()), 0, "{}", last_error());
        assert_eq!(dvrfs_close(fs), 0);
    }
    assert!(root_names(&path).is_empty());
}
