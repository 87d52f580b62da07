"""Paired comparison of two candidates at one point: the ratio of their times and its 95%
confidence interval, from rounds and launches that ran side by side. Pure numpy.

A sweep spreads each point over K launches (``sweep --launches K``); inside a launch, round
i of every candidate of the same isolation group ran back to back, so the machine's state
is shared by the pair and cancels in the ratio:

- same group as the reference: per launch k, the per-round differences
  ``log t_c[i] - log t_ref[i]`` (rounds paired by index; the common prefix if the counts
  differ);
- another group (gloo, nccl against the MPI group's native): the two ran in different
  processes, minutes apart, so only launch k pairs with launch k: one value per launch,
  ``log median(t_c,k) - log median(t_ref,k)``. With a single common launch there is no
  spread between launches to judge by, so the candidate's own rounds against the
  reference's median stand in for it (unpaired; wider, which is the honest direction).

The ratio is ``exp(median of the pooled values)``; its 95% interval comes from a two-stage
cluster bootstrap (Davison and Hinkley, "Bootstrap Methods and their Application", 1997,
section 3.8, resampling of hierarchical data): draw launches with replacement, then values
within each drawn launch with replacement, take the median of the pooled draw; the 2.5 and
97.5 percentiles of 2000 such medians bound the interval. Launches are the top stage
because the launch-to-launch variance is the largest part (the sweep's launch pools say
how large). The generator is seeded from the point and the pair (``seed_of``), so the same
run gives the same table.
With a handful of launches the percentile bootstrap is too narrow (Cameron, Gelbach and
Miller, "Bootstrap-based improvements for inference with clustered errors", 2008: few
clusters, under-coverage), so the interval is widened to Student's t interval of the
mean of the launches' medians where that is wider: two sweeps of this machine ten
minutes apart disagreed beyond the bootstrap interval alone at 5-9% of the points.

Legacy rows (one launch, no per-round times) keep the old rule's meaning: ratio =
``median_c / median_ref`` and interval ``(q1_c / median_ref, q3_c / median_ref)``, so "q3
below native's median" reads as "interval below 1".
"""

from __future__ import annotations

import math
import sys
import zlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np
from scipy import stats

RESAMPLES = 2000
LEVEL = 0.95
# The standard normal quantile of a two-sided LEVEL interval (1.96 at 95%).
Z_LEVEL = float(stats.norm.ppf(0.5 + LEVEL / 2))


def point_latency(launch_medians: Iterable[float]) -> float:
    """A point's latency: the median over its launches of each launch's median time (one
    slow launch among three moves it little). tune's records, plot, compare and the
    model all read a point's latency through this one function."""
    return float(np.median(np.asarray(list(launch_medians), dtype=float)))


@dataclass(frozen=True, eq=False)
class Launch:
    """One candidate's row in one launch: its per-round times (µs, in round order; empty
    for legacy rows) and the row's summary over those rounds."""

    number: int
    rounds: np.ndarray
    median_us: float
    q1_us: float
    q3_us: float
    round_count: int = 0  # the row's rounds column: counts legacy rows' rounds too
    # The rounds' machine-state reference as stored (ref_copy_us, ref_allreduce_us): the
    # same on every row measured in the same rounds, so it tells rounds that ran side by
    # side from rounds measured again later (sweep --resume re-measures a dropped row
    # alone). '' where unknown (legacy rows, hand-made series).
    rounds_id: str = ""

    @property
    def typical_us(self) -> float:
        """The launch's median: over its rounds when it has them, else the row's."""
        return float(np.median(self.rounds)) if self.rounds.size else self.median_us


@dataclass(frozen=True, eq=False)
class Series:
    """One candidate's measurements at one point: its isolation group and its launches."""

    group: str
    launches: tuple[Launch, ...]

    @property
    def has_rounds(self) -> bool:
        """True when every launch kept its per-round times (no legacy row)."""
        return bool(self.launches) and all(x.rounds.size for x in self.launches)

    def launch(self, number: int) -> Launch | None:
        """The launch numbered ``number``, or None."""
        return next((x for x in self.launches if x.number == number), None)

    def pooled(self) -> np.ndarray:
        """Every round of every launch (empty for legacy rows)."""
        parts = [x.rounds for x in self.launches]
        return np.concatenate(parts) if parts else np.empty(0)

    def latency_us(self) -> float:
        """The point's latency (point_latency over this series' launches)."""
        return point_latency(x.typical_us for x in self.launches)

    def quartiles_us(self) -> tuple[float, float, float]:
        """(q1, median, q3) over every round of every launch; for legacy rows, the medians
        of the rows' own q1, median and q3."""
        if self.has_rounds:
            q1, median, q3 = np.percentile(self.pooled(), [25, 50, 75])
            return float(q1), float(median), float(q3)
        rows = self.launches
        return (
            float(np.median([x.q1_us for x in rows])),
            float(np.median([x.median_us for x in rows])),
            float(np.median([x.q3_us for x in rows])),
        )

    @property
    def rounds(self) -> int:
        """How many rounds the series holds in all."""
        return sum(x.rounds.size or x.round_count for x in self.launches)


