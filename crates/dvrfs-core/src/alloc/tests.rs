use super::*;
use crate::layout::{plan, MkfsParams};

fn alloc_for(policy: AllocPolicy, zones: u32) -> DataAlloc {
    let mut p = MkfsParams::new(512 << 20, [1; 16], 3);
    p.data_block_bytes = 1 << 20;
    p.alloc = policy;
    p.zones = Some(zones);
    let mut sb = plan(&p).unwrap();
    sb.zrr_cursor = 2;
    DataAlloc::new(&sb)
}

#[test]
fn zrr_places_consecutive_blocks_in_consecutive_zones() {
    let mut a = alloc_for(AllocPolicy::Zrr, 4);
    let zb = a.zone_blocks;
    // First file starts at the (random, here 2) cursor zone, first free block of each zone.
    let mut prev = None;
    let mut got = vec![];
    for _ in 0..5 {
        let b = a.alloc(10, prev).unwrap();
        got.push(b);
        prev = Some(b);
    }
    assert_eq!(got, vec![2 * zb, 3 * zb, 0, zb, 2 * zb + 1]);
    // The next file starts in the zone after the last one used (zone 3).
    assert_eq!(a.alloc(11, None), Some(3 * zb + 1));
    a.check_invariants().unwrap();
}

#[test]
fn zrr_skips_full_zones() {
    let mut a = alloc_for(AllocPolicy::Zrr, 4);
    let (s, e) = a.zone_range(1);
    for b in s..e {
        a.take(b);
    }
    let b0 = a.alloc(1, Some(0)).unwrap(); // zone 0 -> zone 1 is full -> zone 2
    assert_eq!(a.zone_of(b0), 2);
}

#[test]
fn freed_blocks_are_reused_only_after_commit() {
    for policy in [AllocPolicy::Zrr, AllocPolicy::Seq, AllocPolicy::Contig] {
        let mut a = alloc_for(policy, 1);
        let n = a.total_blocks();
        let mut all = vec![];
        let mut prev = None;
        while let Some(b) = a.alloc(1, prev) {
            all.push(b);
            prev = Some(b);
        }
        assert_eq!(all.len() as u64, n, "{policy:?} hands out every block");
        a.free(all[5]);
        assert_eq!(
            a.alloc(2, None),
            None,
            "{policy:?} reused an uncommitted free"
        );
        a.commit_done();
        assert_eq!(a.alloc(2, None), Some(all[5]));
        a.check_invariants().unwrap();
    }
}

#[test]
fn contig_preallocates_a_window_and_returns_it_on_close() {
    let mut a = alloc_for(AllocPolicy::Contig, 1);
    let n = a.total_blocks();
    let b0 = a.alloc(1, None).unwrap();
    // Another file cannot take blocks inside the first file's window.
    let c0 = a.alloc(2, None).unwrap();
    assert_eq!(c0, b0 + 64);
    let b1 = a.alloc(1, Some(b0)).unwrap();
    assert_eq!(b1, b0 + 1);
    assert_eq!(a.available_for(3), n - 128);
    a.release(1);
    a.release(2);
    assert_eq!(a.available_for(3), n - 3);
    a.check_invariants().unwrap();
}

#[test]
fn seq_is_first_fit() {
    let mut a = alloc_for(AllocPolicy::Seq, 1);
    assert_eq!(a.alloc(1, None), Some(0));
    assert_eq!(a.alloc(2, None), Some(1));
    assert_eq!(a.alloc(1, Some(0)), Some(2));
    a.free(1);
    a.commit_done();
    assert_eq!(a.alloc(3, None), Some(1));
}
