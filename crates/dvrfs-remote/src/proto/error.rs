//! Failures as they travel: the runtime's error keeps its variant (and an engine
//! error its own), so a client maps it to the same errno and message as a local
//! open would.

use std::io;
use std::path::PathBuf;

use dvrfs_core::Error as CoreError;
use dvrfs_io::OpenError;
use dvrfs_runtime::RuntimeError;

use crate::wire::{Dec, DecResult, Enc, Malformed};

pub(super) fn encode_error(e: &mut Enc, err: &RuntimeError) {
    match err {
        RuntimeError::Engine(c) => {
            e.u8(1);
            encode_core(e, c);
        }
        RuntimeError::Stopped(why) => {
            e.u8(2).str(why);
        }
        RuntimeError::UnknownTicket(id) => {
            e.u8(3).u64(*id);
        }
        RuntimeError::Open(OpenError::PermissionDenied { path }) => {
            e.u8(4).str(&path.to_string_lossy());
        }
        RuntimeError::Io(io) => {
            e.u8(5)
                .u64(io.raw_os_error().map_or(0, |c| c as u64))
                .str(&io.to_string());
        }
        RuntimeError::Open(OpenError::ReadOnly { path }) => {
            e.u8(6).str(&path.to_string_lossy());
        }
        RuntimeError::Open(other) => {
            e.u8(5).u64(0).str(&other.to_string());
        }
    }
}

pub(super) fn decode_error(d: &mut Dec) -> DecResult<RuntimeError> {
    Ok(match d.u8("error")? {
        1 => RuntimeError::Engine(decode_core(d)?),
        2 => RuntimeError::Stopped(d.string("why")?),
        3 => RuntimeError::UnknownTicket(d.u64("ticket")?),
        4 => RuntimeError::Open(OpenError::PermissionDenied {
            path: PathBuf::from(d.string("path")?),
        }),
        6 => RuntimeError::Open(OpenError::ReadOnly {
            path: PathBuf::from(d.string("path")?),
        }),
        5 => {
            let (code, msg) = (d.u64("errno")?, d.string("message")?);
            RuntimeError::Io(match code {
                0 => io::Error::other(msg),
                c => io::Error::new(io::Error::from_raw_os_error(c as i32).kind(), msg),
            })
        }
        v => return Err(Malformed(format!("error kind {v}"))),
    })
}

fn encode_core(e: &mut Enc, c: &CoreError) {
    use CoreError as C;
    match c {
        C::Io { what, source } => {
            e.u8(1)
                .str(what)
                .u64(source.raw_os_error().map_or(0, |c| c as u64))
                .str(&source.to_string());
        }
        C::NotDvrfs(s) => {
            e.u8(2).str(s);
        }
        C::Corrupt(s) => {
            e.u8(3).str(s);
        }
        C::TooSmall {
            device_bytes,
            need_bytes,
        } => {
            e.u8(4).u64(*device_bytes).u64(*need_bytes);
        }
        C::NotFound(s) => {
            e.u8(5).str(s);
        }
        C::Exists(s) => {
            e.u8(6).str(s);
        }
        C::NotDir(s) => {
            e.u8(7).str(s);
        }
        C::IsDir(s) => {
            e.u8(8).str(s);
        }
        C::NotEmpty(s) => {
            e.u8(9).str(s);
        }
        C::NameTooLong { len } => {
            e.u8(10).u64(*len as u64);
        }
        C::InvalidName(s) => {
            e.u8(11).str(s);
        }
        C::NoSpace {
            need_bytes,
            free_bytes,
        } => {
            e.u8(12).u64(*need_bytes).u64(*free_bytes);
        }
        C::NoInodes(n) => {
            e.u8(13).u32(*n);
        }
        C::MetadataFull => {
            e.u8(14);
        }
        C::NamesFull {
            name_blocks,
            total_blocks,
            reserve_blocks,
        } => {
            e.u8(30)
                .u64(*name_blocks)
                .u64(*total_blocks)
                .u64(*reserve_blocks);
        }
        C::FileTooLarge(n) => {
            e.u8(15).u64(*n);
        }
        C::InvalidArgument(s) => {
            e.u8(16).str(s);
        }
        C::ReadOnly => {
            e.u8(17);
        }
        C::Loop => {
            e.u8(18);
        }
        C::TooFragmented { blocks, limit } => {
            e.u8(19).u64(*blocks).u64(*limit);
        }
        C::DeadlineMissed { deadline_ns } => {
            e.u8(20).u64(*deadline_ns);
        }
        C::Cancelled => {
            e.u8(21);
        }
        C::CannotCancel(s) => {
            e.u8(22).str(s);
        }
        C::QueueFull { max } => {
            e.u8(23).u64(*max as u64);
        }
        C::Refused(s) => {
            e.u8(24).str(s);
        }
        C::Busy(s) => {
            e.u8(33).str(s);
        }
        C::OverQuota(s) => {
            e.u8(31).str(s);
        }
        C::KeptForRoot(s) => {
            e.u8(32).str(s);
        }
        C::SpaceNotKept(s) => {
            e.u8(34).str(s);
        }
        C::RangeExpired(s) => {
            e.u8(35).str(s);
        }
        C::DataLost { ino, offset, end } => {
            e.u8(25).u32(*ino).u64(*offset).u64(*end);
        }
        C::Checksum { ino, offset, end } => {
            e.u8(26).u32(*ino).u64(*offset).u64(*end);
        }
        C::Truncated {
            volume_bytes,
            device_bytes,
        } => {
            e.u8(27).u64(*volume_bytes).u64(*device_bytes);
        }
        C::TargetTooLong { len, max } => {
            e.u8(29).u64(*len as u64).u64(*max as u64);
        }
        C::PastEnd {
            ino,
            offset,
            end,
            device_bytes,
        } => {
            e.u8(28).u32(*ino).u64(*offset).u64(*end).u64(*device_bytes);
        }
    }
}

