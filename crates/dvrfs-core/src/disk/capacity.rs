//! Admission bounds: how many constant-rate streams a disk can carry.
//!
//! `dvrfs capacity` and stream admission report two bounds, from two different
//! arguments, and the scheduler is measured against them ("close to the bound that
//! `dvrfs capacity` computes from the physics").
//!
//! **(a) Bandwidth bound.** No schedule moves more bytes than the disk streams:
//!
//! ```text
//! bandwidth_bound_streams = floor(zone_avg_rate / stream_rate)
//! ```
//!
//! with `zone_avg_rate` the capacity-weighted harmonic mean of the zones' sustained
//! (skew-included) rates, i.e. what a disk whose streams are spread over all of it
//! (ZRR placement) delivers when it never seeks. It ignores positioning entirely, so
//! it is an upper bound no real scheduler reaches.
//!
//! **(b) Round bound**, after Özden et al. as used by the multimedia-server paper (the
//! raw-I/O streaming study in `seeds/001`, section 6): the server works in rounds; in
//! each round every one of q streams gets one request of d bytes, and a round must not
//! last longer than the playout time of d bytes:
//!
//! ```text
//! q * (d / r_disk + t_rot + t_settle) + 2 * t_seek <= d / r_disp
//! ```
//!
//! We take, as the paper does with its vendor figures:
//! - `d` = `request_bytes`, so the round is `round_ms = request_bytes / stream_rate`;
//! - `r_disk` = the sustained rate of the *innermost* used zone (the paper uses the
//!   inner-track rate): a round may well fall on the slowest zone, and a bound that
//!   admits a stream must hold for every round;
//! - `t_rot` = a *full* revolution (the paper's 8.33 ms at 7200 rpm is the worst-case
//!   rotational latency, not the mean half turn); with the write cache off this also
//!   covers the lost revolution of a write continuing the previous one;
//! - `t_settle` = command overhead + write settle (the paper's settle time is the
//!   per-request positioning cost beyond the sweep; a stream's direction is not known
//!   here, so the write settle is always charged);
//! - `2 * t_seek` = two full-stroke seeks per round: a C-SCAN sweep across the disk
//!   and the return (the paper's 2 x 17 ms), with the short seeks between neighbouring
//!   requests of the sweep folded into `t_settle`.
//!
//! The paper's own figures (r_disp 1.5 Mbit/s, r_disk 120 Mbit/s, t_settle 0.6 ms,
//! t_seek 17 ms, t_rot 8.33 ms, d = 1 MB) give q = 70; a test checks that we do too.
//!
//! **(b') Batched round bound** (`batched_round_bound_streams`), the same argument for a
//! scheduler that, like the AVFS traffic mixer, lets requests accumulate and serves a
//! stream's pending requests back to back in LBA order: with `depth` requests of
//! buffer per stream, a round can last the playout of `k = depth - 1` requests (one
//! request's worth of buffer is kept as slack for the stream being served late in the
//! round: the double-buffering of the round scheme), and a stream's k requests cost one
//! positioning and k transfers:
//!
//! ```text
//! q * (k * d / r_disk + t_rot + t_settle) + 2 * t_seek <= k * d / r_disp,  k = max(depth - 1, 1)
//! ```
//!
//! **The best-effort share.** The scheduler guarantees best-effort traffic a share
//! `s` of disk time while it has work (`--be-share`, default 0.1), so real-time
//! streams get at most `1 - s` of it: every bound is computed on `(1 - s)` of the
//! bandwidth and of each round (`*_full` fields: the same bounds without the share).
//!
//! **Recordings with a durability interval** ([`durable_bounds`]). A recording
//! hands over what it holds at least once per gather period `P` (its durability
//! interval in whole commit intervals), so its rounds last at most `P`; without a
//! tail log a slow one writes a short request of `rate x P` bytes per period, with
//! one it writes whole requests and the same bytes once more into the log: (b) and
//! (b') with the round cut to `P` and the bytes moved per round. For 250 kbit/s on
//! `nvr-8t` at `P` = 1 s this is a positioning a second per stream, a tenth of the
//! streams (b) gives whole requests (`docs/durability.md`, "What it costs").
//!
//! Everything is plain arithmetic on the model; invalid stream parameters (see
//! [`StreamParams::validate`]) give a report of zeros rather than a panic.

