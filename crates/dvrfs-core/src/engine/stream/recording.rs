//! The write side of a stream: write-behind at the end of the file, and the bound in
//! time on how long an accepted byte can stay off the disk.
//!
//! **Write-behind.** Bytes the application writes are copied into the request being
//! filled; each full request is written at the end of the file, due when the buffer
//! would overflow if the application kept writing at its rate (`stream.rs`).
//!
//! **Durability in time** (issue 21). A slow recording fills a request slowly (a
//! 512 KiB request takes 16.8 s at 250 kbit/s), and bytes still in the buffer are
//! lost in a crash. So every accepted byte must reach a commit within the stream's
//! *durability interval* `D` (the volume's commit interval `I` unless the stream
//! asks for longer). Commits come at a cadence: the next is due `I` after the last
//! one started (`CommitState::cadence`). A *gather point* lies [`GATHER_LEAD_NS`]
//! before each due time: there, every stream whose partial request would otherwise
//! hold a byte longer than `D` writes it (a short request, due at the commit's due
//! time, so the policy fits it into its sweep and the commit's cut takes it in),
//! and the next request goes on from where it ended (the engine composes the
//! shared 4 KiB sector from the bytes it remembers there rather than reading it
//! back, `engine/last_sector.rs`). A full request written between two gather points is due by the next
//! commit at the latest for the same reason, except a logging recording's on a
//! volume with a tail log: its last bytes are logged at the next gather point
//! instead, and it is due at its buffer's overflow (`engine/tail_log.rs`). The journal write, the commit point, is
//! due one lead after the cut (`commit.rs`). A byte accepted at `a` is therefore in
//! a request due by the first commit cut after `a + D - I + lead`, and durable once
//! that commit's journal flush completes: within `D + lead` plus the commit's own
//! time (tens of ms on an idle disk), when the disk meets its deadlines.
//!
//! The cost: a stream whose requests do not fill within `D` writes one short request
//! per `D` instead of one full one per fill (the tests count them;
//! `docs/durability.md` has the figures). A longer `D` (`durable=` in a reservation)
//! spares a slow stream's disk time; `StreamSync` (an fsync of the file) writes the
//! partial request at once.

use super::{
    buf, granule, Body, Engine, IoBuf, Now, Op, Output, Result, Stream, StreamDir, StreamId,
};
use crate::error::Error;
use crate::meta::Ino;
use crate::volume::SpaceTo;

/// How long before a commit is due a write stream's partial request is written, so
/// that it lands (its deadline is the commit's due time) and the commit takes it in:
/// at least this. A tenth of a second covers a few partial requests' positioning and
/// transfer on any of the modelled disks at light load; it is capped at a quarter of
/// the commit interval for volumes that commit more often than every 400 ms. With
/// more recordings the lead grows ([`Engine::gather_lead`]).
pub const GATHER_LEAD_NS: u64 = 100_000_000;

/// How much longer than the model's sweep the lead is: the model's round is the
/// admission's average, and the short requests of one gather point share the disk
/// with the commit's own writes and whatever else is due (on the emulated 2007 disk,
/// four 156 KiB requests of `durable=5s` recordings took 119 ms where the model's
/// sweep gives 91).
const GATHER_SWEEP_FACTOR: f64 = 2.0;

impl Engine {
    /// The gather lead: [`GATHER_LEAD_NS`] (at most a quarter of the commit
    /// interval), or, when admission's model gives a longer sweep writing one short
    /// request of every open recording (what each gathers in its durability
    /// interval, at most a request) times [`GATHER_SWEEP_FACTOR`], that, up to half
    /// the interval. Beyond half the interval the recordings' short requests cannot
    /// all land before their commit on this disk: they are counted as
    /// `durability_late` (docs/durability.md, "Where the bound does not hold").
    fn compute_gather_lead(&self) -> u64 {
        let interval = self.commit.interval_ns();
        let base = GATHER_LEAD_NS.min(interval / 4);
        let Some(adm) = &self.admission else {
            return base;
        };
        let shorts = self
            .streams
            .values()
            .filter(|s| s.info.dir == StreamDir::Write && !s.closed)
            // What it gathers in its interval. Admission plans the same short request
            // rounded to whole sectors and per gather period
            // (`StreamLoad::written_request_bytes`); the lead keeps the figures
            // durability.md measured.
            .map(|s| {
                let gathered = s.rate * s.info.durable_ns as f64 / 1e9;
                (gathered as u64).min(s.info.request_bytes)
            });
        let sweep = adm.sweep_ns(shorts) * GATHER_SWEEP_FACTOR;
        (sweep as u64).clamp(base, (interval / 2).max(base))
    }

