//! Workload notation (AVFS 4.1): `NrMw` is N playback (read) and M recording (write)
//! streams; the general form is a comma list of `<count><r|w|t>[@<bitrate>]`, e.g.
//! `4r@19.39M,8w@8M,2t@8M`, where `t` is a trick-play reader (fast forward or rewind
//! at `--speed`: it reads only keyframes, see `client.rs`). Bit rates are decimal (K,
//! M, G) bits per second: a trick-play reader's is the recording's it plays.

use std::fmt;

#[derive(Clone, Debug, PartialEq)]
pub struct StreamGroup {
    pub count: u32,
    pub write: bool,
    /// A trick-play reader (`t`): reads keyframes only (never with `write`).
    pub trick: bool,
    /// `None` = the run's default bit rate.
    pub bitrate_bps: Option<f64>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Workload {
    pub groups: Vec<StreamGroup>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WorkloadError(pub String);

impl fmt::Display for WorkloadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "workload {}: expected NrMw (e.g. 4r2w) or a comma list of <count><r|w|t>[@<bitrate>] (e.g. 4r@19.39M,8w@8M,2t@8M; t: trick play)",
            self.0
        )
    }
}

impl std::error::Error for WorkloadError {}

pub use crate::units::parse_rate_bps;

fn parse_term(t: &str) -> Option<StreamGroup> {
    let (head, rate) = match t.split_once('@') {
        Some((h, r)) => (h, Some(parse_rate_bps(r)?)),
        None => (t, None),
    };
    let kind = head.chars().last()?;
    let (write, trick) = match kind {
        'r' | 'R' => (false, false),
        'w' | 'W' => (true, false),
        't' | 'T' => (false, true),
        _ => return None,
    };
    let count: u32 = head[..head.len() - 1].parse().ok()?;
    Some(StreamGroup {
        count,
        write,
        trick,
        bitrate_bps: rate,
    })
}

impl Workload {
    pub fn parse(spec: &str) -> Result<Workload, WorkloadError> {
        Self::parse_with(spec, false)
    }

    /// As [`Workload::parse`]; `allow_empty` accepts a workload of no streams (`0r0w`:
    /// best-effort traffic alone, a throughput measurement).
    pub fn parse_with(spec: &str, allow_empty: bool) -> Result<Workload, WorkloadError> {
        let err = || WorkloadError(format!("{spec:?} does not parse"));
        let spec = spec.trim();
        if spec.is_empty() {
            return Err(err());
        }
        let mut groups = Vec::new();
        for term in spec.split(',') {
            let term = term.trim();
            // `NrMw`: a read term followed directly by a write term.
            if !term.contains('@') {
                if let Some(i) = term.find(['r', 'R']) {
                    if i + 1 < term.len() {
                        groups.push(parse_term(&term[..=i]).ok_or_else(err)?);
                        groups.push(parse_term(&term[i + 1..]).ok_or_else(err)?);
                        continue;
                    }
                }
            }
            groups.push(parse_term(term).ok_or_else(err)?);
        }
        if !allow_empty && groups.iter().all(|g| g.count == 0) {
            return Err(WorkloadError(format!("{spec:?} has no streams")));
        }
        Ok(Workload { groups })
    }

    pub fn streams(&self) -> u32 {
        self.groups.iter().map(|g| g.count).sum()
    }

    /// The same workload with the first term's count changed (for `--find-max`).
    pub fn with_first_count(&self, count: u32) -> Workload {
        let mut w = self.clone();
        if let Some(g) = w.groups.first_mut() {
            g.count = count;
        }
        w
    }
}

impl fmt::Display for Workload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The paper's NrMw form where it applies.
        if let [r, w] = &self.groups[..] {
            if !r.write && !r.trick && w.write && r.bitrate_bps.is_none() && w.bitrate_bps.is_none()
            {
                return write!(f, "{}r{}w", r.count, w.count);
            }
        }
        let parts: Vec<String> = self
            .groups
            .iter()
            .map(|g| {
                let k = match (g.write, g.trick) {
                    (true, _) => 'w',
                    (false, true) => 't',
                    (false, false) => 'r',
                };
                match g.bitrate_bps {
                    Some(r) => format!("{}{k}@{}M", g.count, r / 1e6),
                    None => format!("{}{k}", g.count),
                }
            })
            .collect();
        write!(f, "{}", parts.join(","))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_paper_and_general_forms() {
        let w = Workload::parse("4r2w").unwrap();
        assert_eq!(w.groups.len(), 2);
        assert_eq!((w.groups[0].count, w.groups[0].write), (4, false));
        assert_eq!((w.groups[1].count, w.groups[1].write), (2, true));
        let w = Workload::parse("4r@19.39M,8w@8M").unwrap();
        assert_eq!(w.groups[1].bitrate_bps, Some(8e6));
        assert!((w.groups[0].bitrate_bps.unwrap() - 19.39e6).abs() < 1.0);
        assert_eq!(Workload::parse("0r2w").unwrap().streams(), 2);
        assert_eq!(w.to_string(), "4r@19.39M,8w@8M");
        assert_eq!(Workload::parse("8r0w").unwrap().to_string(), "8r0w");
        for bad in ["", "4x", "r2w", "4r@fast", "0r0w", "4r2", "-1r"] {
            assert!(Workload::parse(bad).is_err(), "{bad}");
        }
        assert_eq!(Workload::parse_with("0r0w", true).unwrap().streams(), 0);
        let w = Workload::parse("2w@4M,2t@8M").unwrap();
        assert!(w.groups[1].trick && !w.groups[1].write && !w.groups[0].trick);
        assert_eq!(w.to_string(), "2w@4M,2t@8M");
        assert_eq!(Workload::parse("1r,2t").unwrap().to_string(), "1r,2t");
        assert!(Workload::parse_with("", true).is_err());
    }
}
