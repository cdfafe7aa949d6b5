//! Structure-aware damage of metadata, and the oracle every damaged image must pass
//! (issue 9). Two drivers use it: the seeded test `tests/fuzz_metadata.rs` (a fixed
//! sequence of cases in the test suite) and the coverage-guided libFuzzer target
//! `fuzz/fuzz_targets/image.rs` (`cargo +nightly fuzz run image`), which turns its
//! input bytes into a [`Damage`].
//!
//! A [`Damage`] picks one metadata block in use of a [`sample_volume`] and edits
//! fields in it: random bytes, 32-bit words, all-ones, and small numbers that look
//! like block numbers or counts. Both copies (primary and backup region) get the same
//! edit and, unless the case asks for torn damage, are resealed, so no checksum sees
//! it: only range checks and cross-checks can.
//!
//! The oracle ([`Samples::check`]): no panic; a read-only open either refuses with an error or
//! serves a walk that lists every directory and reads every file, and every read that
//! succeeds returns the bytes written to that file (a prefix of them when a damaged
//! size is smaller; zeros past them, holes, when it is larger): wrong bytes are only
//! ever an error, which the data checksums make possible; `fsck --repair`
//! either gives up naming blocks two files claim (the one thing repair leaves alone,
//! by design) or leaves a volume a second `fsck` finds clean: one pass.

use crate::device::MemDevice;
use crate::driver::{Fs, ManualClock};
use crate::format::dir::Kind;
use crate::format::frame_index::{FrameEntry, FLAG_IMPORT};
use crate::format::superblock::{AllocPolicy, Superblock};
use crate::format::{parse_header, seal_block, HEADER_BYTES, META_BLOCK_BYTES};
use crate::layout::MkfsParams;
use crate::tools::fsck::fsck;
use crate::tools::mkfs;
use crate::volume::OpenOptions;

const MB: u64 = META_BLOCK_BYTES as u64;

/// A small populated volume: two directories of short recordings, a fragmented
/// 31-block file (ZRR, 64 KiB blocks: inline and indirect runs) with a frame index
/// of 300 keyframes (four blocks), a symlink. Small so
/// that a case runs in milliseconds.
pub fn sample_volume() -> MemDevice {
    let size = 24 << 20;
    let mut dev = MemDevice::new(size);
    let mut p = MkfsParams::new(size, [0x5a; 16], 9);
    p.data_block_bytes = 64 << 10;
    p.alloc = AllocPolicy::Zrr;
    mkfs(&mut dev, &p, &mut |_, _| {}).expect("mkfs of the sample volume");
    let mut fs = open_writable(dev);
    let root = fs.root();
    let build = |fs: &mut Fs<MemDevice>| -> crate::Result<()> {
        for (d, n) in [(&b"cam1"[..], 12u64), (&b"cam2"[..], 12)] {
            let dir = fs.mkdir(root, d, 0o755, 0, 0, 1)?;
            for i in 0..n {
                let f = fs.create(dir, format!("seg{i:03}.ts").as_bytes(), 0o644, 0, 0, 2)?;
                fs.write(f, 0, &pattern(i, 3000 + 40_000 * (i as usize % 3)), 3)?;
            }
        }
        let big = fs.create(root, b"big.ts", 0o644, 0, 0, 3)?;
        fs.write(big, 0, &pattern(99, 30 * (64 << 10) + 123), 4)?;
        fs.symlink(root, b"l", b"/cam1/seg001.ts", 0, 0, 5)?;
        // A frame index of three leaves under a branch, for damage to reach.
        let keys: Vec<FrameEntry> = (0..300u64)
            .map(|i| FrameEntry {
                offset: i * 6_000,
                data_delta: 0,
                len: 1_000,
                number: (i * 25) as u32,
                flags: FLAG_IMPORT,
                pts_90k: i as i64 * 90_000,
                utc_ns: 1_795_000_000_000_000_000 + i as i64 * 1_000_000_000,
            })
            .collect();
        fs.append_frames(big, &keys, 5)?;
        Ok(())
    };
    build(&mut fs).expect("populating the sample volume");
    fs.close().expect("close of the sample volume")
}

