"""The shared-memory (shm, and cma where the kernel allows it) and hierarchical algorithms
equal the expected result on p = 1..6, on one node and on emulated nodes of 1, 2 and 3
ranks (real mpiexec, hard timeouts)."""

import pytest
from mpirun import driver_summary, run_cli, run_mpi

from collectives import algorithms, cma, hierarchical

DRIVER = "tests/drivers/check_algorithms.py"
# The one-node designs: cma registers only where the kernel allows single-copy reads.
ONE_NODE = ["shm"] + [cma.NAME] * (cma.unavailable_reason() is None)
OURS = ["--collectives", "allreduce,bcast", "--algorithms", ",".join([*ONE_NODE, "hierarchical"])]
# Every kind of dtype (float16 included) and of op (bitwise on the integers only).
DTYPES = ["--dtypes", "float32,float16,int8,uint64", "--ops", "sum,prod,max,bxor"]
# Empty, fewer elements than ranks, primes, not divisible by p.
SIZES = ["--sizes", "0,1,2,7,13,4099"]
LARGE = str(4 * 1024 * 1024 + 3)  # > 16 MiB of float32: 5 chunks of 4M, the last 3 elements


def _check(nprocs: int, ranks_per_node: int | None, *args: str) -> dict:
    emulation = ["--ranks-per-node", str(ranks_per_node)] if ranks_per_node else []
    summary = driver_summary(run_mpi(nprocs, [DRIVER, *OURS, *emulation, *args], timeout=240))
    assert summary["failed"] == 0, "\n".join(summary["failures"])
    return summary


@pytest.mark.parametrize("nprocs", [1, 2, 3, 4, 5, 6])
def test_one_node(nprocs):
    summary = _check(nprocs, None, *DTYPES, *SIZES)
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
    summary = _check(nprocs, ranks_per_node, *DTYPES, *SIZES)
    # Several nodes: the one-node designs are skipped with their reason, hierarchical
    # runs every case.
    assert summary["passed"] > 0
    assert summary["skipped"] == summary["passed"] * len(ONE_NODE)


@pytest.mark.parametrize(("nprocs", "ranks_per_node"), [(2, None), (3, 2)])
def test_large_message_in_chunks(nprocs, ranks_per_node):
    # (3, 2): nodes of 2 and 1 ranks, whose leaders must cut the message alike.
    summary = _check(
        nprocs, ranks_per_node, "--dtypes", "float32", "--ops", "sum", "--sizes", LARGE
    )
    assert summary["passed"] > 0


def _registered(collective: str, names: list[str]) -> list[str]:
    have = {a.name for a in algorithms(collective)}
    return [name for name in names if name in have]


def _validated_run(
    nprocs: int, collective: str, variants: list[str], *extra: str, sizes: str = "8:1K"
) -> str:
    res = run_cli(
        nprocs,
        ["bench", collective, "-a", ",".join(variants), "-m", sizes, "-c", "-i", "1"]
        + ["-x", "0", *extra],
        timeout=240,
    )
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    return res.stdout


def test_every_inner_allreduce_and_small_chunks():
    inners = _registered("allreduce", list(hierarchical.INNER_ALLREDUCE_GRID))
    variants = [f"hierarchical:inner={name}" for name in inners]
    # Three one-rank nodes: a non-power-of-two number of leaders.
    out = _validated_run(3, "allreduce", variants, "--ranks-per-node", "1", "-T", "int32")
    assert out.count("# Algorithm: hierarchical:inner=") == len(inners)
    # The smallest chunk -a takes (4K): up to 16 chunks per message, in place.
    out = _validated_run(3, "allreduce", ["shm:chunk=4K"], "-T", "float64", "-l", sizes="8:64K")
    assert "Fail" not in out and out.count("Pass") > 0


def test_every_inner_bcast_every_root():
    inners = _registered("bcast", list(hierarchical.INNER_BCAST_GRID))
    variants = [f"hierarchical:inner={name}" for name in inners]
    # Nodes of 2+1 ranks: roots that are and are not leaders, on either node.
    out = _validated_run(3, "bcast", variants, "--ranks-per-node", "2", "-k", "rotate")
    assert out.count("# Algorithm: hierarchical:inner=") == len(inners)
    out = _validated_run(3, "bcast", ["shm:chunk=4K"], "-k", "rotate", sizes="8:64K")
    assert "Fail" not in out and out.count("Pass") > 0


def test_unknown_inner_is_one_clear_usage_error():
    res = run_cli(2, ["bench", "allreduce", "-a", "hierarchical:inner=nosuch"], timeout=120)
    assert res.returncode == 2, res.stdout + res.stderr
    errors = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(errors) == 1, res.stderr
    assert "inner=nosuch" in errors[0] and "expected one of native" in errors[0]
    assert "Traceback" not in res.stderr
