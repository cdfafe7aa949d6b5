//! Stream admission: does one more stream fit beside the ones already admitted?
//!
//! `capacity` answers "how many streams *like this one*"; admission must answer it for
//! a mix (a 19.39 Mbit/s playback beside 4 Mbit/s camera recordings, each with its own
//! request and buffer size). The argument is the batched round bound of `capacity`
//! (b'), generalized:
//!
//! **Slack.** A stream of rate `r` whose buffer holds `depth` requests of `d` bytes,
//! with a rate-control burst of `b` bytes (the engine's credit cap, `d / 2`), issues a
//! request that is due `slack = (depth * d - d - b) / r` after it is issued: one
//! request of the buffer is the one being consumed (or filled) and `b` is what the
//! application may run ahead of its rate (`engine::stream`).
//!
//! **Round.** The disk works in rounds of `T = min(slack_i)`: every request issued
//! during a round is due no earlier than the round's end, so a schedule that serves
//! each stream's round worth of bytes within the round meets every deadline. In a
//! round, stream `i` needs `r_i * T` bytes, served back to back (the mixer batches a
//! stream's requests in LBA order), costing one positioning and the transfer:
//!
//! ```text
//! sum_i (r_i * T / r_inner + t_rot + t_settle) + 2 * t_seek <= (1 - s) * T
//! ```
//!
//! with the terms of `capacity` (innermost zone rate, a full revolution, command
//! overhead + write settle, two full-stroke seeks per round) and `s` the best-effort
//! share. For identical streams this is (b') with `k = depth - 1.5`. A stream charged a
//! positioning every round even when none of its requests falls in it makes the bound
//! conservative for streams with long buffers; journal commits are covered by the
//! best-effort share, not charged.
//!
//! **Recordings gather** (`engine/stream/recording.rs`, `engine/tail_log.rs`). A
//! write stream with a durability interval `D` hands over what it holds at least
//! once per *gather period* `P` (`D` rounded down to whole commit intervals, the
//! engine's `gather_period_ns`), and what it gathers in a period is `q = min(d, r P)`
//! bytes (rounded up to 4 KiB, the sectors it covers) ([`Durability`]):
//!
//! - **in place** (a volume without a tail log): a full request is due by the commit
//!   after it fills, so every request is due within `P` of its oldest byte and the
//!   slack is at most `P`, whatever the buffer ([`StreamLoad::slack_ns`]); a slow
//!   stream, whose request does not fill within `P`, writes `q` as a short request
//!   every `P`, so its bytes per round are `T q / P` with the positioning of the
//!   round. A slow stream at `P` = 1 s costs one positioning a second, which is most
//!   of a disk's time for a few hundred of them (`docs/durability.md`, "What it
//!   costs");
//! - **tail log**, a request that fills within `D`: its partial request goes into
//!   the commit's one sequential batch at each gather point and its full requests
//!   stay due by the next commit (slack at most `P`); it moves what it logs twice,
//!   `T (r + l / P)` a round with `l` what it logs in a period on average
//!   ([`StreamLoad::logged_bytes_per_period`]);
//! - **tail log**, a request that fills more slowly than `D`: every byte goes into
//!   the log, and its full requests are due at the buffer's overflow: planned with
//!   its buffer's slack, moving `2 r T` a round.
//!
//! The batch's one positioning per commit is left to the best-effort share, as the
//! journal's are. The round still charges every stream a positioning (the worst
//! case: requests of recordings started together fall due together). A playback has
//! no durability interval. The ring's room is planned ([`plan_ring`]: the
//! recordings it cannot hold for their fill, their slack and two periods are planned
//! in place, as a full ring sends gathers in place, `engine/tail_log.rs`); not
//! planned: the bunching of every recording's gather in one lead
//! (`docs/durability.md`, "Where the bound does not hold").
//!
//! **Without a disk model** (an SSD, an image on tmpfs) positioning is free and the
//! bound is the bandwidth: `sum_i r_i <= (1 - s) * bandwidth`, the bandwidth configured
//! or measured by `dvrfs calibrate`.

use super::geometry::Geometry;
use super::model::DiskModel;
use super::seek::SeekCurve;

/// The sector a short request's bytes are rounded up to: the engine writes whole
/// sectors (composing the one a request shares with the next).
const SECTOR_BYTES: u64 = 4096;

/// How a recording keeps what it holds durable (`engine/stream/recording.rs`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Durability {
    /// Its durability interval `D`, ns.
    pub interval_ns: u64,
    /// Its gather period: at most this long after its oldest byte was accepted,
    /// what it holds is handed over (`D` rounded down to whole commit intervals, the
    /// engine's `gather_period_ns`), ns.
    pub period_ns: u64,
    /// The volume has a tail log: what it gathers goes into the commit's batch, and
    /// only whole requests are written in place.
    pub tail_log: bool,
    /// The tail log's ring, bytes (0 without one): recordings that would log more
    /// than it holds are planned in place ([`Admission::check`]).
    pub ring_bytes: u64,
}

