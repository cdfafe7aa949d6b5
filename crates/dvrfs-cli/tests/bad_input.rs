//! Each kind of bad input gives one clear `dvrfs:` line (and a hint), a non-zero exit
//! and no panic; damaged metadata is found and repaired without losing data.

mod common;

use std::fs::OpenOptions;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::Path;

use common::*;

fn s(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

#[test]
fn not_a_dvrfs_image_is_named_as_such() {
    let dir = tempdir();
    let junk = random_file(&dir.path().join("junk.img"), 16 << 20, 7);
    fails(dvrfs(["ls", s(&junk)]), "not a dvrfs file system");
    fails(dvrfs(["info", s(&junk)]), "mkfs");
    let o = dvrfs(["fsck", s(&junk)]);
    assert_eq!(code(&o), 8, "{}", stderr(&o));
    fails(o, "not a dvrfs");
    // mkfs will not overwrite data without --force.
    fails(dvrfs(["mkfs", s(&junk), "--block-size", "64K"]), "--force");
    ok(dvrfs(["mkfs", s(&junk), "--block-size", "64K", "--force"]));
    assert_clean(&junk);
}

#[test]
fn image_too_small_for_mkfs_gives_the_minimum() {
    let dir = tempdir();
    let img = dir.path().join("tiny.img");
    let err = fails(dvrfs(["mkfs", s(&img), "--size", "1M"]), "too small");
    assert!(err.contains("--size"), "{err}");
    assert!(
        !img.exists(),
        "a failed mkfs left the image it created behind"
    );
    fails(dvrfs(["mkfs", s(&img), "--size", "12Q"]), "invalid --size");
    fails(
        dvrfs(["mkfs", s(&img), "--block-size", "3M"]),
        "power of two",
    );
    fails(dvrfs(["mkfs", s(&img), "--commit-interval", "5"]), "unit");
}

#[test]
fn growing_and_shrinking_an_existing_image() {
    let dir = tempdir();
    let img = dir.path().join("fs.img");
    mkfs(&img, "64M", &["--block-size", "1M"]);
    fails(
        dvrfs(["mkfs", s(&img), "--size", "32M", "--force"]),
        "never shrunk",
    );
    ok(dvrfs(["mkfs", s(&img), "--size", "128M", "--force"]));
    assert_eq!(std::fs::metadata(&img).expect("stat").len(), 128 << 20);
    assert_eq!(info(&img)["size_bytes"], 128 << 20);
}

#[test]
fn names_of_256_bytes_are_refused() {
    let dir = tempdir();
    let img = dir.path().join("fs.img");
    mkfs(&img, "64M", &["--block-size", "1M"]);
    let long = format!("/{}", "n".repeat(256));
    fails(dvrfs(["mkdir", s(&img), &long]), "255");
    let src = random_file(&dir.path().join("x"), 10, 1);
    fails(dvrfs(["put", s(&img), s(&src), &long]), "255");
    let ok255 = format!("/{}", "n".repeat(255));
    ok(dvrfs(["mkdir", s(&img), &ok255]));
    assert_clean(&img);
}

#[test]
fn missing_paths_say_so() {
    let dir = tempdir();
    let img = dir.path().join("fs.img");
    mkfs(&img, "64M", &["--block-size", "1M"]);
    let out = dir.path().join("out");
    fails(dvrfs(["ls", s(&img), "/nope"]), "no such file");
    fails(dvrfs(["stat", s(&img), "/nope/x"]), "no such file");
    fails(dvrfs(["get", s(&img), "/nope", s(&out)]), "no such file");
    assert!(
        !out.exists(),
        "get created a local file for a missing source"
    );
    fails(dvrfs(["rm", s(&img), "/nope"]), "no such file");
    fails(dvrfs(["mv", s(&img), "/nope", "/other"]), "no such file");
    fails(
        dvrfs(["put", s(&img), s(&dir.path().join("missing")), "/x"]),
        "no such file",
    );
    fails(
        dvrfs(["ls", s(&dir.path().join("missing.img"))]),
        "no such file",
    );
    fails(dvrfs(["mkdir", s(&img), "/a/b"]), "no such file");
}

#[test]
fn a_full_file_system_refuses_the_file_and_keeps_the_others() {
    let dir = tempdir();
    let img = dir.path().join("fs.img");
    mkfs(&img, "64M", &["--block-size", "1M"]);
    let free = info(&img)["free_bytes"].as_u64().expect("free_bytes");
    let a = random_file(&dir.path().join("a"), free / 2, 1);
    let b = random_file(&dir.path().join("b"), free / 4, 2);
    put_get_check(&img, &a, "/a", dir.path());
    put_get_check(&img, &b, "/b", dir.path());
    let left = info(&img)["free_bytes"].as_u64().expect("free_bytes");
    let c = random_file(&dir.path().join("c"), left + 1, 3);
    let err = fails(dvrfs(["put", s(&img), s(&c), "/c"]), "no space");
    assert!(
        err.contains(&left.to_string()),
        "the message gives the free bytes: {err}"
    );
    assert_clean(&img);
    assert_eq!(
        stdout(&dvrfs(["ls", s(&img)])).lines().collect::<Vec<_>>(),
        ["a", "b"]
    );
    for (local, path) in [(&a, "/a"), (&b, "/b")] {
        let back = dir.path().join("back");
        ok(dvrfs(["get", s(&img), path, s(&back), "--force"]));
        assert_eq!(sha256_file(local), sha256_file(&back), "{path} changed");
    }
    assert_eq!(info(&img)["free_bytes"], left);
    // Exactly what is left still fits.
    let d = random_file(&dir.path().join("d"), left, 4);
    put_get_check(&img, &d, "/d", dir.path());
    assert_eq!(info(&img)["free_bytes"], 0);
    assert_clean(&img);
}

fn flip_byte(path: &Path, offset: u64) {
    let mut f = OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .expect("open image");
    let mut b = [0u8; 1];
    f.seek(SeekFrom::Start(offset)).expect("seek");
    f.read_exact(&mut b).expect("read");
    b[0] ^= 0x5a;
    f.seek(SeekFrom::Start(offset)).expect("seek");
    f.write_all(&b).expect("write");
    f.sync_all().expect("sync");
}

#[test]
fn a_corrupt_inode_table_block_is_served_from_the_backup_and_repaired() {
    let dir = tempdir();
    let img = dir.path().join("fs.img");
    mkfs(&img, "64M", &["--block-size", "1M"]);
    let src = random_file(&dir.path().join("v"), 5 << 20, 9);
    ok(dvrfs(["put", s(&img), s(&src), "/v"]));
    // The last committed transaction stays in the journal and is authoritative for the
    // blocks it holds, so a damaged primary copy of those is not an error. Make the
    // last transaction touch only later inode-table blocks: a chain of directories
    // deeper than two inode-table blocks, then one more directory at its bottom.
    let per_block = dvrfs_core::format::inode::INODES_PER_BLOCK;
    let chain: String = (0..2 * per_block + 3).map(|k| format!("/d{k}")).collect();
    ok(dvrfs(["mkdir", "-p", s(&img), &chain]));
    ok(dvrfs(["mkdir", s(&img), &format!("{chain}/leaf")]));
    assert_clean(&img);

    let table = info(&img)["regions"]["inode_table"]["offset"]
        .as_u64()
        .expect("inode table offset");
    flip_byte(&img, table + 300); // inside the record of the root inode
    let o = dvrfs(["fsck", s(&img), "--json"]);
    let v = json(&stdout(&o));
    assert_eq!(code(&o), 4, "{v}");
    assert_eq!(v["clean"], false);
    assert!(!v["errors"].as_array().expect("errors").is_empty());
    let back = dir.path().join("back");
    ok(dvrfs(["get", s(&img), "/v", s(&back)]));
    assert_eq!(sha256_file(&src), sha256_file(&back));

    let o = dvrfs(["fsck", s(&img), "--repair", "--json"]);
    let v = json(&stdout(&o));
    assert_eq!(code(&o), 1, "{v}");
    assert!(v["repaired"].as_u64().expect("repaired") >= 1, "{v}");
    assert_eq!(v["remaining"], 0, "{v}");
    assert_eq!(code(&dvrfs(["fsck", s(&img)])), 0);
    ok(dvrfs(["get", s(&img), "/v", s(&back), "--force"]));
    assert_eq!(sha256_file(&src), sha256_file(&back));
}

#[test]
fn a_zeroed_primary_superblock_is_survived_and_repaired() {
    let dir = tempdir();
    let img = dir.path().join("fs.img");
    mkfs(&img, "64M", &["--block-size", "1M"]);
    let src = random_file(&dir.path().join("v"), 3 << 20, 5);
    ok(dvrfs(["put", s(&img), s(&src), "/v"]));
    {
        let mut f = OpenOptions::new().write(true).open(&img).expect("open");
        f.write_all(&[0u8; 4096]).expect("zero");
        f.sync_all().expect("sync");
    }
    assert_eq!(stdout(&dvrfs(["ls", s(&img)])).trim(), "v");
    let back = dir.path().join("back");
    ok(dvrfs(["get", s(&img), "/v", s(&back)]));
    assert_eq!(sha256_file(&src), sha256_file(&back));
    assert_eq!(code(&dvrfs(["fsck", s(&img)])), 4);
    // mkfs still recognises the file system by its end-of-device copy.
    fails(dvrfs(["mkfs", s(&img)]), "--force");
    assert_eq!(code(&dvrfs(["fsck", s(&img), "--repair"])), 1);
    assert_eq!(code(&dvrfs(["fsck", s(&img)])), 0);
    ok(dvrfs(["get", s(&img), "/v", s(&back), "--force"]));
    assert_eq!(sha256_file(&src), sha256_file(&back));
}

#[test]
fn mkfs_on_an_existing_dvrfs_needs_force() {
    let dir = tempdir();
    let img = dir.path().join("fs.img");
    mkfs(&img, "64M", &["--block-size", "1M"]);
    let src = random_file(&dir.path().join("v"), 1000, 5);
    ok(dvrfs(["put", s(&img), s(&src), "/v"]));
    let err = fails(
        dvrfs(["mkfs", s(&img), "--block-size", "1M"]),
        "already holds a dvrfs file system",
    );
    assert!(err.contains("--force"), "{err}");
    assert_eq!(
        stdout(&dvrfs(["ls", s(&img)])).trim(),
        "v",
        "the refused mkfs changed the file system"
    );
    ok(dvrfs(["mkfs", s(&img), "--block-size", "1M", "--force"]));
    assert_eq!(stdout(&dvrfs(["ls", s(&img)])).trim(), "");
}

/// Issue 9, case 7: a file shorter than the device alignment, and a file whose data
/// lies past the first 64 KiB, are not formatted without --force and are left intact;
/// an image of holes and zeros is formatted.
#[test]
fn mkfs_refuses_a_small_file_and_data_past_the_probe() {
    let dir = tempdir();
    let small = dir.path().join("notes.txt");
    std::fs::write(&small, b"hello").unwrap();
    let err = fails(dvrfs(["mkfs", s(&small)]), "already holds data");
    assert!(err.contains("--force"), "{err}");
    assert_eq!(std::fs::read(&small).unwrap(), b"hello");

    let far = dir.path().join("far.img");
    let f = std::fs::File::create(&far).unwrap();
    f.set_len(256 << 20).unwrap();
    std::os::unix::fs::FileExt::write_all_at(&f, b"precious", 100 << 20).unwrap();
    drop(f);
    let err = fails(dvrfs(["mkfs", s(&far)]), "already holds data");
    assert!(err.contains(&format!("offset {}", 100u64 << 20)), "{err}");
    let mut back = [0u8; 8];
    std::os::unix::fs::FileExt::read_exact_at(
        &std::fs::File::open(&far).unwrap(),
        &mut back,
        100 << 20,
    )
    .unwrap();
    assert_eq!(&back, b"precious");

    // Holes and written zeros hold nothing.
    let zeros = dir.path().join("zeros.img");
    let f = std::fs::File::create(&zeros).unwrap();
    f.set_len(256 << 20).unwrap();
    std::os::unix::fs::FileExt::write_all_at(&f, &vec![0u8; 1 << 20], 50 << 20).unwrap();
    drop(f);
    ok(dvrfs(["mkfs", s(&zeros)]));
}

#[test]
fn wrong_flags_are_usage_errors() {
    let dir = tempdir();
    let img = dir.path().join("fs.img");
    let o = dvrfs(["ls", s(&img), "--bogus"]);
    assert_eq!(code(&o), 2);
    assert!(!stderr(&o).contains("panicked"));
    let o = dvrfs(["frobnicate"]);
    assert_eq!(code(&o), 2);
    let o = dvrfs(["mkfs", s(&img), "--alloc", "best"]);
    assert_eq!(code(&o), 2);
    assert!(!img.exists());
}

/// Issue 9's messages: names are escaped in `ls`, directories end in `/` in the short
/// form, `stat` reports every path, errors name the whole path, `get` does not
/// overwrite a local file unless told, and sizes get messages that help.
#[test]
fn messages_name_what_is_wrong_and_names_cannot_drive_the_terminal() {
    let dir = tempdir();
    let img = dir.path().join("fs.img");
    mkfs(&img, "256M", &[]);
    ok(dvrfs(["mkdir", s(&img), "/d"]));
    let src = random_file(&dir.path().join("x"), 100, 1);
    ok(dvrfs(["put", s(&img), s(&src), "/a\u{1b}[31mred"]));
    let ls = ok(dvrfs(["ls", s(&img), "/"]));
    assert_eq!(ls, "a\\x1b[31mred\nd/\n", "{ls:?}");
    assert!(!ok(dvrfs(["ls", s(&img), "/", "-l"])).contains('\u{1b}'));

    let o = dvrfs(["stat", s(&img), "/nope", "/d"]);
    assert_eq!(code(&o), 1);
    assert!(stdout(&o).contains("path: /d"), "{}", stdout(&o));
    assert!(stderr(&o).contains("/nope"), "{}", stderr(&o));

    fails(dvrfs(["mkdir", s(&img), "/d"]), "/d: already exists");

    let local = dir.path().join("local");
    std::fs::write(&local, b"mine").unwrap();
    let err = fails(
        dvrfs(["get", s(&img), "/a\u{1b}[31mred", s(&local)]),
        "already exists",
    );
    assert!(err.contains("--force"), "{err}");
    assert_eq!(std::fs::read(&local).unwrap(), b"mine");
    ok(dvrfs([
        "get",
        s(&img),
        "/a\u{1b}[31mred",
        s(&local),
        "--force",
    ]));
    assert_eq!(std::fs::read(&local).unwrap(), std::fs::read(&src).unwrap());
    // A device is written to as it is (and never removed).
    ok(dvrfs(["get", s(&img), "/a\u{1b}[31mred", "/dev/null"]));
    assert!(std::path::Path::new("/dev/null").exists());

    let o = dvrfs([
        "record",
        s(&img),
        "/r.ts",
        "--rate",
        "4M",
        "--duration",
        "1s",
        "--request",
        "5",
    ]);
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    assert!(stderr(&o).contains("multiple of 4K"), "{}", stderr(&o));

    let other = dir.path().join("other.img");
    let o = dvrfs(["mkfs", s(&other), "--size", "-5G"]);
    assert_eq!(code(&o), 2);
    assert!(
        stderr(&o).contains("invalid --size \"-5G\": it is negative"),
        "{}",
        stderr(&o)
    );
    let err = fails(dvrfs(["mkfs", s(&other), "--size", "1"]), "too small");
    assert!(err.contains("at least 44M"), "{err}");
    assert!(!other.exists(), "a refused mkfs left an image behind");
}

/// Points inline run `k` of inode `ino` outside the data region, in both copies of its
/// inode-table block, resealed: damage no checksum sees (issue 9, case 2).
fn misplace_run(img: &Path, ino: u64, k: usize) {
    use dvrfs_core::format::superblock::Superblock;
    use dvrfs_core::format::{parse_header, seal_block, META_BLOCK_BYTES};
    let mut f = OpenOptions::new()
        .read(true)
        .write(true)
        .open(img)
        .expect("open image");
    let mut b = vec![0u8; META_BLOCK_BYTES];
    f.read_exact(&mut b).expect("read superblock");
    let sb = Superblock::decode(&b).expect("superblock");
    let per = dvrfs_core::format::inode::INODES_PER_BLOCK as u64;
    let n = sb.inode_table_start + ino / per;
    // Record base 48, inline runs at 152, 16 bytes each, `start` at +8.
    let at = 48 + 256 * (ino % per) as usize + 152 + 16 * k + 8;
    for off in [sb.primary_offset(n), sb.backup_offset(n)] {
        f.seek(SeekFrom::Start(off)).expect("seek");
        f.read_exact(&mut b).expect("read");
        let h = parse_header(&b).expect("header");
        b[at..at + 8].copy_from_slice(&(sb.data_blocks + 3).to_le_bytes());
        seal_block(&mut b, &h);
        f.seek(SeekFrom::Start(off)).expect("seek");
        f.write_all(&b).expect("write");
    }
    f.sync_all().expect("sync");
}

/// Case 2 from the command line: `get` of a file with a damaged run fails and names
/// the file and the bytes (it used to copy zeros with exit 0); `get --salvage` copies
/// every other byte, writes zeros for the lost range, lists it and exits 3; `stat` and
/// `fsck` show the loss, and after `fsck --repair` the range stays marked.
#[test]
fn a_damaged_run_is_an_error_naming_the_bytes_and_get_salvage_copies_the_rest() {
    let dir = tempdir();
    let img = dir.path().join("fs.img");
    mkfs(&img, "64M", &["--block-size", "1M", "--alloc", "zrr"]);
    let src = random_file(&dir.path().join("v"), (5 << 20) + 1000, 4);
    ok(dvrfs(["put", s(&img), s(&src), "/v"]));
    let st = json(&ok(dvrfs(["stat", s(&img), "/v", "--json"])));
    assert!(st["runs"].as_u64().expect("runs") >= 3, "{st}");
    misplace_run(&img, st["ino"].as_u64().expect("ino"), 1);

    let back = dir.path().join("back");
    let err = fails(
        dvrfs(["get", s(&img), "/v", s(&back)]),
        "/v: bytes 1048576 to 2097152 were lost",
    );
    assert!(err.contains("--salvage"), "{err}");
    assert!(!back.exists(), "a failed get leaves no partial file");

    let o = dvrfs(["get", s(&img), "/v", s(&back), "--salvage"]);
    assert_eq!(code(&o), 3, "{}", stderr(&o));
    assert!(
        stderr(&o).contains("bytes 1048576 to 2097152: lost to metadata damage"),
        "{}",
        stderr(&o)
    );
    let (want, got) = (std::fs::read(&src).unwrap(), std::fs::read(&back).unwrap());
    assert_eq!(got.len(), want.len());
    assert_eq!(got[..1 << 20], want[..1 << 20]);
    assert!(got[1 << 20..2 << 20].iter().all(|&x| x == 0));
    assert_eq!(got[2 << 20..], want[2 << 20..]);

    let st = json(&ok(dvrfs(["stat", s(&img), "/v", "--json"])));
    assert_eq!(st["lost_bytes"], 1 << 20, "{st}");
    assert_eq!(code(&dvrfs(["fsck", s(&img)])), 4);
    assert_eq!(code(&dvrfs(["fsck", s(&img), "--repair"])), 1);
    let o = dvrfs(["fsck", s(&img), "--json"]);
    let v = json(&stdout(&o));
    assert_eq!(code(&o), 0, "{v}");
    assert_eq!(v["damaged"][0]["path"], "/v", "{v}");
    assert_eq!(v["damaged"][0]["lost"][0][0], 1 << 20, "{v}");
    let o = dvrfs(["get", s(&img), "/v", s(&back), "--salvage", "--force"]);
    assert_eq!(code(&o), 3, "{}", stderr(&o));
    assert_eq!(std::fs::read(&back).unwrap(), got);
}

/// `play --output` refuses an existing local file as `get` does, and `--force`
/// overwrites it, as `get --force` does; a device is written to as it is.
#[test]
fn play_refuses_to_overwrite_a_local_file_as_get_does() {
    let dir = tempdir();
    let img = dir.path().join("fs.img");
    mkfs(&img, "256M", &[]);
    let src = random_file(&dir.path().join("v"), 3 << 20, 9);
    ok(dvrfs(["put", s(&img), s(&src), "/v.ts"]));
    let out = dir.path().join("out.ts");
    std::fs::write(&out, b"an earlier clip").unwrap();
    let play = |extra: &[&str]| {
        let mut args = vec!["play", s(&img), "/v.ts", "--rate", "96M", "--output"];
        args.extend(extra);
        dvrfs(args)
    };
    let get_err = fails(dvrfs(["get", s(&img), "/v.ts", s(&out)]), "already exists");
    let play_err = fails(play(&[s(&out)]), "already exists");
    assert_eq!(play_err, get_err, "play and get refuse alike");
    assert!(play_err.contains("--force"), "{play_err}");
    assert_eq!(std::fs::read(&out).unwrap(), b"an earlier clip");
    ok(play(&[s(&out), "--force"]));
    assert_eq!(sha256_file(&out), sha256_file(&src));
    ok(play(&["/dev/null"]));
}

/// Issue 22 item 16: every numeric setting has a range, and a value outside it is a
/// usage error (exit status 2) naming the range, before anything runs: no mount that
/// aborts after reporting success, no simulation or playback that runs for days, no
/// overflow (`sim --duration 999999999h` panicked multiplying to nanoseconds).
#[test]
fn numbers_outside_their_range_are_usage_errors() {
    let dir = tempdir();
    let img = dir.path().join("fs.img");
    mkfs(&img, "64M", &["--block-size", "1M"]);
    let mnt = dir.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let (i, m) = (s(&img), s(&mnt));
    let sim = ["sim", "--disk", "avfs-250g", "--workload", "4r"];
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (
            vec!["mount", i, m, "-o", "threads=999999999999"],
            "from 1 to 256",
        ),
        (vec!["mount", i, m, "-o", "threads=0"], "from 1 to 256"),
        (vec!["mount", i, m, "--threads", "257"], "from 1 to 256"),
        (
            [&sim[..], &["--duration", "999999999h"]].concat(),
            "from 1ms to 168h",
        ),
        (
            [&sim[..], &["--duration", "0ms"]].concat(),
            "from 1ms to 168h",
        ),
        (
            [&sim[..], &["--duration", "1s", "--age", "1000000000"]].concat(),
            "from 0 to 1000",
        ),
        (vec!["play", i, "/f", "--rate", "1"], "from 8K to 100G"),
        (vec!["play", i, "/f", "--rate", "200G"], "from 8K to 100G"),
        (
            vec!["play", i, "/f", "--rate", "8M", "--speed", "65"],
            "from 1 to 64",
        ),
        (
            vec![
                "record",
                i,
                "/r",
                "--rate",
                "8M",
                "--duration",
                "99999999999h",
            ],
            "to 8760h",
        ),
        // These panicked multiplying to nanoseconds, or ran without end.
        (
            vec![
                "record",
                i,
                "/r",
                "--rate",
                "8M",
                "--durable",
                "99999999999h",
            ],
            "from 1ms to 24h",
        ),
        (
            [&sim[..], &["--margin", "99999999999h"]].concat(),
            "from 1ms to 1m",
        ),
        (
            [&sim[..], &["--be-latency", "99999999999h"]].concat(),
            "from 1ms to 1m",
        ),
        (
            vec!["sim", "--disk", "avfs-250g", "--workload", "4000000000r"],
            "more than 4096",
        ),
    ];
    // Found in review: these ran for days, failed as runtime errors (exit 1) or were
    // accepted.
    let new_img = dir.path().join("new.img");
    let n = s(&new_img);
    let sim1 = ["sim", "--disk", "avfs-250g", "--duration", "1s"];
    let w4 = [&sim1[..], &["--workload", "4r"]].concat();
    let more: Vec<(Vec<&str>, &str)> = vec![
        (
            [&w4[..], &["--depth", "4000000000"]].concat(),
            "from 1 to 64",
        ),
        (
            [&sim1[..], &["--workload", "4096r", "--depth", "9"]].concat(),
            "more than 32768",
        ),
        (
            [&w4[..], &["--be-depth", "4000000000"]].concat(),
            "from 1 to 256",
        ),
        ([&w4[..], &["--request", "999T"]].concat(), "from 4K to 16M"),
        (
            [&w4[..], &["--be-request", "999T"]].concat(),
            "from 4K to 16M",
        ),
        ([&w4[..], &["--merge", "999T"]].concat(), "to 64M"),
        (
            [&w4[..], &["--delete-size", "0"]].concat(),
            "from 1 byte to 16T",
        ),
        (
            [&sim1[..], &["--workload", "4r@1"]].concat(),
            "from 8K to 100G",
        ),
        (
            [&sim1[..], &["--workload", "2w,4r@999999G"]].concat(),
            "from 8K to 100G",
        ),
        (
            vec!["capacity", "--disk", "avfs-250g", "--bitrate", "1"],
            "from 8K to 100G",
        ),
        (
            vec!["capacity", "--disk", "avfs-250g", "--depth", "4000000000"],
            "from 1 to 64",
        ),
        (
            vec!["capacity", "--disk", "avfs-250g", "--tail-log", "999T"],
            "to 4 GiB",
        ),
        (
            [&w4[..], &["--seeds", "1-999999999"]].concat(),
            "more than 10000",
        ),
        (vec!["status", i, "--rate", "1"], "from 8K to 100G"),
        (vec!["status", i, "--buffer", "999T"], "to 256M"),
        (vec!["status", i, "--sample", "99999h"], "from 0ms to 1h"),
        (vec!["status", i, "--bandwidth", "1"], "from 1M to 1T"),
        (
            vec![
                "record", i, "/r", "--rate", "8M", "--size", "1M", "--buffer", "1",
            ],
            "from two requests",
        ),
        (vec!["mount", i, m, "--bandwidth", "1"], "from 1M to 1T"),
        (
            vec!["mount", i, m, "-o", "bandwidth=2000G"],
            "from 1M to 1T",
        ),
        (
            vec!["mkfs", n, "--size", "64M", "--inodes", "99999999999"],
            "from 16 to 268435456",
        ),
        (
            vec!["mkfs", n, "--size", "64M", "--zones", "999999"],
            "from 1 to 32",
        ),
        (
            vec!["mkfs", n, "--size", "64M", "--tail-log", "999T"],
            "to 4 GiB",
        ),
        (
            vec!["mkfs", n, "--size", "64M", "--commit-interval", "1177h"],
            "from 1ms to 1h",
        ),
        (
            vec!["mkfs", n, "--size", "64M", "--commit-interval", "2h"],
            "from 1ms to 1h",
        ),
        (
            vec!["record", i, "/r", "--rate", "8M", "--size", "0"],
            "from 1 byte to 1024T",
        ),
        (
            vec!["record", i, "/r", "--rate", "8M", "--size", "2048T"],
            "from 1 byte to 1024T",
        ),
        (
            vec![
                "bench",
                n,
                "--size",
                "64M",
                "--workload",
                "1w",
                "--queue-depth",
                "4000000000",
            ],
            "from 1 to 256",
        ),
    ];
    let cases: Vec<(Vec<&str>, &str)> = cases.into_iter().chain(more).collect();
    for (args, needle) in cases {
        let o = dvrfs(&args);
        assert_eq!(code(&o), 2, "{args:?}: {}", stderr(&o));
        let err = fails(o, needle);
        assert!(
            err.contains("out of range") || err.contains("more than"),
            "{args:?}: {err}"
        );
    }
    // Nothing was mounted or written.
    assert!(!mounted(&mnt));
    assert!(!new_img.exists());
    assert_eq!(stdout(&dvrfs(["ls", i])).trim(), "");
}