@dataclass(frozen=True)
class Ratio:
    """time(candidate) / time(reference) at one point, with its 95% interval and what it
    rests on: the launches paired and the values pooled (rounds, or rows for legacy)."""

    ratio: float
    low: float
    high: float
    launches: int
    rounds: int
    # Where the estimate comes from: 'paired' (this point's rounds and launches alone),
    # 'curve' (the smoothed curve over sizes with the run's pooled launch variance),
    # 'point' (the point's own estimate with the pooled variance: too few sizes for a
    # curve), 'misfit' (the same, where the curve misses the point), 'heterogeneous'
    # (its launches disagree beyond the pool: its own spread), 'pooled' (a curve's,
    # 'point' or 'misfit' estimate partially pooled with the same candidate's at the other
    # process counts: selection.pooling).
    evidence: str = "paired"
    # The sd of the part of ln(ratio)'s error that every candidate's estimate at this point
    # shares (native's own launch drift): it cancels in a comparison of two candidates.
    common_sd: float = 0.0
    # Degrees of freedom behind the interval: Student's t with ``df`` set its width
    # (Welch-Satterthwaite over the variance components, each with the df of what
    # estimated it); inf: a normal reading (bootstrap intervals, legacy rows).
    df: float = math.inf
    # The launch-level df: the launches, less one, that estimated the components shared by
    # a pool's points (the band-wide shift); the df of common_sd's part too.
    launch_df: float = math.inf
    # The between-period sd of ln(ratio) (the machine's drift over minutes to hours) and
    # its df: it widens the reported interval (reported()), never the decision.
    period_sd: float = 0.0
    period_df: float = math.inf

    @property
    def quantile(self) -> float:
        """The two-sided LEVEL quantile the interval was built with (t at ``df``)."""
        return t_quantile(self.df)

    @property
    def log_sd(self) -> float:
        """The standard deviation of ln(ratio) implied by the 95% interval read as a normal
        one (the interval's half-width over 1.96)."""
        if self.low <= 0 or self.high <= 0:
            return math.inf
        return (math.log(self.high) - math.log(self.low)) / (2 * Z_LEVEL)

    @property
    def sd(self) -> float:
        """The standard error of ln(ratio): the interval's half-width over its t quantile
        (log_sd where df is infinite)."""
        if self.low <= 0 or self.high <= 0:
            return math.inf
        return (math.log(self.high) - math.log(self.low)) / (2 * self.quantile)

    def chance_above(self, threshold: float) -> float:
        """P(the true ratio exceeds ``threshold``), reading the interval as Student's t one
        at ``df`` on the log scale (normal where df is infinite), with the half of it on
        the threshold's side (a bootstrap interval need not be symmetric)."""
        if not (self.ratio > 0 and threshold > 0):
            return 0.5
        centre, target = math.log(self.ratio), math.log(threshold)
        bound = self.high if target >= centre else self.low
        if not 0 < bound < math.inf:
            return 0.5
        sd = abs(math.log(bound) - centre) / self.quantile
        if sd == 0:
            return float(centre > target)
        return float(stats.t.sf((target - centre) / sd, self.df))

    def reported(self) -> Ratio:
        """The interval a table, summary or explanation prints: this one widened by the
        between-period variance (the decision keeps the within-run interval)."""
        if self.period_sd <= 0 or not 0 < self.low <= self.high < math.inf:
            return self
        # Products, not **: a huge sd overflows to inf instead of raising OverflowError.
        within = self.sd * self.sd
        period = self.period_sd * self.period_sd
        if not math.isfinite(within + period):  # no bound left: printed as unbounded
            return replace(self, low=0.0, high=math.inf, period_sd=0.0)
        df = satterthwaite([(within, self.df), (period, self.period_df)])
        half = t_quantile(df) * math.sqrt(within + period)
        centre = math.log(self.ratio)
        low = min(math.log(self.low), centre - half)
        high = max(math.log(self.high), centre + half)
        return replace(self, low=_exp(low), high=_exp(high), df=df, period_sd=0.0)

    @property
    def expected(self) -> float:
        """The expected ratio under that reading: exp(mean + sd^2 / 2)."""
        sd = self.log_sd
        if not math.isfinite(sd):
            return math.inf
        try:
            return self.ratio * math.exp(sd * sd / 2)
        except OverflowError:  # a spread past exp's range (sd > 37): no useful expectation
            return math.inf

    @property
    def below_one(self) -> bool:
        """The candidate is faster beyond the noise: the whole interval lies below 1."""
        return self.high < 1

    def overlaps(self, other: Ratio) -> bool:
        """The two intervals share a value (this one does not start above ``other``'s)."""
        return self.low <= other.high and other.low <= self.high

    @property
    def log_ratio(self) -> float:
        """ln(ratio), for averaging ratios over sizes."""
        return math.log(self.ratio)


