//! The real-time request set of `avfs` and `mixer`, ordered by LBA, with the AVFS hold
//! time (eq. 2-3) maintained in logarithmic time.
//!
//! **Invariant.** Each node's stored T_S is computed against its key-order predecessor
//! and each node's aggregates are those of its subtree, after every insert and remove;
//! a property test checks the answers against the O(n) reference.
//!
//! **What it computes.** For pending real-time requests e_0..e_{N-1} in execution order
//! (ascending LBA from the head position, wrapping once: C-SCAN), with service-time
//! estimates T_S (AVFS eq. 1) and deadlines T_D,
//!
//! ```text
//!     min_j ( T_D(e_j) - sum_{i<=j} T_S(e_i) )           (eq. 2-3 without m)
//! ```
//!
//! and the total estimated work `sum T_S`. The caller subtracts the margin m and the
//! remaining time of the request in flight to get H.
//!
//! **How.** A treap (randomized balanced search tree, deterministic seed) keyed by
//! `(lba, id)`, in an arena. Every node stores its own T_S and, for its subtree taken
//! as a sequence in key order, the sum of T_S and the minimum of `T_D - prefix sum`
//! (prefix counted from the subtree's first element), plus the minimum and maximum
//! deadline. Two subtrees concatenate in O(1):
//! `min_h(A ++ B) = min(min_h(A), min_h(B) - sum(A))`. So the whole-set value sits at
//! the root, and the value for any key range (here: keys at or above the head, and
//! keys below it, the two halves of the C-SCAN rotation) costs one O(log n) descent.
//! Insert and remove are split/merge, O(log n) expected.
//!
//! **Sequentiality.** T_S of a request depends on whether it starts where the previous
//! one in execution order ends (a = 0 in eq. 1). The stored T_S of a node is computed
//! against its *key-order predecessor* in the tree; inserting or removing a node
//! therefore also recomputes the T_S of its successor (the leftmost node of the right
//! part after the split: one more O(log n) walk). Two places in the C-SCAN rotation
//! have a different predecessor than in key order: the first request at or above the
//! head follows the head itself (the end of the last dispatched request), and the
//! lowest request (first after the wrap) follows the highest one. Both are corrected
//! at query time: changing the T_S of the first element of a range by `delta` shifts
//! every prefix of that range by `delta`, so the range's minimum moves by `-delta`.
//!
//! The same structure answers what the batch scheduler needs: the request with the
//! earliest deadline (the "deadline-ordered list" of AVFS 3.3.1, kept as a per-subtree
//! minimum instead of a second list), the next request at or after an LBA, and the next
//! one at or after an LBA whose deadline is below a bound (the reduced C-SCAN window).

use super::{Request, ServiceEstimate};

const NIL: u32 = u32::MAX;

/// Tree key: LBA first, the id breaks ties.
pub(crate) type Key = (u64, u64);

pub(crate) fn key_of(r: &Request) -> Key {
    (r.lba, r.id)
}

fn td_of(r: &Request) -> u64 {
    r.deadline_ns.unwrap_or(u64::MAX)
}

fn as_i64(v: u64) -> i64 {
    v.min(i64::MAX as u64) as i64
}

/// Aggregates of a sequence of requests in key order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Agg {
    pub count: u32,
    /// Sum of T_S, ns.
    pub sum_ts: i64,
    /// min over the sequence of `T_D(e_j) - sum_{i<=j} T_S(e_i)`, ns; `i64::MAX` if empty.
    pub min_h: i64,
    pub min_td: u64,
    pub max_td: u64,
}

impl Agg {
    const EMPTY: Agg = Agg {
        count: 0,
        sum_ts: 0,
        min_h: i64::MAX,
        min_td: u64::MAX,
        max_td: 0,
    };

    fn single(td: u64, ts: i64) -> Agg {
        Agg {
            count: 1,
            sum_ts: ts,
            min_h: as_i64(td).saturating_sub(ts),
            min_td: td,
            max_td: td,
        }
    }

    /// `self` followed by `b`.
    fn then(self, b: Agg) -> Agg {
        if b.count == 0 {
            return self;
        }
        if self.count == 0 {
            return b;
        }
        Agg {
            count: self.count + b.count,
            sum_ts: self.sum_ts + b.sum_ts,
            min_h: self.min_h.min(b.min_h.saturating_sub(self.sum_ts)),
            min_td: self.min_td.min(b.min_td),
            max_td: self.max_td.max(b.max_td),
        }
    }
}

