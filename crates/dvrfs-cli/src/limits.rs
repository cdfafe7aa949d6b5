//! The ranges of the numeric settings several commands share: a stream's rate,
//! request and buffer, an admission bandwidth, a simulated stream's depth, and the
//! checks that turn a value outside its range into a usage error (exit status 2)
//! naming the flag and the range, before anything runs (issue 22 item 16).
//!
//! Each limit is far beyond any real use and far below what would overflow, hang a
//! run for days or fill the engine: the point is that an absurd value (a typo, a
//! script's garbage) is refused at once with what to give instead, never accepted to
//! fail later as a runtime error or never end.

use crate::error::{CliError, CliResult};
use dvrfs_core::engine::{MAX_STREAM_BUFFER_BYTES, MAX_STREAM_REQUEST_BYTES};

/// The range of a stream's rate (`record`/`play`/`status --rate`, `sim`/`capacity`
/// `--bitrate`, a `--workload` group's `@RATE`): 8 kbit/s (the slowest audio) to
/// 100 Gbit/s. A slower stream would hold its reservation for days to move a few
/// bytes (and a simulated one run a virtual hour for ever).
pub const MIN_STREAM_RATE_BPS: f64 = 8e3;
pub const MAX_STREAM_RATE_BPS: f64 = 100e9;
const STREAM_RATE_RANGE: &str = "from 8K to 100G bits per second";

/// The range of an admission `--bandwidth` (`mount`, `record`, `play`, `status`, and
/// `-o bandwidth=`): 1 Mbit/s (an SD card) to 1 Tbit/s (beyond any device). Below it
/// every stream is refused; above it admission bounds nothing.
pub const MIN_BANDWIDTH_BPS: f64 = 1e6;
pub const MAX_BANDWIDTH_BPS: f64 = 1e12;
const BANDWIDTH_RANGE: &str = "from 1M to 1T bits per second";

/// The most requests a simulated stream keeps outstanding (`sim`/`capacity`/`bench
/// --depth`): 64, a buffer of 64 requests being far more slack than any admission
/// gives (the paper's streams use 8).
pub const MAX_STREAM_DEPTH: u32 = 64;

/// The most stream requests a `sim` or `bench` run has outstanding at once, all its
/// streams' `--depth` together: half the engine's operations in flight
/// (`DEFAULT_MAX_OPS`, 65,536), the other half left to best-effort traffic and the
/// journal. More filled the engine and failed the run.
pub const MAX_RUN_STREAM_REQUESTS: u64 = dvrfs_core::engine::DEFAULT_MAX_OPS as u64 / 2;

/// The most requests `--be-depth` keeps in flight: the scheduler's queue depth
/// bound, 256.
pub const MAX_BE_DEPTH: u32 = dvrfs_core::sched::MAX_QUEUE_DEPTH;

/// The largest `--merge` (the device command contiguous requests are merged into):
/// 64 MiB, sixteen of the largest stream requests.
pub const MAX_MERGE_BYTES: u64 = 64 << 20;

/// The largest recording `sim --best-effort delete` removes (`--delete-size`): 16 TiB,
/// twice the largest disk model; it is clipped to what the fill writes anyway.
pub const MAX_DELETE_BYTES: u64 = 16 << 40;

/// The longest `status --sample`: an hour of watching the disk's load.
pub const MAX_SAMPLE_MS: u64 = 3_600_000;

/// `mkfs --commit-interval` at most an hour: the interval is what a crash can cost
/// of the metadata (the files written meanwhile), and longer is no use to anyone.
pub const MAX_COMMIT_INTERVAL_MS: u32 = 3_600_000;

/// `record --size` at most 1024 TiB (a recording's space is checked against the
/// volume at open; this only keeps the number sane).
pub const MAX_RECORD_BYTES: u64 = 1 << 50;

/// The largest `--tail-log` (mkfs, sim, capacity): 4 GiB, sixteen times the largest
/// default ring (256 MiB), which already holds two partial requests of every
/// recording an 8 TB disk admits.
pub const MAX_TAIL_LOG_BYTES: u64 = 4 << 30;

/// The most streams a `--workload` runs (all groups together): 4,096, ten times what
/// the largest disk model admits at the lowest rates.
pub const MAX_SIM_STREAMS: u64 = 4096;

/// A `--workload`'s numbers: at most [`MAX_SIM_STREAMS`] streams, each group's
/// `@RATE` in the stream rate's range, and its streams' requests outstanding
/// (`--depth` each) at most [`MAX_RUN_STREAM_REQUESTS`].
pub fn check_workload(
    spec: &str,
    workload: &dvrfs_core::sim::Workload,
    depth: u32,
) -> CliResult<()> {
    let streams: u64 = workload.groups.iter().map(|g| u64::from(g.count)).sum();
    if streams > MAX_SIM_STREAMS {
        return Err(CliError::usage(
            format!("--workload {spec}: {streams} streams, more than {MAX_SIM_STREAMS}"),
            format!("give at most {MAX_SIM_STREAMS} streams in all (a disk carries a few hundred at the lowest rates)"),
        ));
    }
    for g in &workload.groups {
        match g.bitrate_bps {
            Some(r) if !(MIN_STREAM_RATE_BPS..=MAX_STREAM_RATE_BPS).contains(&r) => {
                return Err(out_of_range(
                    "--workload",
                    spec,
                    &format!("a group's @RATE is {STREAM_RATE_RANGE}, not {r} bits per second"),
                    "e.g. --workload 4r@19.39M,8w@8M",
                ))
            }
            _ => {}
        }
    }
    let requests = streams * u64::from(depth);
    if requests > MAX_RUN_STREAM_REQUESTS {
        return Err(CliError::usage(
            format!(
                "--workload {spec} --depth {depth}: {requests} stream requests outstanding, more than {MAX_RUN_STREAM_REQUESTS}"
            ),
            "give fewer streams or a smaller --depth (their product is at most 32768)",
        ));
    }
    Ok(())
}

