//! The operator is told (issue 21 item 6): the event log kept in the volume and the
//! lost-tail record of each commit (FORMAT.md section 10b).
//!
//! Invariants protected: an event is committed with the metadata change it
//! describes, so a power cut at any write leaves a log that is a prefix of what the
//! engine recorded (never a torn record, never an event of a change that did not
//! survive); the ring keeps the newest events with increasing numbers; damage to the
//! log is reported and skipped and never stops the volume from opening; a volume
//! made before the log opens without one; after a crash the files whose last
//! accepted bytes were lost are named with what survived and what had been accepted.

mod common;

use common::drive::{setup, Drive, MS};
use dvrfs_core::device::{CrashDevice, CrashMode, MemDevice};
use dvrfs_core::disk::Admission;
use dvrfs_core::driver::{Fs, ManualClock};
use dvrfs_core::engine::{Engine, IoBuf, Op, Output, StreamDir, StreamSpec};
use dvrfs_core::format::events::{Dir, EventRecord, RefuseCause, What, EVENTS_PER_BLOCK};
use dvrfs_core::format::superblock::{AllocPolicy, FEATURE_EVENTS};
use dvrfs_core::format::{payload_mut, seal_block, verify_block, BlockType};
use dvrfs_core::layout::MkfsParams;
use dvrfs_core::tools::{fsck::fsck, mkfs};
use dvrfs_core::{OpenOptions, Volume};

/// A 256 MiB volume of 1 MiB blocks with an event ring of `ring` blocks (`None`: no
/// event area, as mkfs made volumes before the log existed).
fn formatted(ring: Option<u64>) -> MemDevice {
    let mut dev = MemDevice::new(256 << 20);
    let mut p = MkfsParams::new(256 << 20, [0x5a; 16], 3);
    p.data_block_bytes = 1 << 20;
    p.alloc = AllocPolicy::Zrr;
    p.event_ring_blocks = ring;
    mkfs(&mut dev, &p, &mut |_, _| {}).expect("mkfs");
    dev
}

fn engine_on(dev: &MemDevice) -> (Engine, Drive) {
    common::drive::engine_on(dev, Some(Admission::bandwidth(100e6, 0.1)))
}

fn spec(dir: StreamDir, mbit: f64) -> StreamSpec {
    StreamSpec {
        idle: false,
        dir,
        rate_bps: mbit * 1e6,
        request_bytes: 512 << 10,
        buffer_bytes: None,
        reserve_bytes: match dir {
            StreamDir::Write => 8 << 20,
            StreamDir::Read => 0,
        },
        start_bytes: 0,
        durable_ns: None,
    }
}

/// A stream far beyond the 100 MB/s the test's admission allows: refused.
fn refuse(e: &mut Engine, d: &mut Drive, ino: u32) {
    let r = d.run(
        e,
        Op::StreamOpen {
            ino,
            spec: spec(StreamDir::Read, 2_000.0),
        },
    );
    assert!(matches!(r, Err(dvrfs_core::Error::Refused(_))), "{r:?}");
}

fn kinds(events: &[EventRecord]) -> Vec<&'static str> {
    events.iter().map(|e| e.what.kind().1).collect()
}

fn load(dev: &MemDevice, writable: bool) -> Volume {
    let opts = match writable {
        true => OpenOptions::writable(),
        false => OpenOptions::read_only(),
    };
    Volume::load(dev, &opts).expect("the volume opens").0
}

