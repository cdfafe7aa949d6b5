//! The fill of a run with retention ([`SimConfig::retention`]): the recorder's own
//! history, as a DVR that has recorded for days holds it.
//!
//! Every recording of the workload gets its stream directory `/live/sNNNN/` (the
//! name its file would have had, less the extension), and the fill writes those
//! directories' past: chunks of [`SimRetention::chunk_ns`] at each stream's bit
//! rate, named by their UTC start (`retention::chunk_name`), the newest ending at
//! [`SimRetention::utc_epoch_ns`] (time 0 of the run; each chunk created at its
//! start and last written at its end, as a recorder stamps them), written oldest
//! round first, a chunk
//! of every stream per round, until the fill is reached (the newest round may be
//! partial). Each directory has its integrity chain's file (`.chain`, empty: the
//! simulator writes no chain records), which makes it a stream to retention
//! whether or not a policy governs it. A workload without recordings gets one directory, `/live/history`, at
//! the run's bit rate. Then the policies are set: the volume's, and the streams'
//! on `/live` (which governs every directory below it).

use super::{SimConfig, SimRetention};
use crate::chain::CHAIN_NAME;
use crate::device::Device;
use crate::driver::Fs;
use crate::engine::IoBuf;
use crate::error::{Error, Result};
use crate::meta::Ino;
use crate::retention::chunk_name;
use crate::volume::SetAttr;

/// Bytes per write while filling (virtual: no memory behind them).
const FILL_WRITE_BYTES: u64 = 64 << 20;

/// The streams' directories: (name, bit rate), in stream order.
fn stream_dirs(cfg: &SimConfig) -> Vec<(String, f64)> {
    let mut dirs = Vec::new();
    let mut sid = 0u32;
    for g in &cfg.workload.groups {
        let rate = g.bitrate_bps.unwrap_or(cfg.bitrate_bps);
        for _ in 0..g.count {
            if g.write {
                dirs.push((format!("s{sid:04}"), rate));
            }
            sid += 1;
        }
    }
    if dirs.is_empty() {
        dirs.push(("history".to_string(), cfg.bitrate_bps));
    }
    dirs
}

/// Writes the history and sets the policies; returns the chunks' paths, oldest
/// first (what playbacks choose from).
pub(super) fn fill_history<D: Device>(
    fs: &mut Fs<D>,
    cfg: &SimConfig,
    r: &SimRetention,
    target: u64,
) -> Result<Vec<String>> {
    let root = fs.root();
    let live = match fs.resolve("/live") {
        Ok(i) => i,
        Err(_) => fs.mkdir(root, b"live", 0o755, 0, 0, 0)?,
    };
    let bs = fs.superblock().data_block_bytes;
    let dirs: Vec<(Ino, String, u64)> = stream_dirs(cfg)
        .into_iter()
        .map(|(name, rate)| -> Result<_> {
            let ino = fs.mkdir(live, name.as_bytes(), 0o755, 0, 0, 0)?;
            // A stream directory, as `record --chunk` makes one (its integrity
            // chain: empty here, the simulator writes no chain records).
            fs.create(ino, CHAIN_NAME.as_bytes(), 0o644, 0, 0, 0)?;
            let bytes = ((rate / 8.0) * r.chunk_ns as f64 / 1e9) as u64;
            Ok((ino, format!("/live/{name}"), bytes.max(1)))
        })
        .collect::<Result<_>>()?;
    let round: u64 = dirs.iter().map(|d| d.2.div_ceil(bs) * bs).sum();
    let used = |fs: &Fs<D>| fs.info().used_blocks * bs;
    let rounds = target.saturating_sub(used(fs)).div_ceil(round.max(1));
    let mut paths = Vec::new();
    'fill: for back in (1..=rounds).rev() {
        let start = r.utc_epoch_ns - (back * r.chunk_ns) as i64;
        for (dir, path, bytes) in &dirs {
            let now = used(fs);
            if now >= target || fs.free_bytes() < bs {
                break 'fill;
            }
            let name = chunk_name(start, "ts");
            // Stamped as recorded: created at its start, last written at its end.
            let end = start + r.chunk_ns as i64;
            let ino = fs.create(*dir, name.as_bytes(), 0o644, 0, 0, start)?;
            let len = (*bytes).min(target - now);
            let mut off = 0;
            while off < len {
                let n = (len - off).min(FILL_WRITE_BYTES);
                match fs.write_buf(ino, off, IoBuf::virtual_len(n as usize), end) {
                    Ok(_) => off += n,
                    Err(Error::NoSpace { .. }) => break,
                    Err(e) => return Err(e),
                }
            }
            fs.close_file(ino, crate::volume::OpenMode::Write)?;
            if off > 0 {
                paths.push(format!("{path}/{name}"));
            }
        }
    }
    fs.set_volume_retention(r.volume, 0)?;
    if let Some(s) = r.stream {
        let set = SetAttr {
            retention: Some(Some(s)),
            ..Default::default()
        };
        fs.set_attr(live, &set, 0)?;
    }
    fs.sync()?;
    Ok(paths)
}
