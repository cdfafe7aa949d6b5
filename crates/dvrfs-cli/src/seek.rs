//! Where `play --from` starts, through the file's frame index (FORMAT.md section 10c):
//! the last keyframe at or before the moment or frame asked for, found by a binary
//! search of the index (never by scanning the file), and the head a player needs
//! first when the output starts there: the transport stream's PAT and PMT, or the
//! fragmented MP4's init segment, read from the start of the file. A file without an
//! index keeps the old meaning of a plain duration: that far in at the stream's rate.

use dvrfs_core::format::frame_index::FrameEntry;
use dvrfs_core::media::{Container, Indexer};
use dvrfs_core::meta::Ino;
use dvrfs_core::{IoBuf, Op, Output};
use dvrfs_remote::Handle;

use crate::args::parse_duration_ms;
use crate::error::{CliError, CliResult};
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
    /// The first byte of the file played.
    pub offset: u64,
    /// What goes out before it (PAT and PMT, or the init segment); empty from byte 0.
    pub head: Vec<u8>,
    /// The keyframe it starts at, when the index found it.
    pub keyframe: Option<FrameEntry>,
}

/// Where `--from TEXT` starts file `ino` (`size` bytes, played at `rate_bytes`/s).
pub fn start_of(
    rt: &Handle,
    ino: Ino,
    path: &str,
    size: u64,
    text: &str,
    zone: &Zone,
    rate_bytes: f64,
) -> CliResult<Start> {
    let index = rt.keyframes(ino)?;
    // A plain duration (`90s`): the old form, as `+90s`.
    let at = match parse_duration_ms("--from", text) {
        Ok(ms) => At::SinceStart(ms * 1_000_000),
        Err(_) => parse_at("--from", text, zone)?,
    };
    let entries = &index.entries;
    let (Some(first), Some(last)) = (entries.first(), entries.last()) else {
        return match at {
            At::SinceStart(ns) => {
                let offset = (rate_bytes * ns as f64 / 1e9) as u64;
                if offset >= size {
                    return Err(CliError::usage(
                        format!("--from {text} is past the end of {path} ({size} bytes at the rate)"),
                        "give a time within the recording",
                    ));
                }
                Ok(Start {
                    offset,
                    head: vec![],
                    keyframe: None,
                })
            }
            _ => Err(CliError::new(format!(
                "{path} has no frame index: --from {text} needs one"
            ))
            .hint(format!("build it with `dvrfs reindex TARGET {path}` (or give a plain duration: that far in at the rate)"))),
        };
    };
    let show = |t: i64| zone.show(t);
    let before_utc = |t: i64| entries.partition_point(|e| e.utc_ns <= t).checked_sub(1);
    let k = match at {
        At::SinceStart(ns) => before_utc(first.utc_ns.saturating_add(ns as i64)),
        At::BeforeEnd(ns) => before_utc(last.utc_ns.saturating_sub(ns as i64)),
        At::Utc(t) => before_utc(t),
        At::Frame(n) => entries
            .partition_point(|e| u64::from(e.number) <= n)
            .checked_sub(1),
    };
    let Some(k) = k else {
        return Err(CliError::usage(
            format!(
                "--from {text} is before {path}'s first keyframe ({}, frame {})",
                show(first.utc_ns),
                first.number
            ),
            "give a time or frame within the recording (`dvrfs keyframes` lists them)",
        ));
    };
    let e = entries[k];
    let head = if e.offset == 0 {
        vec![]
    } else {
        head_of(rt, ino, size.min(HEAD_SCAN_BYTES).min(e.offset))?.bytes
    };
    Ok(Start {
        offset: e.offset,
        head,
        keyframe: Some(e),
    })
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
