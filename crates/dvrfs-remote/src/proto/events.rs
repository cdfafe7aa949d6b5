//! The volume's event log as the daemon sends it (`Request::Events`, `dvrfs events`
//! on a mounted volume): each event in its on-disk record form (FORMAT.md section
//! 10b), so the wire and the disk share one encoder and one decoder, with whether the
//! volume has a log, how many events its ring holds, and what the daemon's open
//! reported about it.

use dvrfs_core::format::events::{decode_event, encode_event, EventRecord, EVENT_BYTES};

use crate::wire::{Dec, DecResult, Enc, Malformed};

/// The log of a mounted volume.
#[derive(Clone, Debug, PartialEq)]
pub struct EventLog {
    /// The volume has an event log (`FEATURE_EVENTS`).
    pub has_log: bool,
    /// Events the ring holds at most.
    pub capacity: u64,
    /// Oldest first.
    pub events: Vec<EventRecord>,
    /// Damage the daemon's open found in the log (skipped blocks and records).
    pub problems: Vec<String>,
}

impl EventLog {
    pub fn encode(&self) -> Vec<u8> {
        let mut e = Enc::default();
        e.bool(self.has_log).u64(self.capacity);
        e.u64(self.events.len() as u64);
        let mut rec = vec![0u8; EVENT_BYTES];
        for ev in &self.events {
            rec.fill(0);
            encode_event(ev, 0, &mut rec);
            e.bytes(&rec);
        }
        e.u64(self.problems.len() as u64);
        for p in &self.problems {
            e.str(p);
        }
        e.buf
    }

    pub fn decode(body: &[u8]) -> DecResult<EventLog> {
        let mut d = Dec::new(body);
        let has_log = d.bool("event log")?;
        let capacity = d.u64("capacity")?;
        let n = d.count("events", EVENT_BYTES)?;
        let mut events = Vec::with_capacity(n);
        for _ in 0..n {
            let rec = d.bytes("event")?;
            if rec.len() != EVENT_BYTES {
                return Err(Malformed(format!(
                    "an event of {} bytes, not {EVENT_BYTES}",
                    rec.len()
                )));
            }
            match decode_event(rec, 0) {
                Ok(Some(ev)) => events.push(ev),
                Ok(None) => return Err(Malformed("an empty event record".into())),
                Err(why) => return Err(Malformed(format!("an event record: {why}"))),
            }
        }
        let m = d.count("problems", 8)?;
        let mut problems = Vec::with_capacity(m);
        for _ in 0..m {
            problems.push(d.string("problem")?);
        }
        d.end("event log")?;
        Ok(EventLog {
            has_log,
            capacity,
            events,
            problems,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dvrfs_core::format::events::What;

    #[test]
    fn an_event_log_goes_over_the_wire_unchanged_and_damage_is_refused() {
        let log = EventLog {
            has_log: true,
            capacity: 992,
            events: vec![
                EventRecord {
                    seq: 7,
                    mono_ns: 5,
                    wall_ns: 1_790_000_000_000_000_000,
                    what: What::Space {
                        up: true,
                        level_pct: 90,
                        used_bytes: 91,
                        data_bytes: 100,
                    },
                    path: vec![],
                    path_cut: false,
                },
                EventRecord {
                    seq: 8,
                    mono_ns: 6,
                    wall_ns: -1,
                    what: What::WriteNoSpace {
                        ino: 4,
                        need_bytes: 1 << 20,
                        free_bytes: 0,
                    },
                    path: b"/cams/cam1.ts".to_vec(),
                    path_cut: true,
                },
            ],
            problems: vec!["event block 3: bad checksum in both copies".into()],
        };
        let body = log.encode();
        assert_eq!(EventLog::decode(&body).unwrap(), log);
        assert!(EventLog::decode(&body[..body.len() - 1]).is_err());
        let mut bad = body.clone();
        bad.push(0);
        assert!(EventLog::decode(&bad).is_err());
    }
}
