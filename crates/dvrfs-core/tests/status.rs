//! `Engine::status`, the operator's view (`dvrfs status`): the open streams named
//! and counted, what admission would still take (each figure checked against the
//! engine admitting or refusing the very streams it describes), and the space held.

mod common;

use common::drive::{open_stream as open, setup};
use dvrfs_core::disk::{Admission, DiskModel};
use dvrfs_core::engine::{HeadroomAsk, IoBuf, Op, StreamDir, StreamSpec};
use dvrfs_core::format::superblock::AllocPolicy;
use dvrfs_core::layout::TailLogSize;
use dvrfs_core::Error;

const REQ: u64 = 512 << 10;

fn write_spec(mbit: f64, reserve: u64) -> StreamSpec {
    StreamSpec {
        idle: false,
        dir: StreamDir::Write,
        rate_bps: mbit * 1e6,
        request_bytes: REQ,
        buffer_bytes: None,
        reserve_bytes: reserve,
        start_bytes: 0,
        durable_ns: None,
    }
}

/// Recordings at the volume's commit interval, as `write_spec` opens them.
fn ask(mbit: f64) -> HeadroomAsk {
    HeadroomAsk {
        rate_bps: mbit * 1e6,
        request_bytes: REQ,
        buffer_bytes: None,
        dir: StreamDir::Write,
        durable_ns: None,
    }
}

#[test]
fn status_lists_the_streams_by_path_and_its_headroom_is_what_the_engine_admits() {
    let model = DiskModel::builtin("avfs-250g").unwrap();
    let (mut e, mut d) = setup(Some(Admission::from_model(&model, 0.1)), 7);
    let root = e.volume().root();
    let cams = d.mkdir_in(&mut e, root, "cams");
    let mut opened = vec![];
    for k in 0..3 {
        let ino = d.create_in(&mut e, cams, &format!("cam{k}.ts"));
        opened.push(open(&mut e, &mut d, ino, write_spec(6.0, 8 << 20)).unwrap());
    }
    // Some bytes into the first recording: buffered until its request fills.
    let data = IoBuf::zeroed(100_000);
    d.run(
        &mut e,
        Op::StreamWrite {
            stream: opened[0].id,
            data,
        },
    )
    .unwrap();

    let mut st = e.status(ask(6.0));
    st.name_streams(root, |dir| e.volume().readdir(dir).unwrap());
    let paths: Vec<_> = st.streams.iter().map(|s| s.path.clone()).collect();
    assert_eq!(
        paths,
        vec![
            Some("/cams/cam0.ts".to_string()),
            Some("/cams/cam1.ts".to_string()),
            Some("/cams/cam2.ts".to_string())
        ]
    );
    let first = &st.streams[0];
    assert_eq!(first.dir, "write");
    assert_eq!(first.app_bytes, 100_000);
    assert_eq!(first.buffered_bytes, 100_000 - first.written_bytes);
    assert!((first.rate_bps - 6e6).abs() < 1e-6, "{first:?}");
    // Space: each recording holds what it reserved, less what it wrote.
    let held: u64 = st.streams.iter().map(|s| s.reserved_bytes).sum();
    assert_eq!(st.space.held_bytes, held);
    assert!(held > 0 && held <= 3 * (8 << 20), "{held}");
    assert!(
        st.space.used_bytes + st.space.held_bytes + st.space.free_bytes <= st.space.total_bytes
    );

    let adm = st.admission.clone().expect("opened with a model");
    assert!(adm.load > 0.0 && adm.load <= 1.0, "{adm:?}");
    // The interval the recordings are counted with: the volume's.
    assert_eq!(adm.asked.durable_ns, Some(1_000_000_000), "{adm:?}");
    let more = adm.more_streams;
    assert!(more > 0, "{adm:?}");
    // Exactly `more` more 6 Mbit/s recordings are admitted, and not one beyond.
    let mut extra = vec![];
    for k in 0..more {
        let ino = d.create_in(&mut e, cams, &format!("more{k}.ts"));
        extra.push(open(&mut e, &mut d, ino, write_spec(6.0, 0)).unwrap());
    }
    let ino = d.create_in(&mut e, root, "one-too-many.ts");
    let err = open(&mut e, &mut d, ino, write_spec(6.0, 0)).unwrap_err();
    assert!(matches!(err, Error::Refused(_)), "{err}");
    for s in extra {
        d.run(&mut e, Op::StreamClose { stream: s.id }).unwrap();
    }

    // The largest stream it names is admitted, and a little more is not.
    let largest = e.status(ask(6.0)).admission.unwrap().largest_rate_bps;
    assert!(largest > 6e6, "{largest}");
    let mut big = write_spec(largest / 1e6 * 1.01, 0);
    let err = open(&mut e, &mut d, ino, big.clone()).unwrap_err();
    assert!(matches!(err, Error::Refused(_)), "{err}");
    big.rate_bps = largest;
    let s = open(&mut e, &mut d, ino, big).unwrap();
    assert_eq!(e.status(ask(6.0)).streams.len(), 4);
    d.run(&mut e, Op::StreamClose { stream: s.id }).unwrap();
    assert_eq!(e.status(ask(6.0)).streams.len(), 3);
}

