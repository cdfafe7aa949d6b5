//! Many processes, one volume (issue 21 item 7): while `dvrfs mount` holds an image,
//! the dvrfs commands and C programs given the image work through the daemon's
//! socket. Needs root and /dev/fuse (SKIP otherwise), and `cc` for the C client.

mod common;

use common::*;
use std::fs;
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

/// target/<profile>, where the C library is built.
fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    exe.parent().and_then(Path::parent).unwrap().to_path_buf()
}

/// Builds libdvrfs (and its header) for this profile once, and compiles the C
/// source `src` against it (with `examples/c` on the include path, for the
/// examples' `pattern.h`).
fn cc(src: &Path, out: &Path) {
    static BUILT: OnceLock<()> = OnceLock::new();
    let dir = profile_dir();
    BUILT.get_or_init(|| {
        let mut cmd = Command::new(env!("CARGO"));
        cmd.args(["build", "--quiet", "-p", "dvrfs-capi", "--lib"])
            .arg("--manifest-path")
            .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("../dvrfs-capi/Cargo.toml"));
        if dir.file_name().is_some_and(|n| n == "release") {
            cmd.arg("--release");
        }
        cmd.arg("--target-dir").arg(dir.parent().unwrap());
        let o = cmd.output().unwrap();
        assert!(o.status.success(), "building libdvrfs: {}", stderr(&o));
    });
    let o = Command::new("cc")
        .args(["-std=c11", "-O2", "-Wall", "-Wextra", "-Werror"])
        .arg("-D_POSIX_C_SOURCE=200809L")
        .arg(format!("-I{}", dir.join("include").display()))
        .arg(format!("-I{}", examples().display()))
        .arg(src)
        .arg("-o")
        .arg(out)
        .arg(format!("-L{}", dir.display()))
        .args(["-ldvrfs", "-lpthread"])
        .arg(format!("-Wl,-rpath,{}", dir.display()))
        .output()
        .expect("run cc");
    assert!(o.status.success(), "cc {}: {}", src.display(), stderr(&o));
}

fn examples() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/c")
}

fn c_client(out: &Path) {
    cc(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c/follow.c"),
        out,
    );
}

/// Runs a C program; its stdout, or a failure with everything it said.
fn run_c(bin: &Path, args: &[&std::ffi::OsStr]) -> String {
    let o = Command::new(bin).args(args).output().unwrap();
    let out = stdout(&o);
    assert!(
        o.status.success(),
        "{} failed ({}):\n{out}\n{}",
        bin.display(),
        o.status,
        stderr(&o)
    );
    out
}

/// Bytes no two positions of which are alike over a few MiB (a counter's bytes
/// spread by a multiplier), so a piece out of place is seen.
fn reference(len: usize, seed: u64) -> Vec<u8> {
    (0..len as u64)
        .map(|i| ((i.wrapping_mul(2654435761) >> 7) ^ (i >> 13) ^ seed) as u8)
        .collect()
}

fn dir_for_everyone() -> tempfile::TempDir {
    let dir = tempdir();
    fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o755)).unwrap();
    dir
}

/// What `dvrfs stat --json` says a file's size is (through the daemon).
fn size_of(img: &Path, path: &str) -> Option<u64> {
    let o = dvrfs([
        "stat".as_ref(),
        img.as_os_str(),
        path.as_ref(),
        "--json".as_ref(),
    ]);
    o.status
        .success()
        .then(|| json(&stdout(&o))["size_bytes"].as_u64().unwrap())
}