#[test]
fn stream_events_survive_a_clean_remount_in_order() {
    let dev = formatted(Some(4));
    let (mut e, mut d) = engine_on(&dev);
    assert!(e.volume().has_event_log());
    assert!(e.volume().superblock().features & FEATURE_EVENTS != 0);
    let ino = d.create(&mut e, "rec");
    let info = match d.run(
        &mut e,
        Op::StreamOpen {
            ino,
            spec: spec(StreamDir::Write, 4.0),
        },
    ) {
        Ok(Output::Stream(i)) => i,
        o => panic!("{o:?}"),
    };
    refuse(&mut e, &mut d, ino);
    let data = vec![7u8; 300_000];
    d.run(
        &mut e,
        Op::StreamWrite {
            stream: info.id,
            data: IoBuf::from_slice(&data),
        },
    )
    .unwrap();
    d.run(&mut e, Op::StreamClose { stream: info.id }).unwrap();
    // A recording that asks to hold more than the volume has: refused for space
    // (once the first is closed: a file takes one recording at a time).
    let mut big = spec(StreamDir::Write, 1.0);
    big.reserve_bytes = 1 << 40;
    let r = d.run(&mut e, Op::StreamOpen { ino, spec: big });
    assert!(matches!(r, Err(dvrfs_core::Error::NoSpace { .. })), "{r:?}");
    // The drivers' copy: every event once, in order.
    let taken = e.take_new_events();
    assert_eq!(
        kinds(&taken),
        [
            "stream_admitted",
            "stream_refused",
            "stream_ended",
            "stream_refused"
        ]
    );
    assert!(e.take_new_events().is_empty());
    d.run(&mut e, Op::Unmount).unwrap();

    let v = load(&d.dev, true);
    assert!(!v.load_report().crashed(), "{:?}", v.load_report());
    let ev = v.events();
    assert_eq!(
        ev, taken,
        "what the log holds is what the drivers were given"
    );
    assert_eq!(ev.iter().map(|e| e.seq).collect::<Vec<_>>(), [1, 2, 3, 4]);
    for (x, y) in ev.iter().zip(&ev[1..]) {
        assert!(x.mono_ns <= y.mono_ns, "{x:?} {y:?}");
    }
    for x in &ev {
        assert_eq!(x.path, b"/rec");
        // The test's drive gives the engine wall = mono time.
        assert_eq!(x.wall_ns, x.mono_ns as i64);
    }
    match &ev[0].what {
        What::StreamAdmitted {
            ino: i,
            dir: Dir::Write,
            rate_bps,
            buffer_bytes,
            reserved_bytes,
            ..
        } => {
            assert_eq!((*i, *rate_bps), (ino, 4_000_000));
            assert_eq!(*buffer_bytes, info.buffer_bytes);
            assert_eq!(*reserved_bytes, 8 << 20);
        }
        w => panic!("{w:?}"),
    }
    match &ev[1].what {
        What::StreamRefused {
            cause: RefuseCause::Capacity,
            rate_bps,
            fits_bps,
            dir: Dir::Read,
            ..
        } => {
            assert_eq!(*rate_bps, 2_000_000_000);
            // 90% of 100 MB/s less the 4 Mbit/s recording, in bits.
            assert!(
                *fits_bps > 600_000_000 && *fits_bps < 720_000_000,
                "{fits_bps}"
            );
        }
        w => panic!("{w:?}"),
    }
    assert!(
        matches!(
            ev[3].what,
            What::StreamRefused {
                cause: RefuseCause::NoSpace,
                dir: Dir::Write,
                rate_bps: 1_000_000,
                fits_bps: 0,
                ..
            }
        ),
        "{:?}",
        ev[3]
    );
    match &ev[2].what {
        What::StreamEnded {
            bytes,
            late,
            no_space,
            ..
        } => assert_eq!((*bytes, *late, *no_space), (300_000, 0, 0)),
        w => panic!("{w:?}"),
    }
    common::assert_fsck_clean(&d.dev);
}

#[test]
fn a_stream_whose_write_fails_is_recorded_as_failed_with_its_errno() {
    let dev = formatted(Some(2));
    let (mut e, mut d) = engine_on(&dev);
    let ino = d.create(&mut e, "rec");
    let sid = match d.run(
        &mut e,
        Op::StreamOpen {
            ino,
            spec: spec(StreamDir::Write, 4.0),
        },
    ) {
        Ok(Output::Stream(i)) => i.id,
        o => panic!("{o:?}"),
    };
    // Every write to the data region fails from now on (metadata writes still land).
    let sb = e.volume().superblock().clone();
    d.fail_writes_in = Some(sb.data_start_bytes..sb.backup_start_bytes);
    let data = vec![1u8; 700 << 10];
    let _ = d.run(
        &mut e,
        Op::StreamWrite {
            stream: sid,
            data: IoBuf::from_slice(&data),
        },
    );
    let r = d.run(&mut e, Op::StreamClose { stream: sid });
    assert!(r.is_err(), "{r:?}");
    d.run(&mut e, Op::Unmount).unwrap();
    let ev = load(&d.dev, false).events();
    assert_eq!(kinds(&ev), ["stream_admitted", "stream_failed"]);
    assert_eq!(
        ev[1].what,
        What::StreamFailed {
            ino,
            dir: Dir::Write,
            errno: 5
        }
    );
}

