//! `dvrfs calibrate DEVICE`: measures a device into the disk-model JSON form.
//!
//! Read-only (a shared lock; `O_DIRECT` reads): the plan and the fit are the core's
//! (`disk::calibrate`); this module times the reads on the monotonic clock and shows a
//! progress bar. `--json` prints the model itself, ready for `--disk FILE` (sim,
//! capacity) and `--device-model FILE` (record, play, bench).

use std::path::PathBuf;
use std::time::Instant;

use clap::Args;
use dvrfs_core::device::{AlignedBuf, Device};
use dvrfs_core::disk::calibrate::{self, Probe};
use dvrfs_io::FileDevice;

use crate::error::{CliError, CliResult};
use crate::target::{open_device, Access};

#[derive(Args, Debug)]
pub struct CalibrateArgs {
    /// Block device or image file to measure (only read)
    pub device: PathBuf,
    /// Name of the model, 1 to 64 bytes without control characters (default: the
    /// device's file name)
    #[arg(long, value_parser = parse_model_name)]
    pub name: Option<String>,
    /// Print the model as JSON on stdout (save it: `> disk.json`)
    #[arg(long)]
    pub json: bool,
}

struct Timed {
    dev: FileDevice,
    buf: AlignedBuf,
    pb: indicatif::ProgressBar,
}

impl Probe for Timed {
    fn read(&mut self, offset: u64, len: u64) -> std::io::Result<u64> {
        let len = len as usize;
        if self.buf.len() < len {
            self.buf = AlignedBuf::zeroed(len);
        }
        let t = Instant::now();
        self.dev.read_at(offset, &mut self.buf[..len])?;
        Ok(t.elapsed().as_nanos() as u64)
    }
    fn capacity_bytes(&self) -> u64 {
        self.dev.size_bytes()
    }
    fn sector_bytes(&self) -> u32 {
        self.dev.sector_bytes()
    }
    fn progress(&mut self, done: u64, total: u64) {
        self.pb.set_length(total);
        self.pb.set_position(done);
    }
}

/// `--name`: what a disk model accepts as its name, checked before the device is
/// measured (a minute or more) rather than found wanting after.
fn parse_model_name(s: &str) -> Result<String, String> {
    use dvrfs_core::disk::model::MAX_NAME_BYTES;
    if s.is_empty() || s.len() > MAX_NAME_BYTES {
        return Err(format!(
            "a model name is 1 to {MAX_NAME_BYTES} bytes long; this one has {} (e.g. --name sdb-wd40)",
            s.len()
        ));
    }
    if s.chars().any(char::is_control) {
        return Err(
            "a model name must not contain control characters (tabs, newlines, ...)".into(),
        );
    }
    Ok(s.to_string())
}

/// The default name: the device's file name, with what a name may not hold replaced
/// (`fit` cuts it to the longest name a model takes).
fn default_model_name(device: &std::path::Path) -> String {
    let name: String = device
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
        .chars()
        .map(|c| if c.is_control() { '_' } else { c })
        .collect();
    match name.is_empty() {
        true => "calibrated".into(),
        false => name,
    }
}

pub fn calibrate(a: &CalibrateArgs) -> CliResult<u8> {
    let dev = open_device(&a.device, Access::Read)?;
    let name = a
        .name
        .clone()
        .unwrap_or_else(|| default_model_name(&a.device));
    let (cap, sector) = (dev.size_bytes(), dev.sector_bytes());
    let pb = crate::output::progress(1, false, "calibrate");
    let mut probe = Timed {
        dev,
        buf: AlignedBuf::zeroed(1 << 20),
        pb,
    };
    let m = calibrate::measure(&mut probe).map_err(|e| {
        CliError::new(format!("calibrating {}: {e}", a.device.display()))
            .hint("calibrate needs a device or image of at least 256 MiB that can be read")
    })?;
    probe.pb.finish_and_clear();
    let model = calibrate::fit(&m, &name, cap, sector);
    model
        .validate()
        .map_err(|e| CliError::new(format!("the fitted model is invalid (a dvrfs bug): {e}")))?;
    if a.json {
        let v = serde_json::to_value(&model)
            .map_err(|e| CliError::new(format!("cannot encode the model: {e}")))?;
        crate::output::print_json(&v);
        return Ok(0);
    }
    let (outer, inner) = calibrate::edge_rates(&model);
    outln!("dvrfs calibrate: {}", a.device.display());
    outln!(
        "  sequential        {} MB/s from start to end",
        m.rates
            .iter()
            .map(|(_, r)| format!("{:.0}", r / 1e6))
            .collect::<Vec<_>>()
            .join(" ")
    );
    outln!(
        "  4 KiB reads       next {:.2} ms, behind the head {:.2} ms, 4 MiB apart {:.2} ms, random {:.2} ms, end to end {:.2} ms",
        m.overhead_ms,
        m.overhead_ms + m.revolution_ms,
        m.short_ms,
        m.random_ms,
        m.full_ms
    );
    outln!(
        "  model             {:.0} rpm, zones {} x {}..{} sectors per track ({:.0}..{:.0} MB/s), seek {:.2} / {:.2} / {:.2} ms, overhead {:.2} ms",
        model.rpm,
        model.zones.count,
        model.zones.spt_outer,
        model.zones.spt_inner,
        outer / 1e6,
        inner / 1e6,
        model.seek_ms.track,
        model.seek_ms.average,
        model.seek_ms.full,
        model.command_overhead_ms
    );
    if let Some(d) = &model.description {
        if let Some(note) = d.split("; ").skip(1).find(|s| !s.starts_with("assumed")) {
            outln!("  note              {note}");
        }
    }
    outln!(
        "save it with `dvrfs calibrate {} --json > {name}.json`, then use --disk {name}.json (sim, capacity) or --device-model {name}.json (record, play, bench); without a model, admission can use --bandwidth {:.0}M",
        a.device.display(),
        inner * 8.0 / 1e6
    );
    Ok(0)
}
