//! The mechanical simulation of one hard disk at queue depth 1.
//!
//! [`Hdd::service`] takes one command issued to an idle disk at `issue_ns` and says how
//! the disk spends its time on it. The simulator's event loop calls it once per
//! dispatched request, so every scheduling and placement decision pays what it would pay
//! on the modelled disk. The model, step by step:
//!
//! 1. **Command overhead**: the controller spends `command_overhead_ms` before anything
//!    moves. A rare slow access (`slow_io`, error recovery) adds a uniformly drawn extra
//!    here, from a seeded `ChaCha8Rng` (one draw per command, so runs replay exactly);
//!    it is reported in `overhead_ns`.
//! 2. **Positioning**: a seek from the head's cylinder along the seek curve; a head
//!    switch (`head_switch_ms`) when the cylinder is the same but the surface is not;
//!    plus `write_settle_ms` for a write whose head moved (a write that continues on the
//!    track under the head needs no settling).
//! 3. **Rotation**: the platter never stops. Its angle is a function of absolute time,
//!    `angle = (t mod T_rot) / T_rot`, so the rotational position carries across
//!    requests; after positioning the head waits until the first sector comes under it.
//!    A consequence this module's tests check: with the write cache off, a write that
//!    continues the previous one arrives a command overhead after its first sector went
//!    by, and waits almost a full revolution.
//! 4. **Transfer** at the zone's media rate (`spt` sectors per revolution). Crossing to
//!    the next track costs exactly the skew (`track_skew` after a head switch,
//!    `cylinder_skew` after a cylinder switch): the skew is how the drive is formatted
//!    so that the switch completes while the gap rotates by, and a sequential transfer
//!    does not lose a revolution. The model trusts the skews for this even where the
//!    model's `head_switch_ms` is longer than its track skew (avfs-250g: 1.0 ms against
//!    0.5 ms), because the schema's sustained-rate figure is stated that way;
//!    `head_switch_ms` is charged only when a command has to position on another
//!    surface. The host link (`interface_mb_per_s`) runs in parallel with the media; a
//!    command ends when both are done.
//! 5. **Read-ahead** (`cache.read_ahead_bytes > 0`): the cache has `cache.segments`
//!    segments. After a read the drive keeps reading the following sectors into that
//!    read's segment while it is idle, up to `read_ahead_bytes` beyond what the host has
//!    consumed; at most one segment is being filled this way (the *active* read-ahead).
//!    A read that starts where the previous read ended, or inside what the active
//!    read-ahead has buffered, is served from that segment: entirely (a cache hit, at
//!    interface speed) if its sectors have been read by the time the command has been
//!    decoded, otherwise the buffered head comes from the segment (a partial hit, if
//!    at least one sector was buffered) and the media transfer simply continues the
//!    read-ahead stream without any repositioning, so back-to-back sequential reads
//!    stream at the sustained rate. Any other command stops the read-ahead: the head
//!    stays where it stopped, and the sectors buffered beyond what the host consumed
//!    stay in the segment, now a *stopped* segment (one holding nothing is freed). A
//!    read that starts at a stopped segment's first unconsumed sector or inside its
//!    buffered range re-uses that segment: a whole hit if the segment holds all of it
//!    (the head does not move and, being elsewhere, does not resume the read-ahead;
//!    the segment keeps what is left), else a partial hit whose tail is read from the
//!    media after repositioning on the segment's end, after which the segment is the
//!    active read-ahead again. Only a read that no segment serves takes a new segment,
//!    evicting the least recently used stopped segments so that it and they fit in
//!    `segments` (the active one counts); the look-up happens first, so a segment the
//!    command uses is never the one evicted. So `segments` sequential streams served
//!    round-robin keep their segments and every continuation finds its data, while
//!    with one stream more LRU evicts each stream's segment just before it comes round
//!    again. Writes stop the read-ahead and drop every overlapping segment; they take
//!    no segment themselves.
//! 6. **Writes**: with `write_back: false` they go to the media as above; with
//!    `write_back: true` they complete at interface speed into the cache and the media
//!    work is not modelled (simple, and off in every built-in model, as in the AVFS
//!    experiments).
//!
//! Accesses past the last LBA are clamped to the disk (the caller validates ranges);
//! nothing here panics. Times inside a command are computed in `f64` ns (0.02 ns
//! resolution after a simulated day) and reported rounded, with
//! `end_ns - start_ns == overhead_ns + seek_ns + rotation_ns + transfer_ns` exactly.

use rand_chacha::ChaCha8Rng;
use rand_core::{RngCore, SeedableRng};

use super::geometry::{Geometry, Location};
use super::model::DiskModel;
use super::seek::SeekCurve;
use super::{Access, AccessTiming};

