//! The file system against a reference model (a map of path -> bytes): weighted random
//! operations with a small name space, so names collide; after every reopen the file
//! system must equal the model and fsck must be clean. Run for every allocation policy
//! and for 64 KiB and 4 MiB blocks.

mod common;

use common::*;
use dvrfs_core::device::MemDevice;
use dvrfs_core::format::superblock::AllocPolicy;
use dvrfs_core::{Error, Fs};
use proptest::prelude::*;

#[derive(Clone, Debug)]
enum Op {
    Create {
        dir: usize,
        name: u8,
    },
    Mkdir {
        dir: usize,
        name: u8,
    },
    Write {
        file: usize,
        offset: u64,
        len: usize,
        seed: u64,
    },
    Append {
        file: usize,
        len: usize,
        seed: u64,
    },
    Truncate {
        file: usize,
        size: u64,
    },
    Unlink {
        file: usize,
    },
    Rmdir {
        dir: usize,
    },
    Rename {
        from: usize,
        dir: usize,
        name: u8,
    },
    Reopen,
}

fn op_strategy(block: u64) -> impl Strategy<Value = Op> {
    let span = 3 * block;
    prop_oneof![
        3 => (0..8usize, 0..5u8).prop_map(|(dir, name)| Op::Create { dir, name }),
        1 => (0..8usize, 0..5u8).prop_map(|(dir, name)| Op::Mkdir { dir, name }),
        5 => (0..8usize, 0..span, 1..(block as usize / 2 + 5000), any::<u64>())
            .prop_map(|(file, offset, len, seed)| Op::Write { file, offset, len, seed }),
        3 => (0..8usize, 1..(block as usize + 3000), any::<u64>()).prop_map(|(file, len, seed)| Op::Append { file, len, seed }),
        2 => (0..8usize, 0..span).prop_map(|(file, size)| Op::Truncate { file, size }),
        2 => (0..8usize).prop_map(|file| Op::Unlink { file }),
        1 => (0..8usize).prop_map(|dir| Op::Rmdir { dir }),
        2 => (0..16usize, 0..8usize, 0..5u8).prop_map(|(from, dir, name)| Op::Rename { from, dir, name }),
        1 => Just(Op::Reopen),
    ]
}

const NAMES: [&str; 5] = ["a", "b", "rec", "x.ts", "long-name-0123456789"];

fn dirs(m: &Model) -> Vec<String> {
    let mut v = vec![String::new()];
    v.extend(
        m.iter()
            .filter(|(_, n)| **n == Node::Dir)
            .map(|(k, _)| k.clone()),
    );
    v
}

fn files(m: &Model) -> Vec<String> {
    m.iter()
        .filter(|(_, n)| matches!(n, Node::File(_)))
        .map(|(k, _)| k.clone())
        .collect()
}

fn pick(v: &[String], i: usize) -> Option<String> {
    (!v.is_empty()).then(|| v[i % v.len()].clone())
}

fn path_of(dir: &str, name: u8) -> String {
    format!("{dir}/{}", NAMES[name as usize % NAMES.len()])
}

fn now(step: usize) -> i64 {
    1_700_000_000_000_000_000 + step as i64
}

