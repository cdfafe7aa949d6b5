//! Where `play --from` starts, through the frame index (FORMAT.md section 10c): the
//! last keyframe at or before the moment or frame asked for, in a one-file recording
//! or across a stream directory's chunks (`recording.rs`: binary searches of the
//! index, never a scan of the data), and the head a player needs first when the
//! output starts there: the transport stream's PAT and PMT, or the fragmented MP4's
//! init segment, read from the start of that chunk. A file without an index keeps
//! the old meaning of a plain duration: that far in at the stream's rate.

use dvrfs_core::format::frame_index::FrameEntry;
use dvrfs_core::media::{box_header, Container, Indexer};
use dvrfs_core::meta::Ino;
use dvrfs_core::{IoBuf, Op, Output};
use dvrfs_remote::Handle;

use crate::args::parse_duration_ms;
use crate::error::{CliError, CliResult};
use crate::recording::{Pos, Recording};
use crate::timespec::{parse_at, At, Zone};

/// Bytes of the file's start read for the head, at most.
const HEAD_SCAN_BYTES: u64 = 4 << 20;
/// Bytes read for the head at least: the parser tells MPEG-TS from MP4 in its
/// first 752 bytes (a keyframe can start before them, after a 564-byte head).
const HEAD_MIN_BYTES: u64 = 1024;
/// Bytes read at a time while looking for the head.
const HEAD_READ_BYTES: u64 = 256 << 10;

/// Where a playback starts.
pub struct Start {
    /// The recording's chunk it starts in.
    pub chunk: usize,
    /// The first byte of that chunk played.
    pub offset: u64,
    /// What goes out before it (PAT and PMT, or the init segment); empty from byte 0.
    pub head: Vec<u8>,
    /// The keyframe it starts at, when the index found it, and its place in the
    /// recording.
    pub keyframe: Option<(FrameEntry, Pos)>,
}

/// `--from TEXT` as a point of a recording (a plain duration, `90s`, is `+90s`).
pub fn parse_from(text: &str, zone: &Zone) -> CliResult<At> {
    match parse_duration_ms("--from", text) {
        Ok(ms) => Ok(At::SinceStart(ms * 1_000_000)),
        Err(_) => parse_at("--from", text, zone),
    }
}

/// Where `--from TEXT` starts recording `rec`, played at `rate_bytes`/s.
pub fn start_of(
    rt: &Handle,
    rec: &Recording,
    text: &str,
    zone: &Zone,
    rate_bytes: f64,
) -> CliResult<Start> {
    let at = parse_from(text, zone)?;
    if rec.first().is_none() && !rec.dir {
        // One file without an index: a duration is that far in at the rate.
        let (path, size) = (&rec.path, rec.chunks[0].size);
        let At::SinceStart(ns) = at else {
            return Err(CliError::new(format!(
                "{path} has no frame index: --from {text} needs one"
            ))
            .hint(format!("build it with `dvrfs reindex TARGET {path}` (or give a plain duration: that far in at the rate)")));
        };
        let offset = (rate_bytes * ns as f64 / 1e9) as u64;
        if offset >= size {
            return Err(CliError::usage(
                format!("--from {text} is past the end of {path} ({size} bytes at the rate)"),
                "give a time within the recording",
            ));
        }
        return Ok(Start {
            chunk: 0,
            offset,
            head: vec![],
            keyframe: None,
        });
    }
    let p = rec.start_at("--from", text, at, zone)?;
    let chunk = &rec.chunks[p.chunk];
    let e = *rec.entry(p);
    let head = if e.offset == 0 {
        vec![]
    } else {
        head_of(rt, chunk.ino, chunk.size.min(HEAD_SCAN_BYTES).min(e.offset))?.bytes
    };
    Ok(Start {
        chunk: p.chunk,
        offset: e.offset,
        head,
        keyframe: Some((e, p)),
    })
}

/// The largest `moov` read whole ([`mp4_head`]): an hour of a plain 30 fps MP4's
/// sample tables take about 2 MiB.
const MOOV_MAX_BYTES: u64 = 64 << 20;
/// The most top-level boxes walked looking for the `moov` (a fragmented MP4 has two
/// a fragment, and its `moov` comes first).
const MP4_TOP_BOXES_MAX: usize = 4096;

/// An MP4's `ftyp` and first `moov`, wherever they are in file `ino` of `size`
/// bytes (a plain MP4's `moov` usually comes after its `mdat`): found by walking the
/// top-level boxes' headers, 16 bytes read for each, and read whole.
pub fn mp4_head(rt: &Handle, ino: Ino, size: u64, path: &str) -> CliResult<Vec<u8>> {
    let read = |offset: u64, len: u64| -> CliResult<Vec<u8>> {
        let op = Op::Read {
            ino,
            offset,
            buf: IoBuf::zeroed(len as usize),
        };
        let Output::Read { buf, bytes } = rt.run(op, None, 0)? else {
            unreachable!("a read returns bytes")
        };
        Ok(buf.bytes().expect("a memory buffer")[..bytes].to_vec())
    };
    let mut head = vec![];
    let mut at = 0u64;
    for _ in 0..MP4_TOP_BOXES_MAX {
        if at + 8 > size {
            break;
        }
        let h = read(at, 16.min(size - at))?;
        let Some((kind, box_size)) = box_header(&h, size - at) else {
            break; // damage
        };
        let kind = &kind;
        if at.checked_add(box_size).is_none_or(|end| end > size) {
            break; // a box the file ends inside
        }
        if kind == b"ftyp" || kind == b"moov" {
            if box_size > MOOV_MAX_BYTES {
                return Err(CliError::new(format!(
                    "{path}: its {} box is {box_size} bytes, more than the {MOOV_MAX_BYTES} read whole",
                    String::from_utf8_lossy(kind)
                )));
            }
            head.extend(read(at, box_size)?);
            if kind == b"moov" {
                return Ok(head);
            }
        }
        at += box_size;
    }
    Err(CliError::new(format!(
        "{path}: no moov box found (an MP4 whose writer did not finish it?)"
    ))
    .hint(format!(
        "`dvrfs keyframes TARGET {path}` lists what its index holds"
    )))
}

/// A file's head and container.
pub struct Head {
    /// PAT and PMT, or the init segment; empty if none went by (a stream without
    /// tables: played as is).
    pub bytes: Vec<u8>,
    pub container: Container,
}

/// The head a player needs before a keyframe of file `ino`: read from its first
/// `limit` bytes (at most [`HEAD_SCAN_BYTES`]; at least [`HEAD_MIN_BYTES`], what
/// telling the container apart takes).
pub fn head_of(rt: &Handle, ino: Ino, limit: u64) -> CliResult<Head> {
    let limit = limit.clamp(HEAD_MIN_BYTES, HEAD_SCAN_BYTES);
    let mut ix = Indexer::new();
    let mut at = 0;
    while at < limit {
        let len = HEAD_READ_BYTES.min(limit - at);
        let op = Op::Read {
            ino,
            offset: at,
            buf: IoBuf::zeroed(len as usize),
        };
        let Output::Read { buf, bytes } = rt.run(op, None, 0)? else {
            unreachable!("a read returns bytes")
        };
        if bytes == 0 {
            break;
        }
        ix.feed(&buf.bytes().expect("a memory buffer")[..bytes]);
        if let Some(h) = ix.chunk_head() {
            return Ok(Head {
                bytes: h,
                container: ix.container(),
            });
        }
        at += bytes as u64;
    }
    Ok(Head {
        bytes: vec![],
        container: ix.container(),
    })
}
