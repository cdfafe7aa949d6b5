//! A run's report (AVFS 2.2): the completion-margin distribution and its CDF, the miss
//! probability P0, the mean time between glitches per stream, disk utilization and
//! energy, throughput, best-effort latency and the seek-distance distribution, from what the
//! engine's [`crate::qos::Recorder`] noted. The report's field names are the JSON keys
//! of `dvrfs sim --json` and `dvrfs bench --json`.

use super::SimOutcome;
use crate::qos::MissCauses;
use serde::Serialize;

/// Quantiles of the completion margin, in milliseconds (`p0001` is the 0.01% quantile:
/// one request in ten thousand completes with less margin).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct MarginMs {
    pub min: f64,
    pub p0001: f64,
    pub p001: f64,
    pub p01: f64,
    pub p50: f64,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct LatencyMs {
    pub p50: f64,
    pub p99: f64,
}

/// Mean time per device command, by component, in milliseconds.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct CommandMs {
    pub count: u64,
    pub seek: f64,
    pub rotation: f64,
    pub transfer: f64,
    pub overhead: f64,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct CountersReport {
    pub inserted: u64,
    pub dispatched: u64,
    pub completed: u64,
    pub failed: u64,
}

/// The delete generator's unlink.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct DeleteReport {
    pub bytes: u64,
    /// Run time when the unlink was submitted.
    pub submitted_s: f64,
    /// From submission to completion (`null`: not done when the run ended).
    pub unlink_ms: Option<f64>,
}

/// What retention did in a run with `--retention` (each key absent without it):
/// top-level keys of the report.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct RetentionKeys {
    /// Bytes and chunks deleted.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retention_deleted_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retention_deleted_chunks: Option<u64>,
    /// Seconds above the high mark with nothing left that retention could delete
    /// (protected, open or no chunks).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retention_shortfall_s: Option<f64>,
    /// Commits that carried deletions, the most chunks one carried, and the largest
    /// such commit's journal write, KiB.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retention_commits: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retention_commit_max_chunks: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retention_commit_max_kib: Option<f64>,
    /// Chunks the recordings started.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub chunks_started: Option<u64>,
    /// Every stream at the end of the run (`--retention`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retention_streams: Option<Vec<StreamEnd>>,
}

impl RetentionKeys {
    fn of(o: &SimOutcome) -> RetentionKeys {
        let Some(r) = &o.retention else {
            return RetentionKeys::default();
        };
        let f = &r.figures;
        RetentionKeys {
            retention_deleted_bytes: Some(f.deleted_bytes),
            retention_deleted_chunks: Some(f.deleted_chunks),
            retention_shortfall_s: Some(f.shortfall_ns as f64 / 1e9),
            retention_commits: Some(f.commits),
            retention_commit_max_chunks: Some(f.commit_max_chunks),
            retention_commit_max_kib: Some(f.commit_max_journal_bytes as f64 / 1024.0),
            chunks_started: Some(r.chunks_started),
            retention_streams: Some(
                r.streams_end
                    .iter()
                    .map(|(path, bytes, chunks)| StreamEnd {
                        path: path.clone(),
                        bytes: *bytes,
                        chunks: *chunks,
                    })
                    .collect(),
            ),
        }
    }
}

/// A stream at the end of a run with retention: its directory, its chunks'
/// lengths added up, its chunks.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct StreamEnd {
    pub path: String,
    pub bytes: u64,
    pub chunks: u64,
}

