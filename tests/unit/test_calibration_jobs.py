"""model fit's calibration jobs, run by the experiment engine (jobs.orchestrate): SIGTERM
stops the running job with everything it started and ends with 130 and one line, a job
past its limit is stopped with the message, and a sweep's run directory keeps its
completion mark (the jobs here are stand-ins: no MPI)."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from pathlib import Path

import pytest

from osu_dl_bench.commands import model
from osu_dl_bench.commands.model import FitConfig
from osu_dl_bench.errors import UsageError
from osu_dl_bench.jobs import runinfo
from osu_dl_bench.measurement.store import RunStore

# A job that starts a child of its own, says where, and waits.
PARENT_AND_CHILD = (
    "import subprocess, sys, time\n"
    "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'])\n"
    "open(sys.argv[1], 'w').write(str(child.pid))\n"
    "time.sleep(600)\n"
)


def _fit(run, timeout: float = 60.0) -> FitConfig:
    return FitConfig(str(run), "always", (2, 3), "8:64", 2, timeout, False, None, False, "off")


def _jobs(monkeypatch, body: str, *args: str) -> list[tuple[int, bool]]:
    """Each calibration job runs ``python -c body ARGS``; the (nprocs, append) it was for."""
    asked = []

    def command(cfg, run_dir, nprocs, append):
        asked.append((nprocs, append))
        return [sys.executable, "-c", body, *args]

    monkeypatch.setattr(model, "_calibration_command", command)
    return asked


def _sweep_dir(tmp_path, complete: bool):
    store = RunStore(tmp_path / "run")
    store.create()
    runinfo.record_completion(store, complete=complete)
    return store


def _live(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def test_each_count_is_one_job_in_turn_and_a_sweeps_completion_mark_stays(tmp_path, monkeypatch):
    store = _sweep_dir(tmp_path, complete=False)  # a sweep stopped early: it stays so
    asked = _jobs(monkeypatch, "print('calibrated', flush=True)")
    assert model._calibrate(_fit(store.path), store.path) == 0
    assert asked == [(2, False), (3, True)]
    assert store.read_metadata()["complete"] is False


def test_sigterm_while_calibrating_stops_the_job_and_ends_with_130(tmp_path, monkeypatch, capsys):
    store = _sweep_dir(tmp_path, complete=True)
    started = tmp_path / "child"
    _jobs(monkeypatch, PARENT_AND_CHILD, str(started))

    def terminate_once_started() -> None:
        deadline = time.monotonic() + 30
        while not (started.exists() and started.read_text()) and time.monotonic() < deadline:
            time.sleep(0.02)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=terminate_once_started, daemon=True).start()
    assert model._calibrate(_fit(store.path), store.path) == 130
    assert "interrupted: nothing was fitted" in capsys.readouterr().err
    child = int(started.read_text())
    deadline = time.monotonic() + 10
    while _live(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _live(child), "the calibration job's child outlived SIGTERM"
    assert store.read_metadata()["complete"] is True


def test_a_calibration_job_past_its_limit_is_stopped_with_the_message(tmp_path, monkeypatch):
    store = _sweep_dir(tmp_path, complete=True)
    _jobs(monkeypatch, "import time; time.sleep(600)")
    began = time.monotonic()
    with pytest.raises(UsageError, match="did not finish within 2 s"):
        model._calibrate(_fit(store.path, timeout=2.0), store.path)
    assert time.monotonic() - began < 30
    assert store.read_metadata()["complete"] is True
