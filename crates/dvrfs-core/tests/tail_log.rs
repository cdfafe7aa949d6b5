//! The tail log (FORMAT.md section 11a): recordings' partial requests are logged in
//! the commit and replayed into their files at recovery, instead of being written in
//! place at every gather point.
//!
//! Recordings run through the engine in virtual time (`common::drive`) on a
//! `CrashDevice` whose power is cut at every write of the run, in order and as a
//! random subset (the media model of `device.rs`): the replayed volume must hold,
//! byte for byte, a prefix of what each recording handed over, at least what it had
//! handed over a durability interval plus the lead and the commit's time before the
//! cut. Then the cases the replay rule exists for: a truncated or deleted file gets
//! nothing back, a block of an earlier lap of the ring and a corrupt record are
//! reported and skipped, a full ring falls back to writing in place, and a volume
//! made without the log keeps the in-place gather.

mod common;

use common::drive::{Drive, MS};
use dvrfs_core::device::{CrashDevice, CrashMode, Device, MemDevice};
use dvrfs_core::disk::Admission;
use dvrfs_core::driver::Fs;
use dvrfs_core::engine::{Engine, IoBuf, Op, Output, StreamDir, StreamSpec, GATHER_LEAD_NS};
use dvrfs_core::format::superblock::{AllocPolicy, Superblock};
use dvrfs_core::format::tail_log::encode_batch;
use dvrfs_core::layout::TailLogSize;
use dvrfs_core::{OpenOptions, Volume};

const TICK_NS: u64 = 40 * MS;
/// The commit's own time on the test drive, with room for what runs beside it.
const COMMIT_NS: u64 = 30 * MS;
/// Durability bound of a recording with the default interval.
const BOUND_NS: u64 = 1_000 * MS + GATHER_LEAD_NS + COMMIT_NS;

