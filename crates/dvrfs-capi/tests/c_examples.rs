//! The C examples (`examples/c/`) compiled against the generated header and the built
//! libraries, shared and static (the static one through pkg-config), and run on an
//! image file: a recorder and a player at once on two files, byte-exact read-back,
//! bad calls refused.

use dvrfs_core::layout::MkfsParams;
use dvrfs_core::tools::mkfs;
use dvrfs_io::{FileDevice, LockMode};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// target/<profile>: where cargo put the libraries, `include/dvrfs.h` and `dvrfs.pc`.
fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("the test's path");
    exe.parent()
        .and_then(Path::parent)
        .expect("tests run from target/<profile>/deps")
        .to_path_buf()
}

/// Builds the shared and static libraries (and the header) for this profile, once per
/// test binary: `cargo test` links its own test harness against the rlib only, so on a
/// clean checkout `libdvrfs.so` and `libdvrfs.a` do not exist yet, and after a change to
/// the crate they would be stale.
fn build_libraries() {
    static BUILT: OnceLock<()> = OnceLock::new();
    BUILT.get_or_init(|| {
        let dir = profile_dir();
        let mut cmd = Command::new(env!("CARGO"));
        cmd.args(["build", "--quiet", "-p", "dvrfs-capi", "--lib"])
            .arg("--manifest-path")
            .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml"));
        if dir.file_name().is_some_and(|n| n == "release") {
            cmd.arg("--release");
        }
        if let Some(target) = dir.parent() {
            cmd.arg("--target-dir").arg(target);
        }
        let o = cmd.output().expect("run cargo to build the C libraries");
        assert!(
            o.status.success(),
            "cargo build -p dvrfs-capi --lib failed:\n{}",
            String::from_utf8_lossy(&o.stderr)
        );
        for lib in ["libdvrfs.so", "libdvrfs.a", "dvrfs.pc", "include/dvrfs.h"] {
            assert!(
                dir.join(lib).exists(),
                "{lib} was not built into {}",
                dir.display()
            );
        }
    });
}

fn examples() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/c")
}

