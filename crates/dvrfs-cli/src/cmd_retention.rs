//! `dvrfs retention`: the policies that decide what a full volume deletes, stored
//! in the file system (FORMAT.md sections 5 and 7). A stream directory (or a
//! directory of streams, for each stream below it that has none of its own) takes
//! `--max-age`, `--min-age` and `--max-size`; the volume (PATH `/`) takes `--high`,
//! `--low` and `--protected-max`. Given flags change only their part of a policy;
//! `--clear` removes PATH's. Without flags it shows the policy that governs PATH;
//! `--list` shows every policy on the volume. It opens the volume directly, as
//! `reindex` does.

use clap::Args;
use serde_json::{json, Value};
use std::path::PathBuf;

use dvrfs_core::format::dir::Kind;
use dvrfs_core::format::inode::StreamRetention;
use dvrfs_core::format::superblock::VolumeRetention;
use dvrfs_core::retention::{duration_text, share_text, size_text};
use dvrfs_core::volume::{SetAttr, Volume};

use crate::args::{parse_duration_ms, parse_size};
use crate::error::{CliError, CliResult};
use crate::output::print_json;
use crate::target::{now_ns, open_fs, Access};

#[derive(Args, Debug)]
pub struct RetentionArgs {
    pub target: PathBuf,
    /// A stream's directory (or a directory of streams); `/` for the volume's --high,
    /// --low and --protected-max
    pub path: Option<String>,
    /// Delete chunks older than this, free space or not (e.g. 30d)
    #[arg(long)]
    pub max_age: Option<String>,
    /// Keep chunks younger than this while older ones can go (a wish, never a reason
    /// to stop a recording)
    #[arg(long)]
    pub min_age: Option<String>,
    /// Keep each stream within this size, deleting its oldest chunks (e.g. 500G)
    #[arg(long)]
    pub max_size: Option<String>,
    /// The volume: above this share used, delete the oldest unprotected chunks (e.g. 95%)
    #[arg(long)]
    pub high: Option<String>,
    /// The volume: delete down to this share (e.g. 90%)
    #[arg(long)]
    pub low: Option<String>,
    /// The volume: the most protected clips may hold (e.g. 20%)
    #[arg(long)]
    pub protected_max: Option<String>,
    /// Remove PATH's policy (`/`: the volume's and the root directory's)
    #[arg(long)]
    pub clear: bool,
    /// Show every policy on the volume
    #[arg(long, conflicts_with_all = ["path", "clear"])]
    pub list: bool,
    /// Print JSON on stdout
    #[arg(long)]
    pub json: bool,
}

impl RetentionArgs {
    fn stream_flags(&self) -> bool {
        self.max_age.is_some() || self.min_age.is_some() || self.max_size.is_some()
    }

    fn volume_flags(&self) -> bool {
        self.high.is_some() || self.low.is_some() || self.protected_max.is_some()
    }
}

pub fn retention(a: &RetentionArgs) -> CliResult<u8> {
    let changes = a.stream_flags() || a.volume_flags() || a.clear;
    let path = match (&a.path, a.list) {
        (_, true) => None,
        (Some(p), false) => Some(p.as_str()),
        (None, false) => {
            return Err(CliError::usage(
                "retention needs a PATH, or --list",
                "e.g. dvrfs retention rec.img /cams --max-age 30d, or dvrfs retention rec.img / --high 95% --low 90%",
            ))
        }
    };
    if a.volume_flags() && path != Some("/") {
        return Err(CliError::usage(
            "--high, --low and --protected-max are the volume's: give PATH /",
            "e.g. dvrfs retention rec.img / --high 95% --low 90%",
        ));
    }
    if a.clear && (a.stream_flags() || a.volume_flags()) {
        return Err(CliError::usage(
            "--clear removes a policy: give it alone",
            "clear first, then set what you want",
        ));
    }
    let access = if changes { Access::Write } else { Access::Read };
    let mut fs = open_fs(&a.target, access)?;
    let Some(path) = path else {
        return list(fs.engine().volume(), a.json);
    };
    let dir = fs.resolve(path)?;
    if fs.engine().volume().stat(dir)?.kind != Kind::Dir {
        return Err(CliError::usage(
            format!("{path} is not a directory"),
            "a retention policy is set on a stream's directory (its chunks) or a directory of streams",
        ));
    }
    if changes {
        let now = now_ns();
        let own = fs.engine().volume().dir_retention(dir).unwrap_or_default();
        let stream = if a.clear {
            None
        } else {
            Some(stream_policy(a, own)?)
        };
        if a.clear || a.stream_flags() {
            let set = SetAttr {
                retention: Some(stream),
                ..SetAttr::default()
            };
            fs.set_attr(dir, &set, now)?;
        }
        if a.clear && path == "/" {
            fs.set_volume_retention(VolumeRetention::default(), now)?;
        } else if a.volume_flags() {
            let old = fs.engine().volume().volume_retention();
            fs.set_volume_retention(volume_policy(a, old)?, now)?;
        }
        fs.sync()?;
    }
    show(fs.engine().volume(), path, dir, a.json)?;
    if changes {
        fs.close()?;
    }
    Ok(0)
}

