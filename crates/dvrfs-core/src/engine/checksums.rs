//! Data checksums: computing them for writes and verifying them on reads.
//!
//! A volume with checksums keeps a CRC32C per granule of file data
//! ([`Volume::sum_granule_bytes`]). Invariants: a read hands out no byte whose
//! granule's checksum fails ([`Error::Checksum`] instead); a rewrite verifies the
//! bytes it keeps before it computes new checksums over them, so it never blesses
//! damaged data; a write's checksums are computed over the bytes exactly as they go
//! to the disk.
//!
//! [`Volume::sum_granule_bytes`]: crate::volume::Volume::sum_granule_bytes

use super::Body;
use super::Engine;
use crate::error::Error;
use crate::meta::Ino;
use crate::volume::{Check, Sum};

impl Engine {
    /// File range `[offset, offset + len)` rounded out to whole checksum granules (to
    /// 4 KiB without checksums).
    pub(super) fn granule_range(&self, offset: u64, len: u64) -> (u64, u64) {
        let g = self.vol.sum_granule_bytes().unwrap_or(4096);
        let end = offset.saturating_add(len);
        (offset / g * g, end.div_ceil(g).saturating_mul(g))
    }
}

/// CRC32C of each checksummed range of an access's bytes (`None`: a virtual buffer).
pub(super) fn sum_crcs(sums: &[Sum], bytes: Option<&[u8]>) -> Vec<Option<u32>> {
    sums.iter()
        .map(|s| bytes.map(|b| crc32c::crc32c(&b[s.at..s.at + s.len])))
        .collect()
}

/// The first of `checks` the bytes fail, as the error a reader gets (`None` when all
/// hold, or for a virtual buffer, which holds no bytes to check).
pub(super) fn failed_check(ino: Ino, checks: &[Check], bytes: Option<&[u8]>) -> Option<Error> {
    let b = bytes?;
    let c = checks
        .iter()
        .find(|c| crc32c::crc32c_append(c.seed, &b[c.at..c.at + c.len]) != c.crc)?;
    Some(Error::Checksum {
        ino,
        offset: c.file_offset,
        end: c.file_offset + c.len as u64,
    })
}

/// The checksums a write's accesses computed, in plan order.
pub(super) fn access_crcs(body: &mut Body) -> Vec<Option<u32>> {
    body.accesses_mut()
        .map(|a| a.iter().flat_map(|a| a.crcs.iter().copied()).collect())
        .unwrap_or_default()
}
