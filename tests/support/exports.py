"""A table whose winners both MPI libraries have, and its exports."""

from __future__ import annotations

import json

from osu_dl_bench.selection import build_table
from osu_dl_bench.selection.exports import parse_exports, write_exports
from support.tuning import point, write_run

ALLREDUCE_PLAN = ((8, "native"), (4096, "ring"), (65536, "ring"), (1 << 20, "reduce_bcast"))


BCAST_PLAN = ((8, "binomial"), (8192, "chain:seg=64K"), (1 << 20, "chain:seg=64K"))


def winning_points(collective, plan, nprocs, others):
    """Points where each size's planned winner clearly beats native and the others."""
    pts = []
    for size, winner in plan:
        for name in {"native", winner, *others}:
            median = 50.0 if name == winner else (100.0 if name == "native" else 120.0)
            pts.append(point(collective, name, size, median, 4.0, nprocs=nprocs))
    return pts


def winning_table(tmp_path):
    """A built table whose winners Open MPI and MPICH both have, at p = 2 and 4."""
    pts = []
    for nprocs in (2, 4):
        pts += winning_points("allreduce", ALLREDUCE_PLAN, nprocs, ("recursive_doubling",))
        pts += winning_points("bcast", BCAST_PLAN, nprocs, ("scatter_ring_allgather",))
    # p=3 picks the hierarchical design at 64 KiB, which neither library has.
    pts += winning_points("allreduce", ((8, "native"), (65536, "hierarchical")), 3, ("ring",))
    built, _ = build_table(write_run(tmp_path / "run", pts), "exp")
    return built


def export_files(table, tmp_path, names="openmpi,mpich"):
    written = write_exports(table, tmp_path / "exp", parse_exports(names))
    return {p.name: p for _, paths, _ in written for p in paths}, [
        w for _, _, notes in written for w in notes
    ]


# An allreduce run whose result shows the algorithm that produced it: a user-defined
# reduction declared commutative that is not ("a*31 + b*7 + 1").
FINGERPRINT_PY = r"""
import json, sys
import numpy as np
from mpi4py import MPI
comm = MPI.COMM_WORLD
rank, p = comm.Get_rank(), comm.Get_size()
def mix(inbuf, inoutbuf, datatype):
    a = np.frombuffer(inbuf, dtype=np.uint64)
    b = np.frombuffer(inoutbuf, dtype=np.uint64)
    b[:] = b * np.uint64(31) + a * np.uint64(7) + np.uint64(1)
fingerprint = MPI.Op.Create(mix, commute=True)  # a lie: the result shows the algorithm
prints, ok = [], True
for size in map(int, sys.argv[1:]):
    n = size // 8
    x = np.full(n, rank + 7, dtype=np.uint64)
    y = np.empty_like(x)
    comm.Allreduce(x, y, fingerprint)
    prints.append(comm.gather(int(y[-1] % 999983), root=0))
    s = np.full(n, rank + 1.0)
    t = np.empty_like(s)
    comm.Allreduce(s, t, MPI.SUM)
    b = np.arange(n, dtype=np.float64) if rank == 0 else np.zeros(n)
    comm.Bcast(b, root=0)
    ok &= bool((t == p * (p + 1) / 2).all() and (b == np.arange(n)).all())
comm.Barrier()
ok = comm.allreduce(ok, op=MPI.LAND)
if rank == 0:
    print("FINGERPRINT " + json.dumps({"prints": prints, "ok": ok}))
"""


def fingerprint_of(result):
    """The per-size fingerprints a FINGERPRINT_PY run printed (fails if it failed)."""
    lines = [ln for ln in result.stdout.splitlines() if ln.startswith("FINGERPRINT ")]
    assert result.returncode == 0 and lines, f"{result.stdout[-2000:]}\n{result.stderr[-3000:]}"
    data = json.loads(lines[-1].removeprefix("FINGERPRINT "))
    assert data["ok"], "wrong allreduce or bcast results"
    return [tuple(p) for p in data["prints"]]
