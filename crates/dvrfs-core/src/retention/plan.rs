//! Which chunks go, and why: the precedence applied to a [`Snapshot`].
//!
//! 1. **Space admitted recordings need** (`need_free_bytes`: what the engine's
//!    recordings will write beyond what is free): the oldest chunks go until it is
//!    free, whatever their min-age; only protected and open chunks stay. Then,
//!    if that is not enough, chunks only playbacks hold (their pins yield, rule 6:
//!    the deletion is marked `expire`, the engine tells the playbacks "range
//!    expired"), the oldest first. What cannot be freed is the plan's
//!    `shortfall_bytes` (the engine refuses at admission what would make one).
//! 2. **Protected** chunks are never deleted, by any rule; **open** ones (being
//!    recorded, read, or held through the mount) neither, while they are.
//! 3. **max-age**: a chunk whose end is older than its stream's `max_age` goes, free
//!    space or not.
//! 4. **max-size**: a stream whose chunks' lengths add up to more than its
//!    `max_bytes` loses its oldest chunks until they add up to at most that (its
//!    open chunks count, and stay).
//! 5. **high and low**: with the volume's use above `high`, the oldest chunks of all
//!    streams go until it is at most `low`; chunks past their stream's `min_age` first
//!    (by start), then younger ones, whose streams are reported in `min_age_unmet`.
//!
//! "Oldest" is by start UTC, then by stream path, then by name: the same snapshot
//! always gives the same plan. A chunk is deleted once, for the first rule that
//! takes it.

use std::collections::BTreeSet;

use crate::format::events::DeleteCause;
use crate::format::superblock::VolumeRetention;
use crate::meta::Ino;

use super::snapshot::Snapshot;

/// One chunk to delete.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Deletion {
    /// Its stream's directory.
    pub dir: Ino,
    pub ino: Ino,
    pub name: Vec<u8>,
    pub bytes: u64,
    pub cause: DeleteCause,
    /// Held by playbacks only, whose pins yield to a recording's need (rule 6):
    /// they are told "range expired" and the chunk goes.
    pub expire: bool,
}

/// What the planner is given.
#[derive(Clone, Copy, Debug)]
pub struct PlanInput<'a> {
    pub snapshot: &'a Snapshot,
    pub volume: VolumeRetention,
    pub now_utc_ns: i64,
    /// Bytes that must be free once the plan has run (rule 1); 0: none.
    pub need_free_bytes: u64,
}

/// The planner's answer.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Plan {
    /// In the order they should go.
    pub deletions: Vec<Deletion>,
    /// The volume's use once they have gone.
    pub in_use_after: u64,
    /// Of `need_free_bytes`, what no deletion allowed could free.
    pub shortfall_bytes: u64,
    /// Streams (directories) that lost chunks younger than their min-age to the
    /// high mark or to a recording's need.
    pub min_age_unmet: Vec<Ino>,
    /// Above the high mark still (every chunk that may go has gone): the bytes over.
    pub over_high_bytes: u64,
    /// When (UTC) the next chunk that stays passes its stream's max-age: the next
    /// plan is due then (a time-shift ring keeps exactly its length plus a chunk).
    pub next_max_age_utc_ns: Option<i64>,
}

/// A candidate: (stream, chunk) indexes into the snapshot.
type At = (usize, usize);

