//! Coverage-guided input for what makes clips and trick play (issue 25): the
//! fragmented-MP4 retimer and the trick-play transport-stream writer, under the
//! oracle `dvrfs_core::media::clip_oracle` (no panic; the retimer split-invariant and
//! never growing; the writer's output whole packets, PAT and PMT first, no PID but
//! its three). `cargo test` replays the corpus through the same oracle.
//! Run: `cargo +nightly fuzz run clip fuzz/corpus/clip` (see docs/fuzzing.md).
#![no_main]

use dvrfs_core::media::clip_oracle;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Err(why) = clip_oracle::check(data) {
        panic!("{why}");
    }
});
