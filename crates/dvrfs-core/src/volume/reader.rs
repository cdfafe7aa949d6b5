//! Reading metadata blocks for the loader: which copy of a block serves. For each
//! block, the journal's image if the replayed transaction holds one that verifies,
//! else the primary copy if it verifies, else the backup region's (recorded in the
//! [`LoadReport`]); a block bad in both copies is lost (recorded) or fails the open,
//! as the caller asks. Whole areas are read in [`BULK_READ_BYTES`] requests.
//!
//! The invariant it keeps: no image reaches a decoder unverified (type, volume,
//! block number, checksum), and a block another structure owns is never read as the
//! claimant's ([`claim`]). A device read error is never taken for damage: it fails
//! the open.

use super::*;
use crate::device::Device;
use crate::format::{verify_block, BlockType, META_BLOCK_BYTES};

/// The size of one bulk metadata read (the loader's areas, fsck's copy comparison).
pub(super) const BULK_READ_BYTES: usize = 1 << 20;

/// The loader's view of the metadata: the device, the superblock, the replayed
/// transaction's images, and the report that records what was read from where.
pub(super) struct Reader<'a, D: Device> {
    pub(super) dev: &'a D,
    pub(super) sb: &'a Superblock,
    overlay: &'a HashMap<u64, Vec<u8>>,
    pub(super) report: &'a mut LoadReport,
}

impl<'a, D: Device> Reader<'a, D> {
    pub(super) fn new(
        dev: &'a D,
        sb: &'a Superblock,
        overlay: &'a HashMap<u64, Vec<u8>>,
        report: &'a mut LoadReport,
    ) -> Self {
        Reader {
            dev,
            sb,
            overlay,
            report,
        }
    }

    pub(super) fn pick(&mut self, n: u64, ty: BlockType, primary: &[u8]) -> Result<Vec<u8>> {
        if let Some(img) = self.overlay.get(&n) {
            if verify_block(img, ty, &self.sb.uuid, n).is_ok() {
                return Ok(img.clone());
            }
        }
        let why = match verify_block(primary, ty, &self.sb.uuid, n) {
            Ok(_) => return Ok(primary.to_vec()),
            Err(e) => e,
        };
        let mut backup = vec![0u8; META_BLOCK_BYTES];
        self.dev
            .read_at(self.sb.backup_offset(n), &mut backup)
            .map_err(|e| Error::io(format!("reading backup metadata block {n}"), e))?;
        match verify_block(&backup, ty, &self.sb.uuid, n) {
            Ok(_) => {
                self.report.from_backup.push((n, format!("{} block: {why}", ty.name())));
                Ok(backup)
            }
            Err(bwhy) => Err(Error::Corrupt(format!(
                "metadata block {n} ({}) is unreadable in both copies: primary: {why}; backup: {bwhy}",
                ty.name()
            ))),
        }
    }

