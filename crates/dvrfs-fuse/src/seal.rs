//! The integrity chain through the mount (issue 25; `dvrfs_core::chain`): files
//! written through the mount into a stream directory are sealed when they are
//! finished, and removals through the mount are recorded, as `dvrfs record --chunk`
//! and `dvrfs rm` do, so that `dvrfs verify` tells a camera's segments intact,
//! deleted with a record, missing or modified.
//!
//! - **A stream directory** is one holding a `.chain` file (made by `record --chunk`,
//!   or by the operator: `touch DIR/.chain`). A file created through the mount in
//!   one (a name not starting with `.`) is sealed.
//! - **The SHA-256 is computed while writing**: each write at the end of what has
//!   been hashed goes into the hash as it arrives. A file written otherwise (an MP4
//!   muxer going back to patch its `mdat` size, a write that failed) is hashed by
//!   reading it back at the seal, best-effort, so every seal is of the bytes on the
//!   disk.
//! - **The seal** comes at the file's last close, once its bytes are applied (the
//!   engine has its index then: its first keyframe's UTC is `from`, its last plus
//!   one keyframe interval `to`), under the name the file has then in that
//!   directory: a file renamed elsewhere or removed before its close is not sealed.
//!   A name whose seal stands is never sealed again: a finished chunk opened and
//!   written later shows as modified, never as re-sealed.
//! - **A removal** (`unlink`) of a name the chain sealed appends a `deleted` line,
//!   `by` naming the mount and the process (`dvrfs mount (uid U, pid P)`).
//! - One chain is appended at a time (a lock), so two segments finished together
//!   link one after the other.
//!
//! A seal or record that cannot be written (the disk full, an I/O error) does not
//! fail the application's close or unlink; it goes to the daemon's log, and `verify`
//! then shows the chunk unsealed or missing.
//! - **A rename** of a sealed name out of its name is recorded as its removal
//!   (`by` ending `, renamed to NEW`); a file still being written follows its new
//!   name (a muxer's `x.ts.tmp` renamed to `x.ts` before its close is sealed as
//!   `x.ts`; one renamed after its close was sealed under the old name).
//!
//! - **A rename onto a sealed name** records the replaced chunk's removal (`by`
//!   ending `, replaced by OLD renamed onto it`). A name whose seal was recorded as
//!   removed is free: a file finished under it later is sealed again, a new
//!   generation of the name (`verify` lists each).
//!
//! Not covered: files written through the daemon's API by other programs (`record
//! --chunk` seals its own).

use std::collections::HashMap;
use std::sync::Mutex;

use dvrfs_core::chain::{self, ChainStore, Seal, CHAIN_NAME};
use dvrfs_core::format::dir::Kind;
use dvrfs_core::format::frame_index::FrameEntry;
use dvrfs_core::meta::Ino;
use dvrfs_core::{IoBuf, Op, Output};
use dvrfs_runtime::Runtime;
use sha2::{Digest, Sha256};

use crate::lock;

/// Bytes read at a time when a file is hashed back.
const READ_BACK_BYTES: usize = 1 << 20;
/// Who the mount's own chain operations are for (best-effort traffic).
const OWNER: u32 = 0;

/// A file being written in a stream directory: where it was made and its hash so far.
struct Hashing {
    dir: Ino,
    name: Vec<u8>,
    sha: Sha256,
    /// Bytes hashed, from the first: the writes so far came in order, each at the end.
    hashed: u64,
    /// A write came elsewhere (or failed): the seal reads the file back.
    out_of_order: bool,
}

/// The mount's sealing (module docs).
#[derive(Default)]
pub(crate) struct Sealing {
    files: Mutex<HashMap<Ino, Hashing>>,
    /// Held while a chain is read and appended.
    chain: Mutex<()>,
}

/// The chain through the mount's engine.
struct Store<'a>(&'a Runtime);