struct Node {
    req: Request,
    /// T_S against the key-order predecessor, ns.
    ts: i64,
    prio: u64,
    left: u32,
    right: u32,
    agg: Agg,
}

/// See the module docs.
pub(crate) struct HoldTree {
    nodes: Vec<Node>,
    free: Vec<u32>,
    root: u32,
    rng: u64,
}

impl Default for HoldTree {
    fn default() -> Self {
        Self {
            nodes: Vec::new(),
            free: Vec::new(),
            root: NIL,
            rng: 0x9E37_79B9_7F4A_7C15,
        }
    }
}

/// T_S of `r` after a request ending at `prev_end` (None: no predecessor).
fn ts_after(est: &dyn ServiceEstimate, r: &Request, prev_end: Option<u64>) -> i64 {
    as_i64(est.service_after_ns(r.lba, r.sectors, r.write, prev_end))
}

impl HoldTree {
    pub fn len(&self) -> usize {
        self.agg(self.root).count as usize
    }
    pub fn is_empty(&self) -> bool {
        self.root == NIL
    }
    /// Aggregates of the whole set, in key order (no rotation, no head).
    pub fn total(&self) -> Agg {
        self.agg(self.root)
    }

    fn agg(&self, t: u32) -> Agg {
        if t == NIL {
            Agg::EMPTY
        } else {
            self.nodes[t as usize].agg
        }
    }
    fn n(&self, t: u32) -> &Node {
        &self.nodes[t as usize]
    }
    fn key(&self, t: u32) -> Key {
        key_of(&self.n(t).req)
    }
    fn pull(&mut self, t: u32) {
        let (l, r) = (self.n(t).left, self.n(t).right);
        let me = Agg::single(td_of(&self.n(t).req), self.n(t).ts);
        let agg = self.agg(l).then(me).then(self.agg(r));
        self.nodes[t as usize].agg = agg;
    }
    fn next_prio(&mut self) -> u64 {
        // xorshift64*: deterministic, so a run replays exactly.
        let mut x = self.rng;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.rng = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Splits `t` into keys `< key` and keys `>= key`.
    fn split(&mut self, t: u32, key: Key) -> (u32, u32) {
        if t == NIL {
            return (NIL, NIL);
        }
        if self.key(t) < key {
            let (a, b) = self.split(self.n(t).right, key);
            self.nodes[t as usize].right = a;
            self.pull(t);
            (t, b)
        } else {
            let (a, b) = self.split(self.n(t).left, key);
            self.nodes[t as usize].left = b;
            self.pull(t);
            (a, t)
        }
    }

    /// Concatenates `a` and `b`; every key of `a` is below every key of `b`.
    fn merge(&mut self, a: u32, b: u32) -> u32 {
        if a == NIL {
            return b;
        }
        if b == NIL {
            return a;
        }
        if self.n(a).prio > self.n(b).prio {
            let m = self.merge(self.n(a).right, b);
            self.nodes[a as usize].right = m;
            self.pull(a);
            a
        } else {
            let m = self.merge(a, self.n(b).left);
            self.nodes[b as usize].left = m;
            self.pull(b);
            b
        }
    }

    fn leftmost(&self, mut t: u32) -> u32 {
        if t == NIL {
            return NIL;
        }
        while self.n(t).left != NIL {
            t = self.n(t).left;
        }
        t
    }
    fn rightmost(&self, mut t: u32) -> u32 {
        if t == NIL {
            return NIL;
        }
        while self.n(t).right != NIL {
            t = self.n(t).right;
        }
        t
    }

    fn end_of(&self, t: u32) -> Option<u64> {
        (t != NIL).then(|| self.n(t).req.end_lba())
    }

    /// Key-order predecessor and successor of `key` (present or not), and whether it
    /// is present; read-only.
    fn neighbours(&self, key: Key) -> (u32, u32, bool) {
        let (mut t, mut pred, mut succ) = (self.root, NIL, NIL);
        while t != NIL {
            let k = self.key(t);
            if k < key {
                pred = t;
                t = self.n(t).right;
            } else if k > key {
                succ = t;
                t = self.n(t).left;
            } else {
                let n = self.n(t);
                if n.left != NIL {
                    pred = self.rightmost(n.left);
                }
                if n.right != NIL {
                    succ = self.leftmost(n.right);
                }
                return (pred, succ, true);
            }
        }
        (pred, succ, false)
    }

    fn set_ts(&mut self, t: u32, prev_end: Option<u64>, est: &dyn ServiceEstimate) {
        let ts = ts_after(est, &self.n(t).req, prev_end);
        self.nodes[t as usize].ts = ts;
    }

    /// Treap insertion of node `x` into subtree `t`: descend the search path until `x`
    /// outranks a node, then split that subtree around `x`. Every node on the search
    /// path of `x`'s key is re-pulled, and that path contains `x`'s key-order
    /// predecessor and successor.
    fn insert_in(&mut self, t: u32, x: u32) -> u32 {
        if t == NIL {
            return x;
        }
        let key = self.key(x);
        if self.n(x).prio > self.n(t).prio {
            let (l, r) = self.split(t, key);
            let node = &mut self.nodes[x as usize];
            node.left = l;
            node.right = r;
            self.pull(x);
            return x;
        }
        if key < self.key(t) {
            let c = self.insert_in(self.n(t).left, x);
            self.nodes[t as usize].left = c;
        } else {
            let c = self.insert_in(self.n(t).right, x);
            self.nodes[t as usize].right = c;
        }
        self.pull(t);
        t
    }

    /// Removes the node with `key` (present) from subtree `t`; returns the new subtree
    /// root and the removed node.
    fn remove_in(&mut self, t: u32, key: Key) -> (u32, u32) {
        let k = self.key(t);
        if k == key {
            let (l, r) = (self.n(t).left, self.n(t).right);
            return (self.merge(l, r), t);
        }
        let gone = if key < k {
            let (c, gone) = self.remove_in(self.n(t).left, key);
            self.nodes[t as usize].left = c;
            gone
        } else {
            let (c, gone) = self.remove_in(self.n(t).right, key);
            self.nodes[t as usize].right = c;
            gone
        };
        self.pull(t);
        (t, gone)
    }

    /// Re-pulls the nodes on the search path of `key`.
    fn repull_path(&mut self, t: u32, key: Key) {
        if t == NIL {
            return;
        }
        let k = self.key(t);
        if key < k {
            self.repull_path(self.n(t).left, key);
        } else if key > k {
            self.repull_path(self.n(t).right, key);
        }
        self.pull(t);
    }

    /// Inserts a request (its key must not be present).
    pub fn insert(&mut self, req: Request, est: &dyn ServiceEstimate) {
        let key = key_of(&req);
        let (pred, succ, found) = self.neighbours(key);
        assert!(!found, "hold tree: duplicate key {key:?}");
        let ts = ts_after(est, &req, self.end_of(pred));
        let end = req.end_lba();
        let node = Node {
            ts,
            prio: self.next_prio(),
            left: NIL,
            right: NIL,
            agg: Agg::single(td_of(&req), ts),
            req,
        };
        let idx = match self.free.pop() {
            Some(i) => {
                self.nodes[i as usize] = node;
                i
            }
            None => {
                self.nodes.push(node);
                u32::try_from(self.nodes.len() - 1).expect("hold tree arena over 2^32 nodes")
            }
        };
        if succ != NIL {
            // The successor now follows the new request. It lies on the search path,
            // so the insertion below re-pulls it and its ancestors.
            self.set_ts(succ, Some(end), est);
        }
        self.root = self.insert_in(self.root, idx);
    }

    /// Removes and returns the request with this key.
    pub fn remove(&mut self, key: Key, est: &dyn ServiceEstimate) -> Option<Request> {
        let (pred, succ, found) = self.neighbours(key);
        if !found {
            return None;
        }
        // The successor is either an ancestor of the removed node (re-pulled by the
        // removal walk) or the leftmost node of its right subtree, which the merge
        // may not walk down to: re-pull its path afterwards.
        let mut succ_key = None;
        if succ != NIL {
            self.set_ts(succ, self.end_of(pred), est);
            succ_key = Some(self.key(succ));
        }
        let (root, gone) = self.remove_in(self.root, key);
        self.root = root;
        if let Some(sk) = succ_key {
            self.repull_path(self.root, sk);
        }
        self.free.push(gone);
        let dead = &mut self.nodes[gone as usize];
        dead.left = NIL;
        dead.right = NIL;
        Some(dead.req)
    }

    /// Moves every request out, leaving the tree empty (O(1): the arena moves).
    pub fn take_all(&mut self) -> HoldTree {
        std::mem::take(self)
    }

    /// The request with the lowest key.
    pub fn first(&self) -> Option<&Request> {
        let t = self.leftmost(self.root);
        (t != NIL).then(|| &self.n(t).req)
    }

    /// The first request with key `>= key`.
    pub fn first_ge(&self, key: Key) -> Option<&Request> {
        let t = self.first_ge_idx(key);
        (t != NIL).then(|| &self.n(t).req)
    }

    fn first_ge_idx(&self, key: Key) -> u32 {
        let (mut t, mut best) = (self.root, NIL);
        while t != NIL {
            if self.key(t) >= key {
                best = t;
                t = self.n(t).left;
            } else {
                t = self.n(t).right;
            }
        }
        best
    }

    /// The last request with key `< key`.
    pub fn last_lt(&self, key: Key) -> Option<&Request> {
        let (mut t, mut best) = (self.root, NIL);
        while t != NIL {
            if self.key(t) < key {
                best = t;
                t = self.n(t).right;
            } else {
                t = self.n(t).left;
            }
        }
        (best != NIL).then(|| &self.n(best).req)
    }

    /// C-SCAN successor: the first request at or after LBA `head`, else the lowest.
    pub fn cscan_next(&self, head: u64) -> Option<&Request> {
        self.first_ge((head, 0)).or_else(|| self.first())
    }

    /// The request with the earliest deadline (lowest LBA among equal deadlines).
    pub fn earliest_deadline(&self) -> Option<&Request> {
        let mut t = self.root;
        if t == NIL {
            return None;
        }
        let want = self.agg(t).min_td;
        loop {
            let n = self.n(t);
            if n.left != NIL && self.agg(n.left).min_td == want {
                t = n.left;
            } else if td_of(&n.req) == want {
                return Some(&n.req);
            } else {
                t = n.right;
            }
        }
    }

    /// The first request in key order within subtree `t` whose deadline is `< bound`.
    fn leftmost_td_below(&self, t: u32, bound: u64) -> u32 {
        let mut t = t;
        loop {
            if t == NIL || self.agg(t).min_td >= bound {
                return NIL;
            }
            let n = self.n(t);
            if n.left != NIL && self.agg(n.left).min_td < bound {
                t = n.left;
            } else if td_of(&n.req) < bound {
                return t;
            } else {
                t = n.right;
            }
        }
    }

    fn first_ge_td_below_in(&self, t: u32, key: Key, bound: u64) -> u32 {
        if t == NIL || self.agg(t).min_td >= bound {
            return NIL;
        }
        let n = self.n(t);
        if self.key(t) >= key {
            let found = self.first_ge_td_below_in(n.left, key, bound);
            if found != NIL {
                return found;
            }
            if td_of(&n.req) < bound {
                return t;
            }
            self.leftmost_td_below(n.right, bound)
        } else {
            self.first_ge_td_below_in(n.right, key, bound)
        }
    }

    /// C-SCAN successor among the requests with deadline `< bound` (the reduced window).
    pub fn cscan_next_td_below(&self, head: u64, bound: u64) -> Option<&Request> {
        let mut t = self.first_ge_td_below_in(self.root, (head, 0), bound);
        if t == NIL {
            t = self.leftmost_td_below(self.root, bound);
        }
        (t != NIL).then(|| &self.n(t).req)
    }

    /// Aggregates of the keys `< key` and `>= key` of subtree `t`, and the first node
    /// `>= key`, in one descent.
    fn split_aggs(&self, t: u32, key: Key) -> (Agg, Agg, u32) {
        if t == NIL {
            return (Agg::EMPTY, Agg::EMPTY, NIL);
        }
        let n = self.n(t);
        let me = Agg::single(td_of(&n.req), n.ts);
        if self.key(t) >= key {
            let (lt, ge, first) = self.split_aggs(n.left, key);
            let first = if first == NIL { t } else { first };
            (lt, ge.then(me).then(self.agg(n.right)), first)
        } else {
            let (lt, ge, first) = self.split_aggs(n.right, key);
            (self.agg(n.left).then(me).then(lt), ge, first)
        }
    }

    /// `(min_j (T_D(e_j) - sum_{i<=j} T_S(e_i)), sum T_S)` over the C-SCAN order from
    /// LBA `head` (the first request at or above `head` follows the head; the lowest
    /// request follows the highest one); `None` when empty. O(log n).
    pub fn hold_and_work(&self, head: u64, est: &dyn ServiceEstimate) -> Option<(i64, i64)> {
        if self.root == NIL {
            return None;
        }
        let split = (head, 0);
        let (below, above, first_above) = self.split_aggs(self.root, split);
        let (mut best, mut offset, mut prev_end) = (i64::MAX, 0i64, head);
        if above.count > 0 {
            let a0 = self.n(first_above);
            let delta = ts_after(est, &a0.req, Some(head)) - a0.ts;
            best = above.min_h.saturating_sub(delta);
            offset = above.sum_ts + delta;
            prev_end = self.n(self.rightmost(self.root)).req.end_lba();
        }
        if below.count > 0 {
            let b0 = self.n(self.leftmost(self.root));
            let delta = ts_after(est, &b0.req, Some(prev_end)) - b0.ts;
            best = best.min(below.min_h.saturating_sub(delta + offset));
            offset += below.sum_ts + delta;
        }
        Some((best, offset))
    }

    /// The request with `key`, if it is in the set. O(log n).
    pub fn get(&self, key: Key) -> Option<&Request> {
        self.first_ge(key).filter(|r| key_of(r) == key)
    }

    /// The estimated service time of the requests the C-SCAN order from LBA `head`
    /// serves before the one with `key` (key-order service times: the seek from the
    /// head to the first of them is not counted). O(log n).
    pub fn cscan_work_before(&self, head: u64, key: Key) -> i64 {
        let prefix = |k: Key| self.split_aggs(self.root, k).0.sum_ts;
        let split = (head, 0);
        if key >= split {
            prefix(key) - prefix(split)
        } else {
            (self.total().sum_ts - prefix(split)) + prefix(key)
        }
    }

    /// All requests in key order (tests; O(n)).
    #[cfg(test)]
    pub fn to_vec(&self) -> Vec<Request> {
        let mut out = Vec::with_capacity(self.len());
        let mut stack = Vec::new();
        let mut t = self.root;
        while t != NIL || !stack.is_empty() {
            while t != NIL {
                stack.push(t);
                t = self.n(t).left;
            }
            let top = stack.pop().expect("non-empty stack");
            out.push(self.n(top).req);
            t = self.n(top).right;
        }
        out
    }
}

/// The O(n) reference for [`HoldTree::hold_and_work`]: sort, rotate at the head, walk.
#[cfg(test)]
pub(crate) fn naive_hold_and_work(
    reqs: &[Request],
    head: u64,
    est: &dyn ServiceEstimate,
) -> Option<(i64, i64)> {
    if reqs.is_empty() {
        return None;
    }
    let mut sorted: Vec<&Request> = reqs.iter().collect();
    sorted.sort_by_key(|r| key_of(r));
    let cut = sorted.partition_point(|r| r.lba < head);
    sorted.rotate_left(cut);
    let (mut best, mut prefix, mut prev_end) = (i64::MAX, 0i64, head);
    for r in sorted {
        prefix += ts_after(est, r, Some(prev_end));
        best = best.min(as_i64(td_of(r)) - prefix);
        prev_end = r.end_lba();
    }
    Some((best, prefix))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sched::testing::LinearEstimate;
    use proptest::prelude::*;

    fn req(id: u64, lba: u64, sectors: u32, td: u64) -> Request {
        Request {
            id,
            lba,
            sectors,
            write: id.is_multiple_of(3),
            class: crate::sched::Class::RealTime,
            deadline_ns: Some(td),
            owner: 0,
            submit_ns: 0,
            drop_if_late: false,
        }
    }

    #[derive(Debug, Clone)]
    enum Op {
        Insert { lba: u64, sectors: u32, td: u64 },
        Remove(usize),
        Head(u64),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => (0u64..64, prop_oneof![Just(8u32), Just(16u32)], 0u64..4_000_000_000)
                .prop_map(|(l, s, td)| Op::Insert { lba: l * 8, sectors: s, td }),
            2 => any::<prop::sample::Index>().prop_map(|i| Op::Remove(i.index(usize::MAX))),
            1 => (0u64..70).prop_map(|h| Op::Head(h * 8)),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]
        #[test]
        fn tree_hold_equals_naive_hold(ops in prop::collection::vec(op(), 1..200)) {
            let est = LinearEstimate::default();
            let mut tree = HoldTree::default();
            let mut model: Vec<Request> = Vec::new();
            let mut head = 0u64;
            let mut next_id = 1u64;
            for op in ops {
                match op {
                    Op::Insert { lba, sectors, td } => {
                        let r = req(next_id, lba, sectors, td);
                        next_id += 1;
                        tree.insert(r, &est);
                        model.push(r);
                    }
                    Op::Remove(i) => {
                        if !model.is_empty() {
                            let r = model.swap_remove(i % model.len());
                            prop_assert_eq!(tree.remove(key_of(&r), &est), Some(r));
                        }
                    }
                    Op::Head(h) => head = h,
                }
                prop_assert_eq!(tree.len(), model.len());
                prop_assert_eq!(
                    tree.hold_and_work(head, &est),
                    naive_hold_and_work(&model, head, &est)
                );
                let earliest = model.iter().map(td_of).min();
                prop_assert_eq!(tree.earliest_deadline().map(td_of), earliest);
                let bound = 2_000_000_000;
                let naive_next = {
                    let mut c: Vec<&Request> = model.iter().filter(|r| td_of(r) < bound).collect();
                    c.sort_by_key(|r| key_of(r));
                    c.iter().find(|r| r.lba >= head).or(c.first()).map(|r| key_of(r))
                };
                prop_assert_eq!(tree.cscan_next_td_below(head, bound).map(key_of), naive_next);
                if let Some(r) = model.first() {
                    prop_assert_eq!(tree.get(key_of(r)), Some(r));
                    prop_assert_eq!(
                        tree.cscan_work_before(head, key_of(r)),
                        naive_work_before(&model, head, key_of(r), &est)
                    );
                }
                prop_assert_eq!(tree.get((u64::MAX, 0)), None);
            }
            let mut sorted = model.clone();
            sorted.sort_by_key(key_of);
            prop_assert_eq!(tree.to_vec(), sorted);
        }
    }

