//! The layers point down (docs/ARCHITECTURE.md): read every `crate::` path in src/
//! outside comments, strings and `#[cfg(test)]` items, and check
//! - no import cycle between top-level modules, nor between the children of any
//!   directory module (edges from `crate::…`, `super::…` and `self::…` paths, each
//!   resolved to the module it lands in);
//! - nothing below the CLI imports `cli` (only `cli`, `app`, `argcheck` and main do);
//! - `report` imports neither `backend` nor `world`; `backend` does not import `probe`;
//!   `results` (the records) imports nothing of `world` (the caller gathers);
//! - the leaves (`kinds`, `table`, `units`, `error`, `process`, `progress`) import
//!   nothing of burnin but each other;
//! - no function outside `#[cfg(test)]` items in src/ or train/src/ is over
//!   [`MAX_FN_LINES`] lines (from the `fn` line to its closing brace).
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The longest a function outside the tests may be, in lines.
const MAX_FN_LINES: usize = 120;

/// The source with comments, string and char literals blanked (kept as spaces so
/// braces inside them do not count; their newlines are kept, so line numbers hold).
fn code_only(src: &str) -> String {
    let b: Vec<char> = src.chars().collect();
    let mut out = String::with_capacity(src.len());
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        let next = b.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < b.len() && b[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            while i < b.len() {
                if b[i] == '/' && b.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if b[i] == '*' && b.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    if b[i] == '\n' {
                        out.push('\n');
                    }
                    i += 1;
                }
            }
            out.push(' ');
        } else if c == 'r'
            && (next == Some('"') || next == Some('#'))
            && !ident(b.get(i.wrapping_sub(1)))
        {
            // raw string r"…", r#"…"#
            let mut j = i + 1;
            let mut hashes = 0;
            while b.get(j) == Some(&'#') {
                hashes += 1;
                j += 1;
            }
            if b.get(j) != Some(&'"') {
                out.push(c);
                i += 1;
                continue;
            }
            j += 1;
            loop {
                if j >= b.len() {
                    break;
                }
                if b[j] == '"' && (0..hashes).all(|k| b.get(j + 1 + k) == Some(&'#')) {
                    j += 1 + hashes;
                    break;
                }
                j += 1;
            }
            out.push_str("\"\"");
            out.extend(b[i..j.min(b.len())].iter().filter(|c| **c == '\n'));
            i = j;
        } else if c == '"' {
            let start = i;
            i += 1;
            while i < b.len() && b[i] != '"' {
                if b[i] == '\\' {
                    i += 1;
                }
                i += 1;
            }
            i += 1;
            out.push_str("\"\"");
            out.extend(b[start..i.min(b.len())].iter().filter(|c| **c == '\n'));
        } else if c == '\'' && char_literal(&b, i) {
            i += 1;
            while i < b.len() && b[i] != '\'' {
                if b[i] == '\\' {
                    i += 1;
                }
                i += 1;
            }
            i += 1;
            out.push_str("' '");
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

fn ident(c: Option<&char>) -> bool {
    c.is_some_and(|c| c.is_alphanumeric() || *c == '_')
}

/// `'x'` or `'\n'`, not a lifetime `'a`.
fn char_literal(b: &[char], i: usize) -> bool {
    matches!(
        (b.get(i + 1), b.get(i + 2)),
        (Some('\\'), _) | (Some(_), Some('\''))
    )
}

/// The code without `#[cfg(test)]` items (a `mod … { … }` or one item up to `;`),
/// their newlines kept.
fn without_tests(code: &str) -> String {
    let mut out = String::new();
    let mut rest = code;
    while let Some(at) = rest.find("#[cfg(test)]") {
        out.push_str(&rest[..at]);
        let item = &rest[at..];
        let brace = item.find('{');
        let semi = item.find(';');
        let end = match (brace, semi) {
            (Some(b), Some(s)) if s < b => s + 1,
            (Some(b), _) => {
                let mut depth = 0;
                let mut end = item.len();
                for (k, ch) in item[b..].char_indices() {
                    match ch {
                        '{' => depth += 1,
                        '}' => {
                            depth -= 1;
                            if depth == 0 {
                                end = b + k + 1;
                                break;
                            }
                        }
                        _ => {}
                    }
                }
                end
            }
            (None, Some(s)) => s + 1,
            (None, None) => item.len(),
        };
        // Keep the item's newlines so line numbers after it hold.
        out.extend(item[..end].chars().filter(|c| *c == '\n'));
        rest = &item[end..];
    }
    out.push_str(rest);
    out
}

/// Top-level modules named after `crate::` in `code`, including inside
/// `crate::{a, b::c}` groups.
fn crate_refs(code: &str) -> BTreeSet<String> {
    let mut refs = BTreeSet::new();
    let mut rest = code;
    while let Some(at) = rest.find("crate::") {
        let before = rest[..at].chars().last();
        rest = &rest[at + "crate::".len()..];
        if ident(before.as_ref()) {
            continue; // e.g. `burnin_crate::`
        }
        if let Some(group) = rest.strip_prefix('{') {
            let mut depth = 1;
            let mut top = true;
            let mut word = String::new();
            for ch in group.chars() {
                match ch {
                    '{' => {
                        depth += 1;
                        top = false;
                    }
                    '}' => {
                        depth -= 1;
                        if depth == 0 {
                            if top && !word.is_empty() {
                                refs.insert(std::mem::take(&mut word));
                            }
                            break;
                        }
                    }
                    ',' if depth == 1 => {
                        if top && !word.is_empty() {
                            refs.insert(std::mem::take(&mut word));
                        }
                        top = true;
                        word.clear();
                        continue;
                    }
                    _ => {}
                }
                if depth == 1 && top {
                    if ch.is_alphanumeric() || ch == '_' {
                        word.push(ch);
                    } else if !word.is_empty() {
                        refs.insert(std::mem::take(&mut word));
                        top = false;
                    }
                }
            }
        } else {
            let word: String = rest
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            if !word.is_empty() {
                refs.insert(word);
            }
        }
    }
    refs
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// top-level module → the top-level modules it names (itself excluded).
fn graph() -> BTreeMap<String, BTreeSet<String>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut g: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for f in files {
        let rel = f.strip_prefix(&src).unwrap();
        let first = rel
            .components()
            .next()
            .unwrap()
            .as_os_str()
            .to_string_lossy();
        let top = first.trim_end_matches(".rs").to_string();
        let text = std::fs::read_to_string(&f).unwrap();
        let refs = crate_refs(&without_tests(&code_only(&text)));
        let e = g.entry(top.clone()).or_default();
        e.extend(refs.into_iter().filter(|r| *r != top));
    }
    g
}

/// Strongly connected components with more than one module (Tarjan).
fn cycles(g: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    struct T<'a> {
        g: &'a BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on: BTreeSet<&'a str>,
        next: usize,
        out: Vec<Vec<String>>,
    }
    fn visit<'a>(t: &mut T<'a>, v: &'a str) {
        t.index.insert(v, t.next);
        t.low.insert(v, t.next);
        t.next += 1;
        t.stack.push(v);
        t.on.insert(v);
        let g = t.g;
        for w in g.get(v).into_iter().flatten() {
            let w = w.as_str();
            if !t.index.contains_key(w) {
                visit(t, w);
                let l = t.low[v].min(t.low[w]);
                t.low.insert(v, l);
            } else if t.on.contains(w) {
                let l = t.low[v].min(t.index[w]);
                t.low.insert(v, l);
            }
        }
        if t.low[v] == t.index[v] {
            let mut c = Vec::new();
            while let Some(w) = t.stack.pop() {
                t.on.remove(w);
                c.push(w.to_string());
                if w == v {
                    break;
                }
            }
            if c.len() > 1 {
                c.sort();
                t.out.push(c);
            }
        }
    }
    let mut t = T {
        g,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on: BTreeSet::new(),
        next: 0,
        out: Vec::new(),
    };
    for v in g.keys() {
        if !t.index.contains_key(v.as_str()) {
            visit(&mut t, v);
        }
    }
    t.out
}

