//! A tiny driver for the engine in virtual time, shared by the engine-level tests:
//! device commands served one at a time on a `MemDevice`, each taking 2 ms plus its
//! transfer at 100 MB/s. Every flush keeps a copy of the image (copy on write, so
//! cheap): what a power cut right after it would leave on the media, since writes
//! after a flush may all be lost (the media model of `device.rs`).

use dvrfs_core::device::{CrashDevice, Device, MemDevice};
use dvrfs_core::disk::Admission;
use dvrfs_core::engine::{
    Completion, DevCommand, DevKind, Engine, EngineConfig, Now, Op, OpId, Output, StreamDir,
    StreamInfo, StreamSpec,
};
use dvrfs_core::format::superblock::AllocPolicy;
use dvrfs_core::{Error, OpenOptions, Volume};

pub const MS: u64 = 1_000_000;

/// A freshly formatted 256 MiB volume of 1 MiB blocks (ZRR, `seed`), its engine
/// (the default policy, admission as given) at time 0, and the drive.
pub fn setup(admission: Option<Admission>, seed: u64) -> (Engine, Drive) {
    engine_on(
        &super::formatted(256 << 20, 1 << 20, AllocPolicy::Zrr, seed),
        admission,
    )
}

/// An engine on (a copy of) `dev` at time 0 with the default policy, and the drive.
pub fn engine_on(dev: &MemDevice, admission: Option<Admission>) -> (Engine, Drive) {
    let (vol, replay) = Volume::load(dev, &OpenOptions::writable()).unwrap();
    let cfg = EngineConfig {
        admission,
        ..EngineConfig::new(512)
    };
    let e = Engine::new(vol, replay, cfg, Now::mono(0)).unwrap();
    (e, Drive::new(dev.clone()))
}

pub struct Drive {
    pub dev: MemDevice,
    pub t: u64,
    busy: Option<(DevCommand, u64)>,
    /// Completions of operations nobody waited for yet.
    pub others: Vec<Completion>,
    /// The image after every completed flush, with the time it completed.
    pub durable: Vec<(u64, MemDevice)>,
    /// Writes starting in this byte range fail (an I/O error), when set.
    pub fail_writes_in: Option<std::ops::Range<u64>>,
    /// Read commands the engine issued (and their bytes).
    pub reads: (u64, u64),
    /// When set, commands go to this device instead (a power cut at a chosen
    /// write), and `crashed_at` is when its power went.
    pub crash: Option<CrashDevice>,
    pub crashed_at: Option<u64>,
}

impl Drive {
    pub fn new(dev: MemDevice) -> Drive {
        Drive {
            durable: vec![(0, dev.clone())],
            dev,
            t: 0,
            busy: None,
            others: vec![],
            fail_writes_in: None,
            reads: (0, 0),
            crash: None,
            crashed_at: None,
        }
    }

    fn service_ns(c: &DevCommand) -> u64 {
        2 * MS + c.len_bytes * 10 // 100 MB/s
    }

    pub fn now(&self) -> Now {
        Now::mono(self.t)
    }

    /// One step of the loop: start a command if the device is free, collect
    /// completions, move time to the next event (not past `limit`), finish the
    /// command due by then. Returns false when nothing is scheduled at all.
    fn step(&mut self, e: &mut Engine, limit: Option<u64>) -> bool {
        if self.busy.is_none() {
            if let Some(c) = e.poll(self.now()) {
                let done = self.t + Self::service_ns(&c);
                self.busy = Some((c, done));
            }
        }
        // A poll can finish operations too (a stream's credit timer). Whoever waits
        // for one sees it before time moves on.
        let before = self.others.len();
        while let Some(c) = e.take_completion() {
            self.others.push(c);
        }
        if self.others.len() > before {
            return true;
        }
        let next = [self.busy.as_ref().map(|b| b.1), e.next_wakeup(), limit]
            .into_iter()
            .flatten()
            .min();
        let Some(next) = next else {
            return false;
        };
        self.t = self.t.max(next);
        if let Some((c, done)) = self.busy.take_if(|(_, done)| *done <= self.t) {
            let dev: &mut dyn Device = match self.crash.as_mut() {
                Some(c) => c,
                None => &mut self.dev,
            };
            let r = match c.kind {
                DevKind::Flush => dev.flush(),
                DevKind::Write => match &self.fail_writes_in {
                    Some(r) if r.contains(&c.offset_bytes) => {
                        Err(std::io::Error::other("injected write error"))
                    }
                    _ => e.io_write(c.id, |o, b| dev.write_at(o, b)),
                },
                DevKind::Read => {
                    self.reads.0 += 1;
                    self.reads.1 += c.len_bytes;
                    e.io_read(c.id, |o, b| dev.read_at(o, b))
                }
            };
            if self.crash.as_ref().is_some_and(|cd| cd.crashed()) {
                self.crashed_at.get_or_insert(self.t);
            }
            if c.kind == DevKind::Flush && self.crash.is_none() {
                self.durable.push((done, self.dev.clone()));
            }
            e.complete(c.id, r, Now::mono(done));
        } else if e.next_wakeup().is_some_and(|w| w <= self.t) && limit.is_none_or(|l| self.t < l) {
            // A timer due now that the poll at the top did not act on: move time.
            self.t += 1000;
        }
        true
    }

