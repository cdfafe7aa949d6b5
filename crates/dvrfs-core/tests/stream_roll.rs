//! A recording that rolls on to its next file (`Op::StreamRoll`,
//! `engine/stream/roll.rs`): the chunks of a stream. Every byte goes to the file it
//! was written for, the stream keeps its admission, figures and held space, the
//! refusals leave it recording where it was, and a power cut at any write of a
//! rolling recording keeps, in each chunk, a prefix of what was written to it and
//! every byte handed over a durability bound before the cut (with the tail log and
//! without it).

mod common;

use common::drive::{open_stream as open, pattern, setup, stream_spec as spec, Drive, MS};
use dvrfs_core::device::{CrashDevice, CrashMode, MemDevice};
use dvrfs_core::disk::Admission;
use dvrfs_core::driver::Fs;
use dvrfs_core::engine::{Engine, IoBuf, Op, Output, StreamDir, StreamSpec, GATHER_LEAD_NS};
use dvrfs_core::format::superblock::AllocPolicy;
use dvrfs_core::layout::TailLogSize;
use dvrfs_core::{Error, OpenOptions};

fn write(e: &mut Engine, d: &mut Drive, stream: u32, bytes: &[u8]) -> Result<Output, Error> {
    d.run(
        e,
        Op::StreamWrite {
            stream,
            data: IoBuf::from_slice(bytes),
        },
    )
}

#[test]
fn a_recording_rolls_on_keeping_its_stream_and_every_byte_goes_to_its_own_file() {
    let (mut e, mut d) = setup(Some(Admission::bandwidth(100e6, 0.1)), 5);
    let files: Vec<u32> = ["c0", "c1", "c2"]
        .iter()
        .map(|n| d.create(&mut e, n))
        .collect();
    let data = pattern(3 << 20);
    // Cut points that are neither request nor sector aligned.
    let cuts = [0, 1_300_001, 2_000_123, data.len()];
    let rec = open(
        &mut e,
        &mut d,
        files[0],
        spec(StreamDir::Write, 16.0, 4 << 20),
    )
    .unwrap();
    let held_at_open = e.volume().held_bytes();
    for k in 0..3 {
        if k > 0 {
            let r = d.run(
                &mut e,
                Op::StreamRoll {
                    stream: rec.id,
                    ino: files[k],
                },
            );
            assert!(matches!(r, Ok(Output::Done)), "{r:?}");
            // The old file's last bytes count as its own while they are written.
            assert_eq!(
                e.visible_size(files[k - 1]).unwrap(),
                (cuts[k] - cuts[k - 1]) as u64
            );
            assert_eq!(e.recording_on(files[k]), Some(rec.id));
        }
        // In pieces, so that requests fill across writes.
        for piece in data[cuts[k]..cuts[k + 1]].chunks(100_003) {
            write(&mut e, &mut d, rec.id, piece).unwrap();
        }
        e.check().unwrap();
    }
    // The held space went with the stream: what it used of it is gone, no more.
    let used_blocks: u64 = (0..3)
        .map(|k| ((cuts[k + 1] - cuts[k]) as u64).div_ceil(1 << 20))
        .sum();
    assert!(e.volume().held_bytes() <= held_at_open);
    let closed = d.run(&mut e, Op::StreamClose { stream: rec.id }).unwrap();
    let Output::StreamClosed(stats) = closed else {
        panic!("{closed:?}")
    };
    assert_eq!(stats.app_bytes, data.len() as u64);
    assert_eq!(stats.written_bytes, data.len() as u64);
    assert_eq!(stats.late, 0, "{stats:?}");
    assert_eq!(e.volume().held_bytes(), 0, "a hold outlived the stream");
    for k in 0..3 {
        assert!(
            d.read_file(&mut e, files[k]) == data[cuts[k]..cuts[k + 1]],
            "chunk {k} holds other bytes"
        );
        assert_eq!(e.recording_on(files[k]), None);
    }
    assert!(used_blocks >= 3);
    e.check().unwrap();
}

