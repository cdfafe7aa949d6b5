//! Before a `bench --dir` run: the checks that refuse a directory the run cannot
//! use (missing, not a directory, read-only, `O_DIRECT` refused, `--ioprio rt`
//! without the privilege), and the preparation `sim` makes of its volume, made of
//! files: the file system filled to `--fill` of its size (statvfs) with recordings
//! of the sizes `sim`'s fill draws (`sim::fill_recording_bytes`, from the run's
//! generator, so the seed picks them), the delete victim first, `--age`
//! record-and-delete cycles, then everything synced and the page cache dropped.
//!
//! Files are written with zeros (a `dvrfs emulate` disk keeps them sparse), never
//! preallocated: a file system reads an unwritten extent as zeros without touching
//! the disk, so playbacks of preallocated files would measure nothing.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use dvrfs_core::sim::{self, BestEffort, SimConfig};
use dvrfs_io::files::fs_space;
use dvrfs_io::process::IoClass;
use rand_chacha::rand_core::RngCore;
use rand_chacha::ChaCha8Rng;

use crate::error::{CliError, CliResult};

/// Bytes per write while filling.
const FILL_WRITE_BYTES: usize = 8 << 20;

/// The bench directory's name inside PATH.
pub const BENCH_DIR: &str = "dvrfs-bench";

fn erofs(path: &Path) -> CliError {
    CliError::new(format!(
        "{} is on a read-only file system: bench --dir writes recordings there",
        path.display()
    ))
    .hint("give a directory of a writable file system (or remount it read-write)")
}

/// Checks PATH and makes the bench directory in it (`PATH/dvrfs-bench`), or with
/// `reuse` finds the one a `--fill-only` run left there.
pub fn bench_dir(path: &Path, reuse: bool) -> CliResult<PathBuf> {
    let meta = std::fs::metadata(path).map_err(|e| {
        crate::error::local_io(path, "bench --dir: cannot use", e)
            .hint("give an existing directory of the file system to measure")
    })?;
    if !meta.is_dir() {
        return Err(CliError::usage(
            format!("bench --dir: {} is not a directory", path.display()),
            "give a directory of the file system to measure",
        ));
    }
    let space = fs_space(path).map_err(|e| crate::error::local_io(path, "cannot statvfs", e))?;
    if space.read_only {
        return Err(erofs(path));
    }
    let dir = path.join(BENCH_DIR);
    if reuse {
        if !dir.is_dir() {
            return Err(CliError::new(format!(
                "--reuse-fill: {} does not exist: there is no fill to reuse",
                dir.display()
            ))
            .hint("make the fill first with bench --dir PATH --fill-only (with the run's --fill, --seed, --age)"));
        }
        return Ok(dir);
    }
    if dir.exists() {
        let hint = if dir.join(super::manifest::MANIFEST).exists() {
            "it holds a fill made by --fill-only: add --reuse-fill to measure on it, or remove it"
        } else {
            "remove it, or give another directory"
        };
        return Err(CliError::new(format!(
            "{} already exists (another bench --dir, or one run with --keep or --fill-only)",
            dir.display()
        ))
        .hint(hint));
    }
    std::fs::create_dir(&dir).map_err(|e| match e.raw_os_error() {
        Some(libc::EROFS) => erofs(path),
        _ => crate::error::local_io(&dir, "cannot create", e),
    })?;
    Ok(dir)
}

/// Refuses `--direct` on a file system that refuses `O_DIRECT` (at open, or on an
/// aligned write).
pub fn check_direct(dir: &Path) -> CliResult<()> {
    let probe = dir.join("direct-probe");
    let r = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .custom_flags(libc::O_DIRECT)
        .open(&probe)
        .and_then(|f| {
            let buf = dvrfs_core::IoBuf::zeroed(4096);
            std::os::unix::fs::FileExt::write_all_at(&f, buf.bytes().expect("real"), 0)
        });
    let _ = std::fs::remove_file(&probe);
    r.map_err(|e| {
        CliError::new(format!(
            "--direct: the file system at {} refuses O_DIRECT ({e})",
            dir.parent().unwrap_or(dir).display()
        ))
        .hint("leave out --direct (buffered I/O, what recorders do), or use a file system that takes O_DIRECT")
    })
}

/// Parses `--ioprio` and checks that a thread may take it (on a thread of its own:
/// the calling thread keeps its priority).
pub fn ioprio(text: &str) -> CliResult<(IoClass, u8)> {
    let (class, level) = match text {
        "rt" => (IoClass::RealTime, 0),
        "be" => (IoClass::BestEffort, 0),
        "idle" => (IoClass::Idle, 0),
        other => {
            return Err(CliError::usage(
                format!("unknown --ioprio {other:?}"),
                "choose rt (real-time), be (best-effort) or idle",
            ))
        }
    };
    let probe = std::thread::spawn(move || dvrfs_io::process::set_io_priority(class, level))
        .join()
        .expect("the probe thread does not panic");
    probe.map_err(|e| {
        CliError::new(format!("--ioprio {text}: a thread cannot take it: {e}"))
            .hint("the real-time class needs root (CAP_SYS_ADMIN or CAP_SYS_NICE); run as root or leave out --ioprio")
    })?;
    Ok((class, level))
}

