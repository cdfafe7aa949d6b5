//! Open files and their handles: the per-file state a handle shares with the other
//! opens of its file, what an open and a release do to it (a reservation waiting on
//! a closed file is taken by the first open of its user, and ends at the last
//! close), and settling what a file gathered before an operation needs it on disk.

use super::*;

impl DvrfsFs {
    /// The state of open file `ino` in `files`, made (and the engine told the file is
    /// open, so removing its name keeps it until the last release, POSIX) if it has
    /// none. The caller holds the map's lock until it has counted its use.
    /// `mode`: how the engine is to hold the file (a handle that may write, or a
    /// stream reservation, holds it as a writer; see `FileState::engine_opens`).
    pub(crate) fn file_state(
        &self,
        files: &mut HashMap<Ino, Arc<Mutex<FileState>>>,
        ino: Ino,
        owner: u32,
        mode: OpenMode,
    ) -> Result<Arc<Mutex<FileState>>, Errno> {
        if let Some(st) = files.get(&ino) {
            let mut s = lock(st);
            // A writer's hold covers a reader's: only a first writer adds one.
            let held = s.engine_opens.contains(&mode) || s.engine_opens.contains(&OpenMode::Write);
            if !self.read_only && !held {
                self.run(Op::OpenFile { ino, mode }, owner)?;
                s.engine_opens.push(mode);
            }
            return Ok(st.clone());
        }
        if !self.read_only {
            self.run(Op::OpenFile { ino, mode }, owner)?;
        }
        let st = Arc::new_cyclic(|me| {
            let mut st = FileState::new(ino, self.chunk, self.pool.clone(), self.floors.make(ino));
            st.link = Some(self.parker.link(me.clone()));
            if !self.read_only {
                st.engine_opens.push(mode);
            }
            Mutex::new(st)
        });
        files.insert(ino, st.clone());
        Ok(st)
    }

    /// A new handle on `ino`, and whether a read stream plays for it (one set on the
    /// closed file): the kernel's page cache is then kept out of its reads.
    /// `write`: the handle may write (else the file is held for reading only).
    pub(crate) fn open_handle(
        &self,
        req: &Request,
        ino: Ino,
        direct: bool,
        write: bool,
    ) -> Result<(u64, bool), Errno> {
        let direct = direct || self.direct_io;
        let mode = match write {
            true => OpenMode::Write,
            false => OpenMode::Read,
        };
        let mut files = lock(&self.files);
        let st = self.file_state(&mut files, ino, req.pid(), mode)?;
        let fh = self.next_fh.fetch_add(1, Ordering::Relaxed);
        let mut plays = false;
        {
            let mut st = lock(&st);
            st.opens += 1;
            let ino = st.ino;
            // Set on the closed file: the stream plays for this open if it is by the
            // user who set it (or root; [`quota`]), its prefetch starting now.
            if st.stream.as_ref().is_some_and(|s| !s.used) && self.quota.adopt(ino, req.uid()) {
                st.stream_opened(&self.rt);
                let s = st.stream.as_mut().expect("checked");
                s.owner_fh = Some(fh);
                plays = s.res.dir == StreamDir::Read;
                s.used = true;
            }
        }
        drop(files);
        lock(&self.handles).insert(fh, Handle { ino, direct });
        Ok((fh, plays))
    }

    /// Closes handle `fh`. At the last close of the file, what it gathered goes to the
    /// disk and its stream ends while the state is still listed (a getattr or a new
    /// open meanwhile sees the pending size); then the state goes.
    pub(crate) fn close_handle(&self, fh: u64, owner: u32) -> Result<(), Errno> {
        let h = lock(&self.handles).remove(&fh).ok_or(libc::EBADF)?;
        let st = self.state(h.ino).ok_or(libc::EBADF)?;
        let r = {
            let mut s = lock(&st);
            s.opens -= 1;
            if let Some(f) = s.stream.as_mut().filter(|f| f.owner_fh == Some(fh)) {
                // The next handle to read takes the stream.
                f.owner_fh = None;
            }
            if s.opens > 0 {
                return Ok(());
            }
            let mut r = s.settle(&self.rt, owner);
            if s.stream.as_ref().is_none_or(|f| f.used) {
                r = r.and(self.detach(&mut s, "the file's last close"));
            }
            s.resume = None;
            s.drop_reads(&self.rt);
            r
        };
        let r = r.and(self.forget_if_closed(h.ino, &st, owner));
        // The last close: what was written is applied (and indexed), so it is sealed
        // now if it was made in a stream directory (`seal.rs`).
        if r.is_ok() {
            self.seals.closed(&self.rt, h.ino);
        }
        r
    }

    /// Drops the state of a file nobody has open (and with no stream waiting for an
    /// open): the engine is told it is closed.
    pub(crate) fn forget_if_closed(
        &self,
        ino: Ino,
        st: &Arc<Mutex<FileState>>,
        owner: u32,
    ) -> Result<(), Errno> {
        let last = {
            let mut files = lock(&self.files);
            let mut s = lock(st);
            let closed = s.opens == 0 && s.stream.is_none();
            if closed {
                files.remove(&ino);
                self.floors.forget(ino);
            }
            closed.then(|| std::mem::take(&mut s.engine_opens))
        };
        // Unused preallocation goes back to the free pool; a file whose name was
        // removed while open is freed at the last of these.
        for mode in last.unwrap_or_default() {
            self.rt
                .run_waiting(Op::CloseFile { ino, mode }, None, owner)
                .map_err(|e| errno_of(&e))?;
        }
        Ok(())
    }

    pub(crate) fn handle(&self, fh: FileHandle) -> Result<Handle, Errno> {
        lock(&self.handles).get(&fh.0).copied().ok_or(libc::EBADF)
    }

    /// The file's gathered writes on the disk (before truncate, setattr, rename over
    /// it, reading its size for a stream).
    pub(crate) fn settle(&self, ino: Ino, owner: u32) -> Result<(), Errno> {
        if let Some(st) = self.state(ino) {
            let mut st = lock(&st);
            st.settle(&self.rt, owner)?;
            st.drop_reads(&self.rt);
        }
        Ok(())
    }
}
