//! Sequential first fit: the lowest free block, whoever asks. The baseline the other
//! policies are compared with.

use super::DataAlloc;

pub(super) fn pick(a: &mut DataAlloc) -> Option<u64> {
    let n = a.used.len();
    match a.busy.first_clear(a.hints[0], n) {
        Some(b) => Some(b),
        None => {
            a.hints[0] = n;
            None
        }
    }
}
