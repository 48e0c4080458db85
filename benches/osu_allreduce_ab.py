"""One A/B of the all_reduce gap between OSU's C loop and other callers (issue: OSU
parity). mpi4py times MPI_Allreduce of f32 at 64, 128 and 256 KiB the way OSU does
(MPI_Wtime around each call, a barrier after it, 20 warm-up and 200 timed calls, the
ranks' mean latencies averaged), with one factor set from the environment:

  MPI4PY_RC_THREAD_LEVEL=single|multiple   the MPI thread level (burnin asks for
                                           MPI_THREAD_MULTIPLE, OSU for none)
  MODE=ones|bytes                          the data: 1.0f, or OSU's memset(1) bytes

Run alternately, e.g.
  for r in 1 2 3 4 5 6; do for l in single multiple; do
    MPI4PY_RC_THREAD_LEVEL=$l mpirun -np 2 --oversubscribe --mca btl self,vader,tcp \
      .venv/bin/python benches/osu_allreduce_ab.py | sed "s/^/$l /"; done; done
Prints the thread level MPI granted and each size's mean latency in µs.
"""
import os

import numpy as np
from mpi4py import MPI

MODE = os.environ.get("MODE", "ones")
comm = MPI.COMM_WORLD
out = {}
for size in (65536, 131072, 262144):
    n = size // 4
    if MODE == "ones":
        s = np.ones(n, dtype=np.float32)
    else:
        s = np.frombuffer(b"\x01" * size, dtype=np.float32).copy()
    r = np.zeros(n, dtype=np.float32)
    for _ in range(20):
        comm.Allreduce(s, r, op=MPI.SUM)
        comm.Barrier()
    t = 0.0
    for _ in range(200):
        t0 = MPI.Wtime()
        comm.Allreduce(s, r, op=MPI.SUM)
        t += MPI.Wtime() - t0
        comm.Barrier()
    avg = comm.reduce(t / 200 * 1e6, op=MPI.SUM, root=0)
    if comm.rank == 0:
        out[size] = avg / comm.size
if comm.rank == 0:
    print(MPI.Query_thread(), " ".join(f"{k // 1024}K={v:.1f}" for k, v in out.items()))
