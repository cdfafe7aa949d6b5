//! `record` (and what `play`, `cmd_play.rs`, shares with it): one stream reservation
//! each, through the runtime.
//!
//! `record` opens a write stream on a new file (admission; the recording's size is
//! held at open, from `--size`, `--duration` times the rate, or the input file's
//! size), feeds it from a file or stdin, and the engine writes behind at the rate.
//! Once a second, whether or not input came, it makes what was written durable
//! (`fsync`) and says how much is: on the progress line on a terminal, else as a
//! `record: N bytes durable, M accepted` line on stderr (for logs and supervisors).
//! SIGINT, SIGTERM and SIGHUP stop it cleanly, even while the input is quiet: it stops
//! taking input, closes the stream (which writes the partial last request), commits,
//! prints the report saying which signal, and exits with 128 + the signal (see
//! [`crate::interrupt`] for how a blocked read is cut short). `play` (`cmd_play.rs`)
//! opens a read stream on a file or a stream directory's chunks and copies what the
//! engine prefetches to a file or stdout, at the rate.
//!
//! Both print what they reserved and how the stream fared: requests, late requests
//! (deadline misses), stalls, the smallest margin. A late request never loses data
//! (a late write is still written, a late prefetch still delivered), but the command
//! says so and exits with status 1.

use std::fs::File;
use std::io::{self, Read};
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use clap::Args;
use dvrfs_core::disk::Admission;
use dvrfs_core::engine::{StreamDir, StreamInfo, StreamSpec, StreamStats};
use dvrfs_core::format::dir::Kind;
use dvrfs_core::sched::SchedSettings;
use dvrfs_core::{Error as CoreError, IoBuf, Op, Output};
use dvrfs_remote::Handle;
use dvrfs_runtime::Runtime;
use serde_json::json;

use crate::cmd_sim::load_disk;
use crate::error::{local_io, CliError, CliResult};
use crate::interrupt;
use crate::output::{human_bytes, progress};
use crate::target::{open_device, Access};

/// Admission bandwidth of a device with no model and no `--bandwidth`.
pub const DEFAULT_BANDWIDTH_BPS: f64 = 800e6;
/// Owner id of the streams' own operations (the open, the close, the fsyncs).
const OWNER: u32 = 0;
/// How often `record` makes what was written durable and says so.
const SYNC_INTERVAL: Duration = Duration::from_secs(1);

/// What a stream asks for, and what admission checks it against.
#[derive(Args, Debug)]
pub struct StreamArgs {
    /// The stream's rate, bits per second with K/M/G (decimal), 8K to 100G, e.g. 19.39M
    #[arg(long)]
    pub rate: String,
    /// Bytes per disk request (a multiple of 4K)
    #[arg(long, default_value = "512K")]
    pub request: String,
    /// The stream's buffer (default: chosen by admission, at least one second of slack)
    #[arg(long)]
    pub buffer: Option<String>,
    /// Emulate this hard disk (a built-in model name or a JSON file): real data, each
    /// command completed when the model's disk would finish it; admission uses the model
    #[arg(long)]
    pub device_model: Option<String>,
    /// Admission bandwidth of a device without a model (an SSD, an image), bits per
    /// second, e.g. 800M (the default)
    #[arg(long)]
    pub bandwidth: Option<String>,
    /// Print one JSON object on stdout
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug)]
pub struct RecordArgs {
    pub target: PathBuf,
    /// The new file to record into; with --chunk, or when it is an existing
    /// directory, the stream directory the chunks go into (made if missing)
    pub path: String,
    /// Record into a stream directory as chunks named by their UTC start, each cut at
    /// the first keyframe after this much (a duration: 10s, 1m; or a size: 64M) and
    /// starting with the PAT/PMT or init segment, so that each plays on its own; 1m
    /// when PATH is an existing directory
    #[arg(long)]
    pub chunk: Option<String>,
    /// A time-shift ring: keep only the last RING of the recording (a duration: 2m,
    /// 30m; or a size: 20G), deleting the oldest chunk as it falls out (sets the
    /// stream directory's policy to max-age or max-size RING; records in chunks, a
    /// twelfth of a time ring each unless --chunk says)
    #[arg(long)]
    pub ring: Option<String>,
    /// Where the stream comes from: a local file or `-` (stdin)
    #[arg(long, default_value = "-")]
    pub input: PathBuf,
    /// Record this long (at the rate), up to 8760h; with neither --duration nor --size, until the
    /// input ends
    #[arg(long)]
    pub duration: Option<String>,
    /// Record this many bytes (K/M/G/T)
    #[arg(long, allow_hyphen_values = true)]
    pub size: Option<String>,
    /// The longest an accepted byte may stay off the disk before it is committed
    /// (default: the volume's commit interval; longer spares the disk short requests
    /// of a slow stream)
    #[arg(long)]
    pub durable: Option<String>,
    #[command(flatten)]
    pub stream: StreamArgs,
}

