//! Namespace commands: `ls`, `stat`, `mkdir`, `rm` and `mv`.
//!
//! `ls` and `stat` of a mounted volume ask its daemon (`target::daemon`); the others
//! open the volume themselves and are refused while it is mounted.
//!
//! Paths inside the file system are absolute; a missing leading `/` means the same.
//! Mutating commands commit once at the end (`close`), and tick the commit clock after
//! each operation so that a long `rm -r` commits on the usual interval.

use dvrfs_core::format::dir::Kind;
use dvrfs_core::meta::Ino;
use dvrfs_core::{Error as CoreError, Stat};
use serde_json::{json, Value};

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use crate::args::{LsArgs, MkdirArgs, MvArgs, RmArgs, StatArgs};
use crate::error::{CliError, CliResult};
use crate::ospath;
use crate::output::{kind_name, mode_string, print_json, time_string};
use crate::target::{daemon, now_ns, open_fs, open_fs_for_paths, process_owner, Access, DevFs};

/// Permissions of directories that mkdir creates.
const DIR_PERM: u32 = 0o755;

fn lossy(name: &[u8]) -> String {
    String::from_utf8_lossy(name).into_owned()
}

/// A name as `ls` prints it: control characters, backslashes and bytes that are not
/// UTF-8 escaped (`\x1b`, `\\`, `\xff`), so a name can neither drive the terminal
/// nor pass for two names.
pub fn shown(name: &[u8]) -> String {
    let mut out = String::with_capacity(name.len());
    for chunk in name.utf8_chunks() {
        for c in chunk.valid().chars() {
            match c {
                '\\' => out.push_str("\\\\"),
                c if c.is_control() => {
                    let mut b = [0u8; 4];
                    for byte in c.encode_utf8(&mut b).bytes() {
                        out.push_str(&format!("\\x{byte:02x}"));
                    }
                }
                c => out.push(c),
            }
        }
        for byte in chunk.invalid() {
            out.push_str(&format!("\\x{byte:02x}"));
        }
    }
    out
}

/// A core error about `path` that names only its last component, with the whole path.
fn at_path(path: &str) -> impl Fn(CoreError) -> CoreError + '_ {
    move |e| match e {
        CoreError::Exists(_) => CoreError::Exists(path.to_string()),
        e => e,
    }
}

/// What `ls` and `stat` ask of a volume: opened here, or through its daemon.
trait Meta {
    fn resolve(&self, path: &str) -> CliResult<Ino>;
    /// The entry `name` of directory `parent`, `None` when there is none.
    fn find(&self, parent: Ino, name: &[u8]) -> CliResult<Option<Ino>>;
    /// A path as the command line gave it (any bytes: `ospath`).
    fn resolve_os(&self, path: &OsStr) -> CliResult<Ino> {
        ospath::resolve(path, |p| self.resolve(p), |i, n| self.find(i, n))
    }
    fn stat(&self, ino: Ino) -> CliResult<Stat>;
    fn readdir(&self, ino: Ino) -> CliResult<Vec<(Vec<u8>, Ino, Kind)>>;
    fn readlink(&self, ino: Ino) -> CliResult<Vec<u8>>;
}

impl Meta for DevFs {
    fn resolve(&self, path: &str) -> CliResult<Ino> {
        Ok((**self).resolve(path)?)
    }
    fn find(&self, parent: Ino, name: &[u8]) -> CliResult<Option<Ino>> {
        ospath::found((**self).lookup(parent, name), |e| {
            matches!(e, CoreError::NotFound(_))
        })
    }
    fn stat(&self, ino: Ino) -> CliResult<Stat> {
        Ok((**self).stat(ino)?)
    }
    fn readdir(&self, ino: Ino) -> CliResult<Vec<(Vec<u8>, Ino, Kind)>> {
        Ok((**self).readdir(ino)?)
    }
    fn readlink(&self, ino: Ino) -> CliResult<Vec<u8>> {
        Ok((**self).readlink(ino)?)
    }
}