/// One leaf of a path or `use` tree: its segments (the root `crate`/`super`/`self`
/// kept, a glob as `*`), where it starts in the code, and its `as` name if any.
#[derive(Debug)]
struct Leaf {
    segs: Vec<String>,
    at: usize,
    alias: Option<String>,
}

fn skip_ws(b: &[char], mut i: usize) -> usize {
    while i < b.len() && b[i].is_whitespace() {
        i += 1;
    }
    i
}

fn word_at(b: &[char], i: usize) -> String {
    b[i.min(b.len())..]
        .iter()
        .take_while(|c| c.is_alphanumeric() || **c == '_')
        .collect()
}

/// Parse the path or use tree at `b[i]` below `segs` (`a::b::{c, d::{e, f}}`, `a::*`,
/// `a::B as C`); push its leaves, return the index after it.
fn use_tree(b: &[char], i: usize, mut segs: Vec<String>, out: &mut Vec<Leaf>) -> usize {
    let mut i = skip_ws(b, i);
    let at = i;
    loop {
        i = skip_ws(b, i);
        if b.get(i) == Some(&'{') {
            i += 1;
            loop {
                i = skip_ws(b, i);
                match b.get(i) {
                    None => return i,
                    Some('}') => return i + 1,
                    Some(',') => i += 1,
                    _ => {
                        let before = i;
                        i = use_tree(b, i, segs.clone(), out).max(before + 1);
                    }
                }
            }
        }
        let word = word_at(b, i);
        if word.is_empty() {
            if b.get(i) == Some(&'*') {
                segs.push("*".into());
                i += 1;
            }
            break;
        }
        i += word.chars().count();
        segs.push(word);
        let j = skip_ws(b, i);
        if b.get(j) == Some(&':') && b.get(j + 1) == Some(&':') {
            i = j + 2;
        } else {
            break;
        }
    }
    let j = skip_ws(b, i);
    let mut alias = None;
    if word_at(b, j) == "as" {
        let k = skip_ws(b, j + 2);
        let w = word_at(b, k);
        if !w.is_empty() {
            i = k + w.chars().count();
            alias = Some(w);
        }
    }
    if !segs.is_empty() {
        out.push(Leaf { segs, at, alias });
    }
    i
}

