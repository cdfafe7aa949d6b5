//! Checking and repairing a file system.
//!
//! Checks, in order: the three superblock copies; every metadata block in use, in both
//! regions (a primary block that fails verification was already read from its backup
//! at open; a backup block that fails or differs is reported); the structure (data and
//! metadata bitmaps against what the inodes reference, blocks referenced twice, blocks
//! past the end of a file, directory entries naming free inodes, link counts, inodes no
//! directory reaches).
//!
//! `--repair` fixes what it can through the normal journaled commit: corrupt copies are
//! rewritten from the good copy, bitmaps rebuilt from the references, link counts
//! recomputed, bad entries removed, and unreachable inodes linked into `/lost+found`
//! (recordings are not thrown away). Blocks referenced by two files cannot be fixed
//! automatically and stay reported.

use crate::device::Device;
use crate::driver::Fs;
use crate::error::{Error, Result};
use crate::volume::tail_log::TailLogReport;
use crate::volume::{DamagedFile, Found, LostTail, OpenOptions};

#[derive(Clone, Debug, Default)]
pub struct FsckReport {
    pub errors: Vec<String>,
    pub repaired: usize,
    /// Errors that are still there after this run.
    pub remaining: usize,
    pub replayed_txn: Option<u64>,
    /// Files with bytes lost to damage (lost runs: reads there fail), as a path and
    /// its lost byte ranges. Not errors: a repair keeps them marked, and they stay
    /// listed until the file is rewritten there, truncated or removed.
    pub damaged: Vec<DamagedFile>,
    /// After a crash: the files whose last accepted bytes did not survive, from the
    /// last committed lost-tail record (FORMAT.md section 10b). Not errors.
    pub lost_tails: Vec<LostTail>,
    /// Files with a lost tail the record had no room for.
    pub tails_left_out: u32,
    /// The volume was not closed cleanly (a replay, or a lost-tail record).
    pub crashed: bool,
    /// What the tail log held (FORMAT.md section 11a): replayed by `--repair` (a
    /// writable open), else waiting for the next writable open. A record that could
    /// not be used is listed in its problems, not as an error: what it held is lost,
    /// and the lost-tail lines count it.
    pub tail_log: TailLogReport,
    /// The device is shorter than the volume (the volume's bytes, the device's): the
    /// one error reported, for only extending the image lets the check go on.
    pub truncated: Option<(u64, u64)>,
}

impl FsckReport {
    pub fn clean(&self) -> bool {
        self.errors.is_empty()
    }

    /// fsck(8) exit status: 0 clean, 1 errors corrected, 4 errors left uncorrected.
    pub fn exit_code(&self) -> i32 {
        if self.errors.is_empty() {
            0
        } else if self.remaining == 0 {
            1
        } else {
            4
        }
    }
}

/// Checks (and with `repair`, fixes) the file system on `dev`. Returns the device.
/// A file system whose metadata cannot be read at all is reported, not an `Err`;
/// `Err` is kept for "not a dvrfs" and I/O failures.
pub fn fsck<D: Device>(
    dev: D,
    repair: bool,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<(FsckReport, Option<D>)> {
    let opts = if repair {
        OpenOptions {
            repair: true,
            ..OpenOptions::writable()
        }
    } else {
        OpenOptions::read_only()
    };
    let mut fs = match Fs::open(dev, opts) {
        Ok(fs) => fs,
        Err(Error::Corrupt(msg)) => {
            return Ok((
                FsckReport {
                    errors: vec![msg],
                    repaired: 0,
                    remaining: 1,
                    replayed_txn: None,
                    ..Default::default()
                },
                None,
            ));
        }
        Err(e) => return Err(e),
    };
    let mut f = Found::default();
    let report = fs.load_report().clone();
    // A truncated device (only a read-only open gets here; `--repair` is refused with
    // `Error::Truncated`, for the caller to extend the image first): the backup
    // region and the end-of-device copy are gone, so the check proper would report
    // everything past the end as damage. That one finding says what to do.
    if let Some((volume_bytes, device_bytes)) = report.truncated {
        let msg = Error::Truncated {
            volume_bytes,
            device_bytes,
        }
        .to_string();
        return Ok((
            FsckReport {
                errors: vec![msg],
                remaining: 1,
                truncated: report.truncated,
                ..Default::default()
            },
            None,
        ));
    }
    let (vol, dev) = fs.parts_mut();
    vol.check_all(dev, &mut f, &report, repair, progress)?;
    let fixed = f.fixable.iter().filter(|&&x| x).count();
    let mut out = FsckReport {
        remaining: f.errors.len(),
        errors: f.errors,
        repaired: 0,
        replayed_txn: report.replayed_txn,
        damaged: vol.damaged_files()?,
        lost_tails: report.lost_tails.clone(),
        tails_left_out: report.tails_left_out,
        crashed: report.crashed(),
        tail_log: report.tail_log.clone(),
        truncated: None,
    };
    if repair {
        fs.sync()?;
        out.repaired = fixed;
        out.remaining -= fixed;
    }
    let dev = if repair { fs.close()? } else { fs.crash() };
    Ok((out, Some(dev)))
}
