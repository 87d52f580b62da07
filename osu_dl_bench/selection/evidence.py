"""Evidence shared across a run's points: the between-launch variance of log time ratios,
estimated once from every point of the run instead of from each point's 2-3 launches.

Each candidate c at each point (entry, size s) gives one value per launch k, the launch's
log time ratio to the reference ``y[c,s,k]`` (the median of the round-paired log-ratios
inside a launch; the log-ratio of the launches' medians across isolation groups), with the
sampling variance ``w[c,s,k]`` of that value from its own rounds. The model is a
random-effects model with launch as the random effect (Hoefler and Belli, SC15, section
4; ReproMPI's practice of repeating across mpiruns):

    y[c,s,k] = theta[c,s] + u[c,k] + v[c,s,k] + e[c,s,k]

- ``e``: sampling error within the launch, variance ``w`` (known from the rounds);
- ``v``: the point's launch-to-launch variation, independent across sizes;
- ``u``: a shift shared by one candidate's sizes of a band within one launch (the launch's
  memory layout or placement favours or hurts an algorithm at every size near each other).

The machine, not the point, owns the variances of ``u`` and ``v``: they are estimated per
pool (the entry: collective, buffer kind and job shape, since 4 ranks on 2 cores swing far
more than 2 do; the size band; and whether the pair was round-paired or compared across
launches), by the method of moments made robust with medians: the variance ``x`` is the
value at which the median over the pool of ``F_chi2(df * S^2 / (x + b), df)`` is one half,
S^2 being each point's (or each band's) sample variance over its launches and ``b`` the
known part (the DerSimonian-Laird idea, with the median for the mean so that a handful of
wild points cannot inflate the machine's variance). A point whose own launches disagree
more than the pool allows (chi-square test at HETEROGENEITY_ALPHA) is marked, and its
interval widened by the excess of its own spread (selection.estimate).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace

import numpy as np
from scipy import special

from collectives.units import format_size
from osu_dl_bench.selection.paired import Launch, Series, finite, log_times, same_group_samples
from osu_dl_bench.stats.components import solve_median
from osu_dl_bench.stats.robust import median_variance

# Size bands of one pool each (bytes, lower edges): eager messages, the cache-sized middle,
# and rendezvous-sized messages behave differently from launch to launch.
BAND_EDGES = (0, 4096, 262144)
# A pool needs this many points with two launches or more; smaller pools borrow from the
# entry's pool over every band, then from the run's.
MIN_POOL_POINTS = 6
HETEROGENEITY_ALPHA = 0.01


@dataclass(frozen=True)
class LaunchValues:
    """One candidate at one point against its reference: per launch, the log time ratio
    and its sampling variance; whether the pair was round-paired (same isolation group)."""

    launches: tuple[int, ...]
    values: np.ndarray
    within: np.ndarray
    paired: bool

    @property
    def count(self) -> int:
        """Launches that gave a value."""
        return len(self.launches)

    @property
    def mean(self) -> float:
        """The point's estimate: the mean of its launches' values."""
        return float(np.mean(self.values))

    @property
    def spread(self) -> float:
        """Sample variance of the launches' values (NaN with one launch)."""
        return float(np.var(self.values, ddof=1)) if self.count > 1 else math.nan


def _logs(values: np.ndarray) -> np.ndarray:
    """Finite natural logs (times of 0 or below dropped)."""
    return finite(log_times(values))


def launch_values(candidate: Series, reference: Series) -> LaunchValues | None:
    """The per-launch log-ratios of ``candidate`` to ``reference`` and their sampling
    variances (None: no launch in common, or rows without per-round times)."""
    if not (candidate.has_rounds and reference.has_rounds) or candidate is reference:
        return None
    paired = candidate.group == reference.group
    launches, values, within = [], [], []
    for mine in candidate.launches:
        theirs = reference.launch(mine.number)
        if theirs is None:
            continue
        if paired:
            clusters = same_group_samples(_one(candidate, mine), _one(reference, theirs))
            if not clusters:
                continue
            diffs = clusters[0]
            value = float(np.median(diffs))
            # One value: a launch measured in rounds of its own (resume); both medians vary.
            var = median_variance(diffs) if diffs.size > 1 else _apart(mine, theirs)
        else:
            value = float(log_times(mine.typical_us) - log_times(theirs.typical_us))
            var = _apart(mine, theirs)
        if math.isfinite(value):
            launches.append(mine.number)
            values.append(value)
            within.append(var)
    if not launches:
        return None
    return LaunchValues(tuple(launches), np.array(values), np.array(within), paired)


