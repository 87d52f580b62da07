"""A robust scale: the median absolute deviation (MAD) scaled to a normal distribution's
standard deviation, through scipy's ``median_abs_deviation`` (scale="normal" divides by
the normal's 0.75 quantile, 1 / 1.4826: Leys et al., "Detecting outliers: Do not use
standard deviation around the mean, use absolute deviation around the median", J. Exp.
Soc. Psychol. 49, 2013; https://docs.scipy.org/doc/scipy/reference/generated/
scipy.stats.median_abs_deviation.html), and the sampling variance of a median read
from it.
"""

from __future__ import annotations

import math

import numpy as np

# Variance of the median of n values from a normal distribution, over sigma^2 / n.
MEDIAN_EFFICIENCY = math.pi / 2


def robust_sd(values: np.ndarray) -> float:
    """The MAD of ``values`` scaled to a normal standard deviation (NaN when empty)."""
    values = np.asarray(values, dtype=float)
    if values.size == 0:
        return math.nan
    from scipy import stats  # at first use: option parsing reaches this module

    return float(stats.median_abs_deviation(values, scale="normal"))


def median_variance(values: np.ndarray) -> float:
    """The sampling variance of the median of ``values`` from their robust scale (NaN with
    fewer than three values: too few to judge a spread by)."""
    values = np.asarray(values, dtype=float)
    if values.size < 3:
        return math.nan
    return MEDIAN_EFFICIENCY * robust_sd(values) ** 2 / values.size
