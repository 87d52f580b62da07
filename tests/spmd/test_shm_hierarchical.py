"""The shared-memory (shm, and cma where the kernel allows it) and hierarchical algorithms
equal the expected result on p = 1..6, on one node and on emulated nodes of 1, 2 and 3
ranks (SPMD: one job per p; the command-line checks are in
tests/mpi/test_shm_hierarchical.py)."""

import pytest

from collectives import cma

# The one-node designs: cma registers only where the kernel allows single-copy reads.
ONE_NODE = ["shm"] + [cma.NAME] * (cma.unavailable_reason() is None)
OURS = ["--collectives", "allreduce,bcast", "--algorithms", ",".join([*ONE_NODE, "hierarchical"])]
# Every kind of dtype (float16 included) and of op (bitwise on the integers only).
DTYPES = ["--dtypes", "float32,float16,int8,uint64", "--ops", "sum,prod,max,bxor"]
# Empty, fewer elements than ranks, primes, not divisible by p.
SIZES = ["--sizes", "0,1,2,7,13,4099"]
LARGE = str(4 * 1024 * 1024 + 3)  # > 16 MiB of float32: 5 chunks of 4M, the last 3 elements


def _check(ranks_per_node: int | None, *args: str) -> dict:
    from drivers import check_algorithms

    emulation = ["--ranks-per-node", str(ranks_per_node)] if ranks_per_node else []
    summary = check_algorithms.check_with([*OURS, *emulation, *args])
    assert summary["failed"] == 0, "\n".join(summary["failures"])
    return summary


@pytest.mark.slow
@pytest.mark.parametrize("nprocs", [1, 2, 3, 4, 5, 6])
def test_one_node(nprocs):
    summary = _check(None, *DTYPES, *SIZES)
    # One node: the one-node designs run every case; hierarchical, which would only repeat
    # shm there, is skipped in every case.
    assert summary["passed"] > 0
    assert summary["skipped"] * len(ONE_NODE) == summary["passed"]


@pytest.mark.parametrize(
    ("nprocs", "ranks_per_node"),
    # Nodes of 1+1+1, 2+1, 2+2, 2+2+1, 3+2 and 3+3 ranks.
    [(3, 1), (3, 2), (4, 2), (5, 2), (5, 3), (6, 3)],
)
def test_emulated_nodes(nprocs, ranks_per_node):
    summary = _check(ranks_per_node, *DTYPES, *SIZES)
    # Several nodes: the one-node designs are skipped with their reason, hierarchical
    # runs every case.
    assert summary["passed"] > 0
    assert summary["skipped"] == summary["passed"] * len(ONE_NODE)


@pytest.mark.parametrize(("nprocs", "ranks_per_node"), [(2, None), (3, 2)])
def test_large_message_in_chunks(nprocs, ranks_per_node):
    # (3, 2): nodes of 2 and 1 ranks, whose leaders must cut the message alike.
    summary = _check(ranks_per_node, "--dtypes", "float32", "--ops", "sum", "--sizes", LARGE)
    assert summary["passed"] > 0
