"""Every registered algorithm equals the expected result on p = 1..6 ranks (real mpiexec)."""

import json

import pytest
from mpirun import run_mpi

DRIVER = "tests/drivers/check_algorithms.py"
LARGE = str(4 * 1024 * 1024 + 3)  # > 16 MiB of float32, not divisible by any p here


def _summary(result) -> dict:
    lines = [ln for ln in result.stdout.splitlines() if ln.startswith("SUMMARY ")]
    assert result.returncode == 0 and lines, (
        f"driver failed (exit {result.returncode})\n"
        f"{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    )
    return json.loads(lines[-1].removeprefix("SUMMARY "))


@pytest.mark.parametrize("nprocs", [1, 2, 3, 4, 5, 6])
def test_every_algorithm_matches_expected(nprocs):
    summary = _summary(run_mpi(nprocs, [DRIVER], timeout=300))
    assert summary["failed"] == 0, "\n".join(summary["failures"])
    assert summary["passed"] > 0


@pytest.mark.parametrize("nprocs", [2, 3])
def test_large_messages_match_expected(nprocs):
    summary = _summary(
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
