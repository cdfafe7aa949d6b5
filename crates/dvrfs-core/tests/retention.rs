//! Retention policies as the volume stores them (FORMAT.md sections 5 and 7): the
//! volume's in the superblock, a stream directory's in its inode record, read back
//! after a reopen, inherited by the streams below a directory, refused where they
//! make no sense, and a volume made before them gaining the feature bit with its
//! first policy.

mod common;

use common::damage::superblock;
use common::{assert_fsck_clean, clocked, formatted, open_rw};
use dvrfs_core::format::inode::StreamRetention;
use dvrfs_core::format::superblock::{AllocPolicy, VolumeRetention, FEATURE_RETENTION};
use dvrfs_core::volume::SetAttr;
use dvrfs_core::Error;

const DAY: u32 = 86_400;

fn policy(max_age_days: u32, min_age_days: u32, max_gib: u64) -> StreamRetention {
    StreamRetention {
        max_age_s: max_age_days * DAY,
        min_age_s: min_age_days * DAY,
        max_bytes: max_gib << 30,
    }
}

fn set_policy(r: Option<StreamRetention>) -> SetAttr {
    SetAttr {
        retention: Some(r),
        ..SetAttr::default()
    }
}

#[test]
fn policies_are_stored_read_back_and_inherited() {
    let dev = formatted(256 << 20, 1 << 20, AllocPolicy::Zrr, 3);
    assert_ne!(
        superblock(&dev).features & FEATURE_RETENTION,
        0,
        "set by mkfs"
    );
    let mut fs = open_rw(dev);
    assert_eq!(
        fs.engine().volume().volume_retention(),
        VolumeRetention::default()
    );
    let vol = VolumeRetention {
        high_permille: 950,
        low_permille: 900,
        protected_max_permille: 200,
    };
    fs.set_volume_retention(vol, 1).unwrap();
    let root = fs.root();
    let cams = fs.mkdir(root, b"cams", 0o755, 0, 0, 1).unwrap();
    let cam1 = fs.mkdir(cams, b"cam1", 0o755, 0, 0, 1).unwrap();
    let lobby = fs.mkdir(root, b"lobby", 0o755, 0, 0, 1).unwrap();
    fs.set_attr(cams, &set_policy(Some(policy(30, 7, 500))), 2)
        .unwrap();
    fs.set_attr(lobby, &set_policy(Some(policy(0, 0, 25))), 2)
        .unwrap();
    let dev = fs.close().unwrap();
    let fs = open_rw(dev);
    let v = fs.engine().volume();
    assert_eq!(v.volume_retention(), vol);
    assert_eq!(v.dir_retention(cams), Some(policy(30, 7, 500)));
    assert_eq!(v.dir_retention(cam1), None);
    // A stream below a directory of streams is governed by that directory's.
    assert_eq!(
        v.effective_retention(cam1),
        Some((cams, policy(30, 7, 500)))
    );
    assert_eq!(
        v.effective_retention(lobby),
        Some((lobby, policy(0, 0, 25)))
    );
    assert_eq!(v.effective_retention(root), None);
    let dev = fs.close().unwrap();
    assert_fsck_clean(&dev);
    // Cleared: nothing left, and the record's bytes are zero again.
    let mut fs = open_rw(dev);
    fs.set_attr(cams, &set_policy(None), 3).unwrap();
    fs.set_volume_retention(VolumeRetention::default(), 3)
        .unwrap();
    let fs = open_rw(fs.close().unwrap());
    assert_eq!(fs.engine().volume().effective_retention(cam1), None);
    assert_eq!(
        fs.engine().volume().volume_retention(),
        VolumeRetention::default()
    );
    assert_fsck_clean(&fs.close().unwrap());
}

