//! The `user.dvrfs.stream` extended attribute as the mount sees it: setting,
//! reading and removing a file's reservation or a directory's default, and the
//! default a new file inherits. What a reservation does once set is `stream.rs`;
//! who owns it and how much a user may hold is `quota.rs`.

use super::*;

impl DvrfsFs {
    /// A file created in a directory with a default reservation gets it.
    pub(crate) fn inherit_reservation(
        &self,
        req: &Request,
        parent: Ino,
        ino: Ino,
    ) -> Result<(), Errno> {
        if self.read_only {
            return Ok(());
        }
        let d = self
            .rt
            .query(move |v| v.stream_default(parent))
            .map_err(|e| errno_of(&e))?;
        let Some(d) = d.filter(|d| d.write) else {
            return Ok(());
        };
        let st = self.state(ino).ok_or(libc::EBADF)?;
        let mut st = lock(&st);
        st.stream_uid = req.uid();
        self.attach(&mut st, Reservation::from_default(&d), 0, true, req.pid())
    }

    /// `setfattr -n user.dvrfs.stream -v TEXT`: a file's reservation (admitted now) or
    /// a directory's default.
    pub(crate) fn set_reservation(
        &self,
        req: &Request,
        ino: Ino,
        value: &[u8],
        flags: i32,
    ) -> Result<(), Errno> {
        let text = String::from_utf8_lossy(value);
        let res = Reservation::parse(&text).map_err(|why| {
            eprintln!("{} dvrfs: inode {ino}: {XATTR}: {why}", stamp());
            libc::EINVAL
        })?;
        let kind = self.stat(ino)?.kind;
        match kind {
            Kind::Dir => {
                if self.read_only {
                    return Err(libc::EROFS);
                }
                let d = if res.dir == StreamDir::Write {
                    res.to_default()
                } else {
                    Err(format!("{res}: a directory's default is given to the files created in it, recordings: write:RATE,duration=TIME"))
                }
                .map_err(|why| {
                    eprintln!("{} dvrfs: directory inode {ino}: {XATTR}: {why}", stamp());
                    libc::EINVAL
                })?;
                let had = self
                    .rt
                    .query(move |v| v.stream_default(ino))
                    .map_err(|e| errno_of(&e))?
                    .is_some();
                check_xattr_flags(flags, had)?;
                let set = SetAttr {
                    stream_default: Some(Some(d)),
                    ..Default::default()
                };
                self.run(Op::SetAttr { ino, set }, req.pid())?;
                eprintln!(
                    "{} dvrfs: directory inode {ino}: files created in it get {}",
                    stamp(),
                    Reservation::from_default(&d)
                );
                Ok(())
            }
            Kind::File => {
                // The map's lock is held throughout, so the last close of the file
                // cannot drop the state between its making and the stream's.
                let mut files = lock(&self.files);
                let st = self.file_state(&mut files, ino, req.pid(), OpenMode::Write)?;
                let r = (|| {
                    let mut s = lock(&st);
                    check_xattr_flags(flags, s.stream.is_some())?;
                    self.detach(&mut s, "replaced by a new reservation")?;
                    let used = s.opens > 0;
                    s.stream_uid = req.uid();
                    self.attach(&mut s, res, 0, used, req.pid())
                })();
                drop(files);
                if r.is_err() {
                    self.forget_if_closed(ino, &st, req.pid())?;
                }
                r
            }
            _ => Err(libc::EPERM),
        }
    }

    /// `getfattr -n user.dvrfs.stream`: the reservation and how it fares.
    pub(crate) fn get_reservation(&self, ino: Ino) -> Result<String, Errno> {
        let kind = self.stat(ino)?.kind;
        if kind == Kind::Dir {
            let d = self
                .rt
                .query(move |v| v.stream_default(ino))
                .map_err(|e| errno_of(&e))?
                .ok_or(libc::ENODATA)?;
            return Ok(stream::describe(
                &Reservation::from_default(&d),
                "default",
                None,
                None,
            ));
        }
        let live = lock(&self.streamed).get(&ino).cloned();
        if let Some((res, info)) = live {
            let stats = self.rt.stream(info.id).map_err(|e| errno_of(&e))?;
            // No figures: the engine has closed the stream and its `detach` has not
            // yet put the final figures under `ended`.
            let state = if stats.is_some() {
                "admitted"
            } else {
                "ending"
            };
            return Ok(stream::describe(
                &res,
                state,
                Some(&info),
                stats.as_ref().map(|(_, s)| s),
            ));
        }
        lock(&self.ended).get(ino).ok_or(libc::ENODATA)
    }

