//! The buffer series of a run: the playout buffer of the first playback (or the
//! write-behind of the first recording) every 100 ms, for plots.

use super::client;
use super::{Client, Series, SimConfig};

/// The buffer level of the first playback (else the first recording) over the run
/// when the run keeps series ([`SimConfig::keep_series`]), with the stream and
/// whether it records; empty otherwise.
pub fn buffer_level(
    cfg: &SimConfig,
    client: &Client,
    until_ns: u64,
) -> (Series, Option<(u32, bool)>) {
    let streams = &client.streams;
    match client::series_stream(streams).filter(|_| cfg.keep_series) {
        Some(k) => {
            let st = &streams[k as usize];
            (
                buffer_series(st, cfg.request_bytes, cfg.depth, until_ns),
                Some((k, st.write)),
            )
        }
        None => (Vec::new(), None),
    }
}

/// Every 100 ms: a playback's playout buffer (bytes delivered minus bytes played), or
/// a recording's write-behind (bytes produced minus bytes written).
fn buffer_series(
    st: &client::Stream,
    request_bytes: u64,
    depth: u32,
    until_ns: u64,
) -> Vec<(u64, i64)> {
    let t_play = st.t0_ns + depth as u64 * st.period_ns;
    let mut done = st.done_ns.clone();
    done.sort_unstable();
    let step = 100_000_000;
    let mut out = Vec::new();
    let mut i = 0;
    let mut t = 0;
    while t <= until_ns.min(120_000_000_000) {
        while i < done.len() && done[i] <= t {
            i += 1;
        }
        let completed = i as i64 * request_bytes as i64;
        if st.write {
            let produced = if t > st.t0_ns {
                ((t - st.t0_ns) as f64 / st.period_ns as f64 * request_bytes as f64) as i64
            } else {
                0
            };
            out.push((t, produced - completed));
        } else {
            let played = if t > t_play {
                ((t - t_play) as f64 / st.period_ns as f64 * request_bytes as f64) as i64
            } else {
                0
            };
            out.push((t, completed - played));
        }
        t += step;
    }
    out
}
