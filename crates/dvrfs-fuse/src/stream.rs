//! Stream reservations through the `user.dvrfs.stream` extended attribute: a program
//! that knows nothing of dvrfs gets a guaranteed rate.
//!
//! `setfattr -n user.dvrfs.stream -v read:19.39M FILE` (or `write:8M,duration=2h`;
//! the text is [`Reservation`]'s) asks the engine for admission. From then on:
//!
//! - **Write stream.** A write at the stream's position (the end of what was written:
//!   a recorder appends) goes into the engine's write-behind buffer
//!   (`Op::StreamWrite`), written at the end of the file with deadlines from the
//!   buffer level. A write anywhere else is rare (a muxer patching its header): one
//!   inside what is already on the disk goes straight to the disk; one that would
//!   overlap the stream's buffer closes the stream (its buffer written), is written,
//!   and the stream is admitted again at the new end.
//! - **Read stream.** A read at the playout point is served from the engine's playout
//!   buffer (`Op::StreamRead`), at the rate. The kernel's read-ahead requests may
//!   arrive out of order: a read up to [`REORDER_BYTES`] past the playout point takes
//!   the bytes in between from the stream too and keeps them for the request that
//!   comes late. A far jump by the reading process (a seek) reopens the stream there;
//!   other readers (a `cp`, a thumbnailer) read best-effort.
//!
//! The reservation lasts while the file is open: it ends at the last close (or when
//! the attribute is removed), its final figures stay readable with `getfattr` until the
//! file gets a stream again, the attribute is removed, or the file is truncated to
//! nothing (an `O_TRUNC` open, as `ffmpeg -y` rewriting the recording makes): the
//! figures describe bytes that are gone then. Set on a file nobody has open, it waits for the next open
//! and ends at that open's last close; a read reservation waits idle, prefetching
//! nothing until that open (`crate::memory`). A directory's attribute is a default stored in
//! its inode: every file created in it gets that reservation (a camera recorder needs
//! no change), and directories created in it inherit it. A refused reservation gives
//! `EBUSY` (the disk's real-time share is taken) or `ENOSPC` (a recording's space does
//! not fit) and the reason in the daemon log.

use crate::file::{errno_of, Errno, FileState};
use dvrfs_core::engine::{Op, Output, Reservation, StreamDir, StreamInfo, StreamStats};
use dvrfs_core::meta::Ino;
use dvrfs_runtime::Runtime;

/// The attribute's name.
pub const XATTR: &str = "user.dvrfs.stream";

/// How far past a read stream's playout point a read is still taken from the stream.
pub const REORDER_BYTES: u64 = 8 << 20;

/// A reservation on an open file.
pub struct FileStream {
    pub res: Reservation,
    pub info: StreamInfo,
    /// Read: the next byte the stream gives; write: where the next byte goes.
    pub next: u64,
    /// A handle was open while it existed: it ends at the last close.
    pub used: bool,
    /// The process reading through the stream (its jumps are seeks).
    pub(crate) reader: Option<u32>,
    /// The process that last wrote through the stream.
    pub(crate) writer: Option<u32>,
    /// Read: bytes taken from the stream before the request that wants them.
    pub(crate) stash: Vec<u8>,
    /// Read: the handle the stream plays for: the first opened after it was set on a
    /// closed file, else the first to read. Other handles (another process's `cat`,
    /// a thumbnailer) read best-effort beside it, never at its rate.
    pub(crate) owner_fh: Option<u64>,
    /// Read: requests waiting for its bytes, answered by the parker ([`crate::park`]).
    pub(crate) waiting: Vec<crate::park::Waiting>,
    /// Read: the stream read on its way for them.
    pub(crate) inflight: Option<dvrfs_runtime::Ticket>,
    /// Write: writes the engine has not taken yet, answered by the parker.
    pub(crate) writes: Vec<crate::park::WaitingWrite>,
    /// Write: a write was refused or withdrawn, so `next` is what this daemon
    /// handed over, not what the engine took: read again before the next write.
    pub(crate) resync: bool,
}

impl FileStream {
    /// Keeps of the stash what a late request may still want, and what the waiting
    /// reads want, no more.
    pub(crate) fn trim_stash(&mut self) {
        let waited = self
            .waiting
            .iter()
            .map(|w| self.next.saturating_sub(w.offset))
            .max()
            .unwrap_or(0);
        let keep = REORDER_BYTES.max(waited) as usize;
        if self.stash.len() > keep {
            self.stash.drain(..self.stash.len() - keep);
        }
    }

