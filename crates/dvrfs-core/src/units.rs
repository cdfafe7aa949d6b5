//! Sizes and durations as users write them, parsed in one place: every size and
//! duration flag of the CLI (`crates/dvrfs-cli/src/args.rs` adds the flag's name and a
//! usage hint to the error) and the stream reservations a mounted volume takes as an
//! extended attribute (`engine/reservation.rs`). The error says what is wrong with the
//! text; the caller says what it was for.
//!
//! A size is a whole number of bytes with an optional binary suffix: `K`, `M`, `G` or
//! `T` (1K = 1024), in either case, optionally spelled `KiB` or `KB`, or `B` alone.
//! A duration is a whole number with a unit: `ms`, `s`, `m` (or `min`), `h` or `d`.

/// Binary suffixes with their shift.
const SIZE_SUFFIXES: [(char, u32); 4] = [('K', 10), ('M', 20), ('G', 30), ('T', 40)];

/// Splits `text` into its leading whole number and the unit after it.
fn split_number(text: &str) -> Result<(u64, &str), String> {
    let t = text.trim();
    if t.starts_with('-') {
        return Err("it is negative".into());
    }
    let digits_end = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    if digits_end == 0 {
        return Err("it does not start with a number".into());
    }
    let number = t[..digits_end]
        .parse()
        .map_err(|_| "the number is too large".to_string())?;
    Ok((number, &t[digits_end..]))
}

/// Parses a size in bytes (see the module docs); the error says why it is not one.
pub fn size_bytes(text: &str) -> Result<u64, String> {
    let (number, suffix) = split_number(text)?;
    let shift = match suffix.to_ascii_uppercase().as_str() {
        "" | "B" => 0,
        s => {
            let unit = s.chars().next().unwrap_or(' ');
            let rest = &s[unit.len_utf8()..];
            let shift = SIZE_SUFFIXES
                .iter()
                .find(|(c, _)| *c == unit)
                .map(|(_, s)| *s);
            match (shift, rest) {
                (Some(shift), "" | "IB" | "B") => shift,
                _ => return Err(format!("unknown suffix {suffix:?} (K, M, G or T)")),
            }
        }
    };
    number
        .checked_mul(1u64 << shift)
        .ok_or_else(|| "the size does not fit in 64 bits".into())
}

/// Parses a duration (see the module docs) into milliseconds; the error says why it
/// is not one.
pub fn duration_ms(text: &str) -> Result<u64, String> {
    let (number, unit) = split_number(text)?;
    let per_ms: u64 = match unit {
        "ms" => 1,
        "s" => 1000,
        "m" | "min" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        "" => return Err("the unit is missing (ms, s, m, h or d)".into()),
        u => return Err(format!("unknown unit {u:?} (ms, s, m, h or d)")),
    };
    number
        .checked_mul(per_ms)
        .ok_or_else(|| "the duration is too long".into())
}

/// Parses a decimal rate such as `19.39M`, `500K`, `1G` or `8000000` (bits/s).
pub fn parse_rate_bps(s: &str) -> Option<f64> {
    let s = s.trim();
    let (num, mult) = match s.chars().last()? {
        'k' | 'K' => (&s[..s.len() - 1], 1e3),
        'm' | 'M' => (&s[..s.len() - 1], 1e6),
        'g' | 'G' => (&s[..s.len() - 1], 1e9),
        _ => (s, 1.0),
    };
    let v: f64 = num.parse().ok()?;
    (v.is_finite() && v > 0.0).then_some(v * mult)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_take_binary_suffixes() {
        assert_eq!(size_bytes("123"), Ok(123));
        assert_eq!(size_bytes("4K"), Ok(4096));
        assert_eq!(size_bytes("4k"), Ok(4096));
        assert_eq!(size_bytes("4M"), Ok(4 << 20));
        assert_eq!(size_bytes("64G"), Ok(64 << 30));
        assert_eq!(size_bytes("2T"), Ok(2 << 40));
        assert_eq!(size_bytes("1GiB"), Ok(1 << 30));
        assert_eq!(size_bytes("512B"), Ok(512));
        for bad in [
            "",
            "G",
            "12X",
            "1.5G",
            "-1",
            "99999999999T",
            "4MM",
            "99999999999999999999",
        ] {
            assert!(size_bytes(bad).is_err(), "{bad:?}");
        }
        assert!(size_bytes("-5G").unwrap_err().contains("negative"));
    }

    #[test]
    fn durations_need_a_unit() {
        assert_eq!(duration_ms("500ms"), Ok(500));
        assert_eq!(duration_ms("1s"), Ok(1000));
        assert_eq!(duration_ms("2m"), Ok(120_000));
        assert_eq!(duration_ms("2min"), Ok(120_000));
        assert_eq!(duration_ms("1h"), Ok(3_600_000));
        assert_eq!(duration_ms("30d"), Ok(2_592_000_000));
        for bad in ["", "5", "1.5s", "-1s", "3w", "99999999999999999h"] {
            assert!(duration_ms(bad).is_err(), "{bad:?}");
        }
        assert!(duration_ms("5").unwrap_err().contains("unit is missing"));
    }
}
