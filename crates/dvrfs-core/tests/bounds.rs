//! Bounds that cannot break a commit (`engine/bounds.rs`): operations fill the
//! scheduler's queue only up to its bound less the commit pipeline's reserve, one past
//! that is refused with `Error::Busy` (EAGAIN, not EINVAL), and commits, fsync and the
//! unmount still succeed with the operations' share full.

mod common;

use common::drive::{pattern, Drive};
use common::formatted;
use dvrfs_core::device::MemDevice;
use dvrfs_core::engine::{commit_reserve, Engine, EngineConfig, IoBuf, Now, Op, OpId, Output};
use dvrfs_core::format::superblock::AllocPolicy;
use dvrfs_core::sched::SchedSettings;
use dvrfs_core::{Error, OpenOptions, Volume};

/// Room operations get in the queue in these tests.
const OP_ROOM: u64 = 4;

/// An engine whose queue bound leaves operations `OP_ROOM` requests.
fn tight_engine(dev: &MemDevice) -> (Engine, Drive, u64) {
    let (vol, replay) = Volume::load(dev, &OpenOptions::writable()).unwrap();
    let reserve = commit_reserve(&vol);
    let cfg = EngineConfig {
        settings: SchedSettings {
            max_queued: (reserve + OP_ROOM) as u32,
            ..SchedSettings::default()
        },
        ..EngineConfig::new(512)
    };
    let e = Engine::new(vol, replay, cfg, Now::mono(0)).unwrap();
    assert_eq!(e.op_queue_limit(), OP_ROOM);
    (e, Drive::new(dev.clone()), reserve)
}

fn write(ino: u32, len: usize) -> Op {
    Op::Write {
        ino,
        offset: 0,
        data: IoBuf::from_slice(&pattern(len)),
    }
}

/// Best-effort writes to files of their own until `submit` refuses one: the ids
/// admitted, and the refusal.
fn fill_queue(e: &mut Engine, d: &Drive, inos: &[u32]) -> (Vec<OpId>, Error) {
    let mut ids = vec![];
    for &ino in inos {
        match e.submit(write(ino, 4096), None, 1, d.now()) {
            Ok(id) => ids.push(id),
            Err(err) => return (ids, err),
        }
    }
    panic!("the queue never filled: {} writes admitted", ids.len());
}

#[test]
fn a_full_queue_refuses_operations_with_busy_and_commits_still_succeed() {
    let dev = formatted(256 << 20, 1 << 20, AllocPolicy::Zrr, 3);
    let (mut e, mut d, reserve) = tight_engine(&dev);
    // Many new files: a commit of many dirty metadata blocks is waiting.
    let inos: Vec<u32> = (0..64)
        .map(|i| d.create(&mut e, &format!("f{i}")))
        .collect();
    assert!(e.has_uncommitted());

    // Nothing is dispatched meanwhile (no poll): the writes fill the operations' share.
    let (ids, refused) = fill_queue(&mut e, &d, &inos);
    assert_eq!(ids.len() as u64, OP_ROOM, "one request per 4 KiB write");
    assert_eq!(e.scheduler().queued(), OP_ROOM);
    assert!(matches!(refused, Error::Busy(_)), "{refused}");
    assert_eq!(refused.errno(), 11, "EAGAIN, not EINVAL: {refused}");
    // A read is refused alike; namespace operations, fsync and unmount are not.
    let read = Op::Read {
        ino: inos[0],
        offset: 0,
        buf: IoBuf::zeroed(4096),
    };
    let err = e.submit(read, None, 1, d.now()).unwrap_err();
    assert_eq!(err.errno(), 11, "{err}");
    let mkdir = Op::Mkdir {
        parent: e.volume().root(),
        name: b"d".to_vec(),
        perm: 0o755,
        uid: 0,
        gid: 0,
    };
    let mkdir = e.submit(mkdir, None, 1, d.now()).unwrap();

    // The fsync's commit queues its writes in the reserve, past the operations' share.
    let fsync = e.submit(Op::Fsync, None, 1, d.now()).unwrap();
    assert!(
        e.scheduler().queued() > OP_ROOM,
        "the commit's writes were queued beside the full share"
    );
    assert!(e.scheduler().queued() <= OP_ROOM + reserve);
    assert!(d.wait(&mut e, mkdir).result.is_ok());
    assert!(matches!(d.wait(&mut e, fsync).result, Ok(Output::Done)));
    for id in ids {
        assert!(d.wait(&mut e, id).result.is_ok());
    }
    assert_eq!(e.broken(), None);

    // Room again: the refused write goes through now, then a last fsync and unmount.
    let id = e
        .submit(write(inos[OP_ROOM as usize], 4096), None, 1, d.now())
        .unwrap();
    assert!(d.wait(&mut e, id).result.is_ok());
    assert!(matches!(d.run(&mut e, Op::Fsync), Ok(Output::Done)));
    assert!(matches!(d.run(&mut e, Op::Unmount), Ok(Output::Done)));
    assert_eq!(e.broken(), None);
    e.check().unwrap();
}

