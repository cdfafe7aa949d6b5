//! Coverage-guided input for the media parser (issue 25): any bytes, fed whole and
//! fed in pieces whose sizes come from the input's first byte. The oracle: no panic,
//! the same frames however the bytes are split, every frame's bytes inside the input,
//! frame numbers counting up from 0.
//! Run: `cargo +nightly fuzz run media fuzz/corpus/media` (see docs/fuzzing.md).
#![no_main]

use dvrfs_core::media::{Frame, Indexer};
use libfuzzer_sys::fuzz_target;

fn frames(data: &[u8], piece: usize) -> Vec<Frame> {
    let mut ix = Indexer::new();
    let mut out = Vec::new();
    for chunk in data.chunks(piece.max(1)) {
        ix.feed(chunk);
        out.extend(ix.drain());
    }
    out.extend(ix.finish());
    out
}

fuzz_target!(|data: &[u8]| {
    let piece = 1 + usize::from(data.first().copied().unwrap_or(0)) * 7;
    let whole = frames(data, data.len());
    let pieces = frames(data, piece);
    assert_eq!(whole, pieces, "split into {piece}-byte pieces");
    for (i, f) in whole.iter().enumerate() {
        assert_eq!(f.number, i as u64);
        assert!(f.data_offset.checked_add(f.len).is_some_and(|end| end <= data.len() as u64));
        assert!(f.offset <= data.len() as u64);
    }
});