# ln of the largest float: exp of anything above it overflows.
_LOG_MAX = math.log(sys.float_info.max)


def _exp(value: float) -> float:
    """exp(value), inf past the largest float (math.exp raises OverflowError there)."""
    return math.exp(value) if value < _LOG_MAX else math.inf


def bound_text(value: float) -> str:
    """An interval's bound: two decimals, '>100' past 100x (two launches give Student's
    t one degree of freedom, and bounds in the hundreds say no more than that)."""
    return f"{value:.2f}" if value < 100 else ">100"


def t_quantile(df: float, level: float = LEVEL) -> float:
    """Student's t two-sided ``level`` quantile at ``df`` (the normal one where df is
    infinite; infinite below one degree of freedom)."""
    if math.isinf(df):
        return float(stats.norm.ppf(0.5 + level / 2))
    return float(stats.t.ppf(0.5 + level / 2, df)) if df >= 1 else math.inf


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


def quotient(mine: Ratio, theirs: Ratio) -> Ratio:
    """mine / theirs for two ratios to the same reference: the log-scale variances added,
    less twice the part they share (common_sd), with the Welch-Satterthwaite df of what is
    left (the shared part's df leaves with it)."""
    parts, shared = [], []
    for ratio in (mine, theirs):
        total = ratio.sd**2
        common = min(ratio.common_sd, ratio.sd) ** 2  # no more than the whole
        shared.append(math.sqrt(common))
        parts.append((total - common, remainder_df(total, ratio.df, common, ratio.launch_df)))
    # What the two shared parts do not cancel: (sd_a - sd_b)^2, estimated from launches.
    parts.append(((shared[0] - shared[1]) ** 2, min(mine.launch_df, theirs.launch_df)))
    variance = sum(c for c, _ in parts)
    df = satterthwaite(parts)
    centre = math.log(mine.ratio) - math.log(theirs.ratio)
    half = t_quantile(df) * math.sqrt(variance)
    launches = min(mine.launches, theirs.launches)
    return Ratio(
        math.exp(centre),
        math.exp(centre - half),
        math.exp(centre + half),
        launches,
        mine.rounds,
        mine.evidence,
        df=df,
        launch_df=min(mine.launch_df, theirs.launch_df),
    )


def identity(series: Series) -> Ratio:
    """A candidate against itself: 1, [1, 1]."""
    return Ratio(1.0, 1.0, 1.0, len(series.launches), series.rounds)


def seed_of(*parts: object) -> int:
    """A deterministic seed from the point and the pair (stable across runs and hosts,
    unlike hash())."""
    return zlib.crc32("|".join(map(str, parts)).encode())


