//! MPEG transport streams (ISO/IEC 13818-1): 188-byte packets, the program
//! association table (PID 0) naming the first program's map, the map naming its video
//! PID, and on that PID one PES per access unit, as cameras, broadcast and ffmpeg
//! write them: a frame starts at the packet with `payload_unit_start_indicator` set,
//! its time is the PES header's PTS, and whether it is a keyframe comes from its
//! elementary stream (`es.rs`).
//!
//! Sync: packets are read where the sync byte 0x47 repeats at 188-byte spacing. Out
//! of sync (garbage, a torn write, a splice), bytes are skipped until three packets
//! in a row start with it again ([`SYNC_PACKETS`]); the frame being assembled when
//! sync was lost is dropped (its bytes are not all known), the next one starts
//! cleanly at its own start packet.
//!
//! Bounds: at most [`CARRY_BYTES`] are held between feeds, a table section at most
//! [`MAX_SECTION_BYTES`]; frames wait in an output queue only until drained (a driver
//! drains after every feed).

use super::es::{Codec, KeyScan};
use super::{Counters, Frame, MAX_PTS_STEP_90K};

pub const PACKET: usize = 188;
const SYNC: u8 = 0x47;
/// Packets in a row that must start with the sync byte to (re)gain sync.
const SYNC_PACKETS: usize = 3;
/// Bytes held between feeds: a partial packet, or the look-ahead of a resync.
const CARRY_BYTES: usize = SYNC_PACKETS * PACKET;
/// A PSI section is at most 1,024 bytes (section_length is 10 bits for PAT and PMT).
const MAX_SECTION_BYTES: usize = 1024;
/// 2^33: the PTS counter's range.
const PTS_WRAP: i64 = 1 << 33;

/// Whether `head` (the file's first bytes) is a transport stream: the sync byte at
/// three consecutive packets from the start, or from a shift within the first
/// packet (a file cut mid-packet).
pub fn looks_like_ts(head: &[u8]) -> bool {
    (0..PACKET).any(|s| (0..SYNC_PACKETS).all(|k| head.get(s + k * PACKET) == Some(&SYNC)))
}

/// The access unit being assembled.
#[derive(Debug)]
struct Open {
    offset: u64,
    pts_90k: Option<i64>,
    discontinuity: bool,
    scan: KeyScan,
}

#[derive(Debug)]
pub struct TsParser {
    /// Bytes of the file before `carry` (the offset of `carry[0]`).
    pos: u64,
    carry: Vec<u8>,
    synced: bool,
    pmt_pid: Option<u16>,
    video: Option<(u16, Codec)>,
    /// A PSI section being gathered: its PID and bytes.
    section: Option<(u16, Vec<u8>)>,
    /// The transport packets of the section being gathered, and of the last PAT and
    /// PMT that named the program and its video (what a chunk cut at a keyframe
    /// starts with, [`TsParser::tables`]).
    section_packets: Vec<u8>,
    pat_packets: Vec<u8>,
    pmt_packets: Vec<u8>,
    open: Option<Open>,
    /// The transport's discontinuity flag was seen on the video PID since the last
    /// frame started.
    flagged: bool,
    next_number: u64,
    /// PTS unwrapping: the last raw PTS and the multiple of 2^33 added to it.
    last_raw_pts: Option<i64>,
    wraps: i64,
    last_pts: Option<i64>,
    out: Vec<Frame>,
    counters: Counters,
}

impl TsParser {
    pub fn new() -> TsParser {
        TsParser {
            pos: 0,
            carry: Vec::with_capacity(CARRY_BYTES + PACKET),
            synced: false,
            pmt_pid: None,
            video: None,
            section: None,
            section_packets: Vec::new(),
            pat_packets: Vec::new(),
            pmt_packets: Vec::new(),
            open: None,
            flagged: false,
            next_number: 0,
            last_raw_pts: None,
            wraps: 0,
            last_pts: None,
            out: Vec::new(),
            counters: Counters::default(),
        }
    }

