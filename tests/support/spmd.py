"""The SPMD tier: tests that run on every rank of one ``mpiexec -n P python -m pytest -p
support.spmd tests/spmd`` job per process count P, as mpi4py's own suite runs, instead of
a job per test. tests/mpi/test_spmd.py launches the jobs (``run_job``, through
tests/mpirun.py with a hard timeout) and reports each test as an item of its own.

Inside a job this module is a pytest plugin. Each test names the process counts it runs
at with an ``nprocs`` parameter; a job at P keeps the tests whose ``nprocs`` is P. The
ranks agree on each phase's outcome over a communicator of their own (a test's unmatched
calls on COMM_WORLD can never match it): a failure on any rank fails the test on every
rank, and rank 0 reports it once, naming the rank. A rank that failed while its peers do
not finish the test within GRACE_ENV's seconds (they wait in a collective it left) reports
and aborts the job, so a wrong rank ends the job instead of hanging it; a test that hangs
on every rank is ended by pytest-timeout's thread method (a rank blocked inside an MPI call
never runs Python's signal handlers), and the job by the launcher's timeout.

Rank 0 appends one JSON line per test to REPORT_ENV's file as the job runs (started, then
the agreed outcome), so a job that dies still tells which test it died in (pytest's junit
XML is written only when a session ends). MODE_ENV says how the plugin is used: ``collect``
writes the manifest of (test id, nprocs) to MANIFEST_ENV's file without starting MPI;
``run`` is a job; unset, tests/conftest.py leaves tests/spmd out of the collection.
"""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

MODE_ENV = "OSU_DL_BENCH_SPMD"
MANIFEST_ENV = "OSU_DL_BENCH_SPMD_MANIFEST"
REPORT_ENV = "OSU_DL_BENCH_SPMD_REPORT"
GRACE_ENV = "OSU_DL_BENCH_SPMD_GRACE_S"
# How long a rank whose test failed waits for its peers to finish the phase before it
# aborts the job: they may be slower, or stuck in a collective this rank left.
DEFAULT_GRACE_S = 60.0
POLL_S = 0.01
# A test's budget where no pytest configuration gives a timeout (pyproject's default).
UNCONFIGURED_TIMEOUT_S = 300.0
PLUGIN = ["-p", "support.spmd"]
# Markers an SPMD test's outer item (tests/mpi/test_spmd.py) carries too, for -m.
SHOWN_MARKS = ("slow",)

_agree = None  # the ranks' own duplicate of COMM_WORLD, in a job


# --- the plugin, inside a job (and its collection) ---


def _mode() -> str | None:
    return os.environ.get(MODE_ENV)


@pytest.hookimpl(trylast=True)  # after the terminal reporter is registered
def pytest_configure(config):
    """In a job: start MPI; ranks other than 0 print nothing (rank 0 speaks for all)."""
    global _agree
    if _mode() != "run":
        return
    from osu_dl_bench.runtime.start import init_mpi

    _agree = init_mpi("single").COMM_WORLD.Dup()
    if _agree.Get_rank() != 0:
        reporter = config.pluginmanager.getplugin("terminalreporter")
        if reporter is not None:
            config.pluginmanager.unregister(reporter)


def _nprocs(item) -> int:
    callspec = getattr(item, "callspec", None)
    if callspec is None or "nprocs" not in callspec.params:
        raise pytest.UsageError(
            f"{item.nodeid}: an SPMD test names the process counts it runs at with an "
            "'nprocs' parameter (pytest.mark.parametrize)"
        )
    return int(callspec.params["nprocs"])


def _timeout_s(item, config) -> float:
    """The test's pytest-timeout (its marker, else the ini's default), for its job's budget."""
    marker = item.get_closest_marker("timeout")
    if marker:
        return float(marker.args[0])
    # Tests run with no configuration of ours (tests/mpi/test_spmd_agreement.py's cases).
    return float(config.getini("timeout") or UNCONFIGURED_TIMEOUT_S)


def _shown_marks(item) -> list[str]:
    """The markers of ``item`` that its outer item carries too (``-m "not slow"``)."""
    return sorted({mark.name for mark in item.iter_markers()} & set(SHOWN_MARKS))


def pytest_collection_modifyitems(config, items):
    """Collect mode: write the manifest. A job: keep the tests of its process count."""
    if _mode() == "collect":
        manifest = [
            {
                "id": item.nodeid,
                "nprocs": _nprocs(item),
                "marks": _shown_marks(item),
                "timeout": _timeout_s(item, config),
            }
            for item in items
        ]
        Path(os.environ[MANIFEST_ENV]).write_text(json.dumps(manifest))
        return
    if _agree is None:
        return
    size = _agree.Get_size()
    dropped = [item for item in items if _nprocs(item) != size]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = [item for item in items if _nprocs(item) == size]


@pytest.fixture(autouse=True)
def _as_in_a_fresh_job():
    """Each test leaves the process as a fresh job finds it: no emulated nodes (the
    drivers' discover_topology sets them for the hierarchical algorithms bound after)."""
    yield
    from collectives.topology import set_emulated_ranks_per_node

    set_emulated_ranks_per_node(None)


def _write_line(record: dict) -> None:
    path = os.environ.get(REPORT_ENV)
    if path:
        with open(path, "a", encoding="utf-8") as report:
            report.write(json.dumps(record) + "\n")


def pytest_runtest_logstart(nodeid, location):
    """Rank 0 notes the test started: a job that dies now names it."""
    if _agree is not None and _agree.Get_rank() == 0:
        _write_line({"id": nodeid, "started": True})


