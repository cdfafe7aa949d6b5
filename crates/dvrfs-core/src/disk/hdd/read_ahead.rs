//! The read-ahead cache of the simulated hard disk (step 5 of the model in `hdd.rs`):
//! the active read-ahead stream, the stopped segments, and how a read is served from
//! them or from the media.
//!
//! Invariant: the active read-ahead and the stopped segments together use at most
//! `cache.segments`, and every stopped segment holds at least one unconsumed sector
//! (`segments_within_bounds`, asserted after every cached read). A segment a command
//! uses is looked up before any eviction, so it is never the one evicted.

use super::{Hdd, Served};

/// The segment being filled by read-ahead after the last read.
#[derive(Clone, Copy, Debug)]
pub(super) struct Stream {
    /// First sector the host has not consumed (where the last read ended).
    pub(super) next_lba: u64,
    /// Sectors `[next_lba, stream_lba)` are in the buffer; the media streams from
    /// `stream_lba`, whose first sector starts under the head at `stream_start_ns`.
    pub(super) stream_lba: u64,
    pub(super) stream_start_ns: f64,
    /// The read-ahead stops here (`next_lba + read_ahead`, within the disk).
    pub(super) limit_lba: u64,
}

/// A stopped read-ahead: sectors `[next_lba, end_lba)` are in the cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Segment {
    pub(super) next_lba: u64,
    pub(super) end_lba: u64,
}

impl Hdd {
    /// A read of `lba..end_lba` with the read-ahead cache on: from the active read-ahead
    /// stream, from a buffered segment, or from the media.
    pub(super) fn serve_cached_read(
        &mut self,
        t_cmd: f64,
        lba: u64,
        end_lba: u64,
        host_end: f64,
    ) -> Served {
        // The active read-ahead serves the read if the read continues it, or starts
        // inside what it has buffered by now (a stream that skipped a little).
        let active = self.stream.and_then(|s| {
            let frontier = self.frontier(&s, t_cmd);
            let serves = lba == s.next_lba || (s.next_lba < lba && lba < frontier);
            serves.then_some((s, frontier))
        });
        match active {
            Some((s, frontier)) => {
                self.serve_from_stream(s, frontier, t_cmd, lba, end_lba, host_end)
            }
            None => self.serve_from_segments(t_cmd, lba, end_lba, host_end),
        }
    }

    /// A read the active read-ahead stream `s` serves, buffered up to `frontier`.
    pub(super) fn serve_from_stream(
        &mut self,
        s: Stream,
        frontier: u64,
        t_cmd: f64,
        lba: u64,
        end_lba: u64,
        host_end: f64,
    ) -> Served {
        let lbas = self.geo.lbas();
        if end_lba <= frontier {
            // Everything is in the buffer already.
            self.stream = Some(self.stream_after_hit(s, frontier, t_cmd, end_lba));
            Served {
                cache_hit: true,
                ..Served::at(host_end)
            }
        } else if frontier < s.limit_lba {
            // Still streaming: the buffered head comes from the segment and
            // the media read continues without a gap.
            let media_end = s.stream_start_ns + self.media_ns(s.stream_lba, end_lba - s.stream_lba);
            self.set_head(end_lba - 1);
            self.start_stream(end_lba, media_end);
            Served {
                cache_partial_hit: frontier > lba,
                ..Served::at(media_end.max(host_end))
            }
        } else {
            // The read-ahead stopped at its limit: the rest needs the
            // platter to come round to it.
            self.stream = None;
            self.set_head(frontier.min(lbas - 1));
            let m = self.media(t_cmd, frontier, end_lba - frontier, false);
            self.start_stream(end_lba, m.end_ns);
            Served {
                cache_partial_hit: frontier > lba,
                ..Served::from_media(&m, host_end)
            }
        }
    }

