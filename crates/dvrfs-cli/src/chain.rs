//! The integrity chain's stores in the CLI (`dvrfs_core::chain` holds what a line
//! says and how lines link): the engine through a handle (recording, verifying, the
//! daemon) and the blocking driver (`rm`).

pub use dvrfs_core::chain::{hex, read, record_removal, Record, CHAIN_NAME};
use dvrfs_core::chain::{ChainStore, MAX_CHAIN_BYTES};
use dvrfs_core::meta::Ino;
use dvrfs_core::{Error as CoreError, IoBuf, Op, Output};
use dvrfs_remote::Handle;

use crate::error::{CliError, CliResult};
use crate::target::DevFs;

fn not_found(e: &CoreError) -> bool {
    matches!(e, CoreError::NotFound(_))
}

fn too_long(size: u64) -> CliError {
    CliError::new(format!(
        "the chain file {CHAIN_NAME} holds {size} bytes, more than the {MAX_CHAIN_BYTES} read"
    ))
}

/// The chain through the engine of a handle.
pub struct Via<'a>(pub &'a Handle);

impl ChainStore for Via<'_> {
    type Error = CliError;
    fn too_long(&self, size: u64) -> CliError {
        too_long(size)
    }
    fn find(&mut self, dir: Ino, name: &str) -> CliResult<Option<Ino>> {
        match self.0.lookup(dir, name.as_bytes()) {
            Ok(i) => Ok(Some(i)),
            Err(dvrfs_runtime::RuntimeError::Engine(e)) if not_found(&e) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }
    fn make(&mut self, dir: Ino, name: &str) -> CliResult<Ino> {
        let (uid, gid) = crate::target::process_owner();
        let op = Op::Create {
            parent: dir,
            name: name.as_bytes().to_vec(),
            perm: 0o644,
            uid,
            gid,
        };
        match self.0.run(op, None, 0)? {
            Output::Ino(i) => Ok(i),
            o => unreachable!("a create returned {o:?}"),
        }
    }
    fn size(&mut self, ino: Ino) -> CliResult<u64> {
        Ok(self.0.stat(ino)?.size_bytes)
    }
    fn append_at_end(&mut self, ino: Ino, data: &[u8]) -> CliResult<()> {
        let op = Op::Append {
            ino,
            data: IoBuf::from_slice(data),
        };
        self.0.run(op, None, 0)?;
        Ok(())
    }
    fn read_at(&mut self, ino: Ino, offset: u64, len: usize) -> CliResult<Vec<u8>> {
        let op = Op::Read {
            ino,
            offset,
            buf: IoBuf::zeroed(len),
        };
        let Output::Read { buf, bytes } = self.0.run(op, None, 0)? else {
            unreachable!("a read returns bytes")
        };
        Ok(buf.bytes().expect("a memory buffer")[..bytes].to_vec())
    }
    fn write_at(&mut self, ino: Ino, offset: u64, data: &[u8]) -> CliResult<()> {
        let op = Op::Write {
            ino,
            offset,
            data: IoBuf::from_slice(data),
        };
        self.0.run(op, None, 0)?;
        Ok(())
    }
}

/// The chain through the blocking driver.
pub struct OnFs<'a>(pub &'a mut DevFs);

impl ChainStore for OnFs<'_> {
    type Error = CliError;
    fn too_long(&self, size: u64) -> CliError {
        too_long(size)
    }
    fn find(&mut self, dir: Ino, name: &str) -> CliResult<Option<Ino>> {
        match self.0.lookup(dir, name.as_bytes()) {
            Ok(i) => Ok(Some(i)),
            Err(e) if not_found(&e) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }
    fn make(&mut self, dir: Ino, name: &str) -> CliResult<Ino> {
        let (uid, gid) = crate::target::process_owner();
        Ok(self.0.create(
            dir,
            name.as_bytes(),
            0o644,
            uid,
            gid,
            crate::target::now_ns(),
        )?)
    }
    fn size(&mut self, ino: Ino) -> CliResult<u64> {
        Ok(self.0.stat(ino)?.size_bytes)
    }
    fn read_at(&mut self, ino: Ino, offset: u64, len: usize) -> CliResult<Vec<u8>> {
        let mut b = vec![0; len];
        let n = self.0.read(ino, offset, &mut b)?;
        b.truncate(n);
        Ok(b)
    }
    fn write_at(&mut self, ino: Ino, offset: u64, data: &[u8]) -> CliResult<()> {
        Ok(self.0.write(ino, offset, data, crate::target::now_ns())?)
    }
}