#[test]
fn policies_that_make_no_sense_are_refused_with_the_reason() {
    let mut fs = open_rw(formatted(256 << 20, 1 << 20, AllocPolicy::Zrr, 3));
    let root = fs.root();
    let f = fs.create(root, b"clip.ts", 0o644, 0, 0, 1).unwrap();
    let refused = |r: Result<(), Error>| match r {
        Err(Error::InvalidArgument(m)) => m,
        r => panic!("not refused: {r:?}"),
    };
    let m = refused(fs.set_attr(f, &set_policy(Some(policy(1, 0, 0))), 2));
    assert!(m.contains("not a directory"), "{m}");
    let m = refused(fs.set_attr(root, &set_policy(Some(policy(7, 30, 0))), 2));
    assert!(m.contains("--min-age") && m.contains("--max-age"), "{m}");
    let m = refused(fs.set_volume_retention(
        VolumeRetention {
            high_permille: 900,
            low_permille: 950,
            protected_max_permille: 0,
        },
        2,
    ));
    assert!(m.contains("--low 95%") && m.contains("--high 90%"), "{m}");
    let m = refused(fs.set_volume_retention(
        VolumeRetention {
            high_permille: 950,
            low_permille: 0,
            protected_max_permille: 0,
        },
        2,
    ));
    assert!(m.contains("both"), "{m}");
    // Nothing was stored.
    assert_eq!(fs.engine().volume().dir_retention(root), None);
    assert_eq!(
        fs.engine().volume().volume_retention(),
        VolumeRetention::default()
    );
}

#[test]
fn a_volume_made_before_retention_gains_the_feature_with_its_first_policy() {
    let mut dev = formatted(256 << 20, 1 << 20, AllocPolicy::Zrr, 3);
    let mut sb = superblock(&dev);
    sb.features &= !FEATURE_RETENTION;
    let image = sb.encode(0);
    for off in [0, sb.backup_offset(0), sb.device_bytes - 4096] {
        dev.poke(off, &image[..]);
    }
    let mut fs = open_rw(dev);
    let d = fs.mkdir(fs.root(), b"cam", 0o755, 0, 0, 1).unwrap();
    fs.sync().unwrap();
    let dev = fs.close().unwrap();
    assert_eq!(
        superblock(&dev).features & FEATURE_RETENTION,
        0,
        "not without a policy"
    );
    let mut fs = open_rw(dev);
    fs.set_attr(d, &set_policy(Some(policy(30, 0, 0))), 2)
        .unwrap();
    let dev = fs.close().unwrap();
    assert_ne!(superblock(&dev).features & FEATURE_RETENTION, 0);
    assert_fsck_clean(&dev);
    let fs = open_rw(dev);
    assert_eq!(
        fs.engine().volume().dir_retention(d),
        Some(policy(30, 0, 0))
    );
}

#[test]
fn a_superblock_with_a_policy_out_of_its_bounds_is_malformed() {
    use dvrfs_core::format::superblock::Superblock;
    use dvrfs_core::format::{parse_header, seal_block, META_BLOCK_BYTES};
    let dev = formatted(256 << 20, 1 << 20, AllocPolicy::Zrr, 3);
    let mut b = vec![0u8; META_BLOCK_BYTES];
    dev.peek(0, &mut b);
    let h = parse_header(&b).unwrap();
    // Block offsets 212..216 (payload 164): high, low; 268 (payload 220): protected.
    let with = |b: &[u8], edit: &dyn Fn(&mut [u8])| {
        let mut c = b.to_vec();
        edit(&mut c);
        seal_block(&mut c, &h);
        Superblock::decode(&c).map(|s| s.retention)
    };
    let put16 = |c: &mut [u8], at: usize, v: u16| c[at..at + 2].copy_from_slice(&v.to_le_bytes());
    let ok = with(&b, &|c| {
        put16(c, 212, 950);
        put16(c, 214, 900);
        put16(c, 268, 200);
    });
    assert_eq!(ok.unwrap().high_permille, 950);
    type Edit = Box<dyn Fn(&mut [u8])>;
    let cases: [(&str, Edit); 4] = [
        (
            "low above high",
            Box::new(move |c| {
                put16(c, 212, 900);
                put16(c, 214, 950);
            }),
        ),
        ("only high", Box::new(move |c| put16(c, 212, 900))),
        (
            "above 100%",
            Box::new(move |c| {
                put16(c, 212, 1001);
                put16(c, 214, 900);
            }),
        ),
        (
            "protected above 100%",
            Box::new(move |c| put16(c, 268, 1001)),
        ),
    ];
    for (what, edit) in cases {
        let e = with(&b, &*edit).expect_err(what);
        assert!(format!("{e}").contains("retention"), "{what}: {e}");
    }
}

