"""The SPMD tier's own guarantees (tests/support/spmd.py): the ranks of a job agree on each
test's outcome, a failure on one rank fails the test once and names the rank, a rank that
leaves its peers waiting in a collective ends the job instead of hanging it, and a test the
job never reached says so."""

import pytest
from mpirun import mpi_env, run_mpi, run_with_timeout
from support import spmd

CASES = """
import pytest


def _world():
    from mpi4py import MPI

    return MPI.COMM_WORLD


@pytest.mark.parametrize("nprocs", [2])
def test_fails_on_rank_1_only(nprocs):
    assert _world().Get_rank() != 1, "rank 1 disagrees"


@pytest.mark.parametrize("nprocs", [2])
def test_passes_after_a_failure(nprocs):
    assert _world().allreduce(1) == 2


@pytest.mark.parametrize("nprocs", [2])
def test_skipped_everywhere(nprocs):
    pytest.skip("not here")


@pytest.mark.parametrize("nprocs", [2])
def test_skipped_on_rank_0_only(nprocs):
    if _world().Get_rank() == 0:
        pytest.skip("only rank 0 skips")


@pytest.mark.parametrize("nprocs", [2])
def test_rank_1_leaves_its_peer_in_a_collective(nprocs):
    if _world().Get_rank() == 1:
        raise RuntimeError("rank 1 left")
    _world().barrier()


@pytest.mark.parametrize("nprocs", [2])
def test_after_the_abort(nprocs):
    pass
"""


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    """The cases above, run as one SPMD job at p = 2 (peers given 3 s before an abort)."""
    tmp_path = tmp_path_factory.mktemp("spmd_cases")
    cases = tmp_path / "test_cases.py"
    cases.write_text(CASES)
    manifest = spmd.collect([str(cases), "--rootdir", str(tmp_path)], run_with_timeout, mpi_env())
    assert {test["nprocs"] for test in manifest} == {2} and len(manifest) == 6
    args = [str(cases), "--rootdir", str(tmp_path)]
    report = tmp_path / "report.jsonl"
    return spmd.run_job(run_mpi, 2, args, report, 120, {spmd.GRACE_ENV: "3"})


def test_a_failure_on_one_rank_fails_the_test_once_naming_the_rank(job):
    outcome, message = job.verdict("test_cases.py::test_fails_on_rank_1_only[2]")
    assert outcome == "failed" and message.startswith("(call) rank 1: "), message
    assert "rank 1 disagrees" in message
    ends = [
        line for line in job.lines if line["id"].endswith("rank_1_only[2]") and "outcome" in line
    ]
    assert len(ends) == 1, ends
    assert job.verdict("test_cases.py::test_passes_after_a_failure[2]") == ("passed", "")


def test_skips_are_agreed(job):
    skipped = job.verdict("test_cases.py::test_skipped_everywhere[2]")
    assert skipped == ("skipped", "Skipped: not here")
    outcome, message = job.verdict("test_cases.py::test_skipped_on_rank_0_only[2]")
    assert outcome == "failed" and "the ranks disagree on the outcome" in message, message


def test_a_rank_leaving_its_peer_in_a_collective_ends_the_job(job):
    assert job.returncode not in (0, -1), job.output  # ended, not stopped by the timeout
    outcome, message = job.verdict("test_cases.py::test_rank_1_leaves_its_peer_in_a_collective[2]")
    assert outcome == "failed" and message.startswith("(call) rank 1: "), message
    assert "rank 1 left" in message and "the job was aborted" in message
    outcome, message = job.verdict("test_cases.py::test_after_the_abort[2]")
    assert outcome == "failed" and "never ran this test" in message, message
    assert "the last test it started: test_cases.py::test_rank_1_leaves" in message


def test_a_test_without_process_counts_is_refused_at_collection(tmp_path):
    cases = tmp_path / "test_cases.py"
    cases.write_text("def test_anywhere():\n    pass\n")
    with pytest.raises(RuntimeError, match="names the process counts it runs at"):
        spmd.collect([str(cases), "--rootdir", str(tmp_path)], run_with_timeout, mpi_env())
