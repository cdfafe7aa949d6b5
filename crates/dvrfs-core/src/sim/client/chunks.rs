//! Recordings cut into chunks, for runs with retention ([`SimConfig::retention`]):
//! recording `s` writes the stream directory `/live/sNNNN/`, one file per
//! [`SimRetention::chunk_ns`], each named by the UTC its first byte was recorded
//! at, as `record --chunk` names them (`retention::chunk_name`).
//!
//! Request `k` of a recording holds what was recorded in `(t0 + kP, t0 + (k+1)P]`,
//! so a chunk that starts at request `k` starts at UTC `epoch + t0 + kP`
//! (`SimRetention::utc_epoch_ns`), and a
//! chunk holds `per_chunk` requests (its length over the period, rounded up). The
//! next chunk's file is created (a best-effort create of the recording's own, no
//! deadline) when the current one is half written, so that it exists when the
//! recording reaches it; should it not yet (a create stuck behind a long queue),
//! the recording goes on in the current chunk and moves at its next request after
//! the create completes. A recording never waits for a create. A create that fails
//! (no inode left) stops the recording, with its cause, as a failed write would.
//!
//! Playbacks hold their file open for the whole run (`Op::OpenFile`): a reader pins
//! the chunk it plays, and retention never deletes an open chunk.

use super::{Client, Host, Purpose};
use crate::chain::CHAIN_NAME;
use crate::engine::{Op, Output};
use crate::error::{Error, Result};
use crate::meta::Ino;
use crate::retention::chunk_name;

/// A chunked recording's position (see the module docs).
#[derive(Clone, Copy, Debug)]
pub(in crate::sim) struct ChunkRoll {
    dir: Ino,
    per_chunk: u64,
    /// The first request of the chunk being written.
    first_k: u64,
    /// The next chunk once its create completed: its file and the request it was
    /// named for.
    next: Option<(Ino, u64)>,
    creating: bool,
    /// Chunks this recording has started, its first included.
    pub(in crate::sim) chunks: u64,
}

impl Client {
    /// The UTC at which request `k` of recording `s` starts being recorded.
    fn request_utc(&self, s: u32, k: u64) -> i64 {
        let st = &self.streams[s as usize];
        let epoch = self.cfg.retention.map_or(0, |r| r.utc_epoch_ns);
        epoch + (st.t0_ns + k * st.period_ns) as i64
    }

    /// Makes recording `s` a chunked one in `/live/sNNNN/` (created if the fill has
    /// not), and creates its first chunk, before the run.
    pub(super) fn start_chunked(&mut self, host: &mut impl Host, s: u32, live: Ino) -> Result<()> {
        let chunk_ns = self.cfg.retention.expect("a run with retention").chunk_ns;
        let name = format!("s{s:04}");
        let dir = match host.lookup(live, name.clone().into_bytes())? {
            Some(d) => d,
            None => {
                let d = host.namespace(Op::Mkdir {
                    parent: live,
                    name: name.into_bytes(),
                    perm: 0o755,
                    uid: 0,
                    gid: 0,
                })?;
                host.namespace(Op::Create {
                    parent: d,
                    name: CHAIN_NAME.as_bytes().to_vec(),
                    perm: 0o644,
                    uid: 0,
                    gid: 0,
                })?;
                d
            }
        };
        let period = self.streams[s as usize].period_ns.max(1);
        let first = host.namespace(Op::Create {
            parent: dir,
            name: chunk_name(self.request_utc(s, 0), "ts").into_bytes(),
            perm: 0o644,
            uid: 0,
            gid: 0,
        })?;
        let st = &mut self.streams[s as usize];
        st.ino = first;
        st.chunk = Some(ChunkRoll {
            dir,
            per_chunk: chunk_ns.div_ceil(period).max(1),
            first_k: 0,
            next: None,
            creating: false,
            chunks: 1,
        });
        Ok(())
    }

    /// Where request `k` of recording `s` goes: its file and offset. Moves to the
    /// next chunk at its boundary (once it exists), and starts the next chunk's
    /// create half way through the current one.
    pub(super) fn write_target(
        &mut self,
        host: &mut impl Host,
        s: u32,
        k: u64,
        now: u64,
    ) -> Result<(Ino, u64)> {
        let req = self.cfg.request_bytes;
        let Some(mut c) = self.streams[s as usize].chunk else {
            return Ok((self.streams[s as usize].ino, k * req));
        };
        if k >= c.first_k + c.per_chunk {
            if let Some((ino, _)) = c.next.take() {
                c.first_k = k;
                c.chunks += 1;
                self.streams[s as usize].ino = ino;
            }
        }
        if k >= c.first_k + c.per_chunk / 2 && c.next.is_none() && !c.creating {
            let named_k = c.first_k + c.per_chunk;
            let op = Op::Create {
                parent: c.dir,
                name: chunk_name(self.request_utc(s, named_k), "ts").into_bytes(),
                perm: 0o644,
                uid: 0,
                gid: 0,
            };
            self.submit(host, op, None, s, Purpose::ChunkCreate { s, named_k }, now)?;
            c.creating = true;
        }
        self.streams[s as usize].chunk = Some(c);
        Ok((self.streams[s as usize].ino, (k - c.first_k) * req))
    }

    /// The create of recording `s`'s next chunk completed.
    pub(super) fn chunk_created(
        &mut self,
        host: &mut impl Host,
        s: u32,
        named_k: u64,
        result: Result<Output>,
    ) {
        let Some(c) = self.streams[s as usize].chunk.as_mut() else {
            return;
        };
        c.creating = false;
        match result {
            Ok(Output::Ino(ino)) => c.next = Some((ino, named_k)),
            Ok(_) => unreachable!("a create completes with the new inode"),
            Err(e) => self.stop_stream(host, s, matches!(e, Error::NoSpace { .. })),
        }
    }

    /// Chunks the recordings have started, all together (0 without retention).
    pub fn chunks_started(&self) -> u64 {
        self.streams
            .iter()
            .filter_map(|s| s.chunk.map(|c| c.chunks))
            .sum()
    }
}
