"""Hostile input to the launches' records and options: per-round cells, launch, group and
state values a sweep never writes, statistics that cannot be times, a run whose native
ran only beside another backend, hidden --launch/--group outside a launched job. Each
gives one message naming what was expected and what came, never a traceback or a table
decided on them."""

from __future__ import annotations

import csv
import shutil
from dataclasses import replace

import numpy as np
import pytest
from support.tuning import launch_rows, launch_run, machine_states, scaled, write_run

from osu_dl_bench.cli import build_parser
from osu_dl_bench.commands.compare import run_compare, shift_report
from osu_dl_bench.commands.compare_cli import config_from_args as compare_config
from osu_dl_bench.errors import UsageError
from osu_dl_bench.measurement.store import RunStore
from osu_dl_bench.selection import build_table
from osu_dl_bench.selection.comparison import judged_points, measured_points, paired_points
from osu_dl_bench.selection.paired import Series, launch_of, paired_ratio

pytestmark = pytest.mark.usefixtures("registered")


def _run(tmp_path, factor=0.9):
    """One size: clean native and recursive_doubling ``factor`` times its time, paired."""
    return launch_run(tmp_path / "run", {4096: {"recursive_doubling": factor}})


def _edit(run, where, **cells):
    """Set ``cells`` on the rows for which ``where(row)`` holds, as a hand edit would."""
    path = run / "results.csv"
    with path.open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    for row in rows:
        if where(row):
            row.update(cells)
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return run


def _candidate(row):
    return row["algorithm"] == "recursive_doubling"


@pytest.mark.parametrize(
    ("column", "cell", "said"),
    [
        ("round_us", "abc 12 13", "round_us holds 'abc', expected a time in µs"),
        ("round_us", "nan 12", "round_us holds 'nan', expected a positive finite time"),
        ("round_us", "nan", "round_us holds 'nan', expected a positive finite time"),
        ("ref_allreduce_us", "NA", "ref_allreduce_us holds 'NA', expected a time in µs"),
        ("round_us", "inf 12", "round_us holds 'inf', expected a positive finite time"),
        ("round_us", "-1 12", "round_us holds '-1', expected a positive finite time"),
        ("round_us", "0 12", "round_us holds '0', expected a positive finite time"),
        ("ref_copy_us", "x", "ref_copy_us holds 'x', expected a time in µs"),
        ("launch", "0", "launch '0' is not above 0"),
        ("launch", "-2", "launch '-2' is not above 0"),
        ("launch", "1.5", "launch '1.5' is not a whole number"),
        ("launch", "99999999999999999999", "is not a whole number"),
        ("launch", "1e30", "is not a whole number"),
        ("group", "g\x07; rm -rf /", "is not a backend's name"),
        ("state", "bogus", "state 'bogus' is not one of normal, outlying, remeasured"),
        ("median_us", "-1", "median_us '-1.0' is not above 0"),
        ("median_us", "0", "median_us '0.0' is not above 0"),
    ],
)
def test_a_hostile_cell_drops_its_row_with_a_message_naming_it(tmp_path, column, cell, said):
    run = _edit(_run(tmp_path), _candidate, **{column: cell})
    frame, notes = RunStore(run).read()
    assert len(notes) == 1 and said in notes[0]
    assert "recursive_doubling" not in set(frame["algorithm"])
    assert frame["launch"].min() >= 1  # nothing wrapped around int64
    (entry,) = build_table(run, "t")[0].entries  # the rest still decides, no traceback
    assert entry.points[0]["chosen"] == "native"


def test_a_legacy_negative_median_never_wins(tmp_path):
    rows = launch_rows("allreduce", "native", 64, [[10.0] * 5])
    fake = replace(launch_rows("allreduce", "ring", 64, [[10.0] * 5])[0], median_us=-1.0)
    legacy = [replace(r, round_us="", q1_us=-2.0, q3_us=-0.5) for r in [fake]]
    run = write_run(tmp_path / "run", rows + legacy)
    (entry,) = build_table(run, "t")[0].entries
    assert [p["chosen"] for p in entry.points] == ["native"]


def test_every_row_dropped_says_why_instead_of_no_results_yet(tmp_path):
    run = _edit(_run(tmp_path), lambda row: True, launch="0")
    with pytest.raises(UsageError, match=r"no usable results: .*launch '0' is not above 0"):
        build_table(run, "t")


def test_native_only_beside_another_backend_is_no_reference(tmp_path):
    """A run of gloo's launches only: native there ran beside gloo's threads."""
    states = machine_states(launches=3, rounds=20)
    rows = launch_rows("allreduce", "native", 4096, states, group="gloo")
    rows += launch_rows("allreduce", "gloo", 4096, scaled(states, 0.5))
    run = write_run(tmp_path / "run", rows)
    with pytest.raises(UsageError, match="native was measured only in the launches of gloo"):
        build_table(run, "t")
    with pytest.raises(UsageError, match="no point could be decided as tune decides"):
        judged_points(str(run), str(run))


def test_one_round_cannot_place_a_candidate_below_native():
    native = Series("mpi", (launch_of(1, [10.0, 11.0, 9.0], 10.0, 9.5, 10.5, 3),))
    lone = Series("mpi", (launch_of(1, [1.0], 1.0, 1.0, 1.0, 1),))
    ratio = paired_ratio(lone, native, "point")
    assert ratio.ratio == pytest.approx(0.1) and not ratio.below_one
    other = Series("gloo", (launch_of(1, [1.0], 1.0, 1.0, 1.0, 1),))
    assert not paired_ratio(other, native, "point").below_one


def test_a_time_of_zero_in_another_group_is_no_error():
    native = Series("mpi", (launch_of(1, [0.0, 0.0], 0.0, 0.0, 0.0, 2),))
    gloo = Series("gloo", (launch_of(1, [np.nan], 5.0, 5.0, 5.0, 1),))
    assert paired_ratio(gloo, native, "point") is None


def test_a_report_without_large_sizes_shows_a_dash_not_nan(tmp_path):
    run = str(_run(tmp_path))
    both = paired_points(measured_points(run), measured_points(run))
    text = shift_report(both, run, run)
    assert "nan" not in text and " - " in text


def test_rows_measured_in_other_rounds_of_one_launch_are_not_paired_by_round():
    """sweep --resume re-measures a dropped row alone: its rounds ran apart from native's
    (their stored machine-state cells differ), so only the launch's medians compare."""
    states = machine_states(launches=1, rounds=20)[0]
    native = Series("mpi", (launch_of(1, states, np.median(states), 0, 0, 20, "1 2 | 3 4"),))
    times = scaled([states], 0.9)[0]

    def ratio(rounds_id):
        lone = launch_of(1, times, np.median(times), 0, 0, 20, rounds_id)
        return paired_ratio(Series("mpi", (lone,)), native, "point")

    assert ratio("1 2 | 3 4").below_one and ratio("").below_one  # the same rounds
    apart = ratio("5 6 | 7 8")
    assert apart.ratio == pytest.approx(0.9, rel=0.05) and not apart.below_one


@pytest.mark.parametrize(
    ("nprocs", "said"),
    [("abc", "--nprocs abc: expected counts"), ("4", "share no measured point at p = 4")],
)
def test_compare_names_its_own_nprocs_option(tmp_path, nprocs, said):
    run = str(_run(tmp_path))
    other = str(shutil.copytree(run, tmp_path / "other"))  # compare refuses a run with itself
    with pytest.raises(UsageError, match=said):
        run_compare(
            compare_config(build_parser().parse_args(["compare", run, other, "--np", nprocs]))
        )
