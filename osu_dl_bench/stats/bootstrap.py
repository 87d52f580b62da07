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

from collections.abc import Sequence

import numpy as np

from osu_dl_bench.stats.intervals import LEVEL

RESAMPLES = 2000


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
