//! Stream reservations in the engine, in virtual time: admission, space held at open,
//! write-behind and playout with rate control, byte-exact read-back, deadlines met.
//! The driver (`common::drive`) serves device commands one at a time on a
//! `MemDevice`, each taking 2 ms plus its transfer at 100 MB/s of virtual time.

mod common;

use common::drive::{open_stream as open, pattern, setup, stream_spec as spec, Drive};
use dvrfs_core::device::{Device, MemDevice};
use dvrfs_core::disk::Admission;
use dvrfs_core::engine::{
    stream_ask, DevCommand, DevKind, Engine, EngineConfig, GatherMode, IoBuf, Now, Op, Output,
    StreamDir, StreamSpec, AUTO_SLACK_NS, MAX_STREAM_BUFFER_BYTES,
};
use dvrfs_core::format::superblock::AllocPolicy;
use dvrfs_core::layout::TailLogSize;
use dvrfs_core::{Error, OpenOptions, Volume};
use std::collections::HashMap;

#[test]
fn admission_refuses_what_does_not_fit_and_says_what_is_left() {
    // 10 MB/s with a 10% best-effort share: 9 MB/s for streams.
    let (mut e, mut d) = setup(Some(Admission::bandwidth(10e6, 0.1)), 5);
    let a = d.create(&mut e, "a");
    let b = d.create(&mut e, "b");
    let first = open(&mut e, &mut d, a, spec(StreamDir::Read, 40.0, 0)).unwrap();
    assert!((first.load - 5.0 / 9.0).abs() < 1e-9, "{first:?}");
    let err = open(&mut e, &mut d, b, spec(StreamDir::Read, 40.0, 0)).unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, Error::Refused(_)), "{msg}");
    assert!(
        msg.contains("asked for a read stream of 40.00 Mbit/s"),
        "{msg}"
    );
    assert!(msg.contains("fits at up to 32.00 Mbit/s"), "{msg}");
    // What is left does fit.
    open(&mut e, &mut d, b, spec(StreamDir::Read, 32.0, 0)).unwrap();
    // Closing the first makes room again.
    d.run(&mut e, Op::StreamClose { stream: first.id }).unwrap();
    open(&mut e, &mut d, a, spec(StreamDir::Read, 40.0, 0)).unwrap();
}

#[test]
fn the_rate_a_refusal_says_fits_is_admitted_when_asked_for() {
    // On a disk model, with buffers dvrfs chooses: admit playbacks of 6 Mbit/s until
    // one is refused, close one, ask for 40 Mbit/s (refused, naming a rate that
    // fits), then for exactly that rate.
    let model = dvrfs_core::disk::DiskModel::builtin("avfs-250g").unwrap();
    let (mut e, mut d) = setup(Some(Admission::from_model(&model, 0.1)), 5);
    let auto = |mbit: f64| StreamSpec {
        idle: false,
        buffer_bytes: None,
        request_bytes: 512 << 10,
        ..spec(StreamDir::Read, mbit, 0)
    };
    let mut open_ids = vec![];
    loop {
        let ino = d.create(&mut e, &format!("r{}", open_ids.len()));
        match open(&mut e, &mut d, ino, auto(6.0)) {
            Ok(i) => open_ids.push(i.id),
            Err(_) => break,
        }
        assert!(open_ids.len() < 1000, "never refused");
    }
    // `dvrfs capacity` counts exactly what the engine admitted.
    let mode = GatherMode {
        commit_interval_ns: 1_000_000_000,
        tail_log: true,
        ring_bytes: 4 << 20,
    };
    let counted = Admission::from_model(&model, 0.1).count_admitted(
        &stream_ask(StreamDir::Read, 6e6, 512 << 10, None, None, mode),
        dvrfs_core::engine::AUTO_SLACK_NS,
        dvrfs_core::engine::MAX_STREAM_BUFFER_BYTES,
    );
    assert_eq!(counted, open_ids.len());
    d.run(
        &mut e,
        Op::StreamClose {
            stream: open_ids[0],
        },
    )
    .unwrap();
    let ino = d.create(&mut e, "big");
    let msg = open(&mut e, &mut d, ino, auto(40.0))
        .unwrap_err()
        .to_string();
    let at = msg.find("fits at up to ").expect(&msg) + "fits at up to ".len();
    let rate: f64 = msg[at..].split(' ').next().unwrap().parse().unwrap();
    assert!((6.0..40.0).contains(&rate), "{msg}");
    open(&mut e, &mut d, ino, auto(rate)).unwrap_or_else(|err| panic!("{rate} Mbit/s: {err}"));
}