fn cc(out: &Path, src: &str, link: &[String]) {
    build_libraries();
    let dir = profile_dir();
    let o = Command::new("cc")
        .args([
            "-std=c11",
            "-O2",
            "-Wall",
            "-Wextra",
            "-Werror",
            "-D_POSIX_C_SOURCE=200809L",
        ])
        .arg(format!("-I{}", dir.join("include").display()))
        .arg(examples().join(src))
        .arg("-o")
        .arg(out)
        .args(link)
        .output()
        .expect("run cc (gcc is installed by scripts/test.sh)");
    assert!(
        o.status.success(),
        "compiling {src} failed:\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
}

fn image(dir: &Path, name: &str) -> PathBuf {
    let path = dir.join(name);
    let size = 512 << 20;
    FileDevice::create_image(&path, size).unwrap();
    let mut dev = FileDevice::open(&path, true, LockMode::Exclusive).unwrap();
    mkfs(&mut dev, &MkfsParams::new(size, [3; 16], 5), &mut |_, _| {}).unwrap();
    path
}

fn run(bin: &Path, args: &[&str]) -> String {
    let o = Command::new(bin)
        .args(args)
        .env("LD_LIBRARY_PATH", profile_dir())
        .output()
        .expect("run the example");
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(
        o.status.success(),
        "{} {args:?} failed ({}):\n{out}\n{}",
        bin.display(),
        o.status,
        String::from_utf8_lossy(&o.stderr)
    );
    out
}

#[test]
fn the_c_recorder_and_player_run_against_the_shared_library() {
    let dir = tempfile::tempdir().unwrap();
    let shared = vec![
        format!("-L{}", profile_dir().display()),
        "-ldvrfs".to_string(),
    ];
    let rec = dir.path().join("recorder");
    let play = dir.path().join("player");
    cc(&rec, "recorder.c", &shared);
    cc(&play, "player.c", &shared);
    let img = image(dir.path(), "fs.img");
    let img_s = img.to_str().unwrap();
    let out = run(&rec, &[img_s, "/cam1.ts", "8", "64"]);
    assert!(out.contains("0 late, 0 stalls"), "{out}");
    let out = run(&play, &[img_s, "/cam1.ts", "64"]);
    assert!(
        out.contains("8388608 bytes read back with aio, 0 late"),
        "{out}"
    );
    assert!(out.contains("2097152 bytes played"), "{out}");
    assert!(out.contains("bad calls refused"), "{out}");
    assert!(out.contains("player: cancel: "), "{out}");
}

#[test]
fn the_c_dvr_records_twice_and_plays_at_once_from_three_threads() {
    let dir = tempfile::tempdir().unwrap();
    let link = vec![
        format!("-L{}", profile_dir().display()),
        "-ldvrfs".to_string(),
        "-lpthread".to_string(),
    ];
    let dvr = dir.path().join("dvr");
    cc(&dvr, "dvr.c", &link);
    let img = image(dir.path(), "fs.img");
    let out = run(&dvr, &[img.to_str().unwrap(), "6", "24"]);
    for f in [
        "/cam1.ts: ok, 0 late",
        "/cam2.ts: ok, 0 late",
        "/earlier.ts: ok, 0 late",
    ] {
        assert!(out.contains(f), "{out}");
    }
    assert!(out.contains("all recordings read back right"), "{out}");
}

#[test]
fn the_static_library_links_through_pkg_config() {
    build_libraries();
    let dir = tempfile::tempdir().unwrap();
    let pc = Command::new("pkg-config")
        .args(["--cflags", "--libs", "--static", "dvrfs"])
        .env("PKG_CONFIG_PATH", profile_dir())
        .output()
        .expect("run pkg-config (installed by scripts/test.sh)");
    assert!(
        pc.status.success(),
        "{}",
        String::from_utf8_lossy(&pc.stderr)
    );
    let flags = String::from_utf8(pc.stdout).unwrap();
    assert!(flags.contains("-ldvrfs"), "{flags}");
    // The static archive by name, so the shared one is not picked.
    let mut link = vec![profile_dir().join("libdvrfs.a").display().to_string()];
    link.extend(
        flags
            .split_whitespace()
            .filter(|f| !f.starts_with("-L") && *f != "-ldvrfs" && !f.starts_with("-I"))
            .map(str::to_string),
    );
    let rec = dir.path().join("recorder-static");
    cc(&rec, "recorder.c", &link);
    let img = image(dir.path(), "fs.img");
    let out = run(
        &rec,
        &[img.to_str().unwrap(), "/a.ts", "4", "32", "avfs-250g"],
    );
    assert!(out.contains("0 late"), "{out}");
}

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Runs `sh -c script` in the repository's root; its stdout, or a failure with both
/// outputs.
fn shell(script: &str, env: &[(&str, &Path)]) -> String {
    let mut cmd = Command::new("sh");
    cmd.arg("-c").arg(script).current_dir(repo_root());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let o = cmd.output().expect("run sh");
    assert!(
        o.status.success(),
        "{script} failed ({}):\n{}\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// docs/c-api.md's command for building against the build tree, run as written (on
/// this test's profile directory instead of target/release): `PKG_CONFIG_PATH` must
/// reach `pkg-config`, not `cc`.
#[test]
fn the_docs_build_command_builds_and_runs_the_recorder() {
    build_libraries();
    let docs = std::fs::read_to_string(repo_root().join("docs/c-api.md")).unwrap();
    let line = |start: &str| -> String {
        docs.lines()
            .map(str::trim)
            .find(|l| l.starts_with(start))
            .unwrap_or_else(|| panic!("no `{start}...` line in docs/c-api.md"))
            .to_string()
    };
    let (build, run) = (line("cc -o recorder "), line("LD_LIBRARY_PATH="));
    let dir = tempfile::tempdir().unwrap();
    let profile = profile_dir().display().to_string();
    let bin = dir.path().join("recorder");
    let img = image(dir.path(), "cam.img");
    let adapt = |l: &str| {
        l.replace("target/release", &profile)
            .replace("-o recorder", &format!("-o {}", bin.display()))
            .replace("./recorder", &bin.display().to_string())
            .replace("cam.img", &img.display().to_string())
            // 8 MB at 64 Mbit/s: the docs' 64 MB at 8 Mbit/s would take a minute.
            .replace("/cam1.ts 64 8", "/cam1.ts 8 64")
    };
    shell(&adapt(&build), &[]);
    let out = shell(&adapt(&run), &[]);
    assert!(out.contains("0 late, 0 stalls"), "{out}");
}

/// `scripts/install-capi.sh` into a scratch prefix; a C program then builds with that
/// prefix's pkg-config flags alone (not a path into the build tree) and runs with
/// that prefix's library.
#[test]
fn a_c_program_builds_with_pkg_config_against_the_installed_copy() {
    build_libraries();
    let dir = tempfile::tempdir().unwrap();
    let prefix = dir.path().join("usr");
    shell(
        r#"scripts/install-capi.sh --from "$PROFILE" "$PREFIX""#,
        &[("PROFILE", &profile_dir()), ("PREFIX", &prefix)],
    );
    for f in [
        "lib/libdvrfs.so",
        "lib/libdvrfs.a",
        "include/dvrfs.h",
        "lib/pkgconfig/dvrfs.pc",
    ] {
        assert!(prefix.join(f).is_file(), "{f} was not installed");
    }
    let pc = std::fs::read_to_string(prefix.join("lib/pkgconfig/dvrfs.pc")).unwrap();
    assert!(
        pc.contains(&format!("prefix={}\n", prefix.display())),
        "{pc}"
    );
    let flags = shell(
        "pkg-config --cflags --libs dvrfs",
        &[("PKG_CONFIG_PATH", &prefix.join("lib/pkgconfig"))],
    );
    assert!(
        flags.contains(&format!("-I{}/include", prefix.display()))
            && flags.contains(&format!("-L{}/lib", prefix.display())),
        "{flags}"
    );
    let profile = profile_dir().display().to_string();
    assert!(
        !flags.contains(&profile),
        "{flags} points into the build tree"
    );
    let bin = dir.path().join("recorder");
    shell(
        r#"cc -std=c11 -Wall -Wextra -Werror -D_POSIX_C_SOURCE=200809L -o "$BIN" examples/c/recorder.c $(pkg-config --cflags --libs dvrfs)"#,
        &[
            ("PKG_CONFIG_PATH", &prefix.join("lib/pkgconfig")),
            ("BIN", &bin),
        ],
    );
    let img = image(dir.path(), "cam.img");
    let o = Command::new(&bin)
        .args([img.to_str().unwrap(), "/cam1.ts", "8", "32"])
        .env("LD_LIBRARY_PATH", prefix.join("lib"))
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "{out}\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(out.contains("0 late, 0 stalls"), "{out}");
}
