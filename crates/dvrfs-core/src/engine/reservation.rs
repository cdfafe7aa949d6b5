//! A stream reservation written as text: the value of the `user.dvrfs.stream`
//! extended attribute of a mounted volume, and of a directory's default.
//!
//! ```text
//! read:19.39M                      a playback at 19.39 Mbit/s
//! write:8M,duration=2h             a recording; space for 2 hours held at admission
//! write:4M,size=3G,request=1M      a recording of at most 3 GiB in 1 MiB requests
//! read:40M,buffer=64M              a playback with a 64 MiB playout buffer
//! write:500K,duration=24h,durable=5s   a slow recording durable within 5 s, not 1 s
//! ```
//!
//! The rate is bits per second with an optional decimal `K`, `M` or `G`; sizes and
//! durations are written as for every flag of the CLI (`crate::units`): bytes with an
//! optional binary `K`, `M`, `G` or `T`, and a whole number of `ms`, `s`, `m` or `h`
//! (a recording's duration: whole seconds). A recording states its `duration` or its `size`
//! (ABISS 2.3: the space is held at admission, so a full disk is reported at open).
//! Without `request` a stream moves [`DEFAULT_REQUEST_BYTES`] per disk request; without
//! `buffer` dvrfs chooses the buffer from the device's admission model. Without
//! `durable` a recording's accepted bytes are durable within the volume's commit
//! interval (`StreamSpec::durable_ns`).
//!
//! A directory's default is stored in its inode ([`StreamDefault`]): a rate, the
//! direction, a write default's duration and the request size. A buffer or a size are
//! per file and are refused on a directory.

use super::stream::{StreamDir, StreamSpec, MAX_STREAM_REQUEST_BYTES};
use crate::format::inode::StreamDefault;
use std::fmt;

/// Bytes per disk request when a reservation does not say (as `dvrfs record`).
pub const DEFAULT_REQUEST_BYTES: u64 = 512 << 10;

/// The longest a recording's `duration` may be: 365 days (`8760h`). Longer is refused
/// rather than held: the space it would reserve is beyond any volume, and the product
/// of a rate and an absurd duration must never wrap to a small reservation.
pub const MAX_RECORDING_DURATION_S: u64 = 365 * 24 * 3600;

/// The longest a recording's `durable` interval may be: 24 hours (as `record
/// --durable`); longer would keep accepted bytes off the journal for days.
pub const MAX_DURABLE_MS: u64 = 24 * 3_600_000;

/// A parsed reservation.
#[derive(Clone, Debug, PartialEq)]
pub struct Reservation {
    pub dir: StreamDir,
    pub rate_bps: u64,
    pub request_bytes: u64,
    pub buffer_bytes: Option<u64>,
    /// A recording: how long it will record...
    pub duration_s: Option<u64>,
    /// ...or how many bytes it will write.
    pub size_bytes: Option<u64>,
    /// A recording: its durability interval, if not the volume's commit interval.
    pub durable_ms: Option<u64>,
}

