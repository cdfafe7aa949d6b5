//! The daemon's protocol: a hello, then requests and replies, each one frame
//! (`wire`). Version [`VERSION`].
//!
//! ```text
//!   hello    client -> daemon   MAGIC(8) version:u32
//!            daemon -> client   MAGIC(8) version:u32 ok:u8 message:str
//!   request  client -> daemon   id:u64 kind:u8 payload         (Request)
//!   reply    daemon -> client   id:u64 ok:u8 payload           (Reply, or a RemoteError)
//! ```
//!
//! Requests carry an id chosen by the client, and replies come back with it in any
//! order: many threads of a client share one connection, and a request that waits
//! (`Check` with `wait`, `Poll`) holds up no other. The daemon refuses a hello of
//! another version with a message saying which versions meet, and closes.
//!
//! Adding a request: a variant of [`Request`] with the next free kind number in
//! `Request::encode`/`decode` (never reuse a number), a reply shape in [`Reply`] if no
//! existing one fits, its handling in `server::Conn::answer`, and a method on
//! `client::Client`. A new request kind is compatible with old clients (they never
//! send it); changing what an existing kind carries needs [`VERSION`] raised.

use dvrfs_core::engine::{HeadroomAsk, StreamDir, StreamId, StreamInfo, StreamStats};
use dvrfs_core::format::dir::Kind;
use dvrfs_core::meta::Ino;
use dvrfs_core::retention::Covered;
use dvrfs_core::{IoBuf, Op, Output, Stat};
use dvrfs_runtime::RuntimeError;

use crate::wire::{Dec, DecResult, Enc, Malformed};

mod error;
mod events;
mod keyframes;
mod op;
mod value;

use error::{decode_error, encode_error};
pub use events::EventLog;
pub use keyframes::{seek_chunks_time, Keyframes};
use op::{decode_op, encode_op};
use value::{
    decode_dir, decode_info, decode_stat, decode_stats, encode_info, encode_stat, encode_stats,
    kind,
};

/// The first bytes of each side's hello.
pub const MAGIC: [u8; 8] = *b"DVRFSRPC";
/// The protocol version both sides must speak.
pub const VERSION: u32 = 1;
/// The largest read or write one request moves (the C API's largest aio request).
pub const MAX_DATA_BYTES: u64 = 1 << 30;

/// What a client asks the daemon.
#[derive(Debug)]
pub enum Request {
    /// `Runtime::start`; the deadline is an absolute `CLOCK_MONOTONIC` time (ns), the
    /// clock every process of the machine shares.
    Start {
        op: Op,
        deadline_mono_ns: Option<u64>,
    },
    Check {
        ticket: u64,
        wait: bool,
    },
    Cancel {
        ticket: u64,
    },
    Poll {
        tickets: Vec<u64>,
        timeout_ns: Option<u64>,
    },
    /// The inode of an absolute path, with search permission on every directory.
    Resolve {
        path: String,
    },
    /// The parent directory and last name of a path.
    ResolveParent {
        path: String,
    },
    Lookup {
        parent: Ino,
        name: Vec<u8>,
    },
    /// `stat`; the size of a file being recorded is what its recorder wrote.
    Stat {
        ino: Ino,
    },
    Readdir {
        ino: Ino,
    },
    Readlink {
        ino: Ino,
    },
    /// A file's byte ranges lost to metadata damage (`get --salvage`).
    LostRanges {
        ino: Ino,
    },
    /// Block size and free space.
    Figures,
    /// A stream's reservation and figures so far.
    StreamState {
        stream: StreamId,
    },
    /// What stream admission checks against, described.
    Admission,
    /// The engine's status for the operator (`dvrfs status`), as JSON
    /// (`dvrfs_core::engine::Status`), its admission headroom counted for `ask`.
    Status {
        ask: HeadroomAsk,
    },
    /// The volume's event log (`dvrfs events`), as [`EventLog`] in a `Bytes` reply.
    Events,
    /// A file's frame index (`play --from`), as [`Keyframes`] in a `Bytes` reply.
    Keyframes {
        ino: Ino,
    },
    /// The volume's UUID (an export manifest names the volume a clip came from), in a
    /// `Bytes` reply of 16 bytes.
    VolumeUuid,
}

