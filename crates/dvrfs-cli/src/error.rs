//! One error type for the whole CLI: a message, an optional hint and an exit status.
//!
//! Library errors ([`dvrfs_core::Error`], [`dvrfs_io::OpenError`]) say what was wrong;
//! this module adds what to do about it. `main` prints `dvrfs: <message>` and, when
//! there is one, `hint: <hint>` on stderr, and exits with the status.

use std::path::Path;

use dvrfs_core::Error as CoreError;
use dvrfs_io::OpenError;

use crate::output::{human_bytes, size_arg};

/// Exit status of a failed command (fsck uses its own statuses, see `cmd_fs`).
pub const EXIT_FAILURE: u8 = 1;
/// Exit status of a usage error, as clap uses.
pub const EXIT_USAGE: u8 = 2;

pub type CliResult<T> = Result<T, CliError>;

#[derive(Debug, Clone)]
pub struct CliError {
    pub message: String,
    pub hint: Option<String>,
    pub exit_code: u8,
    /// Print nothing (the reader of our stdout went away: not a failure to report).
    pub silent: bool,
    /// What the message still needs from the command's TARGET (see [`CliError::in_target`]).
    unplaced: Option<Unplaced>,
}

/// A message made from a library error where the TARGET is not known (the `?` after a
/// core or runtime call) holds [`TARGET_MARK`] where the target's path goes, and
/// some messages need more than its name: they are finished when the command that
/// owns the error names its target.
#[derive(Debug, Clone)]
enum Unplaced {
    /// Only the name.
    Name,
    /// "not a dvrfs file system": an image file's size is said too (the core sees
    /// whole 4 KiB blocks only).
    NotDvrfs,
    /// A truncated device: the hint depends on whether it is an image or a device.
    Truncated {
        volume_bytes: u64,
        device_bytes: u64,
    },
}

/// Stands for the TARGET's path in a message until [`CliError::in_target`] puts it in
/// (control characters: never part of a message, whose lines `print` joins).
const TARGET_MARK: &str = "\u{1}TARGET\u{1}";
/// Stands for ", N bytes," after an image's name in a "not a dvrfs file system" message.
const SIZE_MARK: &str = "\u{2}";

impl CliError {
    pub fn new(message: impl Into<String>) -> CliError {
        CliError {
            message: message.into(),
            hint: None,
            exit_code: EXIT_FAILURE,
            silent: false,
            unplaced: None,
        }
    }

    /// Ends the command without a message, as `head` closing our stdout should.
    pub fn silent(exit_code: u8) -> CliError {
        CliError {
            message: String::new(),
            hint: None,
            exit_code,
            silent: true,
            unplaced: None,
        }
    }

    pub fn usage(message: impl Into<String>, hint: impl Into<String>) -> CliError {
        CliError {
            message: message.into(),
            hint: Some(hint.into()),
            exit_code: EXIT_USAGE,
            silent: false,
            unplaced: None,
        }
    }

