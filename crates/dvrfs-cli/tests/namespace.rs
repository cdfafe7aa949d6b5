//! mkdir, put, ls, mv, rm and stat through the binary; fsck is clean after each change.

mod common;

use std::path::Path;

use common::*;

fn run(img: &Path, args: &[&str]) -> String {
    let mut all = vec![args[0].to_string(), img.display().to_string()];
    all.extend(args[1..].iter().map(|s| s.to_string()));
    ok(dvrfs(&all))
}

fn ls(img: &Path, path: &str) -> Vec<String> {
    run(img, &["ls", path])
        .lines()
        .map(str::to_string)
        .collect()
}

#[test]
fn namespace_operations_keep_the_file_system_clean() {
    let dir = tempdir();
    let img = dir.path().join("fs.img");
    mkfs(&img, "128M", &["--block-size", "1M"]);
    let a = random_file(&dir.path().join("a.bin"), 3 << 20, 1);
    let b = random_file(&dir.path().join("b.bin"), 100_000, 2);
    let c = random_file(&dir.path().join("c.bin"), 5 << 20, 3);

    run(&img, &["mkdir", "-p", "/cam1/2024/05", "/cam2"]);
    assert_clean(&img);
    // -p on existing directories is fine; without -p it is an error.
    run(&img, &["mkdir", "-p", "/cam1/2024"]);
    fails(dvrfs(["mkdir", img.to_str().unwrap(), "/cam2"]), "exists");

    run(&img, &["put", a.to_str().unwrap(), "/cam1/2024/05/a.bin"]);
    run(&img, &["put", b.to_str().unwrap(), "/cam2"]); // into the directory, by name
    run(&img, &["put", c.to_str().unwrap(), "/c.bin"]);
    assert_clean(&img);
    assert_eq!(ls(&img, "/"), ["c.bin", "cam1/", "cam2/"]);
    assert_eq!(ls(&img, "/cam2"), ["b.bin"]);
    assert_eq!(ls(&img, "/cam1/2024/05"), ["a.bin"]);
    let long = run(&img, &["ls", "-l", "/"]);
    assert!(
        long.lines()
            .any(|l| l.starts_with('d') && l.ends_with(" cam1")),
        "{long}"
    );
    assert!(
        long.lines()
            .any(|l| l.starts_with('-') && l.contains(&format!(" {} ", 5 << 20))),
        "{long}"
    );
    // An existing file is never overwritten by put.
    fails(
        dvrfs([
            "put",
            img.to_str().unwrap(),
            b.to_str().unwrap(),
            "/cam2/b.bin",
        ]),
        "exists; rm it first",
    );

    // mv: a rename, then into an existing directory.
    run(&img, &["mv", "/c.bin", "/clip.bin"]);
    assert_clean(&img);
    run(&img, &["mv", "/clip.bin", "/cam2"]);
    assert_clean(&img);
    assert_eq!(ls(&img, "/"), ["cam1/", "cam2/"]);
    assert_eq!(ls(&img, "/cam2"), ["b.bin", "clip.bin"]);
    run(&img, &["mv", "/cam1/2024", "/cam2/archive"]);
    assert_clean(&img);
    assert_eq!(ls(&img, "/cam2/archive/05"), ["a.bin"]);
    let back = dir.path().join("back");
    run(
        &img,
        &["get", "/cam2/archive/05/a.bin", back.to_str().unwrap()],
    );
    assert_eq!(sha256_file(&a), sha256_file(&back));

    // stat --json: one object per path, an array for several.
    let st = json(&run(&img, &["stat", "/cam2/clip.bin", "--json"]));
    assert_eq!(st["kind"], "file");
    assert_eq!(st["size_bytes"], 5 << 20);
    assert_eq!(st["blocks"], 5);
    assert_eq!(st["nlink"], 1);
    let both = json(&run(&img, &["stat", "/cam2", "/cam2/b.bin", "--json"]));
    assert_eq!(both[0]["kind"], "dir");
    assert_eq!(both[1]["size_bytes"], 100_000);
    assert!(run(&img, &["stat", "/cam2"]).contains("kind: dir"));

    // rm: a file; a directory needs -r; -r removes the tree; "/" never.
    run(&img, &["rm", "/cam2/b.bin"]);
    assert_clean(&img);
    fails(dvrfs(["rm", img.to_str().unwrap(), "/cam2"]), "-r");
    fails(dvrfs(["rm", "-r", img.to_str().unwrap(), "/"]), "root");
    run(&img, &["rm", "-r", "/cam2"]);
    assert_clean(&img);
    assert_eq!(ls(&img, "/"), ["cam1/"]);
    let v = info(&img);
    assert_eq!(v["files"], 0, "{v}");
    assert_eq!(v["used_bytes"], 0, "{v}");
    run(&img, &["rm", "-r", "/cam1"]);
    assert_clean(&img);
    assert!(ls(&img, "/").is_empty());
    assert_eq!(info(&img)["dirs"], 1);
}

#[test]
fn a_failing_path_does_not_undo_the_ones_before_it() {
    let dir = tempdir();
    let img = dir.path().join("fs.img");
    mkfs(&img, "64M", &["--block-size", "1M"]);
    let p = img.to_str().expect("utf-8");
    fails(
        dvrfs(["mkdir", p, "/a", "/missing/b", "/c"]),
        "no such file",
    );
    assert_eq!(ls(&img, "/"), ["a/"]);
    fails(dvrfs(["rm", "-r", p, "/a", "/missing"]), "no such file");
    assert!(ls(&img, "/").is_empty());
    assert_clean(&img);
    // A destination ending in `/` must be an existing directory.
    let src = random_file(&dir.path().join("x"), 10, 1);
    fails(
        dvrfs(["put", p, src.to_str().expect("utf-8"), "/nodir/"]),
        "no such directory",
    );
    assert!(ls(&img, "/").is_empty());
    // mkfs into a directory that does not exist says so.
    fails(
        dvrfs([
            "mkfs",
            dir.path().join("no/such/dir.img").to_str().expect("utf-8"),
        ]),
        "does not exist",
    );
}
