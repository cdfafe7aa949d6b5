//! The disk model file: the JSON form of `disks/SCHEMA.md`, loaded and checked.
//!
//! A model is data a person types (or `dvrfs calibrate` writes), so loading it is a
//! strict, two-step affair. First the *shape*: the text must be JSON, every field the
//! schema names must be present unless the schema marks it optional, no other field may
//! appear (a typo such as `rmp` must not silently fall back to a default), and each field
//! must have the right JSON type. Each of these errors names the field by its dotted
//! path (`zones.spt_inner`). Only then is the value deserialized into [`DiskModel`],
//! whose serde derive also carries `deny_unknown_fields` as a second guard for callers
//! that deserialize it directly. Second the *meaning*: [`DiskModel::validate`] checks
//! every field against physics and against the limits below (positive spindle speed,
//! 512- or 4096-byte sectors, `track <= average <= full` seek times reachable by the
//! two-piece seek curve, skews in [0, 1), probabilities in [0, 1], ...), and says what
//! is wrong and what would be accepted.
//!
//! The three built-in models, `avfs-250g`, `nvr-8t` and `laptop-5400`, are the very
//! files in `crates/dvrfs-core/disks/`, compiled in with `include_str!` and loaded by
//! the same code, so `--disk avfs-250g` and `--disk avfs-250g.json` cannot differ.
//!
//! Fault model: none; this is pure parsing. Nothing here panics on any input.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::sync::OnceLock;

use super::geometry::Geometry;
use super::seek::SeekCurve;

/// Names accepted by [`DiskModel::builtin`].
pub const BUILTIN_NAMES: &[&str] = &["avfs-250g", "nvr-8t", "laptop-5400"];

const AVFS_250G_JSON: &str = include_str!("../../disks/avfs-250g.json");
const NVR_8T_JSON: &str = include_str!("../../disks/nvr-8t.json");
const LAPTOP_5400_JSON: &str = include_str!("../../disks/laptop-5400.json");

/// Longest accepted `name`, in bytes (it is printed in one-line reports).
pub const MAX_NAME_BYTES: usize = 64;
/// Longest accepted `description`, in bytes.
pub const MAX_DESCRIPTION_BYTES: usize = 1024;
/// Largest accepted capacity in logical blocks (2^48: 1 EiB of 4 KiB sectors), so that
/// byte counts never overflow a `u64`.
pub const MAX_LBAS: u64 = 1 << 48;
/// Fastest accepted spindle (no hard disk spins faster than 15,000 rpm).
pub const MAX_RPM: f64 = 30_000.0;
/// Most data surfaces (heads) accepted.
pub const MAX_SURFACES: u32 = 64;
/// Most recording zones accepted (real drives have 15 to 60).
pub const MAX_ZONES: u32 = 1024;
/// Most sectors per track accepted.
pub const MAX_SECTORS_PER_TRACK: u32 = 1 << 20;
/// Most cylinders the geometry may derive from `lbas`, `surfaces` and the zones (a
/// current 20 TB drive has about 500,000).
pub const MAX_CYLINDERS: u64 = 50_000_000;
/// Longest accepted seek, settle, switch or overhead time, in ms.
pub const MAX_MECHANICAL_MS: f64 = 1_000.0;
/// Fastest accepted host link, in MB/s (10^6 bytes).
pub const MAX_INTERFACE_MB_PER_S: f64 = 100_000.0;
/// Largest accepted read-ahead, in bytes.
pub const MAX_READ_AHEAD_BYTES: u64 = 1 << 30;
/// Most accepted cache segments.
pub const MAX_CACHE_SEGMENTS: u32 = 1024;
/// How far an explicit `seek_curve` may stray from the `seek_ms` figures (relative).
pub const SEEK_CURVE_TOLERANCE: f64 = 0.10;
/// Longest accepted slow-I/O extra time, in ms (a minute of error recovery).
pub const MAX_SLOW_IO_MS: f64 = 60_000.0;

/// A loading error. Every message names the field (dotted path) and what is wrong.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum ModelError {
    #[error("disk model is not valid JSON: {0}")]
    Syntax(String),
    #[error("unknown field `{field}`{hint}")]
    UnknownField { field: String, hint: String },
    #[error("missing field `{field}`")]
    MissingField { field: String },
    #[error("field `{field}`: {problem}")]
    Invalid { field: String, problem: String },
}