def _one(series: Series, launch: Launch) -> Series:
    return Series(series.group, (launch,))


def _apart(mine: Launch, theirs: Launch) -> float:
    """Sampling variance of log median(mine) - log median(theirs), measured apart."""
    return median_variance(_logs(mine.rounds)) + median_variance(_logs(theirs.rounds))


# --- pools --------------------------------------------------------------------------------


def band_of(size: int) -> int:
    """The size band (index into BAND_EDGES) of a message size."""
    return max(i for i, edge in enumerate(BAND_EDGES) if size >= edge)


def band_name(band: int) -> str:
    """'0-4K', '4K-256K', '256K-' style text of a band."""
    low = format_size(BAND_EDGES[band]) if band else "0"
    high = format_size(BAND_EDGES[band + 1]) if band + 1 < len(BAND_EDGES) else ""
    return f"{low}-{high}"


@dataclass(frozen=True)
class Observation:
    """One candidate at one point of one entry, for the pool estimate."""

    entry: object  # the entry's key (hashable)
    label: str
    size: int
    values: LaunchValues


@dataclass(frozen=True)
class Component:
    """One pool's variance components (of log-ratios) and what they rest on."""

    point_launch: float  # var(u + v): a point's launch-to-launch variance beyond sampling
    launch_wide: float  # var(u): the part shared by a band's sizes within a launch
    points: int  # points with >= 2 launches in the pool
    df: int  # degrees of freedom behind point_launch's independent part: sum(k - 1)
    heterogeneous: int  # points whose own launches disagree beyond the pool
    # The correlation of two candidates' launch values at one point: the part of a launch's
    # shift that every candidate shares (native's own drift, seen through the ratio), which
    # cancels when two candidates are compared.
    correlation: float = 0.0
    # The launches the pool's points share (the median count): the components every point
    # of the pool sees alike (the band-wide shift, native's drift) rest on launches - 1
    # degrees of freedom, however many points the pool holds. 0: unknown (old tables).
    launches: int = 0
    # The wider pool whose variances stand in for this pool's estimate of 0 ('' if none).
    borrowed: str = ""

    @property
    def launch_df(self) -> float:
        """The df of the launch-level components: the pool's launches less one."""
        return float(self.launches - 1) if self.launches > 1 else math.inf

    @property
    def expected_heterogeneous(self) -> float:
        """Points expected to be flagged by chance alone."""
        return HETEROGENEITY_ALPHA * self.points


