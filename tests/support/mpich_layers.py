"""A run directory whose MPICH candidates won in each of the three layers, for the
three-file export's tests (unit and MPI)."""

from __future__ import annotations

from pathlib import Path

from support.tuning import launch_rows, machine_states, scaled, write_run

# allreduce at p = 2: ch4's beta wins below 4 KiB, MPIR's ring from 4 KiB to 64 KiB, the
# POSIX layer's fallback to MPIR from 64 KiB (factors: candidate time / the default's).
LAYERED_PLAN = {
    1024: {"native:alg=ch4_beta": 0.5, "native:alg=mpir_ring": 1.3, "native:alg=posix_mpir": 1.3},
    2048: {"native:alg=ch4_beta": 0.5, "native:alg=mpir_ring": 1.3, "native:alg=posix_mpir": 1.3},
    8192: {"native:alg=ch4_beta": 1.3, "native:alg=mpir_ring": 0.5, "native:alg=posix_mpir": 1.3},
    16384: {"native:alg=ch4_beta": 1.3, "native:alg=mpir_ring": 0.5, "native:alg=posix_mpir": 1.3},
    65536: {"native:alg=ch4_beta": 1.3, "native:alg=mpir_ring": 1.3, "native:alg=posix_mpir": 0.4},
    1 << 20: {
        "native:alg=ch4_beta": 1.3,
        "native:alg=mpir_ring": 1.3,
        "native:alg=posix_mpir": 0.3,
    },
}


def layered_run(path: Path, plan=LAYERED_PLAN, nprocs: int = 2, metadata=None) -> Path:
    """A 3-launch run: native in the MPI group, each library candidate (``native:alg=``) in
    its own forced group (alg_NAME), any other candidate beside native, at each size of
    ``plan`` ({size: {label: factor}})."""
    rows = []
    for offset, (size, candidates) in enumerate(sorted(plan.items())):
        states = machine_states(launches=3, rounds=20, seed=offset)
        rows += launch_rows("allreduce", "native", size, states, nprocs=nprocs)
        for number, (name, factor) in enumerate(candidates.items(), start=1):
            times = scaled(states, factor, seed=100 * offset + number)
            group = "alg_" + name.partition("=")[2] if name.startswith("native:") else None
            rows += launch_rows("allreduce", name, size, times, group=group, nprocs=nprocs)
    return write_run(path, rows, metadata)


# Allreduce and bcast past MPICH's first calls, at sizes on both sides of the export's
# bounds, every result checked.
MPICH_PROBE = """
import numpy as np
from mpi4py import MPI
comm = MPI.COMM_WORLD
nodes = comm.allreduce(int(comm.Split_type(MPI.COMM_TYPE_SHARED).Get_rank() == 0))
bad = 0
for size in (8, 1024, 8192, 65536, 1 << 20):
    n = size // 8
    for _ in range(8):
        out = np.empty(n)
        comm.Allreduce(np.full(n, comm.rank + 1.0), out)
        bad += int(not np.all(out == comm.size * (comm.size + 1) / 2))
        data = np.full(n, 7.0) if comm.rank == 0 else np.zeros(n)
        comm.Bcast(data, 0)
        bad += int(not np.all(data == 7.0))
bad = comm.allreduce(bad)
if comm.rank == 0:
    print(f"PROBE p={comm.size} nodes={nodes} wrong={bad}", flush=True)
"""