impl ModelError {
    pub(crate) fn invalid(field: &str, problem: impl Into<String>) -> ModelError {
        ModelError::Invalid {
            field: field.to_string(),
            problem: problem.into(),
        }
    }
}

/// A hard-disk model (see `disks/SCHEMA.md` for the meaning of each field). Field names
/// are the JSON names; units are in the names where the schema has them.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DiskModel {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Capacity in logical blocks.
    pub lbas: u64,
    /// Logical block size, 512 or 4096.
    pub sector_bytes: u32,
    /// Spindle speed; one revolution takes 60000 / rpm ms.
    pub rpm: f64,
    /// Data surfaces (heads).
    pub surfaces: u32,
    pub zones: Zones,
    pub seek_ms: SeekMs,
    /// Explicit seek curve instead of the fit to `seek_ms`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seek_curve: Option<SeekCurveSpec>,
    pub write_settle_ms: f64,
    pub head_switch_ms: f64,
    /// Skew between consecutive tracks of a cylinder, as a fraction of a revolution.
    pub track_skew: f64,
    /// Skew between the last track of a cylinder and the first of the next one.
    pub cylinder_skew: f64,
    pub command_overhead_ms: f64,
    /// Host link rate in MB/s (10^6 bytes).
    pub interface_mb_per_s: f64,
    pub cache: Cache,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slow_io: Option<SlowIo>,
}

/// Zoned recording: `count` zones of equal cylinder count, sectors per track falling
/// linearly from `spt_outer` (zone 0, LBA 0) to `spt_inner` (the last zone).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Zones {
    pub count: u32,
    pub spt_outer: u32,
    pub spt_inner: u32,
}

/// The three seek figures of a data sheet, in ms.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SeekMs {
    /// One-cylinder seek.
    pub track: f64,
    /// Mean over uniformly random start and end cylinders.
    pub average: f64,
    /// Full stroke.
    pub full: f64,
}

/// An explicit two-piece Ruemmler-Wilkes curve (ms): t = t1 + b*sqrt(x) for x <= x0,
/// c + e*x above, x = distance / cylinders.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SeekCurveSpec {
    pub x0: f64,
    pub t1: f64,
    pub b: f64,
    pub c: f64,
    pub e: f64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Cache {
    /// Bytes the drive reads ahead after a read (0 = no read-ahead).
    pub read_ahead_bytes: u64,
    /// Cache segments (independent read-ahead buffers).
    pub segments: u32,
    /// Writes complete into the cache (true) or on the media (false).
    pub write_back: bool,
}

/// Rare slow accesses (error recovery).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SlowIo {
    /// Probability per command.
    pub probability: f64,
    /// [min, max] of the uniformly drawn extra time, in ms.
    pub extra_ms: [f64; 2],
}

impl DiskModel {
    /// Parses and validates a model file. Errors name the field and what is wrong.
    pub fn from_json(text: &str) -> Result<DiskModel, ModelError> {
        let value: Value =
            serde_json::from_str(text).map_err(|e| ModelError::Syntax(e.to_string()))?;
        check_shape(&value, TOP, "")?;
        // The shape check above guarantees this succeeds; the error path only guards
        // against the table and the struct drifting apart.
        let model: DiskModel =
            serde_json::from_value(value).map_err(|e| ModelError::Syntax(e.to_string()))?;
        model.validate()?;
        Ok(model)
    }

    /// A built-in model by name (see [`BUILTIN_NAMES`]), parsed once per process
    /// (every engine's default estimator starts from one: each open used to parse
    /// the JSON again).
    pub fn builtin(name: &str) -> Option<DiskModel> {
        static PARSED: [OnceLock<Option<DiskModel>>; 3] =
            [OnceLock::new(), OnceLock::new(), OnceLock::new()];
        let (slot, text) = match name {
            "avfs-250g" => (0, AVFS_250G_JSON),
            "nvr-8t" => (1, NVR_8T_JSON),
            "laptop-5400" => (2, LAPTOP_5400_JSON),
            _ => return None,
        };
        // The built-in files are checked by this crate's tests; a failure here would
        // be a build defect, reported as "no such model" rather than a panic.
        PARSED[slot]
            .get_or_init(|| DiskModel::from_json(text).ok())
            .clone()
    }

