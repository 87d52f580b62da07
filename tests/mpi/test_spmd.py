"""The SPMD tier: the algorithm and kernel tests of tests/spmd run on every rank of one
``mpiexec -n P python -m pytest`` job per process count P (as mpi4py's suite runs),
launched here through tests/mpirun.py with a hard timeout; each of them is an item here,
named by its id there, and fails with its own message (tests/support/spmd.py says how).

``pytest -m spmd`` runs this tier alone; ``pytest tests/mpi/test_spmd.py -k 'p3-'`` the
job at p = 3 (a job runs only the tests selected here).
"""

from __future__ import annotations

import pytest
from mpirun import mpi_env, run_mpi, run_with_timeout
from support import spmd

# A job's budget: its tests' own timeouts and start-up. A test that hangs is ended
# sooner, by its timeout inside the job.
START_S = 120

MANIFEST = spmd.collect(["tests/spmd"], run_with_timeout, mpi_env())


def _job_timeout(nprocs: int) -> int:
    return START_S + sum(test["timeout"] for test in MANIFEST if test["nprocs"] == nprocs)


def _params() -> list:
    return [
        pytest.param(
            test,
            id=f"p{test['nprocs']}-{test['id'].removeprefix('tests/spmd/')}",
            # The first item of each p waits for the whole job.
            marks=[
                pytest.mark.timeout(_job_timeout(test["nprocs"]) + 60),
                *(getattr(pytest.mark, name) for name in test["marks"]),
            ],
        )
        for test in sorted(MANIFEST, key=lambda test: test["nprocs"])
    ]


class Jobs:
    """One job per process count, run when its first test here is reached, with the
    tests of it this session selected."""

    def __init__(self, scratch, selected: dict[int, list[str]]) -> None:
        self.scratch, self.selected = scratch, selected
        self.done: dict[int, spmd.Job] = {}

    def of(self, nprocs: int) -> spmd.Job:
        """The job at ``nprocs``, run now if it has not been."""
        if nprocs not in self.done:
            report = self.scratch / f"p{nprocs}.jsonl"
            self.done[nprocs] = spmd.run_job(
                run_mpi, nprocs, self.selected[nprocs], report, _job_timeout(nprocs)
            )
        return self.done[nprocs]


@pytest.fixture(scope="session")
def spmd_jobs(request, tmp_path_factory) -> Jobs:
    """The SPMD jobs of this session, each with only the tests of it selected here."""
    selected: dict[int, list[str]] = {}
    for item in request.session.items:
        callspec = getattr(item, "callspec", None)
        test = callspec.params.get("spmd_test") if callspec else None
        if test:
            selected.setdefault(test["nprocs"], []).append(test["id"])
    return Jobs(tmp_path_factory.mktemp("spmd"), selected)


@pytest.mark.spmd
@pytest.mark.parametrize("spmd_test", _params())
def test_spmd(spmd_test, spmd_jobs):
    outcome, message = spmd_jobs.of(spmd_test["nprocs"]).verdict(spmd_test["id"])
    if outcome == "skipped":
        pytest.skip(message)
    assert outcome == "passed", message
