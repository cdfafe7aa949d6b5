//! One error type for the whole CLI: a message, an optional hint and an exit status.
//!
//! Library errors ([`dvrfs_core::Error`], [`dvrfs_io::OpenError`]) say what was wrong;
//! this module adds what to do about it. `main` prints `dvrfs: <message>` and, when
//! there is one, `hint: <hint>` on stderr, and exits with the status.

use std::path::Path;
use std::sync::OnceLock;

use dvrfs_core::Error as CoreError;
use dvrfs_io::OpenError;

use crate::output::{human_bytes, size_arg};

/// Exit status of a failed command (fsck uses its own statuses, see `cmd_fs`).
pub const EXIT_FAILURE: u8 = 1;
/// Exit status of a usage error, as clap uses.
pub const EXIT_USAGE: u8 = 2;

pub type CliResult<T> = Result<T, CliError>;

#[derive(Debug)]
pub struct CliError {
    pub message: String,
    pub hint: Option<String>,
    pub exit_code: u8,
    /// Print nothing (the reader of our stdout went away: not a failure to report).
    pub silent: bool,
}

impl CliError {
    pub fn new(message: impl Into<String>) -> CliError {
        CliError {
            message: message.into(),
            hint: None,
            exit_code: EXIT_FAILURE,
            silent: false,
        }
    }

    /// Ends the command without a message, as `head` closing our stdout should.
    pub fn silent(exit_code: u8) -> CliError {
        CliError {
            message: String::new(),
            hint: None,
            exit_code,
            silent: true,
        }
    }

    pub fn usage(message: impl Into<String>, hint: impl Into<String>) -> CliError {
        CliError {
            message: message.into(),
            hint: Some(hint.into()),
            exit_code: EXIT_USAGE,
            silent: false,
        }
    }

    pub fn hint(mut self, hint: impl Into<String>) -> CliError {
        self.hint = Some(hint.into());
        self
    }

    /// Names the file an error about "the file" concerns: the core knows a file by
    /// its inode number only, the command by the path it was given.
    pub fn named(mut self, path: &str) -> CliError {
        if let Some(rest) = self.message.strip_prefix(FILE_PLACEHOLDER) {
            self.message = format!("{path}{rest}");
        }
        self
    }

    pub fn exit_code(mut self, code: u8) -> CliError {
        self.exit_code = code;
        self
    }

    pub fn print(&self) {
        if self.silent {
            return;
        }
        // Messages come from many places; keep each to one line whatever they contain.
        eprintln!("dvrfs: {}", one_line(&self.message));
        if let Some(h) = &self.hint {
            eprintln!("hint: {}", one_line(h));
        }
    }
}

fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Stands for the file in a message the core gave by inode number, until
/// [`CliError::named`] puts the path in.
pub const FILE_PLACEHOLDER: &str = "a file";

/// The TARGET of the running command, for hints that name it.
static TARGET: OnceLock<String> = OnceLock::new();

pub fn set_target(path: &Path) {
    let _ = TARGET.set(path.display().to_string());
}

fn target() -> &'static str {
    TARGET.get().map(String::as_str).unwrap_or("TARGET")
}

