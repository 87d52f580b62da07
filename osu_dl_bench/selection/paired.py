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
import zlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

# The ratio, its interval and the bootstrap live in osu_dl_bench.stats; re-exported here
# for the callers that import them from this module.
from osu_dl_bench.stats.bootstrap import RESAMPLES, cluster_bootstrap  # noqa: F401
from osu_dl_bench.stats.components import remainder_df, satterthwaite  # noqa: F401
from osu_dl_bench.stats.intervals import LEVEL, Z_LEVEL, Ratio, quotient, t_quantile  # noqa: F401


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


def bound_text(value: float) -> str:
    """An interval's bound: two decimals, '>100' past 100x (two launches give Student's
    t one degree of freedom, and bounds in the hundreds say no more than that)."""
    return f"{value:.2f}" if value < 100 else ">100"


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
    half = t_quantile(medians.size - 1, level) * medians.std(ddof=1)
    half /= math.sqrt(medians.size)
    centre = float(medians.mean())
    return centre - float(half), centre + float(half)


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
