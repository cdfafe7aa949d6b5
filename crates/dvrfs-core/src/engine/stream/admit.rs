//! Admission as the engine asks it: a stream's spec checked, turned into the load
//! `disk::admission` plans with (a recording with its gather period), and admitted
//! beside the open streams or refused with what was asked and what is left.
//!
//! A recording's load is what it really makes the disk do: with its durability
//! interval `D` it writes what it holds once per gather period (`D` rounded down to
//! whole commit intervals, [`gather_period_ns`]), so a slow one writes a short
//! request per period and every request is due within the period
//! (`disk/admission.rs`, "Recordings gather"). Planning it with whole requests and
//! its buffer's slack admitted 1,140 recordings of 250 kbit/s on `nvr-8t` where the
//! disk serves fewer than a hundred at `D` = 1 s (`docs/durability.md`).

use super::{
    spec_error, Engine, Error, Ino, Result, Stream, StreamDir, StreamSpec, AUTO_SLACK_NS,
    MAX_STREAM_BUFFER_BYTES, MAX_STREAM_REQUEST_BYTES,
};
use crate::disk::admission::{plan_ring, Capacity, Durability, StreamAsk};
use crate::disk::{Admission, StreamLoad};

/// How often, at the longest, a recording with durability interval `durable_ns` on
/// a volume committing every `interval_ns` writes what it holds: the interval
/// rounded down to whole commit intervals (gather points lie an interval apart, and
/// a partial request is written at the first one that keeps its oldest byte within
/// `D`: `recording.rs`, `Engine::gather_at`). An interval shorter than a commit
/// interval (which the engine refuses, but `dvrfs capacity` may be asked about) is
/// taken as it is; never 0.
pub fn gather_period_ns(durable_ns: u64, interval_ns: u64) -> u64 {
    let period = if interval_ns == 0 || durable_ns < interval_ns {
        durable_ns
    } else {
        durable_ns / interval_ns * interval_ns
    };
    debug_assert!(period <= durable_ns);
    period.max(1)
}

/// What a volume's recordings gather with: its commit interval, and whether what
/// they gather goes into a tail log or is written in place.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GatherMode {
    pub commit_interval_ns: u64,
    pub tail_log: bool,
    /// The tail log's ring, bytes (0 without one).
    pub ring_bytes: u64,
}

/// A stream as admission plans it: a playback as asked; a recording with the gather
/// period of its durability interval (`None`: the commit interval; one shorter than
/// that is planned at the commit interval, where the engine refuses it) and the
/// volume's way of gathering.
pub fn stream_ask(
    dir: StreamDir,
    rate_bps: f64,
    request_bytes: u64,
    buffer_bytes: Option<u64>,
    durable_ns: Option<u64>,
    mode: GatherMode,
) -> StreamAsk {
    let interval_ns = mode.commit_interval_ns;
    StreamAsk {
        rate_bytes_per_s: rate_bps / 8.0,
        request_bytes,
        buffer_bytes,
        durable: (dir == StreamDir::Write).then(|| {
            let d = durable_ns.unwrap_or(interval_ns).max(interval_ns);
            Durability {
                interval_ns: d,
                period_ns: gather_period_ns(d, interval_ns),
                tail_log: mode.tail_log,
                ring_bytes: if mode.tail_log { mode.ring_bytes } else { 0 },
            }
        }),
    }
}

/// `512 KiB`, `4 MiB`, `2.5 MiB`.
fn size(bytes: u64) -> String {
    if bytes >= 1 << 20 {
        let m = bytes as f64 / (1u64 << 20) as f64;
        if m.fract() == 0.0 {
            format!("{m:.0} MiB")
        } else {
            format!("{m:.1} MiB")
        }
    } else {
        format!("{} KiB", bytes / 1024)
    }
}

fn mbit(bytes_per_s: f64) -> String {
    format!("{:.2} Mbit/s", bytes_per_s * 8.0 / 1e6)
}

/// As [`mbit`], rounded down to the hundredth shown.
fn mbit_floor(bytes_per_s: f64) -> String {
    format!("{:.2} Mbit/s", (bytes_per_s * 8.0 / 1e4).floor() / 100.0)
}

/// `1 s`, `2.5 s`.
fn seconds(ns: u64) -> String {
    let s = ns as f64 / 1e9;
    if s.fract() == 0.0 {
        format!("{s:.0} s")
    } else {
        format!("{s:.1} s")
    }
}