/// A device that loses every write after the first flush that follows a journal
/// write: the power cut right after a commit's journal is durable, before any of its
/// checkpoint reaches the regions.
struct CutAfterJournal {
    dev: MemDevice,
    journal: std::ops::Range<u64>,
    journal_written: bool,
    cut: bool,
}

impl crate::device::Device for CutAfterJournal {
    fn size_bytes(&self) -> u64 {
        self.dev.size_bytes()
    }
    fn sector_bytes(&self) -> u32 {
        self.dev.sector_bytes()
    }
    fn read_at(&self, offset_bytes: u64, buf: &mut [u8]) -> std::io::Result<()> {
        self.dev.read_at(offset_bytes, buf)
    }
    fn write_at(&mut self, offset_bytes: u64, buf: &[u8]) -> std::io::Result<()> {
        if self.cut {
            return Ok(());
        }
        self.journal_written |= self.journal.contains(&offset_bytes);
        self.dev.write_at(offset_bytes, buf)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.cut |= self.journal_written;
        self.dev.flush()
    }
}

/// [`sample_volume`] after one more commit that reached the journal and nothing
/// else (the power went before its checkpoint): a new recording, a directory, a
/// rename into it, a deletion and an append, all in one transaction that an open
/// replays.
pub fn crash_sample() -> MemDevice {
    let clean = sample_volume();
    let mut b = vec![0u8; META_BLOCK_BYTES];
    clean.peek(0, &mut b);
    let sb = Superblock::decode(&b).expect("the sample's superblock");
    let dev = CutAfterJournal {
        dev: clean,
        journal: sb.journal_start * MB..(sb.journal_start + sb.journal_blocks) * MB,
        journal_written: false,
        cut: false,
    };
    let mut fs = open_writable(dev);
    let build = |fs: &mut Fs<CutAfterJournal>| -> crate::Result<()> {
        let root = fs.root();
        let (cam1, cam2) = (fs.lookup(root, b"cam1")?, fs.lookup(root, b"cam2")?);
        let f = fs.create(cam2, b"seg100.ts", 0o644, 0, 0, 6)?;
        fs.write(f, 0, &pattern(100, 150_000), 6)?;
        let cam3 = fs.mkdir(root, b"cam3", 0o755, 0, 0, 6)?;
        fs.rename(cam1, b"seg000.ts", cam3, b"moved.ts", 6)?;
        fs.unlink(cam2, b"seg005.ts", 6)?;
        let g = fs.lookup(cam1, b"seg004.ts")?;
        let size = fs.stat(g)?.size_bytes;
        fs.write(g, size, &pattern(104, 70_000), 6)?;
        Ok(())
    };
    build(&mut fs).expect("changing the sample volume");
    let dev = fs.close().expect("close of the crash sample");
    assert!(dev.cut, "the crash sample's commit reached the journal");
    dev.dev
}

/// What each file of a volume holds, by inode.
type Contents = std::collections::HashMap<u32, Vec<u8>>;

/// The images every case starts from (the clean [`sample_volume`], and its
/// [`crash_sample`] for damage to the journal), the blocks a case may damage, and
/// what the files hold in each.
pub struct Samples {
    pub clean: MemDevice,
    pub crash: MemDevice,
    pub sb: Superblock,
    /// The metadata blocks in use ([`metadata_blocks`]), then the journal blocks of
    /// the crash sample's transaction.
    pub blocks: Vec<u64>,
    /// The crash sample's transaction, in blocks from the journal's start.
    txn_blocks: u64,
    files: [Contents; 2],
    paths: Vec<String>,
    dirs: Vec<String>,
}