    pub fn codec(&self) -> Option<Codec> {
        self.video.map(|v| v.1)
    }

    pub fn video_pid(&self) -> Option<u16> {
        self.video.map(|v| v.0)
    }

    pub fn counters(&self) -> Counters {
        self.counters
    }

    pub fn drain(&mut self) -> Vec<Frame> {
        std::mem::take(&mut self.out)
    }

    pub fn feed(&mut self, mut bytes: &[u8]) {
        self.counters.fed_bytes += bytes.len() as u64;
        // Whole packets straight from the input while in sync and nothing is carried.
        while !bytes.is_empty() {
            if self.carry.is_empty() && self.synced && bytes.len() >= PACKET {
                if bytes[0] == SYNC {
                    let (p, rest) = bytes.split_at(PACKET);
                    self.packet(p, self.pos);
                    self.pos += PACKET as u64;
                    bytes = rest;
                    continue;
                }
                self.lose_sync();
            }
            // Otherwise through the carry buffer, which never holds more than
            // CARRY_BYTES + a packet.
            let room = CARRY_BYTES + PACKET - self.carry.len();
            let take = room.min(bytes.len());
            self.carry.extend_from_slice(&bytes[..take]);
            bytes = &bytes[take..];
            self.process_carry();
        }
    }

    /// Packets from the carry buffer, or a resync in it.
    fn process_carry(&mut self) {
        loop {
            if self.synced {
                if self.carry.len() < PACKET {
                    return;
                }
                if self.carry[0] != SYNC {
                    self.lose_sync();
                    continue;
                }
                let p: Vec<u8> = self.carry.drain(..PACKET).collect();
                self.packet(&p, self.pos);
                self.pos += PACKET as u64;
            } else {
                // A sync byte repeated at SYNC_PACKETS packets, with all of them here.
                let need = (SYNC_PACKETS - 1) * PACKET + 1;
                if self.carry.len() < need {
                    return;
                }
                let found = (0..=self.carry.len() - need)
                    .find(|&s| (0..SYNC_PACKETS).all(|k| self.carry[s + k * PACKET] == SYNC));
                let skip = match found {
                    Some(s) => {
                        self.synced = true;
                        s
                    }
                    // Keep what could still start a run of packets.
                    None => self.carry.len() - (need - 1),
                };
                self.counters.skipped_bytes += skip as u64;
                self.carry.drain(..skip);
                self.pos += skip as u64;
                if !self.synced {
                    return;
                }
            }
        }
    }

    fn lose_sync(&mut self) {
        self.synced = false;
        self.counters.resyncs += 1;
        // The frame being assembled lost bytes: it is not reported.
        self.open = None;
        self.section = None;
    }

    /// One 188-byte packet at file offset `at`.
    fn packet(&mut self, p: &[u8], at: u64) {
        debug_assert_eq!(p.len(), PACKET);
        let pusi = p[1] & 0x40 != 0;
        let pid = (u16::from(p[1] & 0x1F) << 8) | u16::from(p[2]);
        let afc = (p[3] >> 4) & 0x03;
        let mut start = 4;
        let mut discontinuity = false;
        if afc & 0x02 != 0 {
            let len = p[4] as usize;
            if 5 + len > PACKET {
                self.counters.bad_packets += 1;
                return;
            }
            if len > 0 {
                discontinuity = p[5] & 0x80 != 0;
            }
            start = 5 + len;
        }
        let payload: &[u8] = if afc & 0x01 != 0 { &p[start..] } else { &[] };
        if pid == 0 || Some(pid) == self.pmt_pid {
            self.psi(pid, pusi, payload, p);
        } else if Some(pid) == self.video_pid() {
            if discontinuity {
                self.flagged = true;
            }
            self.video_packet(pusi, payload, at);
        }
    }

