//! The docs hold together: every relative link and every `#anchor` in README.md and in
//! the Markdown under docs/ resolves, every docs page is reached from the README
//! (directly or through the guide's table of contents, docs/README.md), and the README
//! stays one screen that starts with the two set-up commands.
//!
//! Only std: this test does not build or link the burnin crate's code.
//!
//! Links are Markdown's `[text](target)` (images too), reference definitions
//! `[id]: target` and HTML `href="target"`; links inside fenced code blocks and inline
//! code spans are not links. `http:`, `https:`, `mailto:` and other URL schemes are not
//! checked. Anchors follow GitHub's rule (see [`slug`]).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fs;
use std::path::{Component, Path, PathBuf};

const README_MAX_LINES: usize = 200;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// GitHub's heading anchor: the heading's text as rendered (link targets, code-span
/// backticks and emphasis markers gone), lowercased, every character that is not a
/// letter, digit, space, hyphen or underscore dropped, and each space a hyphen.
fn slug(heading: &str) -> String {
    rendered_text(heading)
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            '-' | '_' => Some(c),
            c if c.is_alphanumeric() => Some(c),
            _ => None,
        })
        .collect()
}

/// A heading's text as GitHub renders it, near enough for anchors: `[text](url)` is
/// `text`, backticks of code spans go (their content stays), and `*`/`_` used as
/// emphasis around words go (an underscore inside a word or a code span stays).
fn rendered_text(s: &str) -> String {
    let chars: Vec<char> = s.chars().collect();
    let mut out = String::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c == '`' {
            let n = run_len(&chars, i, '`');
            if let Some(end) = find_run(&chars, i + n, '`', n) {
                out.extend(&chars[i + n..end]);
                i = end + n;
                continue;
            }
            out.extend(&chars[i..i + n]);
            i += n;
            continue;
        }
        if c == '[' {
            if let Some((text_end, link_end)) = link_at(&chars, i) {
                out.push_str(&rendered_text(
                    &chars[i + 1..text_end].iter().collect::<String>(),
                ));
                i = link_end;
                continue;
            }
        }
        if c == '*' || c == '_' {
            let prev = if i == 0 { ' ' } else { chars[i - 1] };
            let n = run_len(&chars, i, c);
            let next = chars.get(i + n).copied().unwrap_or(' ');
            // An intraword underscore is literal text; anything else is emphasis.
            if !(c == '_' && prev.is_alphanumeric() && next.is_alphanumeric()) {
                i += n;
                continue;
            }
        }
        out.push(c);
        i += 1;
    }
    out
}

fn run_len(chars: &[char], at: usize, c: char) -> usize {
    chars[at..].iter().take_while(|&&x| x == c).count()
}

/// The start of the next run of exactly `n` `c`s at or after `from`.
fn find_run(chars: &[char], from: usize, c: char, n: usize) -> Option<usize> {
    let mut j = from;
    while j < chars.len() {
        if chars[j] == c {
            let m = run_len(chars, j, c);
            if m == n {
                return Some(j);
            }
            j += m;
        } else {
            j += 1;
        }
    }
    None
}

/// `[text](target)` starting at `chars[at] == '['`: (index of the closing `]`, index
/// just past the closing `)`), brackets and parentheses balanced.
fn link_at(chars: &[char], at: usize) -> Option<(usize, usize)> {
    let mut depth = 0usize;
    let mut j = at;
    let text_end = loop {
        match chars.get(j)? {
            '\\' => j += 1,
            '[' => depth += 1,
            ']' => {
                depth -= 1;
                if depth == 0 {
                    break j;
                }
            }
            _ => {}
        }
        j += 1;
    };
    if chars.get(text_end + 1) != Some(&'(') {
        return None;
    }
    let mut depth = 0usize;
    let mut k = text_end + 1;
    loop {
        match chars.get(k)? {
            '(' => depth += 1,
            ')' => {
                depth -= 1;
                if depth == 0 {
                    return Some((text_end, k + 1));
                }
            }
            '\n' => return None,
            _ => {}
        }
        k += 1;
    }
}

