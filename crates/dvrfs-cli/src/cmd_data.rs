//! Data commands: `put` and `get`, each a two-stage pipeline.
//!
//! Chunks are huge-page buffers (`dvrfs_io::HugeBuf`): an `O_DIRECT` transfer from
//! them reaches the device in a few large segments.
//!
//! `put`: a reader thread fills aligned chunks from the local file and sends them over
//! a bounded channel; the main thread starts a write of each chunk at a block-aligned
//! offset, keeping [`IO_IN_FLIGHT`] of them in flight. Aligned memory at aligned offsets lets the `O_DIRECT` device
//! write straight from the chunk (no bounce copy), and the local read of chunk k+1
//! overlaps the device write of chunk k. Chunks go back to the reader for reuse, so the
//! pipeline holds at most [`PIPELINE_CHUNKS`] chunks of memory whatever the file size.
//!
//! `get` is the mirror image: the main thread keeps [`IO_IN_FLIGHT`] chunk reads in
//! flight into aligned buffers (so the `O_DIRECT` reads land without a bounce copy) and
//! a writer thread writes the chunks, in file order, to the local file or stdout;
//! [`GET_BUFFERS`] chunks circulate between them.
//!
//! Both go through the runtime (`dvrfs-runtime`: the engine with io_uring, or its
//! thread pool), as best-effort traffic (no deadline).
//!
//! Failure: `put` checks free space before it creates anything; if anything fails later
//! it unlinks the partial file and commits, so no partial file is left behind. `get`
//! removes a partial local file. SIGINT, SIGTERM and SIGHUP are failures too: the copy
//! stops at the next chunk, cleans up the same way and exits with 128 + the signal
//! (a second signal kills at once, leaving what `fsck` and the journal make of it).

use std::collections::VecDeque;
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{channel, sync_channel, Receiver, Sender};
use std::thread;
use std::time::Instant;

use dvrfs_core::format::dir::Kind;
use dvrfs_core::meta::Ino;
use dvrfs_core::{Error as CoreError, IoBuf, Op, OpenMode, Output};
use dvrfs_io::HugeBuf;
use dvrfs_remote::Handle;
use dvrfs_runtime::{RuntimeError, Ticket};

use crate::args::{GetArgs, PutArgs};
use crate::error::{local_io, CliError, CliResult, FILE_PLACEHOLDER};
use crate::interrupt;
use crate::output::{human_bytes, mb_per_s, progress};
use crate::target::{open_handle, Access};

/// Bytes per pipeline chunk. Every data block size is a power of two from 64 KiB to
/// 1 GiB, so this is either a multiple of the block size (blocks up to 16 MiB) or a
/// divisor of it; in both cases every chunk starts 4 KiB-aligned, and a chunk that
/// covers whole blocks is written without a bounce copy.
pub const CHUNK_BYTES: usize = 16 << 20;
/// Device reads or writes kept in flight in the runtime.
pub const IO_IN_FLIGHT: usize = 2;
/// Chunks in flight: one being filled, one queued, [`IO_IN_FLIGHT`] being written.
pub const PIPELINE_CHUNKS: usize = 2 + IO_IN_FLIGHT;
/// Buffers `get` circulates: [`IO_IN_FLIGHT`] being read, one queued, one being
/// written out.
const GET_BUFFERS: usize = 2 + IO_IN_FLIGHT;
/// Owner id of the data commands' operations (put, get, scrub).
pub const OWNER: u32 = 0;
/// Full chunks that may wait in the channel.
const CHANNEL_DEPTH: usize = 1;

struct Chunk {
    offset_bytes: u64,
    buf: HugeBuf,
    len: usize,
}

/// A pipeline chunk: huge pages, so that a chunk's `O_DIRECT` transfer reaches the
/// device as a few large segments (see `dvrfs_io::HugeBuf`).
fn chunk_buf(len: usize) -> CliResult<HugeBuf> {
    HugeBuf::zeroed(len).ok_or_else(|| {
        CliError::new(format!("cannot map {len} bytes of memory for the copy"))
            .hint("free some memory and try again")
    })
}