/// An engine on a fresh 1 GiB volume with a 64 MiB tail log, or without one.
fn setup_log(adm: Admission, tail_log: bool) -> (Engine, Drive) {
    let dev = common::formatted_with(1 << 30, 1 << 20, AllocPolicy::Zrr, 5, |p| {
        p.tail_log = match tail_log {
            true => TailLogSize::Blocks((64 << 20) / 4096),
            false => TailLogSize::Off,
        };
    });
    common::drive::engine_on(&dev, Some(adm))
}

/// Opens 250 kbit/s recordings durable within `durable_s` (auto buffers) until one
/// is refused: how many were admitted, the refusal, and the engine and drive.
fn fill_with_recordings(
    adm: &Admission,
    tail_log: bool,
    durable_s: u64,
) -> (usize, String, Engine, Drive, Vec<u32>) {
    let (mut e, mut d) = setup_log(adm.clone(), tail_log);
    let mut open_ids = vec![];
    let msg = loop {
        let ino = d.create(&mut e, &format!("c{}", open_ids.len()));
        match open(&mut e, &mut d, ino, recording(durable_s)) {
            Ok(i) => {
                let buffer = 8_388_608_000;
                assert_eq!(i.slack_ns, buffer, "the guarantee is the buffer's: {i:?}");
                open_ids.push(i.id)
            }
            Err(err) => break err.to_string(),
        }
        assert!(open_ids.len() < 2000, "never refused");
    };
    (open_ids.len(), msg, e, d, open_ids)
}

/// A 250 kbit/s recording in 512 KiB requests, durable within `durable_s` seconds.
fn recording(durable_s: u64) -> StreamSpec {
    StreamSpec {
        idle: false,
        buffer_bytes: None,
        request_bytes: 512 << 10,
        durable_ns: Some(durable_s * 1_000_000_000),
        ..spec(StreamDir::Write, 0.25, 0)
    }
}

/// After a refusal: with one stream closed, a recording of 40 Mbit/s is refused,
/// naming a rate that is admitted when asked for.
fn the_rate_named_fits(e: &mut Engine, d: &mut Drive, stream: u32) {
    d.run(e, Op::StreamClose { stream }).unwrap();
    let ino = d.create(e, "big");
    let fast = StreamSpec {
        idle: false,
        rate_bps: 40e6,
        ..recording(1)
    };
    let msg = open(e, d, ino, fast.clone()).unwrap_err().to_string();
    let at = msg.find("fits at up to ").expect(&msg) + "fits at up to ".len();
    let rate: f64 = msg[at..].split(' ').next().unwrap().parse().unwrap();
    assert!((0.25..40.0).contains(&rate), "{msg}");
    let fits = StreamSpec {
        idle: false,
        rate_bps: rate * 1e6,
        ..fast
    };
    open(e, d, ino, fits).unwrap_or_else(|err| panic!("{rate} Mbit/s: {err}"));
}