/// See the module docs.
pub fn plan(input: PlanInput<'_>) -> Plan {
    let s = input.snapshot;
    let mut gone: BTreeSet<At> = BTreeSet::new();
    let mut out = Plan::default();
    let mut in_use = s.in_use_bytes;
    let take = |at: At, cause: DeleteCause, gone: &mut BTreeSet<At>, out: &mut Plan| {
        if !gone.insert(at) {
            return 0;
        }
        let (st, c) = (&s.streams[at.0], &s.streams[at.0].chunks[at.1]);
        out.deletions.push(Deletion {
            dir: st.dir,
            ino: c.ino,
            name: c.name.clone(),
            bytes: c.bytes,
            cause,
            expire: c.busy,
        });
        c.bytes
    };
    let may_go = |at: At| {
        let c = &s.streams[at.0].chunks[at.1];
        !c.busy && !c.protected
    };
    // 3. max-age.
    let (old, next) = past_max_age(s, input.now_utc_ns, &may_go);
    out.next_max_age_utc_ns = next;
    for at in old {
        in_use -= take(at, DeleteCause::MaxAge, &mut gone, &mut out).min(in_use);
    }
    // 4. max-size.
    for (i, st) in s.streams.iter().enumerate() {
        let Some((_, p)) = st.policy.filter(|(_, p)| p.max_bytes > 0) else {
            continue;
        };
        let mut length: u64 = st
            .chunks
            .iter()
            .enumerate()
            .filter(|(j, _)| !gone.contains(&(i, *j)))
            .map(|(_, c)| c.size_bytes)
            .sum();
        for (j, c) in st.chunks.iter().enumerate() {
            if length <= p.max_bytes {
                break;
            }
            if may_go((i, j)) && !gone.contains(&(i, j)) {
                let freed = take((i, j), DeleteCause::MaxSize, &mut gone, &mut out);
                length -= c.size_bytes;
                in_use -= freed.min(in_use);
            }
        }
    }
    // 5 and 1: the oldest first, past min-age before younger.
    let order = oldest_first(s, input.now_utc_ns, &gone, &may_go);
    let v = input.volume;
    let mark = |permille: u16| (u128::from(s.data_bytes) * u128::from(permille) / 1000) as u64;
    if v.high_permille > 0 && in_use > mark(v.high_permille) {
        let low = mark(v.low_permille);
        for &(at, young) in &order {
            if in_use <= low {
                break;
            }
            in_use -= take(at, DeleteCause::HighWater, &mut gone, &mut out).min(in_use);
            if young {
                out.min_age_unmet.push(s.streams[at.0].dir);
            }
        }
        out.over_high_bytes = in_use.saturating_sub(mark(v.high_permille));
    }
    // 1, then 6: what recordings need, then chunks whose pins yield to it.
    let may_yield = |at: At| {
        let c = &s.streams[at.0].chunks[at.1];
        c.busy && c.yields && !c.protected
    };
    let yielding = oldest_first(s, input.now_utc_ns, &gone, &may_yield);
    let free = |in_use: u64| s.data_bytes.saturating_sub(in_use);
    for &(at, young) in order.iter().chain(&yielding) {
        if free(in_use) >= input.need_free_bytes {
            break;
        }
        if gone.contains(&at) {
            continue;
        }
        in_use -= take(at, DeleteCause::Needed, &mut gone, &mut out).min(in_use);
        if young {
            out.min_age_unmet.push(s.streams[at.0].dir);
        }
    }
    out.shortfall_bytes = input.need_free_bytes.saturating_sub(free(in_use));
    out.in_use_after = in_use;
    out.min_age_unmet.sort_unstable();
    out.min_age_unmet.dedup();
    out
}

/// The chunks that may go and are past their stream's max-age, and when (UTC) the
/// next one that stays will be: the first instant its end is older than max-age.
fn past_max_age(s: &Snapshot, now: i64, may_go: &dyn Fn(At) -> bool) -> (Vec<At>, Option<i64>) {
    let (mut old, mut next) = (vec![], None::<i64>);
    for (i, st) in s.streams.iter().enumerate() {
        let Some((_, p)) = st.policy.filter(|(_, p)| p.max_age_s > 0) else {
            continue;
        };
        let age_ns = i64::from(p.max_age_s) * 1_000_000_000;
        let cutoff = now.saturating_sub(age_ns);
        for (j, c) in st.chunks.iter().enumerate() {
            if !may_go((i, j)) {
                continue;
            }
            if c.end_utc_ns < cutoff {
                old.push((i, j));
            } else {
                let at = c.end_utc_ns.saturating_add(age_ns).saturating_add(1);
                next = Some(next.map_or(at, |n| n.min(at)));
            }
        }
    }
    (old, next)
}

/// Every chunk that may go and has not, oldest first: those past their stream's
/// min-age, then the younger ones (flagged `true`), each by start, stream path, name.
fn oldest_first(
    s: &Snapshot,
    now: i64,
    gone: &BTreeSet<At>,
    may_go: &dyn Fn(At) -> bool,
) -> Vec<(At, bool)> {
    let mut all: Vec<(bool, i64, &str, &[u8], At)> = Vec::new();
    for (i, st) in s.streams.iter().enumerate() {
        let min_age_ns = st
            .policy
            .map_or(0, |(_, p)| i64::from(p.min_age_s) * 1_000_000_000);
        for (j, c) in st.chunks.iter().enumerate() {
            if gone.contains(&(i, j)) || !may_go((i, j)) {
                continue;
            }
            let young = now.saturating_sub(c.end_utc_ns) < min_age_ns;
            all.push((young, c.start_utc_ns, &st.path, &c.name, (i, j)));
        }
    }
    all.sort();
    all.into_iter().map(|(young, .., at)| (at, young)).collect()
}