/// Applies `op` to the model; returns false where POSIX says the call fails.
fn model_apply(m: &mut Model, op: &Op, target: &Target) -> bool {
    match (op, target) {
        (Op::Create { .. }, Target::Path(p)) => {
            m.insert(p.clone(), Node::File(vec![])).is_none() || { false }
        }
        (Op::Mkdir { .. }, Target::Path(p)) => {
            if m.contains_key(p) {
                return false;
            }
            m.insert(p.clone(), Node::Dir);
            true
        }
        (
            Op::Write {
                offset, len, seed, ..
            },
            Target::Path(p),
        ) => {
            let Some(Node::File(d)) = m.get_mut(p) else {
                return false;
            };
            let end = *offset as usize + len;
            if d.len() < end {
                d.resize(end, 0);
            }
            d[*offset as usize..end].copy_from_slice(&pattern(*seed, *len));
            true
        }
        (Op::Append { len, seed, .. }, Target::Path(p)) => {
            let Some(Node::File(d)) = m.get_mut(p) else {
                return false;
            };
            d.extend_from_slice(&pattern(*seed, *len));
            true
        }
        (Op::Truncate { size, .. }, Target::Path(p)) => {
            let Some(Node::File(d)) = m.get_mut(p) else {
                return false;
            };
            d.resize(*size as usize, 0);
            true
        }
        (Op::Unlink { .. }, Target::Path(p)) => m.remove(p).is_some(),
        (Op::Rmdir { .. }, Target::Path(p)) => {
            let prefix = format!("{p}/");
            if m.keys().any(|k| k.starts_with(&prefix)) {
                return false;
            }
            m.remove(p).is_some()
        }
        (Op::Rename { .. }, Target::Move(from, to)) => {
            let prefix = format!("{from}/");
            if to == from {
                return true;
            }
            if to.starts_with(&prefix) {
                return false;
            }
            let src = m[from].clone();
            match (m.get(to), &src) {
                (Some(Node::Dir), Node::File(_)) | (Some(Node::File(_)), Node::Dir) => {
                    return false
                }
                (Some(Node::Dir), Node::Dir)
                    if m.keys().any(|k| k.starts_with(&format!("{to}/"))) =>
                {
                    return false
                }
                _ => {}
            }
            let moved: Vec<(String, Node)> = m
                .iter()
                .filter(|(k, _)| *k == from || k.starts_with(&prefix))
                .map(|(k, v)| (format!("{to}{}", &k[from.len()..]), v.clone()))
                .collect();
            m.retain(|k, _| k != from && !k.starts_with(&prefix));
            m.remove(to);
            m.extend(moved);
            true
        }
        _ => false,
    }
}

enum Target {
    Path(String),
    Move(String, String),
    None,
}

fn fs_apply(fs: &mut Fs<MemDevice>, op: &Op, target: &Target, step: usize) -> Result<(), Error> {
    let t = now(step);
    match (op, target) {
        (Op::Create { .. }, Target::Path(p)) => {
            let (parent, name) = fs.resolve_parent(p)?;
            let name = name.to_vec();
            fs.create(parent, &name, 0o644, 1000, 1000, t).map(|_| ())
        }
        (Op::Mkdir { .. }, Target::Path(p)) => {
            let (parent, name) = fs.resolve_parent(p)?;
            let name = name.to_vec();
            fs.mkdir(parent, &name, 0o755, 0, 0, t).map(|_| ())
        }
        (
            Op::Write {
                offset, len, seed, ..
            },
            Target::Path(p),
        ) => {
            let ino = fs.resolve(p)?;
            fs.write(ino, *offset, &pattern(*seed, *len), t)
        }
        (Op::Append { len, seed, .. }, Target::Path(p)) => {
            let ino = fs.resolve(p)?;
            let size = fs.stat(ino)?.size_bytes;
            fs.write(ino, size, &pattern(*seed, *len), t)
        }
        (Op::Truncate { size, .. }, Target::Path(p)) => {
            let ino = fs.resolve(p)?;
            fs.truncate(ino, *size, t)
        }
        (Op::Unlink { .. }, Target::Path(p)) => {
            let (parent, name) = fs.resolve_parent(p)?;
            let name = name.to_vec();
            fs.unlink(parent, &name, t)
        }
        (Op::Rmdir { .. }, Target::Path(p)) => {
            let (parent, name) = fs.resolve_parent(p)?;
            let name = name.to_vec();
            fs.rmdir(parent, &name, t)
        }
        (Op::Rename { .. }, Target::Move(from, to)) => {
            let (sp, sn) = fs.resolve_parent(from)?;
            let sn = sn.to_vec();
            let (dp, dn) = fs.resolve_parent(to)?;
            let dn = dn.to_vec();
            fs.rename(sp, &sn, dp, &dn, t)
        }
        _ => Ok(()),
    }
}

