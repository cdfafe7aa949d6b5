//! Data planning: turning a read, a write or a truncate into device requests.
//!
//! A read is planned against the applied metadata ([`Volume::plan_read`]): holes read
//! as zeros, bytes still in a recording's buffer or the tail log are copied from
//! there, and the rest becomes requests into the operation's buffer or a bounce
//! buffer. A write reserves its blocks when planned ([`Volume::plan_write`]) and
//! becomes one access per device extent: direct from the operation's buffer, or
//! composed in a bounce buffer, after reading back (read-modify-write) the bytes of
//! the sectors it shares with the file's earlier contents. Invariant: a composed
//! access is written only once all its read-back ranges are in and verified, and its
//! checksums are computed over the exact bytes that go to the disk.
//!
//! [`Volume::plan_read`]: crate::volume::Volume::plan_read
//! [`Volume::plan_write`]: crate::volume::Volume::plan_write

use super::buf::{self, IoBuf};
use super::checksums::{failed_check, sum_crcs};
use super::device::{Piece, PieceBuf, Then};
use super::op_state::Access;
use super::{Body, Engine, Now, OpId, Output, Stage};
use crate::volume::{Fill, PlannedIo, WritePlan};

impl Engine {
    pub(super) fn start_read(&mut self, id: OpId, now: Now) -> bool {
        let (ino, offset, len) = match &self.ops[&id].body {
            Body::Read {
                ino, offset, buf, ..
            } => (*ino, *offset, buf.len()),
            _ => unreachable!("start_read of a read"),
        };
        // A read checks whole checksum granules: none may be rewritten meanwhile.
        let range = self.granule_range(offset, len as u64);
        if self.read_must_wait(ino, range) {
            return false;
        }
        let plan = match self.vol.plan_read(ino, offset, len) {
            Ok(p) => p,
            Err(e) => {
                self.finish(id, Err(e), now);
                return true;
            }
        };
        // Bytes of a recording still in its write stream's buffer are read from
        // there (a player following a recording), and on a read-only open the bytes
        // the tail log holds past the committed size (`engine/tail_log.rs`): taken
        // out of the op for the copy.
        let mut overlay = None;
        if self.has_write_stream(ino) || self.vol.logged_tail(ino).is_some() {
            let st = self.ops.get_mut(&id).expect("op exists");
            let Body::Read { buf, .. } = &mut st.body else {
                unreachable!()
            };
            let mut b = std::mem::replace(buf, IoBuf::Virtual(0));
            for &(d, l) in &plan.zero {
                buf::zero(&mut b, d, l);
            }
            let n = self.overlay_stream_writes(ino, offset, &mut b, plan.bytes);
            let n = self.overlay_logged_tail(ino, offset, &mut b, n);
            overlay = Some((b, n));
        }
        let st = self.ops.get_mut(&id).expect("op exists");
        let Body::Read { buf, bytes, .. } = &mut st.body else {
            unreachable!()
        };
        match overlay {
            Some((b, n)) => {
                *buf = b;
                *bytes = n;
            }
            None => {
                *bytes = plan.bytes;
                for &(d, l) in &plan.zero {
                    buf::zero(buf, d, l);
                }
            }
        }
        let proto = buf.sibling(0);
        st.advance(id, Stage::Running);
        self.read_started(id, ino, range);
        if plan.io.is_empty() {
            self.op_data_done(id, now);
            return true;
        }
        for io in plan.io {
            let checks = io.checks;
            let (pb, then) = match io.fill {
                Fill::Direct { buf_offset } if checks.is_empty() => {
                    (PieceBuf::Op(buf_offset), Then::Nothing)
                }
                Fill::Direct { buf_offset } => {
                    (PieceBuf::Op(buf_offset), Then::Check { buf_offset, checks })
                }
                Fill::ReadBounce { skip, dst, len } => (
                    PieceBuf::Own(proto.sibling(io.len_bytes as usize)),
                    Then::CopyOut {
                        skip,
                        dst,
                        len,
                        checks,
                    },
                ),
                Fill::Compose { .. } => unreachable!("reads are not composed"),
            };
            self.add_op_piece(id, io.offset_bytes, io.len_bytes, false, pb, then, now);
        }
        true
    }

