"""selection.comparison: decision stability (over all candidates), regret (median, mean,
max) and choices slower than native of one run's (or a table's) choices on another run,
captured speedup of a run's choices scored on a referee or its held-out launches, shifts
between two sweeps and one scored as the other's prediction, on hand-made medians and
synthetic run directories."""

import math

import pandas as pd
import pytest
from support.comparison import figures, medians, shifted_medians
from support.tuning import decision, label, launch_run, make_entry, make_table

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


def test_stability_counts_the_tie_set_over_all_candidates_not_only_the_eligible():
    # ring in B: 0.7x native, but too uncertain to be eligible (P(> 5% slower) > the risk):
    # B keeps native, and ring cannot be told from the fastest: a choice of ring is stable.
    point = decision(1 << 20, {"ring:seg=0": (0.7, 0.3, 2.5)})
    assert point.tie_set == ("native",) and set(point.equivalent) == {"native", "ring:seg=0"}
    judged = comparison.judge(point, "ring:seg=0")
    assert judged.stable
    assert comparison.Figures.of([judged]).stability == 1.0
    # a clear win over native: keeping native is not stable
    clear = decision(1 << 20, {"ring:seg=0": (0.5, 0.45, 0.55)})
    assert not comparison.judge(clear, "native").stable


def test_the_mean_regret_is_the_arithmetic_mean_of_the_ratio():
    found = figures(3, [(1.0, 1.0, 1.0), (1.0, 1.0, 1.0), (1.06, 1.0, 1.12)])
    assert found.mean_regret == pytest.approx(1.02)
    assert found.median_regret == 1.0
    assert figures(0, []).mean_regret != figures(0, []).mean_regret  # NaN: no regret


def test_a_choice_slower_than_native_is_counted_by_its_interval():
    point = decision(4096, {"ring:seg=0": (1.2, 1.1, 1.3), "rabenseifner": (1.08, 0.9, 1.3)})
    slow, unclear, native = (
        comparison.judge(point, name) for name in ("ring:seg=0", "rabenseifner", "native")
    )
    found = comparison.Figures.of([slow, unclear, native])
    assert found.slower_than_native == 1 and len(found.to_native) == 3
    assert comparison.Figures.of([comparison.judge(point, "gloo")]).to_native == ()


def test_captured_speedup_scores_b_choices_on_a_referee_run(tmp_path):
    b = launch_run(tmp_path / "b", {1 << 20: {"recursive_doubling": 0.6, "rabenseifner": 0.9}})
    # R also measured 4 MiB, which B did not: no choice of B's to score there
    r = launch_run(
        tmp_path / "r",
        {
            1 << 20: {"recursive_doubling": 0.9, "rabenseifner": 0.6},
            1 << 22: {"recursive_doubling": 0.5},
        },
    )
    scored = comparison.scored_choices(str(b), str(r))
    assert scored.decided_on == str(b) and scored.scored_on == f"the referee {r}"
    (judged,) = scored.judged
    assert judged.choice == "recursive_doubling" and judged.point.best == "rabenseifner"
    captured = scored.captured()
    assert (captured.points, captured.unmeasured) == (1, 0)
    assert captured.share == pytest.approx(math.log(0.9) / math.log(0.6), abs=0.05)
    assert judged.regret.ratio == pytest.approx(1.5, rel=0.05)
    # the same choices on a referee that agrees with B take the whole gain
    same = launch_run(
        tmp_path / "same", {1 << 20: {"recursive_doubling": 0.6, "rabenseifner": 0.9}}
    )
    assert comparison.scored_choices(str(b), str(same)).captured().share == pytest.approx(1.0)


def test_the_judged_side_s_own_choices_are_scored_on_the_referee_too(tmp_path):
    # A chose rabenseifner, B recursive_doubling; R agrees with A: A takes the whole gain
    # there, B's choices (the figure above) only part of it.
    a = launch_run(tmp_path / "a", {1 << 20: {"recursive_doubling": 0.9, "rabenseifner": 0.6}})
    b = launch_run(tmp_path / "b", {1 << 20: {"recursive_doubling": 0.6, "rabenseifner": 0.9}})
    r = launch_run(tmp_path / "r", {1 << 20: {"recursive_doubling": 0.9, "rabenseifner": 0.6}})
    own = comparison.judged_on_referee(comparison.decided_points(str(a)), str(r))
    ((judged,),) = [own.judged]
    assert judged.choice == "rabenseifner" and own.captured().share == pytest.approx(1.0)
    assert comparison.scored_choices(str(b), str(r)).captured().share < 0.5
    # a referee that measured a size RUN_B did not: scored at RUN_B's points only
    wider = launch_run(
        tmp_path / "wider",
        {1 << 20: {"rabenseifner": 0.6}, 1 << 22: {"rabenseifner": 0.6}},
    )
    decided_a, decided_b = (comparison.decided_points(str(run)) for run in (a, b))
    own = comparison.judged_on_referee(decided_a, str(wider), among=decided_b)
    assert [j.point.size for j in own.judged] == [1 << 20]


def test_without_a_referee_b_is_decided_on_its_first_launches_and_scored_on_the_rest(tmp_path):
    # recursive_doubling wins the first two launches, rabenseifner the last two
    plan = {
        1 << 20: {"recursive_doubling": [0.6, 0.6, 0.9, 0.9], "rabenseifner": [0.9, 0.9, 0.6, 0.6]}
    }
    b = launch_run(tmp_path / "b", plan, launches=4)
    assert comparison.launch_numbers(str(b)) == [1, 2, 3, 4]
    scored = comparison.scored_choices(str(b))
    assert (
        scored.decided_on == f"{b}'s launches 1, 2" and scored.scored_on == f"{b}'s launches 3, 4"
    )
    (judged,) = scored.judged
    assert judged.choice == "recursive_doubling" and judged.point.best == "rabenseifner"
    assert scored.captured().share == pytest.approx(math.log(0.9) / math.log(0.6), abs=0.05)
    # three launches cannot be split into two that decide and two that score
    assert (
        comparison.scored_choices(
            str(launch_run(tmp_path / "b3", {1 << 20: {"recursive_doubling": 0.6}}))
        )
        is None
    )


def test_the_held_out_split_decides_on_the_earlier_half_rounded_up():
    assert comparison.held_out_split([1, 2, 3]) is None
    assert comparison.held_out_split([1, 2, 3, 4]) == ([1, 2], [3, 4])
    assert comparison.held_out_split([1, 2, 3, 4, 5]) == ([1, 2, 3], [4, 5])
