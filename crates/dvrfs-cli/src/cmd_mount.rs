//! `mount`: serve a volume over FUSE (crate `dvrfs-fuse`) until it is unmounted.
//!
//! Without `--foreground` the command forks before it opens anything, the child
//! becomes the daemon (own session, working directory `/`, output to the log), and
//! the parent waits on a pipe until the child says the volume is mounted, or why it is
//! not, so `dvrfs mount` (and `mount -t fuse.dvrfs`, which waits for its helper)
//! returns only when the mount point is usable and reports a failure with the right
//! exit status.
//!
//! The daemon stops when the volume is unmounted (`umount`, `fusermount3 -u`) or on
//! SIGTERM, SIGINT or SIGHUP (which unmount it): gathered writes go to the disk, the
//! journal is committed and marked clean, the device is closed.
//!
//! The same binary is the `mount.fuse` helper: `mount -t fuse.dvrfs IMAGE DIR -o OPTS`
//! runs `dvrfs IMAGE DIR -o OPTS` (through `mount.fuse3`), or `mount.fuse.dvrfs IMAGE
//! DIR -o OPTS` when a link of that name is installed; [`helper_argv`] turns both
//! into `dvrfs mount`.

use std::ffi::OsString;
use std::fs::OpenOptions;
use std::io::{Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use clap::Args;
use dvrfs_fuse::{stamp, DvrfsFs, MountConfig};
use dvrfs_io::signals::{self, SignalSet};
use dvrfs_io::{files, process};
use dvrfs_runtime::Runtime;

use crate::cmd_stream::admission;
use crate::error::{CliError, CliResult};
use crate::own_mount::OwnMount;
use crate::target::{mount_on, mounted_at, open_device, Access};

#[derive(Args, Debug, Clone)]
pub struct MountArgs {
    /// Image file or block device
    pub target: PathBuf,
    /// Existing directory to mount on
    pub mountpoint: PathBuf,
    /// Stay in the foreground (log to stderr) instead of becoming a daemon
    #[arg(long, short = 'f')]
    pub foreground: bool,
    /// Let other users in (the kernel still checks each file's permissions)
    #[arg(long)]
    pub allow_other: bool,
    /// Mount read-only
    #[arg(long)]
    pub read_only: bool,
    /// Emulate this hard disk model (NAME or FILE): each command takes as long as the
    /// model says; stream admission uses the model
    #[arg(long)]
    pub device_model: Option<String>,
    /// For a device without a model: the bandwidth stream admission may count on
    #[arg(long)]
    pub bandwidth: Option<String>,
    /// Every open as if with O_DIRECT: no page cache, each read and write goes to the
    /// disk scheduler as it came
    #[arg(long)]
    pub direct_io: bool,
    /// Write the serving process's id here once the volume is mounted (for service
    /// managers and scripts: `kill -TERM $(cat FILE)` unmounts)
    #[arg(long)]
    pub pid_file: Option<PathBuf>,
    /// Requests served at once, 1 to 256
    #[arg(long, default_value_t = 8)]
    pub threads: usize,
    /// The most memory all stream reservations' buffers take together, 16M to 1T
    /// (default 1G): a reservation whose buffer would pass it is refused (EBUSY)
    #[arg(long, value_name = "SIZE")]
    pub stream_memory: Option<String>,
    /// The most memory the read cache of all open files takes together, 4M to 64G
    /// (default 64M)
    #[arg(long, value_name = "SIZE")]
    pub read_cache: Option<String>,
    /// The daemon's log (default /var/log/dvrfs-<mount point's path, escaped as
    /// `systemd-escape --path` does>.log, e.g. dvrfs-mnt-rec.log for /mnt/rec; in the
    /// temporary directory when /var/log is not writable)
    #[arg(long)]
    pub log: Option<PathBuf>,
    /// How long a reservation set on a file nobody has open waits for an open by the
    /// same user before it expires, 100ms to 1h
    #[arg(long, default_value = "30s")]
    pub stream_grace: String,
    /// The most bandwidth one user's reservations may reserve together, bits per
    /// second with K/M/G (decimal), 8K to 100G (default: no cap)
    #[arg(long)]
    pub user_rate: Option<String>,
    /// The most space one user's recordings may hold together, 4K to 1P (default: no
    /// cap)
    #[arg(long)]
    pub user_space: Option<String>,
    /// Root's reservations count against --user-rate and --user-space too
    #[arg(long)]
    pub limit_root: bool,
    /// Percent of the disk's real-time share and of the data area other users'
    /// reservations leave to root, 0 to 50
    #[arg(long, default_value_t = dvrfs_fuse::quota::DEFAULT_ROOT_SHARE_PCT)]
    pub root_share: u32,
    /// Mount options, comma-separated, as mount(8) passes them: ro, rw,
    /// allow_other, direct_io, device_model=NAME, bandwidth=RATE, threads=N,
    /// stream_memory=SIZE, read_cache=SIZE, foreground, log=FILE, stream_grace=TIME,
    /// user_rate=RATE, user_space=SIZE, limit_root, root_share=PCT; the
    /// generic ones (defaults, auto, noauto, nofail, user, exec, suid, dev, ...) are
    /// accepted and ignored
    #[arg(short = 'o')]
    pub options: Vec<String>,
    /// Testing only (hidden): operations the runtime tracks at once, 1 to
    /// 65536 (`dvrfs_runtime::Options::max_tickets`, default 65536). A small bound
    /// makes the mount's wait for room (docs/mount.md, "When the queue is full")
    /// happen with a handful of writers.
    #[arg(long, hide = true, default_value_t = dvrfs_runtime::MAX_TICKETS)]
    pub max_tickets: usize,
}

/// How `mount.fuse3` and `mount(8)` call a helper: `dvrfs SOURCE DIR [-o OPTS]`, or
/// through a link named `mount.fuse.dvrfs`. Returns the command line as `dvrfs mount
/// ...` when `argv` has that form, else `None`.
pub fn helper_argv(argv: &[OsString], subcommands: &[String]) -> Option<Vec<OsString>> {
    let name = Path::new(argv.first()?)
        .file_name()?
        .to_string_lossy()
        .into_owned();
    let mut out: Vec<OsString> = vec!["dvrfs".into(), "mount".into()];
    if name.starts_with("mount.") {
        out.extend(argv[1..].iter().cloned());
        return Some(out);
    }
    let (first, second) = (argv.get(1)?, argv.get(2)?);
    let first_s = first.to_string_lossy();
    if first_s.starts_with('-') || subcommands.iter().any(|s| *s == first_s) {
        return None;
    }
    let source = std::fs::metadata(first).ok()?;
    let dir = std::fs::metadata(second).ok()?;
    if !(source.is_file() || std::os::unix::fs::FileTypeExt::is_block_device(&source.file_type()))
        || !dir.is_dir()
    {
        return None;
    }
    out.extend(argv[1..].iter().cloned());
    Some(out)
}

/// `-o` options folded into the flags.
fn apply_options(a: &mut MountArgs) -> CliResult<()> {
    let opts: Vec<String> = a
        .options
        .iter()
        .flat_map(|o| o.split(',').map(str::to_string).collect::<Vec<_>>())
        .filter(|o| !o.is_empty())
        .collect();
    for o in opts {
        let (k, v) = match o.split_once('=') {
            Some((k, v)) => (k, Some(v.to_string())),
            None => (o.as_str(), None),
        };
        match (k, v) {
            ("ro", None) => a.read_only = true,
            ("rw", None) => a.read_only = false,
            ("allow_other", None) => a.allow_other = true,
            ("foreground", None) => a.foreground = true,
            ("direct_io", None) => a.direct_io = true,
            ("device_model", Some(v)) => a.device_model = Some(v),
            ("bandwidth", Some(v)) => a.bandwidth = Some(v),
            ("log", Some(v)) => a.log = Some(PathBuf::from(v)),
            ("pid_file", Some(v)) => a.pid_file = Some(PathBuf::from(v)),
            ("stream_memory", Some(v)) => a.stream_memory = Some(v),
            ("read_cache", Some(v)) => a.read_cache = Some(v),
            ("stream_grace", Some(v)) => a.stream_grace = v,
            ("user_rate", Some(v)) => a.user_rate = Some(v),
            ("user_space", Some(v)) => a.user_space = Some(v),
            ("limit_root", None) => a.limit_root = true,
            ("root_share", Some(v)) => {
                a.root_share = v.parse().map_err(|_| {
                    CliError::usage(
                        format!("-o root_share={v} is not a number"),
                        "give a percent from 0 to 50, e.g. root_share=5",
                    )
                })?
            }
            ("threads", Some(v)) => {
                a.threads = v.parse().map_err(|_| {
                    CliError::usage(
                        format!("-o threads={v} is not a number"),
                        format!("give a number from 1 to {MAX_THREADS}, e.g. threads=8"),
                    )
                })?
            }
            (
                "defaults" | "auto" | "noauto" | "nofail" | "user" | "nouser" | "users" | "exec"
                | "noexec" | "suid" | "nosuid" | "dev" | "nodev" | "atime" | "noatime"
                | "relatime" | "strictatime" | "nodiratime" | "async" | "sync" | "_netdev"
                | "default_permissions",
                _,
            ) => {}
            (k, _) if k.starts_with("x-") || k.starts_with("comment") => {}
            _ => {
                return Err(CliError::usage(
                    format!("-o {o}: not a dvrfs mount option"),
                    "dvrfs takes ro, rw, allow_other, direct_io, device_model=NAME, bandwidth=RATE, threads=N, stream_memory=SIZE, read_cache=SIZE, log=FILE, pid_file=FILE, foreground, stream_grace=TIME, user_rate=RATE, user_space=SIZE, limit_root, root_share=PCT (and ignores the generic mount options)",
                ))
            }
        }
    }
    crate::args::check_range("--threads (-o threads=)", a.threads, 1..=MAX_THREADS)?;
    crate::args::check_range(
        "--max-tickets",
        a.max_tickets,
        1..=dvrfs_runtime::MAX_TICKETS,
    )?;
    memory_sizes(a)?;
    crate::mount_quota::quota_config(a)?;
    Ok(())
}

/// The memory bounds (`--stream-memory`, `--read-cache`, `dvrfs_fuse::memory`), in
/// bytes: the defaults, or the sizes given, each checked against its range.
fn memory_sizes(a: &MountArgs) -> CliResult<(u64, u64)> {
    use dvrfs_fuse::memory as m;
    let size = |flag: &str, text: &Option<String>, default: u64, min: u64, max: u64| {
        let Some(text) = text else {
            return Ok(default);
        };
        let v = crate::args::parse_size(flag, text)?;
        if !(min..=max).contains(&v) {
            let (lo, hi) = (show_size(min), show_size(max));
            return Err(CliError::usage(
                format!("{flag} {text}: out of range: from {lo} to {hi}"),
                format!("give a size from {lo} to {hi}, e.g. {}", show_size(default)),
            ));
        }
        Ok(v)
    };
    Ok((
        size(
            "--stream-memory (-o stream_memory=)",
            &a.stream_memory,
            m::DEFAULT_STREAM_MEMORY_BYTES,
            m::MIN_STREAM_MEMORY_BYTES,
            m::MAX_STREAM_MEMORY_BYTES,
        )?,
        size(
            "--read-cache (-o read_cache=)",
            &a.read_cache,
            m::DEFAULT_READ_CACHE_BYTES,
            m::MIN_READ_CACHE_BYTES,
            m::MAX_READ_CACHE_BYTES,
        )?,
    ))
}

/// `16M`, `1G`, `1T`: a whole binary size as the flags take it.
fn show_size(bytes: u64) -> String {
    let mut v = bytes;
    for unit in ["", "K", "M", "G"] {
        if v < 1024 || !v.is_multiple_of(1024) {
            return format!("{v}{unit}");
        }
        v /= 1024;
    }
    format!("{v}T")
}

/// The most requests a mount serves at once (`--threads`, `-o threads=`): each is a
/// thread with its own request buffer (about 1 MiB); 256 is far more than a disk's
/// queue keeps busy, and thousands would exhaust the daemon's memory.
pub const MAX_THREADS: usize = 256;

/// The daemon's log when `--log` is not given: [`log_name`] in `/var/log`, or in the
/// temporary directory when `/var/log` is not writable.
fn default_log(mountpoint: &Path) -> PathBuf {
    let var = Path::new("/var/log");
    let dir = if std::fs::metadata(var).is_ok_and(|m| !m.permissions().readonly())
        && files::writable(var)
    {
        var.to_path_buf()
    } else {
        std::env::temp_dir()
    };
    dir.join(log_name(mountpoint))
}

/// The most bytes of an escaped mount point kept whole in a log's name (a file name
/// holds 255): a longer one is cut and given a hash of the whole path.
const LOG_NAME_PATH_MAX: usize = 200;

/// `dvrfs-ESCAPED.log`, ESCAPED being the whole path of the (canonical) mount point as
/// `systemd-escape --path` writes it (`/mnt/cams/rec` gives `mnt-cams-rec`), so two
/// mounts never share a log (`/srv/a/rec` and `/srv/b/rec`, which the last name alone
/// would have mixed) and an operator can tell the name from the mount point:
/// `/`s become `-`, and every byte but ASCII letters, digits, `:`, `_` and a `.` that
/// does not come first becomes `\xNN`.
fn log_name(mountpoint: &Path) -> String {
    use std::os::unix::ffi::OsStrExt;
    let path = mountpoint.as_os_str().as_bytes();
    let mut trimmed = path;
    while let Some(rest) = trimmed.strip_prefix(b"/") {
        trimmed = rest;
    }
    while let Some(rest) = trimmed.strip_suffix(b"/") {
        trimmed = rest;
    }
    let mut esc = String::new();
    for (i, &b) in trimmed.iter().enumerate() {
        match b {
            b'/' => esc.push('-'),
            b'.' if i > 0 => esc.push('.'),
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b':' | b'_' => esc.push(b as char),
            _ => esc += &format!("\\x{b:02x}"),
        }
    }
    if esc.is_empty() {
        esc.push('-');
    }
    if esc.len() > LOG_NAME_PATH_MAX {
        // FNV-1a of the whole path: the cut names stay apart.
        let hash = path.iter().fold(0xcbf2_9ce4_8422_2325_u64, |h, &b| {
            (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
        });
        esc.truncate(LOG_NAME_PATH_MAX);
        esc += &format!("-{hash:016x}");
    }
    format!("dvrfs-{esc}.log")
}

pub fn mount(a: &MountArgs) -> CliResult<u8> {
    let mut a = a.clone();
    apply_options(&mut a)?;
    // The daemon works from `/`: paths given relative to here are made absolute.
    if let Some(p) = &a.pid_file {
        a.pid_file = Some(std::path::absolute(p).unwrap_or_else(|_| p.clone()));
    }
    let target = std::fs::canonicalize(&a.target).map_err(|e| {
        CliError::new(format!("{}: {e}", a.target.display()))
            .hint("give the image file or block device that holds the volume")
    })?;
    let dir = std::fs::canonicalize(&a.mountpoint)
        .and_then(|p| std::fs::metadata(&p).map(|m| (p, m.is_dir())));
    let mountpoint =
        match dir {
            Ok((p, true)) => p,
            // A FUSE mount whose daemon died answers every look with ENOTCONN.
            Err(e) if e.raw_os_error() == Some(libc::ENOTCONN) => {
                return Err(crate::target::dead_mount(&a.mountpoint))
            }
            Ok((_, false)) => return Err(CliError::new(format!(
                "{}: not a directory",
                a.mountpoint.display()
            ))
            .hint("mount on a directory (an empty one: what it holds is hidden while mounted)")),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(
                    CliError::new(format!("{}: no such directory", a.mountpoint.display())).hint(
                        format!("create it first: mkdir -p {}", a.mountpoint.display()),
                    ),
                )
            }
            Err(e) => {
                return Err(crate::error::local_io(
                    &a.mountpoint,
                    "cannot use the mount point",
                    e,
                ))
            }
        };
    // A second mount on the directory would hide the first, and one `umount` would
    // then take the wrong one away.
    if let Some(m) = mount_on(&mountpoint) {
        let what = if m.fstype == "fuse.dvrfs" {
            format!("the dvrfs volume {} is mounted there", m.source)
        } else {
            format!("{} ({}) is mounted there", m.source, m.fstype)
        };
        return Err(CliError::new(format!(
            "{} is already a mount point: {what}",
            mountpoint.display()
        ))
        .hint(format!(
            "unmount it first (umount {}), or mount on another directory",
            mountpoint.display()
        )));
    }
    if let Some(at) = mounted_at(&target) {
        return Err(CliError::new(format!(
            "{} is already mounted at {}",
            target.display(),
            at.display()
        ))
        .hint(format!(
            "use it there, or unmount it first: umount {}",
            at.display()
        )));
    }
    // Check the flags before forking, so a usage error is reported by the command.
    admission(a.device_model.as_deref(), a.bandwidth.as_deref())?;
    if let Some(p) = &a.pid_file {
        refuse_symlink("pid file", "--pid-file", p)?;
    }
    if a.foreground {
        return serve(&a, &target, &mountpoint, None);
    }
    let log = a.log.clone().unwrap_or_else(|| default_log(&mountpoint));
    daemonize(&a, &target, &mountpoint, &log)
}

/// Opens the daemon's log (appending) or pid file (`truncate`) for writing, created
/// 0644 if missing, never through a symbolic link (`O_NOFOLLOW`): the daemon runs as
/// root, and a link planted where the file is expected (a world-writable directory)
/// would have it overwrite whatever the link names. Only a regular file (or a
/// character device such as `/dev/null`) is written.
fn open_daemon_file(path: &Path, truncate: bool) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    let f = OpenOptions::new()
        .create(true)
        .write(true)
        .append(!truncate)
        .mode(0o644)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)?;
    let kind = f.metadata()?.file_type();
    // A regular file, or `/dev/null` and its kind; never a FIFO or socket, whose
    // writes could block the daemon.
    if !(kind.is_file() || std::os::unix::fs::FileTypeExt::is_char_device(&kind)) {
        return Err(std::io::Error::other("not a regular file"));
    }
    if truncate && kind.is_file() {
        f.set_len(0)?;
    }
    Ok(f)
}

