//! Whole-volume commands: `mkfs`, `fsck` and `info`.

use std::io::ErrorKind;
use std::os::unix::fs::FileTypeExt;
use std::path::Path;

use dvrfs_core::device::{AlignedBuf, Device, IO_ALIGN_BYTES};
use dvrfs_core::format::superblock::{AllocPolicy, Superblock};
use dvrfs_core::format::{FORMAT_VERSION, META_BLOCK_BYTES};
use dvrfs_core::layout::{MkfsParams, MAX_DATA_BLOCK_BYTES, MIN_DATA_BLOCK_BYTES};
use dvrfs_core::tools::fsck::FsckReport;
use dvrfs_io::FileDevice;
use serde_json::json;

use crate::args::{parse_duration_ms, parse_size, FsckArgs, InfoArgs, MkfsArgs};
use crate::error::{local_io, CliError, CliResult};
use crate::output::{human_bytes, print_json, progress, uuid_string};
use crate::target::{now_ns, open_device, open_fs, Access};

/// Size of a new image file when `--size` is not given.
pub const DEFAULT_IMAGE_BYTES: u64 = 64 << 30;
/// mkfs refuses a target with non-zero bytes in this many leading bytes (without --force):
/// enough to catch the superblocks of every common file system and partition table.
pub const PROBE_BYTES: u64 = 64 << 10;

/// fsck(8) status for an operational error (not a dvrfs, unreadable device, ...).
pub const FSCK_EXIT_OPERATIONAL: u8 = 8;

struct MkfsPlan {
    block_bytes: u64,
    sum_granule_bytes: Option<u64>,
    alloc: AllocPolicy,
    commit_interval_ms: u32,
    tail_log: dvrfs_core::layout::TailLogSize,
}

/// `base` with the settings the flags chose.
fn mkfs_params(a: &MkfsArgs, plan: &MkfsPlan, base: MkfsParams) -> MkfsParams {
    MkfsParams {
        data_block_bytes: plan.block_bytes,
        alloc: plan.alloc,
        inodes: a.inodes,
        zones: a.zones,
        commit_interval_ms: plan.commit_interval_ms,
        sum_granule_bytes: plan.sum_granule_bytes,
        tail_log: plan.tail_log,
        ..base
    }
}

fn check_mkfs_args(a: &MkfsArgs) -> CliResult<MkfsPlan> {
    let block_bytes = parse_size("--block-size", &a.block_size)?;
    if !block_bytes.is_power_of_two()
        || !(MIN_DATA_BLOCK_BYTES..=MAX_DATA_BLOCK_BYTES).contains(&block_bytes)
    {
        return Err(CliError::usage(
            format!("invalid --block-size {:?}: {block_bytes} bytes is not a power of two from 64K to 1G", a.block_size),
            "use 64K, 1M or 4M (the default)",
        ));
    }
    let interval_ms = parse_duration_ms("--commit-interval", &a.commit_interval)?;
    let commit_interval_ms = u32::try_from(interval_ms)
        .ok()
        .filter(|ms| (1..=crate::limits::MAX_COMMIT_INTERVAL_MS).contains(ms))
        .ok_or_else(|| {
            crate::limits::out_of_range(
                "--commit-interval",
                &a.commit_interval,
                "from 1ms to 1h",
                "the default, 1s, suits recording: what a crash can cost is one interval of metadata",
            )
        })?;
    let alloc = AllocPolicy::parse(&a.alloc).ok_or_else(|| {
        CliError::usage(
            format!("invalid --alloc {:?}", a.alloc),
            "use zrr, contig or seq",
        )
    })?;
    let sum_granule_bytes = match a.checksum_granule.as_deref() {
        None => Some(dvrfs_core::layout::DEFAULT_SUM_GRANULE_BYTES.min(block_bytes)),
        Some("off" | "none") => None,
        Some(g) => {
            let bytes = parse_size("--checksum-granule", g)?;
            if !bytes.is_power_of_two() || bytes < MIN_DATA_BLOCK_BYTES || bytes > block_bytes {
                return Err(CliError::usage(
                    format!(
                        "invalid --checksum-granule {g:?}: {bytes} bytes is not a power of two from 64K to the block size ({})",
                        human_bytes(block_bytes)
                    ),
                    "use 512K (the default, the stream request size), the block size, or off",
                ));
            }
            Some(bytes)
        }
    };
    let tail_log = tail_log_size(a.no_tail_log, a.tail_log.as_deref())?;
    if let Some(n) = a.inodes {
        crate::args::check_range("--inodes", n, 16..=dvrfs_core::layout::MAX_INODES)?;
    }
    if let Some(z) = a.zones {
        crate::args::check_range("--zones", z, 1..=dvrfs_core::layout::MAX_ZONES)?;
    }
    Ok(MkfsPlan {
        block_bytes,
        sum_granule_bytes,
        alloc,
        commit_interval_ms,
        tail_log,
    })
}