/// Every path in `code` (already blanked) rooted at `crate::`, `super::` or `self::`.
fn rooted_paths(code: &str) -> Vec<Leaf> {
    let b: Vec<char> = code.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let w = word_at(&b, i);
        let n = w.chars().count();
        let rooted = ["crate", "super", "self"].contains(&w.as_str())
            && b.get(i + n) == Some(&':')
            && b.get(i + n + 1) == Some(&':')
            && !ident(i.checked_sub(1).and_then(|p| b.get(p)));
        if rooted {
            i = use_tree(&b, i, Vec::new(), &mut out);
        } else {
            i += n.max(1);
        }
    }
    out
}

/// The leaves of every `pub use` / `pub(…) use` in `code` (already blanked).
fn pub_uses(code: &str) -> Vec<Leaf> {
    let b: Vec<char> = code.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let w = word_at(&b, i);
        if w == "pub" && !ident(i.checked_sub(1).and_then(|p| b.get(p))) {
            let mut j = skip_ws(&b, i + 3);
            if b.get(j) == Some(&'(') {
                while j < b.len() && b[j] != ')' {
                    j += 1;
                }
                j = skip_ws(&b, j + 1);
            }
            if word_at(&b, j) == "use" {
                i = use_tree(&b, j + 3, Vec::new(), &mut out);
                continue;
            }
        }
        i += w.chars().count().max(1);
    }
    out
}

/// Inline `mod name { … }` items in `code`: (start, end, name), outermost first.
fn inline_mods(code: &str) -> Vec<(usize, usize, String)> {
    let b: Vec<char> = code.chars().collect();
    let mut out = Vec::new();
    for i in 0..b.len() {
        if word_at(&b, i) != "mod" || ident(i.checked_sub(1).and_then(|p| b.get(p))) {
            continue;
        }
        let n = skip_ws(&b, i + 3);
        let name = word_at(&b, n);
        let open = skip_ws(&b, n + name.chars().count());
        if name.is_empty() || b.get(open) != Some(&'{') {
            continue;
        }
        let mut depth = 0;
        let mut end = b.len();
        for (k, ch) in b.iter().enumerate().skip(open) {
            match ch {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        end = k;
                        break;
                    }
                }
                _ => {}
            }
        }
        out.push((open, end, name));
    }
    out
}