impl Meta for dvrfs_remote::Client {
    fn resolve(&self, path: &str) -> CliResult<Ino> {
        Ok(dvrfs_remote::Client::resolve(self, path)?)
    }
    fn find(&self, parent: Ino, name: &[u8]) -> CliResult<Option<Ino>> {
        ospath::found(dvrfs_remote::Client::lookup(self, parent, name), |e| {
            matches!(
                e,
                dvrfs_runtime::RuntimeError::Engine(CoreError::NotFound(_))
            )
        })
    }
    fn stat(&self, ino: Ino) -> CliResult<Stat> {
        Ok(dvrfs_remote::Client::stat(self, ino)?)
    }
    fn readdir(&self, ino: Ino) -> CliResult<Vec<(Vec<u8>, Ino, Kind)>> {
        Ok(dvrfs_remote::Client::readdir(self, ino)?)
    }
    fn readlink(&self, ino: Ino) -> CliResult<Vec<u8>> {
        Ok(dvrfs_remote::Client::readlink(self, ino)?)
    }
}

fn long_line(fs: &impl Meta, st: &Stat, name: &str) -> CliResult<String> {
    let mut line = format!(
        "{} {:>3} {:>5} {:>5} {:>14} {} {name}",
        mode_string(st.kind, st.mode),
        st.nlink,
        st.uid,
        st.gid,
        st.size_bytes,
        time_string(st.mtime_ns),
    );
    if st.kind == Kind::Symlink {
        line.push_str(&format!(" -> {}", shown(&fs.readlink(st.ino)?)));
    }
    Ok(line)
}

pub fn ls(a: &LsArgs) -> CliResult<u8> {
    let paths = if a.paths.is_empty() {
        vec![OsString::from("/")]
    } else {
        a.paths.clone()
    };
    match daemon(&a.target)? {
        Some(c) => ls_on(&c, a, &paths),
        None => ls_on(&open_for_os_paths(&a.target, &paths, true)?, a, &paths),
    }
}

/// [`open_fs_for_paths`] for paths given as bytes: a path that is not UTF-8 is
/// resolved by names (`ospath`), which needs the whole namespace loaded.
fn open_for_os_paths(target: &Path, paths: &[OsString], list: bool) -> CliResult<DevFs> {
    match ospath::all_utf8(paths) {
        Some(p) => open_fs_for_paths(target, &p, list),
        None => open_fs(target, Access::Read),
    }
}

fn ls_on(fs: &impl Meta, a: &LsArgs, paths: &[OsString]) -> CliResult<u8> {
    for (k, path) in paths.iter().enumerate() {
        let ino = fs.resolve_os(path)?;
        let st = fs.stat(ino)?;
        if st.kind != Kind::Dir {
            outln!(
                "{}",
                if a.long {
                    long_line(fs, &st, &shown(path.as_bytes()))?
                } else {
                    shown(path.as_bytes())
                }
            );
            continue;
        }
        if paths.len() > 1 {
            if k > 0 {
                outln!();
            }
            outln!("{}:", shown(path.as_bytes()));
        }
        for (name, child, kind) in fs.readdir(ino)? {
            let name = shown(&name);
            if a.long {
                outln!("{}", long_line(fs, &fs.stat(child)?, &name)?);
            } else if kind == Kind::Dir {
                outln!("{name}/");
            } else {
                outln!("{name}");
            }
        }
    }
    Ok(0)
}

fn stat_json(fs: &impl Meta, path: &str, st: &Stat) -> CliResult<Value> {
    let mut v = json!({
        "path": path,
        "ino": st.ino,
        "kind": kind_name(st.kind),
        "mode": st.mode,
        "perm": format!("{:04o}", st.mode & 0o7777),
        "nlink": st.nlink,
        "uid": st.uid,
        "gid": st.gid,
        "size_bytes": st.size_bytes,
        "blocks": st.blocks,
        "runs": st.runs,
        "lost_bytes": st.lost_bytes,
        "mtime_ns": st.mtime_ns,
        "ctime_ns": st.ctime_ns,
    });
    if st.kind == Kind::Symlink {
        v["target"] = Value::String(lossy(&fs.readlink(st.ino)?));
    }
    Ok(v)
}