#[test]
fn slow_recordings_are_admitted_for_what_their_durability_interval_costs() {
    // 250 kbit/s recordings on nvr-8t's model. Without a tail log they write a
    // 32 KiB request every second at a durability interval of 1 s: admission counts
    // one positioning a second each, refuses the one the model says does not fit and
    // names the way out; at 10 s the same disk takes many more. (Beside the ones at
    // 1 s, none at 10 s fits: the round is a second, and admission charges every
    // stream a positioning each round.) With a tail log (mkfs's default) they log
    // every byte and write whole requests due at their buffer's overflow, as many as
    // the log's ring holds.
    let model = dvrfs_core::disk::DiskModel::builtin("nvr-8t").unwrap();
    let adm = Admission::from_model(&model, 0.1);
    let counted = |durable_s: u64, tail_log| {
        let mode = GatherMode {
            commit_interval_ns: 1_000_000_000,
            tail_log,
            ring_bytes: 0,
        };
        let ask = stream_ask(
            StreamDir::Write,
            250e3,
            512 << 10,
            None,
            Some(durable_s * 1_000_000_000),
            mode,
        );
        adm.count_admitted(&ask, AUTO_SLACK_NS, MAX_STREAM_BUFFER_BYTES)
    };
    let (at_1s, at_10s) = (counted(1, false), counted(10, false));
    assert!((50..100).contains(&at_1s), "{at_1s}");
    assert!(at_10s > 5 * at_1s, "{at_10s} {at_1s}");
    let (n, msg, mut e, mut d, ids) = fill_with_recordings(&adm, false, 1);
    assert_eq!(n, at_1s, "{msg}");
    assert!(msg.contains("writing 32 KiB every 1 s"), "{msg}");
    assert!(msg.contains("longer durability interval"), "{msg}");
    the_rate_named_fits(&mut e, &mut d, ids[0]);
    // On a fresh volume, as many at 10 s as at 1 s all fit, and more.
    let (mut e, mut d) = setup_log(adm.clone(), false);
    for k in 0..=at_1s {
        let ino = d.create(&mut e, &format!("c{k}"));
        open(&mut e, &mut d, ino, recording(10)).unwrap_or_else(|err| panic!("{k}: {err}"));
    }

    // With the tail log: as many as its ring holds (64 MiB here), then in place.
    let (e, _) = setup_log(adm.clone(), true);
    let mode = e.gather_mode();
    assert!(mode.tail_log && mode.ring_bytes == 64 << 20, "{mode:?}");
    let ask = stream_ask(StreamDir::Write, 250e3, 512 << 10, None, None, mode);
    let logged = adm.count_admitted(&ask, AUTO_SLACK_NS, MAX_STREAM_BUFFER_BYTES);
    let ring = stream_ask(StreamDir::Write, 250e3, 512 << 10, None, None, mode).with_depth(2);
    let ring_holds = (mode.ring_bytes as f64
        / (ring.ring_rate_bytes_per_s() * ring.ring_hold_ns() / 1e9)) as usize;
    // A ring of 64 MiB holds 69 of them (with buffers of two requests) and the rest
    // are in place: about as many in all as without the log (those it holds move
    // their bytes twice), where a 256 MiB ring takes three times as many.
    assert!(
        logged >= ring_holds && logged >= at_1s * 9 / 10,
        "{logged} {at_1s} {ring_holds}"
    );
    let (n, msg, mut e, mut d, ids) = fill_with_recordings(&adm, true, 1);
    assert_eq!(n, logged, "{msg}");
    assert!(
        msg.contains("beyond what the tail log's ring of 64 MiB holds"),
        "{msg}"
    );
    assert!(msg.contains("longer durability interval"), "{msg}");
    the_rate_named_fits(&mut e, &mut d, ids[0]);
}

#[test]
fn without_an_admission_model_streams_are_refused_with_the_way_out() {
    let (mut e, mut d) = setup(None, 5);
    let a = d.create(&mut e, "a");
    let msg = open(&mut e, &mut d, a, spec(StreamDir::Read, 4.0, 0))
        .unwrap_err()
        .to_string();
    assert!(msg.contains("--device-model"), "{msg}");
}

#[test]
fn bad_stream_parameters_are_invalid_arguments() {
    let (mut e, mut d) = setup(Some(Admission::bandwidth(100e6, 0.1)), 5);
    let a = d.create(&mut e, "a");
    for s in [
        StreamSpec {
            idle: false,
            rate_bps: 0.0,
            ..spec(StreamDir::Read, 1.0, 0)
        },
        StreamSpec {
            idle: false,
            request_bytes: 1000,
            ..spec(StreamDir::Read, 1.0, 0)
        },
        StreamSpec {
            idle: false,
            buffer_bytes: Some(256 * 1024),
            ..spec(StreamDir::Read, 1.0, 0)
        },
    ] {
        let err = open(&mut e, &mut d, a, s).unwrap_err();
        assert!(matches!(err, Error::InvalidArgument(_)), "{err}");
    }
    let err = open(&mut e, &mut d, 9999, spec(StreamDir::Read, 1.0, 0)).unwrap_err();
    assert!(
        matches!(err, Error::NotFound(_) | Error::InvalidArgument(_)),
        "{err}"
    );
    // A stream id never opened, and the wrong direction.
    let err = d
        .run(
            &mut e,
            Op::StreamRead {
                stream: 77,
                buf: IoBuf::zeroed(4096),
            },
        )
        .unwrap_err();
    assert!(err.to_string().contains("not open"), "{err}");
    let s = open(&mut e, &mut d, a, spec(StreamDir::Read, 1.0, 0)).unwrap();
    let err = d
        .run(
            &mut e,
            Op::StreamWrite {
                stream: s.id,
                data: IoBuf::zeroed(4096),
            },
        )
        .unwrap_err();
    assert!(err.to_string().contains("read stream"), "{err}");
}

