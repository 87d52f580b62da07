"""Launch real ``mpiexec -n N`` jobs from tests through the package's job launcher
(osu_dl_bench.jobs.launch), with a hard timeout so a deadlock fails."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from osu_dl_bench.errors import UsageError
from osu_dl_bench.jobs import launch
from osu_dl_bench.runtime.launcher import OVERSUBSCRIBED_CVARS

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent


def _find_mpiexec() -> str | None:
    try:
        return launch.find_mpiexec()
    except UsageError:
        return None


MPIEXEC = _find_mpiexec()


def mpi_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """Environment for test jobs: the MPICH settings that keep oversubscribed runs fast."""
    extra = dict(extra or {})
    # Drivers and test files run as scripts import mpirun and support from tests/, and the
    # packages from this checkout (not wherever an editable install points): kept ahead
    # of whatever PYTHONPATH the environment or the test gives.
    given = extra.pop("PYTHONPATH", os.environ.get("PYTHONPATH"))
    path = os.pathsep.join(filter(None, [str(TESTS), str(REPO), given]))
    return launch.mpi_environment(extra={**OVERSUBSCRIBED_CVARS, **extra, "PYTHONPATH": path})


def run_with_timeout(
    cmd: list[str], timeout: float, env: dict[str, str] | None = None, cwd: Path | None = REPO
) -> subprocess.CompletedProcess:
    """Run ``cmd`` as a job of its own; on timeout stop its whole process group and fail
    with the command and its output, so a deadlock is a failure, never a hung suite."""
    try:
        return launch.run(cmd, timeout, env=env, cwd=cwd)
    except subprocess.TimeoutExpired as hung:
        out, err = hung.output or "", hung.stderr or ""
        raise AssertionError(
            f"deadlock or hang: {' '.join(map(str, cmd))} did not finish within {timeout:.0f} s"
            f"\nstdout:\n{out[-3000:]}\nstderr:\n{err[-3000:]}"
        ) from None


def run_mpi(
    nprocs: int, args: list[str], timeout: float = 120, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    """Run ``mpiexec -n nprocs python args...``; a timeout kills the job and fails."""
    assert MPIEXEC, "mpiexec not found: install the mpich extra (pip install -e '.[mpich]')"
    return run_with_timeout(launch.mpi_command(nprocs, args), timeout, mpi_env(env))


def run_cli(nprocs: int, cli_args: list[str], **kwargs) -> subprocess.CompletedProcess:
    """Run ``osu-dl-bench`` under mpiexec."""
    return run_mpi(nprocs, ["-m", "osu_dl_bench", *cli_args], **kwargs)


def start_cli(
    cli_args: list[str], stdout: int = subprocess.PIPE, stderr: int = subprocess.PIPE
) -> subprocess.Popen:
    """Start ``osu-dl-bench ARGS`` (a command that launches its own jobs, as sweep does)
    in a session of its own, for a test that follows it and stops its process group."""
    cmd = [sys.executable, "-m", "osu_dl_bench", *cli_args]
    return launch.start(cmd, mpi_env(), REPO, stdout, stderr)


def driver_summary(result: subprocess.CompletedProcess) -> dict:
    """The ``SUMMARY {json}`` line a test driver ends with; fails with its output if the
    job failed or printed none."""
    lines = [ln for ln in result.stdout.splitlines() if ln.startswith("SUMMARY ")]
    assert result.returncode == 0 and lines, (
        f"driver failed (exit {result.returncode})\n"
        f"{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    )
    return json.loads(lines[-1].removeprefix("SUMMARY "))
