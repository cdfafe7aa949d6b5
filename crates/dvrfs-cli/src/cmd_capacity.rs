//! `dvrfs capacity`: how many streams a disk model admits (the admission bound
//! `disk::capacity`), for playbacks and recordings, and for recordings with a
//! durability interval as the engine plans them.

use crate::cmd_sim::{load_disk, stream_params, StreamOpts};
use crate::error::{CliError, CliResult};
use dvrfs_core::disk::{capacity, durable_bounds, Admission};
use dvrfs_core::engine::{
    stream_ask, GatherMode, StreamDir, AUTO_SLACK_NS, MAX_STREAM_BUFFER_BYTES,
};
use dvrfs_core::layout::{default_tail_log_blocks, TailLogSize, DEFAULT_COMMIT_INTERVAL_MS};

#[derive(clap::Args, Debug)]
pub struct CapacityArgs {
    /// Disk model: a built-in name (avfs-250g, nvr-8t, laptop-5400) or a JSON file
    #[arg(long)]
    pub disk: String,
    #[command(flatten)]
    pub stream: StreamOpts,
    /// Recordings' durability interval: the *_durable figures count recordings that hand over what they hold at least this often (in whole commit intervals of 1s; shorter: on a volume committing that often)
    #[arg(long, default_value = "1s")]
    pub durable: String,
    /// The *_durable figures for a volume without a tail log (mkfs --no-tail-log): recordings write what they gather in place
    #[arg(long)]
    pub no_tail_log: bool,
    /// The tail log's ring the *_durable figures count on [default: what mkfs gives a volume of the whole disk]
    #[arg(long, conflicts_with = "no_tail_log")]
    pub tail_log: Option<String>,
    /// Print one JSON object on stdout
    #[arg(long)]
    pub json: bool,
}

pub fn capacity_cmd(a: &CapacityArgs) -> CliResult<u8> {
    let model = load_disk(&a.disk)?;
    let sp = stream_params(&a.stream)?;
    let durable_ms = crate::args::parse_durable_ns(&a.durable)? / 1_000_000;
    // Recordings on a volume with the default commit interval (one that commits
    // more often, when asked for a shorter durability interval), with a tail log
    // (mkfs's default) or without.
    let durable_ns = durable_ms * 1_000_000;
    let mode = GatherMode {
        commit_interval_ns: (u64::from(DEFAULT_COMMIT_INTERVAL_MS) * 1_000_000).min(durable_ns),
        tail_log: !a.no_tail_log,
        ring_bytes: match crate::cmd_fs::tail_log_size(a.no_tail_log, a.tail_log.as_deref())? {
            TailLogSize::Off => 0,
            TailLogSize::Blocks(b) => b * 4096,
            // The ring mkfs gives a volume of the whole disk.
            TailLogSize::Auto => default_tail_log_blocks(model.capacity_bytes()) * 4096,
        },
    };
    let ask = |dir, buffer| {
        let rate = sp.bitrate_bps;
        stream_ask(dir, rate, sp.request_bytes, buffer, Some(durable_ns), mode)
    };
    let dur = ask(StreamDir::Write, None).durable.expect("a recording's");
    let period_ns = dur.period_ns;
    let r = capacity(&model, &sp);
    let rd = durable_bounds(&model, &sp, dur);
    // What admission (record, the mount, the C API) takes on this disk, counted the
    // way it admits: with the depth given, and with the buffers it chooses itself;
    // playbacks (whole requests) and recordings with the durability interval.
    let adm = Admission::from_model(&model, sp.be_share);
    let count =
        |dir, buffer| adm.count_admitted(&ask(dir, buffer), AUTO_SLACK_NS, MAX_STREAM_BUFFER_BYTES);
    let depth_buffer = Some(sp.depth as u64 * sp.request_bytes);
    let admitted = count(StreamDir::Read, depth_buffer);
    let admitted_auto = count(StreamDir::Read, None);
    let recorded = count(StreamDir::Write, depth_buffer);
    let recorded_auto = count(StreamDir::Write, None);
    if a.json {
        let mut v = serde_json::to_value(&r)
            .map_err(|e| CliError::new(format!("cannot encode the report: {e}")))?;
        if let Some(o) = v.as_object_mut() {
            o.insert("disk".into(), model.name.clone().into());
            o.insert("bitrate_bps".into(), sp.bitrate_bps.into());
            o.insert("request_bytes".into(), sp.request_bytes.into());
            o.insert("depth".into(), sp.depth.into());
            o.insert("admission_streams".into(), admitted.into());
            o.insert("admission_streams_auto_buffer".into(), admitted_auto.into());
            o.insert("durable_ms".into(), durable_ms.into());
            o.insert("gather_period_ms".into(), (period_ns / 1_000_000).into());
            o.insert("tail_log".into(), mode.tail_log.into());
            o.insert("tail_log_ring_bytes".into(), mode.ring_bytes.into());
            o.insert(
                "ring_bound_streams_durable".into(),
                rd.ring_bound_streams.into(),
            );
            o.insert("durable_gathered_bytes".into(), rd.gathered_bytes.into());
            o.insert(
                "durable_logged_bytes".into(),
                rd.logged_bytes.round().into(),
            );
            o.insert("durable_request_bytes".into(), rd.request_bytes.into());
            o.insert("durable_round_ms".into(), rd.round_ms.into());
            o.insert(
                "round_bound_streams_durable".into(),
                rd.round_bound_streams.into(),
            );
            o.insert(
                "batched_round_bound_streams_durable".into(),
                rd.batched_round_bound_streams.into(),
            );
            o.insert("admission_streams_durable".into(), recorded.into());
            o.insert(
                "admission_streams_auto_buffer_durable".into(),
                recorded_auto.into(),
            );
        }
        crate::output::print_json(&v);
    } else {
        outln!(
            "dvrfs capacity: {} streams of {:.2} Mbit/s in {} requests, depth {}",
            model.name,
            sp.bitrate_bps / 1e6,
            crate::output::human_bytes(sp.request_bytes),
            sp.depth
        );
        outln!(
            "  bandwidth bound   {} streams (zone-averaged sustained rate {:.1} MB/s; {} with the whole disk)",
            r.bandwidth_bound_streams,
            r.zone_avg_rate_bytes_per_s / 1e6,
            r.bandwidth_bound_streams_full
        );
        outln!(
            "  round bound       {} streams (round of {:.0} ms; {} with the whole disk), moving whole requests",
            r.round_bound_streams,
            r.round_ms,
            r.round_bound_streams_full
        );
        outln!(
            "  admission admits  {} playbacks of depth {} ({} with the buffers dvrfs chooses, as play and the mount do without buffer=)",
            admitted,
            sp.depth,
            admitted_auto
        );
        outln!(
            "  recordings        durable within {} (gathering up to {} every {} ms, {}): round bound {} streams; admission admits {} of depth {} ({} with the buffers dvrfs chooses)",
            a.durable,
            crate::output::human_bytes(rd.gathered_bytes),
            period_ns / 1_000_000,
            match rd.ring_bound_streams {
                Some(n) => format!(
                    "about {} of it logged, whole requests in place; the {} ring holds {n}",
                    crate::output::human_bytes(rd.logged_bytes as u64),
                    crate::output::human_bytes(mode.ring_bytes)
                ),
                None => "written in place".to_string(),
            },
            rd.round_bound_streams,
            recorded,
            sp.depth,
            recorded_auto
        );
        outln!(
            "  best-effort share {:.0}% of disk time kept free for best-effort traffic",
            r.be_share * 100.0
        );
    }
    Ok(0)
}
