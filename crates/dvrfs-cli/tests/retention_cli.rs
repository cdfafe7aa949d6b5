//! `dvrfs retention` (issue 26): policies set on stream directories and on the
//! volume, changed flag by flag, shown with where they come from, listed, kept
//! across a reopen (and through `fsck`), cleared, and refused with a reason where
//! they make no sense.

mod common;

use common::*;

fn retention(img: &std::path::Path, args: &[&str]) -> std::process::Output {
    let mut all = vec!["retention", img.to_str().unwrap()];
    all.extend_from_slice(args);
    dvrfs(all)
}

#[test]
fn policies_are_set_shown_listed_and_cleared() {
    let dir = tempdir();
    let img = dir.path().join("r.img");
    mkfs(&img, "1G", &[]);
    ok(dvrfs([
        "mkdir",
        img.to_str().unwrap(),
        "/cams",
        "/cams/cam1",
        "/lobby",
    ]));
    let out = ok(retention(
        &img,
        &[
            "/cams",
            "--max-age",
            "30d",
            "--min-age",
            "7d",
            "--max-size",
            "500G",
        ],
    ));
    assert!(
        out.starts_with("/cams: max-age 30d, min-age 7d, max-size 500G\n"),
        "{out}"
    );
    ok(retention(
        &img,
        &[
            "/",
            "--high",
            "95%",
            "--low",
            "90%",
            "--protected-max",
            "20%",
        ],
    ));
    // One flag changes only its part.
    ok(retention(&img, &["/cams", "--max-size", "400G"]));
    ok(retention(&img, &["/lobby", "--max-size", "25G"]));
    assert_clean(&img);
    assert_eq!(info(&img)["retention"]["protected_max_pct"], 20.0);
    // A stream below a directory of streams is governed by it.
    let out = ok(retention(&img, &["/cams/cam1"]));
    assert_eq!(
        out,
        "/cams/cam1: max-age 30d, min-age 7d, max-size 400G (from /cams)\nvolume: high 95%, low 90%, protected-max 20%\n"
    );
    let v = json(&ok(retention(&img, &["/cams/cam1", "--json"])));
    assert_eq!(v["stream"]["from"], "/cams");
    assert_eq!(v["stream"]["max_size_bytes"], 400u64 << 30);
    assert_eq!(v["volume"]["low_pct"], 90.0);
    let v = json(&ok(retention(&img, &["--list", "--json"])));
    let paths: Vec<&str> = v["streams"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["path"].as_str().unwrap())
        .collect();
    assert_eq!(paths, ["/cams", "/lobby"]);
    assert_eq!(v["streams"][0]["max_age_s"], 30 * 86_400);
    assert_eq!(v["streams"][1]["max_age_s"], serde_json::Value::Null);
    assert_eq!(v["volume"]["high_pct"], 95.0);
    // Cleared: the stream's, then the volume's with the root's.
    ok(retention(&img, &["/cams", "--clear"]));
    let out = ok(retention(&img, &["/cams/cam1"]));
    assert!(out.starts_with("/cams/cam1: no policy"), "{out}");
    ok(retention(&img, &["/", "--clear"]));
    let v = json(&ok(retention(&img, &["--list", "--json"])));
    assert_eq!(v["volume"], serde_json::Value::Null);
    assert_eq!(v["streams"].as_array().unwrap().len(), 1);
    assert_clean(&img);
}

