//! `read`: which path a read of an open file takes.
//!
//! - A file with a read stream, read through the handle the stream plays for, at its
//!   playout point: from the stream ([`crate::stream`]); a read that must wait for
//!   the stream's bytes is parked ([`crate::park`]) and holds no session thread.
//! - Any other handle of that file (another process's `cat`, a thumbnailer, a second
//!   `open` by the player itself) reads best-effort beside the stream, as fast as the
//!   disk's best-effort share allows, never at the stream's rate (issue 22, item 6).
//! - A file without a read stream: best-effort through the file's chunk cache, with
//!   the gathered writes laid over the disk's bytes ([`crate::file`]).

use crate::file::{errno_of, Errno, FileState};
use crate::park::Waiting;
use crate::stream::REORDER_BYTES;
use crate::{lock, stamp, DvrfsFs};
use dvrfs_core::engine::{IoBuf, Op, StreamDir};
use dvrfs_core::meta::Ino;
use fuser::{FileHandle, FopenFlags, ReplyData, Request};

/// The `open` reply's flags. `FOPEN_DIRECT_IO` for an `O_DIRECT` open (or every open,
/// `--direct-io`), and for the handle a read stream plays for: the kernel then sends
/// each of the player's `read()` calls to the daemon as it is (no read-ahead, no page
/// cache), so the pages of the file another process reads are its own, read
/// best-effort, and never pages the kernel is still waiting for at the stream's rate
/// (issue 22, item 6). Only the daemon's view of the handle stays buffered: its reads
/// go to the stream. A shared `mmap` of such a handle needs the kernel's
/// `FUSE_DIRECT_IO_ALLOW_MMAP` (Linux 6.6 and later; `init` asks for it): its pages
/// then go through the page cache, read through the stream; older kernels refuse it
/// with `ENODEV` (a private mapping works on every kernel).
pub(crate) fn open_flags(direct: bool, plays: bool) -> FopenFlags {
    if direct || plays {
        FopenFlags::FOPEN_DIRECT_IO
    } else {
        FopenFlags::empty()
    }
}

impl DvrfsFs {
    pub(crate) fn do_read(
        &self,
        req: &Request,
        fh: FileHandle,
        offset: u64,
        size: u32,
        reply: ReplyData,
    ) -> Result<(), (Errno, ReplyData)> {
        let h = match self.handle(fh) {
            Ok(h) => h,
            Err(e) => return Err((e, reply)),
        };
        let Some(st) = self.state(h.ino) else {
            return Err((libc::EBADF, reply));
        };
        let mut st = lock(&st);
        self.resume(&mut st, fh.0, req.pid());
        if !h.direct && st.stream.is_some() {
            let fsize = match self.stat(h.ino) {
                Ok(s) => st.size_with_pending(s.size_bytes),
                Err(e) => return Err((e, reply)),
            };
            let reply = match self.stream_read(
                &mut st,
                fh.0,
                offset,
                size as usize,
                fsize,
                req.pid(),
                reply,
            ) {
                Ok(()) => return Ok(()),
                Err(reply) => reply,
            };
            // Not the stream's read: best-effort, the engine adding what a recording
            // holds in its buffer.
            let mut reply = Some(reply);
            let send = |bytes: &[u8]| reply.take().expect("replied once").data(bytes);
            return match st.read(
                &self.rt,
                offset,
                size as usize,
                fsize,
                false,
                req.pid(),
                send,
            ) {
                Ok(()) => Ok(()),
                Err(e) => Err((e, reply.take().expect("not replied on an error"))),
            };
        }
        // O_DIRECT: what this file wrote goes to the disk first. Buffered: only what is
        // in flight must land; gathered bytes are served from memory.
        let settled = h.direct || !st.has_gathered();
        if settled {
            if let Err(e) = st.settle(&self.rt, req.pid()) {
                return Err((e, reply));
            }
        } else {
            st.land_inflight(&self.rt);
        }
        let file_size = match self.stat(h.ino) {
            Ok(s) if s.nlink == 0 && offset >= s.size_bytes => {
                // At the end of a file with no name left: the engine says whether
                // retention expired it under its readers (rule 6), cutting it to
                // nothing; then the reader gets ESTALE, not an end of file.
                if let Err(e) = self.expired_check(h.ino, offset, req.pid()) {
                    return Err((e, reply));
                }
                s.size_bytes
            }
            Ok(s) => s.size_bytes,
            Err(e) => return Err((e, reply)),
        };
        // The reply is sent from inside (the bytes may be the cached chunk itself); on
        // an error it has not been used and comes back.
        let mut reply = Some(reply);
        let send = |bytes: &[u8]| reply.take().expect("replied once").data(bytes);
        let r = if settled {
            st.read(
                &self.rt,
                offset,
                size as usize,
                file_size,
                h.direct,
                req.pid(),
                send,
            )
        } else {
            st.read_with_gathered(&self.rt, offset, size as usize, file_size, req.pid(), send)
        };
        match r {
            Ok(()) => Ok(()),
            Err(e) => Err((e, reply.take().expect("not replied on an error"))),
        }
    }

