//! The core stacks in strict layers (issue 23), checked from the source on every
//! test run, with no tool outside this file (CI runs a clean checkout):
//!
//! - **No circle between the core's top-level modules.** Module `a` depends on `b`
//!   when a file under `a` names `crate::b...` (in a `use`, brace groups expanded, or
//!   inline), or reaches it through `super::`. The graph of those edges must have no
//!   cycle.
//! - **No circle among the files of one folder.** Inside a folder, sibling modules
//!   (files, and sub-folders taken whole) depend on each other through `super::sib`,
//!   `self::sib` or `crate::folder::sib`. A name re-exported by the folder's `mod.rs`
//!   counts as `mod.rs`, the parent, never as a sibling: the `mod.rs` re-export idiom
//!   is no circle.
//! - **No source file over [`MAX_FILE_LINES`] lines** in any crate's `src/` or
//!   `tests/` of the workspace.
//! - **No function over [`MAX_FN_LINES`] lines in the core** unless ARCHITECTURE.md
//!   lists it, with the reason, in its `## Long functions` table
//!   (`| file | function | lines | why it stays long |`; file and function name are
//!   matched, the line count is informative).
//!
//! The parse is lexical and deliberately small: comments (doc comments too) and the
//! contents of string and character literals are blanked first, and
//! `#[cfg(test)] mod ... { ... }` blocks are left out (tests may import anything and
//! may be long). It mirrors `imports.py`, the tool the layering was first checked
//! with. Every failure message says what to do.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// The longest a source file may be, in lines.
const MAX_FILE_LINES: usize = 1_000;
/// The longest a function of the core may be, in lines, unless ARCHITECTURE.md lists it.
const MAX_FN_LINES: usize = 100;

/// A module's path under `src/`: `["engine", "bounds"]` for `engine/bounds.rs`,
/// `["engine"]` for `engine/mod.rs`, `[]` for `lib.rs`.
type ModPath = Vec<String>;

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn core_src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// Every `.rs` file under `dir`, sorted.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "rs") {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