/// What the daemon answers, by shape.
#[derive(Debug)]
pub enum Reply {
    Unit,
    Ticket(u64),
    /// A `Check`: the finished operation, if it has finished.
    Done(Option<Done>),
    /// A `Poll`: the indices of the finished tickets.
    Ready(Vec<u64>),
    Ino(Ino),
    Parent(Ino, Vec<u8>),
    Stat(Stat),
    Entries(Vec<(Vec<u8>, Ino, Kind)>),
    Bytes(Vec<u8>),
    Ranges(Vec<(u64, u64)>),
    Figures(Figures),
    Stream(Option<(StreamInfo, StreamStats)>),
    Text(Option<String>),
    /// The daemon's form of a finished read: the engine's buffer, whose first `bytes`
    /// are sent as they are (`encode_reply_parts`). It arrives as
    /// `Done(Some(Done { output: WireOutput::Read(..), .. }))`.
    ReadDone {
        late: bool,
        submit_ns: u64,
        done_ns: u64,
        buf: IoBuf,
        bytes: usize,
    },
}

/// A read's bytes as they arrived: a range of the reply's frame (not copied out of
/// it).
#[derive(Debug)]
pub struct ReadBytes {
    frame: Vec<u8>,
    at: usize,
    len: usize,
}

impl ReadBytes {
    pub fn from_vec(v: Vec<u8>) -> ReadBytes {
        let len = v.len();
        ReadBytes {
            frame: v,
            at: 0,
            len,
        }
    }

    pub fn as_slice(&self) -> &[u8] {
        &self.frame[self.at..self.at + self.len]
    }
}

/// A finished operation as it travels: a read's bytes instead of its buffer.
#[derive(Debug)]
pub struct Done {
    pub output: WireOutput,
    pub late: bool,
    pub submit_ns: u64,
    pub done_ns: u64,
}

#[derive(Debug)]
pub enum WireOutput {
    Read(ReadBytes),
    Write { bytes: u64 },
    Ino(Ino),
    Stream(StreamInfo),
    StreamClosed(StreamStats),
    Covered(Covered),
    Done,
}

impl WireOutput {
    /// The daemon's side: what an engine output sends back.
    pub fn of(o: &Output) -> WireOutput {
        match o {
            Output::Read { buf, bytes } => WireOutput::Read(ReadBytes::from_vec(
                buf.bytes()
                    .map_or(vec![0; *bytes], |b| b[..*bytes].to_vec()),
            )),
            Output::Write { data } => WireOutput::Write {
                bytes: data.len() as u64,
            },
            Output::Ino(i) => WireOutput::Ino(*i),
            Output::Stream(i) => WireOutput::Stream(i.clone()),
            Output::StreamClosed(s) => WireOutput::StreamClosed(s.clone()),
            Output::Covered(c) => WireOutput::Covered(*c),
            Output::Done => WireOutput::Done,
        }
    }
}

/// Whole-volume figures a client needs before it writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Figures {
    pub data_block_bytes: u64,
    pub free_bytes: u64,
}

// ---- the hello ----

pub fn hello() -> Vec<u8> {
    let mut e = Enc::default();
    e.buf.extend_from_slice(&MAGIC);
    e.u32(VERSION);
    e.buf
}

/// The daemon's reading of a client's hello: its version, or why it is no hello.
pub fn read_hello(body: &[u8]) -> Result<u32, String> {
    if body.len() < 12 || body[..8] != MAGIC {
        return Err("this is not a dvrfs client (wrong greeting)".into());
    }
    Dec::new(&body[8..])
        .u32("version")
        .map_err(|e| e.to_string())
}

pub fn hello_reply(ok: bool, message: &str) -> Vec<u8> {
    let mut e = Enc::default();
    e.buf.extend_from_slice(&MAGIC);
    e.u32(VERSION).bool(ok).str(message);
    e.buf
}

/// The client's reading of the daemon's answer: `Ok(())`, or the daemon's refusal
/// (or why the answer is not one).
pub fn read_hello_reply(body: &[u8]) -> Result<(), String> {
    if body.len() < 12 || body[..8] != MAGIC {
        return Err("the socket's owner is not a dvrfs daemon (wrong greeting)".into());
    }
    let mut d = Dec::new(&body[8..]);
    let parse = |d: &mut Dec| -> DecResult<(u32, bool, String)> {
        Ok((d.u32("version")?, d.bool("ok")?, d.string("message")?))
    };
    let (version, ok, message) = parse(&mut d).map_err(|e| e.to_string())?;
    match (ok, version == VERSION) {
        (true, true) => Ok(()),
        (false, _) => Err(message),
        (true, false) => Err(format!(
            "the daemon speaks protocol version {version}, this program version {VERSION}"
        )),
    }
}