#[test]
fn a_roll_keeps_the_space_held_for_the_recording_on_a_full_disk() {
    let (mut e, mut d) = setup(Some(Admission::bandwidth(100e6, 0.1)), 7);
    let a = d.create(&mut e, "a");
    let b = d.create(&mut e, "b");
    let other = d.create(&mut e, "other");
    // The recording holds every free block.
    let all = e.volume().available_bytes();
    let rec = open(&mut e, &mut d, a, spec(StreamDir::Write, 400.0, all)).unwrap();
    assert_eq!(e.volume().available_bytes(), 0);
    // Each file ends in a partial block: two files of a recording take a block
    // more than one would, which a chunked recording's reservation allows for
    // (`dvrfs record --chunk`).
    let data = pattern((all - (1 << 20)) as usize);
    let half = data.len() / 2 + 12_345;
    for piece in data[..half].chunks(1 << 20) {
        write(&mut e, &mut d, rec.id, piece).unwrap();
    }
    d.run(
        &mut e,
        Op::StreamRoll {
            stream: rec.id,
            ino: b,
        },
    )
    .unwrap();
    // Nobody else gets a block of it after the roll either.
    let r = d.run(
        &mut e,
        Op::Write {
            ino: other,
            offset: 0,
            data: IoBuf::from_slice(&[1; 4096]),
        },
    );
    assert!(matches!(r, Err(Error::NoSpace { .. })), "{r:?}");
    // The rest fits exactly: the old file kept what its last bytes needed, the new
    // one got the rest.
    for piece in data[half..].chunks(1 << 20) {
        write(&mut e, &mut d, rec.id, piece).unwrap();
    }
    d.run(&mut e, Op::StreamClose { stream: rec.id }).unwrap();
    assert_eq!(e.volume().stat(a).unwrap().size_bytes, half as u64);
    assert_eq!(
        e.volume().stat(b).unwrap().size_bytes,
        (data.len() - half) as u64
    );
    e.check().unwrap();
}

#[test]
fn a_refused_roll_leaves_the_recording_in_its_file() {
    let (mut e, mut d) = setup(Some(Admission::bandwidth(100e6, 0.1)), 9);
    let a = d.create(&mut e, "a");
    let busy = d.create(&mut e, "busy");
    let played = d.create(&mut e, "played");
    let root = e.volume().root();
    let rec = open(&mut e, &mut d, a, spec(StreamDir::Write, 16.0, 4 << 20)).unwrap();
    let other = open(&mut e, &mut d, busy, spec(StreamDir::Write, 16.0, 1 << 20)).unwrap();
    let play = open(&mut e, &mut d, played, spec(StreamDir::Read, 16.0, 0)).unwrap();
    let data = pattern(1 << 20);
    write(&mut e, &mut d, rec.id, &data[..500_000]).unwrap();
    let refusals = [
        (rec.id, a, "already records into"),
        (rec.id, root, "not a regular file"),
        (rec.id, busy, "already has a recording"),
        (play.id, busy, "is a playback"),
        (99, busy, "is not open"),
    ];
    for (stream, ino, says) in refusals {
        let err = d.run(&mut e, Op::StreamRoll { stream, ino }).unwrap_err();
        assert!(err.to_string().contains(says), "{says}: {err}");
    }
    write(&mut e, &mut d, rec.id, &data[500_000..]).unwrap();
    for s in [rec.id, other.id, play.id] {
        d.run(&mut e, Op::StreamClose { stream: s }).unwrap();
    }
    assert!(d.read_file(&mut e, a) == data);
    e.check().unwrap();
}

const TICK_NS: u64 = 40 * MS;
/// The commit's own time on the test drive, with room for what runs beside it.
const COMMIT_NS: u64 = 30 * MS;
/// Durability bound of a recording with the default interval.
const BOUND_NS: u64 = 1_000 * MS + GATHER_LEAD_NS + COMMIT_NS;
/// A recording rolls on to its next chunk this often (neither a multiple of the
/// commit interval nor of the tick).
const ROLL_NS: u64 = 1_330 * MS;

