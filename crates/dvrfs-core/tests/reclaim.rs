//! Admission that counts reclaimable space (issue 26, rule 1; the engine's
//! `reclaim.rs`): on a full volume with a retention policy, a recording larger than
//! the free space is admitted on what retention can delete, is never refused a
//! byte, and the oldest chunks go for it, in UTC order; one larger than the free
//! and reclaimable space less what is promised to recordings already admitted is
//! refused at open with ENOSPC, saying why; without a policy nothing changes.

mod common;

use common::drive::{open_stream, setup, stream_spec, stream_write, Drive};
use dvrfs_core::disk::Admission;
use dvrfs_core::engine::{Engine, HeadroomAsk, IoBuf, Op, Output, StreamDir};
use dvrfs_core::format::events::{DeleteCause, What};
use dvrfs_core::format::inode::StreamRetention;
use dvrfs_core::retention::chunk_name;
use dvrfs_core::volume::SetAttr;
use dvrfs_core::{Error, OpenMode};

const MIB: u64 = 1 << 20;
const CHUNK: u64 = 8 * MIB;
/// 2026-11-28T18:28:44.496Z
const T0: i64 = 1_795_890_524_496_000_000;
const MIN: i64 = 60_000_000_000;

/// `/cam`, with a 30-day max-age when `policy`, filled with 8 MiB chunks named by
/// their UTC start a minute apart (newest last) until less than a chunk is free.
/// Returns the directory and the chunks' names, oldest first.
fn full_recorder(e: &mut Engine, d: &mut Drive, policy: bool) -> (u32, Vec<String>) {
    let root = e.volume().root();
    let cam = d.mkdir_in(e, root, "cam");
    if policy {
        let set = SetAttr {
            retention: Some(Some(StreamRetention {
                max_age_s: 30 * 86_400,
                ..StreamRetention::default()
            })),
            ..SetAttr::default()
        };
        d.run(e, Op::SetAttr { ino: cam, set }).unwrap();
    }
    let mut names = vec![];
    while e.volume().available_bytes() >= CHUNK {
        let name = chunk_name(T0 + names.len() as i64 * MIN, "ts");
        let ino = d.create_in(e, cam, &name);
        d.run(
            e,
            Op::Write {
                ino,
                offset: 0,
                // Real bytes: a playback reads them back, checksums checked.
                data: IoBuf::zeroed(CHUNK as usize),
            },
        )
        .unwrap();
        names.push(name);
    }
    d.run(e, Op::Fsync).unwrap();
    (cam, names)
}

/// What `status` counts admission's headroom for (not looked at here).
fn ask() -> HeadroomAsk {
    HeadroomAsk {
        rate_bps: 8e6,
        request_bytes: 256 << 10,
        buffer_bytes: None,
        dir: StreamDir::Write,
        durable_ns: None,
    }
}

/// The chunks retention deleted, with their causes, in the order they went.
fn deleted(e: &Engine) -> Vec<(String, DeleteCause)> {
    e.volume()
        .events()
        .iter()
        .filter_map(|ev| match ev.what {
            What::ChunkDeleted { cause, .. } => {
                let p = String::from_utf8_lossy(&ev.path).into_owned();
                Some((p.trim_start_matches("/cam/").to_string(), cause))
            }
            _ => None,
        })
        .collect()
}

/// Closes recording `stream`: it wrote all `want` bytes, none refused, none late.
fn closed_whole(e: &mut Engine, d: &mut Drive, stream: u32, want: u64) {
    let stats = match d.run(e, Op::StreamClose { stream }) {
        Ok(Output::StreamClosed(s)) => s,
        o => panic!("{o:?}"),
    };
    assert_eq!((stats.no_space, stats.written_bytes), (0, want));
    assert_eq!(stats.late, 0);
}