impl Samples {
    /// Built once per process.
    pub fn get() -> &'static Samples {
        static SAMPLES: std::sync::OnceLock<Samples> = std::sync::OnceLock::new();
        SAMPLES.get_or_init(|| {
            let (clean, crash) = (sample_volume(), crash_sample());
            let (sb, mut blocks) = metadata_blocks(&clean);
            let mut b = vec![0u8; META_BLOCK_BYTES];
            crash.peek(sb.journal_start * MB, &mut b);
            let head = crate::format::journal::parse_head(&b, &sb.uuid, sb.journal_start)
                .expect("the crash sample's journal holds a transaction");
            let txn_blocks = crate::format::journal::transaction_blocks(head.images) as u64;
            blocks.extend(sb.journal_start..sb.journal_start + txn_blocks);
            let files = [contents(&clean), contents(&crash)];
            let (paths, dirs) = paths(&clean);
            Samples {
                clean,
                crash,
                sb,
                blocks,
                txn_blocks,
                files,
                paths,
                dirs,
            }
        })
    }

    /// Runs the oracle on a damaged image (see the module docs). Panics inside are
    /// the caller's to catch (libFuzzer reports them as crashes).
    pub fn check(&self, dev: &MemDevice) -> Outcome {
        check_with(dev, &self.files, &self.paths, &self.dirs)
    }
}

/// A writable open on a clock that never moves (no commit but the close's).
fn open_writable<D: crate::device::Device>(dev: D) -> Fs<D> {
    Fs::open_with(
        dev,
        OpenOptions::writable(),
        Box::new(ManualClock::new()),
        None,
    )
    .expect("open of the sample volume")
}

/// Deterministic file contents.
pub fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// The metadata blocks in use of `dev`: every sealed block outside the journal (the
/// superblock included: its primary and backup-region copies are damaged alike, the
/// end-of-device copy is left), but of the inode table only the blocks below the
/// superblock's mark (the rest hold free records only); then the data checksum
/// area's blocks and the event log's.
pub fn metadata_blocks(dev: &MemDevice) -> (Superblock, Vec<u64>) {
    let mut b = vec![0u8; META_BLOCK_BYTES];
    dev.peek(0, &mut b);
    let sb = Superblock::decode(&b).expect("the sample's superblock");
    let unused = sb.inode_table_start + sb.inode_blocks_used..sb.dynamic_start;
    let mut blocks = vec![];
    for n in 0..sb.dynamic_start + sb.dynamic_blocks {
        dev.peek(n * MB, &mut b);
        if parse_header(&b).is_ok() && !sb.in_journal(n) && !unused.contains(&n) {
            blocks.push(n);
        }
    }
    // The data checksum area last, so that an input keeps the block it names when
    // the list grows (kept inputs name an index below the old length).
    // The event log's blocks after them, for the same reason.
    for n in (sb.sum_start..sb.sum_start + sb.sum_blocks)
        .chain(sb.events_start..sb.events_start + sb.events_blocks)
    {
        dev.peek(n * MB, &mut b);
        if parse_header(&b).is_ok() {
            blocks.push(n);
        }
    }
    (sb, blocks)
}

/// One field edit: where (a payload byte), how and with what.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Edit {
    pub at: u16,
    pub kind: u8,
    pub value: u64,
}

/// Damage to one metadata block: which (an index into the blocks in use, taken
/// modulo their number), the edits, and whether the copies are resealed (`false`:
/// torn damage every checksum catches, in the primary copy only).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Damage {
    pub block: u32,
    pub reseal: bool,
    pub edits: Vec<Edit>,
}

impl Damage {
    /// Reads a case from fuzzer bytes: 4 bytes block, 1 byte flags, then 11 bytes per
    /// edit (2 offset, 1 kind, 8 value), at most 8 edits. Any input is a case.
    pub fn from_bytes(data: &[u8]) -> Damage {
        let word = |b: &[u8]| {
            let mut v = [0u8; 8];
            v[..b.len()].copy_from_slice(b);
            u64::from_le_bytes(v)
        };
        let head = &data[..data.len().min(5)];
        let block = word(&head[..head.len().min(4)]) as u32;
        let reseal = head.get(4).is_none_or(|f| f & 1 == 0);
        let edits = data
            .get(5..)
            .unwrap_or(&[])
            .chunks(11)
            .take(8)
            .map(|c| Edit {
                at: word(&c[..c.len().min(2)]) as u16,
                kind: c.get(2).copied().unwrap_or(0),
                value: word(&c[3.min(c.len())..]),
            })
            .collect();
        Damage {
            block,
            reseal,
            edits,
        }
    }