#[test]
fn a_snapshot_finds_the_streams_and_the_plan_takes_their_oldest_chunks() {
    use dvrfs_core::retention::{plan, DeleteCause, PlanInput, Snapshot};
    use std::collections::BTreeSet;
    const T0: i64 = 1_795_890_524_496_000_000; // 20261128T182844.496Z
    let mut fs = open_rw(formatted(256 << 20, 1 << 20, AllocPolicy::Zrr, 3));
    let root = fs.root();
    // /cams/cam1: chunks named by their UTC start, a minute apart, under /cams's
    // policy; /door: a chain makes it a stream; /docs: neither, never touched.
    let cams = fs.mkdir(root, b"cams", 0o755, 0, 0, 1).unwrap();
    let cam1 = fs.mkdir(cams, b"cam1", 0o755, 0, 0, 1).unwrap();
    let door = fs.mkdir(root, b"door", 0o755, 0, 0, 1).unwrap();
    let docs = fs.mkdir(root, b"docs", 0o755, 0, 0, 1).unwrap();
    let three_mib = StreamRetention {
        max_bytes: 3 << 20,
        ..StreamRetention::default()
    };
    fs.set_attr(cams, &set_policy(Some(three_mib)), 1).unwrap();
    let name = |k: i64| format!("20261128T18{:02}44.496Z.ts", 28 + k);
    let mut cam_files = vec![];
    for k in 0..4 {
        let f = fs
            .create(cam1, name(k).as_bytes(), 0o644, 0, 0, T0)
            .unwrap();
        fs.write(f, 0, &vec![k as u8; 1 << 20], T0 + k * 60_000_000_000)
            .unwrap();
        cam_files.push(f);
    }
    let chain = fs.create(door, b".chain", 0o644, 0, 0, T0).unwrap();
    fs.write(chain, 0, b"{}\n", T0).unwrap();
    let d1 = fs.create(door, b"a.ts", 0o644, 0, 0, T0).unwrap();
    fs.write(d1, 0, &[1; 4096], T0 + 5).unwrap();
    let doc = fs.create(docs, b"manual.pdf", 0o644, 0, 0, T0).unwrap();
    fs.write(doc, 0, &[2; 4096], 1).unwrap();
    // The newest chunk is being recorded.
    let busy: BTreeSet<u32> = [cam_files[3]].into();
    let s = Snapshot::of(fs.engine().volume(), &busy, T0);
    let paths: Vec<&str> = s.streams.iter().map(|s| s.path.as_str()).collect();
    assert_eq!(paths, ["/cams/cam1", "/door"]);
    let cam = &s.streams[0];
    assert_eq!(cam.policy, Some((cams, three_mib)));
    let starts: Vec<i64> = cam.chunks.iter().map(|c| c.start_utc_ns).collect();
    assert_eq!(
        starts,
        (0..4).map(|k| T0 + k * 60_000_000_000).collect::<Vec<_>>()
    );
    assert!(cam.chunks.iter().all(|c| c.bytes == 1 << 20));
    assert_eq!(
        cam.chunks.iter().map(|c| c.busy).collect::<Vec<_>>(),
        [false, false, false, true]
    );
    // The chain is not a chunk; the door's file is dated by its write.
    assert_eq!(s.streams[1].chunks.len(), 1);
    assert_eq!(s.streams[1].chunks[0].start_utc_ns, T0 + 5);
    // Over its 3 MiB: the oldest chunk goes; the manual never.
    let p = plan(PlanInput {
        snapshot: &s,
        volume: VolumeRetention::default(),
        now_utc_ns: T0 + 600_000_000_000,
        need_free_bytes: 0,
    });
    let gone: Vec<(u32, DeleteCause)> = p.deletions.iter().map(|d| (d.ino, d.cause)).collect();
    assert_eq!(gone, [(cam_files[0], DeleteCause::MaxSize)]);
    // Every chunk but the one being recorded, for a recording's need of the whole
    // volume: a shortfall, and still not the manual or the chain.
    let p = plan(PlanInput {
        snapshot: &s,
        volume: VolumeRetention::default(),
        now_utc_ns: T0,
        need_free_bytes: s.data_bytes,
    });
    assert_eq!(p.deletions.len(), 4);
    assert!(p
        .deletions
        .iter()
        .all(|d| d.ino != doc && d.ino != chain && d.ino != cam_files[3]));
    assert!(p.shortfall_bytes > 0);
}

