"""Every registered algorithm equals the expected result on p = 1..6 ranks (real mpiexec)."""

import pytest
from mpirun import driver_summary, run_mpi

from collectives import CallContext, all_algorithms
from collectives.dtypes import element_type
from collectives.ops import reduce_op

DRIVER = "tests/drivers/check_algorithms.py"
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


@pytest.mark.parametrize("nprocs", [1, 2, 3, 4, 5, 6])
def test_every_algorithm_matches_expected(nprocs):
    # gloo is checked by test_backends.py (p = 1..4, every dtype and op it supports); here
    # it would double the time at p = 6 on 2 cores (TCP over loopback, oversubscribed).
    args = [DRIVER, "--backends", "mpi", "--grid-sizes", str(GRID_SIZE)]
    if nprocs > 1:
        args += ["--grid-ranks-per-node", str(_emulated_ranks_per_node(nprocs))]
    summary = driver_summary(run_mpi(nprocs, args, timeout=300))
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


@pytest.mark.parametrize("nprocs", [2, 3])
def test_large_messages_match_expected(nprocs):
    summary = driver_summary(
        run_mpi(
            nprocs,
            [
                DRIVER,
                "--collectives",
                "allreduce,bcast",
                "--dtypes",
                "float32",
                "--ops",
                "sum",
                "--sizes",
                LARGE,
            ],
            timeout=300,
        )
    )
    assert summary["failed"] == 0, "\n".join(summary["failures"])
    assert summary["passed"] > 0


@pytest.mark.parametrize("nprocs", [2, 3, 5])
def test_hypothesis_drawn_inputs_match_numpy(nprocs):
    result = run_mpi(
        nprocs, ["tests/drivers/property_algorithms.py", "--examples", "20"], timeout=300
    )
    summary = driver_summary(result)
    assert summary["algorithms"] >= 4
    assert summary["failures"] == []


@pytest.mark.parametrize("collective", ["allreduce", "bcast"])
def test_bench_all_algorithms_validates_each(collective):
    from mpirun import run_cli

    res = run_cli(
        3,
        ["bench", collective, "-a", "all", "-c", "-m", "4:64K", "-i", "5", "-x", "1"],
        timeout=300,
    )
    assert res.returncode == 0, res.stderr
    tables = res.stdout.count("# Size")
    rows = [ln.split() for ln in res.stdout.splitlines() if ln and not ln.startswith("#")]
    assert tables >= 4 and len(rows) == tables * 15
    assert all(r[-1] == "Pass" for r in rows)
    # recursive doubling needs a power of two for these, so at p = 3 it must be skipped
    if collective == "bcast":
        assert "# scatter_rd_allgather: skipped: needs a power-of-two process count" in res.stdout


def test_list_shows_algorithms_and_constraints():
    from mpirun import run_cli

    res = run_cli(1, ["list"], timeout=60)
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert any(ln.split()[:2] == ["allreduce", "ring"] and "commutative op" in ln for ln in lines)
    assert any(ln.split()[:3] == ["bcast", "chain", "mpi"] and "seg=256K" in ln for ln in lines)
    assert any(
        ln.split()[:2] == ["allgather", "recursive_doubling"] and "power-of-two" in ln
        for ln in lines
    )
    kinds = next(ln for ln in lines if ln.startswith("buffer kinds (-d): "))
    assert kinds.startswith("buffer kinds (-d): cpu; cpu-registered") and "cuda" in kinds