@dataclass(frozen=True)
class LaunchPool:
    """Variance components per (entry, band, paired), with fallbacks."""

    components: Mapping[tuple, Component] = field(default_factory=dict)
    within: float = 0.0  # the median sampling variance: stands in where rounds were few

    def component(self, entry: object, size: int, paired: bool) -> Component:
        """The component that applies to one point (the narrowest pool with data)."""
        for key in (
            (entry, band_of(size), paired),
            (entry, None, paired),
            (None, None, paired),
        ):
            if key in self.components:
                return self.components[key]
        return Component(0.0, 0.0, 0, 0, 0)

    def lines(self) -> list[str]:
        """One line per pool, for the table's summary."""
        lines = []
        for (entry, band, paired), c in sorted(self.components.items(), key=_pool_order):
            if entry is None or band is None:
                continue
            kind = "paired in rounds" if paired else "across launches"
            lines.append(
                f"{entry} {band_name(band)} ({kind}): launch-to-launch sd "
                f"{math.sqrt(c.point_launch) * 100:.1f}% (shared by the band "
                f"{math.sqrt(c.launch_wide) * 100:.1f}%), {c.points} points, "
                f"{c.heterogeneous} beyond the pool ({c.expected_heterogeneous:.1f} expected "
                f"by chance), candidates' launch shifts correlated {c.correlation:.2f}; "
                f"{c.launches} launches: launch-level df {c.launch_df:g}, point-level df {c.df}"
                + (f"; its own estimate 0, floored at the {c.borrowed}'s" if c.borrowed else "")
            )
        return lines

    def as_record(self) -> list[dict]:
        """The pools as JSON-ready rows (the table's header keeps them)."""
        return [
            {
                "entry": None if entry is None else str(entry),
                "band": None if band is None else band_name(band),
                "paired": paired,
                "point_launch_var": round(c.point_launch, 8),
                "launch_wide_var": round(c.launch_wide, 8),
                "points": c.points,
                "df": c.df,
                "launches": c.launches,
                "heterogeneous": c.heterogeneous,
                "correlation": round(c.correlation, 4),
            }
            for (entry, band, paired), c in sorted(self.components.items(), key=_pool_order)
        ]


def _pool_order(item) -> tuple:
    (entry, band, paired), _ = item
    return (str(entry), -1 if band is None else band, str(paired))


def _filled(within: np.ndarray, fallback: float) -> np.ndarray:
    return np.where(np.isfinite(within), within, fallback)


def _point_launch(observations: list[Observation], fallback_within: float) -> tuple[float, int]:
    multi = [o.values for o in observations if o.values.count > 1]
    if not multi:
        return 0.0, 0
    stat = np.array([v.spread for v in multi])
    df = np.array([v.count - 1 for v in multi], dtype=float)
    base = np.array([float(np.mean(_filled(v.within, fallback_within))) for v in multi])
    return solve_median(stat, df, base, np.ones_like(stat)), int(df.sum())


def _launch_wide(observations: list[Observation], total: float, fallback_within: float) -> float:
    """var(u) from each (entry, candidate, band)'s launch means of residuals across sizes."""
    groups: dict[tuple, list[LaunchValues]] = {}
    for o in observations:
        if o.values.count > 1:
            groups.setdefault((o.entry, o.label, band_of(o.size)), []).append(o.values)
    stat, df, base, scale = [], [], [], []
    for members in groups.values():
        common = sorted(set.intersection(*(set(v.launches) for v in members)))
        if len(members) < 3 or len(common) < 2:
            continue
        residuals = np.array([_residuals(v, common) for v in members])  # sizes x launches
        column = residuals.mean(axis=0)
        sizes = len(members)
        within = float(np.mean([np.mean(_filled(v.within, fallback_within)) for v in members]))
        stat.append(float(np.sum(column**2) / (len(common) - 1)))
        df.append(len(common) - 1)
        # E[S^2] = var(u) (1 - 1/S) + (total + within) / S
        base.append((total + within) / sizes)
        scale.append(1 - 1 / sizes)
    if not stat:
        return 0.0
    found = solve_median(np.array(stat), np.array(df, float), np.array(base), np.array(scale))
    return min(found, total)


def _residuals(values: LaunchValues, common: list[int]) -> np.ndarray:
    picked = np.array([values.values[values.launches.index(k)] for k in common])
    return picked - picked.mean()


def heterogeneity(values: LaunchValues, component: Component, fallback_within: float) -> float:
    """p-value of the point's own launch spread under the pool (1.0 with one launch)."""
    if values.count < 2:
        return 1.0
    expected = component.point_launch + float(np.mean(_filled(values.within, fallback_within)))
    if expected <= 0:
        return 0.0 if values.spread > 0 else 1.0
    df = values.count - 1
    return float(special.gammaincc(df / 2, df * values.spread / expected / 2))


def median_within(observations: Iterable[Observation]) -> float:
    """The median known sampling variance: stands in where a launch had too few rounds."""
    known = [w for o in observations for w in o.values.within if math.isfinite(w)]
    return float(np.median(known)) if known else 0.0


