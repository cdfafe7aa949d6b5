//! What `dvrfs_last_error` tells a C programmer: what was wrong and what to do, in the
//! C API's own terms (its functions, the `dvrfs` command), never a Rust function of
//! the library's insides.

use std::ffi::{CStr, CString};
use std::path::Path;

/// `dvrfs_open(target, NULL, &fs)`: its code and this thread's last error.
fn open(target: &Path) -> (i32, String) {
    let c = CString::new(target.to_str().expect("utf-8 path")).expect("no NUL");
    let mut fs: *mut dvrfs::dvrfs = std::ptr::null_mut();
    // SAFETY: a NUL-terminated path, NULL options (allowed), a writable pointer.
    let code = unsafe { dvrfs::dvrfs_open(c.as_ptr(), std::ptr::null(), &mut fs) };
    assert!(fs.is_null(), "the open was expected to fail");
    (code, last_error())
}

fn last_error() -> String {
    // SAFETY: dvrfs_last_error returns a NUL-terminated string that stays valid until
    // the next dvrfs call on this thread; it is copied at once.
    unsafe { CStr::from_ptr(dvrfs::dvrfs_last_error()) }
        .to_string_lossy()
        .into_owned()
}

/// Every word in backquotes is C API vocabulary: a `dvrfs_*` function or a `dvrfs`
/// command line; nothing with a Rust path (`::`) anywhere.
#[track_caller]
fn in_c_terms(msg: &str) {
    assert!(!msg.contains("::"), "a Rust path in {msg:?}");
    for (i, quoted) in msg.split('`').enumerate() {
        if i % 2 == 1 {
            assert!(
                quoted.starts_with("dvrfs_") || quoted.starts_with("dvrfs "),
                "`{quoted}` is not the C API's in {msg:?}"
            );
        }
    }
}

#[test]
fn opening_a_missing_volume_says_how_to_make_one_in_the_c_apis_terms() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing.img");
    let (code, msg) = open(&missing);
    assert_eq!(code, -libc::ENOENT, "{msg}");
    assert!(!msg.contains("create_image"), "{msg}");
    assert!(msg.contains(&missing.display().to_string()), "{msg}");
    assert!(
        msg.contains(&format!("dvrfs mkfs {}", missing.display())),
        "{msg}"
    );
    in_c_terms(&msg);
}

#[test]
fn other_refused_opens_speak_the_c_apis_terms() {
    let dir = tempfile::tempdir().unwrap();
    // A directory, and a file that holds no volume.
    let junk = dir.path().join("junk.img");
    std::fs::write(&junk, vec![0x5a; 1 << 20]).unwrap();
    for target in [dir.path(), junk.as_path()] {
        let (code, msg) = open(target);
        assert!(code < 0, "{msg}");
        assert!(!msg.is_empty());
        in_c_terms(&msg);
    }
    // A NULL destination for the handle.
    let c = CString::new(junk.to_str().unwrap()).unwrap();
    // SAFETY: a NUL-terminated path; a NULL `out` is what is checked.
    let code = unsafe { dvrfs::dvrfs_open(c.as_ptr(), std::ptr::null(), std::ptr::null_mut()) };
    assert_eq!(code, -libc::EFAULT);
    in_c_terms(&last_error());
}
