//! The memory streams take (`engine/stream/memory.rs`): an idle read stream fills
//! no buffer until it is read, and a budget bounds the buffers of all streams.
//! In virtual time on a `MemDevice` (`common::drive`).

mod common;

use common::drive::{open_stream as open, pattern, setup, stream_spec, Drive};
use dvrfs_core::disk::Admission;
use dvrfs_core::engine::{Engine, IoBuf, Op, Output, StreamDir, StreamSpec};
use dvrfs_core::Error;

const SEC: u64 = 1_000_000_000;

fn read_spec(buffer_bytes: Option<u64>, idle: bool) -> StreamSpec {
    StreamSpec {
        buffer_bytes,
        idle,
        ..stream_spec(StreamDir::Read, 8.0, 0)
    }
}

/// A file of `len` bytes of [`pattern`].
fn file(e: &mut Engine, d: &mut Drive, name: &str, len: usize) -> u32 {
    let ino = d.create(e, name);
    let data = IoBuf::from_slice(&pattern(len));
    d.run(
        e,
        Op::Write {
            ino,
            offset: 0,
            data,
        },
    )
    .unwrap();
    ino
}

fn requests(e: &Engine, sid: u32) -> u64 {
    e.stream_info(sid).expect("open").1.requests
}

#[test]
fn an_idle_read_stream_prefetches_nothing_until_it_is_read() {
    let (mut e, mut d) = setup(Some(Admission::bandwidth(100e6, 0.1)), 5);
    let len = 4 << 20;
    let a = file(&mut e, &mut d, "a", len);
    let b = file(&mut e, &mut d, "b", len);
    let idle = open(&mut e, &mut d, a, read_spec(Some(2 << 20), true)).unwrap();
    let busy = open(&mut e, &mut d, b, read_spec(Some(2 << 20), false)).unwrap();
    let t = d.now().mono_ns;
    d.run_until(&mut e, t + 5 * SEC);
    // The stream opened to play at once filled its buffer; the idle one nothing.
    assert_eq!(
        requests(&e, busy.id),
        8,
        "a 2 MiB buffer of 256 KiB requests"
    );
    assert_eq!(requests(&e, idle.id), 0);
    // A zero-length read starts it (the mount's open) without taking a byte.
    let r = d.run(
        &mut e,
        Op::StreamRead {
            stream: idle.id,
            buf: IoBuf::zeroed(0),
        },
    );
    assert!(matches!(r, Ok(Output::Read { bytes: 0, .. })), "{r:?}");
    let t = d.now().mono_ns;
    d.run_until(&mut e, t + 5 * SEC);
    assert_eq!(requests(&e, idle.id), 8, "its buffer filled once started");
    // And it plays the file's bytes, from the start.
    let r = d.run(
        &mut e,
        Op::StreamRead {
            stream: idle.id,
            buf: IoBuf::zeroed(len),
        },
    );
    match r {
        Ok(Output::Read { buf, bytes }) => {
            assert_eq!(bytes, len);
            assert!(
                buf.bytes().unwrap()[..len] == pattern(len)[..],
                "bytes differ"
            );
        }
        o => panic!("{o:?}"),
    }
    let st = e.stream_info(idle.id).unwrap().1.clone();
    assert_eq!(st.late, 0, "its clock started at its first read: {st:?}");
}

#[test]
fn a_stream_whose_buffer_would_pass_the_budget_is_refused_saying_so() {
    let (mut e, mut d) = setup(Some(Admission::bandwidth(100e6, 0.1)), 5);
    let a = file(&mut e, &mut d, "a", 1 << 20);
    let b = file(&mut e, &mut d, "b", 1 << 20);
    e.set_stream_memory_bytes(Some(3 << 20));
    // Idle, the first stream holds no memory, but its buffer is promised.
    let first = open(&mut e, &mut d, a, read_spec(Some(2 << 20), true)).unwrap();
    assert_eq!(e.stream_buffers_bytes(), 2 << 20);
    let err = open(&mut e, &mut d, b, read_spec(Some(2 << 20), false)).unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, Error::Refused(_)), "{msg}");
    assert_eq!(err.errno(), libc_ebusy(), "{msg}");
    assert!(
        msg.contains("stream buffers would take 4 MiB of the daemon's 3 MiB budget"),
        "{msg}"
    );
    // A buffer dvrfs chooses is chosen within what is left.
    let auto = open(&mut e, &mut d, b, read_spec(None, false)).unwrap();
    assert!(auto.buffer_bytes <= 1 << 20, "{auto:?}");
    assert_eq!(e.stream_buffers_bytes(), (2 << 20) + auto.buffer_bytes);
    // Closing a stream gives its share back.
    d.run(&mut e, Op::StreamClose { stream: first.id }).unwrap();
    d.run(&mut e, Op::StreamClose { stream: auto.id }).unwrap();
    assert_eq!(e.stream_buffers_bytes(), 0);
    open(&mut e, &mut d, b, read_spec(Some(2 << 20), false)).unwrap();
    // Without a budget (the engine's default), nothing is refused for memory.
    e.set_stream_memory_bytes(None);
    open(&mut e, &mut d, a, read_spec(Some(256 << 20), false)).unwrap();
}

fn libc_ebusy() -> i32 {
    16
}
