//! The head position and the commands in flight: where C-SCAN order continues, and
//! the in-flight term of H.
//!
//! **Invariant.** Every command sent is completed: the commands counted in flight never
//! exceed the queue depth (a leak would lower every hold by phantom work, and make each
//! dispatch slower as the map grew). Asserted at every send.
//!
//! *Execution order.* The paper uses increasing LBA "equivalent to a C-SCAN policy"
//! (3.3.1) and starts a batch at R_e0 (3.3.4). We take e_0 to be the first request at
//! or after the *head position* (the end LBA of the last dispatched request), wrapping
//! to the lowest LBA after the highest: the C-SCAN order a disk head actually follows.
//! The same order is used to compute H and to run the batch, so the plan and the
//! execution agree.

use super::*;

impl<E: ServiceEstimate> Core<E> {
    /// Where the C-SCAN order starts: the head, as the user's hook places it.
    pub(super) fn sweep_lba<H: Hooks>(&self, hooks: &H) -> u64 {
        hooks.sweep_from(self.head_lba)
    }

    pub(super) fn in_flight_remaining_ns(&self, now_ns: u64) -> i64 {
        self.in_flight
            .values()
            .map(|&end| end.saturating_sub(now_ns) as i64)
            .sum()
    }

    /// The service-time estimate of `r` after the head.
    pub(super) fn estimate(&self, r: &Request) -> u64 {
        self.est
            .service_after_ns(r.lba, r.sectors, r.write, Some(self.head_lba))
    }

    /// Hands out an entry, noting where the head goes and when the disk will be free.
    pub(super) fn send(&mut self, cmd: Request, now_ns: u64) -> Pick {
        self.note_sent(&cmd, now_ns);
        Pick::Dispatch(cmd)
    }

    /// Hands out an entry as a detour: C-SCAN order goes on from where the sweep was
    /// (as after a best-effort command the guarantee forced in).
    pub(super) fn send_detour(&mut self, cmd: Request, now_ns: u64) -> Pick {
        let (head, write) = (self.head_lba, self.head_write);
        let pick = self.send(cmd, now_ns);
        (self.head_lba, self.head_write) = (head, write);
        pick
    }

    pub(super) fn note_sent(&mut self, cmd: &Request, now_ns: u64) {
        self.sent_ns.insert(cmd.id, now_ns);
        let end = now_ns + self.estimate(cmd);
        self.head_lba = cmd.end_lba();
        self.head_write = cmd.write;
        self.in_flight.insert(cmd.id, end);
        self.be_in_flight += !cmd.is_realtime() as u32;
        self.check_in_flight();
    }

    /// A best-effort command that takes the disk's time but leaves the head where the
    /// sweep was: only the time it takes counts.
    pub(super) fn note_taken(&mut self, cmd: &Request, now_ns: u64) {
        let end = now_ns + self.estimate(cmd);
        self.in_flight.insert(cmd.id, end);
        self.sent_ns.insert(cmd.id, now_ns);
        self.be_in_flight += 1;
        self.check_in_flight();
    }

    /// See the module docs.
    fn check_in_flight(&self) {
        assert!(
            self.in_flight.len() <= self.settings.queue_depth as usize,
            "{} counts {} commands in flight at queue depth {}: a command sent was never completed",
            self.name,
            self.in_flight.len(),
            self.settings.queue_depth
        );
    }

    pub(super) fn complete(&mut self, cmd: &Request, now_ns: u64) {
        if self.in_flight.remove(&cmd.id).is_some() && !cmd.is_realtime() {
            self.be_in_flight -= 1;
        }
        if !cmd.is_realtime() {
            self.be_last_ns = self.be_last_ns.max(now_ns);
        }
        let sent = self.sent_ns.remove(&cmd.id).unwrap_or(now_ns);
        let service = now_ns.saturating_sub(sent.max(self.last_complete_ns));
        self.last_complete_ns = self.last_complete_ns.max(now_ns);
        self.note_load(now_ns, if cmd.is_realtime() { service } else { 0 });
    }
}
