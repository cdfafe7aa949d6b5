//! Zoned recording: where an LBA lies on the platters, and how fast each zone streams.
//!
//! The schema gives `count` zones of equal cylinder count whose sectors per track fall
//! linearly from `spt_outer` (zone 0, which holds LBA 0) to `spt_inner` (the last zone):
//!
//! ```text
//! spt_z = round(spt_outer - (spt_outer - spt_inner) * z / (count - 1))   (spt_outer if count = 1)
//! cylinders_per_zone = ceil(lbas / (surfaces * sum_z spt_z))
//! cylinders = count * cylinders_per_zone
//! ```
//!
//! so every zone holds `cylinders_per_zone * surfaces * spt_z` sectors and the disk holds
//! at least `lbas`. The LBAs are laid out from the outer edge inwards and the tail of the
//! layout beyond `lbas` is unused: normally a part of the last zone (avfs-250g leaves
//! 54,432 sectors of its last zone unused, nvr-8t 970,100), but with
//! very few cylinders per zone whole inner zones can be empty; "the inner edge" always
//! means the innermost zone that holds an LBA.
//!
//! Surface order is the simple (cylinder-major) one: within a cylinder the tracks are
//! surface 0, 1, ..., H-1, then the next cylinder inwards starts again at surface 0. (A
//! serpentine layout, which walks a surface across many cylinders before switching
//! heads, changes which switches a long transfer makes but not their number per byte,
//! and the sanity figures of the schema are stated for whole cylinders.)
//!
//! Skew: the first sector of each track is rotated against the end of the previous
//! track (in LBA order) by `track_skew` of a revolution after a head switch and by
//! `cylinder_skew` after a cylinder switch, so that a sequential transfer crossing the
//! boundary finds its next sector just arriving instead of just gone. The angular
//! position of sector 0 of track (c, h) is therefore
//! `frac(c * ((H - 1) * track_skew + cylinder_skew) + h * track_skew)` revolutions.
//! Reading a whole cylinder takes H revolutions plus (H - 1) track skews plus one
//! cylinder skew to reach the next, which gives the sustained rate of a zone:
//!
//! ```text
//! media_rate_z     = spt_z * sector_bytes * rpm / 60
//! sustained_rate_z = media_rate_z * H / (H + (H - 1) * track_skew + cylinder_skew)
//! ```
//!
//! The zone-averaged sustained rate is the capacity-weighted *harmonic* mean of the
//! zone rates, i.e. the bytes of the disk divided by the time to read all of it end to
//! end. Times, not rates, add up: a request landing in a uniformly random byte spends
//! on average `S * sum_z (cap_z / cap) / rate_z`, which is `S / zone_avg_rate`.
//!
//! This module only computes; it never panics. [`Geometry::from_model`] clamps the
//! degenerate values a model that failed validation could carry (zero surfaces, zero
//! zones) to 1 so that the simulation stays defined.

use super::model::DiskModel;

/// One recording zone.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Zone {
    /// Sectors per track.
    pub spt: u32,
    /// First LBA of the zone (may be >= lbas for an unused zone).
    pub first_lba: u64,
    /// Sectors of the zone that hold LBAs (the last zone may be partly used).
    pub used_sectors: u64,
    pub first_cylinder: u64,
}

/// Where a sector lies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Location {
    pub zone: u32,
    pub cylinder: u64,
    pub surface: u32,
    /// Sector within the track (0-based).
    pub sector: u32,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Geometry {
    lbas: u64,
    sector_bytes: u64,
    surfaces: u32,
    cylinders_per_zone: u64,
    zones: Vec<Zone>,
    rotation_ns: f64,
    track_skew: f64,
    cylinder_skew: f64,
}

impl Geometry {
    pub fn from_model(m: &DiskModel) -> Geometry {
        let surfaces = m.surfaces.max(1);
        let count = m.zones.count.max(1);
        let outer = m.zones.spt_outer.max(1) as u64;
        let inner = (m.zones.spt_inner as u64).clamp(1, outer);
        let spts: Vec<u64> = (0..count as u64)
            .map(|z| {
                if count == 1 {
                    outer
                } else {
                    // Rounded linear interpolation, in integers.
                    let steps = count as u64 - 1;
                    outer - ((outer - inner) * z + steps / 2) / steps
                }
            })
            .collect();
        let per_cylinder_all_zones: u64 = spts.iter().sum::<u64>() * surfaces as u64;
        let cylinders_per_zone = m.lbas.div_ceil(per_cylinder_all_zones).max(1);
        let mut zones = Vec::with_capacity(spts.len());
        let mut first_lba = 0u64;
        for (z, &spt) in spts.iter().enumerate() {
            let sectors = cylinders_per_zone * surfaces as u64 * spt;
            let used = sectors.min(m.lbas.saturating_sub(first_lba));
            zones.push(Zone {
                spt: spt as u32,
                first_lba,
                used_sectors: used,
                first_cylinder: z as u64 * cylinders_per_zone,
            });
            first_lba = first_lba.saturating_add(sectors);
        }
        Geometry {
            lbas: m.lbas.max(1),
            sector_bytes: m.sector_bytes.max(1) as u64,
            surfaces,
            cylinders_per_zone,
            zones,
            rotation_ns: 60.0e9 / m.rpm,
            track_skew: m.track_skew,
            cylinder_skew: m.cylinder_skew,
        }
    }

