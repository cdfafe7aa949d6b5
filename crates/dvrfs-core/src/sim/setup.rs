//! Before a run: a volume formatted on an in-memory image, filled and aged with
//! recordings through the blocking driver (the real allocator and journal, virtual
//! buffers), and the engine loaded over it. Every random choice comes from the run's
//! generator, so a run replays from its seed.

use super::{
    validate, BestEffort, DiskTimer, SimConfig, FILL_RECORDING_MAX_S, FILL_RECORDING_MIN_S,
};
use crate::device::{Device, MemDevice};
use crate::driver::{Fs, ManualClock};
use crate::engine::{Engine, EngineConfig, IoBuf};
use crate::error::{Error, Result};
use crate::layout::MkfsParams;
use crate::tools::mkfs;
use crate::volume::{OpenOptions, Volume};
use rand_chacha::rand_core::{RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// Bytes per write while filling (virtual: no memory behind them).
const FILL_WRITE_BYTES: u64 = 64 << 20;

/// Formats, fills and ages a volume on an in-memory image through the blocking
/// driver; returns the image and the recordings (the delete victim last).
pub(super) fn prepare<T: DiskTimer>(
    cfg: &SimConfig,
    disk: &T,
    rng: &mut ChaCha8Rng,
) -> Result<(MemDevice, Vec<String>, u64)> {
    let dev = MemDevice::with_sector(disk.capacity_bytes(), disk.sector_bytes());
    prepare_device(dev, cfg, rng)
}

/// Formats `dev` (its whole size) and fills and ages it as `cfg` says, through the
/// blocking driver with virtual buffers (only metadata is written: the recordings'
/// blocks are allocated, their bytes are whatever the device holds). Returns the
/// device, the recordings (the delete victim last) and the bytes in use. `rng` is
/// the run's generator: hand it to [`Client::new`] afterwards, as the simulator does,
/// and the run matches a simulated one of the same seed.
pub fn prepare_device<D: Device>(
    mut dev: D,
    cfg: &SimConfig,
    rng: &mut ChaCha8Rng,
) -> Result<(D, Vec<String>, u64)> {
    validate(cfg, dev.sector_bytes())?;
    let size = dev.size_bytes();
    let mut p = MkfsParams::new(size, seed_uuid(cfg.seed), cfg.seed);
    p.data_block_bytes = cfg.block_bytes;
    p.alloc = cfg.alloc;
    p.commit_interval_ms = cfg.commit_interval_ms;
    if !cfg.checksums {
        p.sum_granule_bytes = None;
    }
    p.tail_log = cfg.tail_log;
    mkfs(&mut dev, &p, &mut |_, _| {})?;
    let mut fs = Fs::open_with(
        dev,
        OpenOptions::writable(),
        Box::new(ManualClock::new()),
        None,
    )?;
    let recordings = setup(&mut fs, cfg, rng)?;
    let used = fs.info().used_blocks * fs.superblock().data_block_bytes;
    Ok((fs.close()?, recordings, used))
}

/// The run's generator, as [`prepare_device`] and [`Client::new`] expect it.
pub fn run_rng(cfg: &SimConfig) -> ChaCha8Rng {
    ChaCha8Rng::seed_from_u64(cfg.seed)
}

/// The engine over a prepared image.
pub(super) fn load_engine<D: Device>(dev: &D, engine_cfg: EngineConfig) -> Result<Engine> {
    let (vol, replay) = Volume::load(dev, &OpenOptions::writable())?;
    debug_assert!(replay.is_none(), "a cleanly closed image replays nothing");
    Engine::new(vol, replay, engine_cfg, super::run::sim_now(0))
}

fn seed_uuid(seed: u64) -> [u8; 16] {
    let mut u = [0u8; 16];
    ChaCha8Rng::seed_from_u64(seed ^ 0x5eed).fill_bytes(&mut u);
    u
}

/// Fills and ages the file system through the real allocator. Returns the paths of
/// the recordings, the delete victim last (when asked for).
fn setup<D: Device>(fs: &mut Fs<D>, cfg: &SimConfig, rng: &mut ChaCha8Rng) -> Result<Vec<String>> {
    let root = fs.root();
    fs.mkdir(root, b"rec", 0o755, 0, 0, 0)?;
    let data_bytes = fs.superblock().data_blocks * fs.superblock().data_block_bytes;
    let target = (data_bytes as f64 * cfg.fill) as u64;
    let mut files: Vec<(String, u64)> = Vec::new();
    let mut n = 0u64;
    let record = |fs: &mut Fs<D>, bytes: u64, n: &mut u64| -> Result<Option<(String, u64)>> {
        let name = format!("fill{:05}.ts", *n);
        *n += 1;
        let dir = fs.resolve("/rec")?;
        let ino = fs.create(dir, name.as_bytes(), 0o644, 0, 0, 0)?;
        let mut off = 0;
        while off < bytes {
            let len = (bytes - off).min(FILL_WRITE_BYTES);
            match fs.write_buf(ino, off, IoBuf::virtual_len(len as usize), 0) {
                Ok(_) => off += len,
                Err(Error::NoSpace { .. }) => break,
                Err(e) => return Err(e),
            }
        }
        fs.close_file(ino, crate::volume::OpenMode::Write)?;
        Ok(Some((format!("/rec/{name}"), off)))
    };
    let rec_bytes = |rng: &mut ChaCha8Rng| fill_recording_bytes(cfg, rng);
    let mut victim = None;
    if cfg.best_effort == Some(BestEffort::Delete) {
        let bytes = cfg.delete_bytes.min(target.max(cfg.block_bytes));
        victim = record(fs, bytes, &mut n)?;
    }
    if let Some(r) = &cfg.retention {
        let mut paths = super::history::fill_history(fs, cfg, r, target)?;
        paths.extend(victim.map(|(v, _)| v));
        return Ok(paths);
    }
    let mut used = fs.info().used_blocks * fs.superblock().data_block_bytes;
    while used < target {
        let bytes = rec_bytes(rng).min(target - used).max(1);
        if let Some(f) = record(fs, bytes, &mut n)? {
            files.push(f);
        }
        used = fs.info().used_blocks * fs.superblock().data_block_bytes;
        if fs.free_bytes() < cfg.block_bytes {
            break;
        }
    }
    for _ in 0..cfg.age_cycles {
        if files.is_empty() {
            break;
        }
        let i = (rng.next_u64() % files.len() as u64) as usize;
        let (path, bytes) = files.swap_remove(i);
        let (parent, name) = fs.resolve_parent(&path)?;
        let name = name.to_vec();
        fs.unlink(parent, &name, 0)?;
        fs.sync()?;
        let new = rec_bytes(rng).min(bytes.max(cfg.block_bytes) + fs.free_bytes() / 2);
        if let Some(f) = record(fs, new, &mut n)? {
            files.push(f);
        }
    }
    let mut paths: Vec<String> = files
        .into_iter()
        .filter(|(_, b)| *b > 0)
        .map(|(p, _)| p)
        .collect();
    if let Some((v, _)) = victim {
        paths.push(v);
    }
    Ok(paths)
}

/// The size of the next recording a fill writes: a recording of a length uniform in
/// [`FILL_RECORDING_MIN_S`, `FILL_RECORDING_MAX_S`] at the workload's bitrate (one
/// draw from `rng`). `bench --dir` fills another file system with the same sizes.
pub fn fill_recording_bytes(cfg: &SimConfig, rng: &mut ChaCha8Rng) -> u64 {
    let secs = FILL_RECORDING_MIN_S + (FILL_RECORDING_MAX_S - FILL_RECORDING_MIN_S) * unit(rng);
    ((secs * cfg.bitrate_bps / 8.0) as u64).max(1)
}

fn unit(rng: &mut ChaCha8Rng) -> f64 {
    (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64
}
