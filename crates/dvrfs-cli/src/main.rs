//! `dvrfs`: the command-line tool. Parses the command line, runs one command, and turns
//! every failure into one `dvrfs: <what was wrong>` line (plus a `hint:` line where
//! there is something to do) and a non-zero exit status. Never a panic or backtrace.

// Every system call without a safe form in std goes through `dvrfs_io` (its
// `files`, `process` and `signals` modules), where each `unsafe` block says why
// it is sound.
#![forbid(unsafe_code)]

// First: it defines the `outln!` macro the command modules use.
#[macro_use]
mod output;
mod args;
mod bench_dir;
mod chain;
mod cmd_bench;
mod cmd_calibrate;
mod cmd_capacity;
mod cmd_clip;
mod cmd_data;
mod cmd_emulate;
mod cmd_events;
mod cmd_files;
mod cmd_fs;
mod cmd_index;
mod cmd_mount;
mod cmd_play;
mod cmd_protect;
mod cmd_retention;
mod cmd_scrub;
mod cmd_sim;
mod cmd_status;
mod cmd_stream;
mod cmd_verify;
mod emulate_predict;
mod emulated;
mod error;
mod interrupt;
mod limits;
mod mount_quota;
mod ospath;
mod own_mount;
mod plain_mp4;
mod plot;
mod record_chunks;
mod record_ring;
mod recording;
mod seek;
mod target;
mod timespec;
mod trick_play;
mod wall_clock;

use std::process::ExitCode;

use clap::Parser;

use args::{Cli, Command};
use error::CliResult;

fn main() -> ExitCode {
    install_panic_hook();
    // Usage errors: clap prints them and exits with status 2.
    let cli = {
        use clap::CommandFactory;
        let argv: Vec<std::ffi::OsString> = std::env::args_os().collect();
        let names: Vec<String> = Cli::command()
            .get_subcommands()
            .map(|c| c.get_name().to_string())
            .collect();
        // As the mount helper (mount -t fuse.dvrfs), the arguments are `SOURCE DIR -o ...`.
        match cmd_mount::helper_argv(&argv, &names) {
            Some(a) => Cli::parse_from(a),
            None => Cli::parse(),
        }
    };
    match run(&cli.command) {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            e.print();
            ExitCode::from(e.exit_code)
        }
    }
}

fn run(command: &Command) -> CliResult<u8> {
    let target = target_of(command);
    run_command(command).map_err(|e| match target {
        Some(t) => e.in_target(t),
        None => e,
    })
}

/// The volume a command works on, named in its errors (see `CliError::in_target`).
fn target_of(command: &Command) -> Option<&std::path::Path> {
    let t = match command {
        Command::Mkfs(a) => &a.target,
        Command::Fsck(a) => &a.target,
        Command::Info(a) => &a.target,
        Command::Ls(a) => &a.target,
        Command::Stat(a) => &a.target,
        Command::Mkdir(a) => &a.target,
        Command::Rm(a) => &a.target,
        Command::Mv(a) => &a.target,
        Command::Put(a) => &a.target,
        Command::Get(a) => &a.target,
        Command::Record(a) => &a.target,
        // bench --dir names its directory in its own errors.
        Command::Bench(a) => a.target.as_ref()?,
        Command::Demo(a) => &a.image,
        Command::Calibrate(a) => &a.device,
        Command::Play(a) => &a.target,
        Command::Mount(a) => &a.target,
        Command::Scrub(a) => &a.target,
        Command::Status(a) => &a.target,
        Command::Events(a) => &a.target,
        Command::Reindex(a) => &a.target,
        Command::Keyframes(a) => &a.target,
        Command::Export(a) => &a.target,
        Command::Keyframe(a) => &a.target,
        Command::Timeline(a) => &a.target,
        Command::Verify(a) => &a.target,
        Command::Retention(a) => &a.target,
        Command::Protect(a) => &a.target,
        Command::Unprotect(a) => &a.target,
        // `--stop DIR` has no image.
        Command::Emulate(a) => return a.image.as_deref(),
        // The simulator has no device.
        Command::Sim(_) | Command::Capacity(_) => return None,
    };
    Some(t)
}

fn run_command(command: &Command) -> CliResult<u8> {
    match command {
        Command::Mkfs(a) => cmd_fs::mkfs(a),
        Command::Fsck(a) => cmd_fs::fsck(a),
        Command::Info(a) => cmd_fs::info(a),
        Command::Ls(a) => cmd_files::ls(a),
        Command::Stat(a) => cmd_files::stat(a),
        Command::Mkdir(a) => cmd_files::mkdir(a),
        Command::Rm(a) => cmd_files::rm(a),
        Command::Mv(a) => cmd_files::mv(a),
        Command::Put(a) => cmd_data::put(a),
        Command::Get(a) => cmd_data::get(a),
        Command::Sim(a) => cmd_sim::sim(a),
        Command::Capacity(a) => cmd_capacity::capacity_cmd(a),
        Command::Record(a) => cmd_stream::record(a),
        Command::Bench(a) => cmd_bench::bench(a),
        Command::Demo(a) => cmd_bench::demo(a),
        Command::Calibrate(a) => cmd_calibrate::calibrate(a),
        Command::Play(a) => cmd_play::play(a),
        Command::Mount(a) => cmd_mount::mount(a),
        Command::Scrub(a) => cmd_scrub::scrub(a),
        Command::Status(a) => cmd_status::status(a),
        Command::Events(a) => cmd_events::events(a),
        Command::Reindex(a) => cmd_index::reindex(a),
        Command::Retention(a) => cmd_retention::retention(a),
        Command::Protect(a) => cmd_protect::protect(a),
        Command::Unprotect(a) => cmd_protect::unprotect(a),
        Command::Keyframes(a) => cmd_index::keyframes(a),
        Command::Export(a) => cmd_clip::export(a),
        Command::Keyframe(a) => cmd_clip::keyframe(a),
        Command::Timeline(a) => cmd_clip::timeline(a),
        Command::Verify(a) => cmd_verify::verify(a),
        Command::Emulate(a) => cmd_emulate::emulate(a),
    }
}

/// A panic is a bug; say so in one line instead of printing a backtrace, and end
/// the process whichever thread panicked: a command whose engine thread died must
/// not hang its other threads (the mount's FUSE sessions would wait on it for ever,
/// and every program using the mount with them). The volume is left as a crash
/// leaves it: the next open replays its journal.
fn install_panic_hook() {
    std::panic::set_hook(Box::new(|info| {
        let what = info
            .payload()
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| info.payload().downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "unknown panic".to_string());
        let at = info
            .location()
            .map(|l| format!(" at {}:{}", l.file(), l.line()))
            .unwrap_or_default();
        eprintln!("dvrfs: internal error: {what}{at}");
        eprintln!("hint: this is a bug in dvrfs; please report it with the command that was run");
        std::process::exit(101);
    }));
}