    /// The inverse of [`Damage::from_bytes`] (for writing a corpus).
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = self.block.to_le_bytes().to_vec();
        out.push(u8::from(!self.reseal));
        for e in &self.edits {
            out.extend_from_slice(&e.at.to_le_bytes());
            out.push(e.kind);
            out.extend_from_slice(&e.value.to_le_bytes());
        }
        out
    }

    /// A case from a 64-bit generator (the seeded test's xorshift).
    pub fn random(rnd: &mut dyn FnMut() -> u64) -> Damage {
        let edits = (0..1 + rnd() % 3)
            .map(|_| Edit {
                at: rnd() as u16,
                kind: rnd() as u8,
                value: rnd(),
            })
            .collect();
        Damage {
            block: rnd() as u32,
            reseal: true,
            edits,
        }
    }

    /// A sample with this damage applied (the crash sample for a journal block);
    /// also returns the block damaged.
    pub fn apply(&self, samples: &Samples) -> (MemDevice, u64) {
        let (sb, blocks) = (&samples.sb, &samples.blocks);
        let n = blocks[self.block as usize % blocks.len()];
        let journal = sb.in_journal(n);
        let mut dev = if journal {
            samples.crash.clone()
        } else {
            samples.clean.clone()
        };
        let mut img = vec![0u8; META_BLOCK_BYTES];
        dev.peek(n * MB, &mut img);
        let h = parse_header(&img).expect("a block in use has a header");
        let room = (META_BLOCK_BYTES - HEADER_BYTES - 8) as u64;
        for e in &self.edits {
            let at = HEADER_BYTES + (e.at as u64 % room) as usize;
            match e.kind % 4 {
                0 => img[at] = e.value as u8,
                1 => img[at..at + 4].copy_from_slice(&(e.value as u32).to_le_bytes()),
                2 => img[at..at + 4].copy_from_slice(&[0xFF; 4]),
                _ => img[at..at + 8].copy_from_slice(&(e.value % 100_000).to_le_bytes()),
            }
        }
        if self.reseal && journal {
            // The journal has one copy; the commit record's CRC is made to match.
            seal_block(&mut img, &h);
            dev.poke(n * MB, &img);
            let mut txn = vec![0u8; samples.txn_blocks as usize * META_BLOCK_BYTES];
            dev.peek(sb.journal_start * MB, &mut txn);
            crate::format::journal::reseal_transaction(&mut txn);
            dev.poke(sb.journal_start * MB, &txn);
        } else if self.reseal {
            seal_block(&mut img, &h);
            dev.poke(n * MB, &img);
            dev.poke(sb.backup_offset(n), &img);
        } else {
            dev.poke(n * MB, &img);
        }
        (dev, n)
    }
}

/// What the oracle saw for one case.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Nothing found (the edit changed nothing that matters, or only free space).
    Clean,
    /// Found, and one repair left a clean volume.
    Repaired,
    /// Repair declined because two files claim the same blocks (by design).
    SharedBlocks,
    /// A failure of the oracle: what went wrong.
    Failed(String),
}