fn pattern(seed: u64, from: u64, len: usize) -> Vec<u8> {
    (from..from + len as u64)
        .map(|i| ((i ^ (seed << 40)).wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect()
}

/// A 256 MiB volume of 1 MiB blocks with the given tail log.
fn formatted(tail_log: TailLogSize) -> MemDevice {
    common::formatted_with(256 << 20, 1 << 20, AllocPolicy::Zrr, 5, |p| {
        p.tail_log = tail_log
    })
}

fn engine_on(dev: &MemDevice) -> (Engine, Drive) {
    common::drive::engine_on(dev, Some(Admission::bandwidth(100e6, 0.1)))
}

/// Recordings at these rates (bits/s), each in its own file `/rN`.
struct Run {
    e: Engine,
    d: Drive,
    rates: Vec<f64>,
    inos: Vec<u32>,
    sids: Vec<u32>,
    /// Per recording, (time, bytes handed over by then) after each piece.
    accepted: Vec<Vec<(u64, u64)>>,
}

impl Run {
    fn start(dev: &MemDevice, rates: &[f64], crash: Option<(CrashMode, u64)>) -> Run {
        let (mut e, mut d) = engine_on(dev);
        let mut inos = vec![];
        let mut sids = vec![];
        for (i, &r) in rates.iter().enumerate() {
            let ino = d.create(&mut e, &format!("r{i}"));
            let spec = StreamSpec {
                idle: false,
                dir: StreamDir::Write,
                rate_bps: r,
                request_bytes: 512 << 10,
                buffer_bytes: None,
                reserve_bytes: (r / 8.0 * 30.0) as u64 + (4 << 20),
                start_bytes: 0,
                durable_ns: None,
            };
            let info = match d.run(&mut e, Op::StreamOpen { ino, spec }) {
                Ok(Output::Stream(i)) => i,
                o => panic!("{o:?}"),
            };
            inos.push(ino);
            sids.push(info.id);
        }
        // Cut the power only once the files exist (committed): from the first write
        // after now.
        d.run(&mut e, Op::Fsync).unwrap();
        if let Some((mode, n)) = crash {
            d.durable.clear();
            let mut cd = CrashDevice::new(d.dev.clone(), mode, n);
            cd.crash_after_writes(n);
            d.crash = Some(cd);
        }
        Run {
            e,
            d,
            rates: rates.to_vec(),
            accepted: vec![vec![(0, 0)]; inos.len()],
            inos,
            sids,
        }
    }

    /// Feeds every recording until `until_ns` or the power cut.
    fn feed(&mut self, until_ns: u64) {
        let mut tick = self.d.t / TICK_NS + 1;
        while tick * TICK_NS <= until_ns && self.d.crashed_at.is_none() {
            for i in 0..self.inos.len() {
                let total = self.accepted[i].last().unwrap().1;
                let due = (self.rates[i] / 8.0 * (tick * TICK_NS) as f64 / 1e9) as u64;
                if due <= total {
                    continue;
                }
                let data = pattern(i as u64, total, (due - total) as usize);
                let op = Op::StreamWrite {
                    stream: self.sids[i],
                    data: IoBuf::from_slice(&data),
                };
                let id = self.e.submit(op, None, 1, self.d.now()).unwrap();
                let c = self.d.wait(&mut self.e, id);
                if self.d.crashed_at.is_some() {
                    return;
                }
                c.result.unwrap();
                self.accepted[i].push((self.d.t, due));
            }
            tick += 1;
            self.d.run_until(&mut self.e, tick * TICK_NS);
        }
    }

    fn handed_by(&self, i: usize, t: u64) -> u64 {
        self.accepted[i]
            .iter()
            .take_while(|(at, _)| *at <= t)
            .last()
            .map_or(0, |a| a.1)
    }
}

/// Every file's bytes as `fs` reads them, by path (its size from `stat`).
fn contents(fs: &mut Fs<MemDevice>, paths: &[&str]) -> Vec<Option<Vec<u8>>> {
    paths
        .iter()
        .map(|p| {
            let ino = fs.resolve(p).ok()?;
            let size = fs.stat(ino).unwrap().size_bytes;
            let mut got = vec![0; size as usize];
            assert_eq!(fs.read(ino, 0, &mut got).unwrap(), size as usize, "{p}");
            // Nothing past the size.
            let mut more = vec![0; 4096];
            assert_eq!(fs.read(ino, size, &mut more).unwrap(), 0, "{p}");
            Some(got)
        })
        .collect()
}

/// A read-only open of `media` (`get`, `ls`, `stat`) shows every file as the
/// writable open's replay leaves it: sizes and bytes. Returns the writable open.
fn read_only_agrees(media: MemDevice, paths: &[&str], what: &str) -> Fs<MemDevice> {
    let mut ro = Fs::open(media.clone(), OpenOptions::read_only()).expect("read-only open");
    let seen = contents(&mut ro, paths);
    // A path-only open (`stat`, `ls`) loads only what it resolves.
    let mut few = Fs::open(
        media.clone(),
        OpenOptions::paths_only(&paths.iter().map(|p| p.to_string()).collect::<Vec<_>>()),
    )
    .expect("path-only open");
    assert!(
        seen == contents(&mut few, paths),
        "{what}: a path-only open sees other bytes"
    );
    drop((ro, few));
    let mut fs = Fs::open(media, OpenOptions::writable()).expect("the volume opens");
    let replayed = contents(&mut fs, paths);
    for (p, (a, b)) in paths.iter().zip(seen.iter().zip(&replayed)) {
        assert!(
            a == b,
            "{what}: {p}: a read-only open sees {:?} bytes, the replay leaves {:?}",
            a.as_ref().map(Vec::len),
            b.as_ref().map(Vec::len)
        );
    }
    fs
}

/// Opens what the media hold (writable: the journal and the tail log are
/// replayed; read-only first, which must see the same) and checks every recording
/// against what it handed over by `cut_ns`.
fn check(media: MemDevice, run: &Run, cut_ns: u64, what: &str) -> Fs<MemDevice> {
    let paths: Vec<String> = (0..run.inos.len()).map(|i| format!("/r{i}")).collect();
    let paths: Vec<&str> = paths.iter().map(String::as_str).collect();
    let mut fs = read_only_agrees(media, &paths, what);
    for i in 0..run.inos.len() {
        let ino = fs.resolve(&format!("/r{i}")).expect("the file exists");
        let size = fs.stat(ino).unwrap().size_bytes;
        let mut got = vec![0; size as usize];
        assert_eq!(fs.read(ino, 0, &mut got).unwrap(), size as usize);
        assert!(
            got == pattern(i as u64, 0, size as usize),
            "{what}: /r{i}'s {size} bytes are not what was written"
        );
        let handed = run.handed_by(i, cut_ns);
        assert!(
            size <= handed,
            "{what}: /r{i} has {size} bytes, {handed} handed over"
        );
        let needed = run.handed_by(i, cut_ns.saturating_sub(BOUND_NS));
        assert!(
            size >= needed,
            "{what}: /r{i} kept {size} bytes, but {needed} were handed over a bound before the cut"
        );
    }
    fs
}

#[test]
fn slow_recordings_use_the_log_and_write_only_whole_requests_in_place() {
    // 16 MiB: the slow recordings' first bytes stay live for their whole 16.8 s
    // fill, and the ring holds everything logged after them meanwhile.
    let dev = formatted(TailLogSize::Blocks(4096));
    let mut run = Run::start(&dev, &[250e3, 250e3, 4e6], None);
    run.feed(12_000 * MS);
    let stats: Vec<_> = run
        .sids
        .iter()
        .map(|s| run.e.stream_info(*s).unwrap().1.clone())
        .collect();
    // 250 kbit/s fills a 512 KiB request in 16.8 s: nothing in place in 12 s; every
    // second's bytes in the log instead.
    for s in &stats[..2] {
        assert_eq!(s.requests, 0, "{s:?}");
        assert!(s.tail_logged_bytes >= 250_000 / 8 * 10, "{s:?}");
        assert_eq!(s.tail_log_full, 0);
    }
    // 4 Mbit/s: whole requests only (5.9 MB in 12 s), a partial one logged at most
    // per interval.
    assert!(stats[2].requests <= 12, "{:?}", stats[2]);
    let (tail, head, batches, _) = run.e.tail_log_state().unwrap();
    assert!(head > tail && batches > 0, "{tail} {head} {batches}");
    // A clean close writes every partial request in place: the log ends empty.
    let mut fs = check(
        run.d.dev.clone(),
        &run,
        12_000 * MS,
        "a copy of the live image",
    );
    drop(fs);
    for sid in run.sids.clone() {
        run.d
            .run(&mut run.e, Op::StreamClose { stream: sid })
            .unwrap();
    }
    run.d.run(&mut run.e, Op::Unmount).unwrap();
    let v = Volume::load(&run.d.dev, &OpenOptions::read_only())
        .unwrap()
        .0;
    let (t, h) = v.tail_log_bounds();
    assert_eq!(t, h, "a clean unmount leaves nothing to replay");
    assert!(!v.load_report().crashed());
    fs = Fs::open(run.d.dev.clone(), OpenOptions::writable()).unwrap();
    assert_eq!(fs.load_report().tail_log.replay_records, 0);
}

/// Cuts the power at every write of a `secs` run of `rates` (in order and as a
/// random subset) and checks each replayed volume; returns the reference run, its
/// writes and the records replayed over all cuts.
fn cut_at_every_write(rates: &[f64], secs: u64) -> (Run, u64, u64) {
    let dev = formatted(TailLogSize::Auto);
    // The reference run: how many writes the run makes after the files exist.
    let mut probe = Run::start(&dev, rates, Some((CrashMode::InOrderTorn, u64::MAX)));
    probe.feed(secs * 1_000 * MS);
    let writes = probe.d.crash.as_ref().unwrap().writes;
    let mut replayed = 0;
    for mode in [CrashMode::InOrderTorn, CrashMode::RandomSubsetTorn] {
        for cut in 0..writes {
            let mut run = Run::start(&dev, rates, Some((mode, cut)));
            run.feed(secs * 1_000 * MS);
            let at = run.d.crashed_at.expect("the power went");
            let media = run.d.crash.as_ref().unwrap().crash_image().unwrap();
            let fs = check(media, &run, at, &format!("cut at write {cut} ({mode:?})"));
            let r = &fs.load_report().tail_log;
            assert!(
                r.problems.is_empty(),
                "cut at write {cut}: {:?}",
                r.problems
            );
            replayed += r.replay_records;
            common::assert_fsck_clean(fs.device());
        }
    }
    (probe, writes, replayed)
}

#[test]
fn bytes_logged_from_a_request_in_flight_survive_a_cut_before_and_after_it_lands() {
    // 2 Mbit/s fills a 512 KiB request in 2.1 s, more than its 1 s interval: a full
    // request is due only at its buffer's overflow, and the gather point after it
    // logs its last bytes from the request in flight. Cutting the power at every
    // write cuts while such a request is queued, while it is written, after it
    // landed but before the commit that applies it, and after.
    let (probe, writes, replayed) = cut_at_every_write(&[2e6], 9);
    let st = probe.e.stream_info(probe.sids[0]).unwrap().1.clone();
    assert!(st.requests >= 2, "whole requests were written: {st:?}");
    // Nearly every byte went through the log (a request applied before its gather
    // point needs none): the last bytes of each full request too.
    assert!(
        st.tail_logged_bytes > st.app_bytes * 3 / 4,
        "{st:?} ({writes} writes)"
    );
    assert_eq!(st.durability_late, 0, "{st:?}");
    assert!(replayed > writes / 2, "{replayed} records replayed");
}

#[test]
fn a_power_cut_at_any_write_keeps_every_byte_older_than_the_bound() {
    let rates = [250e3, 1e6, 4e6];
    let (_probe, writes, replayed) = cut_at_every_write(&rates, 6);
    assert!(writes > 30, "{writes} writes");
    // The log, not the in-place writes, kept the slow recordings' bytes.
    assert!(replayed > writes / 2, "{replayed} records replayed");
}

/// Runs `rates` for `secs` seconds and returns the run and the media as a power cut
/// at the end would leave them (the last flush).
fn run_then_cut(tail_log: TailLogSize, rates: &[f64], secs: u64) -> (Run, MemDevice) {
    let dev = formatted(tail_log);
    let mut run = Run::start(&dev, rates, None);
    run.feed(secs * 1_000 * MS);
    let media = run.d.durable_at(run.d.t);
    (run, media)
}

#[test]
fn a_truncated_file_gets_no_logged_bytes_back() {
    // Two recordings: /r0's records keep the batches they share with /r1 live.
    let (mut run, _) = run_then_cut(TailLogSize::Auto, &[250e3, 250e3], 3);
    let ino = run.inos[1];
    // Bytes of /r1 are live in the log; cut the file to 1000 bytes, commit.
    assert!(run.e.tail_log_state().unwrap().2 > 0);
    run.d
        .run(
            &mut run.e,
            Op::Truncate {
                ino,
                size_bytes: 1000,
            },
        )
        .unwrap();
    run.d.run(&mut run.e, Op::Fsync).unwrap();
    let media = run.d.durable_at(run.d.t);
    let ro = Fs::open(media.clone(), OpenOptions::read_only()).unwrap();
    let r1 = ro.resolve("/r1").unwrap();
    assert_eq!(
        ro.stat(r1).unwrap().size_bytes,
        1000,
        "read-only: nothing extra"
    );
    assert!(ro.logged_tail(r1).is_none());
    assert!(ro.logged_tail(ro.resolve("/r0").unwrap()).is_some());
    drop(ro);
    let fs = read_only_agrees(media, &["/r0", "/r1"], "after a truncation");
    let ino = fs.resolve("/r1").unwrap();
    assert_eq!(fs.stat(ino).unwrap().size_bytes, 1000, "no byte came back");
    let r = &fs.load_report().tail_log;
    assert!(r.settled_records > 0, "{r:?}");
    // /r0's records were replayed from the same batches.
    assert!(r.replay_records > 0 && r.replay_files == 1, "{r:?}");
    assert!(fs.stat(fs.resolve("/r0").unwrap()).unwrap().size_bytes > 50_000);
}

#[test]
fn a_deleted_file_gets_no_logged_bytes_back() {
    let (mut run, _) = run_then_cut(TailLogSize::Auto, &[250e3, 250e3], 3);
    let root = run.e.volume().root();
    run.d
        .run(
            &mut run.e,
            Op::StreamClose {
                stream: run.sids[0],
            },
        )
        .unwrap();
    run.d
        .run(
            &mut run.e,
            Op::Unlink {
                parent: root,
                name: b"r0".to_vec(),
            },
        )
        .unwrap();
    // A new file may take the number: it is another generation.
    let again = run.d.create(&mut run.e, "new");
    run.d.run(&mut run.e, Op::Fsync).unwrap();
    let media = run.d.durable_at(run.d.t);
    let ro = Fs::open(media.clone(), OpenOptions::read_only()).unwrap();
    assert!(ro.resolve("/r0").is_err());
    assert_eq!(
        ro.stat(again).unwrap().size_bytes,
        0,
        "read-only: nothing extra"
    );
    assert!(ro.logged_tail(again).is_none());
    drop(ro);
    let fs = read_only_agrees(media, &["/r0", "/new", "/r1"], "after a delete");
    assert!(fs.resolve("/r0").is_err());
    assert_eq!(fs.stat(again).unwrap().size_bytes, 0);
    let r1 = fs.resolve("/r1").unwrap();
    assert!(
        fs.stat(r1).unwrap().size_bytes > 0,
        "the other recording replayed"
    );
}

/// The batch at the live tail of `media`: its position and ring block offset.
fn tail_batch(media: &MemDevice) -> (Superblock, u64) {
    let v = Volume::load(media, &OpenOptions::read_only()).unwrap().0;
    let sb = v.superblock().clone();
    let (tail, head) = v.tail_log_bounds();
    assert!(head > tail, "nothing live in the log");
    (sb, tail)
}

#[test]
fn a_block_of_an_earlier_lap_is_not_replayed() {
    // A 258-block ring (1 MiB) and 4 Mbit/s: the ring wraps every few seconds.
    let (run, media) = run_then_cut(TailLogSize::Blocks(258), &[4e6], 9);
    let (sb, tail) = tail_batch(&media);
    assert!(
        tail > 2 * sb.tail_log_blocks,
        "the ring wrapped twice ({tail})"
    );
    // The live batch's header never landed: its ring block holds a batch of the
    // previous lap, which names an entry of the recording with other bytes.
    let mut media = media;
    let junk = vec![0xEE; 8192];
    let size = Volume::load(&media, &OpenOptions::read_only())
        .unwrap()
        .0
        .stat(run.inos[0])
        .unwrap()
        .size_bytes;
    let stale = encode_batch(
        &sb.uuid,
        1,
        tail - sb.tail_log_blocks,
        &[(run.inos[0], 0, size, &junk)],
    );
    media.poke(sb.tail_log_offset(tail), &stale[..4096]);
    let fs = Fs::open(media, OpenOptions::writable()).unwrap();
    let r = &fs.load_report().tail_log;
    assert!(
        r.problems.iter().any(|p| p.contains("misplaced")),
        "{:?}",
        r.problems
    );
    let mut fs = fs;
    let got = contents(&mut fs, &["/r0"]).remove(0).expect("/r0 exists");
    assert!(
        got == pattern(0, 0, got.len()),
        "only the recording's own bytes"
    );
}

fn byte_at(dev: &MemDevice, off: u64) -> u8 {
    let mut b = vec![0u8; 4096];
    dev.read_at(off / 4096 * 4096, &mut b).unwrap();
    b[(off % 4096) as usize]
}

#[test]
fn a_corrupt_record_is_reported_and_skipped() {
    let (_run, media) = run_then_cut(TailLogSize::Auto, &[250e3], 5);
    let (sb, tail) = tail_batch(&media);
    // Flip a byte of the first entry's bytes (right after the batch's one header).
    let mut bad = media.clone();
    let off = sb.tail_log_offset(tail + 1) + 100;
    bad.poke(off, &[byte_at(&media, off) ^ 0x40]);
    let mut fs = Fs::open(bad, OpenOptions::writable()).unwrap();
    let r = fs.load_report().tail_log.clone();
    assert!(
        r.problems.iter().any(|p| p.contains("checksum")),
        "{:?}",
        r.problems
    );
    let got = contents(&mut fs, &["/r0"]).remove(0).expect("/r0 exists");
    assert!(
        got == pattern(0, 0, got.len()),
        "nothing past the bad record was replayed"
    );
    // A damaged header: reported, the open goes on.
    let mut bad = media.clone();
    let off = sb.tail_log_offset(tail) + 60;
    bad.poke(off, &[byte_at(&media, off) ^ 1]);
    let fs = Fs::open(bad, OpenOptions::writable()).unwrap();
    assert!(
        fs.load_report()
            .tail_log
            .problems
            .iter()
            .any(|p| p.contains("no batch header")),
        "{:?}",
        fs.load_report().tail_log
    );
}

#[test]
fn a_full_ring_falls_back_to_writing_in_place_and_keeps_the_bound() {
    // Ten slow recordings hold their bytes live for 16.8 s each: far more than a
    // 258-block ring holds.
    let rates = [250e3; 10];
    let (run, _) = run_then_cut(TailLogSize::Blocks(258), &rates, 8);
    let full: u64 = run
        .sids
        .iter()
        .map(|s| run.e.stream_info(*s).unwrap().1.tail_log_full)
        .sum();
    assert!(full > 0, "the ring filled");
    for cut in (2_000..=8_000).step_by(500) {
        let media = run.d.durable_at(cut * MS);
        let fs = check(media, &run, cut * MS, &format!("cut at {cut} ms"));
        assert!(fs.load_report().tail_log.problems.is_empty());
    }
}

#[test]
fn a_volume_without_the_log_keeps_the_in_place_gather() {
    let (run, media) = run_then_cut(TailLogSize::Off, &[250e3], 6);
    let st = run.e.stream_info(run.sids[0]).unwrap().1.clone();
    assert!(!run.e.volume().superblock().has_tail_log());
    assert!(run.e.tail_log_state().is_none());
    // One short request per interval, in place; nothing logged.
    assert!(st.requests >= 4, "{st:?}");
    assert_eq!(st.tail_logged_bytes, 0);
    let fs = check(media, &run, run.d.t, "without the log");
    assert_eq!(fs.load_report().tail_log, Default::default());
}

#[test]
fn a_read_only_open_reports_what_waits_and_writes_nothing() {
    let (run, media) = run_then_cut(TailLogSize::Auto, &[250e3], 4);
    let v = Volume::load(&media, &OpenOptions::read_only()).unwrap().0;
    let r = &v.load_report().tail_log;
    assert!(r.replay_records > 0 && r.replay_bytes > 0, "{r:?}");
    assert!(!r.replayed);
    // It serves the bytes the replay would write past the committed size.
    let logged = v.logged_tail(run.inos[0]).expect("bytes to serve");
    let committed = logged.from_bytes;
    assert_eq!(logged.bytes.len() as u64, r.replay_bytes);
    assert_eq!(
        v.stat(run.inos[0]).unwrap().size_bytes,
        committed + r.replay_bytes
    );
    // The lost-tail line counts the logged bytes as surviving.
    let (report, _) = dvrfs_core::tools::fsck::fsck(media.clone(), false, &mut |_, _| {}).unwrap();
    assert_eq!(report.tail_log.replay_records, r.replay_records);
    for t in &report.lost_tails {
        assert!(t.size_bytes >= committed + r.replay_bytes, "{t:?}");
    }
    // The media are untouched: a writable open still finds it all.
    let fs = Fs::open(media, OpenOptions::writable()).unwrap();
    assert_eq!(fs.load_report().tail_log.replay_records, r.replay_records);
    assert_eq!(
        fs.stat(run.inos[0]).unwrap().size_bytes,
        committed + r.replay_bytes
    );
}
