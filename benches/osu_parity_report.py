#!/usr/bin/env python3
"""Tables of benches/osu-parity: reads the rounds' raw outputs, writes
OUTDIR/osu-parity.json and OUTDIR/osu-parity.md.

  osu_parity_report.py RAW_DIR OUTDIR WALL_S OSU_VERSION COMMAND
"""
import datetime
import glob
import json
import os
import platform
import re
import statistics
import sys

raw, outdir, wall, osu_version, command = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4], sys.argv[5]
PER_RANK = {"all_gather", "alltoall"}  # OSU's size is per rank (per peer) there
OSU_HAS = ["all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce", "alltoall"]
COLLS = OSU_HAS + ["sendrecv"]
TOOLS = ["osu", "burnin-osu", "burnin-batch", "mpi4py", "osu-vector", "baseline-osu"]

# times[(np, coll, bytes)][tool][rep] = mean µs
times = {}
mpi_version = None


def put(np_, coll, size, tool, rep, us):
    times.setdefault((np_, coll, size), {}).setdefault(tool, {})[rep] = us


for d in sorted(glob.glob(f"{raw}/np*/rep*/*")):
    m = re.search(r"np(\d+)/rep(\d+)/(\d+)$", d)
    np_, rep = int(m.group(1)), int(m.group(2))
    for coll in OSU_HAS:
        for tool in ("osu", "osu-block"):
            f = f"{d}/{tool}.{coll}.txt"
            if not os.path.exists(f):
                continue
            for line in open(f):
                cols = line.split()
                if not cols or cols[0].startswith("#") or not cols[0].isdigit():
                    continue
                size = int(cols[0]) * (np_ if coll in PER_RANK else 1)
                # reduce_scatter: the block form is the reference, OSU's own call is shown beside it
                name = {"osu": "osu-vector", "osu-block": "osu"}[tool] if coll == "reduce_scatter" else tool
                put(np_, coll, size, name, rep, float(cols[1]))
    for tool in ("burnin-osu", "burnin-batch", "baseline-osu"):
        for part in ("out", "in"):
            f = f"{d}/{tool}.{part}/run.json"
            if not os.path.exists(f):
                continue
            r = json.load(open(f))
            mpi_version = r["provenance"]["mpi_version"]
            for p in r["points"]:
                if p.get("wrong"):
                    sys.exit(f"osu_parity_report: {f}: {p['collective']} {p['bytes']} B had {p['wrong']} wrong values")
                put(np_, p["collective"], p["bytes"], tool, rep, p["time"]["mean_us"])
    f = f"{d}/mpi4py.json"
    if os.path.exists(f):
        for p in json.load(open(f))["points"]:
            put(np_, p["collective"], p["bytes"], "mpi4py", rep, p["mean_us"])

rows = []
for (np_, coll, size), by_tool in sorted(times.items()):
    if "burnin-osu" not in by_tool:
        continue  # sizes only OSU ran (below burnin's range)
    row = {"ranks": np_, "collective": coll, "bytes": size}
    for tool in TOOLS:
        reps = by_tool.get(tool, {})
        if reps:
            row[f"{tool}_us"] = statistics.median(reps.values())
    osu = by_tool.get("osu", {})
    for tool in TOOLS[1:]:
        reps = by_tool.get(tool, {})
        ratios = [osu[r] / reps[r] for r in reps if r in osu and reps[r] > 0]
        if ratios:
            row[f"{tool}_ratio"] = statistics.median(ratios)
            row[f"{tool}_ratio_min"] = min(ratios)
            row[f"{tool}_ratio_max"] = max(ratios)
            row["rounds"] = len(ratios)
    rows.append(row)

cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), platform.processor())
machine = {
    "cpu": cpu,
    "cores": os.cpu_count(),
    "kernel": platform.release(),
    "mpi": mpi_version,
    "osu": osu_version,
    "loadavg_at_end": open("/proc/loadavg").read().split()[:3],
    "date_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
    "wall_s": wall,
}
os.makedirs(outdir, exist_ok=True)
json.dump({"machine": machine, "command": command, "rows": rows}, open(f"{outdir}/osu-parity.json", "w"), indent=1)