/// The tail log `--no-tail-log` and `--tail-log SIZE` ask for (mkfs, and the
/// volumes `capacity` and `sim` count on).
pub fn tail_log_size(
    no_tail_log: bool,
    size: Option<&str>,
) -> CliResult<dvrfs_core::layout::TailLogSize> {
    use dvrfs_core::layout::TailLogSize;
    Ok(match (no_tail_log, size) {
        (true, _) => TailLogSize::Off,
        (false, None) => TailLogSize::Auto,
        (false, Some(t)) => {
            let bytes = parse_size("--tail-log", t)?;
            let min = dvrfs_core::format::superblock::MIN_TAIL_LOG_BLOCKS * 4096;
            let max = crate::limits::MAX_TAIL_LOG_BYTES;
            if !(min..=max).contains(&bytes) || bytes % 4096 != 0 {
                return Err(CliError::usage(
                    format!(
                        "invalid --tail-log {t:?}: out of range: a multiple of 4K from {} to {}",
                        human_bytes(min),
                        human_bytes(max)
                    ),
                    "leave it out for the default (a 1024th of the device, 4M to 256M), or give --no-tail-log",
                ));
            }
            TailLogSize::Blocks(bytes / 4096)
        }
    })
}

pub fn mkfs(a: &MkfsArgs) -> CliResult<u8> {
    let plan = check_mkfs_args(a)?;
    let size_bytes = a
        .size
        .as_deref()
        .map(|s| parse_size("--size", s))
        .transpose()?;
    let target = a.target.as_path();
    if let (Some(size), false) = (size_bytes, target.exists()) {
        // Too small for these settings: say the minimum before anything is created.
        let params = mkfs_params(a, &plan, MkfsParams::new(size, [0; 16], 0));
        if let Err(e @ dvrfs_core::Error::TooSmall { .. }) = dvrfs_core::layout::plan(&params) {
            return Err(e.into());
        }
    }
    let created = match std::fs::metadata(target) {
        Err(e) if e.kind() == ErrorKind::NotFound => {
            let parent = target.parent().filter(|p| !p.as_os_str().is_empty());
            if parent.is_some_and(|p| !p.is_dir()) {
                return Err(CliError::new(format!(
                    "cannot create {}: its directory does not exist",
                    target.display()
                ))
                .hint("create the directory first, or give another path"));
            }
            FileDevice::create_image(target, size_bytes.unwrap_or(DEFAULT_IMAGE_BYTES))?;
            true
        }
        Err(e) => return Err(local_io(target, "cannot read", e)),
        Ok(m) if m.file_type().is_block_device() && size_bytes.is_some() => {
            return Err(CliError::usage(
                format!(
                    "{} is a block device; --size applies to image files only",
                    target.display()
                ),
                "leave out --size: a block device is formatted at its own size",
            ))
        }
        Ok(_) => false,
    };
    let result = format_target(a, &plan, size_bytes, created);
    if result.is_err() && created {
        // Leave nothing behind when the image we just created could not be formatted.
        let _ = std::fs::remove_file(target);
    }
    result
}