    /// [`Engine::compute_gather_lead`] as of the last stream opened or closed (it
    /// depends only on the open recordings and the interval).
    pub(in crate::engine) fn gather_lead(&self) -> u64 {
        self.gather_lead_ns
    }

    /// Recomputes the gather lead: a recording was opened or closed.
    pub(in crate::engine) fn refresh_gather_lead(&mut self) {
        self.gather_lead_ns = self.compute_gather_lead();
    }
}

/// An application write accepted whole (`stream_finish_app` gives back its buffer).
fn written() -> Output {
    Output::Write {
        data: IoBuf::Virtual(0),
    }
}

impl Engine {
    pub(super) fn write_stream_step(&mut self, sid: StreamId, now: Now) -> bool {
        let t = now.mono_ns;
        let mut changed = false;
        let mut finished = vec![];
        loop {
            let s = self.streams.get_mut(&sid).expect("listed");
            s.update_credit(t);
            s.wake_ns = None;
            if let Some(e) = s.error.clone() {
                for w in std::mem::take(&mut s.waiting) {
                    finished.push((
                        w,
                        Err(Error::io(
                            "writing behind a stream",
                            std::io::Error::other(e.clone()),
                        )),
                    ));
                }
                break;
            }
            let Some(w) = s.waiting.front_mut() else {
                break;
            };
            if let Some(to) = w.roll_to {
                // Every write before it is accepted: the next bytes go to `to`.
                let w = s.waiting.pop_front().expect("front");
                let r = self.stream_roll_now(sid, to, now);
                finished.push((w, r.map(|()| Output::Done)));
                changed = true;
                continue;
            }
            let want = w.buf.len() - w.done;
            if want == 0 {
                let w = s.waiting.pop_front().expect("front");
                finished.push((w, Ok(written())));
                changed = true;
                continue;
            }
            if w.done == 0 {
                // Space for the whole write, or it is refused before a byte of it is
                // accepted: a byte accepted is never thrown away for want of a block.
                let (ino, end) = (s.info.ino, s.pos + want as u64);
                match self.vol.blocks_to_extend(ino, end) {
                    Ok(SpaceTo::Fits) => {}
                    Ok(SpaceTo::AfterCommit) => {
                        // Blocks an uncommitted delete freed: the commit makes them
                        // free; the write waits for it.
                        self.commit.want_now();
                        break;
                    }
                    Ok(SpaceTo::No { .. }) | Err(Error::NoSpace { .. }) if self.is_owed(sid) => {
                        // Admitted on space retention is reclaiming for it
                        // (`reclaim.rs`): the write waits for it, never refused.
                        let s = self.streams.get_mut(&sid).expect("listed");
                        let w = s.waiting.front_mut().expect("front");
                        if !w.stalled {
                            w.stalled = true;
                            s.stats.stalls += 1;
                        }
                        break;
                    }
                    Ok(SpaceTo::No {
                        need_bytes,
                        free_bytes,
                    })
                    | Err(Error::NoSpace {
                        need_bytes,
                        free_bytes,
                    }) => {
                        let s = self.streams.get_mut(&sid).expect("listed");
                        let w = s.waiting.pop_front().expect("front");
                        s.stats.no_space += 1;
                        self.vol.push_event(
                            now.mono_ns,
                            now.wall_ns,
                            crate::format::events::What::WriteNoSpace {
                                ino,
                                need_bytes,
                                free_bytes,
                            },
                        );
                        finished.push((
                            w,
                            Err(Error::NoSpace {
                                need_bytes,
                                free_bytes,
                            }),
                        ));
                        changed = true;
                        continue;
                    }
                    Err(e) => {
                        let s = self.streams.get_mut(&sid).expect("listed");
                        let w = s.waiting.pop_front().expect("front");
                        finished.push((w, Err(e)));
                        changed = true;
                        continue;
                    }
                }
            }
            let s = self.streams.get_mut(&sid).expect("listed");
            let Some(w) = s.waiting.front_mut() else {
                break;
            };
            let d = s.info.request_bytes as usize;
            if s.fill.is_none() {
                if s.writes.len() as u32 >= s.info.depth {
                    // The buffer is full of requests being written.
                    if !w.stalled {
                        w.stalled = true;
                        s.stats.stalls += 1;
                    }
                    break;
                }
                s.fill = Some(if s.virtual_bufs {
                    IoBuf::virtual_len(d)
                } else {
                    IoBuf::zeroed(d)
                });
                s.fill_len = 0;
                s.logged_len = 0;
                s.fill_at = s.pos;
            }
            let room = d - s.fill_len;
            let n = want.min(room).min(s.credit.max(0.0).floor() as usize);
            let need = granule(s.info.request_bytes, want).min(room as f64);
            if n == 0 || (n as f64) < need {
                s.wake_ns = Some(s.credit_time(need).max(t + 1));
                break;
            }
            if s.fill_len == s.logged_len {
                // The oldest byte the durability bound is now about.
                s.fill_first_ns = t;
            }
            let fill = s.fill.as_mut().expect("made above");
            buf::copy(&w.buf, w.done, fill, s.fill_len, n);
            w.done += n;
            s.fill_len += n;
            s.pos += n as u64;
            s.credit -= n as f64;
            s.stats.app_bytes += n as u64;
            changed = true;
            if s.fill_len == d {
                // A logging recording leaves the request's last bytes to the next
                // gather point: the request is due at its buffer's overflow.
                if self.tail_log_defer_full(sid, now) {
                    continue;
                }
                // Otherwise due by the commit its gather point belongs to at the
                // latest, so the bytes are durable as soon as if they had been
                // gathered.
                let lead = self.gather_lead();
                // A gather point already past (the commit cadence fell behind: a
                // job outlasted its interval) gives a lead from now, not a deadline
                // that was over before the request was made.
                let cap = self
                    .gather_at(&self.streams[&sid], lead, false)
                    .map(|g| g.max(t) + lead);
                self.stream_write_out(sid, now, cap);
            }
        }
        for (w, r) in finished {
            self.stream_finish_app(w, r, now);
        }
        changed
    }

