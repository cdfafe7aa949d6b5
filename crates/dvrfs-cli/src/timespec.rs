//! Where in a recording a command starts or ends (`play --from`, `export --from/--to`,
//! `keyframe --at`), and how the CLI shows a moment: the one place where local time
//! exists. The file system stores UTC only; a local time is read and written here,
//! in the zone `--tz` names (an IANA name such as `Europe/Berlin`) or the host's.
//!
//! The forms a user gives:
//! - an RFC 3339 time with its offset (`2026-11-28T14:03:10Z`, `...+01:00`): exact;
//! - a local date and time without an offset (`2026-11-28T14:03:10`, or with a space):
//!   in the zone; a time the clocks skipped (spring forward) or passed twice (fall
//!   back) is an **error that lists the candidates**, never a guess: a DVR user
//!   asking for the second 01:30 of a night must get the second 01:30 or be told;
//! - `+90s`, `+1h30m`: after the stream's first frame;
//! - `-5m`: before its end (live: before now);
//! - `frame:N`: the stream's frame N (0-based).
//!
//! The commands that take these (`play --from`, `export`, `keyframe`, `timeline`)
//! come with the frame index (issue 25); until then only the tests use this module.
#![allow(dead_code)]

use jiff::civil::DateTime;
use jiff::tz::{AmbiguousOffset, Offset, TimeZone};
use jiff::Timestamp;

use crate::error::{CliError, CliResult};

/// A point in a recording as the user named it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum At {
    /// A moment: ns since the Unix epoch, UTC.
    Utc(i64),
    /// This long after the stream's first frame, ns.
    SinceStart(u64),
    /// This long before the stream's end (or now, while it records), ns.
    BeforeEnd(u64),
    /// The stream's frame of this number.
    Frame(u64),
}

/// The zone local times are read and shown in.
#[derive(Clone, Debug)]
pub struct Zone {
    tz: TimeZone,
    name: String,
}

impl Zone {
    /// `--tz NAME`, or the host's zone (`TZ`, `/etc/localtime`); UTC when the host
    /// has none.
    pub fn new(tz: Option<&str>) -> CliResult<Zone> {
        match tz {
            Some(name) => {
                let tz = TimeZone::get(name).map_err(|e| {
                    CliError::usage(
                        format!("unknown --tz {name:?}: {e}"),
                        "give an IANA zone name such as Europe/Berlin or America/New_York, or UTC (the names are in /usr/share/zoneinfo: install tzdata)",
                    )
                })?;
                Ok(Zone {
                    tz,
                    name: name.to_string(),
                })
            }
            None => {
                let tz = TimeZone::try_system().unwrap_or(TimeZone::UTC);
                let name = tz.iana_name().unwrap_or("UTC").to_string();
                Ok(Zone { tz, name })
            }
        }
    }