fn format_target(
    a: &MkfsArgs,
    plan: &MkfsPlan,
    size_bytes: Option<u64>,
    created: bool,
) -> CliResult<u8> {
    let target = a.target.as_path();
    let mut dev = open_device(target, Access::Write)?;
    if !created {
        let existing = if a.force {
            None
        } else {
            existing_contents_of(target, &dev)?
        };
        if let Some(what) = existing {
            return Err(CliError::new(format!(
                "{} already holds {what}; refusing to overwrite it",
                target.display()
            ))
            .hint("add --force to format it anyway (this destroys what is there)"));
        }
        // An existing image grows to --size (an empty one to the default size).
        let want = match size_bytes {
            Some(s) => Some(s),
            None if !dev.is_block_device() && dev.size_bytes() == 0 => Some(DEFAULT_IMAGE_BYTES),
            None => None,
        };
        if let Some(want) =
            want.filter(|&w| w / IO_ALIGN_BYTES * IO_ALIGN_BYTES != dev.size_bytes())
        {
            drop(dev);
            FileDevice::create_image(target, want)?;
            dev = open_device(target, Access::Write)?;
        }
    }
    let mut uuid = [0u8; 16];
    let mut seed = [0u8; 8];
    getrandom::getrandom(&mut uuid)
        .and_then(|()| getrandom::getrandom(&mut seed))
        .map_err(|e| CliError::new(format!("cannot get random bytes from the system: {e}")))?;
    uuid[6] = (uuid[6] & 0x0f) | 0x40; // RFC 4122 version 4, variant 1
    uuid[8] = (uuid[8] & 0x3f) | 0x80;
    let params = MkfsParams {
        created_ns: now_ns(),
        ..mkfs_params(
            a,
            plan,
            MkfsParams::new(dev.size_bytes(), uuid, u64::from_le_bytes(seed)),
        )
    };
    let pb = progress(0, false, "writing metadata");
    let sb = dvrfs_core::tools::mkfs(&mut dev, &params, &mut |done, total| {
        pb.set_length(total);
        pb.set_position(done);
    })?;
    pb.finish_and_clear();
    outln!("{}", mkfs_summary(target, &sb));
    Ok(0)
}

/// What an existing target holds that mkfs must not destroy unasked, if anything.
/// What `target` (opened as `dev`) holds that formatting it would destroy: a dvrfs
/// volume, or data. A regular file is checked whole: every allocated extent
/// (`SEEK_DATA`, so a sparse image costs nothing) is read until a non-zero byte, up to
/// [`SCAN_LIMIT_BYTES`] of allocated zeros, past which it counts as data; so is any
/// byte of a file shorter than the device's alignment (which `dev` does not see). A
/// block device is probed at its start, its end and [`BLOCK_DEVICE_SAMPLES`] places in
/// between: reading all of it would take hours.
pub(crate) fn existing_contents_of(target: &Path, dev: &FileDevice) -> CliResult<Option<String>> {
    if let Some(what) = existing_contents(dev)? {
        return Ok(Some(what));
    }
    if dev.is_block_device() {
        return sample_block_device(dev);
    }
    regular_file_contents(target)
}

/// How many bytes of allocated zeros mkfs reads in a regular file before it stops and
/// counts the file as holding data.
pub const SCAN_LIMIT_BYTES: u64 = 1 << 30;
/// Places a block device is probed at between its start and its end.
pub const BLOCK_DEVICE_SAMPLES: u64 = 64;

fn regular_file_contents(path: &Path) -> CliResult<Option<String>> {
    use std::io::{Read, Seek, SeekFrom};
    let mut f = std::fs::File::open(path).map_err(|e| local_io(path, "cannot read", e))?;
    let len = f
        .metadata()
        .map_err(|e| local_io(path, "cannot read", e))?
        .len();
    let mut buf = vec![0u8; 1 << 20];
    let mut scanned = 0u64;
    let mut at = 0u64;
    while at < len {
        // No data past `at` (ENXIO), or no SEEK_DATA here.
        let Some((start, end)) = dvrfs_io::files::next_data(&f, at, len) else {
            break;
        };
        f.seek(SeekFrom::Start(start))
            .map_err(|e| local_io(path, "cannot read", e))?;
        let mut pos = start;
        while pos < end {
            if scanned >= SCAN_LIMIT_BYTES {
                return Ok(Some(format!(
                    "{} of allocated space ({} read, all zero, before the check stopped)",
                    human_bytes(len),
                    human_bytes(scanned)
                )));
            }
            let n = ((end - pos) as usize).min(buf.len());
            let got = f
                .read(&mut buf[..n])
                .map_err(|e| local_io(path, "cannot read", e))?;
            if got == 0 {
                break;
            }
            if let Some(k) = buf[..got].iter().position(|&b| b != 0) {
                return Ok(Some(format!(
                    "data (a non-zero byte at offset {} of its {})",
                    pos + k as u64,
                    human_bytes(len)
                )));
            }
            pos += got as u64;
            scanned += got as u64;
        }
        at = end;
    }
    Ok(None)
}