pub(crate) struct Setup {
    pub(crate) rt: Handle,
    pub(crate) spec: StreamSpec,
}

/// The emulated disk (`--device-model`) and what stream admission checks against: the
/// model, else `--bandwidth`, else [`DEFAULT_BANDWIDTH_BPS`]. Shared by `record`,
/// `play` and `mount`.
pub fn admission(
    device_model: Option<&str>,
    bandwidth: Option<&str>,
) -> CliResult<(Option<dvrfs_core::disk::DiskModel>, Admission)> {
    let model = device_model.map(load_disk).transpose()?;
    let be_share = SchedSettings::default().be_share;
    let admission = match (&model, bandwidth) {
        (Some(m), None) => Admission::from_model(m, be_share),
        (None, Some(b)) => {
            Admission::bandwidth(crate::limits::bandwidth("--bandwidth", b)? / 8.0, be_share)
        }
        (None, None) => Admission::bandwidth(DEFAULT_BANDWIDTH_BPS / 8.0, be_share),
        (Some(_), Some(_)) => {
            return Err(CliError::usage(
                "--device-model and --bandwidth both say what admission checks against",
                "give one: a hard disk's model, or the bandwidth of a device without one",
            ))
        }
    };
    Ok((model, admission))
}

/// Opens the runtime with the stream flags' device model or bandwidth.
pub(crate) fn open(
    target: &Path,
    access: Access,
    a: &StreamArgs,
    dir: StreamDir,
) -> CliResult<Setup> {
    let rate_bps = crate::limits::stream_rate("--rate", &a.rate)?;
    let request_bytes = crate::limits::stream_request(
        "--request",
        &a.request,
        "the default, 512K, suits recordings and playbacks",
    )?;
    let buffer_bytes = a
        .buffer
        .as_deref()
        .map(|b| crate::limits::stream_buffer(b, request_bytes))
        .transpose()?;
    let (model, admission) = admission(a.device_model.as_deref(), a.bandwidth.as_deref())?;
    let rt = match crate::target::daemon(target)? {
        // Mounted: the stream is the daemon's engine's, admitted beside the mount's
        // own streams against what the mount was given.
        Some(c) => {
            if a.device_model.is_some() || a.bandwidth.is_some() {
                eprintln!(
                    "dvrfs: note: {} is mounted: the daemon's device and admission apply, not --device-model or --bandwidth",
                    target.display()
                );
            }
            Handle::Remote(c)
        }
        None => {
            let dev = open_device(target, access)?;
            let opts = dvrfs_runtime::Options {
                writable: access == Access::Write,
                device_model: model,
                admission: Some(admission),
                ..dvrfs_runtime::Options::default()
            };
            Handle::Local(Runtime::with_device(dev, opts)?)
        }
    };
    Ok(Setup {
        rt,
        spec: StreamSpec {
            idle: false,
            dir,
            rate_bps,
            request_bytes,
            buffer_bytes,
            reserve_bytes: 0,
            start_bytes: 0,
            durable_ns: None,
        },
    })
}

/// The way out of a refusal: a recording whose requests its durability interval
/// makes due gains nothing from a larger buffer (the engine's message says so).
fn refused_hint(e: CliError, interval_bound: bool) -> CliError {
    if interval_bound {
        e.hint("ask for a lower --rate or a longer --durable, or end another stream first")
    } else {
        e.hint("ask for a lower --rate or a larger --buffer, or end another stream first")
    }
}