/// Reads until `buf` is full or the reader is at its end.
pub(crate) fn read_full(r: &mut (impl Read + ?Sized), buf: &mut [u8]) -> io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

fn thread_died(what: &str) -> CliError {
    CliError::new(format!(
        "the {what} thread stopped unexpectedly (a dvrfs bug)"
    ))
}

/// Where `put` stores the file: the parent directory and the name in it.
fn put_destination(fs: &Handle, path: &str, local: &Path) -> CliResult<(Ino, Vec<u8>, String)> {
    match fs.resolve(path) {
        Ok(ino) if fs.stat(ino)?.kind == Kind::Dir => {
            let name = local.file_name().ok_or_else(|| {
                CliError::new(format!(
                    "{} has no file name to store it under",
                    local.display()
                ))
                .hint("give the destination path with a file name")
            })?;
            let shown = format!("{}/{}", path.trim_end_matches('/'), name.to_string_lossy());
            if fs.lookup(ino, name.as_bytes()).is_ok() {
                return Err(exists(&shown));
            }
            Ok((ino, name.as_bytes().to_vec(), shown))
        }
        Ok(_) => Err(exists(path)),
        Err(RuntimeError::Engine(CoreError::NotFound(_))) if path.ends_with('/') => {
            Err(CliError::new(format!("{path}: no such directory"))
                .hint("create it with `dvrfs mkdir -p`, or give a file name"))
        }
        Err(RuntimeError::Engine(CoreError::NotFound(_))) => {
            let (parent, name) = fs.resolve_parent(path)?;
            Ok((parent, name, path.to_string()))
        }
        Err(e) => Err(e.into()),
    }
}

fn exists(path: &str) -> CliError {
    CliError::new(format!("{path} exists; rm it first"))
        .hint("dvrfs put never overwrites: `dvrfs rm TARGET PATH`, then put again")
}

pub fn put(a: &PutArgs) -> CliResult<u8> {
    let local = a.local_file.as_path();
    let file = File::open(local).map_err(|e| local_io(local, "cannot open", e))?;
    let meta = file
        .metadata()
        .map_err(|e| local_io(local, "cannot stat", e))?;
    if !meta.is_file() {
        return Err(
            CliError::new(format!("{} is not a regular file", local.display()))
                .hint("put copies one regular file; create directories with `dvrfs mkdir`"),
        );
    }
    let size_bytes = meta.len();
    let rt = open_handle(&a.target, Access::Write)?;
    let (parent, name, shown) = put_destination(&rt, &a.path, local)?;
    let figures = rt.figures()?;
    let (bs, free_bytes) = (figures.data_block_bytes, figures.free_bytes);
    // The whole file must fit before anything is created.
    let need_bytes = size_bytes.div_ceil(bs) * bs;
    if need_bytes > free_bytes {
        return Err(CoreError::NoSpace {
            need_bytes,
            free_bytes,
        }
        .into());
    }
    let started = Instant::now();
    let create = Op::Create {
        parent,
        name: name.clone(),
        perm: meta.mode() & 0o7777,
        uid: meta.uid(),
        gid: meta.gid(),
    };
    let Output::Ino(ino) = rt.run(create, None, OWNER)? else {
        unreachable!("a create returns the new inode")
    };
    let pb = progress(size_bytes, true, "put");
    // SIGINT, SIGTERM and SIGHUP stop the copy at the next chunk instead of killing
    // the process, so that the clean-up runs.
    interrupt::catch();
    match put_pipeline(&rt, ino, file, local, &pb) {
        Ok(written) => {
            pb.finish_and_clear();
            rt.run(
                Op::CloseFile {
                    ino,
                    mode: OpenMode::Write,
                },
                None,
                OWNER,
            )?;
            rt.close()?;
            let elapsed = started.elapsed();
            eprintln!(
                "put: {} ({written} bytes) from {} to {shown} in {:.2} s ({:.1} MB/s)",
                human_bytes(written),
                local.display(),
                elapsed.as_secs_f64(),
                mb_per_s(written, elapsed)
            );
            Ok(0)
        }
        Err(e) => {
            pb.abandon();
            // Take the partial file away again; report the first failure, and any
            // failure of the clean-up as part of it.
            let _ = rt.run(
                Op::CloseFile {
                    ino,
                    mode: OpenMode::Write,
                },
                None,
                OWNER,
            );
            let cleanup = rt
                .run(Op::Unlink { parent, name }, None, OWNER)
                .and_then(|_| rt.run(Op::Fsync, Some(std::time::Instant::now()), OWNER))
                .and_then(|_| rt.close());
            match cleanup {
                Ok(_) => Err(e.hint(format!("nothing was stored: the partial file {shown} was removed"))),
                Err(c) => Err(e.hint(format!(
                    "removing the partial file {shown} failed too ({c}); run `dvrfs fsck --repair {}`",
                    a.target.display()
                ))),
            }
        }
    }
}

