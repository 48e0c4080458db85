#!/usr/bin/env python3
"""No test passes without running its scenario.

Scans Rust test files for a `#[test]` function with a bare `return` (no value: `return;`,
`else { return }`, `=> return,`) outside a nested `fn`: before its first assertion such
a test reads as a pass while it checked nothing, and after it, it passes having checked
only part of its scenario. A test that cannot run its scenario ends through
tests/common's `skip!` or `require!` instead, which fail under CI=true and print a
visible "skipped: why" line elsewhere.

    check-tests.py [DIR_OR_FILE ...]     (default: tests/)
    check-tests.py --self-test           (finds planted early returns)

Prints each finding as FILE:LINE: fn NAME: ... and exits 1 on any, 0 otherwise, 2 on
bad arguments. launch/lint runs it; tests/layers.rs runs it on a planted early return.
"""
import os
import re
import sys

ASSERTION = re.compile(r"\b(assert\w*!|panic!|unreachable!|todo!|unimplemented!)")
BARE_RETURN = re.compile(r"\breturn\s*[;},]")


def code_only(src):
    """The source with comments and string/char literals blanked (newlines kept)."""
    out = []
    i, n = 0, len(src)
    while i < n:
        c = src[i]
        nxt = src[i + 1] if i + 1 < n else ""
        if c == "/" and nxt == "/":
            while i < n and src[i] != "\n":
                i += 1
        elif c == "/" and nxt == "*":
            depth = 0
            while i < n:
                if src.startswith("/*", i):
                    depth += 1
                    i += 2
                elif src.startswith("*/", i):
                    depth -= 1
                    i += 2
                    if depth == 0:
                        break
                else:
                    if src[i] == "\n":
                        out.append("\n")
                    i += 1
            out.append(" ")
        elif c == "r" and nxt in ('"', "#") and not (i and (src[i - 1].isalnum() or src[i - 1] == "_")):
            j = i + 1
            hashes = 0
            while j < n and src[j] == "#":
                hashes += 1
                j += 1
            if j >= n or src[j] != '"':
                out.append(c)
                i += 1
                continue
            close = '"' + "#" * hashes
            end = src.find(close, j + 1)
            end = n if end < 0 else end + len(close)
            out.append('""' + "\n" * src.count("\n", i, end))
            i = end
        elif c == '"':
            j = i + 1
            while j < n and src[j] != '"':
                j += 2 if src[j] == "\\" else 1
            out.append('""' + "\n" * src.count("\n", i, j + 1))
            i = j + 1
        elif c == "'" and (nxt == "\\" or (i + 2 < n and src[i + 2] == "'")):
            j = i + 1
            while j < n and src[j] != "'":
                j += 2 if src[j] == "\\" else 1
            out.append("' '")
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def test_fns(code):
    """(name, offset of the body's `{`, offset of its `}`) of each #[test] function."""
    for m in re.finditer(r"#\[test\]", code):
        f = re.compile(r"\bfn\s+(\w+)").search(code, m.end())
        if not f:
            continue
        # only attributes may stand between #[test] and its fn
        between = code[m.end():f.start()]
        if re.sub(r"#\[[^\]]*\]|\b(pub|async|unsafe)\b|\s", "", between):
            continue
        depth, k = 0, f.end()
        while k < len(code) and not (code[k] in "{;" and depth == 0):
            depth += code[k] in "([" and 1 or (code[k] in ")]" and -1 or 0)
            k += 1
        if k >= len(code) or code[k] == ";":
            continue
        braces, end = 0, len(code)
        for j in range(k, len(code)):
            if code[j] == "{":
                braces += 1
            elif code[j] == "}":
                braces -= 1
                if braces == 0:
                    end = j
                    break
        yield f.group(1), k, end


def nested_fn_spans(body):
    """Spans of `fn` items inside a body: their returns are their own."""
    spans = []
    for f in re.finditer(r"\bfn\s+\w+", body):
        k = body.find("{", f.end())
        if k < 0:
            continue
        braces = 0
        for j in range(k, len(body)):
            if body[j] == "{":
                braces += 1
            elif body[j] == "}":
                braces -= 1
                if braces == 0:
                    spans.append((f.start(), j))
                    break
    return spans


def findings(path):
    src = open(path, encoding="utf-8").read()
    code = code_only(src)
    out = []
    for name, start, end in test_fns(code):
        body = code[start:end]
        nested = nested_fn_spans(body[1:])
        for r in BARE_RETURN.finditer(body):
            at = r.start()
            if any(a <= at - 1 <= b for a, b in nested):
                continue
            what = (
                "skips the assertions after it"
                if ASSERTION.search(body, 0, at)
                else "comes before every assertion: the test passes without checking anything"
            )
            line = code.count("\n", 0, start + at) + 1
            out.append(
                f"{path}:{line}: fn {name}: a bare `return` {what}; end a test that cannot "
                "run its scenario with skip!(why) or require!(…) (tests/common): they fail "
                "under CI=true"
            )
    return out


def rust_files(args):
    for a in args:
        if os.path.isdir(a):
            for dirpath, dirs, files in os.walk(a):
                dirs[:] = sorted(d for d in dirs if d not in ("target", "fixtures"))
                for f in sorted(files):
                    if f.endswith(".rs"):
                        yield os.path.join(dirpath, f)
        elif os.path.isfile(a):
            yield a
        else:
            print(f"check-tests: no such file or folder: {a}", file=sys.stderr)
            sys.exit(2)


PLANTED = r"""
mod common;
#[test]
fn planted_cluster_test() {
    let Some(_down) = SIM.up(&[]) else { return };
    assert!(ran());
}
#[test]
#[ignore = "x"]
fn planted_late() {
    assert!(a());
    if !root() { return; }
    assert!(b());
}
#[test]
fn through_the_helpers() {
    let _down = require!(SIM.up(&[]));
    if !root() { skip!("needs root"); }
    let s = "return;"; // return;
    fn helper() -> u8 { if x() { return 1; } 0 }
    fn inner() { if y() { return; } }
    assert!(z());
}
"""


def self_test():
    """The scan finds both planted returns, and nothing in the helpers' forms."""
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "planted.rs")
        with open(path, "w", encoding="utf-8") as f:
            f.write(PLANTED)
        got = findings(path)
    want = [(":5: fn planted_cluster_test:", "before every assertion"), (":12: fn planted_late:", "skips the assertions after it")]
    ok = len(got) == 2 and all(a in g and b in g for (a, b), g in zip(want, got))
    if not ok:
        print("check-tests: self-test failed:\n" + "\n".join(got), file=sys.stderr)
        return 1
    print("check-tests: self-test ok (2 planted early returns found, the helpers' forms allowed)")
    return 0


def main(argv):
    if argv[1:] == ["--self-test"]:
        return self_test()
    args = argv[1:] or ["tests"]
    found, files = [], 0
    for path in rust_files(args):
        files += 1
        found += findings(path)
    for f in found:
        print(f)
    if found:
        print(f"check-tests: {len(found)} test(s) can pass without running their scenario", file=sys.stderr)
        return 1
    print(f"check-tests: {files} files, no test ends early but through skip!/require!")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