/// Byte `i` of a recording.
fn byte_at(i: u64) -> u8 {
    ((i.wrapping_mul(2_654_435_761)) >> 13) as u8
}

/// A recording at `rate` bits/s rolling on to `/cK` every [`ROLL_NS`], on a device
/// whose power may go at a chosen write.
struct Rolling {
    e: Engine,
    d: Drive,
    rate: f64,
    sid: u32,
    /// Each chunk's path and the recording offset its first byte has.
    chunks: Vec<(String, u64)>,
    /// (time, bytes handed over by then) after each piece.
    accepted: Vec<(u64, u64)>,
}

impl Rolling {
    fn start(dev: &MemDevice, rate: f64, cut_at_write: Option<(CrashMode, u64)>) -> Rolling {
        let (mut e, mut d) = common::drive::engine_on(dev, Some(Admission::bandwidth(100e6, 0.1)));
        let ino = d.create(&mut e, "c0");
        let spec = StreamSpec {
            idle: false,
            dir: StreamDir::Write,
            rate_bps: rate,
            request_bytes: 512 << 10,
            buffer_bytes: None,
            reserve_bytes: (rate / 8.0 * 30.0) as u64 + (4 << 20),
            start_bytes: 0,
            durable_ns: None,
        };
        let Ok(Output::Stream(info)) = d.run(&mut e, Op::StreamOpen { ino, spec }) else {
            panic!("the recording is admitted")
        };
        d.run(&mut e, Op::Fsync).unwrap();
        if let Some((mode, n)) = cut_at_write {
            d.durable.clear();
            let mut cd = CrashDevice::new(d.dev.clone(), mode, n);
            cd.crash_after_writes(n);
            d.crash = Some(cd);
        }
        Rolling {
            e,
            d,
            rate,
            sid: info.id,
            chunks: vec![("/c0".into(), 0)],
            accepted: vec![(0, 0)],
        }
    }

    /// Records (and rolls) until `until_ns` or the power cut.
    fn feed(&mut self, until_ns: u64) {
        let mut tick = self.d.t / TICK_NS + 1;
        let mut next_roll = ROLL_NS;
        while tick * TICK_NS <= until_ns && self.d.crashed_at.is_none() {
            let total = self.accepted.last().unwrap().1;
            if tick * TICK_NS >= next_roll {
                next_roll += ROLL_NS;
                let name = format!("c{}", self.chunks.len());
                let root = self.e.volume().root();
                let create = Op::Create {
                    parent: root,
                    name: name.as_bytes().to_vec(),
                    perm: 0o644,
                    uid: 0,
                    gid: 0,
                };
                let ino = match self.run(create) {
                    Some(Ok(Output::Ino(i))) => i,
                    None => return,
                    r => panic!("create {name}: {r:?}"),
                };
                match self.run(Op::StreamRoll {
                    stream: self.sid,
                    ino,
                }) {
                    Some(Ok(Output::Done)) => {}
                    None => return,
                    r => panic!("roll to {name}: {r:?}"),
                }
                self.chunks.push((format!("/{name}"), total));
            }
            let due = (self.rate / 8.0 * (tick * TICK_NS) as f64 / 1e9) as u64;
            if due > total {
                let data: Vec<u8> = (total..due).map(byte_at).collect();
                match self.run(Op::StreamWrite {
                    stream: self.sid,
                    data: IoBuf::from_slice(&data),
                }) {
                    Some(r) => {
                        r.unwrap();
                    }
                    None => return,
                }
                self.accepted.push((self.d.t, due));
            }
            tick += 1;
            self.d.run_until(&mut self.e, tick * TICK_NS);
        }
    }

