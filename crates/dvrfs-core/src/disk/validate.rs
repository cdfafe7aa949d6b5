//! The meaning check of a disk model: every field against physics and the limits of
//! `model.rs` (positive spindle speed, 512- or 4096-byte sectors, `track <= average <=
//! full` seek times reachable by the two-piece seek curve, skews in [0, 1),
//! probabilities in [0, 1], power figures in watts with standby <= idle <= seek,
//! transfer, spin-up, ...), each error saying what is wrong and what would be
//! accepted.
//!
//! It sits above `model` (the types), `geometry` and `seek` (what derives from them):
//! the last check builds the geometry and the curve a model implies. Loading
//! (`load.rs`) runs it after the shape check. The checks run in the file's order and the
//! first failure is returned. Fault model: none; nothing here panics on any input.

use super::geometry::Geometry;
use super::model::*;
use super::seek::SeekCurve;

impl DiskModel {
    /// Checks every field against physics and the limits of `model.rs`.
    pub fn validate(&self) -> Result<(), ModelError> {
        self.validate_identity()?;
        self.validate_platters()?;
        self.validate_zones()?;
        self.validate_seek_figures()?;
        self.validate_seek_curve()?;
        self.validate_timings()?;
        self.validate_cache()?;
        self.validate_slow_io()?;
        self.validate_power()?;
        self.validate_derived()?;
        Ok(())
    }

    /// The name and the description: printable, bounded.
    fn validate_identity(&self) -> Result<(), ModelError> {
        let m = self;
        if m.name.is_empty() || m.name.len() > MAX_NAME_BYTES {
            return Err(ModelError::invalid(
                "name",
                format!("must be 1 to {MAX_NAME_BYTES} bytes long"),
            ));
        }
        if m.name.chars().any(char::is_control) {
            return Err(ModelError::invalid(
                "name",
                "must not contain control characters",
            ));
        }
        if let Some(d) = &m.description {
            if d.len() > MAX_DESCRIPTION_BYTES {
                return Err(ModelError::invalid(
                    "description",
                    format!("must be at most {MAX_DESCRIPTION_BYTES} bytes long"),
                ));
            }
        }
        Ok(())
    }

    /// Capacity, sector size, spindle speed and surfaces.
    fn validate_platters(&self) -> Result<(), ModelError> {
        let m = self;
        if m.lbas == 0 || m.lbas > MAX_LBAS {
            return Err(ModelError::invalid(
                "lbas",
                format!("must be a positive integer no larger than {MAX_LBAS}"),
            ));
        }
        if m.sector_bytes != 512 && m.sector_bytes != 4096 {
            return Err(ModelError::invalid(
                "sector_bytes",
                format!("must be 512 or 4096, not {}", m.sector_bytes),
            ));
        }
        number_in(
            "rpm",
            m.rpm,
            f64::MIN_POSITIVE,
            MAX_RPM,
            "a positive number",
        )?;
        if m.surfaces == 0 || m.surfaces > MAX_SURFACES {
            return Err(ModelError::invalid(
                "surfaces",
                format!("must be an integer from 1 to {MAX_SURFACES}"),
            ));
        }
        Ok(())
    }

    /// The recording zones: a count and sectors per track, outer to inner.
    fn validate_zones(&self) -> Result<(), ModelError> {
        let m = self;
        let z = &m.zones;
        if z.count == 0 || z.count > MAX_ZONES {
            return Err(ModelError::invalid(
                "zones.count",
                format!("must be an integer from 1 to {MAX_ZONES}"),
            ));
        }
        if z.spt_outer == 0 || z.spt_outer > MAX_SECTORS_PER_TRACK {
            return Err(ModelError::invalid(
                "zones.spt_outer",
                format!("must be a positive integer no larger than {MAX_SECTORS_PER_TRACK}"),
            ));
        }
        if z.spt_inner == 0 || z.spt_inner > z.spt_outer {
            return Err(ModelError::invalid(
                "zones.spt_inner",
                "must be a positive integer no larger than spt_outer",
            ));
        }
        if z.count == 1 && z.spt_inner != z.spt_outer {
            return Err(ModelError::invalid(
                "zones.spt_inner",
                "must equal spt_outer when there is a single zone",
            ));
        }
        Ok(())
    }

