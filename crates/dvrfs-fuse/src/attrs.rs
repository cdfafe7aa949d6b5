//! The operations of the mount that change or report a file's attributes and the
//! namespace beyond a lookup: `setattr` (truncate, times, mode and owner), `create`,
//! `fallocate`, `readdir` and `statfs`. The `Filesystem` trait in `lib.rs` answers
//! the kernel with what these return (`statfs` answers it itself). A user's
//! `fallocate` and `statfs` see the share kept for root ([`crate::share`]).

use super::*;

impl DvrfsFs {
    pub(crate) fn do_setattr(
        &self,
        req: &Request,
        ino: Ino,
        size: Option<u64>,
        set: SetAttr,
    ) -> Result<FileAttr, Errno> {
        let owner = req.pid();
        if let Some(size) = size {
            self.seals.unhashed(ino);
            let s = self.stat(ino)?;
            if s.kind == Kind::Dir {
                return Err(libc::EISDIR);
            }
            self.settle(ino, owner)?;
            let truncate = || {
                self.run(
                    Op::Truncate {
                        ino,
                        size_bytes: size,
                    },
                    owner,
                )
            };
            match self.state(ino) {
                Some(st) if lock(&st).stream.is_some() => {
                    // The stream ends, the file is cut, the stream is admitted again
                    // (a playback where it was, a recording at the new end).
                    let mut st = lock(&st);
                    let s = st.stream.as_ref().expect("checked");
                    let (res, next) = (s.res.clone(), s.next.min(size));
                    self.detach(&mut st, "the file was truncated")?;
                    truncate()?;
                    let _ = self.attach(&mut st, res, next, true, owner);
                }
                _ => {
                    truncate()?;
                }
            }
            self.floors.truncated(ino);
            if size == 0 {
                // The bytes the last stream's figures describe are gone (an `O_TRUNC`
                // open comes here: `ffmpeg -y` rewriting a recording); a stream
                // admitted again above has its own.
                lock(&self.ended).remove(ino);
            }
        }
        if set.mode.is_some() || set.uid.is_some() || set.gid.is_some() || set.mtime_ns.is_some() {
            self.run(Op::SetAttr { ino, set }, owner)?;
        }
        self.getattr_of(ino)
    }

    pub(crate) fn do_create(
        &self,
        req: &Request,
        parent: Ino,
        name: &[u8],
        mode: u32,
        kind: Kind,
    ) -> Result<Ino, Errno> {
        let dir = kind == Kind::Dir;
        let (uid, gid, mode) = self.new_owner(req, parent, mode & 0o7777, dir);
        let op = if dir {
            Op::Mkdir {
                parent,
                name: name.to_vec(),
                perm: mode,
                uid,
                gid,
            }
        } else {
            Op::Create {
                parent,
                name: name.to_vec(),
                perm: mode,
                uid,
                gid,
            }
        };
        match self.run(op, req.pid())? {
            Output::Ino(ino) => Ok(ino),
            other => panic!("create completed as {other:?}"),
        }
    }

    /// `fallocate` (mode 0, or `FALLOC_FL_KEEP_SIZE` inside the file): every part of
    /// the range no data block backs is written with zeros, so later writes there
    /// cannot fail for lack of space and the allocation survives a remount. The format
    /// has no unwritten extents, so this costs the writes (as glibc's emulation
    /// would); the space is checked first, so `ENOSPC` leaves the file as it was.
    /// Punching holes, zeroing, collapsing and inserting ranges: `EOPNOTSUPP`.
    pub(crate) fn do_fallocate(
        &self,
        req: &Request,
        fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
    ) -> Result<(), Errno> {
        if mode & !libc::FALLOC_FL_KEEP_SIZE != 0 {
            return Err(libc::EOPNOTSUPP);
        }
        if self.read_only {
            return Err(libc::EROFS);
        }
        let h = self.handle(fh)?;
        let st = self.state(h.ino).ok_or(libc::EBADF)?;
        let mut st = lock(&st);
        st.settle(&self.rt, req.pid())?;
        st.drop_reads(&self.rt);
        let ino = h.ino;
        let (size, holes, free, total) = self
            .rt
            .query(move |v| {
                let sb = v.superblock();
                Ok::<_, dvrfs_core::Error>((
                    v.planned_size(ino)?,
                    v.unallocated(ino, offset, length)?,
                    v.available_bytes(),
                    sb.data_blocks * sb.data_block_bytes,
                ))
            })
            .map_err(|e| errno_of(&e))?
            .map_err(|e| e.errno())?;
        let size = st.size_with_pending(size);
        if mode & libc::FALLOC_FL_KEEP_SIZE != 0 && holes.iter().any(|&(_, e)| e > size) {
            // Blocks past the end of a file are not part of the format.
            return Err(libc::EOPNOTSUPP);
        }
        let bs = self.block_bytes;
        let need: u64 = holes
            .iter()
            .map(|&(s, e)| (e.div_ceil(bs) - s / bs) * bs)
            .sum();
        if need > free {
            return Err(libc::ENOSPC);
        }
        // A user's allocation may not take the share kept for root (`crate::share`).
        let share = self.quota.root_share();
        let room = crate::share::Room {
            need,
            available: free,
            kept: crate::share::kept_bytes(total, share.pct()),
        };
        share.decide(&self.rt, req.uid(), ino, &room)?;
        for (s, e) in holes {
            let mut at = s;
            while at < e {
                let n = (e - at).min(self.chunk - at % self.chunk);
                self.run(
                    Op::Write {
                        ino,
                        offset: at,
                        data: dvrfs_core::engine::IoBuf::zeroed(n as usize),
                    },
                    req.pid(),
                )?;
                at += n;
            }
        }
        Ok(())
    }

