#!/usr/bin/env python3
"""Issue 31: where do burnin's all_reduce microseconds at 64-256 KiB go, next to OSU?

Runs OSU's osu_allreduce, a C loop timed OSU's way (benches/osu_allreduce_mem_ab.c)
and `burnin sweep --timing osu -a 1` at 2 ranks, taking turns ROUNDS times (the order
rotates), each under the LD_PRELOAD shim benches/mpi_allreduce_shim.c, which times every
MPI_Allreduce inside the call with the same code in all three programs. Per tool and
size it keeps two numbers a round: what the tool reports (its own mean latency, the
ranks averaged) and what the shim saw (the mean of the same 100 timed calls, the ranks averaged).

If the shim's times agree across the tools while the reports do not, the difference is
in a tool's timing; if the shim's times differ, it is in the call itself (memory, data,
what else the process does).

  OSU_BIN=path/to/osu_allreduce python3 benches/osu_allreduce_shim.py ROUNDS OUT.md

OSU is built from source outside the tree (benches/osu-parity says how); burnin from
target/release. Writes OUT.md with the per-round rows, the medians and the ratios.
"""
import json
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SIZES = [65536, 131072, 262144]
MPIRUN = ["mpirun", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none",
          "-np", "2", "--mca", "btl", "self,vader,tcp", "--mca", "btl_tcp_if_include", "lo",
          "--mca", "oob_tcp_if_include", "lo"]


def sh(cmd, env=None):
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300, check=True)


def shim_means(text):
    """{bytes: the ranks' average of each rank's mean µs over its last 100 calls (the
    timed ones in all three tools)} from the shim's lines."""
    per = {}
    for line in text.splitlines():
        if not line.startswith("shim "):
            continue
        f = dict(kv.split("=") for kv in line.split()[1:])
        per.setdefault(int(f["bytes"]), []).append(float(f["tail_us"]))
    return {b: statistics.mean(v) for b, v in per.items()}


def run_osu(shim, osu):
    p = sh(MPIRUN + ["-x", f"LD_PRELOAD={shim}", osu, "-m", f"{SIZES[0]}:{SIZES[-1]}",
                     "-i", "100", "-x", "10"])
    rep = {}
    for line in p.stdout.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0].isdigit() and int(parts[0]) in SIZES:
            rep[int(parts[0])] = float(parts[1])
    return rep, shim_means(p.stderr)


def run_cloop(shim, cloop):
    p = sh(MPIRUN + ["-x", "MEM=page", "-x", f"LD_PRELOAD={shim}", cloop])
    rep = {}
    for tok in p.stdout.split():
        if "K=" in tok:
            k, v = tok.split("K=")
            rep[int(k) * 1024] = float(v)
    return rep, shim_means(p.stderr)


def run_burnin(shim, tmp):
    out = os.path.join(tmp, "burnin")
    subprocess.run(["rm", "-rf", out], check=True)
    p = sh(MPIRUN + ["-x", f"LD_PRELOAD={shim}", os.path.join(ROOT, "target/release/burnin"),
                     "sweep", "--backend", "mpi", "-b", str(SIZES[0]), "-e", str(SIZES[-1]),
                     "-f", "2", "-n", "100", "-w", "10", "-a", "1", "--timing", "osu",
                     "-d", "f32", "-o", "sum", "--tiers", "world", "--no-transport",
                     "-c", "all_reduce", "--placement", "out", "--out", out])
    rep = {}
    with open(os.path.join(out, "points.jsonl")) as f:
        for line in f:
            pt = json.loads(line)
            rep[pt["bytes"]] = pt["time"]["mean_us"]
    return rep, shim_means(p.stderr + p.stdout)


def main():
    rounds, out_md = int(sys.argv[1]), sys.argv[2]
    osu = os.environ["OSU_BIN"]
    with tempfile.TemporaryDirectory() as tmp:
        shim, cloop = os.path.join(tmp, "shim.so"), os.path.join(tmp, "cloop")
        sh(["mpicc", "-O2", "-shared", "-fPIC", "-o", shim,
            os.path.join(ROOT, "benches/mpi_allreduce_shim.c")])
        sh(["mpicc", "-O2", "-w", "-o", cloop, os.path.join(ROOT, "benches/osu_allreduce_mem_ab.c")])
        tools = {"osu": lambda: run_osu(shim, osu), "cloop": lambda: run_cloop(shim, cloop),
                 "burnin": lambda: run_burnin(shim, tmp)}
        names = list(tools)
        rows = []  # (round, tool, bytes, reported, shim)
        for r in range(rounds):
            order = names[r % 3:] + names[:r % 3]
            for t in order:
                rep, sm = tools[t]()
                for b in SIZES:
                    rows.append((r + 1, t, b, rep.get(b), sm.get(b)))
                print(f"round {r + 1} {t}: " + " ".join(
                    f"{b // 1024}K={rep.get(b)}/{sm.get(b, 0):.1f}" for b in SIZES), flush=True)
    write(rows, rounds, out_md)


def med(rows, tool, b, k):
    v = [row[k] for row in rows if row[1] == tool and row[2] == b and row[k] is not None]
    return statistics.median(v) if v else float("nan")


def ratios(rows, tool, b, k):
    """Per round: OSU's number / the tool's, the same kind of number."""
    out = []
    for r in sorted({row[0] for row in rows}):
        o = [row[k] for row in rows if row[0] == r and row[1] == "osu" and row[2] == b]
        t = [row[k] for row in rows if row[0] == r and row[1] == tool and row[2] == b]
        if o and t and o[0] and t[0]:
            out.append(o[0] / t[0])
    return out


def write(rows, rounds, out_md):
    lines = [f"# all_reduce f32 sum, 2 ranks: reported vs inside-the-call times ({rounds} rounds)", "",
             "`python3 benches/osu_allreduce_shim.py " + f"{rounds} {out_md}` (OSU_BIN = osu_allreduce of OSU 5.3,",
             "built from source outside the tree). Each number is a mean latency in µs, the two",
             "ranks averaged; *reported* is the tool's own, *shim* the LD_PRELOAD shim's",
             "(benches/mpi_allreduce_shim.c) over the same 100 timed calls. Ratios: OSU / tool per round,",
             "median (min-max); ≥ 1 means the tool is as fast or faster.", "",
             "| size | tool | reported (median) | shim (median) | ratio reported | ratio shim |",
             "| ---: | --- | ---: | ---: | ---: | ---: |"]
    for b in SIZES:
        for t in ["osu", "cloop", "burnin"]:
            def rr(k):
                v = ratios(rows, t, b, k)
                if t == "osu" or not v:
                    return ""
                return f"{statistics.median(v):.3f} ({min(v):.2f}-{max(v):.2f})"
            lines.append(f"| {b // 1024} KiB | {t} | {med(rows, t, b, 3):.2f} | {med(rows, t, b, 4):.2f} "
                         f"| {rr(3)} | {rr(4)} |")
    lines += ["", "Per round (reported / shim):", "", "```"]
    for row in rows:
        lines.append(f"round {row[0]} {row[1]:6} {row[2] // 1024:4}K {row[3]} / {row[4]:.2f}"
                     if row[4] is not None else f"round {row[0]} {row[1]} {row[2]} {row[3]} / -")
    lines.append("```")
    with open(out_md, "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
