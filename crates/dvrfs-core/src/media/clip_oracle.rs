//! The oracle of the clip writers' fuzz target (`fuzz/fuzz_targets/clip.rs`), here so
//! that `cargo test` replays its corpus through the same checks without the nightly
//! toolchain (`tests/media.rs`). An input's first byte picks the piece size and how
//! much of the rest is a trick-play head; the checks:
//! - the fragmented-MP4 retimer ([`Mp4Retimer`]) gives the same bytes however its
//!   input is split, and never more than it was given (it rewrites `tfdt`s in place
//!   and drops `sidx`/`mfra`);
//! - the trick-play writer ([`TrickTs`]), given a head it accepts, gives whole
//!   188-byte packets for any keyframe bytes, the PAT and then the PMT first, of
//!   PID 0, the PMT's and the video's only, each with the sync byte.
//!
//! A panic in either is a failure too (the fuzzer catches it).

use super::{Mp4Retimer, TrickTs};

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
