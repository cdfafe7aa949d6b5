//! Helpers shared by the core's integration tests.
#![allow(dead_code)]

pub mod damage;
pub mod drive;
pub mod ffmpeg;

use dvrfs_core::device::{Device, MemDevice};
use dvrfs_core::driver::Fs;
use dvrfs_core::format::dir::Kind;
use dvrfs_core::format::superblock::AllocPolicy;
use dvrfs_core::layout::MkfsParams;
use dvrfs_core::tools::{fsck::fsck, mkfs};
use dvrfs_core::volume::OpenOptions;
use std::collections::BTreeMap;

/// What a path holds in the reference model.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Node {
    File(Vec<u8>),
    Dir,
}

pub type Model = BTreeMap<String, Node>;

pub fn formatted(device_bytes: u64, block_bytes: u64, alloc: AllocPolicy, seed: u64) -> MemDevice {
    formatted_with(device_bytes, block_bytes, alloc, seed, |_| {})
}

/// As [`formatted`], with mkfs's parameters edited by `edit` first.
pub fn formatted_with(
    device_bytes: u64,
    block_bytes: u64,
    alloc: AllocPolicy,
    seed: u64,
    edit: impl FnOnce(&mut MkfsParams),
) -> MemDevice {
    let mut dev = MemDevice::new(device_bytes);
    let mut p = MkfsParams::new(device_bytes, [seed as u8 ^ 0x5a; 16], seed);
    p.data_block_bytes = block_bytes;
    p.alloc = alloc;
    edit(&mut p);
    mkfs(&mut dev, &p, &mut |_, _| {}).expect("mkfs");
    dev
}

/// Walks the whole tree of `fs` into a model (file contents read back in full).
pub fn snapshot<D: Device>(fs: &mut Fs<D>) -> Model {
    let mut out = Model::new();
    let mut stack = vec![(String::new(), fs.root())];
    while let Some((path, ino)) = stack.pop() {
        for (name, child, kind) in fs.readdir(ino).expect("readdir") {
            let p = format!("{path}/{}", String::from_utf8(name).expect("utf8 names"));
            match kind {
                Kind::Dir => {
                    out.insert(p.clone(), Node::Dir);
                    stack.push((p, child));
                }
                Kind::File => {
                    let size = fs.stat(child).expect("stat").size_bytes as usize;
                    let mut buf = vec![0u8; size];
                    assert_eq!(fs.read(child, 0, &mut buf).expect("read"), size);
                    out.insert(p, Node::File(buf));
                }
                Kind::Symlink => {
                    out.insert(p, Node::File(fs.readlink(child).expect("readlink")));
                }
            }
        }
    }
    out
}

/// fsck of a copy of the device; panics with the errors if it is not clean.
pub fn assert_fsck_clean(dev: &MemDevice) {
    let (report, _) = fsck(dev.clone(), false, &mut |_, _| {}).expect("fsck ran");
    assert!(
        report.clean(),
        "fsck found {} errors, first: {:#?}",
        report.errors.len(),
        &report.errors[..report.errors.len().min(8)]
    );
}

pub fn open_rw<D: Device>(dev: D) -> Fs<D> {
    Fs::open(dev, OpenOptions::writable()).expect("open")
}

/// A 256 MiB volume (1 MiB blocks) on a manual clock: the blocking driver's time
/// moves only when a test moves it.
pub fn clocked() -> (Fs<MemDevice>, dvrfs_core::driver::blocking::ManualClock) {
    let clock = dvrfs_core::driver::blocking::ManualClock::new();
    let dev = formatted(256 << 20, 1 << 20, AllocPolicy::Zrr, 3);
    let fs = Fs::open_with(dev, OpenOptions::writable(), Box::new(clock.clone()), None).unwrap();
    (fs, clock)
}

/// Deterministic bytes for test data (the same generator the fuzzing sample uses).
#[allow(unused_imports)] // not every test binary uses it
pub use dvrfs_core::fuzzing::pattern;

pub fn short(m: &Model) -> Vec<(String, usize)> {
    m.iter()
        .map(|(k, v)| {
            (
                k.clone(),
                if let Node::File(d) = v {
                    d.len()
                } else {
                    usize::MAX
                },
            )
        })
        .collect()
}
