//! The best-effort queue (AVFS 3.3.5): best-effort requests in LBA order and in
//! submission order, served C-SCAN from the head with aging.
//!
//! **Invariant.** Every best-effort entry is in both indexes (by LBA and by age) or in
//! neither.
//!
//! *Best effort (3.3.5).* BE requests are served in increasing LBA order from the head
//! (C-SCAN), "starting from the end LBA of the last request executed (either real-time
//! or best-effort)". Aging, which the paper requires but does not specify: a BE request
//! that has waited at least [`SchedSettings::be_max_age_ns`] (default 1 s) since its
//! submission is served before younger ones, oldest first.

use super::*;

impl<E: ServiceEstimate> Core<E> {
    /// Queues a best-effort request.
    pub(super) fn queue_be(&mut self, req: Request, now_ns: u64) {
        self.be_last_ns = self.be_last_ns.max(now_ns);
        self.be_by_age.insert((req.submit_ns, req.id), req.lba);
        self.be_by_lba.insert(key_of(&req), req);
    }

    /// Takes a queued best-effort request out; false if it is not queued.
    pub(super) fn remove_be(&mut self, req: &Request) -> bool {
        if self.be_by_lba.remove(&key_of(req)).is_none() {
            return false;
        }
        self.be_by_age.remove(&(req.submit_ns, req.id));
        true
    }

    /// Takes the queued best-effort request with `key` out.
    pub(super) fn take_be(&mut self, key: Key) -> Request {
        let r = self.be_by_lba.remove(&key).expect("BE key present");
        self.be_by_age.remove(&(r.submit_ns, r.id));
        r
    }

    /// The next best-effort request: the oldest once it has aged, else C-SCAN from the
    /// head.
    pub(super) fn be_next(&self, now_ns: u64) -> Option<Key> {
        let (&(submit, id), &lba) = self.be_by_age.first_key_value()?;
        if now_ns.saturating_sub(submit) >= self.settings.be_max_age_ns {
            return Some((lba, id));
        }
        self.be_by_lba
            .range((self.head_lba, 0)..)
            .next()
            .or_else(|| self.be_by_lba.first_key_value())
            .map(|(k, _)| *k)
    }

    /// Whether best effort has work: a request queued or a command in flight.
    pub(super) fn be_active(&self) -> bool {
        !self.be_by_lba.is_empty() || self.be_in_flight > 0
    }
}

impl<E: ServiceEstimate, H: Hooks> TrafficMixer<E, H> {
    /// Sends a best-effort request between batches: the disk's time went to best
    /// effort, which the hooks note as slack.
    pub(super) fn send_be(&mut self, key: Key, now_ns: u64) -> Pick {
        self.core.stats.best_effort_dispatches += 1;
        self.hooks.slack();
        let r = self.core.take_be(key);
        self.core.send(r, now_ns)
    }
}
