//! The disk's power model and its energy meter: what a spinning hard disk draws while it
//! seeks, transfers, turns idle or sleeps, as a data sheet gives it (the optional
//! `power` section of a model, `disks/SCHEMA.md`), and the accounting of a run's
//! commands into joules.
//!
//! # The contract ([`EnergyMeter`])
//!
//! - `EnergyMeter::new(&power, start_ns, standby_after_ns)` starts a meter at
//!   `start_ns` with the disk spinning and idle. `power` is a model's
//!   [`DiskModel::power`](super::DiskModel::power) (a model without that section has
//!   no meter: its energy is unknown, `null` in JSON). `standby_after_ns` is the
//!   standby timer: `None` (what `sim` and `bench` use) means the disk never spins
//!   down.
//! - `meter.wake(issue_ns) -> u64`: with a standby timer, call it for every command
//!   when it is issued, before timing it. It returns how long the command must wait
//!   before the disk can start it: 0 while the disk spins; the rest of a spin-down
//!   and the whole spin-up if the timer had expired (the spin-up is charged once,
//!   from then on the disk spins). Without a timer it always returns 0 and need not be
//!   called.
//! - `meter.command(&timing)`: every served command (flushes too), in start order,
//!   with the [`AccessTiming`] the disk model gave it. Commands must not overlap
//!   (`start_ns` no earlier than the previous command's `end_ns`), and a command may
//!   not start after the standby timer expired unless `wake` was called for it; both
//!   are asserted (a broken order is a bug in the caller).
//! - `meter.report(now_ns) -> Energy`: the energy from `start_ns` to `now_ns` and how
//!   the time split (seeking, transferring, spinning inside commands, idle,
//!   spin-down, standby, spin-up). `now_ns` may fall inside the last command: its
//!   parts are then counted up to `now_ns`, in the order overhead, seek, rotation,
//!   transfer. `now_ns` inside a spin-down a command waits for, or inside a spin-up,
//!   reports up to the end of that spin-up (the span says so). The meter is not
//!   changed, so reports at increasing times can be subtracted ([`Energy::since`]) to
//!   get the energy of a window.
//!
//! # How energy is computed
//!
//! A spinning disk draws `idle_w` whenever nothing else applies: between commands, and
//! inside a command during the controller overhead and the rotational wait (the arm
//! is still and the spindle turns, exactly as when idle). It draws `seek_w` during a
//! command's `seek_ns` and `transfer_w` during its `transfer_ns` (media transfer, or
//! interface transfer for a cache hit: the drive is active either way). With a standby
//! timer, after `standby_after_ns` without a command the disk spins down
//! (`spin_down_s` at `idle_w`: the electronics stay on while the platters coast),
//! then draws `standby_w` until the next command, which first waits `spin_up_s` at
//! `spin_up_w`. All times are integer nanoseconds summed exactly; joules are computed
//! from the sums at report time, so a report is deterministic and
//! `joules = (idle_w * (idle + spinning + spin-down) + seek_w * seek + transfer_w *
//! transfer + standby_w * standby + spin_up_w * spin-up) / 1e9` holds exactly.
//!
//! Not modelled: per-zone power differences, idle sub-states (heads unloaded, reduced
//! rpm), read versus write power (one `transfer_w`), the host interface's own power
//! states.
//!
//! Fault model: none; invariants are asserted.

use super::AccessTiming;
use serde::{Deserialize, Serialize};

/// The `power` section of a disk model: watts and seconds as a data sheet gives them.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PowerModel {
    /// Spinning, heads on track, no command (also the overhead and rotational wait).
    pub idle_w: f64,
    /// While the arm seeks.
    pub seek_w: f64,
    /// While data moves (read or write).
    pub transfer_w: f64,
    /// Spindle stopped, electronics waiting for a command.
    pub standby_w: f64,
    /// Mean draw from standby to ready, and how long that takes.
    pub spin_up_w: f64,
    pub spin_up_s: f64,
    /// From the standby timer's expiry to the spindle's stop (drawn at `idle_w`).
    pub spin_down_s: f64,
}

