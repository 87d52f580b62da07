"""Ranks that pass one cma or shm collective call different counts (the classic MPI
mistake) get the same CountMismatch on every rank, nothing is copied and no byte around
the buffers changes (checked in the SPMD tier, tests/spmd/test_mismatched_counts.py); the
CLI ends such a run with a non-zero exit and no hang."""

import sys

import pytest
from mpirun import MPIEXEC, mpi_env, run_with_timeout

from collectives import cma


@pytest.mark.parametrize(
    ("algorithm", "collective"),
    [("shm", "allreduce"), ("shm", "bcast")]
    + [("cma", c) for c in ("allreduce", "bcast") if cma.unavailable_reason() is None],
)
def test_cli_run_with_mismatched_sizes_fails_on_every_rank(algorithm, collective):
    """Two ranks given different -m (mpiexec's MPMD form): the job ends with exit 2 and
    one message naming both sizes (bench compares the ranks' options before any call),
    instead of exiting 0 with a corrupted peer."""
    bench = ["-m", "osu_dl_bench", "bench", collective, "-a", algorithm, "-i", "2", "-x", "0"]
    cmd = [MPIEXEC, "-n", "1", sys.executable, *bench, "-m", "8K:8K"]
    cmd += [":", "-n", "1", sys.executable, *bench, "-m", "4K:4K"]
    result = run_with_timeout(cmd, 120, mpi_env())
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr.count("osu-dl-bench: error:") == 1, result.stderr
    assert "rank 1 runs with min_size 4096, rank 0 with 8192" in result.stderr
