"""Each candidate's ratio to native at each size of an entry, from all the evidence a run
holds: the run's pooled launch variance (selection.evidence) and the smooth curve over
sizes (stats.smoothing). Points without per-round times, or without native, keep the
point-by-point paired ratio (selection.paired).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np

from osu_dl_bench.selection.evidence import (
    HETEROGENEITY_ALPHA,
    LaunchPool,
    LaunchValues,
    Observation,
    estimate_pool,
    heterogeneity,
    launch_values,
)
from osu_dl_bench.selection.paired import (
    Ratio,
    Series,
    identity,
    paired_ratio,
    satterthwaite,
    t_quantile,
)
from osu_dl_bench.stats.smoothing import smooth_curve


@dataclass(frozen=True)
class Measured:
    """One point's measurements: each candidate's series and the reference's label."""

    key: object  # the entry's key
    size: int
    series: Mapping[str, Series]
    reference: str

    @property
    def against_native(self) -> bool:
        """Whether the reference is native (only then do curves over sizes compare)."""
        return self.reference == "native"


def point_values(point: Measured) -> dict[str, LaunchValues]:
    """label -> its launch values against native at the point (none without native)."""
    if not point.against_native:
        return {}
    ref = point.series[point.reference]
    found = {}
    for label, series in point.series.items():
        if label != point.reference:
            values = launch_values(series, ref)
            if values is not None:
                found[label] = values
    return found


def observations(points: Iterable[Measured]) -> list[Observation]:
    """Every (point, candidate) with per-launch values, for the run's pool."""
    return [
        Observation(p.key, label, p.size, values)
        for p in points
        for label, values in point_values(p).items()
    ]


def run_pool(points: Iterable[Measured]) -> LaunchPool:
    """The launch pool of a run's points."""
    return estimate_pool(observations(points))


@dataclass(frozen=True)
class _Own:
    """A point's own estimate under the pool: log-ratio, variance of it, the part of that
    variance shared by the band's sizes within a launch, the part shared with every other
    candidate at the point, the degrees of freedom behind each part, and whether the
    point's launches disagree beyond the pool."""

    mean: float
    variance: float
    shared: float
    common: float
    df: float  # of the independent, point-level part: the pool's sum(k - 1)
    heterogeneous: bool
    values: LaunchValues
    pooled: float = 0.0  # the variance the pool alone gives (below ``variance`` if odd)
    launch_df: float = math.inf  # of the launch-level parts (shared, common): K - 1

    def interval_df(self, variance: float) -> float:
        """The Welch-Satterthwaite df of ``variance``: its launch-level part (the band-wide
        shift and native's drift, one realisation per launch for the whole pool) at
        launch_df, the rest at the point-level df."""
        launch = min(max(self.shared, self.common), variance)
        return satterthwaite([(launch, self.launch_df), (variance - launch, self.df)])


def _own(values: LaunchValues, pool: LaunchPool, entry: object, size: int) -> _Own | None:
    """None where no pool applies (a single launch everywhere: no launch variance known)."""
    component = pool.component(entry, size, values.paired)
    if not component.points:
        return None
    within = np.where(np.isfinite(values.within), values.within, pool.within)
    per_launch = component.point_launch + float(np.mean(within))
    k, df, pooled = values.count, float(component.df), per_launch / values.count
    launch_df = component.launch_df
    odd = heterogeneity(values, component, pool.within) < HETEROGENEITY_ALPHA
    if odd:
        # Its own launches, as few as they are, are the evidence: their spread and df.
        per_launch, df = max(per_launch, values.spread), float(k - 1)
        launch_df = df
    # Only the round-paired share a launch's drift of native with each other.
    common = component.correlation * component.point_launch / k if values.paired else 0.0
    return _Own(
        values.mean,
        per_launch / k,
        component.launch_wide / k,
        common,
        df,
        odd,
        values,
        pooled,
        launch_df,
    )


def pooled_ratios(found: Sequence[Observation]) -> list[Ratio]:
    """Each observation's ratio from its own launches, with the launch-to-launch variance
    pooled over all of them (no curve over sizes: a selection file changes algorithm from
    one size to the next, so neighbours need not agree); 0..inf where no launch variance
    is known (one launch)."""
    pool = estimate_pool(found)
    ratios = []
    for o in found:
        own = _own(o.values, pool, o.entry, o.size)
        if own is None:
            ratios.append(_alone(o.values))
            continue
        own = at_least_own_spread(own)
        evidence = "heterogeneous" if own.heterogeneous else "point"
        ratios.append(_ratio(own.mean, own.variance, own, evidence))
    return ratios


# Launches from which a point's own launch spread is trusted as a floor on its variance:
# with fewer, its own spread (k - 1 df) is too rough a floor and would widen every
# interval; the heterogeneity test alone then guards against a pool too narrow for it.
MIN_OWN_LAUNCHES = 6


