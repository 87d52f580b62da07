"""Ranks that pass one cma or shm collective call different counts (the classic MPI
mistake) get the same CountMismatch on every rank, nothing is copied and no byte around
the buffers changes (SPMD: one job per p; the command line's refusal is checked in
tests/mpi/test_mismatched_counts.py)."""

import pytest

from collectives import registered

DEVICES = "cpu" + (",cpu-registered,mixed" if registered.unavailable_reason() is None else "")


@pytest.mark.parametrize("nprocs", [2, 3])
def test_every_rank_refuses_mismatched_calls_and_nothing_is_copied(nprocs):
    """cma and shm, allreduce (in place and not) and bcast (root first and last), on
    private, registered and mixed buffers: all cases in one call."""
    from drivers import mismatched_counts

    summary = mismatched_counts.summarize(["--devices", DEVICES])
    assert summary["failed"] == 0, "\n".join(summary["failures"])
    assert summary["passed"] > 0
