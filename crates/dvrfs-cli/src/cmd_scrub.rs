//! `dvrfs scrub`: reads every byte of every file through the engine, which checks each
//! granule against its data checksum, and reports what fails. Nothing is changed.
//!
//! Files are read in [`CHUNK_BYTES`] pieces with [`IO_IN_FLIGHT`] in flight (the
//! disk streams as it does for `get`); a piece that fails is read again one checksum
//! granule at a time, so the report names exactly the granules that fail and every
//! other byte is still checked. Ranges a damaged block map lost are not read.

use std::collections::VecDeque;
use std::time::Instant;

use dvrfs_core::format::dir::Kind;
use dvrfs_core::meta::Ino;
use dvrfs_core::{Error as CoreError, IoBuf, Op, Output, Volume};
use dvrfs_runtime::{Runtime, RuntimeError, Ticket};
use serde_json::json;

use crate::args::ScrubArgs;
use crate::cmd_data::{CHUNK_BYTES, IO_IN_FLIGHT, OWNER};
use crate::error::{CliError, CliResult};
use crate::output::{human_bytes, mb_per_s, print_json, progress};
use crate::target::{open_runtime, Access};

/// Exit status when scrub found damage (as `get --salvage` when it wrote holes).
const DAMAGE_FOUND: u8 = 3;

/// One regular file to read.
struct FileToScrub {
    path: String,
    ino: Ino,
    size: u64,
    /// Ranges lost to metadata damage: not read, reported.
    lost: Vec<(u64, u64)>,
    checked: u64,
    unchecked: u64,
}

/// A range that failed, and why.
struct Bad {
    path: String,
    offset: u64,
    end: u64,
    why: String,
}

/// Every regular file under the root, in path order.
fn files(v: &Volume) -> Result<Vec<FileToScrub>, CoreError> {
    let mut out = vec![];
    let mut stack = vec![(String::new(), v.root())];
    while let Some((dir, ino)) = stack.pop() {
        for (name, child, kind) in v.readdir(ino)? {
            let path = format!("{dir}/{}", String::from_utf8_lossy(&name));
            match kind {
                Kind::Dir => stack.push((path, child)),
                Kind::File => {
                    let (checked, unchecked) = v.checked_bytes(child)?;
                    out.push(FileToScrub {
                        path,
                        ino: child,
                        size: v.stat(child)?.size_bytes,
                        lost: v.lost_ranges(child)?,
                        checked,
                        unchecked,
                    });
                }
                Kind::Symlink => {}
            }
        }
    }
    out.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(out)
}

/// Read buffers, reused (a fresh 16 MiB buffer per read costs its page faults).
type Pool = Vec<IoBuf>;

fn start_read(
    rt: &Runtime,
    pool: &mut Pool,
    ino: Ino,
    offset: u64,
    len: u64,
) -> Result<Ticket, RuntimeError> {
    let buf = match pool.iter().position(|b| b.len() == len as usize) {
        Some(i) => pool.swap_remove(i),
        None => IoBuf::zeroed(len as usize),
    };
    rt.start(Op::Read { ino, offset, buf }, None, OWNER)
}

/// Waits for a read: `Ok` when every byte came back checked.
fn finish_read(rt: &Runtime, pool: &mut Pool, t: Ticket, len: u64) -> Result<(), String> {
    match rt.check(t, true) {
        Ok(Some(d)) => match d.output {
            Output::Read { bytes, buf } if bytes as u64 >= len => {
                if pool.len() < 2 * IO_IN_FLIGHT {
                    pool.push(buf);
                }
                Ok(())
            }
            _ => Err(format!("short read ({len} bytes wanted)")),
        },
        Ok(None) => Err("the read never finished".into()),
        Err(RuntimeError::Engine(CoreError::Checksum { .. })) => {
            Err("data checksum mismatch".into())
        }
        Err(e) => Err(e.to_string()),
    }
}

