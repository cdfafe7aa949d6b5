//! Applying: making finished operations part of the metadata, and completing them.
//!
//! A namespace operation changes the [`Volume`] at once and completes in the same
//! call. A write (or growing truncate) is applied (its blocks mapped, the size set)
//! only once all its data is on the disk, and only after every earlier write of the
//! same file: a commit never names data still in flight. Invariants: a file's writes
//! are applied in the order they started, each exactly once, or aborted (their
//! reservation given back) if they or an earlier write of the file failed; every
//! operation completes exactly once ([`Engine::finish`] drops its record).
//!
//! [`Volume`]: crate::volume::Volume

use super::checksums::access_crcs;
use super::{
    index_resume, retention, stream, tail_log, Body, Completion, Engine, IoBuf, Now, Op, OpId,
    Output, Stage,
};
use crate::error::{Error, Result};
use crate::meta::Ino;
use crate::qos::RtOutcome;
use crate::volume::Volume;

impl Engine {
    pub(super) fn start_other(&mut self, id: OpId, now: Now) -> bool {
        let victim = match &self.ops[&id].body {
            Body::Other(Op::Unlink { parent, name }) => self.vol.frees_on_unlink(*parent, name),
            Body::Other(Op::Rename {
                dst_parent,
                dst_name,
                ..
            }) => self.vol.frees_on_unlink(*dst_parent, dst_name),
            Body::Other(Op::CloseFile { ino, .. }) => self.vol.frees_on_close(*ino),
            Body::Other(Op::Fsync) => return self.start_fsync(id, now),
            Body::Other(Op::Unmount) => return self.start_unmount(id, now),
            _ => None,
        };
        if let Some(v) = victim {
            if !self.file_idle(v) {
                return false;
            }
        }
        let mutates = victim.is_some()
            || !matches!(
                &self.ops[&id].body,
                Body::Other(Op::CloseFile { .. } | Op::OpenFile { .. })
            );
        if mutates {
            let estimate = match &self.ops[&id].body {
                _ if victim.is_some() => self.destructive_estimate(),
                Body::Other(Op::Protect { .. } | Op::Unprotect { .. }) => {
                    16 + crate::retention::protect_blocks(&self.vol)
                }
                _ => 16,
            };
            if !self.room_for(estimate, now) {
                return false;
            }
        }
        let st = self.ops.get_mut(&id).expect("op exists");
        let op = std::mem::replace(&mut st.body, Body::Other(Op::Fsync));
        let Body::Other(op) = op else { unreachable!() };
        let closed = match op {
            Op::CloseFile { ino, .. } => Some(ino),
            _ => None,
        };
        if let Op::DropFrameIndex { ino, .. } | Op::AppendFrames { ino, .. } = &op {
            self.index_taken_over(*ino);
        }
        let policy = match &op {
            Op::SetAttr { set, .. } => set.retention.is_some(),
            Op::SetVolumeRetention(_) | Op::Unprotect { .. } => true,
            _ => false,
        };
        if policy {
            self.retention_policy_changed();
        }
        let new_file_in = match &op {
            Op::Create { parent, .. } => Some(*parent),
            Op::Rename { dst_parent, .. } => Some(*dst_parent),
            _ => None,
        };
        let result = apply_namespace(&mut self.vol, op, now.wall_ns);
        if let (Some(dir), Ok(_)) = (new_file_in, &result) {
            self.retention_file_added(dir);
        }
        if let (Some(ino), Ok(_)) = (closed, &result) {
            self.index_closed(ino);
        }
        if let Some(v) = victim {
            self.last_sectors.forget(v);
            if !self.vol.inode_exists(v) {
                self.forget_file(v);
            }
        }
        if self.vol.wants_commit_now() {
            self.commit.want_now();
        }
        self.finish(id, result, now);
        true
    }