/// One admitted (or asked-for) stream, as admission sees it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct StreamLoad {
    pub rate_bytes_per_s: f64,
    pub request_bytes: u64,
    /// Buffer, in requests.
    pub depth: u32,
    /// A recording's; `None`: a playback, which moves whole requests only.
    pub durable: Option<Durability>,
}

impl StreamLoad {
    /// The engine's rate-control burst: what the application may run ahead of its rate.
    pub fn burst_bytes(&self) -> u64 {
        (self.request_bytes / 2).max(1)
    }

    /// How long after it is issued a request is due by the buffer alone, in ns (0
    /// when the buffer is too small to give any): the stream's guarantee, and what a
    /// buffer dvrfs chooses is sized by.
    pub fn buffer_slack_ns(&self) -> f64 {
        let buffer = self.depth as f64 * self.request_bytes as f64;
        let usable = buffer - self.request_bytes as f64 - self.burst_bytes() as f64;
        (usable / self.rate_bytes_per_s * 1e9).max(0.0)
    }

    /// A recording with a tail log whose request fills more slowly than its
    /// durability interval: it logs every byte, and its full requests are due at
    /// its buffer's overflow (the engine's `fills_slower_than_durable`).
    pub fn logs_all(&self) -> bool {
        self.durable.is_some_and(|d| {
            let fill_ns = self.request_bytes as f64 / self.rate_bytes_per_s.max(1.0) * 1e9;
            d.tail_log && fill_ns > d.interval_ns as f64
        })
    }

    /// How long after it is issued a request of this stream is due at the latest,
    /// in ns: the buffer's slack, and for a recording whose full requests are due by
    /// the next commit at most its gather period.
    pub fn slack_ns(&self) -> f64 {
        let buffer = self.buffer_slack_ns();
        match self.durable {
            Some(d) if !self.logs_all() => buffer.min(d.period_ns as f64),
            _ => buffer,
        }
    }

    /// What a recording gathers in one period, bytes: `rate x period` in whole
    /// sectors, at most a request (a whole request for a playback, or a recording
    /// whose request fills within its period).
    pub fn gathered_bytes(&self) -> u64 {
        let Some(d) = self.durable else {
            return self.request_bytes;
        };
        let gathered = (self.rate_bytes_per_s * d.period_ns as f64 / 1e9).ceil();
        if gathered.is_nan() || gathered >= self.request_bytes as f64 {
            // Fills within the period (or a rate too large to count).
            return self.request_bytes;
        }
        (gathered as u64)
            .div_ceil(SECTOR_BYTES)
            .saturating_mul(SECTOR_BYTES)
            .clamp(SECTOR_BYTES.min(self.request_bytes), self.request_bytes)
    }

    /// The request the stream writes or reads in place at a time, bytes: a whole
    /// request, or for a recording without a tail log whose request does not fill
    /// within its period the short one it gathers.
    pub fn written_request_bytes(&self) -> u64 {
        match self.durable {
            Some(d) if !d.tail_log => self.gathered_bytes(),
            _ => self.request_bytes,
        }
    }

    /// What a recording with a tail log logs in a period on average, bytes. One
    /// that logs every byte ([`StreamLoad::logs_all`]): `g = rate x period`. One
    /// whose request fills within its interval logs at each gather point the bytes
    /// of its partial request not yet logged: with requests of `d`, a request that
    /// does not fill within a period is logged up to its last gather point, `d - g /
    /// 2` of it on average, so `g - g^2 / (2 d)` a period; one that fills within a
    /// period is caught half full on average, `d / 2` a period. The positioning a round is charged for the worst case; the log is one
    /// sequential write a commit for all the recordings, whose phases differ.
    pub fn logged_bytes_per_period(&self) -> f64 {
        let Some(dur) = self.durable.filter(|d| d.tail_log) else {
            return 0.0;
        };
        let (g, d) = (
            self.rate_bytes_per_s * dur.period_ns as f64 / 1e9,
            self.request_bytes as f64,
        );
        if self.logs_all() {
            g
        } else if g >= d {
            d / 2.0
        } else {
            g - g * g / (2.0 * d)
        }
    }

    /// The ring a logging recording takes a second, bytes: what it logs, each entry
    /// padded to whole 4 KiB blocks (an entry per gather, and one more per full
    /// request for its last bytes).
    pub fn ring_rate_bytes_per_s(&self) -> f64 {
        let Some(d) = self.durable.filter(|d| d.tail_log && d.period_ns > 0) else {
            return 0.0;
        };
        let p = d.period_ns as f64 / 1e9;
        let fill_s = self.request_bytes as f64 / self.rate_bytes_per_s.max(1.0);
        let entries = 1.0 + p / fill_s;
        (self.logged_bytes_per_period() + entries * SECTOR_BYTES as f64) / p
    }