impl ChainStore for Store<'_> {
    type Error = String;
    fn find(&mut self, dir: Ino, name: &str) -> Result<Option<Ino>, String> {
        let name = name.as_bytes().to_vec();
        match self.0.query(move |v| v.lookup(dir, &name)) {
            Ok(Ok(i)) => Ok(Some(i)),
            Ok(Err(dvrfs_core::Error::NotFound(_))) => Ok(None),
            Ok(Err(e)) => Err(e.to_string()),
            Err(e) => Err(e.to_string()),
        }
    }
    fn make(&mut self, dir: Ino, name: &str) -> Result<Ino, String> {
        let op = Op::Create {
            parent: dir,
            name: name.as_bytes().to_vec(),
            perm: 0o644,
            uid: 0,
            gid: 0,
        };
        match self.0.run_waiting(op, None, OWNER) {
            Ok(Output::Ino(i)) => Ok(i),
            Ok(o) => Err(format!("a create returned {o:?}")),
            Err(e) => Err(e.to_string()),
        }
    }
    fn size(&mut self, ino: Ino) -> Result<u64, String> {
        match self.0.query(move |v| v.stat(ino)) {
            Ok(Ok(s)) => Ok(s.size_bytes),
            Ok(Err(e)) => Err(e.to_string()),
            Err(e) => Err(e.to_string()),
        }
    }
    fn read_at(&mut self, ino: Ino, offset: u64, len: usize) -> Result<Vec<u8>, String> {
        read_at(self.0, ino, offset, len)
    }
    fn write_at(&mut self, ino: Ino, offset: u64, data: &[u8]) -> Result<(), String> {
        let op = Op::Write {
            ino,
            offset,
            data: IoBuf::from_slice(data),
        };
        self.0
            .run_waiting(op, None, OWNER)
            .map(|_| ())
            .map_err(|e| e.to_string())
    }
    fn append_at_end(&mut self, ino: Ino, data: &[u8]) -> Result<(), String> {
        let op = Op::Append {
            ino,
            data: IoBuf::from_slice(data),
        };
        self.0
            .run_waiting(op, None, OWNER)
            .map(|_| ())
            .map_err(|e| e.to_string())
    }
    fn too_long(&self, size: u64) -> String {
        format!(
            "the chain {CHAIN_NAME} holds {size} bytes, more than the {} read",
            chain::MAX_CHAIN_BYTES
        )
    }
}

fn read_at(rt: &Runtime, ino: Ino, offset: u64, len: usize) -> Result<Vec<u8>, String> {
    let op = Op::Read {
        ino,
        offset,
        buf: IoBuf::zeroed(len),
    };
    match rt.run_waiting(op, None, OWNER) {
        Ok(Output::Read { buf, bytes }) => {
            Ok(buf.bytes().expect("a memory buffer")[..bytes].to_vec())
        }
        Ok(o) => Err(format!("a read returned {o:?}")),
        Err(e) => Err(e.to_string()),
    }
}

/// UTC as RFC 3339, as the CLI writes a chain's times.
fn rfc3339(utc_ns: i64) -> String {
    jiff::Timestamp::from_nanosecond(i128::from(utc_ns))
        .map_or_else(|_| format!("{utc_ns}ns"), |t| t.to_string())
}

/// A file's UTC range from its keyframes: the first's time, and the last's plus the
/// median interval between them (empty without an index).
fn utc_range(keys: &[FrameEntry]) -> (String, String) {
    let (Some(first), Some(last)) = (keys.first(), keys.last()) else {
        return (String::new(), String::new());
    };
    let interval = dvrfs_core::format::frame_index::median_interval_ns(keys);
    (
        rfc3339(first.utc_ns),
        rfc3339(last.utc_ns.saturating_add(interval)),
    )
}

impl Sealing {
    /// File `ino` was created as `name` in directory `dir`: tracked if `dir` is a
    /// stream directory.
    pub(crate) fn created(&self, rt: &Runtime, dir: Ino, name: &[u8], ino: Ino) {
        if name.starts_with(b".") || !matches!(Store(rt).find(dir, CHAIN_NAME), Ok(Some(_))) {
            return;
        }
        lock(&self.files).insert(
            ino,
            Hashing {
                dir,
                name: name.to_vec(),
                sha: Sha256::new(),
                hashed: 0,
                out_of_order: false,
            },
        );
    }

    /// Bytes written to file `ino` at `offset` (before the write is attempted).
    pub(crate) fn wrote(&self, ino: Ino, offset: u64, data: &[u8]) {
        let mut files = lock(&self.files);
        let Some(h) = files.get_mut(&ino) else {
            return;
        };
        if h.out_of_order {
            return;
        }
        if offset == h.hashed {
            h.sha.update(data);
            h.hashed += data.len() as u64;
        } else {
            h.out_of_order = true;
        }
    }

    /// File `ino` changed otherwise than by a write in order (a write failed, it was
    /// truncated): the seal reads it back.
    pub(crate) fn unhashed(&self, ino: Ino) {
        if let Some(h) = lock(&self.files).get_mut(&ino) {
            h.out_of_order = true;
        }
    }