    /// A read of one byte at `offset`, at or past the end of file `ino`: nothing,
    /// or the engine's refusal of a file expired under its readers (`ESTALE`).
    fn expired_check(&self, ino: Ino, offset: u64, pid: u32) -> Result<(), Errno> {
        let op = Op::Read {
            ino,
            offset,
            buf: IoBuf::zeroed(1),
        };
        match self.rt.run_waiting(op, None, pid) {
            Ok(_) => Ok(()),
            Err(e) => Err(errno_of(&e)),
        }
    }

    /// A read through handle `fh` of a file with a stream (`size`: the file's size):
    /// answered from the stream's stash, or parked for its bytes. The reply comes
    /// back when the read is not the stream's (the caller reads best-effort).
    #[allow(clippy::too_many_arguments)]
    fn stream_read(
        &self,
        st: &mut FileState,
        fh: u64,
        offset: u64,
        len: usize,
        size: u64,
        pid: u32,
        reply: ReplyData,
    ) -> Result<(), ReplyData> {
        let Some(s) = st.stream.as_mut().filter(|s| s.res.dir == StreamDir::Read) else {
            return Err(reply);
        };
        match s.owner_fh {
            Some(o) if o != fh => return Err(reply),
            Some(_) => {}
            // Pending, no open took it: another user's handle reads beside it
            // (`crate::quota`).
            None if !s.used => return Err(reply),
            None => s.owner_fh = Some(fh),
        }
        let end = (offset + len as u64).min(size);
        if offset >= end {
            reply.data(&[]);
            return Ok(());
        }
        let stash_start = s.next - s.stash.len() as u64;
        if offset < stash_start || offset > s.next + REORDER_BYTES {
            // The reader jumped: the stream starts again where it reads now.
            let res = s.res.clone();
            let start = offset - offset % 4096;
            let _ = self.detach(st, &format!("a seek to byte {offset}"));
            if let Err(e) = self.attach(st, res, start, true, pid) {
                eprintln!(
                    "{} dvrfs: inode {}: a seek to byte {offset} ended its read reservation (errno {e}); reads go on best-effort",
                    stamp(),
                    st.ino
                );
                return Err(reply);
            }
            st.stream.as_mut().expect("attached").owner_fh = Some(fh);
        }
        let s = st.stream.as_mut().expect("attached");
        s.reader = Some(pid);
        if end <= s.next {
            let stash_start = s.next - s.stash.len() as u64;
            reply.data(&s.stash[(offset - stash_start) as usize..(end - stash_start) as usize]);
            return Ok(());
        }
        st.stream_park(
            &self.rt,
            Waiting {
                offset,
                end,
                pid,
                reply,
            },
            pid,
        )
    }

    /// Serves reads that waited for a stream that ended, best-effort.
    pub(crate) fn serve_best_effort(&self, st: &mut FileState, waiting: Vec<Waiting>) {
        if waiting.is_empty() {
            return;
        }
        let size = match self.stat(st.ino) {
            Ok(s) => st.size_with_pending(s.size_bytes),
            Err(e) => {
                for w in waiting {
                    w.reply.error(crate::err(e));
                }
                return;
            }
        };
        for w in waiting {
            let mut reply = Some(w.reply);
            let send = |bytes: &[u8]| reply.take().expect("replied once").data(bytes);
            let len = (w.end - w.offset) as usize;
            if let Err(e) = st.read(&self.rt, w.offset, len, size, false, w.pid, send) {
                reply
                    .take()
                    .expect("not replied on an error")
                    .error(crate::err(e));
            }
        }
    }
}
