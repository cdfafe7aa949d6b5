//! The runtime on real image files: both back ends, many threads, byte-exact
//! read-back through the runtime and again through the blocking driver after close,
//! deadlines, cancel and poll.

mod common;

use common::create;

use dvrfs_core::driver::Fs;
use dvrfs_core::layout::MkfsParams;
use dvrfs_core::meta::Ino;
use dvrfs_core::tools::mkfs;
use dvrfs_core::volume::OpenOptions;
use dvrfs_core::{Error, IoBuf, Op, Output};
use dvrfs_io::{FileDevice, LockMode};
use dvrfs_runtime::{Backend, Options, Runtime, RuntimeError, Ticket};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

const MIB: usize = 1 << 20;

fn image(dir: &Path) -> PathBuf {
    let path = dir.join("fs.img");
    let size = 512 * MIB as u64;
    FileDevice::create_image(&path, size).unwrap();
    let mut dev = FileDevice::open(&path, true, LockMode::Exclusive).unwrap();
    mkfs(
        &mut dev,
        &MkfsParams::new(size, [7; 16], 42),
        &mut |_, _| {},
    )
    .unwrap();
    path
}

fn open(path: &Path, backend: Backend) -> Runtime {
    Runtime::open(
        path,
        Options {
            backend,
            ..Options::default()
        },
    )
    .unwrap()
}

/// Deterministic bytes of file `f` at `offset`.
fn pattern(f: usize, offset: usize, len: usize) -> Vec<u8> {
    (offset..offset + len)
        .map(|i| (i.wrapping_mul(31) ^ (i >> 12) ^ (f * 97)) as u8)
        .collect()
}

/// Writes `data` at `offset` as best effort, to the end.
fn write(rt: &Runtime, ino: Ino, offset: u64, data: IoBuf) {
    rt.run(Op::Write { ino, offset, data }, None, 0).unwrap();
}

fn round_trip(backend: Backend) {
    let dir = tempfile::tempdir().unwrap();
    let path = image(dir.path());
    let rt = open(&path, backend);
    assert_eq!(rt.backend(), backend);
    const FILES: usize = 4;
    const SIZE: usize = 24 * MIB;
    let inos: Vec<Ino> = (0..FILES)
        .map(|f| create(&rt, &format!("cam{f}.ts")))
        .collect();
    // Four recorders at once, 1 MiB writes, each from its own thread.
    std::thread::scope(|s| {
        for (f, &ino) in inos.iter().enumerate() {
            let rt = &rt;
            s.spawn(move || {
                for off in (0..SIZE).step_by(MIB) {
                    let data = IoBuf::from_slice(&pattern(f, off, MIB));
                    let op = Op::Write {
                        ino,
                        offset: off as u64,
                        data,
                    };
                    rt.run(op, None, f as u32).unwrap();
                }
            });
        }
    });
    rt.run(Op::Fsync, Some(Instant::now()), 0).unwrap();
    // Read back with 16 reads of 512 KiB outstanding per file, waited with poll.
    for (f, &ino) in inos.iter().enumerate() {
        let mut tickets: Vec<(Ticket, usize)> = (0..SIZE)
            .step_by(MIB / 2)
            .take(16)
            .map(|off| {
                let op = Op::Read {
                    ino,
                    offset: off as u64,
                    buf: IoBuf::zeroed(MIB / 2),
                };
                (rt.start(op, None, f as u32).unwrap(), off)
            })
            .collect();
        let mut next = 16 * MIB / 2;
        while !tickets.is_empty() {
            let ts: Vec<Ticket> = tickets.iter().map(|t| t.0).collect();
            let ready = rt.poll(&ts, Some(Duration::from_secs(60))).unwrap();
            assert!(!ready.is_empty(), "no read finished in a minute");
            for &i in ready.iter().rev() {
                let (t, off) = tickets.swap_remove(i);
                match rt.check(t, false).unwrap().map(|d| d.output) {
                    Some(Output::Read { buf, bytes }) => {
                        assert_eq!(bytes, MIB / 2);
                        assert!(
                            buf.bytes().unwrap()[..bytes] == pattern(f, off, bytes)[..],
                            "file {f} at {off}: different bytes"
                        );
                    }
                    o => panic!("{o:?}"),
                }
                if next < SIZE {
                    let op = Op::Read {
                        ino,
                        offset: next as u64,
                        buf: IoBuf::zeroed(MIB / 2),
                    };
                    tickets.push((rt.start(op, None, f as u32).unwrap(), next));
                    next += MIB / 2;
                }
            }
        }
    }
    // A result is given once.
    let t = rt
        .start(
            Op::Read {
                ino: inos[0],
                offset: 0,
                buf: IoBuf::zeroed(4096),
            },
            None,
            0,
        )
        .unwrap();
    assert!(rt.check(t, true).unwrap().is_some());
    assert!(matches!(
        rt.check(t, false),
        Err(RuntimeError::UnknownTicket(_))
    ));
    // Aligned buffers all the way: every command went to the back end as it was.
    let st = rt.stats();
    assert!(st.commands as usize >= FILES * SIZE / (4 * MIB), "{st:?}");
    assert_eq!(st.bounced, 0);
    rt.close().unwrap();

    // The bytes are on the image: the blocking driver reads the same after the
    // clean close.
    let dev = FileDevice::open(&path, false, LockMode::Shared).unwrap();
    let mut fs = Fs::open(dev, OpenOptions::read_only()).unwrap();
    for f in 0..FILES {
        let ino = fs.resolve(&format!("/cam{f}.ts")).unwrap();
        assert_eq!(fs.stat(ino).unwrap().size_bytes, SIZE as u64);
        let mut buf = vec![0; 3 * MIB];
        let off = 7 * MIB + 4096;
        assert_eq!(fs.read(ino, off as u64, &mut buf).unwrap(), buf.len());
        assert!(buf == pattern(f, off, buf.len()), "file {f} after reopen");
    }
}