use serde::Serialize;

use super::admission::{Durability, StreamLoad};
use super::geometry::Geometry;
use super::model::DiskModel;
use super::seek::SeekCurve;

/// Streams are counted in `u32`; a bound above this is reported as this.
pub const MAX_STREAMS: u32 = u32::MAX;

/// The streams to admit: all alike.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct StreamParams {
    /// Stream rate, bits per second (19.39e6 for ATSC).
    pub bitrate_bps: f64,
    /// Bytes per request (512 KiB in the AVFS experiments).
    pub request_bytes: u64,
    /// Requests a stream may have outstanding (its buffer, in requests; AVFS: 8).
    pub depth: u32,
    /// Share of disk time reserved for best-effort traffic, 0 <= s < 1.
    pub be_share: f64,
}

impl StreamParams {
    /// Positive finite bit rate, non-zero request size and depth.
    pub fn validate(&self) -> Result<(), String> {
        if !(self.bitrate_bps.is_finite() && self.bitrate_bps > 0.0) {
            return Err(format!(
                "stream bit rate must be a positive number of bits per second, not {}",
                self.bitrate_bps
            ));
        }
        if self.request_bytes == 0 {
            return Err("request size must be at least one byte".to_string());
        }
        if self.depth == 0 {
            return Err("depth must be at least 1 request".to_string());
        }
        if !(self.be_share.is_finite() && (0.0..1.0).contains(&self.be_share)) {
            return Err(format!(
                "the best-effort share {} is outside 0..1",
                self.be_share
            ));
        }
        Ok(())
    }
}

/// What fits (see the module docs for the formulas).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CapacityReport {
    /// (a) floor((1 - s) * zone-averaged sustained rate / stream rate).
    pub bandwidth_bound_streams: u32,
    /// (b) the round bound with one request per stream per round.
    pub round_bound_streams: u32,
    /// (b') the round bound with depth - 1 requests per stream per round.
    pub batched_round_bound_streams: u32,
    /// The best-effort share s the bounds above leave free.
    pub be_share: f64,
    /// (a), (b) and (b') with the whole disk for the streams (s = 0).
    pub bandwidth_bound_streams_full: u32,
    pub round_bound_streams_full: u32,
    pub batched_round_bound_streams_full: u32,
    pub zone_avg_rate_bytes_per_s: f64,
    /// r_disk of the round bounds: the innermost used zone's sustained rate.
    pub inner_rate_bytes_per_s: f64,
    pub stream_rate_bytes_per_s: f64,
    /// Round length of (b): playout time of one request.
    pub round_ms: f64,
    /// Per-stream cost in a round of (b): d / r_disk + t_rot + t_settle.
    pub request_cost_ms: f64,
    /// 2 * t_seek (full stroke).
    pub sweep_seek_ms: f64,
    /// t_rot: a full revolution.
    pub rotation_ms: f64,
    /// t_settle: command overhead + write settle.
    pub settle_ms: f64,
    /// k of (b').
    pub batch_requests: u32,
    /// Round length of (b'): playout time of k requests.
    pub batched_round_ms: f64,
}