    pub(crate) fn do_readdir(&self, ino: Ino) -> Result<Vec<(Vec<u8>, Ino, Kind)>, Errno> {
        let (parent, entries) = self
            .rt
            .query(move |v| (v.parent(ino), v.readdir(ino)))
            .map_err(|e| errno_of(&e))?;
        let entries = entries.map_err(|e| e.errno())?;
        let mut all = vec![
            (b".".to_vec(), ino, Kind::Dir),
            (b"..".to_vec(), parent.unwrap_or(ino), Kind::Dir),
        ];
        all.extend(entries);
        Ok(all)
    }

    /// `readdir`: the entries from `offset` on, as many as the reply holds.
    pub(crate) fn list(&self, ino: INodeNo, offset: u64, mut reply: ReplyDirectory) {
        match Self::ino(ino).and_then(|i| self.do_readdir(i)) {
            Ok(all) => {
                for (k, (name, ino, kind)) in all.iter().enumerate().skip(offset as usize) {
                    if reply.add(
                        INodeNo(*ino as u64),
                        k as u64 + 1,
                        file_type(*kind),
                        OsStr::from_bytes(name),
                    ) {
                        break;
                    }
                }
                reply.ok()
            }
            Err(e) => reply.error(err(e)),
        }
    }

    /// `readdirplus`: the same, each with its attributes.
    pub(crate) fn list_plus(&self, ino: INodeNo, offset: u64, mut reply: ReplyDirectoryPlus) {
        match Self::ino(ino).and_then(|i| self.do_readdir(i)) {
            Ok(all) => {
                for (k, (name, ino, _)) in all.iter().enumerate().skip(offset as usize) {
                    let Ok(s) = self.stat(*ino) else { continue };
                    if reply.add(
                        INodeNo(*ino as u64),
                        k as u64 + 1,
                        OsStr::from_bytes(name),
                        &TTL,
                        &self.attr(&s),
                        Generation(s.generation as u64),
                    ) {
                        break; // full: this entry was not given
                    }
                    self.given.give(&s);
                }
                reply.ok()
            }
            Err(e) => reply.error(err(e)),
        }
    }

    /// `statfs`: the share kept for root ([`crate::share`]) counts as free
    /// (`f_bfree`) but not as available to users (`f_bavail`), as ext4's reserved
    /// blocks do, so `df` as a user shows what the user can write.
    pub(crate) fn do_statfs(&self, reply: ReplyStatfs) {
        let pct = self.quota.root_share().pct();
        let r = self.rt.query(move |v| {
            let info = v.info();
            let sb = &info.sb;
            // Uncommitted frees count; a name needs an inode and metadata room.
            let free = v.available_bytes();
            let kept = crate::share::kept_bytes(sb.data_blocks * sb.data_block_bytes, pct);
            let free_inodes = (sb.inode_count as u64).saturating_sub(info.files + info.dirs);
            (
                sb.data_blocks,
                free / sb.data_block_bytes,
                free.saturating_sub(kept) / sb.data_block_bytes,
                sb.inode_count as u64,
                free_inodes.min(v.names_left()),
                sb.data_block_bytes as u32,
            )
        });
        match r {
            Ok((blocks, bfree, bavail, files, ffree, bsize)) => reply.statfs(
                blocks,
                bfree,
                bavail,
                files,
                ffree,
                bsize,
                dvrfs_core::format::dir::MAX_NAME_BYTES as u32,
                bsize,
            ),
            Err(e) => reply.error(err(errno_of(&e))),
        }
    }
}
