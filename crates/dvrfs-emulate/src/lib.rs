//! `dvrfs emulate`: a hard disk model served as one file, `DIR/disk`, over FUSE, so
//! that a loop device on it is an emulated hard disk any kernel file system and I/O
//! scheduler can run on.
//!
//! The pieces, one file each: the image store ([`image`]: the bytes, sparse, locked),
//! the drive thread ([`drive_thread`]: the one owner of the sans-I/O
//! [`dvrfs_core::disk::Drive`], which completes every command in wall-clock time when
//! the model says the disk would finish it), the FUSE file system ([`fs`]: `disk`,
//! `stats`, `timing`), the loop device ([`loopdev`]), the trace writer ([`trace`])
//! and the counters with their JSON form ([`stats`]).
//!
//! Contract: every timing decision is the `Drive`'s; this crate moves bytes (at each
//! command's arrival, in arrival order) and time (it replies to the kernel no
//! earlier than the model's end time; later only when the host was slow, which is
//! counted as a late command). Nothing caches the emulated disk: the file is served
//! `FOPEN_DIRECT_IO`, and the loop device is made with direct I/O.

pub mod drive_thread;
pub mod fs;
pub mod image;
pub mod loopdev;
pub mod stats;
pub mod trace;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use dvrfs_core::disk::{DiskModel, Drive, DriveError};
use fuser::{MountOption, SessionACL};

use drive_thread::DriveThread;
use image::{Image, ImageError};
use stats::{Counters, Info, Shared};
use trace::TraceWriter;

/// The seed of the model's rare slow accesses in every emulator: a trace replays
/// through `Drive::new(model, ncq, SEED)` to the same times.
pub const SEED: u64 = 1;

/// FUSE threads reading requests (each only moves bytes: replies wait in the drive
/// thread, so a few threads keep any queue depth).
pub const FUSE_THREADS: usize = 4;

/// What to emulate.
#[derive(Clone, Debug)]
pub struct Config {
    pub image: PathBuf,
    pub model: DiskModel,
    /// The model as the user named it (a built-in name or a file).
    pub model_name: String,
    /// The model file's absolute path when the model came from a file (`None` for a
    /// built-in model): published in `DIR/stats` so that a reader can load the model.
    pub model_file: Option<PathBuf>,
    pub ncq: u32,
    pub mountpoint: PathBuf,
    /// The emulated disk's logical sector: 512 or 4096.
    pub sector_bytes: u32,
    pub trace: Option<PathBuf>,
    /// The standby timer (`hdparm -S`): `None`, the disk never spins down.
    pub standby_ns: Option<u64>,
}