/// The source with comments blanked (kept as spaces and newlines, so line numbers
/// hold) and the insides of string and character literals blanked.
fn strip(src: &str) -> String {
    let b = src.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let blank = |c: u8| if c == b'\n' { b'\n' } else { b' ' };
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c == b'/' && b.get(i + 1) == Some(&b'/') {
            while i < b.len() && b[i] != b'\n' {
                out.push(b' ');
                i += 1;
            }
        } else if c == b'/' && b.get(i + 1) == Some(&b'*') {
            let mut depth = 0;
            while i < b.len() {
                if b[i] == b'/' && b.get(i + 1) == Some(&b'*') {
                    depth += 1;
                    out.extend_from_slice(b"  ");
                    i += 2;
                } else if b[i] == b'*' && b.get(i + 1) == Some(&b'/') {
                    depth -= 1;
                    out.extend_from_slice(b"  ");
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    out.push(blank(b[i]));
                    i += 1;
                }
            }
        } else if c == b'r'
            && (b.get(i + 1) == Some(&b'"') || b.get(i + 1) == Some(&b'#'))
            && (i == 0 || !(b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_'))
        {
            // A raw string: r"..." or r#"..."#.
            let mut j = i + 1;
            let mut hashes = 0;
            while b.get(j) == Some(&b'#') {
                hashes += 1;
                j += 1;
            }
            if b.get(j) != Some(&b'"') {
                out.push(c);
                i += 1;
                continue;
            }
            out.extend_from_slice(&b[i..=j]);
            i = j + 1;
            while i < b.len() {
                if b[i] == b'"'
                    && b[i + 1..]
                        .iter()
                        .take(hashes)
                        .filter(|&&h| h == b'#')
                        .count()
                        == hashes
                {
                    out.extend_from_slice(&b[i..i + 1 + hashes]);
                    i += 1 + hashes;
                    break;
                }
                out.push(blank(b[i]));
                i += 1;
            }
        } else if c == b'"' {
            out.push(c);
            i += 1;
            while i < b.len() && b[i] != b'"' {
                if b[i] == b'\\' && i + 1 < b.len() {
                    out.push(b' ');
                    out.push(blank(b[i + 1]));
                    i += 2;
                } else {
                    out.push(blank(b[i]));
                    i += 1;
                }
            }
            if i < b.len() {
                out.push(b'"');
                i += 1;
            }
        } else if c == b'\'' {
            // A character literal ('x', '\n', '\u{..}', '{'), or a lifetime ('a).
            let end = if b.get(i + 1) == Some(&b'\\') {
                b[i + 2..]
                    .iter()
                    .position(|&x| x == b'\'')
                    .map(|k| i + 2 + k)
            } else {
                let ch_len = src[i + 1..].chars().next().map_or(1, char::len_utf8);
                (b.get(i + 1 + ch_len) == Some(&b'\'')).then_some(i + 1 + ch_len)
            };
            match end {
                Some(e) => {
                    out.push(b'\'');
                    out.extend(std::iter::repeat_n(b' ', e - i - 1));
                    out.push(b'\'');
                    i = e + 1;
                }
                None => {
                    out.push(c);
                    i += 1;
                }
            }
        } else {
            out.push(c);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The byte index of the brace closing the one at `open`.
fn matching_brace(s: &[u8], open: usize) -> usize {
    let mut depth = 0usize;
    for (k, &c) in s.iter().enumerate().skip(open) {
        if c == b'{' {
            depth += 1;
        } else if c == b'}' {
            depth -= 1;
            if depth == 0 {
                return k;
            }
        }
    }
    s.len()
}

/// `strip`ped source with every `#[cfg(test)] mod name { ... }` blanked.
fn without_test_modules(s: &str) -> String {
    let mut b = s.as_bytes().to_vec();
    let mut from = 0;
    while let Some(k) = s[from..].find("#[cfg(test)]").map(|k| k + from) {
        let rest = s[k + 12..].trim_start();
        let at = s.len() - rest.len();
        from = k + 12;
        if let Some(after) = rest.strip_prefix("mod ") {
            let name_end = after
                .find(|c: char| !(c.is_alphanumeric() || c == '_'))
                .unwrap_or(after.len());
            let tail = after[name_end..].trim_start();
            if tail.starts_with('{') {
                let open = s.len() - tail.len();
                let close = matching_brace(s.as_bytes(), open);
                for x in &mut b[at..=close.min(s.len() - 1)] {
                    if *x != b'\n' {
                        *x = b' ';
                    }
                }
                from = close.min(s.len());
            }
        }
    }
    String::from_utf8_lossy(&b).into_owned()
}

fn is_ident(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// `a::{b, c::{d, e}}` as `a::b`, `a::c::d`, `a::c::e`.
fn expand(s: &str) -> Vec<String> {
    let s: String = s.chars().filter(|c| !c.is_whitespace()).collect();
    let Some(i) = s.find('{') else {
        return vec![s];
    };
    let close = matching_brace(s.as_bytes(), i);
    let (head, body) = (&s[..i], &s[i + 1..close.min(s.len())]);
    let tail = s.get(close + 1..).unwrap_or("");
    let mut parts = Vec::new();
    let (mut depth, mut cur) = (0, String::new());
    for ch in body.chars() {
        match ch {
            ',' if depth == 0 => parts.push(std::mem::take(&mut cur)),
            '{' => {
                depth += 1;
                cur.push(ch);
            }
            '}' => {
                depth -= 1;
                cur.push(ch);
            }
            _ => cur.push(ch),
        }
    }
    parts.push(cur);
    parts
        .into_iter()
        .filter(|p| !p.is_empty())
        .flat_map(|p| expand(&format!("{head}{p}{tail}")))
        .collect()
}

/// Every path a file names: its `use` trees expanded, inline `crate::...` paths and
/// `super::...` paths.
fn paths(src: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(k) = src[from..].find("use ").map(|k| k + from) {
        from = k + 4;
        if k > 0 && src[..k].chars().next_back().is_some_and(is_ident) {
            continue;
        }
        let Some(end) = src[k..].find(';') else { break };
        out.extend(expand(&src[k + 4..k + end]));
    }
    for prefix in ["crate::", "super::"] {
        let mut from = 0;
        while let Some(k) = src[from..].find(prefix).map(|k| k + from) {
            from = k + prefix.len();
            if k > 0
                && src[..k]
                    .chars()
                    .next_back()
                    .is_some_and(|c| is_ident(c) || c == ':')
            {
                continue; // `super::super::x` is taken whole from its first `super`
            }
            let end = src[k..]
                .find(|c: char| !(is_ident(c) || c == ':'))
                .map_or(src.len(), |e| k + e);
            out.push(src[k..end].to_string());
        }
    }
    out
}

/// The core's modules: path -> file, and each file's stripped source.
fn core_modules() -> BTreeMap<ModPath, (PathBuf, String)> {
    let src = core_src();
    let mut out = BTreeMap::new();
    for p in rust_files(&src) {
        let rel = p.strip_prefix(&src).expect("under src");
        let mut segs: ModPath = rel
            .iter()
            .map(|s| s.to_string_lossy().trim_end_matches(".rs").to_string())
            .collect();
        if matches!(
            segs.last().map(String::as_str),
            Some("mod" | "lib" | "main")
        ) {
            segs.pop();
        }
        let text = fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
        out.insert(segs, (p, without_test_modules(&strip(&text))));
    }
    out
}

/// The longest prefix of `path` that names a module file.
fn resolve(files: &BTreeMap<ModPath, (PathBuf, String)>, path: &[String]) -> Option<ModPath> {
    (1..=path.len())
        .rev()
        .map(|k| path[..k].to_vec())
        .find(|p| files.contains_key(p))
}

/// Every (from, to) pair of module files where `from` names `to`.
fn file_edges(files: &BTreeMap<ModPath, (PathBuf, String)>) -> BTreeSet<(ModPath, ModPath)> {
    let mut edges = BTreeSet::new();
    for (module, (_, src)) in files {
        for q in paths(src) {
            // `use a::b as c` reads `a::basc` once its spaces are gone: the renamed
            // last segment resolves to its module all the same (longest prefix).
            let q = q.trim_matches(':');
            let segs: Vec<String> = q
                .split("::")
                .filter(|s| !s.is_empty())
                .map(String::from)
                .collect();
            let Some(first) = segs.first() else { continue };
            let target: Vec<String> = if first == "crate" {
                segs[1..].to_vec()
            } else if first == "self" {
                // `self::` in mod.rs is the folder itself; in x.rs it is x.
                module
                    .iter()
                    .cloned()
                    .chain(segs[1..].iter().cloned())
                    .collect()
            } else if first == "super" {
                // Each `super` climbs one module; the parent of x.rs and of
                // folder/mod.rs alike is the module that declares it.
                let ups = segs.iter().take_while(|s| *s == "super").count();
                let base = module.len().saturating_sub(ups);
                module[..base]
                    .iter()
                    .cloned()
                    .chain(segs[ups..].iter().cloned())
                    .collect()
            } else {
                let mut child = module.clone();
                child.push(first.clone());
                if !files.contains_key(&child) {
                    continue; // an outside crate or a name in scope
                }
                module.iter().cloned().chain(segs.iter().cloned()).collect()
            };
            if let Some(t) = resolve(files, &target) {
                if &t != module {
                    edges.insert((module.clone(), t));
                }
            }
        }
    }
    edges
}

/// The strongly connected components of two or more nodes (Tarjan's algorithm, on
/// an explicit stack), each sorted, sorted.
fn cycles(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    let nodes: Vec<&String> = graph
        .keys()
        .chain(graph.values().flatten())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    let idx: BTreeMap<&String, usize> = nodes.iter().enumerate().map(|(i, n)| (*n, i)).collect();
    let adj: Vec<Vec<usize>> = nodes
        .iter()
        .map(|n| {
            graph
                .get(*n)
                .map_or(vec![], |s| s.iter().map(|m| idx[m]).collect())
        })
        .collect();
    let n = nodes.len();
    let (mut index, mut low) = (vec![usize::MAX; n], vec![0; n]);
    let (mut on, mut stack, mut out, mut next) = (vec![false; n], vec![], vec![], 0);
    for root in 0..n {
        if index[root] != usize::MAX {
            continue;
        }
        let mut work = vec![(root, 0usize)];
        while let Some(&mut (v, ref mut k)) = work.last_mut() {
            if *k == 0 && index[v] == usize::MAX {
                index[v] = next;
                low[v] = next;
                next += 1;
                stack.push(v);
                on[v] = true;
            }
            if let Some(&w) = adj[v].get(*k) {
                *k += 1;
                if index[w] == usize::MAX {
                    work.push((w, 0));
                } else if on[w] {
                    low[v] = low[v].min(index[w]);
                }
                continue;
            }
            work.pop();
            if let Some(&(parent, _)) = work.last() {
                low[parent] = low[parent].min(low[v]);
            }
            if low[v] == index[v] {
                let mut comp = vec![];
                loop {
                    let w = stack.pop().expect("on the stack");
                    on[w] = false;
                    comp.push(nodes[w].clone());
                    if w == v {
                        break;
                    }
                }
                if comp.len() > 1 {
                    comp.sort();
                    out.push(comp);
                }
            }
        }
    }
    out.sort();
    out
}

/// One file that makes each edge of a cycle: "a -> b (a/x.rs names crate::b)".
fn show(edges: &BTreeSet<(ModPath, ModPath)>, level: usize, comp: &[String]) -> String {
    let name = |p: &[String]| {
        if p.is_empty() {
            "(root)".to_string()
        } else {
            p.join("/")
        }
    };
    let mut why = Vec::new();
    for (a, b) in edges {
        let (na, nb) = (
            name(&a[..level.min(a.len())]),
            name(&b[..level.min(b.len())]),
        );
        if na != nb && comp.contains(&na) && comp.contains(&nb) {
            why.push(format!("{na} -> {nb} ({} names {})", name(a), name(b)));
        }
    }
    why.dedup();
    format!("{}\n      {}", comp.join(" <-> "), why.join("\n      "))
}

#[test]
fn the_cores_top_level_modules_form_no_circle() {
    let files = core_modules();
    let edges = file_edges(&files);
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (a, b) in &edges {
        if let (Some(x), Some(y)) = (a.first(), b.first()) {
            if x != y {
                graph.entry(x.clone()).or_default().insert(y.clone());
            }
        }
    }
    let found = cycles(&graph);
    assert!(
        found.is_empty(),
        "the core's top-level modules import each other in a circle (issue 23: the core \
         stacks in strict layers). Move what both sides need into the lower module, or \
         invert the dependency (pass a value or a trait in); each line names the files \
         that make the edges:\n  {}",
        found
            .iter()
            .map(|c| show(&edges, 1, c))
            .collect::<Vec<_>>()
            .join("\n  ")
    );
}

#[test]
fn the_files_of_each_folder_of_the_core_form_no_circle() {
    let files = core_modules();
    let edges = file_edges(&files);
    // folder -> its graph of sibling modules.
    let mut folders: BTreeMap<ModPath, BTreeMap<String, BTreeSet<String>>> = BTreeMap::new();
    for (a, b) in &edges {
        // Between a module and its own ancestor or descendant: the mod.rs idiom.
        if a.starts_with(b) || b.starts_with(a) {
            continue;
        }
        let common = a.iter().zip(b).take_while(|(x, y)| x == y).count();
        if common == 0 {
            continue; // top-level modules: the other test
        }
        let folder = a[..common].to_vec();
        folders
            .entry(folder)
            .or_default()
            .entry(a[common].clone())
            .or_default()
            .insert(b[common].clone());
    }
    let mut found = Vec::new();
    for (folder, graph) in &folders {
        for c in cycles(graph) {
            let full: Vec<String> = c
                .iter()
                .map(|s| format!("{}/{s}", folder.join("/")))
                .collect();
            found.push(show(&edges, folder.len() + 1, &full));
        }
    }
    assert!(
        found.is_empty(),
        "files of one folder of the core import each other in a circle. Move what both \
         need into one of them (or a new lower file), or have the folder's mod.rs hold \
         it; each line names the files that make the edges:\n  {}",
        found.join("\n  ")
    );
}

#[test]
fn no_source_file_of_the_workspace_is_over_1000_lines() {
    let root = workspace();
    let mut long = Vec::new();
    let crates = fs::read_dir(root.join("crates")).expect("the workspace's crates/");
    let mut dirs: Vec<PathBuf> = crates.flatten().map(|e| e.path()).collect();
    dirs.sort();
    for c in dirs {
        for sub in ["src", "tests"] {
            for p in rust_files(&c.join(sub)) {
                let n = fs::read_to_string(&p).map_or(0, |t| t.lines().count());
                if n > MAX_FILE_LINES {
                    let rel = p.strip_prefix(&root).unwrap_or(&p).display().to_string();
                    long.push(format!("{rel}: {n} lines"));
                }
            }
        }
    }
    assert!(
        long.is_empty(),
        "source files over {MAX_FILE_LINES} lines; split each into files of one concept \
         (a folder with a mod.rs that re-exports, as engine/ does):\n  {}",
        long.join("\n  ")
    );
}

/// A function of the core: file (relative to the core's src/), name, lines.
fn long_functions() -> Vec<(String, String, usize)> {
    let src = core_src();
    let mut out = Vec::new();
    for (_, (path, text)) in core_modules() {
        let rel = path
            .strip_prefix(&src)
            .unwrap_or(&path)
            .display()
            .to_string();
        let b = text.as_bytes();
        let mut from = 0;
        while let Some(k) = text[from..].find("fn ").map(|k| k + from) {
            from = k + 3;
            if k > 0 && text[..k].chars().next_back().is_some_and(is_ident) {
                continue;
            }
            let rest = &text[k + 3..];
            let name: String = rest
                .trim_start()
                .chars()
                .take_while(|&c| is_ident(c))
                .collect();
            if name.is_empty() {
                continue; // `fn(` a function pointer type
            }
            // The body's brace, unless a `;` ends a declaration first.
            let Some(open) = text[k..].find(['{', ';']).map(|e| k + e) else {
                break;
            };
            if b[open] == b';' {
                continue;
            }
            let close = matching_brace(b, open);
            let first = text[..k].matches('\n').count();
            let last = text[..close.min(text.len())].matches('\n').count();
            let lines = last - first + 1;
            if lines > MAX_FN_LINES {
                out.push((rel.clone(), name, lines));
            }
        }
    }
    out.sort();
    out
}

/// The `## Long functions` table of ARCHITECTURE.md: (file, function) pairs.
fn listed_long_functions(doc: &str) -> Option<BTreeSet<(String, String)>> {
    let start = doc.lines().position(|l| l.trim() == "## Long functions")?;
    let clean = |c: &str| {
        c.trim()
            .trim_matches('`')
            .trim_start_matches("crates/dvrfs-core/src/")
            .trim_start_matches("fn ")
            .trim_end_matches("()")
            .to_string()
    };
    let mut out = BTreeSet::new();
    for l in doc.lines().skip(start + 1) {
        if l.starts_with("## ") {
            break;
        }
        let cells: Vec<&str> = l.trim().trim_matches('|').split('|').collect();
        if !l.trim_start().starts_with('|') || cells.len() < 2 {
            continue;
        }
        let (file, func) = (clean(cells[0]), clean(cells[1]));
        if file == "file" || file.starts_with("---") || file.starts_with(":-") {
            continue;
        }
        let func = func.rsplit("::").next().unwrap_or("").to_string();
        out.insert((file, func));
    }
    Some(out)
}

#[test]
fn every_long_function_of_the_core_is_listed_with_its_reason() {
    let doc_path = workspace().join("ARCHITECTURE.md");
    let doc = fs::read_to_string(&doc_path).unwrap_or_default();
    let long = long_functions();
    let Some(listed) = listed_long_functions(&doc) else {
        panic!(
            "ARCHITECTURE.md has no section headed \"## Long functions\": add one with a \
             table `| file | function | lines | why it stays long |` listing the core's \
             functions over {MAX_FN_LINES} lines (file relative to crates/dvrfs-core/src), \
             or split them. Now over {MAX_FN_LINES} lines:\n  {}",
            long.iter()
                .map(|(f, n, l)| format!("| {f} | {n} | {l} | |"))
                .collect::<Vec<_>>()
                .join("\n  ")
        );
    };
    let missing: Vec<String> = long
        .iter()
        .filter(|(f, n, _)| !listed.contains(&(f.clone(), n.clone())))
        .map(|(f, n, l)| format!("| {f} | {n} | {l} | |"))
        .collect();
    assert!(
        missing.is_empty(),
        "functions of the core over {MAX_FN_LINES} lines that ARCHITECTURE.md's \"## Long \
         functions\" table does not list: split each, or add its row with the reason it \
         stays long:\n  {}",
        missing.join("\n  ")
    );
    // And the table stays true: a row whose function is gone or now short goes.
    let stale: Vec<String> = listed
        .iter()
        .filter(|(f, n)| !long.iter().any(|(lf, ln, _)| lf == f && ln == n))
        .map(|(f, n)| format!("{f} {n}"))
        .collect();
    assert!(
        stale.is_empty(),
        "ARCHITECTURE.md's \"## Long functions\" table lists functions that are no longer \
         over {MAX_FN_LINES} lines (or no longer exist): remove their rows:\n  {}",
        stale.join("\n  ")
    );
}

#[test]
fn the_parse_sees_paths_and_functions_as_the_rules_mean() {
    // Comments, doc comments and strings name nothing.
    let s = strip("/// crate::a\nlet x = \"crate::b\"; // crate::c\n/* crate::d */ crate::e::f;");
    assert_eq!(paths(&s), vec!["crate::e::f".to_string()]);
    // Use trees expand; `super::super` is one path.
    let s = strip("use crate::{a::{b, c}, d};\nfn g() { super::super::h(); }");
    let p = paths(&s);
    assert!(
        p.contains(&"crate::a::b".into()) && p.contains(&"crate::d".into()),
        "{p:?}"
    );
    assert!(p.contains(&"super::super::h".into()), "{p:?}");
    // A test module is left out; a character literal brace does not count.
    let s = without_test_modules(&strip(
        "fn a() { '{'; }\n#[cfg(test)]\nmod tests { use crate::x; }",
    ));
    assert!(paths(&s).is_empty(), "{s}");
    // A two-module circle is found, a chain is not.
    let g = |e: &[(&str, &str)]| {
        let mut m: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for (a, b) in e {
            m.entry(a.to_string()).or_default().insert(b.to_string());
        }
        m
    };
    assert_eq!(
        cycles(&g(&[("a", "b"), ("b", "a"), ("b", "c")])),
        vec![vec!["a".to_string(), "b".into()]]
    );
    assert!(cycles(&g(&[("a", "b"), ("b", "c")])).is_empty());
    // The table's cells are read with or without backticks and paths.
    let doc = "## Long functions\n| file | function | lines | why |\n|---|---|---|---|\n| `engine/mod.rs` | `Engine::submit` | 120 | x |\n## Next";
    let l = listed_long_functions(doc).unwrap();
    assert!(
        l.contains(&("engine/mod.rs".into(), "submit".into())),
        "{l:?}"
    );
}