    /// Every request of an operation is back.
    pub(super) fn op_data_done(&mut self, id: OpId, now: Now) {
        let st = self.ops.get_mut(&id).expect("op exists");
        match &st.body {
            Body::Read { ino, .. } => {
                let ino = *ino;
                self.read_ended(id, ino);
                let st = self.ops.get_mut(&id).expect("op exists");
                let result = if st.cancelled {
                    Err(Error::Cancelled)
                } else if let Some(e) = st.error.take() {
                    Err(e)
                } else {
                    let Body::Read { buf, bytes, .. } =
                        std::mem::replace(&mut st.body, Body::Other(Op::Fsync))
                    else {
                        unreachable!()
                    };
                    self.finish_read(id, buf, bytes, now);
                    return;
                };
                self.finish(id, result, now);
            }
            Body::Write { ino, .. } | Body::Truncate { ino, .. } => {
                let ino = *ino;
                st.advance(id, Stage::DataDone);
                self.apply_ready(ino, now);
            }
            Body::Other(_) => {}
        }
    }

    /// Applies the file's finished writes at the front of its queue, in order.
    pub(super) fn apply_ready(&mut self, ino: Ino, now: Now) {
        while let Some((front, poison)) = self.take_applicable_write(ino) {
            let st = self.ops.get_mut(&front).expect("op exists");
            let own_error = st.error.take();
            let plan = st.body.plan().cloned().expect("a running write has a plan");
            let result = match (own_error, poison) {
                (Some(e), _) => {
                    self.vol.abort_write(&plan);
                    Err(e)
                }
                (None, Some(msg)) => {
                    self.vol.abort_write(&plan);
                    Err(Error::io(
                        "writing after an earlier write to the same file failed",
                        std::io::Error::other(msg),
                    ))
                }
                (None, None) => match self.vol.apply_write(&plan, &access_crcs(&mut st.body)) {
                    Ok(()) => {
                        let st = self.ops.get_mut(&front).expect("op exists");
                        let submit = st.submit;
                        match std::mem::replace(&mut st.body, Body::Other(Op::Fsync)) {
                            Body::Write { data, offset, .. } => {
                                // Its bytes are the file's now: the frame index follows.
                                let (size, bytes) = (plan.size_before, data.bytes());
                                self.index_applied(ino, (offset, size), bytes, submit, now);
                                Ok(Output::Write { data })
                            }
                            _ => Ok(Output::Done),
                        }
                    }
                    Err(e) => Err(e),
                },
            };
            if self.vol.wants_commit_now() {
                self.commit.want_now();
            }
            self.finish(front, result, now);
        }
        self.writes_settled(ino);
    }

    pub(super) fn finish_read(&mut self, id: OpId, buf: IoBuf, bytes: usize, now: Now) {
        self.finish(id, Ok(Output::Read { buf, bytes }), now);
    }

    /// An operation is done: record it and hand out its completion.
    pub(super) fn finish(&mut self, id: OpId, result: Result<Output>, now: Now) {
        let Some(st) = self.ops.remove(&id) else {
            return;
        };
        let unmount = matches!(&st.body, Body::Other(Op::Unmount));
        let data_op = matches!(&st.body, Body::Read { .. } | Body::Write { .. })
            || matches!(result, Ok(Output::Read { .. } | Output::Write { .. }));
        let bytes = match &result {
            Ok(Output::Read { bytes, .. }) => *bytes as u64,
            Ok(Output::Write { data }) => data.len() as u64,
            _ => 0,
        };
        if data_op {
            match (st.deadline_ns, &result) {
                (_, Err(Error::Cancelled)) => {}
                (Some(d), r) => {
                    let outcome = match r {
                        Ok(_) => RtOutcome::Done,
                        Err(Error::DeadlineMissed { .. }) => RtOutcome::DeadlineFailed,
                        Err(Error::NoSpace { .. }) => RtOutcome::NoSpace,
                        Err(_) => RtOutcome::Other,
                    };
                    self.qos.realtime(d, now.mono_ns, bytes, outcome);
                }
                (None, Ok(_)) => self.qos.best_effort(st.submit.mono_ns, now.mono_ns, bytes),
                (None, Err(_)) => {}
            }
        }
        if let Some(sid) = st.stream {
            self.stream_io_done(sid, id, st.deadline_ns, result, now);
            return;
        }
        if st.owner == stream::STREAM_RELEASE_OWNER {
            // A finished stream's last hold on an orphan: nobody waits for it, and a
            // failure leaves the orphan for the next mount to free (`stream/hold.rs`).
            return;
        }
        if st.owner == tail_log::TAIL_REPLAY_OWNER {
            self.tail_replay_write_done(result);
            return;
        }
        if st.owner == index_resume::INDEX_RESUME_OWNER {
            self.index_resume_read_done(id, result, now);
            return;
        }
        if st.owner == retention::RETENTION_OWNER {
            self.retention_done(id, result, now);
            return;
        }
        if let (Err(Error::NoSpace { .. }), Some(ino)) = (&result, st.body.file()) {
            self.no_space_event(ino, &result, now);
        }
        self.completions.push_back(Completion {
            op: id,
            result,
            deadline_ns: st.deadline_ns,
            submit_ns: st.submit.mono_ns,
            done_ns: now.mono_ns,
        });
        if unmount {
            // In every build: the last moment the engine's state is whole.
            self.assert_consistent(|| format!("when the unmount (operation {id}) completed"));
        }
    }
}