#[test]
fn a_recording_holds_its_space_at_open_and_gives_back_what_it_did_not_use() {
    let (mut e, mut d) = setup(Some(Admission::bandwidth(100e6, 0.1)), 5);
    let a = d.create(&mut e, "a");
    let b = d.create(&mut e, "b");
    let free = e.volume().free_bytes();
    // More than the disk has: refused at open, nothing held.
    let err = open(
        &mut e,
        &mut d,
        a,
        spec(StreamDir::Write, 8.0, free + (1 << 20)),
    )
    .unwrap_err();
    assert!(matches!(err, Error::NoSpace { .. }), "{err}");
    assert_eq!(e.volume().free_bytes(), free);
    // Holding all but 4 MiB leaves a best-effort writer only those.
    let hold = free - (4 << 20);
    let s = open(&mut e, &mut d, a, spec(StreamDir::Write, 8.0, hold)).unwrap();
    assert_eq!(e.volume().free_bytes(), 4 << 20);
    let err = d
        .run(
            &mut e,
            Op::Write {
                ino: b,
                offset: 0,
                data: IoBuf::zeroed(8 << 20),
            },
        )
        .unwrap_err();
    assert!(matches!(err, Error::NoSpace { .. }), "{err}");
    // The recording writes 3 MiB of its hold; closing gives the rest back.
    let id = e
        .submit(
            Op::StreamWrite {
                stream: s.id,
                data: IoBuf::from_slice(&pattern(3 << 20)),
            },
            None,
            1,
            d.now(),
        )
        .unwrap();
    d.wait(&mut e, id).result.unwrap();
    d.run(&mut e, Op::StreamClose { stream: s.id }).unwrap();
    assert_eq!(e.volume().free_bytes(), free - (3 << 20));
    assert_eq!(e.volume().held_bytes(), 0);
}

#[test]
fn record_then_play_at_rate_byte_exact_with_every_deadline_met() {
    let (mut e, mut d) = setup(Some(Admission::bandwidth(100e6, 0.1)), 5);
    let ino = d.create(&mut e, "rec.ts");
    let data = pattern(12 << 20);
    let rate_mbit = 16.0; // 2 MB/s: 6 s of recording
    let rec = open(
        &mut e,
        &mut d,
        ino,
        spec(StreamDir::Write, rate_mbit, 12 << 20),
    )
    .unwrap();
    assert_eq!(rec.depth, 8);
    let t0 = d.t;
    // The recorder writes 188 * 700 bytes at a time (MPEG-TS packets), as fast as the
    // stream lets it.
    for piece in data.chunks(188 * 700) {
        let r = d
            .run(
                &mut e,
                Op::StreamWrite {
                    stream: rec.id,
                    data: IoBuf::from_slice(piece),
                },
            )
            .unwrap();
        assert!(matches!(r, Output::Write { data } if data.len() == piece.len()));
    }
    d.run(&mut e, Op::StreamClose { stream: rec.id }).unwrap();
    let elapsed = (d.t - t0) as f64 / 1e9;
    // Rate control: no faster than the rate (less the burst it may run ahead).
    let burst = rec.request_bytes as f64 / 2.0;
    assert!(elapsed >= (data.len() as f64 - burst) / 2e6, "{elapsed}");
    let st = e.volume().stat(ino).unwrap();
    assert_eq!(st.size_bytes, data.len() as u64);

    // Play it back at the same rate.
    let play = open(&mut e, &mut d, ino, spec(StreamDir::Read, rate_mbit, 0)).unwrap();
    let t1 = d.t;
    let mut back = vec![];
    let mut first_ns = None;
    loop {
        let r = d
            .run(
                &mut e,
                Op::StreamRead {
                    stream: play.id,
                    buf: IoBuf::zeroed(100_000),
                },
            )
            .unwrap();
        first_ns.get_or_insert(d.t - t1);
        let Output::Read { buf, bytes } = r else {
            panic!("{r:?}")
        };
        if bytes == 0 {
            break;
        }
        back.extend_from_slice(&buf.bytes().unwrap()[..bytes]);
    }
    assert!(back == data, "played bytes differ from the recording");
    // The first byte comes one slack after the open, and playing takes the rate's time.
    assert!(first_ns.unwrap() >= play.slack_ns, "{first_ns:?} {play:?}");
    let elapsed = (d.t - t1) as f64 / 1e9;
    assert!(elapsed >= data.len() as f64 / 2e6, "{elapsed}");
    let (_, stats) = e.stream_info(play.id).unwrap();
    assert_eq!(stats.late, 0, "{stats:?}");
    assert!(stats.requests >= (12 << 20) / (256 << 10), "{stats:?}");
    assert_eq!(stats.stalls, 0, "{stats:?}");
    assert!(stats.min_margin_ns.unwrap() > 0, "{stats:?}");
    d.run(&mut e, Op::StreamClose { stream: play.id }).unwrap();
}

