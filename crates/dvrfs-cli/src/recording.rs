//! A recording as the commands that follow one see it (`export`, `keyframe`,
//! `timeline`, `play --from`): a stream directory's chunks in name order, or one file
//! (a one-chunk stream). `record --chunk` names chunks by their UTC start and never
//! names one before the last, so name order is time order. Each chunk comes with its
//! keyframes from the frame index: metadata the volume holds in memory, so opening a
//! recording reads nothing from the device.
//!
//! The index holds keyframes, not every frame: a chunk's end is its last keyframe
//! plus one keyframe interval (the chunk's own median interval), an estimate within
//! a GOP that [`Recording::end_utc`] and the timeline say is one.

use dvrfs_core::format::dir::Kind;
use dvrfs_core::format::frame_index::{median_interval_ns, FrameEntry};
use dvrfs_core::meta::Ino;
use dvrfs_remote::Handle;
use dvrfs_runtime::RuntimeError;

use std::collections::VecDeque;

use dvrfs_core::{Error as CoreError, IoBuf, Op, OpenMode, Output};

use crate::error::{CliError, CliResult};
use crate::timespec::{At, Zone};

/// One file of a recording.
#[derive(Clone, Debug)]
pub struct Chunk {
    /// Its path in the volume.
    pub path: String,
    pub ino: Ino,
    pub size: u64,
    /// The index covers every keyframe of the file's data.
    pub complete: bool,
    pub keyframes: Vec<FrameEntry>,
    /// The UTC start its name says (`20261128T140312.250Z.ts`), if it is so named.
    pub name_utc: Option<i64>,
}

impl Chunk {
    /// Where the chunk's data starts: its first keyframe (the bytes before it are the
    /// head a player needs first, PAT/PMT or the init segment), or 0 without an index.
    pub fn data_start(&self) -> u64 {
        self.keyframes.first().map_or(0, |k| k.offset)
    }

    /// The median interval between its keyframes, ns (0 with fewer than two).
    pub fn keyframe_interval_ns(&self) -> i64 {
        median_interval_ns(&self.keyframes)
    }

    /// When its last frame ends, estimated: its last keyframe plus one keyframe
    /// interval (its own, or `fallback_ns` with fewer than two keyframes). None
    /// without an index.
    pub fn end_utc(&self, fallback_ns: i64) -> Option<i64> {
        let own = self.keyframe_interval_ns();
        let interval = if self.keyframes.len() >= 2 {
            own
        } else {
            fallback_ns
        };
        self.keyframes
            .last()
            .map(|k| k.utc_ns.saturating_add(interval))
    }
}

/// Bytes per read of [`read_range`].
const READ_BYTES: u64 = 1 << 20;
/// Its reads in flight at once.
const READS_IN_FLIGHT: usize = 4;
/// Who the reads are for (best-effort traffic of this process).
const OWNER: u32 = 0;

/// Reads bytes `start..end` of file `ino` (`path` in messages), a few best-effort
/// reads in flight, handing each piece to `each` in order.
pub fn read_range(
    rt: &Handle,
    ino: Ino,
    path: &str,
    start: u64,
    end: u64,
    each: &mut dyn FnMut(&[u8]) -> CliResult<()>,
) -> CliResult<()> {
    let mut in_flight: VecDeque<(dvrfs_runtime::Ticket, u64, usize)> = VecDeque::new();
    let mut next = start;
    while next < end || !in_flight.is_empty() {
        while next < end && in_flight.len() < READS_IN_FLIGHT {
            let want = READ_BYTES.min(end - next) as usize;
            let op = Op::Read {
                ino,
                offset: next,
                buf: IoBuf::zeroed(want),
            };
            in_flight.push_back((rt.start(op, None, OWNER)?, next, want));
            next += want as u64;
        }
        let (t, at, want) = in_flight.pop_front().expect("a read in flight");
        let done = rt.check(t, true).map(|d| d.map(|d| d.output));
        let result = match done {
            Ok(Some(Output::Read { buf, bytes })) if bytes >= want => {
                each(&buf.bytes().expect("a memory buffer")[..want])
            }
            Ok(other) => Err(CliError::new(format!(
                "{path}: a read at byte {at} returned {}, not {want} bytes (was the file cut while it was read?)",
                match other {
                    Some(Output::Read { bytes, .. }) => format!("{bytes} bytes"),
                    _ => "nothing".into(),
                }
            ))),
            Err(e) => Err(CliError::from(e).named(path)),
        };
        if let Err(e) = result.and_then(|()| crate::interrupt::check("the read")) {
            for (t, _, _) in in_flight.drain(..) {
                let _ = rt.check(t, true);
            }
            return Err(e);
        }
    }
    Ok(())
}

