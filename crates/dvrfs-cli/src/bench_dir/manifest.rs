//! A fill that outlives its run: `bench --dir --fill-only` prepares the directory as
//! a run would (fill, age, delete victim) and writes `fill.json` beside the
//! recordings; `bench --dir --reuse-fill` then measures on it without filling again.
//!
//! An 80% fill of a 250 GB disk takes minutes and of an 8 TB one about an hour, and a
//! comparison runs dozens of workloads on the same fill; a `dvrfs emulate` image can
//! even be copied once filled, so every run starts from the same bytes. The manifest
//! makes reuse exact rather than approximate: it holds every parameter the fill
//! depends on (a run with any other value is refused, naming it), the file system's
//! size, each recording with its size (checked before the run: a fill someone
//! changed is refused), and the position of the run's random generator after the
//! fill, so the run that follows draws exactly what it would have drawn after
//! filling itself.

use std::path::{Path, PathBuf};

use dvrfs_core::sim::{BestEffort, SimConfig};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use crate::error::{CliError, CliResult};

/// The manifest's file name inside the bench directory.
pub const MANIFEST: &str = "fill.json";

/// The directory of the fill's recordings inside the bench directory.
pub const REC_DIR: &str = "rec";

/// The manifest's format; another value is refused.
const VERSION: u32 = 1;

/// The parameters a fill depends on: equal parameters make the same fill.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FillKey {
    /// `--fill` as a fraction of the file system's size.
    pub fill: f64,
    pub seed: u64,
    /// `--age` record-and-delete cycles.
    pub age_cycles: u32,
    /// The recordings' bitrate (their sizes are durations at this rate).
    pub bitrate_bps: f64,
    /// The request size (the smallest recording, the space check).
    pub block_bytes: u64,
    /// The delete victim's size, when the fill was made for `--best-effort delete`.
    pub delete_bytes: Option<u64>,
}

impl FillKey {
    pub fn of(cfg: &SimConfig) -> FillKey {
        FillKey {
            fill: cfg.fill,
            seed: cfg.seed,
            age_cycles: cfg.age_cycles,
            bitrate_bps: cfg.bitrate_bps,
            block_bytes: cfg.block_bytes,
            delete_bytes: (cfg.best_effort == Some(BestEffort::Delete)).then_some(cfg.delete_bytes),
        }
    }

    /// The first parameter in which `other` (the run's) differs, as a sentence.
    fn differs(&self, run: &FillKey) -> Option<String> {
        let pct = |f: f64| format!("{:.4}%", f * 100.0);
        if self.fill != run.fill {
            return Some(format!(
                "--fill: the fill is {}, the run asks {}",
                pct(self.fill),
                pct(run.fill)
            ));
        }
        if self.seed != run.seed {
            return Some(format!(
                "--seed: the fill was made with {}, the run asks {}",
                self.seed, run.seed
            ));
        }
        if self.age_cycles != run.age_cycles {
            return Some(format!(
                "--age: the fill was aged {} cycles, the run asks {}",
                self.age_cycles, run.age_cycles
            ));
        }
        if self.bitrate_bps != run.bitrate_bps {
            return Some(format!(
                "the recordings' bitrate: the fill's is {} bit/s, the run's {}",
                self.bitrate_bps, run.bitrate_bps
            ));
        }
        if self.block_bytes != run.block_bytes {
            return Some(format!(
                "the request size: the fill was made for {} bytes, the run uses {}",
                self.block_bytes, run.block_bytes
            ));
        }
        if self.delete_bytes != run.delete_bytes {
            let what = |d: Option<u64>| {
                d.map_or("no delete victim".to_string(), |b| {
                    format!("a delete victim of {b} bytes")
                })
            };
            return Some(format!(
                "--best-effort delete: the fill has {}, the run needs {}",
                what(self.delete_bytes),
                what(run.delete_bytes)
            ));
        }
        None
    }
}