#[test]
fn a_waiting_stream_read_can_be_cancelled() {
    let (mut e, mut d) = setup(Some(Admission::bandwidth(100e6, 0.1)), 5);
    let ino = d.create(&mut e, "f");
    d.run(
        &mut e,
        Op::Write {
            ino,
            offset: 0,
            data: IoBuf::from_slice(&pattern(4 << 20)),
        },
    )
    .unwrap();
    let s = open(&mut e, &mut d, ino, spec(StreamDir::Read, 8.0, 0)).unwrap();
    // The first byte is due a slack after the open: the read waits.
    let id = e
        .submit(
            Op::StreamRead {
                stream: s.id,
                buf: IoBuf::zeroed(1 << 20),
            },
            None,
            1,
            d.now(),
        )
        .unwrap();
    assert!(e.take_completion().is_none());
    e.cancel(id, d.now()).unwrap();
    let c = e.take_completion().unwrap();
    assert_eq!(c.op, id);
    assert!(matches!(c.result, Err(Error::Cancelled)), "{:?}", c.result);
    d.run(&mut e, Op::StreamClose { stream: s.id }).unwrap();
    assert_eq!(e.ops_in_flight(), 0);
}

/// Every stream admission lets onto `avfs-250g` (ATSC playbacks, buffers chosen by
/// admission) meets every deadline on that disk's model, with the mixer, in virtual
/// time: admission is on the safe side of what the scheduler delivers.
#[test]
fn streams_admitted_on_a_disk_model_meet_every_deadline_on_that_disk() {
    use dvrfs_core::disk::{Access, DiskModel, Estimator, Hdd};
    use dvrfs_core::driver::{Fs, ManualClock};
    use dvrfs_core::layout::MkfsParams;
    use dvrfs_core::tools::mkfs;

    let model = DiskModel::builtin("avfs-250g").unwrap();
    let cap = model.capacity_bytes();
    let mut dev = MemDevice::with_sector(cap, model.sector_bytes);
    // Recordings to play: virtual data (the blocks are allocated; no bytes move), so
    // the volume has no data checksums (there are no bytes to checksum).
    let mut p = MkfsParams::new(cap, [4; 16], 9);
    p.sum_granule_bytes = None;
    mkfs(&mut dev, &p, &mut |_, _| {}).unwrap();
    const FILES: usize = 24;
    const FILE_BYTES: u64 = 128 << 20;
    let mut fs = Fs::open_with(
        dev,
        OpenOptions::writable(),
        Box::new(ManualClock::new()),
        None,
    )
    .unwrap();
    let root = fs.root();
    let mut inos = vec![];
    for i in 0..FILES {
        let ino = fs
            .create(root, format!("p{i}.ts").as_bytes(), 0o644, 0, 0, 0)
            .unwrap();
        fs.write_buf(ino, 0, IoBuf::virtual_len(FILE_BYTES as usize), 0)
            .unwrap();
        inos.push(ino);
    }
    let mut dev = fs.close().unwrap();
    let (vol, replay) = Volume::load(&dev, &OpenOptions::writable()).unwrap();
    let cfg = EngineConfig {
        estimator: Box::new(Estimator::from_model(&model)),
        admission: Some(Admission::from_model(&model, 0.1)),
        ..EngineConfig::new(model.sector_bytes)
    };
    let mut e = Engine::new(vol, replay, cfg, Now::mono(0)).unwrap();
    let mut hdd = Hdd::new(&model, 3);
    let mut t = 0u64;
    // Admit ATSC playbacks until admission says no.
    let mut streams = vec![];
    for &ino in &inos {
        let spec = StreamSpec {
            idle: false,
            dir: StreamDir::Read,
            rate_bps: 19.39e6,
            request_bytes: 512 << 10,
            buffer_bytes: None,
            reserve_bytes: 0,
            start_bytes: 0,
            durable_ns: None,
        };
        let id = e
            .submit(Op::StreamOpen { ino, spec }, None, 1, Now::mono(t))
            .unwrap();
        let c = e.take_completion().unwrap();
        assert_eq!(c.op, id);
        match c.result {
            Ok(Output::Stream(info)) => streams.push(info),
            Err(Error::Refused(_)) => break,
            other => panic!("{other:?}"),
        }
    }
    let n = streams.len();
    assert!(
        (8..FILES).contains(&n),
        "admitted {n} ATSC streams on avfs-250g"
    );
    // Each plays 40 s of its file, one 512 KiB read at a time, as fast as its rate lets.
    let want = (19.39e6 / 8.0 * 40.0) as u64;
    let mut read = vec![0u64; n];
    let mut pending: HashMap<u64, usize> = HashMap::new();
    for (i, s) in streams.iter().enumerate() {
        let op = Op::StreamRead {
            stream: s.id,
            buf: IoBuf::virtual_len(512 << 10),
        };
        pending.insert(e.submit(op, None, 1, Now::mono(t)).unwrap(), i);
    }
    let mut busy: Option<(DevCommand, u64)> = None;
    while !pending.is_empty() {
        // Polled on every step (it also runs the streams' timers); a command comes out
        // only when the disk is free.
        if let Some(c) = e.poll(Now::mono(t)) {
            assert!(busy.is_none(), "a second command for a queue-depth-1 disk");
            {
                let end = match c.kind {
                    DevKind::Flush => t,
                    k => {
                        let s = model.sector_bytes as u64;
                        hdd.service(
                            t,
                            &Access {
                                lba: c.offset_bytes / s,
                                sectors: (c.len_bytes / s) as u32,
                                write: k == DevKind::Write,
                            },
                        )
                        .end_ns
                    }
                };
                busy = Some((c, end));
            }
        }
        while let Some(c) = e.take_completion() {
            let Some(i) = pending.remove(&c.op) else {
                continue;
            };
            let Ok(Output::Read { bytes, .. }) = c.result else {
                panic!("{:?}", c.result)
            };
            read[i] += bytes as u64;
            if read[i] < want && bytes > 0 {
                let op = Op::StreamRead {
                    stream: streams[i].id,
                    buf: IoBuf::virtual_len(512 << 10),
                };
                pending.insert(e.submit(op, None, 1, Now::mono(t)).unwrap(), i);
            }
        }
        let next = [busy.as_ref().map(|b| b.1), e.next_wakeup()]
            .into_iter()
            .flatten()
            .min();
        let Some(next) = next else {
            assert!(
                pending.is_empty(),
                "{} reads pending, nothing scheduled",
                pending.len()
            );
            break;
        };
        t = t.max(next).max(t + 1);
        if let Some((c, end)) = busy.take_if(|(_, end)| *end <= t) {
            let r = match c.kind {
                DevKind::Flush => dev.flush(),
                DevKind::Write => e.io_write(c.id, |o, b| dev.write_at(o, b)),
                DevKind::Read => Ok(()),
            };
            e.complete(c.id, r, Now::mono(end));
        }
    }
    let late: u64 = streams
        .iter()
        .map(|s| {
            let (_, st) = e.stream_info(s.id).unwrap();
            assert!(st.requests > 0);
            st.late
        })
        .sum();
    for (i, r) in read.iter().enumerate() {
        assert!(*r >= want, "stream {i} read {r} of {want} bytes");
    }
    eprintln!("{n} ATSC streams admitted on avfs-250g, {late} late requests");
    assert_eq!(late, 0, "{n} admitted streams: {late} late requests");
}

