"""Partial pooling of each candidate's ratio to native across process counts (empirical
Bayes).

A sweep measures each candidate at several process counts p of the same collective and
buffer kind, each p in jobs (and launches) of its own. Where a candidate is equally fast
at every p (a segment size that suits the machine's memory, or a null-like variant that
runs native's code), each p's estimate alone wastes what the others know. The normal
random-effects model of meta-analysis reads them together: at one size, p's estimate
``y_p`` (ln ratio, variance ``v_p`` from its interval) is the candidate's true log-ratio
``theta_p`` plus error, and the ``theta_p`` scatter around a common ``mu`` with a
between-p variance ``tau^2``, estimated from the data by DerSimonian and Laird's method
of moments ("Meta-analysis in clinical trials", Controlled Clinical Trials 7, 1986) with
k - 1 degrees of freedom (k counts). The posterior of ``theta_p`` shrinks ``y_p`` toward
the weighted mean by ``B_p = v_p / (v_p + tau^2)``: fully where the counts agree within
their noise (tau^2 = 0), hardly where they differ beyond it.

The intervals stay honest: the posterior variance ``v_p (1 - B_p)`` plus the uncertainty
of the mean (``B_p^2 / sum w``) and of tau^2 itself, to first order (Kass and Steffey,
"Approximate Bayesian inference in conditionally independent hierarchical models",
JASA 84, 1989): ``2 B_p^2 (y_p - mu)^2 / (k - 1)``. In simulation (k = 2-4, true
differences of 0-5 standard errors) these intervals cover the truth at 91-98%.

Only estimates resting on the run's launch pool are pooled (evidence 'curve', 'point',
'misfit'): a point whose launches disagree beyond the pool, or one judged on its own
launches alone, keeps its estimate. Neighbouring sizes are pooled already, by the curve
over sizes (stats.smoothing); across p the jobs are separate, so the errors are
independent and the weights above are right.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np

from osu_dl_bench.selection.paired import Z_LEVEL, Ratio

# Estimates resting on the run's launch pool (a normal on the log scale, its sd known).
POOLABLE = ("curve", "point", "misfit")
POOLED = "pooled"


@dataclass(frozen=True)
class Between:
    """The between-count variance of one candidate's log-ratio at one size, the degrees
    of freedom it rests on, and the weighted mean it shrinks toward."""

    variance: float
    df: int
    mean: float
    mean_variance: float


def between_counts(means: np.ndarray, variances: np.ndarray) -> Between:
    """DerSimonian and Laird's moment estimate of the between-count variance (k - 1 df),
    and the random-effects weighted mean with its variance."""
    weights = 1 / variances
    fixed = float(np.sum(weights * means) / np.sum(weights))
    q = float(np.sum(weights * (means - fixed) ** 2))
    scale = float(np.sum(weights) - np.sum(weights**2) / np.sum(weights))
    k = len(means)
    tau2 = max(0.0, (q - (k - 1)) / scale) if scale > 0 else 0.0
    random = 1 / (variances + tau2)
    mean = float(np.sum(random * means) / np.sum(random))
    return Between(tau2, k - 1, mean, float(1 / np.sum(random)))


def shrink(ratios: Sequence[Ratio]) -> list[Ratio]:
    """One candidate's ratios at one size, one per process count, partially pooled: each
    the posterior under the between-count variance the others estimate with it."""
    means = np.array([math.log(r.ratio) for r in ratios])
    variances = np.array([r.log_sd**2 for r in ratios])
    between = between_counts(means, variances)
    pooled = []
    for ratio, y, v in zip(ratios, means, variances, strict=True):
        weight = v / (v + between.variance)  # B_p: how far toward the mean
        centre = y - weight * (y - between.mean)
        variance = (
            v * (1 - weight)
            + weight**2 * between.mean_variance
            + 2 * weight**2 * (y - between.mean) ** 2 / between.df
        )
        half = Z_LEVEL * math.sqrt(variance)
        pooled.append(
            replace(
                ratio,
                ratio=math.exp(centre),
                low=math.exp(centre - half),
                high=math.exp(centre + half),
                evidence=POOLED,
                # The point's own data enter with weight 1 - B_p: so does the error they
                # share with the point's other candidates (native's drift).
                common_sd=(1 - weight) * ratio.common_sd,
                # A normal interval: each count's Student's t width at its own df is in
                # its log_sd already (half-width over 1.96), so t must not widen it again.
                df=math.inf,
            )
        )
    return pooled


def _poolable(ratio: Ratio) -> bool:
    sd = ratio.log_sd
    return ratio.evidence in POOLABLE and ratio.ratio > 0 and math.isfinite(sd) and sd > 0


def pool_across_counts(
    entries: Mapping[Hashable, Sequence[Mapping[str, Ratio]]],
    sizes: Mapping[Hashable, Sequence[int]],
) -> dict[Hashable, list[dict[str, Ratio]]]:
    """Each entry's ratios per point (``entries[key][i]``: label -> ratio at size
    ``sizes[key][i]``) with every candidate's estimate pooled across the process counts of
    the same collective and buffer kind (keys with ``collective`` and ``device``) where it
    was measured at the same size with pooled evidence at two counts or more."""
    result = {key: [dict(ratios) for ratios in points] for key, points in entries.items()}
    cells: dict[tuple, list[tuple[Hashable, int]]] = defaultdict(list)
    for key, points in entries.items():
        for i, ratios in enumerate(points):
            for label, ratio in ratios.items():
                if _poolable(ratio):
                    cells[(key.collective, key.device, label, sizes[key][i])].append((key, i))
    for (_, _, label, _), members in cells.items():
        if len(members) < 2:
            continue
        pooled = shrink([entries[key][i][label] for key, i in members])
        for (key, i), ratio in zip(members, pooled, strict=True):
            result[key][i][label] = ratio
    return result
