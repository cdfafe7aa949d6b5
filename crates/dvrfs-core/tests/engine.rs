//! The engine driven by hand: what goes out, in what order, and what comes back.
//! A tiny driver here performs commands on a `MemDevice` in the order the test wants,
//! so the tests see exactly what a real driver would.

mod common;

use common::formatted;
use dvrfs_core::device::{Device, MemDevice};
use dvrfs_core::engine::{DevCommand, DevKind, Engine, EngineConfig, IoBuf, Now, Op, Output};
use dvrfs_core::format::superblock::AllocPolicy;
use dvrfs_core::sched::{Class, SchedSettings};
use dvrfs_core::{Error, OpenOptions, Volume};

const MS: u64 = 1_000_000;

fn engine_on(dev: &MemDevice, depth: u32, max_ops: usize) -> Engine {
    let (vol, replay) = Volume::load(dev, &OpenOptions::writable()).unwrap();
    let cfg = EngineConfig {
        settings: SchedSettings {
            queue_depth: depth,
            ..SchedSettings::default()
        },
        max_ops,
        ..EngineConfig::new(512)
    };
    Engine::new(vol, replay, cfg, Now::mono(0)).unwrap()
}

fn now(ms: u64) -> Now {
    Now::mono(ms * MS)
}

/// Performs a command on the device and completes it.
fn perform(e: &mut Engine, dev: &mut MemDevice, c: &DevCommand, t: Now) {
    let r = match c.kind {
        DevKind::Flush => dev.flush(),
        DevKind::Write => e.io_write(c.id, |o, b| dev.write_at(o, b)),
        DevKind::Read => e.io_read(c.id, |o, b| dev.read_at(o, b)),
    };
    e.complete(c.id, r, t);
}

/// Runs everything to idle at time `t` (jumping timers), returning what was issued.
fn drain(e: &mut Engine, dev: &mut MemDevice, mut t: u64) -> (Vec<DevCommand>, u64) {
    let mut log = vec![];
    for _ in 0..100_000 {
        while let Some(c) = e.poll(Now::mono(t)) {
            perform(e, dev, &c, Now::mono(t));
            log.push(c);
        }
        match e.next_wakeup() {
            Some(w) if e.has_uncommitted() || e.ops_in_flight() > 0 => t = t.max(w),
            _ => break,
        }
    }
    (log, t)
}

/// Creates `/f` and returns its inode (the create completes at once: metadata only).
fn create_f(e: &mut Engine) -> dvrfs_core::meta::Ino {
    let root = e.volume().root();
    e.submit(
        Op::Create {
            parent: root,
            name: b"f".to_vec(),
            perm: 0o644,
            uid: 0,
            gid: 0,
        },
        None,
        1,
        now(0),
    )
    .unwrap();
    match e.take_completion().unwrap().result.unwrap() {
        Output::Ino(i) => i,
        o => panic!("{o:?}"),
    }
}

fn small() -> MemDevice {
    formatted(256 << 20, 1 << 20, AllocPolicy::Seq, 3)
}

#[test]
fn the_commit_pipeline_issues_data_flush_journal_flush_primary_flush_backup_flush() {
    let mut dev = small();
    let mut e = engine_on(&dev, 1, 1024);
    let sb = e.volume().superblock().clone();
    let ino = create_f(&mut e);
    // The create's commit first (a clean slate), then a write: its data reaches the
    // disk, and only then does its metadata go into a transaction.
    let f0 = e.submit(Op::Fsync, Some(0), 1, now(0)).unwrap();
    drain(&mut e, &mut dev, 0);
    assert_eq!(e.take_completion().unwrap().op, f0);
    let w = e
        .submit(
            Op::Write {
                ino,
                offset: 0,
                data: IoBuf::from_slice(&[7u8; 8192]),
            },
            None,
            1,
            now(1),
        )
        .unwrap();
    let (mut log, _) = drain(&mut e, &mut dev, MS);
    assert_eq!(e.take_completion().unwrap().op, w);
    let f = e.submit(Op::Fsync, Some(MS), 1, now(1)).unwrap();
    let (rest, _) = drain(&mut e, &mut dev, MS);
    log.extend(rest);
    assert_eq!(e.take_completion().unwrap().op, f);
    // Name each command by where it went.
    let journal = sb.primary_offset(sb.journal_start);
    let data = sb.data_start_bytes;
    let backup = sb.backup_offset(0);
    let shape: Vec<&str> = log
        .iter()
        .map(|c| match c.kind {
            DevKind::Flush => "flush",
            _ if c.offset_bytes >= data && c.offset_bytes < backup => "data",
            _ if c.offset_bytes == journal => "journal",
            _ if c.offset_bytes >= backup => "backup",
            _ => "primary",
        })
        .collect();
    let mut squeezed: Vec<&str> = shape.clone();
    squeezed.dedup();
    assert_eq!(
        squeezed,
        vec!["data", "flush", "journal", "flush", "primary", "flush", "backup", "flush"],
        "{shape:?}"
    );
    // Journal and checkpoint writes travel as their own class.
    for c in &log {
        let metadata_region = c.offset_bytes < data || c.offset_bytes >= backup;
        if c.kind == DevKind::Write && metadata_region {
            assert_eq!(c.class, Some(Class::Metadata), "{c:?}");
        }
    }
    e.check().unwrap();
}

