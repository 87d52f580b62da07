"""A table whose winners both MPI libraries have, and its exports."""

from __future__ import annotations

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
