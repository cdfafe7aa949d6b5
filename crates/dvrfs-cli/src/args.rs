//! The command line: clap definitions and the parsers for sizes and durations.
//!
//! Sizes and durations are taken as strings and parsed here, not by clap, so that a bad
//! value produces the same `dvrfs: ...` / `hint: ...` message as every other failure
//! (with exit status 2, as clap uses for usage errors).

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use crate::error::{CliError, CliResult};

#[derive(Parser, Debug)]
#[command(
    name = "dvrfs",
    version,
    about = "dvrfs: a real-time file system for DVR/NVR recording",
    long_about = "dvrfs: a real-time file system for DVR/NVR recording.\n\n\
                  TARGET is an image file or a block device. Sizes take K/M/G/T binary \
                  suffixes (1K = 1024), times take ms/s/m/h/d."
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Create a dvrfs file system on an image file (created if missing) or a block device
    Mkfs(MkfsArgs),
    /// Check a file system; exit 0 clean, 1 errors corrected, 4 errors left, 8 operational error
    Fsck(FsckArgs),
    /// Show the geometry and usage of a file system
    Info(InfoArgs),
    /// List directories (or name files)
    Ls(LsArgs),
    /// Show the attributes of files and directories
    Stat(StatArgs),
    /// Create directories
    Mkdir(MkdirArgs),
    /// Remove files (and, with -r, directory trees)
    Rm(RmArgs),
    /// Rename or move a file or directory (into DST if DST is a directory)
    Mv(MvArgs),
    /// Copy a local file into the file system
    Put(PutArgs),
    /// Copy a file out of the file system (LOCAL_FILE `-` writes to stdout)
    Get(GetArgs),
    /// Read every file and check it against its data checksums; exit 0 clean, 3 damage found
    Scrub(ScrubArgs),
    /// Simulate streams and best-effort traffic on a disk model in virtual time
    Sim(Box<crate::cmd_sim::SimArgs>),
    /// The admission bound: how many streams a disk model can carry
    Capacity(crate::cmd_capacity::CapacityArgs),
    /// Run a sim workload on a real device or image (or an emulated disk), in wall-clock time
    Bench(Box<crate::cmd_bench::BenchArgs>),
    /// Measure a device (read-only) into the disk-model JSON form
    Calibrate(crate::cmd_calibrate::CalibrateArgs),
    /// Show dvrfs at work: a DVR workload on an emulated disk for a minute (an image in the working directory)
    Demo(crate::cmd_bench::DemoArgs),
    /// Record a stream into a new file at a reserved rate (from a file or stdin)
    Record(crate::cmd_stream::RecordArgs),
    /// Play a file at a reserved rate (to a file or stdout)
    Play(crate::cmd_play::PlayArgs),
    /// Mount a volume over FUSE (a daemon until unmounted; --foreground to stay)
    Mount(crate::cmd_mount::MountArgs),
    /// Show a volume's open streams, disk load, admission headroom and space
    Status(crate::cmd_status::StatusArgs),
    /// Print the volume's event log: recoveries, streams admitted, refused and ended, space
    Events(crate::cmd_events::EventsArgs),
    /// Build files' frame indexes from their bytes (MPEG-TS, MP4): seek and trick play use them
    Reindex(crate::cmd_index::ReindexArgs),
    /// List a file's frame index: its keyframes with offset, length and time
    Keyframes(crate::cmd_index::KeyframesArgs),
    /// Cut a clip out of a recording by time, at keyframes, in its own container (no re-encode), with a manifest
    Export(crate::cmd_clip::ExportArgs),
    /// Write the keyframe at or before a time, playable on its own (a thumbnail's source)
    Keyframe(crate::cmd_clip::KeyframeArgs),
    /// Show a recording's spans and gaps (with their causes) from its frame index
    Timeline(crate::cmd_clip::TimelineArgs),
    /// Check a stream directory's chunks against its integrity chain: intact, deleted, missing or modified
    Verify(crate::cmd_verify::VerifyArgs),
    /// Set or show retention policies: a stream's max age, min age and size, the volume's high and low marks
    Retention(crate::cmd_retention::RetentionArgs),
    /// Protect a stream's chunks in a time range from retention (prints its id), or list the protections
    Protect(crate::cmd_protect::ProtectArgs),
    /// Remove a protection (`protect --list` shows the ids)
    Unprotect(crate::cmd_protect::UnprotectArgs),
    /// Serve an image as an emulated hard disk (DIR/disk over FUSE, a loop device with --attach); --stop DIR ends it
    Emulate(crate::cmd_emulate::EmulateArgs),
}

