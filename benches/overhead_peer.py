#!/usr/bin/env python3
"""The peer of benches/sweep-overhead: nccl-tests' per-size structure in mpi4py + numpy.

Per size (all_reduce, f32 sum, out of place): allocate send and receive buffers,
initialise the send buffer by repeating one period with numpy (memory speed),
WARMUP untimed calls and ITERS timed calls, then re-initialise, run one checked call
and compare the result with vectorised numpy. Wall time of the whole size and the
time inside the MPI calls are recorded; rank 0 writes the slowest rank's share.

  mpirun -np N python overhead_peer.py OUT.json SIZE [SIZE ...]
"""
import json
import os
import sys
import time

import numpy as np
from mpi4py import MPI

WARMUP = int(os.environ.get("PEER_WARMUP", "5"))
ITERS = int(os.environ.get("PEER_ITERS", "20"))


def repeat_into(dst, period):
    """dst[i] = period[i % len(period)], by doubling copies (memory speed)."""
    k = min(len(period), len(dst))
    dst[:k] = period[:k]
    while k < len(dst):
        m = min(k, len(dst) - k)
        dst[k:k + m] = dst[:m]
        k += m
    return dst


def main(out, sizes):
    comm = MPI.COMM_WORLD
    n, rank = comm.Get_size(), comm.Get_rank()
    rows = []
    for size in sizes:
        count = size // 4
        comm.Barrier()
        t_start = time.perf_counter()
        # One period of the pattern, repeated by numpy (memory speed, no index array).
        period = np.array([(rank + i) % 3 for i in range(3)], dtype=np.float32)
        send = repeat_into(np.empty(count, dtype=np.float32), period)
        recv = np.empty(count, dtype=np.float32)
        in_calls = 0.0
        for _ in range(WARMUP + ITERS):
            t0 = time.perf_counter()
            comm.Allreduce(send, recv, op=MPI.SUM)
            in_calls += time.perf_counter() - t0
        repeat_into(send, period)
        recv.fill(251.0)
        t0 = time.perf_counter()
        comm.Allreduce(send, recv, op=MPI.SUM)
        in_calls += time.perf_counter() - t0
        want = repeat_into(np.empty(count, dtype=np.float32),
                           np.array([sum((r + i) % 3 for r in range(n)) for i in range(3)],
                                    dtype=np.float32))
        wrong = int(np.count_nonzero(recv != want))
        wall = time.perf_counter() - t_start
        del send, recv, want
        share = (wall - in_calls) / wall
        worst = comm.allreduce((share, wall, in_calls, wrong), op=MPI.MAX)
        rows.append({"bytes": size, "outside_share": worst[0], "wall_s": worst[1],
                     "in_calls_s": worst[2], "wrong": worst[3]})
    if rank == 0:
        with open(out, "w") as f:
            json.dump({"tool": "mpi4py+numpy", "ranks": n, "iters": ITERS, "warmup": WARMUP,
                       "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1], [int(s) for s in sys.argv[2:]])
