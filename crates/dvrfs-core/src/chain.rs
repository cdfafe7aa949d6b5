//! A stream directory's integrity chain (issue 25): the file `.chain` in the
//! directory, one JSON object a line, appended as chunks are finished and removed.
//! What a line holds and how lines link is this module's; where the bytes are kept
//! is the driver's ([`ChainStore`]: the CLI through the engine or the blocking
//! driver, the FUSE mount through its engine). docs/index.md, section "The integrity
//! chain", says it to users.
//!
//! - A **chunk** line seals a chunk when its writer finishes it: `chunk` (its
//!   name), `bytes`, `sha256` (of its bytes, computed as they were written), `from`
//!   and `to` (UTC, RFC 3339), `prev` and `chain`, where `chain` is the SHA-256 of
//!   `prev` (32 bytes; zeros for the first chunk ever sealed in the directory), the
//!   chunk's `sha256` (32 bytes), `bytes` (8 bytes, little-endian) and the name's
//!   bytes, and `prev` is the previous chunk line's `chain`. A chunk line altered,
//!   removed or inserted breaks every later link.
//! - A **deleted** line records a removal: `deleted` (the name), `at` (UTC), `by`
//!   (who: the command, or the mount and the process).
//!
//! `dvrfs verify` reads it back: each sealed chunk intact, deleted with a record,
//! missing (gone without one) or modified; files the chain does not name are
//! unsealed (a recording in progress or cut by a crash, or written otherwise).

use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use crate::format::dir::Kind;
use crate::meta::Ino;

/// The chain's name in a stream directory.
pub const CHAIN_NAME: &str = ".chain";
/// The largest chain read (a year of one-minute chunks is about 150 MiB).
pub const MAX_CHAIN_BYTES: u64 = 1 << 30;

/// A chain link: the SHA-256 of the previous link, the chunk's hash, its size and
/// its name.
pub fn link(prev: &[u8; 32], sha: &[u8; 32], bytes: u64, name: &str) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(prev);
    h.update(sha);
    h.update(std::array::from_fn::<u8, 8, _>(|i| {
        (bytes >> (8 * i)) as u8
    }));
    h.update(name.as_bytes());
    h.finalize().into()
}

pub fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