/// Why an emulator cannot start.
#[derive(Debug, thiserror::Error)]
pub enum EmulateError {
    #[error(transparent)]
    Image(#[from] ImageError),
    #[error(transparent)]
    Drive(#[from] DriveError),
    #[error("{image} holds {size_bytes} bytes, more than the model's {capacity_bytes}")]
    TooBig {
        image: PathBuf,
        size_bytes: u64,
        capacity_bytes: u64,
    },
    #[error("{image} holds {size_bytes} bytes, not a whole number of {sector_bytes}-byte sectors")]
    NotWholeSectors {
        image: PathBuf,
        size_bytes: u64,
        sector_bytes: u32,
    },
    #[error("cannot write the trace {path}: {source}")]
    Trace {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot mount on {dir}: {source}")]
    Mount {
        dir: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot start a thread: {0}")]
    Thread(std::io::Error),
}

/// What an emulator did, when it stopped.
#[derive(Clone, Debug)]
pub struct Report {
    pub counters: Counters,
    pub stats: serde_json::Value,
    /// The trace could not be written completely (the rows after the error are lost).
    pub trace_error: Option<String>,
}

/// A mounted emulator, not yet serving ([`Emulator::run`] serves).
pub struct Emulator {
    session: fuser::Session<fs::EmuFs>,
    shared: Arc<Shared>,
    drive: DriveThread,
    trace: Option<TraceWriter>,
}

impl Emulator {
    /// Opens and checks the image, starts the drive thread and mounts `DIR`.
    pub fn mount(cfg: &Config) -> Result<Emulator, EmulateError> {
        let image = Image::open(&cfg.image)?;
        let size_bytes = image.size_bytes();
        let capacity_bytes = cfg.model.capacity_bytes();
        if size_bytes > capacity_bytes {
            return Err(EmulateError::TooBig {
                image: cfg.image.clone(),
                size_bytes,
                capacity_bytes,
            });
        }
        let sector = cfg.sector_bytes.max(cfg.model.sector_bytes);
        if size_bytes == 0 || !size_bytes.is_multiple_of(u64::from(sector)) {
            return Err(EmulateError::NotWholeSectors {
                image: cfg.image.clone(),
                size_bytes,
                sector_bytes: sector,
            });
        }
        let mut drive = Drive::new(&cfg.model, cfg.ncq, SEED)?;
        if let Some(t) = cfg.standby_ns {
            drive = drive.with_standby(t)?;
        }
        let model_sector_bytes = drive.sector_bytes();
        let shared = Arc::new(Shared::new(Info {
            model: cfg.model_name.clone(),
            model_file: cfg.model_file.as_ref().map(|p| p.display().to_string()),
            image: cfg.image.display().to_string(),
            ncq: cfg.ncq,
            sector_bytes: cfg.sector_bytes,
            capacity_bytes: size_bytes,
        }));
        let trace = match &cfg.trace {
            Some(p) => Some(
                TraceWriter::create(p).map_err(|source| EmulateError::Trace {
                    path: p.clone(),
                    source,
                })?,
            ),
            None => None,
        };
        let image = Arc::new(image);
        let drive = DriveThread::start(
            drive,
            image.clone(),
            shared.clone(),
            trace.as_ref().map(TraceWriter::sender),
        )
        .map_err(EmulateError::Thread)?;
        let fs = fs::EmuFs::new(image, shared.clone(), model_sector_bytes, drive.sender());
        let session = fuser::Session::new(fs, &cfg.mountpoint, &fuser_config(&cfg.image)).map_err(
            |source| EmulateError::Mount {
                dir: cfg.mountpoint.clone(),
                source,
            },
        )?;
        Ok(Emulator {
            session,
            shared,
            drive,
            trace,
        })
    }

    /// The state the emulator's threads share (stats, timing, loop device).
    pub fn shared(&self) -> Arc<Shared> {
        self.shared.clone()
    }

    /// Unmounts `DIR` from another thread (the session then ends).
    pub fn unmounter(&mut self) -> fuser::SessionUnmounter {
        self.session.unmount_callable()
    }

    /// Serves until `DIR` is unmounted; then every command still in the drive
    /// completes in its time, the trace is flushed, and the totals are returned.
    pub fn run(self) -> std::io::Result<Report> {
        let served = self.session.run();
        self.drive.finish();
        let trace_error = self
            .trace
            .map(TraceWriter::finish)
            .and_then(Result::err)
            .map(|e| e.to_string());
        served?;
        Ok(Report {
            counters: self.shared.counters(),
            stats: self.shared.stats_json(),
            trace_error,
        })
    }
}

/// The session: `fuse.dvrfs-emulate` with the image as its source; root only.
fn fuser_config(image: &Path) -> fuser::Config {
    let mut c = fuser::Config::default();
    c.mount_options = vec![
        MountOption::FSName(image.display().to_string()),
        MountOption::CUSTOM("subtype=dvrfs-emulate".into()),
        MountOption::DefaultPermissions,
        MountOption::NoDev,
        MountOption::NoSuid,
        MountOption::RW,
    ];
    c.acl = SessionACL::Owner;
    c.n_threads = Some(FUSE_THREADS);
    c
}
