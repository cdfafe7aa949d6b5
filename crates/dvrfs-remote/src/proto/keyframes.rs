//! A file's frame index on the wire: the keyframes of `Op::AppendFrames` and of a
//! `Keyframes` request's answer (`play --from` through the daemon).

use dvrfs_core::format::frame_index::FrameEntry;

use crate::wire::{Dec, DecResult, Enc};

/// Bytes of one keyframe on the wire, at least (its fields, fixed width).
const ENTRY_WIRE_BYTES: usize = 40;

/// A count, then each keyframe's fields.
pub(super) fn encode_entries(e: &mut Enc, entries: &[FrameEntry]) {
    e.u64(entries.len() as u64);
    for k in entries {
        e.u64(k.offset)
            .u32(k.data_delta)
            .u32(k.len)
            .u32(k.number)
            .u32(k.flags)
            .i64(k.pts_90k)
            .i64(k.utc_ns);
    }
}

pub(super) fn decode_entries(d: &mut Dec) -> DecResult<Vec<FrameEntry>> {
    let n = d.count("keyframes", ENTRY_WIRE_BYTES)?;
    let mut entries = Vec::with_capacity(n);
    for _ in 0..n {
        entries.push(FrameEntry {
            offset: d.u64("offset")?,
            data_delta: d.u32("data delta")?,
            len: d.u32("len")?,
            number: d.u32("number")?,
            flags: d.u32("flags")?,
            pts_90k: d.i64("pts")?,
            utc_ns: d.i64("utc")?,
        });
    }
    Ok(entries)
}

/// A file's index as a `Keyframes` request answers it (in a `Bytes` reply).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Keyframes {
    /// The index covers every keyframe of the file's data.
    pub complete: bool,
    pub entries: Vec<FrameEntry>,
}

/// The last keyframe at or before UTC `utc_ns` across a stream's chunks (each
/// chunk's keyframes, the chunks in name order, which `record --chunk` makes time
/// order): (chunk, keyframe). The chunk is the last whose first keyframe is at or
/// before the moment; a chunk without an index is passed over. None before the
/// stream's first keyframe.
pub fn seek_chunks_time(chunks: &[&[FrameEntry]], utc_ns: i64) -> Option<(usize, usize)> {
    let chunk = chunks
        .iter()
        .rposition(|c| c.first().is_some_and(|k| k.utc_ns <= utc_ns))?;
    let keys = chunks[chunk];
    Some((chunk, keys.partition_point(|k| k.utc_ns <= utc_ns) - 1))
}

impl Keyframes {
    /// File `ino`'s index in volume `v`.
    pub fn of(v: &dvrfs_core::Volume, ino: dvrfs_core::meta::Ino) -> dvrfs_core::Result<Keyframes> {
        Ok(Keyframes {
            complete: v.frame_info(ino)?.complete,
            entries: v
                .frame_index(ino)?
                .map(|ix| ix.entries().to_vec())
                .unwrap_or_default(),
        })
    }

    /// The keyframes in file order.
    pub fn iter(&self) -> std::slice::Iter<'_, FrameEntry> {
        self.entries.iter()
    }

    /// The last keyframe at or before frame `frame` (where a reader starts to show
    /// it): its index and entry; None without an index or before the first.
    pub fn seek_frame(&self, frame: u64) -> Option<(usize, &FrameEntry)> {
        let k = self
            .entries
            .partition_point(|e| u64::from(e.number) <= frame)
            .checked_sub(1)?;
        Some((k, &self.entries[k]))
    }

    /// The last keyframe at or before UTC `utc_ns`: its index and entry.
    pub fn seek_time(&self, utc_ns: i64) -> Option<(usize, &FrameEntry)> {
        let k = self
            .entries
            .partition_point(|e| e.utc_ns <= utc_ns)
            .checked_sub(1)?;
        Some((k, &self.entries[k]))
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut e = Enc::default();
        e.bool(self.complete);
        encode_entries(&mut e, &self.entries);
        e.buf
    }

    pub fn decode(body: &[u8]) -> DecResult<Keyframes> {
        let mut d = Dec::new(body);
        let complete = d.bool("complete")?;
        let entries = decode_entries(&mut d)?;
        d.end("keyframes")?;
        Ok(Keyframes { complete, entries })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keyframes_cross_the_wire_unchanged_and_a_cut_body_is_refused() {
        let k = Keyframes {
            complete: false,
            entries: (0..3u32)
                .map(|i| FrameEntry {
                    offset: u64::from(i) * 1_000_000,
                    data_delta: i,
                    len: 5_000 + i,
                    number: i * 25,
                    flags: i,
                    pts_90k: -5 + i64::from(i) * 90_000,
                    utc_ns: 1_795_000_000_000_000_000 + i64::from(i),
                })
                .collect(),
        };
        let b = k.encode();
        assert_eq!(Keyframes::decode(&b).unwrap(), k);
        assert!(Keyframes::decode(&b[..b.len() - 1]).is_err());
        let mut longer = b.clone();
        longer.push(0);
        assert!(Keyframes::decode(&longer).is_err());
        // Seeks: the keyframe at or before.
        assert_eq!(k.seek_frame(30).map(|x| x.0), Some(1));
        assert_eq!(k.seek_frame(50).map(|x| x.0), Some(2));
        assert_eq!(k.seek_time(1_795_000_000_000_000_001).map(|x| x.0), Some(1));
        assert_eq!(k.seek_time(0), None);
        assert_eq!(k.iter().count(), 3);
    }
}