    /// The data-sheet seek times: `track < full`, `average` between them.
    fn validate_seek_figures(&self) -> Result<(), ModelError> {
        let m = self;
        let s = &m.seek_ms;
        number_in(
            "seek_ms.track",
            s.track,
            f64::MIN_POSITIVE,
            MAX_MECHANICAL_MS,
            "a positive number of ms",
        )?;
        number_in(
            "seek_ms.full",
            s.full,
            s.track,
            MAX_MECHANICAL_MS,
            "a number of ms no smaller than seek_ms.track",
        )?;
        if s.full <= s.track {
            return Err(ModelError::invalid(
                "seek_ms.full",
                "must be larger than seek_ms.track (a seek curve is not flat)",
            ));
        }
        number_in(
            "seek_ms.average",
            s.average,
            s.track,
            s.full,
            "a number of ms from seek_ms.track to seek_ms.full",
        )?;
        Ok(())
    }

    /// An explicit two-piece curve: its parameters, and its pieces meeting at `x0`.
    fn validate_seek_curve(&self) -> Result<(), ModelError> {
        let m = self;
        if let Some(c) = &m.seek_curve {
            number_in(
                "seek_curve.x0",
                c.x0,
                f64::MIN_POSITIVE,
                1.0,
                "a number in (0, 1]",
            )?;
            for (field, v) in [
                ("seek_curve.t1", c.t1),
                ("seek_curve.b", c.b),
                ("seek_curve.c", c.c),
                ("seek_curve.e", c.e),
            ] {
                number_in(
                    field,
                    v,
                    0.0,
                    MAX_MECHANICAL_MS,
                    "a non-negative number of ms",
                )?;
            }
            let left = c.t1 + c.b * c.x0.sqrt();
            let right = c.c + c.e * c.x0;
            if (left - right).abs() > (0.05f64).max(0.02 * left.max(right)) {
                return Err(ModelError::invalid(
                    "seek_curve",
                    format!(
                        "the two pieces must meet at x0: t1 + b*sqrt(x0) = {left:.3} ms but \
                         c + e*x0 = {right:.3} ms"
                    ),
                ));
            }
        }
        Ok(())
    }

    /// Settle, head switch, command overhead, skews and the host link.
    fn validate_timings(&self) -> Result<(), ModelError> {
        let m = self;
        number_in(
            "write_settle_ms",
            m.write_settle_ms,
            0.0,
            MAX_MECHANICAL_MS,
            "a non-negative number of ms",
        )?;
        number_in(
            "head_switch_ms",
            m.head_switch_ms,
            0.0,
            MAX_MECHANICAL_MS,
            "a non-negative number of ms",
        )?;
        number_in(
            "command_overhead_ms",
            m.command_overhead_ms,
            0.0,
            MAX_MECHANICAL_MS,
            "a non-negative number of ms",
        )?;
        for (field, v) in [
            ("track_skew", m.track_skew),
            ("cylinder_skew", m.cylinder_skew),
        ] {
            if !(v.is_finite() && (0.0..1.0).contains(&v)) {
                return Err(ModelError::invalid(
                    field,
                    format!("must be a fraction of a revolution in [0, 1), not {v}"),
                ));
            }
        }
        number_in(
            "interface_mb_per_s",
            m.interface_mb_per_s,
            f64::MIN_POSITIVE,
            MAX_INTERFACE_MB_PER_S,
            "a positive number",
        )?;
        Ok(())
    }

    /// The read-ahead cache: its size, and segments whenever it reads ahead.
    fn validate_cache(&self) -> Result<(), ModelError> {
        let m = self;
        if m.cache.read_ahead_bytes > MAX_READ_AHEAD_BYTES {
            return Err(ModelError::invalid(
                "cache.read_ahead_bytes",
                format!("must be at most {MAX_READ_AHEAD_BYTES}"),
            ));
        }
        if m.cache.segments > MAX_CACHE_SEGMENTS
            || (m.cache.read_ahead_bytes > 0 && m.cache.segments == 0)
        {
            return Err(ModelError::invalid(
                "cache.segments",
                format!("must be from 1 to {MAX_CACHE_SEGMENTS} when read_ahead_bytes is not 0"),
            ));
        }
        Ok(())
    }

