//! The layers point down (docs/ARCHITECTURE.md): read every `crate::` path in src/
//! outside comments, strings and `#[cfg(test)]` items, and check
//! - no import cycle between top-level modules;
//! - nothing below the CLI imports `cli` (only `cli`, `app`, `argcheck` and main do);
//! - `report` imports neither `backend` nor `world`; `backend` does not import `probe`;
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
        ("acceptance", "cli"),
    ] {
        assert!(!g[m].contains(not), "{m} imports {not}: {:?}", g[m]);
    }
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
