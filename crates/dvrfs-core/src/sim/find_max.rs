//! `--find-max`: the largest count of the workload's first term that a run passes,
//! found by doubling, bisection and a check of the answer's neighbourhood.

use super::{SimConfig, SimOutcome};
use crate::error::Result;
use std::collections::BTreeMap;

/// The largest count tried.
const LIMIT: u32 = 1 << 14;

/// `--find-max`: the largest count of the workload's first term whose run fails no
/// check (`ok`), and that run.
///
/// The count doubles from 1 until a run fails, then the gap is bisected. Since misses
/// need not grow strictly with load, the answer is then checked in its neighbourhood:
/// the two counts above must fail and the two below pass. A passing count above moves
/// the answer up (and the search goes on from there); then a failing count below moves
/// it down to just below that count, and it is never moved up again (so the search
/// ends; a count it moves down to must pass too, or it moves further). Every count
/// reported was simulated and passed, and its four neighbours were
/// simulated too ([`FindMax::neighbours`]): a non-monotone policy shows there as a
/// pass above the answer or a failure below it.
pub fn find_max(
    cfg: &SimConfig,
    mut run_with: impl FnMut(&SimConfig) -> Result<SimOutcome>,
    ok: impl Fn(&SimOutcome) -> bool,
) -> Result<FindMax> {
    let mut cache: BTreeMap<u32, (bool, Option<SimOutcome>)> = BTreeMap::new();
    let mut with = |n: u32, keep: bool| -> Result<bool> {
        if let Some((pass, o)) = cache.get(&n) {
            if !keep || o.is_some() {
                return Ok(*pass);
            }
        }
        let mut c = cfg.clone();
        c.workload = cfg.workload.with_first_count(n);
        let o = run_with(&c)?;
        let pass = ok(&o);
        cache.insert(n, (pass, (keep && pass).then_some(o)));
        Ok(pass)
    };
    let mut lo = 0u32;
    let mut hi = LIMIT + 1;
    let mut n = 1;
    while n <= LIMIT {
        if !with(n, false)? {
            hi = n;
            break;
        }
        lo = n;
        n *= 2;
    }
    lo = search_up(lo, hi, &mut with)?;
    lo = search_down(lo, &mut with)?;
    let neighbours: Vec<(u32, bool)> = [lo.saturating_sub(2), lo.saturating_sub(1), lo + 1, lo + 2]
        .into_iter()
        .filter(|&c| c >= 1 && c != lo)
        .map(|c| Ok((c, with(c, false)?)))
        .collect::<Result<_>>()?;
    let count = lo;
    let run = if count == 0 {
        // Even one stream of the first term fails: report that run.
        with(1, true)?;
        let mut c = cfg.clone();
        c.workload = cfg.workload.with_first_count(1);
        run_with(&c)?
    } else {
        with(count, true)?;
        cache
            .get_mut(&count)
            .and_then(|(_, o)| o.take())
            .expect("the answer's run is kept")
    };
    Ok(FindMax {
        count,
        run,
        neighbours,
    })
}

/// Up: bisects `lo..hi` (`lo` passes, `hi` fails), and while a count just above the
/// answer passes, searches on from there. `with(n, keep)` runs count `n` (once) and
/// says whether it passed.
fn search_up(
    mut lo: u32,
    mut hi: u32,
    with: &mut impl FnMut(u32, bool) -> Result<bool>,
) -> Result<u32> {
    loop {
        while hi - lo > 1 {
            let mid = lo + (hi - lo) / 2;
            if with(mid, false)? {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        let mut up = None;
        for c in [lo + 1, lo + 2] {
            if c <= LIMIT && with(c, false)? {
                up = Some(c);
                break;
            }
        }
        let Some(c) = up else { break };
        lo = c;
        hi = (c.saturating_mul(2)).min(LIMIT + 1);
        while hi <= LIMIT && with(hi, false)? {
            lo = hi;
            hi = hi.saturating_mul(2).min(LIMIT + 1);
        }
    }
    Ok(lo)
}

/// Down: a failing count just below the answer `lo` moves it below that count (never
/// up again, so the search ends).
fn search_down(mut lo: u32, with: &mut impl FnMut(u32, bool) -> Result<bool>) -> Result<u32> {
    while lo > 0 {
        let mut down = None;
        for c in [lo - 1, lo.saturating_sub(2)] {
            if c >= 1 && c < lo && !with(c, false)? {
                down = Some(c);
                break;
            }
        }
        match down {
            Some(c) => {
                // The count just below a failure is the new answer only if it passes.
                lo = c - 1;
                while lo > 0 && !with(lo, false)? {
                    lo -= 1;
                }
            }
            None => break,
        }
    }
    Ok(lo)
}

/// The answer of [`find_max`].
pub struct FindMax {
    /// The largest passing count of the first term (0: even one fails).
    pub count: u32,
    /// The run at that count (at 1 when `count` is 0).
    pub run: SimOutcome,
    /// The counts around the answer and whether each passed.
    pub neighbours: Vec<(u32, bool)>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::Workload;

    /// `find_max` over a made-up pass pattern: `fails` lists the counts that fail
    /// (every count above `top` fails too).
    fn search(fails: &[u32], top: u32) -> FindMax {
        let cfg = SimConfig::new(Workload::parse("1r").unwrap());
        find_max(
            &cfg,
            |c| {
                let n = c.workload.groups[0].count;
                Ok(SimOutcome {
                    streams: n,
                    deadline_misses: (n > top || fails.contains(&n)) as u64,
                    ..SimOutcome::default()
                })
            },
            |o| o.deadline_misses == 0,
        )
        .unwrap()
    }

    #[test]
    fn find_max_answers_a_count_that_passed() {
        assert_eq!(search(&[], 20).count, 20);
        // Bisection lands on 20; the failure just below moves the answer under it.
        assert_eq!(search(&[19], 20).count, 18);
        // ... and past further failures: the answer is always a count that was
        // simulated and passed (it once moved to 18 here without running it).
        let f = search(&[19, 18, 17], 20);
        assert_eq!(f.count, 16, "{:?}", f.neighbours);
        assert_eq!(f.run.streams, 16);
        assert!(f.neighbours.contains(&(17, false)) && f.neighbours.contains(&(18, false)));
        // Nothing passes.
        assert_eq!(search(&[], 0).count, 0);
    }
}
