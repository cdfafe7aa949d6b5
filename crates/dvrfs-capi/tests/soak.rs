//! A soak of the C API (issue 22): 8 threads share one handle and run random
//! sequences of create, open, close, unlink, stream open, write, read and close,
//! fsync, and batches of asynchronous reads and writes waited for with
//! `dvrfs_aio_poll`. Each thread owns four names (so its creates and unlinks collide)
//! and keeps a model of its files' bytes, removed-but-open files included; inode
//! numbers are the volume's, so a number or stream that outlived its file would
//! write into another thread's file and fail that thread's check. At the end every
//! file is read back against the model, before and after the volume is closed and
//! opened again, and `fsck` must find the image clean.
//!
//! Each thread's sequence is fixed by the seed (`DVRFS_SOAK_SEED`, thread `t` uses
//! `seed * 1000 + t`); how the threads interleave is the machine's. It runs
//! `DVRFS_SOAK_SECS` seconds (12 by default; `docs/c-api.md` gives the longer form),
//! in a child process so a crash fails the test.

mod common;

use ::dvrfs::{
    dvrfs as Dvrfs, dvrfs_aio_check, dvrfs_aio_poll, dvrfs_aio_start, dvrfs_aiocb, dvrfs_close,
    dvrfs_file_close, dvrfs_file_open, dvrfs_file_size, dvrfs_fsync, dvrfs_stream_close,
    dvrfs_stream_open, dvrfs_stream_read, dvrfs_stream_write, dvrfs_unlink, DVRFS_O_CREAT,
    DVRFS_STREAM_READ, DVRFS_STREAM_WRITE,
};
use common::{assert_fsck_clean, c, cb, image, in_child, last_error, open, read_at, spec, Aligned};
use rand_chacha::rand_core::{RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::{BTreeMap, VecDeque};
use std::ptr::null_mut;
use std::time::{Duration, Instant};

const THREADS: usize = 8;
/// Names per thread: few, so creates and unlinks collide.
const NAMES: u64 = 4;
/// A file grows to at most this (the model is kept in memory).
const MAX_FILE_BYTES: usize = 2 << 20;
/// A file left with a name at the end, and the bytes its model says it holds.
type Named = (String, Vec<u8>);
/// File numbers a thread holds at most.
const MAX_FDS_PER_THREAD: usize = 6;

/// A file a thread knows: its name (none once removed), its bytes, the file numbers
/// and the stream it holds.
struct Obj {
    name: Option<String>,
    data: Vec<u8>,
    fds: Vec<i32>,
    stream: Option<Stream>,
}

struct Stream {
    sid: i32,
    write: bool,
    /// Playback: the next byte it gives.
    pos: usize,
}

impl Obj {
    fn held(&self) -> bool {
        self.name.is_some() || !self.fds.is_empty() || self.stream.is_some()
    }
}

struct Worker {
    fs: *mut Dvrfs,
    t: usize,
    seed: u64,
    rng: ChaCha8Rng,
    objs: Vec<Obj>,
    /// The last operations, for a failure's message.
    trail: VecDeque<String>,
    ops: BTreeMap<&'static str, u64>,
}

impl Worker {
    fn below(&mut self, n: u64) -> u64 {
        self.rng.next_u64() % n
    }

    fn note(&mut self, what: String) {
        if self.trail.len() == 16 {
            self.trail.pop_front();
        }
        self.trail.push_back(what);
    }

    /// Where a failure happened: the thread, its seed and its last operations.
    fn at(&self) -> String {
        format!(
            "thread {} (seed {}), last operations: {:?}; {}",
            self.t,
            self.seed,
            self.trail,
            last_error()
        )
    }

    fn pick(&mut self, ok: impl Fn(&Obj) -> bool) -> Option<usize> {
        let list: Vec<usize> = (0..self.objs.len())
            .filter(|&i| ok(&self.objs[i]))
            .collect();
        (!list.is_empty()).then(|| list[self.below(list.len() as u64) as usize])
    }

    fn bytes(&mut self, len: usize) -> Vec<u8> {
        let mut v = vec![0u8; len];
        self.rng.fill_bytes(&mut v);
        v
    }

    /// Checks the file behind `fd` holds exactly `o`'s bytes.
    fn verify(&self, i: usize, fd: i32) {
        let o = &self.objs[i];
        // SAFETY: the shared handle; any number is checked.
        let size = unsafe { dvrfs_file_size(self.fs, fd) };
        assert_eq!(
            size,
            o.data.len() as i64,
            "size of {:?}: {}",
            o.name,
            self.at()
        );
        let got = read_at(self.fs, fd, 0, o.data.len() + 4096);
        assert!(got == o.data, "bytes of {:?} differ: {}", o.name, self.at());
    }

    fn step(&mut self) {
        // Files stay few (a volume of 4 MiB blocks holds a few hundred): at the
        // limit, a create or open closes instead.
        let held: usize = self.objs.iter().map(|o| o.fds.len()).sum();
        match self.below(100) {
            0..=17 if held >= MAX_FDS_PER_THREAD => self.close(),
            0..=9 => self.create(),
            10..=17 => self.open(),
            18..=27 => self.close(),
            28..=35 => self.unlink(),
            36..=50 => self.aio(true),
            51..=60 => self.aio(false),
            61..=65 => self.stream_open(true),
            66..=68 => self.stream_open(false),
            69..=84 => self.stream_io(),
            85..=95 => self.stream_close(),
            _ => self.fsync(),
        }
    }

    fn count(&mut self, what: &'static str) {
        *self.ops.entry(what).or_default() += 1;
    }

    fn create(&mut self) {
        let k = self.below(NAMES);
        let name = format!("/t{}-{k}", self.t);
        self.note(format!("create {name}"));
        let p = c(&name);
        // SAFETY: the shared handle, a NUL-terminated path.
        let fd = unsafe { dvrfs_file_open(self.fs, p.as_ptr(), DVRFS_O_CREAT, 0o644) };
        if self.objs.iter().any(|o| o.name.as_deref() == Some(&name)) {
            assert_eq!(fd, -libc::EEXIST, "create over {name}: {}", self.at());
            return;
        }
        assert!(fd >= 0, "create {name}: {fd} {}", self.at());
        self.objs.push(Obj {
            name: Some(name),
            data: vec![],
            fds: vec![fd],
            stream: None,
        });
        self.count("create");
    }

    fn open(&mut self) {
        let Some(i) = self.pick(|o| o.name.is_some() && o.fds.len() < 4) else {
            return;
        };
        let name = self.objs[i].name.clone().expect("picked a named one");
        self.note(format!("open {name}"));
        let p = c(&name);
        // SAFETY: as in `create`.
        let fd = unsafe { dvrfs_file_open(self.fs, p.as_ptr(), 0, 0) };
        assert!(fd >= 0, "open {name}: {fd} {}", self.at());
        self.objs[i].fds.push(fd);
        self.count("open");
    }

    fn close(&mut self) {
        let Some(i) = self.pick(|o| !o.fds.is_empty()) else {
            return;
        };
        let at = self.below(self.objs[i].fds.len() as u64) as usize;
        let fd = self.objs[i].fds[at];
        self.note(format!("close {fd} of {:?}", self.objs[i].name));
        let writing = self.objs[i].stream.as_ref().is_some_and(|s| s.write);
        if !writing {
            self.verify(i, fd);
        }
        // SAFETY: the shared handle; the number is this thread's.
        let r = unsafe { dvrfs_file_close(self.fs, fd) };
        assert_eq!(r, 0, "close {fd}: {}", self.at());
        self.objs[i].fds.remove(at);
        if !self.objs[i].held() {
            self.objs.remove(i);
        }
        self.count("close");
    }

    fn unlink(&mut self) {
        let Some(i) = self.pick(|o| o.name.is_some()) else {
            return;
        };
        let name = self.objs[i].name.clone().expect("picked a named one");
        self.note(format!("unlink {name}"));
        let p = c(&name);
        // SAFETY: as in `create`.
        let r = unsafe { dvrfs_unlink(self.fs, p.as_ptr()) };
        assert_eq!(r, 0, "unlink {name}: {}", self.at());
        self.objs[i].name = None;
        if !self.objs[i].held() {
            self.objs.remove(i);
        }
        self.count("unlink");
    }

    /// A batch of 1 to 3 asynchronous requests on one file, at ranges that do not
    /// overlap, waited for with `dvrfs_aio_poll`.
    fn aio(&mut self, write: bool) {
        let Some(i) = self.pick(|o| !o.fds.is_empty() && o.stream.is_none()) else {
            return;
        };
        let at = self.below(self.objs[i].fds.len() as u64) as usize;
        let fd = self.objs[i].fds[at];
        let size = self.objs[i].data.len();
        let n = 1 + self.below(3) as usize;
        let mut at = self.below(size as u64 + 1) as usize;
        let mut reqs: Vec<(usize, Aligned)> = vec![];
        for _ in 0..n {
            let len = 1 + self.below(64 << 10) as usize;
            if write && at + len > MAX_FILE_BYTES {
                break;
            }
            let buf = if write {
                Aligned::from(&self.bytes(len))
            } else {
                Aligned::zeroed(len)
            };
            reqs.push((at, buf));
            at += len + self.below(8192) as usize;
        }
        if reqs.is_empty() {
            return;
        }
        self.note(format!(
            "aio {} {fd} of {:?}: {:?}",
            if write { "write" } else { "read" },
            self.objs[i].name,
            reqs.iter().map(|(o, b)| (*o, b.len())).collect::<Vec<_>>()
        ));
        let mut cbs: Vec<dvrfs_aiocb> = reqs
            .iter_mut()
            .map(|(o, b)| cb(fd, write, *o as u64, b))
            .collect();
        for b in cbs.iter_mut() {
            // SAFETY: `b` and its buffer live until reported done below.
            let r = unsafe { dvrfs_aio_start(self.fs, b) };
            assert_eq!(r, 0, "aio start: {}", self.at());
        }
        let mut done = vec![false; cbs.len()];
        while done.iter().any(|d| !d) {
            let list: Vec<*const dvrfs_aiocb> = (0..cbs.len())
                .filter(|&k| !done[k])
                .map(|k| &cbs[k] as *const dvrfs_aiocb)
                .collect();
            // SAFETY: every listed block is running.
            let r = unsafe { dvrfs_aio_poll(self.fs, list.as_ptr(), list.len() as i32, -1) };
            assert!(r >= 1, "aio poll: {r} {}", self.at());
            for k in 0..cbs.len() {
                if !done[k] {
                    // SAFETY: running until this reports 1.
                    let r = unsafe { dvrfs_aio_check(self.fs, &mut cbs[k], 0) };
                    assert!(r == 0 || r == 1, "aio check: {r} {}", self.at());
                    done[k] = r == 1;
                }
            }
        }
        for (k, (off, buf)) in reqs.iter().enumerate() {
            let res = cbs[k].aio_result;
            let data = &mut self.objs[i].data;
            if write {
                assert_eq!(res, buf.len() as i64, "aio write: {}", self.at());
                let end = off + buf.len();
                if data.len() < end {
                    data.resize(end, 0);
                }
                data[*off..end].copy_from_slice(buf.as_ref());
            } else {
                let want = &data[(*off).min(data.len())..(off + buf.len()).min(data.len())];
                assert_eq!(res, want.len() as i64, "aio read size: {}", self.at());
                let ok = &buf.as_ref()[..want.len()] == want;
                assert!(ok, "aio read at {off}: bytes differ: {}", self.at());
            }
        }
        self.count(if write { "aio write" } else { "aio read" });
    }

    fn stream_open(&mut self, write: bool) {
        // One stream per thread at a time: 8 of them fit the admission.
        if self.objs.iter().any(|o| o.stream.is_some()) {
            return;
        }
        let Some(i) = self.pick(|o| !o.fds.is_empty() && (write || !o.data.is_empty())) else {
            return;
        };
        let at = self.below(self.objs[i].fds.len() as u64) as usize;
        let fd = self.objs[i].fds[at];
        self.note(format!(
            "stream open {} on {fd} of {:?}",
            if write { "write" } else { "read" },
            self.objs[i].name
        ));
        let dir = if write {
            DVRFS_STREAM_WRITE
        } else {
            DVRFS_STREAM_READ
        };
        // SAFETY: a valid spec, NULL info.
        let sid = unsafe { dvrfs_stream_open(self.fs, fd, &spec(dir), null_mut()) };
        assert!(sid >= 0, "stream open: {sid} {}", self.at());
        if write {
            // A second recording on the file: busy.
            // SAFETY: as above.
            let again = unsafe { dvrfs_stream_open(self.fs, fd, &spec(dir), null_mut()) };
            assert_eq!(again, -libc::EBUSY, "second recording: {}", self.at());
        }
        self.objs[i].stream = Some(Stream { sid, write, pos: 0 });
        self.count("stream open");
    }

    fn stream_io(&mut self) {
        let Some(i) = self.pick(|o| o.stream.is_some()) else {
            return;
        };
        let (sid, write, pos) = {
            let s = self.objs[i].stream.as_ref().expect("picked one");
            (s.sid, s.write, s.pos)
        };
        if write {
            let len = 1 + self.below(128 << 10) as usize;
            if self.objs[i].data.len() + len > MAX_FILE_BYTES {
                return;
            }
            let bytes = self.bytes(len);
            self.note(format!("stream write {sid}: {len}"));
            // SAFETY: `bytes` holds `len` bytes.
            let r = unsafe { dvrfs_stream_write(self.fs, sid, bytes.as_ptr().cast(), len) };
            assert_eq!(r, len as i64, "stream write: {}", self.at());
            self.objs[i].data.extend_from_slice(&bytes);
            self.count("stream write");
        } else {
            let mut buf = vec![0u8; 64 << 10];
            self.note(format!("stream read {sid} at {pos}"));
            // SAFETY: `buf` holds its length.
            let n = unsafe { dvrfs_stream_read(self.fs, sid, buf.as_mut_ptr().cast(), buf.len()) };
            assert!(n >= 0, "stream read: {n} {}", self.at());
            let data = &self.objs[i].data;
            let want = &data[pos.min(data.len())..(pos + n as usize).min(data.len())];
            assert_eq!(n as usize, want.len(), "stream read size: {}", self.at());
            assert!(
                &buf[..want.len()] == want,
                "stream read at {pos}: {}",
                self.at()
            );
            if n > 0 {
                self.objs[i].stream.as_mut().expect("open").pos += n as usize;
            }
            self.count("stream read");
        }
    }

    fn stream_close(&mut self) {
        let Some(i) = self.pick(|o| o.stream.is_some()) else {
            return;
        };
        let sid = self.objs[i].stream.as_ref().expect("picked one").sid;
        self.note(format!("stream close {sid} of {:?}", self.objs[i].name));
        // SAFETY: NULL stats.
        let r = unsafe { dvrfs_stream_close(self.fs, sid, null_mut()) };
        assert_eq!(r, 0, "stream close: {}", self.at());
        self.objs[i].stream = None;
        if !self.objs[i].held() {
            self.objs.remove(i);
        }
        self.count("stream close");
    }

    fn fsync(&mut self) {
        self.note("fsync".into());
        // SAFETY: the shared handle.
        let r = unsafe { dvrfs_fsync(self.fs) };
        assert_eq!(r, 0, "fsync: {}", self.at());
        self.count("fsync");
    }

    /// Closes everything, checking each file as its last number goes: the named
    /// files and their models.
    fn finish(mut self) -> (Vec<Named>, BTreeMap<&'static str, u64>) {
        while let Some(i) = self.pick(|o| o.stream.is_some()) {
            let sid = self.objs[i].stream.take().expect("picked one").sid;
            // SAFETY: NULL stats.
            let r = unsafe { dvrfs_stream_close(self.fs, sid, null_mut()) };
            assert_eq!(r, 0, "stream close: {}", self.at());
        }
        for i in 0..self.objs.len() {
            for fd in std::mem::take(&mut self.objs[i].fds) {
                self.verify(i, fd);
                // SAFETY: this thread's number.
                let r = unsafe { dvrfs_file_close(self.fs, fd) };
                assert_eq!(r, 0, "close {fd}: {}", self.at());
            }
        }
        let named = self
            .objs
            .drain(..)
            .filter_map(|o| o.name.map(|n| (n, o.data)))
            .collect();
        (named, self.ops)
    }
}

/// Reads every named file back and compares it with its model.
fn check_all(fs: *mut Dvrfs, files: &[Named], when: &str) {
    for (name, data) in files {
        let p = c(name);
        // SAFETY: the handle, a NUL-terminated path.
        let fd = unsafe { dvrfs_file_open(fs, p.as_ptr(), 0, 0) };
        assert!(fd >= 0, "{when}: open {name}: {}", last_error());
        let got = read_at(fs, fd, 0, data.len() + 4096);
        assert!(got == *data, "{when}: {name} differs from its model");
        // SAFETY: the number just opened.
        assert_eq!(unsafe { dvrfs_file_close(fs, fd) }, 0);
    }
}

fn env_u64(name: &str, default: u64) -> u64 {
    match std::env::var(name) {
        Ok(v) => v
            .parse()
            .unwrap_or_else(|_| panic!("{name}={v:?} is not a whole number")),
        Err(_) => default,
    }
}

#[test]
fn eight_threads_of_random_c_api_calls_keep_every_file_byte_exact() {
    in_child(
        "eight_threads_of_random_c_api_calls_keep_every_file_byte_exact",
        || {
            let seed = env_u64("DVRFS_SOAK_SEED", 22);
            let secs = env_u64("DVRFS_SOAK_SECS", 12);
            let dir = tempfile::tempdir().unwrap();
            let img = dir.path().join("soak.img");
            image(&img, 1 << 30, seed as u8);
            let fs = open(&img);
            let until = Instant::now() + Duration::from_secs(secs);
            // The handle crosses threads as the number it is (it is shared by design).
            let token = fs as usize;
            let threads: Vec<_> = (0..THREADS)
                .map(|t| {
                    std::thread::spawn(move || {
                        let s = seed * 1000 + t as u64;
                        let mut w = Worker {
                            fs: token as *mut Dvrfs,
                            t,
                            seed,
                            rng: ChaCha8Rng::seed_from_u64(s),
                            objs: vec![],
                            trail: VecDeque::new(),
                            ops: BTreeMap::new(),
                        };
                        while Instant::now() < until {
                            w.step();
                        }
                        w.finish()
                    })
                })
                .collect();
            let mut files = vec![];
            let mut ops: BTreeMap<&str, u64> = BTreeMap::new();
            for (t, h) in threads.into_iter().enumerate() {
                let (named, counts) = h
                    .join()
                    .unwrap_or_else(|_| panic!("thread {t} of seed {seed} failed (above)"));
                files.extend(named);
                for (k, v) in counts {
                    *ops.entry(k).or_default() += v;
                }
            }
            println!("seed {seed}, {secs} s: {ops:?}");
            // Every kind of operation ran, with more than a handful each.
            for k in [
                "create",
                "open",
                "close",
                "unlink",
                "aio write",
                "aio read",
                "stream open",
                "stream write",
                "stream read",
                "stream close",
            ] {
                assert!(ops.get(k).copied().unwrap_or(0) >= 5, "{k}: {ops:?}");
            }
            check_all(fs, &files, "before close");
            // SAFETY: the handle, closed once.
            assert_eq!(unsafe { dvrfs_close(fs) }, 0, "{}", last_error());
            let fs = open(&img);
            check_all(fs, &files, "after reopening");
            // SAFETY: as above.
            assert_eq!(unsafe { dvrfs_close(fs) }, 0, "{}", last_error());
            assert_fsck_clean(&img);
        },
    );
}
