//! A playback that goes on from file to file (`Op::StreamQueue`,
//! `engine/stream/playback.rs`): the chunks of a stream played as one. The bytes are
//! each file's from its queued start, in order, under one admission; the boundary
//! costs no stall and no late request; a queued file is held (an unlinked one still
//! plays, and is freed at the end); a file still being recorded is followed to its
//! end before the next; a following playback waits at a recording's live edge;
//! the refusals leave the playback as it was.

mod common;

use common::drive::{
    open_stream as open, pattern, setup, stream_spec as spec, stream_write, Drive, MS,
};
use dvrfs_core::disk::Admission;
use dvrfs_core::engine::{Engine, IoBuf, Op, Output, StreamDir, StreamStats};
use dvrfs_core::Error;

/// File `name` holding `data`, written through the engine.
fn file(e: &mut Engine, d: &mut Drive, name: &str, data: &[u8]) -> u32 {
    let ino = d.create(e, name);
    let op = Op::Write {
        ino,
        offset: 0,
        data: IoBuf::from_slice(data),
    };
    d.run(e, op).unwrap();
    ino
}

/// Reads stream `stream` in `piece`-byte reads to its end.
fn read_all(e: &mut Engine, d: &mut Drive, stream: u32, piece: usize) -> Vec<u8> {
    let mut out = vec![];
    loop {
        let op = Op::StreamRead {
            stream,
            buf: IoBuf::zeroed(piece),
        };
        let Output::Read { buf, bytes } = d.run(e, op).unwrap() else {
            panic!("a stream read returns bytes")
        };
        if bytes == 0 {
            return out;
        }
        out.extend_from_slice(&buf.bytes().unwrap()[..bytes]);
        e.check().unwrap();
    }
}

fn close(e: &mut Engine, d: &mut Drive, stream: u32) -> StreamStats {
    match d.run(e, Op::StreamClose { stream }).unwrap() {
        Output::StreamClosed(s) => s,
        o => panic!("{o:?}"),
    }
}

fn queue(e: &mut Engine, d: &mut Drive, stream: u32, ino: u32, from: u64) -> Result<Output, Error> {
    d.run(e, Op::StreamQueue { stream, ino, from })
}

#[test]
fn a_playback_goes_on_through_its_queued_files_as_one_stream() {
    let (mut e, mut d) = setup(Some(Admission::bandwidth(100e6, 0.1)), 3);
    // Sizes that are neither request nor sector multiples; starts past a "head".
    let datas = [pattern(1_300_001), pattern(700_123), pattern(2_000_000)];
    let files: Vec<u32> = datas
        .iter()
        .enumerate()
        .map(|(k, data)| file(&mut e, &mut d, &format!("c{k}"), data))
        .collect();
    let starts = [1_000u64, 564, 0];
    let mut s = spec(StreamDir::Read, 16.0, 0);
    s.start_bytes = starts[0];
    let play = open(&mut e, &mut d, files[0], s).unwrap();
    for k in 1..3 {
        let r = queue(&mut e, &mut d, play.id, files[k], starts[k]);
        assert!(matches!(r, Ok(Output::Done)), "{r:?}");
        assert_eq!(e.volume().open_count(files[k]), 1, "a queued file is held");
    }
    let got = read_all(&mut e, &mut d, play.id, 100_003);
    let want: Vec<u8> = (0..3)
        .flat_map(|k| datas[k][starts[k] as usize..].to_vec())
        .collect();
    assert_eq!(got.len(), want.len());
    assert!(got == want, "each file's bytes from its start, in order");
    // The files played are let go as the playout point leaves them.
    assert_eq!(e.volume().open_count(files[0]), 0);
    assert_eq!(e.volume().open_count(files[1]), 0);
    let stats = close(&mut e, &mut d, play.id);
    assert_eq!(stats.app_bytes, want.len() as u64);
    assert_eq!(stats.late, 0, "{stats:?}");
    assert_eq!(stats.stalls, 0, "no stall at a boundary: {stats:?}");
    for f in files {
        assert_eq!(e.volume().open_count(f), 0);
    }
    e.check().unwrap();
}