/// A file's module from its path under src/: `report/doc.rs` → `report::doc`,
/// `report/mod.rs` → `report`, `lib.rs` → `crate`.
fn module_of(rel: &str) -> String {
    let rel = rel.trim_end_matches(".rs");
    let mut parts: Vec<&str> = rel.split('/').collect();
    if parts.last() == Some(&"mod") {
        parts.pop();
    }
    if parts.is_empty() || parts == ["lib"] {
        return "crate".into();
    }
    parts.join("::")
}

fn parent(m: &str) -> String {
    match m.rfind("::") {
        Some(i) => m[..i].to_string(),
        None => "crate".into(),
    }
}

fn join(base: &str, seg: &str) -> String {
    if base == "crate" {
        seg.to_string()
    } else {
        format!("{base}::{seg}")
    }
}

/// (module, name) → the module a `pub use` there brings `name` from.
type Reexports = BTreeMap<(String, String), String>;

/// The module that `segs`, named in module `from`, lands in: the longest existing
/// module path, then one step through a `pub use` of the next name (so
/// `super::item` lands in the sibling that `pub use child::item` in the parent names).
/// None for a path not rooted at `crate`, `super` or `self`.
fn resolve(from: &str, segs: &[String], mods: &BTreeSet<String>, re: &Reexports) -> Option<String> {
    let mut cur = match segs.first()?.as_str() {
        "crate" => "crate".to_string(),
        "super" => parent(from),
        "self" => from.to_string(),
        _ => return None,
    };
    let mut rest = &segs[1..];
    while rest.first().is_some_and(|s| s == "super") {
        cur = parent(&cur);
        rest = &rest[1..];
    }
    for seg in rest.iter().filter(|s| *s != "self") {
        let next = join(&cur, seg);
        if mods.contains(&next) {
            cur = next;
        } else {
            if let Some(t) = re.get(&(cur.clone(), seg.clone())) {
                cur = t.clone();
            }
            break;
        }
    }
    Some(cur)
}

/// An import: module `from` names module `to` at `file:line`.
#[derive(Clone, Debug)]
struct Edge {
    from: String,
    to: String,
    file: String,
    line: usize,
}

/// One source file, its path under src/ and its code (blanked, tests removed), and
/// the inline modules in it.
struct Unit {
    rel: String,
    module: String,
    code: String,
    inline: Vec<(usize, usize, String)>,
}

impl Unit {
    /// The module the code at char `at` is in (inline modules counted).
    fn module_at(&self, at: usize) -> String {
        self.inline
            .iter()
            .filter(|(s, e, _)| *s <= at && at <= *e)
            .fold(self.module.clone(), |m, (_, _, n)| join(&m, n))
    }
}

/// Every module and every edge between modules in `files` ((path under src/, text)).
fn module_graph(files: &[(String, String)]) -> (BTreeSet<String>, Vec<Edge>) {
    let units: Vec<Unit> = files
        .iter()
        .map(|(rel, text)| {
            let code = without_tests(&code_only(text));
            let inline = inline_mods(&code);
            Unit {
                rel: rel.clone(),
                module: module_of(rel),
                code,
                inline,
            }
        })
        .collect();
    let mut mods: BTreeSet<String> = BTreeSet::new();
    for u in &units {
        mods.insert(u.module.clone());
        for (s, _, _) in &u.inline {
            mods.insert(u.module_at(*s + 1));
        }
    }
    // Re-exports, twice so one that names another resolves through it.
    let mut re = Reexports::new();
    for _ in 0..2 {
        let mut next = Reexports::new();
        for u in &units {
            for l in pub_uses(&u.code) {
                let m = u.module_at(l.at);
                let name = l.alias.clone().or_else(|| l.segs.last().cloned());
                let Some(name) = name.filter(|n| n != "*" && n != "self") else {
                    continue;
                };
                let mut segs = l.segs.clone();
                if !["crate", "super", "self"].contains(&segs[0].as_str()) {
                    if !mods.contains(&join(&m, &segs[0])) {
                        continue; // another crate
                    }
                    segs.insert(0, "self".into());
                }
                if let Some(t) = resolve(&m, &segs, &mods, &re) {
                    next.insert((m, name), t);
                }
            }
        }
        re = next;
    }
    let mut edges = Vec::new();
    for u in &units {
        let lines: Vec<usize> = u
            .code
            .chars()
            .scan(1, |n, c| {
                let here = *n;
                *n += (c == '\n') as usize;
                Some(here)
            })
            .collect();
        for l in rooted_paths(&u.code) {
            let from = u.module_at(l.at);
            if let Some(to) = resolve(&from, &l.segs, &mods, &re).filter(|t| *t != from) {
                let line = lines.get(l.at).copied().unwrap_or(0);
                edges.push(Edge {
                    from,
                    to,
                    file: u.rel.clone(),
                    line,
                });
            }
        }
    }
    (mods, edges)
}

