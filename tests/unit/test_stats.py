"""One home for the statistics (osu_dl_bench.stats): one robust scale (scipy's MAD), one
place that draws bootstrap resamples, one default for the decision rule's risk; the
floors above use them instead of their own copies, with the same numbers as before."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from mpirun import REPO
from scipy import stats as scipy_stats

from osu_dl_bench.commands.arguments import add_rule_arguments
from osu_dl_bench.selection import names, rule
from osu_dl_bench.stats import decision
from osu_dl_bench.stats.bootstrap import (
    MIN_LAUNCHES,
    expanded_level,
    median_resamples,
    percentile_interval,
    ratio_of_summed_means,
)
from osu_dl_bench.stats.robust import median_variance, robust_sd

PACKAGE = REPO / "osu_dl_bench"
STATS = PACKAGE / "stats"


def _sources_outside_stats() -> list[Path]:
    return [p for p in PACKAGE.rglob("*.py") if STATS not in p.parents]


def _matches(pattern: str, paths: list[Path]) -> list[str]:
    found = []
    for path in paths:
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if re.search(pattern, line):
                found.append(f"{path.relative_to(REPO)}:{number}: {line.strip()}")
    return found


def test_the_robust_sd_is_scipys_mad_scaled_to_a_normal_sd():
    values = np.random.default_rng(3).normal(5.0, 2.0, 4001)
    assert robust_sd(values) == scipy_stats.median_abs_deviation(values, scale="normal")
    assert robust_sd(values) == pytest.approx(2.0, rel=0.05)
    # pi/2 sigma^2/n: the median's sampling variance at the normal.
    assert median_variance(values) == pytest.approx(np.pi / 2 * 4.0 / values.size, rel=0.1)
    assert np.isnan(median_variance(values[:2]))


def test_no_module_outside_stats_computes_a_mad_of_its_own():
    # median |x - median x|: a MAD (comparison's median |log shift| is a size, not a scale)
    hand_made = r"median\(\s*np\.abs\([^)]*- *np\.median|1\.4826|median_abs_deviation"
    assert _matches(hand_made, _sources_outside_stats()) == []


def test_no_module_outside_stats_draws_bootstrap_resamples_of_its_own():
    assert _matches(r"rng\.integers\(0,|stats\.bootstrap\(", _sources_outside_stats()) == []


def test_the_median_resamples_are_the_draws_a_hand_loop_made():
    # scipy's bootstrap draws integers(0, n, (resamples, n)) from the caller's generator,
    # as diagnosis.outliers did by hand: the same seed gives the same intervals as before.
    for n in (1, 2, 7, 300):
        values = np.random.default_rng(n).lognormal(size=n)
        mine, theirs = np.random.default_rng(11), np.random.default_rng(11)
        draws = median_resamples(values, mine, 500)
        by_hand = np.median(values[theirs.integers(0, n, size=(500, n))], axis=1)
        assert np.array_equal(draws, by_hand)
        assert mine.random() == theirs.random()  # the stream goes on alike
    with pytest.raises(ValueError, match="at least one value"):
        median_resamples(np.array([]), np.random.default_rng(0), 10)


def _budgeted_by_hand(values, rng, resamples, least, limit):
    """diagnosis.outliers' resampler before stats held it: the reference."""
    if values.size * least > limit:
        values = rng.choice(values, limit // least, replace=False)
    count = max(least, min(resamples, limit // max(values.size, 1)))
    return np.median(values[rng.integers(0, values.size, size=(count, values.size))], axis=1)


@pytest.mark.parametrize("size", [1, 40, 300, 2000])
def test_a_draw_limit_gives_fewer_resamples_then_a_subset_as_before(size):
    values = np.random.default_rng(size).lognormal(size=size)
    mine, theirs = np.random.default_rng(5), np.random.default_rng(5)
    draws = median_resamples(values, mine, 100, 20, 12_000)
    assert np.array_equal(draws, _budgeted_by_hand(values, theirs, 100, 20, 12_000))
    assert draws.size == {1: 100, 40: 100, 300: 40, 2000: 20}[size]
    assert mine.random() == theirs.random()


def test_the_percentile_interval_bounds_the_central_level():
    draws = np.arange(1001, dtype=float)
    assert percentile_interval(draws) == pytest.approx((25.0, 975.0))
    assert percentile_interval(draws, 0.5) == pytest.approx((250.0, 750.0))


def test_the_expanded_level_widens_few_units_and_tends_to_the_level():
    # Hesterberg (2015), section 5.2: alpha' / 2 = Phi(-sqrt(n / (n - 1)) t(n - 1)).
    t = scipy_stats.t.ppf(0.975, 11)
    assert expanded_level(0.95, 12) == pytest.approx(
        1 - 2 * scipy_stats.norm.cdf(-t * (12 / 11) ** 0.5)
    )
    levels = [expanded_level(0.95, n) for n in (3, 6, 12, 30, 10_000)]
    assert levels == sorted(levels, reverse=True) and levels[-1] == pytest.approx(0.95, abs=1e-3)


def test_a_ratio_of_summed_means_needs_six_launches_and_keeps_launches_paired():
    five = np.random.default_rng(2).lognormal(size=(2, MIN_LAUNCHES - 1))
    assert all(np.isnan(ratio_of_summed_means([(2 * five, five)], seed=0)))
    # a = 2 b launch by launch: every draw keeps the pairs, so the ratio is exactly 2.
    b = np.random.default_rng(4).lognormal(size=(3, 8))
    low, high = ratio_of_summed_means([(2 * b, b)], seed=0)
    assert low == pytest.approx(2.0) and high == pytest.approx(2.0)
    # A row missing a launch is averaged over the launches it has.
    gappy = np.where(np.eye(3, 8, dtype=bool), np.nan, b)
    low, high = ratio_of_summed_means([(2 * gappy, gappy)], seed=0)
    assert low == pytest.approx(2.0) and high == pytest.approx(2.0)


def test_the_risk_default_has_one_home():
    stated = r"^\s*(RISK|INDIFFERENCE|SLOWER_MARGIN) = |risk: float = [0-9]|risk=[0-9.]"
    found = _matches(stated, list(PACKAGE.rglob("*.py")))
    assert found == [
        f"osu_dl_bench/stats/decision.py:{_line_of('RISK = ')}: RISK = 0.2",
        f"osu_dl_bench/stats/decision.py:{_line_of('INDIFFERENCE = ')}: INDIFFERENCE = 0.02",
        f"osu_dl_bench/stats/decision.py:{_line_of('SLOWER_MARGIN = ')}: SLOWER_MARGIN = 1.05",
    ]
    assert decision.DecisionRule().risk == decision.RISK
    assert rule.DEFAULT_RULE is decision.DEFAULT_RULE
    assert (names.RISK, names.INDIFFERENCE) == (decision.RISK, decision.INDIFFERENCE)


def _line_of(start: str) -> int:
    lines = (STATS / "decision.py").read_text().splitlines()
    return next(i for i, line in enumerate(lines, 1) if line.startswith(start))


def test_every_command_offers_the_rules_defaults():
    import argparse

    parser = argparse.ArgumentParser()
    add_rule_arguments(parser)
    args = parser.parse_args([])
    assert (args.risk, args.indifference) == (decision.RISK, decision.INDIFFERENCE)


def test_the_rules_defaults_load_no_scipy():
    # Option parsing reads them on every rank of a sweep: scipy.stats takes seconds there.
    probe = "import sys, osu_dl_bench.stats.decision; print('scipy' in sys.modules)"
    result = subprocess.run(
        [sys.executable, "-c", probe],
        env={"PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.stdout.strip() == "False", result.stderr