def _message(report) -> str:
    if report.skipped and isinstance(report.longrepr, tuple):
        return str(report.longrepr[2])
    return report.longreprtext


def _await_peers_or_abort(report) -> None:
    """This rank failed: wait for its peers to finish the phase; if they do not within
    the grace period (stuck in a collective this rank left), report and abort the job."""
    grace_s = float(os.environ.get(GRACE_ENV, DEFAULT_GRACE_S))
    request = _agree.Ibarrier()
    deadline = time.monotonic() + grace_s
    while not request.Test():
        if time.monotonic() > deadline:
            message = (
                f"rank {_agree.Get_rank()}: {_message(report)}\n(its peers did not finish "
                f"the test within {grace_s:g} s of it: the job was aborted)"
            )
            _write_line(
                {"id": report.nodeid, "when": report.when, "outcome": "failed"}
                | {"message": message}
            )
            from mpi4py import MPI

            MPI.COMM_WORLD.Abort(1)
        time.sleep(POLL_S)


def _joint(outcomes: list[tuple[str, str]]) -> tuple[str, str]:
    """One outcome and message for every rank's (outcome, message)."""
    from osu_dl_bench.runtime.rank_agreement import joint_error

    kinds = {outcome for outcome, _ in outcomes}
    if "failed" in kinds:
        return "failed", joint_error([m if o == "failed" else None for o, m in outcomes])
    if len(kinds) > 1:
        ranks = {kind: [r for r, (o, _) in enumerate(outcomes) if o == kind] for kind in kinds}
        return "failed", f"the ranks disagree on the outcome: {ranks}"
    return outcomes[0]


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    """Every rank's report of each phase says what all ranks agreed."""
    report = yield
    if _agree is None:
        return report
    if report.failed:
        _await_peers_or_abort(report)
    else:
        from osu_dl_bench.runtime.rank_agreement import wait_politely

        wait_politely(_agree)  # ranks done sleep while the others finish (6 ranks, 2 cores)
    outcome, message = _joint(_agree.allgather((report.outcome, _message(report))))
    if outcome == "failed":
        report.outcome, report.longrepr = "failed", message
    return report


def pytest_runtest_logreport(report):
    """Rank 0 writes each test's agreed outcome once (its first failed or skipped phase,
    else the call's)."""
    if _agree is None or _agree.Get_rank() != 0:
        return
    if report.when == "call" or report.outcome != "passed":
        _write_line(
            {
                "id": report.nodeid,
                "when": report.when,
                "outcome": report.outcome,
                "message": _message(report) if report.outcome != "passed" else "",
                "duration": round(report.duration, 3),
            }
        )


# --- the outer side: collect, launch, read ---


def collect(paths: list[str], run_with_timeout, env: dict[str, str]) -> list[dict]:
    """[{'id', 'nprocs'}] of every SPMD test under ``paths``, collected without MPI."""
    import tempfile

    with tempfile.TemporaryDirectory() as scratch:
        manifest = Path(scratch) / "manifest.json"
        env = {**env, MODE_ENV: "collect", MANIFEST_ENV: str(manifest)}
        cmd = [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider"]
        result = run_with_timeout([*cmd, *PLUGIN, *paths], 300, env=env)
        if result.returncode != 0 or not manifest.exists():
            raise RuntimeError(
                f"collecting {' '.join(paths)} failed (exit {result.returncode}):\n"
                f"{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
            )
        return json.loads(manifest.read_text())


@dataclass
class Job:
    """One SPMD job's end: its exit and output, and the report lines rank 0 wrote."""

    nprocs: int
    returncode: int
    output: str
    lines: list[dict]

    def _tail(self) -> str:
        return f"exit {self.returncode}; its output ends:\n{self.output[-4000:]}"

    def verdict(self, test_id: str) -> tuple[str, str]:
        """(passed | failed | skipped, message) of one test of the job."""
        mine = [line for line in self.lines if line["id"] == test_id]
        ends = [line for line in mine if "outcome" in line]
        failed = [line for line in ends if line["outcome"] == "failed"]
        if failed:
            return "failed", "\n".join(f"({line['when']}) {line['message']}" for line in failed)
        if ends:
            return ends[-1]["outcome"], ends[-1]["message"]
        if mine:
            return "failed", f"the job at p={self.nprocs} ended during this test: {self._tail()}"
        started = [line["id"] for line in self.lines if line.get("started")]
        last = f"; the last test it started: {started[-1]}" if started else ""
        return "failed", f"the job at p={self.nprocs} never ran this test{last}: {self._tail()}"


def run_job(run_mpi, nprocs: int, args: list[str], report: Path, timeout: float, env=None) -> Job:
    """Run pytest ``args`` on ``nprocs`` ranks as one SPMD job through ``run_mpi`` (the
    tests' launcher: a timeout stops the job and raises AssertionError, kept here)."""
    env = {**(env or {}), MODE_ENV: "run", REPORT_ENV: str(report)}
    # A rank blocked in an MPI call never runs Python's signal handlers: the per-test
    # timeout inside the job uses pytest-timeout's thread method.
    pytest_args = ["-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "timeout_method=thread"]
    try:
        result = run_mpi(nprocs, [*pytest_args, *PLUGIN, *args], timeout, env)
        returncode, output = result.returncode, result.stdout + result.stderr
    except AssertionError as hung:
        returncode, output = -1, str(hung)
    text = report.read_text() if report.exists() else ""
    return Job(nprocs, returncode, output, [json.loads(line) for line in text.splitlines()])
