//! Device commands: handing requests to the driver as commands and taking their
//! completions back.
//!
//! The engine gives the scheduler requests ([`Piece`]s, made in `planning.rs`,
//! `bounds.rs` and the commit pipeline); [`Engine::poll`] turns what the scheduler
//! dispatches (and the commit pipeline's flushes) into [`DevCommand`]s, at most the
//! queue depth at once, and [`Engine::complete`] routes each command's result to the
//! requests it served. Invariant: every request the engine holds is held by the
//! scheduler too (queued or in a command in flight), and every command handed out is
//! completed exactly once; `Engine::check` verifies the first after every completion
//! in debug builds.

use super::buf::{self, IoBuf};
use super::checksums::failed_check;
use super::{Body, Engine, Now, OpId};
use crate::error::{Error, Result};
use crate::sched::{Class, Command, Event, ReqId, Request};
use crate::volume::Check;

/// What a device command does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DevKind {
    Read,
    Write,
    /// Make every completed write durable.
    Flush,
}

/// A command for the device.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DevCommand {
    pub id: u64,
    pub kind: DevKind,
    pub offset_bytes: u64,
    pub len_bytes: u64,
    /// The traffic class (`None` for a flush).
    pub class: Option<Class>,
    /// How many requests the command serves (merged; 0 for a flush).
    pub requests: u32,
    /// The earliest deadline among them, if any has one (monotonic ns).
    pub deadline_ns: Option<u64>,
    /// Sent by the best-effort guarantee rather than chosen by the policy.
    pub forced: bool,
}

/// Where a request's bytes live.
pub(super) enum PieceBuf {
    /// The operation's buffer at this offset.
    Op(usize),
    /// A buffer of the request's own (bounce, composed write, commit image).
    Own(IoBuf),
}

/// What to do when a request completes.
pub(super) enum Then {
    Nothing,
    /// Check the data checksums on the own buffer, then copy `[skip, skip + len)` of
    /// it to the operation's buffer at `dst`.
    CopyOut {
        skip: usize,
        dst: usize,
        len: usize,
        checks: Vec<Check>,
    },
    /// A range read for read-modify-write of access `access`, at `at` within it.
    RmwRange {
        access: usize,
        at: usize,
    },
    /// Check these data checksums on the bytes read into the operation's buffer at
    /// the piece's offset there.
    Check {
        buf_offset: usize,
        checks: Vec<Check>,
    },
}

/// One request the engine gave the scheduler.
pub(super) struct Piece {
    /// `None`: the commit pipeline's.
    pub(super) op: Option<OpId>,
    pub(super) offset_bytes: u64,
    pub(super) len_bytes: u64,
    pub(super) write: bool,
    pub(super) buf: PieceBuf,
    pub(super) then: Then,
}

/// A device command handed to the driver.
pub(super) enum InFlight {
    Sched(Command),
    Flush,
}

pub(super) fn io_error(what: &str, e: &std::io::Error) -> Error {
    Error::io(what, std::io::Error::new(e.kind(), e.to_string()))
}

impl Engine {
    pub(super) fn sched_queued(&self, req: ReqId) -> bool {
        // A request still in the scheduler's queue (not on the device).
        !self
            .cmds
            .values()
            .any(|c| matches!(c, InFlight::Sched(cmd) if cmd.members.iter().any(|m| m.id == req)))
    }

    pub(super) fn cancel_queued_pieces(&mut self, id: OpId, now: Now) {
        let mut mine: Vec<ReqId> = self
            .pieces
            .iter()
            .filter(|(_, p)| p.op == Some(id))
            .map(|(r, _)| *r)
            .collect();
        // In request order, not the map's: a cancel can split a merged entry and queue
        // the rest again, so the order shapes the queue.
        mine.sort_unstable();
        for r in mine {
            if self.sched.cancel(r, now.mono_ns).is_some() {
                self.pieces.remove(&r);
                if let Some(st) = self.ops.get_mut(&id) {
                    st.piece_back(id);
                }
            }
        }
    }

    pub(super) fn free_slots(&self) -> u32 {
        self.sched
            .settings()
            .queue_depth
            .saturating_sub(self.sched.in_flight() + self.flush_in_flight as u32)
    }