    /// A packet of the PAT or the PMT: gathers the section, then reads it.
    fn psi(&mut self, pid: u16, pusi: bool, payload: &[u8], packet: &[u8]) {
        if pusi {
            self.section_packets.clear();
        }
        if self.section_packets.len() + PACKET <= MAX_SECTION_BYTES + 2 * PACKET {
            self.section_packets.extend_from_slice(packet);
        }
        if pusi {
            let Some(&pointer) = payload.first() else {
                self.counters.bad_packets += 1;
                return;
            };
            let Some(body) = payload.get(1 + pointer as usize..) else {
                self.counters.bad_packets += 1;
                return;
            };
            self.section = Some((pid, body.to_vec()));
        } else if let Some((spid, buf)) = &mut self.section {
            if *spid != pid || buf.len() + payload.len() > MAX_SECTION_BYTES {
                self.section = None;
                self.counters.bad_packets += 1;
                return;
            }
            buf.extend_from_slice(payload);
        } else {
            return;
        }
        let Some((spid, buf)) = &self.section else {
            return;
        };
        if buf.len() < 3 {
            return;
        }
        let length = ((usize::from(buf[1]) & 0x0F) << 8) | usize::from(buf[2]);
        if 3 + length > MAX_SECTION_BYTES {
            self.section = None;
            self.counters.bad_packets += 1;
            return;
        }
        if buf.len() < 3 + length {
            return; // more packets to come
        }
        let section = buf[..3 + length].to_vec();
        let spid = *spid;
        self.section = None;
        let packets = std::mem::take(&mut self.section_packets);
        if spid == 0 {
            if self.pat(&section) {
                self.pat_packets = packets;
            }
        } else if self.pmt(&section) {
            self.pmt_packets = packets;
        }
    }

    /// The program association table: the first program's map PID; whether it
    /// named one.
    fn pat(&mut self, s: &[u8]) -> bool {
        // table_id 0; 8 bytes of header, entries of 4, a CRC of 4 at the end.
        if s[0] != 0x00 || s.len() < 12 {
            self.counters.bad_packets += 1;
            return false;
        }
        for e in s[8..s.len() - 4].chunks_exact(4) {
            let program = (u16::from(e[0]) << 8) | u16::from(e[1]); // MPEG fields are big-endian
            let pid = (u16::from(e[2] & 0x1F) << 8) | u16::from(e[3]);
            if program != 0 {
                self.pmt_pid = Some(pid);
                return true;
            }
        }
        false
    }

    /// The program map: the first video stream of a kind [`Codec`] knows; whether
    /// it has one.
    fn pmt(&mut self, s: &[u8]) -> bool {
        if s[0] != 0x02 || s.len() < 16 {
            self.counters.bad_packets += 1;
            return false;
        }
        let info = ((usize::from(s[10]) & 0x0F) << 8) | usize::from(s[11]);
        let mut i = 12 + info;
        let end = s.len() - 4;
        while i + 5 <= end {
            let stream_type = s[i];
            let pid = (u16::from(s[i + 1] & 0x1F) << 8) | u16::from(s[i + 2]);
            let es_info = ((usize::from(s[i + 3]) & 0x0F) << 8) | usize::from(s[i + 4]);
            if let Some(codec) = Codec::from_stream_type(stream_type) {
                if self.video.map(|v| v.0) != Some(pid) {
                    self.video = Some((pid, codec));
                    self.open = None;
                }
                return true;
            }
            i += 5 + es_info;
        }
        false
    }

    /// The transport packets of the last PAT and PMT that named the program and its
    /// video: what a file cut from this stream at a keyframe must start with to play
    /// on its own.
    pub fn tables(&self) -> Option<Vec<u8>> {
        if self.pat_packets.is_empty() || self.pmt_packets.is_empty() {
            return None;
        }
        Some([&self.pat_packets[..], &self.pmt_packets[..]].concat())
    }

    /// Every frame reported from now on starts at or after this offset: the open
    /// frame's start, or the first byte not yet parsed.
    pub fn settled(&self) -> u64 {
        self.open.as_ref().map_or(self.pos, |o| o.offset)
    }

