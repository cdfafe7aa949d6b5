//! `reindex` (HERMES `addindex`): a file's frame index built from its bytes, for a
//! file written without one (copied in with `put`, written through the mount before
//! indexing, or whose index was dropped by fsck or flagged incomplete).
//!
//! The file is read once, in file order, through the blocking driver, and parsed by
//! the media parser (`media::KeyframeBuilder`, import timing: the media time governs).
//! Its first frame's UTC is the start the caller gives, or else what makes the file
//! end at its modification time (a recorder's last write). The old index is dropped
//! (its flag cleared) and the keyframes appended in batches small enough for one
//! commit each. A file that is not a transport stream or an MP4 gets no index and
//! is reported so; that is not an error.

use crate::device::Device;
use crate::driver::Fs;
use crate::error::{Error, Result};
use crate::format::dir::Kind;
use crate::format::frame_index::{FrameEntry, LEAF_ENTRIES};
use crate::media::{Codec, Container, KeyframeBuilder};
use crate::meta::Ino;

/// Bytes read at a time.
const READ_BYTES: usize = 4 << 20;
/// Keyframes per append: 50 leaves, so one append dirties at most about 52 blocks.
const BATCH: usize = 50 * LEAF_ENTRIES;

/// Where the first frame lies in UTC.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Start {
    /// At this moment (ns since the Unix epoch).
    Utc(i64),
    /// So that the last frame ends at the file's modification time.
    EndsAtMtime,
}

/// What a reindex found and stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReindexReport {
    pub container: Container,
    pub codec: Option<Codec>,
    pub frames: u64,
    /// Keyframes stored in the index.
    pub keyframes: u64,
    /// Keyframes whose length or number does not fit an entry (not stored).
    pub skipped_keyframes: u64,
    /// Bytes the parser skipped as garbage, and how often it lost sync.
    pub skipped_bytes: u64,
    pub resyncs: u64,
    /// UTC of the first and last keyframe stored.
    pub first_utc_ns: Option<i64>,
    pub last_utc_ns: Option<i64>,
    /// The index ran out of room: the file is flagged incomplete.
    pub out_of_room: bool,
}

/// Builds file `ino`'s frame index again from its bytes (see the module docs).
pub fn reindex<D: Device>(
    fs: &mut Fs<D>,
    ino: Ino,
    start: Start,
    now_ns: i64,
) -> Result<ReindexReport> {
    let st = fs.stat(ino)?;
    if st.kind != Kind::File {
        return Err(Error::InvalidArgument(format!(
            "inode {ino} is not a regular file: only files have a frame index"
        )));
    }
    // Timed from 0 first; shifted once the end is known.
    let mut b = KeyframeBuilder::import(0);
    let mut entries: Vec<FrameEntry> = Vec::new();
    let mut buf = vec![0u8; READ_BYTES];
    let mut at = 0u64;
    while at < st.size_bytes {
        let n = fs.read(ino, at, &mut buf)?;
        if n == 0 {
            break;
        }
        entries.extend(b.feed(&buf[..n]));
        at += n as u64;
    }
    entries.extend(b.finish());
    let shift = match start {
        Start::Utc(t) => t,
        // The file's last frame (any frame, not only a keyframe) at its mtime.
        Start::EndsAtMtime => st.mtime_ns.saturating_sub(b.last_utc_ns().max(0)),
    };
    for e in &mut entries {
        e.utc_ns = e.utc_ns.saturating_add(shift);
    }
    fs.drop_frame_index(ino, false, now_ns)?;
    let mut out_of_room = false;
    for batch in entries.chunks(BATCH) {
        fs.append_frames(ino, batch, now_ns)?;
        if !fs.frame_info(ino)?.complete {
            out_of_room = true;
            break;
        }
    }
    let (frames, keyframes, skipped_keyframes) = b.counts();
    let c = b.indexer().counters();
    let info = fs.frame_info(ino)?;
    Ok(ReindexReport {
        container: b.indexer().container(),
        codec: b.indexer().codec(),
        frames,
        keyframes: info.keyframes.min(keyframes),
        skipped_keyframes,
        skipped_bytes: c.skipped_bytes,
        resyncs: c.resyncs,
        first_utc_ns: info.first.map(|e| e.utc_ns),
        last_utc_ns: info.last.map(|e| e.utc_ns),
        out_of_room,
    })
}
