//! What the disk model predicts for the fio checks of the emulator: the [`Drive`] run
//! in virtual time over the workload fio issues, so that a measurement through the
//! kernel (`fio` on the loop device over `dvrfs emulate`) can be compared with the
//! model it runs on.
//!
//! Both workloads are closed loops, as fio at a fixed `iodepth`: `iodepth` commands
//! arrive at time 0 and each completion brings the next command at the same instant
//! (no host time between them: what the host adds shows in the measurement, not
//! here). Random reads are block-aligned offsets drawn uniformly from a byte range
//! with a seeded `ChaCha8Rng` (fio's `randread`, `norandommap` or not: at these
//! counts a repeat is rare and served the same way); sequential reads walk forward
//! from the outer edge (LBA 0) or from the start of the last 1% of the disk.
//!
//! [`random_read_qd1_analytic`] is the cross-check: the mean service time of a random
//! read at queue depth 1 written out from the model's parameters, with the mean seek
//! integrated over pairs of uniformly random *LBAs* (not cylinders: the outer zones
//! hold more sectors per cylinder, so random LBAs lie further out than random
//! cylinders).
//!
//! Everything is deterministic for a given seed. Bad input is an error, never a panic.

use std::ops::Range;

use rand_chacha::ChaCha8Rng;
use rand_core::{RngCore, SeedableRng};

use super::drive::{Command, CommandKind, Drive, DriveError, MAX_NCQ};
use super::geometry::Geometry;
use super::model::DiskModel;
use super::seek::SeekCurve;

/// The most commands a prediction runs (a few seconds of CPU at most).
pub const MAX_COMMANDS: u64 = 10_000_000;

/// The deepest host queue a prediction models (the loop device's own queue depth).
pub const MAX_IODEPTH: u32 = 128;

/// Blocks must be smaller than this (a command's sector count then fits its `u32`).
pub const MAX_BLOCK_BYTES: u64 = 32 << 20;

/// Grid points along the LBA range for the analytic mean seek (`GRID^2` seeks).
const SEEK_GRID: u64 = 1_024;

/// What the model predicts for one fio job.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Prediction {
    /// Commands completed per second of the run.
    pub iops: f64,
    /// Bytes read per second of the run, in MB/s (10^6 bytes).
    pub mb_per_s: f64,
    /// Mean time from a command's arrival to its completion (fio's `clat` plus the
    /// time queued), ms.
    pub mean_latency_ms: f64,
    /// Longest such time, ms.
    pub max_latency_ms: f64,
    pub commands: u64,
    /// Commands the drive served because they reached its age limit
    /// ([`super::drive::AGE_LIMIT_NS`]) rather than by shortest positioning time.
    pub aged_commands: u64,
    /// Virtual time from the first arrival to the last completion, s.
    pub elapsed_s: f64,
}

/// Where a sequential read runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Edge {
    /// From LBA 0 (the outermost zone).
    Outer,
    /// From the start of the last 1% of the disk (inside the innermost zone on every
    /// built-in model).
    Inner,
}

/// Why a prediction cannot be made.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PredictError {
    #[error(transparent)]
    Drive(#[from] DriveError),
    #[error("an iodepth of {0} is out of range: use 1 to {MAX_IODEPTH}")]
    IoDepth(u32),
    #[error(
        "a block of {block_bytes} bytes is not a positive multiple of the {sector_bytes}-byte sector below 32 MiB"
    )]
    Block { block_bytes: u64, sector_bytes: u64 },
    #[error("the range {start}..{end} holds no whole block of the {capacity}-byte disk")]
    Span { start: u64, end: u64, capacity: u64 },
    #[error("{0} commands is out of range: use 1 to {MAX_COMMANDS}")]
    Commands(u64),
}

