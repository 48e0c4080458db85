#!/usr/bin/env python3
"""The wall time of each test binary, from what `cargo test` printed.

    suite-times.py LOG [--markdown]

cargo prints `Running tests/x.rs (target/release/deps/x-…)` (or `Running unittests
src/lib.rs (…)`, `Doc-tests burnin`) before each binary and
`test result: ok. N passed; F failed; I ignored; … finished in S.SSs` after it. The
table lists each binary's tests passed, failed and ignored and its seconds, slowest
first, and the total. A binary that started and printed no result (it crashed, or it
was killed) is listed as "no result". Exit 0, or 2 when LOG cannot be read.
"""
import re
import sys

RUNNING = re.compile(r"^\s*Running (?:unittests )?(\S+)(?: \(([^)]*)\))?")
DOCTESTS = re.compile(r"^\s*Doc-tests (\S+)")
RESULT = re.compile(
    r"test result: (\w+)\. (\d+) passed; (\d+) failed; (\d+) ignored; \d+ measured; "
    r"(\d+) filtered out; finished in ([0-9.]+)s"
)


def parse(lines):
    rows, current = [], None
    for line in lines:
        m = RUNNING.match(line)
        d = DOCTESTS.match(line)
        if m or d:
            if current is not None:
                rows.append(current)
            if m:
                name = m.group(1)
                exe = m.group(2) or ""
                if "/deps/" in exe:
                    # unit tests of a crate: say which (burnin, burnin_train)
                    crate = exe.rsplit("/", 1)[-1].rsplit("-", 1)[0]
                    if name.startswith("src/") or name.endswith("main.rs"):
                        name = f"{crate}: {name}"
            else:
                name = f"doc-tests {d.group(1)}"
            current = {"name": name, "result": None}
            continue
        r = RESULT.search(line)
        if r and current is not None:
            current["result"] = {
                "status": r.group(1),
                "passed": int(r.group(2)),
                "failed": int(r.group(3)),
                "ignored": int(r.group(4)),
                "seconds": float(r.group(6)),
            }
            rows.append(current)
            current = None
    if current is not None:
        rows.append(current)
    return rows


def table(rows):
    def secs(row):
        return row["result"]["seconds"] if row["result"] else -1.0

    rows = sorted(rows, key=secs, reverse=True)
    out = [
        "| test binary | passed | failed | ignored | seconds |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    total = 0.0
    for row in rows:
        res = row["result"]
        if res is None:
            out.append(f"| {row['name']} | no result | | | |")
            continue
        total += res["seconds"]
        out.append(
            f"| {row['name']} | {res['passed']} | {res['failed']} | {res['ignored']} | {res['seconds']:.1f} |"
        )
    out.append(f"| **total** ({len(rows)} binaries) | {sum(r['result']['passed'] for r in rows if r['result'])} "
               f"| {sum(r['result']['failed'] for r in rows if r['result'])} "
               f"| {sum(r['result']['ignored'] for r in rows if r['result'])} | {total:.1f} |")
    return "\n".join(out)


def main(argv):
    if len(argv) < 2:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    try:
        with open(argv[1], encoding="utf-8", errors="replace") as f:
            rows = parse(f)
    except OSError as e:
        print(f"suite-times: {argv[1]}: {e.strerror}", file=sys.stderr)
        return 2
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
