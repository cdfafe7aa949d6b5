//! Advisory locking: flock is per open file description, so opens in one process conflict.

mod common;

use common::TempDir;
use dvrfs_io::{FileDevice, LockMode, OpenError};

fn assert_in_use(r: Result<FileDevice, OpenError>, what: &str) {
    match r {
        Err(e @ OpenError::InUse { .. }) => {
            let msg = e.to_string();
            assert!(msg.contains("in use by another dvrfs process"), "{msg}");
            assert!(msg.contains("stop it first"), "{msg}");
        }
        Err(e) => panic!("{what}: expected InUse, got {e}"),
        Ok(_) => panic!("{what}: expected InUse, but the open succeeded"),
    }
}

#[test]
fn exclusive_excludes_everyone_until_dropped() {
    let dir = TempDir::new("lockx");
    let path = dir.path().join("a.img");
    FileDevice::create_image(&path, 1 << 20).expect("create");

    let writer = FileDevice::open(&path, true, LockMode::Exclusive).expect("first exclusive");
    assert_in_use(
        FileDevice::open(&path, true, LockMode::Exclusive),
        "second exclusive",
    );
    assert_in_use(FileDevice::open(&path, false, LockMode::Shared), "shared");
    assert_in_use(
        FileDevice::open(&path, false, LockMode::Exclusive),
        "read-only exclusive",
    );
    // Growing an image that is in use is refused as well.
    let err = FileDevice::create_image(&path, 2 << 20).expect_err("grow while in use");
    assert!(matches!(err, OpenError::InUse { .. }), "{err}");
    drop(writer);

    let again = FileDevice::open(&path, true, LockMode::Exclusive).expect("exclusive after drop");
    drop(again);
    FileDevice::open(&path, false, LockMode::Shared).expect("shared after drop");
}

#[test]
fn shared_allows_shared_but_not_exclusive() {
    let dir = TempDir::new("locks");
    let path = dir.path().join("b.img");
    FileDevice::create_image(&path, 1 << 20).expect("create");

    let r1 = FileDevice::open(&path, false, LockMode::Shared).expect("shared 1");
    let r2 = FileDevice::open(&path, false, LockMode::Shared).expect("shared 2");
    assert_in_use(
        FileDevice::open(&path, true, LockMode::Exclusive),
        "exclusive vs shared",
    );
    drop(r1);
    assert_in_use(
        FileDevice::open(&path, true, LockMode::Exclusive),
        "exclusive vs one shared",
    );
    drop(r2);
    FileDevice::open(&path, true, LockMode::Exclusive).expect("exclusive after readers left");
}