/// Energy a disk used over a span, and where its time went (ns). The parts add up to
/// `span_ns` exactly.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct Energy {
    pub joules: f64,
    pub span_ns: u64,
    pub seek_ns: u64,
    pub transfer_ns: u64,
    /// Inside commands, neither seeking nor transferring: overhead, rotational wait.
    pub spinning_ns: u64,
    /// Between commands, spinning.
    pub idle_ns: u64,
    pub spin_down_ns: u64,
    pub standby_ns: u64,
    pub spin_up_ns: u64,
    /// Spin-ups begun.
    pub spin_ups: u64,
}

impl Energy {
    /// Mean power over the span, in watts (0 for an empty span).
    pub fn mean_w(&self) -> f64 {
        if self.span_ns == 0 {
            0.0
        } else {
            self.joules / (self.span_ns as f64 / 1e9)
        }
    }

    /// The energy of the window between an earlier report of the same meter and this
    /// one.
    pub fn since(&self, earlier: &Energy) -> Energy {
        let d = |a: u64, b: u64| {
            assert!(a >= b, "Energy::since: the earlier report is not earlier");
            a - b
        };
        Energy {
            joules: self.joules - earlier.joules,
            span_ns: d(self.span_ns, earlier.span_ns),
            seek_ns: d(self.seek_ns, earlier.seek_ns),
            transfer_ns: d(self.transfer_ns, earlier.transfer_ns),
            spinning_ns: d(self.spinning_ns, earlier.spinning_ns),
            idle_ns: d(self.idle_ns, earlier.idle_ns),
            spin_down_ns: d(self.spin_down_ns, earlier.spin_down_ns),
            standby_ns: d(self.standby_ns, earlier.standby_ns),
            spin_up_ns: d(self.spin_up_ns, earlier.spin_up_ns),
            spin_ups: d(self.spin_ups, earlier.spin_ups),
        }
    }
}

fn secs_to_ns(s: f64) -> u64 {
    (s * 1e9).round() as u64
}

/// Accounts a disk's commands into energy (see the module header for the contract).
#[derive(Clone, Debug)]
pub struct EnergyMeter {
    power: PowerModel,
    standby_after_ns: Option<u64>,
    spin_up_ns: u64,
    spin_down_ns: u64,
    start_ns: u64,
    /// Time up to which `sums` accounts (the end of the last folded interval).
    cursor_ns: u64,
    /// When the disk last became idle (a command's end, a spin-up's end, the start).
    idle_since_ns: u64,
    /// The end of the last spin-up: a command issued before it waits for it.
    ready_ns: u64,
    /// The last command, not yet folded into `sums` (a report may cut it).
    last: Option<AccessTiming>,
    sums: Energy,
}

impl EnergyMeter {
    /// A meter from `start_ns`, the disk spinning and idle; `standby_after_ns`: the
    /// standby timer (`None`: never spin down).
    pub fn new(power: &PowerModel, start_ns: u64, standby_after_ns: Option<u64>) -> Self {
        EnergyMeter {
            power: *power,
            standby_after_ns,
            spin_up_ns: secs_to_ns(power.spin_up_s),
            spin_down_ns: secs_to_ns(power.spin_down_s),
            start_ns,
            cursor_ns: start_ns,
            idle_since_ns: start_ns,
            ready_ns: start_ns,
            last: None,
            sums: Energy::default(),
        }
    }

    /// When the standby timer expires if no command comes (`None`: no timer).
    fn spin_down_at(&self) -> Option<u64> {
        self.standby_after_ns
            .map(|t| self.idle_since_ns.saturating_add(t))
    }