pub(crate) fn open_stream(rt: &Handle, ino: u32, spec: StreamSpec) -> CliResult<StreamInfo> {
    match rt.open_stream(ino, spec) {
        Ok(i) => Ok(i),
        Err(dvrfs_runtime::RuntimeError::Engine(e @ CoreError::Refused(_)))
            if e.to_string().contains(dvrfs_core::engine::RECORDING_BUSY) =>
        {
            Err(CliError::from(e).hint(
                "another program is recording into this file: wait until it ends, or record into another file",
            ))
        }
        Err(dvrfs_runtime::RuntimeError::Engine(e @ CoreError::Refused(_))) => {
            let interval_bound = e.to_string().contains("longer durability interval");
            Err(refused_hint(CliError::from(e), interval_bound))
        }
        Err(e) => Err(e.into()),
    }
}

pub(crate) fn status_line(
    what: &str,
    bytes: u64,
    started: Instant,
    st: &StreamStats,
    extra: &str,
) -> String {
    format!(
        "{what}: {} in {:.1} s, {} requests, {} late, {} stalls{extra}",
        human_bytes(bytes),
        started.elapsed().as_secs_f64(),
        st.requests,
        st.late,
        st.stalls
    )
}

/// What the final report names.
pub(crate) struct Ran<'a> {
    pub(crate) what: &'a str,
    pub(crate) path: &'a str,
    /// A chunked recording: the chunks it made; a stream played: the chunks it went through.
    pub(crate) chunks: Option<u64>,
    pub(crate) admission: &'a str,
    pub(crate) json: bool,
    /// The signal that stopped it early, if one did.
    pub(crate) interrupted: Option<libc::c_int>,
    /// A stream directory played: the times it fell behind what retention keeps and
    /// went on at the oldest chunk left.
    pub(crate) overruns: Option<u64>,
}

pub(crate) fn report(
    r: Ran<'_>,
    info: &StreamInfo,
    st: &StreamStats,
    bytes: u64,
    elapsed: Duration,
) -> CliResult<u8> {
    let Ran {
        what,
        path,
        chunks,
        admission,
        json,
        interrupted,
        overruns,
    } = r;
    let min_margin_ms = st.min_margin_ns.map(|m| m as f64 / 1e6);
    if json {
        let v = json!({
            "command": what,
            "path": path,
            "direction": info.dir.name(),
            "rate_bps": info.rate_bytes_per_s * 8.0,
            "request_bytes": info.request_bytes,
            "buffer_bytes": info.buffer_bytes,
            "depth": info.depth,
            "slack_ms": info.slack_ns as f64 / 1e6,
            "reserved_bytes": info.reserved_bytes,
            "admission": admission,
            "load": info.load,
            "bytes": bytes,
            "duration_s": elapsed.as_secs_f64(),
            "rt_requests": st.requests,
            "deadline_misses": st.late,
            "stalls": st.stalls,
            "min_margin_ms": min_margin_ms,
            "interrupted": interrupted.map(interrupt::name),
            "chunks": chunks,
            "overruns": overruns,
        });
        outln!("{v}");
    } else {
        eprintln!(
            "{what}: {path}: {} in {:.1} s at {:.2} Mbit/s reserved ({} KiB requests, {} buffer, {:.0} ms slack; admission on {admission}, load {:.0}%)",
            human_bytes(bytes),
            elapsed.as_secs_f64(),
            info.rate_bytes_per_s * 8.0 / 1e6,
            info.request_bytes / 1024,
            human_bytes(info.buffer_bytes),
            info.slack_ns as f64 / 1e6,
            info.load * 100.0
        );
        if let Some(n) = chunks {
            eprintln!("{what}: {n} chunks in {path}");
        }
        if let Some(n) = overruns.filter(|&n| n > 0) {
            eprintln!(
                "{what}: {n} overrun(s): chunks deleted before they were played were skipped"
            );
        }
        eprintln!(
            "{what}: {} disk requests, {} late, {} stalls, smallest margin {}",
            st.requests,
            st.late,
            st.stalls,
            min_margin_ms.map_or("-".to_string(), |m| format!("{m:.0} ms"))
        );
        if let Some(sig) = interrupted {
            let kept = match bytes {
                0 => "nothing had been accepted".to_string(),
                _ => format!(
                    "all {} accepted were written and committed",
                    human_bytes(bytes)
                ),
            };
            eprintln!(
                "{what}: interrupted by {}: stopped taking input; {kept}",
                interrupt::name(sig)
            );
        }
    }
    if st.late > 0 || st.stalls > 0 {
        let late = CliError::new(format!(
            "{what}: {} of {} requests missed their deadline and the application waited {} times; every byte was still {}",
            st.late,
            st.requests,
            st.stalls,
            if what == "record" { "written" } else { "delivered" }
        ))
        .hint("the device is slower than admission assumed: give its --device-model, a lower --bandwidth, or a larger --buffer");
        // A signal's status wins: it is what a supervisor acts on.
        return Err(match interrupted {
            Some(sig) => late.exit_code(interrupt::exit_status(sig)),
            None => late,
        });
    }
    Ok(interrupted.map_or(0, interrupt::exit_status))
}

