//! Owned I/O buffers: real, 4 KiB-aligned memory for devices, or virtual (a length
//! only) for the simulator, which moves no data.

use crate::device::AlignedBuf;

/// A buffer an operation owns while the engine works on it and gets back when it
/// completes. The engine never moves the bytes of a `Mem` buffer while a device
/// command that uses them is in flight, so a driver may hand their address to the
/// kernel (io_uring) between `poll` and `complete`.
pub enum IoBuf {
    /// Real memory, 4 KiB-aligned (what `O_DIRECT` needs).
    Mem(AlignedBuf),
    /// Memory the engine does not own: an application's buffer lent for the time of
    /// one operation (the C API's `aio_buf`). Its owner vouches for it (see
    /// [`ExternalBuf`]).
    External(Box<dyn ExternalBuf>),
    /// A length without memory: the simulator's buffers. Reads fill nothing, writes
    /// carry nothing; everything else (planning, scheduling, metadata) is the same.
    /// On a volume with data checksums a virtual write stores a placeholder checksum
    /// that no real read matches: data-less volumes are made without checksums.
    Virtual(usize),
}

/// Memory lent to the engine for one operation. The implementor guarantees that the
/// slices it returns stay valid, and are touched by nobody else, until the operation's
/// completion has been taken and this value dropped (the contract of an asynchronous
/// I/O control block). The engine keeps the value in place while a device command
/// uses it, so a driver may hand the address to the kernel meanwhile.
pub trait ExternalBuf: Send + std::any::Any {
    fn bytes(&self) -> &[u8];
    fn bytes_mut(&mut self) -> &mut [u8];
}

impl IoBuf {
    pub fn zeroed(len: usize) -> IoBuf {
        IoBuf::Mem(AlignedBuf::zeroed(len))
    }

    /// A buffer of `len` bytes that holds no memory.
    pub fn virtual_len(len: usize) -> IoBuf {
        IoBuf::Virtual(len)
    }

    /// A copy of `data` in aligned memory.
    pub fn from_slice(data: &[u8]) -> IoBuf {
        let mut b = AlignedBuf::zeroed(data.len());
        b.copy_from_slice(data);
        IoBuf::Mem(b)
    }

    pub fn len(&self) -> usize {
        match self {
            IoBuf::Mem(b) => b.len(),
            IoBuf::External(b) => b.bytes().len(),
            IoBuf::Virtual(n) => *n,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn is_virtual(&self) -> bool {
        matches!(self, IoBuf::Virtual(_))
    }

    /// The bytes, `None` for a virtual buffer.
    pub fn bytes(&self) -> Option<&[u8]> {
        match self {
            IoBuf::Mem(b) => Some(b),
            IoBuf::External(b) => Some(b.bytes()),
            IoBuf::Virtual(_) => None,
        }
    }

    pub fn bytes_mut(&mut self) -> Option<&mut [u8]> {
        match self {
            IoBuf::Mem(b) => Some(b),
            IoBuf::External(b) => Some(b.bytes_mut()),
            IoBuf::Virtual(_) => None,
        }
    }

    /// A zeroed buffer like this one (real or virtual) of `len` bytes.
    pub(crate) fn sibling(&self, len: usize) -> IoBuf {
        match self {
            IoBuf::Mem(_) | IoBuf::External(_) => IoBuf::zeroed(len),
            IoBuf::Virtual(_) => IoBuf::Virtual(len),
        }
    }
}

impl std::fmt::Debug for IoBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            IoBuf::Mem(b) => write!(f, "IoBuf::Mem({} bytes)", b.len()),
            IoBuf::External(b) => write!(f, "IoBuf::External({} bytes)", b.bytes().len()),
            IoBuf::Virtual(n) => write!(f, "IoBuf::Virtual({n} bytes)"),
        }
    }
}

/// Copies `len` bytes from `src[s..]` to `dst[d..]` where both buffers are real; a
/// virtual side makes it a no-op.
pub(crate) fn copy(src: &IoBuf, s: usize, dst: &mut IoBuf, d: usize, len: usize) {
    if let (Some(a), Some(b)) = (src.bytes(), dst.bytes_mut()) {
        b[d..d + len].copy_from_slice(&a[s..s + len]);
    }
}

/// Zeros `dst[d..d + len]` (no-op for a virtual buffer).
pub(crate) fn zero(dst: &mut IoBuf, d: usize, len: usize) {
    if let Some(b) = dst.bytes_mut() {
        b[d..d + len].fill(0);
    }
}