    /// The message (without the hint).
    #[cfg(test)]
    pub fn message(&self) -> &str {
        &self.message
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

    /// Puts the command's TARGET into a message made from a library error (which
    /// knows no path). Each command's error passes through here once, in `main`;
    /// a command that prints an error and goes on calls it before printing. An
    /// error with no place for the target is returned unchanged.
    pub fn in_target(mut self, target: &Path) -> CliError {
        let t = target.display().to_string();
        match self.unplaced.take() {
            None => self,
            Some(Unplaced::Truncated {
                volume_bytes,
                device_bytes,
            }) => truncated(&t, volume_bytes, device_bytes).exit_code(self.exit_code),
            Some(kind) => {
                if matches!(kind, Unplaced::NotDvrfs) {
                    let size = std::fs::metadata(target)
                        .ok()
                        .filter(|m| m.is_file())
                        .map_or(String::new(), |m| format!(", {} bytes,", m.len()));
                    self.message = self.message.replace(SIZE_MARK, &size);
                }
                self.place(&t)
            }
        }
    }

    /// Replaces the marks with `t` (the path, or the word TARGET when no command
    /// named one).
    fn place(mut self, t: &str) -> CliError {
        self.message = self.message.replace(TARGET_MARK, t).replace(SIZE_MARK, "");
        self.hint = self.hint.map(|h| h.replace(TARGET_MARK, t));
        self.unplaced = None;
        self
    }

    /// A new message around this error's own (`f` gets it), still waiting for the
    /// TARGET as this one was.
    pub fn reword(mut self, f: impl FnOnce(&str) -> String) -> CliError {
        self.message = f(&self.message);
        if self.unplaced.is_some() {
            self.unplaced = Some(Unplaced::Name);
        }
        self
    }

    fn unplaced(mut self, kind: Unplaced) -> CliError {
        self.unplaced = Some(kind);
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
        // An error no command placed (a bug to fix where it arose) still reads well.
        let e = match self.unplaced {
            Some(Unplaced::Truncated {
                volume_bytes,
                device_bytes,
            }) => truncated("TARGET", volume_bytes, device_bytes),
            Some(_) => self.clone().place("TARGET"),
            None => self.clone(),
        };
        // Messages come from many places; keep each to one line whatever they contain.
        eprintln!("dvrfs: {}", one_line(&e.message));
        if let Some(h) = &e.hint {
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

impl From<CoreError> for CliError {
    fn from(e: CoreError) -> CliError {
        let t = TARGET_MARK;
        let err = match e {
            CoreError::Io { what, source } => CliError::new(format!("I/O error on {t} while {what}: {source}"))
                .hint(format!("check the device and the kernel log (dmesg), then run `dvrfs fsck {t}`")),
            CoreError::NotDvrfs(why) => {
                return CliError::new(format!("{t}{SIZE_MARK} is not a dvrfs file system ({why})")).hint(format!(
                    "give the image or device that holds the volume; `dvrfs mkfs {t}` makes one there (this erases what is there; an image file also needs --size, e.g. 64G)"
                ))
                .unplaced(Unplaced::NotDvrfs);
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
            } => {
                return CliError::new(format!("{t} is shorter than the volume on it"))
                    .unplaced(Unplaced::Truncated {
                        volume_bytes,
                        device_bytes,
                    })
            }
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
            e @ CoreError::RangeExpired(_) => CliError::new(e.to_string()).hint(
                "read a later range; to read an old range at leisure on a full volume, protect it first (`dvrfs protect`): a chunk only readers hold goes when a recording needs its space",
            ),
            CoreError::ReadOnly => CliError::new(format!("{t} was opened read-only for a change (a dvrfs bug)")),
            // The rest (exists, not a directory, invalid name, loop, ...) already say
            // all there is to say. A catch-all rather than a list, so that a variant the
            // core adds still gets its own message here until it earns a hint.
            e => CliError::new(e.to_string()),
        };
        err.unplaced(Unplaced::Name)
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
        let t = TARGET_MARK;
        let err = match e {
            R::Engine(e) => return e.into(),
            R::Open(e) => return e.into(),
            R::Io(e) => CliError::new(format!("I/O error on {t}: {e}")).hint(format!(
                "check the device and the kernel log (dmesg), then run `dvrfs fsck {t}`"
            )),
            R::Stopped(why) => CliError::new(format!("the dvrfs runtime on {t} stopped: {why}"))
                .hint(format!("check the device, then run `dvrfs fsck {t}`")),
            R::UnknownTicket(id) => CliError::new(format!(
                "operation {id} is unknown to the runtime (a dvrfs bug)"
            )),
        };
        err.unplaced(Unplaced::Name)
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

#[cfg(test)]
mod tests {
    use super::*;

    fn no_marks(e: &CliError) {
        let all = format!("{} {}", e.message, e.hint.as_deref().unwrap_or(""));
        assert!(
            !all.contains(TARGET_MARK) && !all.contains(SIZE_MARK),
            "a mark is left in {all:?}"
        );
    }

    #[test]
    fn a_core_error_names_the_command_target() {
        let e = CliError::from(CoreError::Corrupt("bad inode".into()))
            .in_target(Path::new("/x/rec.img"));
        assert_eq!(e.message, "/x/rec.img has corrupt metadata: bad inode");
        assert_eq!(
            e.hint.as_deref(),
            Some("run `dvrfs fsck --repair /x/rec.img`")
        );
        no_marks(&e);
        // Placing twice changes nothing: the first target stays.
        let again = e.clone().in_target(Path::new("/other"));
        assert_eq!(again.message, e.message);
    }

    #[test]
    fn not_dvrfs_says_the_size_of_an_image_file() {
        let dir = std::env::temp_dir().join(format!("dvrfs-error-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let img = dir.join("junk.img");
        std::fs::write(&img, vec![7u8; 5000]).unwrap();
        let e = CliError::from(CoreError::NotDvrfs("no magic".into())).in_target(&img);
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(
            e.message,
            format!(
                "{}, 5000 bytes, is not a dvrfs file system (no magic)",
                img.display()
            )
        );
        no_marks(&e);
        // A path that is no file gets no size.
        let e = CliError::from(CoreError::NotDvrfs("no magic".into()))
            .in_target(Path::new("/nonexistent/x"));
        assert_eq!(
            e.message,
            "/nonexistent/x is not a dvrfs file system (no magic)"
        );
    }

    #[test]
    fn a_truncated_image_gets_the_full_message_at_placement() {
        let e = CliError::from(CoreError::Truncated {
            volume_bytes: 8192,
            device_bytes: 4096,
        })
        .exit_code(4)
        .in_target(Path::new("/nonexistent/rec.img"));
        assert!(
            e.message.starts_with("/nonexistent/rec.img is 4 KiB"),
            "{}",
            e.message
        );
        assert!(e
            .hint
            .as_deref()
            .unwrap()
            .contains("truncate -s 8192 /nonexistent/rec.img"));
        assert_eq!(e.exit_code, 4);
        no_marks(&e);
    }

    #[test]
    fn a_reworded_error_still_takes_the_target() {
        let io = CoreError::Io {
            what: "reading".into(),
            source: std::io::Error::other("boom"),
        };
        let e = CliError::from(io)
            .reword(|m| format!("{FILE_PLACEHOLDER}: could not be read: {m}"))
            .named("/a/b")
            .in_target(Path::new("d.img"));
        assert_eq!(
            e.message,
            "/a/b: could not be read: I/O error on d.img while reading: boom"
        );
        no_marks(&e);
    }

    #[test]
    fn errors_made_by_the_cli_are_unchanged_by_placement() {
        let e = CliError::new("plain")
            .hint("do this")
            .in_target(Path::new("t.img"));
        assert_eq!(
            (e.message.as_str(), e.hint.as_deref()),
            ("plain", Some("do this"))
        );
    }
}
