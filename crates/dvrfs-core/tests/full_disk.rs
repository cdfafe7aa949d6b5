//! A full volume (issue 21): a recording past its reservation is refused the write
//! that does not fit, with "no space" (ENOSPC), never an I/O error, and keeps every
//! byte it accepted before; space a delete freed is available at once (a write that
//! needs it waits for the commit that makes it free), so a recorder that deletes its
//! oldest segment to open the next one never sees ENOSPC.

mod common;

use common::drive::{setup, Drive, MS};
use dvrfs_core::disk::Admission;
use dvrfs_core::driver::Fs;
use dvrfs_core::engine::{Engine, IoBuf, Op, Output, StreamDir, StreamSpec};
use dvrfs_core::{Error, OpenOptions};

const MIB: u64 = 1 << 20;

fn unlink(e: &mut Engine, d: &mut Drive, name: &str) {
    let root = e.volume().root();
    d.run(
        e,
        Op::Unlink {
            parent: root,
            name: name.as_bytes().to_vec(),
        },
    )
    .unwrap();
}

/// Fills the volume with file `name` (no data: virtual buffers) until `leave` data
/// blocks are free.
fn fill(e: &mut Engine, d: &mut Drive, name: &str, leave: u64) {
    let ino = d.create(e, name);
    let blocks = e.volume().free_bytes() / MIB - leave;
    d.run(
        e,
        Op::Write {
            ino,
            offset: 0,
            data: IoBuf::virtual_len((blocks * MIB) as usize),
        },
    )
    .unwrap();
    assert_eq!(e.volume().free_bytes(), leave * MIB);
}

fn write_stream(e: &mut Engine, d: &mut Drive, ino: u32, reserve_bytes: u64) -> u32 {
    let spec = StreamSpec {
        idle: false,
        dir: StreamDir::Write,
        rate_bps: 8e6,
        request_bytes: 512 << 10,
        buffer_bytes: None,
        reserve_bytes,
        start_bytes: 0,
        durable_ns: None,
    };
    match d.run(e, Op::StreamOpen { ino, spec }) {
        Ok(Output::Stream(i)) => i.id,
        o => panic!("{o:?}"),
    }
}

fn piece(from: u64, len: usize) -> Vec<u8> {
    (from..from + len as u64)
        .map(|i| (i * 7 + i / 4099) as u8)
        .collect()
}

#[test]
fn a_recording_past_its_reservation_on_a_full_volume_is_refused_no_space_and_keeps_every_accepted_byte(
) {
    let (mut e, mut d) = setup(Some(Admission::bandwidth(100e6, 0.1)), 11);
    fill(&mut e, &mut d, "old", 2);
    let ino = d.create(&mut e, "rec");
    // A 1 MiB reservation; the volume has one more free block beyond it.
    let sid = write_stream(&mut e, &mut d, ino, MIB);
    let mut accepted = 0u64;
    let err = loop {
        let data = piece(accepted, 96 << 10);
        match d.run(
            &mut e,
            Op::StreamWrite {
                stream: sid,
                data: IoBuf::from_slice(&data),
            },
        ) {
            Ok(_) => accepted += data.len() as u64,
            Err(err) => break err,
        }
        assert!(accepted < 3 * MIB, "never refused");
    };
    assert!(matches!(err, Error::NoSpace { .. }), "{err}");
    assert_eq!(err.errno(), libc_enospc());
    // Both blocks were filled: up to the last whole piece that fit in 2 MiB.
    assert_eq!(accepted, (2 * MIB) / (96 << 10) * (96 << 10));
    // The stream goes on: a write that fits is accepted after the refusal.
    let small = piece(accepted, 4096);
    d.run(
        &mut e,
        Op::StreamWrite {
            stream: sid,
            data: IoBuf::from_slice(&small),
        },
    )
    .unwrap();
    accepted += 4096;
    let stats = match d.run(&mut e, Op::StreamClose { stream: sid }) {
        Ok(Output::StreamClosed(s)) => s,
        o => panic!("{o:?}"),
    };
    assert_eq!(stats.no_space, 1);
    assert_eq!(stats.app_bytes, accepted);
    assert_eq!(stats.written_bytes, accepted);
    d.run(&mut e, Op::Fsync).unwrap();
    // Every accepted byte is on the volume.
    let mut fs = Fs::open(d.durable_at(d.t), OpenOptions::writable()).unwrap();
    let ino = fs.resolve("/rec").unwrap();
    let mut got = vec![0; accepted as usize];
    assert_eq!(fs.read(ino, 0, &mut got).unwrap(), accepted as usize);
    assert!(got == piece(0, accepted as usize));
}

