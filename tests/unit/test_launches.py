"""Launches as a unit of measurement, without MPI: the records' new columns (and files
written before them), isolation groups, the order launches run in, the machine-state
check."""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

import numpy as np
import pytest
from support.sweep import sweep_point

from osu_dl_bench.errors import UsageError
from osu_dl_bench.jobs.orchestrate import launch_order
from osu_dl_bench.jobs.plan import in_group, isolation_groups
from osu_dl_bench.measurement.reference import OUTLYING_FACTOR, outlying
from osu_dl_bench.measurement.store import (
    OPTIONAL_FIELDS,
    REQUIRED_FIELDS,
    RunStore,
    format_rounds,
    round_values,
)


def _variant(name: str, backend: str) -> SimpleNamespace:
    return SimpleNamespace(algorithm=SimpleNamespace(name=name, backend=backend))


NATIVE, RING, GLOO = _variant("native", "mpi"), _variant("ring", "mpi"), _variant("gloo", "gloo")


def test_native_runs_in_every_group_and_a_backend_only_in_its_own():
    assert [in_group(v, "mpi") for v in (NATIVE, RING, GLOO)] == [True, True, False]
    assert [in_group(v, "gloo") for v in (NATIVE, RING, GLOO)] == [True, False, True]
    assert all(in_group(v, None) for v in (NATIVE, RING, GLOO))


def test_groups_are_the_mpi_librarys_first_then_the_other_backends():
    plans = [SimpleNamespace(eligible=[GLOO, RING]), SimpleNamespace(eligible=[_variant("x", "a")])]
    assert isolation_groups(plans) == ["mpi", "a", "gloo"]
    assert isolation_groups([SimpleNamespace(eligible=[])]) == []


def _keys(groups=("mpi", "gloo"), nprocs=(2, 4), launches=3):
    return [(p, k, g) for p in nprocs for k in range(1, launches + 1) for g in groups]


def test_launch_k_of_every_job_runs_before_any_launch_k_plus_one():
    order = launch_order(3, (2, 4), _keys(), seed=7)
    assert sorted(order) == sorted(_keys())
    assert [key[1] for key in order] == sorted(key[1] for key in order)
    assert order == launch_order(3, (2, 4), _keys(), seed=7)  # the recorded seed replays it


def test_the_groups_order_is_shuffled_within_a_launch():
    firsts = {tuple(launch_order(3, (2, 4), _keys(), seed)[:2]) for seed in range(20)}
    assert len(firsts) > 1  # not always the MPI library's group first


def test_per_round_cells_round_trip_and_stay_text(tmp_path):
    store = RunStore(tmp_path)
    one = replace(sweep_point(8), round_us="12.5")
    many = replace(sweep_point(16), round_us=format_rounds(np.array([1.0, 2.25])))
    store.append([one, many])
    frame, notes = store.read()
    assert not notes and frame["round_us"].tolist() == ["12.5", "1.000 2.250"]
    assert round_values(frame["round_us"][1]).tolist() == [1.0, 2.25]
    assert round_values("").size == 0 and round_values(float("nan")).size == 0


def _legacy_file(tmp_path):
    """A results file of the layout before launches: the required columns only."""
    row = {name: getattr(sweep_point(8), name) for name in REQUIRED_FIELDS}
    lines = [",".join(REQUIRED_FIELDS), ",".join("" if v is None else str(v) for v in row.values())]
    (tmp_path / "results.csv").write_text("\n".join(lines) + "\n")
    return RunStore(tmp_path)


def test_a_file_from_before_launches_reads_with_the_defaults(tmp_path):
    frame, notes = _legacy_file(tmp_path).read()
    assert not notes and len(frame) == 1
    for name, default in OPTIONAL_FIELDS.items():
        assert frame[name].tolist() == [default], name
    assert frame["group"].tolist() == ["shared"]


def test_a_file_from_before_launches_cannot_be_continued(tmp_path):
    store = _legacy_file(tmp_path)
    with pytest.raises(UsageError, match="written before launches were recorded .* new directory"):
        store.check_appendable()
    RunStore(tmp_path / "fresh").check_appendable()  # nothing there yet: fine


def test_a_point_is_outlying_when_either_reference_exceeds_the_typical_by_the_factor():
    typical = np.array([100.0, 2.0])
    assert not outlying(typical * (OUTLYING_FACTOR - 0.1), typical)
    assert outlying(np.array([100.0, 2.0 * OUTLYING_FACTOR + 0.1]), typical)
    assert outlying(np.array([100.0 * OUTLYING_FACTOR + 1, 2.0]), typical)


def test_plots_show_each_candidate_from_its_own_group_over_its_launches():
    import pandas as pd

    from osu_dl_bench.commands.plot import over_launches

    rows = pd.DataFrame(
        [
            {**vars(sweep_point(8, median)), "launch": launch, "group": group, "state": state}
            for median, launch, group, state in [
                (10.0, 1, "mpi", "normal"),
                (30.0, 2, "mpi", "outlying"),
                (12.0, 2, "mpi", "remeasured"),  # supersedes the outlying row of launch 2
                (90.0, 1, "gloo", "normal"),  # native beside gloo's threads: not shown
            ]
        ]
    )
    (native,) = over_launches(rows).itertuples()
    assert native.algorithm == "native" and native.median_us == 11.0


def test_the_mpi_settings_hint_names_users_values_and_not_the_suites_own(monkeypatch):
    from osu_dl_bench.jobs.orchestrate import _library_settings_note
    from osu_dl_bench.runtime.launcher import OVERSUBSCRIBED_CVARS

    name = next(iter(OVERSUBSCRIBED_CVARS))
    monkeypatch.setenv(name, OVERSUBSCRIBED_CVARS[name])
    assert name not in _library_settings_note()
    monkeypatch.setenv(name, "bogus")
    assert f"{name}=bogus" in _library_settings_note()
