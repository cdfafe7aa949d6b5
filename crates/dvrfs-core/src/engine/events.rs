//! What the engine tells the operator: the events it records in the volume's log
//! (`volume/events.rs`, FORMAT.md section 10b) and the lost-tail record of each commit.
//!
//! Events are the engine's decisions, stamped with the `Now` of the call that made
//! them (monotonic and wall clock; the core reads no clock): a recovery at open,
//! streams admitted, refused, ended or failed (`stream.rs`), writes refused for want
//! of space, and the used space crossing [`SPACE_LEVELS_PCT`]. Each is pushed into the
//! volume at once, so it goes to the disk with the transaction that carries the change
//! it describes; the drivers take a copy to log (`Engine::take_new_events`).
//!
//! **Lost tails.** Right before each cut, the engine lists the files whose writers
//! have handed over bytes the cut does not commit: a write stream's buffered requests
//! and the request being filled (`Stream::pos`), a file's writes planned and not yet
//! applied (their data still on its way to the disk). The record goes into the same
//! transaction, so after a crash the last committed one says which files came back
//! shorter and by at least how much. Bytes a driver still gathers on its own (the
//! FUSE mount's chunks before the gather point) are not the engine's to know.

use super::{Engine, Now};
use crate::error::{Error, Result};
use crate::format::events::{EventRecord, Tail, What};
use crate::meta::Ino;
use std::collections::BTreeMap;

/// Used-space levels whose crossing is an event, in percent of the data region
/// (space held for recordings counted as used).
pub const SPACE_LEVELS_PCT: [u16; 3] = [90, 95, 99];
/// How far below a level the used space must fall for `space_ok`, in tenths of a
/// percent: a volume hovering at a level does not flood the log.
const SPACE_HYSTERESIS_PERMILLE: u64 = 10;

impl Engine {
    /// The events of the volume's log, oldest first (what `dvrfs events` prints; a
    /// daemon serving a mounted volume answers with this).
    pub fn events(&self) -> Vec<EventRecord> {
        self.vol.events()
    }

    /// Events since the last call, oldest first: a driver's copy to log.
    pub fn take_new_events(&mut self) -> Vec<EventRecord> {
        self.vol.take_new_events()
    }

    /// At open: a volume that was not closed cleanly gets a `recovery` event and a
    /// `tail_lost` event per file its last commit's record lists.
    pub(super) fn recovery_events(&mut self, now: Now) {
        let r = self.vol.load_report().clone();
        if !r.crashed() {
            return;
        }
        let txn = r.tails.as_ref().map_or(0, |t| t.txn);
        self.vol.push_event(
            now.mono_ns,
            now.wall_ns,
            What::Recovery {
                txn: r.replayed_txn.unwrap_or(0),
                tails: r.lost_tails.len() as u32,
                left_out: r.tails_left_out,
            },
        );
        for t in &r.lost_tails {
            self.vol.push_event(
                now.mono_ns,
                now.wall_ns,
                What::TailLost {
                    ino: t.ino,
                    txn,
                    committed_bytes: t.size_bytes,
                    accepted_bytes: t.accepted_bytes,
                },
            );
        }
        // Stored at once (after the replay's checkpoint), not an interval later: the
        // blocking driver's open waits for it, and a second crash keeps it.
        if self.vol.is_writable() {
            self.commit.want_now();
        }
    }

    /// Right before a cut: the space levels, then the lost-tail record.
    pub(super) fn before_cut(&mut self, now: Now) {
        self.space_events(now);
        let tails = self.unsaved_tails();
        self.vol.set_tails(tails);
    }

    /// Files with bytes accepted beyond their applied size.
    fn unsaved_tails(&self) -> Vec<Tail> {
        let mut accepted: BTreeMap<Ino, u64> = BTreeMap::new();
        for (ino, size) in self.vol.pending_sizes() {
            accepted.insert(ino, size);
        }
        for (ino, pos) in self.write_stream_ends() {
            let a = accepted.entry(ino).or_default();
            *a = (*a).max(pos);
        }
        accepted
            .into_iter()
            .filter_map(|(ino, accepted_bytes)| {
                let committed_bytes = self.vol.applied_size(ino)?;
                (accepted_bytes > committed_bytes).then_some(Tail {
                    ino,
                    committed_bytes,
                    accepted_bytes,
                })
            })
            .collect()
    }

    /// `space_low` when the used space crosses a level upwards, `space_ok` when it
    /// falls back below the level it had crossed (by the hysteresis).
    fn space_events(&mut self, now: Now) {
        let level = self.space_level_now(self.space_level_pct);
        if level == self.space_level_pct {
            return;
        }
        let (used_bytes, data_bytes) = self.space_used();
        let (up, level_pct) = if level > self.space_level_pct {
            (true, level)
        } else {
            // Back below the lowest level it no longer stands at.
            let below = SPACE_LEVELS_PCT.iter().copied().find(|&l| l > level);
            (false, below.unwrap_or(self.space_level_pct))
        };
        self.space_level_pct = level;
        self.vol.push_event(
            now.mono_ns,
            now.wall_ns,
            What::Space {
                up,
                level_pct,
                used_bytes,
                data_bytes,
            },
        );
    }

    /// (used, data region) bytes, held space counted as used.
    fn space_used(&self) -> (u64, u64) {
        let sb = self.vol.superblock();
        let data_bytes = sb.data_blocks * sb.data_block_bytes;
        (
            data_bytes.saturating_sub(self.vol.available_bytes()),
            data_bytes,
        )
    }

    /// The level the used space is at now, coming from `prev`: the highest level
    /// reached, or, below `prev`, `prev` until the space falls past the hysteresis.
    pub(super) fn space_level_now(&self, prev: u16) -> u16 {
        let (used, data) = self.space_used();
        if data == 0 {
            return 0;
        }
        let permille = (used as u128 * 1000 / data as u128) as u64;
        let reached = SPACE_LEVELS_PCT
            .iter()
            .copied()
            .filter(|&l| permille >= l as u64 * 10)
            .max()
            .unwrap_or(0);
        if reached >= prev || permille + SPACE_HYSTERESIS_PERMILLE > prev as u64 * 10 {
            return reached.max(prev);
        }
        // Fell below `prev`: it stands at the highest level still crossed by the
        // hysteresis' margin.
        SPACE_LEVELS_PCT
            .iter()
            .copied()
            .filter(|&l| l < prev && permille + SPACE_HYSTERESIS_PERMILLE > l as u64 * 10)
            .max()
            .unwrap_or(0)
    }

    /// A write refused whole for want of space.
    pub(super) fn no_space_event<T>(&mut self, ino: Ino, result: &Result<T>, now: Now) {
        if let Err(Error::NoSpace {
            need_bytes,
            free_bytes,
        }) = result
        {
            self.vol.push_event(
                now.mono_ns,
                now.wall_ns,
                What::WriteNoSpace {
                    ino,
                    need_bytes: *need_bytes,
                    free_bytes: *free_bytes,
                },
            );
        }
    }
}