/// Streams `file` into inode `ino`; returns the bytes written.
fn put_pipeline(
    rt: &Handle,
    ino: Ino,
    mut file: File,
    local: &Path,
    pb: &indicatif::ProgressBar,
) -> CliResult<u64> {
    let (full_tx, full_rx) = sync_channel::<io::Result<Chunk>>(CHANNEL_DEPTH);
    let (free_tx, free_rx) = channel::<HugeBuf>();
    for _ in 0..PIPELINE_CHUNKS {
        // A send cannot fail: the receiver is alive in this scope.
        let _ = free_tx.send(chunk_buf(CHUNK_BYTES)?);
    }
    let reader = thread::Builder::new()
        .name("dvrfs-put-reader".into())
        .spawn(move || {
            let mut offset_bytes = 0u64;
            // Ends when the file does, on a read error, or when the main thread is gone.
            while let Ok(mut buf) = free_rx.recv() {
                let msg = read_full(&mut file, &mut buf).map(|len| Chunk {
                    offset_bytes,
                    buf,
                    len,
                });
                let last = !matches!(&msg, Ok(c) if c.len == CHUNK_BYTES);
                if matches!(&msg, Ok(c) if c.len == 0) {
                    break;
                }
                if let Ok(c) = &msg {
                    offset_bytes += c.len as u64;
                }
                if full_tx.send(msg).is_err() || last {
                    break;
                }
            }
        })
        .map_err(|e| CliError::new(format!("cannot start the reader thread: {e}")))?;
    let result = write_chunks(rt, ino, &full_rx, &free_tx, local, pb);
    // Unblock and collect the reader whatever happened.
    drop(full_rx);
    drop(free_tx);
    let joined = reader.join();
    let written = result?;
    joined.map_err(|_| thread_died("reader"))?;
    Ok(written)
}