pub fn scrub(a: &ScrubArgs) -> CliResult<u8> {
    let rt = open_runtime(&a.target, Access::Read)?;
    let granule = rt.query(|v| v.sum_granule_bytes())?;
    let list = rt.query(files)??;
    let total: u64 = list.iter().map(|f| f.size).sum();
    let pb = progress(total, true, "scrub");
    let started = Instant::now();
    let mut bad: Vec<Bad> = vec![];
    let mut lost: Vec<Bad> = vec![];
    let mut done = 0u64;
    // The granule-by-granule retry of a failed piece (64 KiB without checksums).
    let step = granule.unwrap_or(64 << 10);
    let mut pool = Pool::new();
    for f in &list {
        // Pieces: chunk boundaries and the edges of lost ranges.
        let mut cuts: Vec<u64> = (0..f.size).step_by(CHUNK_BYTES).collect();
        cuts.extend(f.lost.iter().flat_map(|&(s, e)| [s, e]));
        cuts.push(f.size);
        cuts.sort_unstable();
        cuts.dedup();
        let mut pieces = VecDeque::new();
        for w in cuts.windows(2) {
            let (s, e) = (w[0], w[1]);
            if f.lost.iter().any(|&(ls, le)| ls <= s && e <= le) {
                lost.push(Bad {
                    path: f.path.clone(),
                    offset: s,
                    end: e,
                    why: "lost to metadata damage".into(),
                });
                done += e - s;
            } else {
                pieces.push_back((s, e));
            }
        }
        let mut in_flight: VecDeque<(Ticket, u64, u64)> = VecDeque::new();
        while !pieces.is_empty() || !in_flight.is_empty() {
            while in_flight.len() < IO_IN_FLIGHT {
                let Some((s, e)) = pieces.pop_front() else {
                    break;
                };
                in_flight.push_back((start_read(&rt, &mut pool, f.ino, s, e - s)?, s, e));
            }
            let Some((t, s, e)) = in_flight.pop_front() else {
                break;
            };
            if finish_read(&rt, &mut pool, t, e - s).is_err() {
                // Again, one granule at a time: name exactly what fails.
                let mut o = s;
                while o < e {
                    let n = (step - o % step).min(e - o);
                    let t = start_read(&rt, &mut pool, f.ino, o, n)?;
                    if let Err(why) = finish_read(&rt, &mut pool, t, n) {
                        match bad.last_mut() {
                            Some(b) if b.path == f.path && b.end == o && b.why == why => {
                                b.end = o + n
                            }
                            _ => bad.push(Bad {
                                path: f.path.clone(),
                                offset: o,
                                end: o + n,
                                why,
                            }),
                        }
                    }
                    o += n;
                }
            }
            done += e - s;
            pb.set_position(done);
        }
    }
    pb.finish_and_clear();
    rt.close()?;
    let elapsed = started.elapsed();
    let checked: u64 = list.iter().map(|f| f.checked).sum();
    let unchecked: u64 = list.iter().map(|f| f.unchecked).sum();
    let code = if bad.is_empty() && lost.is_empty() {
        0
    } else {
        DAMAGE_FOUND
    };
    let ranges = |v: &[Bad]| -> Vec<serde_json::Value> {
        v.iter()
            .map(|b| json!({"path": b.path, "offset": b.offset, "end": b.end, "error": b.why}))
            .collect()
    };
    if a.json {
        print_json(&json!({
            "target": a.target.display().to_string(),
            "checksums": granule.is_some(),
            "granule_bytes": granule.unwrap_or(0),
            "files": list.len(),
            "bytes": total,
            "bytes_checked": checked,
            "bytes_unchecked": unchecked,
            "seconds": elapsed.as_secs_f64(),
            "mb_per_s": mb_per_s(total, elapsed),
            "damaged": ranges(&bad),
            "lost": ranges(&lost),
            "exit_code": code,
        }));
        return Ok(code);
    }
    outln!(
        "scrub: {} files, {} read in {:.2} s ({:.1} MB/s)",
        list.len(),
        human_bytes(total),
        elapsed.as_secs_f64(),
        mb_per_s(total, elapsed)
    );
    match granule {
        Some(g) => outln!(
            "  checked against data checksums: {} ({checked} bytes, {} granules); without a checksum: {} ({unchecked} bytes)",
            human_bytes(checked),
            human_bytes(g),
            human_bytes(unchecked)
        ),
        None => outln!(
            "  this volume has no data checksums (made before them, or with --checksum-granule off): only read errors can be found"
        ),
    }
    if code == 0 {
        outln!("scrub: no damage found");
        return Ok(0);
    }
    for b in bad.iter().chain(&lost) {
        outln!("  {}: bytes {} to {}: {}", b.path, b.offset, b.end, b.why);
    }
    let bytes: u64 = bad.iter().chain(&lost).map(|b| b.end - b.offset).sum();
    Err(CliError::new(format!(
        "{} ({bytes} bytes) in {} place(s) cannot be read back as written",
        human_bytes(bytes),
        bad.len() + lost.len()
    ))
    .hint(format!(
        "copy what is readable with `dvrfs get --salvage {} PATH LOCAL` (failing bytes come out as zeros); a file rewritten in place when the power failed also fails here",
        a.target.display()
    ))
    .exit_code(DAMAGE_FOUND))
}
