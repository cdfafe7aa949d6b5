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
//!   drops no packet of PID 0, the PMT's or the video's;
//! - the MP4 trick-play writer ([`TrickMp4`]), given the input as a head it
//!   accepts, makes a keyframe the parser reads back as one keyframe of its bytes;
//!   a plain MP4's remux ([`Mp4Remux`]) of the input gives the same bytes however
//!   it is split.
//!
//! A panic in either is a failure too (the fuzzer catches it).

use super::{Indexer, Mp4Remux, Mp4Retimer, TrickMp4, TrickTs, TsTrim};

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

/// The MP4 writers, given `data` as a head: a trick-play keyframe after the init
/// segment [`TrickMp4`] makes is read back by the parser as one keyframe of the
/// sample's bytes; a plain MP4's remux ([`Mp4Remux`]) of `data` as the file gives
/// the same bytes however its input is split.
fn mp4_writers(data: &[u8], sel: u8, piece: usize) -> Result<(), String> {
    if let Ok(mut t) = TrickMp4::new(data) {
        let sample = &data[..data.len().min(usize::from(sel) * 3)];
        let mut file = t.init_segment().to_vec();
        file.extend(t.keyframe(sample, i64::from(sel) * 3600, 3600));
        let mut ix = Indexer::new();
        ix.feed(&file);
        let mut frames = ix.drain();
        frames.extend(ix.finish()); // a file this short is told apart at its end
        let one = match frames.as_slice() {
            [f] => f.keyframe && f.len == sample.len() as u64,
            _ => false,
        };
        if !one {
            return Err(format!("trick mp4: read back as {frames:?}"));
        }
    }
    let Ok(mut r) = Mp4Remux::new(data) else {
        return Ok(());
    };
    if r.select(u64::from(sel % 4), None).is_err() {
        return Ok(());
    }
    let Some((lo, hi)) = r.byte_range() else {
        return Ok(());
    };
    let (lo, hi) = (lo.min(data.len() as u64), hi.min(data.len() as u64));
    let again = |r: &Mp4Remux, piece: usize| {
        let mut r = r.clone();
        let mut out = vec![];
        let mut at = lo;
        for c in data[lo as usize..hi as usize].chunks(piece.max(1)) {
            out.extend(r.feed(at, c));
            at += c.len() as u64;
        }
        (out, r.left())
    };
    if again(&r, data.len()) != again(&r, piece) {
        return Err(format!(
            "remux: split into {piece}-byte pieces, other bytes"
        ));
    }
    let _ = r.feed(lo, &data[lo as usize..hi as usize]);
    Ok(())
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
    mp4_writers(rest, sel, piece)?;
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
