//! Operations as they travel: the engine's `Op` with a read's length in place of
//! its buffer and a write's bytes in place of its buffer (the client keeps the
//! buffers; `client`).

use dvrfs_core::engine::{StreamDir, StreamSpec};
use dvrfs_core::format::inode::{Protection, StreamDefault, StreamRetention};
use dvrfs_core::format::superblock::VolumeRetention;
use dvrfs_core::volume::SetAttr;
use dvrfs_core::{IoBuf, Op, OpenMode};

use super::MAX_DATA_BYTES;
use crate::wire::{Dec, DecResult, Enc, Malformed};

pub(super) fn encode_op(e: &mut Enc, op: &Op) {
    let data = |e: &mut Enc, b: &IoBuf| {
        e.bytes(b.bytes().expect("a remote write carries real memory"));
    };
    match op {
        Op::Read { ino, offset, buf } => {
            e.u8(1).u32(*ino).u64(*offset).u64(buf.len() as u64);
        }
        Op::Write {
            ino,
            offset,
            data: d,
        } => {
            e.u8(2).u32(*ino).u64(*offset);
            data(e, d);
        }
        Op::Truncate { ino, size_bytes } => {
            e.u8(3).u32(*ino).u64(*size_bytes);
        }
        Op::Append { ino, data: d } => {
            e.u8(27).u32(*ino);
            data(e, d);
        }
        Op::Create {
            parent,
            name,
            perm,
            uid,
            gid,
        } => {
            e.u8(4)
                .u32(*parent)
                .bytes(name)
                .u32(*perm)
                .u32(*uid)
                .u32(*gid);
        }
        Op::Mkdir {
            parent,
            name,
            perm,
            uid,
            gid,
        } => {
            e.u8(5)
                .u32(*parent)
                .bytes(name)
                .u32(*perm)
                .u32(*uid)
                .u32(*gid);
        }
        Op::Symlink {
            parent,
            name,
            target,
            uid,
            gid,
        } => {
            e.u8(6)
                .u32(*parent)
                .bytes(name)
                .bytes(target)
                .u32(*uid)
                .u32(*gid);
        }
        Op::Link { ino, parent, name } => {
            e.u8(7).u32(*ino).u32(*parent).bytes(name);
        }
        Op::Unlink { parent, name } => {
            e.u8(8).u32(*parent).bytes(name);
        }
        Op::Rmdir { parent, name } => {
            e.u8(9).u32(*parent).bytes(name);
        }
        Op::Rename {
            src_parent,
            src_name,
            dst_parent,
            dst_name,
        } => {
            e.u8(10)
                .u32(*src_parent)
                .bytes(src_name)
                .u32(*dst_parent)
                .bytes(dst_name);
        }
        Op::SetAttr { ino, set } => {
            e.u8(11).u32(*ino);
            let opt32 = |e: &mut Enc, v: Option<u32>| {
                e.opt_u64(v.map(u64::from));
            };
            opt32(e, set.mode);
            opt32(e, set.uid);
            opt32(e, set.gid);
            e.opt_u64(set.mtime_ns.map(|t| t as u64));
            match &set.stream_default {
                None => e.u8(0),
                Some(None) => e.u8(1),
                Some(Some(d)) => e
                    .u8(2)
                    .bool(d.write)
                    .u64(d.rate_bps)
                    .u32(d.secs)
                    .u32(d.request_kib),
            };
            match &set.retention {
                None => e.u8(0),
                Some(None) => e.u8(1),
                Some(Some(r)) => e.u8(2).u32(r.max_age_s).u32(r.min_age_s).u64(r.max_bytes),
            };
        }
        // A writer's open and close keep the tags of protocol 1's clients, which
        // knew no other; a reader's have their own.
        Op::OpenFile { ino, mode } => {
            e.u8(match mode {
                OpenMode::Write => 12,
                OpenMode::Read => 30,
            })
            .u32(*ino);
        }
        Op::CloseFile { ino, mode } => {
            e.u8(match mode {
                OpenMode::Write => 13,
                OpenMode::Read => 31,
            })
            .u32(*ino);
        }
        Op::Fsync => {
            e.u8(14);
        }
        Op::StreamOpen { ino, spec } => {
            e.u8(15).u32(*ino);
            e.bool(spec.dir == StreamDir::Write)
                .f64(spec.rate_bps)
                .u64(spec.request_bytes)
                .opt_u64(spec.buffer_bytes)
                .u64(spec.reserve_bytes)
                .u64(spec.start_bytes)
                .opt_u64(spec.durable_ns);
        }
        Op::StreamRead { stream, buf } => {
            e.u8(16).u32(*stream).u64(buf.len() as u64);
        }
        Op::StreamWrite { stream, data: d } => {
            e.u8(17).u32(*stream);
            data(e, d);
        }
        Op::StreamClose { stream } => {
            e.u8(18).u32(*stream);
        }
        Op::StreamSync { stream } => {
            e.u8(19).u32(*stream);
        }
        Op::Unmount => {
            e.u8(20);
        }
        Op::AppendFrames { ino, entries } => {
            e.u8(21).u32(*ino);
            super::keyframes::encode_entries(e, entries);
        }
        Op::DropFrameIndex { ino, incomplete } => {
            e.u8(22).u32(*ino).bool(*incomplete);
        }
        Op::SetVolumeRetention(r) => {
            e.u8(26)
                .u32(u32::from(r.high_permille))
                .u32(u32::from(r.low_permille))
                .u32(u32::from(r.protected_max_permille));
        }
        Op::StreamRoll { stream, ino } => {
            e.u8(23).u32(*stream).u32(*ino);
        }
        Op::StreamQueue { stream, ino, from } => {
            e.u8(24).u32(*stream).u32(*ino).u64(*from);
        }
        Op::StreamFollow { stream } => {
            e.u8(25).u32(*stream);
        }
        Op::Protect {
            dir,
            from_utc_ns,
            to_utc_ns,
            protection,
            restate,
        } => {
            e.u8(28)
                .u32(*dir)
                .u64(*from_utc_ns as u64)
                .u64(*to_utc_ns as u64)
                .u32(protection.until_s)
                .u32(protection.id)
                .bool(*restate);
        }
        Op::Unprotect { id } => {
            e.u8(29).u32(*id);
        }
    }
}

