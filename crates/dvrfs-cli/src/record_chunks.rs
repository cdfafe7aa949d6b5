//! `record --chunk`: a recording as a stream directory of chunks (issue 25).
//!
//! The recording's bytes go through a [`Chunker`] (`dvrfs_core::media::chunker`),
//! which cuts them at the first keyframe after each chunk's length. The first chunk
//! is created when the recording starts and the stream is opened on it; at each cut
//! the next chunk file is created and the stream rolls on to it (`Op::StreamRoll`:
//! the same reservation, no new admission, nothing dropped), and the chunk starts
//! with the head the cut carries (PAT and PMT, or the init segment), so that every
//! chunk plays on its own.
//!
//! **Names.** A chunk is named by its UTC start, to the millisecond, in the ISO 8601
//! basic form (`20261128T140312.250Z.ts`), so names sort in time order. The name of
//! the next chunk is never earlier than the last one's (plus 1 ms): a host clock
//! stepped back is reported on stderr and the names go on from the last, so chunks
//! never overlap by name. After the first, a chunk is named by the first chunk's
//! start plus the media time of the chunks before it, which is what their indexes
//! say (the engine times a chunk's frames on from the last chunk's), for a live
//! source and an import (fed faster than real time) alike; by the wall clock when
//! the media time has fallen more than a second behind it (the source stalled).
//! The extension is the input file's, else what the first bytes are
//! (`ts`, `mp4`, else `bin`).
//!
//! **Integrity.** Each chunk's SHA-256 is computed over the bytes handed to the
//! stream for it, head included, and sealed in the directory's chain (`chain.rs`)
//! when the chunk is finished: at the cut, or at the recording's end.
//!
//! **Space.** Each chunk ends in a partial data block and starts with a head, so a
//! chunked recording holds, on top of its bytes, a data block and a head's room per
//! chunk it will make ([`slack_bytes`]).

use dvrfs_core::media::{ChunkLimit, Chunker, Container, Indexer, Piece, TICKS_PER_SECOND};
use dvrfs_core::meta::Ino;
use dvrfs_core::{Error as CoreError, IoBuf, Op, Output};
use dvrfs_remote::Handle;
use jiff::Timestamp;

use sha2::{Digest, Sha256};

use crate::chain;
use crate::error::{CliError, CliResult};
use crate::timespec::rfc3339;

/// The chunk length when PATH is an existing directory and `--chunk` is not given:
/// a minute, what retention removes at a time (a DVR keeps days of them).
pub const DEFAULT_CHUNK: &str = "1m";
/// Room held per chunk for its head (a PAT and PMT are 376 bytes; an init segment a
/// few KiB).
const HEAD_ROOM_BYTES: u64 = 64 << 10;
/// How far the media time may fall behind the wall clock before chunks are named
/// by the wall clock.
const BEHIND_NS: i64 = 1_000_000_000;
/// Bytes read to decide the extension of the first chunk.
pub const SNIFF_BYTES: usize = 4 * 188;

/// `--chunk`: a duration (`10s`, `1m`) or a size (`64M`).
pub fn parse_limit(text: &str) -> CliResult<ChunkLimit> {
    if let Ok(ms) = crate::args::parse_duration_ms("--chunk", text) {
        if ms == 0 {
            return Err(bad_limit(text));
        }
        return Ok(ChunkLimit::Duration90k(ms as i64 * 90));
    }
    match crate::args::parse_size("--chunk", text) {
        Ok(b) if b >= 4096 => Ok(ChunkLimit::Bytes(b)),
        _ => Err(bad_limit(text)),
    }
}

fn bad_limit(text: &str) -> CliError {
    CliError::usage(
        format!("invalid --chunk {text:?}"),
        "give a duration (10s, 1m, 1h) or a size of at least 4K (64M): a chunk is cut at the first keyframe after it",
    )
}

/// What a recording of `bytes` at `rate_bytes`/s holds beyond its bytes when cut into
/// chunks of `limit`: a data block and a head's room per chunk.
pub fn slack_bytes(limit: ChunkLimit, bytes: u64, rate_bytes: f64, block_bytes: u64) -> u64 {
    let per_chunk = match limit {
        ChunkLimit::Bytes(b) => b,
        ChunkLimit::Duration90k(t) => ((rate_bytes * t as f64 / 90_000.0) as u64).max(1),
    };
    (bytes / per_chunk + 1) * (block_bytes + HEAD_ROOM_BYTES)
}

/// The extension of the chunks: the input file's, else what `first` (its first
/// bytes) is.
pub fn extension(input: &std::path::Path, first: &[u8]) -> String {
    if let Some(e) = input.extension().and_then(|e| e.to_str()) {
        if input.as_os_str() != "-" && !e.is_empty() {
            return e.to_ascii_lowercase();
        }
    }
    let mut ix = Indexer::new();
    ix.feed(first);
    if first.len() < SNIFF_BYTES {
        ix.finish();
    }
    match ix.container() {
        Container::Ts => "ts",
        Container::Mp4 => "mp4",
        _ => "bin",
    }
    .to_string()
}

