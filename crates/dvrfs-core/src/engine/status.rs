//! The operator's view of a running engine (`dvrfs status`): every open stream with
//! its reservation and how it fares, the disk's load, what admission would still
//! take, and the space used, held and free.
//!
//! [`Engine::status`] is a snapshot taken between two engine steps; it costs a walk
//! over the open streams and one admission search per question, never a walk of the
//! namespace (paths are the driver's business: the runtime fills them in with one
//! directory query at a time, so a large tree never holds the dispatcher).

use serde::{Deserialize, Serialize};

use super::stream::{stream_ask, GatherMode, StreamDir, AUTO_SLACK_NS, MAX_STREAM_BUFFER_BYTES};
use super::Engine;
use crate::disk::{Admission, StreamLoad};
use crate::meta::Ino;

/// What `dvrfs status` asks admission: how many more streams like this one fit, and
/// the largest such stream that fits.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct HeadroomAsk {
    /// The rate of the streams counted, bits per second.
    pub rate_bps: f64,
    /// Bytes per disk request (a multiple of 4 KiB).
    pub request_bytes: u64,
    /// `None`: the buffer dvrfs would choose (as `record` and the mount do).
    pub buffer_bytes: Option<u64>,
    /// Recordings (`write`, planned with their durability interval) or playbacks
    /// (`read`). A status from before recordings were planned so says nothing: it
    /// counted whole requests, as for playbacks.
    #[serde(default = "playbacks")]
    pub dir: StreamDir,
    /// Recordings: their durability interval, ns (`None`: the volume's commit
    /// interval; a status fills it in). `None` for playbacks.
    #[serde(default)]
    pub durable_ns: Option<u64>,
}

fn playbacks() -> StreamDir {
    StreamDir::Read
}

