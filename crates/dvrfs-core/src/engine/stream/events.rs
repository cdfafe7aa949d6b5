//! What a stream's life tells the operator: `stream_admitted` and `stream_refused`
//! when it is opened (with the rate that would fit, from admission), `stream_ended`
//! with its figures or `stream_failed` with the errno when it goes
//! (`engine/events.rs` has the rest; FORMAT.md section 10b the bytes).

use super::super::{Engine, Now, Output};
use super::{Stream, StreamDir, StreamSpec};
use crate::error::{Error, Result};
use crate::format::events::{Dir, What};
use crate::meta::Ino;

/// A stream's direction as events store it.
fn event_dir(d: StreamDir) -> Dir {
    match d {
        StreamDir::Read => Dir::Read,
        StreamDir::Write => Dir::Write,
    }
}

impl Engine {
    /// `StreamOpen`: admits the stream or says why not, and records which
    /// (`stream_admitted`, `stream_refused` events).
    pub(in crate::engine) fn stream_open(
        &mut self,
        ino: Ino,
        spec: StreamSpec,
        now: Now,
    ) -> Result<Output> {
        use crate::format::events::RefuseCause;
        let busy = spec.dir == StreamDir::Write && self.recording_on(ino).is_some();
        let result = self.stream_admit(ino, &spec, now);
        let what = match &result {
            Ok(Output::Stream(i)) => What::StreamAdmitted {
                ino,
                dir: event_dir(i.dir),
                rate_bps: (i.rate_bytes_per_s * 8.0).round() as u64,
                request_bytes: i.request_bytes,
                buffer_bytes: i.buffer_bytes,
                durable_ns: i.durable_ns,
                reserved_bytes: i.reserved_bytes,
            },
            Ok(_) => unreachable!("an open gives a stream"),
            // Not a file of this volume: nothing happened to a file.
            Err(Error::NotFound(_)) => return result,
            Err(e) => What::StreamRefused {
                ino,
                dir: event_dir(spec.dir),
                cause: match e {
                    // A second recording on the file: not the disk's capacity.
                    Error::Refused(_) if busy => RefuseCause::Other,
                    Error::Refused(_) if self.admission.is_some() => RefuseCause::Capacity,
                    Error::NoSpace { .. } | Error::SpaceNotKept(_) => RefuseCause::NoSpace,
                    _ => RefuseCause::Other,
                },
                rate_bps: spec.rate_bps.max(0.0).min(u64::MAX as f64) as u64,
                fits_bps: match e {
                    Error::Refused(_) if !busy => (self.admission_headroom(&spec) * 8.0) as u64,
                    _ => 0,
                },
            },
        };
        self.vol.push_event(now.mono_ns, now.wall_ns, what);
        result
    }

    /// The rate (bytes/s) a stream like `spec` would be admitted at now (0: none).
    fn admission_headroom(&self, spec: &StreamSpec) -> f64 {
        let Some(adm) = &self.admission else {
            return 0.0;
        };
        let (admitted, load) = self.plan(adm, spec);
        adm.headroom(&admitted, load).max(0.0)
    }

    /// A stream went: `stream_failed` if a write behind it failed, else
    /// `stream_ended` with its figures.
    pub(super) fn stream_end_event(&mut self, s: &Stream, now: Now) {
        let (ino, dir) = (s.info.ino, event_dir(s.info.dir));
        let what = match s.errno {
            Some(errno) => What::StreamFailed { ino, dir, errno },
            None => What::StreamEnded {
                ino,
                dir,
                bytes: s.stats.app_bytes,
                requests: s.stats.requests,
                late: s.stats.late,
                no_space: s.stats.no_space,
                durability_late: s.stats.durability_late,
            },
        };
        self.vol.push_event(now.mono_ns, now.wall_ns, what);
    }
}