/// Random reads of `block_bytes` at block-aligned offsets in `span` (bytes; the whole
/// disk is `0..capacity`), `commands` of them, `iodepth` outstanding, on a drive with
/// a command queue of `ncq`.
pub fn random_read(
    model: &DiskModel,
    ncq: u32,
    iodepth: u32,
    block_bytes: u64,
    span: Range<u64>,
    commands: u64,
    seed: u64,
) -> Result<Prediction, PredictError> {
    let sector = model.sector_bytes as u64;
    check(model, ncq, iodepth, block_bytes, commands)?;
    let capacity = model.capacity_bytes();
    let end = span.end.min(capacity);
    let first_block = span.start.div_ceil(block_bytes);
    let blocks = (end / block_bytes).saturating_sub(first_block);
    if span.start >= end || blocks == 0 {
        return Err(PredictError::Span {
            start: span.start,
            end: span.end,
            capacity,
        });
    }
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let sectors = (block_bytes / sector) as u32;
    let next = move |_: u64| {
        let block = first_block + rng.next_u64() % blocks;
        CommandKind::Read {
            lba: block * block_bytes / sector,
            sectors,
        }
    };
    run(model, ncq, iodepth, block_bytes, commands, seed, next)
}

/// Sequential reads of `block_bytes` from `at`, `bytes` in all (rounded up to whole
/// blocks, stopping at the end of the disk), `iodepth` outstanding.
pub fn sequential_read(
    model: &DiskModel,
    ncq: u32,
    iodepth: u32,
    block_bytes: u64,
    at: Edge,
    bytes: u64,
    seed: u64,
) -> Result<Prediction, PredictError> {
    let sector = model.sector_bytes as u64;
    let commands = bytes.div_ceil(block_bytes.max(1));
    check(model, ncq, iodepth, block_bytes, commands)?;
    let start_lba = match at {
        Edge::Outer => 0,
        Edge::Inner => model.lbas - model.lbas / 100,
    };
    let sectors = block_bytes / sector;
    let fits = (model.lbas - start_lba) / sectors;
    if fits == 0 {
        return Err(PredictError::Span {
            start: start_lba * sector,
            end: model.capacity_bytes(),
            capacity: model.capacity_bytes(),
        });
    }
    let next = move |i: u64| CommandKind::Read {
        lba: start_lba + i * sectors,
        sectors: sectors as u32,
    };
    run(
        model,
        ncq,
        iodepth,
        block_bytes,
        commands.min(fits),
        seed,
        next,
    )
}

/// The mean service time of one random read of `block_bytes` in `span` (bytes) at
/// queue depth 1, in ns, from the model's parameters: command overhead + the mean seek
/// between two uniformly random LBAs of the span (a grid of `SEEK_GRID` points
/// squared, each LBA mapped to its cylinder) + half a revolution + the transfer at the
/// span's harmonic mean media rate (a 4 KiB read stays on one track almost always, so
/// the media rate, not the sustained one, applies). 1e9 over it is the IOPS.
pub fn random_read_qd1_analytic(model: &DiskModel, block_bytes: u64, span: Range<u64>) -> f64 {
    let geo = Geometry::from_model(model);
    let sector = geo.sector_bytes();
    let first = span.start / sector;
    let last = (span.end / sector).min(geo.lbas()).max(first + 1);
    let points: Vec<u64> = (0..SEEK_GRID)
        .map(|k| first + (last - first) * (2 * k + 1) / (2 * SEEK_GRID))
        .collect();
    let cylinders: Vec<u64> = points.iter().map(|&l| geo.locate(l).cylinder).collect();
    let seek = SeekCurve::from_model(model, geo.cylinders()).unwrap_or(SeekCurve {
        x0: 1.0,
        t1_ms: model.seek_ms.track,
        b_ms: 0.0,
        c_ms: model.seek_ms.track,
        e_ms: model.seek_ms.full - model.seek_ms.track,
    });
    let mut seek_sum = 0.0;
    for &a in &cylinders {
        for &b in &cylinders {
            seek_sum += seek.seek_ns(a.abs_diff(b), geo.cylinders());
        }
    }
    let mean_seek_ns = seek_sum / (cylinders.len() * cylinders.len()) as f64;
    let transfer_ns = points
        .iter()
        .map(|&l| block_bytes as f64 / geo.media_rate_bytes_per_s(geo.zone_of(l)) * 1e9)
        .sum::<f64>()
        / points.len() as f64;
    model.command_overhead_ms * 1e6 + mean_seek_ns + geo.rotation_ns() / 2.0 + transfer_ns
}