impl Reservation {
    /// Parses `read:RATE[,...]` or `write:RATE,duration=D|size=S[,...]`; the error
    /// says what is wrong and what is expected.
    pub fn parse(text: &str) -> Result<Reservation, String> {
        let text = text.trim().trim_end_matches('\0');
        let usage = "expected read:RATE[,request=SIZE][,buffer=SIZE] or write:RATE,duration=TIME|size=SIZE[,request=SIZE][,buffer=SIZE][,durable=TIME], e.g. read:19.39M or write:8M,duration=2h";
        let (head, rest) = text.split_once(',').unwrap_or((text, ""));
        let (dir, rate) = head
            .split_once(':')
            .ok_or_else(|| format!("{text:?}: no direction and rate; {usage}"))?;
        let dir = match dir.trim() {
            "read" => StreamDir::Read,
            "write" => StreamDir::Write,
            d => return Err(format!("{text:?}: unknown direction {d:?}; {usage}")),
        };
        let rate_bps = crate::units::parse_rate_bps(rate)
            .filter(|r| *r >= 1.0 && *r <= 1e12)
            .ok_or_else(|| {
                format!("{text:?}: {rate:?} is not a rate in bits per second (e.g. 8M, 19.39M, 500K); {usage}")
            })? as u64;
        let mut r = Reservation {
            dir,
            rate_bps,
            request_bytes: DEFAULT_REQUEST_BYTES,
            buffer_bytes: None,
            duration_s: None,
            size_bytes: None,
            durable_ms: None,
        };
        for opt in rest.split(',').filter(|o| !o.trim().is_empty()) {
            let (k, v) = opt
                .split_once('=')
                .ok_or_else(|| format!("{text:?}: {opt:?} is not key=value; {usage}"))?;
            let v = v.trim();
            match k.trim() {
                "request" => r.request_bytes = size(v).map_err(|e| format!("request={v}: {e}"))?,
                "buffer" => r.buffer_bytes = Some(size(v).map_err(|e| format!("buffer={v}: {e}"))?),
                "size" => r.size_bytes = Some(size(v).map_err(|e| format!("size={v}: {e}"))?),
                "duration" => {
                    r.duration_s = Some(duration_s(v).map_err(|e| format!("duration={v}: {e}"))?)
                }
                "durable" => {
                    let ms =
                        crate::units::duration_ms(v).map_err(|e| format!("durable={v}: {e}"))?;
                    if ms == 0 || ms > MAX_DURABLE_MS {
                        return Err(format!(
                            "{text:?}: durable= must be from 1ms to {}h",
                            MAX_DURABLE_MS / 3_600_000
                        ));
                    }
                    r.durable_ms = Some(ms);
                }
                k => return Err(format!("{text:?}: unknown option {k:?}; {usage}")),
            }
        }
        let d = r.request_bytes;
        if d == 0 || !d.is_multiple_of(4096) || d > MAX_STREAM_REQUEST_BYTES {
            return Err(format!(
                "{text:?}: the request size must be a multiple of 4K up to {}M",
                MAX_STREAM_REQUEST_BYTES >> 20
            ));
        }
        match (dir, r.duration_s, r.size_bytes) {
            (StreamDir::Read, None, None) if r.durable_ms.is_some() => {
                return Err(format!(
                    "{text:?}: durable= is for recordings (write:...): a playback writes nothing"
                ))
            }
            (StreamDir::Read, None, None) => {}
            (StreamDir::Read, _, _) => {
                return Err(format!(
                    "{text:?}: duration and size are for recordings (write:...), a playback reads the file as it is"
                ))
            }
            (StreamDir::Write, Some(_), Some(_)) => {
                return Err(format!("{text:?}: give a recording's duration or its size, not both"))
            }
            (StreamDir::Write, None, None) => {
                return Err(format!(
                    "{text:?}: a recording states how long it records (duration=2h) or how much it writes (size=3G): that space is held at admission, so a full disk is reported now and never after data was accepted"
                ))
            }
            (StreamDir::Write, _, _) => {}
        }
        Ok(r)
    }

    /// The bytes a recording holds at admission (0 for a playback).
    pub fn reserve_bytes(&self) -> u64 {
        match (self.size_bytes, self.duration_s) {
            (Some(s), _) => s,
            (None, Some(secs)) => {
                // Saturating, never wrapping: an absurd product holds everything
                // (and admission refuses it), not nothing.
                let b = (self.rate_bps as u128 * secs as u128).div_ceil(8);
                let max = u64::MAX - u64::MAX % 4096;
                (b.min(max as u128) as u64).next_multiple_of(4096)
            }
            (None, None) => 0,
        }
    }

    /// What the engine is asked to admit; a playback starts at `start_bytes`.
    pub fn spec(&self, start_bytes: u64) -> StreamSpec {
        StreamSpec {
            idle: false,
            dir: self.dir,
            rate_bps: self.rate_bps as f64,
            request_bytes: self.request_bytes,
            buffer_bytes: self.buffer_bytes,
            reserve_bytes: self.reserve_bytes(),
            start_bytes,
            durable_ns: self.durable_ms.map(|ms| ms.saturating_mul(1_000_000)),
        }
    }