def at_least_own_spread(own: _Own) -> _Own:
    """The point's own launch spread, at its own k - 1 df, where it exceeds the pool's
    (from MIN_OWN_LAUNCHES launches): a pool over sizes whose spreads differ gives the
    noisier ones intervals too narrow, and the heterogeneity test (alpha 1%) misses a
    size with 4x the pool's variance 3 times in 10 at 12 launches."""
    k = own.values.count
    if own.heterogeneous or k < MIN_OWN_LAUNCHES or own.values.spread / k <= own.variance:
        return own
    return replace(own, variance=own.values.spread / k, df=float(k - 1), launch_df=float(k - 1))


def _alone(values: LaunchValues) -> Ratio:
    """Without a pool (too few points): Student's t over the point's own launches, or
    0..inf with one launch (no launch-to-launch spread to judge by)."""
    if values.count < 2:
        return Ratio(math.exp(values.mean), 0.0, math.inf, values.count, 0, "paired", df=0.0)
    df = float(values.count - 1)
    own = _Own(values.mean, values.spread / values.count, 0.0, 0.0, df, False, values, 0.0, df)
    return _ratio(own.mean, own.variance, own, "paired")


def _ratio(
    mean: float, variance: float, own: _Own, evidence: str, df: float | None = None
) -> Ratio:
    """The ratio and its interval: Student's t at the variance's own df (``df``, else the
    Welch-Satterthwaite df of its components)."""
    variance = max(variance, 0.0)
    df = own.interval_df(variance) if df is None else df
    half = t_quantile(df) * math.sqrt(variance)
    return Ratio(
        math.exp(mean),
        math.exp(mean - half),
        math.exp(mean + half),
        own.values.count,
        0,
        evidence,
        math.sqrt(min(own.common, variance)),
        df=df,
        launch_df=own.launch_df,
    )


def _curve_ratios(points: Sequence[Measured], owns: Mapping[int, _Own]) -> dict[int, Ratio]:
    """index of point -> the candidate's ratio from its curve over the entry's sizes; a
    point whose launches disagree beyond the pool gets the excess of its own spread over
    the pool's added to the curve's band."""
    order = sorted(owns)
    x = np.log2([max(points[i].size, 1) for i in order])
    shared = np.array([owns[i].shared for i in order])
    y = np.array([owns[i].mean for i in order])
    independent = np.array([owns[i].variance - owns[i].shared for i in order])
    curve = smooth_curve(x, y, independent, shared)
    # The curve rests on the pool's degrees of freedom, odd points' included.
    on_pool = [own for own in owns.values() if not own.heterogeneous] or list(owns.values())
    pool_df = max(own.df for own in on_pool)
    pool_launch_df = max(own.launch_df for own in on_pool)
    ratios = {}
    for j, i in enumerate(order):
        own = owns[i]
        if not curve.fitted:
            kind = "heterogeneous" if own.heterogeneous else "point"
            ratios[i] = _ratio(own.mean, own.variance, own, kind)
        elif own.heterogeneous:
            # Its launches disagree beyond the pool: the curve's estimate, with the excess
            # of its own launch spread over the pool's added to the band.
            extra = max(own.variance - own.pooled, 0.0)
            on_curve = replace(own, df=pool_df, launch_df=pool_launch_df)
            band = curve.variance[j]
            # Its own excess rests on its own launches (k - 1 df).
            df = satterthwaite([(band, on_curve.interval_df(band)), (extra, own.df)])
            ratios[i] = _ratio(curve.mean[j], band + extra, on_curve, "heterogeneous", df)
        else:
            evidence = "curve" if curve.from_curve[j] else "misfit"
            ratios[i] = _ratio(curve.mean[j], curve.variance[j], own, evidence)
    return ratios


def entry_ratios(
    points: Sequence[Measured],
    pool: LaunchPool,
    values: Sequence[Mapping[str, LaunchValues]] | None = None,
) -> list[dict[str, Ratio]]:
    """Per point (in the given order, by size), label -> ratio to the point's reference;
    a candidate sharing no launch with the reference is absent. ``values``: each point's
    point_values, when known (an adaptive sweep keeps those of the points it settled)."""
    if values is None:
        values = [point_values(p) for p in points]
    labels = {label for found in values for label in found}
    smoothed: dict[str, dict[int, Ratio]] = {}
    for label in sorted(labels):
        owns = {
            i: _own(found[label], pool, points[i].key, points[i].size)
            for i, found in enumerate(values)
            if label in found
        }
        # Points with no pool to judge their launches by keep the point's paired ratio.
        known = {i: own for i, own in owns.items() if own is not None}
        smoothed[label] = _curve_ratios(points, known) if known else {}
    result = []
    for i, point in enumerate(points):
        ratios = {}
        for label, series in point.series.items():
            if label == point.reference:
                ratios[label] = identity(series)
            elif i in smoothed.get(label, {}):
                ratios[label] = _with_rounds(smoothed[label][i], series)
            else:
                found = paired_ratio(
                    series,
                    point.series[point.reference],
                    point.key,
                    point.size,
                    label,
                    point.reference,
                )
                if found is not None:
                    ratios[label] = found
        result.append(ratios)
    return result


def _with_rounds(ratio: Ratio, series: Series) -> Ratio:
    return replace(ratio, rounds=series.rounds)