#[test]
fn a_recording_beyond_the_free_space_is_admitted_on_what_retention_can_reclaim() {
    let (mut e, mut d) = setup(Some(Admission::bandwidth(100e6, 0.1)), 5);
    let (cam, names) = full_recorder(&mut e, &mut d, true);
    let n = names.len() as u64;
    assert!(n >= 20, "{n} chunks");
    let free = e.volume().available_bytes();
    assert!(free < CHUNK);
    // 40 MiB: more than is free, less than the chunks hold.
    let want = 40 * MIB;
    let rec = d.create_in(&mut e, cam, &chunk_name(T0 + n as i64 * MIN, "ts"));
    // (Outside the stream: a file in `/cam` is one of its chunks, and this one,
    // empty and without a UTC name, would be the oldest.)
    let root = e.volume().root();
    let other = d.create_in(&mut e, root, "other.ts");
    let info = open_stream(
        &mut e,
        &mut d,
        rec,
        stream_spec(StreamDir::Write, 8.0, want),
    )
    .expect("admitted on reclaimable space");
    let f = e.retention_figures().clone();
    assert_eq!(f.owed_recordings, 1);
    assert_eq!(f.owed_max_bytes, want - free, "what was not free is owed");
    // The operator's view: what is owed and not yet freed (`dvrfs status`).
    let space = |e: &Engine| e.status(ask()).space;
    assert!(space(&e).owed_bytes > 0 && space(&e).owed_bytes <= want - free);
    assert_eq!(space(&e).owed_short_bytes, 0);

    // Refused: a block more than the free and reclaimable space less what is
    // promised. That sum stays the same whatever retention has done meanwhile (a
    // deletion makes reclaimable space free, the free space it makes is held for
    // the recording and promised no more): the chunks and the free space at the
    // start, less the recording. (Its own file is open: not reclaimable.)
    let promised = want - free;
    let too_much = n * CHUNK + free - want + MIB;
    let err = open_stream(
        &mut e,
        &mut d,
        other,
        stream_spec(StreamDir::Write, 8.0, too_much),
    )
    .unwrap_err();
    assert!(matches!(err, Error::SpaceNotKept(_)), "{err}");
    assert_eq!(err.errno(), 28, "ENOSPC");
    let why = err.to_string();
    assert!(
        why.contains(&format!("a recording of {too_much} bytes")) && why.contains("promised"),
        "{why}"
    );

    // Every byte asked for is accepted, in pieces, as retention frees the space.
    let piece = vec![7u8; MIB as usize];
    for _ in 0..want / MIB {
        stream_write(&mut e, &mut d, info.id, &piece);
    }
    closed_whole(&mut e, &mut d, info.id, want);
    // The oldest chunks went, in UTC order, for the recording's need: as few as
    // cover what was owed (36 MiB and a bit: five of 8 MiB).
    let gone = deleted(&e);
    let need = promised.div_ceil(CHUNK) as usize;
    let expect: Vec<(String, DeleteCause)> = names[..need]
        .iter()
        .map(|n| (n.clone(), DeleteCause::Needed))
        .collect();
    assert_eq!(gone, expect);
    assert_eq!(e.retention_figures().owed_shortfall_bytes, 0);
    assert_eq!(space(&e).owed_bytes, 0, "paid, or forgotten at the close");
    d.run(&mut e, Op::Fsync).unwrap();
    e.check().unwrap();
    common::assert_fsck_clean(&d.durable_at(d.t));
}

#[test]
fn without_a_policy_a_recording_beyond_the_free_space_is_refused_as_before() {
    let (mut e, mut d) = setup(Some(Admission::bandwidth(100e6, 0.1)), 5);
    let (cam, _) = full_recorder(&mut e, &mut d, false);
    let rec = d.create_in(&mut e, cam, "rec.ts");
    let err = open_stream(
        &mut e,
        &mut d,
        rec,
        stream_spec(StreamDir::Write, 8.0, 40 * MIB),
    )
    .unwrap_err();
    assert!(matches!(err, Error::NoSpace { .. }), "{err}");
    assert!(deleted(&e).is_empty());
}