/// A line with its code spans blanked out (same length), so that nothing inside
/// backticks is taken for a link.
fn without_code_spans(line: &str) -> String {
    let chars: Vec<char> = line.chars().collect();
    let mut out = String::new();
    let mut i = 0;
    while i < chars.len() {
        if chars[i] == '`' {
            let n = run_len(&chars, i, '`');
            if let Some(end) = find_run(&chars, i + n, '`', n) {
                out.push_str(&" ".repeat(end + n - i));
                i = end + n;
                continue;
            }
            out.extend(&chars[i..i + n]);
            i += n;
            continue;
        }
        out.push(chars[i]);
        i += 1;
    }
    out
}

/// Whether a line opens or closes a fenced code block: its fence (``` or ~~~, at
/// least three, indented at most three spaces).
fn fence_of(line: &str) -> Option<String> {
    let t = line.trim_start_matches(' ');
    if line.len() - t.len() > 3 {
        return None;
    }
    for c in ['`', '~'] {
        let n = t.chars().take_while(|&x| x == c).count();
        if n >= 3 {
            return Some(c.to_string().repeat(n));
        }
    }
    None
}

/// The lines of a Markdown file outside fenced code blocks, with their 1-based numbers.
fn prose_lines(text: &str) -> Vec<(usize, &str)> {
    let mut out = Vec::new();
    let mut open: Option<String> = None;
    for (i, line) in text.lines().enumerate() {
        match (&open, fence_of(line)) {
            (None, Some(f)) => open = Some(f),
            // A closing fence: at least as long as the opening one, of the same
            // character, with nothing after its run but spaces.
            (Some(o), Some(f))
                if f.starts_with(o.as_str()) && line.trim().chars().all(|c| o.starts_with(c)) =>
            {
                open = None;
            }
            (None, None) => out.push((i + 1, line)),
            _ => {}
        }
    }
    out
}

/// Every heading's anchor in a Markdown file, in GitHub's way: duplicates get `-1`,
/// `-2`, … in the order they appear.
fn anchors(text: &str) -> BTreeSet<String> {
    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut out = BTreeSet::new();
    let lines = prose_lines(text);
    for (k, &(n, line)) in lines.iter().enumerate() {
        let heading = if let Some(h) = atx_heading(line) {
            Some(h)
        } else if k > 0 && is_setext_underline(line) {
            let (pn, prev) = lines[k - 1];
            let prev_ok = pn + 1 == n
                && !prev.trim().is_empty()
                && atx_heading(prev).is_none()
                && !prev.trim_start().starts_with('|')
                && !prev.trim_start().starts_with("- ")
                && !prev.trim_start().starts_with("* ");
            prev_ok.then(|| prev.trim().to_string())
        } else {
            None
        };
        if let Some(h) = heading {
            let base = slug(&h);
            let count = seen.entry(base.clone()).or_insert(0);
            let s = if *count == 0 {
                base.clone()
            } else {
                format!("{base}-{count}")
            };
            *count += 1;
            out.insert(s);
        }
    }
    out
}

fn atx_heading(line: &str) -> Option<String> {
    let t = line.trim_start_matches(' ');
    if line.len() - t.len() > 3 {
        return None;
    }
    let level = t.chars().take_while(|&c| c == '#').count();
    if !(1..=6).contains(&level) {
        return None;
    }
    let rest = &t[level..];
    if !(rest.is_empty() || rest.starts_with(' ') || rest.starts_with('\t')) {
        return None;
    }
    // A closing run of #s (after a space) is not part of the text.
    let mut text = rest.trim();
    let stripped = text.trim_end_matches('#');
    if stripped.is_empty() || stripped.ends_with(' ') {
        text = stripped.trim_end();
    }
    Some(text.to_string())
}

fn is_setext_underline(line: &str) -> bool {
    let t = line.trim();
    !t.is_empty()
        && (t.chars().all(|c| c == '=') || t.chars().all(|c| c == '-'))
        && line.len() - line.trim_start().len() <= 3
}