/// Applies namespace operation `op` to the volume (`t`: the wall clock, ns).
fn apply_namespace(v: &mut Volume, op: Op, t: i64) -> Result<Output> {
    match op {
        Op::Create {
            parent,
            name,
            perm,
            uid,
            gid,
        } => v.create(parent, &name, perm, uid, gid, t).map(Output::Ino),
        Op::Mkdir {
            parent,
            name,
            perm,
            uid,
            gid,
        } => v.mkdir(parent, &name, perm, uid, gid, t).map(Output::Ino),
        Op::Symlink {
            parent,
            name,
            target,
            uid,
            gid,
        } => v
            .symlink(parent, &name, &target, uid, gid, t)
            .map(Output::Ino),
        Op::Link { ino, parent, name } => v.link(ino, parent, &name, t).map(|_| Output::Done),
        Op::Unlink { parent, name } => v.unlink(parent, &name, t).map(|_| Output::Done),
        Op::Rmdir { parent, name } => v.rmdir(parent, &name, t).map(|_| Output::Done),
        Op::Rename {
            src_parent,
            src_name,
            dst_parent,
            dst_name,
        } => v
            .rename(src_parent, &src_name, dst_parent, &dst_name, t)
            .map(|_| Output::Done),
        Op::SetAttr { ino, set } => v.set_attr(ino, &set, t).map(|_| Output::Done),
        Op::OpenFile { ino, mode } => v.open_file(ino, mode).map(|_| Output::Done),
        Op::CloseFile { ino, mode } => v.close_file(ino, mode).map(|_| Output::Done),
        Op::AppendFrames { ino, entries } => v.append_frames(ino, &entries).map(|_| Output::Done),
        Op::SetVolumeRetention(r) => v.set_volume_retention(r).map(|_| Output::Done),
        Op::Protect {
            dir,
            from_utc_ns,
            to_utc_ns,
            protection,
            restate,
        } => {
            let max = crate::retention::protect_blocks(v);
            let range = (from_utc_ns, to_utc_ns);
            crate::retention::protect(v, dir, range, protection, t, (max, !restate))
                .map(Output::Covered)
        }
        Op::Unprotect { id } => {
            let max = crate::retention::protect_blocks(v);
            crate::retention::unprotect(v, id, t, max).map(Output::Covered)
        }
        Op::DropFrameIndex { ino, incomplete } => {
            v.drop_frame_index(ino, incomplete).map(|_| Output::Done)
        }
        Op::Read { .. }
        | Op::Write { .. }
        | Op::Append { .. }
        | Op::Truncate { .. }
        | Op::Fsync
        | Op::Unmount
        | Op::StreamOpen { .. }
        | Op::StreamRead { .. }
        | Op::StreamWrite { .. }
        | Op::StreamClose { .. }
        | Op::StreamSync { .. }
        | Op::StreamRoll { .. }
        | Op::StreamQueue { .. }
        | Op::StreamFollow { .. } => {
            unreachable!("handled elsewhere")
        }
    }
}
