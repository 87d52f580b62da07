"""Stall reports on real sweeps: a rank stopped with SIGSTOP mid-sweep is named from the
heartbeats, the run directory keeps the report, and --resume completes the sweep; a run
directory where heartbeats cannot be written sweeps without them, with one warning."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from mpirun import mpi_env, run_with_timeout, start_cli
from support.sweep import difference, expected_rows, stored_rows

from osu_dl_bench.measurement import heartbeat
from osu_dl_bench.measurement.store import RunStore

STALL_TIMEOUT = 6
SIZES = [8 << k for k in range(14)]  # 8 B .. 64 KiB
ARGS = [
    "--np", "3", "--collectives", "allreduce", "-a", "native,ring", "-m", "8:64K",
    "--budget", "0.3", "--launches", "1", "--stall-timeout", str(STALL_TIMEOUT),
]  # fmt: skip


def _sweep(args: list[str], timeout: float) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "osu_dl_bench", "sweep", *args]
    return run_with_timeout(cmd, timeout, mpi_env())


class Watched:
    """An orchestrator whose stderr lines are kept with the time each arrived."""

    def __init__(self, args: list[str]) -> None:
        self.proc = start_cli(["sweep", *args], stdout=subprocess.DEVNULL)
        self.lines: list[tuple[float, str]] = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        for line in self.proc.stderr:
            self.lines.append((time.monotonic(), line))

    def first(self, text: str) -> float | None:
        """When the first line holding ``text`` arrived."""
        return next((at for at, line in self.lines if text in line), None)

    def finish(self, timeout: float) -> str:
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            raise AssertionError(f"the sweep did not end: {self.text()}") from None
        self.reader.join(10)
        return self.text()

    def text(self) -> str:
        return "".join(line for _, line in self.lines)


def _rank_pid(run_dir: Path, rank: int, proc: subprocess.Popen) -> int:
    """The pid of ``rank``, from its heartbeat, once the sweep has stored a few rows."""
    results, deadline = run_dir / "results.csv", time.monotonic() + 300
    while time.monotonic() < deadline and proc.poll() is None:
        if results.exists() and len(results.read_text().splitlines()) > 6:
            (folder,) = (run_dir / "heartbeats").iterdir()
            beat = heartbeat.read(folder / heartbeat.file_name(rank), rank)
            assert beat.problem is None, beat
            return beat.pid
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    raise AssertionError(f"no rows appeared: {proc.communicate()}")


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_rank_stopped_mid_sweep_is_named_and_resume_completes(tmp_path):
    run_dir = tmp_path / "run"
    args = [*ARGS, "-o", str(run_dir)]
    sweep = Watched(args)
    pid = _rank_pid(run_dir, 2, sweep.proc)
    os.kill(pid, signal.SIGSTOP)
    stopped = time.monotonic()
    try:
        err = sweep.finish(timeout=120)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)
    assert sweep.proc.returncode == 1, err
    # How soon it is named is measured by scripts/stall_check.py, not asserted here.
    named = sweep.first("not responding (liveness tick standing still")
    assert named is not None and named > stopped, err
    assert "rank 2 (" in err and f"pid {pid}): last completed allreduce" in err, err
    assert "stopped responding" in err and "(its process is stopped)" in err, err
    # A rank held up by the stopped one may be named beside it ("rank 0 never arrived at
    # ..."), as it was when the machine was loaded: the stopped rank comes first.
    assert "was stopped: rank 2 stopped responding;" in err, err
    assert "the points measured so far are kept" in err, err
    (stall,) = RunStore(run_dir).read_metadata()["stalls"]
    assert stall["not_responding"] == [2] and stall["nprocs"] == 3, stall
    assert stall["ranks"][2]["pid"] == pid and stall["ranks"][2]["process"] == "stopped"
    assert not (run_dir / "heartbeats").exists(), "the job's heartbeats outlived it"
    before = stored_rows(RunStore(run_dir).load())

    res = _sweep([*args, "--resume"], timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
    rows = stored_rows(RunStore(run_dir).load())
    assert len(rows) == len(set(rows)), "resume measured a finished point again"
    expected = expected_rows([3], ["allreduce"], SIZES, ["native", "ring"])
    assert set(rows) == expected and len(before) < len(expected), difference(set(rows), expected)
    meta = RunStore(run_dir).read_metadata()
    assert meta["complete"] is True and len(meta["stalls"]) == 1


def test_a_run_directory_without_room_for_heartbeats_sweeps_with_one_warning(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "heartbeats").write_text("a file where the heartbeats' folder would go")
    args = ["--np", "2,3", "-a", "native", "-m", "8:8", "--budget", "0.02", "--launches", "2"]
    res = _sweep([*args, "--collectives", "allreduce", "-o", str(run_dir)], timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
    assert res.stderr.count("warning: the jobs run without heartbeats") == 1, res.stderr
    assert "a stall will be reported without its ranks' steps" in res.stderr
    assert len(RunStore(run_dir).load()) == 8  # p = 2, 3; 2 launches; native and its null
    assert json.loads((run_dir / "metadata.json").read_text())["complete"] is True