    /// Whether a close (`flush`) by process `pid` of the file's only handle ends the
    /// stream: not when another process than the one reading or writing through it
    /// closes its copy of the descriptor. A multi-threaded recorder that starts a
    /// program (`fork` and `exec` in another thread) has every descriptor copied into
    /// the child and closed at its `exec`, each close a `flush` here; ending the
    /// recording there lost its reservation, and on a full volume the held space
    /// with it (found by the full-disk test run beside tests that spawn processes).
    /// A pending stream no open took ([`crate::quota`]) ends at its expiry, not at
    /// the close of another user's open.
    pub fn ends_at_close_by(&self, pid: u32) -> bool {
        if !self.used {
            return false;
        }
        match self.res.dir {
            StreamDir::Write => self.writer.is_none_or(|w| w == pid),
            StreamDir::Read => self.reader.is_none_or(|r| r == pid),
        }
    }
}

/// The open files with a stream: its reservation and id, shared with the reaper
/// ([`crate::quota`]).
pub type Streamed =
    std::sync::Arc<std::sync::Mutex<std::collections::HashMap<Ino, (Reservation, StreamInfo)>>>;

/// How many ended streams' figures the daemon keeps for `getfattr` (a recorder making
/// a file a minute would otherwise grow the table for as long as it is mounted).
pub const ENDED_KEPT: usize = 4096;

/// The final figures of ended streams, the latest [`ENDED_KEPT`].
#[derive(Default)]
pub struct Ended {
    by_ino: std::collections::HashMap<Ino, (u64, String)>,
    seq: u64,
}

impl Ended {
    pub fn insert(&mut self, ino: Ino, text: String) {
        if self.by_ino.len() >= ENDED_KEPT && !self.by_ino.contains_key(&ino) {
            let oldest = self
                .by_ino
                .iter()
                .min_by_key(|(_, (s, _))| *s)
                .map(|(i, _)| *i);
            if let Some(i) = oldest {
                self.by_ino.remove(&i);
            }
        }
        self.seq += 1;
        self.by_ino.insert(ino, (self.seq, text));
    }

    pub fn get(&self, ino: Ino) -> Option<String> {
        self.by_ino.get(&ino).map(|(_, t)| t.clone())
    }

    /// Whether there was an entry.
    pub fn remove(&mut self, ino: Ino) -> bool {
        self.by_ino.remove(&ino).is_some()
    }
}

/// Why a reservation could not be had: the errno and the reason for the log.
pub type Refusal = (Errno, String);

fn refusal(e: &dvrfs_runtime::RuntimeError) -> Refusal {
    (errno_of(e), e.to_string())
}

/// The state shown by `getfattr`: the reservation, then what was admitted and how it
/// has fared.
pub fn describe(
    res: &Reservation,
    state: &str,
    info: Option<&StreamInfo>,
    st: Option<&StreamStats>,
) -> String {
    let mut s = format!("{res} state={state}");
    if let Some(i) = info {
        s += &format!(
            " buffer={} slack_ms={} load={:.0}%",
            i.buffer_bytes,
            i.slack_ns / 1_000_000,
            i.load * 100.0
        );
    }
    if let Some(st) = st {
        s += &format!(
            " requests={} misses={} min_margin_ms={} stalls={} bytes={}",
            st.requests,
            st.late,
            st.min_margin_ns
                .map_or("-".to_string(), |m| format!("{:.1}", m as f64 / 1e6)),
            st.stalls,
            st.app_bytes
        );
        if res.dir == StreamDir::Write {
            // Writes refused for want of space past the reservation: the cause of an
            // ENOSPC the recorder saw (each refused whole; what came before is kept).
            s += &format!(
                " no_space={} durability_late={}",
                st.no_space, st.durability_late
            );
        }
    }
    s
}

impl FileState {
    /// Asks the engine to admit `res` on this file. Whatever this file gathered goes
    /// to the disk first, so a recording starts at the file's end.
    pub fn stream_attach(
        &mut self,
        rt: &Runtime,
        res: Reservation,
        start: u64,
        used: bool,
        owner: u32,
    ) -> Result<(), Refusal> {
        debug_assert!(self.stream.is_none(), "one stream per file");
        self.settle(rt, owner)
            .map_err(|e| (e, "writing what the file gathered".to_string()))?;
        self.drop_reads(rt);
        let ino = self.ino;
        let mut spec = res.spec(start);
        // Set on a file nobody has open: admitted idle, prefetching from the open
        // that takes it on (`crate::memory`).
        spec.idle = !used;
        let info = rt.open_stream(ino, spec).map_err(|e| refusal(&e))?;
        let next = match res.dir {
            StreamDir::Read => start,
            StreamDir::Write => rt
                .inspect(move |e| e.visible_size(ino))
                .map_err(|e| refusal(&e))?
                .map_err(|e| (e.errno(), e.to_string()))?,
        };
        self.stream = Some(FileStream {
            res,
            info,
            next,
            used,
            reader: None,
            writer: None,
            stash: vec![],
            owner_fh: None,
            waiting: vec![],
            inflight: None,
            writes: vec![],
            resync: false,
        });
        Ok(())
    }