/// Writes a recording of `bytes` zeros at `path`; the bytes written (fewer when the
/// file system fills up).
fn record(path: &Path, bytes: u64, zeros: &[u8]) -> CliResult<u64> {
    let mut f = File::create(path).map_err(|e| crate::error::local_io(path, "cannot create", e))?;
    let mut off = 0u64;
    while off < bytes {
        let len = (bytes - off).min(zeros.len() as u64) as usize;
        match f.write_all(&zeros[..len]) {
            Ok(()) => off += len as u64,
            Err(e) if e.raw_os_error() == Some(libc::ENOSPC) => break,
            Err(e) => return Err(crate::error::local_io(path, "cannot write", e)),
        }
    }
    match f.sync_data() {
        Ok(()) => Ok(off),
        Err(e) if e.raw_os_error() == Some(libc::ENOSPC) => Ok(off),
        Err(e) => Err(crate::error::local_io(path, "cannot sync", e)),
    }
}

fn used(dir: &Path) -> CliResult<(u64, u64, u64)> {
    let s = fs_space(dir).map_err(|e| crate::error::local_io(dir, "cannot statvfs", e))?;
    Ok((s.total_bytes, s.total_bytes - s.free_bytes, s.avail_bytes))
}

/// Fills and ages the file system as `sim` does its volume (see the module docs);
/// the recordings as paths under the bench directory (`/rec/...`, the delete victim
/// last) with their sizes, and the bytes in use.
pub fn fill(
    dir: &Path,
    cfg: &SimConfig,
    rng: &mut ChaCha8Rng,
) -> CliResult<(Vec<(String, u64)>, u64)> {
    let rec = dir.join(super::manifest::REC_DIR);
    std::fs::create_dir(&rec).map_err(|e| crate::error::local_io(&rec, "cannot create", e))?;
    let zeros = vec![0u8; FILL_WRITE_BYTES];
    let (total, mut in_use, _) = used(dir)?;
    let target = (total as f64 * cfg.fill) as u64;
    let mut n = 0u64;
    let next = |n: &mut u64| {
        let name = format!("fill{:05}.ts", *n);
        *n += 1;
        name
    };
    let mut victim = None;
    if cfg.best_effort == Some(BestEffort::Delete) {
        let bytes = cfg.delete_bytes.min(target.max(cfg.block_bytes));
        let name = next(&mut n);
        let wrote = record(&rec.join(&name), bytes, &zeros)?;
        victim = Some((format!("/rec/{name}"), wrote));
        in_use = used(dir)?.1;
    }
    let mut files: Vec<(String, u64)> = Vec::new();
    while in_use < target {
        let bytes = sim::fill_recording_bytes(cfg, rng)
            .min(target - in_use)
            .max(1);
        let name = next(&mut n);
        let wrote = record(&rec.join(&name), bytes, &zeros)?;
        files.push((name, wrote));
        let (_, u, avail) = used(dir)?;
        in_use = u;
        if avail < cfg.block_bytes {
            break;
        }
    }
    for _ in 0..cfg.age_cycles {
        if files.is_empty() {
            break;
        }
        let i = (rng.next_u64() % files.len() as u64) as usize;
        let (name, bytes) = files.swap_remove(i);
        let p = rec.join(&name);
        std::fs::remove_file(&p).map_err(|e| crate::error::local_io(&p, "cannot remove", e))?;
        dvrfs_io::files::sync_everything();
        let free = used(dir)?.2;
        let new = sim::fill_recording_bytes(cfg, rng).min(bytes.max(cfg.block_bytes) + free / 2);
        let name = next(&mut n);
        let wrote = record(&rec.join(&name), new, &zeros)?;
        files.push((name, wrote));
    }
    let mut paths: Vec<(String, u64)> = files
        .into_iter()
        .filter(|(_, b)| *b > 0)
        .map(|(p, b)| (format!("/rec/{p}"), b))
        .collect();
    paths.extend(victim);
    Ok((paths, used(dir)?.1))
}

/// Writes everything back and drops the page cache so that playbacks reach the
/// disk; false (with a warning) when the cache could not be dropped.
pub fn drop_caches() -> bool {
    dvrfs_io::files::sync_everything();
    match std::fs::write("/proc/sys/vm/drop_caches", "3") {
        Ok(()) => true,
        Err(e) => {
            eprintln!("dvrfs: warning: cannot drop the page cache ({e}): playbacks of the fill files may be served from memory");
            eprintln!("hint: run as root for a measurement of the disk");
            false
        }
    }
}