pub fn record(a: &RecordArgs) -> CliResult<u8> {
    // The runtime's threads start with the signals blocked, so that only this thread
    // ever takes them, in its wait for input (see `interrupt`).
    let durable_ns = a
        .durable
        .as_deref()
        .map(crate::args::parse_durable_ns)
        .transpose()?;
    let Setup { rt, mut spec } =
        interrupt::blocked(|| open(&a.target, Access::Write, &a.stream, StreamDir::Write))?;
    spec.durable_ns = durable_ns;
    let rate_bytes = spec.rate_bps / 8.0;
    // Unbuffered (stdin is read through a descriptor of its own, not `io::stdin`'s
    // buffer): what the wait for input sees on the descriptor is all there is to read.
    let mut input: File = if a.input.as_os_str() == "-" {
        io::stdin()
            .as_fd()
            .try_clone_to_owned()
            .map(File::from)
            .map_err(|e| local_io(&a.input, "cannot open", e))?
    } else {
        File::open(&a.input).map_err(|e| local_io(&a.input, "cannot open", e))?
    };
    let input_size = if a.input.as_os_str() == "-" {
        None
    } else {
        std::fs::metadata(&a.input)
            .ok()
            .filter(|m| m.is_file())
            .map(|m| m.len())
    };
    let limit = match (&a.size, &a.duration) {
        (Some(s), None) => Some(crate::limits::size_in(
            "--size",
            s,
            1..=crate::limits::MAX_RECORD_BYTES,
            "from 1 byte to 1024T",
            "give the space the recording holds, or --duration",
        )?),
        (None, Some(d)) => {
            let max_ms = dvrfs_core::engine::MAX_RECORDING_DURATION_S * 1000;
            let ms = crate::args::parse_duration_in("--duration", d, 1..=max_ms)?;
            Some((rate_bytes * ms as f64 / 1e3).ceil() as u64)
        }
        (None, None) => None,
        (Some(_), Some(_)) => {
            return Err(CliError::usage(
                "--size and --duration both say how much to record",
                "give one of them",
            ))
        }
    };
    spec.reserve_bytes = match (limit, input_size) {
        (Some(l), Some(s)) => l.min(s),
        (Some(l), None) => l,
        (None, Some(s)) => s,
        (None, None) => 0,
    };
    let ring = a
        .ring
        .as_deref()
        .map(crate::record_ring::parse)
        .transpose()?;
    // A chunked recording: into a stream directory, cut at keyframes.
    let chunk_limit = match (&a.chunk, rt.resolve(&a.path).map(|i| rt.stat(i))) {
        (Some(c), _) => Some(crate::record_chunks::parse_limit(c)?),
        (None, _) if ring.is_some() => ring.map(crate::record_ring::default_chunk),
        (None, Ok(Ok(st))) if st.kind == Kind::Dir => Some(crate::record_chunks::parse_limit(
            crate::record_chunks::DEFAULT_CHUNK,
        )?),
        _ => None,
    };
    if let (Some(r), Some(l), Some(text)) = (ring, chunk_limit, &a.ring) {
        crate::record_ring::check(r, l, text, rate_bytes)?;
        crate::record_ring::cap_reserve(&mut spec, r, l, rate_bytes);
    }
    // The first bytes decide the chunks' extension (they are recorded first).
    let mut first = vec![];
    if chunk_limit.is_some() {
        let mut b = [0u8; crate::record_chunks::SNIFF_BYTES];
        let cap = limit.map_or(b.len() as u64, |l| l.min(b.len() as u64)) as usize;
        while first.len() < cap {
            match input.read(&mut b[..cap - first.len()]) {
                Ok(0) => break,
                Ok(n) => first.extend_from_slice(&b[..n]),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(local_io(&a.input, "error reading", e)),
            }
        }
    }
    if let (Some(l), true) = (chunk_limit, spec.reserve_bytes > 0) {
        let block = rt.figures()?.data_block_bytes;
        spec.reserve_bytes +=
            crate::record_chunks::slack_bytes(l, spec.reserve_bytes, rate_bytes, block);
    }
    if spec.reserve_bytes == 0 {
        let why = if input_size == Some(0) {
            "the input file is empty and neither --duration nor --size was given"
        } else {
            "reading stdin with neither --duration nor --size"
        };
        eprintln!("record: no space held ({why}): a full disk stops the recording");
    }
    let owner = crate::target::process_owner();
    let (mut chunks, ino, (parent, name)) = match chunk_limit {
        Some(l) => {
            let ext = crate::record_chunks::extension(&a.input, &first);
            let (c, ino) = crate::record_chunks::Chunks::start(&rt, &a.path, l, ext, owner)?;
            if let Some(r) = ring {
                crate::record_ring::apply(&rt, c.dir(), r)?;
            }
            let at = rt.resolve_parent(&c.last_path)?;
            (Some(c), ino, at)
        }
        None => {
            if rt.resolve(&a.path).is_ok() {
                return Err(CoreError::Exists(a.path.clone()).into());
            }
            let (parent, name) = rt.resolve_parent(&a.path)?;
            let create = Op::Create {
                parent,
                name: name.clone(),
                perm: 0o644,
                uid: owner.0,
                gid: owner.1,
            };
            let Output::Ino(ino) = rt.run(create, None, OWNER)? else {
                unreachable!("a create returns the new inode")
            };
            (None, ino, (parent, name))
        }
    };
    let info = match open_stream(&rt, ino, spec) {
        Ok(i) => i,
        Err(e) => {
            // Nothing was recorded: take the empty file (or first chunk) away again.
            let _ = rt.run(Op::Unlink { parent, name }, None, OWNER);
            let _ = rt.close();
            return Err(e);
        }
    };
    // Into the stream: through the chunks, cut at keyframes, or as it comes.
    let deliver =
        |chunks: &mut Option<crate::record_chunks::Chunks>, bytes: &[u8]| -> CliResult<()> {
            match chunks {
                Some(c) => c.record(&rt, info.id, bytes),
                None => {
                    rt.run(
                        Op::StreamWrite {
                            stream: info.id,
                            data: IoBuf::from_slice(bytes),
                        },
                        None,
                        OWNER,
                    )?;
                    Ok(())
                }
            }
        };
    let admission = admission_name(&rt)?;
    let started = Instant::now();
    let pb = progress(limit.or(input_size).unwrap_or(0), true, "record");
    // Bytes taken from the input and handed to the stream; of them, bytes on the disk
    // and committed.
    let mut moved = 0u64;
    let mut durable = 0u64;
    let mut last_sync = Instant::now();
    // The fsync in flight and what had been written behind when it started. It runs
    // beside the input: a blocking one cost the recording its rate for the commit's
    // time every second (30 of 42 Mbit/s on the emulated avfs-250g).
    let mut syncing: Option<(dvrfs_runtime::Ticket, u64)> = None;
    let mut piece = vec![0u8; info.request_bytes as usize];
    // From here on a signal stops the recording cleanly. This thread takes it only
    // while it waits for input, so it is never lost between two waits.
    interrupt::catch();
    interrupt::block();
    let result = (|| -> CliResult<()> {
        if !first.is_empty() {
            deliver(&mut chunks, &first)?;
            moved += first.len() as u64;
            pb.set_position(moved);
        }
        while interrupt::received().is_none() {
            let want = limit.map_or(piece.len() as u64, |l| (l - moved).min(piece.len() as u64));
            if want == 0 {
                break;
            }
            // Each read's bytes go to the stream at once (its write-behind buffer
            // gathers them into requests): what was read is what was accepted.
            let wait = SYNC_INTERVAL.saturating_sub(last_sync.elapsed());
            let ready = interrupt::wait_readable(input.as_fd(), wait)
                .map_err(|e| local_io(&a.input, "error reading", e))?;
            if ready {
                match input.read(&mut piece[..want as usize]) {
                    Ok(0) => break,
                    Ok(n) => {
                        deliver(&mut chunks, &piece[..n])?;
                        moved += n as u64;
                        pb.set_position(moved);
                    }
                    // The signals are blocked during the read; any other is no reason
                    // to stop.
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(local_io(&a.input, "error reading", e)),
                }
            }
            if let Some((t, written)) = syncing {
                if rt.check(t, false)?.is_some() {
                    // What was written behind before the fsync is durable after it.
                    durable = durable.max(written);
                    syncing = None;
                }
            }
            if last_sync.elapsed() >= SYNC_INTERVAL {
                let written = rt.stream(info.id)?.map_or(0, |(_, s)| s.written_bytes);
                if written > durable && syncing.is_none() {
                    // Due now: without a deadline the commit's writes would keep the
                    // commit interval's and be held for most of it (half a second per
                    // fsync).
                    let t = rt.start(Op::Fsync, Some(Instant::now()), OWNER)?;
                    syncing = Some((t, written));
                }
                last_sync = Instant::now();
                if !crate::output::stderr_is_terminal() {
                    // For logs and supervisors: what survives a crash from now on, and
                    // what the recording has taken (all of it is kept on a signal).
                    eprintln!("record: {durable} bytes durable, {moved} accepted");
                }
                if let Some((_, st)) = rt.stream(info.id)? {
                    pb.set_message(status_line(
                        "record",
                        moved,
                        started,
                        &st,
                        &format!(", {} durable", human_bytes(durable)),
                    ));
                }
            }
        }
        if let Some((t, _)) = syncing {
            rt.check(t, true)?;
        }
        Ok(())
    })();
    // A signal from now on (a second one kills: `SA_RESETHAND`) is taken at once; a
    // first one still writes and commits everything below and is reported.
    interrupt::unblock();
    // What the chunker still holds was accepted too: it goes to the last chunk.
    let finished = match &mut chunks {
        Some(c) => c.finish(&rt, info.id),
        None => Ok(()),
    };
    let closed = close_stream(&rt, info.id);
    let synced = rt.run(Op::Fsync, Some(Instant::now()), OWNER);
    pb.finish_and_clear();
    let elapsed = started.elapsed();
    rt.close()?;
    result?;
    finished?;
    let stats = closed?;
    synced?;
    let ran = Ran {
        what: "record",
        path: &a.path,
        chunks: chunks.as_ref().map(|c| c.made),
        admission: &admission,
        json: a.stream.json,
        interrupted: interrupt::received(),
        overruns: None,
    };
    report(ran, &info, &stats, moved, elapsed)
}

/// Closes a stream (its last requests written or prefetches back): its final figures.
pub(crate) fn close_stream(rt: &Handle, id: u32) -> CliResult<StreamStats> {
    match rt.run(Op::StreamClose { stream: id }, None, OWNER)? {
        Output::StreamClosed(st) => Ok(st),
        other => Err(CliError::new(format!(
            "closing stream {id} returned {other:?} (a dvrfs bug)"
        ))),
    }
}

pub(crate) fn admission_name(rt: &Handle) -> CliResult<String> {
    Ok(rt.admission()?.unwrap_or_else(|| "nothing".to_string()))
}