    /// Ends the stream (a recording's buffer written): its final figures.
    pub fn stream_detach(
        &mut self,
        rt: &Runtime,
    ) -> Option<(FileStream, Result<StreamStats, Errno>)> {
        let s = self.stream.take()?;
        let r = match rt.run_waiting(Op::StreamClose { stream: s.info.id }, None, 0) {
            Ok(Output::StreamClosed(st)) => Ok(st),
            Ok(other) => panic!("a stream close completed as {other:?}"),
            Err(e) => Err(errno_of(&e)),
        };
        Some((s, r))
    }

    /// A write of a file with a write stream at the stream's position: into its
    /// buffer (`Op::StreamWrite`). A write the stream must wait for (a recorder ahead
    /// of its rate waits for buffer room) is parked ([`crate::park`]): the reply is
    /// answered when the engine has taken the bytes, no session thread waits. The
    /// reply comes back when it is not the stream's write (the caller goes
    /// best-effort).
    pub fn stream_write(
        &mut self,
        rt: &Runtime,
        offset: u64,
        data: &[u8],
        owner: u32,
        reply: fuser::ReplyWrite,
    ) -> Result<(), fuser::ReplyWrite> {
        let ino = self.ino;
        let link = self.link.clone();
        let Some(s) = self
            .stream
            .as_mut()
            // Pending, no open took it: not another user's ([`crate::quota`]).
            .filter(|s| s.res.dir == StreamDir::Write && s.used)
        else {
            return Err(reply);
        };
        if s.resync && s.writes.is_empty() {
            // A write was refused or withdrawn: the engine knows where the stream
            // ends (what it accepted, in its buffer or on the disk).
            if let Ok(Ok(v)) = rt.inspect(move |e| e.visible_size(ino)) {
                s.next = v;
                s.resync = false;
            }
        }
        if offset != s.next {
            return Err(reply);
        }
        let op = Op::StreamWrite {
            stream: s.info.id,
            data: dvrfs_core::engine::IoBuf::from_slice(data),
        };
        let Some(link) = link else {
            // No parker (never in a mount): the thread waits.
            match rt.run(op, None, owner) {
                Ok(_) => {
                    s.next += data.len() as u64;
                    s.writer = Some(owner);
                    reply.written(data.len() as u32);
                }
                Err(e) => reply.error(crate::err(self.write_refused(&e, data.len()))),
            }
            return Ok(());
        };
        match rt.start_notify(op, None, owner, link.notify()) {
            Ok(ticket) => {
                s.next += data.len() as u64;
                // The writer from now on, not only once the engine took the bytes: a
                // close by a forked child meanwhile must not end the recording.
                s.writer = Some(owner);
                s.writes.push(crate::park::WaitingWrite {
                    ticket,
                    len: data.len() as u32,
                    pid: owner,
                    reply,
                });
                link.parked();
            }
            Err(e) => reply.error(crate::err(errno_of(&e))),
        }
        Ok(())
    }

    /// The errno of a stream write the engine refused (`len` bytes), logged when it
    /// is for want of space.
    pub(crate) fn write_refused(&self, e: &dvrfs_runtime::RuntimeError, len: usize) -> Errno {
        let errno = errno_of(e);
        if errno == libc::ENOSPC {
            let (id, next) = self.stream.as_ref().map_or((0, 0), |s| (s.info.id, s.next));
            eprintln!(
                "{} dvrfs: inode {}: stream {id}: no space left for a write of {len} bytes past the reservation ({e}): refused with ENOSPC; the bytes accepted before it are kept (the stream was at byte {next})",
                crate::stamp(),
                self.ino,
            );
        }
        errno
    }
}