    pub fn utc() -> Zone {
        Zone {
            tz: TimeZone::UTC,
            name: "UTC".into(),
        }
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// A moment in this zone, as `2026-11-28 14:03:10.250 CET`.
    pub fn show(&self, utc_ns: i64) -> String {
        match Timestamp::from_nanosecond(i128::from(utc_ns)) {
            Ok(ts) => {
                let z = ts.to_zoned(self.tz.clone());
                let abbrev = self.tz.to_offset_info(ts).abbreviation().to_string();
                format!("{} {abbrev}", z.strftime("%Y-%m-%d %H:%M:%S%.3f"))
            }
            Err(_) => format!("{utc_ns} ns since the epoch (out of range)"),
        }
    }
}

/// A moment as RFC 3339 in UTC (`2026-11-28T13:03:10.25Z`): what JSON output and
/// the file system hold.
pub fn rfc3339(utc_ns: i64) -> String {
    Timestamp::from_nanosecond(i128::from(utc_ns))
        .map_or_else(|_| format!("{utc_ns}ns"), |t| t.to_string())
}

const FORMS: &str = "give an RFC 3339 time (2026-11-28T14:03:10Z or with an offset), a local date and time (2026-11-28T14:03:10, in --tz), +DURATION after the first frame (+90s), -DURATION before the end (-5m), or frame:N";

/// Parses what `flag` was given.
pub fn parse_at(flag: &str, text: &str, zone: &Zone) -> CliResult<At> {
    let t = text.trim();
    let bad = |why: String| CliError::usage(format!("invalid {flag} {text:?}: {why}"), FORMS);
    if let Some(n) = t.strip_prefix("frame:") {
        return n
            .parse::<u64>()
            .map(At::Frame)
            .map_err(|_| bad(format!("{n:?} is not a frame number")));
    }
    if let Some(d) = t.strip_prefix('+') {
        return duration_ns(d).map(At::SinceStart).map_err(bad);
    }
    if let Some(d) = t.strip_prefix('-') {
        return duration_ns(d).map(At::BeforeEnd).map_err(bad);
    }
    if let Ok(ts) = t.parse::<Timestamp>() {
        return utc_ns(ts).map(At::Utc).map_err(bad);
    }
    let civil: DateTime = t
        .replacen(' ', "T", 1)
        .parse()
        .map_err(|e| bad(format!("{e}")))?;
    local(flag, text, civil, zone).map(At::Utc)
}

/// A duration as the CLI writes them (`90s`, `5m`, `1h30m`, `500ms`), in ns.
fn duration_ns(text: &str) -> Result<u64, String> {
    let mut total_ms = 0u64;
    let mut rest = text;
    if rest.is_empty() {
        return Err("a duration is missing".into());
    }
    while !rest.is_empty() {
        let digits = rest.chars().take_while(|c| c.is_ascii_digit()).count();
        let unit_len = rest[digits..]
            .chars()
            .take_while(|c| c.is_ascii_alphabetic())
            .count();
        if digits == 0 || unit_len == 0 {
            return Err(format!(
                "{text:?} is not a duration (a number with a unit: ms, s, m, h)"
            ));
        }
        let part = &rest[..digits + unit_len];
        total_ms = total_ms
            .checked_add(dvrfs_core::units::duration_ms(part)?)
            .ok_or_else(|| format!("{text:?} is too long"))?;
        rest = &rest[digits + unit_len..];
    }
    total_ms
        .checked_mul(1_000_000)
        .ok_or_else(|| format!("{text:?} is too long"))
}

fn utc_ns(ts: Timestamp) -> Result<i64, String> {
    i64::try_from(ts.as_nanosecond()).map_err(|_| format!("{ts} is out of range"))
}

/// A local date and time in `zone`: the one moment it names, or an error listing the
/// two it could mean (a fold) or the two it falls between (a gap).
fn local(flag: &str, text: &str, civil: DateTime, zone: &Zone) -> CliResult<i64> {
    let amb = zone.tz.to_ambiguous_zoned(civil);
    let at = |offset: Offset| -> Result<Timestamp, String> {
        offset
            .to_timestamp(civil)
            .map_err(|e| format!("{civil} is out of range: {e}"))
    };
    let candidate = |offset: Offset| -> String {
        at(offset).map_or_else(|e| e, |ts| format!("{civil}{offset} (= {ts})"))
    };
    let err = |e: String| CliError::usage(format!("invalid {flag} {text:?}: {e}"), FORMS);
    match amb.offset() {
        AmbiguousOffset::Unambiguous { offset } => at(offset).and_then(utc_ns).map_err(err),
        AmbiguousOffset::Fold { before, after } => Err(CliError::usage(
            format!(
                "{flag} {text:?} is ambiguous in {}: the clocks went back and it happened twice: {} and {}",
                zone.name,
                candidate(before),
                candidate(after)
            ),
            "give one of them with its offset (RFC 3339), or the time in UTC with Z",
        )),
        AmbiguousOffset::Gap { before, after } => Err(CliError::usage(
            format!(
                "{flag} {text:?} does not exist in {}: the clocks went forward from {before} to {after} and skipped it; it lies between {} and {}",
                zone.name,
                candidate(before),
                candidate(after)
            ),
            "give a time with its offset (RFC 3339), or the time in UTC with Z",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn berlin() -> Option<Zone> {
        match Zone::new(Some("Europe/Berlin")) {
            Ok(z) => Some(z),
            Err(e) => {
                eprintln!(
                    "SKIP: no Europe/Berlin zone here ({}): install tzdata",
                    e.message()
                );
                None
            }
        }
    }

    fn ns(rfc: &str) -> i64 {
        utc_ns(rfc.parse::<Timestamp>().unwrap()).unwrap()
    }

    #[test]
    fn relative_forms_and_frames_parse_to_what_they_name() {
        let z = Zone::utc();
        assert_eq!(
            parse_at("--from", "+90s", &z).unwrap(),
            At::SinceStart(90_000_000_000)
        );
        assert_eq!(
            parse_at("--from", "+1h30m", &z).unwrap(),
            At::SinceStart(5_400_000_000_000)
        );
        assert_eq!(
            parse_at("--from", "-5m", &z).unwrap(),
            At::BeforeEnd(300_000_000_000)
        );
        assert_eq!(
            parse_at("--from", "frame:9000", &z).unwrap(),
            At::Frame(9000)
        );
        for bad in [
            "+",
            "-x",
            "frame:",
            "frame:-1",
            "+90",
            "yesterday",
            "2026-13-01T00:00:00",
        ] {
            let e = parse_at("--from", bad, &z).unwrap_err();
            assert!(e.message().contains("--from"), "{bad}: {}", e.message());
        }
    }

    #[test]
    fn an_rfc3339_time_is_exact_whatever_the_zone() {
        let Some(z) = berlin() else { return };
        let want = ns("2026-11-28T13:03:10Z");
        assert_eq!(
            parse_at("--from", "2026-11-28T13:03:10Z", &z).unwrap(),
            At::Utc(want)
        );
        assert_eq!(
            parse_at("--from", "2026-11-28T14:03:10+01:00", &z).unwrap(),
            At::Utc(want)
        );
        // A local time without an offset is read in the zone (CET, +01:00, in November).
        assert_eq!(
            parse_at("--from", "2026-11-28 14:03:10", &z).unwrap(),
            At::Utc(want)
        );
    }

    #[test]
    fn a_local_time_the_clocks_passed_twice_is_refused_with_both_candidates() {
        let Some(z) = berlin() else { return };
        // 2026-10-25: CEST (+02:00) ends at 03:00, back to 02:00 CET (+01:00).
        let e = parse_at("--from", "2026-10-25T02:30:00", &z).unwrap_err();
        let m = e.message();
        assert!(m.contains("ambiguous"), "{m}");
        assert!(
            m.contains("2026-10-25T00:30:00Z") && m.contains("2026-10-25T01:30:00Z"),
            "{m}"
        );
        // Either candidate with its offset is accepted.
        assert_eq!(
            parse_at("--from", "2026-10-25T02:30:00+01:00", &z).unwrap(),
            At::Utc(ns("2026-10-25T01:30:00Z"))
        );
    }

    #[test]
    fn a_local_time_the_clocks_skipped_is_refused_naming_the_jump() {
        let Some(z) = berlin() else { return };
        // 2026-03-29: 02:00 CET jumps to 03:00 CEST.
        let e = parse_at("--from", "2026-03-29T02:30:00", &z).unwrap_err();
        let m = e.message();
        assert!(m.contains("does not exist"), "{m}");
        assert!(m.contains("+01") && m.contains("+02"), "{m}");
    }

    #[test]
    fn a_moment_is_shown_in_the_zone_with_its_abbreviation() {
        let Some(z) = berlin() else { return };
        assert_eq!(
            z.show(ns("2026-11-28T13:03:10.25Z")),
            "2026-11-28 14:03:10.250 CET"
        );
        assert_eq!(
            z.show(ns("2026-07-01T10:00:00Z")),
            "2026-07-01 12:00:00.000 CEST"
        );
        assert_eq!(
            rfc3339(ns("2026-11-28T13:03:10.25Z")),
            "2026-11-28T13:03:10.25Z"
        );
        assert!(Zone::new(Some("Mars/Olympus")).is_err());
    }
}