/// PATH's policy with the given flags applied to `own`.
fn stream_policy(a: &RetentionArgs, own: StreamRetention) -> CliResult<StreamRetention> {
    let secs = |flag: &str, text: &Option<String>, was: u32| -> CliResult<u32> {
        let Some(text) = text else { return Ok(was) };
        let s = parse_duration_ms(flag, text)? / 1000;
        u32::try_from(s).map_err(|_| {
            CliError::usage(
                format!("{flag} {text}: too long"),
                "give at most 49,000 days (136 years)",
            )
        })
    };
    let r = StreamRetention {
        max_age_s: secs("--max-age", &a.max_age, own.max_age_s)?,
        min_age_s: secs("--min-age", &a.min_age, own.min_age_s)?,
        max_bytes: match &a.max_size {
            Some(t) => parse_size("--max-size", t)?,
            None => own.max_bytes,
        },
    };
    if r.max_age_s > 0 && r.min_age_s > r.max_age_s {
        return Err(CliError::usage(
            format!(
                "--min-age {} is longer than --max-age {}",
                duration_text(r.min_age_s),
                duration_text(r.max_age_s)
            ),
            "max-age is a legal maximum: data goes at max-age whatever min-age wishes; give a shorter --min-age",
        ));
    }
    Ok(r)
}

/// The volume's policy with the given flags applied to `old`.
fn volume_policy(a: &RetentionArgs, old: VolumeRetention) -> CliResult<VolumeRetention> {
    let share = |flag: &str, text: &Option<String>, was: u16| -> CliResult<u16> {
        let Some(text) = text else { return Ok(was) };
        parse_permille(text).ok_or_else(|| {
            CliError::usage(
                format!("invalid {flag} {text:?}: not a share of the volume"),
                format!("give a percentage from 0% to 100%, e.g. {flag} 95%"),
            )
        })
    };
    Ok(VolumeRetention {
        high_permille: share("--high", &a.high, old.high_permille)?,
        low_permille: share("--low", &a.low, old.low_permille)?,
        protected_max_permille: share(
            "--protected-max",
            &a.protected_max,
            old.protected_max_permille,
        )?,
    })
}

/// `95%`, `95`, `92.5%` in thousandths; `None` outside 0..=100 %.
fn parse_permille(text: &str) -> Option<u16> {
    let v: f64 = text.trim().trim_end_matches('%').parse().ok()?;
    (0.0..=100.0)
        .contains(&v)
        .then(|| (v * 10.0).round() as u16)
}

fn stream_text(r: &StreamRetention) -> String {
    let mut parts = vec![];
    if r.max_age_s > 0 {
        parts.push(format!("max-age {}", duration_text(r.max_age_s)));
    }
    if r.min_age_s > 0 {
        parts.push(format!("min-age {}", duration_text(r.min_age_s)));
    }
    if r.max_bytes > 0 {
        parts.push(format!("max-size {}", size_text(r.max_bytes)));
    }
    parts.join(", ")
}