    /// A command issued at `issue_ns`: how long it must wait for the disk to spin
    /// (0 while it spins). Starts the spin-up if the standby timer had expired.
    pub fn wake(&mut self, issue_ns: u64) -> u64 {
        let busy_until = self.last.map_or(self.cursor_ns, |t| t.end_ns);
        if issue_ns < busy_until {
            // Busy (or spinning up): no standby can have begun.
            return self.ready_ns.saturating_sub(issue_ns);
        }
        self.fold_last();
        match self.spin_down_at() {
            Some(down) if issue_ns >= down => {
                // The spin-down, once begun, finishes; then the spindle starts again.
                let up_from = issue_ns.max(down + self.spin_down_ns);
                let mut sums = self.sums;
                self.idle_into(&mut sums, self.cursor_ns, up_from);
                sums.spin_up_ns += self.spin_up_ns;
                sums.spin_ups += 1;
                self.sums = sums;
                self.cursor_ns = up_from + self.spin_up_ns;
                self.idle_since_ns = self.cursor_ns;
                self.ready_ns = self.cursor_ns;
                self.ready_ns - issue_ns
            }
            _ => 0,
        }
    }

    /// A served command (in start order, not overlapping the previous one).
    pub fn command(&mut self, t: &AccessTiming) {
        assert!(
            t.start_ns <= t.end_ns,
            "a command ends before it starts ({} > {})",
            t.start_ns,
            t.end_ns
        );
        let parts = t.overhead_ns + t.seek_ns + t.rotation_ns + t.transfer_ns;
        assert!(
            parts <= t.end_ns - t.start_ns,
            "a command's parts ({parts} ns) exceed its span ({} ns)",
            t.end_ns - t.start_ns
        );
        self.fold_last();
        assert!(
            t.start_ns >= self.cursor_ns,
            "commands must be fed in start order without overlap: start {} before {}",
            t.start_ns,
            self.cursor_ns
        );
        if let Some(down) = self.spin_down_at() {
            assert!(
                t.start_ns < down,
                "a command starts at {} ns, after the standby timer expired at {down} ns: \
                 call EnergyMeter::wake when it is issued",
                t.start_ns
            );
        }
        let mut sums = self.sums;
        self.idle_into(&mut sums, self.cursor_ns, t.start_ns);
        self.sums = sums;
        self.cursor_ns = t.start_ns;
        self.last = Some(*t);
    }

    /// The energy from the start to `now_ns` (not before the start); the meter is not
    /// changed.
    pub fn report(&self, now_ns: u64) -> Energy {
        assert!(
            now_ns >= self.start_ns,
            "an energy report before the meter's start"
        );
        let mut sums = self.sums;
        let mut cursor = self.cursor_ns;
        if let Some(t) = &self.last {
            cursor = command_into(&mut sums, t, now_ns);
        }
        if now_ns > cursor {
            self.idle_into(&mut sums, cursor, now_ns);
        }
        let end = now_ns.max(cursor);
        sums.span_ns = end - self.start_ns;
        let parts = sums.seek_ns
            + sums.transfer_ns
            + sums.spinning_ns
            + sums.idle_ns
            + sums.spin_down_ns
            + sums.standby_ns
            + sums.spin_up_ns;
        assert_eq!(parts, sums.span_ns, "the energy meter lost time");
        let p = &self.power;
        sums.joules = (p.idle_w * (sums.idle_ns + sums.spinning_ns + sums.spin_down_ns) as f64
            + p.seek_w * sums.seek_ns as f64
            + p.transfer_w * sums.transfer_ns as f64
            + p.standby_w * sums.standby_ns as f64
            + p.spin_up_w * sums.spin_up_ns as f64)
            / 1e9;
        sums
    }

    /// Folds the last command into the sums whole.
    fn fold_last(&mut self) {
        if let Some(t) = self.last.take() {
            self.cursor_ns = command_into(&mut self.sums, &t, t.end_ns);
            self.idle_since_ns = t.end_ns;
        }
    }