/// The boundary costs what a byte position in one file costs: the same file set
/// played as one file and as chunks has the same stalls and lateness (none), and
/// the chunks' requests have at least the slack of a single file's less one
/// request's transfer (a request never spans two files, so one more is issued).
#[test]
fn chunks_play_with_the_slack_of_one_file() {
    let whole = pattern(6 << 20);
    let run = |chunked: bool| -> StreamStats {
        let (mut e, mut d) = setup(Some(Admission::bandwidth(100e6, 0.1)), 4);
        let cuts = [0, 1_000_003, 2_500_000, 4_444_444, whole.len()];
        let files: Vec<u32> = if chunked {
            (0..4)
                .map(|k| {
                    file(
                        &mut e,
                        &mut d,
                        &format!("c{k}"),
                        &whole[cuts[k]..cuts[k + 1]],
                    )
                })
                .collect()
        } else {
            vec![file(&mut e, &mut d, "one", &whole)]
        };
        let play = open(&mut e, &mut d, files[0], spec(StreamDir::Read, 24.0, 0)).unwrap();
        for &f in &files[1..] {
            queue(&mut e, &mut d, play.id, f, 0).unwrap();
        }
        let got = read_all(&mut e, &mut d, play.id, 65_536);
        assert!(got == whole);
        close(&mut e, &mut d, play.id)
    };
    let (one, chunks) = (run(false), run(true));
    assert_eq!((one.stalls, one.late), (0, 0), "{one:?}");
    assert_eq!((chunks.stalls, chunks.late), (0, 0), "{chunks:?}");
    // 256 KiB at 100 MB/s plus 2 ms positioning: the drive's time per request.
    let request_ns = 2 * MS as i64 + 262_144 * 10;
    assert!(
        chunks.min_margin_ns.unwrap() >= one.min_margin_ns.unwrap() - request_ns,
        "one file {one:?}, chunks {chunks:?}"
    );
}

#[test]
fn an_unlinked_queued_file_still_plays_and_is_freed_at_the_end() {
    let (mut e, mut d) = setup(Some(Admission::bandwidth(100e6, 0.1)), 5);
    let a = file(&mut e, &mut d, "a", &pattern(300_000));
    let b_data: Vec<u8> = pattern(900_000).iter().map(|x| x ^ 0x5A).collect();
    let b = file(&mut e, &mut d, "b", &b_data);
    let play = open(&mut e, &mut d, a, spec(StreamDir::Read, 16.0, 0)).unwrap();
    queue(&mut e, &mut d, play.id, b, 0).unwrap();
    let root = e.volume().root();
    d.run(
        &mut e,
        Op::Unlink {
            parent: root,
            name: b"b".to_vec(),
        },
    )
    .unwrap();
    assert!(e.volume().is_orphan(b));
    let got = read_all(&mut e, &mut d, play.id, 50_000);
    assert!(
        got[300_000..] == b_data[..],
        "the orphan's bytes are played"
    );
    assert!(
        e.volume().inode_exists(b),
        "held while the playback is open"
    );
    close(&mut e, &mut d, play.id);
    // Let the deferred freeing run.
    let t = d.t;
    d.run_until(&mut e, t + 100 * MS);
    assert!(!e.volume().inode_exists(b), "the orphan was freed");
    e.check().unwrap();
}

#[test]
fn a_file_being_recorded_is_followed_to_its_end_before_the_next() {
    let (mut e, mut d) = setup(Some(Admission::bandwidth(100e6, 0.1)), 6);
    let live = d.create(&mut e, "live");
    let next_data: Vec<u8> = pattern(400_000).iter().map(|x| x ^ 0xFF).collect();
    let next = file(&mut e, &mut d, "next", &next_data);
    let rec = open(&mut e, &mut d, live, spec(StreamDir::Write, 16.0, 4 << 20)).unwrap();
    let data = pattern(1 << 20);
    let write = |e: &mut Engine, d: &mut Drive, bytes: &[u8]| stream_write(e, d, rec.id, bytes);
    write(&mut e, &mut d, &data[..600_000]);
    d.run(&mut e, Op::StreamSync { stream: rec.id }).unwrap();
    let play = open(&mut e, &mut d, live, spec(StreamDir::Read, 16.0, 0)).unwrap();
    queue(&mut e, &mut d, play.id, next, 0).unwrap();
    // A read past what is recorded waits for it rather than going on to `next`.
    let op = Op::StreamRead {
        stream: play.id,
        buf: IoBuf::zeroed(800_000),
    };
    let id = e.submit(op, None, 1, d.now()).unwrap();
    let t = d.t;
    d.run_until(&mut e, t + 2_000 * MS);
    assert!(
        !d.others.iter().any(|c| c.op == id),
        "the read went past the recorded bytes"
    );
    write(&mut e, &mut d, &data[600_000..]);
    close(&mut e, &mut d, rec.id);
    let Output::Read { buf, bytes } = d.wait(&mut e, id).result.unwrap() else {
        panic!("a read")
    };
    assert_eq!(bytes, 800_000);
    let mut got = buf.bytes().unwrap()[..bytes].to_vec();
    got.extend(read_all(&mut e, &mut d, play.id, 100_000));
    let want = [data.clone(), next_data].concat();
    assert!(got == want, "all of the recording, then the next file");
    close(&mut e, &mut d, play.id);
    e.check().unwrap();
}