/// The error for a log or pid file that cannot be opened; a symbolic link is named.
fn daemon_file_error(what: &str, flag: &str, path: &Path, e: std::io::Error) -> CliError {
    if e.raw_os_error() == Some(libc::ELOOP) {
        return symlink_error(what, flag, path);
    }
    CliError::new(format!("cannot open the {what} {}: {e}", path.display()))
        .hint(format!("give a writable regular file with {flag}"))
}

fn symlink_error(what: &str, flag: &str, path: &Path) -> CliError {
    CliError::new(format!(
        "the {what} {} is a symbolic link: refused (the daemon would write wherever it points)",
        path.display()
    ))
    .hint(format!(
        "give the file's real path with {flag}, or remove the link"
    ))
}

/// Refuses a symbolic link before anything is mounted (the open refuses it again,
/// without a race, when the file is written).
fn refuse_symlink(what: &str, flag: &str, path: &Path) -> CliResult<()> {
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_symlink() => Err(symlink_error(what, flag, path)),
        _ => Ok(()),
    }
}

/// Forks; the child serves, the parent reports what the child says.
fn daemonize(a: &MountArgs, target: &Path, mountpoint: &Path, log: &Path) -> CliResult<u8> {
    let log_file =
        open_daemon_file(log, false).map_err(|e| daemon_file_error("log", "--log", log, e))?;
    let (rd, wr) =
        process::pipe().map_err(|e| CliError::new(format!("cannot create a pipe: {e}")))?;
    // The process has one thread here (nothing was started yet), so the child may go
    // on running Rust code; `fork` checks it.
    let forked =
        process::fork().map_err(|e| CliError::new(format!("cannot fork the daemon: {e}")))?;
    if let process::Forked::Parent(_) = forked {
        drop(wr);
        let mut said = String::new();
        let _ = std::fs::File::from(rd).read_to_string(&mut said);
        if said.starts_with("ok") {
            return Ok(0);
        }
        let mut lines = said.lines();
        let why = lines.next().unwrap_or("").trim();
        if why.is_empty() {
            return Err(CliError::new(format!(
                "the dvrfs daemon stopped before mounting {}",
                target.display()
            ))
            .hint(format!("see its log, {}", log.display())));
        }
        let mut e = CliError::new(why);
        if let Some(h) = lines.next().filter(|h| !h.trim().is_empty()) {
            e = e.hint(h.trim().to_string());
        }
        return Err(e);
    }
    drop(rd);
    // In the child: a new session, standard descriptors on /dev/null and the log.
    process::detach_stdio(log_file.as_fd());
    drop(log_file);
    let _ = std::env::set_current_dir("/");
    let code = match serve(a, target, mountpoint, Some(wr)) {
        Ok(c) => c,
        Err(e) => {
            let e = e.in_target(target);
            e.print();
            e.exit_code
        }
    };
    std::process::exit(code as i32)
}