/// The child of `dir` that module `m` is or lies in; None when `m` is not below `dir`.
fn child_of(dir: &str, m: &str) -> Option<String> {
    let rest = if dir == "crate" {
        Some(m).filter(|m| *m != "crate")
    } else {
        m.strip_prefix(dir).and_then(|r| r.strip_prefix("::"))
    }?;
    Some(join(dir, rest.split("::").next()?))
}

/// For every module with children, each import cycle among its children (edges
/// collapsed to the child they land in; edges from or to the module itself left out),
/// as a message naming the cycle and the files and lines of its edges.
fn sibling_cycles(mods: &BTreeSet<String>, edges: &[Edge]) -> Vec<String> {
    let dirs: BTreeSet<String> = mods
        .iter()
        .filter(|m| *m != "crate")
        .map(|m| parent(m))
        .collect();
    let mut out = Vec::new();
    for dir in &dirs {
        let mut g: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        let mut seen: BTreeMap<(String, String), Vec<String>> = BTreeMap::new();
        for e in edges {
            let (Some(a), Some(b)) = (child_of(dir, &e.from), child_of(dir, &e.to)) else {
                continue;
            };
            if a != b {
                g.entry(a.clone()).or_default().insert(b.clone());
                let at = seen.entry((a, b)).or_default();
                let here = format!("{}:{}", e.file, e.line);
                if at.last() != Some(&here) {
                    at.push(here);
                }
            }
        }
        for c in cycles(&g) {
            let how: Vec<String> = seen
                .iter()
                .filter(|((a, b), _)| c.contains(a) && c.contains(b))
                .map(|((a, b), at)| format!("  {a} -> {b}: {}", at.join(", ")))
                .collect();
            out.push(format!("cycle in {dir}: {c:?}\n{}", how.join("\n")));
        }
    }
    out
}

fn src_files() -> Vec<(String, String)> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    files
        .iter()
        .map(|f| {
            let rel = f
                .strip_prefix(&src)
                .unwrap()
                .to_string_lossy()
                .replace('\\', "/");
            (rel, std::fs::read_to_string(f).unwrap())
        })
        .collect()
}

#[test]
fn the_scanner_sees_paths_in_code_only() {
    let src = r##"
use crate::{a, b::{c, d}, e::f};
// crate::commented
/* crate::blocked /* nested */ crate::still */
let s = "crate::in_a_string"; let r = r#"crate::raw"#; let c = '{';
fn f<'a>(x: &'a str) -> crate::g::H { crate::i::j() }
#[cfg(test)]
mod tests { use crate::tested; fn x() { let y = '}'; } }
#[cfg(test)]
static T: u8 = crate::k::V;
"##;
    let refs = crate_refs(&without_tests(&code_only(src)));
    let want: BTreeSet<String> = ["a", "b", "e", "g", "i"].map(String::from).into();
    assert_eq!(refs, want);
    let g: BTreeMap<String, BTreeSet<String>> = [
        ("x", vec!["y"]),
        ("y", vec!["z"]),
        ("z", vec!["x"]),
        ("w", vec!["x"]),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.into_iter().map(String::from).collect()))
    .collect();
    assert_eq!(cycles(&g), vec![vec!["x", "y", "z"]]);
}

