//! Calibration: measuring a device into the disk-model form (`dvrfs calibrate`).
//!
//! Sans-I/O: the measurement plan is run against a [`Probe`], which reads and says how
//! long each read took (the CLI times real `O_DIRECT` reads on the wall clock; the
//! tests run the same plan against the HDD model in virtual time and check that the
//! fit gives the model back). Everything is read-only.
//!
//! What is measured, and how each figure follows:
//! - **Zones.** 32 MiB read sequentially (1 MiB reads) at eight places from the
//!   start to the end of the device: the sustained rate at each. The outermost and
//!   innermost rates give `spt_outer` and `spt_inner` through the schema's own
//!   relation `rate = spt * sector * rpm / 60 * H / (H + (H - 1) * track_skew +
//!   cylinder_skew)`, with H, the skews and the zone count *assumed* (4 surfaces,
//!   0.08 and 0.1 of a revolution, 16 zones: a drive does not tell them).
//! - **Command overhead.** 4 KiB read, then the 4 KiB right after it: the second is in
//!   the drive's read-ahead or under the head at once; its time is the overhead (and
//!   the transfer).
//! - **Rotation.** 4 KiB read, then the 4 KiB just before it: the head has just passed
//!   them, so the second read waits almost a full revolution. The median over 64 such
//!   pairs, less the overhead, is the revolution; `rpm` follows (clamped to 3,600 to
//!   15,000: a device that answers faster, an SSD or a file in a cache, has no
//!   rotation to measure, and the model says so in its description).
//! - **Seeks.** Pairs of 4 KiB reads 4 MiB apart (a short seek), uniformly random
//!   reads (the average seek) and reads alternating between the two ends (full
//!   stroke): each mean less the overhead, half a revolution (the expected rotational
//!   wait) and the transfer.
//!
//! The fitted model is valid by construction (`DiskModel::validate`), ordering the seek
//! figures if the measurements did not (noted in the description).

use super::geometry::Geometry;
use super::model::{
    Cache, DiskModel, SeekMs, Zones, MAX_DESCRIPTION_BYTES, MAX_INTERFACE_MB_PER_S, MAX_NAME_BYTES,
    MAX_SECTORS_PER_TRACK,
};

/// Reads from the device under calibration and times them.
pub trait Probe {
    /// Reads `len` bytes at `offset` (sector-aligned); how long it took, ns.
    fn read(&mut self, offset: u64, len: u64) -> std::io::Result<u64>;
    fn capacity_bytes(&self) -> u64;
    fn sector_bytes(&self) -> u32;
    /// Progress: `done` of `total` steps.
    fn progress(&mut self, _done: u64, _total: u64) {}
}

/// What the plan measured.
#[derive(Clone, Debug, PartialEq)]
pub struct Measured {
    /// (offset, sustained rate bytes/s) from the start to the end of the device.
    pub rates: Vec<(u64, f64)>,
    pub overhead_ms: f64,
    pub revolution_ms: f64,
    pub short_ms: f64,
    pub random_ms: f64,
    pub full_ms: f64,
    /// 4 KiB transfer at the outer rate, ms.
    pub transfer_ms: f64,
}

const ZONE_POINTS: u64 = 8;
const SPAN: u64 = 32 << 20;
const CHUNK: u64 = 1 << 20;
const SMALL: u64 = 4096;
const PAIRS: u64 = 64;
const RANDOM: u64 = 300;
/// Surfaces, skews and zone count assumed by the fit (see the module docs).
pub const ASSUMED_SURFACES: u32 = 4;
pub const ASSUMED_TRACK_SKEW: f64 = 0.08;
pub const ASSUMED_CYLINDER_SKEW: f64 = 0.1;
pub const ASSUMED_ZONES: u32 = 16;

/// A small deterministic generator for the random positions (xorshift64*).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
}