/// Whether this kernel lets us use io_uring as the runtime does; why not, if not.
fn io_uring_usable() -> Result<(), String> {
    let ring = io_uring::IoUring::new(8).map_err(|e| format!("io_uring_setup: {e}"))?;
    if !ring.params().is_feature_ext_arg() {
        return Err("io_uring without IORING_FEAT_EXT_ARG (Linux 5.11)".into());
    }
    Ok(())
}

#[test]
fn io_uring_round_trip_from_many_threads() {
    if let Err(why) = io_uring_usable() {
        eprintln!("SKIP: {why}");
        return;
    }
    round_trip(Backend::IoUring);
}

#[test]
fn thread_pool_round_trip_from_many_threads() {
    round_trip(Backend::Threads);
}

#[test]
fn auto_chooses_io_uring_where_the_kernel_has_it() {
    let dir = tempfile::tempdir().unwrap();
    let rt = open(&image(dir.path()), Backend::Auto);
    match io_uring_usable() {
        Ok(()) => assert_eq!(rt.backend(), Backend::IoUring),
        Err(why) => {
            eprintln!("io_uring unusable here ({why}): the thread pool must run");
            assert_eq!(rt.backend(), Backend::Threads);
        }
    }
    rt.close().unwrap();
}

#[test]
fn a_read_that_cannot_meet_its_deadline_fails_and_a_late_write_is_kept() {
    let dir = tempfile::tempdir().unwrap();
    let rt = open(&image(dir.path()), Backend::Auto);
    let ino = create(&rt, "late.ts");
    let past = Instant::now();
    std::thread::sleep(Duration::from_millis(5));
    // A write past its deadline is done all the same, and reported late.
    let data = IoBuf::from_slice(&pattern(0, 0, MIB));
    let t = rt
        .start(
            Op::Write {
                ino,
                offset: 0,
                data,
            },
            Some(past),
            1,
        )
        .unwrap();
    let done = rt.check(t, true).unwrap().unwrap();
    assert!(done.late && done.done_ns >= done.submit_ns, "{done:?}");
    // One with time to spare is not.
    let data = IoBuf::from_slice(&pattern(0, MIB, MIB));
    let soon = Instant::now() + Duration::from_secs(30);
    let t = rt
        .start(
            Op::Write {
                ino,
                offset: MIB as u64,
                data,
            },
            Some(soon),
            1,
        )
        .unwrap();
    assert!(!rt.check(t, true).unwrap().unwrap().late);
    // A read past its deadline fails with its own error.
    let r = rt.run(
        Op::Read {
            ino,
            offset: 0,
            buf: IoBuf::zeroed(MIB),
        },
        Some(past),
        1,
    );
    assert!(
        matches!(r, Err(RuntimeError::Engine(Error::DeadlineMissed { .. }))),
        "{r:?}"
    );
    // Without a deadline the bytes are there.
    match rt
        .run(
            Op::Read {
                ino,
                offset: 0,
                buf: IoBuf::zeroed(MIB),
            },
            None,
            1,
        )
        .unwrap()
    {
        Output::Read { buf, bytes } => {
            assert_eq!(bytes, MIB);
            assert!(buf.bytes().unwrap() == &pattern(0, 0, MIB)[..]);
        }
        o => panic!("{o:?}"),
    }
    rt.close().unwrap();
}

