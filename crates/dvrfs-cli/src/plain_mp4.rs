//! A plain MP4 recording played or exported from a keyframe (`media::Mp4Remux`):
//! its samples from there go out again as a fragmented MP4, nothing re-encoded,
//! across a stream directory's chunks as one clip. A fragmented MP4 or a transport
//! stream needs none of this: its bytes from a keyframe play as they are.

use dvrfs_core::media::{is_plain_mp4, Mp4Remux};
use dvrfs_remote::Handle;
use sha2::{Digest, Sha256};

use crate::error::{CliError, CliResult};
use crate::recording::{read_range, Pos, Recording};
use crate::seek::mp4_head;

/// One chunk's part of the clip: the remux and the source bytes it reads.
pub struct Piece {
    pub chunk: usize,
    pub remux: Mp4Remux,
    pub start: u64,
    pub end: u64,
}

/// The pieces of recording `rec` from keyframe `from` up to keyframe `to`
/// (exclusive; the end when `None`), when its first chunk there is a plain MP4
/// (`None` otherwise); its init segment comes from that chunk.
pub fn pieces(
    rt: &Handle,
    rec: &Recording,
    from: Pos,
    to: Option<Pos>,
) -> CliResult<Option<Vec<Piece>>> {
    let first = &rec.chunks[from.chunk];
    let head = mp4_head(rt, first.ino, first.size, &first.path)?;
    if !is_plain_mp4(&head) {
        return Ok(None);
    }
    let last = to.map_or(rec.chunks.len() - 1, |p| p.chunk);
    let mut out: Vec<Piece> = vec![];
    for c in from.chunk..=last {
        let chunk = &rec.chunks[c];
        let Some(start_key) = (match c == from.chunk {
            true => Some(rec.entry(from).number),
            false => chunk.keyframes.first().map(|k| k.number),
        }) else {
            continue; // a chunk without a keyframe adds nothing
        };
        let end_key = to.filter(|p| p.chunk == c).map(|p| rec.entry(p).number);
        if end_key.is_some_and(|e| e <= start_key) {
            continue;
        }
        let head = match c == from.chunk {
            true => head.clone(),
            false => mp4_head(rt, chunk.ino, chunk.size, &chunk.path)?,
        };
        let cannot = |why: String| {
            CliError::new(format!(
                "{}: cannot play it from a keyframe: {why}",
                chunk.path
            ))
        };
        if !is_plain_mp4(&head) {
            return Err(cannot(
                "it is a fragmented MP4 after a plain one (the chunks are not one source's)".into(),
            ));
        }
        let mut remux = match out.last() {
            None => Mp4Remux::new(&head),
            Some(p) => p.remux.continuing(&head),
        }
        .map_err(cannot)?;
        remux
            .select(u64::from(start_key), end_key.map(u64::from))
            .map_err(cannot)?;
        let Some((start, end)) = remux.byte_range() else {
            continue;
        };
        out.push(Piece {
            chunk: c,
            remux,
            start,
            end,
        });
    }
    Ok(Some(out))
}

/// Reads piece `p`'s source bytes, handing what its remux puts out to `each`: the
/// SHA-256 of the source bytes read. An error if the remux could not put every
/// fragment out.
pub fn run(
    rt: &Handle,
    rec: &Recording,
    p: &mut Piece,
    each: &mut dyn FnMut(&[u8]) -> CliResult<()>,
) -> CliResult<String> {
    let chunk = &rec.chunks[p.chunk];
    let mut hash = Sha256::new();
    let mut at = p.start;
    read_range(rt, chunk.ino, &chunk.path, p.start, p.end, &mut |b| {
        hash.update(b);
        let out = p.remux.feed(at, b);
        at += b.len() as u64;
        each(&out)
    })?;
    check(&chunk.path, &p.remux)?;
    Ok(crate::chain::hex(&hash.finalize()))
}

/// An error if `remux` left fragments out.
pub fn check(path: &str, remux: &Mp4Remux) -> CliResult<()> {
    if remux.left() == 0 {
        return Ok(());
    }
    Err(CliError::new(format!(
        "{path}: {} fragments of the remuxed clip could not be made: {}",
        remux.left(),
        remux.gave_up().unwrap_or("the file ended before their samples")
    ))
    .hint("`dvrfs get` the file and remux it with ffmpeg (`-c copy -movflags frag_keyframe+empty_moov`)"))
}

/// A playback of pieces (`play`): its bytes come in one position space, each
/// piece's file from its `start` to where the playback ends it (`sizes`: the
/// file's size), and go out remuxed.
pub struct Feed {
    pieces: Vec<Piece>,
    paths: Vec<String>,
    sizes: Vec<u64>,
    idx: usize,
    at: u64,
}

impl Feed {
    pub fn new(rec: &Recording, pieces: Vec<Piece>) -> Feed {
        let at = pieces.first().map_or(0, |p| p.start);
        Feed {
            sizes: pieces.iter().map(|p| rec.chunks[p.chunk].size).collect(),
            paths: pieces
                .iter()
                .map(|p| rec.chunks[p.chunk].path.clone())
                .collect(),
            pieces,
            idx: 0,
            at,
        }
    }

    /// The playback's next bytes: what goes out.
    pub fn feed(&mut self, mut data: &[u8]) -> CliResult<Vec<u8>> {
        let mut out = vec![];
        while !data.is_empty() && self.idx < self.pieces.len() {
            let take = (self.sizes[self.idx] - self.at).min(data.len() as u64) as usize;
            out.extend(self.pieces[self.idx].remux.feed(self.at, &data[..take]));
            self.at += take as u64;
            data = &data[take..];
            if self.at == self.sizes[self.idx] {
                check(&self.paths[self.idx], &self.pieces[self.idx].remux)?;
                self.idx += 1;
                self.at = self.pieces.get(self.idx).map_or(0, |p| p.start);
            }
        }
        Ok(out)
    }

    /// The playback ended: an error if a piece's fragments were left out.
    pub fn finish(&self) -> CliResult<()> {
        for (p, path) in self.pieces.iter().zip(&self.paths).skip(self.idx) {
            check(path, &p.remux)?;
        }
        Ok(())
    }
}