#[test]
fn without_an_admission_model_status_says_so_and_still_counts_space() {
    let (mut e, mut d) = setup(None, 3);
    let ino = d.create(&mut e, "plain");
    let data = IoBuf::zeroed(1 << 20);
    d.run(
        &mut e,
        Op::Write {
            ino,
            offset: 0,
            data,
        },
    )
    .unwrap();
    let st = e.status(ask(4.0));
    assert!(st.admission.is_none());
    assert!(st.streams.is_empty());
    assert!(st.space.used_bytes >= 1 << 20, "{:?}", st.space);
    assert_eq!(st.space.held_bytes, 0);
    assert!(st.disk.commands > 0);
}

#[test]
fn the_headroom_for_slow_recordings_counts_what_their_durability_interval_costs() {
    // 250 kbit/s recordings. Without a tail log they write a short request every
    // durability interval: fewer fit at 1 s than at 10 s, and fewer at 10 s than
    // playbacks of the same rate (whole requests). With one (mkfs's default) they
    // log every byte and write whole requests due at their buffer's overflow, as
    // many as its ring holds (a 256 MiB ring: 277 of them, with buffers of two
    // requests), at any interval. Each
    // figure is what the engine admits (`tests/streams.rs`).
    let model = DiskModel::builtin("nvr-8t").unwrap();
    let adm = Admission::from_model(&model, 0.1);
    let counts = |tail_log: bool| {
        let dev = common::formatted_with(1 << 30, 1 << 20, AllocPolicy::Zrr, 7, |p| {
            p.tail_log = match tail_log {
                true => TailLogSize::Blocks((256 << 20) / 4096),
                false => TailLogSize::Off,
            };
        });
        let (e, _d) = common::drive::engine_on(&dev, Some(adm.clone()));
        let more = |dir, durable_ns| {
            let a = HeadroomAsk {
                dir,
                durable_ns,
                ..ask(0.25)
            };
            e.status(a).admission.unwrap().more_streams
        };
        // An interval below the volume's commit interval is counted at the interval.
        assert_eq!(
            more(StreamDir::Write, Some(1)),
            more(StreamDir::Write, None)
        );
        (
            more(StreamDir::Write, None),
            more(StreamDir::Write, Some(10_000_000_000)),
            more(StreamDir::Read, None),
        )
    };
    let (at_1s, at_10s, playbacks) = counts(false);
    assert!(
        at_1s < 100 && at_1s < at_10s && at_10s <= playbacks,
        "{at_1s} {at_10s} {playbacks}"
    );
    let (logged_1s, logged_10s, playbacks) = counts(true);
    assert_eq!(logged_1s, 277);
    assert!(
        logged_10s > at_10s / 2 && logged_1s < playbacks,
        "{logged_1s} {logged_10s} {at_10s} {playbacks}"
    );
}