fn sample_block_device(dev: &FileDevice) -> CliResult<Option<String>> {
    let size = dev.size_bytes();
    if size <= PROBE_BYTES {
        return Ok(None);
    }
    let mut buf = AlignedBuf::zeroed(PROBE_BYTES as usize);
    for k in 1..=BLOCK_DEVICE_SAMPLES {
        let at = (size - PROBE_BYTES) / BLOCK_DEVICE_SAMPLES * k / IO_ALIGN_BYTES * IO_ALIGN_BYTES;
        dev.read_at(at, &mut buf)
            .map_err(|e| CliError::from(dvrfs_core::Error::io("reading the target", e)))?;
        if let Some(i) = buf.iter().position(|&b| b != 0) {
            return Ok(Some(format!(
                "data (non-zero bytes at offset {})",
                at + i as u64
            )));
        }
    }
    Ok(None)
}

/// A dvrfs superblock (at the start or the end) or non-zero bytes in the first
/// [`PROBE_BYTES`] of what `dev` sees.
pub(crate) fn existing_contents(dev: &FileDevice) -> CliResult<Option<String>> {
    let size = dev.size_bytes();
    let probe = PROBE_BYTES.min(size);
    let mut buf = AlignedBuf::zeroed(probe as usize);
    let read_err = |e| CliError::from(dvrfs_core::Error::io("reading the start of the target", e));
    dev.read_at(0, &mut buf).map_err(read_err)?;
    if buf.len() >= META_BLOCK_BYTES && Superblock::decode(&buf[..META_BLOCK_BYTES]).is_ok() {
        return Ok(Some("a dvrfs file system".into()));
    }
    if size >= 2 * META_BLOCK_BYTES as u64 {
        let mut last = AlignedBuf::zeroed(META_BLOCK_BYTES);
        dev.read_at(size - META_BLOCK_BYTES as u64, &mut last)
            .map_err(read_err)?;
        if Superblock::decode(&last).is_ok() {
            return Ok(Some(
                "a dvrfs file system (its end-of-device superblock copy is valid)".into(),
            ));
        }
    }
    if buf.iter().any(|&b| b != 0) {
        return Ok(Some(format!(
            "data (non-zero bytes in its first {})",
            human_bytes(probe)
        )));
    }
    Ok(None)
}

fn mkfs_summary(target: &Path, sb: &Superblock) -> String {
    let bs = sb.data_block_bytes;
    format!(
        "Created a dvrfs file system on {}: {} ({} bytes), {} data blocks, {} allocation over {} zone{} \
         of {} blocks, {} data blocks ({} for data), {} inodes ({} slots, slot 0 reserved), commit interval {} ms, uuid {}.",
        target.display(),
        human_bytes(sb.device_bytes),
        sb.device_bytes,
        human_bytes(bs),
        sb.alloc.as_str(),
        sb.zone_count,
        if sb.zone_count == 1 { "" } else { "s" },
        sb.zone_blocks,
        sb.data_blocks,
        human_bytes(sb.data_blocks * bs),
        sb.inode_count - 1,
        sb.inode_count,
        sb.commit_interval_ms,
        uuid_string(&sb.uuid),
    )
}

/// One run of the check on `target`; the core's error is kept apart from the CLI's
/// own so that the caller can act on a truncated image.
fn run_fsck(target: &Path, repair: bool) -> Result<CliResult<FsckReport>, dvrfs_core::Error> {
    let access = if repair { Access::Write } else { Access::Read };
    let dev = match open_device(target, access) {
        Ok(dev) => dev,
        Err(e) => return Ok(Err(e)),
    };
    let pb = progress(0, false, "checking metadata");
    let (report, _dev) = dvrfs_core::tools::fsck::fsck(dev, repair, &mut |done, total| {
        pb.set_length(total);
        pb.set_position(done);
    })?;
    pb.finish_and_clear();
    Ok(Ok(report))
}

