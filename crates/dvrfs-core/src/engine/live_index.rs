//! The files the engine indexes as they are written (`engine/indexing.rs`) and the
//! indexes it picks up again (`engine/index_resume.rs`): what it keeps per file.

use super::OpId;
use crate::format::frame_index::FrameEntry;
use crate::media::KeyframeBuilder;
use crate::meta::Ino;
use std::collections::HashMap;

/// One file being indexed as it is written.
#[derive(Debug)]
pub(super) struct LiveIndex {
    /// `None`: the file is not media; its appends are followed only so that they
    /// do not count as unfollowed (an index its writer keeps itself stays whole).
    pub(super) builder: Option<KeyframeBuilder>,
    /// The generation of the inode it follows (a number reused is another file).
    pub(super) generation: u32,
    /// Bytes fed: the file's applied size when it follows it.
    pub(super) fed: u64,
    /// A recording rolled on to this file from that one (`Op::StreamRoll`): its
    /// first frame is timed from where that file's index left off.
    pub(super) continues: Option<Ino>,
    /// A file whose recording has rolled on and whose writes have all landed: its
    /// parser is gone (`builder` is `None`), and this is what the next file of the
    /// recording is timed from, until that file starts.
    pub(super) seed: Option<Box<KeyframeBuilder>>,
    /// Its index is being picked up again (`engine/index_resume.rs`); `fed` is then
    /// the file's applied size, which the resume reads up to.
    pub(super) resume: Option<Resume>,
}

impl LiveIndex {
    /// A file whose index a resume picks up again; `size`: its applied size.
    pub(super) fn resuming(
        generation: u32,
        size: u64,
        builder: Option<KeyframeBuilder>,
        resume: Resume,
    ) -> LiveIndex {
        LiveIndex {
            builder,
            generation,
            fed: size,
            continues: None,
            seed: None,
            resume: Some(resume),
        }
    }
}

/// The files being indexed.
pub(super) type LiveIndexes = HashMap<Ino, LiveIndex>;

/// A resume in progress (`engine/index_resume.rs`).
#[derive(Debug)]
pub(super) struct Resume {
    /// The keyframe the index held last; `None`: it was empty, the file is read
    /// from its start.
    pub(super) last: Option<FrameEntry>,
    /// The read in flight.
    pub(super) reading: OpId,
    /// The read in flight is the head's.
    pub(super) head: bool,
    /// The next byte to read and feed.
    pub(super) next: u64,
    /// Bytes read so far.
    pub(super) read: u64,
    /// Keyframes found, stored when the resume has caught up.
    pub(super) found: Vec<FrameEntry>,
    /// The file's recording ended meanwhile (`index_file_ended`): its end is
    /// indexed once the resume has caught up.
    pub(super) ended: bool,
}