#[test]
fn a_playbacks_pin_yields_to_a_recording_and_the_playback_is_told_range_expired() {
    let (mut e, mut d) = setup(Some(Admission::bandwidth(100e6, 0.1)), 5);
    let (cam, names) = full_recorder(&mut e, &mut d, true);
    let n = names.len() as u64;
    let free = e.volume().available_bytes();
    // A slow playback of the oldest chunk: it holds it.
    let oldest = e.volume().lookup(cam, names[0].as_bytes()).unwrap();
    let play = open_stream(&mut e, &mut d, oldest, stream_spec(StreamDir::Read, 1.0, 0)).unwrap();
    let read = |e: &mut Engine, d: &mut Drive| {
        let op = Op::StreamRead {
            stream: play.id,
            buf: IoBuf::zeroed(64 << 10),
        };
        d.run(e, op)
    };
    let r = read(&mut e, &mut d);
    assert!(matches!(r, Ok(Output::Read { bytes: 65536, .. })), "{r:?}");
    // A recording that needs every chunk, the held one too: its pin yields, so it
    // counts as reclaimable and the recording is admitted.
    let want = n * CHUNK + free - MIB;
    let rec = d.create_in(&mut e, cam, &chunk_name(T0 + n as i64 * MIN, "ts"));
    let info = open_stream(
        &mut e,
        &mut d,
        rec,
        stream_spec(StreamDir::Write, 8.0, want),
    )
    .expect("admitted on the chunks, the one played too");
    // What the other chunks free is written first.
    let piece = vec![7u8; MIB as usize];
    let first = (n - 1) * CHUNK + free - 4 * MIB;
    for _ in 0..first / MIB {
        stream_write(&mut e, &mut d, info.id, &piece);
    }
    // The playback goes on until retention takes its chunk: then it is told.
    let mut reads = 0;
    let err = loop {
        match read(&mut e, &mut d) {
            Ok(Output::Read { bytes, .. }) => assert_eq!(bytes, 64 << 10),
            Ok(o) => panic!("{o:?}"),
            Err(err) => break err,
        }
        reads += 1;
        assert!(reads < 2000, "the playback was never expired");
    };
    assert!(matches!(err, Error::RangeExpired(_)), "{err}");
    assert_eq!(err.errno(), 116, "ESTALE");
    assert!(err.to_string().contains(&names[0]), "{err}");
    // Every read after fails the same way: never a byte of a file that went.
    assert!(matches!(read(&mut e, &mut d), Err(Error::RangeExpired(_))));
    assert_eq!(e.retention_figures().expired_chunks, 1);
    // The playback closes; its chunk's blocks are the recording's.
    d.run(&mut e, Op::StreamClose { stream: play.id }).unwrap();
    let mut written = first / MIB * MIB;
    while written < want {
        let k = MIB.min(want - written) as usize;
        stream_write(&mut e, &mut d, info.id, &piece[..k]);
        written += k as u64;
    }
    closed_whole(&mut e, &mut d, info.id, want);
    // Every chunk went for the recording, the played one last (its pin yielded
    // only when nothing else was left).
    let gone = deleted(&e);
    assert_eq!(gone.len(), names.len());
    assert_eq!(gone.last(), Some(&(names[0].clone(), DeleteCause::Needed)));
    assert!(gone.iter().all(|(_, c)| *c == DeleteCause::Needed));
    d.run(&mut e, Op::Fsync).unwrap();
    e.check().unwrap();
    common::assert_fsck_clean(&d.durable_at(d.t));
}