fn target(m: &Model, op: &Op) -> Target {
    let ds = dirs(m);
    let fsel = files(m);
    match op {
        Op::Create { dir, name } | Op::Mkdir { dir, name } => {
            Target::Path(path_of(&ds[dir % ds.len()], *name))
        }
        Op::Write { file, .. }
        | Op::Append { file, .. }
        | Op::Truncate { file, .. }
        | Op::Unlink { file } => pick(&fsel, *file).map_or(Target::None, Target::Path),
        Op::Rmdir { dir } => pick(&ds[1..], *dir).map_or(Target::None, Target::Path),
        Op::Rename { from, dir, name } => {
            let all: Vec<String> = m.keys().cloned().collect();
            match pick(&all, *from) {
                Some(f) => Target::Move(f, path_of(&ds[dir % ds.len()], *name)),
                None => Target::None,
            }
        }
        Op::Reopen => Target::None,
    }
}

fn run(ops: Vec<Op>, alloc: AllocPolicy, block: u64, device_bytes: u64) {
    let dev = formatted(device_bytes, block, alloc, 11);
    let mut fs = open_rw(dev);
    let mut model = Model::new();
    for (step, op) in ops.iter().enumerate() {
        if let Op::Reopen = op {
            let dev = fs.close().expect("close");
            assert_fsck_clean(&dev);
            fs = open_rw(dev);
            assert_eq!(
                short(&snapshot(&mut fs)),
                short(&model),
                "after reopen at step {step}"
            );
            assert_eq!(
                snapshot(&mut fs),
                model,
                "contents after reopen at step {step}"
            );
            continue;
        }
        let t = target(&model, op);
        if matches!(t, Target::None) {
            continue;
        }
        let mut next = model.clone();
        let ok = model_apply(&mut next, op, &t);
        match fs_apply(&mut fs, op, &t, step) {
            Ok(()) => {
                assert!(
                    ok,
                    "step {step}: {op:?} succeeded but the model says it fails"
                );
                model = next;
            }
            Err(Error::NoSpace { .. } | Error::MetadataFull | Error::NamesFull { .. }) => {
                // Fails cleanly: the model stays as it was.
            }
            Err(e) => assert!(!ok, "step {step}: {op:?} failed: {e}"),
        }
    }
    let dev = fs.close().expect("close");
    assert_fsck_clean(&dev);
    let mut fs = open_rw(dev);
    assert_eq!(snapshot(&mut fs), model, "final contents");
}

fn config() -> ProptestConfig {
    ProptestConfig {
        cases: if std::env::var("CI").is_ok() { 24 } else { 16 },
        max_shrink_iters: 200,
        ..ProptestConfig::default()
    }
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn zrr_64k(ops in proptest::collection::vec(op_strategy(64 << 10), 1..80)) {
        run(ops, AllocPolicy::Zrr, 64 << 10, 40 << 20);
    }
    #[test]
    fn contig_64k(ops in proptest::collection::vec(op_strategy(64 << 10), 1..80)) {
        run(ops, AllocPolicy::Contig, 64 << 10, 40 << 20);
    }
    #[test]
    fn seq_64k(ops in proptest::collection::vec(op_strategy(64 << 10), 1..80)) {
        run(ops, AllocPolicy::Seq, 64 << 10, 40 << 20);
    }
    #[test]
    fn zrr_4m(ops in proptest::collection::vec(op_strategy(4 << 20), 1..60)) {
        run(ops, AllocPolicy::Zrr, 4 << 20, 160 << 20);
    }
    #[test]
    fn contig_4m(ops in proptest::collection::vec(op_strategy(4 << 20), 1..60)) {
        run(ops, AllocPolicy::Contig, 4 << 20, 160 << 20);
    }
    #[test]
    fn seq_4m(ops in proptest::collection::vec(op_strategy(4 << 20), 1..60)) {
        run(ops, AllocPolicy::Seq, 4 << 20, 160 << 20);
    }
}