/// A snapshot of the engine for the operator.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Status {
    /// Monotonic ns when it was taken (the driver's clock).
    pub now_ns: u64,
    /// Monotonic ns when the engine started (the volume was opened or mounted).
    pub started_ns: u64,
    pub space: SpaceStatus,
    pub disk: DiskStatus,
    /// `None`: the volume was opened without an admission model (streams refused).
    pub admission: Option<AdmissionStatus>,
    /// Open streams, by id.
    pub streams: Vec<StreamStatus>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SpaceStatus {
    /// The data region.
    pub total_bytes: u64,
    /// In files (and their preallocation).
    pub used_bytes: u64,
    /// Held for recordings' reservations and not yet written.
    pub held_bytes: u64,
    /// Free now or at the next commit and held for nobody (what `df` shows).
    pub free_bytes: u64,
    /// Of `free_bytes`, freed by deletes the next commit makes final.
    pub freed_at_commit_bytes: u64,
    pub commit_interval_ms: u32,
    /// Space promised to recordings admitted on what retention can reclaim and not
    /// yet freed for them (`engine/reclaim.rs`), and of it what retention's last plan
    /// could not free (every chunk left open or protected).
    #[serde(default)]
    pub owed_bytes: u64,
    #[serde(default)]
    pub owed_short_bytes: u64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DiskStatus {
    /// Time the device had a command in flight since the engine started, ns (two
    /// snapshots give the load over the time between them).
    pub busy_ns: u64,
    /// Device commands (flushes excluded) since the engine started.
    pub commands: u64,
    /// Real-time operations completed, and those that missed their deadline.
    pub rt_ops: u64,
    pub rt_misses: u64,
    /// Commits since the engine started.
    pub commits: u64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AdmissionStatus {
    /// What admission checks against ("the disk model nvr-8t", "a bandwidth of ...").
    pub against: String,
    /// Share of the disk kept for best-effort traffic.
    pub be_share: f64,
    /// The real-time share the open streams take (1.0 = all of it), by admission's
    /// model.
    pub load: f64,
    /// The admission round (the shortest slack of an open stream), ms; 0 without
    /// streams or on a bandwidth device.
    pub round_ms: f64,
    pub asked: HeadroomAsk,
    /// How many more streams as asked would be admitted now, one after the other.
    pub more_streams: usize,
    /// The highest rate one more stream with the asked request size (and buffer) is
    /// admitted at now, bits per second.
    pub largest_rate_bps: f64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StreamStatus {
    pub id: u64,
    pub ino: Ino,
    /// Filled in by the driver (`None`: the file has no name left, or the driver did
    /// not look).
    pub path: Option<String>,
    /// "read" or "write".
    pub dir: String,
    pub rate_bps: f64,
    pub request_bytes: u64,
    pub buffer_bytes: u64,
    /// Bytes in the buffer now (a recording's not yet on the disk, a playback's
    /// prefetched and not yet taken).
    pub buffered_bytes: u64,
    /// How long after it is issued a request is due, ms: the stream's guarantee.
    pub slack_ms: f64,
    /// A recording's held space left, and its durability interval.
    pub reserved_bytes: u64,
    pub durable_ms: u64,
    /// The real-time load with this stream when it was admitted.
    pub admitted_load: f64,
    /// How it has fared (see `StreamStats`).
    pub requests: u64,
    pub late: u64,
    pub min_margin_ms: Option<f64>,
    pub stalls: u64,
    pub app_bytes: u64,
    pub written_bytes: u64,
    pub no_space: u64,
    pub durability_late: u64,
}

impl Engine {
    /// A snapshot for the operator (see the module docs); `ask` is the stream
    /// admission's headroom is counted for.
    pub fn status(&self, ask: HeadroomAsk) -> Status {
        let bs = self.vol.superblock().data_block_bytes;
        let info = self.vol.info();
        let total_bytes = info.sb.data_blocks * bs;
        let held_bytes = self.vol.held_bytes();
        let space = SpaceStatus {
            total_bytes,
            used_bytes: info.used_blocks * bs,
            held_bytes,
            free_bytes: self.vol.available_bytes(),
            freed_at_commit_bytes: self.vol.pending_free_blocks() as u64 * bs,
            commit_interval_ms: self.vol.commit_interval_ms(),
            owed_bytes: self.owed_bytes(),
            owed_short_bytes: self
                .retention_figures()
                .owed_shortfall_bytes
                .min(self.owed_bytes()),
        };
        let disk = DiskStatus {
            busy_ns: self.qos.busy_ns
                + self
                    .busy_since_ns
                    .map_or(0, |since| self.last_mono_ns.saturating_sub(since)),
            commands: self.qos.commands,
            rt_ops: self.qos.rt_ops,
            rt_misses: self.qos.deadline_misses(),
            commits: self.qos.commits,
        };
        let open: Vec<_> = self.streams.values().filter(|s| s.is_open()).collect();
        let loads = self.open_loads();
        let admission = self
            .admission
            .as_ref()
            .map(|adm| admission_status(adm, &loads, ask, self.gather_mode()));
        let streams = open
            .iter()
            .map(|s| {
                let (i, st) = (s.info(), s.stats());
                StreamStatus {
                    id: u64::from(i.id),
                    ino: i.ino,
                    path: None,
                    dir: match i.dir {
                        StreamDir::Read => "read",
                        StreamDir::Write => "write",
                    }
                    .to_string(),
                    rate_bps: i.rate_bytes_per_s * 8.0,
                    request_bytes: i.request_bytes,
                    buffer_bytes: i.buffer_bytes,
                    buffered_bytes: s.buffered_bytes(),
                    slack_ms: i.slack_ns as f64 / 1e6,
                    reserved_bytes: if i.dir == StreamDir::Write {
                        self.vol.held_for(i.ino)
                    } else {
                        0
                    },
                    durable_ms: i.durable_ns / 1_000_000,
                    admitted_load: i.load,
                    requests: st.requests,
                    late: st.late,
                    min_margin_ms: st.min_margin_ns.map(|m| m as f64 / 1e6),
                    stalls: st.stalls,
                    app_bytes: st.app_bytes,
                    written_bytes: st.written_bytes,
                    no_space: st.no_space,
                    durability_late: st.durability_late,
                }
            })
            .collect();
        Status {
            now_ns: self.last_mono_ns,
            started_ns: self.started_ns,
            space,
            disk,
            admission,
            streams,
        }
    }
}

impl Status {
    /// Fills in the streams' paths by walking the namespace from `root`, one
    /// directory at a time through `readdir` (a driver makes each call a separate
    /// query), breadth first in name order, stopping once every stream's file is
    /// named. A file with several names gets the first one found; an orphan (no name
    /// left) keeps `None`.
    pub fn name_streams(
        &mut self,
        root: Ino,
        mut readdir: impl FnMut(Ino) -> Vec<(Vec<u8>, Ino, crate::format::dir::Kind)>,
    ) {
        let mut wanted: std::collections::BTreeSet<Ino> =
            self.streams.iter().map(|s| s.ino).collect();
        let mut found: std::collections::BTreeMap<Ino, String> = Default::default();
        let mut dirs = std::collections::VecDeque::from([(root, String::new())]);
        // Directories have one parent each (no cycle); the set only keeps a damaged
        // tree from walking for ever.
        let mut seen = std::collections::BTreeSet::from([root]);
        while !wanted.is_empty() {
            let Some((dir, path)) = dirs.pop_front() else {
                break;
            };
            for (name, ino, kind) in readdir(dir) {
                let child = format!("{path}/{}", String::from_utf8_lossy(&name));
                if wanted.remove(&ino) {
                    found.insert(ino, child.clone());
                }
                if kind == crate::format::dir::Kind::Dir && seen.insert(ino) {
                    dirs.push_back((ino, child));
                }
            }
        }
        for s in &mut self.streams {
            s.path = found.get(&s.ino).cloned();
        }
    }
}

/// What admission says beside the streams `open` (their loads): its load and round,
/// and the headroom for streams like `ask` on a volume gathering as `mode` says (a
/// recording's durability interval is never shorter than its commit interval).
/// Without streams: an idle device's (`dvrfs status` on a volume that is not
/// mounted).
pub fn admission_status(
    adm: &Admission,
    open: &[StreamLoad],
    ask: HeadroomAsk,
    mode: GatherMode,
) -> AdmissionStatus {
    let check = adm.check(open);
    let interval_ns = mode.commit_interval_ns;
    let asked = HeadroomAsk {
        durable_ns: match ask.dir {
            StreamDir::Read => None,
            StreamDir::Write => Some(ask.durable_ns.unwrap_or(interval_ns).max(interval_ns)),
        },
        ..ask
    };
    let like = stream_ask(
        asked.dir,
        asked.rate_bps,
        asked.request_bytes,
        asked.buffer_bytes,
        asked.durable_ns,
        mode,
    );
    AdmissionStatus {
        against: adm.describe(),
        be_share: adm.be_share,
        load: check.load,
        round_ms: check.round_ms,
        asked,
        more_streams: if like.rate_bytes_per_s > 0.0 {
            adm.count_admitted_beside(open, &like, AUTO_SLACK_NS, MAX_STREAM_BUFFER_BYTES)
        } else {
            0
        },
        largest_rate_bps: adm.largest_admitted(open, &like, AUTO_SLACK_NS, MAX_STREAM_BUFFER_BYTES)
            * 8.0,
    }
}