impl Engine {
    /// How this volume's recordings gather (what admission plans them with).
    pub fn gather_mode(&self) -> GatherMode {
        let sb = self.vol.superblock();
        GatherMode {
            commit_interval_ns: self.commit.interval_ns(),
            tail_log: self.tail.is_some(),
            ring_bytes: sb.tail_log_blocks * crate::format::META_BLOCK_BYTES as u64,
        }
    }

    /// The open streams' loads, as admission plans them.
    pub(in crate::engine) fn open_loads(&self) -> Vec<StreamLoad> {
        let mode = self.gather_mode();
        self.streams
            .values()
            .filter(|s| !s.closed)
            .map(|s| s.load(mode))
            .collect()
    }

    /// What admission plans `spec` with: the open streams' loads, the stream as
    /// asked and with the buffer it would get.
    pub(super) fn plan(&self, adm: &Admission, spec: &StreamSpec) -> (Vec<StreamLoad>, StreamLoad) {
        let admitted = self.open_loads();
        let ask = stream_ask(
            spec.dir,
            spec.rate_bps,
            spec.request_bytes,
            spec.buffer_bytes,
            spec.durable_ns,
            self.gather_mode(),
        );
        // A buffer dvrfs chooses fits what is left of the memory budget (never below
        // two requests: a stream that small is refused for memory, saying so).
        let max_buffer = MAX_STREAM_BUFFER_BYTES
            .min(self.stream_memory_left())
            .max(2 * spec.request_bytes);
        let depth = adm.depth_for(&admitted, &ask, AUTO_SLACK_NS, max_buffer);
        (admitted, ask.with_depth(depth))
    }

    /// Admission: the stream's load (its buffer depth in it) and the device's load
    /// with it, or why not.
    pub(super) fn admit(&self, ino: Ino, spec: &StreamSpec) -> Result<(StreamLoad, f64)> {
        let rate = spec.rate_bps / 8.0;
        if !(rate.is_finite() && rate > 0.0) {
            return Err(spec_error(format!(
                "a stream's rate must be a positive number of bits per second, not {}",
                spec.rate_bps
            )));
        }
        let d = spec.request_bytes;
        if d == 0 || !d.is_multiple_of(4096) || d > MAX_STREAM_REQUEST_BYTES {
            return Err(spec_error(format!(
                "a stream's request size must be a multiple of 4 KiB up to {} MiB, not {d} bytes",
                MAX_STREAM_REQUEST_BYTES >> 20
            )));
        }
        if let Some(b) = spec.buffer_bytes {
            if b < 2 * d || b > MAX_STREAM_BUFFER_BYTES {
                return Err(spec_error(format!(
                    "a stream's buffer must hold at least two requests ({} bytes) and at most {} MiB, not {b} bytes",
                    2 * d,
                    MAX_STREAM_BUFFER_BYTES >> 20
                )));
            }
        }
        if !self.vol.inode_exists(ino) {
            return Err(Error::NotFound(format!("inode {ino}")));
        }
        let st = self.vol.stat(ino)?;
        if st.kind != crate::format::dir::Kind::File {
            return Err(spec_error(format!(
                "inode {ino} is not a regular file: streams read and write files"
            )));
        }
        let Some(adm) = &self.admission else {
            return Err(Error::Refused(
                "this volume was opened without an admission model: open it with a device model (--device-model) or a bandwidth (--bandwidth)".into(),
            ));
        };
        let (admitted, load) = self.plan(adm, spec);
        let mut all = admitted.clone();
        all.push(load);
        let check = adm.check(&all);
        if check.fits {
            return Ok((load, check.load));
        }
        // As planned: in place when the ring cannot hold what it would log.
        let planned = plan_ring(&all).pop().expect("it was pushed");
        let logs = |l: &StreamLoad| l.durable.is_some_and(|d| d.tail_log);
        let beyond_ring = logs(&load) && !logs(&planned);
        let used = adm.check(&admitted).load;
        let left = adm.headroom(&admitted, load);
        // On a disk, a recording whose slack its gather period caps gains nothing from
        // a larger buffer; a longer durability interval spares it short requests. (A
        // bandwidth has no rounds: the hint stays the buffer's.)
        let capped = matches!(adm.capacity, Capacity::Disk { .. })
            && planned.slack_ns() < planned.buffer_slack_ns();
        let q = load.gathered_bytes();
        Err(Error::Refused(format!(
            "asked for a {} stream of {} in {} requests with a {} buffer{}; on {} with a best-effort share of {:.0}%, the {} stream(s) admitted use {:.0}% of the real-time capacity and this one would bring it to {:.0}%; {}",
            spec.dir.name(),
            mbit(rate),
            size(d),
            size(load.depth as u64 * d),
            match load.durable {
                Some(dur) if beyond_ring => format!(
                    ", beyond what the tail log's ring of {} holds for the recordings admitted (its gathers would go in place: {} every {})",
                    size(dur.ring_bytes),
                    size(q),
                    seconds(dur.period_ns)
                ),
                Some(dur) if q < d => format!(
                    ", {} {} every {} to keep its bytes durable",
                    if dur.tail_log { "logging" } else { "writing" },
                    size(q),
                    seconds(dur.period_ns)
                ),
                _ => String::new(),
            },
            adm.describe(),
            adm.be_share * 100.0,
            admitted.len(),
            used * 100.0,
            check.load * 100.0,
            match (left > 0.0, capped) {
                // Rounded down: the rate printed is one that is admitted when asked
                // for (rounded to the nearest, 275.599 printed as 275.60 and 275.6M
                // was then refused).
                (true, false) => format!(
                    "a stream like it fits at up to {} (a larger buffer may also help)",
                    mbit_floor(left)
                ),
                (true, true) => format!(
                    "a stream like it fits at up to {} (a longer durability interval, durable=, may also help)",
                    mbit_floor(left)
                ),
                (false, false) => {
                    "no stream like it fits now: close a stream or ask for a larger buffer".to_string()
                }
                (false, true) => {
                    "no stream like it fits now: close a stream or ask for a longer durability interval (durable=)".to_string()
                }
            }
        )))
    }
}