fn write_chunks(
    rt: &Handle,
    ino: Ino,
    full_rx: &Receiver<io::Result<Chunk>>,
    free_tx: &Sender<HugeBuf>,
    local: &Path,
    pb: &indicatif::ProgressBar,
) -> CliResult<u64> {
    // (write, its length, whether its buffer is a pipeline chunk to hand back)
    let mut in_flight: VecDeque<(Ticket, usize, bool)> = VecDeque::new();
    let mut written = 0u64;
    let mut finish = |in_flight: &mut VecDeque<(Ticket, usize, bool)>| -> CliResult<()> {
        let (t, len, reuse) = in_flight.pop_front().expect("a write in flight");
        let out = rt.check(t, true)?.map(|d| d.output);
        if let (
            true,
            Some(Output::Write {
                data: IoBuf::External(b),
            }),
        ) = (reuse, out)
        {
            if let Ok(buf) = (b as Box<dyn std::any::Any>).downcast::<HugeBuf>() {
                let _ = free_tx.send(*buf);
            }
        }
        written += len as u64;
        pb.set_position(written);
        Ok(())
    };
    let result = (|| -> CliResult<()> {
        for msg in full_rx.iter() {
            interrupt::check("put")?;
            let chunk = msg.map_err(|e| local_io(local, "error reading", e))?;
            if in_flight.len() == IO_IN_FLIGHT {
                finish(&mut in_flight)?;
            }
            let len = chunk.len;
            // A full chunk goes to the engine as it is (no copy) and comes back for
            // reuse; the short last one is copied into a buffer of its own length.
            let (data, reuse) = if len == chunk.buf.len() {
                (IoBuf::External(Box::new(chunk.buf)), true)
            } else {
                let d = IoBuf::from_slice(&chunk.buf[..len]);
                let _ = free_tx.send(chunk.buf);
                (d, false)
            };
            let op = Op::Write {
                ino,
                offset: chunk.offset_bytes,
                data,
            };
            in_flight.push_back((rt.start(op, None, OWNER)?, len, reuse));
        }
        while !in_flight.is_empty() {
            finish(&mut in_flight)?;
        }
        interrupt::check("put")
    })();
    // On a failure, let the writes already started end before the clean-up.
    for (t, _, _) in in_flight.drain(..) {
        let _ = rt.check(t, true);
    }
    result.map(|()| written)
}

/// The check before a command writes the local file `p` (`get`, `play --output`): an
/// existing regular file is not overwritten unless `force` (as `put` refuses an
/// existing file in the volume); a device or a FIFO (`/dev/null`, a pipe) is written
/// to as it is.
pub(crate) fn refuse_overwrite(p: &Path, force: bool) -> CliResult<()> {
    if !force && std::fs::metadata(p).is_ok_and(|m| m.is_file()) {
        return Err(CliError::new(format!("{}: already exists", p.display()))
            .hint("remove it first, give another name, or add --force to overwrite it"));
    }
    Ok(())
}

/// The local file `p` a command writes, created, or truncated after
/// [`refuse_overwrite`] allowed it.
pub(crate) fn create_local(p: &Path, force: bool) -> CliResult<File> {
    refuse_overwrite(p, force)?;
    File::create(p).map_err(|e| local_io(p, "cannot create", e))
}

/// Where `get` writes: stdout, or a local file (created or truncated).
enum Sink {
    Stdout,
    File(PathBuf),
}

