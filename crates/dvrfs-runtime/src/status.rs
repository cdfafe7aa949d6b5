//! `dvrfs status` on a running engine: the engine's snapshot, its streams named.

use dvrfs_core::engine::{HeadroomAsk, Status};

use crate::{Result, Runtime};

impl Runtime {
    /// The engine's [`Status`] with every stream's path: one query for the snapshot,
    /// then one per directory walked (each short, so the dispatcher keeps its
    /// deadlines while a large tree is searched). A directory removed meanwhile reads
    /// as empty.
    pub fn status(&self, ask: HeadroomAsk) -> Result<Status> {
        let (mut status, root) = self.inspect(move |e| (e.status(ask), e.volume().root()))?;
        let mut failed = None;
        status.name_streams(root, |dir| {
            match self.query(move |v| v.readdir(dir).unwrap_or_default()) {
                Ok(entries) => entries,
                Err(e) => {
                    failed.get_or_insert(e);
                    vec![]
                }
            }
        });
        match failed {
            Some(e) => Err(e),
            None => Ok(status),
        }
    }
}
