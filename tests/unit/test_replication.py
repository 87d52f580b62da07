"""Whether one run's decisions hold on another: agreement with its binomial interval,
coverage beside its value under honest intervals, captured speedup and missed wins
(selection.replication), on hand-made decisions."""

from __future__ import annotations

import math

import pytest

from osu_dl_bench.selection.paired import Ratio
from osu_dl_bench.selection.replication import (
    Agreement,
    agreement,
    candidate_pairs,
    captured_speedup,
    honest_coverage,
    missed_wins,
)
from tests.support.tuning import decision


def test_coverage_counts_b_estimates_inside_a_intervals_and_agreement_uses_both_widths():
    a = Ratio(0.8, 0.7, 0.9, 3, 0)
    inside, outside = Ratio(0.85, 0.8, 0.9, 3, 0), Ratio(0.95, 0.8, 1.13, 3, 0)
    found = agreement([(a, inside), (a, outside)])
    assert (found.pairs, found.covered, found.coverage) == (2, 1, 0.5)
    # 0.8 against 0.95: 0.17 in logs, within 1.96 x the root of the two variances added;
    # a narrow B estimate as far off is not.
    assert found.agreed == 2
    assert agreement([(a, Ratio(0.95, 0.9, 1.0, 3, 0))]).agreed == 0


def test_honest_intervals_of_equal_widths_cover_the_other_runs_estimate_83_4_percent():
    # 2 Phi(1.96 / sqrt(2)) - 1: the difference of two honest estimates has sqrt(2) sds.
    even = honest_coverage(
        Ratio(0.8, 0.7, 0.9, 3, 0), Ratio(0.85, 0.85 * 0.7 / 0.8, 0.85 * 0.9 / 0.8, 3, 0)
    )
    assert even == pytest.approx(0.834, abs=5e-4)
    exact_b = Ratio(0.85, 0.85, 0.85, 3, 0)  # r = 0: A's interval alone, 95%
    assert honest_coverage(Ratio(0.8, 0.7, 0.9, 3, 0), exact_b) == pytest.approx(0.95, abs=1e-3)
    found = agreement([(Ratio(0.8, 0.7, 0.9, 3, 0), exact_b)] * 2)
    assert found.expected_coverage == pytest.approx(0.95, abs=1e-3)
    # a B twice as noisy as A: r = 2, 2 Phi(1.96 / sqrt(5)) - 1
    wide_b = Ratio(0.8, 0.8 * (0.7 / 0.8) ** 2, 0.8 * (0.9 / 0.8) ** 2, 3, 0)
    assert honest_coverage(Ratio(0.8, 0.7, 0.9, 3, 0), wide_b) == pytest.approx(0.619, abs=2e-3)


def test_agreement_carries_its_binomial_interval_for_the_pair_count():
    # Wilson's score interval, as statsmodels' proportion_confint(95, 100, method="wilson")
    low, high = Agreement(100, 80, 95).agreement_interval
    assert (low, high) == (pytest.approx(0.8882, abs=1e-4), pytest.approx(0.9785, abs=1e-4))
    low, high = Agreement(100, 70, 83).agreement_interval
    assert high == pytest.approx(0.8911, abs=1e-4) and high < 0.95  # 83% of 100 is not 95%
    assert all(math.isnan(v) for v in Agreement(0, 0, 0).agreement_interval)


def test_pairs_match_points_and_candidates_but_never_native():
    key_a = decision(64, {"ring": (0.8, 0.7, 0.9), "recursive_doubling": (1.2, 1.1, 1.3)})
    key_b = decision(64, {"ring": (0.82, 0.75, 0.9)})
    pairs = candidate_pairs({("k", 64): key_a}, {("k", 64): key_b, ("k", 128): key_b})
    assert [(a.ratio, b.ratio) for a, b in pairs] == [(0.8, 0.82)]


def test_captured_speedup_weighs_each_point_by_the_gain_there_was_to_take_in_the_scoring_run():
    big = decision(1 << 20, {"ring:seg=0": (0.5, 0.45, 0.55), "rabenseifner": (0.8, 0.75, 0.85)})
    small = decision(64, {"ring:seg=0": (0.98, 0.9, 1.05)})  # best < 1.1x: not counted
    found = captured_speedup([(big, "rabenseifner"), (small, "native")])
    assert found.points == 1
    assert found.share == pytest.approx(math.log(0.8) / math.log(0.5))
    assert captured_speedup([(big, big.best)]).share == pytest.approx(1.0)
    assert captured_speedup([(big, "gloo")]).unmeasured == 1


def test_a_missed_win_is_native_kept_where_the_best_is_clearly_1_5x_faster():
    clear = decision(1 << 20, {"ring:seg=0": (0.5, 0.45, 0.55)})
    unsure = decision(1 << 21, {"ring:seg=0": (0.6, 0.3, 1.2)})
    assert missed_wins([(clear, "native"), (unsure, "native")]) == (1, 1)
    assert missed_wins([(clear, clear.best)]) == (1, 0)