#[test]
fn a_wall_clock_that_steps_back_does_not_stop_commits() {
    let mut dev = small();
    let mut e = engine_on(&dev, 1, 1024);
    let root = e.volume().root();
    let mut commits = vec![];
    for step in 0..20u64 {
        // Monotonic time moves on by 300 ms; the wall clock jumps back an hour at step 5.
        let t = step * 300 * MS;
        let wall = if step < 5 {
            1_700_000_000_000_000_000 + t as i64
        } else {
            1_699_996_400_000_000_000 + t as i64
        };
        e.submit(
            Op::Mkdir {
                parent: root,
                name: format!("d{step}").into_bytes(),
                perm: 0o755,
                uid: 0,
                gid: 0,
            },
            None,
            1,
            Now {
                mono_ns: t,
                wall_ns: wall,
            },
        )
        .unwrap();
        while e.take_completion().is_some() {}
        let before = e.qos().commits;
        // Drive until the next step's time only (no jumping past it).
        let mut now_t = t;
        loop {
            while let Some(c) = e.poll(Now::mono(now_t)) {
                perform(&mut e, &mut dev, &c, Now::mono(now_t));
            }
            match e.next_wakeup() {
                Some(w) if w < t + 300 * MS => now_t = now_t.max(w),
                _ => break,
            }
        }
        if e.qos().commits > before {
            commits.push(step);
        }
    }
    // Group commits go on once per interval (1 s: every three or four steps of
    // 300 ms), before and after the wall clock stepped back.
    assert!(
        commits.iter().filter(|&&s| s < 7).count() >= 1,
        "{commits:?}"
    );
    assert!(
        commits.iter().filter(|&&s| s >= 7).count() >= 3,
        "{commits:?}"
    );
}

#[test]
fn a_full_engine_refuses_with_a_distinct_error() {
    let dev = small();
    let mut e = engine_on(&dev, 1, 2);
    let ino = create_f(&mut e);
    for i in 0..2u64 {
        e.submit(
            Op::Write {
                ino,
                offset: i * 4096,
                data: IoBuf::zeroed(4096),
            },
            Some(5_000 * MS),
            1,
            now(0),
        )
        .unwrap();
    }
    let err = e
        .submit(
            Op::Read {
                ino,
                offset: 0,
                buf: IoBuf::zeroed(4096),
            },
            None,
            1,
            now(0),
        )
        .unwrap_err();
    assert!(matches!(err, Error::QueueFull { max: 2 }), "{err}");
}

#[test]
fn writes_of_a_file_apply_in_order_even_when_their_data_lands_out_of_order() {
    // Zone round robin puts the two blocks far apart: two commands, not one merged.
    let mut dev = formatted(256 << 20, 1 << 20, AllocPolicy::Zrr, 3);
    let mut e = engine_on(&dev, 4, 1024);
    let ino = create_f(&mut e);
    // A whole first block, then a write two blocks further (a hole between).
    let a = e
        .submit(
            Op::Write {
                ino,
                offset: 0,
                data: IoBuf::from_slice(&[1u8; 1 << 20]),
            },
            None,
            1,
            now(0),
        )
        .unwrap();
    let b = e
        .submit(
            Op::Write {
                ino,
                offset: 2 << 20,
                data: IoBuf::from_slice(&[2u8; 4096]),
            },
            None,
            1,
            now(0),
        )
        .unwrap();
    let mut cmds = vec![];
    while let Some(c) = e.poll(now(1)) {
        cmds.push(c);
    }
    assert!(
        cmds.len() >= 2,
        "both writes on the device at queue depth 4: {cmds:?}"
    );
    // The later write's data lands first: it must wait for the earlier one.
    let last = cmds.pop().unwrap();
    perform(&mut e, &mut dev, &last, now(2));
    assert!(
        e.take_completion().is_none(),
        "applied before the earlier write"
    );
    assert_eq!(e.volume().stat(ino).unwrap().size_bytes, 0);
    for c in cmds {
        perform(&mut e, &mut dev, &c, now(3));
    }
    let order: Vec<u64> = std::iter::from_fn(|| e.take_completion())
        .map(|c| c.op)
        .collect();
    assert_eq!(order, vec![a, b]);
    assert_eq!(e.volume().stat(ino).unwrap().size_bytes, (2 << 20) + 4096);
    e.check().unwrap();
}