/// The oracle: `files` are what the files may hold (a damaged journal is replayed
/// or ignored whole, so either sample's contents are right), `paths` the ones `stat`
/// is tried on.
fn check_with(dev: &MemDevice, files: &[Contents], paths: &[String], dirs: &[String]) -> Outcome {
    if let Ok(mut fs) = Fs::open(dev.clone(), OpenOptions::read_only()) {
        let root = fs.root();
        let mut seen = std::collections::HashSet::new();
        let mut scratch = Scratch::default();
        if let Err(wrong) = walk(&mut fs, root, 0, files, &mut seen, &mut scratch) {
            return Outcome::Failed(wrong);
        }
        // `stat`'s open, which loads only the paths it resolves, answers as the
        // full open does.
        if let Ok(part) = Fs::open(dev.clone(), OpenOptions::paths_only(paths)) {
            for p in paths {
                let (a, b) = (stat_of(&part, p), stat_of(&fs, p));
                if a != b {
                    return Outcome::Failed(format!(
                        "stat {p}: the path-only open says {a}, the full open {b}"
                    ));
                }
            }
        }
        // `ls`'s open of every directory of the sample lists them as the full open.
        if let Ok(part) = Fs::open(dev.clone(), OpenOptions::listing(dirs)) {
            for p in dirs {
                let (a, b) = (listing_of(&part, p), listing_of(&fs, p));
                if a != b {
                    return Outcome::Failed(format!(
                        "ls -l {p}: the listing open says {a}, the full open {b}"
                    ));
                }
            }
        }
    }
    let (r, fixed) = match fsck(dev.clone(), true, &mut |_, _| {}) {
        Ok(x) => x,
        Err(e) => return Outcome::Failed(format!("fsck --repair failed: {e}")),
    };
    if r.clean() {
        return Outcome::Clean;
    }
    match fixed {
        Some(f) if r.exit_code() != 4 => match fsck(f, false, &mut |_, _| {}) {
            Ok((again, _)) if again.exit_code() == 0 => Outcome::Repaired,
            Ok((again, _)) => Outcome::Failed(format!(
                "two passes: the repair fixed {:?}, then fsck found {:?}",
                r.errors, again.errors
            )),
            Err(e) => Outcome::Failed(format!("fsck after the repair failed: {e}")),
        },
        _ if r
            .errors
            .iter()
            .any(|e| e.contains("uses blocks that another file uses too")) =>
        {
            Outcome::SharedBlocks
        }
        _ => Outcome::Failed(format!("repair gave up: {:?}", r.errors)),
    }
}

/// What `stat PATH` answers, as text (the error's message when it fails).
pub fn stat_of<D: crate::device::Device>(fs: &Fs<D>, path: &str) -> String {
    match fs.resolve(path).and_then(|ino| fs.stat(ino)) {
        Ok(st) => format!("{st:?}"),
        Err(e) => format!("error: {e}"),
    }
}

/// What `ls -l PATH` shows of a directory, as text: each entry's name, inode and
/// kind, and the attributes the long form prints (a symlink's target too).
pub fn listing_of<D: crate::device::Device>(fs: &Fs<D>, path: &str) -> String {
    let list = match fs.resolve(path).and_then(|ino| fs.readdir(ino)) {
        Ok(list) => list,
        Err(e) => return format!("error: {e}"),
    };
    let mut out = String::new();
    for (name, ino, kind) in list {
        let shown = match fs.stat(ino) {
            Ok(st) => format!(
                "{:?} {:o} {} {} {} {} {}",
                st.kind, st.mode, st.nlink, st.uid, st.gid, st.size_bytes, st.mtime_ns
            ),
            Err(e) => format!("error: {e}"),
        };
        let target = match kind {
            Kind::Symlink => format!(" -> {:?}", fs.readlink(ino)),
            _ => String::new(),
        };
        out += &format!(
            "{:?} {ino} {kind:?}: {shown}{target}\n",
            String::from_utf8_lossy(&name)
        );
    }
    out
}

/// Every path of `dev` (undamaged) and one that names nothing; and its directories.
fn paths(dev: &MemDevice) -> (Vec<String>, Vec<String>) {
    let fs = Fs::open(dev.clone(), OpenOptions::read_only()).expect("open of a sample");
    let mut out = vec!["/".to_string(), "/no/such/name".to_string()];
    let mut dirs = vec!["/".to_string()];
    let mut stack = vec![(String::new(), fs.root())];
    while let Some((path, d)) = stack.pop() {
        for (name, child, kind) in fs.readdir(d).expect("readdir of a sample") {
            let p = format!("{path}/{}", String::from_utf8_lossy(&name));
            out.push(p.clone());
            if kind == Kind::Dir {
                dirs.push(p.clone());
                stack.push((p, child));
            }
        }
    }
    (out, dirs)
}

/// What each file of `dev` (undamaged) holds, by inode.
fn contents(dev: &MemDevice) -> Contents {
    let mut fs = Fs::open(dev.clone(), OpenOptions::read_only()).expect("open of a sample");
    let mut out = Contents::new();
    let mut stack = vec![fs.root()];
    while let Some(d) = stack.pop() {
        for (_, child, kind) in fs.readdir(d).expect("readdir of a sample") {
            match kind {
                Kind::Dir => stack.push(child),
                Kind::File => {
                    let size = fs.stat(child).expect("stat").size_bytes as usize;
                    let mut buf = vec![0u8; size];
                    fs.read(child, 0, &mut buf).expect("read of a sample");
                    out.insert(child, buf);
                }
                Kind::Symlink => {}
            }
        }
    }
    out
}