fn decode_core(d: &mut Dec) -> DecResult<CoreError> {
    use CoreError as C;
    Ok(match d.u8("engine error")? {
        1 => {
            let (what, code, msg) = (d.string("what")?, d.u64("errno")?, d.string("message")?);
            let source = match code {
                0 => io::Error::other(msg),
                c => io::Error::new(io::Error::from_raw_os_error(c as i32).kind(), msg),
            };
            C::Io { what, source }
        }
        2 => C::NotDvrfs(d.string("why")?),
        3 => C::Corrupt(d.string("why")?),
        4 => C::TooSmall {
            device_bytes: d.u64("device")?,
            need_bytes: d.u64("need")?,
        },
        5 => C::NotFound(d.string("path")?),
        6 => C::Exists(d.string("path")?),
        7 => C::NotDir(d.string("path")?),
        8 => C::IsDir(d.string("path")?),
        9 => C::NotEmpty(d.string("path")?),
        10 => C::NameTooLong {
            len: d.u64("len")? as usize,
        },
        11 => C::InvalidName(d.string("name")?),
        12 => C::NoSpace {
            need_bytes: d.u64("need")?,
            free_bytes: d.u64("free")?,
        },
        13 => C::NoInodes(d.u32("inodes")?),
        14 => C::MetadataFull,
        15 => C::FileTooLarge(d.u64("size")?),
        16 => C::InvalidArgument(d.string("why")?),
        17 => C::ReadOnly,
        18 => C::Loop,
        19 => C::TooFragmented {
            blocks: d.u64("blocks")?,
            limit: d.u64("limit")?,
        },
        20 => C::DeadlineMissed {
            deadline_ns: d.u64("deadline")?,
        },
        21 => C::Cancelled,
        22 => C::CannotCancel(d.string("why")?),
        23 => C::QueueFull {
            max: d.u64("max")? as usize,
        },
        24 => C::Refused(d.string("why")?),
        33 => C::Busy(d.string("why")?),
        31 => C::OverQuota(d.string("why")?),
        32 => C::KeptForRoot(d.string("why")?),
        34 => C::SpaceNotKept(d.string("why")?),
        35 => C::RangeExpired(d.string("why")?),
        25 => C::DataLost {
            ino: d.u32("ino")?,
            offset: d.u64("offset")?,
            end: d.u64("end")?,
        },
        26 => C::Checksum {
            ino: d.u32("ino")?,
            offset: d.u64("offset")?,
            end: d.u64("end")?,
        },
        27 => C::Truncated {
            volume_bytes: d.u64("volume")?,
            device_bytes: d.u64("device")?,
        },
        28 => C::PastEnd {
            ino: d.u32("ino")?,
            offset: d.u64("offset")?,
            end: d.u64("end")?,
            device_bytes: d.u64("device")?,
        },
        29 => C::TargetTooLong {
            len: d.u64("len")? as usize,
            max: d.u64("max")? as usize,
        },
        30 => C::NamesFull {
            name_blocks: d.u64("name blocks")?,
            total_blocks: d.u64("total blocks")?,
            reserve_blocks: d.u64("reserve blocks")?,
        },
        v => return Err(Malformed(format!("engine error kind {v}"))),
    })
}