/// A chunk's name: its UTC start in the ISO 8601 basic form, to the millisecond.
pub use dvrfs_core::retention::chunk_name;

fn now_utc_ns() -> i64 {
    Timestamp::now().as_nanosecond() as i64
}

/// A recording cut into chunks in directory `dir` (module docs).
pub struct Chunks {
    chunker: Chunker,
    dir: Ino,
    dir_path: String,
    ext: String,
    uid: u32,
    gid: u32,
    /// The last chunk's name time (ns) and path.
    last_ns: i64,
    /// The first chunk's name time, and the media time of the chunks cut since.
    first_ns: i64,
    media_ns: i64,
    pub last_path: String,
    /// Chunks made, the first included.
    pub made: u64,
    /// Bytes of heads written at the starts of chunks.
    pub head_bytes: u64,
    /// The chunk being written: its name, name time, bytes and their hash; the
    /// chain's last link.
    name: String,
    hash: Sha256,
    bytes: u64,
    chain_tip: [u8; 32],
}

impl Chunks {
    /// The stream directory.
    pub fn dir(&self) -> Ino {
        self.dir
    }

    /// The stream directory `path` (made if missing) and its first chunk: the
    /// chunking and the first chunk's inode.
    pub fn start(
        rt: &Handle,
        path: &str,
        limit: ChunkLimit,
        ext: String,
        (uid, gid): (u32, u32),
    ) -> CliResult<(Chunks, Ino)> {
        let dir = match rt.resolve(path) {
            Ok(ino) => {
                if rt.stat(ino)?.kind != dvrfs_core::format::dir::Kind::Dir {
                    return Err(CliError::new(format!(
                        "{path} exists and is not a directory: a chunked recording is a directory of chunks"
                    ))
                    .hint("give a new path or a stream directory, or record without --chunk into a new file"));
                }
                ino
            }
            Err(_) => {
                let (parent, name) = rt.resolve_parent(path)?;
                let mkdir = Op::Mkdir {
                    parent,
                    name,
                    perm: 0o755,
                    uid,
                    gid,
                };
                let Output::Ino(ino) = rt.run(mkdir, None, 0)? else {
                    unreachable!("a mkdir returns the new inode")
                };
                ino
            }
        };
        let mut c = Chunks {
            chunker: Chunker::new(limit),
            dir,
            dir_path: path.trim_end_matches('/').to_string(),
            ext,
            uid,
            gid,
            last_ns: i64::MIN,
            first_ns: i64::MIN,
            media_ns: 0,
            last_path: String::new(),
            made: 0,
            head_bytes: 0,
            name: String::new(),
            hash: Sha256::new(),
            bytes: 0,
            chain_tip: [0; 32],
        };
        c.chain_tip = chain::read(&mut chain::Via(rt), dir)?.map_or([0; 32], |(_, ch)| ch.tip());
        let first = c.create_next(rt)?;
        Ok((c, first))
    }

    /// The time now for naming: the first chunk's start plus the media time since,
    /// which is what the chunks' indexes say (module docs); the wall clock when that
    /// has fallen more than [`BEHIND_NS`] behind it (the source stalled).
    fn time_now(&self, extra_media_ns: i64) -> i64 {
        let now = now_utc_ns();
        if self.first_ns == i64::MIN {
            return now;
        }
        let media_at = self
            .first_ns
            .saturating_add(self.media_ns)
            .saturating_add(extra_media_ns);
        if now.saturating_sub(media_at) > BEHIND_NS {
            now
        } else {
            media_at
        }
    }

    /// Creates the next chunk, named by [`Chunks::time_now`]: its inode.
    fn create_next(&mut self, rt: &Handle) -> CliResult<Ino> {
        let now = now_utc_ns();
        let mut at = self.time_now(0);
        if self.first_ns == i64::MIN {
            self.first_ns = now;
        }
        if self.last_ns != i64::MIN && at <= self.last_ns {
            if now < self.last_ns {
                eprintln!(
                    "record: the host clock stepped back {:.3} s; the next chunk is named after the last one",
                    (self.last_ns - now) as f64 / 1e9
                );
            }
            at = self.last_ns + 1_000_000;
        }
        // A name taken (another recorder, the same millisecond) moves on by 1 ms.
        for _ in 0..1000 {
            let name = chunk_name(at, &self.ext);
            let create = Op::Create {
                parent: self.dir,
                name: name.clone().into_bytes(),
                perm: 0o644,
                uid: self.uid,
                gid: self.gid,
            };
            match rt.run(create, None, 0) {
                Ok(Output::Ino(ino)) => {
                    self.last_ns = at;
                    self.last_path = format!("{}/{name}", self.dir_path);
                    self.name = name;
                    self.made += 1;
                    return Ok(ino);
                }
                Ok(other) => unreachable!("a create returned {other:?}"),
                Err(dvrfs_runtime::RuntimeError::Engine(CoreError::Exists(_))) => {
                    at += 1_000_000;
                }
                Err(e) => return Err(e.into()),
            }
        }
        Err(CliError::new(format!(
            "no free chunk name in {} around {}",
            self.dir_path,
            chunk_name(now, &self.ext)
        )))
    }