def log_times(values: np.ndarray | float) -> np.ndarray:
    """Natural logs; a time of 0 or below gives -inf or NaN (dropped by finite), not an
    error."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.log(np.asarray(values, dtype=float))


def finite(values: np.ndarray) -> np.ndarray:
    """The finite values (NaN and infinities dropped)."""
    return values[np.isfinite(values)]


def same_group_samples(candidate: Series, reference: Series) -> list[np.ndarray]:
    """Per launch both measured, the per-round log-ratios (common prefix of the rounds)."""
    clusters = []
    for mine in candidate.launches:
        theirs = reference.launch(mine.number)
        if theirs is None:
            continue
        if _ran_apart(mine, theirs):
            # Not the same rounds: only the launches' medians compare, as across groups.
            values = finite(
                np.atleast_1d(log_times(mine.typical_us) - log_times(theirs.typical_us))
            )
        else:
            n = min(mine.rounds.size, theirs.rounds.size)
            values = finite(log_times(mine.rounds[:n]) - log_times(theirs.rounds[:n]))
        if values.size:
            clusters.append(values)
    return clusters


def _ran_apart(mine: Launch, theirs: Launch) -> bool:
    """Whether two rows of one launch were measured in different rounds (their stored
    machine-state references differ)."""
    return bool(mine.rounds_id and theirs.rounds_id) and mine.rounds_id != theirs.rounds_id


def cross_group_samples(candidate: Series, reference: Series) -> list[np.ndarray]:
    """Per launch both measured, one log-ratio of the launches' medians; with one common
    launch only, the candidate's rounds against the reference's median."""
    pairs = [
        (mine, reference.launch(mine.number))
        for mine in candidate.launches
        if reference.launch(mine.number) is not None
    ]
    if len(pairs) == 1 and pairs[0][0].rounds.size:
        mine, theirs = pairs[0]
        values = finite(log_times(mine.rounds) - log_times(theirs.typical_us))
        return [values] if values.size else []
    values = [log_times(m.typical_us) - log_times(t.typical_us) for m, t in pairs]
    return [np.array([v]) for v in values if math.isfinite(v)]


def launch_interval(
    clusters: Sequence[np.ndarray], level: float = LEVEL
) -> tuple[float, float] | None:
    """Student's t interval of the mean of the launches' medians (None with fewer than two
    launches): the launch-to-launch variance, judged as few samples must be."""
    if len(clusters) < 2:
        return None
    medians = np.array([np.median(c) for c in clusters])
    half = stats.t.ppf(0.5 + level / 2, medians.size - 1) * medians.std(ddof=1)
    half /= math.sqrt(medians.size)
    centre = float(medians.mean())
    return centre - float(half), centre + float(half)


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
    tail = (1 - level) / 2 * 100
    low, high = np.percentile(medians, [tail, 100 - tail])
    return float(low), float(high)


def legacy_ratio(candidate: Series, reference: Series) -> Ratio:
    """The old rule as a ratio: median_c / median_ref in (q1_c, q3_c) / median_ref."""
    q1, median, q3 = candidate.quartiles_us()
    base = reference.quartiles_us()[1]
    launches = len(candidate.launches)
    # A row whose quartiles miss its median (edited, or merged from elsewhere) still
    # gets an interval that holds its own estimate.
    low, high = min(q1, median), max(q3, median)
    return Ratio(median / base, low / base, high / base, launches, candidate.rounds)


def paired_ratio(candidate: Series, reference: Series, *seed_parts: object) -> Ratio | None:
    """time(candidate) / time(reference) with its 95% interval; None if they share no
    launch to pair. ``seed_parts`` name the point and the pair (see seed_of)."""
    if candidate is reference:
        return identity(candidate)
    if not (candidate.has_rounds and reference.has_rounds):
        return legacy_ratio(candidate, reference)
    same = candidate.group == reference.group
    sample = same_group_samples if same else cross_group_samples
    clusters = sample(candidate, reference)
    if not clusters:
        return None
    pooled = np.concatenate(clusters)
    centre = float(np.median(pooled))
    low, high = cluster_bootstrap(clusters, seed_of(*seed_parts))
    between = launch_interval(clusters)
    if between is not None:
        # The bootstrap over a handful of launches is too narrow (it can only recombine
        # the launches it saw): the t interval over their medians widens it where needed.
        low, high = min(low, between[0]), max(high, between[1])
    # A percentile interval need not hold its own point estimate; a decision must.
    low, high = min(low, centre), max(high, centre)
    if pooled.size < 2:
        # One value has no spread to judge by: it cannot be told from the reference.
        low, high = min(low, 0.0), max(high, 0.0)
    rounds = int(pooled.size) if same else _rounds_behind(candidate, reference)
    return Ratio(math.exp(centre), math.exp(low), math.exp(high), len(clusters), rounds)


def _rounds_behind(candidate: Series, reference: Series) -> int:
    """The candidate's rounds in the launches it shares with the reference."""
    shared = {x.number for x in reference.launches}
    return sum(x.rounds.size for x in candidate.launches if x.number in shared)


def launch_of(
    number: int,
    rounds: Iterable[float],
    median_us: float,
    q1_us: float,
    q3_us: float,
    count: int,
    rounds_id: str = "",
) -> Launch:
    """A Launch from plain values (rounds: any iterable of µs, possibly empty)."""
    values = np.asarray(list(rounds), dtype=float)
    return Launch(
        number, values, float(median_us), float(q1_us), float(q3_us), int(count), rounds_id
    )


def series_of(group: str, launches: Mapping[int, Iterable[float]]) -> Series:
    """A Series from each launch's per-round values in round order (launch number ->
    values), its summary (median, quartiles, count) taken over those rounds. The values
    may be rates as well as times: a log-ratio of rates is the negated log-ratio of times,
    and every step of paired_ratio (median, bootstrap percentiles, t interval) commutes
    with negation, so rates give rate ratios with the same interval, bounds swapped."""
    built = []
    for number in sorted(launches):
        values = np.asarray(list(launches[number]), dtype=float)
        if not values.size:
            continue
        q1, median, q3 = np.percentile(values, [25, 50, 75])
        built.append(launch_of(number, values, median, q1, q3, values.size))
    return Series(group, tuple(built))