#[test]
fn the_module_graph_resolves_super_self_groups_and_reexports() {
    let files: Vec<(String, String)> = [
        ("lib.rs", "pub mod a;\npub mod b;\n"),
        (
            "a/mod.rs",
            "pub mod x;\npub mod y;\npub mod z;\npub use z::Thing;\nuse crate::b::B;\n",
        ),
        (
            "a/x.rs",
            "use super::{y::Y, w};\nfn f() -> super::super::b::B { todo!() }\n// super::z::Thing\n",
        ),
        ("a/y.rs", "pub struct Y;\n\nuse super::Thing;\n"),
        (
            "a/z.rs",
            "pub struct Thing;\nfn g() { self::h(); crate::a::x::f(); }\n#[cfg(test)]\nmod tests { use super::super::y::Y; }\n",
        ),
        ("b.rs", "use crate::{a::{self, x}, b};\npub struct B;\nmod inner {\n    use super::B;\n}\n"),
    ]
    .map(|(p, t)| (p.to_string(), t.to_string()))
    .into();
    let (mods, edges) = module_graph(&files);
    let want: BTreeSet<String> = ["crate", "a", "a::x", "a::y", "a::z", "b", "b::inner"]
        .map(String::from)
        .into();
    assert_eq!(mods, want);
    let mut got: Vec<String> = edges
        .iter()
        .map(|e| format!("{} -> {} {}:{}", e.from, e.to, e.file, e.line))
        .collect();
    got.sort();
    let want = [
        "a -> b a/mod.rs:5",
        "a::x -> a a/x.rs:1",
        "a::x -> a::y a/x.rs:1",
        "a::x -> b a/x.rs:2",
        "a::y -> a::z a/y.rs:3",
        "a::z -> a::x a/z.rs:2",
        "b -> a b.rs:1",
        "b -> a::x b.rs:1",
        "b::inner -> b b.rs:4",
    ];
    assert_eq!(got, want);
    let c = sibling_cycles(&mods, &edges);
    assert_eq!(c.len(), 2, "{c:#?}");
    assert!(
        c[0].starts_with("cycle in a: [\"a::x\", \"a::y\", \"a::z\"]"),
        "{}",
        c[0]
    );
    assert!(c[0].contains("a::y -> a::z: a/y.rs:3"), "{}", c[0]);
    assert!(
        c[1].starts_with("cycle in crate: [\"a\", \"b\"]"),
        "{}",
        c[1]
    );
    assert!(c[1].contains("a -> b: a/mod.rs:5, a/x.rs:2"), "{}", c[1]);
}

#[test]
fn no_import_cycle_between_sibling_modules() {
    let (mods, edges) = module_graph(&src_files());
    for m in [
        "report::doc",
        "results::provenance",
        "backend::nccl::backend",
    ] {
        assert!(mods.contains(m), "read the modules: {mods:?}");
    }
    assert!(
        edges
            .iter()
            .any(|e| e.from == "report::compare" && e.to == "report::charts"),
        "the scan sees super:: paths"
    );
    let c = sibling_cycles(&mods, &edges);
    assert!(
        c.is_empty(),
        "import cycles between sibling modules:\n{}",
        c.join("\n")
    );
}

#[test]
fn no_import_cycle_between_top_level_modules() {
    let g = graph();
    assert!(g.len() > 20, "read the modules: {:?}", g.keys());
    let c = cycles(&g);
    assert!(c.is_empty(), "import cycles: {c:?}\n{g:#?}");
}

#[test]
fn only_the_command_line_layer_imports_cli() {
    let g = graph();
    let top = ["cli", "app", "argcheck", "main", "lib"];
    let bad: Vec<&String> = g
        .iter()
        .filter(|(m, refs)| !top.contains(&m.as_str()) && refs.contains("cli"))
        .map(|(m, _)| m)
        .collect();
    assert!(
        bad.is_empty(),
        "modules below the CLI importing cli: {bad:?}"
    );
    assert!(g["app"].contains("cli"), "the scan sees app's use of cli");
}

