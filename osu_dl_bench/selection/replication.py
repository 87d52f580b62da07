"""How well one run's decisions hold on a second run of the same machine: whether the
intervals are honest (agreement, with coverage beside its expectation) and how much of the
available speedup the choices take (captured speedup).

- agreement, the honesty figure: over every (point, candidate other than native) both runs
  estimated, the share whose A and B estimates differ by less than 1.96 times the root of
  the two variances added: 95% up to sampling error where both runs' intervals are honest
  and the machine kept its state between the runs (its binomial 95% interval given the
  pair count is printed beside it).
- coverage: the share whose estimate in B lies inside A's 95% interval. B's estimate has
  noise of its own: with honest sds sA and sB, P(covered) = 2 Phi(1.96 / sqrt(1 + r^2)) - 1,
  r = sB / sA, which is 83.4% at r = 1, never 95%; the mean of that expectation over the
  pairs is printed beside the observed share.
- captured speedup: over the points where the scoring run's best is at least CAPTURE_MIN
  times faster than native, sum(log(native / choice)) / sum(log(native / best)), every
  time taken from the scoring run's estimates. The choices must be made on other
  measurements than the scoring run's (a referee run, or launches held out), or the score
  rewards the scoring run's own noise.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass

from scipy import stats

from osu_dl_bench.selection.paired import Z_LEVEL, Ratio

CAPTURE_MIN = 1.1
# A win large enough that a table keeping native there has missed it.
CLEAR_WIN = 1.5


@dataclass(frozen=True)
class Agreement:
    """Coverage and agreement counts over (point, candidate) pairs, with the coverage
    honest intervals would have given (summed over the pairs)."""

    pairs: int
    covered: int
    agreed: int
    honest_covered: float = 0.0  # the sum over the pairs of honest_coverage

    @property
    def coverage(self) -> float:
        """Share of B's estimates inside A's intervals."""
        return self.covered / self.pairs if self.pairs else math.nan

    @property
    def expected_coverage(self) -> float:
        """The coverage honest intervals of these widths would give: the mean over the
        pairs of honest_coverage."""
        return self.honest_covered / self.pairs if self.pairs else math.nan

    @property
    def agreement(self) -> float:
        """Share of pairs whose difference lies within the combined 95% interval."""
        return self.agreed / self.pairs if self.pairs else math.nan

    @property
    def agreement_interval(self) -> tuple[float, float]:
        """The agreement's binomial 95% interval given the pair count (Wilson's score
        interval, scipy.stats.binomtest): where honest intervals' 95% may fall."""
        if not self.pairs:
            return (math.nan, math.nan)
        found = stats.binomtest(self.agreed, self.pairs).proportion_ci(0.95, method="wilson")
        return (float(found.low), float(found.high))


def honest_coverage(a: Ratio, b: Ratio) -> float:
    """P(B's estimate lies inside A's 95% interval) were both estimates honest with their
    stated sds: 2 Phi(1.96 / sqrt(1 + r^2)) - 1, r = sd(B) / sd(A) (the difference of two
    independent normal errors has the root of their variances added)."""
    a_sd, b_sd = a.log_sd, b.log_sd
    if math.isinf(a_sd):
        return 1.0  # an unbounded interval covers every estimate
    apart = math.hypot(a_sd, b_sd)
    if apart == 0:
        return 1.0  # two exact estimates of one truth coincide
    return float(2 * stats.norm.cdf(Z_LEVEL * a_sd / apart) - 1)


def agreement(pairs: Iterable[tuple]) -> Agreement:
    """Coverage and agreement over (A's ratio, B's ratio) pairs (paired.Ratio each)."""
    count = covered = agreed = 0
    honest = 0.0
    for a, b in pairs:
        if not (a.ratio > 0 and b.ratio > 0):
            continue  # a time of 0 in a hand-edited run: no ratio to judge
        count += 1
        covered += a.low <= b.ratio <= a.high
        honest += honest_coverage(a, b)
        spread = math.hypot(a.log_sd, b.log_sd)
        agreed += abs(math.log(a.ratio) - math.log(b.ratio)) <= Z_LEVEL * spread
    return Agreement(count, covered, agreed, honest)


def same_candidates(a_points: Mapping, b_points: Mapping) -> Iterator[tuple]:
    """(entry key, size, A's ratio, B's ratio) of every (point, candidate other than the
    reference) that both decisions hold against native, matched by (entry key, size) and
    label."""
    for where, b in b_points.items():
        a = a_points.get(where)
        if a is None or a.reference is None or b.reference is None:
            continue
        for label, mine in a.candidates.items():
            theirs = b.candidates.get(label)
            if theirs is not None and label != a.reference:
                yield a.key, a.size, mine.ratio, theirs.ratio


def candidate_pairs(a_points: Mapping, b_points: Mapping) -> list[tuple]:
    """(A's ratio, B's ratio) of every candidate both decisions hold (same_candidates)."""
    return [(mine, theirs) for _, _, mine, theirs in same_candidates(a_points, b_points)]


@dataclass(frozen=True)
class Captured:
    """The captured speedup and the points it rests on."""

    points: int
    gained: float  # sum of log(native / choice) in the scoring run
    available: float  # sum of log(native / best) in the scoring run
    unmeasured: int  # points whose choice the scoring run did not measure (no gain)

    @property
    def share(self) -> float:
        """gained / available (NaN with nothing available)."""
        return self.gained / self.available if self.available > 0 else math.nan


def captured_speedup(choices: Iterable[tuple]) -> Captured:
    """From (the scoring run's decision at a point, the choice as that run names it)
    pairs; the choices must come from other measurements than the scoring run's."""
    points = unmeasured = 0
    gained = available = 0.0
    for point, choice in choices:
        if point.reference is None:
            continue
        best = point.candidates[point.best].ratio.ratio
        if not best > 0 or 1 / best < CAPTURE_MIN:
            continue
        points += 1
        available += -math.log(best)
        mine = point.candidates.get(choice) if choice is not None else None
        if mine is None:
            unmeasured += 1
            continue
        gained += -math.log(mine.ratio.ratio) if mine.ratio.ratio > 0 else 0.0
    return Captured(points, gained, available, unmeasured)


def missed_wins(choices: Iterable[tuple]) -> tuple[int, int]:
    """(points where B's best is at least CLEAR_WIN times faster than native with its
    interval below 1, those of them where the judged choice is native)."""
    clear = missed = 0
    for point, choice in choices:
        if point.reference is None:
            continue
        best = point.candidates[point.best].ratio
        if best.ratio <= 1 / CLEAR_WIN and best.high < 1:
            clear += 1
            missed += choice == point.reference
    return clear, missed