/// `fill.json`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Manifest {
    pub version: u32,
    pub key: FillKey,
    /// statvfs's total of the file system the fill was made on.
    pub fs_total_bytes: u64,
    /// Bytes in use when the fill was done.
    pub used_bytes: u64,
    /// The recordings as the run's client names them (`/rec/...`, the delete victim
    /// last) with their sizes.
    pub recordings: Vec<(String, u64)>,
    /// The run generator's word position after the fill (a u128 as decimal text).
    pub rng_word_pos: String,
    /// The dvrfs version that made it.
    pub made_by: String,
}

impl Manifest {
    pub fn new(
        cfg: &SimConfig,
        fs_total_bytes: u64,
        used_bytes: u64,
        recordings: Vec<(String, u64)>,
        rng: &ChaCha8Rng,
    ) -> Manifest {
        Manifest {
            version: VERSION,
            key: FillKey::of(cfg),
            fs_total_bytes,
            used_bytes,
            recordings,
            rng_word_pos: rng.get_word_pos().to_string(),
            made_by: env!("CARGO_PKG_VERSION").to_string(),
        }
    }

    /// The run's generator as it stood after the fill.
    pub fn rng(&self, cfg: &SimConfig) -> CliResult<ChaCha8Rng> {
        let pos: u128 = self.rng_word_pos.parse().map_err(|_| {
            CliError::new(format!(
                "{MANIFEST}: rng_word_pos {:?} is not a number",
                self.rng_word_pos
            ))
            .hint("make the fill again with --fill-only")
        })?;
        let mut rng = dvrfs_core::sim::run_rng(cfg);
        rng.set_word_pos(pos);
        Ok(rng)
    }

    pub fn paths(&self) -> Vec<String> {
        self.recordings.iter().map(|(p, _)| p.clone()).collect()
    }

    pub fn write(&self, dir: &Path) -> CliResult<()> {
        let path = dir.join(MANIFEST);
        let tmp = dir.join(format!("{MANIFEST}.tmp"));
        let text = serde_json::to_string_pretty(self).expect("a manifest encodes");
        std::fs::write(&tmp, text).map_err(|e| crate::error::local_io(&tmp, "cannot write", e))?;
        std::fs::rename(&tmp, &path)
            .map_err(|e| crate::error::local_io(&path, "cannot rename into place", e))?;
        dvrfs_io::files::sync_everything();
        Ok(())
    }

    /// Reads the manifest of the bench directory `dir` and checks it against the run
    /// (`cfg`, the file system's size now) and the files (each recording there with
    /// its size).
    pub fn load(dir: &Path, cfg: &SimConfig, fs_total_bytes: u64) -> CliResult<Manifest> {
        let path = dir.join(MANIFEST);
        let remake = "make the fill again: remove the directory, then run bench --dir --fill-only with the run's --fill, --seed, --age (and --best-effort delete)";
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(CliError::new(format!(
                    "--reuse-fill: {} holds no fill to reuse (no {MANIFEST})",
                    dir.display()
                ))
                .hint(
                    "make one first with bench --dir PATH --fill-only (same --fill, --seed, --age)",
                ))
            }
            Err(e) => return Err(crate::error::local_io(&path, "cannot read", e)),
        };
        let m: Manifest = serde_json::from_str(&text).map_err(|e| {
            CliError::new(format!(
                "--reuse-fill: {} is not a fill manifest: {e}",
                path.display()
            ))
            .hint(remake)
        })?;
        if m.version != VERSION {
            return Err(CliError::new(format!(
                "--reuse-fill: {} is of manifest version {}; this dvrfs reads version {VERSION}",
                path.display(),
                m.version
            ))
            .hint(remake));
        }
        if let Some(why) = m.key.differs(&FillKey::of(cfg)) {
            return Err(CliError::new(format!(
                "--reuse-fill: the fill in {} was made for another run: {why}",
                dir.display()
            ))
            .hint(
                "give the run the fill's parameters, or make a fill for this run with --fill-only",
            ));
        }
        if m.fs_total_bytes != fs_total_bytes {
            return Err(CliError::new(format!(
                "--reuse-fill: the fill was made on a file system of {} bytes; this one has {}",
                m.fs_total_bytes, fs_total_bytes
            ))
            .hint(remake));
        }
        for (p, bytes) in &m.recordings {
            let file = recording_path(dir, p);
            match std::fs::metadata(&file) {
                Ok(md) if md.len() == *bytes => {}
                Ok(md) => {
                    return Err(CliError::new(format!(
                        "--reuse-fill: {} holds {} bytes; the fill wrote {bytes}",
                        file.display(),
                        md.len()
                    ))
                    .hint(remake))
                }
                Err(e) => {
                    return Err(crate::error::local_io(
                        &file,
                        "--reuse-fill: a recording of the fill is gone:",
                        e,
                    )
                    .hint(remake))
                }
            }
        }
        Ok(m)
    }

    /// Whether every recording is still there with its size (after a run: a
    /// `--best-effort delete` run removes its victim).
    pub fn intact(&self, dir: &Path) -> bool {
        self.recordings.iter().all(|(p, bytes)| {
            std::fs::metadata(recording_path(dir, p)).is_ok_and(|m| m.len() == *bytes)
        })
    }
}

