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
