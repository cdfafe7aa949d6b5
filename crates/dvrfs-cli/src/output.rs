//! Formatting shared by the commands: sizes, times, modes, JSON and progress bars.
//!
//! Progress bars go to stderr and only when stderr is a terminal, so scripts and logs
//! never see control characters.

use std::io::IsTerminal;
use std::time::Duration;

use dvrfs_core::format::dir::Kind;
use indicatif::{ProgressBar, ProgressStyle};

/// `println!` for command output. A closed stdout (`dvrfs ls IMG | head -1`) ends the
/// process quietly with status 0 instead of panicking as `println!` would; commands print
/// only after their work is committed, so exiting here loses nothing.
macro_rules! outln {
    () => {
        $crate::output::write_stdout_line(format_args!(""))
    };
    ($($arg:tt)*) => {
        $crate::output::write_stdout_line(format_args!($($arg)*))
    };
}

pub fn write_stdout_line(args: std::fmt::Arguments<'_>) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    if let Err(e) = out.write_fmt(args).and_then(|()| out.write_all(b"\n")) {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            std::process::exit(0);
        }
        eprintln!("dvrfs: error writing to stdout: {e}");
        std::process::exit(crate::error::EXIT_FAILURE.into());
    }
}

const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];

/// `4 MiB`, `1.5 GiB`, `512 B`: exact when it divides evenly, else one decimal.
pub fn human_bytes(n: u64) -> String {
    let mut unit = 0;
    while unit + 1 < UNITS.len() && n >= 1u64 << (10 * (unit + 1)) {
        unit += 1;
    }
    let scale = 1u64 << (10 * unit);
    if n.is_multiple_of(scale) {
        format!("{} {}", n / scale, UNITS[unit])
    } else {
        format!("{:.1} {}", n as f64 / scale as f64, UNITS[unit])
    }
}

/// A size as the command line takes it, rounded up to whole MiB: `17M`, `2G`.
pub fn size_arg(n: u64) -> String {
    let mib = n.div_ceil(1 << 20).max(1);
    if mib.is_multiple_of(1 << 10) {
        format!("{}G", mib >> 10)
    } else {
        format!("{mib}M")
    }
}

/// Decimal megabytes per second, as dd reports them.
pub fn mb_per_s(bytes: u64, elapsed: Duration) -> f64 {
    bytes as f64 / 1e6 / elapsed.as_secs_f64().max(1e-9)
}

pub fn uuid_string(u: &[u8; 16]) -> String {
    let h: String = u.iter().map(|b| format!("{b:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    )
}

pub fn kind_name(kind: Kind) -> &'static str {
    match kind {
        Kind::File => "file",
        Kind::Dir => "dir",
        Kind::Symlink => "symlink",
    }
}

/// `drwxr-xr-x` from a file type and mode.
pub fn mode_string(kind: Kind, mode: u32) -> String {
    let mut s = String::with_capacity(10);
    s.push(match kind {
        Kind::File => '-',
        Kind::Dir => 'd',
        Kind::Symlink => 'l',
    });
    for shift in [6, 3, 0] {
        let bits = (mode >> shift) & 7;
        s.push(if bits & 4 != 0 { 'r' } else { '-' });
        s.push(if bits & 2 != 0 { 'w' } else { '-' });
        s.push(if bits & 1 != 0 { 'x' } else { '-' });
    }
    s
}

/// `2024-05-01 12:34:56` (UTC) from nanoseconds since the Unix epoch.
pub fn time_string(ns: i64) -> String {
    let secs = ns.div_euclid(1_000_000_000);
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    let (y, m, d) = dvrfs_core::retention::civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02}",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

pub fn print_json(value: &serde_json::Value) {
    // A Value always serialises; fall back to the compact form just in case.
    let text = serde_json::to_string_pretty(value).unwrap_or_else(|_| value.to_string());
    outln!("{text}");
}

pub fn stderr_is_terminal() -> bool {
    std::io::stderr().is_terminal()
}

/// A progress bar on stderr when it is a terminal, else a hidden one.
pub fn progress(total: u64, bytes: bool, what: &str) -> ProgressBar {
    if !stderr_is_terminal() {
        return ProgressBar::hidden();
    }
    let template = if bytes {
        "{msg} [{bar:40}] {bytes}/{total_bytes} {bytes_per_sec} eta {eta}"
    } else {
        "{msg} [{bar:40}] {pos}/{len} eta {eta}"
    };
    let style = ProgressStyle::with_template(template)
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .progress_chars("=> ");
    ProgressBar::new(total)
        .with_style(style)
        .with_message(what.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats() {
        assert_eq!(human_bytes(512), "512 B");
        assert_eq!(human_bytes(4 << 20), "4 MiB");
        assert_eq!(human_bytes(3 << 29), "1.5 GiB");
        assert_eq!(size_arg(17 << 20), "17M");
        assert_eq!(size_arg((17 << 20) + 1), "18M");
        assert_eq!(size_arg(2 << 30), "2G");
        assert_eq!(time_string(0), "1970-01-01 00:00:00");
        assert_eq!(
            time_string(1_700_000_000_000_000_000),
            "2023-11-14 22:13:20"
        );
        assert_eq!(mode_string(Kind::Dir, 0o755), "drwxr-xr-x");
        assert_eq!(
            uuid_string(&[0xab; 16]),
            "abababab-abab-abab-abab-abababababab"
        );
    }
}