#[cfg(test)]
mod tests {
    use super::super::snapshot::{ChunkInfo, StreamInfo};
    use super::*;
    use crate::format::inode::StreamRetention;

    const S: i64 = 1_000_000_000;
    const DAY: i64 = 86_400 * S;
    const NOW: i64 = 1_800_000_000 * S;
    const GB: u64 = 1 << 30;

    /// A stream `dir` at `path` of `n` one-hour chunks of `gb` GiB each, the last
    /// ending now, governed by `policy`.
    fn stream(
        dir: Ino,
        path: &str,
        n: usize,
        gb: u64,
        policy: Option<StreamRetention>,
    ) -> StreamInfo {
        let chunks = (0..n)
            .map(|k| {
                let end = NOW - (n - 1 - k) as i64 * 3600 * S;
                ChunkInfo {
                    ino: dir * 1000 + k as u32,
                    name: format!("{k:04}.ts").into_bytes(),
                    bytes: gb * GB,
                    size_bytes: gb * GB,
                    start_utc_ns: end - 3600 * S,
                    end_utc_ns: end,
                    busy: false,
                    yields: false,
                    protected: false,
                    protection: None,
                }
            })
            .collect();
        StreamInfo {
            dir,
            path: path.into(),
            policy: policy.map(|p| (dir, p)),
            chunks,
        }
    }

    fn snapshot(streams: Vec<StreamInfo>, data_gb: u64) -> Snapshot {
        let used = streams.iter().map(|s| s.bytes()).sum();
        Snapshot {
            streams,
            data_bytes: data_gb * GB,
            in_use_bytes: used,
        }
    }

