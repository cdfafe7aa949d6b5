//! `dvrfs verify`: a stream directory's chunks checked against its integrity chain
//! (`chain.rs`): every chunk the chain sealed is intact (its bytes hash as sealed),
//! deleted with a record, missing (gone without one) or modified; the chain's own
//! links hold or say where they break; files it never sealed are listed apart. The
//! chunks are read in full as best-effort traffic, beside the recordings.

use clap::Args;
use serde_json::json;
use sha2::{Digest, Sha256};
use std::path::PathBuf;

use dvrfs_core::format::dir::Kind;

use crate::chain::{self, hex, Record};
use crate::error::{CliError, CliResult};
use crate::output::{human_bytes, print_json};
use crate::recording::read_range;
use crate::target::{open_handle, Access};

#[derive(Args, Debug)]
pub struct VerifyArgs {
    pub target: PathBuf,
    /// The stream directory (recorded with `dvrfs record --chunk`)
    pub path: String,
    /// Print JSON on stdout
    #[arg(long)]
    pub json: bool,
}

/// What became of a sealed chunk.
#[derive(Debug, PartialEq)]
enum State {
    Intact,
    Deleted {
        at: String,
        by: String,
    },
    Missing,
    Modified {
        bytes: u64,
        sha256: String,
    },
    /// It could not be read (a damaged block): not known to be intact.
    Unreadable(String),
}

impl State {
    fn name(&self) -> &'static str {
        match self {
            State::Intact => "intact",
            State::Deleted { .. } => "deleted",
            State::Missing => "missing",
            State::Modified { .. } => "modified",
            State::Unreadable(_) => "unreadable",
        }
    }

    fn failed(&self) -> bool {
        !matches!(self, State::Intact | State::Deleted { .. })
    }
}

/// Exit status when verification fails (something modified, missing, unreadable,
/// or the chain itself broken).
const VERIFY_FAILED: u8 = 4;