fn ms(ns: u64) -> f64 {
    ns as f64 / 1e6
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

fn mean(v: &[f64]) -> f64 {
    if v.is_empty() {
        0.0
    } else {
        v.iter().sum::<f64>() / v.len() as f64
    }
}

/// Runs the measurement plan on `p`. The device must hold at least 256 MiB.
pub fn measure(p: &mut impl Probe) -> std::io::Result<Measured> {
    let cap = p.capacity_bytes() / CHUNK * CHUNK;
    if cap < 256 << 20 {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("the device holds {cap} bytes; calibration needs at least 256 MiB"),
        ));
    }
    let total = ZONE_POINTS * (SPAN / CHUNK) + 2 * PAIRS * 3 + RANDOM + 2;
    let mut done = 0u64;
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let small_at = |rng: &mut Rng| rng.next() % ((cap - CHUNK) / SMALL) * SMALL + SMALL;

    let mut rates = Vec::new();
    for k in 0..ZONE_POINTS {
        let start = (cap - SPAN) / CHUNK * k / (ZONE_POINTS - 1) * CHUNK;
        // The first read positions the head; the rest stream.
        let _ = p.read(start, CHUNK)?;
        let mut ns = 0;
        for c in 1..SPAN / CHUNK {
            ns += p.read(start + c * CHUNK, CHUNK)?;
        }
        rates.push((start, (SPAN - CHUNK) as f64 / (ns.max(1) as f64 / 1e9)));
        done += SPAN / CHUNK;
        p.progress(done, total);
    }
    // Overhead: the 4 KiB right after a read (in the drive's read-ahead, or under
    // the head at once).
    let mut cached = Vec::new();
    for _ in 0..PAIRS {
        let at = small_at(&mut rng).min(cap - 2 * CHUNK);
        p.read(at, SMALL)?;
        cached.push(ms(p.read(at + SMALL, SMALL)?));
    }
    let overhead_ms = median(cached);
    done += 2 * PAIRS;
    p.progress(done, total);
    // Revolution: the sectors just behind the head.
    let mut back = Vec::new();
    for _ in 0..PAIRS {
        let at = small_at(&mut rng);
        p.read(at, SMALL)?;
        back.push(ms(p.read(at - SMALL, SMALL)?));
    }
    let revolution_ms = (median(back) - overhead_ms).max(0.0);
    done += 2 * PAIRS;
    p.progress(done, total);
    // Short seeks: 4 MiB apart.
    let mut short = Vec::new();
    for _ in 0..PAIRS {
        let at = small_at(&mut rng).min(cap - 8 * CHUNK);
        p.read(at, SMALL)?;
        short.push(ms(p.read(at + 4 * CHUNK, SMALL)?));
    }
    done += 2 * PAIRS;
    p.progress(done, total);
    // Uniformly random reads, and full strokes.
    let mut random = Vec::new();
    for _ in 0..RANDOM {
        random.push(ms(p.read(small_at(&mut rng), SMALL)?));
    }
    let mut full = Vec::new();
    for i in 0..PAIRS {
        let at = if i % 2 == 0 { 0 } else { cap - SMALL };
        full.push(ms(p.read(at, SMALL)?));
    }
    done += RANDOM + 2;
    p.progress(done, total);
    let outer = rates.first().map_or(1.0, |r| r.1);
    Ok(Measured {
        rates,
        overhead_ms,
        revolution_ms,
        short_ms: mean(&short),
        random_ms: mean(&random),
        // The first of the alternation started from wherever the head was.
        full_ms: mean(&full[1..]),
        transfer_ms: SMALL as f64 / outer * 1e3,
    })
}

