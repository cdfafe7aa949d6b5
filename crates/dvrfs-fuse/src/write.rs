//! `write`: which path a write of an open file takes.
//!
//! - A file with a write stream, written at the stream's position: into the stream's
//!   buffer ([`crate::stream`]); a write that must wait for buffer room (a recorder
//!   ahead of its rate) is parked ([`crate::park`]) and holds no session thread.
//! - Elsewhere in a file with a stream: beside it (`write_beside_stream`).
//! - Any other file: gathered into chunks, or straight to the disk for an
//!   `O_DIRECT` handle ([`crate::file`]).
//!
//! Every path but the stream's own refuses a user's write that would take some of
//! the share kept for root ([`crate::share`]).

use crate::share::Writer;
use crate::{err, lock, DvrfsFs};
use fuser::{FileHandle, ReplyWrite, Request};

impl DvrfsFs {
    pub(crate) fn do_write(
        &self,
        req: &Request,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        reply: ReplyWrite,
    ) {
        if self.read_only {
            return reply.error(err(libc::EROFS));
        }
        // Past the largest file the volume holds: EFBIG at the call, as `truncate`
        // refuses the same size, not a file whose size shows 4 EiB until fsync fails.
        let end = offset.checked_add(data.len() as u64);
        if end.is_none_or(|e| e > dvrfs_core::volume::max_file_bytes(self.block_bytes)) {
            return reply.error(err(libc::EFBIG));
        }
        let h = match self.handle(fh) {
            Ok(h) => h,
            Err(e) => return reply.error(err(e)),
        };
        let Some(st) = self.state(h.ino) else {
            return reply.error(err(libc::EBADF));
        };
        let mut st = lock(&st);
        self.resume(&mut st, fh.0, req.pid());
        // A user's write that needs new blocks may not take the share kept for root
        // (`crate::share`); one into an admitted recording's stream is not checked
        // (its space was held at admission).
        let who = Writer {
            uid: req.uid(),
            share: self.quota.root_share(),
        };
        self.seals.wrote(h.ino, offset, data);
        let r = if st.stream.is_some() {
            match st.stream_write(&self.rt, offset, data, req.pid(), reply) {
                Ok(()) => return,
                Err(reply) => (
                    self.write_beside_stream(&mut st, offset, data, req.pid(), who),
                    reply,
                ),
            }
        } else if h.direct {
            (
                st.write_through(&self.rt, offset, data, req.pid(), who),
                reply,
            )
        } else {
            (st.write(&self.rt, offset, data, req.pid(), who), reply)
        };
        match r {
            (Ok(n), reply) => reply.written(n as u32),
            (Err(e), reply) => {
                self.seals.unhashed(h.ino);
                reply.error(err(e))
            }
        }
    }
}