pub fn stat(a: &StatArgs) -> CliResult<u8> {
    match daemon(&a.target)? {
        Some(c) => stat_on(&c, a),
        None => stat_on(&open_for_os_paths(&a.target, &a.paths, false)?, a),
    }
}

fn stat_on(fs: &impl Meta, a: &StatArgs) -> CliResult<u8> {
    let mut all = vec![];
    // Every path is reported; a missing one is an error on stderr, and the exit
    // status says whether any failed.
    let mut failed = 0;
    for path in &a.paths {
        let st = match fs.resolve_os(path).and_then(|ino| fs.stat(ino)) {
            Ok(st) => st,
            Err(e) => {
                e.in_target(&a.target).print();
                failed += 1;
                continue;
            }
        };
        if a.json {
            all.push(stat_json(fs, &ospath::display(path), &st)?);
            continue;
        }
        outln!("  path: {}", shown(path.as_bytes()));
        outln!(
            "  kind: {}   inode: {}   links: {}",
            kind_name(st.kind),
            st.ino,
            st.nlink
        );
        outln!(
            "  size: {} bytes   data blocks: {}   runs: {}",
            st.size_bytes,
            st.blocks,
            st.runs
        );
        if st.lost_bytes > 0 {
            outln!(
                "  lost: {} bytes (metadata damage; reads there fail, `dvrfs get --salvage` copies the rest)",
                st.lost_bytes
            );
        }
        outln!(
            "  mode: {:04o} ({})   uid: {}   gid: {}",
            st.mode & 0o7777,
            mode_string(st.kind, st.mode),
            st.uid,
            st.gid
        );
        outln!("modify: {} UTC", time_string(st.mtime_ns));
        outln!("change: {} UTC", time_string(st.ctime_ns));
        if st.kind == Kind::Symlink {
            outln!("target: {}", shown(&fs.readlink(st.ino)?));
        }
    }
    if a.json {
        match all.len() {
            1 if failed == 0 => print_json(&all[0]),
            _ => print_json(&Value::Array(all)),
        }
    }
    if failed > 0 {
        // Each failure is already on stderr.
        return Err(CliError::silent(1));
    }
    Ok(0)
}

pub fn mkdir(a: &MkdirArgs) -> CliResult<u8> {
    let mut fs = open_fs(&a.target, Access::Write)?;
    let (uid, gid) = process_owner();
    let result = a.paths.iter().try_for_each(|path| {
        if a.parents {
            mkdir_parents(&mut fs, path, uid, gid)?;
        } else {
            let (parent, name) = fs.resolve_parent(path)?;
            fs.mkdir(parent, name, DIR_PERM, uid, gid, now_ns())
                .map_err(at_path(path))?;
        }
        fs.tick()?;
        Ok(())
    });
    finish(fs, result)
}

/// Commits what succeeded (every core operation is atomic, so a failed one left
/// nothing half done), then reports the first failure, if any.
fn finish(fs: DevFs, result: CliResult<()>) -> CliResult<u8> {
    let closed = fs.close();
    result?;
    closed?;
    Ok(0)
}

/// `mkdir -p`: creates each missing component; existing directories are fine.
fn mkdir_parents(fs: &mut DevFs, path: &str, uid: u32, gid: u32) -> CliResult<()> {
    // `..` is taken lexically, so `a/new/../b` creates `a/new` and `a/b`.
    let mut stack: Vec<Ino> = vec![fs.root()];
    let mut shown = String::new();
    for comp in path.split('/').filter(|c| !c.is_empty() && *c != ".") {
        if comp == ".." {
            if stack.len() > 1 {
                stack.pop();
            }
            continue;
        }
        shown.push('/');
        shown.push_str(comp);
        let parent = *stack.last().unwrap_or(&fs.root());
        let ino = match fs.lookup(parent, comp.as_bytes()) {
            Ok(ino) if fs.stat(ino)?.kind == Kind::Dir => ino,
            Ok(_) => {
                return Err(
                    CliError::new(format!("{shown}: exists and is not a directory"))
                        .hint(format!("remove it or choose another path than {path}")),
                )
            }
            Err(CoreError::NotFound(_)) => {
                fs.mkdir(parent, comp.as_bytes(), DIR_PERM, uid, gid, now_ns())?
            }
            Err(e) => return Err(e.into()),
        };
        stack.push(ino);
    }
    Ok(())
}

