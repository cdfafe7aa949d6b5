//! Trick play's output for a transport stream: keyframes alone, one after another,
//! as a stream a player shows as smooth fast motion (`play --speed`). Each keyframe
//! goes out as the program's PAT and a PMT that lists the video alone (its PCR on
//! the video PID), then the keyframe's video packets: other PIDs (audio, data, the
//! source's PCR PID) dropped, the PES's PTS (and DTS) set to the time the keyframe is
//! shown, a PCR on the video PID set a little before it, and continuity counters
//! renumbered so that the packets run on without a gap.
//!
//! What cannot be made sense of is left as it is rather than guessed: a head without
//! a one-packet PAT and PMT naming a video stream is refused at [`TrickTs::new`].

use super::es::Codec;

const PACKET: usize = 188;
/// How far the PCR runs ahead of the keyframe's decode time: 100 ms (a decoder
/// buffers at least that).
const PCR_LEAD_90K: i64 = 9000;

/// The MPEG-2 CRC-32 (polynomial 0x04C11DB7, no reflection) of a PSI section.
pub fn crc32_mpeg2(b: &[u8]) -> u32 {
    let mut crc = 0xFFFF_FFFFu32;
    for &x in b {
        crc ^= u32::from(x) << 24;
        for _ in 0..8 {
            crc = if crc & 0x8000_0000 != 0 {
                (crc << 1) ^ 0x04C1_1DB7
            } else {
                crc << 1
            };
        }
    }
    crc
}

fn pid_of(p: &[u8]) -> u16 {
    (u16::from(p[1] & 0x1F) << 8) | u16::from(p[2])
}

/// Where a packet's payload starts, if it has one.
fn payload_start(p: &[u8]) -> Option<usize> {
    let afc = (p[3] >> 4) & 3;
    let start = if afc & 2 != 0 { 5 + p[4] as usize } else { 4 };
    (afc & 1 != 0 && start < PACKET).then_some(start)
}

/// A 33-bit time as a PES header writes it: `marker` in the top nibble.
fn put_ts(b: &mut [u8], marker: u8, t: i64) {
    let t = (t as u64) & ((1 << 33) - 1);
    b[0] = (marker << 4) | (((t >> 30) as u8 & 0x07) << 1) | 1;
    b[1] = (t >> 22) as u8;
    b[2] = (((t >> 15) as u8) << 1) | 1;
    b[3] = (t >> 7) as u8;
    b[4] = ((t as u8) << 1) | 1;
}

/// See the module docs.
#[derive(Debug)]
pub struct TrickTs {
    pat: Vec<u8>,
    pmt: Vec<u8>,
    video_pid: u16,
    pmt_pid: u16,
    /// Next continuity counter of PID 0, the PMT's PID and the video PID.
    cc: [u8; 3],
}