#[derive(Args, Debug)]
pub struct MkfsArgs {
    /// Image file or block device
    pub target: PathBuf,
    /// Image size for a new image file (default 64G); grows an existing image, never shrinks
    #[arg(long, allow_hyphen_values = true)]
    pub size: Option<String>,
    /// Data block size, a power of two from 64K to 1G
    #[arg(long, default_value = "4M")]
    pub block_size: String,
    /// Data block allocation policy
    #[arg(long, value_parser = ["zrr", "contig", "seq"], default_value = "zrr")]
    pub alloc: String,
    /// Format even if TARGET already holds a file system or other data
    #[arg(long)]
    pub force: bool,
    /// Number of inodes (default: one per data block, 1024 to 1M)
    #[arg(long)]
    pub inodes: Option<u64>,
    /// Number of ZRR zones, 1 to 32 (default: from the device size)
    #[arg(long)]
    pub zones: Option<u32>,
    /// Metadata commit interval
    #[arg(long, default_value = "1s")]
    pub commit_interval: String,
    /// Bytes each data checksum covers (a power of two from 64K to the block size),
    /// or `off` for a volume without data checksums [default: 512K, or the block size
    /// if smaller]
    #[arg(long)]
    pub checksum_granule: Option<String>,
    /// Size of the tail log, the ring where recordings' partial requests are logged
    /// at each commit instead of written in place [default: a 1024th of the device,
    /// 4M to 256M]
    #[arg(long, conflicts_with = "no_tail_log")]
    pub tail_log: Option<String>,
    /// Make a volume without a tail log: recordings write their partial requests in
    /// place at each gather point (the layout before 2026-11-27)
    #[arg(long)]
    pub no_tail_log: bool,
}

#[derive(Args, Debug)]
pub struct FsckArgs {
    pub target: PathBuf,
    /// Fix what can be fixed
    #[arg(long)]
    pub repair: bool,
    /// Print one JSON object on stdout
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug)]
pub struct InfoArgs {
    pub target: PathBuf,
    /// Print one JSON object on stdout
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug)]
pub struct LsArgs {
    pub target: PathBuf,
    /// Paths inside the file system (default /); any bytes, as `ls` shows them
    /// escaped
    pub paths: Vec<std::ffi::OsString>,
    /// Long listing: type and mode, links, owner, size, modification time
    #[arg(short = 'l')]
    pub long: bool,
}

#[derive(Args, Debug)]
pub struct StatArgs {
    pub target: PathBuf,
    /// Paths inside the file system (any bytes: names need not be UTF-8)
    #[arg(required = true)]
    pub paths: Vec<std::ffi::OsString>,
    /// Print JSON on stdout: one object for one path, an array for several
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug)]
pub struct MkdirArgs {
    pub target: PathBuf,
    #[arg(required = true)]
    pub paths: Vec<String>,
    /// Create missing parents; no error if the directory exists
    #[arg(short = 'p', long = "parents")]
    pub parents: bool,
}

#[derive(Args, Debug)]
pub struct RmArgs {
    pub target: PathBuf,
    /// Paths inside the file system (any bytes: names need not be UTF-8)
    #[arg(required = true)]
    pub paths: Vec<std::ffi::OsString>,
    /// Remove directories and everything below them
    #[arg(short = 'r', short_alias = 'R', long = "recursive")]
    pub recursive: bool,
    /// Also remove a stream directory's integrity chain (`.chain`), the record
    /// `dvrfs verify` checks its chunks against
    #[arg(long)]
    pub force: bool,
}

#[derive(Args, Debug)]
pub struct MvArgs {
    pub target: PathBuf,
    pub src: String,
    pub dst: String,
}

#[derive(Args, Debug)]
pub struct PutArgs {
    pub target: PathBuf,
    /// The local file to copy in
    pub local_file: PathBuf,
    /// Destination path; an existing directory receives the file under its local name
    pub path: String,
}

#[derive(Args, Debug)]
pub struct ScrubArgs {
    pub target: PathBuf,
    /// Print one JSON object on stdout
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug)]
pub struct GetArgs {
    pub target: PathBuf,
    /// The file to copy out (any bytes: names need not be UTF-8)
    pub path: std::ffi::OsString,
    /// Local destination (`-` = stdout; an existing directory receives the file by name)
    pub local_file: PathBuf,
    /// Overwrite an existing local file (without it, get refuses, as put does)
    #[arg(long)]
    pub force: bool,
    /// Copy every readable byte of a damaged file: bytes lost to metadata damage or
    /// unreadable on the device are written as zeros and reported (exit status 3)
    #[arg(long)]
    pub salvage: bool,
}

/// Parses a size: plain bytes, or a number with a binary K/M/G/T suffix (`64G`, `4M`,
/// `512K`; `KiB`-style spellings are accepted too), as `dvrfs_core::units` reads it.
pub fn parse_size(flag: &str, text: &str) -> CliResult<u64> {
    dvrfs_core::units::size_bytes(text).map_err(|why| {
        CliError::usage(
            format!("invalid {flag} {text:?}: {why}"),
            "give a number of bytes with an optional K, M, G or T suffix (binary: 1K = 1024), e.g. 64G or 4M",
        )
    })
}

/// Parses a duration with a unit (`500ms`, `1s`, `2m`, `1h`) into milliseconds.
pub fn parse_duration_ms(flag: &str, text: &str) -> CliResult<u64> {
    dvrfs_core::units::duration_ms(text).map_err(|why| {
        CliError::usage(
            format!("invalid {flag} {text:?}: {why}"),
            "give a whole number with a unit: ms, s, m, h or d, e.g. 500ms, 1s or 30d",
        )
    })
}

