"""Launch real ``mpiexec -n N`` jobs from tests, with a hard timeout so a deadlock fails."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

from osu_dl_bench.runtime import OVERSUBSCRIBED_CVARS

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent
MPIEXEC = shutil.which("mpiexec", path=str(Path(sys.executable).parent)) or shutil.which("mpiexec")


def mpi_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """Environment for test jobs: the MPICH settings that keep oversubscribed runs fast."""
    env = dict(os.environ)
    env.update(OVERSUBSCRIBED_CVARS)
    # Drivers and test files run as scripts import mpirun and support from tests/.
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(TESTS), env.get("PYTHONPATH")]))
    env.update(extra or {})
    return env


def run_with_timeout(
    cmd: list[str], timeout: float, env: dict[str, str] | None = None, cwd: Path | None = REPO
) -> subprocess.CompletedProcess:
    """Run ``cmd`` in its own process group; on timeout kill the whole group and fail
    with the command and its output, so a deadlock is a failure, never a hung suite."""
    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=cwd,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        raise AssertionError(
            f"deadlock or hang: {' '.join(map(str, cmd))} did not finish within {timeout:.0f} s"
            f"\nstdout:\n{out[-3000:]}\nstderr:\n{err[-3000:]}"
        ) from None
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def run_mpi(
    nprocs: int, args: list[str], timeout: float = 120, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    """Run ``mpiexec -n nprocs python args...``; a timeout kills the job and fails."""
    assert MPIEXEC, "mpiexec not found: install the mpich extra (pip install -e '.[mpich]')"
    cmd = [MPIEXEC, "-n", str(nprocs), sys.executable, *args]
    return run_with_timeout(cmd, timeout, mpi_env(env))


def run_cli(nprocs: int, cli_args: list[str], **kwargs) -> subprocess.CompletedProcess:
    """Run ``osu-dl-bench`` under mpiexec."""
    return run_mpi(nprocs, ["-m", "osu_dl_bench", *cli_args], **kwargs)


def driver_summary(result: subprocess.CompletedProcess) -> dict:
    """The ``SUMMARY {json}`` line a test driver ends with; fails with its output if the
    job failed or printed none."""
    lines = [ln for ln in result.stdout.splitlines() if ln.startswith("SUMMARY ")]
    assert result.returncode == 0 and lines, (
        f"driver failed (exit {result.returncode})\n"
        f"{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    )
    return json.loads(lines[-1].removeprefix("SUMMARY "))