#[test]
fn the_ring_wraps_keeping_the_newest_events_in_sequence() {
    let dev = formatted(Some(2));
    let cap = 2 * EVENTS_PER_BLOCK as u64;
    let (mut e, mut d) = engine_on(&dev);
    assert_eq!(e.volume().event_capacity() as u64, cap);
    let ino = d.create(&mut e, "f");
    let total = cap * 2 + 5;
    for _ in 0..total {
        refuse(&mut e, &mut d, ino);
    }
    d.run(&mut e, Op::Unmount).unwrap();
    let ev = load(&d.dev, false).events();
    let seqs: Vec<u64> = ev.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, (total - cap + 1..=total).collect::<Vec<_>>());
    // And numbering goes on after a remount, overwriting the oldest.
    let (mut e, mut d) = engine_on(&d.dev);
    refuse(&mut e, &mut d, ino);
    d.run(&mut e, Op::Unmount).unwrap();
    let ev = load(&d.dev, false).events();
    assert_eq!(ev.len() as u64, cap);
    assert_eq!(ev.first().unwrap().seq, total - cap + 2);
    assert_eq!(ev.last().unwrap().seq, total + 1);
}

/// Event-log blocks of a volume: (primary offset, backup offset) of ring block `k`.
fn ring_block(dev: &MemDevice, k: u64) -> (u64, u64, u64) {
    let v = load(dev, false);
    let sb = v.superblock();
    let n = sb.events_start + k;
    (n, sb.primary_offset(n), sb.backup_offset(n))
}

#[test]
fn a_corrupt_event_block_is_reported_and_skipped_and_the_volume_opens() {
    let dev = formatted(Some(4));
    let (mut e, mut d) = engine_on(&dev);
    let ino = d.create(&mut e, "f");
    for _ in 0..EVENTS_PER_BLOCK + 5 {
        refuse(&mut e, &mut d, ino);
    }
    d.run(&mut e, Op::Unmount).unwrap();
    let mut dev = d.dev.clone();

    // Ring block 0 garbage in both copies: its 31 events are skipped, reported.
    let (n0, p0, b0) = ring_block(&dev, 0);
    dev.poke(p0 + 100, &[0xff; 64]);
    dev.poke(b0 + 100, &[0xff; 64]);
    // Ring block 1: one record rewritten as nonsense and the block resealed (damage a
    // checksum cannot see): that record alone is skipped.
    let (n1, p1, b1) = ring_block(&dev, 1);
    for off in [p1, b1] {
        let mut blk = vec![0u8; 4096];
        dev.peek(off, &mut blk);
        let h = verify_block(
            &blk,
            BlockType::EventLog,
            &load(&d.dev, false).superblock().uuid,
            n1,
        )
        .expect("intact before");
        payload_mut(&mut blk)[24] = 99; // the kind of record 0
        seal_block(&mut blk, &h);
        dev.poke(off, &blk);
    }
    for writable in [false, true] {
        let v = load(&dev, writable);
        let probs = &v.load_report().event_problems;
        assert!(
            probs
                .iter()
                .any(|(n, w)| *n == n0 && w.contains("both copies")),
            "{probs:?}"
        );
        assert!(
            probs
                .iter()
                .any(|(n, w)| *n == n1 && w.contains("record 0")),
            "{probs:?}"
        );
        assert!(v.load_report().lost_blocks.is_empty());
        let seqs: Vec<u64> = v.events().iter().map(|e| e.seq).collect();
        let want: Vec<u64> = (EVENTS_PER_BLOCK as u64 + 2..=EVENTS_PER_BLOCK as u64 + 5).collect();
        assert_eq!(seqs, want);
    }
    // fsck names the damage; a repair rewrites the blocks from what was read.
    let (report, _) = fsck(dev.clone(), false, &mut |_, _| {}).unwrap();
    assert!(
        report.errors.iter().any(|e| e.contains("event log block")),
        "{:?}",
        report.errors
    );
    let (report, fixed) = fsck(dev.clone(), true, &mut |_, _| {}).unwrap();
    assert_eq!(report.remaining, 0, "{:?}", report.errors);
    let fixed = fixed.unwrap();
    common::assert_fsck_clean(&fixed);
    // And the log goes on from the newest event it kept.
    let (mut e, mut d) = engine_on(&fixed);
    refuse(&mut e, &mut d, ino);
    d.run(&mut e, Op::Unmount).unwrap();
    let last = load(&d.dev, false).events().last().unwrap().seq;
    assert_eq!(last, EVENTS_PER_BLOCK as u64 + 6);
}