    /// No command in [from, to): idle, then (with a timer) spin-down and standby.
    fn idle_into(&self, sums: &mut Energy, from: u64, to: u64) {
        assert!(from <= to, "time went backwards in the energy meter");
        let (down, standby) = match self.spin_down_at() {
            Some(d) => (d, d.saturating_add(self.spin_down_ns)),
            None => (u64::MAX, u64::MAX),
        };
        let clip = |a: u64, b: u64| b.min(to).saturating_sub(a.max(from));
        sums.idle_ns += clip(from, down);
        sums.spin_down_ns += clip(down, standby);
        sums.standby_ns += clip(standby, u64::MAX);
    }
}

/// Adds command `t` up to `until` (its parts in the order overhead, seek, rotation,
/// transfer; any remainder of its span counts as spinning); returns where it stopped.
fn command_into(sums: &mut Energy, t: &AccessTiming, until: u64) -> u64 {
    let end = until.clamp(t.start_ns, t.end_ns);
    let mut left = end - t.start_ns;
    let mut take = |n: u64| {
        let x = n.min(left);
        left -= x;
        x
    };
    sums.spinning_ns += take(t.overhead_ns);
    sums.seek_ns += take(t.seek_ns);
    sums.spinning_ns += take(t.rotation_ns);
    sums.transfer_ns += take(t.transfer_ns);
    sums.spinning_ns += left;
    end
}

#[cfg(test)]
mod tests {
    use super::*;

    const P: PowerModel = PowerModel {
        idle_w: 5.0,
        seek_w: 10.0,
        transfer_w: 8.0,
        standby_w: 1.0,
        spin_up_w: 20.0,
        spin_up_s: 2.0,
        spin_down_s: 1.0,
    };
    const MS: u64 = 1_000_000;
    const S: u64 = 1_000_000_000;

    fn cmd(start: u64, overhead: u64, seek: u64, rotation: u64, transfer: u64) -> AccessTiming {
        AccessTiming {
            start_ns: start,
            end_ns: start + overhead + seek + rotation + transfer,
            overhead_ns: overhead,
            seek_ns: seek,
            rotation_ns: rotation,
            transfer_ns: transfer,
            ..Default::default()
        }
    }

    #[test]
    fn an_idle_disk_draws_idle_power() {
        let m = EnergyMeter::new(&P, 0, None);
        let e = m.report(10 * S);
        assert_eq!(e.idle_ns, 10 * S);
        assert_eq!(e.joules, 50.0);
        assert_eq!(e.mean_w(), 5.0);
    }

    #[test]
    fn commands_are_charged_by_part() {
        let mut m = EnergyMeter::new(&P, 0, None);
        // 1 ms overhead, 4 ms seek, 3 ms rotation, 2 ms transfer from 10 ms, then a
        // flush (overhead only) from 30 ms.
        m.command(&cmd(10 * MS, MS, 4 * MS, 3 * MS, 2 * MS));
        m.command(&cmd(30 * MS, MS, 0, 0, 0));
        let e = m.report(100 * MS);
        assert_eq!(e.seek_ns, 4 * MS);
        assert_eq!(e.transfer_ns, 2 * MS);
        assert_eq!(e.spinning_ns, 5 * MS);
        assert_eq!(e.idle_ns, 89 * MS);
        // By hand: 10 W * 4 ms + 8 W * 2 ms + 5 W * (5 + 89) ms.
        let want = (10.0 * 4.0 + 8.0 * 2.0 + 5.0 * 94.0) / 1e3;
        assert!((e.joules - want).abs() < 1e-12, "{} != {want}", e.joules);
        assert_eq!(e.standby_ns + e.spin_up_ns + e.spin_ups, 0);
    }