impl From<CoreError> for CliError {
    fn from(e: CoreError) -> CliError {
        let t = target();
        match e {
            CoreError::Io { what, source } => CliError::new(format!("I/O error on {t} while {what}: {source}"))
                .hint(format!("check the device and the kernel log (dmesg), then run `dvrfs fsck {t}`")),
            CoreError::NotDvrfs(why) => {
                // An image file's own size (the core sees whole 4 KiB blocks only).
                let size = std::fs::metadata(t)
                    .ok()
                    .filter(|m| m.is_file())
                    .map_or(String::new(), |m| format!(", {} bytes,", m.len()));
                CliError::new(format!("{t}{size} is not a dvrfs file system ({why})")).hint(format!(
                    "give the image or device that holds the volume; `dvrfs mkfs {t}` makes one there (this erases what is there; an image file also needs --size, e.g. 64G)"
                ))
            }
            CoreError::Corrupt(why) => CliError::new(format!("{t} has corrupt metadata: {why}"))
                .hint(format!("run `dvrfs fsck --repair {t}`")),
            CoreError::TooSmall {
                device_bytes,
                need_bytes,
            } => CliError::new(format!(
                "{t} is too small: {} ({device_bytes} bytes); a file system with these settings needs at least {} ({need_bytes} bytes)",
                human_bytes(device_bytes),
                human_bytes(need_bytes)
            ))
            .hint(format!(
                "use a device or --size of at least {}, or a smaller --block-size",
                size_arg(need_bytes)
            )),
            CoreError::NotFound(path) => CliError::new(format!("{path}: no such file or directory"))
                .hint(format!("see what exists with `dvrfs ls {t} <directory>`")),
            CoreError::NameTooLong { len } => {
                CliError::new(format!("a name is {len} bytes long; the limit is 255 bytes"))
                    .hint("shorten it: each path component may be at most 255 bytes")
            }
            CoreError::NoSpace {
                need_bytes,
                free_bytes,
            } => CliError::new(format!(
                "no space left on {t}: {} ({need_bytes} bytes) needed, {} ({free_bytes} bytes) free",
                human_bytes(need_bytes),
                human_bytes(free_bytes)
            ))
            .hint(format!(
                "free space with `dvrfs rm {t} <path>`, or use a larger device"
            )),
            CoreError::NoInodes(n) => CliError::new(format!("no free inodes on {t} (all {n} are in use)"))
                .hint("remove files, or re-create the file system with a larger --inodes"),
            CoreError::MetadataFull => CliError::new(format!("the metadata area of {t} is full"))
                .hint("remove files or directories"),
            e @ CoreError::NamesFull { .. } => CliError::new(format!("{t}: {e}"))
                .hint("remove directories or symlinks with long targets (`dvrfs info` shows the metadata area)"),
            CoreError::NotEmpty(path) => CliError::new(format!("{path}: directory not empty"))
                .hint("remove its contents first, or use `dvrfs rm -r`"),
            CoreError::DataLost { ino, offset, end } => CliError::new(format!(
                "{FILE_PLACEHOLDER}: bytes {offset} to {end} were lost to metadata damage (inode {ino}; which blocks held them is unknown)"
            ))
            .hint(format!(
                "copy every readable byte with `dvrfs get --salvage {t} PATH LOCAL`; `dvrfs fsck {t}` lists the damaged files"
            )),
            CoreError::Checksum { ino, offset, end } => CliError::new(format!(
                "{FILE_PLACEHOLDER}: bytes {offset} to {end} do not match their data checksum (inode {ino}): damaged on the disk, or rewritten in place when the power failed"
            ))
            .hint(format!(
                "copy every readable byte with `dvrfs get --salvage {t} PATH LOCAL`; `dvrfs scrub {t}` checks the whole volume"
            )),
            CoreError::Truncated {
                volume_bytes,
                device_bytes,
            } => truncated(t, volume_bytes, device_bytes),
            CoreError::PastEnd {
                ino,
                offset,
                end,
                device_bytes,
            } => CliError::new(format!(
                "{FILE_PLACEHOLDER}: bytes {offset} to {end} lie past the end of {t}, which holds only the first {} ({device_bytes} bytes) of the volume (inode {ino}; a truncated image)",
                human_bytes(device_bytes)
            ))
            .hint(format!(
                "copy every byte that is there with `dvrfs get --salvage {t} PATH LOCAL`; `dvrfs fsck {t}` says how to restore the image's size"
            )),
            CoreError::ReadOnly => CliError::new(format!("{t} was opened read-only for a change (a dvrfs bug)")),
            // The rest (exists, not a directory, invalid name, loop, ...) already say
            // all there is to say. A catch-all rather than a list, so that a variant the
            // core adds still gets its own message here until it earns a hint.
            e => CliError::new(e.to_string()),
        }
    }
}

/// The device `t` is shorter than the volume on it: what was wrong, and for an image
/// file how to give it its size back (`fsck --repair` does it itself); a block device
/// cannot be extended, so only reading what is intact is offered.
pub fn truncated(t: &str, volume_bytes: u64, device_bytes: u64) -> CliError {
    let missing = volume_bytes - device_bytes;
    let err = CliError::new(format!(
        "{t} is {} ({missing} bytes) shorter than the volume on it: the volume spans {} ({volume_bytes} bytes), {t} holds {} ({device_bytes} bytes)",
        human_bytes(missing),
        human_bytes(volume_bytes),
        human_bytes(device_bytes)
    ));
    if dvrfs_io::is_block_device(Path::new(t)) {
        return err.hint(format!(
            "this device is smaller than the one the volume was made on (a resized partition, or another device?); what it holds can be read (ls, stat, get); to repair, copy it to an image file (dd if={t} of=rec.img bs=1M), then `dvrfs fsck --repair rec.img`"
        ));
    }
    err.hint(format!(
        "what is intact can be read now (ls, stat, get); `dvrfs fsck --repair {t}` extends the image to {volume_bytes} bytes (the missing part reads as zeros) and repairs it, or do it yourself: truncate -s {volume_bytes} {t}, then dvrfs fsck --repair {t}"
    ))
}