    /// [`Reader::pick`], but a block bad in both copies is recorded as lost and
    /// `None` returned (I/O errors still fail).
    pub(super) fn pick_or_lose(
        &mut self,
        n: u64,
        ty: BlockType,
        primary: &[u8],
    ) -> Result<Option<Vec<u8>>> {
        match self.pick(n, ty, primary) {
            Ok(b) => Ok(Some(b)),
            Err(Error::Corrupt(why)) => {
                self.report.lost_blocks.push((n, why));
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }

    /// Block `n` as `ty` from the journal's overlay or either copy, or `None`, with
    /// nothing reported: for evidence gathered before the load proper reads it.
    pub(super) fn peek(&self, n: u64, ty: BlockType) -> Result<Option<Vec<u8>>> {
        let ok = |b: &[u8]| verify_block(b, ty, &self.sb.uuid, n).is_ok();
        if let Some(img) = self.overlay.get(&n).filter(|img| ok(img)) {
            return Ok(Some(img.clone()));
        }
        let mut b = vec![0u8; META_BLOCK_BYTES];
        for off in [self.sb.primary_offset(n), self.sb.backup_offset(n)] {
            self.dev
                .read_at(off, &mut b)
                .map_err(|e| Error::io(format!("reading metadata block {n}"), e))?;
            if ok(&b) {
                return Ok(Some(b));
            }
        }
        Ok(None)
    }

    pub(super) fn one_or_lose(&mut self, n: u64, ty: BlockType) -> Result<Option<Vec<u8>>> {
        let mut b = vec![0u8; META_BLOCK_BYTES];
        self.dev
            .read_at(self.sb.primary_offset(n), &mut b)
            .map_err(|e| Error::io(format!("reading metadata block {n}"), e))?;
        self.pick_or_lose(n, ty, &b)
    }

    /// Reads `count` blocks from `start` in large requests, verifying each; `f` gets
    /// `None` for a block lost in both copies.
    pub(super) fn area(
        &mut self,
        start: u64,
        count: u64,
        ty: BlockType,
        mut f: impl FnMut(u64, Option<&[u8]>) -> Result<()>,
    ) -> Result<()> {
        let per = (BULK_READ_BYTES / META_BLOCK_BYTES) as u64;
        let mut buf = crate::device::AlignedBuf::zeroed(per.min(count) as usize * META_BLOCK_BYTES);
        let mut k = 0;
        while k < count {
            let n = per.min(count - k);
            let bytes = &mut buf[..n as usize * META_BLOCK_BYTES];
            self.dev
                .read_at(self.sb.primary_offset(start + k), bytes)
                .map_err(|e| Error::io(format!("reading the {} area", ty.name()), e))?;
            for j in 0..n {
                let raw =
                    &bytes[j as usize * META_BLOCK_BYTES..(j as usize + 1) * META_BLOCK_BYTES];
                let img = self.pick_or_lose(start + k + j, ty, raw)?;
                f(k + j, img.as_deref())?;
            }
            k += n;
        }
        Ok(())
    }
}

/// What a structure's pointer to a metadata block found there.
pub(super) enum Claim {
    /// Another structure's block: one loaded before owns it (`taken`), or it holds a
    /// valid block of another kind in both copies.
    Foreign,
    /// The block as `ty`, or `None` when it is lost in both copies (reported).
    Read(Option<Vec<u8>>),
}

/// Reads metadata block `n`, which a structure's pointer names, as a block of type
/// `ty`, unless it is another structure's ([`Claim::Foreign`]: not lost, so not
/// reported as lost).
pub(super) fn claim<D: Device>(
    r: &mut Reader<'_, D>,
    n: u64,
    ty: BlockType,
    taken: bool,
) -> Result<Claim> {
    if taken {
        return Ok(Claim::Foreign);
    }
    let img = r.one_or_lose(n, ty)?;
    // Not a block of its type: lost, or another structure's (checked only then).
    if img.is_none() && foreign(r, n, ty)? {
        r.report.lost_blocks.retain(|(b, _)| *b != n);
        return Ok(Claim::Foreign);
    }
    Ok(Claim::Read(img))
}

/// Whether metadata block `n` holds, in both copies, a valid block of another kind
/// than `ty` (another structure's block, which a damaged map names).
fn foreign<D: Device>(r: &mut Reader<'_, D>, n: u64, ty: BlockType) -> Result<bool> {
    let mut b = vec![0u8; META_BLOCK_BYTES];
    for off in [r.sb.primary_offset(n), r.sb.backup_offset(n)] {
        r.dev
            .read_at(off, &mut b)
            .map_err(|e| Error::io(format!("reading metadata block {n}"), e))?;
        if !matches!(
            verify_block(&b, ty, &r.sb.uuid, n),
            Err(crate::format::BlockError::WrongType { .. })
        ) {
            return Ok(false);
        }
    }
    Ok(true)
}
