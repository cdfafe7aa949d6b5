//! Recordings made as engine streams ([`SimConfig::stream_recordings`]): the
//! application writes one frame at a time (`Op::StreamWrite` of `rate x frame_ns`
//! bytes, no deadline: a blocking `write` of a camera's muxer) into a stream the
//! engine admitted, and the engine's write-behind decides the disk requests and their
//! deadlines, the partial requests its durability interval makes due included
//! (`engine/stream/recording.rs`). What this measures that the AVFS clients cannot:
//! the disk time of the time-bounded flush.
//!
//! A frame still waiting for buffer room when the next is due holds the next back
//! (one write outstanding, as a blocking `write`); the engine counts the wait as a
//! stall of the stream.

use super::{Client, ClientEv, Host, Purpose};
use crate::engine::{Op, Output, StreamDir, StreamSpec};
use crate::error::Result;

impl Client {
    /// Submits the open of every engine-stream recording (their files are created);
    /// each one's frames start when the engine admits it.
    pub(super) fn open_engine_streams(&mut self, host: &mut impl Host) -> Result<()> {
        for s in 0..self.streams.len() as u32 {
            if self.engine_stream(s) {
                self.open_engine_stream(host, s)?;
            }
        }
        Ok(())
    }

    fn open_engine_stream(&mut self, host: &mut impl Host, s: u32) -> Result<()> {
        let rec = self
            .cfg
            .stream_recordings
            .expect("only called for engine-stream recordings");
        let st = &self.streams[s as usize];
        let rate_bps = st.rate_bps;
        let spec = StreamSpec {
            idle: false,
            dir: StreamDir::Write,
            rate_bps,
            request_bytes: self.cfg.request_bytes,
            buffer_bytes: Some(self.cfg.depth as u64 * self.cfg.request_bytes),
            reserve_bytes: 0,
            start_bytes: 0,
            durable_ns: rec.durable_ns,
        };
        let op = Op::StreamOpen { ino: st.ino, spec };
        self.submit(host, op, None, s, Purpose::StreamOpen { s }, 0)?;
        Ok(())
    }

    /// The open of recording `s` completed: admitted, its first frame is due one frame
    /// time after its phase; refused, the recording never runs (every frame it would
    /// have written counts as a miss, with `recordings_stopped`, and if admission
    /// refused it, `recordings_refused`).
    pub(super) fn engine_stream_opened(
        &mut self,
        host: &mut impl Host,
        s: u32,
        result: Result<Output>,
        now: u64,
    ) {
        match result {
            Ok(Output::Stream(info)) => {
                self.streams[s as usize].sid = Some(info.id);
                let first = self.frame_time(s, 0).max(now);
                host.schedule(first, ClientEv::Issue(s));
            }
            Ok(other) => unreachable!("a stream open gives a stream, not {other:?}"),
            Err(e) => {
                let no_space = matches!(e, crate::error::Error::NoSpace { .. });
                if matches!(e, crate::error::Error::Refused(_)) {
                    self.recordings_refused += 1;
                }
                self.stop_stream(host, s, no_space);
            }
        }
    }

    /// Whether stream `s` is a recording made as an engine stream.
    pub(super) fn engine_stream(&self, s: u32) -> bool {
        self.cfg.stream_recordings.is_some() && self.streams[s as usize].write
    }

    /// When recording `s` writes frame `k`.
    pub(super) fn frame_time(&self, s: u32, k: u64) -> u64 {
        let frame_ns = self.frame_ns();
        self.streams[s as usize].t0_ns % frame_ns.max(1) + (k + 1) * frame_ns
    }

    fn frame_ns(&self) -> u64 {
        self.cfg.stream_recordings.map_or(1, |r| r.frame_ns.max(1))
    }

    /// Writes recording `s`'s next frame now.
    pub(super) fn issue_frame(&mut self, host: &mut impl Host, s: u32, now: u64) -> Result<()> {
        let st = &self.streams[s as usize];
        let sid = st.sid.expect("admitted");
        let k = st.next_k;
        let rate = st.rate_bps;
        let bytes = (rate / 8.0 * self.frame_ns() as f64 / 1e9).round().max(1.0) as usize;
        let op = Op::StreamWrite {
            stream: sid,
            data: self.buf(bytes),
        };
        self.submit(host, op, None, s, Purpose::Stream { s }, now)?;
        let st = &mut self.streams[s as usize];
        st.next_k += 1;
        st.outstanding += 1;
        let next = self.frame_time(s, k + 1).max(now);
        if next < self.cfg.duration_ns {
            host.schedule(next, ClientEv::Issue(s));
        }
        Ok(())
    }
}
