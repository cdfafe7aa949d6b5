//! The disk model through its public API: the figures `docs/disk-models.md` quotes,
//! and the sanity figures of `disks/SCHEMA.md` that every built-in model must reproduce.
//! Run with `--nocapture` to print them.

use dvrfs_core::disk::{capacity, Access, DiskModel, Estimator, Hdd, StreamParams};
use rand_chacha::ChaCha8Rng;
use rand_core::{RngCore, SeedableRng};

const MIB: u64 = 1 << 20;
/// SCHEMA.md: the sustained sequential rate within 2% of its formula.
const SUSTAINED_RATE_TOLERANCE: f64 = 0.02;
/// SCHEMA.md: the mean random 4 KiB read within 5% of its formula.
const RANDOM_READ_TOLERANCE: f64 = 0.05;

/// SCHEMA.md's sustained rate of a zone of `spt` sectors per track, reading whole
/// cylinders with the skews: `media_rate * H / (H + (H - 1) * track_skew +
/// cylinder_skew)`, in MB/s.
fn schema_rate_mb_per_s(m: &DiskModel, spt: u32) -> f64 {
    let h = m.surfaces as f64;
    let media_bytes_per_s = spt as f64 * m.sector_bytes as f64 * m.rpm / 60.0;
    media_bytes_per_s * h / (h + (h - 1.0) * m.track_skew + m.cylinder_skew) / 1e6
}

/// SCHEMA.md's random read at queue depth 1: average seek + half a revolution +
/// command overhead + transfer at the zone-averaged sustained rate, in ms.
fn schema_random_read_ms(m: &DiskModel, zone_avg_bytes_per_s: f64, bytes: u64) -> f64 {
    m.seek_ms.average
        + m.rotation_ns() / 2e6
        + m.command_overhead_ms
        + bytes as f64 / zone_avg_bytes_per_s * 1e3
}

fn seq_rate_mb_per_s(m: &DiskModel, lba: u64) -> f64 {
    let mut hdd = Hdd::new(m, 1);
    let req = (4 * MIB / 512) as u32;
    let mut t = hdd
        .service(
            0,
            &Access {
                lba,
                sectors: req,
                write: false,
            },
        )
        .end_ns;
    let t0 = t;
    let n = 10;
    for i in 1..=n {
        t = hdd
            .service(
                t,
                &Access {
                    lba: lba + i * req as u64,
                    sectors: req,
                    write: false,
                },
            )
            .end_ns;
    }
    (n * 4 * MIB) as f64 / ((t - t0) as f64 / 1e9) / 1e6
}

fn random_mean_ms(m: &DiskModel, sectors: u32, write: bool) -> (f64, f64) {
    let mut hdd = Hdd::new(m, 1);
    let est = Estimator::from_model(m);
    let mut rng = ChaCha8Rng::seed_from_u64(1);
    let n = 10_000;
    let (mut sim, mut e) = (0u64, 0u64);
    let mut t = 0;
    for _ in 0..n {
        let lba = rng.next_u64() % (m.lbas - sectors as u64);
        let a = Access {
            lba,
            sectors,
            write,
        };
        let r = hdd.service(t, &a);
        t = r.end_ns;
        sim += r.end_ns - r.start_ns;
        e += est.service_ns(lba, sectors, write, false);
    }
    (sim as f64 / n as f64 / 1e6, e as f64 / n as f64 / 1e6)
}

/// Back-to-back 512 KiB requests from the middle of the disk.
fn sequential_mean_ms(m: &DiskModel, write: bool) -> (f64, f64) {
    let mut hdd = Hdd::new(m, 1);
    let est = Estimator::from_model(m);
    let n = 200;
    let (mut sim, mut e) = (0u64, 0u64);
    let mut t = 0;
    let mut lba = m.lbas / 2;
    for i in 0..n {
        let a = Access {
            lba,
            sectors: 1024,
            write,
        };
        let r = hdd.service(t, &a);
        t = r.end_ns;
        if i > 0 {
            sim += r.end_ns - r.start_ns;
            e += est.service_ns(lba, 1024, write, true);
        }
        lba += 1024;
    }
    (
        sim as f64 / (n - 1) as f64 / 1e6,
        e as f64 / (n - 1) as f64 / 1e6,
    )
}

