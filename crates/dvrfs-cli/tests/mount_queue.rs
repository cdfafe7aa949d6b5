//! `dvrfs mount` with a full queue: a request the runtime or the engine has no room
//! for waits in the daemon until a completion frees room, and never reaches the
//! program as `EAGAIN` (`cp` and `ffmpeg` do not retry it). Needs root and
//! /dev/fuse (the test says SKIP with the reason when they are missing).

mod common;

use common::*;
use std::fs::{self, File};
use std::io::Write;

/// Writers at once, and the runtime's ticket bound (hidden `--max-tickets`): far
/// fewer operations may run than writers want to, so starts must wait
/// (docs/mount.md, "When the queue is full").
const WRITERS: usize = 12;
const MAX_TICKETS: &str = "6";
/// Each writer's file: several 4 MiB chunks, written 256 KiB at a time.
const FILE_BYTES: usize = 12 << 20;

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| ((i / 7) as u8).wrapping_mul(13) ^ seed ^ (i as u8))
        .collect()
}

#[test]
fn many_writers_on_a_full_queue_wait_for_room_and_never_see_eagain() {
    need_fuse!();
    let dir = tempdir();
    let img = dir.path().join("fs.img");
    mkfs(&img, "1G", &[]);
    // On an emulated hard disk each command takes milliseconds, so the writers'
    // operations pile up past the bound whatever the host's speed (on the image's
    // own speed a fast host could serve them before six were ever running).
    let m = Mount::new(
        dir.path(),
        &img,
        &["--max-tickets", MAX_TICKETS, "--device-model", "avfs-250g"],
    );
    let writers: Vec<_> = (0..WRITERS)
        .map(|k| {
            let path = m.path(&format!("w{k}.ts"));
            std::thread::spawn(move || -> std::io::Result<()> {
                let data = pattern(FILE_BYTES, k as u8);
                let mut f = File::create(&path)?;
                for c in data.chunks(256 << 10) {
                    f.write_all(c)?;
                }
                f.sync_all()
            })
        })
        .collect();
    for (k, w) in writers.into_iter().enumerate() {
        if let Err(e) = w.join().unwrap() {
            panic!("writer {k}: {e} (errno {:?})", e.raw_os_error());
        }
    }
    for k in 0..WRITERS {
        let back = fs::read(m.path(&format!("w{k}.ts"))).unwrap();
        assert!(
            back == pattern(FILE_BYTES, k as u8),
            "file w{k}.ts reads back differently ({} bytes)",
            back.len()
        );
    }
    let log_path = m.log.clone();
    m.unmount();
    let log = fs::read_to_string(&log_path).unwrap();
    // The bound was reached: some requests waited (else the test proves nothing).
    assert!(
        log.contains("requests waited for room in the queue"),
        "no request waited for room with --max-tickets {MAX_TICKETS}: {log}"
    );
    assert_clean(&img);
}