pub fn get(a: &GetArgs) -> CliResult<u8> {
    let rt = open_handle(&a.target, Access::Read)?;
    // The path as the command line gave it (any bytes), and as messages show it.
    let path = crate::ospath::display(&a.path);
    let ino = crate::ospath::resolve(
        &a.path,
        |p| Ok(rt.resolve(p)?),
        |parent, name| {
            crate::ospath::found(rt.lookup(parent, name), |e| {
                matches!(e, RuntimeError::Engine(CoreError::NotFound(_)))
            })
        },
    )?;
    let (st, lost) = (rt.stat(ino)?, rt.lost_ranges(ino)?);
    if st.kind != Kind::File {
        return Err(CliError::new(format!("{path} is not a regular file"))
            .hint("get copies one file; list a directory with `dvrfs ls`"));
    }
    let sink = if a.local_file.as_os_str() == "-" {
        Sink::Stdout
    } else if a.local_file.is_dir() {
        // The file's own name, bytes and all.
        let (_, name) = crate::ospath::split_parent(&a.path);
        Sink::File(a.local_file.join(std::ffi::OsStr::from_bytes(&name)))
    } else {
        Sink::File(a.local_file.clone())
    };
    if let Sink::File(p) = &sink {
        refuse_overwrite(p, a.force)?;
    }
    // Only a regular file this command writes is removed when it fails.
    let removable = match &sink {
        Sink::File(p) => !std::fs::metadata(p).is_ok_and(|m| !m.is_file()),
        Sink::Stdout => false,
    };
    let started = Instant::now();
    let mut out: Box<dyn Write + Send> = match &sink {
        Sink::Stdout => Box::new(io::stdout()),
        Sink::File(p) => Box::new(File::create(p).map_err(|e| local_io(p, "cannot create", e))?),
    };
    let pb = progress(st.size_bytes, true, "get");
    // SIGINT, SIGTERM and SIGHUP stop the copy at the next chunk instead of killing
    // the process, so that the clean-up runs.
    interrupt::catch();
    let mut holes = vec![];
    let result = if a.salvage {
        salvage(
            &rt,
            ino,
            st.size_bytes,
            &lost,
            &mut *out,
            &sink,
            &pb,
            &mut holes,
        )
    } else {
        get_pipeline(&rt, ino, st.size_bytes, &mut *out, &sink, &pb).map_err(|e| e.named(&path))
    }
    .and_then(|n| interrupt::check("get").map(|()| n));
    let result = result.and_then(|n| {
        rt.close()?;
        Ok(n)
    });
    match (&result, &sink) {
        (Ok(n), _) => {
            pb.finish_and_clear();
            let elapsed = started.elapsed();
            let to = match &sink {
                Sink::Stdout => "stdout".to_string(),
                Sink::File(p) => p.display().to_string(),
            };
            eprintln!(
                "get: {} ({n} bytes) from {} to {to} in {:.2} s ({:.1} MB/s)",
                human_bytes(*n),
                path,
                elapsed.as_secs_f64(),
                mb_per_s(*n, elapsed)
            );
            if !holes.is_empty() {
                let bytes: u64 = holes.iter().map(|h: &Hole| h.end - h.offset).sum();
                eprintln!(
                    "get: {} ({bytes} bytes) of {} could not be read and were written as zeros:",
                    human_bytes(bytes),
                    path
                );
                for h in &holes {
                    eprintln!("  bytes {} to {}: {}", h.offset, h.end, h.why);
                }
            }
        }
        (Err(_), Sink::File(p)) => {
            pb.abandon();
            if removable {
                let _ = std::fs::remove_file(p);
            }
        }
        (Err(_), Sink::Stdout) => pb.abandon(),
    }
    result.map(|_| {
        if holes.is_empty() {
            0
        } else {
            SALVAGED_WITH_HOLES
        }
    })
}

/// `get --salvage`'s exit status when some bytes could not be read.
const SALVAGED_WITH_HOLES: u8 = 3;

/// Bytes `get --salvage` could not read (written as zeros), and why.
struct Hole {
    offset: u64,
    end: u64,
    why: String,
}