/// The log's time stamp: UTC, to the millisecond (2026-11-24T05:41:12.345Z).
/// Opens the volume, mounts it and serves until it is unmounted or a signal comes.
/// `ready` (daemon mode) hears "ok" once mounted, or the failure.
fn serve(a: &MountArgs, target: &Path, mountpoint: &Path, ready: Option<OwnedFd>) -> CliResult<u8> {
    let mut ready = ready.map(std::fs::File::from);
    type Served = (
        fuser::Session<DvrfsFs>,
        Arc<Runtime>,
        Arc<OwnMount>,
        Arc<dvrfs_fuse::quota::Quota>,
    );
    let result = (|| -> CliResult<Served> {
        // Termination signals go to one thread, which unmounts (blocked in every
        // thread started from here on).
        let signals = block_signals();
        let (model, admission) = admission(a.device_model.as_deref(), a.bandwidth.as_deref())?;
        let (stream_memory_bytes, read_cache_bytes) = memory_sizes(a)?;
        let access = if a.read_only {
            Access::Read
        } else {
            Access::Write
        };
        let dev = open_device(target, access)?;
        let opts = dvrfs_runtime::Options {
            writable: !a.read_only,
            device_model: model,
            admission: Some(admission),
            // The mount runs for months: counters, not a sample per request.
            keep_samples: false,
            stream_memory_bytes: Some(stream_memory_bytes),
            max_tickets: a.max_tickets,
            ..dvrfs_runtime::Options::default()
        };
        let rt = Arc::new(Runtime::with_device(dev, opts)?);
        let cfg = MountConfig {
            allow_other: a.allow_other,
            read_only: a.read_only,
            threads: a.threads,
            fsname: target.display().to_string(),
            direct_io: a.direct_io,
            read_cache_bytes,
            quota: crate::mount_quota::quota_config(a)?,
        };
        let fs = DvrfsFs::new(rt.clone(), &cfg)
            .map_err(|e| CliError::new(format!("cannot serve the volume: {e}")))?;
        let quota = fs.quota();
        let mut session = fuser::Session::new(fs, mountpoint, &cfg.fuser_config()).map_err(|e| {
            CliError::new(format!("cannot mount on {}: {e}", mountpoint.display())).hint(
                "check that /dev/fuse exists (modprobe fuse), the directory is not in use, and (for allow_other as a user) user_allow_other in /etc/fuse.conf",
            )
        })?;
        // Known by its mount id and connection, not by the path (`own_mount`).
        let own = OwnMount::find(mountpoint).map(Arc::new).ok_or_else(|| {
            CliError::new(format!(
                "mounted on {}, but the mount is not in /proc/self/mountinfo",
                mountpoint.display()
            ))
        })?;
        let mut unmounter = session.unmount_callable();
        let own_signals = own.clone();
        std::thread::spawn(move || loop {
            let sig = wait_signal(&signals);
            eprintln!("{} dvrfs: signal {sig}: unmounting", stamp());
            match own_signals.unmount(|| unmounter.unmount()) {
                Ok(()) => return,
                Err(why) => eprintln!("{} dvrfs: {why}", stamp()),
            }
        });
        Ok((session, rt, own, quota))
    })();
    let (session, rt, own, quota) = match result {
        Ok(v) => v,
        Err(e) => {
            // The parent prints what it reads from `ready`: the target goes in here.
            let e = e.in_target(target);
            if let Some(r) = ready.as_mut() {
                let hint = e.hint.as_deref().unwrap_or("").replace('\n', " ");
                let _ = write!(r, "{}\n{hint}\n", e.message.replace('\n', " "));
            }
            return Err(e);
        }
    };
    eprintln!(
        "{} dvrfs: {} mounted on {} ({} backend)",
        stamp(),
        target.display(),
        mountpoint.display(),
        rt.backend().name()
    );
    // Recovery is the operator's business: say when the last user did not close the
    // volume cleanly and what the open did about it.
    if let Ok((txn, blocks, orphans)) = rt.query(|v| {
        let r = v.load_report();
        (r.replayed_txn, r.replayed_blocks.len(), r.orphans_freed)
    }) {
        if let Some(t) = txn {
            eprintln!(
                "{} dvrfs: {} was not closed cleanly: journal transaction {t} replayed ({blocks} metadata blocks), {orphans} file(s) removed while open freed; what was written after that commit is lost",
                stamp(),
                target.display()
            );
        } else if orphans > 0 {
            eprintln!(
                "{} dvrfs: {orphans} file(s) removed while open by the last user freed",
                stamp()
            );
        }
    }
    // What the tail log gave back.
    if let Ok(t) = rt.query(|v| v.load_report().tail_log.clone()) {
        for line in crate::cmd_events::tail_log_lines(&t, true) {
            eprintln!("{} dvrfs: {}: {line}", stamp(), target.display());
        }
    }
    // And which files came back shorter than their writers had handed over.
    if let Ok((crashed, replayed, tails, left_out)) = rt.query(|v| {
        let r = v.load_report();
        (
            r.crashed(),
            r.replayed_txn.is_some(),
            r.lost_tails.clone(),
            r.tails_left_out,
        )
    }) {
        if crashed && !replayed {
            eprintln!(
                "{} dvrfs: {} was not closed cleanly: the journal held no complete transaction (the last commit stands)",
                stamp(),
                target.display()
            );
        }
        for t in &tails {
            eprintln!(
                "{} dvrfs: {}: {}",
                stamp(),
                target.display(),
                crate::cmd_events::lost_tail_line(t)
            );
        }
        if left_out > 0 {
            eprintln!(
                "{} dvrfs: {}: {left_out} more file(s) lost their last accepted bytes (not listed)",
                stamp(),
                target.display()
            );
        }
    }
    // Every event of the engine as a line of the log, as it happens (within
    // EVENT_LOG_POLL); the last ones after the session ends.
    let (stop_events, stopped) = std::sync::mpsc::channel::<()>();
    let event_logger = {
        let rt = rt.clone();
        let image = target.display().to_string();
        let own = own.clone();
        std::thread::spawn(move || {
            let mut last = 0;
            let mut broken = false;
            loop {
                last = log_events(&rt, last);
                if !broken {
                    broken = log_broken(&rt, &image, &own);
                } else if !own.is_mounted() {
                    // `umount -l` detached it: let the pinned root go too, so the
                    // session ends and the daemon exits.
                    own.unpin();
                }
                match stopped.recv_timeout(EVENT_LOG_POLL) {
                    Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
                    _ => return last,
                }
            }
        })
    };
    if let Some(p) = &a.pid_file {
        let written = open_daemon_file(p, true)
            .and_then(|mut f| writeln!(f, "{}", std::process::id()))
            .map_err(|e| daemon_file_error("pid file", "--pid-file", p, e));
        if let Err(e) = written {
            eprintln!("{} dvrfs: {}", stamp(), e.message);
        }
    }
    // Other processes (the dvrfs commands, C programs) use the volume through this
    // daemon while it is mounted; the socket exists before `dvrfs mount` returns.
    let server = start_server(a, target, &rt, quota);
    if let Some(mut r) = ready.take() {
        let _ = writeln!(r, "ok");
    }
    let served = session.run();
    // The socket goes first: a command started from now on opens the volume itself
    // once this daemon has let go of it (`target::after_unmount`).
    if let Some(s) = server {
        s.stop();
    }
    let _ = stop_events.send(());
    let last = event_logger.join().unwrap_or(0);
    log_events(&rt, last);
    // The session's end dropped the file system (its gathered writes are on the
    // disk); close the runtime: commit, mark the journal clean.
    let rt = Arc::try_unwrap(rt).map_err(|_| {
        CliError::new("internal: the runtime is still shared after the session ended")
    })?;
    let stats = rt.stats();
    if let Err(e) = rt.close() {
        // Never "journal committed" after a failure: the cause, and an exit status
        // that says so (the `umount` helper reports it, see `umount_helper`).
        let e = CliError::from(e).in_target(target);
        eprintln!(
            "{} dvrfs: {} unmounted, but the journal could not be committed: {}; what was written since the last successful commit is lost; check the device (dmesg), then run `dvrfs fsck {}`",
            stamp(),
            target.display(),
            e.message,
            target.display()
        );
        return Err(e);
    }
    // Requests that found the queue full and waited for room (docs/mount.md).
    let held = match stats.held {
        0 => String::new(),
        n => format!(", {n} requests waited for room in the queue"),
    };
    eprintln!(
        "{} dvrfs: {} unmounted, journal committed ({} device commands while mounted{held})",
        stamp(),
        target.display(),
        stats.commands
    );
    served.map_err(|e| CliError::new(format!("the FUSE session ended with an error: {e}")))?;
    Ok(0)
}

