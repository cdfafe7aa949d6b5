//! What a stream holds of its file, so that no driver can let a stream outlive it or
//! share it with a second writer.
//!
//! - **A stream holds its inode.** Admission opens the file for the stream
//!   (`Volume::open_file`, the open count every handle of the mount and of the C API
//!   takes), and the stream's end closes it. Removing the file's last name while a
//!   stream is on it leaves an orphan, as for any open file: its blocks and its
//!   inode number stay the stream's until the last holder goes, so a recording can
//!   never write into a file created later under a reused inode number. When the
//!   stream is that last holder, its end frees the orphan through the same deferred
//!   `CloseFile` path a driver's last close takes (after the file's I/O in flight,
//!   with room in the journal), queued ahead of everything else so an unmount,
//!   which waits for every operation, cannot wait on it forever.
//! - **One recording per file.** A second write stream on a file that has one (also
//!   one closed and still writing its last bytes) is refused with
//!   [`Error::Refused`] (`EBUSY`): two recordings appending at the same end would
//!   interleave, and the file would keep whichever wrote last. Playbacks are not
//!   limited: following a recording as it grows is what a DVR does.
//!
//! Fault model: a failure of the orphan's freeing (the device failed under the
//! journal) leaves the orphan on the disk; the next mount frees it (`volume/load.rs`).

use super::super::{Engine, Now, Op, OpenMode};
use super::{Error, Ino, Result, StreamDir, StreamId, StreamSpec};

/// Words of the refusal of a second recording on a file, for drivers that explain
/// it in their own terms (the CLI's hint).
pub const RECORDING_BUSY: &str = "already has a recording";

/// Owner of the `CloseFile` that frees an orphan a finished stream held last: its
/// completion is the engine's, never a driver's.
pub(in crate::engine) const STREAM_RELEASE_OWNER: u32 = 0x7FFF_FFFD;

impl Engine {
    /// The recording on `ino`, if any (a closed one still writing out counts, and
    /// one that rolled on from `ino` while its last requests there are being
    /// written: `stream/roll.rs`).
    pub fn recording_on(&self, ino: Ino) -> Option<StreamId> {
        self.streams
            .iter()
            .find(|(_, s)| {
                s.info.dir == StreamDir::Write
                    && (s.info.ino == ino || s.writes.iter().any(|w| w.ino == ino))
            })
            .map(|(sid, _)| *sid)
    }

    /// Refuses a second recording on `ino`.
    pub(super) fn one_recording_per_file(&self, ino: Ino, spec: &StreamSpec) -> Result<()> {
        if spec.dir != StreamDir::Write {
            return Ok(());
        }
        match self.recording_on(ino) {
            None => Ok(()),
            Some(sid) => Err(Error::Refused(format!(
                "file inode {ino} {RECORDING_BUSY} (stream {sid}): a file takes one write stream at a time (two would interleave their bytes); close that stream first, or record into another file"
            ))),
        }
    }

    /// Every stream holds its file, and a file has at most one recording: the
    /// bookkeeping `Engine::check` verifies.
    pub(in crate::engine) fn check_holds(&self) -> std::result::Result<(), String> {
        let mut per_file: std::collections::BTreeMap<Ino, (u32, u32)> = Default::default();
        for s in self.streams.values() {
            let e = per_file.entry(s.info.ino).or_default();
            e.0 += 1;
            e.1 += u32::from(s.info.dir == StreamDir::Write);
            if s.info.dir == StreamDir::Read {
                // A playback holds every file it has (`stream/playback.rs`), its own first.
                if s.play.front().map(|f| f.ino) != Some(s.info.ino) {
                    return Err(format!(
                        "playback {} is on inode {} but its first file is {:?}",
                        s.info.id,
                        s.info.ino,
                        s.play.front()
                    ));
                }
                for f in s.play.iter().skip(1) {
                    per_file.entry(f.ino).or_default().0 += 1;
                }
            }
        }
        for (ino, (streams, recordings)) in per_file {
            let held = self.vol.open_count(ino);
            if held < streams {
                return Err(format!(
                    "inode {ino} has {streams} streams but is held open {held} times"
                ));
            }
            if recordings > 1 {
                return Err(format!("inode {ino} has {recordings} recordings"));
            }
        }
        Ok(())
    }

    /// The admitted stream takes its hold on `ino`: a recording's as a writer's, a
    /// playback's as a reader's (`dir`).
    pub(super) fn stream_hold(&mut self, ino: Ino, dir: StreamDir) -> Result<()> {
        self.vol.open_file(ino, hold_mode(dir))
    }

    /// A stream on `ino` ended: its hold goes. A plain close unless the stream was
    /// the last holder of an orphan, whose freeing waits its turn (module docs).
    pub(super) fn stream_release(&mut self, ino: Ino, dir: StreamDir, now: Now) {
        let mode = hold_mode(dir);
        if self.vol.frees_on_close(ino).is_none() {
            // Only a last close of an orphan frees (and so can fail); this is not one.
            let closed = self.vol.close_file(ino, mode);
            assert!(
                closed.is_ok(),
                "dropping a stream's hold on inode {ino}: {closed:?}"
            );
            return;
        }
        let id = self.submit_own(
            Op::CloseFile { ino, mode },
            None,
            STREAM_RELEASE_OWNER,
            None,
            now,
        );
        let back = self.deferred.pop_back();
        assert_eq!(back, Some(id), "submit_own queues at the back");
        self.deferred.push_front(id);
    }
}

/// How a stream holds its file: a recording writes, a playback reads.
fn hold_mode(dir: StreamDir) -> OpenMode {
    match dir {
        StreamDir::Write => OpenMode::Write,
        StreamDir::Read => OpenMode::Read,
    }
}
