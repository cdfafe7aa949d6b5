//! Stream reservations through the runtime, in wall-clock time on the emulated
//! `avfs-250g` (real data in an image, every command completed when the model's disk
//! would finish it): the DVR workload beside a best-effort copy meets every deadline,
//! and every byte comes back.

mod common;

use common::create;

use dvrfs_core::disk::DiskModel;
use dvrfs_core::engine::{StreamDir, StreamSpec, StreamStats};
use dvrfs_core::layout::MkfsParams;
use dvrfs_core::meta::Ino;
use dvrfs_core::tools::mkfs;
use dvrfs_core::{IoBuf, Op, Output};
use dvrfs_io::{FileDevice, LockMode};
use dvrfs_runtime::{Options, Runtime};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

const MIB: u64 = 1 << 20;
const ATSC_BPS: f64 = 19.39e6;
const RUN: Duration = Duration::from_secs(20);

fn image(dir: &Path, size: u64) -> PathBuf {
    let path = dir.join("fs.img");
    FileDevice::create_image(&path, size).unwrap();
    let mut dev = FileDevice::open(&path, true, LockMode::Exclusive).unwrap();
    mkfs(&mut dev, &MkfsParams::new(size, [9; 16], 7), &mut |_, _| {}).unwrap();
    path
}

fn pattern(f: usize, offset: u64, len: usize) -> Vec<u8> {
    (offset..offset + len as u64)
        .map(|i| (i.wrapping_mul(131) ^ (i >> 13) ^ (f as u64 * 7919)) as u8)
        .collect()
}

fn spec(dir: StreamDir, reserve: u64) -> StreamSpec {
    StreamSpec {
        idle: false,
        dir,
        rate_bps: ATSC_BPS,
        request_bytes: 512 * 1024,
        buffer_bytes: None,
        reserve_bytes: reserve,
        start_bytes: 0,
        durable_ns: None,
    }
}

fn close(rt: &Runtime, id: u32) -> StreamStats {
    match rt.run(Op::StreamClose { stream: id }, None, 0).unwrap() {
        Output::StreamClosed(s) => s,
        o => panic!("{o:?}"),
    }
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg").unwrap_or_default()
}