/// A usage error: `FLAG TEXT: out of range: RANGE`.
pub fn out_of_range(flag: &str, text: &str, range: &str, hint: &str) -> CliError {
    CliError::usage(
        format!("{flag} {text}: out of range: {range}"),
        hint.to_string(),
    )
}

/// A bit rate: bits per second with an optional decimal K, M or G.
pub fn bit_rate(flag: &str, text: &str) -> CliResult<f64> {
    dvrfs_core::sim::workload::parse_rate_bps(text)
        .filter(|r| r.is_finite() && *r > 0.0)
        .ok_or_else(|| {
            CliError::usage(
                format!("{flag} {text:?} is not a bit rate"),
                "give bits per second with K/M/G (decimal), e.g. 19.39M",
            )
        })
}

/// A stream's rate, in [`MIN_STREAM_RATE_BPS`]..=[`MAX_STREAM_RATE_BPS`].
pub fn stream_rate(flag: &str, text: &str) -> CliResult<f64> {
    let r = bit_rate(flag, text)?;
    if !(MIN_STREAM_RATE_BPS..=MAX_STREAM_RATE_BPS).contains(&r) {
        return Err(out_of_range(
            flag,
            text,
            STREAM_RATE_RANGE,
            "give the stream's rate in bits per second with K/M/G (decimal), e.g. 19.39M",
        ));
    }
    Ok(r)
}

/// An admission bandwidth, in [`MIN_BANDWIDTH_BPS`]..=[`MAX_BANDWIDTH_BPS`].
pub fn bandwidth(flag: &str, text: &str) -> CliResult<f64> {
    let r = bit_rate(flag, text)?;
    if !(MIN_BANDWIDTH_BPS..=MAX_BANDWIDTH_BPS).contains(&r) {
        return Err(out_of_range(
            flag,
            text,
            BANDWIDTH_RANGE,
            "give the device's bandwidth in bits per second with K/M/G (decimal), e.g. 800M",
        ));
    }
    Ok(r)
}

/// A stream's request size: a multiple of 4K from 4K to 16M.
pub fn stream_request(flag: &str, text: &str, hint: &str) -> CliResult<u64> {
    let bytes = crate::args::parse_size(flag, text)?;
    if bytes == 0 || !bytes.is_multiple_of(4096) || bytes > MAX_STREAM_REQUEST_BYTES {
        return Err(CliError::usage(
            format!(
                "invalid {flag} {text:?}: out of range: a request size is a multiple of 4K from 4K to {}M",
                MAX_STREAM_REQUEST_BYTES >> 20
            ),
            hint.to_string(),
        ));
    }
    Ok(bytes)
}

/// A stream's `--buffer`: at least two of its requests, at most 256M (the engine's
/// [`MAX_STREAM_BUFFER_BYTES`]).
pub fn stream_buffer(text: &str, request_bytes: u64) -> CliResult<u64> {
    let bytes = crate::args::parse_size("--buffer", text)?;
    let min = 2 * request_bytes;
    if !(min..=MAX_STREAM_BUFFER_BYTES).contains(&bytes) {
        return Err(out_of_range(
            "--buffer",
            text,
            &format!(
                "from two requests ({}K) to {}M",
                min >> 10,
                MAX_STREAM_BUFFER_BYTES >> 20
            ),
            "leave it out for the buffer admission chooses, or give e.g. --buffer 4M",
        ));
    }
    Ok(bytes)
}

/// A size flag in `range` (bytes), shown as `shown`.
pub fn size_in(
    flag: &str,
    text: &str,
    range: std::ops::RangeInclusive<u64>,
    shown: &str,
    hint: &str,
) -> CliResult<u64> {
    let bytes = crate::args::parse_size(flag, text)?;
    if !range.contains(&bytes) {
        return Err(out_of_range(flag, text, shown, hint));
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::EXIT_USAGE;

    #[test]
    fn rates_outside_their_range_are_usage_errors() {
        assert_eq!(stream_rate("--rate", "8K").unwrap(), 8e3);
        assert_eq!(stream_rate("--rate", "100G").unwrap(), 100e9);
        for bad in ["1", "7.9K", "101G"] {
            let e = stream_rate("--bitrate", bad).unwrap_err();
            assert_eq!(e.exit_code, EXIT_USAGE, "{bad}");
            assert!(e.message.contains("--bitrate"), "{}", e.message);
            assert!(e.message.contains("from 8K to 100G"), "{}", e.message);
        }
        assert!(bandwidth("--bandwidth", "1M").is_ok());
        assert!(bandwidth("--bandwidth", "999K").is_err());
        assert!(bandwidth("--bandwidth", "2T").is_err());
    }

    #[test]
    fn buffers_hold_two_requests_up_to_the_engines_most() {
        assert_eq!(stream_buffer("1M", 512 << 10).unwrap(), 1 << 20);
        assert_eq!(stream_buffer("256M", 512 << 10).unwrap(), 256 << 20);
        for bad in ["1", "1023K", "257M", "999T"] {
            let e = stream_buffer(bad, 512 << 10).unwrap_err();
            assert!(
                e.message.contains("from two requests (1024K) to 256M"),
                "{}",
                e.message
            );
        }
    }
}
