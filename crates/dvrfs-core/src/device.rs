//! The storage seam: everything the core knows about a disk.
//!
//! The core never opens a file descriptor. A shell hands it something that implements
//! [`Device`]: the `O_DIRECT` file/block device of `dvrfs-io`, the in-memory [`MemDevice`]
//! used by tests, or the [`CrashDevice`] that keeps a durable and a live image so tests
//! can cut the power at any write.
//!
//! What the core assumes of the media (and what the crash tests model):
//! - every read and write is aligned to [`IO_ALIGN_BYTES`] in offset and length, which is a
//!   multiple of every logical block size we support (512 and 4096);
//! - a write that returns is visible to later reads, but is durable only after `flush`;
//! - writes issued since the last flush may reach the media in any subset, and the last
//!   one may be torn at a logical-sector boundary; a sector is never half written.

use std::io;

/// Alignment of every device access the core makes, in offset and length.
pub const IO_ALIGN_BYTES: u64 = 4096;

/// A block device or image file, seen as a flat array of bytes.
pub trait Device {
    /// Usable size in bytes (a multiple of [`IO_ALIGN_BYTES`] once the core rounds down).
    fn size_bytes(&self) -> u64;
    /// The device's logical block size (512 or 4096).
    fn sector_bytes(&self) -> u32;
    /// Reads `buf.len()` bytes at `offset_bytes`. Both are multiples of [`IO_ALIGN_BYTES`].
    fn read_at(&self, offset_bytes: u64, buf: &mut [u8]) -> io::Result<()>;
    /// Writes `buf` at `offset_bytes`. Both are multiples of [`IO_ALIGN_BYTES`].
    fn write_at(&mut self, offset_bytes: u64, buf: &[u8]) -> io::Result<()>;
    /// Makes every completed write durable.
    fn flush(&mut self) -> io::Result<()>;
}

impl<D: Device + ?Sized> Device for Box<D> {
    fn size_bytes(&self) -> u64 {
        (**self).size_bytes()
    }
    fn sector_bytes(&self) -> u32 {
        (**self).sector_bytes()
    }
    fn read_at(&self, offset_bytes: u64, buf: &mut [u8]) -> io::Result<()> {
        (**self).read_at(offset_bytes, buf)
    }
    fn write_at(&mut self, offset_bytes: u64, buf: &[u8]) -> io::Result<()> {
        (**self).write_at(offset_bytes, buf)
    }
    fn flush(&mut self) -> io::Result<()> {
        (**self).flush()
    }
}

fn check_range(len_bytes: u64, offset_bytes: u64, n: usize) -> io::Result<()> {
    let aligned =
        offset_bytes.is_multiple_of(IO_ALIGN_BYTES) && (n as u64).is_multiple_of(IO_ALIGN_BYTES);
    if !aligned {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("unaligned device access at {offset_bytes} length {n}"),
        ));
    }
    match offset_bytes.checked_add(n as u64) {
        Some(end) if end <= len_bytes => Ok(()),
        _ => Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            format!("device access at {offset_bytes} length {n} is past the end ({len_bytes})"),
        )),
    }
}

/// A device held in memory. Sparse: untouched 64 KiB chunks take no memory.
#[derive(Clone, Debug)]
pub struct MemDevice {
    size_bytes: u64,
    sector_bytes: u32,
    /// Shared between clones until one of them writes the chunk (copy on write), so
    /// cloning an image to damage or replay it costs what the copy changes.
    chunks: std::collections::BTreeMap<u64, std::sync::Arc<Vec<u8>>>,
    /// Counts of calls, for tests that measure metadata traffic.
    pub writes: u64,
    pub flushes: u64,
}

const MEM_CHUNK_BYTES: u64 = 64 << 10;

impl MemDevice {
    pub fn new(size_bytes: u64) -> Self {
        Self::with_sector(size_bytes, 512)
    }

    pub fn with_sector(size_bytes: u64, sector_bytes: u32) -> Self {
        MemDevice {
            size_bytes,
            sector_bytes,
            chunks: Default::default(),
            writes: 0,
            flushes: 0,
        }
    }