#[test]
fn cancel_withdraws_a_queued_read_or_says_why_not() {
    let dir = tempfile::tempdir().unwrap();
    let rt = open(&image(dir.path()), Backend::Auto);
    let ino = create(&rt, "c.ts");
    let data = IoBuf::from_slice(&pattern(3, 0, 8 * MIB));
    write(&rt, ino, 0, data);
    let tickets: Vec<Ticket> = (0..64)
        .map(|i| {
            let op = Op::Read {
                ino,
                offset: (i % 8) * MIB as u64,
                buf: IoBuf::zeroed(MIB),
            };
            rt.start(op, None, 0).unwrap()
        })
        .collect();
    let last = *tickets.last().unwrap();
    let cancelled = rt.cancel(last);
    eprintln!("cancel of the last of 64 queued reads: {cancelled:?}");
    for t in &tickets {
        let r = rt.check(*t, true);
        if *t == last && cancelled.is_ok() {
            assert!(
                matches!(r, Err(RuntimeError::Engine(Error::Cancelled))),
                "{r:?}"
            );
        } else {
            assert!(
                matches!(&r, Ok(Some(d)) if matches!(d.output, Output::Read { bytes, .. } if bytes == MIB)),
                "{r:?}"
            );
        }
    }
    if let Err(e) = &cancelled {
        // Too late: the read had reached the device (or finished).
        assert!(
            e.to_string().contains("not in flight") || e.to_string().contains("device"),
            "{e}"
        );
    }
    // Nothing left: polling the finished tickets is an error, not a hang.
    assert!(matches!(
        rt.poll(&tickets[..1], Some(Duration::from_millis(10))),
        Err(RuntimeError::UnknownTicket(_))
    ));
    rt.close().unwrap();
}

#[test]
fn a_second_writer_is_refused_while_the_runtime_holds_the_image() {
    let dir = tempfile::tempdir().unwrap();
    let path = image(dir.path());
    let rt = open(&path, Backend::Auto);
    let second = Runtime::open(&path, Options::default());
    assert!(
        matches!(second, Err(RuntimeError::Open(_))),
        "{:?}",
        second.err()
    );
    rt.close().unwrap();
    open(&path, Backend::Auto).close().unwrap();
}

#[test]
fn an_emulated_disk_keeps_the_data_and_takes_the_models_time() {
    let dir = tempfile::tempdir().unwrap();
    let path = image(dir.path());
    let model = dvrfs_core::disk::DiskModel::builtin("avfs-250g").unwrap();
    // The fastest this disk can move 4 MiB: its outer zone at full speed.
    let outer_bytes_per_s =
        model.zones.spt_outer as f64 * model.sector_bytes as f64 * model.rpm / 60.0;
    let floor_ns = (4.0 * MIB as f64 / outer_bytes_per_s * 1e9) as u64;
    let bad = Runtime::open(
        &path,
        Options {
            queue_depth: 2,
            device_model: Some(model.clone()),
            ..Options::default()
        },
    );
    assert!(matches!(
        bad,
        Err(RuntimeError::Engine(Error::InvalidArgument(_)))
    ));
    let rt = Runtime::open(
        &path,
        Options {
            device_model: Some(model),
            ..Options::default()
        },
    )
    .unwrap();
    let ino = create(&rt, "emu.ts");
    let data = IoBuf::from_slice(&pattern(5, 0, 4 * MIB));
    write(&rt, ino, 0, data);
    let energy_before = rt
        .disk_energy()
        .unwrap()
        .expect("avfs-250g has power figures");
    let t = rt
        .start(
            Op::Read {
                ino,
                offset: 0,
                buf: IoBuf::zeroed(4 * MIB),
            },
            None,
            0,
        )
        .unwrap();
    let done = rt.check(t, true).unwrap().unwrap();
    match &done.output {
        Output::Read { buf, bytes } => {
            assert_eq!(*bytes, 4 * MIB);
            assert!(buf.bytes().unwrap() == &pattern(5, 0, 4 * MIB)[..]);
        }
        o => panic!("{o:?}"),
    }
    // Never sooner than the model allows (a lower bound: the emulation waits).
    assert!(
        done.done_ns - done.submit_ns >= floor_ns,
        "4 MiB read in {} ns, the model needs at least {floor_ns} ns",
        done.done_ns - done.submit_ns
    );
    // The disk's energy over the read: its transfer is metered, and the mean power
    // lies between the model's idle and busiest figures.
    let e = rt.disk_energy().unwrap().unwrap().since(&energy_before);
    let p = dvrfs_core::disk::DiskModel::builtin("avfs-250g")
        .unwrap()
        .power
        .unwrap();
    assert!(e.transfer_ns >= floor_ns, "{e:?}");
    assert!(e.mean_w() >= p.idle_w && e.mean_w() <= p.seek_w, "{e:?}");
    assert_eq!(e.standby_ns + e.spin_ups, 0);
    rt.close().unwrap();
    // Without a model nothing is metered.
    let rt = Runtime::open(&path, Options::default()).unwrap();
    assert_eq!(rt.disk_energy().unwrap(), None);
    rt.close().unwrap();
}