// ---- requests ----

impl Request {
    pub fn encode(&self, id: u64) -> Vec<u8> {
        let mut e = Enc::default();
        e.u64(id);
        match self {
            Request::Start {
                op,
                deadline_mono_ns,
            } => {
                e.u8(1).opt_u64(*deadline_mono_ns);
                encode_op(&mut e, op);
            }
            Request::Check { ticket, wait } => {
                e.u8(2).u64(*ticket).bool(*wait);
            }
            Request::Cancel { ticket } => {
                e.u8(3).u64(*ticket);
            }
            Request::Poll {
                tickets,
                timeout_ns,
            } => {
                e.u8(4).opt_u64(*timeout_ns).u64(tickets.len() as u64);
                for t in tickets {
                    e.u64(*t);
                }
            }
            Request::Resolve { path } => {
                e.u8(5).str(path);
            }
            Request::ResolveParent { path } => {
                e.u8(6).str(path);
            }
            Request::Lookup { parent, name } => {
                e.u8(7).u32(*parent).bytes(name);
            }
            Request::Stat { ino } => {
                e.u8(8).u32(*ino);
            }
            Request::Readdir { ino } => {
                e.u8(9).u32(*ino);
            }
            Request::Readlink { ino } => {
                e.u8(10).u32(*ino);
            }
            Request::LostRanges { ino } => {
                e.u8(11).u32(*ino);
            }
            Request::Figures => {
                e.u8(12);
            }
            Request::StreamState { stream } => {
                e.u8(13).u32(*stream);
            }
            Request::Admission => {
                e.u8(14);
            }
            // Playbacks are what kind 15 counted (whole requests), so a daemon from
            // before kind 17 answers them; recordings need 17.
            Request::Status { ask } if ask.dir == StreamDir::Read && ask.durable_ns.is_none() => {
                e.u8(15)
                    .f64(ask.rate_bps)
                    .u64(ask.request_bytes)
                    .opt_u64(ask.buffer_bytes);
            }
            Request::Status { ask } => {
                e.u8(17)
                    .f64(ask.rate_bps)
                    .u64(ask.request_bytes)
                    .opt_u64(ask.buffer_bytes)
                    .bool(ask.dir == StreamDir::Write)
                    .opt_u64(ask.durable_ns);
            }
            Request::Keyframes { ino } => {
                e.u8(18).u32(*ino);
            }
            Request::VolumeUuid => {
                e.u8(19);
            }
            Request::Events => {
                e.u8(16);
            }
        }
        e.buf
    }

