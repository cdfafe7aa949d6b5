//! A transport-stream clip's other streams trimmed to its video (`dvrfs export`).
//!
//! A clip is cut at keyframes, by byte: from the start keyframe's first packet to
//! the end keyframe's. A muxer interleaves audio ahead of the video it goes with
//! (ffmpeg's TS muxer up to 0.7 s), so the bytes before the end keyframe carry
//! audio timed past it, and a player (and ffprobe) counts the clip that much
//! longer than its video. `TsTrim` drops, on every PID but the PAT's, the PMT's and
//! the video's, each PES whose PTS is outside the video's span `[start, end)` (the
//! start keyframe's PTS, the end keyframe's), packet by packet as the bytes go by:
//! a PES is kept or dropped whole, by the PTS in its first packet (a PES without a
//! PTS follows the decision before it). Packets that are not PES (tables, a PCR
//! alone) pass. Times compare modulo 2^33, so a clip across a PTS wrap trims right.
//!
//! The dropped PES are the clip's first or last of their PID, so no continuity gap
//! is left inside a stream. Bytes that are not whole 188-byte packets from the
//! first (the stream lost its alignment) go through unchanged from there on, and
//! [`TsTrim::gave_up`] says why.

use super::TrickTs;
use std::collections::BTreeMap;

const PACKET: usize = 188;
const WRAP: i64 = 1 << 33;

/// `a - b` in 90 kHz ticks, both taken modulo 2^33, in `[-2^32, 2^32)`.
fn ahead(a: i64, b: i64) -> i64 {
    let d = (a - b).rem_euclid(WRAP);
    if d >= WRAP / 2 {
        d - WRAP
    } else {
        d
    }
}

/// The PTS of the PES a packet starts, if it starts one that has a PTS.
fn pes_pts(p: &[u8]) -> Option<i64> {
    if p[1] & 0x40 == 0 {
        return None;
    }
    let afc = (p[3] >> 4) & 3;
    let s = if afc & 2 != 0 { 5 + p[4] as usize } else { 4 };
    if afc & 1 == 0 {
        return None;
    }
    let pl = p.get(s..)?;
    if pl.len() < 14 || pl[..3] != [0, 0, 1] || pl[7] & 0x80 == 0 {
        return None;
    }
    let t = &pl[9..14];
    Some(
        (i64::from(t[0] >> 1) & 0x07) << 30
            | i64::from(t[1]) << 22
            | i64::from(t[2] >> 1) << 15
            | i64::from(t[3]) << 7
            | i64::from(t[4] >> 1),
    )
}

/// See the module docs.
#[derive(Debug)]
pub struct TsTrim {
    video_pid: u16,
    pmt_pid: u16,
    start_90k: i64,
    end_90k: Option<i64>,
    carry: Vec<u8>,
    /// Per PID: whether its current PES is kept.
    keep: BTreeMap<u16, bool>,
    dropped: u64,
    gave_up: Option<String>,
}

impl TsTrim {
    /// For a clip whose head (PAT and PMT) is `head` and whose video spans
    /// `[start_90k, end_90k)` (None: to the end); an error when the head names no
    /// video.
    pub fn new(head: &[u8], start_90k: i64, end_90k: Option<i64>) -> Result<TsTrim, String> {
        let t = TrickTs::new(head)?;
        Ok(TsTrim {
            video_pid: t.video_pid(),
            pmt_pid: t.pmt_pid(),
            start_90k,
            end_90k,
            carry: Vec::new(),
            keep: BTreeMap::new(),
            dropped: 0,
            gave_up: None,
        })
    }

    /// Packets dropped so far.
    pub fn dropped_packets(&self) -> u64 {
        self.dropped
    }

    /// Why the rest went through unchanged, if it did.
    pub fn gave_up(&self) -> Option<&str> {
        self.gave_up.as_deref()
    }

    fn kept(&mut self, p: &[u8]) -> bool {
        let pid = (u16::from(p[1] & 0x1F) << 8) | u16::from(p[2]);
        if pid == 0 || pid == self.pmt_pid || pid == self.video_pid || pid == 0x1FFF {
            return true;
        }
        if let Some(t) = pes_pts(p) {
            let inside =
                ahead(t, self.start_90k) >= 0 && self.end_90k.is_none_or(|e| ahead(t, e) < 0);
            self.keep.insert(pid, inside);
        }
        let keep = self.keep.get(&pid).copied().unwrap_or(true);
        if !keep {
            self.dropped += 1;
        }
        keep
    }