    /// Writes the buffer being filled: due when the buffer would overflow, or by
    /// `cap_ns` if that is sooner (a gather: by the commit it is written for); a
    /// closed stream's last request a slack from now at the soonest.
    pub(in crate::engine) fn stream_write_out(
        &mut self,
        sid: StreamId,
        now: Now,
        cap_ns: Option<u64>,
    ) {
        let t = now.mono_ns;
        let s = self.streams.get_mut(&sid).expect("listed");
        let Some(mut data) = s.fill.take() else {
            return;
        };
        if s.fill_len < data.len() {
            let mut short = data.sibling(s.fill_len);
            buf::copy(&data, 0, &mut short, 0, s.fill_len);
            data = short;
        }
        s.update_credit(t);
        let d = s.info.request_bytes as f64;
        let free = (s.info.depth as f64 - (s.writes.len() + 1) as f64) * d;
        let mut overflow = s.deadline(free - s.credit.max(0.0), t);
        if s.closed {
            // No byte comes after this request: the buffer cannot overflow. Its
            // last request is due a slack from now (the guarantee every request
            // was admitted with) if that is later; with a request still in flight
            // in a two-request buffer the overflow would be "now", a miss for any
            // disk.
            overflow = overflow.max(t + s.info.slack_ns);
        }
        let deadline = overflow.min(cap_ns.unwrap_or(u64::MAX));
        let (ino, offset) = (s.info.ino, s.fill_at);
        s.fill_len = 0;
        s.logged_len = 0;
        let op = self.submit_internal(Op::Write { ino, offset, data }, deadline, sid, now);
        let s = self.streams.get_mut(&sid).expect("listed");
        s.writes.push_back(super::Request {
            op,
            ino,
            at: offset,
            overflow_ns: overflow,
        });
    }

