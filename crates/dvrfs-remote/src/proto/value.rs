//! The values replies carry: a file's attributes, a stream's reservation and its
//! figures.

use dvrfs_core::engine::{StreamDir, StreamInfo, StreamStats};
use dvrfs_core::format::dir::Kind;
use dvrfs_core::Stat;

use crate::wire::{Dec, DecResult, Enc, Malformed};

pub(super) fn encode_stat(e: &mut Enc, s: &Stat) {
    e.u32(s.ino)
        .u8(s.kind as u8)
        .u32(s.mode)
        .u32(s.nlink)
        .u32(s.uid)
        .u32(s.gid)
        .u64(s.size_bytes)
        .i64(s.mtime_ns)
        .i64(s.ctime_ns)
        .u64(s.blocks)
        .u64(s.runs as u64)
        .u64(s.lost_bytes)
        .u32(s.generation);
}

pub(super) fn kind(v: u8) -> DecResult<Kind> {
    match v {
        1 => Ok(Kind::File),
        2 => Ok(Kind::Dir),
        3 => Ok(Kind::Symlink),
        v => Err(Malformed(format!("file kind {v}"))),
    }
}

pub(super) fn decode_stat(d: &mut Dec) -> DecResult<Stat> {
    Ok(Stat {
        ino: d.u32("ino")?,
        kind: kind(d.u8("kind")?)?,
        mode: d.u32("mode")?,
        nlink: d.u32("nlink")?,
        uid: d.u32("uid")?,
        gid: d.u32("gid")?,
        size_bytes: d.u64("size")?,
        mtime_ns: d.i64("mtime")?,
        ctime_ns: d.i64("ctime")?,
        blocks: d.u64("blocks")?,
        runs: d.u64("runs")? as usize,
        lost_bytes: d.u64("lost")?,
        generation: d.u32("generation")?,
    })
}

pub(super) fn encode_info(e: &mut Enc, i: &StreamInfo) {
    e.u32(i.id)
        .u32(i.ino)
        .bool(i.dir == StreamDir::Write)
        .f64(i.rate_bytes_per_s)
        .u64(i.request_bytes)
        .u32(i.depth)
        .u64(i.buffer_bytes)
        .u64(i.slack_ns)
        .u64(i.reserved_bytes)
        .f64(i.load)
        .u64(i.durable_ns);
}

/// A stream's direction: `true` for a recording.
pub(super) fn decode_dir(d: &mut Dec) -> DecResult<StreamDir> {
    Ok(match d.bool("direction")? {
        true => StreamDir::Write,
        false => StreamDir::Read,
    })
}

pub(super) fn decode_info(d: &mut Dec) -> DecResult<StreamInfo> {
    Ok(StreamInfo {
        id: d.u32("stream")?,
        ino: d.u32("ino")?,
        dir: decode_dir(d)?,
        rate_bytes_per_s: d.f64("rate")?,
        request_bytes: d.u64("request")?,
        depth: d.u32("depth")?,
        buffer_bytes: d.u64("buffer")?,
        slack_ns: d.u64("slack")?,
        reserved_bytes: d.u64("reserved")?,
        load: d.f64("load")?,
        durable_ns: d.u64("durable")?,
    })
}

pub(super) fn encode_stats(e: &mut Enc, s: &StreamStats) {
    e.u64(s.requests).u64(s.late);
    match s.min_margin_ns {
        Some(m) => e.u8(1).i64(m),
        None => e.u8(0),
    };
    e.u64(s.stalls)
        .u64(s.app_bytes)
        .u64(s.written_bytes)
        .u64(s.no_space)
        .u64(s.durability_late);
}

pub(super) fn decode_stats(d: &mut Dec) -> DecResult<StreamStats> {
    Ok(StreamStats {
        requests: d.u64("requests")?,
        late: d.u64("late")?,
        min_margin_ns: match d.bool("margin")? {
            true => Some(d.i64("margin")?),
            false => None,
        },
        stalls: d.u64("stalls")?,
        app_bytes: d.u64("app bytes")?,
        written_bytes: d.u64("written")?,
        no_space: d.u64("no space")?,
        durability_late: d.u64("durability late")?,
        // Not carried by this protocol version: the tail log's figures are the
        // daemon's (its log, `dvrfs status`).
        ..StreamStats::default()
    })
}