def _component(observations: list[Observation], within: float) -> Component:
    total, df = _point_launch(observations, within)
    wide = _launch_wide(observations, total, within)
    partial = Component(total, wide, 0, df, 0)
    multi = [o for o in observations if o.values.count > 1]
    flagged = sum(heterogeneity(o.values, partial, within) < HETEROGENEITY_ALPHA for o in multi)
    shared = candidate_correlation(observations)
    launches = int(np.median([o.values.count for o in multi])) if multi else 0
    return Component(total, wide, len(multi), df, flagged, shared, launches)


def candidate_correlation(observations: list[Observation]) -> float:
    """The pooled correlation of candidates' launch values at the same point: over every
    pair of candidates measured in the same launches, 2 sum cov(a, b) / sum (var a +
    var b), clipped to [0, 0.99] (a ratio of sums: many pairs, no single one decides)."""
    points: dict[tuple, list[LaunchValues]] = {}
    for o in observations:
        if o.values.count > 1:
            points.setdefault((o.entry, o.size), []).append(o.values)
    covariance = variance = 0.0
    for members in points.values():
        common = sorted(set.intersection(*(set(v.launches) for v in members)))
        if len(members) < 2 or len(common) < 2:
            continue
        residuals = np.array([_residuals(v, common) for v in members])
        matrix = residuals @ residuals.T / (len(common) - 1)
        trace = float(np.trace(matrix))
        covariance += float(matrix.sum()) - trace  # twice the sum over pairs
        variance += (len(members) - 1) * trace
    if variance <= 0:
        return 0.0
    return float(np.clip(covariance / variance, 0.0, 0.99))


def estimate_pool(observations: Iterable[Observation]) -> LaunchPool:
    """The run's variance components, per (entry, band, paired) where a pool holds
    MIN_POOL_POINTS points with several launches, and per wider pool as fallbacks."""
    observations = list(observations)
    within = median_within(observations)
    keyed: dict[tuple, list[Observation]] = {}
    for o in observations:
        paired = o.values.paired
        for key in (
            (o.entry, band_of(o.size), paired),
            (o.entry, None, paired),
            (None, None, paired),
        ):
            keyed.setdefault(key, []).append(o)
    components = {}
    for key, members in keyed.items():
        if sum(o.values.count > 1 for o in members) >= MIN_POOL_POINTS:
            components[key] = _component(members, within)
    # Widest first, so that a band borrows from its entry's pool once that is floored.
    for key in sorted(components, key=lambda k: (k[0] is not None, k[1] is not None)):
        components[key] = _floored(key, components, keyed[key], within)
    return LaunchPool(components, within)


def _floored(
    key: tuple, components: Mapping[tuple, Component], members: list[Observation], within: float
) -> Component:
    """The pool's component, or where its method-of-moments estimate is truncated at 0,
    the nearest wider pool's variances in its place (recounting the points beyond it). A
    handful of points with 2-3 launches lands at 0 often although the launches vary: a
    t quantile times 0 would leave the rounds' noise alone in the intervals, where the
    wider pool, resting on more points of the same machine, knows better."""
    own = components[key]
    entry, band, paired = key
    if own.point_launch > 0:
        return own
    # LaunchPool.component's fallback order: the entry over every band, then the run.
    wider = [
        ((entry, None, paired), "entry's pool over every band"),
        ((None, None, paired), "run's pool"),
    ]
    for wider_key, name in wider[(band is None) + (entry is None) :]:
        found = components.get(wider_key)
        if found is None or found.point_launch <= 0:
            continue
        partial = Component(found.point_launch, found.launch_wide, 0, own.df, 0)
        multi = [o for o in members if o.values.count > 1]
        flagged = sum(heterogeneity(o.values, partial, within) < HETEROGENEITY_ALPHA for o in multi)
        return replace(
            own,
            point_launch=found.point_launch,
            launch_wide=found.launch_wide,
            heterogeneous=flagged,
            borrowed=name,
        )
    return own
