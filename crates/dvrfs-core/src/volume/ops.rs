//! Namespace operations: lookup, create, mkdir, symlink, unlink, rmdir, rename,
//! attributes. Each mutating call checks everything that can fail before it changes
//! anything, so an error leaves the file system as it was.

use super::*;
use crate::format::dir::MAX_NAME_BYTES;
use crate::format::inode::{
    InodeRecord, Protection, StreamDefault, StreamRetention, S_IFDIR, S_IFREG,
};

/// How a handle holds a file ([`Volume::open_file`]). A file held only by readers
/// (handles opened `Read`, playbacks) may be deleted by retention when a recording
/// admitted on reclaimable space needs its blocks (rule 6): its readers are told
/// "range expired". A writer's hold never yields.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpenMode {
    Read,
    Write,
}

/// Attribute changes for [`Fs::set_attr`]; `None` leaves a field alone.
#[derive(Clone, Debug, Default)]
pub struct SetAttr {
    pub mode: Option<u32>,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    pub mtime_ns: Option<i64>,
    /// A directory's default stream reservation: `Some(None)` clears it.
    pub stream_default: Option<Option<StreamDefault>>,
    /// A directory's retention policy (`dvrfs retention`): `Some(None)` clears it.
    pub retention: Option<Option<StreamRetention>>,
    /// A regular file's protection (`dvrfs protect`, through `Op::Protect`):
    /// `Some(None)` clears it.
    pub protection: Option<Option<Protection>>,
}

/// Checks a single path component.
pub fn validate_name(name: &[u8]) -> Result<()> {
    if name.len() > MAX_NAME_BYTES {
        return Err(Error::NameTooLong { len: name.len() });
    }
    if name.is_empty() || name == b"." || name == b".." || name.contains(&b'/') || name.contains(&0)
    {
        return Err(Error::InvalidName(
            String::from_utf8_lossy(name).into_owned(),
        ));
    }
    Ok(())
}

fn show(name: &[u8]) -> String {
    String::from_utf8_lossy(name).into_owned()
}

impl Volume {
    fn dir(&self, ino: Ino, what: &[u8]) -> Result<&Dir> {
        self.dirs.get(&ino).ok_or_else(|| Error::NotDir(show(what)))
    }

    pub fn lookup(&self, parent: Ino, name: &[u8]) -> Result<Ino> {
        self.dir(parent, name)?
            .entries
            .get(name)
            .map(|e| e.ino)
            .ok_or_else(|| Error::NotFound(show(name)))
    }

    /// Resolves an absolute path (symlinks are not followed).
    pub fn resolve(&self, path: &str) -> Result<Ino> {
        self.resolve_bytes(path.as_bytes())
    }

    /// [`Volume::resolve`] for a path of any bytes (names need not be UTF-8: the
    /// C API and the CLI take paths as bytes).
    pub fn resolve_bytes(&self, path: &[u8]) -> Result<Ino> {
        let mut ino = self.sb.root_ino;
        for comp in path
            .split(|&b| b == b'/')
            .filter(|c| !c.is_empty() && *c != b".")
        {
            if comp == b".." {
                ino = *self.parents.get(&ino).unwrap_or(&self.sb.root_ino);
                continue;
            }
            if comp.len() > MAX_NAME_BYTES {
                return Err(Error::NameTooLong { len: comp.len() });
            }
            if !self.dirs.contains_key(&ino) {
                return Err(Error::NotDir(show(path)));
            }
            ino = self.lookup(ino, comp).map_err(|e| match e {
                Error::NotFound(_) => Error::NotFound(show(path)),
                e => e,
            })?;
        }
        Ok(ino)
    }