/// Both admission bounds for streams `p` on disk `model`.
pub fn capacity(model: &DiskModel, p: &StreamParams) -> CapacityReport {
    let geo = Geometry::from_model(model);
    let zone_avg = geo.zone_avg_rate_bytes_per_s();
    let inner = geo.inner_rate_bytes_per_s();
    let full_seek_ms = match SeekCurve::from_model(model, geo.cylinders()) {
        Ok(curve) => curve.time_ms(1.0),
        Err(_) => model.seek_ms.full,
    };
    let rotation_ms = geo.rotation_ns() / 1.0e6;
    let settle_ms = model.command_overhead_ms + model.write_settle_ms;
    let sweep_seek_ms = 2.0 * full_seek_ms;
    let k = p.depth.saturating_sub(1).max(1);
    let mut report = CapacityReport {
        bandwidth_bound_streams: 0,
        round_bound_streams: 0,
        batched_round_bound_streams: 0,
        be_share: p.be_share,
        bandwidth_bound_streams_full: 0,
        round_bound_streams_full: 0,
        batched_round_bound_streams_full: 0,
        zone_avg_rate_bytes_per_s: zone_avg,
        inner_rate_bytes_per_s: inner,
        stream_rate_bytes_per_s: 0.0,
        round_ms: 0.0,
        request_cost_ms: 0.0,
        sweep_seek_ms,
        rotation_ms,
        settle_ms,
        batch_requests: k,
        batched_round_ms: 0.0,
    };
    if p.validate().is_err() {
        return report;
    }
    let stream_rate = p.bitrate_bps / 8.0;
    let d = p.request_bytes as f64;
    let round_ms = d / stream_rate * 1.0e3;
    let transfer_ms = d / inner * 1.0e3;
    let request_cost_ms = transfer_ms + rotation_ms + settle_ms;
    let batched_round_ms = k as f64 * round_ms;
    let batched_cost_ms = k as f64 * transfer_ms + rotation_ms + settle_ms;
    report.stream_rate_bytes_per_s = stream_rate;
    report.round_ms = round_ms;
    report.request_cost_ms = request_cost_ms;
    report.batched_round_ms = batched_round_ms;
    let rt = 1.0 - p.be_share;
    report.bandwidth_bound_streams = to_count(rt * zone_avg / stream_rate);
    report.round_bound_streams = round_bound(rt * round_ms, sweep_seek_ms, request_cost_ms);
    report.batched_round_bound_streams =
        round_bound(rt * batched_round_ms, sweep_seek_ms, batched_cost_ms);
    report.bandwidth_bound_streams_full = to_count(zone_avg / stream_rate);
    report.round_bound_streams_full = round_bound(round_ms, sweep_seek_ms, request_cost_ms);
    report.batched_round_bound_streams_full =
        round_bound(batched_round_ms, sweep_seek_ms, batched_cost_ms);
    report
}

/// (b) and (b') for recordings with durability `dur`, as admission plans them
/// (`admission.rs`, "Recordings gather"): each period a stream gathers up to `rate x
/// period` bytes (whole sectors), written in place as a short request when its
/// request does not fill within the period, or with a tail log once more into the
/// log beside its whole requests (what it logs on average); a round lasts at most the
/// period, unless the stream logs every byte and its full requests are due at its
/// buffer's overflow.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct DurableBounds {
    /// What a stream gathers in a period, at most.
    pub gathered_bytes: u64,
    /// With a tail log, what a stream logs in a period on average (0 without).
    pub logged_bytes: f64,
    /// The request a stream writes in place per round of (b): a whole one, or
    /// without a tail log the short one of a period.
    pub request_bytes: u64,
    /// Round of (b): the playout time of a request, at most the period.
    pub round_ms: f64,
    pub round_bound_streams: u32,
    /// Round of (b'): the playout time of k requests, at most the period.
    pub batched_round_ms: f64,
    pub batched_round_bound_streams: u32,
    /// With a tail log, how many such recordings its ring holds for as long as each
    /// holds its tail (`StreamLoad::ring_hold_ns`; `None` without a log).
    pub ring_bound_streams: Option<u32>,
}