    /// The read-ahead stream `s` after a read wholly in its buffer (up to `frontier`)
    /// consumed everything before `end_lba`.
    pub(super) fn stream_after_hit(
        &self,
        s: Stream,
        frontier: u64,
        t_cmd: f64,
        end_lba: u64,
    ) -> Stream {
        let lbas = self.geo.lbas();
        if frontier < s.limit_lba {
            // The read-ahead is still running: it goes on. Rebase it on
            // the consumed end, so that later look-ups walk only the
            // read-ahead window, not everything streamed since.
            let limit_lba = (end_lba + self.read_ahead_sectors).min(lbas);
            if end_lba > s.stream_lba {
                let done_ns =
                    s.stream_start_ns + self.media_ns(s.stream_lba, end_lba - s.stream_lba);
                Stream {
                    next_lba: end_lba,
                    stream_lba: end_lba,
                    stream_start_ns: done_ns + self.gap_before_ns(end_lba),
                    limit_lba,
                }
            } else {
                Stream {
                    next_lba: end_lba,
                    limit_lba,
                    ..s
                }
            }
        } else {
            // It had stopped at its limit; consuming data restarts it
            // once the sector after the limit comes round again.
            let resume = self.next_pass_ns(t_cmd, s.limit_lba);
            Stream {
                next_lba: end_lba,
                stream_lba: s.limit_lba,
                stream_start_ns: resume,
                limit_lba: (end_lba + self.read_ahead_sectors).min(lbas),
            }
        }
    }

    /// A read the active stream does not serve: a whole or partial hit in a buffered
    /// segment, or a miss that reads the media into a new segment.
    pub(super) fn serve_from_segments(
        &mut self,
        t_cmd: f64,
        lba: u64,
        end_lba: u64,
        host_end: f64,
    ) -> Served {
        // Look for the segment *before* making room for a new one: the
        // read may continue the very segment that room would evict.
        self.stop_read_ahead(t_cmd);
        let seg = self
            .segments
            .iter()
            .position(|s| s.next_lba <= lba && lba < s.end_lba)
            .map(|i| self.segments.remove(i));
        match seg {
            Some(mut s) if end_lba <= s.end_lba => {
                // A whole hit. The head is elsewhere, so the segment does
                // not resume reading ahead; it stays, most recently used,
                // with what is left of it.
                s.next_lba = end_lba;
                if s.next_lba < s.end_lba {
                    self.segments.insert(0, s);
                }
                Served {
                    cache_hit: true,
                    ..Served::at(host_end)
                }
            }
            Some(s) => {
                // A partial hit: the tail comes from the media, and the
                // segment becomes the active read-ahead again (it already
                // counts against `segments`, so nothing is evicted).
                let m = self.media(t_cmd, s.end_lba, end_lba - s.end_lba, false);
                self.start_stream(end_lba, m.end_ns);
                Served {
                    cache_partial_hit: true,
                    ..Served::from_media(&m, host_end)
                }
            }
            None => {
                // A miss: its read-ahead needs a segment of its own.
                self.evict_for_new_segment();
                let m = self.media(t_cmd, lba, end_lba - lba, false);
                self.start_stream(end_lba, m.end_ns);
                Served::from_media(&m, host_end)
            }
        }
    }

    /// Whether a read of `lba` decoded at `t_cmd` would start from the cache: the
    /// active read-ahead serves it (as [`Hdd::serve_cached_read`] decides) or a stopped
    /// segment holds its first sector. Does not change the cache.
    pub(super) fn cache_holds(&self, t_cmd: f64, lba: u64) -> bool {
        let by_stream = self.stream.is_some_and(|s| {
            lba == s.next_lba || (s.next_lba < lba && lba < self.frontier(&s, t_cmd))
        });
        by_stream
            || self
                .segments
                .iter()
                .any(|s| s.next_lba <= lba && lba < s.end_lba)
    }