    /// How long a logging recording's bytes hold the ring's tail, ns: until the
    /// request they belong to is in place and committed. Its first bytes are logged
    /// as it starts to fill; it fills for `request / rate`; once full it may wait as
    /// long as its slack ([`StreamLoad::slack_ns`]: for one that logs every byte its
    /// buffer's, since the mixer holds a request until the latest safe moment), and
    /// the entry dies at the commit after the request is applied. Two periods cover
    /// the gather and that commit. Recordings started together fill their requests
    /// together and hold the most at the end of that wait, so this is the worst case
    /// (`docs/durability.md`: 401 recordings of 250 kbit/s admitted by the fill time
    /// alone filled a 256 MiB ring in `dvrfs sim`).
    pub fn ring_hold_ns(&self) -> f64 {
        let Some(d) = self.durable.filter(|d| d.tail_log) else {
            return 0.0;
        };
        self.request_bytes as f64 / self.rate_bytes_per_s.max(1.0) * 1e9
            + self.slack_ns()
            + 2.0 * d.period_ns as f64
    }

    /// The bytes per second the disk moves for the stream: its rate, or a short
    /// request per period when it writes those in place (a little more than the
    /// rate: whole sectors), or with a tail log its rate in place and what it logs.
    pub fn transfer_rate_bytes_per_s(&self) -> f64 {
        let Some(d) = self.durable.filter(|d| d.period_ns > 0) else {
            return self.rate_bytes_per_s;
        };
        let p = d.period_ns as f64 / 1e9;
        if d.tail_log {
            self.rate_bytes_per_s + self.logged_bytes_per_period() / p
        } else if self.gathered_bytes() < self.request_bytes {
            (self.gathered_bytes() as f64 / p).max(self.rate_bytes_per_s)
        } else {
            self.rate_bytes_per_s
        }
    }
}

/// A stream asked for, before admission gives it a buffer: a [`StreamLoad`] without
/// its depth, and the buffer it states, if it does.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct StreamAsk {
    pub rate_bytes_per_s: f64,
    pub request_bytes: u64,
    /// `None`: dvrfs chooses ([`Admission::choose_depth`]).
    pub buffer_bytes: Option<u64>,
    /// As [`StreamLoad::durable`].
    pub durable: Option<Durability>,
}

impl StreamAsk {
    /// The load of this stream with a buffer of `depth` requests.
    pub fn with_depth(&self, depth: u32) -> StreamLoad {
        debug_assert!(
            self.durable.is_none_or(|d| d.period_ns <= d.interval_ns),
            "a gather period is the interval rounded down: {self:?}"
        );
        StreamLoad {
            rate_bytes_per_s: self.rate_bytes_per_s,
            request_bytes: self.request_bytes,
            depth,
            durable: self.durable,
        }
    }

    /// The same stream at another rate.
    pub fn at_rate(&self, rate_bytes_per_s: f64) -> StreamAsk {
        StreamAsk {
            rate_bytes_per_s,
            ..*self
        }
    }
}

/// What admission knows of the device.
#[derive(Clone, Debug, PartialEq)]
pub enum Capacity {
    /// A hard disk: the round bound on its model.
    Disk {
        name: String,
        inner_rate_bytes_per_s: f64,
        rotation_ms: f64,
        settle_ms: f64,
        sweep_seek_ms: f64,
    },
    /// A device without positioning cost: a bandwidth.
    Bandwidth { bytes_per_s: f64 },
}

/// The verdict on a set of streams.
#[derive(Clone, Debug, PartialEq)]
pub struct Check {
    pub fits: bool,
    /// The fraction of the real-time share a round needs (<= 1 fits).
    pub load: f64,
    /// The round (the shortest slack), ms; 0 for a bandwidth device.
    pub round_ms: f64,
}

/// Most streams [`Admission::count_admitted`] counts (a bandwidth without a model and
/// a tiny rate would otherwise count for ever).
pub const MAX_COUNTED: usize = 10_000;