#[test]
fn a_reader_following_a_recording_gets_the_bytes_still_in_its_buffer() {
    let (mut e, mut d) = setup(Some(Admission::bandwidth(100e6, 0.1)), 5);
    let ino = d.create(&mut e, "live.ts");
    let data = pattern(3 << 20);
    let rec = open(&mut e, &mut d, ino, spec(StreamDir::Write, 16.0, 4 << 20)).unwrap();
    let mut written = 0usize;
    let mut checks = 0;
    for piece in data.chunks(188 * 300) {
        d.run(
            &mut e,
            Op::StreamWrite {
                stream: rec.id,
                data: IoBuf::from_slice(piece),
            },
        )
        .unwrap();
        written += piece.len();
        // What stat says and what a read returns: everything written so far, though
        // part of it is in the stream's buffer or being written.
        assert_eq!(e.visible_size(ino).unwrap(), written as u64);
        let applied = e.volume().stat(ino).unwrap().size_bytes as usize;
        if applied < written {
            checks += 1;
        }
        let from = written.saturating_sub(700_000);
        let r = d
            .run(
                &mut e,
                Op::Read {
                    ino,
                    offset: from as u64,
                    buf: IoBuf::zeroed(1 << 20),
                },
            )
            .unwrap();
        let Output::Read { buf, bytes } = r else {
            panic!("{r:?}")
        };
        assert_eq!(bytes, written - from, "read length at {written}");
        assert!(
            buf.bytes().unwrap()[..bytes] == data[from..written],
            "bytes read at {from}..{written} differ (applied {applied})"
        );
    }
    assert!(
        checks > 10,
        "the reads never reached past the applied size: {checks}"
    );
    d.run(&mut e, Op::StreamClose { stream: rec.id }).unwrap();
    assert_eq!(e.visible_size(ino).unwrap(), data.len() as u64);
}