fn data_len(d: &mut Dec) -> DecResult<usize> {
    let n = d.u64("length")?;
    if n > MAX_DATA_BYTES {
        return Err(Malformed(format!(
            "a read of {n} bytes, more than the {MAX_DATA_BYTES} one request may move"
        )));
    }
    Ok(n as usize)
}

pub(super) fn decode_op(d: &mut Dec) -> DecResult<Op> {
    let name = |d: &mut Dec| -> DecResult<Vec<u8>> { Ok(d.bytes("name")?.to_vec()) };
    let opt32 = |d: &mut Dec, what: &str| -> DecResult<Option<u32>> {
        d.opt_u64(what)?
            .map(|v| u32::try_from(v).map_err(|_| Malformed(format!("{what}: {v}"))))
            .transpose()
    };
    let tag = d.u8("operation")?;
    Ok(match tag {
        1 => Op::Read {
            ino: d.u32("ino")?,
            offset: d.u64("offset")?,
            buf: IoBuf::zeroed(data_len(d)?),
        },
        2 => Op::Write {
            ino: d.u32("ino")?,
            offset: d.u64("offset")?,
            data: IoBuf::from_slice(d.bytes("data")?),
        },
        27 => Op::Append {
            ino: d.u32("ino")?,
            data: IoBuf::from_slice(d.bytes("data")?),
        },
        3 => Op::Truncate {
            ino: d.u32("ino")?,
            size_bytes: d.u64("size")?,
        },
        k @ (4 | 5) => {
            let (parent, n, perm, uid, gid) = (
                d.u32("parent")?,
                name(d)?,
                d.u32("perm")?,
                d.u32("uid")?,
                d.u32("gid")?,
            );
            match k {
                4 => Op::Create {
                    parent,
                    name: n,
                    perm,
                    uid,
                    gid,
                },
                _ => Op::Mkdir {
                    parent,
                    name: n,
                    perm,
                    uid,
                    gid,
                },
            }
        }
        6 => Op::Symlink {
            parent: d.u32("parent")?,
            name: name(d)?,
            target: d.bytes("target")?.to_vec(),
            uid: d.u32("uid")?,
            gid: d.u32("gid")?,
        },
        7 => Op::Link {
            ino: d.u32("ino")?,
            parent: d.u32("parent")?,
            name: name(d)?,
        },
        8 => Op::Unlink {
            parent: d.u32("parent")?,
            name: name(d)?,
        },
        9 => Op::Rmdir {
            parent: d.u32("parent")?,
            name: name(d)?,
        },
        10 => Op::Rename {
            src_parent: d.u32("parent")?,
            src_name: name(d)?,
            dst_parent: d.u32("parent")?,
            dst_name: name(d)?,
        },
        11 => {
            let ino = d.u32("ino")?;
            let set = SetAttr {
                mode: opt32(d, "mode")?,
                uid: opt32(d, "uid")?,
                gid: opt32(d, "gid")?,
                mtime_ns: d.opt_u64("mtime")?.map(|t| t as i64),
                stream_default: match d.u8("stream default")? {
                    0 => None,
                    1 => Some(None),
                    2 => Some(Some(StreamDefault {
                        write: d.bool("write")?,
                        rate_bps: d.u64("rate")?,
                        secs: d.u32("secs")?,
                        request_kib: d.u32("request")?,
                    })),
                    v => return Err(Malformed(format!("stream default tag {v}"))),
                },
                retention: match d.u8("retention")? {
                    0 => None,
                    1 => Some(None),
                    2 => Some(Some(StreamRetention {
                        max_age_s: d.u32("max age")?,
                        min_age_s: d.u32("min age")?,
                        max_bytes: d.u64("max size")?,
                    })),
                    v => return Err(Malformed(format!("retention tag {v}"))),
                },
                // Never from a client: a protection goes through `Op::Protect`,
                // which checks the volume's protected-max.
                protection: None,
            };
            Op::SetAttr { ino, set }
        }
        12 | 30 => Op::OpenFile {
            ino: d.u32("ino")?,
            mode: if tag == 12 {
                OpenMode::Write
            } else {
                OpenMode::Read
            },
        },
        13 | 31 => Op::CloseFile {
            ino: d.u32("ino")?,
            mode: if tag == 13 {
                OpenMode::Write
            } else {
                OpenMode::Read
            },
        },
        14 => Op::Fsync,
        15 => {
            let ino = d.u32("ino")?;
            let spec = StreamSpec {
                idle: false,
                dir: super::value::decode_dir(d)?,
                rate_bps: d.f64("rate")?,
                request_bytes: d.u64("request")?,
                buffer_bytes: d.opt_u64("buffer")?,
                reserve_bytes: d.u64("reserve")?,
                start_bytes: d.u64("start")?,
                durable_ns: d.opt_u64("durable")?,
            };
            Op::StreamOpen { ino, spec }
        }
        16 => Op::StreamRead {
            stream: d.u32("stream")?,
            buf: IoBuf::zeroed(data_len(d)?),
        },
        17 => Op::StreamWrite {
            stream: d.u32("stream")?,
            data: IoBuf::from_slice(d.bytes("data")?),
        },
        18 => Op::StreamClose {
            stream: d.u32("stream")?,
        },
        19 => Op::StreamSync {
            stream: d.u32("stream")?,
        },
        20 => Op::Unmount,
        21 => Op::AppendFrames {
            ino: d.u32("ino")?,
            entries: super::keyframes::decode_entries(d)?,
        },
        22 => Op::DropFrameIndex {
            ino: d.u32("ino")?,
            incomplete: d.bool("incomplete")?,
        },
        28 => Op::Protect {
            dir: d.u32("dir")?,
            from_utc_ns: d.u64("from")? as i64,
            to_utc_ns: d.u64("to")? as i64,
            protection: Protection {
                until_s: d.u32("until")?,
                id: d.u32("id")?,
            },
            restate: d.bool("restate")?,
        },
        29 => Op::Unprotect { id: d.u32("id")? },
        26 => {
            let mut share = |what| -> DecResult<u16> {
                u16::try_from(d.u32(what)?).map_err(|_| Malformed(format!("{what} out of range")))
            };
            Op::SetVolumeRetention(VolumeRetention {
                high_permille: share("high")?,
                low_permille: share("low")?,
                protected_max_permille: share("protected max")?,
            })
        }
        23 => Op::StreamRoll {
            stream: d.u32("stream")?,
            ino: d.u32("ino")?,
        },
        24 => Op::StreamQueue {
            stream: d.u32("stream")?,
            ino: d.u32("ino")?,
            from: d.u64("from")?,
        },
        25 => Op::StreamFollow {
            stream: d.u32("stream")?,
        },
        k => return Err(Malformed(format!("operation {k} is unknown"))),
    })
}