#[test]
fn the_engine_deletes_what_the_policies_say_paced_and_logged() {
    use dvrfs_core::engine::{RETENTION_CHECK_BUSY_NS, RETENTION_CHECK_NS};
    use dvrfs_core::format::events::{DeleteCause, What};
    const T0: i64 = 1_795_890_524_496_000_000;
    const MIN: i64 = 60_000_000_000;
    let (mut fs, clock) = clocked();
    let root = fs.root();
    let cam = fs.mkdir(root, b"cam", 0o755, 0, 0, T0).unwrap();
    let mut files = vec![];
    for k in 0..6i64 {
        let name = format!("20261128T18{:02}44.496Z.ts", 28 + k);
        let f = fs.create(cam, name.as_bytes(), 0o644, 0, 0, T0).unwrap();
        fs.write(f, 0, &vec![k as u8; 1 << 20], T0 + (k + 1) * MIN)
            .unwrap();
        files.push(f);
    }
    // Nothing happens without a policy.
    clock.set(2 * RETENTION_CHECK_NS);
    fs.tick_at(T0 + 10 * MIN).unwrap();
    assert_eq!(fs.engine().retention_figures().plans, 0);
    // At most 4 MiB: the two oldest go, at the next check, one at a time.
    let four = StreamRetention {
        max_bytes: 4 << 20,
        ..StreamRetention::default()
    };
    fs.set_attr(cam, &set_policy(Some(four)), T0 + 10 * MIN)
        .unwrap();
    // Planned at once, and paced: one chunk, the next no sooner than the gap.
    assert_eq!(fs.engine().retention_figures().deleted_chunks, 1);
    fs.tick_at(T0 + 10 * MIN).unwrap();
    assert_eq!(fs.engine().retention_figures().deleted_chunks, 1);
    let mut t = 2 * RETENTION_CHECK_NS;
    for _ in 0..4 {
        t += RETENTION_CHECK_BUSY_NS;
        clock.set(t);
        fs.tick_at(T0 + 10 * MIN).unwrap();
    }
    let f = fs.engine().retention_figures().clone();
    assert_eq!((f.deleted_chunks, f.deleted_bytes), (2, 2 << 20), "{f:?}");
    let left: Vec<u32> = fs
        .engine()
        .volume()
        .readdir(cam)
        .unwrap()
        .iter()
        .map(|e| e.1)
        .collect();
    assert_eq!(left, files[2..]);
    // A max-age of 5 minutes at 18:38:14: what ended before 18:33:14 goes (files
    // 2 and 3, last written at 18:31:44 and 18:32:44; not file 4, at 18:33:44).
    let five = StreamRetention {
        max_age_s: 5 * 60,
        ..four
    };
    let wall = T0 + 9 * MIN + MIN / 2;
    fs.set_attr(cam, &set_policy(Some(five)), wall).unwrap();
    for _ in 0..12 {
        t += RETENTION_CHECK_BUSY_NS;
        clock.set(t);
        fs.tick_at(wall).unwrap();
    }
    let gone: Vec<(String, DeleteCause, u64)> = fs
        .engine()
        .volume()
        .events()
        .iter()
        .filter_map(|e| match e.what {
            What::ChunkDeleted { cause, bytes, .. } => {
                Some((String::from_utf8_lossy(&e.path).into_owned(), cause, bytes))
            }
            _ => None,
        })
        .collect();
    let name = |k: i64| format!("/cam/20261128T18{:02}44.496Z.ts", 28 + k);
    assert_eq!(
        gone,
        [
            (name(0), DeleteCause::MaxSize, 1 << 20),
            (name(1), DeleteCause::MaxSize, 1 << 20),
            (name(2), DeleteCause::MaxAge, 1 << 20),
            (name(3), DeleteCause::MaxAge, 1 << 20),
        ]
    );
    fs.sync().unwrap();
    let dev = fs.close().unwrap();
    assert_fsck_clean(&dev);
}