    /// Splits a path into its parent directory and final name.
    pub fn resolve_parent<'p>(&self, path: &'p str) -> Result<(Ino, &'p [u8])> {
        self.resolve_parent_bytes(path.as_bytes())
    }

    /// [`Volume::resolve_parent`] for a path of any bytes.
    pub fn resolve_parent_bytes<'p>(&self, path: &'p [u8]) -> Result<(Ino, &'p [u8])> {
        let end = path.iter().rposition(|&b| b != b'/').map_or(0, |i| i + 1);
        let trimmed = &path[..end];
        let (dir, name) = match trimmed.iter().rposition(|&b| b == b'/') {
            Some(i) => (&trimmed[..i], &trimmed[i + 1..]),
            None => (&trimmed[..0], trimmed),
        };
        validate_name(name)?;
        let parent = self.resolve_bytes(dir)?;
        if !self.dirs.contains_key(&parent) {
            return Err(Error::NotDir(show(dir)));
        }
        Ok((parent, name))
    }

    pub fn stat(&self, ino: Ino) -> Result<Stat> {
        let i = self.inode(ino)?;
        Ok(Stat {
            ino,
            kind: i
                .kind()
                .ok_or_else(|| Error::Corrupt(format!("inode {ino} has no file type")))?,
            mode: i.attr.mode,
            nlink: i.attr.nlink,
            uid: i.attr.uid,
            gid: i.attr.gid,
            size_bytes: self.size_with_log(ino, i.attr.size_bytes),
            mtime_ns: i.attr.mtime_ns,
            ctime_ns: i.attr.ctime_ns,
            blocks: if i.kind() == Some(Kind::File) {
                i.runs.iter().map(|r| r.blocks().count() as u64).sum()
            } else {
                0
            },
            runs: i.runs.len(),
            lost_bytes: self.lost_ranges(ino)?.iter().map(|(s, e)| e - s).sum(),
            generation: i.attr.generation,
        })
    }

    /// The directory holding directory `ino` (the root is its own parent); `None` for
    /// an inode that is not a directory.
    pub fn parent(&self, ino: Ino) -> Option<Ino> {
        if ino == self.sb.root_ino {
            return Some(ino);
        }
        self.parents.get(&ino).copied()
    }

    /// Entries of a directory, sorted by name.
    pub fn readdir(&self, ino: Ino) -> Result<Vec<(Vec<u8>, Ino, Kind)>> {
        let dir = self
            .dirs
            .get(&ino)
            .ok_or_else(|| Error::NotDir(format!("inode {ino}")))?;
        Ok(dir
            .entries
            .iter()
            .map(|(n, e)| (n.clone(), e.ino, e.kind))
            .collect())
    }

    pub fn readlink(&self, ino: Ino) -> Result<Vec<u8>> {
        self.symlinks
            .get(&ino)
            .cloned()
            .ok_or_else(|| Error::InvalidArgument(format!("inode {ino} is not a symlink")))
    }

    pub fn inode_exists(&self, ino: Ino) -> bool {
        self.inodes.contains_key(&ino)
    }

    /// The regular file whose data removing the name `parent/name` would free (its last
    /// link), if any: the engine waits for that file's I/O in flight first.
    pub fn frees_on_unlink(&self, parent: Ino, name: &[u8]) -> Option<Ino> {
        let e = self.dirs.get(&parent)?.entries.get(name)?;
        let i = self.inodes.get(&e.ino)?;
        (i.kind() == Some(Kind::File) && i.attr.nlink <= 1 && !self.open_refs.contains_key(&e.ino))
            .then_some(e.ino)
    }

    /// The file whose data closing `ino` would free (an orphan's last close).
    pub fn frees_on_close(&self, ino: Ino) -> Option<Ino> {
        (self.orphans.contains(&ino) && self.open_refs.get(&ino).is_none_or(|&n| n <= 1))
            .then_some(ino)
    }

    /// How many holders (handles, streams) have `ino` open.
    pub fn open_count(&self, ino: Ino) -> u32 {
        self.open_refs.get(&ino).copied().unwrap_or(0)
    }

    /// Every file open (held by a handle or a stream), in no particular order.
    pub fn open_files(&self) -> impl Iterator<Item = Ino> + '_ {
        self.open_refs.keys().copied()
    }

    /// Whether `ino` is open and has no name left.
    pub fn is_orphan(&self, ino: Ino) -> bool {
        self.orphans.contains(&ino)
    }

    /// The data blocks of a file as (file block, device block, count) runs.
    pub fn runs(&self, ino: Ino) -> Result<Vec<crate::format::inode::Run>> {
        Ok(self.inode(ino)?.runs.clone())
    }

    /// The byte ranges `[start, end)` of a file lost to metadata damage, within its
    /// size; empty for an intact file (and for directories and symlinks).
    pub fn lost_ranges(&self, ino: Ino) -> Result<Vec<(u64, u64)>> {
        let i = self.inode(ino)?;
        let (bs, size) = (self.sb.data_block_bytes, i.attr.size_bytes);
        Ok(i.lost_ranges()
            .map(|(f, n)| ((f * bs).min(size), ((f + n) * bs).min(size)))
            .filter(|(s, e)| s < e)
            .collect())
    }

    pub(super) fn dirty_dir_block(&mut self, dir: Ino, index: u32) -> Result<()> {
        let b = self
            .inode(dir)?
            .lookup(index as u64)
            .ok_or_else(|| Error::Corrupt(format!("directory {dir} lost block {index}")))?;
        self.dirty.insert(b);
        Ok(())
    }

    /// Adds an entry, growing the directory by a block if no block has room.
    pub(super) fn dir_add(&mut self, parent: Ino, name: &[u8], ino: Ino, kind: Kind) -> Result<()> {
        let index = match self.dir(parent, name)?.block_with_room(name) {
            Some(i) => i,
            None => {
                // Names may not take the blocks kept for file maps (`volume/room.rs`).
                self.check_name_room(self.entry_blocks(parent, name)?)?;
                let index = self.dir(parent, name)?.blocks.len() as u32;
                let runs = self.inode(parent)?.runs.len();
                self.ensure_run_capacity(parent, runs + 1)?;
                let m = self.alloc_meta_block(1)?;
                self.owners
                    .insert(m, Owner::DirBlock { ino: parent, index });
                let (first, _) = self.inode_mut(parent)?.map_block(index as u64, m);
                self.dirty_runs_from(parent, first)?;
                self.dirs
                    .get_mut(&parent)
                    .expect("checked above")
                    .blocks
                    .push(Default::default());
                index
            }
        };
        self.dirs
            .get_mut(&parent)
            .expect("checked above")
            .insert(name, ino, kind, index);
        self.dirty_dir_block(parent, index)
    }

    fn dir_remove(&mut self, parent: Ino, name: &[u8]) -> Result<crate::meta::Entry> {
        let e = self
            .dirs
            .get_mut(&parent)
            .ok_or_else(|| Error::NotDir(show(name)))?
            .remove(name)
            .ok_or_else(|| Error::NotFound(show(name)))?;
        self.dirty_dir_block(parent, e.block)?;
        Ok(e)
    }

    fn touch(&mut self, ino: Ino, now_ns: i64) -> Result<()> {
        let a = &mut self.inode_mut(ino)?.attr;
        a.mtime_ns = now_ns;
        a.ctime_ns = now_ns;
        self.dirty_inode(ino);
        Ok(())
    }

    pub(super) fn new_inode(
        &mut self,
        parent: Ino,
        name: &[u8],
        mode: u32,
        uid: u32,
        gid: u32,
        now_ns: i64,
    ) -> Result<Ino> {
        self.check_writable()?;
        validate_name(name)?;
        if self.dir(parent, name)?.entries.contains_key(name) {
            return Err(Error::Exists(show(name)));
        }
        let ino = self.find_free_inode()?;
        let kind = Kind::from_mode(mode)
            .ok_or_else(|| Error::InvalidArgument(format!("mode {mode:o}")))?;
        self.dir_add(parent, name, ino, kind)?;
        let nlink = if kind == Kind::Dir { 2 } else { 1 };
        self.inodes.insert(
            ino,
            Inode {
                attr: InodeRecord {
                    mode,
                    nlink,
                    uid,
                    gid,
                    mtime_ns: now_ns,
                    ctime_ns: now_ns,
                    generation: self.next_generation,
                    ..Default::default()
                },
                runs: vec![],
            },
        );
        self.next_generation = self.next_generation.wrapping_add(1);
        self.free_inode_hint = ino + 1;
        self.dirty_inode(ino);
        self.touch(parent, now_ns)?;
        Ok(ino)
    }

    /// Creates an empty regular file.
    pub fn create(
        &mut self,
        parent: Ino,
        name: &[u8],
        perm: u32,
        uid: u32,
        gid: u32,
        now_ns: i64,
    ) -> Result<Ino> {
        let ino = self.new_inode(parent, name, S_IFREG | (perm & 0o7777), uid, gid, now_ns)?;
        Ok(ino)
    }

    pub fn mkdir(
        &mut self,
        parent: Ino,
        name: &[u8],
        perm: u32,
        uid: u32,
        gid: u32,
        now_ns: i64,
    ) -> Result<Ino> {
        let ino = self.new_inode(parent, name, S_IFDIR | (perm & 0o7777), uid, gid, now_ns)?;
        self.dirs.insert(ino, Dir::default());
        self.parents.insert(ino, parent);
        // A directory made in one with a default reservation inherits it (a
        // recorder's per-day or per-camera directories).
        let inherited = self.inode(parent)?.attr.stream_default();
        self.inode_mut(ino)?.attr.set_stream_default(inherited);
        self.inode_mut(parent)?.attr.nlink += 1;
        Ok(ino)
    }

    /// Directory `ino`'s default stream reservation (`None`: it has none, or it is
    /// not a directory).
    pub fn stream_default(&self, ino: Ino) -> Option<StreamDefault> {
        self.inode(ino).ok()?.attr.stream_default()
    }

    /// Removes a name of a file or symlink; the inode goes when its last name does.
    pub fn unlink(&mut self, parent: Ino, name: &[u8], now_ns: i64) -> Result<()> {
        self.check_writable()?;
        let e = *self
            .dir(parent, name)?
            .entries
            .get(name)
            .ok_or_else(|| Error::NotFound(show(name)))?;
        if e.kind == Kind::Dir {
            return Err(Error::IsDir(show(name)));
        }
        self.dir_remove(parent, name)?;
        self.drop_link(e.ino, now_ns)?;
        self.touch(parent, now_ns)?;
        Ok(())
    }

    /// A second (third, ...) name `parent/name` for regular file `ino` (a hard link).
    /// Directories and symbolic links have one name only.
    pub fn link(&mut self, ino: Ino, parent: Ino, name: &[u8], now_ns: i64) -> Result<()> {
        self.check_writable()?;
        validate_name(name)?;
        match self.inode(ino)?.kind() {
            Some(Kind::File) => {}
            Some(Kind::Dir) => return Err(Error::IsDir(format!("inode {ino}"))),
            _ => {
                return Err(Error::InvalidArgument(
                    "only regular files take hard links".into(),
                ))
            }
        }
        if self.inode(ino)?.attr.nlink == 0 {
            return Err(Error::NotFound(format!(
                "inode {ino} has no name left (removed while open)"
            )));
        }
        if self.dir(parent, name)?.entries.contains_key(name) {
            return Err(Error::Exists(show(name)));
        }
        if self.inode(ino)?.attr.nlink == u32::MAX {
            return Err(Error::InvalidArgument("too many links".into()));
        }
        self.dir_add(parent, name, ino, Kind::File)?;
        let a = &mut self.inode_mut(ino)?.attr;
        a.nlink += 1;
        a.ctime_ns = now_ns;
        self.dirty_inode(ino);
        self.touch(parent, now_ns)?;
        Ok(())
    }

    fn drop_link(&mut self, ino: Ino, now_ns: i64) -> Result<()> {
        let open = self.open_refs.contains_key(&ino);
        let a = &mut self.inode_mut(ino)?.attr;
        a.nlink = a.nlink.saturating_sub(1);
        a.ctime_ns = now_ns;
        let nlink = a.nlink;
        if nlink == 0 && !open {
            self.free_inode(ino)
        } else {
            if nlink == 0 {
                // Open: it lives on without a name until the last close.
                self.orphans.insert(ino);
            }
            self.dirty_inode(ino);
            Ok(())
        }
    }

    pub fn rmdir(&mut self, parent: Ino, name: &[u8], now_ns: i64) -> Result<()> {
        self.check_writable()?;
        let e = *self
            .dir(parent, name)?
            .entries
            .get(name)
            .ok_or_else(|| Error::NotFound(show(name)))?;
        if e.kind != Kind::Dir {
            return Err(Error::NotDir(show(name)));
        }
        if !self.dir(e.ino, name)?.entries.is_empty() {
            return Err(Error::NotEmpty(show(name)));
        }
        self.dir_remove(parent, name)?;
        self.free_inode(e.ino)?;
        self.inode_mut(parent)?.attr.nlink -= 1;
        self.touch(parent, now_ns)?;
        Ok(())
    }

    /// Moves `src_parent/src_name` to `dst_parent/dst_name`, replacing a file there or
    /// an empty directory (POSIX rename).
    pub fn rename(
        &mut self,
        src_parent: Ino,
        src_name: &[u8],
        dst_parent: Ino,
        dst_name: &[u8],
        now_ns: i64,
    ) -> Result<()> {
        self.check_writable()?;
        validate_name(dst_name)?;
        let src = *self
            .dir(src_parent, src_name)?
            .entries
            .get(src_name)
            .ok_or_else(|| Error::NotFound(show(src_name)))?;
        let dst = self
            .dir(dst_parent, dst_name)?
            .entries
            .get(dst_name)
            .copied();
        if src_parent == dst_parent && src_name == dst_name || dst.is_some_and(|d| d.ino == src.ino)
        {
            return Ok(());
        }
        if src.kind == Kind::Dir {
            let mut p = dst_parent;
            loop {
                if p == src.ino {
                    return Err(Error::Loop);
                }
                let up = *self.parents.get(&p).unwrap_or(&self.sb.root_ino);
                if up == p {
                    break;
                }
                p = up;
            }
        }
        match dst {
            Some(d) => {
                match (src.kind == Kind::Dir, d.kind == Kind::Dir) {
                    (true, false) => return Err(Error::NotDir(show(dst_name))),
                    (false, true) => return Err(Error::IsDir(show(dst_name))),
                    (true, true) if !self.dir(d.ino, dst_name)?.entries.is_empty() => {
                        return Err(Error::NotEmpty(show(dst_name)))
                    }
                    _ => {}
                }
                let dir = self.dirs.get_mut(&dst_parent).expect("checked above");
                dir.entries.insert(
                    dst_name.to_vec(),
                    crate::meta::Entry {
                        ino: src.ino,
                        kind: src.kind,
                        block: d.block,
                    },
                );
                self.dirty_dir_block(dst_parent, d.block)?;
                self.dir_remove(src_parent, src_name)?;
                if d.kind == Kind::Dir {
                    self.free_inode(d.ino)?;
                    self.inode_mut(dst_parent)?.attr.nlink -= 1;
                } else {
                    self.drop_link(d.ino, now_ns)?;
                }
            }
            None => {
                self.dir_add(dst_parent, dst_name, src.ino, src.kind)?;
                self.dir_remove(src_parent, src_name)?;
            }
        }
        if src.kind == Kind::Dir && src_parent != dst_parent {
            self.parents.insert(src.ino, dst_parent);
            self.inode_mut(src_parent)?.attr.nlink -= 1;
            self.inode_mut(dst_parent)?.attr.nlink += 1;
        }
        self.inode_mut(src.ino)?.attr.ctime_ns = now_ns;
        self.dirty_inode(src.ino);
        self.touch(src_parent, now_ns)?;
        self.touch(dst_parent, now_ns)?;
        Ok(())
    }

    pub fn set_attr(&mut self, ino: Ino, set: &SetAttr, now_ns: i64) -> Result<()> {
        self.check_writable()?;
        if let Some(d) = set.stream_default {
            if self.inode(ino)?.kind() != Some(Kind::Dir) {
                return Err(Error::InvalidArgument(format!(
                    "inode {ino} is not a directory: only directories carry a default stream reservation"
                )));
            }
            if d.is_some_and(|d| d.rate_bps == 0) {
                return Err(Error::InvalidArgument(
                    "a default stream reservation needs a rate".into(),
                ));
            }
        }
        if let Some(r) = set.retention {
            if self.inode(ino)?.kind() != Some(Kind::Dir) {
                return Err(Error::InvalidArgument(format!(
                    "inode {ino} is not a directory: a retention policy is set on a stream's directory (or a directory of streams)"
                )));
            }
            self.store_dir_retention(ino, r)?;
        }
        if let Some(p) = set.protection {
            self.store_protection(ino, p)?;
        }
        let a = &mut self.inode_mut(ino)?.attr;
        if let Some(d) = set.stream_default {
            a.set_stream_default(d);
        }
        if let Some(m) = set.mode {
            a.mode = (a.mode & S_IFMT) | (m & 0o7777);
        }
        if let Some(u) = set.uid {
            a.uid = u;
        }
        if let Some(g) = set.gid {
            a.gid = g;
        }
        if let Some(t) = set.mtime_ns {
            a.mtime_ns = t;
        }
        a.ctime_ns = now_ns;
        self.dirty_inode(ino);
        Ok(())
    }

    /// A handle on regular file `ino` is opened: until the matching
    /// [`Volume::close_file`], removing its last name keeps the file (an orphan).
    /// `mode` says whether the handle may write (see [`OpenMode`]).
    pub fn open_file(&mut self, ino: Ino, mode: OpenMode) -> Result<()> {
        match self.inode(ino)?.kind() {
            Some(Kind::File) => {
                *self.open_refs.entry(ino).or_default() += 1;
                if mode == OpenMode::Write {
                    *self.write_refs.entry(ino).or_default() += 1;
                }
                Ok(())
            }
            Some(Kind::Dir) => Err(Error::IsDir(format!("inode {ino}"))),
            _ => Err(Error::InvalidArgument(format!(
                "inode {ino} is not a regular file"
            ))),
        }
    }

    /// How many of `ino`'s holders may write to it (handles opened
    /// [`OpenMode::Write`]).
    pub fn writer_count(&self, ino: Ino) -> u32 {
        self.write_refs.get(&ino).copied().unwrap_or(0)
    }

    /// The file is closed (`mode` as it was opened). After the last close of what
    /// [`Volume::open_file`] opened (or for a file never opened that way): unused
    /// preallocation (contig) goes back to the free pool, and an orphan is freed.
    pub fn close_file(&mut self, ino: Ino, mode: OpenMode) -> Result<()> {
        if mode == OpenMode::Write {
            // A close that names the wrong mode (a client's mistake) only makes the
            // file look read-only sooner; the count never wraps.
            if let Some(n) = self.write_refs.get_mut(&ino) {
                *n -= 1;
                if *n == 0 {
                    self.write_refs.remove(&ino);
                }
            }
        }
        match self.open_refs.get_mut(&ino) {
            Some(n) if *n > 1 => {
                *n -= 1;
                return Ok(());
            }
            Some(_) => {
                self.open_refs.remove(&ino);
                self.write_refs.remove(&ino);
            }
            None => {}
        }
        self.data.release(ino);
        if self.orphans.remove(&ino) {
            self.free_inode(ino)?;
        }
        Ok(())
    }
}