fn libc_enospc() -> i32 {
    28
}

#[test]
fn space_a_delete_freed_is_available_at_once_and_a_write_that_needs_it_waits_for_the_commit() {
    let (mut e, mut d) = setup(Some(Admission::bandwidth(100e6, 0.1)), 11);
    fill(&mut e, &mut d, "old", 0);
    let free_before = e.volume().available_bytes();
    unlink(&mut e, &mut d, "old");
    // Not allocatable before the commit (a crash must not show new data in a file
    // whose deletion did not reach the disk), but available: df shows it.
    assert_eq!(e.volume().free_bytes(), 0);
    assert!(e.volume().available_bytes() > free_before + 200 * MIB);
    // A recording holding 8 MiB is admitted now (it was refused with ENOSPC).
    let ino = d.create(&mut e, "next");
    let sid = write_stream(&mut e, &mut d, ino, 8 * MIB);
    let data = piece(0, 3 * MIB as usize);
    d.run(
        &mut e,
        Op::StreamWrite {
            stream: sid,
            data: IoBuf::from_slice(&data),
        },
    )
    .unwrap();
    match d.run(&mut e, Op::StreamClose { stream: sid }) {
        Ok(Output::StreamClosed(s)) => assert_eq!((s.no_space, s.written_bytes), (0, 3 * MIB)),
        o => panic!("{o:?}"),
    }
    // A plain write that needs the freed blocks waits for the commit too.
    let other = d.create(&mut e, "plain");
    d.run(
        &mut e,
        Op::Write {
            ino: other,
            offset: 0,
            data: IoBuf::from_slice(&piece(0, 2 * MIB as usize)),
        },
    )
    .unwrap();
}

#[test]
fn deleting_the_oldest_segment_to_open_the_next_never_runs_out_of_space() {
    // A recorder on a full volume for a minute of virtual time: 4 MiB segments at
    // 8 Mbit/s (one every 4.2 s), each opened with a reservation of its size right
    // after the oldest segment is deleted.
    let (mut e, mut d) = setup(Some(Admission::bandwidth(100e6, 0.1)), 11);
    let seg = 4 * MIB;
    let mut segments = std::collections::VecDeque::new();
    let mut n = 0u32;
    // Fill with segments first.
    while e.volume().available_bytes() >= seg {
        let name = format!("seg{n:04}");
        let ino = d.create(&mut e, &name);
        d.run(
            &mut e,
            Op::Write {
                ino,
                offset: 0,
                data: IoBuf::virtual_len(seg as usize),
            },
        )
        .unwrap();
        segments.push_back(name);
        n += 1;
    }
    let end = d.t + 60_000 * MS;
    let mut recorded = 0;
    while d.t < end {
        let oldest = segments.pop_front().unwrap();
        unlink(&mut e, &mut d, &oldest);
        let name = format!("seg{n:04}");
        n += 1;
        let ino = d.create(&mut e, &name);
        let sid = write_stream(&mut e, &mut d, ino, seg);
        let mut off = 0;
        while off < seg {
            let len = (256 << 10) as usize;
            d.run(
                &mut e,
                Op::StreamWrite {
                    stream: sid,
                    data: IoBuf::from_slice(&piece(off, len)),
                },
            )
            .unwrap_or_else(|err| panic!("segment {name} at byte {off}: {err}"));
            off += len as u64;
        }
        match d.run(&mut e, Op::StreamClose { stream: sid }) {
            Ok(Output::StreamClosed(s)) => assert_eq!(s.no_space, 0),
            o => panic!("{o:?}"),
        }
        segments.push_back(name);
        recorded += 1;
    }
    // 4 MiB at 8 Mbit/s is 4.19 s: 14.3 segments a minute at most, 13 whole ones
    // with the closes and the commits they wait for.
    assert!(recorded >= 13, "{recorded} segments in a minute");
    e.check().unwrap();
}