impl crate::DvrfsFs {
    /// Admits `res` on the open file `st` (see [`FileState::stream_attach`]); a
    /// refusal is logged with its reason.
    pub(crate) fn attach(
        &self,
        st: &mut FileState,
        res: Reservation,
        start: u64,
        used: bool,
        owner: u32,
    ) -> Result<(), Errno> {
        if res.dir == StreamDir::Write && self.read_only {
            return Err(libc::EROFS);
        }
        let text = res.to_string();
        let uid = st.stream_uid;
        let attached = self
            .quota
            .admit(&self.rt, st.ino, uid, &res, start)
            .and_then(|p| Ok((p, st.stream_attach(&self.rt, res, start, used, owner)?)));
        match attached {
            Ok((permit, ())) => {
                let s = st.stream.as_ref().expect("attached");
                self.quota
                    .record(permit, st.ino, uid, &s.res, &s.info, !used);
                crate::lock(&self.streamed).insert(st.ino, (s.res.clone(), s.info.clone()));
                crate::lock(&self.ended).remove(st.ino);
                eprintln!(
                    "{} dvrfs: inode {}: stream {} admitted: {} ({} buffer, {} ms slack, load {:.0}%)",
                    crate::stamp(),
                    st.ino,
                    s.info.id,
                    text,
                    s.info.buffer_bytes,
                    s.info.slack_ns / 1_000_000,
                    s.info.load * 100.0
                );
                Ok(())
            }
            Err((e, why)) => {
                eprintln!(
                    "{} dvrfs: inode {}: reservation {text} refused (errno {e}, uid {uid}): {why}",
                    crate::stamp(),
                    st.ino
                );
                Err(e)
            }
        }
    }

    /// Ends the stream of `st`, if any; its final figures stay for `getfattr` and the
    /// log. A failure to write a recording's buffer is returned.
    pub(crate) fn detach(&self, st: &mut FileState, why: &str) -> Result<(), Errno> {
        let Some((s, r)) = st.stream_detach(&self.rt) else {
            return Ok(());
        };
        crate::lock(&self.streamed).remove(&st.ino);
        self.quota.release(st.ino);
        let text = match &r {
            Ok(stats) => describe(&s.res, "ended", Some(&s.info), Some(stats)),
            Err(e) => describe(&s.res, &format!("failed(errno {e})"), Some(&s.info), None),
        };
        eprintln!(
            "{} dvrfs: inode {}: stream {} ended ({why}): {text}",
            crate::stamp(),
            st.ino,
            s.info.id
        );
        crate::lock(&self.ended).insert(st.ino, text);
        // Reads parked for its bytes are served beside it now: bounded by the disk's
        // time, not by the rate of a stream that is gone. Writes it had not taken
        // are failed by its close: their writers get EIO.
        self.serve_best_effort(st, s.waiting);
        for w in s.writes {
            w.reply.error(fuser::Errno::EIO);
        }
        r.map(|_| ())
    }

    /// A stream that a close ended while handle `fh` lived on is admitted again at
    /// that handle's read or write.
    pub(crate) fn resume(&self, st: &mut FileState, fh: u64, owner: u32) {
        if st.resume.as_ref().is_none_or(|(_, h)| *h != fh) {
            return;
        }
        let (res, _) = st.resume.take().expect("checked");
        // A recording resumes at the end of the file, a playback from the start.
        if self.attach(st, res, 0, true, owner).is_ok() {
            if let Some(s) = st.stream.as_mut() {
                s.owner_fh = Some(fh);
            }
        }
    }

    /// A write of a file with a stream that is not the stream's: see the module docs.
    pub(crate) fn write_beside_stream(
        &self,
        st: &mut FileState,
        offset: u64,
        data: &[u8],
        owner: u32,
        who: crate::share::Writer<'_>,
    ) -> Result<usize, Errno> {
        let s = st.stream.as_ref().expect("caller checked");
        if !s.used {
            // Pending, and this open did not take it ([`crate::quota`]): the write
            // ends it and goes best-effort.
            self.detach(st, "a write by an open that did not take it")?;
            return st.write_through(&self.rt, offset, data, owner, who);
        }
        let (dir, res, next) = (s.res.dir, s.res.clone(), s.next);
        let ino = st.ino;
        let applied = self
            .rt
            .query(move |v| v.stat(ino).map(|s| s.size_bytes))
            .map_err(|e| errno_of(&e))?
            .map_err(|e| e.errno())?;
        if dir == StreamDir::Write && offset + data.len() as u64 <= applied {
            // Inside what is on the disk (a header patched): beside the stream.
            return st.write_through(&self.rt, offset, data, owner, who);
        }
        self.detach(st, "a write away from its position")?;
        let n = st.write_through(&self.rt, offset, data, owner, who)?;
        let start = match dir {
            StreamDir::Read => next,
            StreamDir::Write => 0,
        };
        // Admitted again; refused, the file goes on best-effort (logged).
        let _ = self.attach(st, res, start, true, owner);
        Ok(n)
    }
}