/// Parses a duration (as [`parse_duration_ms`]) that must lie in `range` (ms); one
/// outside it is a usage error naming the range.
/// `--speed`: 2 to 32, forward or backward (negative).
pub fn trick_speed(speed: i32) -> CliResult<i32> {
    if (2..=32).contains(&speed.unsigned_abs()) {
        Ok(speed)
    } else {
        Err(CliError::usage(
            format!(
                "invalid --speed {speed}: a trick-play speed is 2 to 32, or -2 to -32 to rewind"
            ),
            "e.g. --speed 8 (fast forward) or --speed -8 (rewind)",
        ))
    }
}

pub fn parse_duration_in(
    flag: &str,
    text: &str,
    range: std::ops::RangeInclusive<u64>,
) -> CliResult<u64> {
    let ms = parse_duration_ms(flag, text)?;
    if !range.contains(&ms) {
        return Err(CliError::usage(
            format!(
                "{flag} {text}: out of range: from {} to {}",
                show_ms(*range.start()),
                show_ms(*range.end())
            ),
            format!(
                "give a duration from {} to {}",
                show_ms(*range.start()),
                show_ms(*range.end())
            ),
        ));
    }
    Ok(ms)
}

/// The longest `--durable` (a recording's durability interval): 24 hours. A longer
/// one would keep accepted bytes off the journal for days.
pub const MAX_DURABLE_MS: u64 = 24 * 3_600_000;

/// `--durable TIME` in nanoseconds, in its range (1ms to 24h).
pub fn parse_durable_ns(text: &str) -> CliResult<u64> {
    Ok(parse_duration_in("--durable", text, 1..=MAX_DURABLE_MS)? * 1_000_000)
}

/// Checks a whole-number setting against its range: a usage error naming the range.
pub fn check_range<T: PartialOrd + std::fmt::Display + Copy>(
    flag: &str,
    value: T,
    range: std::ops::RangeInclusive<T>,
) -> CliResult<T> {
    if !range.contains(&value) {
        return Err(CliError::usage(
            format!(
                "{flag} {value}: out of range: from {} to {}",
                range.start(),
                range.end()
            ),
            format!("give a value from {} to {}", range.start(), range.end()),
        ));
    }
    Ok(value)
}

/// A duration in ms as the flags take it back: `168h`, `90s`, `1ms`.
fn show_ms(ms: u64) -> String {
    match ms {
        ms if ms >= 3_600_000 && ms.is_multiple_of(3_600_000) => format!("{}h", ms / 3_600_000),
        ms if ms >= 60_000 && ms.is_multiple_of(60_000) => format!("{}m", ms / 60_000),
        ms if ms >= 1000 && ms.is_multiple_of(1000) => format!("{}s", ms / 1000),
        ms => format!("{ms}ms"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_take_binary_suffixes() {
        assert_eq!(parse_size("--size", "123").unwrap(), 123);
        assert_eq!(parse_size("--size", "4K").unwrap(), 4096);
        assert_eq!(parse_size("--size", "4k").unwrap(), 4096);
        assert_eq!(parse_size("--size", "4M").unwrap(), 4 << 20);
        assert_eq!(parse_size("--size", "64G").unwrap(), 64 << 30);
        assert_eq!(parse_size("--size", "2T").unwrap(), 2 << 40);
        assert_eq!(parse_size("--size", "1GiB").unwrap(), 1 << 30);
        for bad in ["", "G", "12X", "1.5G", "-1", "99999999999T", "4MM"] {
            assert!(parse_size("--size", bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn durations_need_a_unit() {
        assert_eq!(
            parse_duration_ms("--commit-interval", "500ms").unwrap(),
            500
        );
        assert_eq!(parse_duration_ms("--commit-interval", "1s").unwrap(), 1000);
        assert_eq!(
            parse_duration_ms("--commit-interval", "2m").unwrap(),
            120_000
        );
        assert_eq!(
            parse_duration_ms("--commit-interval", "1h").unwrap(),
            3_600_000
        );
        for bad in ["", "1", "s", "1w", "1.5s"] {
            assert!(
                parse_duration_ms("--commit-interval", bad).is_err(),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn durations_outside_their_range_are_usage_errors() {
        assert_eq!(
            parse_duration_in("--duration", "2h", 1..=7_200_000).unwrap(),
            7_200_000
        );
        for bad in ["0ms", "121m", "99999999999h"] {
            let e = parse_duration_in("--duration", bad, 1..=7_200_000).unwrap_err();
            assert_eq!(e.exit_code, crate::error::EXIT_USAGE, "{bad}");
            assert!(e.message.contains("from 1ms to 2h"), "{}", e.message);
        }
        assert!(check_range("--age", 1001u32, 0..=1000).is_err());
        assert_eq!(check_range("--age", 1000u32, 0..=1000).unwrap(), 1000);
    }
}