/// Whether `got` (a read from the start of a file) is what `want` allows: its bytes
/// as far as both go, zeros past them (holes of a damaged, larger size).
fn same_bytes(got: &[u8], want: &[u8]) -> Result<(), String> {
    let same = got.len().min(want.len());
    if got[..same] != want[..same] {
        let at = (0..same).find(|&i| got[i] != want[i]).unwrap_or(0);
        return Err(format!(
            "a read returned wrong bytes without an error (first at byte {at} of {})",
            got.len()
        ));
    }
    if let Some(at) = got[same..].iter().position(|&b| b != 0) {
        return Err(format!(
            "a read returned non-zero bytes past the {} written, at byte {}",
            want.len(),
            same + at
        ));
    }
    Ok(())
}

/// The walk's read buffer, lent to the engine for each read and taken back: one
/// allocation per case, not two zeroed buffers and a copy per file (a third of a
/// case's time went to moving the sample's 3 MB of file data). What the last read
/// left in it past the bytes a read returns is never looked at; a read must write
/// every byte it returns, holes included, so stale bytes would show up as wrong data.
#[derive(Default)]
struct Scratch {
    mem: Vec<u8>,
    len: usize,
}

impl crate::engine::ExternalBuf for Scratch {
    fn bytes(&self) -> &[u8] {
        &self.mem[..self.len]
    }
    fn bytes_mut(&mut self) -> &mut [u8] {
        &mut self.mem[..self.len]
    }
}

impl Scratch {
    /// Reads up to `len` bytes from the start of `ino`; the bytes read, or `None` on
    /// an error.
    fn read<'a>(&'a mut self, fs: &mut Fs<MemDevice>, ino: u32, len: usize) -> Option<&'a [u8]> {
        let mut lent = std::mem::take(self);
        if lent.mem.len() < len {
            lent.mem.resize(len, 0);
        }
        lent.len = len;
        let (back, n) = match fs.read_buf(ino, 0, crate::IoBuf::External(Box::new(lent))) {
            Ok((buf, n)) => (buf, Some(n)),
            Err(_) => return None,
        };
        let crate::IoBuf::External(b) = back else {
            unreachable!("a read gives its buffer back")
        };
        let b: Box<dyn std::any::Any> = b;
        *self = *b.downcast::<Scratch>().expect("the walk's own buffer");
        n.map(|n| &self.mem[..n])
    }
}

/// Lists every directory and reads every file (up to 4 MiB each) of `fs`, each inode
/// once (`seen`: a damaged directory that names itself or an ancestor twice made the
/// walk exponential); `Err` names a read that succeeded with bytes other than the ones
/// written.
fn walk(
    fs: &mut Fs<MemDevice>,
    ino: u32,
    depth: u32,
    files: &[Contents],
    seen: &mut std::collections::HashSet<u32>,
    scratch: &mut Scratch,
) -> Result<(), String> {
    if depth > 10 || !seen.insert(ino) {
        return Ok(());
    }
    let Ok(list) = fs.readdir(ino) else {
        return Ok(());
    };
    for (_, child, kind) in list {
        if kind == Kind::Dir {
            walk(fs, child, depth + 1, files, seen, scratch)?;
        } else if !seen.insert(child) {
            continue;
        } else if let Ok(st) = fs.stat(child) {
            let Some(got) = scratch.read(fs, child, st.size_bytes.min(4 << 20) as usize + 1) else {
                continue;
            };
            if st.kind != Kind::File {
                continue;
            }
            // Wrong only if it matches none of the samples that have this file.
            let mut wrong = None;
            for want in files.iter().filter_map(|f| f.get(&child)) {
                match same_bytes(got, want) {
                    Ok(()) => {
                        wrong = None;
                        break;
                    }
                    Err(why) => {
                        wrong.get_or_insert(why);
                    }
                }
            }
            if let Some(why) = wrong {
                return Err(format!("inode {child}: {why}"));
            }
        }
    }
    Ok(())
}