    /// Whether a write stream holds bytes of file `ino` not yet applied: it records
    /// into the file, or rolled on from it with requests still being written.
    pub(in crate::engine) fn has_write_stream(&self, ino: Ino) -> bool {
        self.streams.values().any(|s| {
            s.info.dir == StreamDir::Write
                && (s.info.ino == ino || s.writes.iter().any(|w| w.ino == ino))
        })
    }

    /// The size an application sees of file `ino`: its applied size, or further
    /// when a write stream on it holds bytes not yet on the disk (in its buffer or
    /// being written). What `stat` of an open recording should say.
    /// Each write stream's file and where its next accepted byte goes: everything
    /// before it was handed over (the lost-tail record, `engine/events.rs`).
    /// A file a stream rolled on from counts while its last requests are being
    /// written.
    pub(in crate::engine) fn write_stream_ends(&self) -> Vec<(Ino, u64)> {
        let mut ends = vec![];
        for s in self.streams.values() {
            if s.info.dir != StreamDir::Write {
                continue;
            }
            ends.push((s.info.ino, s.pos));
            for w in s.writes.iter().filter(|w| w.ino != s.info.ino) {
                ends.push((w.ino, w.at + self.request_len(w.op) as u64));
            }
        }
        ends
    }

    /// Bytes of a stream's request being written (0 once it is gone).
    fn request_len(&self, op: super::OpId) -> usize {
        match self.ops.get(&op).map(|o| &o.body) {
            Some(Body::Write { data, .. }) => data.len(),
            _ => 0,
        }
    }

    pub fn visible_size(&self, ino: Ino) -> Result<u64> {
        let applied = self.vol.stat(ino)?.size_bytes;
        Ok(self
            .write_stream_ends()
            .into_iter()
            .filter(|&(i, _)| i == ino)
            .map(|(_, end)| end)
            .fold(applied, u64::max))
    }

    /// A read of `ino` for `[offset, offset + len)` planned on the applied file
    /// (`bytes` of it from the disk) also gets what write streams on the file hold
    /// and have not applied: the requests being written and the one being filled.
    /// Those bytes lie at or past the applied size (a stream appends), so no disk
    /// piece of the read lands on them. Returns the read's new length.
    pub(in crate::engine) fn overlay_stream_writes(
        &self,
        ino: Ino,
        offset: u64,
        buf: &mut IoBuf,
        bytes: usize,
    ) -> usize {
        let end = offset + buf.len() as u64;
        let mut n = bytes;
        if self.visible_size(ino).unwrap_or(0) > offset + bytes as u64 {
            // Past the disk's bytes: zero, then the streams' bytes over it.
            let len = buf.len();
            buf::zero(buf, bytes, len - bytes);
        }
        for s in self.streams.values() {
            if s.info.dir != StreamDir::Write {
                continue;
            }
            // The request being filled is of the stream's file; a request being
            // written may be of the file it rolled on from.
            let fill = s
                .fill
                .as_ref()
                .filter(|_| s.info.ino == ino)
                .map(|f| (s.fill_at, f, s.fill_len));
            let pieces = s
                .writes
                .iter()
                .filter(|w| w.ino == ino)
                .filter_map(|w| match self.ops.get(&w.op).map(|o| &o.body) {
                    Some(Body::Write { data, .. }) => Some((w.at, data, data.len())),
                    _ => None,
                })
                .chain(fill);
            for (at, data, len) in pieces {
                let (from, to) = (at.max(offset), (at + len as u64).min(end));
                if from >= to {
                    continue;
                }
                buf::copy(
                    data,
                    (from - at) as usize,
                    buf,
                    (from - offset) as usize,
                    (to - from) as usize,
                );
                n = n.max((to - offset) as usize);
            }
        }
        n
    }