/// The table of tickets is bounded: past `max_tickets` operations whose results no
/// one took, `start` is refused with `Busy` (EAGAIN), finished or not; taking a
/// result frees its place.
#[test]
fn uncollected_tickets_are_bounded_and_taking_a_result_frees_a_place() {
    let dir = tempfile::tempdir().unwrap();
    let path = image(dir.path());
    let rt = Runtime::open(
        &path,
        Options {
            max_tickets: 4,
            ..Options::default()
        },
    )
    .unwrap();
    let ino = create(&rt, "t.ts");
    write(&rt, ino, 0, IoBuf::from_slice(&pattern(5, 0, MIB)));
    let read = || Op::Read {
        ino,
        offset: 0,
        buf: IoBuf::zeroed(64 << 10),
    };
    let tickets: Vec<Ticket> = (0..4).map(|_| rt.start(read(), None, 0).unwrap()).collect();
    // Every result is left in the table, so the fifth has no place, even once the four
    // have finished.
    let refused = rt.start(read(), None, 0).map(|_| ()).unwrap_err();
    match &refused {
        RuntimeError::Engine(e @ Error::Busy(_)) => assert_eq!(e.errno(), libc::EAGAIN),
        other => panic!("expected Busy, got {other:?}"),
    }
    assert!(rt.check(tickets[0], true).unwrap().is_some());
    let again = rt.start(read(), None, 0).expect("a place was freed");
    for t in tickets[1..].iter().chain([&again]) {
        assert!(rt.check(*t, true).unwrap().is_some());
    }
    rt.close().unwrap();
    assert!(
        matches!(
            Runtime::open(
                &path,
                Options {
                    max_tickets: 0,
                    ..Options::default()
                }
            ),
            Err(RuntimeError::Engine(Error::InvalidArgument(_)))
        ),
        "max_tickets 0 is refused"
    );
}

/// `start_waiting` never refuses for want of room: a start past `max_tickets`
/// running operations is held by the dispatcher until they finish, then made; the
/// results nobody took yet do not hold it (they do hold `start`).
#[test]
fn start_waiting_holds_a_start_until_room_frees_and_never_says_busy() {
    let dir = tempfile::tempdir().unwrap();
    let path = image(dir.path());
    let rt = Runtime::open(
        &path,
        Options {
            max_tickets: 2,
            ..Options::default()
        },
    )
    .unwrap();
    let ino = create(&rt, "w.ts");
    write(&rt, ino, 0, IoBuf::from_slice(&pattern(6, 0, MIB)));
    let read = || Op::Read {
        ino,
        offset: 0,
        buf: IoBuf::zeroed(64 << 10),
    };
    // Six starts on a bound of two: the later ones wait for room, none is refused.
    let tickets: Vec<Ticket> = (0..6)
        .map(|_| {
            rt.start_waiting(read(), None, 0)
                .expect("held, then started")
        })
        .collect();
    // Their results are all untaken: a plain start has no place.
    let refused = rt.start(read(), None, 0).map(|_| ()).unwrap_err();
    assert!(
        matches!(refused, RuntimeError::Engine(Error::Busy(_))),
        "{refused:?}"
    );
    for t in tickets {
        assert!(matches!(
            rt.check(t, true).unwrap().unwrap().output,
            Output::Read { .. }
        ));
    }
    assert!(rt.stats().held >= 1, "no start was held: {:?}", rt.stats());
    rt.close().unwrap();
}