    /// Capacity in bytes.
    pub fn capacity_bytes(&self) -> u64 {
        self.lbas.saturating_mul(self.sector_bytes as u64)
    }

    /// One revolution, in ns (not rounded: 8,333,333.3 ns at 7200 rpm).
    pub fn rotation_ns(&self) -> f64 {
        60.0e9 / self.rpm
    }

    /// Checks every field against physics and the limits of this module.
    pub fn validate(&self) -> Result<(), ModelError> {
        let m = self;
        if m.name.is_empty() || m.name.len() > MAX_NAME_BYTES {
            return Err(ModelError::invalid(
                "name",
                format!("must be 1 to {MAX_NAME_BYTES} bytes long"),
            ));
        }
        if m.name.chars().any(char::is_control) {
            return Err(ModelError::invalid(
                "name",
                "must not contain control characters",
            ));
        }
        if let Some(d) = &m.description {
            if d.len() > MAX_DESCRIPTION_BYTES {
                return Err(ModelError::invalid(
                    "description",
                    format!("must be at most {MAX_DESCRIPTION_BYTES} bytes long"),
                ));
            }
        }
        if m.lbas == 0 || m.lbas > MAX_LBAS {
            return Err(ModelError::invalid(
                "lbas",
                format!("must be a positive integer no larger than {MAX_LBAS}"),
            ));
        }
        if m.sector_bytes != 512 && m.sector_bytes != 4096 {
            return Err(ModelError::invalid(
                "sector_bytes",
                format!("must be 512 or 4096, not {}", m.sector_bytes),
            ));
        }
        number_in(
            "rpm",
            m.rpm,
            f64::MIN_POSITIVE,
            MAX_RPM,
            "a positive number",
        )?;
        if m.surfaces == 0 || m.surfaces > MAX_SURFACES {
            return Err(ModelError::invalid(
                "surfaces",
                format!("must be an integer from 1 to {MAX_SURFACES}"),
            ));
        }
        let z = &m.zones;
        if z.count == 0 || z.count > MAX_ZONES {
            return Err(ModelError::invalid(
                "zones.count",
                format!("must be an integer from 1 to {MAX_ZONES}"),
            ));
        }
        if z.spt_outer == 0 || z.spt_outer > MAX_SECTORS_PER_TRACK {
            return Err(ModelError::invalid(
                "zones.spt_outer",
                format!("must be a positive integer no larger than {MAX_SECTORS_PER_TRACK}"),
            ));
        }
        if z.spt_inner == 0 || z.spt_inner > z.spt_outer {
            return Err(ModelError::invalid(
                "zones.spt_inner",
                "must be a positive integer no larger than spt_outer",
            ));
        }
        if z.count == 1 && z.spt_inner != z.spt_outer {
            return Err(ModelError::invalid(
                "zones.spt_inner",
                "must equal spt_outer when there is a single zone",
            ));
        }
        let s = &m.seek_ms;
        number_in(
            "seek_ms.track",
            s.track,
            f64::MIN_POSITIVE,
            MAX_MECHANICAL_MS,
            "a positive number of ms",
        )?;
        number_in(
            "seek_ms.full",
            s.full,
            s.track,
            MAX_MECHANICAL_MS,
            "a number of ms no smaller than seek_ms.track",
        )?;
        if s.full <= s.track {
            return Err(ModelError::invalid(
                "seek_ms.full",
                "must be larger than seek_ms.track (a seek curve is not flat)",
            ));
        }
        number_in(
            "seek_ms.average",
            s.average,
            s.track,
            s.full,
            "a number of ms from seek_ms.track to seek_ms.full",
        )?;
        if let Some(c) = &m.seek_curve {
            number_in(
                "seek_curve.x0",
                c.x0,
                f64::MIN_POSITIVE,
                1.0,
                "a number in (0, 1]",
            )?;
            for (field, v) in [
                ("seek_curve.t1", c.t1),
                ("seek_curve.b", c.b),
                ("seek_curve.c", c.c),
                ("seek_curve.e", c.e),
            ] {
                number_in(
                    field,
                    v,
                    0.0,
                    MAX_MECHANICAL_MS,
                    "a non-negative number of ms",
                )?;
            }
            let left = c.t1 + c.b * c.x0.sqrt();
            let right = c.c + c.e * c.x0;
            if (left - right).abs() > (0.05f64).max(0.02 * left.max(right)) {
                return Err(ModelError::invalid(
                    "seek_curve",
                    format!(
                        "the two pieces must meet at x0: t1 + b*sqrt(x0) = {left:.3} ms but \
                         c + e*x0 = {right:.3} ms"
                    ),
                ));
            }
        }
        number_in(
            "write_settle_ms",
            m.write_settle_ms,
            0.0,
            MAX_MECHANICAL_MS,
            "a non-negative number of ms",
        )?;
        number_in(
            "head_switch_ms",
            m.head_switch_ms,
            0.0,
            MAX_MECHANICAL_MS,
            "a non-negative number of ms",
        )?;
        number_in(
            "command_overhead_ms",
            m.command_overhead_ms,
            0.0,
            MAX_MECHANICAL_MS,
            "a non-negative number of ms",
        )?;
        for (field, v) in [
            ("track_skew", m.track_skew),
            ("cylinder_skew", m.cylinder_skew),
        ] {
            if !(v.is_finite() && (0.0..1.0).contains(&v)) {
                return Err(ModelError::invalid(
                    field,
                    format!("must be a fraction of a revolution in [0, 1), not {v}"),
                ));
            }
        }
        number_in(
            "interface_mb_per_s",
            m.interface_mb_per_s,
            f64::MIN_POSITIVE,
            MAX_INTERFACE_MB_PER_S,
            "a positive number",
        )?;
        if m.cache.read_ahead_bytes > MAX_READ_AHEAD_BYTES {
            return Err(ModelError::invalid(
                "cache.read_ahead_bytes",
                format!("must be at most {MAX_READ_AHEAD_BYTES}"),
            ));
        }
        if m.cache.segments > MAX_CACHE_SEGMENTS
            || (m.cache.read_ahead_bytes > 0 && m.cache.segments == 0)
        {
            return Err(ModelError::invalid(
                "cache.segments",
                format!("must be from 1 to {MAX_CACHE_SEGMENTS} when read_ahead_bytes is not 0"),
            ));
        }
        if let Some(slow) = &m.slow_io {
            number_in(
                "slow_io.probability",
                slow.probability,
                0.0,
                1.0,
                "a probability in [0, 1]",
            )?;
            let [lo, hi] = slow.extra_ms;
            number_in(
                "slow_io.extra_ms",
                lo,
                0.0,
                MAX_SLOW_IO_MS,
                "[min, max] with 0 <= min <= max (ms)",
            )?;
            number_in(
                "slow_io.extra_ms",
                hi,
                lo,
                MAX_SLOW_IO_MS,
                "[min, max] with 0 <= min <= max (ms)",
            )?;
        }
        // The derived geometry must stay within bounds, and the seek figures must be
        // reachable by the two-piece curve.
        let geo = Geometry::from_model(m);
        if geo.cylinders() > MAX_CYLINDERS {
            return Err(ModelError::invalid(
                "lbas",
                format!(
                    "the geometry would need {} cylinders (limit {MAX_CYLINDERS}); \
                     check surfaces and zones",
                    geo.cylinders()
                ),
            ));
        }
        let curve = SeekCurve::from_model(m, geo.cylinders())?;
        if m.seek_curve.is_some() {
            // An explicit curve replaces the fit, but must still tell the same story as
            // the data-sheet figures next to it (a typo in either shows up here).
            let cyl = geo.cylinders();
            for (what, got, want) in [
                ("one-cylinder seek", curve.seek_ns(1, cyl) / 1.0e6, s.track),
                ("average", curve.average_ms(), s.average),
                ("full stroke", curve.time_ms(1.0), s.full),
            ] {
                if (got - want).abs() > (SEEK_CURVE_TOLERANCE * want).max(0.1) {
                    return Err(ModelError::invalid(
                        "seek_curve",
                        format!(
                            "its {what} is {got:.2} ms but seek_ms says {want} ms; they must \
                             agree within 10%"
                        ),
                    ));
                }
            }
        }
        Ok(())
    }
}