#[test]
fn disk_figures() {
    for name in dvrfs_core::disk::model::BUILTIN_NAMES {
        let m = DiskModel::builtin(name).unwrap();
        let hdd = Hdd::new(&m, 1);
        let geo = hdd.geometry();
        let inner_lba = geo.zones()[geo.inner_zone()].first_lba;
        let outer = seq_rate_mb_per_s(&m, 0);
        let inner = seq_rate_mb_per_s(&m, inner_lba);
        let (r4k, e4k) = random_mean_ms(&m, 8, false);
        let (r512, e512) = random_mean_ms(&m, 1024, false);
        let (w512, ew512) = random_mean_ms(&m, 1024, true);
        println!(
            "{name}: cylinders {} ({} per zone), sustained outer {outer:.2} MB/s inner \
             {inner:.2} MB/s zone-avg {:.2} MB/s; seek {:?}",
            geo.cylinders(),
            geo.cylinders_per_zone(),
            geo.zone_avg_rate_bytes_per_s() / 1e6,
            hdd.seek_curve(),
        );
        println!(
            "  random 4K read {r4k:.3} ms (est {e4k:.3}); 512K read {r512:.3} (est {e512:.3}); \
             512K write {w512:.3} (est {ew512:.3})"
        );
        for (bitrate, label) in [(19.39e6, "19.39M"), (8.0e6, "8M"), (4.0e6, "4M")] {
            let r = capacity(
                &m,
                &StreamParams {
                    bitrate_bps: bitrate,
                    request_bytes: 512 * 1024,
                    depth: 8,
                    be_share: 0.0,
                },
            );
            println!(
                "  {label}: bandwidth {} round {} batched {} (round {:.1} ms, cost {:.2} ms, \
                 sweep {:.1} ms, batched round {:.1} ms)",
                r.bandwidth_bound_streams,
                r.round_bound_streams,
                r.batched_round_bound_streams,
                r.round_ms,
                r.request_cost_ms,
                r.sweep_seek_ms,
                r.batched_round_ms
            );
        }
        let mut unfitted = m.clone();
        unfitted.seek_curve = None;
        println!(
            "  fit to seek_ms: {:?}",
            Hdd::new(&unfitted, 1).seek_curve()
        );
        let (seq_sim, seq_est) = sequential_mean_ms(&m, false);
        // (the middle of the disk, where eq. 1's straight line is furthest off)
        let (wseq_sim, wseq_est) = sequential_mean_ms(&m, true);
        println!(
            "  sequential 512K read {seq_sim:.3} ms (est {seq_est:.3}); contiguous 512K \
             write {wseq_sim:.3} (est {wseq_est:.3}); revolution {:.3} ms",
            m.rotation_ns() / 1e6
        );
        assert!(outer > inner && inner > 0.0);
        let want_outer = schema_rate_mb_per_s(&m, geo.spt(0));
        let want_inner = schema_rate_mb_per_s(&m, geo.spt(geo.inner_zone()));
        let want_r4k = schema_random_read_ms(&m, geo.zone_avg_rate_bytes_per_s(), 4096);
        println!(
            "  schema: outer {want_outer:.2} MB/s, inner {want_inner:.2} MB/s, random 4K \
             {want_r4k:.3} ms"
        );
        for (what, got, want, tolerance) in [
            ("outer rate", outer, want_outer, SUSTAINED_RATE_TOLERANCE),
            ("inner rate", inner, want_inner, SUSTAINED_RATE_TOLERANCE),
            ("random 4K read", r4k, want_r4k, RANDOM_READ_TOLERANCE),
        ] {
            assert!(
                (got - want).abs() <= tolerance * want,
                "{name} {what}: {got:.3} against the schema's {want:.3}"
            );
        }
    }
}

/// AVFS eq. 1 against the simulation for back-to-back 512 KiB reads at 41 points of
/// the LBA range: within 10% everywhere.
#[test]
fn sequential_512k_estimate_within_ten_percent_across_the_disk() {
    for name in dvrfs_core::disk::model::BUILTIN_NAMES {
        let m = DiskModel::builtin(name).unwrap();
        let est = Estimator::from_model(&m);
        let mut worst: f64 = 0.0;
        for i in 0..=40 {
            let f = i as f64 / 40.0;
            let mut hdd = Hdd::new(&m, 1);
            let mut lba = ((m.lbas - 300 * 1024) as f64 * f) as u64;
            let mut t = 0;
            let (mut sim, mut e) = (0u64, 0u64);
            for j in 0..100 {
                let r = hdd.service(
                    t,
                    &Access {
                        lba,
                        sectors: 1024,
                        write: false,
                    },
                );
                t = r.end_ns;
                if j > 0 {
                    sim += r.end_ns - r.start_ns;
                    e += est.service_ns(lba, 1024, false, true);
                }
                lba += 1024;
            }
            let err = e as f64 / sim as f64 - 1.0;
            worst = worst.max(err.abs());
        }
        println!("{name}: worst sequential 512K estimate error {worst:.4}");
        assert!(worst < 0.10, "{name}: {worst}");
    }
}