    /// Reads without alignment rules (tests poke at single bytes).
    pub fn peek(&self, offset_bytes: u64, buf: &mut [u8]) {
        let mut done = 0usize;
        while done < buf.len() {
            let pos = offset_bytes + done as u64;
            let chunk = pos / MEM_CHUNK_BYTES;
            let within = (pos % MEM_CHUNK_BYTES) as usize;
            let n = (buf.len() - done).min(MEM_CHUNK_BYTES as usize - within);
            match self.chunks.get(&chunk) {
                Some(c) => buf[done..done + n].copy_from_slice(&c[within..within + n]),
                None => buf[done..done + n].fill(0),
            }
            done += n;
        }
    }

    /// Writes without alignment rules or counting (tests corrupt bytes with it).
    pub fn poke(&mut self, offset_bytes: u64, data: &[u8]) {
        let mut done = 0usize;
        while done < data.len() {
            let pos = offset_bytes + done as u64;
            let chunk = pos / MEM_CHUNK_BYTES;
            let within = (pos % MEM_CHUNK_BYTES) as usize;
            let n = (data.len() - done).min(MEM_CHUNK_BYTES as usize - within);
            let c = self
                .chunks
                .entry(chunk)
                .or_insert_with(|| std::sync::Arc::new(vec![0; MEM_CHUNK_BYTES as usize]));
            std::sync::Arc::make_mut(c)[within..within + n].copy_from_slice(&data[done..done + n]);
            done += n;
        }
    }
}

impl Device for MemDevice {
    fn size_bytes(&self) -> u64 {
        self.size_bytes
    }
    fn sector_bytes(&self) -> u32 {
        self.sector_bytes
    }
    fn read_at(&self, offset_bytes: u64, buf: &mut [u8]) -> io::Result<()> {
        check_range(self.size_bytes, offset_bytes, buf.len())?;
        self.peek(offset_bytes, buf);
        Ok(())
    }
    fn write_at(&mut self, offset_bytes: u64, buf: &[u8]) -> io::Result<()> {
        check_range(self.size_bytes, offset_bytes, buf.len())?;
        self.writes += 1;
        self.poke(offset_bytes, buf);
        Ok(())
    }
    fn flush(&mut self) -> io::Result<()> {
        self.flushes += 1;
        Ok(())
    }
}

/// A zero-initialised byte buffer whose start is aligned to [`IO_ALIGN_BYTES`], as
/// `O_DIRECT` requires. Safe code: it over-allocates and starts at the first aligned byte.
pub struct AlignedBuf {
    storage: Vec<u8>,
    start: usize,
    len: usize,
}

impl AlignedBuf {
    pub fn zeroed(len: usize) -> Self {
        let align = IO_ALIGN_BYTES as usize;
        let storage = vec![0u8; len + align];
        let addr = storage.as_ptr() as usize;
        let start = (align - addr % align) % align;
        AlignedBuf {
            storage,
            start,
            len,
        }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl std::ops::Deref for AlignedBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.storage[self.start..self.start + self.len]
    }
}

impl std::ops::DerefMut for AlignedBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        &mut self.storage[self.start..self.start + self.len]
    }
}

/// How a [`CrashDevice`] loses power.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CrashMode {
    /// Writes since the last flush reach the media in order up to the crash; the
    /// write that is cut is torn at a sector boundary.
    InOrderTorn,
    /// Each write since the last flush reaches the media or not, at random; the write
    /// that is cut is torn.
    RandomSubsetTorn,
}

/// A device with a durable image (what survives power loss) and a live image (what
/// reads see). Writes land in the live image and a pending list; `flush` makes them
/// durable. A countdown cuts the power at a chosen write: from then on every call
/// fails, and [`CrashDevice::crash_image`] returns what the media would hold.
pub struct CrashDevice {
    live: MemDevice,
    durable: MemDevice,
    pending: Vec<(u64, Vec<u8>)>,
    writes_left: Option<u64>,
    mode: CrashMode,
    rng: rand_chacha::ChaCha8Rng,
    after_crash: Option<MemDevice>,
    /// Writes accepted so far.
    pub writes: u64,
}

