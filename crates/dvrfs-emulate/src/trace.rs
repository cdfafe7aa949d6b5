//! `--trace FILE`: every completed command as a CSV row, written by a thread of its
//! own so that the drive thread only hands rows over a channel (never waits on the
//! host disk for a trace line).
//!
//! Contract: a header line ([`HEADER`]), then one row per completed command in the
//! order the drive completed them; times in nanoseconds from the emulator's start.
//! Rows go through a buffered writer and are flushed when the emulator stops
//! ([`TraceWriter::finish`]); a write error is reported there, once.

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::Path;
use std::sync::mpsc;
use std::thread::JoinHandle;

use dvrfs_core::disk::TraceRow;

/// The CSV header, the columns of [`row_line`].
pub const HEADER: &str = "id,arrival_ns,start_ns,end_ns,offset_bytes,length_bytes,direction,queue_depth,seek_ns,rotation_ns,transfer_ns";

/// One CSV line (without its newline).
pub fn row_line(r: &TraceRow) -> String {
    format!(
        "{},{},{},{},{},{},{},{},{},{},{}",
        r.id,
        r.arrival_ns,
        r.start_ns,
        r.end_ns,
        r.offset_bytes,
        r.length_bytes,
        r.direction.as_str(),
        r.queue_depth,
        r.timing.seek_ns,
        r.timing.rotation_ns,
        r.timing.transfer_ns
    )
}

/// The writer thread and the channel to it.
pub struct TraceWriter {
    tx: mpsc::Sender<Vec<TraceRow>>,
    join: JoinHandle<io::Result<()>>,
}

impl TraceWriter {
    /// Creates (truncates) `path` and writes the header.
    pub fn create(path: &Path) -> io::Result<TraceWriter> {
        let mut out = BufWriter::with_capacity(1 << 20, File::create(path)?);
        writeln!(out, "{HEADER}")?;
        let (tx, rx) = mpsc::channel::<Vec<TraceRow>>();
        let join = std::thread::Builder::new()
            .name("emulate-trace".into())
            .spawn(move || {
                // Until every sender is gone; a write error ends the thread and is
                // reported by `finish` (later batches are dropped with the channel).
                for batch in rx {
                    for r in &batch {
                        writeln!(out, "{}", row_line(r))?;
                    }
                }
                out.flush()
            })?;
        Ok(TraceWriter { tx, join })
    }

    /// A sender for the drive thread.
    pub fn sender(&self) -> mpsc::Sender<Vec<TraceRow>> {
        self.tx.clone()
    }

    /// Waits for every row sent (all senders must be dropped first) and flushes.
    pub fn finish(self) -> io::Result<()> {
        drop(self.tx);
        self.join
            .join()
            .unwrap_or_else(|_| Err(io::Error::other("the trace writer panicked")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dvrfs_core::disk::drive::Direction;

    #[test]
    fn rows_are_written_in_order_after_the_header() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("t.csv");
        let w = TraceWriter::create(&p).unwrap();
        let tx = w.sender();
        let row = |id| TraceRow {
            id,
            arrival_ns: 10 * id,
            start_ns: 10 * id + 1,
            end_ns: 10 * id + 5,
            offset_bytes: 4096 * id,
            length_bytes: 4096,
            direction: Direction::Read,
            queue_depth: 1,
            timing: Default::default(),
        };
        tx.send(vec![row(1), row(2)]).unwrap();
        tx.send(vec![row(3)]).unwrap();
        drop(tx);
        w.finish().unwrap();
        let text = std::fs::read_to_string(&p).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], HEADER);
        assert_eq!(lines.len(), 4);
        assert_eq!(lines[3], "3,30,31,35,12288,4096,read,1,0,0,0");
        assert_eq!(
            lines[0].split(',').count(),
            lines[1].split(',').count(),
            "as many fields as columns"
        );
    }
}
