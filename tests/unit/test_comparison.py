"""selection.comparison: decision stability and regret of one run's (or a table's) choices
on another run, shifts between two sweeps and one scored as the other's prediction, on
hand-made medians and synthetic run directories."""

import pandas as pd
import pytest
from support.comparison import figures, medians, shifted_medians
from support.tuning import label, launch_run, make_entry, make_table

from osu_dl_bench.selection import comparison

pytestmark = pytest.mark.usefixtures("registered")


def test_a_common_shift_is_not_a_reordering():
    both = comparison.paired_points(*shifted_medians()).set_index("algorithm")
    assert both.loc["ring", "shift"] == pytest.approx(2.0)
    assert both.loc["ring", "relative"] == pytest.approx(1.0)
    assert both.loc["cma", "relative"] == pytest.approx(1.1)
    # a as the prediction of b: 1 - |100 - 200| / 200 = 0.5
    assert both.loc["native", "accuracy"] == pytest.approx(0.5)
    shifts = dict(comparison.shifts(both.reset_index()))
    assert list(shifts) == ["2", "all"]
    assert shifts["2"].moved == pytest.approx(100.0)  # every point moved
    assert shifts["2"].reordered == pytest.approx(100 / 3)  # cma alone, against its point
    assert shifts["2"].accuracy_large == pytest.approx((0.5 + 0.5 + (1 - 48 / 88)) / 3)
    assert shifts["2"].accuracy_small != shifts["2"].accuracy_small  # NaN: no small size


def test_points_of_different_buffer_kinds_are_not_paired():
    a = medians([(8, "native", 1.0)], device="cpu-registered")
    b = pd.concat([medians([(8, "native", 2.0)], device="cpu"), medians([(8, "native", 1.5)])])
    assert comparison.paired_points(a, b).empty
    b_registered = medians([(8, "native", 3.0)], device="cpu-registered")
    assert comparison.paired_points(a, b_registered)["shift"].tolist() == [3.0]


def test_the_figures_count_misses_by_the_interval():
    good = figures(20, [(1.0, 1.0, 1.0)] * 19 + [(1.08, 1.04, 1.12)])  # straddles 1.05
    assert (good.unclear, good.slower, good.median_regret, good.max_regret) == (1, 0, 1.0, 1.08)
    missed = figures(20, [(1.0, 1.0, 1.0)] * 19 + [(1.08, 1.06, 1.1)])
    assert (missed.slower, missed.unclear) == (1, 0)
    unstable = figures(18, [(1.0, 1.0, 1.0)] * 20)
    assert unstable.stability == 0.9
    assert figures(3, [(1.02, 1.0, 1.04)] * 3).median_regret == 1.02
    none = figures(0, [])
    assert (none.stability, none.unmeasured) == (0.0, 0)
    assert none.median_regret != none.median_regret  # NaN: no regret to take it over


def test_identical_runs_are_fully_stable_with_no_regret(tmp_path):
    plan = {
        1024: {"recursive_doubling": 0.9, "rabenseifner": 1.1},
        65536: {"recursive_doubling": 1.1, "rabenseifner": 0.8},
        1 << 20: {"recursive_doubling": 1.3, "rabenseifner": 1.2},
    }
    a = launch_run(tmp_path / "a", plan)
    b = launch_run(tmp_path / "b", plan)
    judged = comparison.judged_points(str(a), str(b))
    assert [j.choice for j in judged] == ["recursive_doubling", "rabenseifner", "native"]
    assert not any(j.worth_a_look for j in judged)
    found = comparison.Figures.of(judged)
    assert (found.points, found.stability, found.median_regret) == (3, 1.0, 1.0)
    assert found.slower == 0


def test_a_choice_another_run_finds_slower_is_unstable_and_a_miss(tmp_path):
    a = launch_run(tmp_path / "a", {65536: {"recursive_doubling": 0.8, "rabenseifner": 1.0}})
    b = launch_run(tmp_path / "b", {65536: {"recursive_doubling": 1.0, "rabenseifner": 0.8}})
    (judged,) = comparison.judged_points(str(a), str(b))
    assert judged.choice == "recursive_doubling" and not judged.stable
    assert judged.point.best == "rabenseifner"
    assert judged.regret.ratio == pytest.approx(1.25, rel=0.02) and judged.regret.low > 1.05
    assert judged.slower and not judged.unclear and judged.worth_a_look
    assert comparison.Figures.of([judged]).slower == 1


def test_a_table_is_judged_by_the_selectors_choice_and_twins_count_as_one(tmp_path):
    ring_0, ring_1m = label("allreduce", "ring:seg=0"), label("allreduce", "ring:seg=1M")
    b = launch_run(tmp_path / "b", {65536: {ring_1m: 0.7, "rabenseifner": 1.0}})
    # seg=0 and seg=1M are twins at 64 KiB over 2 ranks (32 KiB blocks): the same code.
    table = tmp_path / "t.json"
    make_table(make_entry(2, [(0, "ring:seg=0")])).write(table)
    (judged,) = comparison.judged_points(str(b), str(b), str(table))
    assert judged.choice == ring_1m != ring_0 and judged.stable
    assert judged.regret.ratio == 1.0