    /// The last close of file `ino`, its bytes applied: sealed if it was tracked.
    pub(crate) fn closed(&self, rt: &Runtime, ino: Ino) {
        let Some(h) = lock(&self.files).remove(&ino) else {
            return;
        };
        let name = String::from_utf8_lossy(&h.name).into_owned();
        if let Err(why) = self.seal(rt, ino, h) {
            eprintln!(
                "{} dvrfs mount: {name} was not sealed in its directory's {CHAIN_NAME}: {why}",
                crate::stamp()
            );
        }
    }

    fn seal(&self, rt: &Runtime, ino: Ino, h: Hashing) -> Result<(), String> {
        let Ok(name) = String::from_utf8(h.name.clone()) else {
            return Ok(());
        };
        let mut store = Store(rt);
        // Still there under its name: else renamed away or removed, not sealed.
        if store.find(h.dir, &name)? != Some(ino) {
            return Ok(());
        }
        let bytes = store.size(ino)?;
        let sha: [u8; 32] = if !h.out_of_order && h.hashed == bytes {
            h.sha.finalize().into()
        } else {
            let mut sha = Sha256::new();
            let mut at = 0;
            while at < bytes {
                let got = read_at(rt, ino, at, READ_BACK_BYTES.min((bytes - at) as usize))?;
                if got.is_empty() {
                    return Err(format!("its read back stopped at byte {at} of {bytes}"));
                }
                sha.update(&got);
                at += got.len() as u64;
            }
            sha.finalize().into()
        };
        let keys = rt
            .query(move |v| {
                v.frame_index(ino)
                    .map(|ix| ix.map(|ix| ix.entries().to_vec()))
            })
            .map_err(|e| e.to_string())?
            .map_err(|e| e.to_string())?
            .unwrap_or_default();
        let (from, to) = utc_range(&keys);
        let _one = lock(&self.chain);
        let Some((_, ch)) = chain::read(&mut store, h.dir)? else {
            return Ok(());
        };
        if ch.sealed(&name) {
            return Ok(());
        }
        let seal = Seal {
            name,
            bytes,
            sha256: sha,
            from,
            to,
        };
        chain::seal(&mut store, h.dir, &ch.tip(), seal)?;
        Ok(())
    }

    /// `from` in directory `from_dir` was renamed to `to` in `to_dir` by process
    /// `pid` of user `uid`, replacing a file there if `replaced`: a sealed name that
    /// left its directory is recorded as removed ("renamed to"), a sealed file the
    /// rename replaced too ("replaced by"), and a file being written there follows
    /// its new name (sealed under it, if its new directory keeps a chain: the name's
    /// earlier seal was just recorded as removed).
    pub(crate) fn renamed(
        &self,
        rt: &Runtime,
        (from_dir, from): (Ino, &[u8]),
        (to_dir, to): (Ino, &[u8]),
        replaced: bool,
        (uid, pid): (u32, u32),
    ) {
        if (from_dir, from) == (to_dir, to) {
            return;
        }
        let how = format!(", renamed to {}", String::from_utf8_lossy(to));
        self.record(rt, from_dir, from, uid, pid, &how);
        if replaced {
            let how = format!(
                ", replaced by {} renamed onto it",
                String::from_utf8_lossy(from)
            );
            self.record(rt, to_dir, to, uid, pid, &how);
        }
        let name = to.to_vec();
        let Ok(Ok(ino)) = rt.query(move |v| v.lookup(to_dir, &name)) else {
            return;
        };
        let mut files = lock(&self.files);
        if let Some(h) = files.get_mut(&ino) {
            let chain = matches!(Store(rt).find(to_dir, CHAIN_NAME), Ok(Some(_)));
            if to.starts_with(b".") || !chain {
                files.remove(&ino);
            } else {
                h.dir = to_dir;
                h.name = to.to_vec();
            }
        }
    }

    /// `name` (not a directory) was removed from directory `dir` by process `pid` of
    /// user `uid`: recorded if the chain there sealed it.
    pub(crate) fn removed(&self, rt: &Runtime, dir: Ino, name: &[u8], uid: u32, pid: u32) {
        self.record(rt, dir, name, uid, pid, "");
    }

    fn record(&self, rt: &Runtime, dir: Ino, name: &[u8], uid: u32, pid: u32, how: &str) {
        let _one = lock(&self.chain);
        let now_ns = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as i64);
        let by = format!("dvrfs mount (uid {uid}, pid {pid}){how}");
        let r = chain::record_removal(&mut Store(rt), dir, name, Kind::File, &by, &rfc3339(now_ns));
        if let Err(why) = r {
            eprintln!(
                "{} dvrfs mount: the removal of {} was not recorded in its directory's {CHAIN_NAME}: {why}",
                crate::stamp(),
                String::from_utf8_lossy(name)
            );
        }
    }
}