pub fn rm(a: &RmArgs) -> CliResult<u8> {
    let mut fs = open_fs(&a.target, Access::Write)?;
    let result = a.paths.iter().try_for_each(|os_path| {
        let ino = fs.resolve_os(os_path)?;
        let path = ospath::display(os_path);
        if ino == fs.root() {
            return Err(
                CliError::new(format!("refusing to remove the root directory ({path})"))
                    .hint("remove what is inside it instead, e.g. `dvrfs rm -r TARGET /dir`"),
            );
        }
        let (parent, name) = match os_path.to_str() {
            Some(p) => fs.resolve_parent(p).map(|(i, n)| (i, n.to_vec()))?,
            // Not UTF-8: the name is a component the lookup above found, so its
            // directory exists and it is a valid name.
            None => {
                let (dir, name) = ospath::split_parent(os_path);
                (fs.resolve_os(&dir)?, name)
            }
        };
        match fs.stat(ino)?.kind {
            Kind::Dir if !a.recursive => {
                return Err(CliError::new(format!("{path} is a directory"))
                    .hint("use `dvrfs rm -r` to remove it and everything below it"))
            }
            Kind::Dir => remove_tree(&mut fs, parent, name)?,
            Kind::File if name == crate::chain::CHAIN_NAME.as_bytes() && !a.force => {
                return Err(CliError::new(format!(
                    "refusing to remove {path}: it is its stream directory's integrity chain, which `dvrfs verify` checks the chunks against and deletions are recorded in"
                ))
                .hint("add --force to remove it anyway"));
            }
            kind => {
                fs.unlink(parent, &name, now_ns())?;
                // A chunk its stream directory's chain sealed: the removal recorded.
                let at = crate::timespec::rfc3339(now_ns());
                crate::chain::record_removal(&mut crate::chain::OnFs(&mut fs), parent, &name, kind, "dvrfs rm", &at)?;
            }
        }
        fs.tick()?;
        Ok(())
    });
    finish(fs, result)
}

/// Removes `parent/name` and everything below it, depth first without recursion (a deep
/// tree cannot overflow the stack).
fn remove_tree(fs: &mut DevFs, parent: Ino, name: Vec<u8>) -> CliResult<()> {
    let mut stack = vec![(parent, name, false)];
    while let Some((parent, name, emptied)) = stack.pop() {
        let ino = fs.lookup(parent, &name)?;
        let kind = fs.stat(ino)?.kind;
        match (kind, emptied) {
            (Kind::Dir, false) => {
                stack.push((parent, name, true));
                for (child, _, _) in fs.readdir(ino)? {
                    stack.push((ino, child, false));
                }
            }
            (Kind::Dir, true) => fs.rmdir(parent, &name, now_ns())?,
            _ => fs.unlink(parent, &name, now_ns())?,
        }
        fs.tick()?;
    }
    Ok(())
}

pub fn mv(a: &MvArgs) -> CliResult<u8> {
    let mut fs = open_fs(&a.target, Access::Write)?;
    if fs.resolve(&a.src)? == fs.root() {
        return Err(CliError::new("the root directory cannot be moved"));
    }
    let (src_parent, src_name) = fs.resolve_parent(&a.src)?;
    let src_name = src_name.to_vec();
    // An existing directory as DST receives SRC under its own name, as mv(1) does.
    let (dst_parent, dst_name) = match dvrfs_core::Volume::resolve(&fs, &a.dst) {
        Ok(ino) if fs.stat(ino)?.kind == Kind::Dir => (ino, src_name.clone()),
        Ok(_) | Err(CoreError::NotFound(_)) => {
            let (p, n) = fs.resolve_parent(&a.dst)?;
            (p, n.to_vec())
        }
        Err(e) => return Err(e.into()),
    };
    fs.rename(src_parent, &src_name, dst_parent, &dst_name, now_ns())?;
    fs.close()?;
    Ok(0)
}