#[test]
fn report_and_backend_stay_in_their_layers() {
    let g = graph();
    for (m, not) in [
        ("report", "backend"),
        ("report", "world"),
        ("backend", "probe"),
        ("results", "report"),
        ("results", "world"),
        ("acceptance", "cli"),
    ] {
        assert!(!g[m].contains(not), "{m} imports {not}: {:?}", g[m]);
    }
    // The module graph sees `super::` paths too: no way out of the records into world.
    let (_, edges) = module_graph(&src_files());
    let top = |m: &str| m.split("::").next().unwrap_or_default().to_string();
    let bad: Vec<String> = edges
        .iter()
        .filter(|e| top(&e.from) == "results" && top(&e.to) == "world")
        .map(|e| format!("{}:{}", e.file, e.line))
        .collect();
    assert!(bad.is_empty(), "results imports world at {bad:?}");
    assert!(g["acceptance"].contains("report"), "acceptance uses report");
}

#[test]
fn the_leaves_import_no_other_layer() {
    let g = graph();
    let leaves = ["kinds", "table", "units", "error", "process", "progress"];
    for leaf in leaves {
        let other: Vec<&String> = g[leaf]
            .iter()
            .filter(|r| !leaves.contains(&r.as_str()))
            .collect();
        assert!(other.is_empty(), "{leaf} imports {other:?}");
    }
}

/// Each function with a body in `code` (already blanked by [`code_only`]): its name,
/// the line its `fn` is on (1-based) and its length in lines up to its closing brace.
fn fn_lengths(code: &str) -> Vec<(String, usize, usize)> {
    let b: Vec<char> = code.chars().collect();
    let line_at = |k: usize| 1 + b[..k].iter().filter(|c| **c == '\n').count();
    let mut out = Vec::new();
    let mut i = 0;
    while i + 2 < b.len() {
        let is_fn = b[i] == 'f'
            && b[i + 1] == 'n'
            && b[i + 2].is_whitespace()
            && !ident(i.checked_sub(1).and_then(|p| b.get(p)));
        if !is_fn {
            i += 1;
            continue;
        }
        let mut j = i + 2;
        while j < b.len() && b[j].is_whitespace() {
            j += 1;
        }
        let name: String = b[j..]
            .iter()
            .take_while(|c| c.is_alphanumeric() || **c == '_')
            .collect();
        // The body opens at the first `{` (or a `;` ends a declaration) outside parens.
        let mut depth = 0i32;
        while j < b.len() {
            match b[j] {
                '(' | '[' => depth += 1,
                ')' | ']' => depth -= 1,
                '{' | ';' if depth == 0 => break,
                _ => {}
            }
            j += 1;
        }
        if name.is_empty() || j >= b.len() || b[j] == ';' {
            i += 2;
            continue;
        }
        let mut braces = 0;
        let mut end = j;
        for (k, ch) in b.iter().enumerate().skip(j) {
            match ch {
                '{' => braces += 1,
                '}' => {
                    braces -= 1;
                    if braces == 0 {
                        end = k;
                        break;
                    }
                }
                _ => {}
            }
        }
        let first = line_at(i);
        out.push((name, first, line_at(end) - first + 1));
        i += 2;
    }
    out
}

#[test]
fn the_length_scan_counts_lines_of_code_and_text() {
    let src = "/// doc\nfn a() {\n    let s = \"x\n{\n\";\n    /* {\n */\n}\ntrait T { fn b(&self); }\nfn c<F: Fn(u8) -> u8>(f: F) -> fn(u8) { f(1); }\n";
    let got = fn_lengths(&code_only(src));
    let want = [("a", 2, 7), ("c", 10, 1)].map(|(n, l, c)| (n.to_string(), l, c));
    assert_eq!(got, want);
}

#[test]
fn no_function_outside_the_tests_is_over_the_limit() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    rust_files(&root.join("src"), &mut files);
    rust_files(&root.join("train/src"), &mut files);
    assert!(files.len() > 40, "read the sources: {}", files.len());
    let mut long = Vec::new();
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap();
        for (name, line, len) in fn_lengths(&without_tests(&code_only(&text))) {
            if len > MAX_FN_LINES {
                long.push(format!("{}:{line}: fn {name} ({len} lines)", f.display()));
            }
        }
    }
    assert!(
        long.is_empty(),
        "functions over {MAX_FN_LINES} lines: {long:#?}"
    );
}
