"""An adaptive sweep's focused launches, through the orchestrator (hard timeouts)."""

from __future__ import annotations

import json
import sys

import pandas as pd
import pytest
from mpirun import mpi_env, run_with_timeout

from collectives.registry import NULL_CONTROL
from osu_dl_bench.measurement.store import RunStore

BASE = ["--np", "2", "--collectives", "allreduce", "-m", "8:64", "--no-calibration"]
ALGS = ["-a", "native,ring:seg=0,recursive_doubling,reduce_bcast"]


def _sweep(args: list[str], timeout: float = 300, cache=None):
    cmd = [sys.executable, "-m", "osu_dl_bench", "sweep", *args]
    return run_with_timeout(cmd, timeout, mpi_env({"XDG_CACHE_HOME": str(cache)} if cache else {}))


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
        NULL_CONTROL,
        "ring:seg=0",
        "recursive_doubling",
        "reduce_bcast",
    }


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_adaptive_screens_once_stores_its_pool_and_a_second_sweep_screens_with_it(tmp_path):
    cache, args = tmp_path / "cache", [*BASE, *ALGS, "--budget", "0.18", "--adaptive", "4"]
    run = tmp_path / "run"
    done = _sweep([*args, "-o", str(run)], timeout=400, cache=cache)
    assert done.returncode == 0, done.stderr
    assert "no stored launch-variance pool for hosts" in done.stdout
    assert "launch-variance pool stored in" in done.stdout
    rows = RunStore(run).load()
    measured = [_measured(rows, k) for k in (1, 2)]
    assert measured[0] == measured[1] and len(measured[0]) == 20  # 4 sizes x 5 (null incl.)
    _focused_as_recorded(run, rows, max_launch=4)
    again = tmp_path / "again"
    done = _sweep([*args, "-o", str(again)], timeout=400, cache=cache)
    assert done.returncode == 0, done.stderr
    assert "launch 1 judged with the stored launch-variance pool" in done.stdout
    assert "launch 2 measures every candidate" not in done.stdout
    rows = RunStore(again).load()
    # Launch 2 is a focused one (only where a point was open after the screening).
    assert len(_measured(rows, 1)) == 20
    focus = RunStore(again).read_focus()
    assert 2 in focus or "every point settled after 1 launches" in done.stdout
    _focused_as_recorded(again, rows, max_launch=4)


def _measured(rows, launch: int) -> set:
    """The (size, candidate) pairs a launch measured."""
    mine = rows[rows["launch"] == launch]
    return set(zip(mine["size_bytes"], mine["algorithm"], strict=True))


def _focused_as_recorded(run, rows, max_launch: int) -> None:
    """Each focused launch measured its focus only, each with its reasons."""
    focus_path = run / "focus.json"
    launches = json.loads(focus_path.read_text())["launches"] if focus_path.exists() else {}
    for launch, entry in launches.items():
        wanted = {(s, a) for _, _, s, a in entry["points"]}
        mine = rows[rows["launch"] == int(launch)]
        got = set(zip(mine["size_bytes"], mine["algorithm"], strict=True))
        assert got <= wanted and entry["reasons"]
        assert all("the choice may still lose" in reason for reason in entry["reasons"])
    assert pd.Series(rows["launch"]).max() <= max_launch


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_adaptive_after_two_launches_everywhere_adds_only_focused_ones(tmp_path):
    run = tmp_path / "run"
    args = [*BASE, *ALGS, "--budget", "0.06", "--launches", "2", "--adaptive", "4"]
    done = _sweep([*args, "-o", str(run)], timeout=400, cache=tmp_path / "cache")
    assert done.returncode == 0, done.stderr
    rows = RunStore(run).load()
    assert _measured(rows, 1) == _measured(rows, 2)
    if not (run / "focus.json").exists():
        assert rows[rows["launch"] > 2].empty
        assert "every point settled after 2 launches" in done.stdout
    _focused_as_recorded(run, rows, max_launch=4)