mod read_ahead;

use read_ahead::{Segment, Stream};

/// One ms in ns.
const NS_PER_MS: f64 = 1.0e6;

/// Where the media part of a command starts and ends.
struct MediaTiming {
    seek_ns: f64,
    rotation_ns: f64,
    end_ns: f64,
    cylinders: u64,
}

/// What serving one command came to, before rounding into an [`AccessTiming`]: when
/// it ended, the media's positioning (zero when no media work was needed) and how the
/// read-ahead cache took part.
#[derive(Clone, Copy, Debug, Default)]
struct Served {
    end_ns: f64,
    seek_ns: f64,
    rotation_ns: f64,
    cylinders: u64,
    cache_hit: bool,
    cache_partial_hit: bool,
}

impl Served {
    /// Ends at `end_ns` with no media positioning.
    fn at(end_ns: f64) -> Served {
        Served {
            end_ns,
            ..Served::default()
        }
    }

    /// The media work `m`, ending no earlier than the host link (`host_end`).
    fn from_media(m: &MediaTiming, host_end: f64) -> Served {
        Served {
            end_ns: m.end_ns.max(host_end),
            seek_ns: m.seek_ns,
            rotation_ns: m.rotation_ns,
            cylinders: m.cylinders,
            ..Served::default()
        }
    }

    /// Rounded to whole ns, with the parts (overhead, seek, rotation, transfer) summing
    /// exactly to the command's time from `issue_ns`.
    fn timing(&self, issue_ns: u64, overhead: f64) -> AccessTiming {
        let round = |v: f64| v.max(0.0).round() as u64;
        let end = round(self.end_ns).max(issue_ns);
        let overhead_ns = round(overhead).min(end - issue_ns);
        let seek_ns = round(self.seek_ns).min(end - issue_ns - overhead_ns);
        let rotation_ns = round(self.rotation_ns).min(end - issue_ns - overhead_ns - seek_ns);
        AccessTiming {
            start_ns: issue_ns,
            end_ns: end,
            overhead_ns,
            seek_ns,
            rotation_ns,
            transfer_ns: end - issue_ns - overhead_ns - seek_ns - rotation_ns,
            seek_cylinders: self.cylinders,
            cache_hit: self.cache_hit,
            cache_partial_hit: self.cache_partial_hit,
        }
    }
}

/// A simulated hard disk (see the module docs).
#[derive(Clone, Debug)]
pub struct Hdd {
    geo: Geometry,
    seek: SeekCurve,
    overhead_ns: f64,
    write_settle_ns: f64,
    head_switch_ns: f64,
    interface_bytes_per_ns: f64,
    read_ahead_sectors: u64,
    max_segments: usize,
    write_back: bool,
    slow_probability: f64,
    slow_extra_ns: [f64; 2],
    rng: ChaCha8Rng,
    head_cylinder: u64,
    head_surface: u32,
    stream: Option<Stream>,
    /// Stopped read-ahead segments, most recently used first (the last one is the
    /// next to be evicted). With `stream`, at most `max_segments` in all.
    segments: Vec<Segment>,
}

impl Hdd {
    /// A disk at rest with the head on cylinder 0. Accepts any model without panicking;
    /// a model that fails [`DiskModel::validate`] gives a defined but meaningless disk
    /// (its seek curve falls back to a straight line from track to full), so load
    /// models with `DiskModel::from_json` or `DiskModel::builtin`.
    pub fn new(model: &DiskModel, seed: u64) -> Hdd {
        let geo = Geometry::from_model(model);
        let seek = SeekCurve::from_model(model, geo.cylinders()).unwrap_or(SeekCurve {
            x0: 1.0,
            t1_ms: model.seek_ms.track,
            b_ms: 0.0,
            c_ms: model.seek_ms.track,
            e_ms: model.seek_ms.full - model.seek_ms.track,
        });
        let ra_sectors = model.cache.read_ahead_bytes / geo.sector_bytes();
        let (slow_probability, slow_extra_ns) = match &model.slow_io {
            Some(s) => (
                s.probability,
                [s.extra_ms[0] * NS_PER_MS, s.extra_ms[1] * NS_PER_MS],
            ),
            None => (0.0, [0.0, 0.0]),
        };
        Hdd {
            seek,
            overhead_ns: model.command_overhead_ms * NS_PER_MS,
            write_settle_ns: model.write_settle_ms * NS_PER_MS,
            head_switch_ns: model.head_switch_ms * NS_PER_MS,
            interface_bytes_per_ns: model.interface_mb_per_s * 1.0e6 / 1.0e9,
            read_ahead_sectors: if model.cache.segments > 0 {
                ra_sectors
            } else {
                0
            },
            max_segments: model.cache.segments as usize,
            write_back: model.cache.write_back,
            slow_probability,
            slow_extra_ns,
            rng: ChaCha8Rng::seed_from_u64(seed),
            head_cylinder: 0,
            head_surface: 0,
            stream: None,
            segments: Vec::new(),
            geo,
        }
    }

