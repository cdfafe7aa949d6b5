//! The volume as retention sees it: its streams and their chunks, with the ages and
//! sizes the planner decides by (`plan.rs`).
//!
//! A **stream** is a directory with a retention policy of its own or above it
//! (`Volume::effective_retention`), or with an integrity chain (`.chain`: made by
//! `record --chunk`, or by hand through the mount); its **chunks** are its regular
//! files whose names do not start with `.`. Nothing else is ever a candidate for
//! deletion: a volume-wide `high` mark deletes chunks of streams, never a file that
//! is not in one. A chunk's **start** is the UTC of its first indexed keyframe, else
//! the one its name says (`chunk_name_utc`), else its modification time; its
//! **end** the UTC of its last indexed keyframe, else its modification time (when
//! its last byte was written), and never before its start. What deleting it frees
//! is the data blocks it holds; what a stream's max-size counts is its chunks'
//! lengths. Streams are listed in path order, chunks by start
//! (then name): every decision made from a snapshot is deterministic.

use std::collections::BTreeSet;

use crate::chain::CHAIN_NAME;
use crate::format::dir::Kind;
use crate::format::inode::{Protection, StreamRetention};
use crate::meta::Ino;
use crate::volume::Volume;

use super::name::chunk_name_utc;

/// One chunk of a stream.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChunkInfo {
    pub ino: Ino,
    pub name: Vec<u8>,
    /// What deleting it frees: its data blocks, in bytes.
    pub bytes: u64,
    /// Its length (what a stream's max-size counts: the recording's bytes, as a
    /// user sees them).
    pub size_bytes: u64,
    pub start_utc_ns: i64,
    pub end_utc_ns: i64,
    /// Open (a recording writing it, a reader, a handle through the mount): not
    /// deleted while it is.
    pub busy: bool,
    /// Open by playbacks only: their pins yield to a recording's need (rule 6;
    /// set by [`Snapshot::pins_yield`]).
    pub yields: bool,
    /// Inside a protected clip whose protection holds at the snapshot's time:
    /// never deleted automatically.
    pub protected: bool,
    /// Its protection as stored, held or expired (`dvrfs protect`).
    pub protection: Option<Protection>,
}

/// One stream directory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StreamInfo {
    pub dir: Ino,
    pub path: String,
    /// The policy that governs it and the directory that carries it.
    pub policy: Option<(Ino, StreamRetention)>,
    /// By start, then name.
    pub chunks: Vec<ChunkInfo>,
}

impl StreamInfo {
    /// The data blocks its chunks hold, in bytes.
    pub fn bytes(&self) -> u64 {
        self.chunks.iter().map(|c| c.bytes).sum()
    }
}

/// The streams of a volume and its use.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Snapshot {
    /// In path order.
    pub streams: Vec<StreamInfo>,
    /// The data region, in bytes.
    pub data_bytes: u64,
    /// Data bytes in use: written, and held for recordings not yet written.
    pub in_use_bytes: u64,
}

impl Snapshot {
    /// Reads `v`'s streams at UTC `now_ns` (a protection ending by then no longer
    /// holds); `busy` names the files the caller has open beyond the volume's
    /// handles (the engine's streams).
    pub fn of(v: &Volume, busy: &BTreeSet<Ino>, now_ns: i64) -> Snapshot {
        let sb = v.superblock();
        let bs = sb.data_block_bytes;
        let mut streams = Vec::new();
        let mut stack = vec![(v.root(), String::from("/"))];
        while let Some((dir, path)) = stack.pop() {
            let Ok(entries) = v.readdir(dir) else {
                continue;
            };
            let chained = entries
                .iter()
                .any(|(n, _, k)| n == CHAIN_NAME.as_bytes() && *k == Kind::File);
            let policy = v.effective_retention(dir);
            let mut chunks = Vec::new();
            for (name, ino, kind) in &entries {
                match kind {
                    Kind::Dir => {
                        let n = String::from_utf8_lossy(name);
                        let p = if path == "/" {
                            format!("/{n}")
                        } else {
                            format!("{path}/{n}")
                        };
                        stack.push((*ino, p));
                    }
                    Kind::File if !name.starts_with(b".") && (chained || policy.is_some()) => {
                        chunks.push(chunk(v, *ino, name, bs, busy, now_ns));
                    }
                    _ => {}
                }
            }
            if chunks.is_empty() {
                continue;
            }
            chunks.sort_by(|a, b| (a.start_utc_ns, &a.name).cmp(&(b.start_utc_ns, &b.name)));
            streams.push(StreamInfo {
                dir,
                path,
                policy,
                chunks,
            });
        }
        streams.sort_by(|a, b| a.path.cmp(&b.path));
        Snapshot {
            streams,
            data_bytes: sb.data_blocks * bs,
            in_use_bytes: v.used_data_bytes() + v.held_bytes(),
        }
    }
}

impl Snapshot {
    /// Marks the open chunks in `yielding` (held by playbacks only, the caller
    /// knows) as chunks whose pins yield to a recording's need.
    pub fn pins_yield(&mut self, yielding: &BTreeSet<Ino>) {
        for c in self.streams.iter_mut().flat_map(|s| &mut s.chunks) {
            c.yields = c.busy && yielding.contains(&c.ino);
        }
    }
}

fn chunk(
    v: &Volume,
    ino: Ino,
    name: &[u8],
    bs: u64,
    busy: &BTreeSet<Ino>,
    now_ns: i64,
) -> ChunkInfo {
    let st = v.stat(ino).ok();
    let mtime = st.as_ref().map_or(0, |s| s.mtime_ns);
    let index = v.frame_info(ino).ok();
    let first = index.as_ref().and_then(|i| i.first).map(|e| e.utc_ns);
    let last = index.as_ref().and_then(|i| i.last).map(|e| e.utc_ns);
    let start = first
        .or_else(|| std::str::from_utf8(name).ok().and_then(chunk_name_utc))
        .unwrap_or(mtime);
    ChunkInfo {
        ino,
        name: name.to_vec(),
        bytes: st.as_ref().map_or(0, |s| s.blocks * bs),
        size_bytes: st.as_ref().map_or(0, |s| s.size_bytes),
        start_utc_ns: start,
        end_utc_ns: last.unwrap_or(mtime).max(start),
        busy: v.open_count(ino) > 0 || busy.contains(&ino),
        yields: false,
        protected: v.protection(ino).is_some_and(|p| p.holds_at(now_ns)),
        protection: v.protection(ino),
    }
}
