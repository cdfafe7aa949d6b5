//! File data: read, write and truncate.
//!
//! What a reader may see is fixed by one rule: bytes of a file that were never
//! written read as zeros, never as old disk contents. Three mechanisms keep it:
//! - a newly allocated block is written from its start to the later of the write's
//!   end and the file's end, zeros where the caller gave no data;
//! - when a file grows past its old end (a write beyond it, or truncate upwards), the
//!   rest of the block holding the old end is zeroed first;
//! - blocks past the end of a file are always freed, so growth meets only holes.
//!
//! Device accesses are 4 KiB aligned; a write that starts or ends inside a 4 KiB
//! sector of an existing block reads that sector first.

use super::*;
use crate::device::{AlignedBuf, IO_ALIGN_BYTES};

/// Files are limited by the 32-bit file block numbers of runs.
pub fn max_file_bytes(block_bytes: u64) -> u64 {
    (u32::MAX as u64) * block_bytes
}

fn align_down(x: u64) -> u64 {
    x / IO_ALIGN_BYTES * IO_ALIGN_BYTES
}

fn align_up(x: u64) -> u64 {
    x.div_ceil(IO_ALIGN_BYTES) * IO_ALIGN_BYTES
}

impl<D: Device> Fs<D> {
    fn file(&self, ino: Ino) -> Result<&Inode> {
        let i = self.inode(ino)?;
        match i.kind() {
            Some(Kind::File) => Ok(i),
            Some(Kind::Dir) => Err(Error::IsDir(format!("inode {ino}"))),
            _ => Err(Error::InvalidArgument(format!(
                "inode {ino} is not a regular file"
            ))),
        }
    }

    /// Reads up to `buf.len()` bytes at `offset`; returns the count (0 at or past EOF).
    pub fn read(&self, ino: Ino, offset: u64, buf: &mut [u8]) -> Result<usize> {
        let inode = self.file(ino)?;
        let size = inode.attr.size_bytes;
        if offset >= size {
            return Ok(0);
        }
        let n = (buf.len() as u64).min(size - offset) as usize;
        let bs = self.sb.data_block_bytes;
        let mut done = 0usize;
        while done < n {
            let pos = offset + done as u64;
            let fb = pos / bs;
            let s = pos % bs;
            let len = ((bs - s) as usize).min(n - done);
            let out = &mut buf[done..done + len];
            match inode.lookup(fb) {
                None => out.fill(0),
                Some(block) => {
                    let base = self.sb.data_offset(block);
                    if s.is_multiple_of(IO_ALIGN_BYTES)
                        && (len as u64).is_multiple_of(IO_ALIGN_BYTES)
                    {
                        self.dev
                            .read_at(base + s, out)
                            .map_err(|e| Error::io("reading file data", e))?;
                    } else {
                        let (a, b) = (align_down(s), align_up(s + len as u64));
                        let mut tmp = AlignedBuf::zeroed((b - a) as usize);
                        self.dev
                            .read_at(base + a, &mut tmp)
                            .map_err(|e| Error::io("reading file data", e))?;
                        out.copy_from_slice(&tmp[(s - a) as usize..(s - a) as usize + len]);
                    }
                }
            }
            done += len;
        }
        Ok(n)
    }