    #[test]
    fn a_report_inside_a_command_cuts_it_in_order() {
        let mut m = EnergyMeter::new(&P, 0, None);
        m.command(&cmd(0, MS, 4 * MS, 3 * MS, 2 * MS));
        // At 3 ms: 1 ms overhead, 2 ms of the seek.
        let e = m.report(3 * MS);
        assert_eq!((e.spinning_ns, e.seek_ns, e.transfer_ns), (MS, 2 * MS, 0));
        let whole = m.report(20 * MS);
        let window = whole.since(&e);
        assert_eq!(window.span_ns, 17 * MS);
        assert_eq!(window.seek_ns, 2 * MS);
        assert_eq!(window.idle_ns, 10 * MS);
        assert!((window.joules + e.joules - whole.joules).abs() < 1e-12);
    }

    #[test]
    fn no_standby_without_a_timer() {
        let mut m = EnergyMeter::new(&P, 0, None);
        assert_eq!(m.wake(3_600 * S), 0);
        m.command(&cmd(3_600 * S, MS, 0, 0, 0));
        let e = m.report(7_200 * S);
        assert_eq!(e.standby_ns + e.spin_down_ns + e.spin_up_ns + e.spin_ups, 0);
        assert_eq!(e.idle_ns + e.spinning_ns, 7_200 * S);
    }

    #[test]
    fn standby_after_the_timer_and_one_spin_up() {
        let mut m = EnergyMeter::new(&P, 0, Some(10 * S));
        // A command at 1 s (1 ms): the timer restarts at its end.
        assert_eq!(m.wake(S), 0);
        m.command(&cmd(S, MS, 0, 0, 0));
        // Issued at 100 s: idle 10 s from 1.001 s, spin-down 1 s, standby until 100 s,
        // then a 2 s spin-up: it waits 2 s.
        assert_eq!(m.wake(100 * S), 2 * S);
        // A second command issued during the spin-up waits for its end, no second one.
        assert_eq!(m.wake(101 * S), S);
        m.command(&cmd(102 * S, MS, 0, 0, 0));
        let e = m.report(103 * S);
        assert_eq!(e.spin_ups, 1);
        assert_eq!(e.spin_up_ns, 2 * S);
        assert_eq!(e.spin_down_ns, S);
        let standby = 100 * S - (S + MS + 10 * S + S);
        assert_eq!(e.standby_ns, standby);
        assert_eq!(e.idle_ns, S + 10 * S + (S - MS));
        assert_eq!(e.spinning_ns, 2 * MS);
        let want = (5.0 * (e.idle_ns + e.spinning_ns + e.spin_down_ns) as f64
            + 1.0 * standby as f64
            + 20.0 * (2 * S) as f64)
            / 1e9;
        assert_eq!(e.joules, want);
    }

    #[test]
    fn a_command_during_the_spin_down_waits_for_it_then_the_spin_up() {
        let mut m = EnergyMeter::new(&P, 0, Some(10 * S));
        // The timer expires at 10 s, the spindle stops at 11 s: issued at 10.5 s, the
        // command waits 0.5 s of spin-down and 2 s of spin-up.
        assert_eq!(m.wake(10 * S + S / 2), S / 2 + 2 * S);
        let e = m.report(13 * S);
        assert_eq!((e.idle_ns, e.spin_down_ns, e.standby_ns), (10 * S, S, 0));
        assert_eq!(e.spin_up_ns, 2 * S);
    }

    #[test]
    #[should_panic(expected = "start order")]
    fn overlapping_commands_are_a_bug() {
        let mut m = EnergyMeter::new(&P, 0, None);
        m.command(&cmd(0, MS, 0, 0, 0));
        m.command(&cmd(MS / 2, MS, 0, 0, 0));
    }

    #[test]
    #[should_panic(expected = "call EnergyMeter::wake")]
    fn a_command_in_standby_without_wake_is_a_bug() {
        let mut m = EnergyMeter::new(&P, 0, Some(S));
        m.command(&cmd(5 * S, MS, 0, 0, 0));
    }
}
