"""The smooth ratio curves over sizes (stats.smoothing) against known curves: the curve
recovers the truth better than each point alone, its band covers it about as often as it
claims, and a point the curve misses keeps its own estimate."""

from __future__ import annotations

import math

import numpy as np
import pytest

from osu_dl_bench.stats.smoothing import smooth_curve

LOG_SIZES = np.arange(3, 25, dtype=float)  # 8 B .. 16 MiB


def _true_curve(x):
    """A candidate's log time ratio to native that changes smoothly with log2(size)."""
    return -0.4 * np.tanh((x - 14) / 3)


def test_the_curve_recovers_a_known_smooth_ratio_curve_with_honest_bands():
    rng = np.random.default_rng(7)
    sd = 0.08
    truth = _true_curve(LOG_SIZES)
    raw_errors, smooth_errors, covered = [], [], []
    for _ in range(40):
        y = truth + rng.normal(0, sd, LOG_SIZES.size)
        curve = smooth_curve(LOG_SIZES, y, np.full(LOG_SIZES.size, sd**2))
        raw_errors.append(np.mean((y - truth) ** 2))
        smooth_errors.append(np.mean((curve.mean - truth) ** 2))
        half = 1.96 * np.sqrt(curve.variance)
        covered.append(np.mean(np.abs(curve.mean - truth) <= half))
    # Neighbours inform each other: the curve's error is well below each point's own.
    assert math.sqrt(np.mean(smooth_errors)) < 0.6 * math.sqrt(np.mean(raw_errors))
    # The bands cover the true curve about as often as they claim (Nychka's average).
    assert 0.88 <= np.mean(covered) <= 1.0


def test_a_curve_keeps_a_point_it_misses_by_far_on_its_own_estimate():
    y = _true_curve(LOG_SIZES)
    y[10] += 1.0  # a step the library takes at one size only
    curve = smooth_curve(LOG_SIZES, y, np.full(LOG_SIZES.size, 0.02**2))
    assert not curve.from_curve[10] and curve.mean[10] == pytest.approx(y[10])
    assert curve.from_curve.sum() >= LOG_SIZES.size - 3


def test_a_straight_line_is_recovered_with_the_penalty_at_its_limit():
    # A second-difference penalty leaves a line unpenalised: noise-free, the fit is exact.
    truth = 0.01 * LOG_SIZES - 0.1
    curve = smooth_curve(LOG_SIZES, truth, np.full(LOG_SIZES.size, 0.01**2))
    assert curve.fitted and curve.from_curve.all()
    assert curve.mean == pytest.approx(truth, abs=1e-9)


def test_too_few_sizes_keep_their_own_estimates():
    y = np.array([0.1, -0.2, 0.3])
    curve = smooth_curve(np.array([3.0, 4.0, 5.0]), y, np.full(3, 0.01), shared=0.02)
    assert not curve.fitted and not curve.from_curve.any()
    assert curve.mean == pytest.approx(y) and curve.variance == pytest.approx(np.full(3, 0.03))