pub fn verify(a: &VerifyArgs) -> CliResult<u8> {
    let rt = open_handle(&a.target, Access::Read)?;
    let dir = rt.resolve(&a.path)?;
    if rt.stat(dir)?.kind != Kind::Dir {
        return Err(CliError::new(format!(
            "{} is not a stream directory: a chain seals the chunks of one",
            a.path
        ))
        .hint("give the directory `dvrfs record --chunk` recorded into"));
    }
    let Some((_, ch)) = chain::read(&mut chain::Via(&rt), dir)? else {
        return Err(CliError::new(format!(
            "{} has no integrity chain ({})",
            a.path,
            chain::CHAIN_NAME
        ))
        .hint(
            "chunks recorded with `dvrfs record --chunk` are sealed in it as they are finished",
        ));
    };
    let base = a.path.trim_end_matches('/');
    let mut results = vec![];
    for (i, r) in ch.records.iter().enumerate() {
        let Record::Chunk {
            name,
            bytes,
            sha256,
            from,
            to,
            ..
        } = r
        else {
            continue;
        };
        let path = format!("{base}/{name}");
        // What became of this generation of the name: the first `deleted` line for
        // it after its seal, unless the name was sealed again before one.
        let mut after = ch.records[i + 1..].iter().filter_map(|r| match r {
            Record::Deleted { name: n, at, by } if n == name => Some(Some((at, by))),
            Record::Chunk { name: n, .. } if n == name => Some(None),
            _ => None,
        });
        let live = match after.next() {
            Some(Some((at, by))) => Some(State::Deleted {
                at: at.clone(),
                by: by.clone(),
            }),
            Some(None) => Some(State::Missing), // sealed again without a record
            None => None,
        };
        let state = match live {
            Some(st) => st,
            None => match rt.lookup(dir, name.as_bytes()) {
                Err(_) => State::Missing,
                Ok(ino) => {
                    let size = rt.stat(ino)?.size_bytes;
                    let mut h = Sha256::new();
                    match read_range(&rt, ino, &path, 0, size, &mut |b| {
                        h.update(b);
                        Ok(())
                    }) {
                        Err(e) if crate::interrupt::received().is_some() => return Err(e),
                        Err(e) => State::Unreadable(e.message),
                        Ok(()) => {
                            let got: [u8; 32] = h.finalize().into();
                            if got == *sha256 && size == *bytes {
                                State::Intact
                            } else {
                                State::Modified {
                                    bytes: size,
                                    sha256: hex(&got),
                                }
                            }
                        }
                    }
                }
            },
        };
        results.push((
            name.clone(),
            *bytes,
            hex(sha256),
            from.clone(),
            to.clone(),
            state,
        ));
    }
    let unsealed: Vec<String> = rt
        .readdir(dir)?
        .into_iter()
        .filter(|(n, _, k)| *k == Kind::File && !n.starts_with(b"."))
        .map(|(n, _, _)| String::from_utf8_lossy(&n).into_owned())
        .filter(|n| !ch.sealed(n))
        .collect();
    rt.close()?;
    let broken = ch.broken_links();
    let failed = results.iter().filter(|r| r.5.failed()).count();
    let ok = failed == 0 && broken.is_empty() && ch.bad_lines.is_empty();
    if a.json {
        print_json(&json!({
            "path": a.path,
            "ok": ok,
            "chain_intact": broken.is_empty() && ch.bad_lines.is_empty(),
            "chain_breaks": broken.iter().map(|(n, why)| json!({"chunk": n, "why": why})).collect::<Vec<_>>(),
            "bad_lines": ch.bad_lines.iter().map(|(l, why)| json!({"line": l, "why": why})).collect::<Vec<_>>(),
            "chunks": results.iter().map(|(name, bytes, sha, from, to, st)| {
                let mut v = json!({"chunk": name, "state": st.name(), "bytes": bytes,
                                   "sha256": sha, "from": from, "to": to});
                match st {
                    State::Deleted { at, by } => { v["deleted_at"] = json!(at); v["deleted_by"] = json!(by); }
                    State::Modified { bytes, sha256 } => { v["found_bytes"] = json!(bytes); v["found_sha256"] = json!(sha256); }
                    State::Unreadable(why) => v["why"] = json!(why),
                    _ => {}
                }
                v
            }).collect::<Vec<_>>(),
            "unsealed": unsealed,
        }));
    } else {
        outln!(
            "{}: {} chunk{} sealed in {}; the chain's links {}",
            a.path,
            results.len(),
            if results.len() == 1 { "" } else { "s" },
            chain::CHAIN_NAME,
            if broken.is_empty() && ch.bad_lines.is_empty() {
                "hold"
            } else {
                "BREAK"
            }
        );
        for (name, bytes, _, from, to, st) in &results {
            let what = match st {
                State::Intact => format!("intact     {name}  {from} to {to}  {}", human_bytes(*bytes)),
                State::Deleted { at, by } => format!("deleted    {name}  {from} to {to}  removed by {by} at {at}"),
                State::Missing => format!("MISSING    {name}  {from} to {to}  gone, and no deletion was recorded"),
                State::Modified { bytes: b, sha256 } => format!(
                    "MODIFIED   {name}  {from} to {to}  {b} bytes hashing {sha256}, sealed as {bytes} bytes"
                ),
                State::Unreadable(why) => format!("UNREADABLE {name}  {from} to {to}  {why}"),
            };
            outln!("  {what}");
        }
        for (name, why) in &broken {
            outln!("  CHAIN BREAKS at {name}: {why}");
        }
        for (line, why) in &ch.bad_lines {
            outln!("  CHAIN LINE {line} unreadable: {why}");
        }
        for name in &unsealed {
            outln!("  unsealed   {name}  (not in the chain: being recorded, cut short by a crash, or written otherwise)");
        }
    }
    if ok {
        return Ok(0);
    }
    let mut what = vec![];
    for s in ["modified", "missing", "unreadable"] {
        let n = results.iter().filter(|r| r.5.name() == s).count();
        if n > 0 {
            what.push(format!("{n} {s}"));
        }
    }
    if !broken.is_empty() || !ch.bad_lines.is_empty() {
        what.push("the chain itself altered".into());
    }
    Err(CliError::new(format!("verify: {} fails: {}", a.path, what.join(", ")))
        .hint("a modified chunk differs from what was recorded; a missing one was removed without a record")
        .exit_code(VERIFY_FAILED))
}