    pub fn lbas(&self) -> u64 {
        self.lbas
    }

    pub fn sector_bytes(&self) -> u64 {
        self.sector_bytes
    }

    pub fn surfaces(&self) -> u32 {
        self.surfaces
    }

    /// Physical cylinders, including the unused tail of the layout.
    pub fn cylinders(&self) -> u64 {
        self.zones.len() as u64 * self.cylinders_per_zone
    }

    pub fn cylinders_per_zone(&self) -> u64 {
        self.cylinders_per_zone
    }

    pub fn zones(&self) -> &[Zone] {
        &self.zones
    }

    pub fn rotation_ns(&self) -> f64 {
        self.rotation_ns
    }

    /// Index of the innermost zone that holds an LBA.
    pub fn inner_zone(&self) -> usize {
        self.zones
            .iter()
            .rposition(|z| z.used_sectors > 0)
            .unwrap_or(0)
    }

    /// The zone holding `lba` (clamped to the last LBA).
    pub fn zone_of(&self, lba: u64) -> usize {
        let lba = lba.min(self.lbas - 1);
        self.zones
            .partition_point(|z| z.first_lba <= lba)
            .saturating_sub(1)
    }

    /// Where `lba` (clamped to the last LBA) lies.
    pub fn locate(&self, lba: u64) -> Location {
        let lba = lba.min(self.lbas - 1);
        let z = self.zone_of(lba);
        let zone = &self.zones[z];
        let offset = lba - zone.first_lba;
        let spt = zone.spt as u64;
        let track = offset / spt;
        Location {
            zone: z as u32,
            cylinder: zone.first_cylinder + track / self.surfaces as u64,
            surface: (track % self.surfaces as u64) as u32,
            sector: (offset % spt) as u32,
        }
    }

    /// Sectors per track of zone `z`.
    pub fn spt(&self, z: usize) -> u32 {
        self.zones.get(z).map_or(1, |zone| zone.spt)
    }

    /// Angular position of sector 0 of track (cylinder, surface), in revolutions [0, 1).
    pub fn track_start_rev(&self, cylinder: u64, surface: u32) -> f64 {
        let per_cylinder = (self.surfaces - 1) as f64 * self.track_skew + self.cylinder_skew;
        (cylinder as f64 * per_cylinder + surface as f64 * self.track_skew).rem_euclid(1.0)
    }

    /// Angular position where the sector at `loc` starts, in revolutions [0, 1).
    pub fn sector_start_rev(&self, loc: &Location) -> f64 {
        let spt = self.spt(loc.zone as usize) as f64;
        (self.track_start_rev(loc.cylinder, loc.surface) + loc.sector as f64 / spt).rem_euclid(1.0)
    }

    /// The skew (in revolutions) met when a transfer leaves the track at `loc` for the
    /// next track in LBA order.
    pub fn skew_after_rev(&self, loc: &Location) -> f64 {
        if loc.surface + 1 == self.surfaces {
            self.cylinder_skew
        } else {
            self.track_skew
        }
    }

    /// Media (raw, within one track) rate of zone `z`, bytes/s.
    pub fn media_rate_bytes_per_s(&self, z: usize) -> f64 {
        self.spt(z) as f64 * self.sector_bytes as f64 * 1.0e9 / self.rotation_ns
    }

    /// Sustained rate of zone `z` reading whole cylinders, skews included, bytes/s.
    pub fn sustained_rate_bytes_per_s(&self, z: usize) -> f64 {
        let h = self.surfaces as f64;
        self.media_rate_bytes_per_s(z) * h / (h + (h - 1.0) * self.track_skew + self.cylinder_skew)
    }

    /// Sustained rate at the outer edge (zone 0), bytes/s.
    pub fn outer_rate_bytes_per_s(&self) -> f64 {
        self.sustained_rate_bytes_per_s(0)
    }

    /// Sustained rate of the innermost used zone, bytes/s.
    pub fn inner_rate_bytes_per_s(&self) -> f64 {
        self.sustained_rate_bytes_per_s(self.inner_zone())
    }

