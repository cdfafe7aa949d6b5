//! `record --ring 30m|20G`: the time-shift ring (issue 26; docs/retention.md, "The
//! time-shift ring"). A chunked recording whose stream directory keeps only its last
//! RING: the directory's own retention policy is set to `max-age=RING` (a duration)
//! or `max-size=RING` (a size) before the first byte, and the engine's retention
//! deletes the oldest chunk as soon as it falls out of the ring (a plan is made when
//! each chunk starts and when the oldest one's age passes the ring: the engine's
//! `retention.rs`). The recording never waits for the ring: a deletion is
//! metadata-only best-effort work beside it.
//!
//! What is kept is between RING and RING plus one chunk: a chunk goes once its end
//! is older than RING (or once the stream holds more than RING bytes without it),
//! so the oldest chunk left starts at most RING plus a chunk ago. A ring shorter
//! than two chunks is refused (it would keep one chunk and a part).

use dvrfs_core::engine::{Op, StreamSpec};
use dvrfs_core::format::inode::StreamRetention;
use dvrfs_core::meta::Ino;
use dvrfs_core::volume::SetAttr;
use dvrfs_remote::Handle;

use crate::error::{CliError, CliResult};
use dvrfs_core::media::ChunkLimit;

/// The chunk length of a time ring without `--chunk`: a twelfth of the ring, from 1 s
/// to the default minute (a 2-minute ring gets 10-second chunks).
const RING_CHUNKS: u64 = 12;

/// What the ring keeps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ring {
    /// The last this many seconds.
    Age(u32),
    /// The last this many bytes.
    Size(u64),
}

/// `--ring`: a duration (`2m`, `30m`, `24h`) or a size (`20G`).
pub fn parse(text: &str) -> CliResult<Ring> {
    if let Ok(ms) = crate::args::parse_duration_ms("--ring", text) {
        let s = ms / 1000;
        if ms % 1000 == 0 && s > 0 {
            if let Ok(s) = u32::try_from(s) {
                return Ok(Ring::Age(s));
            }
        }
    } else if let Ok(b) = crate::args::parse_size("--ring", text) {
        if b >= 1 << 20 {
            return Ok(Ring::Size(b));
        }
    }
    Err(CliError::usage(
        format!("invalid --ring {text:?}"),
        "give a whole number of seconds, minutes or hours (30s, 2m, 24h) or a size of at least 1M (20G)",
    ))
}

/// The chunk length a ring records with when `--chunk` is not given.
pub fn default_chunk(ring: Ring) -> ChunkLimit {
    match ring {
        Ring::Age(s) => {
            let ms = (u64::from(s) * 1000 / RING_CHUNKS).clamp(1000, 60_000);
            ChunkLimit::Duration90k(ms as i64 * 90)
        }
        Ring::Size(_) => ChunkLimit::Duration90k(60 * 90_000),
    }
}

/// Refuses a ring shorter than two chunks (at the recording's rate).
pub fn check(ring: Ring, chunk: ChunkLimit, text: &str, rate_bytes: f64) -> CliResult<()> {
    let chunk_s = match chunk {
        ChunkLimit::Duration90k(t) => t as f64 / 90_000.0,
        ChunkLimit::Bytes(b) => b as f64 / rate_bytes,
    };
    let ring_s = match ring {
        Ring::Age(s) => f64::from(s),
        Ring::Size(b) => b as f64 / rate_bytes,
    };
    if ring_s < 2.0 * chunk_s {
        return Err(CliError::usage(
            format!(
                "--ring {text} keeps {ring_s:.1} s at this rate, less than two chunks of {chunk_s:.1} s"
            ),
            "give a longer ring or a shorter --chunk: the ring keeps whole chunks",
        ));
    }
    Ok(())
}

/// Sets the stream directory's own policy to the ring (replacing what it had).
pub fn apply(rt: &Handle, dir: Ino, ring: Ring) -> CliResult<()> {
    let policy = match ring {
        Ring::Age(s) => StreamRetention {
            max_age_s: s,
            ..StreamRetention::default()
        },
        Ring::Size(b) => StreamRetention {
            max_bytes: b,
            ..StreamRetention::default()
        },
    };
    let set = SetAttr {
        retention: Some(Some(policy)),
        ..SetAttr::default()
    };
    rt.run(Op::SetAttr { ino: dir, set }, None, 0)?;
    Ok(())
}

/// A ring's recording holds at most the ring and two chunks (`--duration 24h` of a
/// 2-minute ring does not hold a day's space): past that it writes into the space
/// its own oldest chunks free.
pub fn cap_reserve(spec: &mut StreamSpec, ring: Ring, chunk: ChunkLimit, rate_bytes: f64) {
    let ring_bytes = match ring {
        Ring::Age(s) => (f64::from(s) * rate_bytes) as u64,
        Ring::Size(b) => b,
    };
    let chunk_bytes = match chunk {
        ChunkLimit::Duration90k(t) => (t as f64 / 90_000.0 * rate_bytes) as u64,
        ChunkLimit::Bytes(b) => b,
    };
    spec.reserve_bytes = spec.reserve_bytes.min(ring_bytes + 2 * chunk_bytes);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rings_are_durations_or_sizes_and_bad_ones_say_what_to_give() {
        assert_eq!(parse("2m").unwrap(), Ring::Age(120));
        assert_eq!(parse("24h").unwrap(), Ring::Age(86_400));
        assert_eq!(parse("20G").unwrap(), Ring::Size(20 << 30));
        for bad in ["0s", "1500ms", "4K", "fast", ""] {
            let e = parse(bad).unwrap_err().message;
            assert!(e.contains("--ring"), "{bad}: {e}");
        }
    }

    #[test]
    fn a_time_ring_gets_a_twelfth_of_itself_per_chunk_within_1_s_and_a_minute() {
        assert_eq!(
            default_chunk(Ring::Age(120)),
            ChunkLimit::Duration90k(10 * 90_000)
        );
        assert_eq!(default_chunk(Ring::Age(6)), ChunkLimit::Duration90k(90_000));
        assert_eq!(
            default_chunk(Ring::Age(3600)),
            ChunkLimit::Duration90k(60 * 90_000)
        );
    }

    #[test]
    fn a_ring_of_less_than_two_chunks_is_refused() {
        let ten_s = ChunkLimit::Duration90k(10 * 90_000);
        assert!(check(Ring::Age(20), ten_s, "20s", 5e6).is_ok());
        assert!(check(Ring::Age(19), ten_s, "19s", 5e6).is_err());
        // 5 MB/s: 10 s is 50 MB.
        assert!(check(Ring::Size(100_000_000), ten_s, "100M", 5e6).is_ok());
        assert!(check(Ring::Size(90_000_000), ten_s, "90M", 5e6).is_err());
    }
}