/// `v` must be finite and in [lo, hi].
fn number_in(field: &str, v: f64, lo: f64, hi: f64, what: &str) -> Result<(), ModelError> {
    if v.is_finite() && v >= lo && v <= hi {
        Ok(())
    } else {
        Err(ModelError::invalid(
            field,
            format!("must be {what} (at most {hi}), not {v}"),
        ))
    }
}

// ---- shape check -------------------------------------------------------------------

#[derive(Clone, Copy)]
enum Kind {
    Str,
    /// An exact integer that fits a `u64`.
    U64,
    /// An exact integer that fits a `u32`.
    U32,
    Num,
    Bool,
    NumPair,
    Obj(&'static [Spec]),
}

#[derive(Clone, Copy)]
struct Spec {
    name: &'static str,
    kind: Kind,
    required: bool,
}

const fn req(name: &'static str, kind: Kind) -> Spec {
    Spec {
        name,
        kind,
        required: true,
    }
}

const fn opt(name: &'static str, kind: Kind) -> Spec {
    Spec {
        name,
        kind,
        required: false,
    }
}

/// The schema of `disks/SCHEMA.md` as a table, in the file's order.
const TOP: &[Spec] = &[
    req("name", Kind::Str),
    opt("description", Kind::Str),
    req("lbas", Kind::U64),
    req("sector_bytes", Kind::U32),
    req("rpm", Kind::Num),
    req("surfaces", Kind::U32),
    req(
        "zones",
        Kind::Obj(&[
            req("count", Kind::U32),
            req("spt_outer", Kind::U32),
            req("spt_inner", Kind::U32),
        ]),
    ),
    req(
        "seek_ms",
        Kind::Obj(&[
            req("track", Kind::Num),
            req("average", Kind::Num),
            req("full", Kind::Num),
        ]),
    ),
    opt(
        "seek_curve",
        Kind::Obj(&[
            req("x0", Kind::Num),
            req("t1", Kind::Num),
            req("b", Kind::Num),
            req("c", Kind::Num),
            req("e", Kind::Num),
        ]),
    ),
    req("write_settle_ms", Kind::Num),
    req("head_switch_ms", Kind::Num),
    req("track_skew", Kind::Num),
    req("cylinder_skew", Kind::Num),
    req("command_overhead_ms", Kind::Num),
    req("interface_mb_per_s", Kind::Num),
    req(
        "cache",
        Kind::Obj(&[
            req("read_ahead_bytes", Kind::U64),
            req("segments", Kind::U32),
            req("write_back", Kind::Bool),
        ]),
    ),
    opt(
        "slow_io",
        Kind::Obj(&[
            req("probability", Kind::Num),
            req("extra_ms", Kind::NumPair),
        ]),
    ),
];

fn check_shape(value: &Value, specs: &[Spec], prefix: &str) -> Result<(), ModelError> {
    let path = |name: &str| {
        if prefix.is_empty() {
            name.to_string()
        } else {
            format!("{prefix}.{name}")
        }
    };
    let Some(obj) = value.as_object() else {
        let field = if prefix.is_empty() {
            "(top level)"
        } else {
            prefix
        };
        return Err(ModelError::invalid(field, "must be a JSON object"));
    };
    // Unknown fields first: a misspelt field also shows up as a missing one, and the
    // misspelling is the more useful message.
    for key in obj.keys() {
        if !specs.iter().any(|s| s.name == key) {
            let hint = match closest(key, specs) {
                Some(name) => format!(" (did you mean `{}`?)", path(name)),
                None => {
                    let names: Vec<&str> = specs.iter().map(|s| s.name).collect();
                    format!(" (expected one of: {})", names.join(", "))
                }
            };
            return Err(ModelError::UnknownField {
                field: path(key),
                hint,
            });
        }
    }
    for spec in specs {
        let Some(v) = obj.get(spec.name) else {
            if spec.required {
                return Err(ModelError::MissingField {
                    field: path(spec.name),
                });
            }
            continue;
        };
        let field = path(spec.name);
        let bad = |what: &str| Err(ModelError::invalid(&field, format!("must be {what}")));
        match spec.kind {
            Kind::Str if !v.is_string() => return bad("a string"),
            Kind::Bool if !v.is_boolean() => return bad("true or false"),
            Kind::Num if !v.is_number() => return bad("a number"),
            Kind::U64 if v.as_u64().is_none() => return bad("a non-negative integer"),
            Kind::U32 if v.as_u64().and_then(|n| u32::try_from(n).ok()).is_none() => {
                return bad("a non-negative integer below 2^32")
            }
            Kind::NumPair => {
                let ok = v
                    .as_array()
                    .is_some_and(|a| a.len() == 2 && a.iter().all(Value::is_number));
                if !ok {
                    return bad("a pair of numbers [min, max]");
                }
            }
            Kind::Obj(inner) => check_shape(v, inner, &field)?,
            _ => {}
        }
    }
    Ok(())
}

/// The known field closest to a misspelt one (edit distance at most 2), if any.
fn closest(key: &str, specs: &[Spec]) -> Option<&'static str> {
    specs
        .iter()
        .map(|s| (edit_distance(key, s.name), s.name))
        .filter(|(d, _)| *d <= 2)
        .min_by_key(|(d, _)| *d)
        .map(|(_, name)| name)
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            let subst = prev[j] + usize::from(ca != *cb);
            cur[j + 1] = subst.min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn avfs_value() -> Value {
        serde_json::from_str(AVFS_250G_JSON).unwrap()
    }