    /// Records `bytes` (the input's next) into stream `stream`: into the chunk being
    /// written, rolling on to new chunks at the cuts.
    pub fn record(&mut self, rt: &Handle, stream: u32, bytes: &[u8]) -> CliResult<()> {
        let pieces = self.chunker.push(bytes);
        self.put(rt, stream, pieces)
    }

    /// The end of the recording: the bytes the chunker still holds; the last chunk
    /// sealed.
    pub fn finish(&mut self, rt: &Handle, stream: u32) -> CliResult<()> {
        let media_ns = ns_of_90k(self.chunker.chunk_90k());
        let pieces = self.chunker.finish();
        self.put(rt, stream, pieces)?;
        let end = self.time_now(media_ns).max(self.last_ns);
        self.seal(rt, end)
    }

    /// Seals the chunk being written in the directory's chain, as ending at `to_ns`.
    fn seal(&mut self, rt: &Handle, to_ns: i64) -> CliResult<()> {
        let sha: [u8; 32] = std::mem::take(&mut self.hash).finalize().into();
        let bytes = std::mem::take(&mut self.bytes);
        let seal = dvrfs_core::chain::Seal {
            name: self.name.clone(),
            bytes,
            sha256: sha,
            from: rfc3339(self.last_ns),
            to: rfc3339(to_ns),
        };
        self.chain_tip =
            dvrfs_core::chain::seal(&mut chain::Via(rt), self.dir, &self.chain_tip, seal)?;
        Ok(())
    }

    /// What goes into the chunk being written: counted and hashed, then written.
    fn write(&mut self, rt: &Handle, stream: u32, bytes: &[u8]) -> CliResult<()> {
        self.hash.update(bytes);
        self.bytes += bytes.len() as u64;
        write(rt, stream, bytes)
    }

    fn put(&mut self, rt: &Handle, stream: u32, pieces: Vec<Piece>) -> CliResult<()> {
        for p in pieces {
            match p {
                Piece::Bytes(b) => self.write(rt, stream, &b)?,
                Piece::Cut {
                    head, ended_90k, ..
                } => {
                    self.media_ns = self.media_ns.saturating_add(ns_of_90k(ended_90k));
                    // The finished chunk is sealed as ending where the next starts.
                    let to = self.time_now(0).max(self.last_ns);
                    self.seal(rt, to)?;
                    let ino = self.create_next(rt)?;
                    rt.run(Op::StreamRoll { stream, ino }, None, 0)?;
                    self.write(rt, stream, &head)?;
                    self.head_bytes += head.len() as u64;
                }
            }
        }
        Ok(())
    }
}

fn ns_of_90k(t: i64) -> i64 {
    t.saturating_mul(1_000_000_000) / TICKS_PER_SECOND
}

fn write(rt: &Handle, stream: u32, bytes: &[u8]) -> CliResult<()> {
    if bytes.is_empty() {
        return Ok(());
    }
    rt.run(
        Op::StreamWrite {
            stream,
            data: IoBuf::from_slice(bytes),
        },
        None,
        0,
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_sort_in_time_order_and_limits_parse() {
        let a = chunk_name(1_795_874_592_250_000_000, "ts");
        assert_eq!(a, "20261128T140312.250Z.ts");
        let b = chunk_name(1_795_874_592_250_000_000 + 999_000_000, "ts");
        assert!(a < b, "{a} {b}");
        assert_eq!(
            parse_limit("10s").unwrap(),
            ChunkLimit::Duration90k(900_000)
        );
        assert_eq!(parse_limit("64M").unwrap(), ChunkLimit::Bytes(64 << 20));
        assert!(parse_limit("0s").is_err());
        assert!(parse_limit("12").is_err());
        assert!(parse_limit("ten").is_err());
        // A minute of 4 Mbit/s in 1 MiB blocks: 60 chunks an hour, a block and a
        // head's room each.
        let hour = 500_000 * 3600;
        let s = slack_bytes(
            ChunkLimit::Duration90k(60 * 90_000),
            hour,
            500_000.0,
            1 << 20,
        );
        assert_eq!(s, 61 * ((1 << 20) + (64 << 10)));
    }
}