    /// Cylinder the head is on (after the last command's media work).
    pub fn head_cylinder(&self) -> u64 {
        self.head_cylinder
    }

    /// Cylinder holding `lba` (clamped to the disk).
    pub fn cylinder_of(&self, lba: u64) -> u64 {
        self.geo.locate(lba).cylinder
    }

    /// Physical cylinders of the disk.
    pub fn cylinders(&self) -> u64 {
        self.geo.cylinders()
    }

    pub fn geometry(&self) -> &Geometry {
        &self.geo
    }

    pub fn seek_curve(&self) -> &SeekCurve {
        &self.seek
    }

    /// Serves one command issued at `issue_ns` to the idle disk (queue depth 1), so the
    /// command starts at `issue_ns`.
    pub fn service(&mut self, issue_ns: u64, a: &Access) -> AccessTiming {
        let lbas = self.geo.lbas();
        let lba = a.lba.min(lbas - 1);
        let end_lba = lba.saturating_add(a.sectors as u64).min(lbas);
        let sectors = end_lba - lba;
        let bytes = sectors * self.geo.sector_bytes();
        let start = issue_ns as f64;

        let overhead = self.command_overhead_ns();
        let t_cmd = start + overhead;
        let host_end = t_cmd + bytes as f64 / self.interface_bytes_per_ns;

        let served = if sectors == 0 {
            Served::at(t_cmd)
        } else if a.write {
            self.serve_write(t_cmd, lba, end_lba, host_end)
        } else if self.read_ahead_sectors == 0 {
            let m = self.media(t_cmd, lba, sectors, false);
            Served::from_media(&m, host_end)
        } else {
            let served = self.serve_cached_read(t_cmd, lba, end_lba, host_end);
            debug_assert!(self.segments_within_bounds(), "{:?}", self.segments);
            served
        };
        served.timing(issue_ns, overhead)
    }

    /// How long a command issued at `issue_ns` would spend before its first sector
    /// passes under the head, the nominal command overhead excluded: the seek or head
    /// switch, the write settle and the rotational wait that [`Hdd::service`] would
    /// charge (timed from `issue_ns` plus the nominal overhead, as `service` times them;
    /// a rare slow access is not drawn), and 0 for a read whose first sector the
    /// read-ahead cache holds or is streaming (the active read-ahead continues it or
    /// has buffered its start, or a stopped segment holds it) and for a write into a
    /// write-back cache. Computed from the model's state without changing it (no clone,
    /// no draw), so a command queue can rank its commands by it: a few `locate`s and
    /// one seek-curve evaluation per call.
    pub fn positioning_ns(&self, issue_ns: u64, a: &Access) -> f64 {
        let lbas = self.geo.lbas();
        let lba = a.lba.min(lbas - 1);
        if a.sectors == 0 || (a.write && self.write_back) {
            return 0.0;
        }
        let t_cmd = issue_ns as f64 + self.overhead_ns;
        if !a.write && self.read_ahead_sectors > 0 && self.cache_holds(t_cmd, lba) {
            return 0.0;
        }
        let (cylinder, surface) = self.head_at(t_cmd);
        let loc = self.geo.locate(lba);
        let (position_ns, _) = self.move_ns(cylinder, surface, &loc, a.write);
        position_ns + self.wait_for_ns(t_cmd + position_ns, &loc)
    }

    /// The command overhead, with the error recovery of a rare slow access added. Drawn
    /// for every command so the random stream does not depend on the workload's mix.
    fn command_overhead_ns(&mut self) -> f64 {
        let mut overhead = self.overhead_ns;
        if self.uniform() < self.slow_probability {
            let [lo, hi] = self.slow_extra_ns;
            overhead += lo + (hi - lo) * self.uniform();
        }
        overhead
    }

    /// A write of `lba..end_lba`: it stops the read-ahead and drops the segments it
    /// overlaps; write-back ends when the host link has carried it, write-through when
    /// the media has it too.
    fn serve_write(&mut self, t_cmd: f64, lba: u64, end_lba: u64, host_end: f64) -> Served {
        self.stop_read_ahead(t_cmd);
        self.segments
            .retain(|s| s.end_lba <= lba || s.next_lba >= end_lba);
        if self.write_back {
            Served::at(host_end)
        } else {
            let m = self.media(t_cmd, lba, end_lba - lba, true);
            Served::from_media(&m, host_end)
        }
    }

