//! Retention policies as the volume stores them (FORMAT.md sections 5 and 7;
//! `dvrfs retention`): the volume's (`high`, `low`, `protected-max`) in the
//! superblock, a stream directory's (`max-age`, `min-age`, `max-size`) in its inode
//! record. Storing the first policy on a volume without [`FEATURE_RETENTION`] sets
//! the bit, so that a build that does not know policies refuses the volume instead
//! of reading a directory's policy as a frame index. What the policies make the
//! engine delete is `crate::retention`'s.

use super::*;
use crate::format::inode::{Protection, StreamRetention};
use crate::format::superblock::{VolumeRetention, FEATURE_PROTECTION, FEATURE_RETENTION};

impl Volume {
    /// The volume's retention policy (all 0: none).
    pub fn volume_retention(&self) -> VolumeRetention {
        self.sb.retention
    }

    /// Sets the volume's retention policy (all 0 clears it). Refused with the
    /// reason when `low` is not at most `high`, either is above 100 %, only one is
    /// set, or `protected_max` is above 100 %.
    pub fn set_volume_retention(&mut self, r: VolumeRetention) -> Result<()> {
        self.check_writable()?;
        check_volume_retention(&r)?;
        self.mark_retention_feature();
        self.sb.retention = r;
        self.dirty.insert(0);
        Ok(())
    }

    /// Whether any retention policy is set: the volume's high mark, or a
    /// directory's (then the engine plans deletions).
    pub fn retention_active(&self) -> bool {
        self.sb.retention.high_permille > 0
            || self.dirs.keys().any(|&d| self.dir_retention(d).is_some())
    }

    /// Directory `ino`'s own retention policy (`None`: it has none, or it is not a
    /// directory).
    pub fn dir_retention(&self, ino: Ino) -> Option<StreamRetention> {
        self.inode(ino).ok()?.attr.retention()
    }

    /// The policy that governs the stream in directory `dir`: its own, else the
    /// nearest directory above it that has one, up to the root.
    pub fn effective_retention(&self, dir: Ino) -> Option<(Ino, StreamRetention)> {
        let mut at = dir;
        // A directory tree is at most as deep as there are directories.
        for _ in 0..=self.dirs.len() {
            if let Some(r) = self.dir_retention(at) {
                return Some((at, r));
            }
            let up = self.parent(at)?;
            if up == at {
                return None;
            }
            at = up;
        }
        unreachable!("directory {dir}: its parents loop (a dvrfs bug)")
    }

    /// Sets directory `ino`'s policy in its record (`SetAttr::retention`); the
    /// caller checked that it is a directory.
    pub(super) fn store_dir_retention(
        &mut self,
        ino: Ino,
        r: Option<StreamRetention>,
    ) -> Result<()> {
        if let Some(r) = r {
            if r.min_age_s > 0 && r.max_age_s > 0 && r.min_age_s > r.max_age_s {
                return Err(Error::InvalidArgument(format!(
                    "--min-age {}s is longer than --max-age {}s: data must go at max-age",
                    r.min_age_s, r.max_age_s
                )));
            }
            if !r.is_none() {
                self.mark_retention_feature();
            }
        }
        self.inode_mut(ino)?.attr.set_retention(r);
        Ok(())
    }

    /// Regular file `ino`'s protection, if it has one (held or expired).
    pub fn protection(&self, ino: Ino) -> Option<Protection> {
        self.inode(ino).ok()?.attr.protection
    }

    /// Sets or clears regular file `ino`'s protection (`SetAttr::protection`).
    /// The first one stored on a volume without [`FEATURE_PROTECTION`] sets the bit.
    pub(super) fn store_protection(&mut self, ino: Ino, p: Option<Protection>) -> Result<()> {
        if self.inode(ino)?.kind() != Some(Kind::File) {
            return Err(Error::InvalidArgument(format!(
                "inode {ino} is not a regular file: a protection covers a stream's chunks"
            )));
        }
        if p.is_some_and(|p| p.id == 0) {
            return Err(Error::InvalidArgument("protection id 0".into()));
        }
        if p.is_some() && !self.sb.has_protection() {
            self.sb.features |= FEATURE_PROTECTION;
            self.dirty.insert(0);
        }
        self.inode_mut(ino)?.attr.set_protection(p);
        Ok(())
    }

    fn mark_retention_feature(&mut self) {
        if !self.sb.has_retention() {
            self.sb.features |= FEATURE_RETENTION;
            self.dirty.insert(0);
        }
    }
}

/// Whether `r` is a policy a volume can have (see `Volume::set_volume_retention`);
/// the error says what is wrong.
pub fn check_volume_retention(r: &VolumeRetention) -> Result<()> {
    let (h, l) = (r.high_permille, r.low_permille);
    if (h == 0) != (l == 0) {
        return Err(Error::InvalidArgument(
            "a volume's retention needs both --high and --low (or neither)".into(),
        ));
    }
    if h > 1000 || r.protected_max_permille > 1000 {
        return Err(Error::InvalidArgument(
            "retention shares are at most 100%".into(),
        ));
    }
    if l > h {
        return Err(Error::InvalidArgument(format!(
            "retention --low {}% is above --high {}%: deletion stops at low, which must be at most high",
            f64::from(l) / 10.0,
            f64::from(h) / 10.0
        )));
    }
    Ok(())
}