    /// The clip's next bytes: what goes out for them.
    pub fn feed(&mut self, bytes: &[u8]) -> Vec<u8> {
        if self.gave_up.is_some() {
            return bytes.to_vec();
        }
        let mut out = Vec::with_capacity(bytes.len() + PACKET);
        let mut data = std::mem::take(&mut self.carry);
        data.extend_from_slice(bytes);
        let whole = data.len() / PACKET * PACKET;
        for (i, p) in data[..whole].chunks_exact(PACKET).enumerate() {
            if p[0] != 0x47 {
                self.gave_up = Some("a packet without its sync byte".into());
                out.extend_from_slice(&data[i * PACKET..]);
                return out;
            }
            if self.kept(p) {
                out.extend_from_slice(p);
            }
        }
        self.carry = data[whole..].to_vec();
        out
    }

    /// The end of the clip: a packet cut short goes out as it came.
    pub fn finish(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.carry)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::media::synth;

    /// A packet of PID `pid` starting a PES with PTS `pts` (or a continuation).
    fn packet(pid: u16, pts: Option<i64>) -> Vec<u8> {
        let pusi = if pts.is_some() { 0x40 } else { 0 };
        let mut p = vec![0x47, pusi | (pid >> 8) as u8, pid as u8, 0x10];
        if let Some(t) = pts {
            let t = t.rem_euclid(WRAP);
            p.extend_from_slice(&[0, 0, 1, 0xC0, 0, 0, 0x80, 0x80, 5]);
            p.push(0x21 | ((t >> 29) as u8 & 0x0E));
            p.push((t >> 22) as u8);
            p.push(((t >> 14) as u8 & 0xFE) | 1);
            p.push((t >> 7) as u8);
            p.push(((t << 1) as u8) | 1);
        }
        p.resize(PACKET, 0xAA);
        p
    }

    /// A PAT and a PMT naming H.264 on PID 0x101.
    fn head() -> Vec<u8> {
        synth::stream(1, 1)[..2 * PACKET].to_vec()
    }

    #[test]
    fn audio_outside_the_videos_span_is_dropped_whole_and_the_rest_kept() {
        let head = head();
        let (start, end) = (900_000i64, 1_080_000i64);
        let mut clip = head.clone();
        let mut want = head.clone();
        let mut add = |p: Vec<u8>, kept: bool, want: &mut Vec<u8>| {
            clip.extend_from_slice(&p);
            if kept {
                want.extend_from_slice(&p);
            }
        };
        add(packet(0x101, Some(start)), true, &mut want);
        add(packet(0x102, Some(start - 3000)), false, &mut want);
        add(packet(0x102, None), false, &mut want);
        add(packet(0x102, Some(start + 3000)), true, &mut want);
        add(packet(0x102, None), true, &mut want);
        add(packet(0x101, None), true, &mut want);
        add(packet(0x102, Some(end - 1)), true, &mut want);
        add(packet(0x102, Some(end)), false, &mut want);
        add(packet(0x102, None), false, &mut want);
        add(packet(0x101, Some(end - 3600)), true, &mut want);
        for piece in [1, 100, 188, 1000, 1 << 20] {
            let mut t = TsTrim::new(&head, start, Some(end)).unwrap();
            let mut out = vec![];
            for c in clip.chunks(piece) {
                out.extend(t.feed(c));
            }
            out.extend(t.finish());
            assert!(out == want, "split into {piece}-byte pieces");
            assert_eq!(t.dropped_packets(), 4);
            assert_eq!(t.gave_up(), None);
        }
    }

    #[test]
    fn times_compare_across_the_pts_wrap() {
        let head = head();
        // The video spans the wrap: from 2^33 - 1 s to 2^33 + 1 s, unwrapped.
        let (start, end) = (WRAP - 90_000, WRAP + 90_000);
        let mut t = TsTrim::new(&head, start, Some(end)).unwrap();
        let inside = packet(0x102, Some(WRAP + 45_000)); // written wrapped: 45,000
        let after = packet(0x102, Some(WRAP + 135_000));
        let out = t.feed(&[inside.clone(), after].concat());
        assert!(out == inside);
    }

    #[test]
    fn bytes_out_of_step_go_through_unchanged() {
        let head = head();
        let mut t = TsTrim::new(&head, 0, Some(90_000)).unwrap();
        let mut clip = packet(0x102, Some(200_000));
        clip.extend_from_slice(&[0u8; 300]);
        clip.extend(packet(0x102, Some(300_000)));
        let out = t.feed(&clip);
        assert_eq!(out.len(), clip.len() - PACKET);
        assert!(t.gave_up().is_some());
        assert!(TsTrim::new(b"not a head", 0, None).is_err());
    }
}
