//! A truncated image (an image file cut short: a full disk, a copy that stopped, a
//! careless `truncate`): what it still holds can be read, every command that cannot
//! go on says by how much it is short and the `truncate -s` that restores its size,
//! and `fsck --repair` extends it itself and repairs it, losing only the files whose
//! data lay in the missing part.

mod common;

use std::path::Path;

use common::*;

const VOLUME_BYTES: u64 = 512 << 20;
const KEPT_BYTES: u64 = 300 << 20;
const FILES: u64 = 8;
const FILE_BYTES: u64 = 3_000_000;

fn s(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

/// A 512 MiB volume with eight 3 MB files, then its image cut to 300 MiB: the
/// round-robin allocator spreads the files over the zones, so some of them lay in the
/// part cut off and some did not.
fn truncated_volume(dir: &Path) -> std::path::PathBuf {
    let img = dir.join("rec.img");
    mkfs(&img, "512M", &[]);
    for i in 0..FILES {
        let local = random_file(&dir.join(format!("f{i}.bin")), FILE_BYTES, i + 1);
        ok(dvrfs(["put", s(&img), s(&local), &format!("/f{i}.bin")]));
    }
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(&img)
        .expect("open the image");
    f.set_len(KEPT_BYTES).expect("truncate the image");
    img
}

/// Which files `get` returns whole (checked against what was put), after asserting
/// that every other one fails with the past-the-end error naming it.
fn readable_files(dir: &Path, img: &Path) -> Vec<u64> {
    let mut whole = vec![];
    for i in 0..FILES {
        let back = dir.join(format!("back{i}.bin"));
        let _ = std::fs::remove_file(&back);
        let o = dvrfs(["get", s(img), &format!("/f{i}.bin"), s(&back)]);
        if o.status.success() {
            assert_eq!(
                sha256_file(&dir.join(format!("f{i}.bin"))),
                sha256_file(&back),
                "/f{i}.bin came back different"
            );
            whole.push(i);
        } else {
            let err = fails(o, &format!("/f{i}.bin: bytes"));
            assert!(err.contains("past the end"), "{err}");
        }
    }
    whole
}

#[test]
fn a_truncated_image_is_readable_and_says_how_to_restore_its_size() {
    let dir = tempdir();
    let img = truncated_volume(dir.path());
    let missing = VOLUME_BYTES - KEPT_BYTES;

    // The namespace is all there (the metadata lies at the start).
    let listing = ok(dvrfs(["ls", s(&img), "/"]));
    for i in 0..FILES {
        assert!(listing.contains(&format!("f{i}.bin")), "{listing}");
    }
    ok(dvrfs(["stat", s(&img), "/f0.bin"]));
    ok(dvrfs(["info", s(&img)]));
    let whole = readable_files(dir.path(), &img);
    assert!(
        !whole.is_empty() && whole.len() < FILES as usize,
        "the test needs files on both sides of the cut: {whole:?} read whole"
    );

    // A write is refused with the size and the command that restores it.
    let local = dir.path().join("f0.bin");
    let err = fails(
        dvrfs(["put", s(&img), s(&local), "/new.bin"]),
        &format!("({missing} bytes) shorter than the volume"),
    );
    assert!(
        err.contains(&format!("truncate -s {VOLUME_BYTES} {}", s(&img))),
        "{err}"
    );
    assert!(err.contains("fsck --repair"), "{err}");

    // fsck without --repair: the one finding, and what to do.
    let o = dvrfs(["fsck", s(&img)]);
    assert_eq!(code(&o), 4, "{}", stderr(&o));
    let err = stderr(&o);
    assert!(
        err.contains(&format!("truncate -s {VOLUME_BYTES}")),
        "fsck does not say how to extend the image: {err}"
    );
    assert_eq!(std::fs::metadata(&img).expect("stat").len(), KEPT_BYTES);
    let v = json(&stdout(&dvrfs(["fsck", "--json", s(&img)])));
    assert_eq!(v["truncated"]["volume_bytes"], VOLUME_BYTES, "{v}");
    assert_eq!(v["truncated"]["device_bytes"], KEPT_BYTES, "{v}");

    // fsck --repair extends it and repairs it; the intact files are still whole.
    let o = dvrfs(["fsck", "--repair", s(&img)]);
    assert_eq!(code(&o), 1, "{}\n{}", stdout(&o), stderr(&o));
    let out = stdout(&o);
    assert!(
        out.contains(&format!(
            "extended from {KEPT_BYTES} to {VOLUME_BYTES} bytes"
        )),
        "{out}"
    );
    assert_eq!(std::fs::metadata(&img).expect("stat").len(), VOLUME_BYTES);
    assert_clean(&img);
    for i in &whole {
        let back = dir.path().join(format!("again{i}.bin"));
        get_to(&img, &format!("/f{i}.bin"), &back);
        assert_eq!(
            sha256_file(&dir.path().join(format!("f{i}.bin"))),
            sha256_file(&back)
        );
    }
    // The volume is writable again.
    ok(dvrfs(["put", s(&img), s(&local), "/new.bin"]));
    assert_clean(&img);
}
