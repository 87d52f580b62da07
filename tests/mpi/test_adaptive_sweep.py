"""An adaptive sweep's focused launches, through the orchestrator (hard timeouts)."""

from __future__ import annotations

import json
import sys

import pandas as pd
from mpirun import mpi_env, run_with_timeout

from osu_dl_bench.measurement.store import RunStore

BASE = ["--np", "2", "--collectives", "allreduce", "-m", "8:64", "--no-calibration"]
ALGS = ["-a", "native,ring:seg=0,recursive_doubling,reduce_bcast"]


def _sweep(args: list[str], timeout: float = 300):
    cmd = [sys.executable, "-m", "osu_dl_bench", "sweep", *args]
    return run_with_timeout(cmd, timeout, mpi_env())


def test_a_focused_launch_measures_exactly_its_focus_and_skips_native_alone(tmp_path):
    run = tmp_path / "run"
    first = _sweep([*BASE, *ALGS, "--budget", "0.04", "--launches", "1", "-o", str(run)])
    assert first.returncode == 0, first.stderr
    focus = [(2, "allreduce", 16, "native"), (2, "allreduce", 16, "recursive_doubling")]
    focus += [(2, "allreduce", 64, "native")]  # native alone: nothing to compare, skipped
    RunStore(run).write_focus(2, focus, ["a test's focus"])
    more = [*BASE, *ALGS, "--budget", "0.08", "--launches", "2", "--resume", "-o", str(run)]
    second = _sweep(more)
    assert second.returncode == 0, second.stderr
    rows = RunStore(run).load()
    launch_two = rows[rows["launch"] == 2]
    got = sorted(zip(launch_two["size_bytes"], launch_two["algorithm"], strict=True))
    assert got == [(16, "native"), (16, "recursive_doubling")]
    assert set(rows[rows["launch"] == 1]["algorithm"]) == {
        "native",
        "ring:seg=0",
        "recursive_doubling",
        "reduce_bcast",
    }


def test_adaptive_adds_launches_only_where_the_focus_file_says_and_why(tmp_path):
    run = tmp_path / "run"
    args = [*BASE, *ALGS, "--budget", "0.06", "--launches", "2", "--adaptive", "4"]
    done = _sweep([*args, "-o", str(run)], timeout=400)
    assert done.returncode == 0, done.stderr
    rows = RunStore(run).load()
    assert set(rows["launch"]) >= {1, 2}
    focus_path = run / "focus.json"
    extra = rows[rows["launch"] > 2]
    if not focus_path.exists():
        assert extra.empty and "every point decided after 2 launches" in done.stdout
        return
    launches = json.loads(focus_path.read_text())["launches"]
    for launch, entry in launches.items():
        wanted = {(s, a) for _, _, s, a in entry["points"]}
        mine = rows[rows["launch"] == int(launch)]
        got = set(zip(mine["size_bytes"], mine["algorithm"], strict=True))
        assert got <= wanted and entry["reasons"]
        assert all("the choice may still lose" in reason for reason in entry["reasons"])
    assert pd.Series(extra["launch"]).max() <= 4