    fn input(s: &Snapshot, volume: VolumeRetention) -> PlanInput<'_> {
        PlanInput {
            snapshot: s,
            volume,
            now_utc_ns: NOW,
            need_free_bytes: 0,
        }
    }

    fn names(p: &Plan) -> Vec<(Ino, DeleteCause)> {
        p.deletions.iter().map(|d| (d.ino, d.cause)).collect()
    }

    #[test]
    fn max_age_takes_what_ended_before_it_whatever_the_space() {
        let age = StreamRetention {
            max_age_s: 3 * 3600,
            ..Default::default()
        };
        // Chunks end now, 1 h, ..., 5 h ago: those ended 4 and 5 h ago go (the one
        // ended exactly 3 h ago is not older than 3 h).
        let s = snapshot(vec![stream(1, "/a", 6, 1, Some(age))], 1000);
        let p = plan(input(&s, VolumeRetention::default()));
        assert_eq!(
            names(&p),
            [(1000, DeleteCause::MaxAge), (1001, DeleteCause::MaxAge)]
        );
        assert_eq!(p.in_use_after, 4 * GB);
        // The next plan is due when the one ended exactly 3 h ago passes it.
        assert_eq!(p.next_max_age_utc_ns, Some(NOW + 1));
    }

    #[test]
    fn max_size_keeps_each_stream_within_it_its_oldest_going() {
        let size = StreamRetention {
            max_bytes: 5 * GB,
            ..Default::default()
        };
        let mut a = stream(1, "/a", 8, 1, Some(size));
        // Its oldest chunk is open (a reader): it stays, the next ones go instead.
        a.chunks[0].busy = true;
        let s = snapshot(vec![a, stream(2, "/b", 8, 1, None)], 1000);
        let p = plan(input(&s, VolumeRetention::default()));
        assert_eq!(
            names(&p),
            [
                (1001, DeleteCause::MaxSize),
                (1002, DeleteCause::MaxSize),
                (1003, DeleteCause::MaxSize)
            ]
        );
    }

    #[test]
    fn above_high_the_oldest_of_all_streams_go_down_to_low_past_min_age_first() {
        let young = StreamRetention {
            min_age_s: 30 * 86_400,
            ..Default::default()
        };
        // 100 GiB; /a (min-age 30 days, its chunks hours old) and /b, 48 GiB each:
        // 96 % in use, above a 95 % mark; down to 90 % frees 6 GiB, from /b first
        // although /a's chunks are older.
        let mut a = stream(1, "/a", 48, 1, Some(young));
        for c in &mut a.chunks {
            c.start_utc_ns -= DAY;
            c.end_utc_ns -= DAY;
        }
        let s = snapshot(vec![a, stream(2, "/b", 48, 1, None)], 100);
        let vol = VolumeRetention {
            high_permille: 950,
            low_permille: 900,
            protected_max_permille: 0,
        };
        let p = plan(input(&s, vol));
        let want: Vec<(Ino, DeleteCause)> =
            (2000..2006).map(|i| (i, DeleteCause::HighWater)).collect();
        assert_eq!(names(&p), want);
        assert!(p.min_age_unmet.is_empty());
        assert_eq!(p.in_use_after, 90 * GB);
        // /b alone cannot make the mark: /a's young chunks go then, reported.
        let s = snapshot(vec![s.streams[0].clone(), stream(2, "/b", 3, 1, None)], 53);
        let p = plan(input(&s, vol));
        assert_eq!(p.deletions.len(), 4, "51 GiB of 53 down to 47.7");
        assert_eq!(p.deletions[3].ino, 1000, "then /a's oldest");
        assert_eq!(p.min_age_unmet, [1]);
        // Below the mark: nothing.
        let s = snapshot(vec![stream(2, "/b", 3, 1, None)], 100);
        assert_eq!(
            plan(input(&s, vol)),
            Plan {
                in_use_after: 3 * GB,
                ..Plan::default()
            }
        );
    }

    #[test]
    fn protected_and_open_chunks_never_go_and_a_need_beyond_them_is_a_shortfall() {
        let mut a = stream(1, "/a", 4, 1, None);
        a.chunks[0].protected = true;
        a.chunks[3].busy = true; // being recorded
        let s = snapshot(vec![a], 5);
        let p = plan(PlanInput {
            need_free_bytes: 4 * GB,
            ..input(&s, VolumeRetention::default())
        });
        // Free 1 GiB; chunks 1 and 2 may go: 3 GiB free, 1 GiB short.
        assert_eq!(
            names(&p),
            [(1001, DeleteCause::Needed), (1002, DeleteCause::Needed)]
        );
        assert_eq!(p.shortfall_bytes, GB);
    }

    #[test]
    fn a_playbacks_pin_yields_only_to_a_need_nothing_else_meets_and_last() {
        let mut a = stream(1, "/a", 4, 1, None);
        a.chunks[0].busy = true; // played
        a.chunks[0].yields = true;
        a.chunks[3].busy = true; // being recorded: never yields
        let s = snapshot(vec![a], 5);
        let need = |gb: u64| {
            plan(PlanInput {
                need_free_bytes: gb * GB,
                ..input(&s, VolumeRetention::default())
            })
        };
        // Chunks 1 and 2 meet 3 GiB: the played one stays.
        let p = need(3);
        assert_eq!(
            names(&p),
            [(1001, DeleteCause::Needed), (1002, DeleteCause::Needed)]
        );
        assert!(p.deletions.iter().all(|d| !d.expire));
        // 4 GiB: the played one goes too, last and marked to expire its playback.
        let p = need(4);
        assert_eq!(p.deletions.len(), 3);
        assert_eq!(p.deletions[2].ino, 1000);
        assert!(p.deletions[2].expire);
        assert_eq!(p.shortfall_bytes, 0);
        // No need: a pin holds against every other rule (a high mark here).
        let vol = VolumeRetention {
            high_permille: 100,
            low_permille: 100,
            protected_max_permille: 0,
        };
        assert!(plan(input(&s, vol)).deletions.iter().all(|d| d.ino != 1000));
    }

    #[test]
    fn the_same_snapshot_gives_the_same_plan_and_ties_go_by_path_then_name() {
        // Two streams with chunks of the same times: /a's before /b's.
        let s = snapshot(
            vec![stream(2, "/b", 3, 1, None), stream(1, "/a", 3, 1, None)],
            6,
        );
        let s = Snapshot {
            streams: {
                let mut v = s.streams.clone();
                v.sort_by(|x, y| x.path.cmp(&y.path));
                v
            },
            ..s
        };
        let vol = VolumeRetention {
            high_permille: 900,
            low_permille: 600,
            protected_max_permille: 0,
        };
        let p = plan(input(&s, vol));
        assert_eq!(
            names(&p),
            [
                (1000, DeleteCause::HighWater),
                (2000, DeleteCause::HighWater),
                (1001, DeleteCause::HighWater)
            ]
        );
        assert_eq!(plan(input(&s, vol)), p);
    }
}