    fn load(v: &Value) -> Result<DiskModel, ModelError> {
        DiskModel::from_json(&v.to_string())
    }

    #[test]
    fn builtins_load_and_match_their_files() {
        for name in BUILTIN_NAMES {
            let m = DiskModel::builtin(name).expect("built-in model loads");
            assert_eq!(&m.name, name);
            // Serializing and reloading gives the same model (calibrate writes this form).
            let text = serde_json::to_string(&m).unwrap();
            assert_eq!(DiskModel::from_json(&text).unwrap(), m, "{name}");
        }
        assert!(DiskModel::builtin("nope").is_none());
        let m = DiskModel::builtin("avfs-250g").unwrap();
        assert_eq!(m.lbas, 488_397_168);
        assert_eq!(m.capacity_bytes(), 488_397_168 * 512);
        assert!((m.rotation_ns() - 8_333_333.333).abs() < 0.01);
        // A 1 TB laptop disk: 1,953,525,168 LBAs (the IDEMA count for 1,000 GB) at
        // 5,400 rpm, 11.1 ms a revolution.
        let m = DiskModel::builtin("laptop-5400").unwrap();
        assert_eq!(m.capacity_bytes(), 1_953_525_168 * 512);
        assert!((m.rotation_ns() - 11_111_111.111).abs() < 0.01);
        assert!(!m.cache.write_back);
    }