/// Copies every readable byte of `ino` to `out`, one piece at a time: the file in
/// chunks, split where a lost range starts or ends. Lost ranges are written as zeros
/// without a read; a piece whose read fails is read again in 64 KiB steps, and the
/// steps that still fail are written as zeros. Each such range becomes a [`Hole`].
#[allow(clippy::too_many_arguments)]
fn salvage(
    rt: &Handle,
    ino: Ino,
    size_bytes: u64,
    lost: &[(u64, u64)],
    out: &mut (dyn Write + Send),
    sink: &Sink,
    pb: &indicatif::ProgressBar,
    holes: &mut Vec<Hole>,
) -> CliResult<u64> {
    const STEP: u64 = 64 << 10;
    let mut hole = |offset: u64, end: u64, why: String| match holes.last_mut() {
        Some(h) if h.end == offset && h.why == why => h.end = end,
        _ => holes.push(Hole { offset, end, why }),
    };
    let read = |offset: u64, len: u64| -> Result<Vec<u8>, dvrfs_runtime::RuntimeError> {
        let op = Op::Read {
            ino,
            offset,
            buf: IoBuf::zeroed(len as usize),
        };
        let t = rt.start(op, None, OWNER)?;
        match rt.check(t, true)?.map(|d| d.output) {
            Some(Output::Read { buf, bytes }) if bytes as u64 >= len => {
                Ok(buf.bytes().expect("a memory buffer")[..len as usize].to_vec())
            }
            _ => Err(dvrfs_runtime::RuntimeError::Io(io::Error::other(
                "short read",
            ))),
        }
    };
    // Piece boundaries: every chunk boundary and every edge of a lost range.
    let mut cuts: Vec<u64> = (0..size_bytes).step_by(CHUNK_BYTES).collect();
    cuts.extend(lost.iter().flat_map(|&(s, e)| [s, e]));
    cuts.push(size_bytes);
    cuts.sort_unstable();
    cuts.dedup();
    let mut copied = 0u64;
    for w in cuts.windows(2) {
        interrupt::check("get")?;
        let (s, e) = (w[0], w[1]);
        let bytes = if lost.iter().any(|&(ls, le)| ls <= s && e <= le) {
            hole(s, e, "lost to metadata damage".into());
            vec![0u8; (e - s) as usize]
        } else {
            match read(s, e - s) {
                Ok(b) => b,
                Err(_) => {
                    let mut b = Vec::with_capacity((e - s) as usize);
                    let mut o = s;
                    while o < e {
                        let n = STEP.min(e - o);
                        match read(o, n) {
                            Ok(part) => b.extend_from_slice(&part),
                            Err(dvrfs_runtime::RuntimeError::Engine(CoreError::Checksum {
                                ..
                            })) => {
                                hole(o, o + n, "data checksum mismatch".into());
                                b.resize(b.len() + n as usize, 0);
                            }
                            Err(err) => {
                                hole(o, o + n, err.to_string());
                                b.resize(b.len() + n as usize, 0);
                            }
                        }
                        o += n;
                    }
                    b
                }
            }
        };
        out.write_all(&bytes).map_err(|e| sink_io(sink, e))?;
        copied += bytes.len() as u64;
        pb.set_position(copied);
    }
    out.flush().map_err(|e| sink_io(sink, e))?;
    Ok(copied)
}

/// A read of the file's bytes `offset..offset + len` failed: a device error says
/// which bytes of the file it cost and that `--salvage` copies the rest (other errors
/// already say what they concern).
fn read_failed(e: RuntimeError, offset: u64, len: u64) -> CliError {
    let device = matches!(
        e,
        RuntimeError::Io(_) | RuntimeError::Engine(CoreError::Io { .. })
    );
    let err = CliError::from(e);
    if !device {
        return err;
    }
    err.reword(|m| {
        format!(
            "{FILE_PLACEHOLDER}: bytes {offset} to {} could not be read: {m}",
            offset + len
        )
    })
    .hint(
        "`dvrfs get --salvage` copies every byte that can be read and lists the rest; check the device and the kernel log (dmesg)",
    )
}

fn sink_io(sink: &Sink, e: io::Error) -> CliError {
    match sink {
        // `dvrfs get ... - | head`: the reader has what it wanted. Stop quietly and
        // successfully, as ripgrep and friends do (Rust ignores SIGPIPE, so the write
        // fails instead of the process being killed).
        Sink::Stdout if e.kind() == io::ErrorKind::BrokenPipe => CliError::silent(0),
        Sink::Stdout => CliError::new(format!("error writing to stdout: {e}")),
        Sink::File(p) => local_io(p, "error writing", e),
    }
}