/// Chunks of a recording held open for reading while a command reads them by
/// inode number ([`Recording::hold`]): retention cannot delete one and give its
/// inode number to another file under the reads. If a recording admitted on
/// reclaimable space needs a held chunk's blocks, the pin yields (retention's rule
/// 6) and the reads fail with "range expired", never with another file's bytes.
/// Closed by [`Held::release`], or when dropped (an error on the way).
pub struct Held<'a> {
    rt: &'a Handle,
    inos: Vec<Ino>,
}

impl Held<'_> {
    /// Closes every chunk held: the first failure, if any.
    pub fn release(mut self) -> CliResult<()> {
        self.close_all()
    }

    fn close_all(&mut self) -> CliResult<()> {
        let mut first = Ok(());
        for ino in std::mem::take(&mut self.inos) {
            let mode = OpenMode::Read;
            let r = self.rt.run(Op::CloseFile { ino, mode }, None, OWNER);
            if let (Err(e), Ok(())) = (r, &first) {
                first = Err(CliError::from(e));
            }
        }
        first
    }
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        // Best effort on an error's way out: the daemon closes what a client left
        // open when it goes, and a volume opened here goes with us.
        let _ = self.close_all();
    }
}

/// A keyframe of a recording: chunk `chunk`'s keyframe `key`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pos {
    pub chunk: usize,
    pub key: usize,
}

/// See the module docs.
#[derive(Clone, Debug)]
pub struct Recording {
    /// The path the user gave.
    pub path: String,
    /// A stream directory (else one file).
    pub dir: bool,
    pub chunks: Vec<Chunk>,
    /// The recording's keyframe interval: the median between consecutive keyframes,
    /// across chunks (0 with fewer than two).
    pub interval_ns: i64,
}

/// The UTC a chunk's name says: `YYYYMMDDTHHMMSS.mmmZ` before the extension.
pub fn name_utc(name: &str) -> Option<i64> {
    dvrfs_core::retention::chunk_name_utc(name)
}

impl Recording {
    pub fn new(path: &str, dir: bool, chunks: Vec<Chunk>) -> Recording {
        let interval_ns = median_interval_ns(chunks.iter().flat_map(|c| &c.keyframes));
        Recording {
            path: path.to_string(),
            dir,
            chunks,
            interval_ns,
        }
    }

    /// The recording at `path`: a directory's regular files whose names do not start
    /// with `.`, in name order, or the one file.
    pub fn open(rt: &Handle, path: &str) -> CliResult<Recording> {
        let ino = rt.resolve(path)?;
        let st = rt.stat(ino)?;
        let chunk = |path: String, ino: Ino| -> CliResult<Chunk> {
            let st = rt.stat(ino)?;
            let k = rt.keyframes(ino)?;
            let name = path.rsplit('/').next().unwrap_or(&path);
            Ok(Chunk {
                name_utc: name_utc(name),
                path,
                ino,
                size: st.size_bytes,
                complete: k.complete,
                keyframes: k.entries,
            })
        };
        match st.kind {
            Kind::File => Ok(Recording::new(
                path,
                false,
                vec![chunk(path.to_string(), ino)?],
            )),
            Kind::Dir => {
                let base = path.trim_end_matches('/');
                let chunks: Vec<Chunk> = rt
                    .chunks_of(ino)?
                    .into_iter()
                    .map(|(name, ino, size, k)| {
                        let name = String::from_utf8_lossy(&name).into_owned();
                        Chunk {
                            name_utc: name_utc(&name),
                            path: format!("{base}/{name}"),
                            ino,
                            size,
                            complete: k.complete,
                            keyframes: k.entries,
                        }
                    })
                    .collect();
                if chunks.is_empty() {
                    return Err(CliError::new(format!(
                        "{path} is a directory without files: not a recording"
                    ))
                    .hint("record into it with `dvrfs record --chunk`, or name a file"));
                }
                Ok(Recording::new(path, true, chunks))
            }
            _ => Err(CliError::new(format!(
                "{path} is neither a file nor a stream directory"
            ))),
        }
    }

