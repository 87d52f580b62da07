"""Whether one run's decisions hold on another: coverage, agreement, captured speedup and
missed wins (selection.agreement), on hand-made decisions."""

from __future__ import annotations

import math

import pytest

from osu_dl_bench.selection.agreement import (
    agreement,
    candidate_pairs,
    captured_speedup,
    missed_wins,
)
from osu_dl_bench.selection.paired import Ratio
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


def test_pairs_match_points_and_candidates_but_never_native():
    key_a = decision(64, {"ring": (0.8, 0.7, 0.9), "recursive_doubling": (1.2, 1.1, 1.3)})
    key_b = decision(64, {"ring": (0.82, 0.75, 0.9)})
    pairs = candidate_pairs({("k", 64): key_a}, {("k", 64): key_b, ("k", 128): key_b})
    assert [(a.ratio, b.ratio) for a, b in pairs] == [(0.8, 0.82)]


def test_captured_speedup_weighs_each_point_by_the_gain_there_was_to_take():
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