    /// The request and its id. An unknown kind is an error naming it (a client
    /// newer than the daemon).
    pub fn decode(body: &[u8]) -> Result<(u64, Request), (Option<u64>, Malformed)> {
        let mut d = Dec::new(body);
        let id = d.u64("request id").map_err(|e| (None, e))?;
        let req = (|| -> DecResult<Request> {
            let r = match d.u8("request kind")? {
                1 => {
                    let deadline_mono_ns = d.opt_u64("deadline")?;
                    Request::Start {
                        op: decode_op(&mut d)?,
                        deadline_mono_ns,
                    }
                }
                2 => Request::Check {
                    ticket: d.u64("ticket")?,
                    wait: d.bool("wait")?,
                },
                3 => Request::Cancel {
                    ticket: d.u64("ticket")?,
                },
                4 => {
                    let timeout_ns = d.opt_u64("timeout")?;
                    let n = d.count("tickets", 8)?;
                    let tickets = (0..n).map(|_| d.u64("ticket")).collect::<DecResult<_>>()?;
                    Request::Poll {
                        tickets,
                        timeout_ns,
                    }
                }
                5 => Request::Resolve {
                    path: d.string("path")?,
                },
                6 => Request::ResolveParent {
                    path: d.string("path")?,
                },
                7 => Request::Lookup {
                    parent: d.u32("parent")?,
                    name: d.bytes("name")?.to_vec(),
                },
                8 => Request::Stat { ino: d.u32("ino")? },
                9 => Request::Readdir { ino: d.u32("ino")? },
                10 => Request::Readlink { ino: d.u32("ino")? },
                11 => Request::LostRanges { ino: d.u32("ino")? },
                12 => Request::Figures,
                13 => Request::StreamState {
                    stream: d.u32("stream")?,
                },
                14 => Request::Admission,
                // A client from before kind 17: its headroom counted whole
                // requests, as for playbacks.
                15 => Request::Status {
                    ask: HeadroomAsk {
                        rate_bps: d.f64("rate")?,
                        request_bytes: d.u64("request")?,
                        buffer_bytes: d.opt_u64("buffer")?,
                        dir: StreamDir::Read,
                        durable_ns: None,
                    },
                },
                16 => Request::Events,
                18 => Request::Keyframes { ino: d.u32("ino")? },
                19 => Request::VolumeUuid,
                17 => Request::Status {
                    ask: HeadroomAsk {
                        rate_bps: d.f64("rate")?,
                        request_bytes: d.u64("request")?,
                        buffer_bytes: d.opt_u64("buffer")?,
                        dir: decode_dir(&mut d)?,
                        durable_ns: d.opt_u64("durable")?,
                    },
                },
                k => {
                    return Err(Malformed(format!(
                        "request kind {k} is unknown to this daemon (a newer client: use the dvrfs of the daemon's version)"
                    )))
                }
            };
            d.end("request")?;
            Ok(r)
        })()
        .map_err(|e| (Some(id), e))?;
        Ok((id, req))
    }
}

// ---- replies ----

/// A reply (or the failure it carries) as one body.
pub fn encode_reply(id: u64, r: &Result<Reply, RuntimeError>) -> Vec<u8> {
    let (mut head, tail) = encode_reply_parts(id, r);
    head.extend_from_slice(tail);
    head
}

/// A reply as the head of its body and a tail to send after it: a finished read's
/// bytes, straight from the engine's buffer (empty for every other reply).
pub fn encode_reply_parts(id: u64, r: &Result<Reply, RuntimeError>) -> (Vec<u8>, &[u8]) {
    let mut e = Enc::default();
    e.u64(id);
    match r {
        Ok(Reply::ReadDone {
            late,
            submit_ns,
            done_ns,
            buf,
            bytes,
        }) => {
            let data = buf.bytes().map_or(&[][..], |b| &b[..*bytes]);
            assert_eq!(data.len(), *bytes, "a read's buffer is real memory");
            // As `encode_ok` writes a `Done` holding a read, up to its length.
            e.u8(1)
                .u8(3)
                .u8(1)
                .bool(*late)
                .u64(*submit_ns)
                .u64(*done_ns)
                .u8(1)
                .u64(*bytes as u64);
            return (e.buf, data);
        }
        Ok(reply) => {
            e.u8(1);
            encode_ok(&mut e, reply);
        }
        Err(err) => {
            e.u8(0);
            encode_error(&mut e, err);
        }
    }
    (e.buf, &[])
}

/// Decodes a reply; a read's bytes stay in `body`, which the reply keeps.
pub fn decode_reply(body: Vec<u8>) -> DecResult<(u64, Result<Reply, RuntimeError>)> {
    let (id, mut r) = {
        let mut d = Dec::new(&body);
        let id = d.u64("reply id")?;
        let r = match d.bool("reply status")? {
            true => Ok(decode_ok(&mut d)?),
            false => Err(decode_error(&mut d)?),
        };
        d.end("reply")?;
        (id, r)
    };
    if let Ok(Reply::Done(Some(Done {
        output: WireOutput::Read(b),
        ..
    }))) = &mut r
    {
        b.frame = body;
    }
    Ok((id, r))
}

