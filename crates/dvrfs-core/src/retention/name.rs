//! A chunk's name as `record --chunk` makes it: its UTC start in the ISO 8601 basic
//! form to the millisecond, `YYYYMMDDTHHMMSS.mmmZ`, then the extension.

/// Days from 1970-01-01 to the civil date `y-m-d` (proleptic Gregorian; Howard
/// Hinnant's days_from_civil).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The civil date (year, month, day; proleptic Gregorian) of a day counted from
/// 1970-01-01 (the inverse of `days_from_civil`; Howard Hinnant's civil_from_days).
pub fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

/// The name of a chunk that starts at `utc_ns` (to the millisecond, rounded down),
/// with extension `ext`: what [`chunk_name_utc`] reads back.
pub fn chunk_name(utc_ns: i64, ext: &str) -> String {
    let ms = utc_ns.div_euclid(1_000_000);
    let secs = ms.div_euclid(1000);
    let (y, m, d) = civil_from_days(secs.div_euclid(86_400));
    let rem = secs.rem_euclid(86_400);
    format!(
        "{y:04}{m:02}{d:02}T{:02}{:02}{:02}.{:03}Z.{ext}",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        ms.rem_euclid(1000)
    )
}

/// `utc_ns` in RFC 3339 to the millisecond (`2026-11-28T18:28:44.496Z`): how a
/// chain's `deleted` line says when.
pub fn utc_rfc3339(utc_ns: i64) -> String {
    let ms = utc_ns.div_euclid(1_000_000);
    let secs = ms.div_euclid(1000);
    let (y, m, d) = civil_from_days(secs.div_euclid(86_400));
    let rem = secs.rem_euclid(86_400);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        ms.rem_euclid(1000)
    )
}

/// The UTC (ns since the epoch) a chunk's name says, if it is such a name.
pub fn chunk_name_utc(name: &str) -> Option<i64> {
    let b = name.as_bytes();
    if b.len() < 20 || b[8] != b'T' || b[15] != b'.' || b[19] != b'Z' {
        return None;
    }
    let num = |r: std::ops::Range<usize>| -> Option<i64> {
        let s = name.get(r)?;
        s.bytes()
            .all(|c| c.is_ascii_digit())
            .then(|| s.parse().ok())
            .flatten()
    };
    let (y, mo, d) = (num(0..4)?, num(4..6)?, num(6..8)?);
    let (h, mi, s, ms) = (num(9..11)?, num(11..13)?, num(13..15)?, num(16..19)?);
    let month_days = match mo {
        2 if y % 4 == 0 && (y % 100 != 0 || y % 400 == 0) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        1..=12 => 31,
        _ => return None,
    };
    if !(1..=month_days).contains(&d) || h > 23 || mi > 59 || s > 60 {
        return None;
    }
    let secs = days_from_civil(y, mo, d) * 86_400 + h * 3600 + mi * 60 + s;
    secs.checked_mul(1_000_000_000)?.checked_add(ms * 1_000_000)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunk_names_give_their_utc() {
        // 2026-11-28T18:28:44.496Z
        assert_eq!(
            chunk_name_utc("20261128T182844.496Z.ts"),
            Some(1_795_890_524_496_000_000)
        );
        assert_eq!(chunk_name_utc("19700101T000000.000Z.mp4"), Some(0));
        assert_eq!(
            chunk_name_utc("20240229T235959.999Z.ts"),
            Some(1_709_251_199_999_000_000)
        );
        for bad in [
            "20230229T000000.000Z.ts",
            "20261328T000000.000Z.ts",
            "20261128T250000.000Z.ts",
            "2026112XT182844.496Z.ts",
            "20261128T182844.496.ts",
            "cam.ts",
            ".chain",
            "",
        ] {
            assert_eq!(chunk_name_utc(bad), None, "{bad}");
        }
    }

    #[test]
    fn chunk_names_are_made_as_they_are_read() {
        assert_eq!(
            chunk_name(1_795_890_524_496_999_999, "ts"),
            "20261128T182844.496Z.ts"
        );
        assert_eq!(chunk_name(0, "mp4"), "19700101T000000.000Z.mp4");
        assert_eq!(
            utc_rfc3339(1_795_890_524_496_999_999),
            "2026-11-28T18:28:44.496Z"
        );
        // Weekly steps (less a millisecond, so the time of day drifts) across two
        // centuries from 2000, leap days and 2100 included, read back.
        let mut t: i64 = 946_684_800_123 * 1_000_000; // 2000-01-01T00:00:00.123Z
        for _ in 0..(200 * 365) / 7 {
            let name = chunk_name(t, "ts");
            assert_eq!(chunk_name_utc(&name), Some(t), "{name}");
            t += 7 * 86_400_000_000_000 - 1_000_000;
        }
    }
}