    pub(super) fn start_write(&mut self, id: OpId, now: Now) -> bool {
        let (ino, offset, len) = match &self.ops[&id].body {
            Body::Write {
                ino, offset, data, ..
            } => (*ino, *offset, data.len()),
            _ => unreachable!("start_write of a write"),
        };
        if self.file_poisoned(ino) {
            return false;
        }
        // A write sharing a 4 KiB sector with one in flight waits for it.
        let planned = match self.vol.planned_size(ino) {
            Ok(s) => s,
            Err(e) => {
                self.finish(id, Err(e), now);
                return true;
            }
        };
        // An append writes at the end the earlier writes leave.
        let offset = match self.ops.get_mut(&id).map(|o| &mut o.body) {
            Some(Body::Write {
                offset: at,
                append: true,
                ..
            }) => {
                *at = planned;
                planned
            }
            _ => offset,
        };
        let (span, rewrites) = self.write_span(offset, len as u64, planned);
        if self.write_must_wait(ino, span, rewrites) {
            return false;
        }
        let plan = match self.vol.plan_write(ino, offset, len, now.wall_ns) {
            Err(e) => {
                self.finish(id, Err(e), now);
                return true;
            }
            Ok(None) => {
                // Blocked until a commit frees blocks or makes room: soon.
                let by = self.ops[&id].deadline_ns.unwrap_or(now.mono_ns);
                self.commit.want_by(by);
                return false;
            }
            Ok(Some(p)) => p,
        };
        if let Some(Body::Write { data, head, .. }) = self.ops.get_mut(&id).map(|o| &mut o.body) {
            *head = self.last_sectors.plan_write(ino, offset, data, planned);
        }
        self.run_write_plan(id, plan, now);
        true
    }

    /// Registers a planned write (or growing truncate) and issues its requests.
    pub(super) fn run_write_plan(&mut self, id: OpId, plan: WritePlan, now: Now) {
        let ino = plan.ino;
        self.write_started(id, ino, plan.span, plan.rewrites);
        let st = self.ops.get_mut(&id).expect("op exists");
        st.advance(id, Stage::Running);
        let io_list = plan.io.clone();
        let proto = match &st.body {
            Body::Write { data, .. } => data.sibling(0),
            _ => IoBuf::zeroed(0),
        };
        match &mut st.body {
            Body::Write { plan: p, .. } | Body::Truncate { plan: p, .. } => *p = Some(plan),
            _ => unreachable!("write plans belong to writes"),
        }
        for (k, io) in io_list.into_iter().enumerate() {
            match io.fill.clone() {
                Fill::Direct { buf_offset } => {
                    let crcs = match &self.ops[&id].body {
                        Body::Write { data, .. } => {
                            sum_crcs(&io.sums, data.bytes().map(|b| &b[buf_offset..]))
                        }
                        _ => sum_crcs(&io.sums, None),
                    };
                    self.add_op_piece(
                        id,
                        io.offset_bytes,
                        io.len_bytes,
                        true,
                        PieceBuf::Op(buf_offset),
                        Then::Nothing,
                        now,
                    );
                    self.push_access(id, io, None, 0, crcs);
                }
                Fill::Compose { pieces, mut rmw } => {
                    let mut bounce = proto.sibling(io.len_bytes as usize);
                    if k == 0 {
                        self.compose_known_head(id, &io, &pieces, &mut rmw, &mut bounce);
                    }
                    if rmw.is_empty() {
                        self.compose(id, &pieces, &mut bounce);
                        let crcs = sum_crcs(&io.sums, bounce.bytes());
                        self.add_op_piece(
                            id,
                            io.offset_bytes,
                            io.len_bytes,
                            true,
                            PieceBuf::Own(bounce),
                            Then::Nothing,
                            now,
                        );
                        self.push_access(id, io, None, 0, crcs);
                    } else {
                        let n = rmw.len() as u32;
                        let base = io.offset_bytes;
                        self.push_access(id, io, Some(bounce), n, vec![]);
                        for (at, len) in rmw {
                            self.add_op_piece(
                                id,
                                base + at,
                                len,
                                false,
                                PieceBuf::Own(proto.sibling(len as usize)),
                                Then::RmwRange {
                                    access: k,
                                    at: at as usize,
                                },
                                now,
                            );
                        }
                    }
                }
                Fill::ReadBounce { .. } => unreachable!("writes do not read into bounces"),
            }
        }
        if self.ops[&id].pieces_left == 0 {
            self.op_data_done(id, now);
        }
    }

    pub(super) fn push_access(
        &mut self,
        id: OpId,
        io: PlannedIo,
        bounce: Option<IoBuf>,
        rmw_left: u32,
        crcs: Vec<Option<u32>>,
    ) {
        if let Some(a) = self.ops.get_mut(&id).and_then(|s| s.body.accesses_mut()) {
            a.push(Access {
                io,
                bounce,
                rmw_left,
                crcs,
            });
        }
    }