#[test]
fn a_nonsense_lost_tail_record_is_reported_and_skipped_and_the_volume_opens() {
    use dvrfs_core::format::events::TAILS_AT;
    use dvrfs_core::format::{parse_header, payload};
    let mut dev = formatted(Some(2));
    // Every superblock copy gets a record listing more files than it can hold,
    // resealed: damage its checksum cannot see.
    let sb = load(&dev, false).superblock().clone();
    for off in [0, sb.backup_offset(0), sb.last_copy_offset()] {
        let mut blk = vec![0u8; 4096];
        dev.peek(off, &mut blk);
        let h = parse_header(&blk).unwrap();
        assert!(
            payload(&blk)[TAILS_AT..dvrfs_core::format::tail_log::SB_TAIL_LOG_AT]
                .iter()
                .all(|&b| b == 0),
            "mkfs: empty"
        );
        payload_mut(&mut blk)[TAILS_AT + 8] = 0xff; // count
        seal_block(&mut blk, &h);
        dev.poke(off, &blk);
    }
    for writable in [false, true] {
        let v = load(&dev, writable);
        let r = v.load_report();
        assert!(
            r.event_problems
                .iter()
                .any(|(n, w)| *n == 0 && w.contains("lost-tail record")),
            "{r:?}"
        );
        assert!(r.lost_tails.is_empty() && !r.crashed());
    }
    // A writable open's commit writes a good record over it.
    let (mut e, mut d) = engine_on(&dev);
    d.create(&mut e, "f");
    d.run(&mut e, Op::Unmount).unwrap();
    assert!(load(&d.dev, false).load_report().event_problems.is_empty());
    common::assert_fsck_clean(&d.dev);
}

#[test]
fn a_volume_made_before_the_event_log_opens_and_says_it_has_none() {
    let dev = formatted(None);
    let v = load(&dev, true);
    assert_eq!(v.superblock().features & FEATURE_EVENTS, 0);
    assert_eq!(v.superblock().events_blocks, 0);
    assert!(!v.has_event_log());
    let (mut e, mut d) = engine_on(&dev);
    let ino = d.create(&mut e, "f");
    refuse(&mut e, &mut d, ino);
    // This open's events are there for the drivers, in memory only.
    assert_eq!(kinds(&e.take_new_events()), ["stream_refused"]);
    assert_eq!(e.events().len(), 1);
    d.run(&mut e, Op::Unmount).unwrap();
    let v = load(&d.dev, true);
    assert!(!v.has_event_log());
    assert!(v.events().is_empty());
    assert!(v.load_report().lost_tails.is_empty());
    common::assert_fsck_clean(&d.dev);
}

/// Pieces of `rate` bytes/s every 40 ms to `sid` until `until_ns`; returns (time,
/// bytes handed over by then) after each piece.
fn feed(e: &mut Engine, d: &mut Drive, sid: u32, rate: f64, until_ns: u64) -> Vec<(u64, u64)> {
    let mut out = vec![(0, 0)];
    let mut total = 0u64;
    let mut tick = 1;
    while tick * 40 * MS <= until_ns {
        let n = (rate * (tick * 40 * MS) as f64 / 1e9) as u64 - total;
        if n > 0 {
            let data = common::pattern(total, n as usize);
            d.run(
                e,
                Op::StreamWrite {
                    stream: sid,
                    data: IoBuf::from_slice(&data),
                },
            )
            .unwrap();
            total += n;
            out.push((d.t, total));
        }
        tick += 1;
        d.run_until(e, tick * 40 * MS);
    }
    out
}

