"""The shared-memory and hierarchical algorithms through bench: every inner algorithm,
small chunks, every root, and an unknown inner one refused (real mpiexec, hard timeouts).
Their results on p = 1..6, on one node and on emulated nodes, are checked in the SPMD tier
(tests/spmd/test_shm_hierarchical.py)."""

import pytest
from mpirun import run_cli

from collectives import algorithms, hierarchical


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


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_every_inner_allreduce_and_small_chunks():
    inners = _registered("allreduce", list(hierarchical.INNER_ALLREDUCE_GRID))
    variants = [f"hierarchical:inner={name}" for name in inners]
    # Three one-rank nodes: a non-power-of-two number of leaders.
    out = _validated_run(3, "allreduce", variants, "--ranks-per-node", "1", "-T", "int32")
    assert out.count("# Algorithm: hierarchical:inner=") == len(inners)
    # The smallest chunk -a takes (4K): up to 16 chunks per message, in place.
    out = _validated_run(3, "allreduce", ["shm:chunk=4K"], "-T", "float64", "-l", sizes="8:64K")
    assert "Fail" not in out and out.count("Pass") > 0


@pytest.mark.slow
@pytest.mark.timeout(600)
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
