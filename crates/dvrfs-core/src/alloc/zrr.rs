//! Zone round robin (AVFS 3.2.2): the data region is cut into at most 32 equal zones;
//! consecutive blocks of a file go to consecutive zones, always at the first free block
//! of the zone; a new file starts in the zone after the last one used; right after mkfs
//! that zone is random (the superblock's `zrr_cursor`, drawn at mkfs). A full zone is
//! skipped for the next one.

use super::DataAlloc;

pub(super) fn pick(a: &mut DataAlloc, prev: Option<u64>) -> Option<u64> {
    let z0 = match prev {
        Some(p) => (a.zone_of(p) + 1) % a.zone_count,
        None => a.cursor,
    };
    for i in 0..a.zone_count {
        let z = (z0 + i) % a.zone_count;
        let (_, end) = a.zone_range(z);
        if let Some(b) = a.busy.first_clear(a.hints[z as usize], end) {
            a.cursor = (z + 1) % a.zone_count;
            return Some(b);
        }
        a.hints[z as usize] = end;
    }
    None
}
