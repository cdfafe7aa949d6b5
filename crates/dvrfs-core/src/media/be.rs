//! Big-endian fields (the byte order of MPEG and ISO BMFF), read with a bounds
//! check: `None` past the end, never a panic.

/// The big-endian u32 at `i`.
pub fn u32_at(b: &[u8], i: usize) -> Option<u32> {
    let s = b.get(i..i + 4)?;
    Some(
        (u32::from(s[0]) << 24)
            | (u32::from(s[1]) << 16)
            | (u32::from(s[2]) << 8)
            | u32::from(s[3]),
    )
}

/// The big-endian u64 at `i`.
pub fn u64_at(b: &[u8], i: usize) -> Option<u64> {
    Some((u64::from(u32_at(b, i)?) << 32) | u64::from(u32_at(b, i + 4)?))
}

/// `v` as 4 big-endian bytes (the workspace denies `to_be_bytes`, so that the
/// on-disk format's little-endian fields are never written the wrong way by
/// accident: media boxes are the one big-endian thing written, and only here).
pub fn be32(v: u32) -> [u8; 4] {
    [(v >> 24) as u8, (v >> 16) as u8, (v >> 8) as u8, v as u8]
}

/// `v` as 8 big-endian bytes.
pub fn be64(v: u64) -> [u8; 8] {
    let (hi, lo) = (be32((v >> 32) as u32), be32(v as u32));
    [hi[0], hi[1], hi[2], hi[3], lo[0], lo[1], lo[2], lo[3]]
}
