//! A device held exclusively by another open refuses writers and readers alike.

mod common;

use common::*;
use dvrfs_io::{FileDevice, LockMode};

#[test]
fn commands_fail_with_the_in_use_message_while_another_holds_the_device() {
    let dir = tempdir();
    let img = dir.path().join("fs.img");
    mkfs(&img, "64M", &["--block-size", "1M"]);
    let p = img.to_str().expect("utf-8");
    {
        let _held = FileDevice::open(&img, true, LockMode::Exclusive).expect("hold the image");
        fails(dvrfs(["mkdir", p, "/d"]), "in use");
        fails(dvrfs(["ls", p]), "in use");
        fails(dvrfs(["mkfs", p, "--force"]), "in use");
        let o = dvrfs(["fsck", p]);
        assert_eq!(code(&o), 8);
        fails(o, "in use");
    }
    {
        // Readers share: ls works under a shared hold, a writer does not.
        let _reader = FileDevice::open(&img, false, LockMode::Shared).expect("shared hold");
        ok(dvrfs(["ls", p]));
        fails(dvrfs(["mkdir", p, "/d"]), "in use");
    }
    ok(dvrfs(["mkdir", p, "/d"]));
    assert_eq!(stdout(&dvrfs(["ls", p])).trim(), "d/");
}