#[test]
fn a_refused_queue_leaves_the_playback_as_it_was() {
    let (mut e, mut d) = setup(Some(Admission::bandwidth(100e6, 0.1)), 7);
    let a_data = pattern(500_000);
    let a = file(&mut e, &mut d, "a", &a_data);
    let small = file(&mut e, &mut d, "small", &pattern(1000));
    let w = d.create(&mut e, "w");
    let root = e.volume().root();
    let play = open(&mut e, &mut d, a, spec(StreamDir::Read, 16.0, 0)).unwrap();
    let rec = open(&mut e, &mut d, w, spec(StreamDir::Write, 16.0, 1 << 20)).unwrap();
    let refusals = [
        (rec.id, small, 0, "is a recording"),
        (play.id, root, 0, "not a regular file"),
        (play.id, small, 1001, "past the end"),
        (99, small, 0, "is not open"),
    ];
    for (stream, ino, from, says) in refusals {
        let err = queue(&mut e, &mut d, stream, ino, from).unwrap_err();
        assert!(err.to_string().contains(says), "{says}: {err}");
    }
    assert_eq!(
        e.volume().open_count(small),
        0,
        "a refused file is not held"
    );
    assert!(read_all(&mut e, &mut d, play.id, 65_536) == a_data);
    close(&mut e, &mut d, play.id);
    close(&mut e, &mut d, rec.id);
    let err = queue(&mut e, &mut d, play.id, small, 0).unwrap_err();
    assert!(err.to_string().contains("is not open"), "{err}");
    e.check().unwrap();
}

/// `Op::StreamFollow`: a playback at the end of a file being recorded waits for the
/// recording's next bytes (no stall, no 0-byte end) and starts again one slack
/// later when they come; once the recording ends, the playback ends with it. Without
/// it the same read ends at what is there.
#[test]
fn a_following_playback_waits_at_the_live_edge_and_ends_with_the_recording() {
    let (mut e, mut d) = setup(Some(Admission::bandwidth(100e6, 0.1)), 8);
    let live = d.create(&mut e, "live");
    let rec = open(&mut e, &mut d, live, spec(StreamDir::Write, 16.0, 4 << 20)).unwrap();
    let data = pattern(1_500_000);
    let write = |e: &mut Engine, d: &mut Drive, bytes: &[u8]| {
        stream_write(e, d, rec.id, bytes);
        d.run(e, Op::StreamSync { stream: rec.id }).unwrap();
    };
    write(&mut e, &mut d, &data[..400_000]);
    let plain = open(&mut e, &mut d, live, spec(StreamDir::Read, 16.0, 0)).unwrap();
    assert_eq!(read_all(&mut e, &mut d, plain.id, 100_000).len(), 400_000);
    close(&mut e, &mut d, plain.id);
    let play = open(&mut e, &mut d, live, spec(StreamDir::Read, 16.0, 0)).unwrap();
    d.run(&mut e, Op::StreamFollow { stream: play.id }).unwrap();
    let mut got = vec![];
    let read = |e: &mut Engine, d: &mut Drive| {
        let op = Op::StreamRead {
            stream: play.id,
            buf: IoBuf::zeroed(100_000),
        };
        e.submit(op, None, 1, d.now()).unwrap()
    };
    // Up to the edge.
    while got.len() < 400_000 {
        let id = read(&mut e, &mut d);
        let Output::Read { buf, bytes } = d.wait(&mut e, id).result.unwrap() else {
            panic!("a read")
        };
        assert!(bytes > 0);
        got.extend_from_slice(&buf.bytes().unwrap()[..bytes]);
    }
    // Past it: the read waits for the recording.
    let id = read(&mut e, &mut d);
    let t = d.t;
    d.run_until(&mut e, t + 3_000 * MS);
    assert!(
        !d.others.iter().any(|c| c.op == id),
        "the read ended at the edge"
    );
    write(&mut e, &mut d, &data[400_000..900_000]);
    let Output::Read { buf, bytes } = d.wait(&mut e, id).result.unwrap() else {
        panic!("a read")
    };
    got.extend_from_slice(&buf.bytes().unwrap()[..bytes]);
    write(&mut e, &mut d, &data[900_000..]);
    close(&mut e, &mut d, rec.id);
    got.extend(read_all(&mut e, &mut d, play.id, 100_000));
    assert!(got == data, "every byte of the recording, then the end");
    let stats = close(&mut e, &mut d, play.id);
    assert_eq!((stats.stalls, stats.late), (0, 0), "{stats:?}");
    let err = d
        .run(&mut e, Op::StreamFollow { stream: play.id })
        .unwrap_err();
    assert!(err.to_string().contains("is not open"), "{err}");
    e.check().unwrap();
}