/// A link found in a file: its 1-based line and its target as written.
#[derive(Debug, Clone, PartialEq)]
struct Link {
    line: usize,
    target: String,
}

fn links(text: &str) -> Vec<Link> {
    let mut out = Vec::new();
    for (n, line) in prose_lines(text) {
        let line = without_code_spans(line);
        // Reference definitions: `[id]: target`.
        let t = line.trim_start();
        if t.starts_with('[') && !t.starts_with("[^") {
            if let Some(close) = t.find("]:") {
                let target = t[close + 2..].split_whitespace().next().unwrap_or("");
                if !target.is_empty() {
                    out.push(Link {
                        line: n,
                        target: unangle(target),
                    });
                    continue;
                }
            }
        }
        let chars: Vec<char> = line.chars().collect();
        let mut i = 0;
        while i < chars.len() {
            if chars[i] == '\\' {
                i += 2;
                continue;
            }
            if chars[i] == '[' {
                if let Some((text_end, end)) = link_at(&chars, i) {
                    let inner: String = chars[text_end + 2..end - 1].iter().collect();
                    let inner = inner.trim();
                    // `<target with spaces>` or `target "title"`.
                    let target = if let Some(rest) = inner.strip_prefix('<') {
                        rest.split('>').next().unwrap_or("").to_string()
                    } else {
                        inner.split_whitespace().next().unwrap_or("").to_string()
                    };
                    out.push(Link { line: n, target });
                    // The link text may hold an image link: look inside it too.
                    i += 1;
                    continue;
                }
            }
            i += 1;
        }
        // HTML links.
        let mut rest = line.as_str();
        while let Some(p) = rest.find("href=\"") {
            let after = &rest[p + 6..];
            let Some(q) = after.find('"') else { break };
            out.push(Link {
                line: n,
                target: after[..q].to_string(),
            });
            rest = &after[q..];
        }
    }
    out
}

fn unangle(t: &str) -> String {
    t.strip_prefix('<')
        .and_then(|t| t.strip_suffix('>'))
        .unwrap_or(t)
        .to_string()
}

/// `http:`, `https:`, `mailto:` and any other `scheme:` are not files of this repository.
fn is_external(target: &str) -> bool {
    let Some(colon) = target.find(':') else {
        return false;
    };
    let scheme = &target[..colon];
    !scheme.is_empty()
        && scheme
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic())
        && scheme
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c))
        && !target[..colon].contains('/')
}

fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' && i + 2 < b.len() {
            if let Ok(v) = u8::from_str_radix(&s[i + 1..i + 3], 16) {
                out.push(v);
                i += 3;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// `a/b/../c` → `a/c`, lexically (the path need not exist).
fn normalize(p: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            Component::ParentDir => {
                if !out.pop() {
                    out.push("..");
                }
            }
            Component::CurDir => {}
            other => out.push(other.as_os_str()),
        }
    }
    out
}

/// README.md and every `.md` under docs/, as paths relative to the root.
fn doc_files(root: &Path) -> Vec<PathBuf> {
    fn walk(dir: &Path, root: &Path, out: &mut Vec<PathBuf>) {
        let mut entries: Vec<_> = fs::read_dir(dir)
            .unwrap_or_else(|e| panic!("cannot read {}: {e}", dir.display()))
            .flatten()
            .map(|e| e.path())
            .collect();
        entries.sort();
        for p in entries {
            if p.is_dir() {
                walk(&p, root, out);
            } else if p.extension().is_some_and(|x| x == "md") {
                out.push(p.strip_prefix(root).unwrap().to_path_buf());
            }
        }
    }
    let mut out = vec![PathBuf::from("README.md")];
    walk(&root.join("docs"), root, &mut out);
    out
}

/// What one file links to: resolved relative targets (root-relative), and the problems.
struct Checked {
    targets: BTreeSet<PathBuf>,
    problems: Vec<String>,
}