    /// [`HoldTree::cscan_work_before`] the long way: each request's service time after
    /// its key-order predecessor, summed over the requests C-SCAN order from `head`
    /// serves before `key`.
    fn naive_work_before(reqs: &[Request], head: u64, key: Key, est: &dyn ServiceEstimate) -> i64 {
        let mut sorted: Vec<&Request> = reqs.iter().collect();
        sorted.sort_by_key(|r| key_of(r));
        let ts: Vec<(Key, i64)> = sorted
            .iter()
            .enumerate()
            .map(|(i, r)| {
                let prev = i.checked_sub(1).map(|p| sorted[p].end_lba());
                (key_of(r), ts_after(est, r, prev))
            })
            .collect();
        let split = (head, 0);
        let before = |k: Key| {
            if key >= split {
                k >= split && k < key
            } else {
                k >= split || k < key
            }
        };
        ts.iter().filter(|(k, _)| before(*k)).map(|(_, t)| t).sum()
    }

    #[test]
    fn sequential_successor_is_recomputed_on_insert_and_remove() {
        let est = LinearEstimate::default();
        let mut t = HoldTree::default();
        t.insert(req(1, 1000, 8, 10_000_000_000), &est);
        t.insert(req(2, 1016, 8, 10_000_000_000), &est);
        let (_, w_gap) = t.hold_and_work(1000, &est).unwrap();
        // Filling the gap makes request 2 sequential: its seek disappears.
        t.insert(req(3, 1008, 8, 10_000_000_000), &est);
        let (_, w_filled) = t.hold_and_work(1000, &est).unwrap();
        let one = est.service_ns(1008, 8, true, true) as i64;
        assert_eq!(w_filled, w_gap + one - 13_000_000);
        t.remove((1008, 3), &est);
        assert_eq!(t.hold_and_work(1000, &est).unwrap().1, w_gap);
    }
}
