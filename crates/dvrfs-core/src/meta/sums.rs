//! The data checksum table in memory: one optional CRC32C per granule of every data
//! block (`format/sums.rs` stores it; `volume/data.rs` keeps it true).

use crate::format::sums::{decode_sum, encode_sums, SUMS_PER_BLOCK};
use crate::format::superblock::Superblock;

/// Checksums of every data granule, indexed by entry `block * per_block + granule`.
#[derive(Clone, Debug)]
pub struct Sums {
    granule_bytes: u64,
    per_block: u64,
    crc: Vec<u32>,
    /// One bit per entry: the CRC is set.
    valid: Vec<u64>,
    /// Checksum blocks lost in both copies: their entries are unknown, so granules
    /// without a checksum there are served unchecked (until `fsck --repair` computes
    /// them again from the data). Anywhere else a granule a file covers has one.
    lost: std::collections::BTreeSet<u64>,
}

impl Sums {
    /// An empty table (every entry unchecked) for the volume, `None` when it has no
    /// checksum area.
    pub fn new(sb: &Superblock) -> Option<Sums> {
        if sb.sum_blocks == 0 {
            return None;
        }
        let per_block = sb.data_block_bytes / sb.sum_granule_bytes;
        let entries = (sb.data_blocks * per_block) as usize;
        Some(Sums {
            granule_bytes: sb.sum_granule_bytes,
            per_block,
            crc: vec![0; entries],
            valid: vec![0; entries.div_ceil(64)],
            lost: Default::default(),
        })
    }

    pub fn granule_bytes(&self) -> u64 {
        self.granule_bytes
    }

    pub fn per_block(&self) -> u64 {
        self.per_block
    }

    /// The entry of granule `k` of data block `block`.
    pub fn entry(&self, block: u64, k: u64) -> u64 {
        assert!(
            k < self.per_block && ((block * self.per_block + k) as usize) < self.crc.len(),
            "checksum entry of block {block} granule {k} out of range"
        );
        block * self.per_block + k
    }

    pub fn get(&self, e: u64) -> Option<u32> {
        let e = e as usize;
        (self.valid[e / 64] & (1 << (e % 64)) != 0).then(|| self.crc[e])
    }

    pub fn set(&mut self, e: u64, v: Option<u32>) {
        let e = e as usize;
        match v {
            Some(c) => {
                self.crc[e] = c;
                self.valid[e / 64] |= 1 << (e % 64);
            }
            None => {
                self.crc[e] = 0;
                self.valid[e / 64] &= !(1 << (e % 64));
            }
        }
    }

    /// The checksum block (index within the area) holding entry `e`.
    pub fn block_of(e: u64) -> u64 {
        e / SUMS_PER_BLOCK as u64
    }

    /// Entries of checksum block `k` that exist (the last block may be partly used).
    fn range(&self, k: u64) -> std::ops::Range<usize> {
        let s = (k as usize * SUMS_PER_BLOCK).min(self.crc.len());
        s..(s + SUMS_PER_BLOCK).min(self.crc.len())
    }

    /// Loads checksum block `k` from its payload; `None` (lost in both copies) leaves
    /// its entries unchecked.
    pub fn decode_block(&mut self, k: u64, payload: Option<&[u8]>) {
        for (i, e) in self.range(k).enumerate() {
            self.set(e as u64, payload.and_then(|p| decode_sum(p, i)));
        }
        if payload.is_none() {
            self.lost.insert(k);
        }
    }

    /// Whether entry `e` lies in a checksum block lost in both copies.
    pub fn in_lost_block(&self, e: u64) -> bool {
        self.lost.contains(&Self::block_of(e))
    }

    /// Checksum blocks lost in both copies.
    pub fn lost_blocks(&self) -> impl Iterator<Item = u64> + '_ {
        self.lost.iter().copied()
    }

    /// Entries of checksum block `k`.
    pub fn entries_of(&self, k: u64) -> std::ops::Range<u64> {
        let r = self.range(k);
        r.start as u64..r.end as u64
    }

    /// Checksum block `k` was rebuilt (from the data, by fsck).
    pub fn found(&mut self, k: u64) {
        self.lost.remove(&k);
    }

    pub fn encode_block(&self, k: u64, payload: &mut [u8]) {
        encode_sums(self.range(k).map(|e| self.get(e as u64)), payload);
    }

    /// Entries with a checksum.
    pub fn checked(&self) -> u64 {
        self.valid.iter().map(|w| w.count_ones() as u64).sum()
    }
}