/// One run, as `dvrfs sim --json` prints it.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Report {
    pub workload: String,
    pub scheduler: String,
    pub alloc: String,
    pub disk: String,
    pub duration_s: f64,
    pub streams: u32,
    pub rt_requests: u64,
    pub deadline_misses: u64,
    /// The misses by cause: late, failed reads, requests a stream could not issue.
    pub misses: MissCauses,
    pub failed_reads: u64,
    /// Recordings that stopped before the end (the disk was full, or admission
    /// refused an engine-stream recording): every request they could not issue is
    /// counted in `deadline_misses` (cause `no_space` for a full disk).
    pub recordings_stopped: u32,
    /// Of them, the recordings admission refused (`--stream-recordings`).
    pub recordings_refused: u32,
    /// The most of the data region in use at once over the run (blocks in use and
    /// held for recordings), in percent.
    pub usage_max_pct: f64,
    /// `--retention`: what retention did (keys absent in a run without it).
    #[serde(flatten)]
    pub retention: RetentionKeys,
    /// `--best-effort delete`: the file it deleted (`null` for other generators).
    pub delete: Option<DeleteReport>,
    pub p_miss: f64,
    pub margin_ms: MarginMs,
    /// Stream-hours per glitch, in seconds (`null` without glitches).
    pub mean_time_between_glitches_s: Option<f64>,
    pub utilization: f64,
    /// The disk's energy over the run, in joules, and its mean power, in watts, from
    /// the model's `power` figures (`disk/power.rs`); `null` when the model has none
    /// (or `bench` runs on a real device).
    pub disk_energy_j: Option<f64>,
    pub disk_power_w: Option<f64>,
    pub rt_throughput_mbps: f64,
    /// Best-effort bytes over the whole run, and over the time the generator was active
    /// (first submission to last completion: the copy's own speed).
    pub be_throughput_mbps: f64,
    pub be_active_s: f64,
    pub be_active_throughput_mbps: f64,
    pub be_latency_ms: LatencyMs,
    /// The best-effort guarantee: the configured share of disk time and latency
    /// target, the share measured while best-effort had work, and whether both held.
    pub be_share: f64,
    pub be_latency_target_ms: f64,
    pub be_share_measured: f64,
    pub be_guarantee_met: bool,
    /// Journal and checkpoint commands and bytes, commits and flushes.
    pub journal_requests: u64,
    pub journal_mbytes: f64,
    pub commits: u64,
    pub flushes: u64,
    /// Share of consecutive disk commands that start within 5 GB of where the previous
    /// one ended.
    pub seek_within_5gb: f64,
    pub mean_seek_distance_gb: f64,
    pub command_ms: CommandMs,
    /// Reads served whole, or in part, from the drive's read-ahead cache.
    pub cache_hits: u64,
    pub cache_partial_hits: u64,
    pub fill_bytes: u64,
    pub seed: u64,
    pub counters: CountersReport,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_streams: Option<u32>,
    /// `--find-max`: the counts around the answer and whether each passed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub neighbours: Option<Vec<Neighbour>>,
    /// `--seeds` with `--find-max`: the answer per seed and their median (the top-level
    /// `max_streams` is the minimum).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_streams_median: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_streams_by_seed: Option<Vec<(u64, u32)>>,
    /// `--seeds` without `--find-max`: one line per seed (the top-level figures are
    /// the worst run's).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub runs_by_seed: Option<Vec<SeedRun>>,
    /// The policy's own counters (batches, holds, windows, ...).
    pub policy: std::collections::BTreeMap<String, u64>,
    /// `--stream-recordings`: the recordings were engine streams (`null` otherwise).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stream_recordings: Option<StreamRecordingsReport>,
}

/// Recordings made as engine streams (`dvrfs sim --stream-recordings`): their
/// durability interval and application frame, and what their disk requests did.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct StreamRecordingsReport {
    pub durable_s: Option<f64>,
    pub frame_ms: f64,
    /// Disk requests the engine wrote for them (whole and partial).
    pub requests: u64,
    /// Landed after the buffer would have overflowed: misses of the streams'
    /// guarantee.
    pub late: u64,
    /// Landed after the commit they were due for (bytes durable one commit late).
    pub durability_late: u64,
    /// Bytes of partial requests logged in the commits' tail-log batches instead of
    /// written in place, and gathers written in place because the ring was full
    /// (`engine/tail_log.rs`; 0 on a volume without the log, `--no-tail-log`).
    pub tail_logged_bytes: u64,
    pub tail_log_full: u64,
}

/// One neighbour of a `--find-max` answer.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Neighbour {
    pub streams: u32,
    pub passed: bool,
}

/// One seed of a `--seeds` run.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SeedRun {
    pub seed: u64,
    pub deadline_misses: u64,
    pub margin_min_ms: f64,
    pub utilization: f64,
    pub disk_energy_j: Option<f64>,
    pub disk_power_w: Option<f64>,
    pub be_throughput_mbps: f64,
    pub recordings_stopped: u32,
    pub usage_max_pct: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retention_deleted_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retention_commit_max_chunks: Option<u64>,
}