    /// Fills a composed write buffer: the operation's bytes, and zeros.
    /// A write whose first sector holds file bytes before its offset that its
    /// submitter knows (`Body::Write::head`, a write stream's last request) takes them
    /// into the bounce buffer instead of reading the sector back: the sector's read
    /// is dropped from `rmw`. Only when that read is exactly the head's sector (the
    /// access starts at it: the write's first byte lies `head` bytes into the access)
    /// and nothing read there is checked (a granule rewritten whole reads it anyway).
    pub(super) fn compose_known_head(
        &self,
        id: OpId,
        io: &PlannedIo,
        pieces: &[(usize, Option<usize>, usize)],
        rmw: &mut Vec<(u64, u64)>,
        bounce: &mut IoBuf,
    ) {
        let Some(Body::Write {
            head: Some(head), ..
        }) = self.ops.get(&id).map(|s| &s.body)
        else {
            return;
        };
        let sector = crate::device::IO_ALIGN_BYTES;
        let starts_at_head = pieces
            .iter()
            .any(|&(at, src, _)| src == Some(0) && at == head.len());
        if !starts_at_head || !io.checks.is_empty() || rmw.first().is_none_or(|r| r.0 != 0) {
            return;
        }
        assert!(
            (head.len() as u64) < sector,
            "a stream's head is what precedes its offset in one sector"
        );
        buf::copy(head, 0, bounce, 0, head.len());
        let first = &mut rmw[0];
        if first.1 <= sector {
            rmw.remove(0);
        } else {
            *first = (sector, first.1 - sector);
        }
    }

    pub(super) fn compose(
        &self,
        id: OpId,
        pieces: &[(usize, Option<usize>, usize)],
        bounce: &mut IoBuf,
    ) {
        let data = match self.ops.get(&id).map(|s| &s.body) {
            Some(Body::Write { data, .. }) => Some(data),
            _ => None,
        };
        for &(at, src, len) in pieces {
            match (src, data) {
                (Some(src), Some(data)) => buf::copy(data, src, bounce, at, len),
                _ => buf::zero(bounce, at, len),
            }
        }
    }

    pub(super) fn start_truncate(&mut self, id: OpId, now: Now) -> bool {
        let (ino, size) = match &self.ops[&id].body {
            Body::Truncate {
                ino, size_bytes, ..
            } => (*ino, *size_bytes),
            _ => unreachable!("start_truncate of a truncate"),
        };
        if !self.file_idle(ino) {
            return false;
        }
        if !self.room_for(self.destructive_estimate(), now) {
            return false;
        }
        self.last_sectors.forget(ino);
        self.tail_log_forget(ino);
        match self.vol.truncate(ino, size, now.wall_ns) {
            Err(e) => self.finish(id, Err(e), now),
            Ok(None) => self.finish(id, Ok(Output::Done), now),
            Ok(Some(plan)) => self.run_write_plan(id, plan, now),
        }
        true
    }

    pub(super) fn rmw_range_done(
        &mut self,
        id: OpId,
        access: usize,
        at: usize,
        piece: &Piece,
        now: Now,
    ) {
        let ready = {
            let st = self.ops.get_mut(&id).expect("op of a held request");
            let Some(acc) = st.body.accesses_mut().and_then(|a| a.get_mut(access)) else {
                return;
            };
            if let (PieceBuf::Own(src), Some(b)) = (&piece.buf, acc.bounce.as_mut()) {
                buf::copy(src, 0, b, at, src.len());
            }
            assert!(
                acc.rmw_left > 0,
                "operation {id}: a read-back for access {access} came in after its last one"
            );
            acc.rmw_left -= 1;
            (acc.rmw_left == 0).then(|| (acc.io.clone(), acc.bounce.take()))
        };
        let Some((io, Some(mut bounce))) = ready else {
            return;
        };
        if self.ops[&id].error.is_some() {
            return;
        }
        // The bytes a rewrite keeps must be the ones their checksum vouches for: a
        // rewrite never blesses damaged data with a new checksum.
        let ino = self.ops[&id].body.file().unwrap_or(0);
        if let Some(e) = failed_check(ino, &io.checks, bounce.bytes()) {
            self.ops
                .get_mut(&id)
                .expect("op of a held request")
                .error
                .get_or_insert(e);
            return;
        }
        if let Fill::Compose { pieces, .. } = &io.fill {
            self.compose(id, pieces, &mut bounce);
        }
        let crcs = sum_crcs(&io.sums, bounce.bytes());
        if let Some(acc) = self
            .ops
            .get_mut(&id)
            .and_then(|s| s.body.accesses_mut())
            .and_then(|a| a.get_mut(access))
        {
            acc.crcs = crcs;
        }
        self.add_op_piece(
            id,
            io.offset_bytes,
            io.len_bytes,
            true,
            PieceBuf::Own(bounce),
            Then::Nothing,
            now,
        );
    }
}
