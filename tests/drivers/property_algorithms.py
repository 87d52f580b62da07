"""Property-based multi-rank check: hypothesis draws sizes, values, dtypes and ops, every
registered allreduce / reduce_scatter / allgather / bcast algorithm must equal the result
computed with numpy from all ranks' inputs.

Every rank runs the same derandomised hypothesis search (fixed seed, no deadline, no
database), and each example's verdict is agreed across ranks before hypothesis sees it,
so all ranks draw, fail and shrink identically. Ends with one ``SUMMARY {json}`` line.
"""

from __future__ import annotations

import argparse
import json
import sys

from osu_dl_bench.runtime.guard import run_guarded
from osu_dl_bench.runtime.start import init_mpi

MPI = init_mpi("single")

import numpy as np  # noqa: E402
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from collectives import CallContext, algorithms  # noqa: E402
from collectives.dtypes import element_type  # noqa: E402
from collectives.ops import reduce_op  # noqa: E402
from osu_dl_bench.measurement.kernel import count_wrong  # noqa: E402
from osu_dl_bench.runtime.topology import discover_topology  # noqa: E402

DTYPES = ("float32", "float64", "float16", "int32", "int64")
OPS = ("sum", "max", "min", "prod")


def rank_input(seed: int, rank: int, count: int, dtype: np.dtype, op: str) -> np.ndarray:
    """Rank ``rank``'s random input: small integers, so every reduction is exact."""
    rng = np.random.default_rng([seed, rank])
    if op == "prod":  # |product| <= 2**p stays exact in float16 and int8 for p <= 6
        return rng.choice(np.array([-1, 1, 2]), count).astype(dtype)
    return rng.integers(-50, 50, count).astype(dtype)


def expected_output(
    collective: str, seed: int, n: int, dtype, op, rank: int, p: int, root: int
) -> np.ndarray:
    """The right answer, from every rank's regenerated input."""
    if collective == "bcast":
        return rank_input(seed, root, n, dtype, "sum")
    if collective == "allgather":
        return np.concatenate([rank_input(seed, r, n, dtype, "sum") for r in range(p)])
    total = n * p if collective == "reduce_scatter" else n
    acc = rank_input(seed, 0, total, dtype, op.name)
    for r in range(1, p):
        op.ufunc(acc, rank_input(seed, r, total, dtype, op.name), out=acc)
    return acc[rank * n : (rank + 1) * n] if collective == "reduce_scatter" else acc


def run_example(comm, call, collective, seed, n, dtype, op, root, in_place) -> int:
    """One call on drawn inputs; wrong elements on this rank."""
    rank, p = comm.Get_rank(), comm.Get_size()
    mine = rank_input(
        seed,
        rank,
        n * (p if collective == "reduce_scatter" else 1),
        dtype,
        op.name if op else "sum",
    )
    if collective == "bcast":
        send, recv = None, mine if rank == root else np.zeros(n, dtype)
    elif collective == "allgather":
        recv = np.zeros(n * p, dtype)
        send = mine
        if in_place:
            recv[rank * n : (rank + 1) * n], send = mine, None
    elif collective == "reduce_scatter":
        send, recv = (None, mine) if in_place else (mine, np.zeros(n, dtype))
    else:
        send, recv = (None, mine.copy()) if in_place else (mine, np.zeros(n, dtype))
    call(send, recv, op, root)
    got = recv[:n] if collective == "reduce_scatter" else recv
    etype = element_type(np.dtype(dtype).name)
    return count_wrong(got, expected_output(collective, seed, n, dtype, op, rank, p, root), etype)


def check_algorithm(comm, topo, collective, algo, examples) -> str | None:
    """Run the hypothesis search for one algorithm; a failure description or None."""
    variant = algo.variant()
    call = variant.bind(comm)
    p = comm.Get_size()

    @settings(
        max_examples=examples,
        derandomize=True,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
        print_blob=False,
    )
    @given(
        n=st.integers(0, 3000),
        seed=st.integers(0, 2**32 - 1),
        dtype=st.sampled_from(DTYPES),
        op_name=st.sampled_from(OPS),
        root=st.integers(0, p - 1),
        in_place=st.booleans(),
    )
    def prop(n, seed, dtype, op_name, root, in_place):
        op = reduce_op(op_name) if collective in ("allreduce", "reduce_scatter") else None
        ctx = CallContext(p, element_type(dtype), op, "cpu", topo.nodes, topo.ppn)
        if variant.ineligible_reason(ctx):
            return
        wrong = run_example(comm, call, collective, seed, n, np.dtype(dtype), op, root, in_place)
        total = comm.allreduce(wrong)
        assert total == 0, f"{total} wrong elements"

    try:
        prop()
    except AssertionError as exc:
        return f"{collective}/{variant.label}: {str(exc).splitlines()[0]}"
    return None


def search(argv: list[str] | None = None) -> dict:
    """Run the search for every selected algorithm (options ``argv``; None: the command
    line); returns the summary (the same on every rank: verdicts are agreed)."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--examples", type=int, default=25)
    parser.add_argument("--collectives", default="allreduce,reduce_scatter,allgather,bcast")
    parser.add_argument("--ranks-per-node", type=int, default=None)
    args = parser.parse_args(argv)
    comm = MPI.COMM_WORLD
    topo = discover_topology(comm, args.ranks_per_node)
    failures, checked = [], 0
    for collective in args.collectives.split(","):
        for algo in algorithms(collective):
            failure = check_algorithm(comm, topo, collective, algo, args.examples)
            checked += 1
            if failure:
                failures.append(failure)
    return {"nprocs": comm.Get_size(), "algorithms": checked, "failures": failures}


def main() -> int:
    summary = search()
    if MPI.COMM_WORLD.Get_rank() == 0:
        print("SUMMARY " + json.dumps(summary), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(run_guarded(main))