/// The `q` quantile of sorted values (nearest rank).
pub fn quantile<T: Copy>(sorted: &[T], q: f64) -> Option<T> {
    if sorted.is_empty() {
        return None;
    }
    let i = ((sorted.len() - 1) as f64 * q).floor() as usize;
    Some(sorted[i.min(sorted.len() - 1)])
}

fn ms(ns: i64) -> f64 {
    ns as f64 / 1e6
}

impl Report {
    /// Builds the report; `workload`, `alloc` and the run length come from the caller.
    pub fn new(o: &SimOutcome, workload: &str, alloc: &str, duration_ns: u64, seed: u64) -> Report {
        let mut margins = o.margins_ns.clone();
        margins.sort_unstable();
        let q = |x: f64| quantile(&margins, x).map_or(0.0, ms);
        let mut lat = o.be_latencies_ns.clone();
        lat.sort_unstable();
        let ql = |x: f64| quantile(&lat, x).map_or(0.0, |v| v as f64 / 1e6);
        let elapsed_s = (o.elapsed_ns.max(1)) as f64 / 1e9;
        let duration_s = duration_ns as f64 / 1e9;
        let within = o
            .seek_distances_bytes
            .iter()
            .filter(|&&d| d <= 5_000_000_000)
            .count();
        let seeks = o.seek_distances_bytes.len().max(1) as f64;
        Report {
            workload: workload.to_string(),
            scheduler: o.scheduler.clone(),
            alloc: alloc.to_string(),
            disk: o.disk.clone(),
            duration_s,
            streams: o.streams,
            rt_requests: o.rt_requests,
            deadline_misses: o.deadline_misses,
            misses: o.misses,
            failed_reads: o.failed_reads,
            recordings_stopped: o.recordings_stopped,
            recordings_refused: o.recordings_refused,
            usage_max_pct: o.usage_max_bytes as f64 * 100.0 / o.data_bytes.max(1) as f64,
            retention: RetentionKeys::of(o),
            delete: o.delete.map(|d| DeleteReport {
                bytes: d.bytes,
                submitted_s: d.submit_ns as f64 / 1e9,
                unlink_ms: d
                    .done_ns
                    .map(|t| t.saturating_sub(d.submit_ns) as f64 / 1e6),
            }),
            p_miss: if o.rt_requests == 0 {
                0.0
            } else {
                o.deadline_misses as f64 / o.rt_requests as f64
            },
            margin_ms: MarginMs {
                min: q(0.0),
                p0001: q(0.0001),
                p001: q(0.001),
                p01: q(0.01),
                p50: q(0.5),
            },
            mean_time_between_glitches_s: (o.deadline_misses > 0)
                .then(|| o.streams as f64 * duration_s / o.deadline_misses as f64),
            utilization: o.busy_ns as f64 / o.elapsed_ns.max(1) as f64,
            disk_energy_j: o.disk_energy.map(|e| e.joules),
            disk_power_w: o.disk_energy.map(|e| e.mean_w()),
            rt_throughput_mbps: o.rt_bytes as f64 * 8.0 / elapsed_s / 1e6,
            be_throughput_mbps: o.be_bytes as f64 * 8.0 / elapsed_s / 1e6,
            be_active_s: o
                .be_first_submit_ns
                .map_or(0.0, |f| o.be_last_done_ns.saturating_sub(f) as f64 / 1e9),
            be_active_throughput_mbps: o.be_first_submit_ns.map_or(0.0, |f| {
                o.be_bytes as f64 * 8.0
                    / (o.be_last_done_ns.saturating_sub(f).max(1) as f64 / 1e9)
                    / 1e6
            }),
            be_latency_ms: LatencyMs {
                p50: ql(0.5),
                p99: ql(0.99),
            },
            be_share: o.be_share,
            be_latency_target_ms: o.be_latency_target_ns as f64 / 1e6,
            be_share_measured: o.be_stats.share(),
            be_guarantee_met: o.be_guarantee_met(),
            journal_requests: o.journal_requests,
            journal_mbytes: o.journal_bytes as f64 / 1e6,
            commits: o.commits,
            flushes: o.flushes,
            seek_within_5gb: within as f64 / seeks,
            mean_seek_distance_gb: o
                .seek_distances_bytes
                .iter()
                .map(|&d| d as f64)
                .sum::<f64>()
                / seeks
                / 1e9,
            command_ms: {
                let n = o.commands.max(1) as f64;
                CommandMs {
                    count: o.commands,
                    seek: o.seek_ns as f64 / n / 1e6,
                    rotation: o.rotation_ns as f64 / n / 1e6,
                    transfer: o.transfer_ns as f64 / n / 1e6,
                    overhead: o.overhead_ns as f64 / n / 1e6,
                }
            },
            cache_hits: o.cache_hits,
            cache_partial_hits: o.cache_partial_hits,
            fill_bytes: o.used_bytes_at_start,
            seed,
            counters: CountersReport {
                inserted: o.counters.inserted,
                dispatched: o.counters.dispatched,
                completed: o.counters.completed,
                failed: o.counters.failed,
            },
            max_streams: None,
            neighbours: None,
            max_streams_median: None,
            max_streams_by_seed: None,
            runs_by_seed: None,
            policy: o
                .policy_stats
                .iter()
                .map(|(k, v)| (k.to_string(), *v))
                .collect(),
            stream_recordings: o.stream_recordings.map(|r| StreamRecordingsReport {
                durable_s: r.durable_ns.map(|d| d as f64 / 1e9),
                frame_ms: r.frame_ns as f64 / 1e6,
                requests: o.stream_requests,
                late: o.stream_late,
                durability_late: o.stream_durability_late,
                tail_logged_bytes: o.stream_tail_logged_bytes,
                tail_log_full: o.stream_tail_log_full,
            }),
        }
    }
}