fn check(
    model: &DiskModel,
    ncq: u32,
    iodepth: u32,
    block_bytes: u64,
    commands: u64,
) -> Result<(), PredictError> {
    if !(1..=MAX_NCQ).contains(&ncq) {
        return Err(DriveError::QueueDepth(ncq).into());
    }
    if !(1..=MAX_IODEPTH).contains(&iodepth) {
        return Err(PredictError::IoDepth(iodepth));
    }
    let sector = model.sector_bytes as u64;
    if block_bytes == 0 || !block_bytes.is_multiple_of(sector) || block_bytes >= MAX_BLOCK_BYTES {
        return Err(PredictError::Block {
            block_bytes,
            sector_bytes: sector,
        });
    }
    if !(1..=MAX_COMMANDS).contains(&commands) {
        return Err(PredictError::Commands(commands));
    }
    Ok(())
}

/// The closed loop: `iodepth` commands outstanding until `commands` have been issued;
/// `next(i)` is the `i`-th command.
fn run(
    model: &DiskModel,
    ncq: u32,
    iodepth: u32,
    block_bytes: u64,
    commands: u64,
    seed: u64,
    mut next: impl FnMut(u64) -> CommandKind,
) -> Result<Prediction, PredictError> {
    let mut drive = Drive::new(model, ncq, seed)?;
    let mut issued = 0;
    while issued < commands.min(iodepth as u64) {
        drive.arrive(0, command(issued, next(issued)));
        issued += 1;
    }
    let (mut done, mut latency_sum_ns, mut latency_max_ns, mut last_ns) = (0u64, 0u64, 0, 0);
    while let Some(t) = drive.next_completion_ns() {
        for row in drive.complete(t) {
            done += 1;
            let latency = row.end_ns - row.arrival_ns;
            latency_sum_ns += latency;
            latency_max_ns = latency_max_ns.max(latency);
            last_ns = row.end_ns;
            if issued < commands {
                drive.arrive(t, command(issued, next(issued)));
                issued += 1;
            }
        }
    }
    assert_eq!(done, commands, "every command issued completes");
    let elapsed_s = last_ns.max(1) as f64 / 1e9;
    Ok(Prediction {
        iops: done as f64 / elapsed_s,
        mb_per_s: (done * block_bytes) as f64 / elapsed_s / 1e6,
        mean_latency_ms: latency_sum_ns as f64 / done as f64 / 1e6,
        max_latency_ms: latency_max_ns as f64 / 1e6,
        commands: done,
        aged_commands: drive.aged_commands(),
        elapsed_s,
    })
}

