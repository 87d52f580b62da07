"""Every registered algorithm equals the expected result on p = 1..6 ranks (SPMD: every
rank runs each test in one job per p; the command-line checks are in
tests/mpi/test_algorithms_multirank.py)."""

import pytest

from collectives import CallContext, all_algorithms
from collectives.dtypes import element_type
from collectives.ops import reduce_op

LARGE = str(4 * 1024 * 1024 + 3)  # > 16 MiB of float32, not divisible by any p here
# Where every sweep-grid variant is checked: an odd prime, so that at every p, dtype and
# segment the pieces end ragged; large enough that the driver's stand-ins of the grid's
# segment and chunk sizes cut it into several pieces, small enough to take seconds.
GRID_SIZE = 20011


def _emulated_ranks_per_node(nprocs: int) -> int:
    # Several nodes, the last one short where p is odd, for the node-aware variants.
    return 1 if nprocs == 2 else 2


def _segmented(variant) -> bool:
    """Whether the variant cuts messages into pieces (a segment or chunk size, not seg=0)."""
    split = variant.algorithm.split
    return split is not None and int(variant.params[split.param]) > 0


def _grid_variants_eligible(nprocs: int) -> dict[str, bool]:
    """'collective/label' -> _segmented, for every variant of an MPI algorithm's sweep grid
    that can run on one node of nprocs ranks or on the emulated nodes (float32 sum)."""
    k = _emulated_ranks_per_node(nprocs)
    shapes = [(1, nprocs), (-(-nprocs // k), k)]
    etype, op = element_type("float32"), reduce_op("sum")
    contexts = [CallContext(nprocs, etype, op, "cpu", nodes, ppn) for nodes, ppn in shapes]
    return {
        f"{algo.collective}/{variant.label}": _segmented(variant)
        for algo in all_algorithms()
        if algo.backend == "mpi" and algo.grid
        for variant in algo.grid_variants()
        if any(variant.ineligible_reason(ctx) is None for ctx in contexts)
    }


@pytest.mark.slow
# At p = 6 it took 300 s on 2 cores under a load of 19 (every variant of every grid).
@pytest.mark.timeout(600)
@pytest.mark.parametrize("nprocs", [1, 2, 3, 4, 5, 6])
def test_every_algorithm_matches_expected(nprocs):
    from drivers import check_algorithms

    # gloo is checked by test_backends.py (p = 1..4, every dtype and op it supports); here
    # it would double the time at p = 6 on 2 cores (TCP over loopback, oversubscribed).
    args = ["--backends", "mpi", "--grid-sizes", str(GRID_SIZE)]
    if nprocs > 1:
        args += ["--grid-ranks-per-node", str(_emulated_ranks_per_node(nprocs))]
    summary = check_algorithms.check_with(args)
    assert summary["failed"] == 0, "\n".join(summary["failures"])
    assert summary["passed"] > 0
    # Every variant the sweep would try ran; each segmented one, itself or its scaled-down
    # stand-in, in 3 pieces or more with a ragged last one.
    expected, grid = _grid_variants_eligible(nprocs), summary["grid"]
    assert sorted(grid) == sorted(expected)
    shallow = [
        f"{label}: {grid[label][0]} pieces, ragged {grid[label][1]}"
        for label, segmented in expected.items()
        if segmented and not (grid[label][0] >= 3 and grid[label][1])
    ]
    assert not shallow, "\n".join(shallow)


@pytest.mark.slow
@pytest.mark.parametrize("nprocs", [2, 3])
def test_large_messages_match_expected(nprocs):
    from drivers import check_algorithms

    args = ["--collectives", "allreduce,bcast", "--dtypes", "float32", "--ops", "sum"]
    summary = check_algorithms.check_with([*args, "--sizes", LARGE])
    assert summary["failed"] == 0, "\n".join(summary["failures"])
    assert summary["passed"] > 0


@pytest.mark.slow
@pytest.mark.parametrize("nprocs", [2, 3, 5])
def test_hypothesis_drawn_inputs_match_numpy(nprocs):
    from drivers import property_algorithms

    summary = property_algorithms.search(["--examples", "20"])
    assert summary["algorithms"] >= 4
    assert summary["failures"] == []