fn check_file(
    root: &Path,
    file: &Path,
    cache: &mut BTreeMap<PathBuf, BTreeSet<String>>,
) -> Checked {
    let text = fs::read_to_string(root.join(file))
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", file.display()));
    let mut anchors_of = |p: &Path| -> BTreeSet<String> {
        cache
            .entry(p.to_path_buf())
            .or_insert_with(|| anchors(&fs::read_to_string(root.join(p)).unwrap_or_default()))
            .clone()
    };
    let mut targets = BTreeSet::new();
    let mut problems = Vec::new();
    for Link { line, target } in links(&text) {
        let at = format!("{}:{line}: link `{target}`", file.display());
        if target.is_empty() {
            problems.push(format!("{at}: empty target"));
            continue;
        }
        if is_external(&target) {
            continue;
        }
        let (path_part, anchor) = match target.split_once('#') {
            Some((p, a)) => (p, Some(a)),
            None => (target.as_str(), None),
        };
        let path_part = percent_decode(path_part.split('?').next().unwrap_or(""));
        let resolved = if path_part.is_empty() {
            file.to_path_buf()
        } else if let Some(abs) = path_part.strip_prefix('/') {
            normalize(Path::new(abs))
        } else {
            normalize(&file.parent().unwrap_or(Path::new("")).join(&path_part))
        };
        if resolved.starts_with("..") {
            problems.push(format!("{at}: points outside the repository"));
            continue;
        }
        if !root.join(&resolved).exists() {
            problems.push(format!("{at}: {} does not exist", resolved.display()));
            continue;
        }
        targets.insert(resolved.clone());
        if let Some(anchor) = anchor {
            if anchor.is_empty() {
                problems.push(format!("{at}: empty anchor"));
            } else if !matches!(resolved.extension(), Some(x) if x == "md") {
                problems.push(format!(
                    "{at}: anchor #{anchor} into {}, which is not a Markdown file",
                    resolved.display()
                ));
            } else {
                let a = anchors_of(&resolved);
                let want = percent_decode(anchor);
                if !a.contains(&want) {
                    problems.push(format!(
                        "{at}: no heading of {} has the anchor #{want} (its anchors: {})",
                        resolved.display(),
                        a.iter()
                            .map(|s| format!("#{s}"))
                            .collect::<Vec<_>>()
                            .join(" ")
                    ));
                }
            }
        }
    }
    Checked { targets, problems }
}

#[test]
fn every_relative_link_and_anchor_resolves() {
    let root = root();
    let mut cache = BTreeMap::new();
    let mut problems = Vec::new();
    let files = doc_files(&root);
    assert!(files.len() > 1, "no Markdown found under docs/");
    for f in &files {
        problems.extend(check_file(&root, f, &mut cache).problems);
    }
    assert!(
        problems.is_empty(),
        "{} broken link(s) in README.md and docs/:\n  {}",
        problems.len(),
        problems.join("\n  ")
    );
}

#[test]
fn every_docs_page_is_reached_from_the_readme() {
    let root = root();
    let mut cache = BTreeMap::new();
    let from_readme = check_file(&root, Path::new("README.md"), &mut cache).targets;
    let index = PathBuf::from("docs/README.md");
    assert!(
        from_readme.contains(&index),
        "README.md must link to the guide's table of contents, docs/README.md"
    );
    let from_index = check_file(&root, &index, &mut cache).targets;
    let reached: BTreeSet<_> = from_readme.union(&from_index).cloned().collect();
    let missing: Vec<String> = doc_files(&root)
        .into_iter()
        .filter(|f| f != Path::new("README.md") && !reached.contains(f))
        .map(|f| f.display().to_string())
        .collect();
    assert!(
        missing.is_empty(),
        "docs pages that neither README.md nor docs/README.md links to: {}",
        missing.join(", ")
    );
}