/// The disk model that `m` describes, for a device of `capacity_bytes` in
/// `sector_bytes` sectors, named `name`.
pub fn fit(m: &Measured, name: &str, capacity_bytes: u64, sector_bytes: u32) -> DiskModel {
    let mut notes = Vec::new();
    let rev_ms = if m.revolution_ms >= 4.0 && m.revolution_ms <= 16.7 {
        m.revolution_ms
    } else {
        notes.push(format!(
            "measured revolution {:.2} ms is outside a hard disk's 4 to 16.7 ms: no rotation to measure (an SSD or a cached file?), modelled as {}",
            m.revolution_ms,
            if m.revolution_ms < 4.0 { "15000 rpm" } else { "3600 rpm" }
        ));
        m.revolution_ms.clamp(4.0, 16.7)
    };
    let rpm = 60_000.0 / rev_ms;
    let h = ASSUMED_SURFACES as f64;
    let skew = (h + (h - 1.0) * ASSUMED_TRACK_SKEW + ASSUMED_CYLINDER_SKEW) / h;
    let spt_of = |rate: f64| -> u32 {
        let spt = rate * skew / (sector_bytes as f64 * rpm / 60.0);
        (spt.round() as u32).clamp(1, MAX_SECTORS_PER_TRACK)
    };
    let outer = m.rates.iter().map(|r| r.1).fold(0.0, f64::max);
    let inner = m.rates.iter().map(|r| r.1).fold(f64::INFINITY, f64::min);
    let spt_outer = spt_of(outer);
    let spt_inner = spt_of(inner).min(spt_outer);
    let (track, average, full) = seek_figures(m, rev_ms, &mut notes);
    let rates: Vec<String> = m
        .rates
        .iter()
        .map(|(_, r)| format!("{:.1}", r / 1e6))
        .collect();
    let mut description = format!(
        "measured by dvrfs calibrate: sequential MB/s {} (start to end), overhead {:.2} ms, revolution {:.2} ms, 4 KiB reads: 4 MiB apart {:.2} ms, random {:.2} ms, full stroke {:.2} ms; assumed {} surfaces, skews {}/{}, {} zones",
        rates.join(" "),
        m.overhead_ms,
        m.revolution_ms,
        m.short_ms,
        m.random_ms,
        m.full_ms,
        ASSUMED_SURFACES,
        ASSUMED_TRACK_SKEW,
        ASSUMED_CYLINDER_SKEW,
        ASSUMED_ZONES
    );
    for n in notes {
        description.push_str("; ");
        description.push_str(&n);
    }
    truncate_to_char_boundary(&mut description, MAX_DESCRIPTION_BYTES);
    let mut name = name.to_string();
    truncate_to_char_boundary(&mut name, MAX_NAME_BYTES);
    let model = DiskModel {
        name,
        description: Some(description),
        lbas: capacity_bytes / sector_bytes as u64,
        sector_bytes,
        rpm,
        surfaces: ASSUMED_SURFACES,
        zones: Zones {
            count: if spt_inner == spt_outer {
                1
            } else {
                ASSUMED_ZONES
            },
            spt_outer,
            spt_inner,
        },
        seek_ms: SeekMs {
            track,
            average,
            full,
        },
        seek_curve: None,
        write_settle_ms: 0.0,
        head_switch_ms: 0.5,
        track_skew: ASSUMED_TRACK_SKEW,
        cylinder_skew: ASSUMED_CYLINDER_SKEW,
        command_overhead_ms: m.overhead_ms.max(0.0),
        interface_mb_per_s: (outer / 1e6 * 2.0).clamp(150.0, MAX_INTERFACE_MB_PER_S),
        cache: Cache {
            read_ahead_bytes: 0,
            segments: 1,
            write_back: false,
        },
        slow_io: None,
        power: None,
    };
    seek_curve_reachable(model)
}

/// The data-sheet seek times (track, average, full stroke, ms) from the measured
/// access times less overhead, half a revolution and the transfer, put in order and
/// within reach of a seek curve; a note says when the measurements were not in order.
fn seek_figures(m: &Measured, rev_ms: f64, notes: &mut Vec<String>) -> (f64, f64, f64) {
    let positioning = |t: f64| t - m.overhead_ms - rev_ms / 2.0 - m.transfer_ms;
    let mut track = positioning(m.short_ms).max(0.1);
    let mut average = positioning(m.random_ms).max(track + 0.1);
    let mut full = positioning(m.full_ms).max(average + 0.1);
    if positioning(m.random_ms) <= track || positioning(m.full_ms) <= average {
        notes.push(
            "seek times put in order (track < average < full) where the measurements were not"
                .into(),
        );
    }
    // A seek curve needs the average below the full stroke's (0.2..0.9 of it).
    if average > 0.9 * full {
        full = average / 0.9;
    }
    if track >= average {
        track = average / 2.0;
    }
    average = average.max(track + 0.01);
    (track, average, full)
}

/// Cuts `s` to at most `max_bytes`, at a character boundary.
fn truncate_to_char_boundary(s: &mut String, max_bytes: usize) {
    let mut cut = s.len().min(max_bytes);
    while !s.is_char_boundary(cut) {
        cut -= 1;
    }
    s.truncate(cut);
}