impl TrickTs {
    /// From a stream's head (its PAT and PMT packets, `Indexer::chunk_head`); an
    /// error saying what it lacks.
    pub fn new(head: &[u8]) -> Result<TrickTs, String> {
        let packets: Vec<&[u8]> = head.chunks_exact(PACKET).filter(|p| p[0] == 0x47).collect();
        let section = |p: &[u8]| -> Option<Vec<u8>> {
            let s = payload_start(p)?;
            let pointer = *p.get(s)? as usize;
            let body = p.get(s + 1 + pointer..)?;
            let len = ((usize::from(*body.get(1)?) & 0x0F) << 8) | usize::from(*body.get(2)?);
            body.get(..3 + len).map(<[u8]>::to_vec)
        };
        let pat = packets
            .iter()
            .find(|p| pid_of(p) == 0)
            .ok_or("the head has no PAT")?;
        let pat_s = section(pat).ok_or("the PAT does not fit one packet")?;
        let pmt_pid = pat_s
            .get(8..pat_s.len().saturating_sub(4))
            .unwrap_or(&[])
            .chunks_exact(4)
            .find(|e| (u16::from(e[0]) << 8 | u16::from(e[1])) != 0)
            .map(|e| (u16::from(e[2] & 0x1F) << 8) | u16::from(e[3]))
            .ok_or("the PAT names no program")?;
        let pmt_packet = packets
            .iter()
            .find(|p| pid_of(p) == pmt_pid)
            .ok_or("the head has no PMT")?;
        let s = section(pmt_packet).ok_or("the PMT does not fit one packet")?;
        if s.len() < 16 || s[0] != 0x02 {
            return Err("the PMT is malformed".into());
        }
        let info = ((usize::from(s[10]) & 0x0F) << 8) | usize::from(s[11]);
        let mut i = 12 + info;
        let mut video = None;
        while i + 5 <= s.len() - 4 {
            let es_info = ((usize::from(s[i + 3]) & 0x0F) << 8) | usize::from(s[i + 4]);
            if Codec::from_stream_type(s[i]).is_some() && i + 5 + es_info <= s.len() - 4 {
                video = Some((i, 5 + es_info));
                break;
            }
            i += 5 + es_info;
        }
        let (at, len) = video.ok_or("the PMT lists no H.264, H.265 or MPEG-2 video")?;
        let video_pid = (u16::from(s[at + 1] & 0x1F) << 8) | u16::from(s[at + 2]);
        // The PMT again: the video alone, its PCR on the video PID.
        let mut body = s[..12 + info].to_vec();
        body[8] = 0xE0 | (video_pid >> 8) as u8;
        body[9] = video_pid as u8;
        body.extend_from_slice(&s[at..at + len]);
        let section_len = body.len() - 3 + 4;
        body[1] = (body[1] & 0xF0) | ((section_len >> 8) as u8 & 0x0F);
        body[2] = section_len as u8;
        let crc = crc32_mpeg2(&body);
        body.extend((0..4).map(|k| (crc >> (24 - 8 * k)) as u8));
        let packet = |pid: u16, section: &[u8]| {
            let mut p = vec![0x47, 0x40 | (pid >> 8) as u8, pid as u8, 0x10, 0];
            p.extend_from_slice(section);
            p.resize(PACKET, 0xFF);
            p
        };
        Ok(TrickTs {
            pat: packet(0, &pat_s),
            pmt: packet(pmt_pid, &body),
            video_pid,
            pmt_pid,
            cc: [0; 3],
        })
    }

    pub fn video_pid(&self) -> u16 {
        self.video_pid
    }

    /// The PMT's PID (the source's, kept).
    pub fn pmt_pid(&self) -> u16 {
        self.pmt_pid
    }

    fn stamp(&mut self, p: &mut [u8], which: usize) {
        p[3] = (p[3] & 0xF0) | (self.cc[which] & 0x0F);
        self.cc[which] = self.cc[which].wrapping_add(1);
    }

    /// One keyframe's bytes (its packets, other PIDs among them), shown at media
    /// time `pts_90k`: the packets that go out.
    pub fn keyframe(&mut self, bytes: &[u8], pts_90k: i64) -> Vec<u8> {
        let mut out = Vec::with_capacity(bytes.len() + 2 * PACKET);
        let (mut pat, mut pmt) = (self.pat.clone(), self.pmt.clone());
        self.stamp(&mut pat, 0);
        self.stamp(&mut pmt, 1);
        out.extend_from_slice(&pat);
        out.extend_from_slice(&pmt);
        let mut first = true;
        for p in bytes.chunks_exact(PACKET) {
            if p[0] != 0x47 || pid_of(p) != self.video_pid || pid_of(p) == self.pmt_pid {
                continue;
            }
            let mut p = p.to_vec();
            // A PCR: just before the keyframe is decoded.
            let afc = (p[3] >> 4) & 3;
            if afc & 2 != 0 && p[4] >= 7 && p[5] & 0x10 != 0 {
                let base = ((pts_90k - PCR_LEAD_90K) as u64) & ((1 << 33) - 1);
                p[6] = (base >> 25) as u8;
                p[7] = (base >> 17) as u8;
                p[8] = (base >> 9) as u8;
                p[9] = (base >> 1) as u8;
                p[10] = (((base & 1) as u8) << 7) | 0x7E;
                p[11] = 0;
            }
            if p[1] & 0x40 != 0 && first {
                first = false;
                if let Some(s) = payload_start(&p) {
                    let h = &mut p[s..];
                    if h.len() >= 19 && h[..3] == [0, 0, 1] && h[7] & 0x80 != 0 {
                        match h[7] >> 6 {
                            3 if h[8] >= 10 => {
                                put_ts(&mut h[9..14], 3, pts_90k);
                                put_ts(&mut h[14..19], 1, pts_90k);
                            }
                            _ if h[8] >= 5 => put_ts(&mut h[9..14], 2, pts_90k),
                            _ => {}
                        }
                    }
                }
            }
            if payload_start(&p).is_some() {
                self.stamp(&mut p, 2);
            }
            out.extend_from_slice(&p);
        }
        out
    }
}