    #[test]
    fn unknown_field_is_named_with_a_suggestion() {
        let mut v = avfs_value();
        let rpm = v["rpm"].take();
        v.as_object_mut().unwrap().remove("rpm");
        v["rmp"] = rpm;
        let msg = load(&v).unwrap_err().to_string();
        assert!(msg.contains("unknown field `rmp`"), "{msg}");
        assert!(msg.contains("did you mean `rpm`"), "{msg}");

        let mut v = avfs_value();
        v["zones"]["cnt"] = 3.into();
        let msg = load(&v).unwrap_err().to_string();
        assert!(msg.contains("unknown field `zones.cnt`"), "{msg}");
    }

    #[test]
    fn missing_field_is_named() {
        let mut v = avfs_value();
        v.as_object_mut().unwrap().remove("rpm");
        assert_eq!(load(&v).unwrap_err().to_string(), "missing field `rpm`");
        let mut v = avfs_value();
        v["cache"].as_object_mut().unwrap().remove("write_back");
        assert_eq!(
            load(&v).unwrap_err().to_string(),
            "missing field `cache.write_back`"
        );
        // Optional fields may be absent.
        let mut v = avfs_value();
        v.as_object_mut().unwrap().remove("seek_curve");
        v.as_object_mut().unwrap().remove("description");
        assert!(load(&v).is_ok());
    }