/// Serves the runtime on the volume's socket (`dvrfs-remote`); a failure is logged
/// and the mount goes on without it (the other commands then say the volume is in
/// use, as before).
fn start_server(
    a: &MountArgs,
    target: &Path,
    rt: &Arc<Runtime>,
    quota: Arc<dvrfs_fuse::quota::Quota>,
) -> Option<dvrfs_remote::Server> {
    let cfg = dvrfs_remote::ServerConfig {
        allow_other: a.allow_other,
        volume: target.display().to_string(),
        // The mount's per-user limits for the clients' streams too.
        gate: Some(Arc::new(crate::mount_quota::Gate::new(quota, rt.clone()))),
    };
    let log = |m: &str| eprintln!("{} dvrfs: {m}", stamp());
    match dvrfs_remote::Server::start(rt.clone(), target, cfg, log) {
        Ok(s) => {
            eprintln!(
                "{} dvrfs: serving other processes on {}",
                stamp(),
                s.path().display()
            );
            Some(s)
        }
        Err(e) => {
            eprintln!(
                "{} dvrfs: cannot serve other processes ({e}); dvrfs commands and C programs are refused while mounted",
                stamp()
            );
            None
        }
    }
}

/// How often the daemon looks for new events to log.
const EVENT_LOG_POLL: std::time::Duration = std::time::Duration::from_millis(250);