    /// Runs `op`; `None` when the power went meanwhile.
    fn run(&mut self, op: Op) -> Option<Result<Output, Error>> {
        let id = self.e.submit(op, None, 1, self.d.now()).unwrap();
        let c = self.d.wait(&mut self.e, id);
        self.d.crashed_at.is_none().then_some(c.result)
    }

    fn handed_by(&self, t: u64) -> u64 {
        self.accepted
            .iter()
            .take_while(|(at, _)| *at <= t)
            .last()
            .map_or(0, |a| a.1)
    }
}

/// Each chunk of `run` on `media` holds a prefix of the bytes written to it, and
/// every byte handed over a bound before `cut_ns` is in its chunk.
fn check(media: MemDevice, run: &Rolling, cut_ns: u64, what: &str) {
    let mut fs = Fs::open(media, OpenOptions::writable()).expect("the volume opens");
    let needed = run.handed_by(cut_ns.saturating_sub(BOUND_NS));
    let handed = run.handed_by(cut_ns);
    for (k, (path, from)) in run.chunks.iter().enumerate() {
        let to = run.chunks.get(k + 1).map_or(handed, |c| c.1);
        let size = match fs.resolve(path) {
            Ok(ino) => {
                let size = fs.stat(ino).unwrap().size_bytes;
                let mut got = vec![0; size as usize];
                assert_eq!(fs.read(ino, 0, &mut got).unwrap(), size as usize);
                let want: Vec<u8> = (*from..from + size).map(byte_at).collect();
                assert!(got == want, "{what}: {path}'s {size} bytes are not its own");
                size
            }
            Err(_) => 0,
        };
        assert!(
            from + size <= to,
            "{what}: {path} holds {size} bytes from {from}, but only {} were written to it",
            to - from
        );
        let must = needed.clamp(*from, to) - from;
        assert!(
            size >= must,
            "{what}: {path} kept {size} bytes, but {must} were handed over to it a bound before the cut"
        );
    }
    common::assert_fsck_clean(fs.device());
}

/// Cuts the power at every write of a rolling recording (in order and as a random
/// subset) and checks every chunk of each replayed volume.
fn cut_at_every_write(tail_log: TailLogSize, rate: f64, secs: u64) -> usize {
    let dev = common::formatted_with(256 << 20, 1 << 20, AllocPolicy::Zrr, 5, |p| {
        p.tail_log = tail_log
    });
    let mut probe = Rolling::start(&dev, rate, Some((CrashMode::InOrderTorn, u64::MAX)));
    probe.feed(secs * 1_000 * MS);
    let writes = probe.d.crash.as_ref().unwrap().writes;
    assert!(probe.chunks.len() >= 3, "{:?}", probe.chunks);
    for mode in [CrashMode::InOrderTorn, CrashMode::RandomSubsetTorn] {
        for cut in 0..writes {
            let mut run = Rolling::start(&dev, rate, Some((mode, cut)));
            run.feed(secs * 1_000 * MS);
            let at = run.d.crashed_at.expect("the power went");
            let media = run.d.crash.as_ref().unwrap().crash_image().unwrap();
            check(media, &run, at, &format!("cut at write {cut} ({mode:?})"));
        }
    }
    probe.chunks.len()
}

#[test]
fn a_power_cut_at_any_write_keeps_each_chunk_of_a_logging_recording() {
    // 250 kbit/s never fills a 512 KiB request: every byte goes through the tail
    // log's gathers, and each roll writes the old chunk's partial request in place.
    cut_at_every_write(TailLogSize::Auto, 250e3, 5);
}

#[test]
fn a_power_cut_at_any_write_keeps_each_chunk_of_a_fast_recording() {
    // 6 Mbit/s fills a request in 0.7 s: whole requests in place, a roll's partial
    // one too, with the tail log and without it.
    for log in [TailLogSize::Auto, TailLogSize::Off] {
        cut_at_every_write(log, 6e6, 5);
    }
}