pub fn fsck(a: &FsckArgs) -> CliResult<u8> {
    let target = a.target.as_path();
    let report = match run_fsck(target, a.repair) {
        // A truncated image: the repair gives it its size back first (an image file
        // only; a block device cannot grow, and its error says what to do).
        Err(dvrfs_core::Error::Truncated {
            volume_bytes,
            device_bytes,
        }) if a.repair && !dvrfs_io::is_block_device(target) => {
            FileDevice::create_image(target, volume_bytes)
                .map_err(|e| CliError::from(e).exit_code(FSCK_EXIT_OPERATIONAL))?;
            outln!(
                "{}: extended from {} to {} bytes: it was {} short of the volume (the missing part now reads as zeros: files that had data there fail their data checksums there, and `dvrfs scrub {}` lists them)",
                target.display(),
                device_bytes,
                volume_bytes,
                human_bytes(volume_bytes - device_bytes),
                target.display()
            );
            run_fsck(target, true)
        }
        other => other,
    };
    let report = report
        .unwrap_or_else(|e| Err(e.into()))
        .map_err(|e| e.exit_code(FSCK_EXIT_OPERATIONAL))?;
    let code = report.exit_code() as u8;
    if a.json {
        print_json(&json!({
            "target": target.display().to_string(),
            "clean": report.clean(),
            "errors": report.errors,
            "repaired": report.repaired,
            "remaining": report.remaining,
            "replayed_txn": report.replayed_txn,
            "not_closed_cleanly": report.crashed,
            "lost_tails": report.lost_tails.iter().map(crate::cmd_events::lost_tail_json).collect::<Vec<_>>(),
            "lost_tails_not_listed": report.tails_left_out,
            "tail_log": {
                "records": report.tail_log.records,
                "replay_records": report.tail_log.replay_records,
                "replay_bytes": report.tail_log.replay_bytes,
                "replay_files": report.tail_log.replay_files,
                "replayed": report.tail_log.replayed,
                "problems": report.tail_log.problems,
            },
            "damaged": report.damaged.iter().map(|(path, lost)| json!({
                "path": path,
                "lost": lost.iter().map(|(s, e)| [s, e]).collect::<Vec<_>>(),
            })).collect::<Vec<_>>(),
            "truncated": report.truncated.map(|(volume_bytes, device_bytes)| json!({
                "volume_bytes": volume_bytes,
                "device_bytes": device_bytes,
            })),
            "exit_code": code,
        }));
    } else {
        if !report.damaged.is_empty() {
            outln!("files with bytes lost to damage (reads there fail; `dvrfs get --salvage` copies the rest):");
            for (path, lost) in &report.damaged {
                let ranges: Vec<String> = lost.iter().map(|(s, e)| format!("{s}..{e}")).collect();
                outln!(
                    "  {}: {} bytes lost at {}",
                    crate::cmd_files::shown(path.as_bytes()),
                    lost.iter().map(|(s, e)| e - s).sum::<u64>(),
                    ranges.join(", ")
                );
            }
        }
        if let Some(t) = report.replayed_txn {
            // The operator should know a crash happened even when it left no damage.
            outln!(
                "{}: was not closed cleanly: journal transaction {t} replayed{}",
                target.display(),
                if a.repair {
                    ""
                } else {
                    " (in memory; the next writable open writes it in place)"
                }
            );
        } else if report.crashed {
            outln!(
                "{}: was not closed cleanly: the journal held no complete transaction (the last commit stands)",
                target.display()
            );
        }
        for line in crate::cmd_events::tail_log_lines(&report.tail_log, a.repair) {
            outln!("{}: {line}", target.display());
        }
        // Which files came back shorter than their writers had handed over.
        for t in &report.lost_tails {
            outln!(
                "{}: {}",
                target.display(),
                crate::cmd_events::lost_tail_line(t)
            );
        }
        if report.tails_left_out > 0 {
            outln!(
                "{}: {} more file(s) lost their last accepted bytes (the record lists at most {})",
                target.display(),
                report.tails_left_out,
                dvrfs_core::format::events::max_tails(
                    report.tail_log.head > 0 || report.tail_log.tail > 0
                )
            );
        }
        if report.clean() {
            outln!("{}: clean", target.display());
        } else {
            for e in &report.errors {
                outln!("  {e}");
            }
            outln!(
                "{}: {} error{} found, {} repaired, {} remaining",
                target.display(),
                report.errors.len(),
                if report.errors.len() == 1 { "" } else { "s" },
                report.repaired,
                report.remaining
            );
        }
    }
    if let Some((volume_bytes, device_bytes)) = report.truncated {
        // The one finding on a truncated image: say what it takes to check the rest.
        crate::error::truncated(&target.display().to_string(), volume_bytes, device_bytes).print();
    } else if report.remaining > 0 {
        let err = CliError::new(format!(
            "{} has {} error(s) left uncorrected",
            target.display(),
            report.remaining
        ));
        let err = if a.repair {
            err.hint(
                "these cannot be repaired automatically; copy the recordings off with `dvrfs get`",
            )
        } else {
            err.hint(format!("run `dvrfs fsck --repair {}`", target.display()))
        };
        err.print();
    }
    Ok(code)
}