    /// A uniform draw in [0, 1).
    fn uniform(&mut self) -> f64 {
        (self.rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    fn set_head(&mut self, lba: u64) {
        let loc = self.geo.locate(lba);
        self.head_cylinder = loc.cylinder;
        self.head_surface = loc.surface;
    }

    /// Positions on `lba` from the head's place at `t_ns`, waits for the sector and
    /// transfers `sectors` sectors. Moves the head to the last sector transferred.
    fn media(&mut self, t_ns: f64, lba: u64, sectors: u64, write: bool) -> MediaTiming {
        let loc = self.geo.locate(lba);
        let (position_ns, distance) =
            self.move_ns(self.head_cylinder, self.head_surface, &loc, write);
        let t_pos = t_ns + position_ns;
        let wait_ns = self.wait_for_ns(t_pos, &loc);
        let end_ns = t_pos + wait_ns + self.media_ns(lba, sectors);
        self.set_head(lba + sectors - 1);
        MediaTiming {
            seek_ns: position_ns,
            rotation_ns: wait_ns,
            end_ns,
            cylinders: distance,
        }
    }

    /// Moving the head from (`cylinder`, `surface`) onto `loc`: a seek, or a head
    /// switch on the same cylinder, plus the write settle for a write whose head moved.
    /// Returns the time and the cylinders crossed.
    fn move_ns(&self, cylinder: u64, surface: u32, loc: &Location, write: bool) -> (f64, u64) {
        let distance = loc.cylinder.abs_diff(cylinder);
        let moved = distance > 0 || loc.surface != surface;
        let mut position_ns = if distance > 0 {
            self.seek.seek_ns(distance, self.geo.cylinders())
        } else if moved {
            self.head_switch_ns
        } else {
            0.0
        };
        if write && moved {
            position_ns += self.write_settle_ns;
        }
        (position_ns, distance)
    }

    /// Rotational wait at `t_ns` until the sector at `loc` starts under the head.
    fn wait_for_ns(&self, t_ns: f64, loc: &Location) -> f64 {
        let rot = self.geo.rotation_ns();
        let angle = (t_ns / rot).rem_euclid(1.0);
        (self.geo.sector_start_rev(loc) - angle).rem_euclid(1.0) * rot
    }

    /// When, at or after `t_ns`, the sector `lba` next starts under the head (assuming
    /// the head is on its track).
    fn next_pass_ns(&self, t_ns: f64, lba: u64) -> f64 {
        let loc = self.geo.locate(lba);
        t_ns + self.wait_for_ns(t_ns, &loc)
    }

    /// Media time to transfer `sectors` sectors from `lba`, starting as its first
    /// sector comes under the head: whole and partial tracks plus one skew per track
    /// boundary crossed.
    fn media_ns(&self, lba: u64, sectors: u64) -> f64 {
        let rot = self.geo.rotation_ns();
        let mut t = 0.0;
        let mut lba = lba;
        let mut left = sectors;
        while left > 0 {
            let loc = self.geo.locate(lba);
            let spt = self.geo.spt(loc.zone as usize) as u64;
            let here = left.min(spt - loc.sector as u64);
            t += here as f64 / spt as f64 * rot;
            left -= here;
            lba += here;
            if left > 0 {
                t += self.geo.skew_after_rev(&loc) * rot;
            }
            if lba >= self.geo.lbas() {
                break;
            }
        }
        t
    }

    /// Sectors from `lba` transferred within `elapsed_ns` of starting, at most `cap`
    /// (the inverse of `media_ns`).
    fn media_sectors_within(&self, lba: u64, elapsed_ns: f64, cap: u64) -> u64 {
        let rot = self.geo.rotation_ns();
        let mut left_ns = elapsed_ns;
        let mut done = 0;
        let mut lba = lba;
        while done < cap && lba < self.geo.lbas() {
            let loc = self.geo.locate(lba);
            let spt = self.geo.spt(loc.zone as usize) as u64;
            let here = (cap - done).min(spt - loc.sector as u64);
            let here_ns = here as f64 / spt as f64 * rot;
            if left_ns < here_ns {
                return done + (left_ns / rot * spt as f64) as u64;
            }
            left_ns -= here_ns;
            done += here;
            lba += here;
            let gap_ns = self.geo.skew_after_rev(&loc) * rot;
            if left_ns < gap_ns {
                break;
            }
            left_ns -= gap_ns;
        }
        done.min(cap)
    }
}

#[cfg(test)]
mod tests {
    use super::super::model::BUILTIN_NAMES;
    use super::*;

    const MIB: u64 = 1 << 20;

    fn read(lba: u64, bytes: u64) -> Access {
        Access {
            lba,
            sectors: (bytes / 512) as u32,
            write: false,
        }
    }

    fn write(lba: u64, bytes: u64) -> Access {
        Access {
            write: true,
            ..read(lba, bytes)
        }
    }

    fn formula_rate(m: &DiskModel, spt: u32) -> f64 {
        let h = m.surfaces as f64;
        let media = spt as f64 * m.sector_bytes as f64 * m.rpm / 60.0;
        media * h / (h + (h - 1.0) * m.track_skew + m.cylinder_skew)
    }

    /// Back-to-back sequential reads of `req_bytes` from `lba`; rate over all but the
    /// first (which pays the initial positioning), bytes/s.
    fn sequential_read_rate(hdd: &mut Hdd, lba: u64, req_bytes: u64, count: u64) -> f64 {
        let mut t = 0;
        let mut first_end = 0;
        let mut l = lba;
        for i in 0..count {
            let r = hdd.service(t, &read(l, req_bytes));
            t = r.end_ns;
            if i == 0 {
                first_end = t;
            }
            l += req_bytes / 512;
        }
        (count - 1) as f64 * req_bytes as f64 / ((t - first_end) as f64 / 1e9)
    }

    #[test]
    fn sustained_sequential_read_rate_matches_the_schema_at_both_edges() {
        for (name, outer_mb, inner_mb) in [
            ("avfs-250g", 70.0, 38.5),
            ("nvr-8t", 245.0, 122.5),
            ("laptop-5400", 140.0, 70.0),
        ] {
            let m = DiskModel::builtin(name).unwrap();
            let mut hdd = Hdd::new(&m, 1);
            let geo = hdd.geometry().clone();
            let inner = &geo.zones()[geo.inner_zone()];
            for (lba, spt, mb) in [
                (0, m.zones.spt_outer, outer_mb),
                (inner.first_lba, m.zones.spt_inner, inner_mb),
            ] {
                let want = formula_rate(&m, spt);
                assert!(
                    (want / 1e6 - mb).abs() / mb < 0.01,
                    "{name}: formula {want}"
                );
                // 4 MiB requests back to back, read-ahead on (the built-in cache).
                let got = sequential_read_rate(&mut hdd, lba, 4 * MIB, 12);
                assert!(
                    (got - want).abs() / want < 0.02,
                    "{name} @ {lba}: {got} vs {want} B/s"
                );
                // One large request of whole cylinders, cache off: the same physics.
                let mut off = m.clone();
                off.cache.read_ahead_bytes = 0;
                let mut bare = Hdd::new(&off, 1);
                let cyl_sectors = spt as u64 * m.surfaces as u64;
                let r = bare.service(0, &read(lba, 8 * cyl_sectors * 512));
                let got = (8 * cyl_sectors * 512) as f64 / (r.transfer_ns as f64 / 1e9);
                assert!((got - want).abs() / want < 0.02, "{name}: {got} vs {want}");
            }
        }
    }

    #[test]
    fn random_4k_reads_average_seek_plus_half_turn_plus_overhead_plus_transfer() {
        for (name, expect_ms) in [("avfs-250g", 13.4), ("nvr-8t", 12.3), ("laptop-5400", 17.8)] {
            let m = DiskModel::builtin(name).unwrap();
            let mut hdd = Hdd::new(&m, 7);
            let mut rng = ChaCha8Rng::seed_from_u64(42);
            let n = 10_000u64;
            let mut t = 0;
            let mut total = 0;
            for _ in 0..n {
                let lba = rng.next_u64() % (m.lbas - 8);
                let r = hdd.service(t, &read(lba, 4096));
                total += r.end_ns - r.start_ns;
                t = r.end_ns + 1_000; // never exactly periodic
            }
            let mean_ms = total as f64 / n as f64 / 1e6;
            let geo = hdd.geometry();
            let transfer_ms = 4096.0 / geo.zone_avg_rate_bytes_per_s() * 1e3;
            let formula_ms =
                m.seek_ms.average + m.rotation_ns() / 2e6 + m.command_overhead_ms + transfer_ms;
            assert!((formula_ms - expect_ms).abs() < 0.1, "{name}: {formula_ms}");
            assert!(
                (mean_ms - formula_ms).abs() / formula_ms < 0.05,
                "{name}: mean {mean_ms} ms vs {formula_ms} ms"
            );
        }
    }

    #[test]
    fn contiguous_writes_without_write_cache_lose_a_revolution_each() {
        for name in BUILTIN_NAMES {
            let m = DiskModel::builtin(name).unwrap();
            let rot = m.rotation_ns();
            let mut hdd = Hdd::new(&m, 1);
            // Start at a track's first sector so that all 51 writes (408 sectors) stay
            // on that track: a write continuing onto the next track also pays the head
            // switch and the write settle, which the track skew need not cover.
            let mut lba = 1_000_000 - hdd.geometry().locate(1_000_000).sector as u64;
            let mut t = hdd.service(0, &write(lba, 4096)).end_ns;
            for _ in 0..50 {
                lba += 8;
                let r = hdd.service(t, &write(lba, 4096));
                let took = (r.end_ns - r.start_ns) as f64;
                assert!(
                    took > 0.95 * rot && took < 1.05 * rot,
                    "{name}: {took} ns vs {rot}"
                );
                assert!(r.rotation_ns as f64 > 0.9 * rot, "{name}: {r:?}");
                t = r.end_ns;
            }
            // With the write cache on, the same writes take the interface time.
            let mut wb = m.clone();
            wb.cache.write_back = true;
            let mut hdd = Hdd::new(&wb, 1);
            let r = hdd.service(0, &write(8, 4096));
            assert!(((r.end_ns - r.start_ns) as f64) < m.command_overhead_ms * 1e6 + 20_000.0);
        }
    }

    #[test]
    fn sequential_reads_with_read_ahead_hit_the_cache_when_the_disk_idles() {
        let m = DiskModel::builtin("avfs-250g").unwrap();
        let mut hdd = Hdd::new(&m, 1);
        let r = hdd.service(0, &read(0, 64 * 1024));
        assert!(!r.cache_hit);
        // After 10 ms idle, 256 KiB of read-ahead is in the buffer.
        let r = hdd.service(r.end_ns + 10_000_000, &read(128, 64 * 1024));
        assert!(r.cache_hit, "{r:?}");
        assert_eq!(r.seek_ns + r.rotation_ns, 0);
        // Read elsewhere, then come back: the stopped segment still serves.
        let r = hdd.service(r.end_ns + 10_000_000, &read(10_000_000, 4096));
        assert!(!r.cache_hit);
        let r = hdd.service(r.end_ns, &read(256, 64 * 1024));
        assert!(r.cache_hit, "{r:?}");
        // A read that does not continue anything is a miss.
        let r = hdd.service(r.end_ns, &read(1_000, 4096));
        assert!(!r.cache_hit);
    }

    #[test]
    fn a_long_run_of_small_sequential_hits_stays_cheap_and_within_the_media_rate() {
        // 4 KiB reads 50 us apart are served from the read-ahead, which the model
        // rebases on every hit (else each look-up would walk everything streamed so
        // far); the run as a whole cannot beat the sustained rate.
        let m = DiskModel::builtin("avfs-250g").unwrap();
        let mut hdd = Hdd::new(&m, 1);
        let mut t = hdd.service(0, &read(0, 4096)).end_ns;
        let t0 = t;
        let (mut lba, mut hits) = (8, 0);
        let n = 20_000u64;
        for _ in 0..n {
            let r = hdd.service(t + 50_000, &read(lba, 4096));
            hits += u64::from(r.cache_hit);
            t = r.end_ns;
            lba += 8;
        }
        let rate = (n * 4096) as f64 / ((t - t0) as f64 / 1e9);
        assert!(hits > n / 2, "{hits}");
        assert!(
            rate <= hdd.geometry().outer_rate_bytes_per_s() * 1.02,
            "{rate}"
        );
    }

    /// What `streams` sequential readers see when served round-robin in C-SCAN order
    /// (ascending start LBA, as a round of playbacks is), `rounds` rounds of `req_bytes`
    /// each, the disk idling `idle_ns` after every command so that read-ahead
    /// accumulates. Returns (continuations, whole hits, partial hits), counting only
    /// rounds after the first, whose reads continue the same stream's previous read.
    fn interleaved_streams(
        m: &DiskModel,
        streams: u64,
        rounds: u64,
        req_bytes: u64,
        idle_ns: u64,
    ) -> (u64, u64, u64) {
        let mut hdd = Hdd::new(m, 1);
        let req_sectors = req_bytes / 512;
        // Spread the streams over the disk, so that every switch is a real seek.
        let spacing = m.lbas / streams;
        let mut next: Vec<u64> = (0..streams).map(|k| k * spacing).collect();
        let (mut t, mut continuations, mut hits, mut partial) = (0, 0, 0, 0);
        for round in 0..rounds {
            for lba in next.iter_mut() {
                let r = hdd.service(t, &read(*lba, req_bytes));
                assert!(!(r.cache_hit && r.cache_partial_hit), "{r:?}");
                if round > 0 {
                    continuations += 1;
                    hits += u64::from(r.cache_hit);
                    partial += u64::from(r.cache_partial_hit);
                }
                *lba += req_sectors;
                t = r.end_ns + idle_ns;
            }
        }
        (continuations, hits, partial)
    }

    /// Idle time after each command: enough for the read-ahead to fill a whole
    /// `read_ahead_bytes` window even at the inner edge of avfs-250g (256 KiB at
    /// 38.5 MB/s is 6.8 ms).
    const STREAM_IDLE_NS: u64 = 10_000_000;

    #[test]
    fn interleaved_sequential_streams_keep_their_segments() {
        // As many streams as the drive has segments: each stream's stopped segment
        // must survive the other streams' commands until its continuation comes, so
        // every continuation after the first round is (at least partly) a hit.
        let m = DiskModel::builtin("avfs-250g").unwrap();
        let streams = m.cache.segments as u64;
        let (n, hits, partial) = interleaved_streams(&m, streams, 20, 512 * 1024, STREAM_IDLE_NS);
        assert_eq!(
            hits + partial,
            n,
            "{streams} streams: {hits} whole and {partial} partial hits in {n} continuations"
        );
        // 512 KiB reads against a 256 KiB read-ahead: the head comes from the segment,
        // the tail from the media.
        assert_eq!(partial, n, "{hits} whole hits");
    }

    #[test]
    fn one_stream_more_than_segments_thrashes_the_lru() {
        // With segments + 1 streams in a cycle, least-recently-used replacement evicts
        // exactly the segment the next command would have continued: the segment count
        // is honoured, not unlimited.
        let m = DiskModel::builtin("avfs-250g").unwrap();
        let streams = m.cache.segments as u64 + 1;
        let (n, hits, partial) = interleaved_streams(&m, streams, 20, 512 * 1024, STREAM_IDLE_NS);
        assert!(n > 0);
        assert_eq!(
            (hits, partial),
            (0, 0),
            "{streams} streams: {hits} whole and {partial} partial hits in {n} continuations"
        );
    }

    #[test]
    fn a_read_starting_inside_a_buffered_range_is_served_from_it() {
        let m = DiskModel::builtin("avfs-250g").unwrap();
        let mut hdd = Hdd::new(&m, 1);
        // Sectors [0, 128); after 10 ms idle the read-ahead holds [128, 640).
        let r = hdd.service(0, &read(0, 64 * 1024));
        // Skipping 64 sectors stays inside the active read-ahead's buffer.
        let r = hdd.service(r.end_ns + STREAM_IDLE_NS, &read(192, 64 * 1024));
        assert!(r.cache_hit, "{r:?}");
        assert_eq!(r.seek_ns + r.rotation_ns, 0);
        // A read elsewhere stops the read-ahead, which by then holds [320, 832).
        let r = hdd.service(r.end_ns + STREAM_IDLE_NS, &read(10_000_000, 4096));
        assert!(!r.cache_hit && !r.cache_partial_hit, "{r:?}");
        // [400, 912) starts inside that stopped segment and runs past its end: the
        // head of it is a hit, the tail needs the arm to come back.
        let r = hdd.service(r.end_ns, &read(400, 256 * 1024));
        assert!(r.cache_partial_hit && !r.cache_hit, "{r:?}");
        assert!(r.seek_cylinders > 0, "{r:?}");
        // The segment is the active read-ahead again: its continuation streams on.
        let r = hdd.service(r.end_ns, &read(912, 4096));
        assert_eq!(r.seek_ns, 0, "{r:?}");
    }

    #[test]
    fn segment_bookkeeping_stays_within_the_segment_count() {
        // A random mix of stream continuations, reads inside recent ranges, random
        // reads and writes, on drives of 1, 2 and 8 segments: after every command the
        // active read-ahead and the stopped segments fit in `segments`, and the timing
        // adds up.
        for segments in [1, 2, 8] {
            let mut m = DiskModel::builtin("avfs-250g").unwrap();
            m.cache.segments = segments;
            let mut hdd = Hdd::new(&m, 1);
            let mut rng = ChaCha8Rng::seed_from_u64(5);
            let mut streams: Vec<u64> = (0..12).map(|k| k * 20_000_000).collect();
            let (mut t, mut hits, mut partial) = (0, 0, 0);
            for _ in 0..5_000 {
                let k = (rng.next_u64() % streams.len() as u64) as usize;
                let bytes = 4096 << (rng.next_u64() % 8); // 4 KiB to 512 KiB
                let random_lba = rng.next_u64() % (m.lbas - 1024);
                let a = match rng.next_u64() % 10 {
                    0 => write(random_lba, bytes),
                    1 => write(streams[k], bytes),
                    2 => read(random_lba, bytes),
                    3 => read(streams[k].saturating_sub(64), bytes),
                    _ => read(streams[k], bytes),
                };
                streams[k] = streams[k].max(a.lba + a.sectors as u64);
                let r = hdd.service(t, &a);
                assert!(
                    hdd.segments_within_bounds(),
                    "{segments}: {:?}",
                    hdd.segments
                );
                assert!(!(r.cache_hit && r.cache_partial_hit), "{r:?}");
                assert_eq!(
                    r.end_ns - r.start_ns,
                    r.overhead_ns + r.seek_ns + r.rotation_ns + r.transfer_ns
                );
                hits += u64::from(r.cache_hit);
                partial += u64::from(r.cache_partial_hit);
                t = r.end_ns + rng.next_u64() % 5_000_000;
            }
            assert!(hits > 0 && partial > 0, "{segments}: {hits} / {partial}");
        }
    }

    #[test]
    fn same_seed_same_timings_and_slow_io_is_drawn_from_the_seed() {
        let mut m = DiskModel::builtin("nvr-8t").unwrap();
        m.slow_io = Some(super::super::model::SlowIo {
            probability: 0.05,
            extra_ms: [50.0, 100.0],
        });
        let run = |seed: u64| {
            let mut hdd = Hdd::new(&m, seed);
            let mut rng = ChaCha8Rng::seed_from_u64(3);
            let mut t = 0;
            let mut out = Vec::new();
            for i in 0..2_000 {
                let lba = rng.next_u64() % (m.lbas - 1024);
                let a = Access {
                    lba,
                    sectors: 1024,
                    write: i % 3 == 0,
                };
                let r = hdd.service(t, &a);
                assert_eq!(
                    r.end_ns - r.start_ns,
                    r.overhead_ns + r.seek_ns + r.rotation_ns + r.transfer_ns
                );
                t = r.end_ns;
                out.push(r);
            }
            out
        };
        let a = run(9);
        assert_eq!(a, run(9));
        assert_ne!(a, run(10));
        let slow = a.iter().filter(|r| r.overhead_ns > 50_000_000).count();
        assert!((50..=150).contains(&slow), "{slow} slow accesses of 2000");
    }

    #[test]
    fn positioning_ns_is_what_service_then_charges() {
        // The command queue ranks commands by `positioning_ns`; it must be the seek
        // and rotation `service` charges when it serves the command at that time, and
        // zero for a read the cache serves whole. Reads, writes, stream continuations
        // and random accesses, idle gaps so that read-ahead runs.
        for name in BUILTIN_NAMES {
            let m = DiskModel::builtin(name).unwrap();
            let mut hdd = Hdd::new(&m, 1);
            let mut rng = ChaCha8Rng::seed_from_u64(4);
            let (mut t, mut next, mut hits, mut media) = (0, 0, 0, 0);
            for _ in 0..3_000 {
                let lba = rng.next_u64() % (m.lbas - 1024);
                let a = match rng.next_u64() % 4 {
                    0 => write(lba, 4096),
                    1 => read(next, 64 * 1024),
                    _ => read(lba, 4096),
                };
                let p = hdd.positioning_ns(t, &a);
                let r = hdd.service(t, &a);
                if r.cache_hit {
                    assert_eq!(p, 0.0, "{name}: {r:?}");
                    hits += 1;
                } else if !r.cache_partial_hit {
                    let charged = (r.seek_ns + r.rotation_ns) as f64;
                    assert!((p - charged).abs() <= 2.0, "{name}: {p} vs {r:?}");
                    media += 1;
                }
                next = a.lba + a.sectors as u64;
                t = r.end_ns + rng.next_u64() % 3_000_000;
            }
            assert!(
                hits > 100 && media > 1_000,
                "{name}: {hits} hits, {media} media"
            );
        }
    }

    #[test]
    fn head_follows_the_accesses_and_out_of_range_is_clamped() {
        let m = DiskModel::builtin("avfs-250g").unwrap();
        let mut hdd = Hdd::new(&m, 1);
        assert_eq!(hdd.head_cylinder(), 0);
        let lba = 300_000_000;
        let r = hdd.service(0, &write(lba, 4096));
        assert_eq!(r.seek_cylinders, hdd.cylinder_of(lba));
        assert_eq!(hdd.head_cylinder(), hdd.cylinder_of(lba));
        assert!(hdd.cylinder_of(m.lbas - 1) < hdd.cylinders());
        let r = hdd.service(r.end_ns, &read(u64::MAX - 5, 4096));
        assert!(r.end_ns > r.start_ns);
        let r = hdd.service(r.end_ns, &read(0, 0));
        assert_eq!(r.end_ns - r.start_ns, r.overhead_ns);
    }
}