def size_name(b):
    for unit, k in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if b >= 1 << k and b % (1 << k) == 0:
            return f"{b >> k} {unit}"
    return f"{b} B"


def ratio(r, tool):
    if f"{tool}_ratio" not in r:
        return "–"
    return f"{r[f'{tool}_ratio']:.3f} ({r[f'{tool}_ratio_min']:.2f}–{r[f'{tool}_ratio_max']:.2f})"


def us(r, tool):
    return f"{r[f'{tool}_us']:.1f}" if f"{tool}_us" in r else "–"


rounds = max((r.get("rounds", 0) for r in rows), default=0)
lines = [
    "# burnin's MPI sweep vs the OSU micro-benchmarks, side by side",
    "",
    f"Machine: {cpu}, {os.cpu_count()} cores, {mpi_version}; OSU micro-benchmarks {osu_version} built from source "
    f"with mpicc; {machine['date_utc']}; {wall / 60:.0f} min in all.",
    f"Command: `{command}`.",
    "",
    "Times are µs per call: each rank's mean over the timed iterations, averaged over the ranks (OSU's "
    "\"Avg Latency\"; burnin `-a 1`, `time.mean_us`), the median over the rounds. A ratio is OSU's time / the "
    f"tool's time in the same round, median (min–max) over {rounds} rounds: ≥ 1 means as fast as OSU or faster. "
    "`burnin --timing osu` times like OSU (a barrier after every iteration, outside the timed call); "
    "`--timing batch` (burnin's default) runs the iterations back to back as nccl-tests does; mpi4py runs "
    "OSU's method. OSU has no sendrecv: that row compares nothing with OSU. Sizes are burnin's bytes "
    "(OSU's allgather/alltoall size × ranks).",
    "",
]
short = []
for np_ in sorted({r["ranks"] for r in rows}):
    lines += [f"## {np_} ranks", ""]
    for coll in COLLS:
        rs = [r for r in rows if r["ranks"] == np_ and r["collective"] == coll]
        if not rs:
            continue
        rs_note = coll == "reduce_scatter"
        base = any("baseline-osu_us" in r for r in rs)
        lines += [
            f"### {coll}",
            "",
            ("OSU's column is OSU's program with its call made `MPI_Reduce_scatter_block` (burnin's call); "
             "the last two columns are OSU's own `MPI_Reduce_scatter`, and OSU block / OSU vector (< 1: the block form is faster).\n\n" if rs_note else "")
            + "| bytes | OSU µs | burnin osu µs | OSU/burnin osu | burnin batch µs | OSU/burnin batch | mpi4py µs | OSU/mpi4py |"
            + (" OSU vector µs | block/vector |" if rs_note else "")
            + (" baseline osu µs | OSU/baseline |" if base else ""),
            "|---:|---:|---:|---:|---:|---:|---:|---:|" + ("---:|---:|" if rs_note else "") + ("---:|---:|" if base else ""),
        ]
        for r in rs:
            lines.append(
                f"| {size_name(r['bytes'])} | {us(r, 'osu')} | {us(r, 'burnin-osu')} | {ratio(r, 'burnin-osu')} | "
                f"{us(r, 'burnin-batch')} | {ratio(r, 'burnin-batch')} | {us(r, 'mpi4py')} | {ratio(r, 'mpi4py')} |"
                + (f" {us(r, 'osu-vector')} | {ratio(r, 'osu-vector')} |" if rs_note else "")
                + (f" {us(r, 'baseline-osu')} | {ratio(r, 'baseline-osu')} |" if base else "")
            )
            if r["bytes"] >= 65536 and r.get("burnin-osu_ratio", 1.0) < 0.97:
                short.append(r)
        lines.append("")
lines += ["## Below 0.97 in the matched mode at ≥ 64 KiB", ""]
if short:
    for r in short:
        lines.append(f"- {r['ranks']} ranks {r['collective']} {size_name(r['bytes'])}: {ratio(r, 'burnin-osu')}")
else:
    lines.append("None.")
open(f"{outdir}/osu-parity.md", "w").write("\n".join(lines) + "\n")
print("\n".join(lines[-(len(short) + 3):]))