pub fn info(a: &InfoArgs) -> CliResult<u8> {
    let target = a.target.as_path();
    let fs = open_fs(target, Access::Read)?;
    let info = fs.info();
    let event_capacity = fs.event_capacity();
    let sb = &info.sb;
    let bs = sb.data_block_bytes;
    let mb = META_BLOCK_BYTES as u64;
    let used_bytes = info.used_blocks * bs;
    let free_bytes = fs.free_bytes();
    let region = |offset: u64, length: u64| json!({ "offset": offset, "length": length });
    let load = fs.load_report();
    let room = info.meta_room;
    // The longest target a symlink keeps in its inode (0: every target takes a block).
    let inline_symlink_bytes = match sb.has_inline_symlinks() {
        true => dvrfs_core::format::inode::MAX_INLINE_TARGET_BYTES,
        false => 0,
    };
    let (backend, no_uring) = dvrfs_runtime::available_backend();
    // What protected clips hold now (`dvrfs protect`), and what they may.
    let snapshot = dvrfs_core::retention::Snapshot::of(
        fs.engine().volume(),
        &Default::default(),
        crate::target::now_ns(),
    );
    let (protected_chunks, protected_bytes) = snapshot
        .streams
        .iter()
        .flat_map(|s| &s.chunks)
        .filter(|c| c.protected)
        .fold((0u64, 0u64), |(n, b), c| (n + 1, b + c.bytes));
    let protected_max_bytes =
        u64::from(sb.retention.protected_max_permille) * snapshot.data_bytes / 1000;
    let v = json!({
        "target": target.display().to_string(),
        "version": FORMAT_VERSION,
        "uuid": uuid_string(&sb.uuid),
        "size_bytes": sb.device_bytes,
        "block_size": bs,
        "alloc": sb.alloc.as_str(),
        "zones": sb.zone_count,
        "zone_blocks": sb.zone_blocks,
        "data_blocks": sb.data_blocks,
        "used_blocks": info.used_blocks,
        "used_bytes": used_bytes,
        "free_bytes": free_bytes,
        "files": info.files,
        "dirs": info.dirs,
        "inodes": sb.inode_count - 1,
        "inodes_used": info.files + info.dirs,
        "metadata_area": {
            "blocks": room.total_blocks,
            "used_blocks": room.used_blocks,
            "name_blocks": room.name_blocks,
            "map_blocks": room.map_blocks,
            "reserve_blocks": room.reserve_blocks,
            "free_for_names_blocks": room.free_for_names_blocks,
            "is_limit": room.is_names_limit(),
        },
        "inline_symlink_bytes": inline_symlink_bytes,
        "commit_interval_ms": sb.commit_interval_ms,
        "prealloc_blocks": sb.prealloc_blocks,
        "created_ns": sb.created_ns,
        "last_txn": sb.last_txn,
        "checksum_granule": sb.sum_granule_bytes,
        "event_log_events": event_capacity,
        "retention": crate::cmd_retention::volume_json(&sb.retention),
        "protected": {
            "chunks": protected_chunks,
            "bytes": protected_bytes,
            "max_bytes": protected_max_bytes,
        },
        "superblock_from": load.superblock_from,
        "io_backend": backend.name(),
        "regions": {
            "primary": region(0, sb.meta_blocks * mb),
            "journal": region(sb.journal_start * mb, sb.journal_blocks * mb),
            "inode_table": region(sb.inode_table_start * mb, sb.inode_table_blocks * mb),
            "checksums": region(sb.sum_start * mb, sb.sum_blocks * mb),
            "events": region(sb.events_start * mb, sb.events_blocks * mb),
            "tail_log": region(sb.tail_log_start * mb, sb.tail_log_blocks * mb),
            "data": region(sb.data_start_bytes, sb.data_blocks * bs),
            "backup": region(sb.backup_start_bytes, sb.backup_blocks() * mb),
        },
    });
    if a.json {
        print_json(&v);
        return Ok(0);
    }
    let pct = |n: u64, of: u64| {
        if of == 0 {
            0.0
        } else {
            100.0 * n as f64 / of as f64
        }
    };
    outln!(
        "dvrfs file system on {} (format version {FORMAT_VERSION})",
        target.display()
    );
    outln!("  uuid             {}", uuid_string(&sb.uuid));
    outln!(
        "  size             {} ({} bytes)",
        human_bytes(sb.device_bytes),
        sb.device_bytes
    );
    outln!("  data block size  {}", human_bytes(bs));
    outln!(
        "  allocation       {}, {} zone(s) of {} blocks",
        sb.alloc.as_str(),
        sb.zone_count,
        sb.zone_blocks
    );
    outln!(
        "  data             {} blocks, {} used ({:.1}%), {} free",
        sb.data_blocks,
        human_bytes(used_bytes),
        pct(info.used_blocks, sb.data_blocks),
        human_bytes(free_bytes)
    );
    outln!(
        "  inodes           {} in use of {} ({} files, {} directories)",
        info.files + info.dirs,
        sb.inode_count - 1,
        info.files,
        info.dirs
    );
    outln!(
        "  metadata area    {} of {} blocks used ({} directories and symlinks, {} file maps); {} free kept for file maps",
        room.used_blocks,
        room.total_blocks,
        room.name_blocks,
        room.map_blocks,
        room.reserve_blocks
    );
    if room.is_names_limit() {
        outln!("  limit            the metadata area: no room for new directory blocks or symlink blocks (files still grow their maps)");
    }
    match inline_symlink_bytes {
        0 => outln!("  symlinks         each target in a block (a volume made before 2026-11-27)"),
        n => {
            outln!("  symlinks         targets of up to {n} bytes in the inode, longer in a block")
        }
    }
    outln!("  commit interval  {} ms", sb.commit_interval_ms);
    match sb.sum_granule_bytes {
        0 => outln!("  data checksums   none (made before them, or with --checksum-granule off)"),
        g => outln!("  data checksums   CRC32C per {} granule", human_bytes(g)),
    }
    match event_capacity {
        0 => outln!("  event log        none (a volume made before 2026-11-27)"),
        n => outln!("  event log        the last {n} events (dvrfs events)"),
    }
    match crate::cmd_retention::volume_text(&sb.retention) {
        Some(t) => outln!("  retention        {t} (dvrfs retention --list)"),
        None => outln!("  retention        no volume policy (dvrfs retention)"),
    }
    let bound = match protected_max_bytes {
        0 => "no protected-max".to_string(),
        m => format!("of a protected-max of {}", human_bytes(m)),
    };
    outln!(
        "  protected        {protected_chunks} chunk(s), {} ({bound}; dvrfs protect --list)",
        human_bytes(protected_bytes)
    );
    match &no_uring {
        None => outln!("  I/O back end     {} (put, get)", backend.name()),
        Some(why) => outln!(
            "  I/O back end     {} (put, get; no io_uring: {why})",
            backend.name()
        ),
    }
    outln!("  regions          offset .. end (length)");
    for (name, off, len) in [
        ("primary", 0, sb.meta_blocks * mb),
        ("  journal", sb.journal_start * mb, sb.journal_blocks * mb),
        ("data", sb.data_start_bytes, sb.data_blocks * bs),
        ("backup", sb.backup_start_bytes, sb.backup_blocks() * mb),
    ] {
        outln!(
            "    {name:<12} {off:>16} .. {:>16} ({})",
            off + len,
            human_bytes(len)
        );
    }
    if !matches!(load.superblock_from, "primary" | "journal") || load.superblock_note.is_some() {
        CliError::new(format!(
            "the superblock copies of {} do not all agree; the {} was used ({})",
            target.display(),
            load.superblock_from,
            load.superblock_note
                .as_deref()
                .unwrap_or("the primary is invalid")
        ))
        .hint(format!("run `dvrfs fsck --repair {}`", target.display()))
        .print();
    }
    Ok(0)
}