    /// Capacity-weighted harmonic mean of the zones' sustained rates: disk bytes divided
    /// by the time to read every LBA once, end to end. Bytes/s.
    pub fn zone_avg_rate_bytes_per_s(&self) -> f64 {
        let mut bytes = 0.0;
        let mut seconds = 0.0;
        for (z, zone) in self.zones.iter().enumerate() {
            let b = zone.used_sectors as f64 * self.sector_bytes as f64;
            bytes += b;
            seconds += b / self.sustained_rate_bytes_per_s(z);
        }
        if seconds > 0.0 {
            bytes / seconds
        } else {
            self.outer_rate_bytes_per_s()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn geo(name: &str) -> Geometry {
        Geometry::from_model(&DiskModel::builtin(name).unwrap())
    }

    #[test]
    fn cylinder_count_follows_from_lbas_surfaces_and_zones() {
        let g = geo("avfs-250g");
        // sum spt = 20 * (1219 + 671) / 2 = 18,900; 488,397,168 / (4 * 18,900) = 6460.3.
        assert_eq!(g.zones().iter().map(|z| z.spt as u64).sum::<u64>(), 18_900);
        assert_eq!(g.cylinders_per_zone(), 6461);
        assert_eq!(g.cylinders(), 129_220);
        assert_eq!(g.spt(0), 1219);
        assert_eq!(g.spt(19), 671);
        assert_eq!(g.inner_zone(), 19);
        let used: u64 = g.zones().iter().map(|z| z.used_sectors).sum();
        assert_eq!(used, 488_397_168);
        assert_eq!(g.zones()[19].used_sectors, 6461 * 4 * 671 - 54_432);

        let g = geo("nvr-8t");
        assert_eq!(g.cylinders_per_zone(), 16_091);
        assert_eq!(g.spt(29), 2158);
        assert_eq!(g.inner_zone(), 29);
        assert_eq!(g.zones()[29].used_sectors, 16_091 * 10 * 2158 - 970_100);
    }

    #[test]
    fn locate_walks_sectors_surfaces_cylinders_and_zones() {
        let g = geo("avfs-250g");
        let at = |lba| g.locate(lba);
        assert_eq!(
            at(0),
            Location {
                zone: 0,
                cylinder: 0,
                surface: 0,
                sector: 0
            }
        );
        assert_eq!(at(1218).sector, 1218);
        assert_eq!(
            at(1219),
            Location {
                zone: 0,
                cylinder: 0,
                surface: 1,
                sector: 0
            }
        );
        assert_eq!(
            at(4 * 1219),
            Location {
                zone: 0,
                cylinder: 1,
                surface: 0,
                sector: 0
            }
        );
        let z1 = 6461 * 4 * 1219;
        assert_eq!(
            at(z1 - 1),
            Location {
                zone: 0,
                cylinder: 6460,
                surface: 3,
                sector: 1218
            }
        );
        assert_eq!(at(z1).zone, 1);
        assert_eq!(at(z1).cylinder, 6461);
        let last = at(488_397_167);
        assert_eq!(last.zone, 19);
        assert!(last.cylinder < g.cylinders());
        // Past the end clamps to the last sector.
        assert_eq!(at(u64::MAX), last);
    }

    #[test]
    fn skewed_track_starts_follow_the_lba_order() {
        let g = geo("avfs-250g");
        let step = |c0, s0, c1, s1| {
            (g.track_start_rev(c1, s1) - g.track_start_rev(c0, s0)).rem_euclid(1.0)
        };
        assert!((step(0, 0, 0, 1) - 0.06).abs() < 1e-9);
        assert!((step(0, 3, 1, 0) - 0.1).abs() < 1e-9);
        assert!((step(70_000, 2, 70_000, 3) - 0.06).abs() < 1e-9);
        assert!((step(70_000, 3, 70_001, 0) - 0.1).abs() < 1e-9);
    }

    #[test]
    fn sustained_rates_match_the_schema_figures() {
        let g = geo("avfs-250g");
        assert!((g.outer_rate_bytes_per_s() / 1e6 - 70.0).abs() < 0.2);
        assert!((g.inner_rate_bytes_per_s() / 1e6 - 38.5).abs() < 0.2);
        let avg = g.zone_avg_rate_bytes_per_s() / 1e6;
        assert!(avg > 38.5 && avg < 70.0, "{avg}");
        let g = geo("nvr-8t");
        assert!((g.outer_rate_bytes_per_s() / 1e6 - 245.0).abs() < 0.5);
        assert!((g.inner_rate_bytes_per_s() / 1e6 - 122.5).abs() < 0.5);
    }
}