/// Logs the engine's events numbered above `last` (`dvrfs events` prints the same
/// lines); returns the newest number logged.
fn log_events(rt: &Runtime, last: u64) -> u64 {
    let Ok(new) = rt.query(move |v| {
        v.events()
            .into_iter()
            .filter(|e| e.seq > last)
            .collect::<Vec<_>>()
    }) else {
        return last;
    };
    for e in &new {
        eprintln!(
            "{} dvrfs: event {}",
            stamp(),
            crate::cmd_events::event_line(e)
        );
    }
    new.last().map_or(last, |e| e.seq)
}

/// Logs, once, that the engine is broken (a commit write or flush failed) and why;
/// returns whether it is.
/// The mount is then pinned (`own_mount`): a plain `umount` fails while the files
/// can still be copied off; SIGTERM or `umount -l` lets it go.
fn log_broken(rt: &Runtime, image: &str, own: &OwnMount) -> bool {
    let Ok(Some(why)) = rt.inspect(|e| e.broken().map(str::to_string)) else {
        return false;
    };
    eprintln!(
        "{} dvrfs: {image}: {why}: nothing reaches the journal any more, and every fsync fails; what was written since the last successful commit will be lost when the volume is let go",
        stamp()
    );
    match own.pin() {
        Ok(()) => eprintln!(
            "{} dvrfs: the mount is kept (umount fails with \"target is busy\") so that its files can still be copied off; then stop this daemon with kill -TERM {} (or umount -l): it exits with status 1; check the device (dmesg) and run `dvrfs fsck {image}`",
            stamp(),
            std::process::id()
        ),
        Err(e) => eprintln!("{} dvrfs: {e}", stamp()),
    }
    true
}