#[test]
fn a_read_only_handles_pin_yields_and_its_blocks_are_free_while_it_stays_open() {
    let (mut e, mut d) = setup(Some(Admission::bandwidth(100e6, 0.1)), 5);
    let (cam, names) = full_recorder(&mut e, &mut d, true);
    let n = names.len() as u64;
    let free = e.volume().available_bytes();
    let ino = |e: &Engine, i: usize| e.volume().lookup(cam, names[i].as_bytes()).unwrap();
    // A reader's handle (the mount's `open(O_RDONLY)`, the C API's
    // `DVRFS_O_RDONLY`) on the oldest chunk, a writer's on the next.
    let (read, written) = (ino(&e, 0), ino(&e, 1));
    let open = |ino, mode| Op::OpenFile { ino, mode };
    d.run(&mut e, open(read, OpenMode::Read)).unwrap();
    d.run(&mut e, open(written, OpenMode::Write)).unwrap();
    let rec = d.create_in(&mut e, cam, &chunk_name(T0 + n as i64 * MIN, "ts"));
    // The writer's pin never yields: a recording that needs its chunk too is
    // refused at open.
    let all = n * CHUNK + free - MIB;
    let refused = open_stream(&mut e, &mut d, rec, stream_spec(StreamDir::Write, 8.0, all));
    assert!(
        matches!(refused, Err(Error::SpaceNotKept(_))),
        "{refused:?}"
    );
    // One that needs every other chunk, the read one too, is admitted.
    let want = all - CHUNK;
    let spec = stream_spec(StreamDir::Write, 8.0, want);
    let info = open_stream(&mut e, &mut d, rec, spec).expect("admitted");
    let piece = vec![7u8; MIB as usize];
    let mut wrote = 0;
    while wrote < want {
        let k = MIB.min(want - wrote) as usize;
        stream_write(&mut e, &mut d, info.id, &piece[..k]);
        wrote += k as u64;
    }
    // Every byte written while the reader still holds its handle: the expired
    // chunk was cut to nothing, its blocks the recording's at once.
    closed_whole(&mut e, &mut d, info.id, want);
    assert_eq!(e.retention_figures().expired_chunks, 1);
    let gone = deleted(&e);
    assert_eq!(gone.len(), names.len() - 1);
    assert_eq!(gone.last(), Some(&(names[0].clone(), DeleteCause::Needed)));
    assert!(!gone.iter().any(|(name, _)| *name == names[1]));
    assert!(e.volume().is_orphan(read));
    // The reader's reads and a new open of the file are told, naming the chunk;
    // never a byte of another file.
    let r = d.run(
        &mut e,
        Op::Read {
            ino: read,
            offset: 0,
            buf: IoBuf::zeroed(4096),
        },
    );
    let err = r.expect_err("the chunk is gone");
    assert!(matches!(err, Error::RangeExpired(_)), "{err}");
    assert_eq!(err.errno(), 116, "ESTALE");
    assert!(err.to_string().contains(&names[0]), "{err}");
    let again = d.run(&mut e, open(read, OpenMode::Read));
    assert!(matches!(again, Err(Error::RangeExpired(_))), "{again:?}");
    // Its last close frees the inode; a file made under the number later reads.
    d.run(
        &mut e,
        Op::CloseFile {
            ino: read,
            mode: OpenMode::Read,
        },
    )
    .unwrap();
    assert!(!e.volume().is_orphan(read));
    d.run(&mut e, open(written, OpenMode::Write)).unwrap();
    for _ in 0..2 {
        let close = Op::CloseFile {
            ino: written,
            mode: OpenMode::Write,
        };
        d.run(&mut e, close).unwrap();
    }
    let new = d.create_in(&mut e, cam, "later.ts");
    d.run(
        &mut e,
        Op::Write {
            ino: new,
            offset: 0,
            data: IoBuf::from_slice(&[5u8; 4096]),
        },
    )
    .unwrap();
    let r = d.run(
        &mut e,
        Op::Read {
            ino: new,
            offset: 0,
            buf: IoBuf::zeroed(4096),
        },
    );
    assert!(matches!(r, Ok(Output::Read { bytes: 4096, .. })), "{r:?}");
    d.run(&mut e, Op::Fsync).unwrap();
    e.check().unwrap();
    common::assert_fsck_clean(&d.durable_at(d.t));
}