pub fn unhex(s: &str) -> Option<[u8; 32]> {
    if s.len() != 64 {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, o) in out.iter_mut().enumerate() {
        *o = u8::from_str_radix(s.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(out)
}

/// One line of a chain.
#[derive(Clone, Debug, PartialEq)]
pub enum Record {
    Chunk {
        name: String,
        bytes: u64,
        sha256: [u8; 32],
        from: String,
        to: String,
        prev: [u8; 32],
        chain: [u8; 32],
    },
    Deleted {
        name: String,
        at: String,
        by: String,
    },
}

impl Record {
    pub fn line(&self) -> String {
        let v = match self {
            Record::Chunk {
                name,
                bytes,
                sha256,
                from,
                to,
                prev,
                chain,
            } => json!({"chunk": name, "bytes": bytes, "sha256": hex(sha256), "from": from,
                        "to": to, "prev": hex(prev), "chain": hex(chain)}),
            Record::Deleted { name, at, by } => json!({"deleted": name, "at": at, "by": by}),
        };
        format!("{v}\n")
    }

    fn parse(line: &str) -> Result<Record, String> {
        let v: Value = serde_json::from_str(line).map_err(|e| format!("not JSON: {e}"))?;
        let s = |k: &str| v[k].as_str().map(str::to_string);
        let h = |k: &str| v[k].as_str().and_then(unhex);
        if let Some(name) = s("chunk") {
            let (Some(bytes), Some(sha256), Some(prev), Some(chain)) =
                (v["bytes"].as_u64(), h("sha256"), h("prev"), h("chain"))
            else {
                return Err(format!(
                    "chunk line for {name} lacks bytes, sha256, prev or chain"
                ));
            };
            return Ok(Record::Chunk {
                name,
                bytes,
                sha256,
                from: s("from").unwrap_or_default(),
                to: s("to").unwrap_or_default(),
                prev,
                chain,
            });
        }
        if let Some(name) = s("deleted") {
            return Ok(Record::Deleted {
                name,
                at: s("at").unwrap_or_default(),
                by: s("by").unwrap_or_default(),
            });
        }
        Err("neither a chunk nor a deleted line".into())
    }
}

/// A chain as read: its records, and the lines that did not parse (line number,
/// why).
#[derive(Debug, Default)]
pub struct Chain {
    pub records: Vec<Record>,
    pub bad_lines: Vec<(usize, String)>,
}

impl Chain {
    pub fn parse(text: &str) -> Chain {
        let mut c = Chain::default();
        for (i, line) in text.lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            match Record::parse(line) {
                Ok(r) => c.records.push(r),
                Err(why) => c.bad_lines.push((i + 1, why)),
            }
        }
        c
    }

    /// The last chunk line's link (zeros before any).
    pub fn tip(&self) -> [u8; 32] {
        self.records
            .iter()
            .rev()
            .find_map(|r| match r {
                Record::Chunk { chain, .. } => Some(*chain),
                _ => None,
            })
            .unwrap_or([0; 32])
    }

    /// Whether `name`'s seal stands: a chunk line names it and no `deleted` line
    /// for it follows the last such line. A name deleted with a record (removed,
    /// renamed away, replaced by a rename) is free: a new file under it may be
    /// sealed again, a later generation of the name.
    pub fn sealed(&self, name: &str) -> bool {
        let mut live = false;
        for r in &self.records {
            match r {
                Record::Chunk { name: n, .. } if n == name => live = true,
                Record::Deleted { name: n, .. } if n == name => live = false,
                _ => {}
            }
        }
        live
    }

    /// Where the links break: (the chunk line's name, why), in order.
    pub fn broken_links(&self) -> Vec<(String, String)> {
        let mut prev_chain = [0u8; 32];
        let mut out = vec![];
        for r in &self.records {
            if let Record::Chunk {
                name,
                bytes,
                sha256,
                prev,
                chain,
                ..
            } = r
            {
                if *prev != prev_chain {
                    out.push((name.clone(), "its prev is not the previous chunk line's chain (a line removed, inserted or altered before it)".into()));
                }
                if link(prev, sha256, *bytes, name) != *chain {
                    out.push((
                        name.clone(),
                        "its chain is not the hash of its fields (the line was altered)".into(),
                    ));
                }
                prev_chain = *chain;
            }
        }
        out
    }
}

/// Where a chain is kept and appended.
pub trait ChainStore {
    type Error;
    fn find(&mut self, dir: Ino, name: &str) -> Result<Option<Ino>, Self::Error>;
    fn make(&mut self, dir: Ino, name: &str) -> Result<Ino, Self::Error>;
    fn size(&mut self, ino: Ino) -> Result<u64, Self::Error>;
    fn read_at(&mut self, ino: Ino, offset: u64, len: usize) -> Result<Vec<u8>, Self::Error>;
    fn write_at(&mut self, ino: Ino, offset: u64, data: &[u8]) -> Result<(), Self::Error>;
    /// The error of a chain longer than [`MAX_CHAIN_BYTES`].
    fn too_long(&self, size: u64) -> Self::Error;
    /// Writes `data` at the end of `ino`. By default at its size now; a store
    /// whose engine may append to the chain meanwhile (retention records its
    /// deletions) overrides it with `Op::Append`, so that no line overwrites another.
    fn append_at_end(&mut self, ino: Ino, data: &[u8]) -> Result<(), Self::Error> {
        let at = self.size(ino)?;
        self.write_at(ino, at, data)
    }
}

/// Directory `dir`'s chain, if it has one (its inode and what it says).
pub fn read<S: ChainStore>(store: &mut S, dir: Ino) -> Result<Option<(Ino, Chain)>, S::Error> {
    let Some(ino) = store.find(dir, CHAIN_NAME)? else {
        return Ok(None);
    };
    let size = store.size(ino)?;
    if size > MAX_CHAIN_BYTES {
        return Err(store.too_long(size));
    }
    let mut text = Vec::with_capacity(size as usize);
    while (text.len() as u64) < size {
        let got = store.read_at(
            ino,
            text.len() as u64,
            (size as usize - text.len()).min(1 << 20),
        )?;
        if got.is_empty() {
            break;
        }
        text.extend_from_slice(&got);
    }
    Ok(Some((ino, Chain::parse(&String::from_utf8_lossy(&text)))))
}

/// Appends `r` to directory `dir`'s chain (made if missing).
pub fn append<S: ChainStore>(store: &mut S, dir: Ino, r: &Record) -> Result<(), S::Error> {
    let ino = match store.find(dir, CHAIN_NAME)? {
        Some(i) => i,
        None => store.make(dir, CHAIN_NAME)?,
    };
    store.append_at_end(ino, r.line().as_bytes())
}

/// What a chunk line says of a chunk, before it is linked.
#[derive(Clone, Debug, PartialEq)]
pub struct Seal {
    pub name: String,
    pub bytes: u64,
    pub sha256: [u8; 32],
    /// Its UTC range, RFC 3339 (empty without an index).
    pub from: String,
    pub to: String,
}

/// Seals a chunk of directory `dir`: its line linked to the chain's last chunk
/// line (`tip`) and appended; the new tip.
pub fn seal<S: ChainStore>(
    store: &mut S,
    dir: Ino,
    tip: &[u8; 32],
    s: Seal,
) -> Result<[u8; 32], S::Error> {
    let chain = link(tip, &s.sha256, s.bytes, &s.name);
    let r = Record::Chunk {
        name: s.name,
        bytes: s.bytes,
        sha256: s.sha256,
        from: s.from,
        to: s.to,
        prev: *tip,
        chain,
    };
    append(store, dir, &r)?;
    Ok(chain)
}

/// A removal of `name` (a `kind`) from directory `dir` by `by` at `at` (RFC 3339):
/// recorded in its chain if the directory keeps one and the chain sealed that name
/// (other files go unrecorded). Whether it was recorded.
pub fn record_removal<S: ChainStore>(
    store: &mut S,
    dir: Ino,
    name: &[u8],
    kind: Kind,
    by: &str,
    at: &str,
) -> Result<bool, S::Error> {
    let Ok(name) = std::str::from_utf8(name) else {
        return Ok(false);
    };
    if kind != Kind::File || name == CHAIN_NAME {
        return Ok(false);
    }
    let Some((_, chain)) = read(store, dir)? else {
        return Ok(false);
    };
    if !chain.sealed(name) {
        return Ok(false);
    }
    let r = Record::Deleted {
        name: name.to_string(),
        at: at.to_string(),
        by: by.to_string(),
    };
    append(store, dir, &r)?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunk(prev: [u8; 32], name: &str, bytes: u64, fill: u8) -> Record {
        let sha = [fill; 32];
        Record::Chunk {
            name: name.into(),
            bytes,
            sha256: sha,
            from: "2026-11-28T14:00:00Z".into(),
            to: "2026-11-28T14:01:00Z".into(),
            prev,
            chain: link(&prev, &sha, bytes, name),
        }
    }

    fn chain_of(records: &[Record]) -> Chain {
        Chain::parse(&records.iter().map(Record::line).collect::<String>())
    }

    #[test]
    fn lines_round_trip_and_an_intact_chain_has_no_broken_link() {
        let a = chunk([0; 32], "a.ts", 100, 1);
        let Record::Chunk { chain, .. } = a.clone() else {
            unreachable!()
        };
        let b = chunk(chain, "b.ts", 200, 2);
        let d = Record::Deleted {
            name: "a.ts".into(),
            at: "2026-11-29T00:00:00Z".into(),
            by: "rm".into(),
        };
        let c = chain_of(&[a.clone(), b.clone(), d.clone()]);
        assert_eq!(c.records, vec![a.clone(), b.clone(), d.clone()]);
        // a.ts deleted with a record: its name is free again; sealed anew, it stands.
        assert!(!c.sealed("a.ts") && c.sealed("b.ts") && !c.sealed("x.ts"));
        let a2 = chunk(c.tip(), "a.ts", 50, 9);
        assert!(chain_of(&[a.clone(), b.clone(), d, a2]).sealed("a.ts"));
        assert!(c.bad_lines.is_empty());
        assert!(c.broken_links().is_empty());
        let Record::Chunk { chain: tip, .. } = b else {
            unreachable!()
        };
        assert_eq!(c.tip(), tip);
    }

    #[test]
    fn a_line_removed_or_altered_breaks_the_chain_there() {
        let a = chunk([0; 32], "a.ts", 100, 1);
        let Record::Chunk { chain: ca, .. } = a.clone() else {
            unreachable!()
        };
        let b = chunk(ca, "b.ts", 200, 2);
        let Record::Chunk { chain: cb, .. } = b.clone() else {
            unreachable!()
        };
        let c = chunk(cb, "c.ts", 300, 3);
        // b's line removed: c's prev no longer follows.
        let broken = chain_of(&[a.clone(), c.clone()]).broken_links();
        assert_eq!(broken.len(), 1);
        assert_eq!(broken[0].0, "c.ts");
        // b's hash altered in place (to hide a modified chunk).
        let mut altered = b;
        if let Record::Chunk { sha256, .. } = &mut altered {
            sha256[0] ^= 1;
        }
        let broken = chain_of(&[a, altered, c]).broken_links();
        assert_eq!(broken[0].0, "b.ts", "{broken:?}");
        // Garbage is reported by line.
        let c = Chain::parse("{\"chunk\": \"x\"}\nnot json\n");
        assert_eq!(c.bad_lines.len(), 2);
    }
}