    /// Where the head is at `t_ns` for a command the cache does not serve: where the
    /// active read-ahead has got to (where [`Hdd::stop_read_ahead`] would leave it),
    /// else where the last media transfer left it.
    pub(super) fn head_at(&self, t_ns: f64) -> (u64, u32) {
        match self.stream {
            Some(s) => {
                let frontier = self.frontier(&s, t_ns);
                if frontier > s.stream_lba {
                    let loc = self.geo.locate(frontier - 1);
                    return (loc.cylinder, loc.surface);
                }
                (self.head_cylinder, self.head_surface)
            }
            None => (self.head_cylinder, self.head_surface),
        }
    }

    /// How far the read-ahead of `s` has got by `t_ns`: sectors before the result are
    /// in the buffer.
    pub(super) fn frontier(&self, s: &Stream, t_ns: f64) -> u64 {
        if t_ns <= s.stream_start_ns || s.stream_lba >= s.limit_lba {
            return s.stream_lba.min(s.limit_lba);
        }
        s.stream_lba
            + self.media_sectors_within(
                s.stream_lba,
                t_ns - s.stream_start_ns,
                s.limit_lba - s.stream_lba,
            )
    }

    /// Time between the end of sector `lba - 1` and the start of sector `lba` in a
    /// streaming transfer: 0 on the same track, the skew across a track boundary.
    pub(super) fn gap_before_ns(&self, lba: u64) -> f64 {
        if lba == 0 || lba >= self.geo.lbas() {
            return 0.0;
        }
        let next = self.geo.locate(lba);
        if next.sector == 0 {
            let prev = self.geo.locate(lba - 1);
            self.geo.skew_after_rev(&prev) * self.geo.rotation_ns()
        } else {
            0.0
        }
    }

    /// Starts the read-ahead after a media read that ended at `end_lba` at `t_ns`.
    pub(super) fn start_stream(&mut self, end_lba: u64, t_ns: f64) {
        let lbas = self.geo.lbas();
        if end_lba >= lbas {
            self.stream = None;
            return;
        }
        self.stream = Some(Stream {
            next_lba: end_lba,
            stream_lba: end_lba,
            stream_start_ns: t_ns + self.gap_before_ns(end_lba),
            limit_lba: (end_lba + self.read_ahead_sectors).min(lbas),
        });
    }

    /// A command the active read-ahead does not serve arrived at `t_ns`: the
    /// read-ahead stops, the head is where it stopped, and what it buffered stays in
    /// its segment, now the most recently used stopped one. Nothing is evicted: the
    /// segment was already counted while it was active.
    pub(super) fn stop_read_ahead(&mut self, t_ns: f64) {
        let Some(s) = self.stream.take() else {
            return;
        };
        let frontier = self.frontier(&s, t_ns);
        if frontier > s.stream_lba {
            self.set_head(frontier - 1);
        }
        // A segment holding nothing unconsumed can serve no read: it is freed.
        if frontier > s.next_lba {
            self.segments.insert(
                0,
                Segment {
                    next_lba: s.next_lba,
                    end_lba: frontier,
                },
            );
        }
    }

    /// A read that no segment serves is about to start a read-ahead of its own: evict
    /// least recently used stopped segments until it fits beside them. Called with no
    /// active read-ahead, and only after the look-up has taken out the segment the
    /// command uses, so that one is never the victim.
    pub(super) fn evict_for_new_segment(&mut self) {
        let active = usize::from(self.stream.is_some());
        let room = self.max_segments.saturating_sub(1 + active);
        self.segments.truncate(room);
    }

    /// The segment bookkeeping is consistent: the active read-ahead and the stopped
    /// segments together use at most `segments`, and each stopped one holds data.
    pub(super) fn segments_within_bounds(&self) -> bool {
        let active = usize::from(self.stream.is_some());
        self.segments.len() + active <= self.max_segments
            && self.segments.iter().all(|s| s.next_lba < s.end_lba)
    }
}
