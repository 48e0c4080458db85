#!/usr/bin/env python3
"""mpi4py + numpy collectives timed the way the OSU micro-benchmarks time them, for
benches/osu-parity (run under the same mpirun as burnin and OSU).

  osu_peer.py OUT.json LO HI ITERS WARMUP [osu|batch]

Sizes are burnin's (nccl-tests') bytes, LO..HI by factors of 2: all_reduce, reduce and
reduce_scatter (f32 sum) take the whole message, all_gather and alltoall a chunk of
bytes/n per rank (per peer), broadcast (root 0) the whole message in place, sendrecv
to the next rank and from the previous one. Each call is timed with MPI.Wtime; with
`osu` (the default) a barrier follows every iteration outside the timed call, with
`batch` calls run back to back. A rank's time is its mean over the timed iterations;
the ranks' times are averaged (OSU's "Avg Latency", burnin's -a 1 mean).
"""
import json
import sys

import numpy as np
from mpi4py import MPI

COLLS = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce", "alltoall", "sendrecv")


def calls(comm, coll, size, send, recv):
    n, rank = comm.Get_size(), comm.Get_rank()
    count = size // 4
    if coll == "all_reduce":
        s, r = send[:count], recv[:count]
        return lambda: comm.Allreduce(s, r, op=MPI.SUM)
    if coll == "reduce":
        s, r = send[:count], recv[:count]
        return lambda: comm.Reduce(s, r, op=MPI.SUM, root=0)
    if coll == "reduce_scatter":
        s, r = send[:count], recv[: count // n]
        return lambda: comm.Reduce_scatter_block(s, r, op=MPI.SUM)
    if coll == "all_gather":
        s, r = send[: count // n], recv[: (count // n) * n]
        return lambda: comm.Allgather(s, r)
    if coll == "alltoall":
        s, r = send[: (count // n) * n], recv[: (count // n) * n]
        return lambda: comm.Alltoall(s, r)
    if coll == "broadcast":
        r = recv[:count]
        return lambda: comm.Bcast(r, root=0)
    if coll == "sendrecv":
        s, r = send[:count], recv[:count]
        to, frm = (rank + 1) % n, (rank - 1) % n
        return lambda: comm.Sendrecv(s, dest=to, sendtag=7, recvbuf=r, source=frm, recvtag=7)
    raise SystemExit(f"osu_peer.py: unknown collective {coll}")


def main():
    out, lo, hi, iters, warmup = sys.argv[1], *map(int, sys.argv[2:6])
    timing = sys.argv[6] if len(sys.argv) > 6 else "osu"
    comm = MPI.COMM_WORLD
    n = comm.Get_size()
    # One pair of buffers at the largest size, written once, reused by every size (OSU's way).
    send = np.ones(hi // 4, dtype=np.float32)
    recv = np.zeros(hi // 4, dtype=np.float32)
    rows = []
    for coll in COLLS:
        size = lo
        while size <= hi:
            call = calls(comm, coll, size, send, recv)
            comm.Barrier()
            total = 0.0
            for i in range(warmup + iters):
                t0 = MPI.Wtime()
                call()
                t1 = MPI.Wtime()
                if i >= warmup:
                    total += t1 - t0
                if timing == "osu":
                    comm.Barrier()
            mean_us = total * 1e6 / iters
            avg = comm.reduce(mean_us, op=MPI.SUM, root=0)
            if comm.Get_rank() == 0:
                rows.append({"collective": coll, "bytes": size, "mean_us": avg / n})
            size *= 2
    if comm.Get_rank() == 0:
        with open(out, "w") as f:
            json.dump({"tool": "mpi4py", "timing": timing, "ranks": n, "mpi": MPI.Get_library_version().strip(), "points": rows}, f)


if __name__ == "__main__":
    main()