#[test]
fn policies_that_make_no_sense_are_refused_and_change_nothing() {
    let dir = tempdir();
    let img = dir.path().join("r.img");
    mkfs(&img, "1G", &[]);
    ok(dvrfs(["mkdir", img.to_str().unwrap(), "/cam"]));
    ok(retention(&img, &["/cam", "--max-age", "30d"]));
    fails(
        retention(&img, &["/cam", "--min-age", "40d"]),
        "--min-age 40d is longer than --max-age 30d",
    );
    fails(
        retention(&img, &["/", "--high", "90%", "--low", "95%"]),
        "--low 95% is above --high 90%",
    );
    fails(
        retention(&img, &["/", "--high", "90%"]),
        "both --high and --low",
    );
    fails(
        retention(&img, &["/", "--high", "120%", "--low", "90%"]),
        "not a share",
    );
    fails(
        retention(&img, &["/cam", "--high", "95%", "--low", "90%"]),
        "give PATH /",
    );
    fails(
        retention(&img, &["/cam", "--max-age", "3w"]),
        "unknown unit",
    );
    fails(
        retention(&img, &["/cam", "--clear", "--max-age", "1d"]),
        "give it alone",
    );
    fails(
        retention(&img, &["/nothing", "--max-age", "1d"]),
        "no such file",
    );
    fails(retention(&img, &[]), "needs a PATH");
    let local = dir.path().join("a.ts");
    std::fs::write(&local, b"x").unwrap();
    ok(dvrfs([
        "put",
        img.to_str().unwrap(),
        local.to_str().unwrap(),
        "/cam/a.ts",
    ]));
    fails(
        retention(&img, &["/cam/a.ts", "--max-age", "1d"]),
        "not a directory",
    );
    let out = ok(retention(&img, &["/cam"]));
    assert!(
        out.starts_with("/cam: max-age 30d\nvolume: no policy"),
        "{out}"
    );
}

/// An image in `dir` with the stream `/door` under a 365-day max-age: four
/// one-minute chunks of 1 MiB named by their UTC starts (18:28:44.496 to 18:31).
fn door(dir: &std::path::Path) -> std::path::PathBuf {
    let img = dir.join("p.img");
    let i = img.to_str().unwrap();
    mkfs(&img, "1G", &[]);
    ok(dvrfs(["mkdir", i, "/door"]));
    let chunk = dir.join("c");
    std::fs::write(&chunk, vec![5u8; 1 << 20]).unwrap();
    let c = chunk.to_str().unwrap();
    for m in 28..32 {
        let name = format!("/door/20261128T18{m}44.496Z.ts");
        ok(dvrfs(["put", i, c, &name]));
    }
    ok(retention(&img, &["/door", "--max-age", "365d"]));
    img
}

/// `dvrfs protect IMG /door` of the moment `at`, with `extra` flags.
fn protect_at(img: &str, at: &str, extra: &[&str]) -> std::process::Output {
    let mut a = vec!["protect", img, "/door", "--from", at, "--to", at];
    a.extend_from_slice(extra);
    dvrfs(a)
}