    #[test]
    fn wrong_types_and_values_are_named() {
        let cases: Vec<(&str, Value, &str)> = vec![
            (
                "lbas",
                (-5).into(),
                "field `lbas`: must be a non-negative integer",
            ),
            ("lbas", 0.into(), "field `lbas`: must be a positive integer"),
            ("rpm", "fast".into(), "field `rpm`: must be a number"),
            ("rpm", 0.into(), "field `rpm`: must be a positive number"),
            (
                "sector_bytes",
                1024.into(),
                "field `sector_bytes`: must be 512 or 4096",
            ),
            ("surfaces", 0.into(), "field `surfaces`"),
            (
                "track_skew",
                1.0.into(),
                "field `track_skew`: must be a fraction",
            ),
            ("cylinder_skew", (-0.1).into(), "field `cylinder_skew`"),
            (
                "command_overhead_ms",
                (-1).into(),
                "field `command_overhead_ms`",
            ),
            ("interface_mb_per_s", 0.into(), "field `interface_mb_per_s`"),
            ("name", "".into(), "field `name`"),
        ];
        for (field, value, want) in cases {
            let mut v = avfs_value();
            v[field] = value;
            let msg = load(&v).unwrap_err().to_string();
            assert!(msg.starts_with(want), "{field}: got {msg:?}, want {want:?}");
        }
    }

    #[test]
    fn nested_values_are_checked() {
        let mut v = avfs_value();
        v["zones"]["spt_inner"] = 2000.into();
        assert_eq!(
            load(&v).unwrap_err().to_string(),
            "field `zones.spt_inner`: must be a positive integer no larger than spt_outer"
        );
        let mut v = avfs_value();
        v["zones"]["count"] = 0.into();
        assert!(load(&v)
            .unwrap_err()
            .to_string()
            .starts_with("field `zones.count`"));
        let mut v = avfs_value();
        v["seek_ms"]["average"] = 30.into();
        assert!(load(&v)
            .unwrap_err()
            .to_string()
            .starts_with("field `seek_ms.average`"));
        let mut v = avfs_value();
        v["seek_ms"]["full"] = 0.5.into();
        assert!(load(&v)
            .unwrap_err()
            .to_string()
            .starts_with("field `seek_ms.full`"));
        let mut v = avfs_value();
        v["seek_ms"]["average"] = 12.into();
        let msg = load(&v).unwrap_err().to_string();
        assert!(msg.starts_with("field `seek_curve`: its average"), "{msg}");
        let mut v = avfs_value();
        v["seek_curve"]["c"] = 9.into();
        assert!(load(&v)
            .unwrap_err()
            .to_string()
            .starts_with("field `seek_curve`"));
        let mut v = avfs_value();
        v["cache"]["segments"] = 0.into();
        assert!(load(&v)
            .unwrap_err()
            .to_string()
            .starts_with("field `cache.segments`"));
        let mut v = avfs_value();
        v["cache"]["write_back"] = 1.into();
        assert!(load(&v)
            .unwrap_err()
            .to_string()
            .starts_with("field `cache.write_back`"));
        let mut v = avfs_value();
        v["slow_io"] = serde_json::json!({"probability": 1.5, "extra_ms": [1, 2]});
        assert!(load(&v)
            .unwrap_err()
            .to_string()
            .starts_with("field `slow_io.probability`"));
        let mut v = avfs_value();
        v["slow_io"] = serde_json::json!({"probability": 0.1, "extra_ms": [5, 2]});
        assert!(load(&v)
            .unwrap_err()
            .to_string()
            .starts_with("field `slow_io.extra_ms`"));
        let mut v = avfs_value();
        v["slow_io"] = serde_json::json!({"probability": 0.1, "extra_ms": [5]});
        assert!(load(&v)
            .unwrap_err()
            .to_string()
            .starts_with("field `slow_io.extra_ms`"));
    }

    #[test]
    fn average_seek_out_of_reach_of_the_curve_is_an_error() {
        // Fitting is only possible for averages the two-piece form can produce.
        let mut v = avfs_value();
        v.as_object_mut().unwrap().remove("seek_curve");
        v["seek_ms"]["average"] = 17.0.into();
        let msg = load(&v).unwrap_err().to_string();
        assert!(msg.starts_with("field `seek_ms.average`"), "{msg}");
        assert!(msg.contains("seek_curve"), "{msg}");
    }

    #[test]
    fn syntax_errors_and_non_objects_are_reported() {
        assert!(matches!(
            DiskModel::from_json("{"),
            Err(ModelError::Syntax(_))
        ));
        assert!(DiskModel::from_json("[1]")
            .unwrap_err()
            .to_string()
            .contains("must be a JSON object"));
        let mut v = avfs_value();
        v["zones"] = 3.into();
        assert_eq!(
            load(&v).unwrap_err().to_string(),
            "field `zones`: must be a JSON object"
        );
    }
}
