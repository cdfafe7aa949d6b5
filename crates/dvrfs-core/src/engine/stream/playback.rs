//! A playback's prefetch and its files: how a read stream keeps its buffer full, and
//! how it goes on from one file into the next (the chunks of a stream, issue 25).
//!
//! A DVR plays a recording that is a run of chunk files as one stream. Closing the
//! playback at each chunk and opening another would ask admission again in the
//! middle of it (and may be refused, a recording admitted in between), start the
//! next chunk with an empty buffer and a start-up slack (a visible stall at every
//! boundary), and let the next chunk's first requests fall due all at once.
//! `Op::StreamQueue` queues the next file instead: the admission, the rate credit,
//! the buffer and the figures stay the stream's.
//!
//! - **One position space.** The playout point and the prefetch point move through
//!   the files as one run of bytes: each file's first byte played (`from`, past a
//!   chunk's head) comes right after the last byte of the file before. A request's
//!   deadline is `now + (o - pp - credit) / r` as in one file (`stream.rs`), so the
//!   first requests of the next file are due exactly when a single file's would be
//!   at the same distance: the boundary costs nothing.
//! - **When the prefetch moves on.** Once it has fetched a file to its end, and the
//!   file has no recording on it (a recording still writing it may make it longer:
//!   the prefetch waits for its bytes, as a reader following a recording would), it
//!   goes on into the next queued file. With nothing queued, the end of the file is
//!   the end of the playback, as before.
//! - **Following a recording** (`Op::StreamFollow`, watching live). At the end of
//!   its last file while a recording writes it, a following playback's reads wait
//!   for the recording's next bytes instead of ending; the wait is the recording's,
//!   not the disk's, so it is no stall. When bytes come after such a wait (or after
//!   a read ended there), the playback starts again as at its open, its next byte
//!   due one slack later: at the edge the credit has grown to its burst, and
//!   deadlines counted from it would be due before the bytes existed. Once no
//!   recording writes the file, the end is the end.
//! - **Holds.** A queued file is held from the queueing (`Volume::open_file`, as the
//!   stream's own file): removing its last name leaves an orphan the playback still
//!   reads, freed when the playback lets it go. A file is let go once the playout
//!   point has left it; the rest at the stream's end.
//! - **Bounded.** At most [`MAX_PLAY_FILES`] files held at once; a driver queues the
//!   next ones as the playback goes (the CLI keeps a few buffers' worth ahead).
//! - **Refused** (the stream plays on unchanged): a stream that is not a playback,
//!   one closed or that ended (its file was cut while it was played), a target that
//!   is not a regular file or `from` past its end, one queue too many.

use super::{buf, granule, Chunk, Engine, Error, Ino, IoBuf, Now, Op, Result, StreamDir, StreamId};
use crate::format::dir::Kind;

/// Most files a playback holds at once (the one played, the one fetched, the queued).
pub const MAX_PLAY_FILES: usize = 4096;

/// A file of a playback.
#[derive(Clone, Copy, Debug)]
pub(in crate::engine) struct PlayFile {
    /// Its place in the playback's order: chunks name their file by it.
    pub(in crate::engine) seq: u64,
    pub(in crate::engine) ino: Ino,
    /// Its first byte played.
    pub(in crate::engine) from: u64,
    /// Where `from` is in the playback's position space, once the prefetch got there.
    pub(in crate::engine) base: Option<u64>,
}

impl Engine {
    /// `Op::StreamQueue`: file `ino`, from byte `from`, after the playback's files.
    pub(super) fn stream_queue_submit(
        &mut self,
        sid: StreamId,
        ino: Ino,
        from: u64,
        now: Now,
    ) -> Result<()> {
        let Some(s) = self.streams.get(&sid).filter(|s| !s.closed) else {
            return Err(Error::InvalidArgument(format!("stream {sid} is not open")));
        };
        if s.info.dir != StreamDir::Read {
            return Err(Error::InvalidArgument(format!(
                "stream {sid} is a recording: a recording rolls on to its next file (StreamRoll), only a playback queues one"
            )));
        }
        if s.ended {
            return Err(Error::InvalidArgument(format!(
                "stream {sid} ended (its file was cut while it was played): open a new playback"
            )));
        }
        if s.play.len() >= MAX_PLAY_FILES {
            return Err(Error::Refused(format!(
                "stream {sid} already holds {MAX_PLAY_FILES} files: queue the next once it has played some"
            )));
        }
        let st = self.vol.stat(ino)?;
        if st.kind != Kind::File {
            return Err(Error::InvalidArgument(format!(
                "inode {ino} is not a regular file: a playback goes on into a file"
            )));
        }
        if from > st.size_bytes {
            return Err(Error::InvalidArgument(format!(
                "byte {from} is past the end of inode {ino} ({} bytes)",
                st.size_bytes
            )));
        }
        self.stream_hold(ino, StreamDir::Read)?;
        let s = self.streams.get_mut(&sid).expect("found above");
        let seq = s.play.back().expect("a playback has its file").seq + 1;
        s.play.push_back(PlayFile {
            seq,
            ino,
            from,
            base: None,
        });
        s.wake(now);
        Ok(())
    }

