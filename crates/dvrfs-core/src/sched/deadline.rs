//! `deadline`: deadline-like, a model of Linux mq-deadline (block/mq-deadline.c). Not
//! the kernel code; reports call it "deadline-like".
//!
//! **Invariant.** Every queued entry is in both its direction's LBA-sorted queue and its
//! expiry FIFO, or in neither.
//!
//! Rules, as `dd_dispatch_request` does them (single priority class):
//! - reads and writes each wait in an LBA-sorted queue and in a FIFO by expiry time,
//!   the expiry being `submit + READ_EXPIRE_NS` for reads and `submit + WRITE_EXPIRE_NS`
//!   for writes (measured from submission, since the engine hands requests straight to
//!   the scheduler);
//! - while a batch lasts (fewer than `FIFO_BATCH` requests dispatched in the current
//!   direction) the next request in that direction's sorted queue at or after the end
//!   of the previous one is served;
//! - otherwise a new batch starts: reads are preferred, unless writes are waiting and
//!   reads have already been preferred `WRITES_STARVED` times in a row, in which case
//!   writes get the batch. The batch starts at the head of the FIFO if its oldest
//!   request has expired (or nothing lies ahead in sort order), else at the next request
//!   in sort order ("one-way elevator", no wrap, as the kernel does for non-zoned disks).
//!
//! Request deadlines do *not* influence the order (the kernel knows nothing of them);
//! only the framework's rule applies: a read whose AVFS deadline has passed when it is
//! picked is failed instead of sent. Merging comes from the framework, as the block
//! layer gives it to mq-deadline (a merged request keeps the earliest expiry, as
//! `dd_merged_requests` does).
//!
//! Not modelled: priority classes and their aging, zoned-device write locking,
//! `async_depth`.

use super::*;
use std::collections::BTreeMap;

/// mq-deadline `read_expire`: max time before a read is served ahead of sort order.
pub const READ_EXPIRE_NS: u64 = 500_000_000;
/// mq-deadline `write_expire`: the same for writes, 5 s.
pub const WRITE_EXPIRE_NS: u64 = 5_000_000_000;
/// mq-deadline `fifo_batch`: requests dispatched in one direction before re-deciding.
pub const FIFO_BATCH: u32 = 16;
/// mq-deadline `writes_starved`: read batches allowed while writes wait.
pub const WRITES_STARVED: u32 = 2;

const READ: usize = 0;
const WRITE: usize = 1;

#[derive(Default)]
struct DirQueue {
    /// (lba, id) -> request.
    sorted: BTreeMap<(u64, ReqId), Request>,
    /// (expiry, id) -> lba.
    fifo: BTreeMap<(u64, ReqId), u64>,
    /// End LBA of the last request dispatched in this direction.
    latest_pos: u64,
}

fn expiry(r: &Request) -> u64 {
    let expire = if r.write {
        WRITE_EXPIRE_NS
    } else {
        READ_EXPIRE_NS
    };
    r.submit_ns.saturating_add(expire)
}

impl DirQueue {
    fn take(&mut self, key: (u64, ReqId)) -> Request {
        let r = self.sorted.remove(&key).expect("sorted key present");
        self.fifo.remove(&(expiry(&r), r.id));
        r
    }
    fn next_in_sort(&self) -> Option<(u64, ReqId)> {
        self.sorted
            .range((self.latest_pos, 0)..)
            .next()
            .map(|(k, _)| *k)
    }
    fn fifo_head(&self) -> Option<(u64, ReqId)> {
        self.fifo
            .first_key_value()
            .map(|(&(_, id), &lba)| (lba, id))
    }
    fn fifo_expired(&self, now_ns: u64) -> bool {
        self.fifo
            .first_key_value()
            .is_some_and(|(&(exp, _), _)| exp <= now_ns)
    }
}

pub struct Deadline {
    dirs: [DirQueue; 2],
    last_dir: usize,
    batching: u32,
    starved: u32,
}

impl Default for Deadline {
    fn default() -> Self {
        Self::new()
    }
}

impl Deadline {
    pub fn new() -> Self {
        Self {
            dirs: Default::default(),
            last_dir: READ,
            // The first dispatch decides a direction instead of continuing a batch.
            batching: FIFO_BATCH,
            starved: 0,
        }
    }