fn encode_ok(e: &mut Enc, r: &Reply) {
    match r {
        Reply::Unit => {
            e.u8(1);
        }
        Reply::Ticket(t) => {
            e.u8(2).u64(*t);
        }
        Reply::Done(None) => {
            e.u8(3).u8(0);
        }
        Reply::Done(Some(done)) => {
            e.u8(3)
                .u8(1)
                .bool(done.late)
                .u64(done.submit_ns)
                .u64(done.done_ns);
            match &done.output {
                WireOutput::Read(b) => e.u8(1).bytes(b.as_slice()),
                WireOutput::Write { bytes } => e.u8(2).u64(*bytes),
                WireOutput::Ino(i) => e.u8(3).u32(*i),
                WireOutput::Stream(i) => {
                    e.u8(4);
                    encode_info(e, i);
                    e
                }
                WireOutput::StreamClosed(s) => {
                    e.u8(5);
                    encode_stats(e, s);
                    e
                }
                WireOutput::Done => e.u8(6),
                WireOutput::Covered(c) => e
                    .u8(7)
                    .u64(c.chunks)
                    .u64(c.bytes)
                    .u64(c.first_utc_ns as u64)
                    .u64(c.last_utc_ns as u64)
                    .bool(c.more),
            };
        }
        Reply::Ready(v) => {
            e.u8(4).u64(v.len() as u64);
            for i in v {
                e.u64(*i);
            }
        }
        Reply::Ino(i) => {
            e.u8(5).u32(*i);
        }
        Reply::Parent(p, n) => {
            e.u8(6).u32(*p).bytes(n);
        }
        Reply::Stat(s) => {
            e.u8(7);
            encode_stat(e, s);
        }
        Reply::Entries(v) => {
            e.u8(8).u64(v.len() as u64);
            for (name, ino, k) in v {
                e.bytes(name).u32(*ino).u8(*k as u8);
            }
        }
        Reply::Bytes(b) => {
            e.u8(9).bytes(b);
        }
        Reply::Ranges(v) => {
            e.u8(10).u64(v.len() as u64);
            for (a, b) in v {
                e.u64(*a).u64(*b);
            }
        }
        Reply::Figures(f) => {
            e.u8(11).u64(f.data_block_bytes).u64(f.free_bytes);
        }
        Reply::Stream(s) => {
            e.u8(12);
            match s {
                None => {
                    e.u8(0);
                }
                Some((i, st)) => {
                    e.u8(1);
                    encode_info(e, i);
                    encode_stats(e, st);
                }
            }
        }
        Reply::Text(t) => {
            e.u8(13);
            match t {
                None => e.u8(0),
                Some(s) => e.u8(1).str(s),
            };
        }
        Reply::ReadDone {
            late,
            submit_ns,
            done_ns,
            buf,
            bytes,
        } => {
            let data = buf.bytes().map_or(&[][..], |b| &b[..*bytes]);
            e.u8(3)
                .u8(1)
                .bool(*late)
                .u64(*submit_ns)
                .u64(*done_ns)
                .u8(1)
                .bytes(data);
        }
    }
}

fn decode_ok(d: &mut Dec) -> DecResult<Reply> {
    Ok(match d.u8("reply shape")? {
        1 => Reply::Unit,
        2 => Reply::Ticket(d.u64("ticket")?),
        3 => Reply::Done(match d.bool("done")? {
            false => None,
            true => {
                let (late, submit_ns, done_ns) =
                    (d.bool("late")?, d.u64("submit")?, d.u64("done")?);
                let output = match d.u8("output")? {
                    1 => {
                        // The bytes stay where they are; `decode_reply` hands the
                        // frame over.
                        let len = d.bytes("data")?.len();
                        WireOutput::Read(ReadBytes {
                            frame: Vec::new(),
                            at: d.pos() - len,
                            len,
                        })
                    }
                    2 => WireOutput::Write {
                        bytes: d.u64("written")?,
                    },
                    3 => WireOutput::Ino(d.u32("ino")?),
                    4 => WireOutput::Stream(decode_info(d)?),
                    5 => WireOutput::StreamClosed(decode_stats(d)?),
                    6 => WireOutput::Done,
                    7 => WireOutput::Covered(Covered {
                        chunks: d.u64("chunks")?,
                        bytes: d.u64("bytes")?,
                        first_utc_ns: d.u64("first")? as i64,
                        last_utc_ns: d.u64("last")? as i64,
                        more: d.bool("more")?,
                    }),
                    v => return Err(Malformed(format!("output kind {v}"))),
                };
                Some(Done {
                    output,
                    late,
                    submit_ns,
                    done_ns,
                })
            }
        }),
        4 => {
            let n = d.count("ready", 8)?;
            Reply::Ready((0..n).map(|_| d.u64("index")).collect::<DecResult<_>>()?)
        }
        5 => Reply::Ino(d.u32("ino")?),
        6 => Reply::Parent(d.u32("parent")?, d.bytes("name")?.to_vec()),
        7 => Reply::Stat(decode_stat(d)?),
        8 => {
            let n = d.count("entries", 13)?;
            let mut v = Vec::with_capacity(n);
            for _ in 0..n {
                v.push((
                    d.bytes("name")?.to_vec(),
                    d.u32("ino")?,
                    kind(d.u8("kind")?)?,
                ));
            }
            Reply::Entries(v)
        }
        9 => Reply::Bytes(d.bytes("bytes")?.to_vec()),
        10 => {
            let n = d.count("ranges", 16)?;
            let mut v = Vec::with_capacity(n);
            for _ in 0..n {
                v.push((d.u64("from")?, d.u64("to")?));
            }
            Reply::Ranges(v)
        }
        11 => Reply::Figures(Figures {
            data_block_bytes: d.u64("block size")?,
            free_bytes: d.u64("free")?,
        }),
        12 => Reply::Stream(match d.bool("stream")? {
            false => None,
            true => Some((decode_info(d)?, decode_stats(d)?)),
        }),
        13 => Reply::Text(match d.bool("text")? {
            false => None,
            true => Some(d.string("text")?),
        }),
        v => return Err(Malformed(format!("reply shape {v}"))),
    })
}