#[test]
fn unmount_with_the_share_full_commits_everything() {
    let dev = formatted(256 << 20, 1 << 20, AllocPolicy::Zrr, 4);
    let (mut e, mut d, _) = tight_engine(&dev);
    let inos: Vec<u32> = (0..32)
        .map(|i| d.create(&mut e, &format!("g{i}")))
        .collect();
    let (ids, refused) = fill_queue(&mut e, &d, &inos);
    assert!(matches!(refused, Error::Busy(_)), "{refused}");
    let unmount = e.submit(Op::Unmount, None, 1, d.now()).unwrap();
    assert!(matches!(d.wait(&mut e, unmount).result, Ok(Output::Done)));
    for id in ids {
        assert!(d.wait(&mut e, id).result.is_ok());
    }
    assert_eq!(e.broken(), None);
    // What was written is on the media: the volume reopens with every file's bytes.
    let (vol, _) = Volume::load(&d.dev, &OpenOptions::read_only()).unwrap();
    for &ino in &inos[..OP_ROOM as usize] {
        assert_eq!(vol.stat(ino).unwrap().size_bytes, 4096);
    }
}

#[test]
fn an_admitted_write_that_finds_no_room_waits_for_it() {
    let dev = formatted(256 << 20, 1 << 20, AllocPolicy::Zrr, 5);
    let (vol, replay) = Volume::load(&dev, &OpenOptions::writable()).unwrap();
    // FIFO without merging: commands go out one request at a time, in order.
    let cfg = EngineConfig {
        scheduler: "fifo".into(),
        settings: SchedSettings {
            max_queued: (commit_reserve(&vol) + OP_ROOM) as u32,
            merge_max_sectors: 0,
            ..SchedSettings::default()
        },
        ..EngineConfig::new(512)
    };
    let mut e = Engine::new(vol, replay, cfg, Now::mono(0)).unwrap();
    let mut d = Drive::new(dev.clone());
    let inos: Vec<u32> = (0..8).map(|i| d.create(&mut e, &format!("h{i}"))).collect();
    let now = d.now();
    // Two writes in one sector of `a`: the second waits for the first (deferred),
    // admitted while the share had room. Other files take the rest of the share.
    let first = e.submit(write(inos[0], 2048), None, 1, now).unwrap();
    let second = Op::Write {
        ino: inos[0],
        offset: 2048,
        data: IoBuf::from_slice(&pattern(2048)),
    };
    let second = e.submit(second, None, 1, now).unwrap();
    let mut others: Vec<OpId> = (1..OP_ROOM as usize)
        .map(|i| e.submit(write(inos[i], 4096), None, 1, now).unwrap())
        .collect();
    assert_eq!(e.scheduler().queued(), OP_ROOM);
    // The first write goes to the device; another write takes its room at once.
    let cmd = e.poll(now).expect("the first write is sent");
    others.push(e.submit(write(inos[7], 4096), None, 1, now).unwrap());
    assert_eq!(e.scheduler().queued(), OP_ROOM);
    let mut media = dev.clone();
    let r = e.io_write(cmd.id, |o, b| {
        dvrfs_core::device::Device::write_at(&mut media, o, b)
    });
    e.complete(cmd.id, r, now);
    // The first is done; the second found the share full and waits, not failed.
    let done: Vec<OpId> = std::iter::from_fn(|| e.take_completion())
        .map(|c| {
            assert!(c.result.is_ok(), "{:?}", c.result);
            c.op
        })
        .collect();
    assert_eq!(done, vec![first]);
    assert_eq!(e.scheduler().queued(), OP_ROOM, "nothing more was queued");
    // As dispatches free room, it goes on.
    d.dev = media;
    for id in [second].into_iter().chain(others) {
        assert!(d.wait(&mut e, id).result.is_ok());
    }
    assert!(matches!(d.run(&mut e, Op::Unmount), Ok(Output::Done)));
    assert_eq!(e.broken(), None);
}

#[test]
fn a_bound_without_room_for_operations_is_refused() {
    let dev = formatted(256 << 20, 1 << 20, AllocPolicy::Zrr, 6);
    let (vol, replay) = Volume::load(&dev, &OpenOptions::writable()).unwrap();
    let reserve = commit_reserve(&vol);
    let cfg = EngineConfig {
        settings: SchedSettings {
            max_queued: reserve as u32,
            ..SchedSettings::default()
        },
        ..EngineConfig::new(512)
    };
    let err = Engine::new(vol, replay, cfg, Now::mono(0))
        .err()
        .expect("refused");
    assert!(matches!(err, Error::InvalidArgument(_)), "{err}");
    assert!(err.to_string().contains("commit"), "{err}");
}