fn command(id: u64, kind: CommandKind) -> Command {
    Command { id, kind }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KIB: u64 = 1024;
    const MIB: u64 = 1024 * 1024;

    fn whole(m: &DiskModel) -> Range<u64> {
        0..m.capacity_bytes()
    }

    #[test]
    fn qd1_random_reads_agree_with_the_analytic_figure() {
        for name in ["avfs-250g", "nvr-8t", "laptop-5400"] {
            let m = DiskModel::builtin(name).unwrap();
            let p = random_read(&m, 32, 1, 4 * KIB, whole(&m), 20_000, 1).unwrap();
            let analytic_iops = 1e9 / random_read_qd1_analytic(&m, 4 * KIB, whole(&m));
            eprintln!(
                "{name}: QD1 {:.1} IOPS ({:.2} ms), analytic {analytic_iops:.1}",
                p.iops, p.mean_latency_ms
            );
            assert!(
                (p.iops - analytic_iops).abs() / analytic_iops < 0.03,
                "{name}: {} vs {analytic_iops}",
                p.iops
            );
            // At queue depth 1 the latency is the service time.
            assert!((p.iops * p.mean_latency_ms / 1e3 - 1.0).abs() < 1e-3);
        }
    }

    #[test]
    fn ncq_32_gains_on_random_reads_over_the_full_stroke() {
        for name in ["avfs-250g", "nvr-8t"] {
            let m = DiskModel::builtin(name).unwrap();
            let qd1 = random_read(&m, 32, 1, 4 * KIB, whole(&m), 20_000, 1).unwrap();
            let qd32 = random_read(&m, 32, 32, 4 * KIB, whole(&m), 20_000, 1).unwrap();
            let fifo = random_read(&m, 1, 32, 4 * KIB, whole(&m), 20_000, 1).unwrap();
            let gain = qd32.iops / qd1.iops;
            eprintln!(
                "{name}: QD1 {:.1}, QD32 NCQ {:.1} ({gain:.2}x, {:.1} ms mean, {:.1} ms max, {} aged), QD32 no NCQ {:.1} IOPS",
                qd1.iops, qd32.iops, qd32.mean_latency_ms, qd32.max_latency_ms, qd32.aged_commands, fifo.iops
            );
            assert!((1.5..=3.0).contains(&gain), "{name}: {gain}");
            // Without NCQ a deeper host queue gains nothing: the same arrival order.
            assert!((fifo.iops / qd1.iops - 1.0).abs() < 0.03, "{name}");
            // Little's law: 32 outstanding.
            assert!((qd32.iops * qd32.mean_latency_ms / 1e3 - 32.0).abs() < 0.5);
        }
    }

    #[test]
    fn sequential_reads_run_at_the_zone_rates() {
        for name in ["avfs-250g", "nvr-8t", "laptop-5400"] {
            let m = DiskModel::builtin(name).unwrap();
            let geo = Geometry::from_model(&m);
            for (edge, rate) in [
                (Edge::Outer, geo.outer_rate_bytes_per_s()),
                (Edge::Inner, geo.inner_rate_bytes_per_s()),
            ] {
                for iodepth in [1, 4] {
                    let p = sequential_read(&m, 32, iodepth, MIB, edge, 512 * MIB, 1).unwrap();
                    let want = rate / 1e6;
                    eprintln!(
                        "{name} {edge:?} QD{iodepth}: {:.1} MB/s, zone {want:.1}",
                        p.mb_per_s
                    );
                    assert!(
                        (p.mb_per_s - want).abs() / want < 0.03,
                        "{name} {edge:?} QD{iodepth}: {} vs {want}",
                        p.mb_per_s
                    );
                }
            }
        }
    }

    #[test]
    fn same_seed_same_prediction_and_bad_input_is_an_error() {
        let m = DiskModel::builtin("avfs-250g").unwrap();
        let a = random_read(&m, 32, 8, 4 * KIB, whole(&m), 2_000, 5).unwrap();
        assert_eq!(
            a,
            random_read(&m, 32, 8, 4 * KIB, whole(&m), 2_000, 5).unwrap()
        );
        assert_ne!(
            a,
            random_read(&m, 32, 8, 4 * KIB, whole(&m), 2_000, 6).unwrap()
        );
        // A narrow span seeks less than the full stroke.
        let narrow = random_read(&m, 32, 8, 4 * KIB, 0..GIB, 2_000, 5).unwrap();
        assert!(narrow.iops > a.iops);
        let bad = |r: Result<Prediction, PredictError>| r.unwrap_err();
        assert!(matches!(
            bad(random_read(&m, 0, 1, 4 * KIB, whole(&m), 10, 1)),
            PredictError::Drive(DriveError::QueueDepth(0))
        ));
        assert!(matches!(
            bad(random_read(&m, 32, 0, 4 * KIB, whole(&m), 10, 1)),
            PredictError::IoDepth(0)
        ));
        assert!(matches!(
            bad(random_read(&m, 32, 1, 1000, whole(&m), 10, 1)),
            PredictError::Block { .. }
        ));
        assert!(matches!(
            bad(random_read(&m, 32, 1, 4 * KIB, 10..20, 10, 1)),
            PredictError::Span { .. }
        ));
        assert!(matches!(
            bad(random_read(&m, 32, 1, 4 * KIB, whole(&m), 0, 1)),
            PredictError::Commands(0)
        ));
        assert!(matches!(
            bad(sequential_read(&m, 32, 1, 0, Edge::Outer, MIB, 1)),
            PredictError::Block { .. }
        ));
    }

    const GIB: u64 = 1 << 30;
}
