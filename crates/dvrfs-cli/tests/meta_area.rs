//! The metadata area through the CLI and a real mount (issue 22 item 9): short
//! symlinks cost no metadata block, long ones and directories stop at the reserve
//! kept for file maps with ENOSPC, `df -i` then shows 100%, `info` says why, and a
//! fragmented file written afterwards is complete.

mod common;

use std::fs;
use std::path::Path;
use std::process::Command;

use common::*;

fn s(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

/// `df -i`'s free inodes for `mnt`.
fn df_free_inodes(mnt: &Path) -> u64 {
    let o = Command::new("df")
        .arg("--output=iavail")
        .arg(mnt)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let text = String::from_utf8_lossy(&o.stdout).into_owned();
    text.lines()
        .nth(1)
        .and_then(|l| l.trim().parse().ok())
        .unwrap_or_else(|| panic!("df -i: {text}"))
}

#[test]
fn long_symlinks_fill_the_names_share_then_df_i_is_full_and_files_still_grow() {
    need_fuse!();
    let dir = tempdir();
    let img = dir.path().join("rec.img");
    // 64 KiB blocks in ZRR zones: a big file has one run per block. The dynamic area
    // is 256 + 2048 / 8 + ceil(128 MiB / 3 MiB) + ceil(2 * 2048 / 253) = 572 blocks
    // (the third term for frame indexes).
    mkfs(&img, "128M", &["--block-size", "64K", "--inodes", "2048"]);
    let before = info(&img);
    let area = &before["metadata_area"];
    assert_eq!(area["blocks"], 572, "{area}");
    assert_eq!(area["is_limit"], false, "{area}");
    assert_eq!(before["inline_symlink_bytes"], 164);
    for key in [
        "used_blocks",
        "name_blocks",
        "map_blocks",
        "reserve_blocks",
        "free_for_names_blocks",
    ] {
        assert!(area[key].is_u64(), "{key}: {area}");
    }

    let m = Mount::new(dir.path(), &img, &[]);
    assert!(df_free_inodes(&m.mnt) > 1000);
    // Short targets: in the inode, no block (thousands fit; only the inode count stops them).
    fs::create_dir(m.path("cams")).unwrap();
    for i in 0..600 {
        std::os::unix::fs::symlink(
            format!("../rec/seg{i:04}.ts"),
            m.path(&format!("cams/l{i}")),
        )
        .unwrap();
    }
    assert_eq!(
        fs::read_link(m.path("cams/l599")).unwrap().to_str(),
        Some("../rec/seg0599.ts")
    );
    // Long targets: a block each, until the names' share is used up.
    let long = |i: usize| format!("/rec/{}/{i:05}.ts", "x".repeat(200));
    let mut made = 0;
    let err = loop {
        match std::os::unix::fs::symlink(long(made), m.path(&format!("long{made}"))) {
            Ok(()) => made += 1,
            Err(e) => break e,
        }
        assert!(made < 650, "the area has 572 blocks");
    };
    assert_eq!(err.raw_os_error(), Some(libc::ENOSPC), "{err}");
    assert!(made > 400, "{made} long symlinks");
    assert_eq!(df_free_inodes(&m.mnt), 0, "df -i shows the area full");
    // A file still grows its map past 6 runs: 1,200 blocks, about 1,200 runs.
    let data = random_file(&dir.path().join("big.src"), 1200 * (64 << 10), 7);
    fs::copy(&data, m.path("big.ts")).expect("the file's map grows into the reserve");
    assert!(fs::read(m.path("big.ts")).unwrap() == fs::read(&data).unwrap());
    fs::remove_file(&data).unwrap();
    m.unmount();

    assert_clean(&img);
    let st = json(&ok(dvrfs(["stat", s(&img), "/big.ts", "--json"])));
    assert!(
        st["runs"].as_u64().unwrap() > 600,
        "ZRR: a run per block; {st}"
    );
    let ls = ok(dvrfs(["ls", "-l", s(&img), "/cams"]));
    assert!(ls.contains("l7 -> ../rec/seg0007.ts"), "{ls}");
    // The file took data blocks, so the reserve shrank and gave names a few blocks
    // back (it is sized from the free data blocks).
    let area = &info(&img)["metadata_area"];
    assert!(area["map_blocks"].as_u64().unwrap() >= 5, "{area}");
    let left = area["free_for_names_blocks"].as_u64().unwrap();
    assert!(left < 10, "{area}");
    // The CLI's own mkdir meets the same limit, with the same message.
    let mut i = 0;
    let err = loop {
        let o = dvrfs(["mkdir", s(&img), &format!("/d{i}")]);
        if !o.status.success() {
            break o;
        }
        // A directory takes a block with its first entry.
        let o = dvrfs(["mkdir", s(&img), &format!("/d{i}/x")]);
        if !o.status.success() {
            break o;
        }
        i += 1;
        assert!(i <= left, "{i} directories in {left} blocks");
    };
    let msg = fails(err, "the metadata area is full");
    assert!(msg.contains("kept for the block maps of files"), "{msg}");
    let area = &info(&img)["metadata_area"];
    assert_eq!(area["is_limit"], true, "{area}");
    assert_eq!(area["free_for_names_blocks"], 0, "{area}");
    let text = ok(dvrfs(["info", s(&img)]));
    assert!(text.contains("  metadata area    "), "{text}");
    assert!(
        text.contains("  limit            the metadata area"),
        "{text}"
    );
    assert_clean(&img);
}
