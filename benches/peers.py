#!/usr/bin/env python3
"""Peer collective loops for benches/peer-sweep, run under the same mpirun as burnin.

  peers.py mpi4py OUT.json   a minimal mpi4py + numpy loop over the same MPI library
  peers.py gloo   OUT.json   torch.distributed with the gloo backend (how ML engineers'
                             all-reduce benchmarks usually do it)

Each size: WARMUP untimed calls, then ITERS calls each timed with perf_counter; the
per-rank median is combined across ranks with max (burnin's default -a 3), and
algbw/busbw use nccl-tests' formulas.
"""
import json
import os
import sys
import time

SIZES = [1 << s for s in range(10, 27, 2)]  # 1 KiB .. 64 MiB, factor 4
WARMUP = int(os.environ.get("PEER_WARMUP", "5"))
ITERS = int(os.environ.get("PEER_ITERS", "50"))


def median(v):
    s = sorted(v)
    n = len(s)
    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2


def busbw(coll, size, seconds, n):
    alg = size / seconds / 1e9
    factor = 2 * (n - 1) / n if coll == "all_reduce" else (n - 1) / n
    return alg, alg * factor


def run_mpi4py(out):
    import numpy as np
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    n, rank = comm.Get_size(), comm.Get_rank()
    rows = []
    for coll in ("all_reduce", "all_gather"):
        for size in SIZES:
            count = size // 4
            if coll == "all_reduce":
                send = np.ones(count, dtype=np.float32)
                recv = np.empty(count, dtype=np.float32)
                call = lambda: comm.Allreduce(send, recv, op=MPI.SUM)
            else:
                send = np.ones(count // n, dtype=np.float32)
                recv = np.empty(count, dtype=np.float32)
                call = lambda: comm.Allgather(send, recv)
            for _ in range(WARMUP):
                call()
            times = []
            for _ in range(ITERS):
                t0 = time.perf_counter()
                call()
                times.append(time.perf_counter() - t0)
            med = comm.allreduce(median(times), op=MPI.MAX)
            rows.append((coll, size, med))
    if rank == 0:
        write(out, "mpi4py", n, rows)


def run_gloo(out):
    import torch
    import torch.distributed as dist

    rank = int(os.environ["OMPI_COMM_WORLD_RANK"])
    n = int(os.environ["OMPI_COMM_WORLD_SIZE"])
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29533")
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=n)
    rows = []
    for coll in ("all_reduce", "all_gather"):
        for size in SIZES:
            count = size // 4
            if coll == "all_reduce":
                t = torch.ones(count, dtype=torch.float32)
                call = lambda: dist.all_reduce(t)
            else:
                part = torch.ones(count // n, dtype=torch.float32)
                outs = [torch.empty(count // n, dtype=torch.float32) for _ in range(n)]
                call = lambda: dist.all_gather(outs, part)
            for _ in range(WARMUP):
                call()
            times = []
            for _ in range(ITERS):
                t0 = time.perf_counter()
                call()
                times.append(time.perf_counter() - t0)
            m = torch.tensor([median(times)], dtype=torch.float64)
            dist.all_reduce(m, op=dist.ReduceOp.MAX)
            rows.append((coll, size, float(m[0])))
    if rank == 0:
        write(out, "gloo", n, rows)
    dist.destroy_process_group()


def write(out, tool, n, rows):
    pts = []
    for coll, size, sec in rows:
        alg, bus = busbw(coll, size, sec, n)
        pts.append({"tool": tool, "collective": coll, "bytes": size, "p50_us": sec * 1e6,
                    "algbw_gbps": alg, "busbw_gbps": bus})
    with open(out, "w") as f:
        json.dump({"tool": tool, "ranks": n, "iters": ITERS, "warmup": WARMUP, "points": pts}, f, indent=1)


if __name__ == "__main__":
    {"mpi4py": run_mpi4py, "gloo": run_gloo}[sys.argv[1]](sys.argv[2])