impl Stream {
    /// The load admission planned this stream with, on a volume gathering so.
    pub(super) fn load(&self, mode: GatherMode) -> StreamLoad {
        stream_ask(
            self.info.dir,
            self.info.rate_bytes_per_s * 8.0,
            self.info.request_bytes,
            None,
            Some(self.info.durable_ns),
            mode,
        )
        .with_depth(self.info.depth)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEC: u64 = 1_000_000_000;

    #[test]
    fn the_gather_period_is_the_durability_interval_in_whole_commit_intervals() {
        assert_eq!(gather_period_ns(SEC, SEC), SEC);
        assert_eq!(gather_period_ns(10 * SEC, SEC), 10 * SEC);
        // Gather points lie an interval apart: 2.5 s gathers every 2 s.
        assert_eq!(gather_period_ns(5 * SEC / 2, SEC), 2 * SEC);
        // Shorter than an interval (capacity's question): as it is, never 0.
        assert_eq!(gather_period_ns(SEC / 2, SEC), SEC / 2);
        assert_eq!(gather_period_ns(0, SEC), 1);
        assert_eq!(gather_period_ns(3 * SEC, 0), 3 * SEC);
    }

    #[test]
    fn a_playback_has_no_period_and_a_recording_never_one_below_the_commit_interval() {
        let mode = |commit_interval_ns| GatherMode {
            commit_interval_ns,
            tail_log: true,
            ring_bytes: 1 << 20,
        };
        let ask = |durable, interval| {
            stream_ask(
                StreamDir::Write,
                4e6,
                512 << 10,
                None,
                durable,
                mode(interval),
            )
        };
        let read = stream_ask(StreamDir::Read, 4e6, 512 << 10, None, Some(SEC), mode(SEC));
        assert_eq!(read.durable, None);
        let write = ask(None, 2 * SEC);
        let two = Durability {
            interval_ns: 2 * SEC,
            period_ns: 2 * SEC,
            tail_log: true,
            ring_bytes: 1 << 20,
        };
        assert_eq!(write.durable, Some(two));
        assert_eq!(ask(Some(SEC), 2 * SEC).durable, Some(two));
        let longer = ask(Some(5 * SEC), 2 * SEC).durable.unwrap();
        assert_eq!((longer.interval_ns, longer.period_ns), (5 * SEC, 4 * SEC));
        assert_eq!(write.rate_bytes_per_s, 500_000.0);
    }
}
