//! Policies as text, the form the mount's `user.dvrfs.retention` attribute takes:
//! `max-age=30d,min-age=7d,max-size=500G` for a stream's directory, with
//! `high=95%,low=90%,protected-max=20%` for the volume's at the root. Durations and
//! sizes are read as every flag reads them (`crate::units`), shares as percentages.

use crate::format::inode::StreamRetention;
use crate::format::superblock::VolumeRetention;
use crate::units::{duration_ms, size_bytes};

/// What a policy text sets: the directory's policy, and the volume's if it named any
/// of its keys.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PolicyText {
    pub stream: StreamRetention,
    pub volume: Option<VolumeRetention>,
}

/// Parses a policy text; the error says which part is wrong and why.
pub fn parse_policy(text: &str) -> Result<PolicyText, String> {
    let mut p = PolicyText::default();
    let mut vol = VolumeRetention::default();
    let mut any_vol = false;
    for part in text
        .trim()
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
    {
        let (key, value) = part
            .split_once('=')
            .ok_or_else(|| format!("{part:?}: not KEY=VALUE"))?;
        let secs = || -> Result<u32, String> {
            let ms = duration_ms(value).map_err(|e| format!("{key}={value}: {e}"))?;
            u32::try_from(ms / 1000).map_err(|_| format!("{key}={value}: too long"))
        };
        let share = || -> Result<u16, String> {
            let v: f64 = value
                .trim_end_matches('%')
                .parse()
                .map_err(|_| format!("{key}={value}: not a percentage"))?;
            if !(0.0..=100.0).contains(&v) {
                return Err(format!("{key}={value}: a share is 0% to 100%"));
            }
            Ok((v * 10.0).round() as u16)
        };
        match key {
            "max-age" => p.stream.max_age_s = secs()?,
            "min-age" => p.stream.min_age_s = secs()?,
            "max-size" => {
                p.stream.max_bytes = size_bytes(value).map_err(|e| format!("{key}={value}: {e}"))?
            }
            "high" => (vol.high_permille, any_vol) = (share()?, true),
            "low" => (vol.low_permille, any_vol) = (share()?, true),
            "protected-max" => (vol.protected_max_permille, any_vol) = (share()?, true),
            k => {
                return Err(format!(
                    "unknown key {k:?} (max-age, min-age, max-size; at the root also high, low, protected-max)"
                ))
            }
        }
    }
    p.volume = any_vol.then_some(vol);
    Ok(p)
}

/// Seconds as the flags take them: `30d`, `12h`, `90m`, `45s`.
pub fn duration_text(s: u32) -> String {
    match s {
        s if s >= 86_400 && s % 86_400 == 0 => format!("{}d", s / 86_400),
        s if s >= 3600 && s % 3600 == 0 => format!("{}h", s / 3600),
        s if s >= 60 && s % 60 == 0 => format!("{}m", s / 60),
        s => format!("{s}s"),
    }
}

/// Bytes in the largest binary unit that divides them.
pub fn size_text(b: u64) -> String {
    for (unit, shift) in [("T", 40), ("G", 30), ("M", 20), ("K", 10)] {
        if b >= 1 << shift && b.is_multiple_of(1 << shift) {
            return format!("{}{unit}", b >> shift);
        }
    }
    b.to_string()
}

/// Thousandths as a percentage: `92.5%`.
pub fn share_text(permille: u16) -> String {
    format!("{}%", f64::from(permille) / 10.0)
}

/// A stream policy's set parts as `(key, value)`.
pub fn stream_parts(r: &StreamRetention) -> Vec<(&'static str, String)> {
    let mut v = vec![];
    if r.max_age_s > 0 {
        v.push(("max-age", duration_text(r.max_age_s)));
    }
    if r.min_age_s > 0 {
        v.push(("min-age", duration_text(r.min_age_s)));
    }
    if r.max_bytes > 0 {
        v.push(("max-size", size_text(r.max_bytes)));
    }
    v
}

/// The volume policy's set parts as `(key, value)`.
pub fn volume_parts(r: &VolumeRetention) -> Vec<(&'static str, String)> {
    let mut v = vec![];
    if r.high_permille > 0 {
        v.push(("high", share_text(r.high_permille)));
        v.push(("low", share_text(r.low_permille)));
    }
    if r.protected_max_permille > 0 {
        v.push(("protected-max", share_text(r.protected_max_permille)));
    }
    v
}

/// Parts as the attribute shows them: `max-age=30d,max-size=500G`.
pub fn attribute_text(parts: &[(&'static str, String)]) -> String {
    parts
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_policy_text_round_trips_and_bad_parts_are_named() {
        let p = parse_policy("max-age=30d, min-age=7d,max-size=500G").unwrap();
        assert_eq!(
            p.stream,
            StreamRetention {
                max_age_s: 30 * 86_400,
                min_age_s: 7 * 86_400,
                max_bytes: 500 << 30
            }
        );
        assert_eq!(p.volume, None);
        assert_eq!(
            attribute_text(&stream_parts(&p.stream)),
            "max-age=30d,min-age=7d,max-size=500G"
        );
        let v = parse_policy("high=95%,low=92.5,protected-max=20%").unwrap();
        let vol = v.volume.unwrap();
        assert_eq!(
            (
                vol.high_permille,
                vol.low_permille,
                vol.protected_max_permille
            ),
            (950, 925, 200)
        );
        assert_eq!(
            attribute_text(&volume_parts(&vol)),
            "high=95%,low=92.5%,protected-max=20%"
        );
        for (bad, says) in [
            ("max-age=3w", "unknown unit"),
            ("max-age", "not KEY=VALUE"),
            ("keep=1d", "unknown key"),
            ("high=120%", "0% to 100%"),
            ("max-size=lots", "max-size=lots"),
        ] {
            let e = parse_policy(bad).unwrap_err();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }
}