/// The runtime's errors keep their variant across the socket, so a client maps them
/// to the same errno and message as a local open would.
#[cfg(test)]
mod tests {
    use super::*;
    use dvrfs_core::engine::{StreamDir, StreamSpec};
    use dvrfs_core::Error as CoreError;
    use std::io;

    fn round(r: Result<Reply, RuntimeError>) -> Result<Reply, RuntimeError> {
        let (id, back) = decode_reply(encode_reply(42, &r)).expect("decodes");
        assert_eq!(id, 42);
        back
    }

    #[test]
    fn engine_errors_keep_their_errno_and_message() {
        for e in [
            CoreError::DeadlineMissed { deadline_ns: 5 },
            CoreError::NotFound("/a/b".into()),
            CoreError::Refused("too much".into()),
            CoreError::OverQuota("uid 7 already reserves".into()),
            CoreError::KeptForRoot("5% is kept for root".into()),
            CoreError::SpaceNotKept("4 GiB promised".into()),
            CoreError::RangeExpired("chunk a.ts deleted".into()),
            CoreError::NoSpace {
                need_bytes: 1,
                free_bytes: 0,
            },
            CoreError::Cancelled,
            CoreError::QueueFull { max: 9 },
            CoreError::Busy("the disk queue is full".into()),
            CoreError::Checksum {
                ino: 3,
                offset: 0,
                end: 512,
            },
            CoreError::io("reading", io::Error::from_raw_os_error(5)),
        ] {
            let (errno, msg) = (e.errno(), e.to_string());
            match round(Err(RuntimeError::Engine(e))) {
                Err(RuntimeError::Engine(back)) => {
                    assert_eq!(back.errno(), errno);
                    assert_eq!(back.to_string(), msg);
                }
                other => panic!("{other:?}"),
            }
        }
    }