/// The file of a recording named as the client names it (`/rec/fill00001.ts`).
fn recording_path(dir: &Path, client_path: &str) -> PathBuf {
    dir.join(client_path.trim_start_matches('/'))
}

/// After a `--reuse-fill` run: removes everything the run made in the bench
/// directory (all but the fill's recordings and the manifest), so the fill serves the
/// next run; false when the run changed the fill itself (a delete victim gone), so
/// the caller removes the whole directory.
pub fn remove_run_files(dir: &Path, m: &Manifest) -> std::io::Result<bool> {
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name();
        if name == REC_DIR || name == MANIFEST {
            continue;
        }
        let p = entry.path();
        if entry.file_type()?.is_dir() {
            std::fs::remove_dir_all(&p)?;
        } else {
            std::fs::remove_file(&p)?;
        }
    }
    let keep: std::collections::BTreeSet<String> = m
        .recordings
        .iter()
        .map(|(p, _)| {
            p.trim_start_matches('/')
                .trim_start_matches("rec/")
                .to_string()
        })
        .collect();
    for entry in std::fs::read_dir(dir.join(REC_DIR))? {
        let entry = entry?;
        if !keep.contains(entry.file_name().to_string_lossy().as_ref()) {
            std::fs::remove_file(entry.path())?;
        }
    }
    Ok(m.intact(dir))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> SimConfig {
        SimConfig::new(dvrfs_core::sim::Workload::parse("2r2w").unwrap())
    }

    #[test]
    fn a_fill_key_names_the_first_parameter_that_differs() {
        let a = FillKey::of(&cfg());
        assert_eq!(a.differs(&a), None);
        let mut c = cfg();
        c.seed += 1;
        assert!(a.differs(&FillKey::of(&c)).unwrap().starts_with("--seed"));
        let mut c = cfg();
        c.best_effort = Some(BestEffort::Delete);
        assert!(a
            .differs(&FillKey::of(&c))
            .unwrap()
            .contains("delete victim"));
        let mut c = cfg();
        c.best_effort = Some(BestEffort::Photos);
        assert_eq!(
            a.differs(&FillKey::of(&c)),
            None,
            "only the delete victim is part of the fill"
        );
    }

    #[test]
    fn the_manifest_restores_the_generator_where_the_fill_left_it() {
        use rand_chacha::rand_core::RngCore;
        let c = cfg();
        let mut rng = dvrfs_core::sim::run_rng(&c);
        for _ in 0..1234 {
            rng.next_u64();
        }
        let m = Manifest::new(
            &c,
            1 << 30,
            1 << 29,
            vec![("/rec/fill00000.ts".into(), 7)],
            &rng,
        );
        let text = serde_json::to_string(&m).unwrap();
        let back: Manifest = serde_json::from_str(&text).unwrap();
        let mut again = back.rng(&c).unwrap();
        for _ in 0..100 {
            assert_eq!(again.next_u64(), rng.next_u64());
        }
    }
}
