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
//! The oracle ([`check`]): no panic; a read-only open either refuses with an error or
//! serves a walk that lists every directory and reads every file, and every read that
//! succeeds returns the bytes written to that file (a prefix of them when a damaged
//! size is smaller; zeros past them, holes, when it is larger): wrong bytes are only
//! ever an error, which the data checksums make possible; `fsck --repair`
//! either gives up naming blocks two files claim (the one thing repair leaves alone,
//! by design) or leaves a volume a second `fsck` finds clean: one pass.

use crate::device::MemDevice;
use crate::format::dir::Kind;
use crate::format::superblock::{AllocPolicy, Superblock};
use crate::format::{parse_header, seal_block, HEADER_BYTES, META_BLOCK_BYTES};
use crate::fs::fsck::fsck;
use crate::fs::{mkfs, Fs, ManualClock, OpenOptions};
use crate::layout::MkfsParams;

const MB: u64 = META_BLOCK_BYTES as u64;

/// A small populated volume: two directories of short recordings, a fragmented
/// 31-block file (ZRR, 64 KiB blocks: inline and indirect runs), a symlink. Small so
/// that a case runs in milliseconds.
pub fn sample_volume() -> MemDevice {
    let size = 24 << 20;
    let mut dev = MemDevice::new(size);
    let mut p = MkfsParams::new(size, [0x5a; 16], 9);
    p.data_block_bytes = 64 << 10;
    p.alloc = AllocPolicy::Zrr;
    mkfs(&mut dev, &p, &mut |_, _| {}).expect("mkfs of the sample volume");
    let mut fs = Fs::open_with(
        dev,
        OpenOptions::writable(),
        Box::new(ManualClock::new()),
        None,
    )
    .expect("open of the sample volume");
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
        Ok(())
    };
    build(&mut fs).expect("populating the sample volume");
    fs.close().expect("close of the sample volume")
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
/// area's blocks.
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
    for n in sb.sum_start..sb.sum_start + sb.sum_blocks {
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

    /// `base` with this damage applied; also returns the block damaged.
    pub fn apply(&self, base: &MemDevice, sb: &Superblock, blocks: &[u64]) -> (MemDevice, u64) {
        let mut dev = base.clone();
        let n = blocks[self.block as usize % blocks.len()];
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
        if self.reseal {
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

/// Runs the oracle on a damaged image (see the module docs). Panics inside are the
/// caller's to catch (libFuzzer reports them as crashes).
pub fn check(dev: &MemDevice) -> Outcome {
    if let Ok(mut fs) = Fs::open(dev.clone(), OpenOptions::read_only()) {
        let root = fs.root();
        if let Err(wrong) = walk(&mut fs, root, 0) {
            return Outcome::Failed(wrong);
        }
        // `stat`'s open, which loads only the paths it resolves, answers as the
        // full open does.
        let paths = sample_paths();
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
fn stat_of<D: crate::device::Device>(fs: &Fs<D>, path: &str) -> String {
    match fs.resolve(path).and_then(|ino| fs.stat(ino)) {
        Ok(st) => format!("{st:?}"),
        Err(e) => format!("error: {e}"),
    }
}

/// Every path of the undamaged [`sample_volume`], and one that names nothing.
fn sample_paths() -> &'static [String] {
    static PATHS: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();
    PATHS.get_or_init(|| {
        let fs =
            Fs::open(sample_volume(), OpenOptions::read_only()).expect("open of the sample volume");
        let mut out = vec!["/".to_string(), "/no/such/name".to_string()];
        let mut stack = vec![(String::new(), fs.root())];
        while let Some((path, d)) = stack.pop() {
            for (name, child, kind) in fs.readdir(d).expect("readdir of the sample") {
                let p = format!("{path}/{}", String::from_utf8_lossy(&name));
                out.push(p.clone());
                if kind == Kind::Dir {
                    stack.push((p, child));
                }
            }
        }
        out
    })
}

/// What each file of the undamaged [`sample_volume`] holds, by inode.
fn sample_contents() -> &'static std::collections::HashMap<u32, Vec<u8>> {
    static CONTENTS: std::sync::OnceLock<std::collections::HashMap<u32, Vec<u8>>> =
        std::sync::OnceLock::new();
    CONTENTS.get_or_init(|| {
        let mut fs =
            Fs::open(sample_volume(), OpenOptions::read_only()).expect("open of the sample volume");
        let mut out = std::collections::HashMap::new();
        let mut stack = vec![fs.root()];
        while let Some(d) = stack.pop() {
            for (_, child, kind) in fs.readdir(d).expect("readdir of the sample") {
                match kind {
                    Kind::Dir => stack.push(child),
                    Kind::File => {
                        let size = fs.stat(child).expect("stat").size_bytes as usize;
                        let mut buf = vec![0u8; size];
                        fs.read(child, 0, &mut buf).expect("read of the sample");
                        out.insert(child, buf);
                    }
                    Kind::Symlink => {}
                }
            }
        }
        out
    })
}

/// Lists every directory and reads every file (up to 4 MiB each) of `fs`; `Err` names
/// a read that succeeded with bytes other than the ones written.
fn walk(fs: &mut Fs<MemDevice>, ino: u32, depth: u32) -> Result<(), String> {
    if depth > 10 {
        return Ok(());
    }
    let Ok(list) = fs.readdir(ino) else {
        return Ok(());
    };
    for (_, child, kind) in list {
        if kind == Kind::Dir {
            walk(fs, child, depth + 1)?;
        } else if let Ok(st) = fs.stat(child) {
            let mut buf = vec![0u8; (st.size_bytes.min(4 << 20)) as usize + 1];
            let Ok(n) = fs.read(child, 0, &mut buf) else {
                continue;
            };
            let (Some(want), Kind::File) = (sample_contents().get(&child), st.kind) else {
                continue;
            };
            let got = &buf[..n];
            let same = n.min(want.len());
            if got[..same] != want[..same] {
                let at = (0..same).find(|&i| got[i] != want[i]).unwrap_or(0);
                return Err(format!(
                    "inode {child}: a read returned wrong bytes without an error (first at byte {at} of {n})"
                ));
            }
            if let Some(at) = got[same..].iter().position(|&b| b != 0) {
                return Err(format!(
                    "inode {child}: a read returned non-zero bytes past the {} written, at byte {}",
                    want.len(),
                    same + at
                ));
            }
        }
    }
    Ok(())
}