    /// `Op::StreamFollow`: playback `sid` follows its last file while it is recorded.
    pub(super) fn stream_follow_submit(&mut self, sid: StreamId, now: Now) -> Result<()> {
        let Some(s) = self.streams.get_mut(&sid).filter(|s| !s.closed) else {
            return Err(Error::InvalidArgument(format!("stream {sid} is not open")));
        };
        if s.info.dir != StreamDir::Read {
            return Err(Error::InvalidArgument(format!(
                "stream {sid} is a recording: only a playback follows one"
            )));
        }
        s.follow = true;
        s.wake(now);
        Ok(())
    }

    /// Size of file `ino` now, and whether a recording may still make it longer.
    fn play_file_size(&self, ino: Ino) -> (u64, bool) {
        let size = self.vol.stat(ino).map(|s| s.size_bytes).unwrap_or(0);
        (size, self.recording_on(ino).is_some())
    }

    /// Moves the prefetch of stream `sid` on into its next file while it has fetched
    /// its file to the end (module docs). The fetched file's size now, and whether
    /// the playback is at its end there (nothing queued after it), and whether a
    /// recording is still writing it.
    fn play_fetch_file(&mut self, sid: StreamId) -> (u64, bool, bool) {
        loop {
            let s = &self.streams[&sid];
            let f = s.play[s.fetch_file];
            let (size, growing) = self.play_file_size(f.ino);
            let at = f.from + (s.next_fetch - f.base.expect("the fetched file has its base"));
            let last = s.fetch_file + 1 == s.play.len();
            if at < size || growing || last {
                return (size, last, growing);
            }
            let s = self.streams.get_mut(&sid).expect("listed");
            s.fetch_file += 1;
            let next = s.next_fetch;
            s.play[s.fetch_file].base = Some(next);
        }
    }

    /// Lets go of the files the playout point of stream `sid` has left.
    fn play_files_left(&mut self, sid: StreamId, now: Now) {
        loop {
            let s = &self.streams[&sid];
            let reading = match s.chunks.front() {
                Some(c) => c.file,
                None => s.play[s.fetch_file].seq,
            };
            if s.play[0].seq == reading {
                return;
            }
            let s = self.streams.get_mut(&sid).expect("listed");
            let gone = s.play.pop_front().expect("more than one file");
            s.fetch_file -= 1;
            s.info.ino = s.play[0].ino;
            self.stream_release(gone.ino, StreamDir::Read, now);
        }
    }

    pub(super) fn read_stream_step(&mut self, sid: StreamId, now: Now) -> bool {
        if let Some(why) = self.streams[&sid].expired.clone() {
            return self.expired_step(sid, why, now);
        }
        let t = now.mono_ns;
        let (size, last, growing) = self.play_fetch_file(sid);
        let s = self.streams.get_mut(&sid).expect("listed");
        s.update_credit(t);
        s.wake_ns = None;
        let fetch_end = {
            let f = s.play[s.fetch_file];
            let at = f.from + (s.next_fetch - f.base.expect("fetched"));
            at >= size
        };
        // Following a recording: at the end of what is there the reads wait for it.
        let live_edge = s.follow && last && fetch_end && growing;
        if s.at_edge && !fetch_end && s.chunks.is_empty() {
            // New bytes after the edge: the playback starts again as at its open,
            // its next byte due one slack later (a reader that caught up with a
            // recording falls back that far behind it, with a whole slack).
            s.at_edge = false;
            s.credit = -(s.info.slack_ns as f64 / 1e9 * s.rate);
            s.credit_at = t;
        }
        let end_here = last && fetch_end && !live_edge;
        let mut changed = self.serve_reads(sid, now, end_here, live_edge);
        self.play_files_left(sid, now);
        changed |= self.prefetch(sid, now);
        changed
    }

