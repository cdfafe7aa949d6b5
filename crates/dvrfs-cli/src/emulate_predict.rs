//! `dvrfs emulate --model M --predict`: what the disk model predicts for the four fio
//! checks of docs/emulate.md, computed by running the drive (`disk::predict`) in
//! virtual time, so `scripts/emulate-fio.sh` can put fio's figures beside them.
//!
//! The checks, as the script runs them on the emulated loop device: random 4 KiB
//! reads over the whole disk at queue depth 1 and at queue depth 32 (the drive's
//! `--ncq`), and sequential 1 MiB reads at queue depth 4 from the outer edge (LBA 0)
//! and from the inner edge (the start of the last 1% of the disk).

use dvrfs_core::disk::geometry::Geometry;
use dvrfs_core::disk::predict::{self, Edge, Prediction};
use serde_json::json;

use crate::error::{CliError, CliResult};

/// Commands per random-read prediction (enough for the mean to settle within 1%).
const RANDOM_COMMANDS: u64 = 20_000;
/// Bytes per sequential prediction (what the script reads: 2 GiB).
pub const SEQUENTIAL_BYTES: u64 = 2 << 30;
/// The sequential checks' request size and queue depth.
pub const SEQUENTIAL_BLOCK: u64 = 1 << 20;
pub const SEQUENTIAL_IODEPTH: u32 = 4;
const SEED: u64 = 1;

pub fn predict(model_name: Option<&str>, ncq: u32, as_json: bool) -> CliResult<u8> {
    let name = model_name.ok_or_else(|| {
        CliError::usage(
            "--predict needs --model",
            "give a built-in model (avfs-250g, nvr-8t, laptop-5400) or a model JSON file",
        )
    })?;
    let model = crate::cmd_sim::load_disk(name)?;
    crate::args::check_range("--ncq", ncq, 1..=dvrfs_core::disk::drive::MAX_NCQ)?;
    let cap = model.capacity_bytes();
    let failed =
        |e: predict::PredictError| CliError::new(format!("cannot predict for {name}: {e}"));
    let rand =
        |depth| predict::random_read(&model, ncq, depth, 4096, 0..cap, RANDOM_COMMANDS, SEED);
    let seq = |edge| {
        predict::sequential_read(
            &model,
            ncq,
            SEQUENTIAL_IODEPTH,
            SEQUENTIAL_BLOCK,
            edge,
            SEQUENTIAL_BYTES,
            SEED,
        )
    };
    let qd1 = rand(1).map_err(failed)?;
    let qd32 = rand(32).map_err(failed)?;
    let outer = seq(Edge::Outer).map_err(failed)?;
    let inner = seq(Edge::Inner).map_err(failed)?;
    let analytic_iops = 1e9 / predict::random_read_qd1_analytic(&model, 4096, 0..cap);
    let geo = Geometry::from_model(&model);
    let zone_outer = geo.outer_rate_bytes_per_s() / 1e6;
    let zone_inner = geo.inner_rate_bytes_per_s() / 1e6;
    let inner_offset = (model.lbas - model.lbas / 100) * model.sector_bytes as u64;
    if as_json {
        let p = |x: &Prediction| json!({"iops": x.iops, "mb_per_s": x.mb_per_s, "mean_latency_ms": x.mean_latency_ms, "max_latency_ms": x.max_latency_ms});
        let v = json!({
            "model": name,
            "capacity_bytes": cap,
            "sector_bytes": model.sector_bytes,
            "ncq": ncq,
            "random_4k_qd1": p(&qd1),
            "random_4k_qd1_analytic_iops": analytic_iops,
            "random_4k_qd32": p(&qd32),
            "sequential_outer": p(&outer),
            "sequential_inner": p(&inner),
            "inner_offset_bytes": inner_offset,
            "zone_outer_mb_per_s": zone_outer,
            "zone_inner_mb_per_s": zone_inner,
        });
        crate::output::print_json(&v);
        return Ok(0);
    }
    println!(
        "{name}: {cap} bytes, drive queue {ncq}; the model predicts (virtual time, seed {SEED}):"
    );
    println!(
        "  random 4 KiB reads, queue depth 1:   {:7.1} IOPS (mean {:.2} ms; analytic {:.1} IOPS)",
        qd1.iops, qd1.mean_latency_ms, analytic_iops
    );
    println!(
        "  random 4 KiB reads, queue depth 32:  {:7.1} IOPS (mean {:.2} ms, worst {:.0} ms)",
        qd32.iops, qd32.mean_latency_ms, qd32.max_latency_ms
    );
    println!(
        "  sequential 1 MiB reads, outer edge:  {:7.1} MB/s (zone rate {zone_outer:.1})",
        outer.mb_per_s
    );
    println!(
        "  sequential 1 MiB reads, inner edge:  {:7.1} MB/s (zone rate {zone_inner:.1}; from byte {inner_offset})",
        inner.mb_per_s
    );
    Ok(0)
}