#[test]
fn the_readme_is_one_screen_and_starts_with_the_two_commands() {
    let text = fs::read_to_string(root().join("README.md")).expect("README.md");
    let n = text.lines().count();
    assert!(
        n <= README_MAX_LINES,
        "README.md has {n} lines; at most {README_MAX_LINES}"
    );
    let mut block = None;
    let mut open: Option<Vec<&str>> = None;
    for line in text.lines() {
        match (&mut open, fence_of(line)) {
            (None, Some(_)) => open = Some(Vec::new()),
            (Some(b), Some(_)) => {
                block = Some(b.join("\n"));
                break;
            }
            (Some(b), None) => b.push(line),
            (None, None) => {}
        }
    }
    let block = block.expect("README.md has no fenced code block");
    for cmd in ["launch/demo", "launch/test"] {
        assert!(
            block.lines().any(|l| l.trim_start().starts_with(cmd)),
            "README.md's first code block must run `{cmd}`; it is:\n{block}"
        );
    }
}

#[test]
fn slugs_follow_github() {
    let cases = [
        (
            "gpu --sdc: which GPU lied (silent data corruption vote)",
            "gpu---sdc-which-gpu-lied-silent-data-corruption-vote",
        ),
        ("Running it yourself", "running-it-yourself"),
        (
            "replay: your own job's collectives on this reservation",
            "replay-your-own-jobs-collectives-on-this-reservation",
        ),
        (
            "Kubernetes: the MPI Operator",
            "kubernetes-the-mpi-operator",
        ),
        (
            "The release tarball and mpirun over ssh",
            "the-release-tarball-and-mpirun-over-ssh",
        ),
        (
            "GPUs: drivers, libraries, and the first check of a machine",
            "gpus-drivers-libraries-and-the-first-check-of-a-machine",
        ),
        (
            "`burnin run` and `--metrics-file`",
            "burnin-run-and---metrics-file",
        ),
        ("Slurm with pyxis/enroot", "slurm-with-pyxisenroot"),
        ("What \"none found\" covers", "what-none-found-covers"),
        (
            "snake_case and **bold** and _emph_",
            "snake_case-and-bold-and-emph",
        ),
        ("A [link](other.md#x) in a heading", "a-link-in-a-heading"),
        ("Parity, 2026-12-05", "parity-2026-12-05"),
        ("← back", "-back"),
    ];
    for (heading, want) in cases {
        assert_eq!(slug(heading), want, "slug of {heading:?}");
    }
}

#[test]
fn anchors_number_duplicates_and_skip_code() {
    let md = "# Title\n\n## Tests\n\n```sh\n# not a heading\n```\n\n## Tests\n\nSetext\n------\n\n### Tests ###\n";
    let a = anchors(md);
    let want: BTreeSet<String> = ["title", "tests", "tests-1", "setext", "tests-2"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    assert_eq!(a, want);
    assert!(!a.contains("not-a-heading"));
}

#[test]
fn links_skip_code_and_external_targets_are_recognised() {
    let md = "See [a](a.md) and `[b](b.md)` and ``[c](c.md)``.\n\n```\n[d](d.md)\n```\n\n~~~\n[e](e.md)\n~~~\n[f](f.md#x \"title\") ![img](g.png) [h](<h h.md>)\n[ref]: i.md\n<a href=\"j.md\">j</a>\n";
    let got: Vec<(usize, String)> = links(md).into_iter().map(|l| (l.line, l.target)).collect();
    assert_eq!(
        got,
        vec![
            (1, "a.md".to_string()),
            (10, "f.md#x".to_string()),
            (10, "g.png".to_string()),
            (10, "h h.md".to_string()),
            (11, "i.md".to_string()),
            (12, "j.md".to_string()),
        ]
    );
    for ext in ["https://x.org/a", "http://x", "mailto:a@b.c", "ftp://x"] {
        assert!(is_external(ext), "{ext}");
    }
    for rel in ["a.md", "../b.md#c", "#c", "docs/x:y.md"] {
        assert!(!is_external(rel), "{rel}");
    }
    assert_eq!(
        normalize(Path::new("docs/roads/../../launch/demo")),
        PathBuf::from("launch/demo")
    );
}