    /// The rare slow accesses: a probability and a `[min, max]` extra time.
    fn validate_slow_io(&self) -> Result<(), ModelError> {
        let m = self;
        if let Some(slow) = &m.slow_io {
            number_in(
                "slow_io.probability",
                slow.probability,
                0.0,
                1.0,
                "a probability in [0, 1]",
            )?;
            let [lo, hi] = slow.extra_ms;
            number_in(
                "slow_io.extra_ms",
                lo,
                0.0,
                MAX_SLOW_IO_MS,
                "[min, max] with 0 <= min <= max (ms)",
            )?;
            number_in(
                "slow_io.extra_ms",
                hi,
                lo,
                MAX_SLOW_IO_MS,
                "[min, max] with 0 <= min <= max (ms)",
            )?;
        }
        Ok(())
    }

    /// The power figures: finite, non-negative, bounded, and ordered as physics has
    /// them: standby (spindle stopped) draws no more than idle, and seeking,
    /// transferring and spinning up are idle plus work, so none draws less than idle.
    /// A figure out of that order is a typo (or the columns of a data sheet mixed up).
    fn validate_power(&self) -> Result<(), ModelError> {
        let Some(p) = &self.power else {
            return Ok(());
        };
        for (field, v) in [
            ("power.idle_w", p.idle_w),
            ("power.seek_w", p.seek_w),
            ("power.transfer_w", p.transfer_w),
            ("power.standby_w", p.standby_w),
            ("power.spin_up_w", p.spin_up_w),
        ] {
            number_in(field, v, 0.0, MAX_POWER_W, "a non-negative number of watts")?;
        }
        for (field, v) in [
            ("power.spin_up_s", p.spin_up_s),
            ("power.spin_down_s", p.spin_down_s),
        ] {
            number_in(
                field,
                v,
                0.0,
                MAX_SPIN_S,
                "a non-negative number of seconds",
            )?;
        }
        if p.standby_w > p.idle_w {
            return Err(ModelError::invalid(
                "power.standby_w",
                format!(
                    "must not exceed power.idle_w ({} W): standby is the idle disk with its \
                     spindle stopped, not {} W",
                    p.idle_w, p.standby_w
                ),
            ));
        }
        for (field, v) in [
            ("power.seek_w", p.seek_w),
            ("power.transfer_w", p.transfer_w),
            ("power.spin_up_w", p.spin_up_w),
        ] {
            if v < p.idle_w {
                return Err(ModelError::invalid(
                    field,
                    format!(
                        "must be at least power.idle_w ({} W): the disk does this work \
                         while spinning, not {v} W",
                        p.idle_w
                    ),
                ));
            }
        }
        Ok(())
    }

    /// The derived geometry must stay within bounds, and the seek figures must be
    /// reachable by the two-piece curve.
    fn validate_derived(&self) -> Result<(), ModelError> {
        let m = self;
        let s = &m.seek_ms;
        let geo = Geometry::from_model(m);
        if geo.cylinders() > MAX_CYLINDERS {
            return Err(ModelError::invalid(
                "lbas",
                format!(
                    "the geometry would need {} cylinders (limit {MAX_CYLINDERS}); \
                     check surfaces and zones",
                    geo.cylinders()
                ),
            ));
        }
        let curve = SeekCurve::from_model(m, geo.cylinders())?;
        if m.seek_curve.is_some() {
            // An explicit curve replaces the fit, but must still tell the same story as
            // the data-sheet figures next to it (a typo in either shows up here).
            let cyl = geo.cylinders();
            for (what, got, want) in [
                ("one-cylinder seek", curve.seek_ns(1, cyl) / 1.0e6, s.track),
                ("average", curve.average_ms(), s.average),
                ("full stroke", curve.time_ms(1.0), s.full),
            ] {
                if (got - want).abs() > (SEEK_CURVE_TOLERANCE * want).max(0.1) {
                    return Err(ModelError::invalid(
                        "seek_curve",
                        format!(
                            "its {what} is {got:.2} ms but seek_ms says {want} ms; they must \
                             agree within 10%"
                        ),
                    ));
                }
            }
        }
        Ok(())
    }
}

/// `v` must be finite and in [lo, hi].
fn number_in(field: &str, v: f64, lo: f64, hi: f64, what: &str) -> Result<(), ModelError> {
    if v.is_finite() && v >= lo && v <= hi {
        Ok(())
    } else {
        Err(ModelError::invalid(
            field,
            format!("must be {what} (at most {hi}), not {v}"),
        ))
    }
}