/// The highest rate, bytes per second, at which `fits_at` holds: the highest power
/// of two from 1 B/s to 2^40 B/s that fits, then bisected up to the next, which
/// does not (0 when none fits); the rate returned is one `fits_at` said yes to.
/// Every power is tried: with a tail log, fitting is not monotonic in the rate (a
/// very slow recording holds the log's ring for long and is planned in place).
fn highest_fitting_rate(fits_at: impl Fn(f64) -> bool) -> f64 {
    let Some(k) = (0..=40).rev().find(|&k| fits_at((1u64 << k) as f64)) else {
        return 0.0;
    };
    let (mut lo, mut hi) = ((1u64 << k) as f64, (1u64 << (k + 1)) as f64);
    for _ in 0..60 {
        let mid = (lo + hi) / 2.0;
        if fits_at(mid) {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    lo
}

/// `streams` with the recordings the tail log's ring cannot hold planned in place
/// (see [`Admission::check`]): in order, each logging recording takes its own bytes
/// for as long as it holds them ([`StreamLoad::ring_hold_ns`]); one whose share does
/// not fit in what is left is planned in place, as the engine writes in place the
/// partial requests of the recordings that hold a full ring's tail.
pub fn plan_ring(streams: &[StreamLoad]) -> Vec<StreamLoad> {
    let mut used_bytes = 0.0;
    streams
        .iter()
        .map(|s| match s.durable {
            Some(d) if d.tail_log => {
                let need = s.ring_rate_bytes_per_s() * s.ring_hold_ns() / 1e9;
                if used_bytes + need <= d.ring_bytes as f64 {
                    used_bytes += need;
                    *s
                } else {
                    StreamLoad {
                        durable: Some(Durability {
                            tail_log: false,
                            ..d
                        }),
                        ..*s
                    }
                }
            }
            _ => *s,
        })
        .collect()
}

/// Admission control for one device.
#[derive(Clone, Debug, PartialEq)]
pub struct Admission {
    pub capacity: Capacity,
    /// Share of the disk kept for best-effort traffic (the scheduler's guarantee).
    pub be_share: f64,
}

impl Admission {
    pub fn from_model(model: &DiskModel, be_share: f64) -> Admission {
        let geo = Geometry::from_model(model);
        let full_seek_ms = match SeekCurve::from_model(model, geo.cylinders()) {
            Ok(curve) => curve.time_ms(1.0),
            Err(_) => model.seek_ms.full,
        };
        Admission {
            capacity: Capacity::Disk {
                name: model.name.clone(),
                inner_rate_bytes_per_s: geo.inner_rate_bytes_per_s(),
                rotation_ms: geo.rotation_ns() / 1e6,
                settle_ms: model.command_overhead_ms + model.write_settle_ms,
                sweep_seek_ms: 2.0 * full_seek_ms,
            },
            be_share,
        }
    }

    pub fn bandwidth(bytes_per_s: f64, be_share: f64) -> Admission {
        Admission {
            capacity: Capacity::Bandwidth { bytes_per_s },
            be_share,
        }
    }

    /// What the check is made against, for messages and `info`.
    pub fn describe(&self) -> String {
        match &self.capacity {
            Capacity::Disk { name, .. } => format!("the disk model {name}"),
            Capacity::Bandwidth { bytes_per_s } => {
                format!("a bandwidth of {:.1} MB/s", bytes_per_s / 1e6)
            }
        }
    }

    /// Whether `streams` fit together. Recordings with a tail log are planned as
    /// logging, in the order given (the engine gives the open streams by id and the
    /// one asked for last), while the ring holds what they log for as long as the
    /// slowest of them holds its tail ([`StreamLoad::ring_hold_ns`]); the rest are
    /// planned in place, as a full ring sends gathers in place.
    pub fn check(&self, streams: &[StreamLoad]) -> Check {
        let planned = plan_ring(streams);
        let streams = &planned[..];
        let rt = 1.0 - self.be_share;
        match &self.capacity {
            Capacity::Bandwidth { bytes_per_s } => {
                let sum = streams
                    .iter()
                    .fold(0.0, |a, s| a + s.transfer_rate_bytes_per_s());
                let load = sum / (rt * bytes_per_s);
                Check {
                    fits: load <= 1.0,
                    load,
                    round_ms: 0.0,
                }
            }
            Capacity::Disk {
                inner_rate_bytes_per_s,
                rotation_ms,
                settle_ms,
                sweep_seek_ms,
                ..
            } => {
                if streams.is_empty() {
                    return Check {
                        fits: true,
                        load: 0.0,
                        round_ms: 0.0,
                    };
                }
                let round_ms = streams
                    .iter()
                    .map(|s| s.slack_ns() / 1e6)
                    .fold(f64::INFINITY, f64::min);
                let cost_ms = streams.iter().fold(*sweep_seek_ms, |a, s| {
                    a + s.transfer_rate_bytes_per_s() * round_ms / inner_rate_bytes_per_s
                        + rotation_ms
                        + settle_ms
                });
                let load = if round_ms > 0.0 {
                    cost_ms / (rt * round_ms)
                } else {
                    f64::INFINITY
                };
                Check {
                    fits: load <= 1.0,
                    load,
                    round_ms,
                }
            }
        }
    }

    /// How long the model gives one sweep that writes a request of each size in
    /// `requests_bytes`, ns: the round's cost (a seek across the sweep, and per
    /// request a rotation, the settle and the transfer at the inner rate), or the
    /// transfers at the bandwidth.
    pub fn sweep_ns(&self, requests_bytes: impl Iterator<Item = u64>) -> f64 {
        match &self.capacity {
            Capacity::Bandwidth { bytes_per_s } => {
                requests_bytes.map(|b| b as f64).sum::<f64>() / bytes_per_s * 1e9
            }
            Capacity::Disk {
                inner_rate_bytes_per_s,
                rotation_ms,
                settle_ms,
                sweep_seek_ms,
                ..
            } => {
                let mut ms = *sweep_seek_ms;
                for b in requests_bytes {
                    ms += rotation_ms + settle_ms + b as f64 / inner_rate_bytes_per_s * 1e3;
                }
                ms * 1e6
            }
        }
    }

    /// The highest rate a stream with `like`'s request size, buffer and gather period
    /// could still be admitted at beside `admitted` (0 if none), bytes per second.
    pub fn headroom(&self, admitted: &[StreamLoad], like: StreamLoad) -> f64 {
        let fits_at = |rate: f64| {
            let mut all = admitted.to_vec();
            all.push(StreamLoad {
                rate_bytes_per_s: rate,
                ..like
            });
            self.check(&all).fits
        };
        highest_fitting_rate(fits_at)
    }

    /// The buffer depth a stream gets: `buffer_bytes / request_bytes` when it states a
    /// buffer, else the one [`Admission::choose_depth`] picks, or the largest buffer
    /// when no depth fits (the stream is then refused at that depth). What the engine
    /// admits with, and what [`Admission::count_admitted`] counts with.
    pub fn depth_for(
        &self,
        admitted: &[StreamLoad],
        ask: &StreamAsk,
        min_slack_ns: f64,
        max_buffer_bytes: u64,
    ) -> u32 {
        match ask.buffer_bytes {
            Some(b) => (b / ask.request_bytes.max(1)) as u32,
            None => self
                .choose_depth(admitted, ask, min_slack_ns, max_buffer_bytes)
                .unwrap_or((max_buffer_bytes / ask.request_bytes.max(1)) as u32),
        }
    }

    /// How many streams like `ask` are admitted on an idle device, one after the
    /// other as the engine admits them (each with [`Admission::depth_for`]): the
    /// figure `dvrfs capacity` prints beside its bounds. At most `MAX_COUNTED`.
    pub fn count_admitted(
        &self,
        ask: &StreamAsk,
        min_slack_ns: f64,
        max_buffer_bytes: u64,
    ) -> usize {
        self.count_admitted_beside(&[], ask, min_slack_ns, max_buffer_bytes)
    }

    /// How many more streams like `ask` are admitted beside the streams `already`
    /// admitted, one after the other as the engine admits them: the headroom `dvrfs
    /// status` prints. At most `MAX_COUNTED`.
    pub fn count_admitted_beside(
        &self,
        already: &[StreamLoad],
        ask: &StreamAsk,
        min_slack_ns: f64,
        max_buffer_bytes: u64,
    ) -> usize {
        let mut admitted: Vec<StreamLoad> = already.to_vec();
        let before = admitted.len();
        if !self.check(&admitted).fits {
            return 0;
        }
        while admitted.len() - before < MAX_COUNTED {
            let depth = self.depth_for(&admitted, ask, min_slack_ns, max_buffer_bytes);
            admitted.push(ask.with_depth(depth));
            if !self.check(&admitted).fits {
                return admitted.len() - 1 - before;
            }
        }
        MAX_COUNTED
    }

    /// The highest rate one more stream like `like` (its request size, buffer and
    /// gather period; its rate is what is searched) is admitted at beside
    /// `admitted`, with the buffer the engine would give it
    /// ([`Admission::depth_for`]), bytes per second (0 if none is). The "fits at up
    /// to" of a refusal fixes the buffer; this lets it grow with the rate as the
    /// engine's own choice does.
    pub fn largest_admitted(
        &self,
        admitted: &[StreamLoad],
        like: &StreamAsk,
        min_slack_ns: f64,
        max_buffer_bytes: u64,
    ) -> f64 {
        let fits_at = |rate: f64| {
            let ask = like.at_rate(rate);
            let depth = self.depth_for(admitted, &ask, min_slack_ns, max_buffer_bytes);
            let mut all = admitted.to_vec();
            all.push(ask.with_depth(depth));
            self.check(&all).fits
        };
        highest_fitting_rate(fits_at)
    }

    /// The buffer depth dvrfs picks for a stream like `ask` that did not state one:
    /// the smallest whose buffer gives at least `min_slack_ns` of slack and that fits
    /// beside `admitted`, up to `max_buffer_bytes`; `None` when no depth fits. A
    /// recording's slack stops growing with its buffer at its gather period
    /// ([`StreamLoad::slack_ns`]): no depth past the one that reaches it fits if that
    /// one does not.
    pub fn choose_depth(
        &self,
        admitted: &[StreamLoad],
        ask: &StreamAsk,
        min_slack_ns: f64,
        max_buffer_bytes: u64,
    ) -> Option<u32> {
        let max_depth = (max_buffer_bytes / ask.request_bytes.max(1)).max(2) as u32;
        let mut all = admitted.to_vec();
        for depth in 2..=max_depth {
            let s = ask.with_depth(depth);
            if s.buffer_slack_ns() < min_slack_ns && depth < max_depth {
                continue;
            }
            all.push(s);
            if self.check(&all).fits {
                return Some(depth);
            }
            all.pop();
            if s.slack_ns() < s.buffer_slack_ns() {
                // Capped by the gather period: a larger buffer plans the same.
                return None;
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::disk::{capacity, StreamParams};

    /// The engine's: a second of slack, buffers up to 256 MiB.
    const AUTO_SLACK: f64 = 1e9;
    const MAX_BUFFER: u64 = 256 << 20;

    fn atsc(depth: u32) -> StreamLoad {
        StreamLoad {
            rate_bytes_per_s: 19.39e6 / 8.0,
            request_bytes: 512 * 1024,
            depth,
            durable: None,
        }
    }

    #[test]
    fn identical_streams_agree_with_the_batched_round_bound() {
        // depth 8.5 - 1.5 = 7 requests of slack: (b') with k = 7, depth 8.
        let m = DiskModel::builtin("avfs-250g").unwrap();
        let a = Admission::from_model(&m, 0.0);
        let r = capacity(
            &m,
            &StreamParams {
                bitrate_bps: 19.39e6,
                request_bytes: 512 * 1024,
                depth: 8,
                be_share: 0.0,
            },
        );
        // Slack of depth 8.5 is not a depth; compare depth 9 (k = 7.5) and 8 (k = 6.5)
        // against (b') at k = 7, which must lie between them.
        let count = |depth| {
            (1..100)
                .take_while(|&n| a.check(&vec![atsc(depth); n]).fits)
                .count() as u32
        };
        assert!(count(8) <= r.batched_round_bound_streams, "{r:?}");
        assert!(count(9) >= r.batched_round_bound_streams, "{r:?}");
        assert!(count(8) >= 10);
    }

    #[test]
    fn the_best_effort_share_costs_streams() {
        let m = DiskModel::builtin("nvr-8t").unwrap();
        let all = Admission::from_model(&m, 0.0);
        let shared = Admission::from_model(&m, 0.2);
        let s = vec![atsc(8); 20];
        assert!(shared.check(&s).load > all.check(&s).load);
        assert!((shared.check(&s).load / all.check(&s).load - 1.25).abs() < 1e-9);
    }

    #[test]
    fn headroom_is_the_largest_rate_that_fits() {
        let m = DiskModel::builtin("avfs-250g").unwrap();
        let a = Admission::from_model(&m, 0.1);
        let admitted = vec![atsc(8); 6];
        let h = a.headroom(&admitted, atsc(8));
        assert!(h > 0.0);
        let with = |rate| {
            let mut v = admitted.clone();
            v.push(StreamLoad {
                rate_bytes_per_s: rate,
                ..atsc(8)
            });
            a.check(&v).fits
        };
        assert!(with(h * 0.999));
        assert!(!with(h * 1.01));
        // A full disk has no headroom.
        let full: Vec<_> = (0..40).map(|_| atsc(8)).collect();
        assert!(!a.check(&full).fits);
        assert_eq!(a.headroom(&full, atsc(8)), 0.0);
    }

    #[test]
    fn bandwidth_devices_sum_rates() {
        let a = Admission::bandwidth(100e6, 0.1);
        assert!(a.check(&vec![atsc(4); 37]).fits); // 89.7 MB/s of 90
        assert!(!a.check(&vec![atsc(4); 38]).fits);
        let h = a.headroom(&[], atsc(4));
        assert!((h - 90e6).abs() < 1e3, "{h}");
    }

    #[test]
    fn a_buffer_too_small_for_any_slack_never_fits() {
        let m = DiskModel::builtin("nvr-8t").unwrap();
        let a = Admission::from_model(&m, 0.1);
        // depth 1: the request is the whole buffer.
        assert_eq!(atsc(1).slack_ns(), 0.0);
        assert!(!a.check(&[atsc(1)]).fits);
    }

    #[test]
    fn chosen_depth_fits_and_gives_the_slack_asked() {
        let m = DiskModel::builtin("avfs-250g").unwrap();
        let a = Admission::from_model(&m, 0.1);
        let ask = StreamAsk {
            rate_bytes_per_s: 19.39e6 / 8.0,
            request_bytes: 512 * 1024,
            buffer_bytes: None,
            durable: None,
        };
        let d = a.choose_depth(&[], &ask, 1e9, 64 << 20).unwrap();
        assert!(atsc(d).slack_ns() >= 1e9);
        assert!(atsc(d - 1).slack_ns() < 1e9);
        let busy = vec![atsc(8); 40];
        assert_eq!(a.choose_depth(&busy, &ask, 1e9, 64 << 20), None);
    }

    /// Recordings of `mbit` in 512 KiB requests durable within `durable_s` seconds
    /// (whole commit intervals), written in place (`None`: whole requests only).
    fn recordings(mbit: f64, durable_s: Option<u64>) -> StreamAsk {
        StreamAsk {
            rate_bytes_per_s: mbit * 1e6 / 8.0,
            request_bytes: 512 * 1024,
            buffer_bytes: None,
            durable: durable_s.map(|s| Durability {
                interval_ns: s * 1_000_000_000,
                period_ns: s * 1_000_000_000,
                tail_log: false,
                ring_bytes: 0,
            }),
        }
    }

    /// As [`recordings`], on a volume with a tail log.
    fn logging(mbit: f64, durable_s: u64) -> StreamAsk {
        let mut r = recordings(mbit, Some(durable_s));
        r.durable = r.durable.map(|d| Durability {
            tail_log: true,
            ring_bytes: 256 << 20,
            ..d
        });
        r
    }

    #[test]
    fn a_slow_recording_costs_a_short_request_per_period() {
        // 250 kbit/s fills a 512 KiB request in 16.8 s: at a period of 1 s it writes
        // 31,250 bytes (8 sectors) a second, and a request is due within the second.
        let slow = recordings(0.25, Some(1)).with_depth(4);
        assert_eq!(slow.written_request_bytes(), 32768);
        assert!((slow.transfer_rate_bytes_per_s() - 32768.0).abs() < 1e-6);
        assert!(slow.buffer_slack_ns() > 30e9);
        assert_eq!(slow.slack_ns(), 1e9);
        let m = DiskModel::builtin("nvr-8t").unwrap();
        let a = Admission::from_model(&m, 0.1);
        let count = |d| a.count_admitted(&recordings(0.25, d), AUTO_SLACK, MAX_BUFFER);
        let whole = count(None);
        let by_period: Vec<usize> = [1, 2, 5, 10].map(|s| count(Some(s))).to_vec();
        // One positioning a second each: fewer than a hundred fit at 1 s, against
        // 678 planned with whole requests (and the buffers dvrfs chooses).
        assert!(by_period[0] < 100, "{by_period:?}");
        assert!(whole > 600, "{whole}");
        assert!(by_period.windows(2).all(|w| w[0] < w[1]), "{by_period:?}");
        assert!(by_period[3] < whole, "{by_period:?} {whole}");
        // They agree with the round bound of `capacity` for such recordings: a round
        // of the period, each stream costing its 32 KiB at the inner rate, a
        // revolution and the settle.
        let p = StreamParams {
            bitrate_bps: 250e3,
            request_bytes: 512 * 1024,
            depth: 8,
            be_share: 0.1,
        };
        let r = crate::disk::durable_bounds(&m, &p, recordings(0.25, Some(1)).durable.unwrap());
        assert_eq!(by_period[0] as u32, r.round_bound_streams, "{r:?}");
    }

    #[test]
    fn a_fast_recording_whose_request_fills_within_the_period_is_planned_as_before() {
        // 19.39 Mbit/s fills 512 KiB in 0.22 s; with the buffer dvrfs chooses (just
        // over a second of slack) a period of 2 s or more changes nothing.
        let m = DiskModel::builtin("avfs-250g").unwrap();
        let a = Admission::from_model(&m, 0.1);
        for d in [2, 5, 10] {
            let ask = recordings(19.39, Some(d));
            let load = ask.with_depth(8);
            assert_eq!(load.written_request_bytes(), 512 * 1024);
            assert_eq!(load.transfer_rate_bytes_per_s(), 19.39e6 / 8.0);
            assert_eq!(load.slack_ns(), atsc(8).slack_ns());
            assert_eq!(
                a.count_admitted(&ask, AUTO_SLACK, MAX_BUFFER),
                a.count_admitted(&recordings(19.39, None), AUTO_SLACK, MAX_BUFFER)
            );
        }
    }

    #[test]
    fn a_recording_capped_by_its_period_gets_no_larger_buffer_for_nothing() {
        // Beside a full disk no depth fits; the search stops at the depth whose
        // slack reaches the period instead of trying every buffer up to 256 MiB.
        let m = DiskModel::builtin("nvr-8t").unwrap();
        let a = Admission::from_model(&m, 0.1);
        let ask = recordings(0.25, Some(1));
        let n = a.count_admitted(&ask, AUTO_SLACK, MAX_BUFFER);
        let full = vec![ask.with_depth(2); n];
        assert!(a.check(&full).fits);
        assert_eq!(
            a.choose_depth(&full[1..], &ask, AUTO_SLACK, MAX_BUFFER),
            Some(2)
        );
        assert!(!a.check(&[&full[..], &[ask.with_depth(2)]].concat()).fits);
        assert_eq!(a.choose_depth(&full, &ask, AUTO_SLACK, MAX_BUFFER), None);
        assert!(!a.check(&[&full[..], &[ask.with_depth(512)]].concat()).fits);
        // The refusal's rate is one the period's cost admits.
        let h = a.headroom(&full[1..], ask.with_depth(2));
        let mut with = full[1..].to_vec();
        with.push(ask.at_rate(h).with_depth(2));
        assert!(a.check(&with).fits);
    }

    #[test]
    fn a_slow_recording_with_a_tail_log_is_planned_with_its_buffer_and_its_bytes_twice() {
        // With a tail log a 250 kbit/s recording (its request fills in 16.8 s, longer
        // than its interval) logs every byte and writes whole requests in place, due
        // at its buffer's overflow: the disk moves its bytes twice, and it is planned
        // with its buffer's slack, so many more fit than written in place, as many
        // as the log's ring holds.
        let load = logging(0.25, 1).with_depth(2);
        assert!(load.logs_all());
        assert_eq!(load.written_request_bytes(), 512 * 1024);
        assert_eq!(load.logged_bytes_per_period(), 31250.0);
        assert_eq!(load.transfer_rate_bytes_per_s(), 62500.0);
        assert_eq!(load.slack_ns(), load.buffer_slack_ns());
        let m = DiskModel::builtin("nvr-8t").unwrap();
        let a = Admission::from_model(&m, 0.1);
        let count = |ask: &StreamAsk| a.count_admitted(ask, AUTO_SLACK, MAX_BUFFER);
        let (in_place, with_log, whole) = (
            count(&recordings(0.25, Some(1))),
            count(&logging(0.25, 1)),
            count(&recordings(0.25, None)),
        );
        // As many as the 256 MiB ring holds with the buffers of two requests
        // admission chooses (967 KB each, for the 27.2 s until their request is in
        // place and committed: its 16.8 s fill, its 8.4 s slack, two periods); a
        // larger buffer holds the ring longer. With a ring of 1 GiB, as many as the
        // disk writes.
        let per_stream = load.ring_rate_bytes_per_s() * load.ring_hold_ns() / 1e9;
        assert_eq!(with_log, ((256 << 20) as f64 / per_stream) as usize);
        assert_eq!(with_log, 277);
        let hold_s = |depth: u32| logging(0.25, 1).with_depth(depth).ring_hold_ns() / 1e9;
        assert!((hold_s(2) - (16.777216 + 8.388608 + 2.0)).abs() < 1e-9);
        assert!(hold_s(4) - hold_s(2) > 33.0, "{} {}", hold_s(2), hold_s(4));
        assert!(with_log > 2 * in_place, "{in_place} {with_log}");
        let mut big = logging(0.25, 1);
        big.durable = big.durable.map(|d| Durability {
            ring_bytes: 1 << 30,
            ..d
        });
        let disk_bound = count(&big);
        assert!(
            disk_bound > with_log && disk_bound < whole,
            "{disk_bound} {whole}"
        );
        // Beyond the ring a recording is planned in place.
        let full = vec![load; with_log + 1];
        let planned = plan_ring(&full);
        assert!(planned[..with_log]
            .iter()
            .all(|l| l.durable.unwrap().tail_log));
        assert!(!planned[with_log].durable.unwrap().tail_log);
    }

    #[test]
    fn a_fast_recording_with_a_tail_log_logs_half_a_request_per_period() {
        // 4 Mbit/s fills 512 KiB in 1.05 s, within its interval of 2 s: its full
        // requests stay due by the next commit (slack at most the period), and at
        // each gather point its partial request is logged, half a request on
        // average (40 Mbit/s: 262,144 bytes a period).
        let fast = logging(4.0, 2).with_depth(8);
        assert!(!fast.logs_all());
        assert_eq!(fast.slack_ns(), 2e9);
        assert_eq!(fast.logged_bytes_per_period(), 262144.0);
        assert_eq!(fast.transfer_rate_bytes_per_s(), 500_000.0 + 131072.0);
        // At 1.5 s (gathering every second) it does not fill within the period:
        // logged up to its last gather point, 52 % of its bytes.
        let mut between = logging(4.0, 1).with_depth(8);
        between.durable = between.durable.map(|d| Durability {
            interval_ns: 1_500_000_000,
            ..d
        });
        assert!(!between.logs_all());
        let g = 500_000.0;
        let in_log = g - g * g / (2.0 * 524288.0);
        assert!((between.logged_bytes_per_period() - in_log).abs() < 1e-6);
        // At 1 s it fills more slowly than its interval (1.05 s): it logs every byte.
        assert!(logging(4.0, 1).with_depth(8).logs_all());
        // A playback never logs.
        let read = StreamAsk {
            durable: None,
            ..logging(4.0, 1)
        };
        assert_eq!(read.with_depth(4).transfer_rate_bytes_per_s(), 500_000.0);
    }
}