    /// Holds chunks `chunks` open for reading (see [`Held`]). A chunk deleted
    /// since the recording was opened (its path no longer names its inode) is an
    /// error: the output would miss it.
    pub fn hold<'a>(
        &self,
        rt: &'a Handle,
        chunks: std::ops::RangeInclusive<usize>,
    ) -> CliResult<Held<'a>> {
        let mut held = Held { rt, inos: vec![] };
        for chunk in &self.chunks[chunks] {
            let gone = || {
                CliError::new(format!(
                    "{} was deleted before it could be read (by retention, or by hand): the output would miss it",
                    chunk.path
                ))
                .hint("ask for a later range; protect a range (`dvrfs protect`) before reading it at leisure")
            };
            let (ino, mode) = (chunk.ino, OpenMode::Read);
            match rt.run(Op::OpenFile { ino, mode }, None, OWNER) {
                Ok(_) => held.inos.push(ino),
                Err(RuntimeError::Engine(
                    CoreError::NotFound(_)
                    | CoreError::InvalidArgument(_)
                    | CoreError::IsDir(_)
                    | CoreError::RangeExpired(_),
                )) => return Err(gone()),
                Err(e) => return Err(CliError::from(e).named(&chunk.path)),
            }
            // Held now; were the path not naming the inode any more, the number
            // could be another file's.
            if rt.resolve(&chunk.path).ok() != Some(ino) {
                return Err(gone());
            }
        }
        Ok(held)
    }

    pub fn entry(&self, p: Pos) -> &FrameEntry {
        &self.chunks[p.chunk].keyframes[p.key]
    }

    /// The recording's first keyframe.
    pub fn first(&self) -> Option<Pos> {
        self.chunks
            .iter()
            .position(|c| !c.keyframes.is_empty())
            .map(|chunk| Pos { chunk, key: 0 })
    }

    /// Its last keyframe.
    pub fn last(&self) -> Option<Pos> {
        self.chunks
            .iter()
            .rposition(|c| !c.keyframes.is_empty())
            .map(|chunk| Pos {
                chunk,
                key: self.chunks[chunk].keyframes.len() - 1,
            })
    }

    /// When its last frame ends, estimated (module docs).
    pub fn end_utc(&self) -> Option<i64> {
        self.last()
            .and_then(|p| self.chunks[p.chunk].end_utc(self.interval_ns))
    }

    /// Keyframes in all its chunks.
    pub fn keyframe_count(&self) -> usize {
        self.chunks.iter().map(|c| c.keyframes.len()).sum()
    }

    /// The last keyframe at or before UTC `t`.
    fn at_or_before_utc(&self, t: i64) -> Option<Pos> {
        let keys: Vec<&[FrameEntry]> = self.chunks.iter().map(|c| &c.keyframes[..]).collect();
        dvrfs_remote::proto::seek_chunks_time(&keys, t).map(|(chunk, key)| Pos { chunk, key })
    }

    /// The first keyframe at or after UTC `t`.
    fn at_or_after_utc(&self, t: i64) -> Option<Pos> {
        let chunk = self
            .chunks
            .iter()
            .position(|c| c.keyframes.last().is_some_and(|k| k.utc_ns >= t))?;
        let keys = &self.chunks[chunk].keyframes;
        let key = keys.partition_point(|k| k.utc_ns < t);
        Some(Pos { chunk, key })
    }

    /// The UTC `at` names (a frame number only in a one-file recording: a chunk's
    /// index numbers its own frames).
    fn utc_of(&self, flag: &str, text: &str, at: At) -> CliResult<Result<i64, u64>> {
        let (Some(first), Some(end)) = (self.first(), self.end_utc()) else {
            return Err(self.no_index(flag, text));
        };
        Ok(match at {
            At::Utc(t) => Ok(t),
            At::SinceStart(ns) => Ok(self.entry(first).utc_ns.saturating_add(ns as i64)),
            At::BeforeEnd(ns) => Ok(end.saturating_sub(ns as i64)),
            At::Frame(n) if !self.dir => Err(n),
            At::Frame(_) => {
                return Err(CliError::usage(
                    format!(
                        "{flag} {text}: frame numbers count one file's frames, and {} is a stream directory",
                        self.path
                    ),
                    "give a time, or name the chunk file with frame:N",
                ))
            }
        })
    }

    fn no_index(&self, flag: &str, text: &str) -> CliError {
        CliError::new(format!(
            "{} has no frame index: {flag} {text} needs one",
            self.path
        ))
        .hint(format!(
            "build it with `dvrfs reindex TARGET {}` (each chunk file)",
            if self.dir { "CHUNK" } else { &self.path }
        ))
    }

    /// The last keyframe at or before `at` (where a reader asked to start at `at`
    /// starts), or why there is none.
    pub fn start_at(&self, flag: &str, text: &str, at: At, zone: &Zone) -> CliResult<Pos> {
        let found = match self.utc_of(flag, text, at)? {
            Ok(t) => self.at_or_before_utc(t),
            Err(n) => {
                let keys = &self.chunks[0].keyframes;
                keys.partition_point(|k| u64::from(k.number) <= n)
                    .checked_sub(1)
                    .map(|key| Pos { chunk: 0, key })
            }
        };
        found.ok_or_else(|| {
            let first = self.entry(self.first().expect("utc_of checked an index"));
            CliError::usage(
                format!(
                    "{flag} {text} is before {}'s first keyframe ({}, frame {})",
                    self.path,
                    zone.show(first.utc_ns),
                    first.number
                ),
                "give a time or frame within the recording (`dvrfs timeline` shows its spans)",
            )
        })
    }

    /// The first keyframe at or after `at` (where a clip asked to end at `at` ends),
    /// or None past the recording's last keyframe (the clip runs to the end).
    pub fn end_at(&self, flag: &str, text: &str, at: At) -> CliResult<Option<Pos>> {
        Ok(match self.utc_of(flag, text, at)? {
            Ok(t) => self.at_or_after_utc(t),
            Err(n) => {
                let keys = &self.chunks[0].keyframes;
                let key = keys.partition_point(|k| u64::from(k.number) < n);
                (key < keys.len()).then_some(Pos { chunk: 0, key })
            }
        })
    }

    /// The byte ranges from keyframe `from` up to keyframe `to` (exclusive; the end
    /// of the recording when None): (chunk, start, end), each later chunk from its
    /// first keyframe (its head left out: the output's head comes first, once).
    pub fn ranges(&self, from: Pos, to: Option<Pos>) -> Vec<(usize, u64, u64)> {
        let last = to.map_or(self.chunks.len() - 1, |p| p.chunk);
        (from.chunk..=last)
            .filter_map(|c| {
                let chunk = &self.chunks[c];
                let start = if c == from.chunk {
                    self.entry(from).offset
                } else {
                    chunk.data_start()
                };
                let end = match to {
                    Some(p) if p.chunk == c => self.entry(p).offset,
                    _ => chunk.size,
                };
                (end > start).then_some((c, start, end))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A volume on an image in `dir` with `/cam` holding chunks `a.ts` and
    /// `b.ts` (4 KiB of their letter each), open here.
    fn volume_of_two(dir: &std::path::Path) -> Handle {
        use dvrfs_core::layout::MkfsParams;
        use dvrfs_io::{FileDevice, LockMode};
        let path = dir.join("fs.img");
        let size = 256 << 20;
        FileDevice::create_image(&path, size).unwrap();
        let mut dev = FileDevice::open(&path, true, LockMode::Exclusive).unwrap();
        dvrfs_core::tools::mkfs(
            &mut dev,
            &MkfsParams::new(size, [7; 16], 42),
            &mut |_, _| {},
        )
        .unwrap();
        drop(dev);
        let rt = dvrfs_runtime::Runtime::open(&path, dvrfs_runtime::Options::default()).unwrap();
        let root = rt.query(|v| v.resolve("/")).unwrap().unwrap();
        let make = |parent, name: &str, op: fn(Ino, Vec<u8>) -> Op| match rt
            .run(op(parent, name.as_bytes().to_vec()), None, 0)
            .unwrap()
        {
            Output::Ino(i) => i,
            o => panic!("{o:?}"),
        };
        let cam = make(root, "cam", |parent, name| Op::Mkdir {
            parent,
            name,
            perm: 0o755,
            uid: 0,
            gid: 0,
        });
        for name in ["a.ts", "b.ts"] {
            let ino = make(cam, name, create);
            let data = IoBuf::from_slice(&[name.as_bytes()[0]; 4096]);
            rt.run(
                Op::Write {
                    ino,
                    offset: 0,
                    data,
                },
                None,
                0,
            )
            .unwrap();
        }
        Handle::Local(rt)
    }

    fn create(parent: Ino, name: Vec<u8>) -> Op {
        Op::Create {
            parent,
            name,
            perm: 0o644,
            uid: 0,
            gid: 0,
        }
    }

    fn unlink(rt: &Handle, name: &str) {
        let parent = rt.resolve("/cam").unwrap();
        let name = name.as_bytes().to_vec();
        rt.run(Op::Unlink { parent, name }, None, 0).unwrap();
    }

    #[test]
    fn a_held_chunk_keeps_its_bytes_and_its_inode_number_when_deleted() {
        let dir = tempfile::tempdir().unwrap();
        let rt = volume_of_two(dir.path());
        let rec = Recording::open(&rt, "/cam").unwrap();
        let held = rec.hold(&rt, 0..=1).unwrap();
        // Deleted under the hold, `a.ts` lives on for its reader: its own bytes,
        // and its number is not another file's.
        unlink(&rt, "a.ts");
        let c = rt.run(
            create(rt.resolve("/cam").unwrap(), b"c.ts".to_vec()),
            None,
            0,
        );
        assert!(
            !matches!(c, Ok(Output::Ino(i)) if i == rec.chunks[0].ino),
            "{c:?}"
        );
        let mut bytes = vec![];
        read_range(&rt, rec.chunks[0].ino, "/cam/a.ts", 0, 4096, &mut |b| {
            bytes.extend_from_slice(b);
            Ok(())
        })
        .unwrap();
        assert!(bytes.iter().all(|&b| b == b'a'), "a.ts's own bytes");
        held.release().unwrap();
        // Released, the orphan is freed.
        assert!(rt.stat(rec.chunks[0].ino).is_err());
    }

    #[test]
    fn a_chunk_deleted_before_it_is_held_is_an_error_not_another_files_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let rt = volume_of_two(dir.path());
        let rec = Recording::open(&rt, "/cam").unwrap();
        // `b.ts` goes and a new file takes its inode number before the hold.
        unlink(&rt, "b.ts");
        let c = rt.run(
            create(rt.resolve("/cam").unwrap(), b"c.ts".to_vec()),
            None,
            0,
        );
        assert!(
            matches!(c, Ok(Output::Ino(i)) if i == rec.chunks[1].ino),
            "{c:?}"
        );
        let err = rec.hold(&rt, 0..=1).err().expect("refused");
        assert!(
            err.message
                .contains("/cam/b.ts was deleted before it could be read"),
            "{}",
            err.message
        );
        // What it held before refusing was let go: `a.ts` is not open.
        unlink(&rt, "a.ts");
        assert!(rt.stat(rec.chunks[0].ino).is_err());
    }

    fn key(offset: u64, number: u32, utc_s: i64) -> FrameEntry {
        FrameEntry {
            offset,
            data_delta: 0,
            len: 100,
            number,
            flags: 0,
            pts_90k: utc_s * 90_000,
            utc_ns: utc_s * 1_000_000_000,
        }
    }

    fn chunk(name: &str, size: u64, keys: Vec<FrameEntry>) -> Chunk {
        Chunk {
            path: format!("cam/{name}"),
            ino: 2,
            size,
            complete: true,
            keyframes: keys,
            name_utc: name_utc(name),
        }
    }

    /// Two chunks: keyframes at 0, 2, 4 s (bytes 400, 1400, 2400 of a 3000-byte
    /// file after a 400-byte head) and 6, 8 s (bytes 400, 1400 of 2000).
    fn two_chunks() -> Recording {
        Recording::new(
            "cam",
            true,
            vec![
                chunk(
                    "19700101T000000.000Z.ts",
                    3000,
                    vec![key(400, 0, 0), key(1400, 50, 2), key(2400, 100, 4)],
                ),
                chunk(
                    "19700101T000006.000Z.ts",
                    2000,
                    vec![key(400, 0, 6), key(1400, 50, 8)],
                ),
            ],
        )
    }

    #[test]
    fn chunk_names_give_their_utc() {
        assert_eq!(name_utc("19700101T000006.250Z.ts"), Some(6_250_000_000));
        assert_eq!(
            name_utc("20261128T140312.250Z.mp4"),
            Some(1_795_874_592_250_000_000)
        );
        assert_eq!(name_utc("clip.ts"), None);
        assert_eq!(name_utc("2026112XT140312.250Z.ts"), None);
    }

    #[test]
    fn starts_and_ends_cross_chunks() {
        let r = two_chunks();
        let z = Zone::utc();
        let s = |ns: u64| r.start_at("--from", "", At::SinceStart(ns), &z).unwrap();
        assert_eq!(s(0), Pos { chunk: 0, key: 0 });
        assert_eq!(s(3_000_000_000), Pos { chunk: 0, key: 1 });
        assert_eq!(s(5_000_000_000), Pos { chunk: 0, key: 2 });
        assert_eq!(s(6_000_000_000), Pos { chunk: 1, key: 0 });
        let e = |ns: u64| r.end_at("--to", "", At::SinceStart(ns)).unwrap();
        assert_eq!(e(3_000_000_000), Some(Pos { chunk: 0, key: 2 }));
        assert_eq!(e(5_000_000_000), Some(Pos { chunk: 1, key: 0 }));
        assert_eq!(e(9_000_000_000), None);
        // The end is the last keyframe plus the chunk's interval (2 s).
        assert_eq!(r.end_utc(), Some(10_000_000_000));
        assert_eq!(
            r.start_at("--from", "", At::BeforeEnd(3_000_000_000), &z)
                .unwrap(),
            Pos { chunk: 1, key: 0 }
        );
        assert!(r.start_at("--from", "", At::Utc(-1), &z).is_err());
        assert!(r.start_at("--from", "", At::Frame(3), &z).is_err());
    }

    #[test]
    fn ranges_leave_later_heads_out() {
        let r = two_chunks();
        let from = Pos { chunk: 0, key: 1 };
        assert_eq!(
            r.ranges(from, Some(Pos { chunk: 1, key: 1 })),
            vec![(0, 1400, 3000), (1, 400, 1400)]
        );
        // Ending at a chunk's first keyframe takes nothing of that chunk.
        assert_eq!(
            r.ranges(from, Some(Pos { chunk: 1, key: 0 })),
            vec![(0, 1400, 3000)]
        );
        assert_eq!(r.ranges(from, None), vec![(0, 1400, 3000), (1, 400, 2000)]);
    }
}