    #[test]
    fn every_request_round_trips_and_a_cut_request_is_refused() {
        let reqs = vec![
            Request::Start {
                op: Op::Read {
                    ino: 7,
                    offset: 4096,
                    buf: IoBuf::zeroed(8192),
                },
                deadline_mono_ns: Some(123),
            },
            Request::Start {
                op: Op::StreamOpen {
                    ino: 7,
                    spec: StreamSpec {
                        idle: false,
                        dir: StreamDir::Write,
                        rate_bps: 4e6,
                        request_bytes: 512 << 10,
                        buffer_bytes: None,
                        reserve_bytes: 1 << 20,
                        start_bytes: 0,
                        durable_ns: Some(2_000_000_000),
                    },
                },
                deadline_mono_ns: None,
            },
            Request::Start {
                op: Op::Protect {
                    dir: 9,
                    from_utc_ns: 1_795_890_524_496_000_000,
                    to_utc_ns: -5,
                    protection: dvrfs_core::format::inode::Protection {
                        until_s: u32::MAX,
                        id: 77,
                    },
                    restate: true,
                },
                deadline_mono_ns: None,
            },
            Request::Start {
                op: Op::Unprotect { id: 3 },
                deadline_mono_ns: None,
            },
            Request::Start {
                op: Op::OpenFile {
                    ino: 5,
                    mode: dvrfs_core::OpenMode::Read,
                },
                deadline_mono_ns: None,
            },
            Request::Start {
                op: Op::OpenFile {
                    ino: 5,
                    mode: dvrfs_core::OpenMode::Write,
                },
                deadline_mono_ns: None,
            },
            Request::Start {
                op: Op::CloseFile {
                    ino: 5,
                    mode: dvrfs_core::OpenMode::Read,
                },
                deadline_mono_ns: None,
            },
            Request::Start {
                op: Op::CloseFile {
                    ino: 5,
                    mode: dvrfs_core::OpenMode::Write,
                },
                deadline_mono_ns: None,
            },
            Request::Poll {
                tickets: vec![1, 2, 3],
                timeout_ns: Some(5),
            },
            Request::Resolve {
                path: "/cam/a.ts".into(),
            },
            Request::Lookup {
                parent: 1,
                name: b"x".to_vec(),
            },
            Request::Figures,
            Request::Events,
            Request::VolumeUuid,
            Request::Status {
                ask: HeadroomAsk {
                    rate_bps: 6e6,
                    request_bytes: 512 << 10,
                    buffer_bytes: None,
                    dir: StreamDir::Read,
                    durable_ns: None,
                },
            },
            Request::Status {
                ask: HeadroomAsk {
                    rate_bps: 250e3,
                    request_bytes: 512 << 10,
                    buffer_bytes: Some(2 << 20),
                    dir: StreamDir::Write,
                    durable_ns: Some(10_000_000_000),
                },
            },
        ];
        for r in reqs {
            let body = r.encode(9);
            let (id, back) = Request::decode(&body).expect("decodes");
            assert_eq!(id, 9);
            assert_eq!(format!("{back:?}"), format!("{r:?}"));
            for cut in 9..body.len() {
                assert!(Request::decode(&body[..cut]).is_err(), "{r:?} cut at {cut}");
            }
        }
    }

    #[test]
    fn a_finished_read_sent_from_its_buffer_arrives_as_its_bytes() {
        let mut buf = IoBuf::zeroed(8192);
        buf.bytes_mut().unwrap()[..5].copy_from_slice(b"hello");
        let r = Ok(Reply::ReadDone {
            late: true,
            submit_ns: 1,
            done_ns: 2,
            buf,
            bytes: 5,
        });
        let (head, tail) = encode_reply_parts(7, &r);
        assert_eq!(
            tail, b"hello",
            "the bytes go out from the buffer, after the head"
        );
        let whole = [head, tail.to_vec()].concat();
        assert_eq!(
            whole,
            encode_reply(7, &r),
            "one encoding, whichever way it is sent"
        );
        match decode_reply(whole) {
            Ok((7, Ok(Reply::Done(Some(d))))) => {
                assert!(d.late);
                match d.output {
                    WireOutput::Read(b) => assert_eq!(b.as_slice(), b"hello"),
                    o => panic!("{o:?}"),
                }
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn what_a_protection_covered_round_trips() {
        let c = Covered {
            chunks: 3,
            bytes: 12 << 20,
            first_utc_ns: 1_795_890_524_496_000_000,
            last_utc_ns: -1,
            more: true,
        };
        let r = Ok(Reply::Done(Some(Done {
            output: WireOutput::Covered(c),
            late: false,
            submit_ns: 1,
            done_ns: 2,
        })));
        match decode_reply(encode_reply(4, &r)) {
            Ok((4, Ok(Reply::Done(Some(d))))) => match d.output {
                WireOutput::Covered(back) => assert_eq!(back, c),
                o => panic!("{o:?}"),
            },
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_hello_of_another_version_is_refused_by_the_client() {
        let mut other = hello_reply(true, "");
        other[8..12].copy_from_slice(&(VERSION + 1).to_le_bytes());
        let e = read_hello_reply(&other).unwrap_err();
        assert!(e.contains("protocol version"), "{e}");
        assert!(read_hello_reply(&hello_reply(true, "")).is_ok());
        assert_eq!(read_hello(&hello()), Ok(VERSION));
        assert!(read_hello(b"GET / HTTP/1.1\r\n").is_err());
    }
}