impl CrashDevice {
    pub fn new(image: MemDevice, mode: CrashMode, seed: u64) -> Self {
        use rand_core::SeedableRng;
        CrashDevice {
            live: image.clone(),
            durable: image,
            pending: Vec::new(),
            writes_left: None,
            mode,
            rng: rand_chacha::ChaCha8Rng::seed_from_u64(seed),
            after_crash: None,
            writes: 0,
        }
    }

    /// Cuts the power during the `n`-th write from now (0 = the next one).
    pub fn crash_after_writes(&mut self, n: u64) {
        self.writes_left = Some(n);
    }

    pub fn crashed(&self) -> bool {
        self.after_crash.is_some()
    }

    /// The media after the power cut (`None` if it has not happened).
    pub fn crash_image(&self) -> Option<MemDevice> {
        self.after_crash.clone()
    }

    fn power_cut(&mut self, offset_bytes: u64, buf: &[u8]) {
        use rand_core::RngCore;
        let mut img = self.durable.clone();
        for (off, data) in &self.pending {
            let lands = match self.mode {
                CrashMode::InOrderTorn => true,
                CrashMode::RandomSubsetTorn => self.rng.next_u32().is_multiple_of(2),
            };
            if lands {
                img.poke(*off, data);
            }
        }
        let sector = self.live.sector_bytes as usize;
        let sectors = buf.len() / sector;
        let keep = (self.rng.next_u64() % (sectors as u64 + 1)) as usize;
        img.poke(offset_bytes, &buf[..keep * sector]);
        self.after_crash = Some(img);
    }

    fn dead() -> io::Error {
        io::Error::other("power cut (simulated crash)")
    }
}

impl Device for CrashDevice {
    fn size_bytes(&self) -> u64 {
        self.live.size_bytes
    }
    fn sector_bytes(&self) -> u32 {
        self.live.sector_bytes
    }
    fn read_at(&self, offset_bytes: u64, buf: &mut [u8]) -> io::Result<()> {
        if self.crashed() {
            return Err(Self::dead());
        }
        self.live.read_at(offset_bytes, buf)
    }
    fn write_at(&mut self, offset_bytes: u64, buf: &[u8]) -> io::Result<()> {
        if self.crashed() {
            return Err(Self::dead());
        }
        check_range(self.live.size_bytes, offset_bytes, buf.len())?;
        if self.writes_left == Some(0) {
            self.power_cut(offset_bytes, buf);
            return Err(Self::dead());
        }
        if let Some(n) = self.writes_left.as_mut() {
            *n -= 1;
        }
        self.writes += 1;
        self.live.write_at(offset_bytes, buf)?;
        self.pending.push((offset_bytes, buf.to_vec()));
        Ok(())
    }
    fn flush(&mut self) -> io::Result<()> {
        if self.crashed() {
            return Err(Self::dead());
        }
        for (off, data) in self.pending.drain(..) {
            self.durable.poke(off, &data);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aligned_buf_is_aligned_and_zeroed() {
        for len in [0usize, 1, 4096, 12345, 1 << 20] {
            let b = AlignedBuf::zeroed(len);
            assert_eq!(b.len(), len);
            assert_eq!(b.as_ptr() as usize % IO_ALIGN_BYTES as usize, 0);
            assert!(b.iter().all(|&x| x == 0));
        }
    }

    #[test]
    fn mem_device_rejects_unaligned_and_out_of_range() {
        let mut d = MemDevice::new(1 << 20);
        assert!(d.write_at(1, &[0u8; 4096]).is_err());
        assert!(d.write_at(0, &[0u8; 100]).is_err());
        assert!(d.write_at(1 << 20, &[0u8; 4096]).is_err());
        d.write_at(4096, &[7u8; 4096]).unwrap();
        let mut b = [0u8; 4096];
        d.read_at(4096, &mut b).unwrap();
        assert!(b.iter().all(|&x| x == 7));
    }
}
