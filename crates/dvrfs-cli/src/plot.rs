//! SVG plots of a simulation run: the completion-margin CDF (AVFS Fig. 12-13), the
//! buffer level of one stream over time, and the seek-distance histogram (Fig. 15).

use crate::error::{CliError, CliResult};
use dvrfs_core::sim::report::margin_cdf;
use dvrfs_core::sim::SimOutcome;
use plotters::prelude::*;
use std::path::Path;

fn err(what: &str, e: impl std::fmt::Display) -> CliError {
    CliError::new(format!("cannot draw {what}: {e}"))
}

/// Writes `margin_cdf.svg`, `buffer_level.svg` and `seek_distance.svg` into `dir`.
pub fn write_all(dir: &Path, o: &SimOutcome, title: &str) -> CliResult<()> {
    std::fs::create_dir_all(dir)
        .map_err(|e| crate::error::local_io(dir, "creating the plot directory", e))?;
    margin(&dir.join("margin_cdf.svg"), o, title)?;
    buffer(&dir.join("buffer_level.svg"), o, title)?;
    seeks(&dir.join("seek_distance.svg"), o, title)?;
    Ok(())
}

fn margin(path: &Path, o: &SimOutcome, title: &str) -> CliResult<()> {
    let pts = margin_cdf(&o.margins_ns, 2000);
    // The points as CSV too, so that several runs can be drawn on one figure.
    let csv: String = std::iter::once("margin_ms,probability\n".to_string())
        .chain(pts.iter().map(|(x, y)| format!("{x:.3},{y:.8}\n")))
        .collect();
    let csv_path = path.with_extension("csv");
    std::fs::write(&csv_path, csv)
        .map_err(|e| crate::error::local_io(&csv_path, "writing the margin CDF", e))?;
    let root = SVGBackend::new(path, (800, 500)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err("the margin CDF", e))?;
    let (lo, hi) = pts
        .iter()
        .fold((0.0f64, 1.0f64), |(l, h), &(x, _)| (l.min(x), h.max(x)));
    // Probability on a log axis, as in the AVFS figures: the tail is what matters.
    let ymin = (1.0 / pts.len().max(10) as f64).min(1e-4);
    let mut chart = ChartBuilder::on(&root)
        .caption(
            format!("completion margin CDF - {title}"),
            ("sans-serif", 18),
        )
        .margin(10)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(lo.floor()..hi.ceil(), (ymin..1.0f64).log_scale())
        .map_err(|e| err("the margin CDF", e))?;
    chart
        .configure_mesh()
        .x_desc("completion margin (ms)")
        .y_desc("P(margin <= x)")
        .draw()
        .map_err(|e| err("the margin CDF", e))?;
    chart
        .draw_series(LineSeries::new(
            pts.iter().map(|&(x, y)| (x, y.max(ymin))),
            &BLUE,
        ))
        .map_err(|e| err("the margin CDF", e))?;
    root.present().map_err(|e| err("the margin CDF", e))?;
    Ok(())
}

fn buffer(path: &Path, o: &SimOutcome, title: &str) -> CliResult<()> {
    let root = SVGBackend::new(path, (800, 400)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err("the buffer level", e))?;
    let pts: Vec<(f64, f64)> = o
        .buffer_level
        .iter()
        .map(|&(t, b)| (t as f64 / 1e9, b as f64 / (1 << 20) as f64))
        .collect();
    let tmax = pts.last().map_or(1.0, |p| p.0.max(1.0));
    let ymax = pts.iter().fold(1.0f64, |m, p| m.max(p.1)) * 1.1;
    let ymin = pts.iter().fold(0.0f64, |m, p| m.min(p.1));
    let mut chart = ChartBuilder::on(&root)
        .caption(
            match o.buffer_stream {
                Some((k, false)) => format!("playout buffer of stream {k} (playback) - {title}"),
                Some((k, true)) => {
                    format!("write-behind of stream {k} (recording) - {title}")
                }
                None => format!("no stream in this run - {title}"),
            },
            ("sans-serif", 18),
        )
        .margin(10)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(0.0..tmax, ymin..ymax)
        .map_err(|e| err("the buffer level", e))?;
    chart
        .configure_mesh()
        .x_desc("time (s)")
        .y_desc("buffer (MiB)")
        .draw()
        .map_err(|e| err("the buffer level", e))?;
    chart
        .draw_series(LineSeries::new(pts, &BLUE))
        .map_err(|e| err("the buffer level", e))?;
    root.present().map_err(|e| err("the buffer level", e))?;
    Ok(())
}

fn seeks(path: &Path, o: &SimOutcome, title: &str) -> CliResult<()> {
    const BINS: usize = 50;
    let max = o
        .seek_distances_bytes
        .iter()
        .copied()
        .max()
        .unwrap_or(1)
        .max(1) as f64;
    let mut counts = vec![0u64; BINS];
    for &d in &o.seek_distances_bytes {
        counts[((d as f64 / max * BINS as f64) as usize).min(BINS - 1)] += 1;
    }
    let total = o.seek_distances_bytes.len().max(1) as f64;
    let root = SVGBackend::new(path, (800, 400)).into_drawing_area();
    root.fill(&WHITE)
        .map_err(|e| err("the seek distances", e))?;
    let gb = max / 1e9;
    let top = counts.iter().copied().max().unwrap_or(1) as f64 / total * 1.1;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            format!("seek distance between commands - {title}"),
            ("sans-serif", 18),
        )
        .margin(10)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(0.0..gb, 0.0..top.max(0.01))
        .map_err(|e| err("the seek distances", e))?;
    chart
        .configure_mesh()
        .x_desc("distance (GB)")
        .y_desc("share of commands")
        .draw()
        .map_err(|e| err("the seek distances", e))?;
    let w = gb / BINS as f64;
    chart
        .draw_series(counts.iter().enumerate().map(|(i, &c)| {
            let x0 = i as f64 * w;
            Rectangle::new([(x0, 0.0), (x0 + w, c as f64 / total)], BLUE.filled())
        }))
        .map_err(|e| err("the seek distances", e))?;
    root.present().map_err(|e| err("the seek distances", e))?;
    Ok(())
}