    /// Serves stream `sid`'s waiting reads from its buffer, as the credit allows:
    /// `end_here`, the playback has fetched all there is; `live_edge`, it waits at
    /// a recording's edge. Whether anything changed.
    fn serve_reads(&mut self, sid: StreamId, now: Now, end_here: bool, live_edge: bool) -> bool {
        let t = now.mono_ns;
        let mut changed = false;
        let s = self.streams.get_mut(&sid).expect("listed");
        // Serve the waiting reads from the buffer, as the credit allows.
        let mut finished = vec![];
        while let Some(w) = s.waiting.front_mut() {
            let want = w.buf.len() - w.done;
            // Drop consumed chunks; a failed one fails the read and is skipped.
            let mut failed = None;
            while let Some(c) = s.chunks.front() {
                if c.op.is_some() {
                    break;
                }
                if let Some(e) = &c.error {
                    failed = Some(Error::io(
                        "prefetching a stream",
                        std::io::Error::other(e.to_string()),
                    ));
                    s.pos = c.offset + c.len as u64;
                    s.chunks.pop_front();
                    break;
                }
                if c.taken < c.bytes {
                    break;
                }
                if c.bytes < c.len {
                    s.ended = true;
                }
                s.chunks.pop_front();
                changed = true;
            }
            if let Some(e) = failed {
                let w = s.waiting.pop_front().expect("front");
                finished.push((w, Err(e)));
                changed = true;
                continue;
            }
            let at_end = s.chunks.is_empty() && (s.ended || end_here);
            if at_end && s.follow {
                s.at_edge = true;
            }
            if want == 0 || at_end {
                let w = s.waiting.pop_front().expect("front");
                finished.push((w, Ok(())));
                changed = true;
                continue;
            }
            if live_edge && s.chunks.is_empty() {
                // Waiting for the recording, not for the disk: no stall.
                s.at_edge = true;
                break;
            }
            let Some(c) = s.chunks.front_mut().filter(|c| c.op.is_none()) else {
                // The data is not there yet: a stall if the rate allowed it.
                if s.credit >= granule(s.info.request_bytes, want) && !w.stalled {
                    w.stalled = true;
                    s.stats.stalls += 1;
                }
                break;
            };
            let avail = c.bytes - c.taken;
            let n = want.min(avail).min(s.credit.max(0.0).floor() as usize);
            if n < granule(s.info.request_bytes, want).min(avail as f64) as usize || n == 0 {
                let need = granule(s.info.request_bytes, want).min(avail as f64);
                s.wake_ns = Some(s.credit_time(need).max(t + 1));
                break;
            }
            if let Some(src) = c.buf.as_ref() {
                buf::copy(src, c.taken, &mut w.buf, w.done, n);
            }
            c.taken += n;
            w.done += n;
            s.pos += n as u64;
            s.credit -= n as f64;
            s.stats.app_bytes += n as u64;
            changed = true;
        }
        for (w, r) in finished {
            let r = r.map(|()| w.done);
            self.stream_finish_read(w, r, now);
        }
        changed
    }

    /// Keeps stream `sid`'s buffer full. Whether it issued a request.
    fn prefetch(&mut self, sid: StreamId, now: Now) -> bool {
        let t = now.mono_ns;
        let mut changed = false;
        // Keep the buffer full: requests due when the playout point could reach them.
        let mut issue = vec![];
        loop {
            let (size, _, _) = self.play_fetch_file(sid);
            let s = self.streams.get_mut(&sid).expect("listed");
            let f = s.play[s.fetch_file];
            let at = f.from + (s.next_fetch - f.base.expect("fetched"));
            if s.closed
                || s.idle
                || s.ended
                || (s.chunks.len() as u32) >= s.info.depth
                || at >= size
            {
                break;
            }
            let len = (size - at).min(s.info.request_bytes) as usize;
            let ahead = s.next_fetch as f64 - s.pos as f64 - s.credit;
            let deadline = s.deadline(ahead, t);
            issue.push((s.next_fetch, f.ino, at, len, deadline));
            s.chunks.push_back(Chunk {
                offset: s.next_fetch,
                file: f.seq,
                len,
                op: None,
                buf: None,
                bytes: 0,
                taken: 0,
                error: None,
            });
            s.next_fetch += len as u64;
        }
        let virt = self.streams[&sid].virtual_bufs;
        for (offset, ino, at, len, deadline) in issue {
            let buf = if virt {
                IoBuf::virtual_len(len)
            } else {
                IoBuf::zeroed(len)
            };
            let op = self.submit_internal(
                Op::Read {
                    ino,
                    offset: at,
                    buf,
                },
                deadline,
                sid,
                now,
            );
            let s = self.streams.get_mut(&sid).expect("listed");
            if let Some(c) = s.chunks.iter_mut().find(|c| c.offset == offset) {
                c.op = Some(op);
            }
            changed = true;
        }
        changed
    }

    /// The holds of a playback that ended: every file it still had.
    pub(super) fn play_files_released(&mut self, files: &[PlayFile], now: Now) {
        for f in files {
            self.stream_release(f.ino, StreamDir::Read, now);
        }
    }
}