#[test]
fn a_stream_sync_puts_the_partial_request_on_the_disk_and_the_stream_goes_on() {
    let (mut e, mut d) = setup(Some(Admission::bandwidth(100e6, 0.1)), 5);
    let ino = d.create(&mut e, "synced.ts");
    let data = pattern(1 << 20);
    let rec = open(&mut e, &mut d, ino, spec(StreamDir::Write, 16.0, 2 << 20)).unwrap();
    let (a, b) = data.split_at(100_000);
    d.run(
        &mut e,
        Op::StreamWrite {
            stream: rec.id,
            data: IoBuf::from_slice(a),
        },
    )
    .unwrap();
    // Less than a request: nothing written yet.
    assert_eq!(e.volume().stat(ino).unwrap().size_bytes, 0);
    d.run(&mut e, Op::StreamSync { stream: rec.id }).unwrap();
    assert_eq!(e.volume().stat(ino).unwrap().size_bytes, a.len() as u64);
    d.run(&mut e, Op::Fsync).unwrap();
    // The stream goes on after the sync, at the unaligned end.
    d.run(
        &mut e,
        Op::StreamWrite {
            stream: rec.id,
            data: IoBuf::from_slice(b),
        },
    )
    .unwrap();
    d.run(&mut e, Op::StreamClose { stream: rec.id }).unwrap();
    assert!(d.read_file(&mut e, ino) == data, "bytes differ");
}

#[test]
fn a_stream_composes_its_shared_sector_unless_another_writer_changed_it() {
    // 100,000 bytes end 1,696 bytes into a sector; the stream's next request starts
    // there. Without another writer it is composed from what the stream wrote (no
    // read); after a write into that sector it reads the sector back, so the other
    // writer's bytes stay.
    for other in [false, true] {
        let (mut e, mut d) = setup(Some(Admission::bandwidth(100e6, 0.1)), 5);
        let ino = d.create(&mut e, "shared.ts");
        let mut data = pattern(1 << 20);
        let rec = open(&mut e, &mut d, ino, spec(StreamDir::Write, 16.0, 2 << 20)).unwrap();
        let write = |e: &mut Engine, d: &mut Drive, bytes: &[u8]| {
            d.run(
                e,
                Op::StreamWrite {
                    stream: rec.id,
                    data: IoBuf::from_slice(bytes),
                },
            )
            .unwrap();
        };
        write(&mut e, &mut d, &data[..100_000]);
        d.run(&mut e, Op::StreamSync { stream: rec.id }).unwrap();
        if other {
            let patch = vec![0xA5u8; 1000];
            d.run(
                &mut e,
                Op::Write {
                    ino,
                    offset: 98_500,
                    data: IoBuf::from_slice(&patch),
                },
            )
            .unwrap();
            data[98_500..99_500].copy_from_slice(&patch);
        }
        let reads_before = d.reads.0;
        write(&mut e, &mut d, &data[100_000..]);
        d.run(&mut e, Op::StreamClose { stream: rec.id }).unwrap();
        assert_eq!(
            d.reads.0 - reads_before,
            u64::from(other),
            "sector reads of the stream's next request (another writer: {other})"
        );
        assert!(
            d.read_file(&mut e, ino) == data,
            "bytes differ (another writer: {other})"
        );
    }
}