impl From<dvrfs_runtime::RuntimeError> for CliError {
    fn from(e: dvrfs_runtime::RuntimeError) -> CliError {
        use dvrfs_runtime::RuntimeError as R;
        let t = target();
        match e {
            R::Engine(e) => e.into(),
            R::Open(e) => e.into(),
            R::Io(e) => CliError::new(format!("I/O error on {t}: {e}")).hint(format!(
                "check the device and the kernel log (dmesg), then run `dvrfs fsck {t}`"
            )),
            R::Stopped(why) => CliError::new(format!("the dvrfs runtime on {t} stopped: {why}"))
                .hint(format!("check the device, then run `dvrfs fsck {t}`")),
            R::UnknownTicket(id) => CliError::new(format!(
                "operation {id} is unknown to the runtime (a dvrfs bug)"
            )),
        }
    }
}

impl From<OpenError> for CliError {
    fn from(e: OpenError) -> CliError {
        match e {
            OpenError::NotFound { path } => CliError::new(format!("{}: no such file or device", path.display()))
                .hint(format!("check the path; `dvrfs mkfs {} --size 64G` creates a new image", path.display())),
            OpenError::InUse { path } => match crate::target::mounted_at(&path) {
                Some(at) => CliError::new(format!(
                    "{} is mounted at {} (dvrfs mount)",
                    path.display(),
                    at.display()
                ))
                .hint(format!(
                    "use the files under {} while it is mounted (ls, stat, get, put, record and play work on a mounted volume, through its daemon), or unmount it first: umount {}",
                    at.display(),
                    at.display()
                )),
                None => CliError::new(format!(
                    "{} is in use by another dvrfs process (mounted or being written)",
                    path.display()
                ))
                .hint("stop the other dvrfs process (or unmount it), then try again"),
            },
            OpenError::Busy { path } => CliError::new(format!(
                "{} is busy: it is mounted, or another program holds it exclusively",
                path.display()
            ))
            .hint("unmount it or stop that program first"),
            OpenError::PermissionDenied { path } => CliError::new(format!("permission denied opening {}", path.display()))
                .hint("run as a user with access to it (block devices usually need root or the `disk` group; on a mounted volume, the file's and its directories' modes decide, as through the mount)"),
            OpenError::ReadOnly { path } => CliError::new(format!("{} is read-only", path.display()))
                .hint("make it writable; read-only commands (ls, stat, get, info, fsck) still work"),
            OpenError::NotFileOrBlockDevice { path } => CliError::new(format!(
                "{} is neither a regular file nor a block device",
                path.display()
            ))
            .hint("give an image file or a block device such as /dev/sdX"),
            OpenError::IsBlockDevice { path } => CliError::new(format!("{} is a block device", path.display()))
                .hint("--size applies to image files only; a block device is formatted at its own size"),
            OpenError::WouldShrink {
                path,
                current_bytes,
                requested_bytes,
            } => CliError::new(format!(
                "{} is already {} ({current_bytes} bytes), larger than the requested {} ({requested_bytes} bytes); images are never shrunk",
                path.display(),
                human_bytes(current_bytes),
                human_bytes(requested_bytes)
            ))
            .hint(format!(
                "leave out --size, give at least {}, or delete the file first",
                size_arg(current_bytes)
            )),
            OpenError::TooSmall { path, size_bytes } => CliError::new(format!(
                "image size {size_bytes} bytes for {} is too small",
                path.display()
            ))
            .hint("give a --size of at least a few MiB, e.g. 64M"),
            e @ OpenError::UnsupportedSectorSize { .. } => CliError::new(e.to_string()),
            OpenError::Io { path, source } if source.raw_os_error() == Some(libc::ENOTCONN) => {
                crate::target::dead_mount(&path)
            }
            OpenError::Io { path, source } => CliError::new(format!("I/O error on {}: {source}", path.display())),
        }
    }
}

/// An error on a local (host) file.
pub fn local_io(path: &Path, what: &str, e: std::io::Error) -> CliError {
    let err = CliError::new(format!("{what} {}: {e}", path.display()));
    match e.kind() {
        std::io::ErrorKind::NotFound => err.hint("check the local path"),
        std::io::ErrorKind::PermissionDenied => err.hint("check the permissions of the local file"),
        _ => err,
    }
}
