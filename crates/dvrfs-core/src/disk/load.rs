//! Loading a disk model file: the JSON form of `disks/SCHEMA.md`, read and checked.
//!
//! A model is data a person types (or `dvrfs calibrate` writes), so loading it is a
//! strict, two-step affair. First the *shape*: the text must be JSON, every field the
//! schema names must be present unless the schema marks it optional, no other field may
//! appear (a typo such as `rmp` must not silently fall back to a default), and each field
//! must have the right JSON type. Each of these errors names the field by its dotted
//! path (`zones.spt_inner`). Only then is the value deserialized into [`DiskModel`],
//! whose serde derive also carries `deny_unknown_fields` as a second guard for callers
//! that deserialize it directly. Second the *meaning*: [`DiskModel::validate`]
//! (`validate.rs`) checks every field against physics and against the limits of
//! `model.rs`, and says what is wrong and what would be accepted.
//!
//! The three built-in models, `avfs-250g`, `nvr-8t` and `laptop-5400`, are the very
//! files in `crates/dvrfs-core/disks/`, compiled in with `include_str!` and loaded by
//! the same code, so `--disk avfs-250g` and `--disk avfs-250g.json` cannot differ.
//!
//! Fault model: none; this is pure parsing. Nothing here panics on any input.

use serde_json::Value;
use std::sync::OnceLock;

use super::model::{DiskModel, ModelError};

const AVFS_250G_JSON: &str = include_str!("../../disks/avfs-250g.json");
const NVR_8T_JSON: &str = include_str!("../../disks/nvr-8t.json");
const LAPTOP_5400_JSON: &str = include_str!("../../disks/laptop-5400.json");

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
    opt(
        "power",
        Kind::Obj(&[
            req("idle_w", Kind::Num),
            req("seek_w", Kind::Num),
            req("transfer_w", Kind::Num),
            req("standby_w", Kind::Num),
            req("spin_up_w", Kind::Num),
            req("spin_up_s", Kind::Num),
            req("spin_down_s", Kind::Num),
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
    use super::super::model::BUILTIN_NAMES;
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
    fn power_is_optional_and_checked_field_by_field() {
        // Without the section the model loads, and has no power figures.
        let mut v = avfs_value();
        v.as_object_mut().unwrap().remove("power");
        assert_eq!(load(&v).unwrap().power, None);
        let builtin = DiskModel::builtin("avfs-250g").unwrap();
        assert_eq!(builtin.power.unwrap().idle_w, 7.5);
        let cases: Vec<(&str, Value, &str)> = vec![
            (
                "idle_w",
                "7".into(),
                "field `power.idle_w`: must be a number",
            ),
            (
                "idle_w",
                (-1.0).into(),
                "field `power.idle_w`: must be a non-negative",
            ),
            (
                "seek_w",
                150.into(),
                "field `power.seek_w`: must be a non-negative number of watts (at most 100)",
            ),
            (
                "seek_w",
                5.into(),
                "field `power.seek_w`: must be at least power.idle_w",
            ),
            (
                "transfer_w",
                1.into(),
                "field `power.transfer_w`: must be at least power.idle_w",
            ),
            (
                "spin_up_w",
                2.into(),
                "field `power.spin_up_w`: must be at least power.idle_w",
            ),
            (
                "standby_w",
                8.into(),
                "field `power.standby_w`: must not exceed power.idle_w",
            ),
            (
                "spin_up_s",
                (-2).into(),
                "field `power.spin_up_s`: must be a non-negative number of seconds",
            ),
            ("spin_down_s", 1000.into(), "field `power.spin_down_s`"),
        ];
        for (field, value, want) in cases {
            let mut v = avfs_value();
            v["power"][field] = value;
            let msg = load(&v).unwrap_err().to_string();
            assert!(msg.starts_with(want), "{field}: got {msg:?}, want {want:?}");
        }
        let mut v = avfs_value();
        v["power"]["idle_ww"] = 7.into();
        assert_eq!(
            load(&v).unwrap_err().to_string(),
            "unknown field `power.idle_ww` (did you mean `power.idle_w`?)"
        );
        let mut v = avfs_value();
        v["power"].as_object_mut().unwrap().remove("standby_w");
        assert_eq!(
            load(&v).unwrap_err().to_string(),
            "missing field `power.standby_w`"
        );
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