/// Streams `size_bytes` of inode `ino` to `out`; returns the bytes copied.
///
/// This thread keeps [`IO_IN_FLIGHT`] chunk reads in flight in the runtime while a
/// writer thread writes the finished chunks, in order, to the sink; [`GET_BUFFERS`]
/// aligned buffers circulate between them.
fn get_pipeline(
    rt: &Handle,
    ino: Ino,
    size_bytes: u64,
    out: &mut (dyn Write + Send),
    sink: &Sink,
    pb: &indicatif::ProgressBar,
) -> CliResult<u64> {
    let chunk_bytes = (CHUNK_BYTES as u64).min(size_bytes.max(1)).div_ceil(4096) * 4096;
    let chunks = size_bytes.div_ceil(chunk_bytes);
    thread::scope(|scope| {
        let (full_tx, full_rx) = sync_channel::<(HugeBuf, usize)>(CHANNEL_DEPTH);
        let (free_tx, free_rx) = channel::<HugeBuf>();
        for _ in 0..GET_BUFFERS {
            let _ = free_tx.send(chunk_buf(chunk_bytes as usize)?);
        }
        let writer = scope.spawn(move || -> CliResult<u64> {
            let mut copied = 0u64;
            for (buf, len) in full_rx.iter() {
                out.write_all(&buf[..len]).map_err(|e| sink_io(sink, e))?;
                copied += len as u64;
                pb.set_position(copied);
                let _ = free_tx.send(buf);
            }
            out.flush().map_err(|e| sink_io(sink, e))?;
            Ok(copied)
        });
        let mut read_err = None;
        // (read, its offset, the bytes wanted)
        let mut in_flight: VecDeque<(Ticket, u64, usize)> = VecDeque::new();
        let mut k = 0;
        while k < chunks || !in_flight.is_empty() {
            if let Err(e) = interrupt::check("get") {
                read_err = Some(e);
                break;
            }
            // Start reads while buffers are free (waiting for one only when no read
            // is in flight).
            while k < chunks && in_flight.len() < IO_IN_FLIGHT {
                let buf = if in_flight.is_empty() {
                    free_rx.recv().ok()
                } else {
                    free_rx.try_recv().ok()
                };
                let Some(buf) = buf else { break };
                let offset_bytes = k * chunk_bytes;
                let want = (size_bytes - offset_bytes).min(chunk_bytes) as usize;
                let op = Op::Read {
                    ino,
                    offset: offset_bytes,
                    buf: IoBuf::External(Box::new(buf)),
                };
                match rt.start(op, None, OWNER) {
                    Ok(t) => in_flight.push_back((t, offset_bytes, want)),
                    Err(e) => {
                        read_err = Some(e.into());
                        break;
                    }
                }
                k += 1;
            }
            if read_err.is_some() {
                break;
            }
            let Some((t, offset_bytes, want)) = in_flight.pop_front() else {
                // No buffer came back: the writer has stopped (its error is reported).
                break;
            };
            match rt.check(t, true).map(|d| d.map(|d| d.output)) {
                Ok(Some(Output::Read {
                    buf: IoBuf::External(b),
                    bytes,
                })) if bytes >= want => {
                    let Ok(buf) = (b as Box<dyn std::any::Any>).downcast::<HugeBuf>() else {
                        read_err = Some(CliError::new(
                            "a read came back in another buffer (a dvrfs bug)",
                        ));
                        break;
                    };
                    if full_tx.send((*buf, want)).is_err() {
                        break;
                    }
                }
                Ok(o) => {
                    let n = match o {
                        Some(Output::Read { bytes, .. }) => bytes,
                        _ => 0,
                    };
                    read_err = Some(CliError::new(format!(
                        "short read of inode {ino} at byte {offset_bytes}: {n} of {want} bytes (a dvrfs bug)"
                    )));
                    break;
                }
                Err(e) => {
                    read_err = Some(read_failed(e, offset_bytes, want as u64));
                    break;
                }
            }
        }
        // Reads still running end before their buffers go.
        for (t, _, _) in in_flight.drain(..) {
            let _ = rt.check(t, true);
        }
        drop(full_tx);
        let copied = writer.join().map_err(|_| thread_died("writer"))??;
        match read_err {
            Some(e) => Err(e),
            None => Ok(copied),
        }
    })
}