#[test]
fn a_failed_write_fails_every_later_write_of_the_file_and_frees_their_blocks() {
    let mut dev = small();
    let mut e = engine_on(&dev, 4, 1024);
    let ino = create_f(&mut e);
    let free_before = e.volume().free_bytes();
    for i in 0..3u64 {
        e.submit(
            Op::Write {
                ino,
                offset: i << 20,
                data: IoBuf::zeroed(1 << 20),
            },
            None,
            1,
            now(0),
        )
        .unwrap();
    }
    let mut first = true;
    while let Some(c) = e.poll(now(1)) {
        if first {
            e.complete(c.id, Err(std::io::Error::other("medium error")), now(2));
            first = false;
        } else {
            perform(&mut e, &mut dev, &c, now(2));
        }
    }
    let results: Vec<bool> = std::iter::from_fn(|| e.take_completion())
        .map(|c| c.result.is_ok())
        .collect();
    assert_eq!(results, vec![false, false, false]);
    assert_eq!(e.volume().stat(ino).unwrap().size_bytes, 0);
    assert_eq!(
        e.volume().free_bytes(),
        free_before,
        "reservations given back"
    );
    e.check().unwrap();
    // The file takes writes again.
    e.submit(
        Op::Write {
            ino,
            offset: 0,
            data: IoBuf::zeroed(4096),
        },
        None,
        1,
        now(3),
    )
    .unwrap();
    drain(&mut e, &mut dev, 3 * MS);
    assert!(e.take_completion().unwrap().result.is_ok());
}

#[test]
fn reads_can_be_cancelled_and_a_late_read_fails_with_deadline_missed() {
    let mut dev = small();
    let mut e = engine_on(&dev, 1, 1024);
    let ino = create_f(&mut e);
    e.submit(
        Op::Write {
            ino,
            offset: 0,
            data: IoBuf::from_slice(&[9u8; 1 << 20]),
        },
        None,
        1,
        now(0),
    )
    .unwrap();
    let (_, t) = drain(&mut e, &mut dev, 0);
    while e.take_completion().is_some() {}
    // A real-time read far in the future is held; cancel it while it waits.
    let r = e
        .submit(
            Op::Read {
                ino,
                offset: 0,
                buf: IoBuf::zeroed(4096),
            },
            Some(t + 10_000 * MS),
            2,
            Now::mono(t),
        )
        .unwrap();
    e.cancel(r, Now::mono(t)).unwrap();
    assert!(matches!(
        e.take_completion().unwrap().result,
        Err(Error::Cancelled)
    ));
    assert!(e.cancel(r, Now::mono(t)).is_err(), "nothing left to cancel");
    // A read whose deadline passes before the disk gets to it fails.
    let late = e
        .submit(
            Op::Read {
                ino,
                offset: 0,
                buf: IoBuf::zeroed(4096),
            },
            Some(t + 1),
            2,
            Now::mono(t),
        )
        .unwrap();
    let (_, _) = drain(&mut e, &mut dev, t + 10 * MS);
    let c = e.take_completion().unwrap();
    assert_eq!(c.op, late);
    assert!(
        matches!(c.result, Err(Error::DeadlineMissed { .. })),
        "{c:?}"
    );
    assert_eq!(e.qos().misses.deadline_failed, 1);
    e.check().unwrap();
}

/// Applies a transaction's writes to the device, in the pipeline's order.
fn apply(dev: &mut MemDevice, t: &dvrfs_core::volume::Transaction) {
    dev.write_at(t.journal.0, &t.journal.1).unwrap();
    for (o, b) in t.primary.iter().chain(&t.backup) {
        dev.write_at(*o, b).unwrap();
    }
}

