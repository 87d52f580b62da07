"""Bootstraps: the medians of resamples of one sample (scipy's ``bootstrap``), their
percentile interval, and the two-stage cluster bootstrap scipy's does not offer.

- ``median_resamples``: scipy.stats.bootstrap's distribution of the median (resamples of
  the sample with replacement, drawn from the caller's generator: Efron and Tibshirani,
  "An Introduction to the Bootstrap", 1993, ch. 13; https://docs.scipy.org/doc/scipy/
  reference/generated/scipy.stats.bootstrap.html). A caller that compares two samples
  draws each apart and combines the draws (a ratio and a difference of medians from the
  same draws), which scipy's own interval of one statistic does not give.
- ``cluster_bootstrap``: hierarchical data (rounds within launches) resampled in two
  stages, clusters with replacement, then values within each drawn cluster (Davison and
  Hinkley, "Bootstrap Methods and their Application", 1997, section 3.8); scipy's
  bootstrap resamples independent observations only.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

import numpy as np

from osu_dl_bench.stats.intervals import LEVEL

RESAMPLES = 2000
# The fewest launches ratio_of_summed_means gives an interval from: at 4 its expanded
# percentiles covered 86.5% where 95% was claimed (synthetic verifications), at 6 96%.
MIN_LAUNCHES = 6


def median_resamples(
    values: np.ndarray,
    rng: np.random.Generator,
    resamples: int,
    least: int | None = None,
    draw_limit: int | None = None,
) -> np.ndarray:
    """The medians of ``resamples`` bootstrap resamples of ``values`` (one value: that value
    each time, as its resamples are; none: ValueError). With ``draw_limit``, at most that
    many values are drawn in all: fewer resamples, down to ``least``, and past that a random
    subset of the values is resampled (its median's spread is, if anything, wider)."""
    values = np.asarray(values, dtype=float)
    if values.size == 0:
        raise ValueError("expected at least one value to resample, got none")
    if draw_limit is not None:
        least = least or 1
        if values.size * least > draw_limit:
            values = rng.choice(values, draw_limit // least, replace=False)
        resamples = max(least, min(resamples, draw_limit // values.size))
    if values.size == 1:
        # scipy's bootstrap asks for two observations; one has a single resample, and
        # numpy's Generator draws nothing for integers(0, 1), so the stream stays the same.
        return np.full(resamples, values[0])
    from scipy import stats  # at first use: option parsing reaches this module

    result = stats.bootstrap(
        (values,),
        np.median,
        n_resamples=resamples,
        vectorized=True,
        method="percentile",
        rng=rng,
    )
    return result.bootstrap_distribution


def percentile_interval(draws: np.ndarray, level: float = LEVEL) -> tuple[float, float]:
    """The central ``level`` percentile interval of bootstrap draws."""
    tail = (1 - level) / 2 * 100
    low, high = np.percentile(draws, [tail, 100 - tail])
    return float(low), float(high)


def cluster_bootstrap(
    clusters: Sequence[np.ndarray], seed: int, resamples: int = RESAMPLES, level: float = LEVEL
) -> tuple[float, float]:
    """The percentile interval of the median of the pooled values under two-stage
    resampling: clusters with replacement, then values within each with replacement."""
    rng = np.random.default_rng(seed)
    sizes = np.array([c.size for c in clusters])
    width = int(sizes.max())
    padded = np.zeros((len(clusters), width))
    for i, cluster in enumerate(clusters):
        padded[i, : cluster.size] = cluster
    picked = rng.integers(0, len(clusters), size=(resamples, len(clusters)))
    counts = sizes[picked]  # (resamples, clusters drawn)
    within = (rng.random((*picked.shape, width)) * counts[..., None]).astype(np.int64)
    draws = padded[picked[..., None], within]
    # Slots past a drawn cluster's size are no values: +inf sorts them after every value.
    draws[np.arange(width) >= counts[..., None]] = np.inf
    ordered = np.sort(draws.reshape(resamples, -1), axis=1)
    total = counts.sum(axis=1)
    rows = np.arange(resamples)
    medians = (ordered[rows, (total - 1) // 2] + ordered[rows, total // 2]) / 2
    return percentile_interval(medians, level)


def ratio_of_summed_means(
    strata: Sequence[tuple[np.ndarray, np.ndarray]],
    seed: int,
    resamples: int = RESAMPLES,
    level: float = LEVEL,
) -> tuple[float, float]:
    """The percentile interval of sum(means of a) / sum(means of b) when launches are
    resampled with replacement within each stratum. Each stratum is (a, b): arrays of
    shape (rows, launches), nan where a row has no value in a launch; a launch's column is
    drawn whole, so a and b stay paired by launch (Davison and Hinkley, 1997, section 3.8:
    resampling the unit that is independent, here the launch). The percentiles are
    Hesterberg's expanded ones (expanded_level): a plain percentile interval over 12
    launches covered 88.5% where it claimed 95%. (nan, nan) with fewer than MIN_LAUNCHES
    launches in a stratum, or where more than the tail share of the draws leave the
    denominator at or below 0. The strata are resampled apart: a launch effect they share
    (one collective's launch k beside another's) is left out; the pairing within each
    cancels most of it."""
    launches = min(np.atleast_2d(a).shape[1] for a, _ in strata)
    if launches < MIN_LAUNCHES:
        return math.nan, math.nan
    rng = np.random.default_rng(seed)
    tops, bottoms = np.zeros(resamples), np.zeros(resamples)
    for a, b in strata:
        a, b = np.atleast_2d(a), np.atleast_2d(b)
        picked = rng.integers(0, a.shape[1], size=(resamples, a.shape[1]))
        tops += _summed_row_means(a, picked)
        bottoms += _summed_row_means(b, picked)
    defined = np.isfinite(tops) & np.isfinite(bottoms) & (bottoms > 0)
    expanded = expanded_level(level, launches)
    if np.count_nonzero(~defined) > resamples * (1 - expanded) / 2:
        return math.nan, math.nan
    return percentile_interval(tops[defined] / bottoms[defined], expanded)


def expanded_level(level: float, n: int) -> float:
    """The percentile level that corrects a bootstrap over ``n`` units for its narrowness:
    the sample's spread is too small by (n - 1) / n, and a normal quantile stands where
    Student's t at n - 1 df belongs (Hesterberg, "What Teachers Should Know About the
    Bootstrap", The American Statistician 69(4), 2015, section 5.2: the expanded
    percentile interval). 12 launches at 95%: the 1.1% and 98.9% percentiles."""
    from osu_dl_bench.stats.intervals import t_quantile

    edge = math.sqrt(n / (n - 1)) * t_quantile(n - 1, level)
    return 1 - 2 * statistics.NormalDist().cdf(-edge)


def _summed_row_means(values: np.ndarray, picked: np.ndarray) -> np.ndarray:
    """Per draw (a row of ``picked``: launch columns), the sum over rows of each row's mean
    over the drawn launches it has a value in (nan: a row with none drawn)."""
    drawn = values[:, picked]  # (rows, resamples, launches drawn)
    present = np.isfinite(drawn)
    counts = present.sum(axis=2)
    sums = np.where(present, drawn, 0.0).sum(axis=2)
    with np.errstate(invalid="ignore", divide="ignore"):
        means = np.where(counts > 0, sums / np.maximum(counts, 1), np.nan)
    return means.sum(axis=0)
