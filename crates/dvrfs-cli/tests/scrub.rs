//! `dvrfs scrub` and the data checksums from the command line: damage to file bytes on
//! the image is found, named by path and byte range, and never read back as data.

mod common;

use std::path::Path;

use common::*;

fn s(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

/// Flips one byte of the image where `needle` (bytes of a file) is stored, `skip`
/// bytes into it. Returns the image offset.
fn flip_in_image(img: &Path, needle: &[u8], skip: usize) -> usize {
    let mut b = std::fs::read(img).unwrap();
    let at = b
        .windows(needle.len())
        .position(|w| w == needle)
        .expect("the file's bytes are in the image");
    b[at + skip] ^= 0x40;
    std::fs::write(img, &b).unwrap();
    at + skip
}

#[test]
fn scrub_finds_a_flipped_byte_and_get_names_it() {
    let dir = tempdir();
    let img = dir.path().join("fs.img");
    mkfs(&img, "64M", &["--block-size", "1M"]);
    let info = json(&ok(dvrfs(["info", s(&img), "--json"])));
    assert_eq!(info["checksum_granule"], 512 << 10, "{info}");
    let src = random_file(&dir.path().join("v"), (3 << 20) + 777, 5);
    ok(dvrfs(["mkdir", s(&img), "/cam"]));
    ok(dvrfs(["put", s(&img), s(&src), "/cam/v.ts"]));
    let clean = dvrfs(["scrub", s(&img), "--json"]);
    assert_eq!(code(&clean), 0, "{}", stderr(&clean));
    let v = json(&stdout(&clean));
    assert_eq!(v["files"], 1, "{v}");
    assert_eq!(v["bytes_checked"], (3 << 20) + 777, "{v}");
    assert_eq!(v["bytes_unchecked"], 0, "{v}");

    // A byte of the second 512 KiB granule of the file's third megabyte.
    let want = std::fs::read(&src).unwrap();
    let off = (2 << 20) + (512 << 10) + 10;
    flip_in_image(&img, &want[off..off + 64], 0);
    let (g0, g1) = ((2 << 20) + (512 << 10), 3 << 20);

    let o = dvrfs(["scrub", s(&img)]);
    assert_eq!(code(&o), 3, "{}", stderr(&o));
    assert!(
        stdout(&o).contains(&format!(
            "/cam/v.ts: bytes {g0} to {g1}: data checksum mismatch"
        )),
        "{}",
        stdout(&o)
    );
    let v = json(&stdout(&dvrfs(["scrub", s(&img), "--json"])));
    assert_eq!(v["exit_code"], 3, "{v}");
    assert_eq!(v["damaged"][0]["path"], "/cam/v.ts", "{v}");
    assert_eq!(v["damaged"][0]["offset"], g0, "{v}");
    assert_eq!(v["damaged"][0]["end"], g1, "{v}");

    let back = dir.path().join("back");
    fails(
        dvrfs(["get", s(&img), "/cam/v.ts", s(&back)]),
        &format!("/cam/v.ts: bytes {g0} to {g1} do not match their data checksum"),
    );
    let o = dvrfs(["get", s(&img), "/cam/v.ts", s(&back), "--salvage"]);
    assert_eq!(code(&o), 3, "{}", stderr(&o));
    assert!(
        stderr(&o).contains(&format!("bytes {g0} to {g1}: data checksum mismatch")),
        "{}",
        stderr(&o)
    );
    let got = std::fs::read(&back).unwrap();
    assert_eq!(got[..g0], want[..g0]);
    assert!(got[g0..g1].iter().all(|&x| x == 0));
    assert_eq!(got[g1..], want[g1..]);
    // Metadata is untouched by data damage.
    assert_eq!(code(&dvrfs(["fsck", s(&img)])), 0);
}

#[test]
fn a_volume_made_without_checksums_says_so_and_scrub_only_reads() {
    let dir = tempdir();
    let img = dir.path().join("fs.img");
    mkfs(
        &img,
        "64M",
        &["--block-size", "1M", "--checksum-granule", "off"],
    );
    let info = ok(dvrfs(["info", s(&img)]));
    assert!(info.contains("data checksums   none"), "{info}");
    let src = random_file(&dir.path().join("v"), 1 << 20, 6);
    ok(dvrfs(["put", s(&img), s(&src), "/v"]));
    let v = json(&ok(dvrfs(["scrub", s(&img), "--json"])));
    assert_eq!(v["checksums"], false, "{v}");
    assert_eq!(v["bytes_unchecked"], 1 << 20, "{v}");
    fails(
        dvrfs(["mkfs", s(&img), "--force", "--checksum-granule", "100K"]),
        "invalid --checksum-granule",
    );
}