    /// The next device command, if a slot is free and something is ready. Call it
    /// until it returns `None`, then again at [`Engine::next_wakeup`] or after a
    /// completion or submission.
    pub fn poll(&mut self, now: Now) -> Option<DevCommand> {
        let now = self.tick(now);
        self.retention_step(now);
        self.progress(now);
        loop {
            if self.free_slots() == 0 {
                return None;
            }
            if self.commit.flush_wanted() && !self.flush_in_flight {
                self.commit.flush_issued();
                self.data_unflushed = false;
                self.flush_in_flight = true;
                return Some(self.hand_out(InFlight::Flush, now));
            }
            match self.sched.dispatch(now.mono_ns) {
                Event::Dispatch(cmd) => {
                    // The scheduler is asked again when a slot frees.
                    self.sched_wake_ns = None;
                    let failed = self.sched.take_failed();
                    for r in failed {
                        self.piece_failed(r, now);
                    }
                    let offset = cmd.lba * self.sector_bytes;
                    let len = cmd.sectors as u64 * self.sector_bytes;
                    let metadata = cmd
                        .members
                        .iter()
                        .all(|m| self.pieces.get(&m.id).is_some_and(|p| p.op.is_none()));
                    self.qos.command(offset, len, metadata);
                    let c = self.hand_out(InFlight::Sched(cmd), now);
                    self.progress(now);
                    return Some(c);
                }
                Event::Fail(rs) => {
                    for r in rs {
                        self.piece_failed(r, now);
                    }
                    self.progress(now);
                }
                Event::Wait { until_ns } => {
                    self.sched_wake_ns = until_ns;
                    return None;
                }
            }
        }
    }

    pub(super) fn hand_out(&mut self, what: InFlight, now: Now) -> DevCommand {
        let id = self.next_cmd;
        self.next_cmd += 1;
        if self.cmds.is_empty() {
            self.busy_since_ns = Some(now.mono_ns);
        }
        let c = match &what {
            InFlight::Flush => DevCommand {
                id,
                kind: DevKind::Flush,
                offset_bytes: 0,
                len_bytes: 0,
                class: None,
                requests: 0,
                deadline_ns: None,
                forced: false,
            },
            InFlight::Sched(cmd) => DevCommand {
                id,
                kind: if cmd.write {
                    DevKind::Write
                } else {
                    DevKind::Read
                },
                offset_bytes: cmd.lba * self.sector_bytes,
                len_bytes: cmd.sectors as u64 * self.sector_bytes,
                class: Some(cmd.class),
                requests: cmd.members.len() as u32,
                deadline_ns: cmd.deadline_ns,
                forced: cmd.forced,
            },
        };
        self.cmds.insert(id, what);
        c
    }

    /// The bytes a write command carries: `f(device offset, bytes)` for each of its
    /// requests in order (requests with virtual buffers are skipped).
    pub fn io_write(
        &self,
        cmd: u64,
        mut f: impl FnMut(u64, &[u8]) -> std::io::Result<()>,
    ) -> std::io::Result<()> {
        let Some(InFlight::Sched(c)) = self.cmds.get(&cmd) else {
            return Err(std::io::Error::other(format!(
                "no write command {cmd} in flight"
            )));
        };
        for m in &c.members {
            let p = self
                .pieces
                .get(&m.id)
                .expect("members of a command in flight are held");
            let bytes = match &p.buf {
                PieceBuf::Own(b) => b.bytes(),
                PieceBuf::Op(off) => match p.op.and_then(|o| self.ops.get(&o)).map(|s| &s.body) {
                    Some(Body::Write { data, .. }) => {
                        data.bytes().map(|d| &d[*off..*off + p.len_bytes as usize])
                    }
                    _ => None,
                },
            };
            if let Some(b) = bytes {
                f(p.offset_bytes, b)?;
            }
        }
        Ok(())
    }

    /// Where a read command's bytes go: `f(device offset, buffer)` for each of its
    /// requests in order (virtual buffers are skipped).
    pub fn io_read(
        &mut self,
        cmd: u64,
        mut f: impl FnMut(u64, &mut [u8]) -> std::io::Result<()>,
    ) -> std::io::Result<()> {
        let Some(InFlight::Sched(c)) = self.cmds.get(&cmd) else {
            return Err(std::io::Error::other(format!(
                "no read command {cmd} in flight"
            )));
        };
        let members: Vec<ReqId> = c.members.iter().map(|m| m.id).collect();
        for id in members {
            let p = self
                .pieces
                .get_mut(&id)
                .expect("members of a command in flight are held");
            let (offset, len) = (p.offset_bytes, p.len_bytes as usize);
            let target: Option<&mut [u8]> = match &mut p.buf {
                PieceBuf::Own(b) => b.bytes_mut(),
                PieceBuf::Op(off) => {
                    let off = *off;
                    match p.op.and_then(|o| self.ops.get_mut(&o)).map(|s| &mut s.body) {
                        Some(Body::Read { buf, .. }) => {
                            buf.bytes_mut().map(|d| &mut d[off..off + len])
                        }
                        _ => None,
                    }
                }
            };
            if let Some(t) = target {
                f(offset, t)?;
            }
        }
        Ok(())
    }