    /// As a directory's default, or why it cannot be one.
    pub fn to_default(&self) -> Result<StreamDefault, String> {
        if self.buffer_bytes.is_some() || self.size_bytes.is_some() || self.durable_ms.is_some() {
            return Err(format!(
                "{self}: a directory's default gives every file the same rate, direction, duration and request size; a buffer, a size or a durability interval are set per file"
            ));
        }
        let secs = match self.duration_s {
            Some(s) => u32::try_from(s)
                .map_err(|_| format!("{self}: a default's duration is at most {} s", u32::MAX))?,
            None => 0,
        };
        Ok(StreamDefault {
            write: self.dir == StreamDir::Write,
            rate_bps: self.rate_bps,
            secs,
            request_kib: (self.request_bytes / 1024) as u32,
        })
    }

    /// A directory's stored default as a reservation.
    pub fn from_default(d: &StreamDefault) -> Reservation {
        let write = d.write;
        Reservation {
            dir: if write {
                StreamDir::Write
            } else {
                StreamDir::Read
            },
            rate_bps: d.rate_bps,
            request_bytes: if d.request_kib == 0 {
                DEFAULT_REQUEST_BYTES
            } else {
                d.request_kib as u64 * 1024
            },
            buffer_bytes: None,
            duration_s: write.then_some(d.secs as u64),
            size_bytes: None,
            durable_ms: None,
        }
    }
}

/// The canonical text: `write:8M,duration=7200s,request=512K`.
impl fmt::Display for Reservation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.dir.name(), rate(self.rate_bps))?;
        if let Some(s) = self.duration_s {
            write!(f, ",duration={s}s")?;
        }
        if let Some(s) = self.size_bytes {
            write!(f, ",size={}", show_size(s))?;
        }
        write!(f, ",request={}", show_size(self.request_bytes))?;
        if let Some(b) = self.buffer_bytes {
            write!(f, ",buffer={}", show_size(b))?;
        }
        if let Some(ms) = self.durable_ms {
            write!(f, ",durable={ms}ms")?;
        }
        Ok(())
    }
}

/// `8M`, `19.39M`, `500K`, `1234`.
pub fn rate(bps: u64) -> String {
    for (unit, div) in [("G", 1_000_000_000u64), ("M", 1_000_000), ("K", 1_000)] {
        if bps >= div {
            let v = bps as f64 / div as f64;
            let s = format!("{v:.6}");
            let s = s.trim_end_matches('0').trim_end_matches('.');
            return format!("{s}{unit}");
        }
    }
    bps.to_string()
}

fn show_size(b: u64) -> String {
    for (unit, shift) in [("G", 30), ("M", 20), ("K", 10)] {
        if b >= 1 << shift && b.is_multiple_of(1 << shift) {
            return format!("{}{unit}", b >> shift);
        }
    }
    b.to_string()
}

fn size(v: &str) -> Result<u64, String> {
    crate::units::size_bytes(v)
}