/// A checkpoint writes a short run of clean metadata blocks between two dirty ones
/// with them: one command instead of one per dirty block (on a hard disk each separate
/// write waits for the platter to come round). The bridged blocks travel in the
/// journal like the dirty ones, so a replay restores them too; a gap longer than
/// `BRIDGE_GAP_BLOCKS` is not bridged.
#[test]
fn a_checkpoint_bridges_short_gaps_between_dirty_blocks() {
    use dvrfs_core::format::inode::INODES_PER_BLOCK;
    use dvrfs_core::format::{payload, META_BLOCK_BYTES};
    use dvrfs_core::volume::{SetAttr, BRIDGE_GAP_BLOCKS};
    let mut dev = small();
    let (mut vol, _) = Volume::load(&dev, &OpenOptions::writable()).unwrap();
    let sb = vol.superblock().clone();
    let root = vol.root();
    let per = INODES_PER_BLOCK as u64;
    let files = (BRIDGE_GAP_BLOCKS + 6) * per;
    let inos: Vec<u32> = (0..files)
        .map(|i| {
            vol.create(root, format!("f{i}").as_bytes(), 0o644, 0, 0, 1)
                .unwrap()
        })
        .collect();
    while let Some(t) = vol.snapshot() {
        apply(&mut dev, &t);
    }
    let block_of = |ino: u32| sb.inode_table_start + ino as u64 / per;
    let in_block = |b: u64| *inos.iter().find(|&&i| block_of(i) == b).unwrap();
    let a = inos[0];
    let (near, far) = (
        in_block(block_of(a) + 2),
        in_block(block_of(a) + BRIDGE_GAP_BLOCKS + 4),
    );
    let chmod = SetAttr {
        mode: Some(0o600),
        ..SetAttr::default()
    };
    for ino in [a, near, far] {
        vol.set_attr(ino, &chmod, 2).unwrap();
    }
    let t = vol.snapshot().unwrap();
    let write_at = |writes: &[(u64, dvrfs_core::device::AlignedBuf)], o: u64| {
        writes.iter().find(|(w, _)| *w == o).map(|(_, b)| b.len())
    };
    let three = Some(3 * META_BLOCK_BYTES);
    // a's block, the clean one after it, near's block: one write, in both regions.
    assert_eq!(write_at(&t.primary, sb.primary_offset(block_of(a))), three);
    assert_eq!(write_at(&t.backup, sb.backup_offset(block_of(a))), three);
    // far's block is BRIDGE_GAP_BLOCKS + 1 clean blocks past near's: a write of its own.
    assert_eq!(
        write_at(&t.primary, sb.primary_offset(block_of(far))),
        Some(META_BLOCK_BYTES)
    );
    // The bridged block carries what the disk holds (a new header, the same records).
    let first = sb.primary_offset(block_of(a));
    let w = &t.primary.iter().find(|(o, _)| *o == first).unwrap().1;
    let mut on_disk = vec![0u8; META_BLOCK_BYTES];
    dev.read_at(first + META_BLOCK_BYTES as u64, &mut on_disk)
        .unwrap();
    assert_eq!(
        payload(&w[META_BLOCK_BYTES..2 * META_BLOCK_BYTES]),
        payload(&on_disk)
    );
    // Replay: only the journal reaches the disk, then the volume opens with the
    // transaction applied and checks clean.
    dev.write_at(t.journal.0, &t.journal.1).unwrap();
    let (vol, replay) = Volume::load(&dev, &OpenOptions::writable()).unwrap();
    assert!(replay.is_some());
    for ino in [a, near, far] {
        assert_eq!(vol.stat(ino).unwrap().mode & 0o7777, 0o600);
    }
    drop(vol);
    apply(&mut dev, &t);
    common::assert_fsck_clean(&dev);
}