#[test]
fn a_recording_a_c_follower_a_playback_and_ls_at_once_on_one_mounted_volume() {
    need_fuse!();
    let dir = dir_for_everyone();
    let img = dir.path().join("v.img");
    mkfs(&img, "1G", &[]);
    let refbin = dir.path().join("ref.bin");
    fs::write(&refbin, reference(4 << 20, 1)).unwrap();
    let follow = dir.path().join("follow");
    c_client(&follow);
    let m = Mount::new(dir.path(), &img, &[]);
    // A file on the disk for the C client's deadline check, put through the daemon.
    ok(dvrfs([
        "put".as_ref(),
        img.as_os_str(),
        refbin.as_os_str(),
        "/ref.bin".as_ref(),
    ]));

    // The writer: `record` through the daemon, fed by this test at its own pace.
    const TOTAL: usize = 4 << 20;
    let live = reference(TOTAL, 7);
    let mut rec = Command::new(env!("CARGO_BIN_EXE_dvrfs"))
        .args(["record".as_ref(), img.as_os_str()])
        .args(["/live.ts", "--rate", "16M", "--size", "4M", "--input", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut input = rec.stdin.take().unwrap();
    input.write_all(&live[..1 << 20]).unwrap();
    // Until the recording has a first megabyte (record takes it at its rate).
    let mut polls = 0;
    while size_of(&img, "/live.ts").is_none_or(|s| s < 1 << 20) {
        polls += 1;
        assert!(polls < 3000, "the recording never reached 1 MiB");
        std::thread::yield_now();
    }

    // Beside it: the C client following the recording, a playback, a listing.
    let followed = dir.path().join("followed.out");
    let c = Command::new(&follow)
        .args([img.as_os_str(), "/ref.bin".as_ref(), "/live.ts".as_ref()])
        .arg(TOTAL.to_string())
        .arg(&followed)
        .output_later();
    let played = dir.path().join("played.out");
    let play = Command::new(env!("CARGO_BIN_EXE_dvrfs"))
        .args(["play".as_ref(), img.as_os_str(), "/live.ts".as_ref()])
        .args(["--rate", "64M", "--output"])
        .arg(&played)
        .output_later();
    let listed = ok(dvrfs([
        "ls".as_ref(),
        img.as_os_str(),
        "/".as_ref(),
        "-l".as_ref(),
    ]));
    // The rest of the recording, while they run.
    input.write_all(&live[1 << 20..]).unwrap();
    drop(input);
    let rec = rec.wait_with_output().unwrap();
    assert!(rec.status.success(), "record: {}", stderr(&rec));
    let c = c.wait_with_output().unwrap();
    let c_out = stdout(&c);
    assert!(c.status.success(), "follow: {c_out}\n{}", stderr(&c));
    let play = play.wait_with_output().unwrap();
    assert!(play.status.success(), "play: {}", stderr(&play));

    // The listing saw both files, nobody was refused.
    assert!(listed.contains(" ref.bin"), "{listed}");
    assert!(listed.contains(" live.ts"), "{listed}");
    // The C client's deadlines reached the engine: one in the past failed as a
    // missed deadline, as it does locally (checked below after the unmount).
    assert!(c_out.contains("past deadline: deadline missed"), "{c_out}");
    assert!(c_out.contains("future deadline: 65536 bytes"), "{c_out}");
    assert!(
        c_out.contains(&format!("followed: {TOTAL} bytes")),
        "{c_out}"
    );
    // Every reader got the writer's bytes: the follower all of them, the player a
    // prefix of at least what was there when it opened.
    assert!(
        fs::read(&followed).unwrap() == live,
        "the C client read other bytes"
    );
    let p = fs::read(&played).unwrap();
    assert!(p.len() >= 1 << 20, "played only {} bytes", p.len());
    assert!(
        p[..] == live[..p.len()],
        "the playback differs from the recording"
    );
    let back = dir.path().join("back.ts");
    get_to(&img, "/live.ts", &back);
    assert!(fs::read(&back).unwrap() == live);
    m.unmount();

    // Locally (the volume not mounted) the same C client sees the same deadline miss.
    let again = dir.path().join("again.out");
    let c = Command::new(&follow)
        .args([img.as_os_str(), "/ref.bin".as_ref(), "/live.ts".as_ref()])
        .arg(TOTAL.to_string())
        .arg(&again)
        .output()
        .unwrap();
    assert!(c.status.success(), "{}", stderr(&c));
    assert!(stdout(&c).contains("past deadline: deadline missed"));
    assert_clean(&img);
}

/// `Command::spawn` with its output collected later.
trait OutputLater {
    fn output_later(&mut self) -> std::process::Child;
}

impl OutputLater for Command {
    fn output_later(&mut self) -> std::process::Child {
        self.stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    }
}

#[test]
fn commands_on_a_mounted_target_go_through_the_daemon() {
    need_fuse!();
    let dir = dir_for_everyone();
    let img = dir.path().join("v.img");
    mkfs(&img, "1G", &[]);
    let m = Mount::new(dir.path(), &img, &[]);
    let log = fs::read_to_string(&m.log).unwrap();
    assert!(
        log.contains("serving other processes on /run/dvrfs/img-"),
        "{log}"
    );

    // put, ls, stat, get.
    let local = random_file(&dir.path().join("in.bin"), (40 << 20) + 123, 3);
    ok(dvrfs([
        "put".as_ref(),
        img.as_os_str(),
        local.as_os_str(),
        "/in.bin".as_ref(),
    ]));
    assert_eq!(
        fs::read(m.mnt.join("in.bin")).unwrap(),
        fs::read(&local).unwrap()
    );
    let listed = ok(dvrfs(["ls".as_ref(), img.as_os_str()]));
    assert_eq!(listed.trim(), "in.bin");
    // The mount point names the volume too.
    let listed = ok(dvrfs(["ls".as_ref(), m.mnt.as_os_str()]));
    assert_eq!(listed.trim(), "in.bin");
    let st = json(&ok(dvrfs([
        "stat".as_ref(),
        img.as_os_str(),
        "/in.bin".as_ref(),
        "--json".as_ref(),
    ])));
    assert_eq!(st["size_bytes"], (40 << 20) + 123);
    let back = dir.path().join("back.bin");
    get_to(&img, "/in.bin", &back);
    assert_eq!(sha256_file(&back), sha256_file(&local));
    // A file written through the mount is read back through the daemon.
    fs::write(m.mnt.join("via-mount.txt"), b"written through the mount\n").unwrap();
    let o = dvrfs([
        "get".as_ref(),
        img.as_os_str(),
        "/via-mount.txt".as_ref(),
        "-".as_ref(),
    ]);
    assert_eq!(ok(o), "written through the mount\n");
    // A second recording, from a file, and an existing name refused as locally.
    let src = random_file(&dir.path().join("src.ts"), 3 << 20, 4);
    ok(dvrfs([
        "record".as_ref(),
        img.as_os_str(),
        "/second.ts".as_ref(),
        "--rate".as_ref(),
        "64M".as_ref(),
        "--input".as_ref(),
        src.as_os_str(),
    ]));
    let back2 = dir.path().join("back2.bin");
    get_to(&img, "/second.ts", &back2);
    assert_eq!(sha256_file(&back2), sha256_file(&src));
    fails(
        dvrfs([
            "record".as_ref(),
            img.as_os_str(),
            "/second.ts".as_ref(),
            "--rate".as_ref(),
            "1M".as_ref(),
            "--input".as_ref(),
            src.as_os_str(),
        ]),
        "already exists",
    );
    fails(
        dvrfs([
            "get".as_ref(),
            img.as_os_str(),
            "/nope".as_ref(),
            "-".as_ref(),
        ]),
        "/nope: no such file or directory",
    );
    // What needs the device to itself is still refused, saying where it is mounted.
    fails(
        dvrfs(["rm".as_ref(), img.as_os_str(), "/in.bin".as_ref()]),
        "is mounted at",
    );
    m.unmount();
    // The socket went with the mount; the volume is whole and clean.
    assert!(!socket_of(&img).exists(), "the socket outlived the mount");
    assert_clean(&img);
    let back3 = dir.path().join("back3.bin");
    get_to(&img, "/second.ts", &back3);
    assert_eq!(sha256_file(&back3), sha256_file(&src));
}

/// Where the daemon of `img` listens (as `dvrfs-remote` derives it).
fn socket_of(img: &Path) -> PathBuf {
    use std::os::unix::fs::MetadataExt;
    let md = fs::metadata(img).unwrap();
    PathBuf::from(format!("/run/dvrfs/img-{:x}-{}.sock", md.dev(), md.ino()))
}

#[test]
fn a_killed_daemons_socket_is_named_and_the_volume_opened_directly() {
    need_fuse!();
    let dir = dir_for_everyone();
    let img = dir.path().join("v.img");
    mkfs(&img, "1G", &[]);
    let mut m = Mount::new(dir.path(), &img, &[]);
    fs::write(m.mnt.join("a.txt"), b"a").unwrap();
    ok(dvrfs(["ls".as_ref(), img.as_os_str()]));
    // SAFETY: signalling the daemon's pid.
    unsafe { libc::kill(m.pid, libc::SIGKILL) };
    wait_exit(m.pid);
    m.pid = 0;
    assert!(socket_of(&img).exists(), "kill -9 leaves the socket");
    let o = dvrfs(["ls".as_ref(), img.as_os_str()]);
    let err = stderr(&o);
    assert!(o.status.success(), "{err}");
    assert!(
        err.contains("is gone") && err.contains("opening the volume directly"),
        "{err}"
    );
    // Once the dead mount is taken away the leftover socket is nobody's business:
    // ignored without a word.
    let _ = Command::new("umount").arg("-l").arg(&m.mnt).output();
    drop(m);
    assert!(socket_of(&img).exists());
    let o = dvrfs(["ls".as_ref(), img.as_os_str()]);
    assert!(
        o.status.success() && stderr(&o).is_empty(),
        "{}",
        stderr(&o)
    );
    // A new mount replaces the stale socket and serves again.
    let m = Mount::new(dir.path(), &img, &[]);
    let o = dvrfs(["ls".as_ref(), img.as_os_str()]);
    assert!(
        o.status.success() && !stderr(&o).contains("is gone"),
        "{}",
        stderr(&o)
    );
    m.unmount();
}

/// `dvrfs ARGS` as user and group 65534 (nobody), no supplementary groups.
fn as_nobody(args: &[&std::ffi::OsStr]) -> std::process::Output {
    Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(env!("CARGO_BIN_EXE_dvrfs"))
        .args(args)
        .output()
        .expect("run setpriv")
}

#[test]
fn another_user_is_refused_where_the_mount_would_refuse() {
    need_fuse!();
    if Command::new("setpriv").arg("--version").output().is_err() {
        println!("SKIP: setpriv (util-linux) is missing");
        return;
    }
    let dir = dir_for_everyone();
    let img = dir.path().join("v.img");
    mkfs(&img, "1G", &[]);
    let out = dir.path().join("out");
    fs::create_dir(&out).unwrap();
    fs::set_permissions(&out, fs::Permissions::from_mode(0o777)).unwrap();
    let secret = dir.path().join("secret.bin");
    fs::write(&secret, b"root's only").unwrap();
    fs::set_permissions(&secret, fs::Permissions::from_mode(0o600)).unwrap();
    let open = dir.path().join("open.bin");
    fs::write(&open, b"for everyone").unwrap();
    fs::set_permissions(&open, fs::Permissions::from_mode(0o644)).unwrap();

    // Without --allow-other nobody else gets in, as FUSE keeps them out of the mount.
    let m = Mount::new(dir.path(), &img, &[]);
    ok(dvrfs([
        "put".as_ref(),
        img.as_os_str(),
        secret.as_os_str(),
        "/secret.bin".as_ref(),
    ]));
    let e = stderr(&as_nobody(&["ls".as_ref(), img.as_os_str()]));
    assert!(
        e.contains("mounted without --allow-other") && e.contains("uid 65534"),
        "{e}"
    );
    m.unmount();

    // With it, each file's mode decides, as the kernel decides for the mount.
    let m = Mount::new(dir.path(), &img, &["--allow-other"]);
    ok(dvrfs([
        "put".as_ref(),
        img.as_os_str(),
        open.as_os_str(),
        "/open.bin".as_ref(),
    ]));
    let listed = as_nobody(&["ls".as_ref(), img.as_os_str()]);
    assert!(listed.status.success(), "{}", stderr(&listed));
    let got = out.join("open.bin");
    let o = as_nobody(&[
        "get".as_ref(),
        img.as_os_str(),
        "/open.bin".as_ref(),
        got.as_os_str(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(fs::read(&got).unwrap(), b"for everyone");
    let denied = as_nobody(&[
        "get".as_ref(),
        img.as_os_str(),
        "/secret.bin".as_ref(),
        out.join("s").as_os_str(),
    ]);
    let e = stderr(&denied);
    assert!(
        !denied.status.success()
            && e.contains("permission denied")
            && e.contains("uid 65534 asked"),
        "{e}"
    );
    assert!(!out.join("s").exists(), "a refused get left a file");
    // The mount refuses the same read.
    let through_mount = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "cat"])
        .arg(m.mnt.join("secret.bin"))
        .output()
        .unwrap();
    assert!(
        !through_mount.status.success(),
        "the mount let nobody read it"
    );
    // A write into root's 0755 directory is refused; nothing is created.
    let o = as_nobody(&[
        "put".as_ref(),
        img.as_os_str(),
        open.as_os_str(),
        "/mine.bin".as_ref(),
    ]);
    let e = stderr(&o);
    assert!(
        !o.status.success() && e.contains("permission denied"),
        "{e}"
    );
    assert!(!m.mnt.join("mine.bin").exists());
    // Into a directory open to all it goes.
    fs::create_dir(m.mnt.join("pub")).unwrap();
    fs::set_permissions(m.mnt.join("pub"), fs::Permissions::from_mode(0o777)).unwrap();
    let o = as_nobody(&[
        "put".as_ref(),
        img.as_os_str(),
        open.as_os_str(),
        "/pub/mine.bin".as_ref(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    // A file a client creates is its own, whatever it asks for.
    let st = json(&ok(dvrfs([
        "stat".as_ref(),
        img.as_os_str(),
        "/pub/mine.bin".as_ref(),
        "--json".as_ref(),
    ])));
    assert_eq!(st["uid"], 65534);
    assert_eq!(st["gid"], 65534);
    m.unmount();
    assert_clean(&img);
}

#[test]
fn status_of_a_mounted_volume_shows_the_daemons_streams() {
    need_fuse!();
    let dir = dir_for_everyone();
    let img = dir.path().join("v.img");
    mkfs(&img, "1G", &[]);
    let m = Mount::new(dir.path(), &img, &["--bandwidth", "400M"]);
    // A recording through the daemon, held open: the test feeds it and waits.
    let mut rec = Command::new(env!("CARGO_BIN_EXE_dvrfs"))
        .args(["record".as_ref(), img.as_os_str()])
        .args(["/rec.ts", "--rate", "4M", "--size", "1M", "--input", "-"])
        .stdin(Stdio::piped())
        .output_later();
    let mut input = rec.stdin.take().unwrap();
    input.write_all(&reference(64 << 10, 3)).unwrap();
    let status = |t: &Path| -> serde_json::Value {
        let args: [&std::ffi::OsStr; 5] = [
            "status".as_ref(),
            t.as_os_str(),
            "--json".as_ref(),
            "--sample".as_ref(),
            "0s".as_ref(),
        ];
        json(&ok(dvrfs(args)))
    };
    let mut polls = 0;
    let v = loop {
        let v = status(&img);
        if v["status"]["streams"]
            .as_array()
            .is_some_and(|s| !s.is_empty())
        {
            break v;
        }
        polls += 1;
        assert!(polls < 2000, "the recording's stream never showed: {v}");
        std::thread::yield_now();
    };
    assert_eq!(v["mounted_at"], m.mnt.to_str().unwrap(), "{v}");
    let s = &v["status"]["streams"][0];
    assert_eq!(s["path"], "/rec.ts", "{v}");
    assert_eq!(s["dir"], "write", "{v}");
    assert_eq!(s["rate_bps"], 4e6, "{v}");
    assert!(
        v["status"]["admission"]["against"].as_str().is_some(),
        "{v}"
    );
    // The headroom is counted for recordings at the daemon's commit interval (a
    // request of kind 17); playbacks go as kind 15, which older daemons answer.
    let asked = &v["status"]["admission"]["asked"];
    assert_eq!(asked["dir"], "write", "{v}");
    assert_eq!(asked["durable_ns"], 1_000_000_000u64, "{v}");
    let reads = json(&ok(dvrfs([
        "status".as_ref(),
        img.as_os_str(),
        "--json".as_ref(),
        "--sample".as_ref(),
        "0s".as_ref(),
        "--dir".as_ref(),
        "read".as_ref(),
    ])));
    let asked = &reads["status"]["admission"]["asked"];
    assert_eq!(asked["dir"], "read", "{reads}");
    assert!(asked["durable_ns"].is_null(), "{reads}");
    // Given the mount point, the same daemon answers.
    let v = status(&m.mnt);
    assert_eq!(v["status"]["streams"][0]["path"], "/rec.ts", "{v}");
    // The recording ends; its stream is gone from the daemon's engine.
    input
        .write_all(&reference((1 << 20) - (64 << 10), 4))
        .unwrap();
    drop(input);
    let rec = rec.wait_with_output().unwrap();
    assert!(rec.status.success(), "record: {}", stderr(&rec));
    let v = status(&img);
    assert_eq!(
        v["status"]["streams"].as_array().map(Vec::len),
        Some(0),
        "{v}"
    );
    m.unmount();
}

#[test]
fn the_c_examples_run_on_a_mounted_volume_through_the_daemon() {
    need_fuse!();
    let dir = dir_for_everyone();
    let img = dir.path().join("v.img");
    mkfs(&img, "1G", &[]);
    let (rec, play, dvr) = (
        dir.path().join("recorder"),
        dir.path().join("player"),
        dir.path().join("dvr"),
    );
    cc(&examples().join("recorder.c"), &rec);
    cc(&examples().join("player.c"), &play);
    cc(&examples().join("dvr.c"), &dvr);
    let m = Mount::new(dir.path(), &img, &[]);
    let i = img.as_os_str();
    // A stream reservation (recorder), deadline-bound aio reads, a playback
    // reservation, cancels and bad calls (player), three threads sharing one handle
    // (dvr): each as the tests of the C API run them on a volume of their own.
    let out = run_c(&rec, &[i, "/cam1.ts".as_ref(), "8".as_ref(), "64".as_ref()]);
    assert!(out.contains("0 late, 0 stalls"), "{out}");
    let out = run_c(&play, &[i, "/cam1.ts".as_ref(), "64".as_ref()]);
    assert!(
        out.contains("8388608 bytes read back with aio, 0 late"),
        "{out}"
    );
    assert!(out.contains("2097152 bytes played"), "{out}");
    assert!(out.contains("bad calls refused"), "{out}");
    // What they wrote is in the mount; dvr records its own /cam1.ts after the
    // recorder's is removed through the mount.
    assert_eq!(fs::metadata(m.mnt.join("cam1.ts")).unwrap().len(), 8 << 20);
    fs::remove_file(m.mnt.join("cam1.ts")).unwrap();
    let out = run_c(&dvr, &[i, "6".as_ref(), "24".as_ref()]);
    assert!(out.contains("all recordings read back right"), "{out}");
    m.unmount();
    assert_clean(&img);
}

#[test]
fn a_read_only_mount_refuses_writes_through_the_daemon_and_serves_reads() {
    need_fuse!();
    let dir = dir_for_everyone();
    let img = dir.path().join("v.img");
    mkfs(&img, "1G", &[]);
    let local = random_file(&dir.path().join("in.bin"), 1 << 20, 5);
    ok(dvrfs([
        "put".as_ref(),
        img.as_os_str(),
        local.as_os_str(),
        "/in.bin".as_ref(),
    ]));
    let m = Mount::new(dir.path(), &img, &["--read-only"]);
    let e = fails(
        dvrfs([
            "put".as_ref(),
            img.as_os_str(),
            local.as_os_str(),
            "/again.bin".as_ref(),
        ]),
        "mounted with --read-only",
    );
    assert!(e.contains("is read-only"), "{e}");
    let back = dir.path().join("back.bin");
    get_to(&img, "/in.bin", &back);
    assert_eq!(sha256_file(&back), sha256_file(&local));
    m.unmount();
    assert_clean(&img);
}