/// Blocks SIGTERM, SIGINT and SIGHUP in the calling thread (and the threads it
/// starts); the set, for [`wait_signal`].
fn block_signals() -> SignalSet {
    let set =
        SignalSet::of(&[libc::SIGTERM, libc::SIGINT, libc::SIGHUP]).expect("valid signal numbers");
    signals::mask(signals::MaskHow::Block, Some(&set));
    set
}

/// The next of the blocked signals (0 if the wait failed).
fn wait_signal(set: &SignalSet) -> i32 {
    signals::wait(set).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_logs_of_mount_points_with_one_name_differ() {
        let a = log_name(Path::new("/srv/a/rec"));
        let b = log_name(Path::new("/srv/b/rec"));
        assert_ne!(a, b, "two mounts named rec share a log");
        assert_eq!(log_name(Path::new("/mnt/rec")), "dvrfs-mnt-rec.log");
        assert_eq!(a, "dvrfs-srv-a-rec.log");
        // As `systemd-escape --path` writes it: no two paths give one name.
        assert_eq!(
            log_name(Path::new("/mnt/cam-1 x/.hidden")),
            "dvrfs-mnt-cam\\x2d1\\x20x-.hidden.log"
        );
        assert_eq!(
            log_name(Path::new("/.x/\u{e9}")),
            "dvrfs-\\x2ex-\\xc3\\xa9.log"
        );
        assert_ne!(
            log_name(Path::new("/mnt/a-b")),
            log_name(Path::new("/mnt/a/b"))
        );
        assert_eq!(log_name(Path::new("/")), "dvrfs--.log");
        // A path too long for a file name is cut, and a hash keeps it apart.
        let long = |c: &str| format!("/{}/{c}", "d".repeat(300));
        let (x, y) = (
            log_name(Path::new(&long("x"))),
            log_name(Path::new(&long("y"))),
        );
        assert_ne!(x, y);
        assert!(x.len() <= 255 && y.len() <= 255, "{x}");
    }
}