#[test]
fn dvr_4r2w_beside_a_best_effort_copy_on_the_emulated_avfs_250g_misses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let path = image(dir.path(), 4 << 30);
    let bytes_per_stream = (ATSC_BPS / 8.0 * (RUN.as_secs_f64() + 2.0)) as u64;
    let copy_bytes = 64 * MIB;
    // The recordings to play and the file to copy, written at full speed first.
    {
        let rt = Runtime::open(&path, Options::default()).unwrap();
        for f in 0..4 {
            let ino = create(&rt, &format!("play{f}.ts"));
            let mut off = 0;
            while off < bytes_per_stream {
                let n = (8 * MIB).min(bytes_per_stream - off) as usize;
                let data = IoBuf::from_slice(&pattern(f, off, n));
                rt.run(
                    Op::Write {
                        ino,
                        offset: off,
                        data,
                    },
                    None,
                    0,
                )
                .unwrap();
                off += n as u64;
            }
        }
        let ino = create(&rt, "photos.tar");
        for k in 0..copy_bytes / (8 * MIB) {
            let data = IoBuf::from_slice(&pattern(9, k * 8 * MIB, 8 * MIB as usize));
            rt.run(
                Op::Write {
                    ino,
                    offset: k * 8 * MIB,
                    data,
                },
                None,
                0,
            )
            .unwrap();
        }
        rt.close().unwrap();
    }
    let model = DiskModel::builtin("avfs-250g").unwrap();
    let rt = Runtime::open(
        &path,
        Options {
            device_model: Some(model),
            ..Options::default()
        },
    )
    .unwrap();
    let resolve = |p: &'static str| rt.query(move |v| v.resolve(p)).unwrap().unwrap();
    let players: Vec<Ino> = (0..4)
        .map(|f| match f {
            0 => resolve("/play0.ts"),
            1 => resolve("/play1.ts"),
            2 => resolve("/play2.ts"),
            _ => resolve("/play3.ts"),
        })
        .collect();
    let recorders: Vec<Ino> = (0..2).map(|r| create(&rt, &format!("rec{r}.ts"))).collect();
    let src = resolve("/photos.tar");
    let dst = create(&rt, "photos-copy.tar");
    let rec_bytes = (ATSC_BPS / 8.0 * RUN.as_secs_f64()) as u64;
    let (results, copied): (Vec<(String, StreamStats)>, u64) = std::thread::scope(|s| {
        let mut handles = vec![];
        for (f, &ino) in players.iter().enumerate() {
            let rt = &rt;
            handles.push(s.spawn(move || {
                let info = rt.open_stream(ino, spec(StreamDir::Read, 0)).unwrap();
                let start = Instant::now();
                let mut off = 0u64;
                let mut buf = IoBuf::zeroed(256 * 1024);
                while start.elapsed() < RUN {
                    let out = rt
                        .run(
                            Op::StreamRead {
                                stream: info.id,
                                buf,
                            },
                            None,
                            0,
                        )
                        .unwrap();
                    let Output::Read { buf: b, bytes } = out else {
                        panic!("{out:?}")
                    };
                    assert!(bytes > 0, "player {f} reached the end early");
                    assert!(
                        b.bytes().unwrap()[..bytes] == pattern(f, off, bytes)[..],
                        "player {f} read wrong bytes at {off}"
                    );
                    off += bytes as u64;
                    buf = b;
                }
                (format!("player {f}"), close(rt, info.id))
            }));
        }
        for (r, &ino) in recorders.iter().enumerate() {
            let rt = &rt;
            handles.push(s.spawn(move || {
                let info = rt
                    .open_stream(ino, spec(StreamDir::Write, rec_bytes))
                    .unwrap();
                let mut off = 0u64;
                while off < rec_bytes {
                    let n = (188 * 1000).min(rec_bytes - off) as usize;
                    let data = IoBuf::from_slice(&pattern(10 + r, off, n));
                    rt.run(
                        Op::StreamWrite {
                            stream: info.id,
                            data,
                        },
                        None,
                        0,
                    )
                    .unwrap();
                    off += n as u64;
                }
                (format!("recorder {r}"), close(rt, info.id))
            }));
        }
        // The best-effort copy runs as fast as the disk lets it, beside the streams.
        let rt_ref = &rt;
        let copier = s.spawn(move || {
            let start = Instant::now();
            let mut off = 0;
            while off < copy_bytes && start.elapsed() < RUN {
                let out = rt_ref
                    .run(
                        Op::Read {
                            ino: src,
                            offset: off,
                            buf: IoBuf::zeroed(4 * MIB as usize),
                        },
                        None,
                        0,
                    )
                    .unwrap();
                let Output::Read { buf, bytes } = out else {
                    panic!("{out:?}")
                };
                rt_ref
                    .run(
                        Op::Write {
                            ino: dst,
                            offset: off,
                            data: buf,
                        },
                        None,
                        0,
                    )
                    .unwrap();
                off += bytes as u64;
            }
            off
        });
        let out: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
        (out, copier.join().unwrap())
    });
    eprintln!(
        "best-effort copy: {} MiB in {} s",
        copied / MIB,
        RUN.as_secs()
    );
    assert!(copied > 0, "the best-effort copy made no progress");
    for (who, st) in &results {
        eprintln!("{who}: {st:?}");
        assert!(
            st.late == 0 && st.stalls == 0,
            "{who}: {} of {} requests late, {} stalls (smallest margin {:?} ns); if this machine was busy (load average {}), the dispatcher may not have run in time: rerun on an idle machine",
            st.late,
            st.requests,
            st.stalls,
            st.min_margin_ns,
            loadavg().trim()
        );
        assert!(st.requests > 0, "{who} issued nothing");
    }
    // The recordings are all there.
    for (r, &ino) in recorders.iter().enumerate() {
        let out = rt
            .run(
                Op::Read {
                    ino,
                    offset: 0,
                    buf: IoBuf::zeroed(rec_bytes as usize + 4096),
                },
                None,
                0,
            )
            .unwrap();
        let Output::Read { buf, bytes } = out else {
            panic!("{out:?}")
        };
        assert_eq!(bytes as u64, rec_bytes);
        assert!(
            buf.bytes().unwrap()[..bytes] == pattern(10 + r, 0, bytes)[..],
            "recording {r} differs"
        );
    }
    rt.close().unwrap();
}
