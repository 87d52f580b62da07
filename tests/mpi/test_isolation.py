"""Isolation on real launches: a backend that starts threads (gloo) is measured in launches
of its own, with native beside it; the MPI library's launches never bind it, so native's
clean rows come from processes with as many threads as a sweep without gloo; every launch
of every group is recorded with the order it ran in."""

from __future__ import annotations

import json
import sys

import pytest
from mpirun import mpi_env, run_with_timeout

from collectives.registry import NULL_CONTROL, NULL_CONTROL_APART
from osu_dl_bench.jobs.plan import NULL_GROUP
from osu_dl_bench.measurement.store import RunStore, round_values

pytest.importorskip("torch")  # gloo comes with torch

SWEEP = ["--np", "2", "--collectives", "allreduce", "-m", "8:64", "--budget", "0.1"]


def _sweep(run_dir, algorithms: str, launches: int):
    cmd = [sys.executable, "-m", "osu_dl_bench", "sweep", *SWEEP, "-a", algorithms]
    cmd += ["--launches", str(launches), "-o", str(run_dir)]
    res = run_with_timeout(cmd, 600, mpi_env())
    assert res.returncode == 0, res.stdout + res.stderr
    return RunStore(run_dir).load(), json.loads((run_dir / "metadata.json").read_text())


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    base = tmp_path_factory.mktemp("isolation")
    return _sweep(base / "both", "native,gloo", 2), _sweep(base / "native", "native", 1)


def test_gloo_is_measured_only_in_its_own_launches_with_native_beside_it(runs):
    (frame, _), _ = runs
    frame = frame[frame["state"] != "remeasured"]
    by_group = frame.groupby(["group", "algorithm"])["launch"].apply(sorted).to_dict()
    sizes = frame["size_bytes"].nunique()
    every = [1] * sizes + [2] * sizes
    # The null control beside native in rounds, and apart in launches of its own: gloo is
    # compared with native across launches, so its null counterpart is too.
    assert by_group == {
        ("gloo", "gloo"): every,
        ("gloo", "native"): every,
        ("gloo", NULL_CONTROL): every,
        ("mpi", "native"): every,
        ("mpi", NULL_CONTROL): every,
        (NULL_GROUP, NULL_CONTROL_APART): every,
    }


def test_each_row_keeps_its_rounds_and_the_machine_state_of_each_round(runs):
    (frame, _), _ = runs
    for row in frame.itertuples():
        rounds = round_values(row.round_us)
        assert len(rounds) == row.rounds and (rounds > 0).all(), row
        for cell in (row.ref_copy_us, row.ref_allreduce_us):
            assert len(round_values(cell)) == row.rounds, row
    # rounds of one launch are paired: every candidate has the same number there
    counts = frame.groupby(["group", "launch", "size_bytes", "state"])["rounds"].nunique()
    assert (counts == 1).all()


def test_the_mpi_librarys_launches_never_start_gloos_threads(runs):
    (_, both), (_, alone) = runs
    launches = both["jobs"]["2"]["launches"]
    assert sorted(launches) == ["1/gloo", "1/mpi", "1/null", "2/gloo", "2/mpi", "2/null"]
    clean = alone["jobs"]["2"]["launches"]["1/mpi"]["threads"]
    assert [launches[k]["threads"] for k in ("1/mpi", "2/mpi")] == [clean, clean]
    assert all(launches[k]["threads"] > clean for k in ("1/gloo", "2/gloo")), launches


def test_the_order_of_the_launches_is_recorded(runs):
    (_, both), _ = runs
    (order,) = both["launch_orders"]
    groups = ("gloo", "mpi", "null")
    assert sorted(order["order"]) == [f"p2 {k}/{g}" for k in (1, 2) for g in groups]
    assert [entry.split()[1][0] for entry in order["order"]] == ["1"] * 3 + ["2"] * 3
