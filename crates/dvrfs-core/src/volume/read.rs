//! Planning reads: the device accesses a read of a file needs, and the data
//! checksums each must pass before its bytes are served.
//!
//! The invariant it keeps: a read returns only what the file holds. A hole, or a block
//! no write of the file filled, reads as zeros, never old disk contents (the rule of
//! `volume/data.rs`); a lost range fails with `DataLost`; a granule with a checksum is
//! checked before its bytes are served (unchecked only when its checksum block was
//! lost).

use super::*;

impl Volume {
    /// Plans a read of up to `len` bytes at `offset` of a regular file.
    pub fn plan_read(&self, ino: Ino, offset: u64, len: usize) -> Result<ReadPlan> {
        let inode = self.file(ino)?;
        let size = inode.attr.size_bytes;
        if offset >= size || len == 0 {
            return Ok(ReadPlan::default());
        }
        let n = (len as u64).min(size - offset) as usize;
        let bs = self.sb.data_block_bytes;
        let mut plan = ReadPlan {
            bytes: n,
            ..Default::default()
        };
        let mut done = 0usize;
        while done < n {
            let pos = offset + done as u64;
            let fb = pos / bs;
            let s = pos % bs;
            let l = ((bs - s) as usize).min(n - done);
            if inode.is_lost(fb) {
                return Err(lost_error(ino, inode, fb, bs));
            }
            match inode.lookup(fb) {
                None => plan.zero.push((done, l)),
                Some(block) => {
                    let base = self.sb.data_offset(block);
                    // Checked granules are read whole (up to the end of the file).
                    let covered = bs.min(size - fb * bs);
                    let checks = self.read_checks(ino, block, fb, s, s + l as u64, covered)?;
                    let lo = checks.first().map_or(s, |c| s.min(c.0));
                    let hi = checks
                        .last()
                        .map_or(s + l as u64, |c| (s + l as u64).max(c.0 + c.1));
                    let (a, b) = (align_down(lo), align_up(hi).min(bs));
                    let fill = if a == s && b == s + l as u64 && aligned(done as u64) {
                        Fill::Direct { buf_offset: done }
                    } else {
                        Fill::ReadBounce {
                            skip: (s - a) as usize,
                            dst: done,
                            len: l,
                        }
                    };
                    if base + b > self.present_bytes {
                        return Err(Error::PastEnd {
                            ino,
                            offset: pos,
                            end: pos + l as u64,
                            device_bytes: self.present_bytes,
                        });
                    }
                    let mut io = PlannedIo::new(base + a, b - a, fill);
                    io.checks = checks
                        .into_iter()
                        .map(|(gs, len, crc, file_offset)| Check {
                            at: (gs - a) as usize,
                            len: len as usize,
                            crc,
                            file_offset,
                            seed: place_seed(ino, file_offset),
                        })
                        .collect();
                    plan.io.push(io);
                }
            }
            done += l;
        }
        Ok(plan)
    }

    /// Bytes of file `ino` whose granules carry a checksum, and bytes stored without
    /// one (written before the volume had checksums, cut by a truncation, or whose
    /// checksum block was lost); holes and lost ranges count in neither.
    pub fn checked_bytes(&self, ino: Ino) -> Result<(u64, u64)> {
        let inode = self.file(ino)?;
        let bs = self.sb.data_block_bytes;
        let size = inode.attr.size_bytes;
        let (mut checked, mut unchecked) = (0, 0);
        for r in inode.runs.iter().filter(|r| !r.is_lost()) {
            for i in 0..r.count as u64 {
                let fb = r.file_block as u64 + i;
                let covered = size.saturating_sub(fb * bs).min(bs);
                let Some(sums) = &self.sums else {
                    unchecked += covered;
                    continue;
                };
                let g = sums.granule_bytes();
                for k in 0..covered.div_ceil(g) {
                    let len = ((k + 1) * g).min(covered) - k * g;
                    match sums.get(sums.entry(r.start + i, k)) {
                        Some(_) => checked += len,
                        None => unchecked += len,
                    }
                }
            }
        }
        Ok((checked, unchecked))
    }

    /// The data checksum granule, if the volume's checksums are loaded.
    pub fn sum_granule_bytes(&self) -> Option<u64> {
        self.sums.as_ref().map(|s| s.granule_bytes())
    }

    /// `(start, len, crc, file_offset)` of the checked granules a read of bytes
    /// `[s, e)` of block `block` (file block `fb`, `covered` bytes of it in the file)
    /// touches, in order. A granule the file covers always has a checksum (a write
    /// sets it with the bytes); one without is an error like a mismatch (the bytes
    /// cannot be vouched for: a run pointing at a block no write of this file
    /// filled), unless its checksum block was lost, then it is served unchecked.
    pub(super) fn read_checks(
        &self,
        ino: Ino,
        block: u64,
        fb: u64,
        s: u64,
        e: u64,
        covered: u64,
    ) -> Result<Vec<(u64, u64, u32, u64)>> {
        let Some(sums) = &self.sums else {
            return Ok(vec![]);
        };
        let g = sums.granule_bytes();
        let mut out = vec![];
        for k in s / g..e.div_ceil(g) {
            let gs = k * g;
            let len = ((k + 1) * g).min(covered) - gs;
            let file_offset = fb * self.sb.data_block_bytes + gs;
            let entry = sums.entry(block, k);
            match sums.get(entry) {
                Some(crc) => out.push((gs, len, crc, file_offset)),
                None if sums.in_lost_block(entry) => {}
                None => {
                    return Err(Error::Checksum {
                        ino,
                        offset: file_offset,
                        end: file_offset + len,
                    })
                }
            }
        }
        Ok(out)
    }
}