    /// When the partial request a write stream is filling must be written so that
    /// its oldest byte is durable within the stream's durability interval `D`: at the
    /// gather point `g = due - lead` of a commit (`due`: when the commit cadence makes
    /// the next one due), the first one at or after `first + D - I` (`first`: when the
    /// oldest byte was accepted, `I`: the commit interval). The write is due at
    /// `g + lead`, so it lands before the commit it is gathered for is cut; the byte
    /// is then durable when that commit's journal flush completes, at most `D + lead`
    /// plus the commit's own time after it was accepted. `None` when nothing is being
    /// filled (or the stream failed or is closing: close writes the rest).
    ///
    /// **Phases.** A stream whose `D` spans `k = D / I` intervals has `k` gather
    /// points to choose from for each partial request; it takes the latest one in
    /// its window whose number (`g / I`) is its phase (`id mod k`). Recordings
    /// started together (an NVR's cameras at boot) would otherwise all gather at the
    /// same point, every `D`: 200 of them at `durable=10s` on `nvr-8t` put 200 short
    /// requests into one lead and landed 93 % of them after their commit
    /// (`dvrfs sim --stream-recordings`), where one in `k` per point fits. A stream
    /// still writes once per `D` or so, at its own phase.
    /// `lead`: [`Engine::gather_lead`], which the caller computes once for all the
    /// streams it asks about.
    /// `phased`: the point of the stream's phase (a partial request); otherwise the
    /// latest point the bound allows (a full request, which is written anyway and
    /// only needs to make its commit: an earlier deadline would only take the
    /// scheduler's room to sweep).
    pub(super) fn gather_at(&self, s: &Stream, lead: u64, phased: bool) -> Option<u64> {
        // The oldest byte in neither the log nor a request due by a commit: in the
        // request being filled, or in a request being written whose last bytes
        // wait for the log (which a closed stream still gathers).
        let first_ns = s.oldest_unlogged_ns()?;
        if s.info.dir != StreamDir::Write
            || (s.closed && s.unlogged_writes.is_empty())
            || s.error.is_some()
        {
            return None;
        }
        let (due, interval) = self.commit.cadence();
        let g0 = due.saturating_sub(lead);
        let earliest = first_ns + (s.info.durable_ns - interval.min(s.info.durable_ns));
        let latest = if earliest <= g0 {
            g0
        } else {
            g0 + (earliest - g0).div_ceil(interval) * interval
        };
        let k = s.info.durable_ns / interval.max(1);
        if !phased || k <= 1 {
            return Some(latest);
        }
        // Consecutive gather points are an interval apart, so their numbers
        // (`g / I`) go down by one per step back from `latest`: the one with the
        // stream's phase is `j` steps back.
        let phase = u64::from(s.info.id) % k;
        let j = ((latest / interval) % k + k - phase) % k;
        match latest.checked_sub(j * interval) {
            Some(g) if g >= first_ns => Some(g),
            _ => Some(latest),
        }
    }

    /// Writes a write stream's partial request when its gather point has come.
    pub(super) fn stream_gather(&mut self, sid: StreamId, now: Now) -> bool {
        let lead = self.gather_lead();
        let Some(g) = self.gather_at(&self.streams[&sid], lead, true) else {
            return false;
        };
        if now.mono_ns < g {
            return false;
        }
        // With a tail log the bytes go into the next commit's batch; without one, or
        // with the ring full, in place (due by that commit).
        if self.tail_log_gather(sid, now) {
            return true;
        }
        // Past gather points (the cadence fell behind) count from now.
        self.stream_write_out(sid, now, Some(g.max(now.mono_ns) + lead));
        true
    }
}

impl Engine {
    /// The first gather point at or after `now_ns`: when a driver that gathers
    /// writes of its own (the FUSE mount's chunks) should hand them over so that
    /// the next commit takes them in. Gather points lie the gather lead
    /// ([`GATHER_LEAD_NS`] or more, [`Engine::gather_lead`]) before each time the
    /// commit cadence makes a commit due, an interval apart.
    pub fn next_gather_ns(&self, now_ns: u64) -> u64 {
        let (due, interval) = self.commit.cadence();
        let g0 = due.saturating_sub(self.gather_lead());
        if g0 >= now_ns {
            return g0;
        }
        g0 + (now_ns - g0).div_ceil(interval) * interval
    }
}