#[test]
fn after_a_power_cut_the_recording_is_named_with_what_survived_and_was_accepted() {
    let (mut e, mut d) = setup(Some(Admission::bandwidth(100e6, 0.1)), 11);
    let ino = d.create(&mut e, "rec");
    // 250 kbit/s: a partial request is written once a commit interval, so at any
    // moment up to a second of what the recorder handed over is in its buffer.
    let sid = match d.run(
        &mut e,
        Op::StreamOpen {
            ino,
            spec: spec(StreamDir::Write, 0.25),
        },
    ) {
        Ok(Output::Stream(i)) => i.id,
        o => panic!("{o:?}"),
    };
    let handed = feed(&mut e, &mut d, sid, 0.25e6 / 8.0, 6_000 * MS);
    let by = |t: u64| {
        handed
            .iter()
            .take_while(|a| a.0 <= t)
            .last()
            .map_or(0, |a| a.1)
    };
    // A commit is cut at most an interval before the last one that is durable at a
    // cut, and durable within the gather lead and its own time.
    let bound_ns = 1_000 * MS + 100 * MS + 30 * MS;
    let mut cut = 1_500 * MS;
    let mut listed = 0;
    while cut <= 6_000 * MS {
        let image = d.durable_at(cut);
        let fs = Fs::open(image, OpenOptions::writable()).expect("the volume opens");
        let size = fs.stat(ino).unwrap().size_bytes;
        let r = fs.load_report().clone();
        assert!(r.crashed(), "cut at {} ms: {r:?}", cut / MS);
        let tails = &r.lost_tails;
        assert!(tails.len() <= 1, "{tails:?}");
        if let Some(t) = tails.first() {
            listed += 1;
            assert_eq!((t.ino, t.path.as_deref()), (ino, Some("/rec")));
            assert_eq!(t.size_bytes, size, "cut at {} ms", cut / MS);
            assert!(t.accepted_bytes > size);
            // Exactly what had been handed over at some moment, no later than the
            // cut, no earlier than the bound before it.
            assert!(handed.iter().any(|a| a.1 == t.accepted_bytes), "{t:?}");
            assert!(t.accepted_bytes <= by(cut), "{t:?} > {}", by(cut));
            assert!(
                t.accepted_bytes >= by(cut - bound_ns),
                "cut at {} ms: {t:?}, but {} bytes were handed over {} ms before",
                cut / MS,
                by(cut - bound_ns),
                bound_ns / MS
            );
            // The open recorded it in the log.
            let ev = fs.events();
            let rec = ev
                .iter()
                .rev()
                .find(|e| matches!(e.what, What::Recovery { .. }))
                .expect("a recovery event");
            assert!(
                matches!(rec.what, What::Recovery { tails: 1, .. }),
                "{rec:?}"
            );
            assert!(ev.iter().any(|e| e.what
                == What::TailLost {
                    ino,
                    txn: r.tails.as_ref().unwrap().txn,
                    committed_bytes: size,
                    accepted_bytes: t.accepted_bytes,
                }));
        }
        // Shown once: the writable open's next commit clears the record.
        let dev = fs.close().unwrap();
        let again = load(&dev, false);
        assert!(!again.load_report().crashed());
        assert!(again.load_report().lost_tails.is_empty());
        cut += 250 * MS;
    }
    // At 250 kbit/s with pieces every 40 ms, something is always in the buffer.
    assert_eq!(listed, 19, "every cut names the recording");
}

/// A workload that fills a 64 MiB volume of 1 MiB blocks with 1 MiB files (space
/// events at 90, 95 and 99%) until a write is refused (a no-space event), a commit
/// every few files.
fn fill(fs: &mut Fs<CrashDevice>, clock: &ManualClock) -> dvrfs_core::Result<()> {
    let root = fs.root();
    let data = vec![5u8; 1 << 20];
    for i in 0..80 {
        let ino = fs.create(root, format!("f{i}").as_bytes(), 0o644, 0, 0, 1)?;
        if let Err(e) = fs.write(ino, 0, &data, 1) {
            if matches!(e, dvrfs_core::Error::NoSpace { .. }) {
                clock.advance(1_000 * MS);
                fs.tick()?;
                return fs.sync();
            }
            return Err(e);
        }
        if i % 3 == 0 {
            clock.advance(1_000 * MS);
            fs.tick()?;
        }
    }
    panic!("the volume never filled");
}

fn small_formatted() -> MemDevice {
    let mut dev = MemDevice::new(64 << 20);
    let mut p = MkfsParams::new(64 << 20, [0x33; 16], 5);
    p.data_block_bytes = 1 << 20;
    p.event_ring_blocks = Some(2);
    // The levels this test crosses are set by the data region of 1 MiB files: the
    // tail log's 4 MiB would move them (and has nothing to do here).
    p.tail_log = dvrfs_core::layout::TailLogSize::Off;
    mkfs(&mut dev, &p, &mut |_, _| {}).expect("mkfs");
    dev
}