/// [`DurableBounds`] for streams `p` on disk `model` with durability `dur` (zeros
/// for invalid parameters or a period of 0).
pub fn durable_bounds(model: &DiskModel, p: &StreamParams, dur: Durability) -> DurableBounds {
    let r = capacity(model, p);
    let load = StreamLoad {
        rate_bytes_per_s: p.bitrate_bps / 8.0,
        request_bytes: p.request_bytes,
        depth: p.depth,
        durable: Some(dur),
    };
    let mut b = DurableBounds {
        gathered_bytes: load.gathered_bytes(),
        logged_bytes: load.logged_bytes_per_period(),
        request_bytes: load.written_request_bytes(),
        round_ms: 0.0,
        round_bound_streams: 0,
        batched_round_ms: 0.0,
        batched_round_bound_streams: 0,
        ring_bound_streams: dur.tail_log.then(|| {
            let need = load.ring_rate_bytes_per_s() * load.ring_hold_ns() / 1e9;
            to_count(dur.ring_bytes as f64 / need)
        }),
    };
    if p.validate().is_err() || dur.period_ns == 0 {
        return b;
    }
    // The period caps the round unless the full requests are due at the overflow.
    let cap_ms = if load.logs_all() {
        f64::INFINITY
    } else {
        dur.period_ns as f64 / 1e6
    };
    let transfer_rate = load.transfer_rate_bytes_per_s();
    let rt = 1.0 - p.be_share;
    let bound = |round_ms: f64| {
        let cost_ms =
            transfer_rate * round_ms / r.inner_rate_bytes_per_s + r.rotation_ms + r.settle_ms;
        round_bound(rt * round_ms, r.sweep_seek_ms, cost_ms)
    };
    b.round_ms = r.round_ms.min(cap_ms);
    b.round_bound_streams = bound(b.round_ms);
    b.batched_round_ms = r.batched_round_ms.min(cap_ms);
    b.batched_round_bound_streams = bound(b.batched_round_ms);
    b
}

/// Largest q with q * cost + sweep <= round.
fn round_bound(round_ms: f64, sweep_seek_ms: f64, cost_ms: f64) -> u32 {
    to_count((round_ms - sweep_seek_ms) / cost_ms)
}