/// 64 chunks of one stream, `/cam/cNN.ts`, each 64 KiB of its own byte, on a
/// fresh volume in the engine; the power may go at write `cut` after the chunks are
/// on the media; then a policy keeping 1 MiB (16 chunks) is set and retention runs
/// for 4 s: 48 deletions at 20 a second, over three commits.
/// Returns the drive, whose crash device holds what the media kept.
fn deletions_cut_at(cut: Option<(dvrfs_core::device::CrashMode, u64)>) -> common::drive::Drive {
    use common::drive::{engine_on, MS};
    use dvrfs_core::device::CrashDevice;
    use dvrfs_core::engine::{IoBuf, Op, Output};
    let dev = formatted(256 << 20, 1 << 20, AllocPolicy::Zrr, 3);
    let (mut e, mut d) = engine_on(&dev, None);
    let root = e.volume().root();
    let mkdir = Op::Mkdir {
        parent: root,
        name: b"cam".to_vec(),
        perm: 0o755,
        uid: 0,
        gid: 0,
    };
    let Ok(Output::Ino(cam)) = d.run(&mut e, mkdir) else {
        panic!("mkdir")
    };
    for k in 0..64u8 {
        let create = Op::Create {
            parent: cam,
            name: format!("c{k:02}.ts").into_bytes(),
            perm: 0o644,
            uid: 0,
            gid: 0,
        };
        let Ok(Output::Ino(f)) = d.run(&mut e, create) else {
            panic!("create")
        };
        let data = IoBuf::from_slice(&[k; 64 << 10]);
        d.run(
            &mut e,
            Op::Write {
                ino: f,
                offset: 0,
                data,
            },
        )
        .unwrap();
    }
    d.run(&mut e, Op::Fsync).unwrap();
    let mut cd = CrashDevice::new(
        d.dev.clone(),
        cut.map_or(dvrfs_core::device::CrashMode::InOrderTorn, |c| c.0),
        7,
    );
    cd.crash_after_writes(cut.map_or(u64::MAX, |c| c.1));
    d.durable.clear();
    d.crash = Some(cd);
    let keep = StreamRetention {
        max_bytes: 1 << 20,
        ..StreamRetention::default()
    };
    let set = Op::SetAttr {
        ino: cam,
        set: set_policy(Some(keep)),
    };
    let id = e.submit(set, None, 1, d.now()).unwrap();
    let _ = d.wait(&mut e, id);
    let until = d.t + 4_000 * MS;
    d.run_until(&mut e, until);
    d
}

#[test]
fn a_power_cut_during_retention_leaves_each_chunk_whole_or_gone_and_logged() {
    use dvrfs_core::device::CrashMode;
    use dvrfs_core::format::events::What;
    use dvrfs_core::volume::OpenOptions;
    use std::collections::BTreeSet;
    // The uncut run's writes are counted.
    let probe = deletions_cut_at(None);
    let writes = probe.crash.as_ref().unwrap().writes;
    assert!(writes > 3, "{writes} writes");
    let mut cuts = 0;
    let mut seen_gone = BTreeSet::new();
    for mode in [CrashMode::InOrderTorn, CrashMode::RandomSubsetTorn] {
        for cut in 0..writes {
            let d = deletions_cut_at(Some((mode, cut)));
            let media = match d.crash.as_ref().unwrap().crash_image() {
                Some(m) => m,
                None => continue, // the run ended before that write
            };
            cuts += 1;
            let what = format!("cut at write {cut} ({mode:?})");
            let mut fs = dvrfs_core::Fs::open(media.clone(), OpenOptions::read_only())
                .unwrap_or_else(|e| panic!("{what}: {e}"));
            let cam = fs.resolve("/cam").unwrap();
            let left: BTreeSet<String> = fs
                .engine()
                .volume()
                .readdir(cam)
                .unwrap()
                .into_iter()
                .map(|(n, _, _)| String::from_utf8(n).unwrap())
                .collect();
            // Every chunk left is whole; those gone are the oldest, each logged.
            for name in &left {
                let f = fs.resolve(&format!("/cam/{name}")).unwrap();
                let k: u8 = name[1..3].parse().unwrap();
                let mut got = vec![0u8; 64 << 10];
                assert_eq!(fs.read(f, 0, &mut got).unwrap(), 64 << 10, "{what}: {name}");
                assert!(got.iter().all(|&b| b == k), "{what}: {name} changed");
            }
            let gone: BTreeSet<String> = (0..64)
                .map(|k| format!("c{k:02}.ts"))
                .filter(|n| !left.contains(n))
                .collect();
            assert!(gone.len() <= 48, "{what}: {gone:?}");
            let oldest: BTreeSet<String> = (0..gone.len()).map(|k| format!("c{k:02}.ts")).collect();
            assert_eq!(gone, oldest, "{what}");
            seen_gone.insert(gone.len());
            let logged: BTreeSet<String> = fs
                .engine()
                .volume()
                .events()
                .iter()
                .filter(|e| matches!(e.what, What::ChunkDeleted { .. }))
                .map(|e| {
                    String::from_utf8_lossy(&e.path)
                        .trim_start_matches("/cam/")
                        .to_string()
                })
                .collect();
            assert_eq!(logged, gone, "{what}: the log names what went");
            assert_fsck_clean(&media);
        }
    }
    assert!(cuts > 3);
    // Cuts before any deletion was committed, after all of them, and between.
    assert!(
        seen_gone.contains(&0) && seen_gone.contains(&48) && seen_gone.len() > 2,
        "{seen_gone:?}"
    );
}
