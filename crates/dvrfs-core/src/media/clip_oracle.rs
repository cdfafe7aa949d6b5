//! The oracle of the clip writers' fuzz target (`fuzz/fuzz_targets/clip.rs`), here so
//! that `cargo test` replays its corpus through the same checks without the nightly
//! toolchain (`tests/media.rs`). An input's first byte picks the piece size and how
//! much of the rest is a trick-play head; the checks:
//! - the fragmented-MP4 retimer ([`Mp4Retimer`]) gives the same bytes however its
//!   input is split, and never more than it was given (it rewrites `tfdt`s in place
//!   and drops `sidx`/`mfra`);
//! - the trick-play writer ([`TrickTs`]), given a head it accepts, gives whole
//!   188-byte packets for any keyframe bytes, the PAT and then the PMT first, of
//!   PID 0, the PMT's and the video's only, each with the sync byte;
//! - the transport-stream clip trim ([`TsTrim`]), given the same head, gives the
//!   same bytes however its input is split, never more than it was given, and
//!   drops no packet of PID 0, the PMT's or the video's.
//!
//! A panic in either is a failure too (the fuzzer catches it).

use super::{Mp4Retimer, TrickTs, TsTrim};

const PACKET: usize = 188;

fn retimed(data: &[u8], piece: usize) -> Vec<u8> {
    let mut r = Mp4Retimer::new();
    let mut out = Vec::new();
    for chunk in data.chunks(piece.max(1)) {
        out.extend(r.feed(chunk));
    }
    out.extend(r.finish());
    out
}

fn pid(p: &[u8]) -> u16 {
    (u16::from(p[1] & 0x1F) << 8) | u16::from(p[2])
}

/// Checks one input (see the module docs); what is wrong, if anything.
pub fn check(data: &[u8]) -> Result<(), String> {
    let Some((&sel, rest)) = data.split_first() else {
        return Ok(());
    };
    let piece = 1 + usize::from(sel) * 5;
    let whole = retimed(rest, rest.len());
    if whole != retimed(rest, piece) {
        return Err(format!(
            "retime: split into {piece}-byte pieces, other bytes"
        ));
    }
    if whole.len() > rest.len() {
        return Err(format!(
            "retime: {} bytes out of {}",
            whole.len(),
            rest.len()
        ));
    }
    let head_len = (usize::from(sel % 8) + 1) * PACKET;
    let (head, body) = rest.split_at(head_len.min(rest.len()));
    let Ok(mut t) = TrickTs::new(head) else {
        return Ok(());
    };
    // The clip's audio trim: split-invariant, never growing, nothing of the tables
    // or the video dropped.
    let span = (
        i64::from(sel) * 90_000,
        Some(i64::from(sel) * 90_000 + 900_000),
    );
    let trimmed = |piece: usize| {
        let mut tr = TsTrim::new(head, span.0, span.1).expect("TrickTs took the head");
        let mut out = Vec::new();
        for c in rest.chunks(piece.max(1)) {
            out.extend(tr.feed(c));
        }
        out.extend(tr.finish());
        out
    };
    let whole_trim = trimmed(rest.len());
    if whole_trim != trimmed(piece) {
        return Err(format!(
            "ts trim: split into {piece}-byte pieces, other bytes"
        ));
    }
    if whole_trim.len() > rest.len() {
        return Err(format!(
            "ts trim: {} bytes out of {}",
            whole_trim.len(),
            rest.len()
        ));
    }
    let aligned = rest.len() % PACKET == 0 && rest.chunks_exact(PACKET).all(|x| x[0] == 0x47);
    let count = |b: &[u8], p: u16| b.chunks_exact(PACKET).filter(|x| pid(x) == p).count();
    for p in [0, t.pmt_pid(), t.video_pid()] {
        if aligned && count(&whole_trim, p) != count(rest, p) {
            return Err(format!("ts trim: a packet of PID {p} dropped"));
        }
    }
    let allowed = [0, t.pmt_pid(), t.video_pid()];
    for (k, part) in body.chunks(piece).take(4).enumerate() {
        let out = t.keyframe(part, i64::from(sel) * 3600 * k as i64);
        if out.len() % PACKET != 0 || out.len() < 2 * PACKET {
            return Err(format!("trick play: {} bytes out", out.len()));
        }
        if pid(&out[..PACKET]) != 0 || pid(&out[PACKET..2 * PACKET]) != t.pmt_pid() {
            return Err("trick play: not the PAT and PMT first".into());
        }
        for p in out.chunks(PACKET) {
            if p[0] != 0x47 || !allowed.contains(&pid(p)) {
                return Err(format!("trick play: a packet of PID {}", pid(p)));
            }
        }
    }
    Ok(())
}
