"""Variance components and their degrees of freedom: the Welch-Satterthwaite df of a sum
of components, the df of what is left when a part is taken out, and a robust
method-of-moments estimate of a component from many groups' sample variances (the
DerSimonian-Laird idea with the median for the mean, so that a handful of wild groups
cannot inflate it; the launch pools of selection.evidence are built from it).
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import numpy as np


def satterthwaite(components: Iterable[tuple[float, float]]) -> float:
    """The Welch-Satterthwaite df of a sum of variance components, each (variance, df):
    (sum c)^2 / sum(c^2 / df) (Satterthwaite, Biometrics Bulletin 2, 1946); components
    of zero variance or infinite df add nothing to the denominator."""
    parts = [(max(c, 0.0), df) for c, df in components]
    total = sum(c for c, _ in parts)
    spread = sum(c * c / df for c, df in parts if c > 0 and math.isfinite(df))
    if total <= 0 or spread <= 0:
        return math.inf
    return total * total / spread


def remainder_df(total: float, df: float, part: float, part_df: float) -> float:
    """The df of ``total - part`` where ``total`` (df ``df``) is that remainder plus
    ``part`` (df ``part_df``): Welch-Satterthwaite solved for the remainder (infinite
    where the part accounts for all of total's uncertainty)."""
    rest = max(total - part, 0.0)
    left = (total * total / df if math.isfinite(df) else 0.0) - (
        part * part / part_df if math.isfinite(part_df) else 0.0
    )
    return rest * rest / left if rest > 0 and left > 0 else math.inf


def solve_median(stat: np.ndarray, df: np.ndarray, base: np.ndarray, scale: np.ndarray) -> float:
    """The x >= 0 at which the median of chi2.cdf(df * stat / (scale * x + base), df) is
    one half: a robust method-of-moments variance component."""
    from scipy import optimize, special  # at first use: option parsing reaches this module

    def excess(x: float) -> float:
        expected = np.maximum(scale * x + base, 1e-300)
        # chi2.cdf(x, df) is the regularised lower incomplete gamma P(df / 2, x / 2):
        # scipy.special's ufunc, without scipy.stats' per-call dispatch.
        return float(np.median(special.gammainc(df / 2, df * stat / expected / 2))) - 0.5

    if stat.size == 0 or excess(0.0) <= 0:
        return 0.0
    high = max(float(np.max(stat)), 1e-12)
    while excess(high) > 0:
        high *= 4
    return float(optimize.brentq(excess, 0.0, high, xtol=1e-14, rtol=1e-10))