/// floor(x) as a stream count, 0 for negative or NaN, saturating at [`MAX_STREAMS`].
fn to_count(x: f64) -> u32 {
    if x.is_nan() || x <= 0.0 {
        0
    } else if x >= MAX_STREAMS as f64 {
        MAX_STREAMS
    } else {
        x.floor() as u32
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn atsc() -> StreamParams {
        StreamParams {
            bitrate_bps: 19.39e6,
            request_bytes: 512 * 1024,
            depth: 8,
            be_share: 0.0,
        }
    }

    #[test]
    fn the_papers_own_example_gives_seventy_streams() {
        // Özden's bound with the multimedia-server paper's figures: q = 70.
        let (r_disp_bps, r_disk_bps, d_bits) = (1.5e6, 120.0e6, 8.0e6);
        let (settle_ms, seek_ms, rot_ms) = (0.6, 17.0, 8.33);
        let q = round_bound(
            d_bits / r_disp_bps * 1e3,
            2.0 * seek_ms,
            d_bits / r_disk_bps * 1e3 + rot_ms + settle_ms,
        );
        assert_eq!(q, 70);
    }

    #[test]
    fn avfs_250g_atsc_bounds() {
        let m = DiskModel::builtin("avfs-250g").unwrap();
        let r = capacity(&m, &atsc());
        assert!((r.round_ms - 216.3).abs() < 0.1, "{r:?}");
        // 54.3 MB/s / 2.424 MB/s = 22.4.
        assert_eq!(r.bandwidth_bound_streams, 22, "{r:?}");
        // (216.3 - 36) / (13.6 + 8.33 + 1.3) = 7.75.
        assert_eq!(r.round_bound_streams, 7, "{r:?}");
        assert_eq!(r.batch_requests, 7);
        assert_eq!(r.batched_round_bound_streams, 14, "{r:?}");
        let json = serde_json::to_value(&r).unwrap();
        assert_eq!(json["bandwidth_bound_streams"], 22);
        assert_eq!(json["round_bound_streams"], 7);
    }

    #[test]
    fn nvr_8t_bounds_at_4_and_8_mbit() {
        let m = DiskModel::builtin("nvr-8t").unwrap();
        let at = |bitrate_bps| {
            capacity(
                &m,
                &StreamParams {
                    bitrate_bps,
                    ..atsc()
                },
            )
        };
        let r4 = at(4.0e6);
        let r8 = at(8.0e6);
        assert!(r4.bandwidth_bound_streams >= 2 * r8.bandwidth_bound_streams);
        assert!(r4.round_bound_streams > r8.round_bound_streams);
        assert!(r4.round_bound_streams < r4.batched_round_bound_streams);
        assert!(r4.batched_round_bound_streams < r4.bandwidth_bound_streams);
        assert_eq!(r4.bandwidth_bound_streams, 367, "{r4:?}");
        assert_eq!(r8.bandwidth_bound_streams, 183, "{r8:?}");
    }

    #[test]
    fn invalid_parameters_give_zeros() {
        let m = DiskModel::builtin("nvr-8t").unwrap();
        for p in [
            StreamParams {
                bitrate_bps: 0.0,
                ..atsc()
            },
            StreamParams {
                bitrate_bps: f64::NAN,
                ..atsc()
            },
            StreamParams {
                request_bytes: 0,
                ..atsc()
            },
            StreamParams { depth: 0, ..atsc() },
        ] {
            assert!(p.validate().is_err());
            let r = capacity(&m, &p);
            assert_eq!(r.bandwidth_bound_streams, 0);
            assert_eq!(r.round_bound_streams, 0);
        }
        // A slow stream on a fast disk saturates instead of overflowing.
        let r = capacity(
            &m,
            &StreamParams {
                bitrate_bps: 1e-30,
                ..atsc()
            },
        );
        assert_eq!(r.bandwidth_bound_streams, MAX_STREAMS);
    }

    #[test]
    fn a_gather_period_bounds_slow_streams_by_their_short_requests_and_not_fast_ones() {
        let m = DiskModel::builtin("nvr-8t").unwrap();
        let at = |bitrate_bps, period_s: u64| {
            let p = StreamParams {
                bitrate_bps,
                be_share: 0.1,
                ..atsc()
            };
            (
                capacity(&m, &p),
                durable_bounds(
                    &m,
                    &p,
                    Durability {
                        interval_ns: period_s * 1_000_000_000,
                        period_ns: period_s * 1_000_000_000,
                        tail_log: false,
                        ring_bytes: 0,
                    },
                ),
            )
        };
        // 250 kbit/s at 1 s: 32 KiB a second each, against 512 KiB per 16.8 s.
        let (whole, slow) = at(250e3, 1);
        assert_eq!(slow.request_bytes, 32768);
        assert_eq!(slow.round_ms, 1000.0);
        assert!(
            slow.round_bound_streams * 10 < whole.round_bound_streams,
            "{slow:?} {whole:?}"
        );
        // Streams of 32 KiB requests at 32 KiB/s: the same round, the same bound.
        let same = capacity(
            &m,
            &StreamParams {
                bitrate_bps: 32768.0 * 8.0,
                request_bytes: 32768,
                depth: 2,
                be_share: 0.1,
            },
        );
        assert_eq!(slow.round_bound_streams, same.round_bound_streams);
        // 19.39 Mbit/s fills its request in 0.22 s: (b) is unchanged at 1 s, (b')
        // (seven requests, 1.5 s) is cut to the period; at 10 s neither moves.
        let (whole, fast) = at(19.39e6, 1);
        assert_eq!(fast.request_bytes, 512 * 1024);
        assert_eq!(fast.round_bound_streams, whole.round_bound_streams);
        assert_eq!(fast.batched_round_ms, 1000.0);
        assert!(fast.batched_round_bound_streams < whole.batched_round_bound_streams);
        let (whole, fast) = at(19.39e6, 10);
        assert_eq!(fast.round_bound_streams, whole.round_bound_streams);
        assert_eq!(
            fast.batched_round_bound_streams,
            whole.batched_round_bound_streams
        );
    }
}