/// A write into a block the file already has reads first only the 4 KiB sectors that
/// hold bytes of the file it does not overwrite. The last write of a copy (aligned
/// start, a size that is not a multiple of 4 KiB) reads nothing: the rest of its last
/// sector lies past the file's end. An append that starts inside a sector holding the
/// file's bytes is composed from the bytes the engine remembers of its last append, or
/// reads that sector when it does not. Stale bytes on the disk past the end never enter
/// the file: a later write past a gap reads zeros in the gap.
#[test]
fn a_write_reads_only_the_file_bytes_it_does_not_overwrite() {
    let mut dev = small();
    let sb = {
        let (vol, _) = Volume::load(&dev, &OpenOptions::read_only()).unwrap();
        vol.superblock().clone()
    };
    // What an earlier file system left on the data region.
    dev.poke(sb.data_start_bytes, &vec![0xAB; 8 << 20]);
    let mut e = engine_on(&dev, 1, 1024);
    let ino = create_f(&mut e);
    let data_reads = |log: &[DevCommand]| {
        log.iter()
            .filter(|c| c.kind == DevKind::Read && c.offset_bytes >= sb.data_start_bytes)
            .count()
    };
    let write = |e: &mut Engine, dev: &mut MemDevice, offset: u64, bytes: &[u8], t: u64| {
        e.submit(
            Op::Write {
                ino,
                offset,
                data: IoBuf::from_slice(bytes),
            },
            None,
            1,
            now(t),
        )
        .unwrap();
        let (log, _) = drain(e, dev, t * MS);
        e.take_completion().unwrap().result.unwrap();
        data_reads(&log)
    };
    // A fresh block: nothing read. The copy's last write: nothing read either.
    assert_eq!(write(&mut e, &mut dev, 0, &[1; 64 << 10], 1), 0);
    assert_eq!(write(&mut e, &mut dev, 64 << 10, &[2; 1000], 2), 0);
    // An append inside the sector holding bytes 64K..64K+1000: the engine composes
    // that sector from the bytes the last append left there (engine/last_sector.rs).
    assert_eq!(write(&mut e, &mut dev, (64 << 10) + 1000, &[3; 100], 3), 0);
    // Once something else may have changed them (a truncate, here to the same
    // size), the sector is read.
    e.submit(
        Op::Truncate {
            ino,
            size_bytes: (64 << 10) + 1100,
        },
        None,
        1,
        now(4),
    )
    .unwrap();
    drain(&mut e, &mut dev, 4 * MS);
    e.take_completion().unwrap().result.unwrap();
    assert_eq!(write(&mut e, &mut dev, (64 << 10) + 1100, &[3; 100], 5), 1);
    // Past a gap in the same block: the gap reads as zeros, not as the stale 0xAB.
    let far = 200 << 10;
    write(&mut e, &mut dev, far + 5, &[4; 10], 6);
    let len = (far + 15) as usize;
    e.submit(
        Op::Read {
            ino,
            offset: 0,
            buf: IoBuf::zeroed(len),
        },
        None,
        1,
        now(7),
    )
    .unwrap();
    drain(&mut e, &mut dev, 7 * MS);
    let got = match e.take_completion().unwrap().result.unwrap() {
        Output::Read { buf, bytes } => {
            assert_eq!(bytes, len);
            buf.bytes().unwrap().to_vec()
        }
        o => panic!("{o:?}"),
    };
    let mut want = vec![0u8; len];
    want[..64 << 10].fill(1);
    want[64 << 10..(64 << 10) + 1000].fill(2);
    want[(64 << 10) + 1000..(64 << 10) + 1200].fill(3);
    want[far as usize + 5..].fill(4);
    assert!(
        got == want,
        "the file reads back as written, zeros in the gap"
    );
}

#[test]
fn appends_submitted_together_land_one_after_another() {
    // Three submitters append lines to one file at once (a recorder sealing a chunk
    // and retention recording a deletion in the same chain): each append is placed
    // at the end the earlier ones leave, whatever the order the device serves them.
    let mut dev = formatted(256 << 20, 1 << 20, AllocPolicy::Zrr, 3);
    let mut e = engine_on(&dev, 4, 1024);
    let ino = create_f(&mut e);
    let lines: [&[u8]; 3] = [b"first line\n", b"a second, longer line\n", b"third\n"];
    for (k, l) in lines.iter().enumerate() {
        let op = Op::Append {
            ino,
            data: IoBuf::from_slice(l),
        };
        e.submit(op, None, k as u32 + 1, now(0)).unwrap();
    }
    let mut cmds = vec![];
    while let Some(c) = e.poll(now(1)) {
        cmds.push(c);
    }
    while let Some(c) = cmds.pop() {
        perform(&mut e, &mut dev, &c, now(2));
        while let Some(c) = e.poll(now(2)) {
            cmds.push(c);
        }
    }
    drain(&mut e, &mut dev, 3 * MS);
    let done: Vec<_> = std::iter::from_fn(|| e.take_completion()).collect();
    assert_eq!(done.len(), 3);
    assert!(done.iter().all(|c| c.result.is_ok()), "{done:?}");
    let want: Vec<u8> = lines.concat();
    assert_eq!(e.volume().stat(ino).unwrap().size_bytes, want.len() as u64);
    let read = e
        .submit(
            Op::Read {
                ino,
                offset: 0,
                buf: IoBuf::zeroed(want.len()),
            },
            None,
            9,
            now(4),
        )
        .unwrap();
    drain(&mut e, &mut dev, 4 * MS);
    let c = std::iter::from_fn(|| e.take_completion())
        .find(|c| c.op == read)
        .unwrap();
    let Ok(Output::Read { buf, bytes }) = c.result else {
        panic!("{:?}", c.result)
    };
    assert_eq!(&buf.bytes().unwrap()[..bytes], &want[..]);
    e.check().unwrap();
}