    fn pick(&mut self, now_ns: u64) -> Option<(usize, (u64, ReqId))> {
        if self.batching < FIFO_BATCH {
            if let Some(k) = self.dirs[self.last_dir].next_in_sort() {
                return Some((self.last_dir, k));
            }
        }
        let reads = !self.dirs[READ].sorted.is_empty();
        let writes = !self.dirs[WRITE].sorted.is_empty();
        let dir = if reads {
            if writes && self.starved >= WRITES_STARVED {
                self.starved = 0;
                WRITE
            } else {
                if writes {
                    self.starved += 1;
                }
                READ
            }
        } else if writes {
            self.starved = 0;
            WRITE
        } else {
            return None;
        };
        let q = &self.dirs[dir];
        let key = match q.next_in_sort() {
            Some(k) if !q.fifo_expired(now_ns) => k,
            _ => q.fifo_head().expect("direction has requests"),
        };
        self.batching = 0;
        Some((dir, key))
    }
}

impl Policy for Deadline {
    fn name(&self) -> &'static str {
        "deadline"
    }
    fn insert(&mut self, req: Request, _now_ns: u64) {
        let q = &mut self.dirs[if req.write { WRITE } else { READ }];
        q.fifo.insert((expiry(&req), req.id), req.lba);
        q.sorted.insert((req.lba, req.id), req);
    }
    fn remove(&mut self, req: &Request) -> bool {
        let q = &mut self.dirs[if req.write { WRITE } else { READ }];
        q.fifo.remove(&(expiry(req), req.id));
        q.sorted.remove(&(req.lba, req.id)).is_some()
    }
    fn dispatch(&mut self, now_ns: u64, _free_slots: u32) -> Pick {
        let Some((dir, key)) = self.pick(now_ns) else {
            return Pick::Wait { until_ns: None };
        };
        let r = self.dirs[dir].take(key);
        self.last_dir = dir;
        self.batching += 1;
        self.dirs[dir].latest_pos = r.end_lba();
        Pick::Dispatch(r)
    }
    fn complete(&mut self, _cmd: &Request, _now_ns: u64) {}
    fn queued(&self) -> u64 {
        (self.dirs[READ].sorted.len() + self.dirs[WRITE].sorted.len()) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    fn req(id: u64, lba: u64, write: bool, submit_ns: u64) -> Request {
        Request {
            id,
            lba,
            sectors: 8,
            write,
            class: Class::BestEffort,
            deadline_ns: None,
            owner: 0,
            submit_ns,
            drop_if_late: false,
        }
    }

    fn drain(s: &mut Deadline, now_ns: u64, n: usize) -> Vec<u64> {
        (0..n)
            .map(|_| match s.dispatch(now_ns, 1) {
                Pick::Dispatch(r) => r.id,
                d => panic!("{d:?}"),
            })
            .collect()
    }

    #[test]
    fn reads_batch_in_sort_order_and_writes_get_a_turn_after_two_read_batches() {
        let mut s = Deadline::new();
        // 40 reads, 5 writes, nothing expired.
        for i in 0..40 {
            s.insert(req(i, 1000 + i * 8, false, 0), 0);
        }
        for i in 0..5 {
            s.insert(req(100 + i, 50_000 + i * 8, true, 0), 0);
        }
        let ids = drain(&mut s, 0, 45);
        // Read batch 1 (starved=1), read batch 2 (starved=2): 32 reads in LBA order;
        // then the writes (batch of 5); then the remaining reads.
        assert_eq!(ids[..32], (0..32).collect::<Vec<_>>()[..]);
        assert_eq!(ids[32..37], [100, 101, 102, 103, 104]);
        assert_eq!(ids[37..], (32..40).collect::<Vec<_>>()[..]);
    }

    #[test]
    fn an_expired_fifo_head_starts_the_next_batch() {
        let mut s = Deadline::new();
        s.insert(req(1, 9_000, false, 0), 0); // old read, far away
        for i in 0..20 {
            s.insert(req(10 + i, 100 + i * 8, false, 400 * MS), 400 * MS);
        }
        // At 450 ms nothing has expired: sort order from 0 -> the young reads first.
        let first = drain(&mut s, 450 * MS, 16);
        assert_eq!(first[0], 10);
        assert!(!first.contains(&1));
        // At 600 ms request 1 (expired at 500 ms) starts the next batch.
        assert_eq!(drain(&mut s, 600 * MS, 1), vec![1]);
    }

    #[test]
    fn deadlines_do_not_order() {
        let mut s = Deadline::new();
        let mut a = req(1, 100, false, 0);
        a.class = Class::RealTime;
        a.deadline_ns = Some(10 * MS);
        let mut b = req(2, 50, false, 0);
        b.class = Class::RealTime;
        b.deadline_ns = Some(5_000 * MS);
        s.insert(a, 0);
        s.insert(b, 0);
        assert!(matches!(s.dispatch(0, 1), Pick::Dispatch(r) if r.id == 2));
        assert!(matches!(s.dispatch(20 * MS, 1), Pick::Dispatch(r) if r.id == 1));
        assert_eq!(s.queued(), 0);
    }
}