/// The completion-margin CDF as (margin ms, P(margin <= x)) points, thinned to at most
/// `points` points but keeping the whole lower tail (where misses live).
pub fn margin_cdf(margins_ns: &[i64], points: usize) -> Vec<(f64, f64)> {
    let mut m = margins_ns.to_vec();
    m.sort_unstable();
    let n = m.len();
    if n == 0 {
        return vec![];
    }
    let step = (n / points.max(1)).max(1);
    let mut out = Vec::new();
    for (i, &v) in m.iter().enumerate() {
        if i < 1000 || i % step == 0 || i == n - 1 {
            out.push((ms(v), (i + 1) as f64 / n as f64));
        }
    }
    out
}

impl SimOutcome {
    /// Whether best-effort got its guaranteed share and met its latency target while
    /// it had work (true when there was no best-effort work).
    pub fn be_guarantee_met(&self) -> bool {
        if self.be_stats.active_ns == 0 || self.be_share <= 0.0 {
            return true;
        }
        let mut lat = self.be_latencies_ns.clone();
        lat.sort_unstable();
        let p99 = quantile(&lat, 0.99).unwrap_or(0);
        self.be_stats.share() >= self.be_share * BE_SHARE_TOLERANCE
            && p99 <= self.be_latency_target_ns
    }
}

/// A run counts the guarantee as met at this fraction of the configured share: the
/// share is enforced between commands, so the last command before a measurement edge
/// can shift it by one command's time.
pub const BE_SHARE_TOLERANCE: f64 = 0.95;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_use_nearest_rank() {
        let v: Vec<i64> = (0..10_000).collect();
        assert_eq!(quantile(&v, 0.0), Some(0));
        assert_eq!(quantile(&v, 0.0001), Some(0));
        assert_eq!(quantile(&v, 0.001), Some(9));
        assert_eq!(quantile(&v, 0.5), Some(4999));
        assert_eq!(quantile::<i64>(&[], 0.5), None);
    }

    #[test]
    fn report_counts_misses_and_glitch_interval() {
        let o = SimOutcome {
            elapsed_ns: 10_000_000_000,
            streams: 2,
            rt_requests: 4,
            deadline_misses: 1,
            margins_ns: vec![-5_000_000, 100_000_000, 200_000_000, 300_000_000],
            busy_ns: 2_500_000_000,
            ..Default::default()
        };
        let r = Report::new(&o, "2r", "zrr", 10_000_000_000, 1);
        assert_eq!(r.p_miss, 0.25);
        assert_eq!(r.margin_ms.min, -5.0);
        assert_eq!(r.utilization, 0.25);
        assert_eq!(r.mean_time_between_glitches_s, Some(20.0));
        let cdf = margin_cdf(&o.margins_ns, 100);
        assert_eq!(cdf[0], (-5.0, 0.25));
        assert_eq!(cdf.last().unwrap().1, 1.0);
    }
}