    fn take(&mut self, id: OpId) -> Option<Completion> {
        let i = self.others.iter().position(|c| c.op == id)?;
        Some(self.others.remove(i))
    }

    /// Runs the engine and the device until operation `id` completes.
    pub fn wait(&mut self, e: &mut Engine, id: OpId) -> Completion {
        for _ in 0..10_000_000 {
            if let Some(c) = self.take(id) {
                return c;
            }
            if !self.step(e, None) {
                if let Some(c) = self.take(id) {
                    return c;
                }
                panic!(
                    "operation {id} pending at {} ns but nothing scheduled: {} ops, idle {}, sched work {}, uncommitted {}",
                    self.t,
                    e.ops_in_flight(),
                    e.is_idle(),
                    e.scheduler().has_work(),
                    e.has_uncommitted(),
                );
            }
        }
        panic!("operation {id} never completed");
    }

    /// Runs the engine and the device until virtual time `t_ns`.
    pub fn run_until(&mut self, e: &mut Engine, t_ns: u64) {
        while self.t < t_ns {
            self.step(e, Some(t_ns));
        }
    }

    /// Runs `op` to its end: its result, or the refusal of its submission.
    pub fn run(&mut self, e: &mut Engine, op: Op) -> Result<Output, Error> {
        let id = e.submit(op, None, 1, self.now())?;
        self.wait(e, id).result
    }

    /// The whole of file `ino` (up to 16 MiB), read through the engine.
    pub fn read_file(&mut self, e: &mut Engine, ino: u32) -> Vec<u8> {
        let op = Op::Read {
            ino,
            offset: 0,
            buf: dvrfs_core::engine::IoBuf::zeroed(16 << 20),
        };
        let r = self.run(e, op).unwrap();
        let Output::Read { buf, bytes } = r else {
            panic!("{r:?}")
        };
        buf.bytes().unwrap()[..bytes].to_vec()
    }

    /// Creates `/name`: its inode.
    pub fn create(&mut self, e: &mut Engine, name: &str) -> u32 {
        let root = e.volume().root();
        self.create_in(e, root, name)
    }

    /// Makes directory `name` in directory `parent`: its inode.
    pub fn mkdir_in(&mut self, e: &mut Engine, parent: u32, name: &str) -> u32 {
        let op = Op::Mkdir {
            parent,
            name: name.as_bytes().to_vec(),
            perm: 0o755,
            uid: 0,
            gid: 0,
        };
        match self.run(e, op) {
            Ok(Output::Ino(i)) => i,
            o => panic!("mkdir {name}: {o:?}"),
        }
    }

    /// Creates `name` in directory `parent`: its inode.
    pub fn create_in(&mut self, e: &mut Engine, parent: u32, name: &str) -> u32 {
        let op = Op::Create {
            parent,
            name: name.as_bytes().to_vec(),
            perm: 0o644,
            uid: 0,
            gid: 0,
        };
        match self.run(e, op) {
            Ok(Output::Ino(i)) => i,
            o => panic!("create {name}: {o:?}"),
        }
    }

    /// What the media would hold after a power cut at `t_ns`: the image as of the
    /// last flush completed by then.
    pub fn durable_at(&self, t_ns: u64) -> MemDevice {
        self.durable
            .iter()
            .rev()
            .find(|(t, _)| *t <= t_ns)
            .map(|(_, d)| d.clone())
            .expect("the image at time 0 is durable")
    }
}

/// A stream of `mbit` Mbit/s in 256 KiB requests with a 2 MiB buffer, holding
/// `reserve` bytes (a recording's space), started at byte 0.
pub fn stream_spec(dir: StreamDir, mbit: f64, reserve: u64) -> StreamSpec {
    StreamSpec {
        dir,
        rate_bps: mbit * 1e6,
        request_bytes: 256 * 1024,
        buffer_bytes: Some(2 << 20),
        reserve_bytes: reserve,
        start_bytes: 0,
        durable_ns: None,
        idle: false,
    }
}

/// Opens stream `s` on `ino`: what admission gave it, or why it refused.
pub fn open_stream(
    e: &mut Engine,
    d: &mut Drive,
    ino: u32,
    s: StreamSpec,
) -> Result<StreamInfo, Error> {
    d.run(e, Op::StreamOpen { ino, spec: s }).map(|o| match o {
        Output::Stream(i) => i,
        o => panic!("{o:?}"),
    })
}

/// `len` bytes of a pattern that repeats every 251 bytes.
pub fn pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 31 % 251) as u8).collect()
}

/// Hands `bytes` to write stream `stream` (its buffer takes them; the engine writes
/// behind).
pub fn stream_write(e: &mut Engine, d: &mut Drive, stream: u32, bytes: &[u8]) {
    let op = Op::StreamWrite {
        stream,
        data: dvrfs_core::engine::IoBuf::from_slice(bytes),
    };
    d.run(e, op).unwrap();
}
