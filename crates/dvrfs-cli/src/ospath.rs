//! Paths inside the volume as the command line gave them: bytes, not necessarily
//! UTF-8. A name is any bytes but `/` and NUL (FORMAT.md), and the mount creates
//! whatever names its programs ask for (`caf\xe9.ts` from a Latin-1 camera
//! firmware); `ls` shows such a name escaped, and `stat`, `get` and `rm` take it as
//! the shell passes it (`dvrfs get rec.img "$(printf '/caf\xe9.ts')" out.ts`).
//!
//! A UTF-8 path goes to the volume's own resolver (local or the daemon's) as before.
//! Any other is resolved here, one component at a time through `lookup`, which takes
//! bytes everywhere (the daemon's protocol too). Symbolic links are not followed
//! anywhere in a path, so `..` is lexical: it goes up the path written so far, and
//! past the root stays at the root, as the core's resolver does.

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;

use dvrfs_core::format::dir::MAX_NAME_BYTES;
use dvrfs_core::meta::Ino;
use dvrfs_core::Error as CoreError;

use crate::cmd_files::shown;
use crate::error::{CliError, CliResult};

/// The components of `path` after `.` and `..` are applied.
fn components(path: &[u8]) -> Vec<&[u8]> {
    let mut out: Vec<&[u8]> = vec![];
    for comp in path.split(|&b| b == b'/') {
        match comp {
            b"" | b"." => {}
            b".." => {
                out.pop();
            }
            c => out.push(c),
        }
    }
    out
}

/// Resolves `path` with `resolve` (a UTF-8 path) or, for other bytes, from the root
/// `resolve("/")` names through `lookup` (`None`: no such name), with a missing
/// name reported as the whole path, escaped.
pub fn resolve(
    path: &OsStr,
    resolve: impl Fn(&str) -> CliResult<Ino>,
    lookup: impl Fn(Ino, &[u8]) -> CliResult<Option<Ino>>,
) -> CliResult<Ino> {
    if let Some(p) = path.to_str() {
        return resolve(p);
    }
    let mut ino = resolve("/")?;
    for comp in components(path.as_bytes()) {
        if comp.len() > MAX_NAME_BYTES {
            return Err(CoreError::NameTooLong { len: comp.len() }.into());
        }
        ino = lookup(ino, comp)?.ok_or_else(|| CoreError::NotFound(display(path)))?;
    }
    Ok(ino)
}

/// A lookup's answer with "no such name" as `None`, for [`resolve`].
pub fn found<E: Into<CliError>>(
    r: Result<Ino, E>,
    not_found: impl Fn(&E) -> bool,
) -> CliResult<Option<Ino>> {
    match r {
        Ok(ino) => Ok(Some(ino)),
        Err(e) if not_found(&e) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// A path as it is shown in messages: escaped as `ls` shows names.
pub fn display(path: &OsStr) -> String {
    shown(path.as_bytes())
}

/// The paths a command was given, as the strings a path-limited open takes, when
/// they all are UTF-8 (`None`: open the whole namespace instead).
pub fn all_utf8(paths: &[OsString]) -> Option<Vec<String>> {
    paths
        .iter()
        .map(|p| p.to_str().map(str::to_string))
        .collect()
}

/// The directory part and the last name of `path` (`/a/b/` -> `/a`, `b`).
pub fn split_parent(path: &OsStr) -> (OsString, Vec<u8>) {
    let b = path.as_bytes();
    let trimmed = match b.iter().rposition(|&c| c != b'/') {
        Some(i) => &b[..=i],
        None => &b[..0],
    };
    match trimmed.iter().rposition(|&c| c == b'/') {
        Some(i) => (
            OsStr::from_bytes(&trimmed[..i]).to_os_string(),
            trimmed[i + 1..].to_vec(),
        ),
        None => (OsString::new(), trimmed.to_vec()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dot_dot_is_lexical_and_stops_at_the_root() {
        let c =
            |p: &[u8]| -> Vec<Vec<u8>> { components(p).into_iter().map(<[u8]>::to_vec).collect() };
        assert_eq!(c(b"/a/./b\xff//c/"), [&b"a"[..], b"b\xff", b"c"]);
        assert_eq!(c(b"/a/../../b\xe9"), [&b"b\xe9"[..]]);
        assert!(c(b"/..").is_empty());
    }

    #[test]
    fn the_parent_and_the_name_are_split_at_the_last_slash() {
        let (d, n) = split_parent(OsStr::from_bytes(b"/cam/caf\xe9.ts/"));
        assert_eq!((d.as_bytes(), &n[..]), (&b"/cam"[..], &b"caf\xe9.ts"[..]));
        let (d, n) = split_parent(OsStr::from_bytes(b"x\xff"));
        assert_eq!((d.as_bytes(), &n[..]), (&b""[..], &b"x\xff"[..]));
    }
}
