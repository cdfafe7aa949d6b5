//! ISO BMFF boxes (ISO/IEC 14496-12 4.2) walked (`mp4.rs`, `mp4_tables.rs`, the writers): a box's header, and the boxes in a
//! payload. Bounds-checked: a header cut short or a size that does not fit ends
//! the walk, never a panic.

use super::be::{u32_at, u64_at};

/// A top-level box's type and whole size from its first 8 or 16 bytes `h` (a size
/// of 0 runs to the end: `left` bytes from the box's start); `None` for a header
/// cut short or a size below the header's.
pub fn box_header(h: &[u8], left: u64) -> Option<([u8; 4], u64)> {
    let kind: [u8; 4] = h.get(4..8)?.try_into().ok()?;
    let (head, size) = match u32_at(h, 0)? {
        1 => (16, u64_at(h, 8)?),
        0 => (8, left),
        s => (8, u64::from(s)),
    };
    (size >= head).then_some((kind, size))
}

/// The child boxes of a box's payload: (type, payload).
pub fn children(mut b: &[u8]) -> Vec<([u8; 4], &[u8])> {
    let mut out = Vec::new();
    while b.len() >= 8 {
        let Some(size) = u32_at(b, 0) else { break };
        let kind = [b[4], b[5], b[6], b[7]];
        let (hdr, size) = match size {
            1 => match u64_at(b, 8) {
                Some(s) => (16usize, s),
                None => break,
            },
            0 => (8, b.len() as u64),
            s => (8, u64::from(s)),
        };
        if size < hdr as u64 || size > b.len() as u64 {
            break;
        }
        out.push((kind, &b[hdr..size as usize]));
        b = &b[size as usize..];
    }
    out
}
