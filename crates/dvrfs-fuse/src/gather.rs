//! The mount's gatherer: a thread that hands every file's gathered bytes to the
//! engine at each gather point, so that nothing a writer handed over waits in the
//! daemon past the next commit.
//!
//! Buffered writes gather in a chunk per file ([`crate::file`]) until it is full, and
//! a writer without a reservation at 500 kbit/s fills a 4 MiB chunk in a minute:
//! killed before that, the daemon lost every byte of it (issue 21). The engine knows
//! when the next commit is due ([`dvrfs_core::engine::Engine::next_gather_ns`]); at
//! the gather point a lead before it, this thread submits every chunk whose first
//! byte came before that point, as a best-effort write. A byte handed over through
//! the mount is then durable within the commit interval plus the lead and the
//! write's and the commit's time (`docs/durability.md`).
//!
//! The thread takes each file's lock only if it is free (a thread serving the file
//! holds it briefly; a stream operation may hold it while it waits for its rate),
//! trying again for up to the lead; a file whose lock stays taken is gathered at the
//! next point. It holds the runtime while it runs and is joined when the file system
//! is dropped, before the runtime is closed.

use crate::file::FileState;
use dvrfs_core::meta::Ino;
use dvrfs_runtime::Runtime;
use std::collections::HashMap;
use std::sync::{Arc, Condvar, Mutex, TryLockError};
use std::thread::JoinHandle;
use std::time::Duration;

/// The open files' states, shared between the session threads and the gatherer.
pub type Files = Arc<Mutex<HashMap<Ino, Arc<Mutex<FileState>>>>>;

/// How long the gatherer waits for a busy file's lock between tries, and how many
/// tries it makes (together about the engine's gather lead).
const RETRY: Duration = Duration::from_millis(10);
const TRIES: u32 = 8;

/// The running gatherer; stopped and joined when dropped.
pub struct Gatherer {
    stop: Arc<(Mutex<bool>, Condvar)>,
    thread: Option<JoinHandle<()>>,
}

impl Gatherer {
    pub fn spawn(rt: Arc<Runtime>, files: Files) -> std::io::Result<Gatherer> {
        let stop = Arc::new((Mutex::new(false), Condvar::new()));
        let s = stop.clone();
        let thread = std::thread::Builder::new()
            .name("dvrfs-gather".into())
            .spawn(move || run(&rt, &files, &s))?;
        Ok(Gatherer {
            stop,
            thread: Some(thread),
        })
    }
}

impl Drop for Gatherer {
    fn drop(&mut self) {
        *self.stop.0.lock().unwrap_or_else(|e| e.into_inner()) = true;
        self.stop.1.notify_all();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn run(rt: &Runtime, files: &Files, stop: &(Mutex<bool>, Condvar)) {
    let mut after_ns = 0;
    loop {
        let now = rt.now_ns().max(after_ns);
        let Ok(point) = rt.inspect(move |e| e.next_gather_ns(now)) else {
            return; // the runtime stopped
        };
        let wait = Duration::from_nanos(point.saturating_sub(rt.now_ns()));
        let guard = stop.0.lock().unwrap_or_else(|e| e.into_inner());
        let (guard, _) = stop
            .1
            .wait_timeout_while(guard, wait, |stopped| !*stopped)
            .unwrap_or_else(|e| e.into_inner());
        if *guard {
            return;
        }
        drop(guard);
        gather_all(rt, files, point);
        after_ns = point + 1;
    }
}

/// Submits every file's chunk gathered since before `point_ns`.
fn gather_all(rt: &Runtime, files: &Files, point_ns: u64) {
    let mut list: Vec<Arc<Mutex<FileState>>> = files
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .values()
        .cloned()
        .collect();
    for _ in 0..TRIES {
        list.retain(|st| match st.try_lock() {
            Ok(mut f) => {
                f.gather(rt, point_ns);
                false
            }
            Err(TryLockError::Poisoned(p)) => {
                p.into_inner().gather(rt, point_ns);
                false
            }
            Err(TryLockError::WouldBlock) => true,
        });
        if list.is_empty() {
            return;
        }
        std::thread::sleep(RETRY);
    }
}
