//! What a stream holds of its file (`engine/stream/hold.rs`), in virtual time on the
//! engine-level driver (`common::drive`): the file's inode stays the stream's after
//! its last name goes, so a file created meanwhile never gets the stream's bytes; the
//! orphan is freed when the stream ends (also by an unmount); and a file takes one
//! recording at a time.

mod common;

use common::drive::{setup, Drive};
use dvrfs_core::disk::Admission;
use dvrfs_core::engine::{Engine, IoBuf, Op, Output, StreamDir, StreamInfo, StreamSpec};
use dvrfs_core::{Error, OpenOptions, Volume};

fn spec(dir: StreamDir) -> StreamSpec {
    StreamSpec {
        idle: false,
        dir,
        rate_bps: 16e6,
        request_bytes: 256 * 1024,
        buffer_bytes: Some(2 << 20),
        reserve_bytes: 0,
        start_bytes: 0,
        durable_ns: None,
    }
}

fn open(e: &mut Engine, d: &mut Drive, ino: u32, dir: StreamDir) -> Result<StreamInfo, Error> {
    d.run(
        e,
        Op::StreamOpen {
            ino,
            spec: spec(dir),
        },
    )
    .map(|o| match o {
        Output::Stream(i) => i,
        o => panic!("{o:?}"),
    })
}

fn write(e: &mut Engine, d: &mut Drive, stream: u32, bytes: &[u8]) {
    d.run(
        e,
        Op::StreamWrite {
            stream,
            data: IoBuf::from_slice(bytes),
        },
    )
    .unwrap();
}

fn unlink(e: &mut Engine, d: &mut Drive, name: &str) {
    let parent = e.volume().root();
    d.run(
        e,
        Op::Unlink {
            parent,
            name: name.as_bytes().to_vec(),
        },
    )
    .unwrap();
}

#[test]
fn a_recording_keeps_its_inode_after_the_last_name_goes() {
    let (mut e, mut d) = setup(Some(Admission::bandwidth(100e6, 0.1)), 5);
    let old = d.create(&mut e, "old.ts");
    let rec = open(&mut e, &mut d, old, StreamDir::Write).unwrap();
    write(&mut e, &mut d, rec.id, &[1u8; 300_000]);
    unlink(&mut e, &mut d, "old.ts");
    assert!(
        e.volume().is_orphan(old),
        "the stream holds the file: it lives on without a name"
    );
    e.check().unwrap();
    // The old inode number is not free, so the new file cannot get it.
    let new = d.create(&mut e, "new.ts");
    assert_ne!(
        new, old,
        "a file created meanwhile reused the stream's inode"
    );
    write(&mut e, &mut d, rec.id, &[2u8; 600_000]);
    d.run(&mut e, Op::StreamClose { stream: rec.id }).unwrap();
    // Nothing of the recording went into the new file, and the orphan went with
    // the stream's end.
    assert_eq!(e.volume().stat(new).unwrap().size_bytes, 0);
    // The freeing waits its turn in the engine's queue: let it run.
    d.run(&mut e, Op::Fsync).unwrap();
    assert!(!e.volume().inode_exists(old), "the orphan was not freed");
    e.check().unwrap();
}

#[test]
fn a_playback_keeps_reading_the_file_whose_name_was_removed() {
    let (mut e, mut d) = setup(Some(Admission::bandwidth(100e6, 0.1)), 5);
    let old = d.create(&mut e, "old.ts");
    let bytes: Vec<u8> = (0..500_000u32).map(|i| (i % 251) as u8).collect();
    d.run(
        &mut e,
        Op::Write {
            ino: old,
            offset: 0,
            data: IoBuf::from_slice(&bytes),
        },
    )
    .unwrap();
    let play = open(&mut e, &mut d, old, StreamDir::Read).unwrap();
    unlink(&mut e, &mut d, "old.ts");
    let new = d.create(&mut e, "new.ts");
    assert_ne!(new, old);
    let mut got = vec![];
    while got.len() < bytes.len() {
        let r = d
            .run(
                &mut e,
                Op::StreamRead {
                    stream: play.id,
                    buf: IoBuf::zeroed(64 << 10),
                },
            )
            .unwrap();
        let Output::Read { buf, bytes: n } = r else {
            panic!("{r:?}")
        };
        assert!(n > 0, "the playback ended early at {}", got.len());
        got.extend_from_slice(&buf.bytes().unwrap()[..n]);
    }
    assert!(got == bytes, "the playback read other bytes");
    d.run(&mut e, Op::StreamClose { stream: play.id }).unwrap();
    d.run(&mut e, Op::Fsync).unwrap();
    assert!(!e.volume().inode_exists(old));
    e.check().unwrap();
}

#[test]
fn an_unmount_frees_the_orphan_a_recording_held_last() {
    let (mut e, mut d) = setup(Some(Admission::bandwidth(100e6, 0.1)), 5);
    let old = d.create(&mut e, "old.ts");
    let rec = open(&mut e, &mut d, old, StreamDir::Write).unwrap();
    write(&mut e, &mut d, rec.id, &[7u8; 100_000]);
    unlink(&mut e, &mut d, "old.ts");
    // The unmount closes the stream; the stream's end frees the orphan before the
    // unmount's final commit, which waits for every operation.
    d.run(&mut e, Op::Unmount).unwrap();
    assert!(!e.volume().inode_exists(old));
    let (vol, _) = Volume::load(&d.dev, &OpenOptions::read_only()).unwrap();
    assert!(
        !vol.inode_exists(old),
        "the orphan is on the disk after unmount"
    );
}

#[test]
fn a_second_recording_on_a_file_is_refused_while_the_first_is_open() {
    let (mut e, mut d) = setup(Some(Admission::bandwidth(100e6, 0.1)), 5);
    let ino = d.create(&mut e, "cam.ts");
    let first = open(&mut e, &mut d, ino, StreamDir::Write).unwrap();
    let err = open(&mut e, &mut d, ino, StreamDir::Write).unwrap_err();
    assert_eq!(err.errno(), libc_ebusy(), "{err}");
    let msg = err.to_string();
    assert!(
        msg.contains("already has a recording") && msg.contains(&format!("stream {}", first.id)),
        "{msg}"
    );
    // A playback beside the recording is fine (following it as it grows).
    let play = open(&mut e, &mut d, ino, StreamDir::Read).unwrap();
    // Both streams hold the file: the engine's own check says so.
    e.check().unwrap();
    assert_eq!(e.volume().open_count(ino), 2);
    write(&mut e, &mut d, first.id, &[3u8; 300_000]);
    d.run(&mut e, Op::StreamClose { stream: first.id }).unwrap();
    // Once the first is closed (its bytes written), the next recording goes on.
    let second = open(&mut e, &mut d, ino, StreamDir::Write).unwrap();
    write(&mut e, &mut d, second.id, &[4u8; 200_000]);
    d.run(&mut e, Op::StreamClose { stream: second.id })
        .unwrap();
    d.run(&mut e, Op::StreamClose { stream: play.id }).unwrap();
    assert_eq!(e.volume().stat(ino).unwrap().size_bytes, 500_000);
    e.check().unwrap();
}

/// EBUSY, as `Error::errno` gives it.
fn libc_ebusy() -> i32 {
    16
}