fn used_pct(v: &Volume) -> f64 {
    let sb = v.superblock();
    let data = (sb.data_blocks * sb.data_block_bytes) as f64;
    (data - v.available_bytes() as f64) * 100.0 / data
}

#[test]
fn space_levels_are_crossed_up_then_back_below_once_each() {
    let clock = ManualClock::new();
    let dev = CrashDevice::new(small_formatted(), CrashMode::InOrderTorn, 0);
    let mut fs =
        Fs::open_with(dev, OpenOptions::writable(), Box::new(clock.clone()), None).unwrap();
    fill(&mut fs, &clock).unwrap();
    let root = fs.root();
    let names: Vec<Vec<u8>> = fs.readdir(root).unwrap().into_iter().map(|e| e.0).collect();
    // Half the files go: the used space falls below 90 %, and one event says so.
    for name in &names[..names.len() / 2] {
        fs.unlink(root, name, 2).unwrap();
    }
    clock.advance(1_000 * MS);
    fs.tick().unwrap();
    fs.sync().unwrap();
    let space: Vec<(bool, u16)> = fs
        .events()
        .iter()
        .filter_map(|e| match e.what {
            What::Space { up, level_pct, .. } => Some((up, level_pct)),
            _ => None,
        })
        .collect();
    assert_eq!(space, [(true, 90), (true, 95), (true, 99), (false, 90)]);
    assert!(used_pct(&fs) < 89.0, "{}", used_pct(&fs));
}

#[test]
fn a_power_cut_at_any_write_keeps_only_whole_committed_events() {
    let image = small_formatted();
    // The reference run: every event the engine records, without a cut.
    let clock = ManualClock::new();
    let dev = CrashDevice::new(image.clone(), CrashMode::InOrderTorn, 0);
    let mut fs =
        Fs::open_with(dev, OpenOptions::writable(), Box::new(clock.clone()), None).unwrap();
    fill(&mut fs, &clock).unwrap();
    let all = fs.events();
    let k = kinds(&all);
    assert!(k.contains(&"write_no_space"), "{k:?}");
    for level in [90, 95, 99] {
        assert!(
            all.iter().any(
                |e| matches!(e.what, What::Space { up: true, level_pct, .. } if level_pct == level)
            ),
            "{k:?}"
        );
    }
    let writes = fs.device().writes;
    drop(fs);
    let mut checked = 0;
    let mut lengths = std::collections::BTreeSet::new();
    for mode in [CrashMode::InOrderTorn, CrashMode::RandomSubsetTorn] {
        for cut in 1..writes {
            let mut dev = CrashDevice::new(image.clone(), mode, cut);
            dev.crash_after_writes(cut);
            let clock = ManualClock::new();
            let mut fs =
                Fs::open_with(dev, OpenOptions::writable(), Box::new(clock.clone()), None).unwrap();
            assert!(fill(&mut fs, &clock).is_err(), "the power cut stops it");
            let media = fs.crash().crash_image().expect("cut");
            let v = load(&media, false);
            assert!(
                v.load_report().event_problems.is_empty(),
                "{:?}",
                v.load_report()
            );
            // The recovery this open found is not stored (read-only): set it aside.
            let ev: Vec<EventRecord> = v
                .events()
                .into_iter()
                .filter(|e| !matches!(e.what, What::Recovery { .. } | What::TailLost { .. }))
                .collect();
            assert!(ev.len() <= all.len());
            assert_eq!(ev[..], all[..ev.len()], "cut at write {cut} ({mode:?})");
            // Atomic with what they describe: a level crossed in the log is crossed
            // in the state that survived.
            for e in &ev {
                if let What::Space {
                    up: true,
                    level_pct,
                    ..
                } = e.what
                {
                    assert!(
                        used_pct(&v) >= level_pct as f64,
                        "cut at write {cut}: {e:?}"
                    );
                }
            }
            lengths.insert(ev.len());
            checked += 1;
        }
    }
    assert!(checked > 20, "{checked} cuts");
    // The cuts saw the log at several lengths: the check above compared real prefixes.
    assert!(
        lengths.len() >= 4,
        "log lengths seen: {lengths:?} of {}",
        all.len()
    );
    eprintln!(
        "{checked} cuts, {writes} writes, log lengths {lengths:?} of {}",
        all.len()
    );
}
