//! A recording that rolls on to its next file: the chunks of a stream (issue 25).
//!
//! A DVR records a source as a run of self-contained chunk files (`dvrfs record
//! --chunk`, the segment files of a camera's recorder), so that retention can remove
//! the oldest whole chunks while the recording goes on. Closing the stream at each
//! chunk and opening another would give the reservation back and ask admission again
//! in the middle of a recording, which may refuse it (a playback admitted in
//! between), and would empty the write-behind buffer at every boundary.
//! `Op::StreamRoll` moves the stream on to another file instead: the admission, the
//! rate credit, the buffer, the figures and the space held for the recording stay
//! the stream's.
//!
//! - **In order.** A roll waits behind the application's writes submitted before it
//!   (it is queued as they are): every byte accepted before it goes to the old
//!   file, every byte after it to the new one, at the new file's end.
//! - **The old file's last bytes.** The request being filled is written out at the
//!   roll, due by the commit its oldest byte's durability bound names, as a gather
//!   would write it (`stream/recording.rs`); requests already being written go on.
//!   Each request knows its own file, so a request of the old file still in flight
//!   is overlaid on reads of that file, counts in its visible size and in the
//!   lost-tail record, and is logged under its own file by the tail log.
//! - **The held space** moves to the new file, except the blocks the old file's
//!   last bytes still need (`Volume::move_held_space`): a full disk cannot refuse a
//!   byte accepted before the roll. What is left of the old file's hold goes back
//!   when its last request lands, and with it the stream's hold on the old file
//!   (`stream/hold.rs`): until then the old file counts as recorded into, so a
//!   second recording cannot interleave with those last bytes.
//! - **Refused** (the roll fails, the stream goes on in its file): a stream that
//!   is not a recording, a target that is not a regular file, is the stream's own
//!   file, or has a recording of its own, a read-only volume.

use super::{AppOp, Engine, Error, Ino, IoBuf, Now, Result, StreamDir, StreamId};
use crate::format::dir::Kind;

impl Engine {
    /// `Op::StreamRoll` submitted as operation `id`: checked, then queued behind the
    /// stream's waiting writes.
    pub(super) fn stream_roll_submit(
        &mut self,
        id: super::OpId,
        sid: StreamId,
        to: Ino,
        now: Now,
    ) -> Result<()> {
        self.roll_refused(sid, to)?;
        let s = self.streams.get_mut(&sid).expect("roll_refused found it");
        s.wake(now);
        s.waiting.push_back(AppOp {
            id,
            buf: IoBuf::Virtual(0),
            roll_to: Some(to),
            done: 0,
            submit_ns: now.mono_ns,
            stalled: false,
        });
        Ok(())
    }

    /// Why stream `sid` cannot roll on to file `to` now, if it cannot.
    fn roll_refused(&self, sid: StreamId, to: Ino) -> Result<()> {
        let Some(s) = self.streams.get(&sid).filter(|s| !s.closed) else {
            return Err(Error::InvalidArgument(format!("stream {sid} is not open")));
        };
        if s.info.dir != StreamDir::Write {
            return Err(Error::InvalidArgument(format!(
                "stream {sid} is a playback: only a recording rolls on to another file"
            )));
        }
        if let Some(e) = &s.error {
            return Err(Error::io(
                "writing behind a stream",
                std::io::Error::other(e.clone()),
            ));
        }
        if to == s.info.ino {
            return Err(Error::InvalidArgument(format!(
                "stream {sid} already records into inode {to}: roll on to a new file"
            )));
        }
        let st = self.vol.stat(to)?;
        if st.kind != Kind::File {
            return Err(Error::InvalidArgument(format!(
                "inode {to} is not a regular file: a recording rolls on to a file"
            )));
        }
        if let Some(other) = self.recording_on(to) {
            return Err(Error::Refused(format!(
                "file inode {to} {} (stream {other}): roll on to a file nobody records into",
                super::RECORDING_BUSY
            )));
        }
        self.vol.check_writable()
    }

    /// The roll itself, its turn come: every byte accepted so far belongs to the old
    /// file (module docs).
    pub(super) fn stream_roll_now(&mut self, sid: StreamId, to: Ino, now: Now) -> Result<()> {
        self.roll_refused(sid, to)?;
        // The new file's hold first: the one step that can still refuse.
        self.stream_hold(to, StreamDir::Write)?;
        let t = now.mono_ns;
        let s = &self.streams[&sid];
        let (from, end) = (s.info.ino, s.pos);
        if s.fill_len > 0 {
            let lead = self.gather_lead();
            let cap = self.gather_at(s, lead, false).map(|g| g.max(t) + lead);
            self.stream_write_out(sid, now, cap);
        }
        self.vol
            .move_held_space(from, to, end)
            .expect("the stream holds its file");
        let start = self.vol.planned_size(to).expect("checked above");
        if start == 0 {
            self.index_continues(from, to);
        }
        let s = self.streams.get_mut(&sid).expect("listed");
        s.info.ino = to;
        s.pos = start;
        s.fill_at = start;
        debug_assert!(s.fill.is_none() && s.fill_len == 0 && s.logged_len == 0);
        self.rolled_file_landed(sid, from, now);
        Ok(())
    }

    /// A request of stream `sid` into file `ino` landed (or the stream rolled on from
    /// `ino`): once the stream records elsewhere and has nothing of `ino` in flight,
    /// the rest of `ino`'s held space and the stream's hold on it go back.
    pub(super) fn rolled_file_landed(&mut self, sid: StreamId, ino: Ino, now: Now) {
        let Some(s) = self.streams.get(&sid) else {
            return;
        };
        if s.info.ino == ino || s.writes.iter().any(|w| w.ino == ino) {
            return;
        }
        self.vol.release_space(ino);
        self.index_file_ended(ino);
        self.stream_release(ino, StreamDir::Write, now);
    }
}
