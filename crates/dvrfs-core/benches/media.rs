//! How fast the transport-stream parser indexes, on one core: a 60 s H.264 + AAC
//! transport stream at about 19.39 Mbit/s (an ATSC broadcast's rate) made with ffmpeg,
//! fed in 512 KiB pieces as a recording's requests arrive.
//! Run: `cargo bench -p dvrfs-core --bench media` (needs ffmpeg).

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use dvrfs_core::media::Indexer;
use std::hint::black_box;
use std::process::Command;

fn fixture() -> Option<Vec<u8>> {
    let path = std::env::temp_dir().join(format!("dvrfs-media-bench-{}.ts", std::process::id()));
    let ok = Command::new("ffmpeg")
        .args([
            "-v",
            "error",
            "-y",
            "-f",
            "lavfi",
            "-i",
            "testsrc2=size=1280x720:rate=30:duration=60",
        ])
        .args([
            "-f",
            "lavfi",
            "-i",
            "sine=duration=60",
            "-c:v",
            "libx264",
            "-preset",
            "ultrafast",
        ])
        .args([
            "-b:v", "19M", "-maxrate", "19M", "-bufsize", "8M", "-g", "30", "-c:a", "aac",
        ])
        .arg(&path)
        .status()
        .is_ok_and(|s| s.success());
    let bytes = ok.then(|| std::fs::read(&path).ok()).flatten();
    let _ = std::fs::remove_file(&path);
    bytes
}

fn index(c: &mut Criterion) {
    let Some(bytes) = fixture() else {
        eprintln!("SKIP: no ffmpeg to make the fixture");
        return;
    };
    let mut g = c.benchmark_group("media");
    g.throughput(Throughput::Bytes(bytes.len() as u64));
    g.sample_size(20);
    g.bench_function("ts_h264_19mbit_60s", |b| {
        b.iter(|| {
            let mut ix = Indexer::new();
            let mut n = 0usize;
            for piece in bytes.chunks(512 << 10) {
                ix.feed(black_box(piece));
                n += ix.drain().len();
            }
            n + ix.finish().len()
        })
    });
    g.finish();
}

criterion_group!(benches, index);
criterion_main!(benches);