/// A recording's duration in whole seconds, more than 0.
fn duration_s(v: &str) -> Result<u64, String> {
    let ms = crate::units::duration_ms(v)?;
    if ms == 0 {
        return Err("must be more than 0".into());
    }
    if !ms.is_multiple_of(1000) {
        return Err("must be a whole number of seconds".into());
    }
    if ms / 1000 > MAX_RECORDING_DURATION_S {
        return Err(format!(
            "longer than a recording's limit of {}h (365 days)",
            MAX_RECORDING_DURATION_S / 3600
        ));
    }
    Ok(ms / 1000)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn absurd_durations_are_refused_never_wrapped() {
        let e = Reservation::parse("write:1M,duration=99999999999h").unwrap_err();
        assert!(e.contains("8760h"), "{e}");
        let e = Reservation::parse("write:1M,duration=1h,durable=25h").unwrap_err();
        assert!(e.contains("from 1ms to 24h"), "{e}");
        let r = Reservation::parse("write:1M,duration=8760h").unwrap();
        assert_eq!(
            r.reserve_bytes(),
            (1_000_000u64 * 8760 * 3600 / 8).next_multiple_of(4096)
        );
        // The largest product saturates.
        let big = Reservation {
            rate_bps: u64::MAX,
            duration_s: Some(u64::MAX),
            ..r
        };
        assert!(big.reserve_bytes() > u64::MAX - 4096);
    }

    #[test]
    fn reservations_parse_and_print_canonically() {
        let r = Reservation::parse("read:19.39M").unwrap();
        assert_eq!(r.dir, StreamDir::Read);
        assert_eq!(r.rate_bps, 19_390_000);
        assert_eq!(r.reserve_bytes(), 0);
        assert_eq!(r.to_string(), "read:19.39M,request=512K");
        let w = Reservation::parse("write:8M,duration=2h").unwrap();
        assert_eq!(w.duration_s, Some(7200));
        assert_eq!(w.reserve_bytes(), 7_200_000_000u64.next_multiple_of(4096));
        assert_eq!(w.to_string(), "write:8M,duration=7200s,request=512K");
        assert_eq!(Reservation::parse(&w.to_string()).unwrap(), w);
        let s = Reservation::parse("write:4M,size=3G,request=1M,buffer=16M").unwrap();
        assert_eq!(s.reserve_bytes(), 3 << 30);
        assert_eq!(s.spec(0).buffer_bytes, Some(16 << 20));
        assert_eq!(Reservation::parse(&s.to_string()).unwrap(), s);
        let slow = Reservation::parse("write:500K,duration=24h,durable=5s").unwrap();
        assert_eq!(slow.durable_ms, Some(5000));
        assert_eq!(slow.spec(0).durable_ns, Some(5_000_000_000));
        assert_eq!(
            slow.to_string(),
            "write:500K,duration=86400s,request=512K,durable=5000ms"
        );
        assert_eq!(Reservation::parse(&slow.to_string()).unwrap(), slow);
        assert_eq!(w.spec(0).durable_ns, None);
        // setfattr may pass a trailing NUL.
        assert!(Reservation::parse("read:500K\0").is_ok());
    }

    #[test]
    fn bad_reservations_say_what_is_wrong() {
        for (bad, why) in [
            ("", "no direction"),
            ("play:8M", "unknown direction"),
            ("read:fast", "not a rate"),
            ("read:0", "not a rate"),
            ("write:8M", "states how long"),
            ("write:8M,duration=2h,size=1G", "not both"),
            ("read:8M,duration=1h", "for recordings"),
            ("read:8M,request=1000", "multiple of 4K"),
            ("read:8M,request=64M", "multiple of 4K"),
            ("write:8M,duration=2", "unit is missing"),
            ("write:8M,duration=0s", "more than 0"),
            ("read:8M,colour=red", "unknown option"),
            ("read:8M,buffer", "key=value"),
            ("read:8M,durable=2s", "for recordings"),
            ("write:8M,duration=1h,durable=0s", "from 1ms to 24h"),
            ("write:8M,duration=1h,durable=soon", "durable=soon"),
        ] {
            let e = Reservation::parse(bad).unwrap_err();
            assert!(e.contains(why), "{bad:?}: {e}");
        }
    }

    #[test]
    fn a_default_round_trips_through_the_inode_fields() {
        let w = Reservation::parse("write:8M,duration=2h,request=1M").unwrap();
        let d = w.to_default().unwrap();
        assert_eq!(Reservation::from_default(&d), w);
        let r = Reservation::parse("read:19.39M").unwrap();
        assert_eq!(Reservation::from_default(&r.to_default().unwrap()), r);
        let e = Reservation::parse("write:8M,size=1G")
            .unwrap()
            .to_default()
            .unwrap_err();
        assert!(e.contains("per file"), "{e}");
        let e = Reservation::parse("write:8M,duration=1h,durable=5s")
            .unwrap()
            .to_default()
            .unwrap_err();
        assert!(e.contains("durability"), "{e}");
    }
}
