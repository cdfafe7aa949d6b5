//! The CPU cost of the data checksums: CRC32C over 512 KiB granules (what every read
//! and write computes), reported as the share of one core at 200 MB/s.
//!
//! `cargo run --release -p dvrfs-core --example crc_cost`

use std::time::Instant;

fn main() {
    const GRANULE: usize = 512 << 10;
    const TOTAL: usize = 4 << 30;
    let buf: Vec<u8> = (0..GRANULE).map(|i| (i * 31 + 7) as u8).collect();
    let mut acc = 0u32;
    // Warm up, then measure.
    for _ in 0..64 {
        acc ^= crc32c::crc32c(&buf);
    }
    let t = Instant::now();
    for _ in 0..TOTAL / GRANULE {
        acc ^= crc32c::crc32c_append(acc, &buf);
    }
    let s = t.elapsed().as_secs_f64();
    let rate = TOTAL as f64 / s;
    println!(
        "crc32c: {:.2} GB/s on one core ({} GiB in {:.3} s); at 200 MB/s that is {:.2}% of one core (checksum {acc:08x})",
        rate / 1e9,
        TOTAL >> 30,
        s,
        100.0 * 200e6 / rate
    );
}
