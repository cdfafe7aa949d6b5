//! The report of a `bench --dir` run: `sim`'s and `bench`'s report (the same keys,
//! from the same `Report`), with every figure that cannot be known from above
//! another file system set to null rather than guessed (the disk commands, their
//! seeks and split, the dvrfs scheduler's and journal's own figures), utilization
//! and energy from the emulator when the directory is on one, and the keys of its
//! own: where it ran and how (`dir`, `direct`, `ioprio`, `page_cache_dropped`, the
//! fsyncs).

use serde_json::{json, Value};

use dvrfs_core::sim::report::Report;

use super::host::SyncCounts;
use crate::error::{CliError, CliResult};

/// Keys of `Report` that only a dvrfs volume (its scheduler, journal or command
/// trace) can fill: null here.
const UNKNOWABLE: &[&str] = &[
    "seek_within_5gb",
    "mean_seek_distance_gb",
    "command_ms",
    "cache_hits",
    "cache_partial_hits",
    "journal_requests",
    "journal_mbytes",
    "commits",
    "flushes",
    "be_share",
    "be_latency_target_ms",
    "be_share_measured",
    "be_guarantee_met",
    "counters",
    "policy",
];

/// What the run measured beside the `Report`.
pub struct Extra {
    pub dir: String,
    pub direct: bool,
    pub ioprio: Option<String>,
    pub page_cache_dropped: bool,
    /// Utilization and energy (J) from the emulator, or why there are none.
    pub utilization: Option<f64>,
    pub energy_j: Option<f64>,
    pub no_emulator: Option<String>,
    pub fsync_every_s: Option<f64>,
    pub syncs: SyncCounts,
    pub elapsed_s: f64,
    pub prepare_s: f64,
}

/// The JSON report.
pub fn json(report: &Report, x: &Extra) -> CliResult<Value> {
    let mut v = serde_json::to_value(report)
        .map_err(|e| CliError::new(format!("cannot encode the report: {e}")))?;
    let o = v.as_object_mut().expect("a report is an object");
    for k in UNKNOWABLE {
        if o.contains_key(*k) {
            o.insert((*k).to_string(), Value::Null);
        }
    }
    o.insert("utilization".into(), json!(x.utilization));
    o.insert("disk_energy_j".into(), json!(x.energy_j));
    o.insert(
        "disk_power_w".into(),
        json!(x.energy_j.map(|e| e / x.elapsed_s.max(1e-9))),
    );
    o.insert("dir".into(), json!(x.dir));
    o.insert("direct".into(), json!(x.direct));
    o.insert("ioprio".into(), json!(x.ioprio));
    o.insert("page_cache_dropped".into(), json!(x.page_cache_dropped));
    o.insert("utilization_unknown_because".into(), json!(x.no_emulator));
    o.insert("fsync_every_s".into(), json!(x.fsync_every_s));
    o.insert("fsyncs".into(), json!(x.syncs.count));
    o.insert(
        "fsync_max_ms".into(),
        json!((x.syncs.count > 0).then(|| x.syncs.max_ns as f64 / 1e6)),
    );
    o.insert("prepare_s".into(), json!(x.prepare_s));
    Ok(v)
}

/// The text report.
pub fn print_text(r: &Report, x: &Extra) {
    outln!(
        "dvrfs bench --dir: {} in {} ({} on {}, {} scheduling), {:.0} s of wall-clock time",
        r.workload,
        x.dir,
        r.alloc,
        r.disk,
        r.scheduler,
        r.duration_s
    );
    outln!(
        "  I/O: {}{}{}",
        if x.direct { "O_DIRECT" } else { "buffered" },
        x.fsync_every_s.map_or(String::new(), |s| format!(
            ", fdatasync every {s} s ({} done)",
            x.syncs.count
        )),
        x.ioprio.as_ref().map_or(String::new(), |p| format!(
            ", stream threads in I/O class {p}"
        ))
    );
    outln!(
        "  real-time requests: {}, deadline misses: {} (late {}, disk full {}, other {}), p_miss {:.2e}",
        r.rt_requests,
        r.deadline_misses,
        r.misses.late,
        r.misses.no_space,
        r.misses.other,
        r.p_miss
    );
    outln!(
        "  margin: min {:.1} ms, 0.01% {:.1} ms, 1% {:.1} ms, median {:.1} ms",
        r.margin_ms.min,
        r.margin_ms.p0001,
        r.margin_ms.p01,
        r.margin_ms.p50
    );
    outln!(
        "  throughput: real-time {:.1} Mbit/s, best-effort {:.1} Mbit/s (latency median {:.1} ms, 99% {:.1} ms)",
        r.rt_throughput_mbps,
        r.be_throughput_mbps,
        r.be_latency_ms.p50,
        r.be_latency_ms.p99
    );
    match (x.utilization, &x.no_emulator) {
        (Some(u), _) => {
            let energy = x
                .energy_j
                .map_or(String::new(), |e| format!(", disk energy {e:.1} J"));
            outln!(
                "  disk utilization {:.1}% (from the emulator){energy}",
                u * 100.0
            )
        }
        (None, Some(why)) => outln!("  disk utilization: unknown ({why}: not on an emulated disk)"),
        (None, None) => outln!("  disk utilization: unknown"),
    }
    if !x.page_cache_dropped {
        outln!("  the page cache was not dropped: playbacks may have been served from memory");
    }
}