    /// A packet of the video PID.
    fn video_packet(&mut self, pusi: bool, payload: &[u8], at: u64) {
        let Some((_, codec)) = self.video else { return };
        if pusi {
            self.close(at);
            let (pts, es) = pes_header(payload);
            let pts_90k = pts.map(|raw| self.unwrap_pts(raw));
            let mut scan = KeyScan::new(codec);
            scan.scan(es);
            self.open = Some(Open {
                offset: at,
                pts_90k,
                discontinuity: std::mem::take(&mut self.flagged),
                scan,
            });
        } else if let Some(o) = &mut self.open {
            o.scan.scan(payload);
        }
    }

    /// The open frame ends where the next one (or the file) starts.
    fn close(&mut self, end: u64) {
        let Some(o) = self.open.take() else { return };
        let pts = o.pts_90k.or(self.last_pts).unwrap_or(0);
        let jumped = self
            .last_pts
            .is_some_and(|last| (pts - last).abs() > MAX_PTS_STEP_90K);
        self.last_pts = Some(pts);
        self.out.push(Frame {
            offset: o.offset,
            data_offset: o.offset,
            len: end - o.offset,
            number: self.next_number,
            pts_90k: pts,
            keyframe: o.scan.keyframe(),
            discontinuity: o.discontinuity || jumped,
        });
        self.next_number += 1;
    }

    /// A 33-bit PTS made monotonic across its wrap (every 26.5 hours).
    fn unwrap_pts(&mut self, raw: i64) -> i64 {
        if let Some(last) = self.last_raw_pts {
            let d = raw - last;
            if d < -(PTS_WRAP / 2) {
                self.wraps += 1;
            } else if d > PTS_WRAP / 2 && self.wraps > 0 {
                self.wraps -= 1; // a frame from before the wrap (B-frame order)
            }
        }
        self.last_raw_pts = Some(raw);
        raw + self.wraps * PTS_WRAP
    }

    /// Goes on parsing at file offset `offset`, the packet that starts the frame
    /// numbered `number` whose PTS unwraps to `pts_90k` (a keyframe stored before:
    /// `KeyframeBuilder::resume_at`): what was carried or being assembled is
    /// dropped, the tables stay. Whether it can: the program map named the video.
    pub fn resume_at(&mut self, offset: u64, number: u64, pts_90k: i64) -> bool {
        if self.video.is_none() {
            return false;
        }
        self.pos = offset;
        self.carry.clear();
        self.synced = true;
        self.section = None;
        self.section_packets.clear();
        self.open = None;
        self.flagged = false;
        self.next_number = number;
        self.last_raw_pts = Some(pts_90k.rem_euclid(PTS_WRAP));
        self.wraps = pts_90k.div_euclid(PTS_WRAP);
        self.last_pts = Some(pts_90k);
        self.out.clear();
        true
    }

    /// The end of the file.
    pub fn finish(&mut self) {
        let end = self.pos + self.carry.len() as u64;
        self.close(end);
    }
}

/// A PES header's PTS and the elementary-stream bytes after it, from a start packet's
/// payload; no PTS when the header is not a PES header with one, or does not fit.
fn pes_header(payload: &[u8]) -> (Option<i64>, &[u8]) {
    if payload.len() < 9 || payload[..3] != [0, 0, 1] {
        return (None, payload);
    }
    let header_len = payload[8] as usize;
    let es = payload.get(9 + header_len..).unwrap_or(&[]);
    let has_pts = payload[7] & 0x80 != 0;
    if !has_pts || header_len < 5 || payload.len() < 14 {
        return (None, es);
    }
    let b = &payload[9..14];
    let pts = (i64::from(b[0] >> 1) & 0x07) << 30
        | i64::from(b[1]) << 22
        | i64::from(b[2] >> 1) << 15
        | i64::from(b[3]) << 7
        | i64::from(b[4] >> 1);
    (Some(pts), es)
}