/// `dvrfs protect` and `unprotect` on an image: a clip's chunks stamped, listed,
/// shown by `info`, a protection past `--protected-max` refused with the figures and
/// recorded as refused, bad ranges refused, and the stamps kept across `fsck`.
#[test]
fn clips_are_protected_listed_refused_past_protected_max_and_unprotected() {
    let dir = tempdir();
    let img = door(dir.path());
    let i = img.to_str().unwrap();
    // Without a stream, or a range that meets no chunk: refused, nothing recorded.
    ok(dvrfs(["mkdir", i, "/docs"]));
    fails(
        dvrfs([
            "protect",
            i,
            "/docs",
            "--from",
            "2026-11-28T18:30:00Z",
            "--to",
            "2026-11-28T18:30:00Z",
        ]),
        "holds no chunks",
    );
    fails(
        dvrfs([
            "protect",
            i,
            "/door",
            "--from",
            "2026-11-28T18:00:00Z",
            "--to",
            "2026-11-28T18:01:00Z",
        ]),
        "no chunk of /door lies in the range asked",
    );
    fails(
        dvrfs([
            "protect",
            i,
            "/door",
            "--from",
            "2026-11-28T18:31:00Z",
            "--to",
            "2026-11-28T18:30:00Z",
        ]),
        "is before --from",
    );
    // A moment inside the second chunk: that chunk, for 90 days, with a note.
    let p = json(&ok(dvrfs([
        "protect",
        i,
        "/door",
        "--from",
        "2026-11-28T18:30:00Z",
        "--to",
        "2026-11-28T18:30:00Z",
        "--for",
        "90d",
        "--note",
        "parcel",
        "--json",
    ])));
    assert_eq!(
        (p["id"].as_u64(), p["chunks"].as_u64()),
        (Some(1), Some(1)),
        "{p}"
    );
    assert_eq!(p["covers_from"], "2026-11-28T18:29:44.496Z", "{p}");
    assert!(p["until"].is_string(), "{p}");
    let inf = info(&img);
    assert_eq!(inf["protected"]["chunks"], 1, "{inf}");
    // A bound below what a second clip would make: refused, saying why.
    let bytes = inf["protected"]["bytes"].as_u64().unwrap();
    ok(retention(&img, &["/", "--protected-max", "0.5%"]));
    let max = info(&img)["protected"]["max_bytes"].as_u64().unwrap();
    assert!(bytes <= max && 2 * bytes > max, "{bytes} of {max}");
    let err = fails(
        protect_at(i, "2026-11-28T18:31:50Z", &[]),
        "beyond the volume's protected-max",
    );
    assert!(
        err.contains(&format!("{bytes} bytes are protected now")),
        "{err}"
    );
    let list = ok(dvrfs(["protect", i, "--list"]));
    assert!(
        list.contains("id 1: /door") && list.contains("(parcel)"),
        "{list}"
    );
    assert!(
        !list.contains("id 2"),
        "a refused protection is not listed: {list}"
    );
    // Kept across fsck; removed, gone from the list and from info.
    assert_clean(&img);
    assert_eq!(info(&img)["protected"]["chunks"], 1);
    fails(
        dvrfs(["unprotect", i, "--id", "7"]),
        "there is no protection 7",
    );
    let u = json(&ok(dvrfs(["unprotect", i, "--id", "1", "--json"])));
    assert_eq!(u["chunks"], 1, "{u}");
    assert!(ok(dvrfs(["protect", i, "--list"])).contains("no protections"));
    assert_eq!(info(&img)["protected"]["chunks"], 0);
    fails(dvrfs(["unprotect", i, "--id", "1"]), "was removed already");
    // The next id is never one held before (1, removed); 2 was refused, stamped
    // nothing, and is taken again.
    let p = json(&ok(protect_at(i, "2026-11-28T18:31:50Z", &["--json"])));
    assert_eq!(p["id"], 2, "{p}");
    assert_clean(&img);
}

/// The protections' record `/.protect` removed (through the mount, by hand): the
/// chunks' stamps still protect; a new protection does not take an id a chunk
/// carries (it would merge two under one id), and `unprotect` of the lost id
/// clears its stamps.
#[test]
fn a_lost_record_keeps_the_stamps_and_unprotect_still_clears_them() {
    let dir = tempdir();
    let img = door(dir.path());
    let i = img.to_str().unwrap();
    let p = json(&ok(protect_at(i, "2026-11-28T18:30:00Z", &["--json"])));
    assert_eq!(p["id"], 1, "{p}");
    ok(dvrfs(["rm", i, "/.protect"]));
    assert!(ok(dvrfs(["protect", i, "--list"])).contains("no protections"));
    assert_eq!(info(&img)["protected"]["chunks"], 1, "the stamp protects");
    // A new protection skips id 1, which a chunk carries.
    let p = json(&ok(protect_at(i, "2026-11-28T18:31:50Z", &["--json"])));
    assert_eq!(
        (p["id"].as_u64(), p["chunks"].as_u64()),
        (Some(2), Some(1)),
        "{p}"
    );
    assert_eq!(info(&img)["protected"]["chunks"], 2);
    // Unprotect of the lost id: its stamps go, said so; the other stays.
    let u = ok(dvrfs(["unprotect", i, "--id", "1"]));
    assert!(
        u.contains("not in the record /.protect") && u.contains("1 chunk(s)"),
        "{u}"
    );
    assert_eq!(info(&img)["protected"]["chunks"], 1);
    fails(
        dvrfs(["unprotect", i, "--id", "1"]),
        "there is no protection 1",
    );
    fails(
        dvrfs(["unprotect", i, "--id", "9"]),
        "there is no protection 9",
    );
    let list = ok(dvrfs(["protect", i, "--list"]));
    assert!(
        list.contains("id 2: /door") && !list.contains("id 1:"),
        "{list}"
    );
    assert_clean(&img);
}