/// The PTS a PES header carries, for the tests.
#[cfg(test)]
fn pts_of(h: &[u8]) -> i64 {
    (i64::from(h[9] >> 1) & 7) << 30
        | i64::from(h[10]) << 22
        | i64::from(h[11] >> 1) << 15
        | i64::from(h[12]) << 7
        | i64::from(h[13] >> 1)
}

#[cfg(test)]
mod tests {
    use super::super::synth::stream;
    use super::super::Indexer;
    use super::*;

    #[test]
    fn the_crc_is_mpeg2s() {
        // The check value of CRC-32/MPEG-2.
        assert_eq!(crc32_mpeg2(b"123456789"), 0x0376_E6E7);
    }

    #[test]
    fn keyframes_go_out_video_only_retimed_and_counted_on() {
        let ts = stream(50, 25);
        let mut ix = Indexer::new();
        ix.feed(&ts);
        let head = ix.chunk_head().expect("PAT and PMT");
        let frames = ix.finish();
        let keys: Vec<_> = frames.iter().filter(|f| f.keyframe).collect();
        assert_eq!(keys.len(), 2);
        let mut t = TrickTs::new(&head).unwrap();
        assert_eq!(t.video_pid(), 0x101);
        let mut out = vec![];
        for (i, k) in keys.iter().enumerate() {
            let b = &ts[k.offset as usize..(k.offset + k.len) as usize];
            out.extend(t.keyframe(b, 90_000 + i as i64 * 3600));
        }
        // PAT, PMT, three video packets, twice.
        assert_eq!(out.len(), 2 * 5 * PACKET);
        let pkts: Vec<&[u8]> = out.chunks(PACKET).collect();
        let pids: Vec<u16> = pkts.iter().map(|p| pid_of(p)).collect();
        assert_eq!(pids, [0, 0x100, 0x101, 0x101, 0x101].repeat(2));
        let ccs: Vec<u8> = pkts
            .iter()
            .filter(|p| pid_of(p) == 0x101)
            .map(|p| p[3] & 15)
            .collect();
        assert_eq!(ccs, vec![0, 1, 2, 3, 4, 5]);
        assert_eq!(pts_of(&pkts[2][4..]), 90_000);
        assert_eq!(pts_of(&pkts[7][4..]), 93_600);
        // The PMT's section checks, and it lists the video alone.
        let s = &pkts[1][5..];
        let len = ((usize::from(s[1]) & 0x0F) << 8) | usize::from(s[2]);
        assert_eq!(
            crc32_mpeg2(&s[..3 + len]),
            0,
            "a section with its CRC sums to 0"
        );
        assert_eq!(len, 9 + 5 + 4);
        // The result parses as a stream of its own, two keyframes at the new times.
        let mut again = Indexer::new();
        again.feed(&out);
        let f = again.finish();
        assert_eq!(
            f.iter()
                .map(|f| (f.keyframe, f.pts_90k))
                .collect::<Vec<_>>(),
            vec![(true, 90_000), (true, 93_600)]
        );
    }

    #[test]
    fn a_head_without_tables_is_refused() {
        assert!(TrickTs::new(&[]).is_err());
        assert!(TrickTs::new(&[0x47; 188]).is_err());
    }

    proptest::proptest! {
        /// Any head and any keyframe bytes: no panic; what goes out is whole packets.
        #[test]
        fn any_bytes_make_whole_packets_or_a_refusal(
            head in proptest::collection::vec(proptest::num::u8::ANY, 0..800),
            body in proptest::collection::vec(proptest::num::u8::ANY, 0..2000),
            pts in 0i64..(1 << 34),
        ) {
            // Often a real head, so that the keyframe path runs too.
            let real = {
                let ts = stream(1, 1);
                let mut ix = Indexer::new();
                ix.feed(&ts);
                ix.chunk_head().expect("tables")
            };
            for h in [&head, &real] {
                if let Ok(mut t) = TrickTs::new(h) {
                    let out = t.keyframe(&body, pts);
                    proptest::prop_assert_eq!(out.len() % PACKET, 0);
                    proptest::prop_assert!(out.len() >= 2 * PACKET);
                }
            }
        }
    }
}