    /// Writes `data` at `offset`, allocating blocks as needed. Either the whole write
    /// is done or, on an error found before any change (no space), nothing is.
    pub fn write(&mut self, ino: Ino, offset: u64, data: &[u8], now_ns: i64) -> Result<()> {
        self.check_writable()?;
        let bs = self.sb.data_block_bytes;
        let end = offset
            .checked_add(data.len() as u64)
            .filter(|&e| e <= max_file_bytes(bs))
            .ok_or(Error::FileTooLarge(offset))?;
        let old_size = self.file(ino)?.attr.size_bytes;
        if data.is_empty() {
            return Ok(());
        }
        // Everything that can fail for lack of space is checked first.
        let (first, last) = (offset / bs, (end - 1) / bs);
        let new_blocks = {
            let inode = self.file(ino)?;
            (first..=last)
                .filter(|&fb| inode.lookup(fb).is_none())
                .count() as u64
        };
        self.reserve_blocks(ino, new_blocks)?;
        self.make_room_in_journal(ino, first, last, new_blocks)?;
        let runs = self.inode(ino)?.runs.len();
        self.ensure_run_capacity(ino, runs + new_blocks as usize)?;

        if offset > old_size {
            self.zero_tail(ino, old_size, offset)?;
        }
        let new_size = old_size.max(end);
        let mut lowest_changed = usize::MAX;
        for fb in first..=last {
            let seg_start = fb.max(first) * bs;
            let s = offset.max(seg_start) - fb * bs;
            let e = end.min((fb + 1) * bs) - fb * bs;
            let src = &data[(fb * bs + s - offset) as usize..(fb * bs + e - offset) as usize];
            let existing = self.inode(ino)?.lookup(fb);
            match existing {
                Some(block) => self.write_in_block(block, s, src)?,
                None => {
                    let prev = self.inode(ino)?.block_before(fb);
                    let block = self.data.alloc(ino, prev).ok_or(Error::NoSpace {
                        need_bytes: bs,
                        free_bytes: 0,
                    })?;
                    self.dirty_data_bitmap(block);
                    let (changed, _) = self.inode_mut(ino)?.map_block(fb, block);
                    lowest_changed = lowest_changed.min(changed);
                    // Zeros from the block start up to the write, and after it up to
                    // the file's end: nothing of what the block held before shows.
                    let fill_end = e.max(new_size.min((fb + 1) * bs) - fb * bs);
                    self.write_new_block(block, s, src, fill_end)?;
                }
            }
        }
        if lowest_changed != usize::MAX {
            self.dirty_runs_from(ino, lowest_changed)?;
        }
        let a = &mut self.inode_mut(ino)?.attr;
        a.size_bytes = new_size;
        a.mtime_ns = now_ns;
        a.ctime_ns = now_ns;
        self.dirty_inode(ino);
        self.after_op()
    }

    /// Mapping a block into a hole shifts every later run, and with it every later
    /// indirect run block. Bounds what this write dirties: commit first if it would not
    /// fit in the current transaction, refuse if it would not fit in any.
    fn make_room_in_journal(
        &mut self,
        ino: Ino,
        first: u64,
        last: u64,
        new_blocks: u64,
    ) -> Result<()> {
        use crate::format::inode::{INLINE_RUNS, RUNS_PER_BLOCK};
        if new_blocks == 0 {
            return Ok(());
        }
        let inode = self.inode(ino)?;
        let Some(fb) = (first..=last).find(|&fb| inode.lookup(fb).is_none()) else {
            return Ok(());
        };
        let idx = inode.run_search(fb).err().unwrap_or(inode.runs.len());
        let shifted = (inode.runs.len() + new_blocks as usize).saturating_sub(idx.max(INLINE_RUNS));
        let estimate = (shifted / RUNS_PER_BLOCK + 2) as u64
            + new_blocks.min(self.sb.data_bitmap_blocks)
            + self.sb.meta_bitmap_blocks
            + 4;
        let limit = self.max_transaction_images() as u64 / 2;
        if estimate > limit {
            return Err(Error::TooFragmented {
                blocks: estimate,
                limit,
            });
        }
        if self.dirty.len() as u64 + estimate > limit {
            self.sync()?;
        }
        Ok(())
    }

    /// Makes sure `count` new blocks can be allocated for `ino`, committing first if
    /// blocks freed by uncommitted operations would make the difference.
    fn reserve_blocks(&mut self, ino: Ino, count: u64) -> Result<()> {
        if self.data.available_for(ino) < count && self.data.pending_free() > 0 {
            self.sync()?;
        }
        let free = self.data.available_for(ino);
        if free < count {
            let bs = self.sb.data_block_bytes;
            return Err(Error::NoSpace {
                need_bytes: count * bs,
                free_bytes: free * bs,
            });
        }
        Ok(())
    }

    /// Writes `src` at byte `s` of an allocated block, preserving the rest.
    fn write_in_block(&mut self, block: u64, s: u64, src: &[u8]) -> Result<()> {
        self.write_in_block_opt(block, s, s + src.len() as u64, Some(src))
    }