fn stream_json(path: &str, r: &StreamRetention) -> Value {
    json!({
        "path": path,
        "max_age_s": (r.max_age_s > 0).then_some(r.max_age_s),
        "min_age_s": (r.min_age_s > 0).then_some(r.min_age_s),
        "max_size_bytes": (r.max_bytes > 0).then_some(r.max_bytes),
    })
}

pub fn volume_text(r: &VolumeRetention) -> Option<String> {
    if *r == VolumeRetention::default() {
        return None;
    }
    let mut parts = vec![];
    if r.high_permille > 0 {
        parts.push(format!(
            "high {}, low {}",
            share_text(r.high_permille),
            share_text(r.low_permille)
        ));
    }
    if r.protected_max_permille > 0 {
        parts.push(format!(
            "protected-max {}",
            share_text(r.protected_max_permille)
        ));
    }
    Some(parts.join(", "))
}

pub fn volume_json(r: &VolumeRetention) -> Value {
    if *r == VolumeRetention::default() {
        return Value::Null;
    }
    let p = |v: u16| (v > 0).then(|| f64::from(v) / 10.0);
    json!({
        "high_pct": p(r.high_permille),
        "low_pct": p(r.low_permille),
        "protected_max_pct": p(r.protected_max_permille),
    })
}

/// The policy that governs `path` (its own, or a directory's above it) and the
/// volume's.
fn show(v: &Volume, path: &str, dir: u32, as_json: bool) -> CliResult<u8> {
    let governing = v.effective_retention(dir);
    let from = governing.and_then(|(at, _)| v.path_of(at));
    if as_json {
        let stream = match (governing, &from) {
            (Some((_, r)), Some(f)) => {
                let mut j = stream_json(path, &r);
                j["from"] = json!(f);
                j
            }
            _ => Value::Null,
        };
        print_json(&json!({"stream": stream, "volume": volume_json(&v.volume_retention())}));
        return Ok(0);
    }
    match (governing, from) {
        (Some((at, r)), _) if at == dir => outln!("{path}: {}", stream_text(&r)),
        (Some((_, r)), Some(f)) => outln!("{path}: {} (from {f})", stream_text(&r)),
        _ => outln!("{path}: no policy (no directory above it has one)"),
    }
    match volume_text(&v.volume_retention()) {
        Some(t) => outln!("volume: {t}"),
        None => outln!("volume: no policy"),
    }
    Ok(0)
}

/// Every directory with a policy, in path order, and the volume's.
fn list(v: &Volume, as_json: bool) -> CliResult<u8> {
    let mut found = vec![];
    let mut stack = vec![(v.root(), "/".to_string())];
    while let Some((dir, path)) = stack.pop() {
        if let Some(r) = v.dir_retention(dir) {
            found.push((path.clone(), r));
        }
        for (name, child, kind) in v.readdir(dir)? {
            if kind == Kind::Dir {
                let name = String::from_utf8_lossy(&name);
                let p = match path.as_str() {
                    "/" => format!("/{name}"),
                    _ => format!("{path}/{name}"),
                };
                stack.push((child, p));
            }
        }
    }
    found.sort_by(|a, b| a.0.cmp(&b.0));
    if as_json {
        let streams: Vec<Value> = found.iter().map(|(p, r)| stream_json(p, r)).collect();
        print_json(&json!({"streams": streams, "volume": volume_json(&v.volume_retention())}));
        return Ok(0);
    }
    for (p, r) in &found {
        outln!("{p}: {}", stream_text(r));
    }
    if found.is_empty() {
        outln!("no directory has a policy");
    }
    match volume_text(&v.volume_retention()) {
        Some(t) => outln!("volume: {t}"),
        None => outln!("volume: no policy"),
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_durations_and_sizes_read_as_written() {
        assert_eq!(parse_permille("95%"), Some(950));
        assert_eq!(parse_permille("92.5"), Some(925));
        assert_eq!(parse_permille("101%"), None);
        assert_eq!(parse_permille("-1%"), None);
        assert_eq!(parse_permille("most"), None);
        assert_eq!(duration_text(30 * 86_400), "30d");
        assert_eq!(duration_text(90 * 60), "90m");
        assert_eq!(size_text(500 << 30), "500G");
        assert_eq!(size_text(1000), "1000");
        assert_eq!(share_text(925), "92.5%");
    }
}
