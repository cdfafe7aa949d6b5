//! Structure-aware damage, bounded (issue 9): metadata blocks of a populated volume
//! get fields rewritten (random bytes, words, all-ones, small numbers that look like
//! block numbers) with both copies resealed, so no checksum sees it. For every case:
//! a read-only open and a walk reading every file, `fsck --repair`, and a second
//! `fsck`. Oracle: no panic, and a repair that does not give up leaves a volume the
//! second fsck finds clean (one pass). The one thing repair leaves alone, by design
//! (docs/commands.md), is a block two files claim. A seeded xorshift picks the cases,
//! so a failure names its iteration and reproduces; `FUZZ_ITERS` runs more.

mod common;

use common::*;
use dvrfs_core::device::MemDevice;
use dvrfs_core::format::superblock::{AllocPolicy, Superblock};
use dvrfs_core::format::{parse_header, seal_block, META_BLOCK_BYTES};
use dvrfs_core::fs::fsck::fsck;
use dvrfs_core::{Fs, OpenOptions};

const MB: u64 = META_BLOCK_BYTES as u64;

fn populated() -> MemDevice {
    let dev = formatted(40 << 20, 64 << 10, AllocPolicy::Zrr, 9);
    let mut fs = open_rw(dev);
    let root = fs.root();
    let d = fs.mkdir(root, b"cam1", 0o755, 0, 0, 1).unwrap();
    for i in 0..20 {
        let f = fs
            .create(d, format!("seg{i:03}.ts").as_bytes(), 0o644, 0, 0, 2)
            .unwrap();
        fs.write(f, 0, &pattern(i, 5000 + i as usize * 70000), 3)
            .unwrap();
    }
    let big = fs.create(root, b"big.ts", 0o644, 0, 0, 3).unwrap();
    fs.write(big, 0, &pattern(99, 30 * (64 << 10) + 123), 4)
        .unwrap();
    fs.symlink(root, b"l", b"/cam1/seg001.ts", 0, 0, 5).unwrap();
    fs.close().unwrap()
}

fn walk(fs: &mut Fs<MemDevice>, ino: u32, depth: u32) {
    if depth > 10 {
        return;
    }
    let Ok(list) = fs.readdir(ino) else { return };
    for (_, child, kind) in list {
        if kind == dvrfs_core::format::dir::Kind::Dir {
            walk(fs, child, depth + 1);
        } else if let Ok(st) = fs.stat(child) {
            let mut buf = vec![0u8; (st.size_bytes.min(4 << 20)) as usize + 1];
            let _ = fs.read(child, 0, &mut buf);
        }
    }
}

#[test]
fn damaged_metadata_never_panics_and_repairs_in_one_pass() {
    let base = populated();
    let mut b = vec![0u8; META_BLOCK_BYTES];
    base.peek(0, &mut b);
    let sb = Superblock::decode(&b).unwrap();
    let mut blocks = vec![];
    for n in 1..sb.dynamic_start + sb.dynamic_blocks {
        base.peek(n * MB, &mut b);
        if parse_header(&b).is_ok() && !sb.in_journal(n) {
            blocks.push(n);
        }
    }
    let mut seed = 12345u64;
    let mut rnd = || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let iters: u64 = std::env::var("FUZZ_ITERS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(2000);
    let mut panics = 0;
    let mut twopass = 0;
    let mut gaveup = 0;
    for it in 0..iters {
        let mut dev = base.clone();
        let n = blocks[(rnd() % blocks.len() as u64) as usize];
        let edits = 1 + rnd() % 3;
        let mut img = vec![0u8; META_BLOCK_BYTES];
        dev.peek(n * MB, &mut img);
        let h = parse_header(&img).unwrap();
        for _ in 0..edits {
            let at = 48 + (rnd() % (META_BLOCK_BYTES as u64 - 56)) as usize;
            match rnd() % 4 {
                0 => img[at] = rnd() as u8,
                1 => img[at..at + 4].copy_from_slice(&(rnd() as u32).to_le_bytes()),
                2 => img[at..at + 4].copy_from_slice(&[0xFF; 4]),
                _ => img[at..at + 8].copy_from_slice(&(rnd() % 100000).to_le_bytes()),
            }
        }
        seal_block(&mut img, &h);
        dev.poke(n * MB, &img);
        dev.poke(sb.backup_offset(n), &img);
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            if let Ok(mut fs) = Fs::open(dev.clone(), OpenOptions::read_only()) {
                let root = fs.root();
                walk(&mut fs, root, 0);
            }
            let (r, fixed) = fsck(dev.clone(), true, &mut |_, _| {}).unwrap();
            match fixed {
                Some(f) if r.exit_code() != 4 => {
                    let (again, _) = fsck(f, false, &mut |_, _| {}).unwrap();
                    if again.exit_code() != 0 {
                        eprintln!(
                            "iter {it} block {n}: two passes: first {:?} then {:?}",
                            r.errors, again.errors
                        );
                        return 1;
                    }
                    0
                }
                _ => {
                    let shared = r
                        .errors
                        .iter()
                        .any(|e| e.contains("uses blocks that another file uses too"));
                    eprintln!("iter {it} block {n}: repair gave up: {:?}", r.errors);
                    if shared {
                        2
                    } else {
                        3
                    }
                }
            }
        }));
        match r {
            Err(_) => {
                panics += 1;
                eprintln!("iter {it} block {n}: PANIC");
            }
            Ok(1) => twopass += 1,
            Ok(2) => gaveup += 1,
            Ok(3) => twopass += 1,
            _ => {}
        }
    }
    eprintln!(
        "iters {iters}: panics {panics}, two-pass {twopass}, gave up {gaveup} (shared blocks)"
    );
    assert_eq!(panics, 0, "see the iterations above");
    assert_eq!(twopass, 0, "see the iterations above");
}
