//! Synthetic transport streams for the media modules' unit tests: H.264 access
//! units of a few packets each, PAT and PMT before each keyframe.

/// A transport stream packet of `pid`, starting a PES when `pusi`.
pub fn packet(pid: u16, pusi: bool, cc: u8, payload: &[u8]) -> Vec<u8> {
    let mut p = vec![
        0x47,
        (u8::from(pusi) << 6) | (pid >> 8) as u8,
        pid as u8,
        0x10 | (cc & 15),
    ];
    p.extend_from_slice(payload);
    p.resize(188, 0xFF);
    p
}

fn section(table_id: u8, body: &[u8]) -> Vec<u8> {
    // pointer field, table id, length, then the body and a CRC (not checked).
    let len = body.len() + 5 + 4;
    let mut s = vec![
        0,
        table_id,
        0xB0 | (len >> 8) as u8,
        len as u8,
        0,
        1,
        0xC1,
        0,
        0,
    ];
    s.extend_from_slice(body);
    s.extend_from_slice(&[0, 0, 0, 0]);
    s
}

/// A PES header with a PTS, then an H.264 access unit delimiter and a NAL of `nal`.
fn pes(pts: i64, nal: u8) -> Vec<u8> {
    let p = pts as u64;
    let mut v = vec![0, 0, 1, 0xE0, 0, 0, 0x80, 0x80, 5];
    v.push(0x21 | ((p >> 29) & 0x0E) as u8);
    v.push((p >> 22) as u8);
    v.push(0x01 | ((p >> 14) & 0xFE) as u8);
    v.push((p >> 7) as u8);
    v.push(0x01 | ((p << 1) & 0xFE) as u8);
    v.extend_from_slice(&[0, 0, 0, 1, 0x09, 0xF0, 0, 0, 0, 1, nal, 0x88, 0x84]);
    v
}

/// `frames` frames at 25 fps (a keyframe every `gop`), each three packets, with a
/// PAT and PMT before every keyframe.
pub fn stream(frames: usize, gop: usize) -> Vec<u8> {
    stream_part(0..frames, gop, 0)
}

/// Frames `range` of such a stream whose frame 0 has PTS `pts0` (PTS wrap at 2^33).
pub fn stream_part(range: std::ops::Range<usize>, gop: usize, pts0: i64) -> Vec<u8> {
    let pat = packet(0, true, 0, &section(0x00, &[0, 1, 0xE1, 0x00]));
    let pmt = packet(
        0x100,
        true,
        0,
        &section(0x02, &[0xE1, 0x01, 0xF0, 0, 0x1B, 0xE1, 0x01, 0xF0, 0]),
    );
    let mut out = vec![];
    let mut cc = (range.start * 3) as u8;
    for i in range {
        let key = i % gop == 0;
        if key {
            out.extend_from_slice(&pat);
            out.extend_from_slice(&pmt);
        }
        let nal = if key { 0x65 } else { 0x41 };
        let pts = (pts0 + i as i64 * 3600).rem_euclid(1 << 33);
        out.extend(packet(0x101, true, cc, &pes(pts, nal)));
        for _ in 0..2 {
            cc = cc.wrapping_add(1);
            out.extend(packet(0x101, false, cc, &[0xAB; 184]));
        }
        cc = cc.wrapping_add(1);
    }
    out
}
