//! The seek curve: how long the arm takes to move a given number of cylinders.
//!
//! The form is Ruemmler and Wilkes' two-piece curve ("An introduction to disk drive
//! modeling", 1994): the arm accelerates then decelerates over short distances (time
//! grows with the square root of the distance) and coasts at top speed over long ones
//! (time grows linearly):
//!
//! ```text
//! t(x) = t1 + b * sqrt(x)   for x <= x0
//! t(x) = c  + e * x         for x >  x0        x = distance / cylinders
//! ```
//!
//! A seek of distance 0 takes no time (head switches and settling are charged by the
//! caller). A model either gives the five numbers (`seek_curve`) or the three data-sheet
//! figures `seek_ms = {track, average, full}`, and then the curve is *fitted* to them:
//!
//! 1. continuity of value and slope at x0: `e = b / (2 sqrt(x0))` and
//!    `c = t1 + b sqrt(x0) / 2`;
//! 2. the one-cylinder seek is `track`: `t1 + b sqrt(x1) = track`, `x1 = 1 / cylinders`;
//! 3. the full stroke is `full`: `c + e = full`, which with 1 and 2 fixes
//!    `b = (full - track) / (sqrt(x0)/2 + 1/(2 sqrt(x0)) - sqrt(x1))`;
//! 4. the average over uniformly random start and end cylinders is `average`. The
//!    distance between two uniform points of [0, 1] has density 2(1 - x), so
//!    `E[t] = t1 (2 x0 - x0^2) + 2b (2/3 x0^{3/2} - 2/5 x0^{5/2})
//!          + c (1 - x0)^2 + 2e (1/6 - x0^2/2 + x0^3/3)`.
//!    With 1-3 this is a continuous function of x0 alone, increasing from the
//!    all-linear curve (x0 -> x1) to the all-square-root one (x0 = 1); x0 is found by
//!    bracketing on a grid and bisecting. An average outside that range cannot be
//!    produced by the two-piece form, and the model is rejected with a message saying so.
//!
//! Condition 2 pins the one-cylinder seek rather than the x -> 0 limit t1; with half a
//! million cylinders the two differ by b*sqrt(1/cylinders) ~ 0.02 ms, so nvr-8t's fit is
//! t1 = 0.48, b = 13.86, x0 = 0.379, c = 4.75, e = 11.25 against the brief's rounded
//! 0.50 + 13.82 sqrt(x) / 4.74 + 11.26 x (which reproduces the one-cylinder seek only to
//! 4%).

use super::model::{DiskModel, ModelError};

/// Grid points used to bracket x0 before bisecting.
const FIT_GRID_POINTS: u32 = 512;
/// Bisection steps (each halves the bracket; 60 is far below f64 resolution).
const FIT_BISECTION_STEPS: u32 = 60;

/// A two-piece seek curve, times in ms.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SeekCurve {
    pub x0: f64,
    pub t1_ms: f64,
    pub b_ms: f64,
    pub c_ms: f64,
    pub e_ms: f64,
}

impl SeekCurve {
    /// The model's explicit `seek_curve`, or the fit to `seek_ms`.
    pub fn from_model(m: &DiskModel, cylinders: u64) -> Result<SeekCurve, ModelError> {
        match &m.seek_curve {
            Some(s) => Ok(SeekCurve {
                x0: s.x0,
                t1_ms: s.t1,
                b_ms: s.b,
                c_ms: s.c,
                e_ms: s.e,
            }),
            None => SeekCurve::fit(
                m.seek_ms.track,
                m.seek_ms.average,
                m.seek_ms.full,
                cylinders,
            ),
        }
    }

