"""Smooth ratio curves over message size: a candidate's log time ratio to native as a
penalised spline of log2(size), so that neighbouring sizes inform each other.

The fit is Eilers and Marx's P-spline ("Flexible smoothing with B-splines and penalties",
Statistical Science 11, 1996): cubic B-splines on equally spaced knots, a second-order
difference penalty (infinite penalty: a straight line in log size), each point weighted by
the inverse of its estimate's variance. The penalty is chosen by UBRE (Craven and Wahba
1979; mgcv's criterion when the scale is known), since each point's variance is known from
the launch pool. The band is the Bayesian posterior variance of the smooth (Wahba 1983;
Nychka, "Bayesian confidence intervals for smoothing splines", JASA 83, 1988: good
coverage averaged across the curve), plus the launch-wide variance component that no
amount of smoothing across sizes averages out.

Where the curve does not fit a point (its own estimate lies more than LACK_OF_FIT standard
errors from the curve: a protocol switch inside the library, say), the point keeps its own
estimate and interval.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.interpolate import BSpline

DEGREE = 3
MIN_POINTS = 5  # fewer sizes than this: each keeps its own estimate
LAMBDAS = np.logspace(-4, 8, 49)
LACK_OF_FIT = 3.0


@dataclass(frozen=True)
class Smoothed:
    """The curve's value and its variance at each input size, and where it was kept."""

    mean: np.ndarray
    variance: np.ndarray
    from_curve: np.ndarray  # bool per size: False where the point kept its own estimate
    effective_df: float
    fitted: bool = True  # False: too few sizes for a curve, every point its own


def _basis(x: np.ndarray) -> np.ndarray:
    """Cubic B-spline design matrix on equally spaced knots spanning x (the inner knots'
    ends are x's ends exactly, so no x falls outside them by rounding)."""
    segments = int(min(max(len(x) - 1, 3), 12))
    low, high = float(x.min()), float(x.max())
    inner = np.linspace(low, high, segments + 1)
    step = inner[1] - inner[0]
    knots = np.concatenate(
        [low - step * np.arange(DEGREE, 0, -1), inner, high + step * np.arange(1, DEGREE + 1)]
    )
    return BSpline.design_matrix(np.clip(x, low, high), knots, DEGREE).toarray()


def _penalty(columns: int) -> np.ndarray:
    d = np.diff(np.eye(columns), n=2, axis=0)
    return d.T @ d


def _fit(basis: np.ndarray, y: np.ndarray, weights: np.ndarray, lam: float, penalty):
    weighted = basis.T * weights
    a = weighted @ basis + lam * penalty
    inverse = np.linalg.pinv(a)
    coef = inverse @ (weighted @ y)
    hat_trace = float(np.trace(basis @ inverse @ weighted))
    return coef, inverse, hat_trace


def _ubre(basis, y, weights, lam, penalty) -> float:
    coef, _, edf = _fit(basis, y, weights, lam, penalty)
    residual = y - basis @ coef
    n = int(np.count_nonzero(weights))
    return float(np.sum(weights * residual**2) / n - 1 + 2 * edf / n)


def _penalised_fit(basis, y, weights, penalty):
    """The fit at the UBRE-best penalty: (values at every size, their variances, edf)."""
    lam = min(LAMBDAS, key=lambda value: _ubre(basis, y, weights, value, penalty))
    coef, inverse, edf = _fit(basis, y, weights, lam, penalty)
    return basis @ coef, np.einsum("ij,jk,ik->i", basis, inverse, basis), edf


def smooth_curve(
    log_sizes: np.ndarray, estimates: np.ndarray, variances: np.ndarray, shared=0.0
) -> Smoothed:
    """The P-spline of ``estimates`` (log-ratios, each with its variance) over
    ``log_sizes``, evaluated at those sizes; ``shared`` (a variance common to the sizes
    within a launch, the launch-wide component; scalar or per size) is added to the band.
    A point the curve misses by LACK_OF_FIT standard errors is left out of the fit, worst
    first, one at a time, and keeps its own estimate."""
    x = np.asarray(log_sizes, dtype=float)
    y = np.asarray(estimates, dtype=float)
    v = np.maximum(np.asarray(variances, dtype=float), 1e-12)
    own = v + shared
    if len(x) < MIN_POINTS or np.ptp(x) == 0:
        return Smoothed(y.copy(), own, np.zeros(len(x), bool), float(len(x)), fitted=False)
    basis, weights = _basis(x), 1 / v
    penalty = _penalty(basis.shape[1])
    inliers = np.ones(len(x), bool)
    while True:
        mean, variance, edf = _penalised_fit(basis, y, np.where(inliers, weights, 0.0), penalty)
        # A fitted point's residual has variance v - variance (the fit leans towards it);
        # a point left out, v + variance. A floor keeps high-leverage points from dividing
        # by nothing.
        spread = np.where(inliers, np.maximum(v - variance, 0.1 * v), v + variance)
        misses = np.abs(y - mean) / np.sqrt(spread)
        misses[~inliers] = 0
        worst = int(np.argmax(misses))
        if misses[worst] <= LACK_OF_FIT or inliers.sum() <= MIN_POINTS:
            break
        inliers[worst] = False
    variance = variance + _local_bias(y - mean, np.maximum(v - variance, 0.1 * v), inliers)
    variance = variance + shared
    return Smoothed(np.where(inliers, mean, y), np.where(inliers, variance, own), inliers, edf)


def _local_bias(residuals: np.ndarray, expected: np.ndarray, inliers: np.ndarray) -> np.ndarray:
    """Where the curve fits its neighbourhood worse than the noise explains (a step it
    rounds off), the excess of the squared residuals over their expected variance, averaged
    over each size and its two neighbours: a smoothing bias the band must hold too."""
    excess = np.where(inliers, residuals**2 - expected, 0.0)
    padded = np.pad(excess, 1, mode="edge")
    window = (padded[:-2] + padded[1:-1] + padded[2:]) / 3
    return np.maximum(window, 0.0)
