//! The image store: the emulated disk's bytes in a (sparse) host file.
//!
//! Contract: the image is opened read-write and locked exclusively (`flock`, the
//! lock `dvrfs_io::FileDevice` takes too), so a second emulator, or a dvrfs command,
//! on the same image is refused instead of sharing it. Bytes move with buffered
//! `pread`/`pwrite` (the host's page cache is the emulator's business, not the
//! emulated disk's: the disk's timing comes from the model, never from the host);
//! [`Image::sync`] is `fdatasync`, what a FLUSH CACHE of the emulated disk does for
//! the image. A write of zeros punches a hole instead of storing them, so filling a
//! file system with zeros does not fill the host disk; a read of a hole gives zeros
//! as any read of a sparse file does.
//!
//! Fault model: a failed host call is returned as its `io::Error` and the command
//! fails with `EIO` (the drive still times it); nothing is retried or hidden.

use std::fs::{File, OpenOptions, TryLockError};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

/// Why an image cannot be served.
#[derive(Debug, thiserror::Error)]
pub enum ImageError {
    #[error("{path}: no such image file")]
    Missing { path: PathBuf },
    #[error("{path}: not a regular file")]
    NotAFile { path: PathBuf },
    #[error("{path} is in use (another dvrfs emulate or dvrfs command has it open)")]
    InUse { path: PathBuf },
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: io::Error },
}

/// The emulated disk's bytes.
#[derive(Debug)]
pub struct Image {
    file: File,
    path: PathBuf,
    size_bytes: u64,
}

impl Image {
    /// Opens and locks an existing image; its length is the emulated disk's size.
    pub fn open(path: &Path) -> Result<Image, ImageError> {
        let io_err = |source: io::Error| ImageError::Io {
            path: path.to_path_buf(),
            source,
        };
        let meta = match std::fs::metadata(path) {
            Ok(m) => m,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Err(ImageError::Missing {
                    path: path.to_path_buf(),
                })
            }
            Err(e) => return Err(io_err(e)),
        };
        if !meta.is_file() {
            return Err(ImageError::NotAFile {
                path: path.to_path_buf(),
            });
        }
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .map_err(io_err)?;
        match file.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => {
                return Err(ImageError::InUse {
                    path: path.to_path_buf(),
                })
            }
            Err(TryLockError::Error(e)) => return Err(io_err(e)),
        }
        let size_bytes = file.metadata().map_err(io_err)?.len();
        Ok(Image {
            file,
            path: path.to_path_buf(),
            size_bytes,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn size_bytes(&self) -> u64 {
        self.size_bytes
    }

    /// Reads `buf.len()` bytes at `offset` (inside the image: the caller clips).
    pub fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        assert!(
            offset + buf.len() as u64 <= self.size_bytes,
            "a read inside the image"
        );
        self.file.read_exact_at(buf, offset)
    }

    /// Writes `data` at `offset` (inside the image); all zeros punch a hole
    /// instead (see the module docs). Returns whether it punched.
    pub fn write_at(&self, data: &[u8], offset: u64) -> io::Result<bool> {
        assert!(
            offset + data.len() as u64 <= self.size_bytes,
            "a write inside the image"
        );
        if !data.is_empty() && data.iter().all(|&b| b == 0) {
            match dvrfs_io::files::punch_hole(&self.file, offset, data.len() as u64) {
                Ok(()) => return Ok(true),
                // A host file system without holes: store the zeros.
                Err(e) if e.raw_os_error() == Some(libc::EOPNOTSUPP) => {}
                Err(e) => return Err(e),
            }
        }
        self.file.write_all_at(data, offset)?;
        Ok(false)
    }

    /// Makes what was written durable in the image (`fdatasync`).
    pub fn sync(&self) -> io::Result<()> {
        self.file.sync_data()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    fn image(dir: &Path, size: u64) -> PathBuf {
        let p = dir.join("disk.img");
        File::create(&p).unwrap().set_len(size).unwrap();
        p
    }

    #[test]
    fn a_second_open_of_a_locked_image_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let p = image(dir.path(), 1 << 20);
        let first = Image::open(&p).unwrap();
        assert!(matches!(Image::open(&p), Err(ImageError::InUse { .. })));
        drop(first);
        assert!(Image::open(&p).is_ok(), "the lock goes with the image");
    }

    #[test]
    fn a_missing_image_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let e = Image::open(&dir.path().join("nope.img")).unwrap_err();
        assert!(matches!(e, ImageError::Missing { .. }), "{e}");
    }

    #[test]
    fn zeros_punch_a_hole_and_read_back_as_zeros() {
        let dir = tempfile::tempdir().unwrap();
        let p = image(dir.path(), 8 << 20);
        let img = Image::open(&p).unwrap();
        let data: Vec<u8> = (0..4 << 20).map(|i| (i % 251) as u8 + 1).collect();
        assert!(!img.write_at(&data, 1 << 20).unwrap());
        img.sync().unwrap();
        let stored = std::fs::metadata(&p).unwrap().blocks() * 512;
        assert!(stored >= 4 << 20, "the data is stored: {stored}");
        // Zeros over the middle 2 MiB: stored bytes shrink, reads give zeros.
        assert!(img.write_at(&vec![0; 2 << 20], 2 << 20).unwrap());
        img.sync().unwrap();
        let after = std::fs::metadata(&p).unwrap().blocks() * 512;
        assert!(
            after + (2 << 20) <= stored,
            "{after} after, {stored} before"
        );
        let mut back = vec![0xff; 4 << 20];
        img.read_at(&mut back, 1 << 20).unwrap();
        assert_eq!(&back[..1 << 20], &data[..1 << 20]);
        assert!(back[1 << 20..3 << 20].iter().all(|&b| b == 0));
        assert_eq!(&back[3 << 20..], &data[3 << 20..]);
        assert_eq!(img.size_bytes(), 8 << 20, "the size is kept");
    }
}