    /// The device finished command `cmd`.
    pub fn complete(&mut self, cmd: u64, result: std::io::Result<()>, now: Now) {
        let now = self.tick(now);
        let Some(what) = self.cmds.remove(&cmd) else {
            panic!("the driver completed command {cmd}, which is not in flight");
        };
        // Named before the completion drops what it served.
        let served = cfg!(debug_assertions).then(|| self.served(&what));
        if self.cmds.is_empty() {
            if let Some(since) = self.busy_since_ns.take() {
                self.qos.busy_ns += now.mono_ns.saturating_sub(since);
            }
        }
        match what {
            InFlight::Flush => {
                self.flush_in_flight = false;
                self.qos.flushes += 1;
                let err = result.err().map(|e| e.to_string());
                if let Some(e) = &err {
                    self.broken
                        .get_or_insert_with(|| format!("a flush failed: {e}"));
                }
                self.commit.flush_done(err);
            }
            InFlight::Sched(c) => {
                let done = self
                    .sched
                    .complete(c.id, now.mono_ns)
                    .expect("the scheduler knows every command in flight");
                for m in done.members {
                    let r = match &result {
                        Ok(()) => Ok(()),
                        Err(e) => Err(io_error(
                            if c.write {
                                "writing to the device"
                            } else {
                                "reading from the device"
                            },
                            e,
                        )),
                    };
                    self.piece_done(m.id, r, now);
                }
            }
        }
        self.progress(now);
        if let Some(served) = served {
            self.check_after_completion(cmd, served);
        }
    }

    /// When the driver must call [`Engine::poll`] again without any other event: a
    /// hold timer of the scheduler, or the commit interval.
    pub fn next_wakeup(&self) -> Option<u64> {
        let sched = self
            .sched_wake_ns
            .filter(|_| self.sched.has_work() && self.free_slots() > 0);
        let commit = self.commit.due_ns(self.vol.dirty_blocks() > 0);
        [sched, commit, self.stream_wakeup(), self.retention_wakeup()]
            .into_iter()
            .flatten()
            .min()
    }

    pub(super) fn piece_failed(&mut self, r: Request, now: Now) {
        let deadline_ns = r.deadline_ns.unwrap_or(0);
        self.piece_done(r.id, Err(Error::DeadlineMissed { deadline_ns }), now);
    }

    pub(super) fn piece_done(&mut self, req: ReqId, result: Result<()>, now: Now) {
        let piece = self
            .pieces
            .remove(&req)
            .unwrap_or_else(|| panic!("request {req} completed twice or never issued"));
        let Some(id) = piece.op else {
            self.commit.piece_done(result.err().map(|e| {
                let msg = e.to_string();
                self.broken
                    .get_or_insert_with(|| format!("a commit write failed: {msg}"));
                msg
            }));
            return;
        };
        let ino = self.ops[&id].body.file();
        match result {
            Err(e) => {
                let is_write = matches!(
                    self.ops[&id].body,
                    Body::Write { .. } | Body::Truncate { .. }
                );
                if is_write {
                    if let Some(ino) = ino {
                        if self.poison_file(id, ino, e.to_string()) {
                            self.last_sectors.forget(ino);
                        }
                    }
                }
                self.ops
                    .get_mut(&id)
                    .expect("op of a held request")
                    .error
                    .get_or_insert(e);
            }
            Ok(()) => {
                if piece.write {
                    self.data_unflushed = true;
                }
                match piece.then {
                    Then::Nothing => {}
                    Then::CopyOut {
                        skip,
                        dst,
                        len,
                        ref checks,
                    } => {
                        let st = self.ops.get_mut(&id).expect("op of a held request");
                        if let (PieceBuf::Own(b), Body::Read { buf, ino, .. }) =
                            (&piece.buf, &mut st.body)
                        {
                            match failed_check(*ino, checks, b.bytes()) {
                                None => buf::copy(b, skip, buf, dst, len),
                                Some(e) => {
                                    st.error.get_or_insert(e);
                                }
                            }
                        }
                    }
                    Then::Check {
                        buf_offset,
                        ref checks,
                    } => {
                        let st = self.ops.get_mut(&id).expect("op of a held request");
                        if let Body::Read { buf, ino, .. } = &st.body {
                            let bytes = buf.bytes().map(|b| &b[buf_offset..]);
                            if let Some(e) = failed_check(*ino, checks, bytes) {
                                st.error.get_or_insert(e);
                            }
                        }
                    }
                    Then::RmwRange { access, at } => {
                        self.rmw_range_done(id, access, at, &piece, now)
                    }
                }
            }
        }
        let st = self.ops.get_mut(&id).expect("op of a held request");
        if st.piece_back(id) == 0 {
            self.op_data_done(id, now);
        }
    }
}