    /// Fits the curve to the data-sheet figures (see the module docs).
    pub fn fit(
        track_ms: f64,
        average_ms: f64,
        full_ms: f64,
        cylinders: u64,
    ) -> Result<SeekCurve, ModelError> {
        let x1 = 1.0 / cylinders.max(2) as f64;
        let at = |x0: f64| Self::constrained(x0, x1, track_ms, full_ms);
        let gap = |x0: f64| at(x0).average_ms() - average_ms;
        // Bracket on a grid over (x1, 1], then bisect.
        let grid = |i: u32| x1 + (1.0 - x1) * i as f64 / FIT_GRID_POINTS as f64;
        let lo_avg = at(grid(1)).average_ms();
        let hi_avg = at(1.0).average_ms();
        let mut bracket = None;
        for i in 1..FIT_GRID_POINTS {
            if gap(grid(i)) <= 0.0 && gap(grid(i + 1)) >= 0.0 {
                bracket = Some((grid(i), grid(i + 1)));
                break;
            }
        }
        let Some((mut lo, mut hi)) = bracket else {
            return Err(ModelError::invalid(
                "seek_ms.average",
                format!(
                    "{average_ms} ms cannot be produced by a two-piece seek curve through \
                     track {track_ms} ms and full {full_ms} ms (reachable: {lo_avg:.2} to \
                     {hi_avg:.2} ms); give `seek_curve` explicitly"
                ),
            ));
        };
        for _ in 0..FIT_BISECTION_STEPS {
            let mid = 0.5 * (lo + hi);
            if gap(mid) <= 0.0 {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        Ok(at(0.5 * (lo + hi)))
    }

    /// The curve through (x1, track) and (1, full), continuous in value and slope at x0.
    fn constrained(x0: f64, x1: f64, track_ms: f64, full_ms: f64) -> SeekCurve {
        let r = x0.sqrt();
        let b = (full_ms - track_ms) / (r / 2.0 + 1.0 / (2.0 * r) - x1.sqrt());
        let t1 = track_ms - b * x1.sqrt();
        SeekCurve {
            x0,
            t1_ms: t1,
            b_ms: b,
            c_ms: t1 + b * r / 2.0,
            e_ms: b / (2.0 * r),
        }
    }

    /// t(x) in ms for x = distance / cylinders (x = 0 gives 0).
    pub fn time_ms(&self, x: f64) -> f64 {
        if x <= 0.0 {
            0.0
        } else if x <= self.x0 {
            self.t1_ms + self.b_ms * x.sqrt()
        } else {
            self.c_ms + self.e_ms * x
        }
    }

    /// Seek time in ns for a move of `distance` cylinders on a disk of `cylinders`.
    pub fn seek_ns(&self, distance: u64, cylinders: u64) -> f64 {
        if distance == 0 {
            return 0.0;
        }
        self.time_ms(distance as f64 / cylinders.max(1) as f64) * 1.0e6
    }

    /// Mean seek time over uniformly random start and end positions (density 2(1 - x)).
    pub fn average_ms(&self) -> f64 {
        let x0 = self.x0.clamp(0.0, 1.0);
        let short = self.t1_ms * (2.0 * x0 - x0 * x0)
            + 2.0 * self.b_ms * (2.0 / 3.0 * x0.powf(1.5) - 2.0 / 5.0 * x0.powf(2.5));
        let long = self.c_ms * (1.0 - x0).powi(2)
            + 2.0 * self.e_ms * (1.0 / 6.0 - x0 * x0 / 2.0 + x0.powi(3) / 3.0);
        short + long
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::disk::geometry::Geometry;
    use crate::disk::model::BUILTIN_NAMES;

    fn within(got: f64, want: f64, rel: f64) -> bool {
        (got - want).abs() <= rel * want.abs()
    }

    /// The fit to each built-in model's three figures (ignoring its explicit curve).
    fn fitted(name: &str) -> (SeekCurve, u64, DiskModel) {
        let mut m = DiskModel::builtin(name).unwrap();
        m.seek_curve = None;
        let cyl = Geometry::from_model(&m).cylinders();
        (SeekCurve::from_model(&m, cyl).unwrap(), cyl, m)
    }

    #[test]
    fn fitted_curve_reproduces_track_average_and_full() {
        for name in BUILTIN_NAMES {
            let (c, cyl, m) = fitted(name);
            let s = m.seek_ms;
            assert!(
                within(c.seek_ns(1, cyl) / 1e6, s.track, 0.02),
                "{name} track"
            );
            assert!(within(c.average_ms(), s.average, 0.02), "{name} average");
            assert!(
                within(c.seek_ns(cyl, cyl) / 1e6, s.full, 0.02),
                "{name} full"
            );
            // Continuous in value and slope at x0.
            let left = c.t1_ms + c.b_ms * c.x0.sqrt();
            assert!((left - (c.c_ms + c.e_ms * c.x0)).abs() < 1e-9);
            assert!((c.b_ms / (2.0 * c.x0.sqrt()) - c.e_ms).abs() < 1e-9);
            assert_eq!(c.seek_ns(0, cyl), 0.0);
        }
    }

    #[test]
    fn nvr_fit_is_close_to_the_brief_table() {
        // Brief: 0.50 + 13.82*sqrt(x) for x <= 0.376, else 4.74 + 11.26*x.
        let (c, _, _) = fitted("nvr-8t");
        assert!((c.t1_ms - 0.50).abs() < 0.03, "{c:?}");
        assert!(within(c.b_ms, 13.82, 0.01), "{c:?}");
        assert!((c.x0 - 0.376).abs() < 0.01, "{c:?}");
        assert!(within(c.c_ms, 4.74, 0.01), "{c:?}");
        assert!(within(c.e_ms, 11.26, 0.01), "{c:?}");
        // And the two curves agree everywhere to within 0.05 ms.
        let brief = SeekCurve {
            x0: 0.376,
            t1_ms: 0.5,
            b_ms: 13.82,
            c_ms: 4.74,
            e_ms: 11.26,
        };
        for i in 1..=100 {
            let x = i as f64 / 100.0;
            assert!((c.time_ms(x) - brief.time_ms(x)).abs() < 0.05, "x = {x}");
        }
    }

    #[test]
    fn laptop_curve_is_the_stored_fit() {
        // laptop-5400's `seek_curve` is this module's fit to its seek_ms figures, stored
        // rounded so that the file says exactly which curve the simulation runs.
        let (fit, _, _) = fitted("laptop-5400");
        let m = DiskModel::builtin("laptop-5400").unwrap();
        let stored = m.seek_curve.unwrap();
        for (what, got, want) in [
            ("x0", stored.x0, fit.x0),
            ("t1", stored.t1, fit.t1_ms),
            ("b", stored.b, fit.b_ms),
            ("c", stored.c, fit.c_ms),
            ("e", stored.e, fit.e_ms),
        ] {
            assert!(
                (got - want).abs() < 1e-3,
                "{what}: stored {got}, fit {want}"
            );
        }
    }

    #[test]
    fn explicit_curves_of_the_builtins_match_their_figures() {
        for name in BUILTIN_NAMES {
            let m = DiskModel::builtin(name).unwrap();
            let cyl = Geometry::from_model(&m).cylinders();
            let c = SeekCurve::from_model(&m, cyl).unwrap();
            assert_eq!(Some(c.x0), m.seek_curve.map(|s| s.x0));
            assert!(within(c.average_ms(), m.seek_ms.average, 0.01), "{name}");
            assert!(
                within(c.seek_ns(cyl, cyl) / 1e6, m.seek_ms.full, 0.01),
                "{name}"
            );
        }
    }

    #[test]
    fn unreachable_average_is_rejected() {
        assert!(SeekCurve::fit(0.8, 17.0, 18.0, 100_000).is_err());
        assert!(SeekCurve::fit(0.8, 2.0, 18.0, 100_000).is_err());
    }
}
