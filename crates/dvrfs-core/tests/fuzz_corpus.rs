//! The fuzzing corpus kept in the repository (`fuzz/corpus/image`), replayed on the
//! stable toolchain in every test run: each input is a `Damage` the coverage-guided
//! target explored (or a crash it found, kept as `regress-*` once fixed), and each
//! must pass the oracle (`dvrfs_core::fuzzing::check`): no panic, one-pass repair.

use dvrfs_core::fuzzing::{Damage, Outcome, Samples};
use std::path::Path;

#[test]
fn every_corpus_input_passes_the_oracle() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/image");
    let mut inputs: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("a corpus entry").path())
        .collect();
    inputs.sort();
    assert!(inputs.len() >= 64, "the corpus is there: {}", inputs.len());
    assert!(
        inputs.iter().any(|p| p
            .file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with("regress-"))),
        "the regression inputs are there"
    );
    let samples = Samples::get();
    let mut failed = vec![];
    for p in &inputs {
        let damage = Damage::from_bytes(&std::fs::read(p).expect("read a corpus input"));
        let (dev, n) = damage.apply(samples);
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| samples.check(&dev))) {
            Err(_) => failed.push(format!("{}: block {n}: PANIC", p.display())),
            Ok(Outcome::Failed(why)) => failed.push(format!("{}: block {n}: {why}", p.display())),
            Ok(_) => {}
        }
    }
    assert!(failed.is_empty(), "{failed:#?}");
}