    /// `setfattr -x user.dvrfs.stream`: the file's stream ends, or the directory's
    /// default goes.
    pub(crate) fn remove_reservation(&self, req: &Request, ino: Ino) -> Result<(), Errno> {
        let kind = self.stat(ino)?.kind;
        if kind == Kind::Dir {
            let had = self
                .rt
                .query(move |v| v.stream_default(ino))
                .map_err(|e| errno_of(&e))?
                .is_some();
            if !had {
                return Err(libc::ENODATA);
            }
            let set = SetAttr {
                stream_default: Some(None),
                ..Default::default()
            };
            self.run(Op::SetAttr { ino, set }, req.pid())?;
            eprintln!(
                "{} dvrfs: directory inode {ino}: default reservation removed",
                stamp()
            );
            return Ok(());
        }
        let ended = lock(&self.ended).remove(ino);
        let Some(st) = self.state(ino) else {
            return if ended { Ok(()) } else { Err(libc::ENODATA) };
        };
        let had = {
            let mut s = lock(&st);
            let had = s.stream.is_some();
            let r = self.detach(&mut s, "its attribute was removed");
            lock(&self.ended).remove(ino);
            r?;
            had
        };
        self.forget_if_closed(ino, &st, req.pid())?;
        if had || ended {
            Ok(())
        } else {
            Err(libc::ENODATA)
        }
    }
}

impl DvrfsFs {
    /// `setxattr` of attribute `name`: the ones this mount keeps, each its module's.
    pub(crate) fn xattr_set(
        &self,
        req: &Request,
        ino: Ino,
        name: &[u8],
        value: &[u8],
        flags: i32,
    ) -> Result<(), Errno> {
        match name {
            n if n == XATTR.as_bytes() => self.set_reservation(req, ino, value, flags),
            // Written by the file system as the file is.
            n if n == KEYFRAMES_XATTR.as_bytes() => Err(libc::EPERM),
            n if n == RETENTION_XATTR.as_bytes() => self.set_retention(req, ino, value, flags),
            _ => Err(libc::EOPNOTSUPP),
        }
    }

    /// `getxattr` of attribute `name`.
    pub(crate) fn xattr_get(&self, ino: Ino, name: &[u8]) -> Result<String, Errno> {
        match name {
            n if n == XATTR.as_bytes() => self.get_reservation(ino),
            n if n == KEYFRAMES_XATTR.as_bytes() => self.get_keyframes(ino),
            n if n == RETENTION_XATTR.as_bytes() => self.get_retention(ino),
            _ => Err(libc::ENODATA),
        }
    }

    /// `listxattr`: the attributes `ino` has, each name NUL-terminated.
    pub(crate) fn xattr_names(&self, ino: Ino) -> Vec<u8> {
        let mut names = vec![];
        for (name, has) in [
            (XATTR, self.get_reservation(ino).is_ok()),
            (KEYFRAMES_XATTR, self.has_keyframes(ino)),
            (RETENTION_XATTR, self.get_retention(ino).is_ok()),
        ] {
            if has {
                names.extend_from_slice(name.as_bytes());
                names.push(0);
            }
        }
        names
    }

    /// `removexattr` of attribute `name`.
    pub(crate) fn xattr_remove(&self, req: &Request, ino: Ino, name: &[u8]) -> Result<(), Errno> {
        match name {
            n if n == XATTR.as_bytes() => self.remove_reservation(req, ino),
            n if n == KEYFRAMES_XATTR.as_bytes() => Err(libc::EPERM),
            n if n == RETENTION_XATTR.as_bytes() => self.remove_retention(req, ino),
            _ => Err(libc::ENODATA),
        }
    }
}

/// An extended attribute's value: its size when asked (`size` 0), `ERANGE` when it
/// does not fit.
pub(crate) fn reply_xattr(reply: ReplyXattr, value: &[u8], size: u32) {
    if size == 0 {
        reply.size(value.len() as u32)
    } else if value.len() > size as usize {
        reply.error(fuser::Errno::from_i32(libc::ERANGE))
    } else {
        reply.data(value)
    }
}

/// `XATTR_CREATE` on an attribute that exists, `XATTR_REPLACE` on one that does not.
pub(crate) fn check_xattr_flags(flags: i32, exists: bool) -> Result<(), Errno> {
    if flags & libc::XATTR_CREATE != 0 && exists {
        return Err(libc::EEXIST);
    }
    if flags & libc::XATTR_REPLACE != 0 && !exists {
        return Err(libc::ENODATA);
    }
    Ok(())
}