    /// Writes `src` (or zeros, if `None`) over bytes `s..e` of an allocated block.
    fn write_in_block_opt(&mut self, block: u64, s: u64, e: u64, src: Option<&[u8]>) -> Result<()> {
        let base = self.sb.data_offset(block);
        let (a, b) = (align_down(s), align_up(e).min(self.sb.data_block_bytes));
        if let (true, true, Some(src)) = (a == s, b == e, src) {
            self.data_unflushed = true;
            return self
                .dev
                .write_at(base + s, src)
                .map_err(|e| Error::io("writing file data", e));
        }
        let mut tmp = AlignedBuf::zeroed((b - a) as usize);
        let sector = IO_ALIGN_BYTES as usize;
        if a != s {
            self.dev
                .read_at(base + a, &mut tmp[..sector])
                .map_err(|e| Error::io("reading file data", e))?;
        }
        if b != e && (b - a > IO_ALIGN_BYTES || a == s) {
            let at = tmp.len() - sector;
            self.dev
                .read_at(base + b - IO_ALIGN_BYTES, &mut tmp[at..])
                .map_err(|e| Error::io("reading file data", e))?;
        }
        let dst = &mut tmp[(s - a) as usize..(e - a) as usize];
        match src {
            Some(src) => dst.copy_from_slice(src),
            None => dst.fill(0),
        }
        self.data_unflushed = true;
        self.dev
            .write_at(base + a, &tmp)
            .map_err(|e| Error::io("writing file data", e))
    }

    /// Writes a freshly allocated block: zeros, then `src` at `s`, up to `fill_end`.
    fn write_new_block(&mut self, block: u64, s: u64, src: &[u8], fill_end: u64) -> Result<()> {
        let base = self.sb.data_offset(block);
        let len = align_up(fill_end).min(self.sb.data_block_bytes);
        self.data_unflushed = true;
        if s == 0 && src.len() as u64 == len {
            return self
                .dev
                .write_at(base, src)
                .map_err(|e| Error::io("writing file data", e));
        }
        let mut tmp = AlignedBuf::zeroed(len as usize);
        tmp[s as usize..s as usize + src.len()].copy_from_slice(src);
        self.dev
            .write_at(base, &tmp)
            .map_err(|e| Error::io("writing file data", e))
    }

    /// Zeros bytes `from..to` of the block holding `from` (the old end of file), so
    /// that growing the file exposes zeros.
    fn zero_tail(&mut self, ino: Ino, from: u64, to: u64) -> Result<()> {
        let bs = self.sb.data_block_bytes;
        if from.is_multiple_of(bs) {
            return Ok(());
        }
        let fb = from / bs;
        if let Some(block) = self.inode(ino)?.lookup(fb) {
            let e = to.min((fb + 1) * bs) - fb * bs;
            self.write_in_block_opt(block, from % bs, e, None)?;
        }
        Ok(())
    }

    /// Sets the size of a file: blocks past the new end are freed; growing reads as zeros.
    pub fn truncate(&mut self, ino: Ino, size_bytes: u64, now_ns: i64) -> Result<()> {
        self.check_writable()?;
        let bs = self.sb.data_block_bytes;
        if size_bytes > max_file_bytes(bs) {
            return Err(Error::FileTooLarge(size_bytes));
        }
        let old = self.file(ino)?.attr.size_bytes;
        if size_bytes > old {
            self.zero_tail(ino, old, size_bytes)?;
        } else if size_bytes < old {
            let keep = size_bytes.div_ceil(bs);
            let (freed, first) = self.inode_mut(ino)?.truncate_blocks(keep);
            for (start, count) in freed {
                for b in start..start + count {
                    self.data.free(b);
                    self.dirty_data_bitmap(b);
                }
            }
            self.dirty_runs_from(ino, first)?;
            self.trim_run_capacity(ino)?;
            self.data.release(ino);
        }
        let a = &mut self.inode_mut(ino)?.attr;
        a.size_bytes = size_bytes;
        a.mtime_ns = now_ns;
        a.ctime_ns = now_ns;
        self.dirty_inode(ino);
        self.after_op()
    }
}