/// The two-piece seek curve cannot pass through every (track, average, full): when it
/// cannot, the average moves to the nearest figure it can, and the description says
/// so.
fn seek_curve_reachable(mut model: DiskModel) -> DiskModel {
    if model.validate().is_ok() {
        return model;
    }
    let (track, full, measured) = (
        model.seek_ms.track,
        model.seek_ms.full,
        model.seek_ms.average,
    );
    let mut best: Option<f64> = None;
    for i in 1..200 {
        let a = track + (full - track) * i as f64 / 200.0;
        let mut m = model.clone();
        m.seek_ms.average = a;
        if m.validate().is_ok() && best.is_none_or(|b| (a - measured).abs() < (b - measured).abs())
        {
            best = Some(a);
        }
    }
    if let Some(a) = best {
        model.seek_ms.average = a;
        if let Some(d) = model.description.as_mut() {
            d.push_str(&format!(
                "; average seek {measured:.2} ms moved to {a:.2} ms, the nearest a seek curve through track and full reaches"
            ));
        }
    }
    model
}

/// The sustained rates the fitted model gives at its edges (for reports and tests).
pub fn edge_rates(m: &DiskModel) -> (f64, f64) {
    let g = Geometry::from_model(m);
    (g.outer_rate_bytes_per_s(), g.inner_rate_bytes_per_s())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::disk::{Access, Hdd};

    /// The HDD model as a probe, in virtual time.
    struct Virtual {
        hdd: Hdd,
        model: DiskModel,
        now: u64,
    }

    impl Probe for Virtual {
        fn read(&mut self, offset: u64, len: u64) -> std::io::Result<u64> {
            let s = self.model.sector_bytes as u64;
            let t = self.hdd.service(
                self.now,
                &Access {
                    lba: offset / s,
                    sectors: (len / s) as u32,
                    write: false,
                },
            );
            let took = t.end_ns - self.now;
            self.now = t.end_ns;
            Ok(took)
        }
        fn capacity_bytes(&self) -> u64 {
            self.model.capacity_bytes()
        }
        fn sector_bytes(&self) -> u32 {
            self.model.sector_bytes
        }
    }

    fn calibrated(name: &str) -> (DiskModel, DiskModel, Measured) {
        let model = DiskModel::builtin(name).unwrap();
        let mut p = Virtual {
            hdd: Hdd::new(&model, 1),
            model: model.clone(),
            now: 0,
        };
        let m = measure(&mut p).unwrap();
        let fitted = fit(&m, "fitted", model.capacity_bytes(), model.sector_bytes);
        (model, fitted, m)
    }

    #[test]
    fn calibrating_a_modelled_disk_gives_the_model_back() {
        for name in ["avfs-250g", "nvr-8t"] {
            let (model, fitted, m) = calibrated(name);
            fitted
                .validate()
                .unwrap_or_else(|e| panic!("{name}: {e} {m:?}"));
            let text = serde_json::to_string(&fitted).unwrap();
            let back = DiskModel::from_json(&text).unwrap();
            assert_eq!((back.lbas, back.zones), (fitted.lbas, fitted.zones));
            // Rotation within 6%.
            assert!(
                (fitted.rpm / model.rpm - 1.0).abs() < 0.06,
                "{name}: {m:?} {fitted:?}"
            );
            // Sustained rates at the edges within 5%.
            let (o, i) = edge_rates(&fitted);
            let (mo, mi) = edge_rates(&model);
            assert!((o / mo - 1.0).abs() < 0.05, "{name}: outer {o} vs {mo}");
            assert!((i / mi - 1.0).abs() < 0.08, "{name}: inner {i} vs {mi}");
            // The average seek within 15%, the full stroke within 20%.
            let a = fitted.seek_ms.average / model.seek_ms.average;
            assert!((a - 1.0).abs() < 0.15, "{name}: average {a} {m:?}");
            let f = fitted.seek_ms.full / model.seek_ms.full;
            assert!((f - 1.0).abs() < 0.2, "{name}: full {f} {m:?}");
        }
    }

    #[test]
    fn a_device_without_rotation_is_clamped_and_says_so() {
        let m = Measured {
            // A file in the page cache: far faster than any interface a model allows.
            rates: vec![(0, 1e11), (1 << 30, 1e11)],
            overhead_ms: 0.02,
            revolution_ms: 0.03,
            short_ms: 0.1,
            random_ms: 0.1,
            full_ms: 0.1,
            transfer_ms: 0.002,
        };
        let f = fit(&m, &"a very long device name ".repeat(10), 64 << 30, 512);
        assert!(f.name.len() <= 64);
        f.validate().unwrap();
        assert_eq!(f.rpm, 15_000.0);
        assert!(f.description.unwrap().contains("no rotation to measure"));
        assert_eq!(f.zones.count, 1);
    }
}
