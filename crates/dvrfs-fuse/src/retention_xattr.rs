//! The `user.dvrfs.retention` extended attribute (issue 26, docs/retention.md): a
//! directory's retention policy, and at the mount's root also the volume's, as
//! `dvrfs retention` sets them, for programs that only see the mount.
//!
//! The value is text, `KEY=VALUE` parts joined by commas (`dvrfs_core::retention`'s
//! `parse_policy`): `max-age=30d,min-age=7d,max-size=500G` on a stream's directory
//! (or a directory of streams); at the root also `high=95%,low=90%` and
//! `protected-max=20%`. Setting it replaces the directory's policy (and, at the
//! root, the volume's if the value names any of its keys: only root may); removing
//! it clears the directory's (and at the root the volume's). Reading gives what is
//! set, `ENODATA` when nothing is. A bad value is `EINVAL`, the reason in the
//! daemon's log; a file has none (`EPERM` to set).

use super::*;
use crate::xattr::check_xattr_flags;
use dvrfs_core::format::inode::StreamRetention;
use dvrfs_core::format::superblock::VolumeRetention;
use dvrfs_core::retention::{attribute_text, parse_policy, stream_parts, volume_parts};

/// The attribute's name.
pub const RETENTION_XATTR: &str = "user.dvrfs.retention";

impl DvrfsFs {
    fn is_root(&self, ino: Ino) -> Result<bool, Errno> {
        self.rt
            .query(move |v| v.root() == ino)
            .map_err(|e| errno_of(&e))
    }

    fn policies(&self, ino: Ino) -> Result<(Option<StreamRetention>, VolumeRetention), Errno> {
        self.rt
            .query(move |v| (v.dir_retention(ino), v.volume_retention()))
            .map_err(|e| errno_of(&e))
    }

    /// `getfattr -n user.dvrfs.retention`.
    pub(crate) fn get_retention(&self, ino: Ino) -> Result<String, Errno> {
        if self.stat(ino)?.kind != Kind::Dir {
            return Err(libc::ENODATA);
        }
        let (own, vol) = self.policies(ino)?;
        let mut parts = own.map(|r| stream_parts(&r)).unwrap_or_default();
        if self.is_root(ino)? {
            parts.extend(volume_parts(&vol));
        }
        if parts.is_empty() {
            return Err(libc::ENODATA);
        }
        Ok(attribute_text(&parts))
    }

    /// `setfattr -n user.dvrfs.retention -v TEXT`.
    pub(crate) fn set_retention(
        &self,
        req: &Request,
        ino: Ino,
        value: &[u8],
        flags: i32,
    ) -> Result<(), Errno> {
        if self.stat(ino)?.kind != Kind::Dir {
            return Err(libc::EPERM);
        }
        let bad = |why: String| {
            eprintln!(
                "{} dvrfs: directory inode {ino}: {RETENTION_XATTR}: {why}",
                stamp()
            );
            libc::EINVAL
        };
        let p = parse_policy(&String::from_utf8_lossy(value)).map_err(bad)?;
        let root = self.is_root(ino)?;
        if p.volume.is_some() && !root {
            return Err(bad(
                "high, low and protected-max are the volume's: set them on the mount's root".into(),
            ));
        }
        if p.volume.is_some() && req.uid() != 0 {
            return Err(libc::EPERM);
        }
        check_xattr_flags(flags, self.get_retention(ino).is_ok())?;
        let set = SetAttr {
            retention: Some(Some(p.stream)),
            ..Default::default()
        };
        self.run(Op::SetAttr { ino, set }, req.pid())
            .inspect_err(|&e| {
                if e == libc::EINVAL {
                    bad("refused by the volume (min-age longer than max-age?)".into());
                }
            })?;
        if let Some(v) = p.volume {
            self.run(Op::SetVolumeRetention(v), req.pid())
                .inspect_err(|&e| {
                    if e == libc::EINVAL {
                        bad("refused by the volume (low above high, or only one of them?)".into());
                    }
                })?;
        }
        eprintln!(
            "{} dvrfs: directory inode {ino}: retention {}",
            stamp(),
            String::from_utf8_lossy(value)
        );
        Ok(())
    }

    /// `setfattr -x user.dvrfs.retention`.
    pub(crate) fn remove_retention(&self, req: &Request, ino: Ino) -> Result<(), Errno> {
        if self.get_retention(ino).is_err() {
            return Err(libc::ENODATA);
        }
        let root = self.is_root(ino)?;
        let (_, vol) = self.policies(ino)?;
        if root && vol != VolumeRetention::default() && req.uid() != 0 {
            return Err(libc::EPERM);
        }
        let set = SetAttr {
            retention: Some(None),
            ..Default::default()
        };
        self.run(Op::SetAttr { ino, set }, req.pid())?;
        if root {
            self.run(
                Op::SetVolumeRetention(VolumeRetention::default()),
                req.pid(),
            )?;
        }
        Ok(())
    }
}
