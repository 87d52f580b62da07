"""How well one run's decisions hold on a second run of the same machine: whether the
intervals are honest (coverage) and how much of the available speedup the choices take
(captured speedup).

- coverage: over every (point, candidate other than native) both runs estimated, the share
  whose estimate in B lies inside A's 95% interval. B's estimate has noise of its own, so
  an honest A interval covers it somewhat less often than 95% when B is as noisy as A;
  well below 90% says A is overconfident, above 98% that A wastes evidence.
- agreement: the share whose A and B estimates differ by less than 1.96 times the root of
  the two variances added: 95% where both runs' intervals are honest and the machine kept
  its state between the runs.
- captured speedup: over the points where B's best is at least CAPTURE_MIN times faster
  than native, sum(log(native / A's choice)) / sum(log(native / B's best)), every time
  taken from B's estimates.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from osu_dl_bench.selection.paired import Z_LEVEL

CAPTURE_MIN = 1.1
# A win large enough that a table keeping native there has missed it.
CLEAR_WIN = 1.5


@dataclass(frozen=True)
class Agreement:
    """Coverage and agreement counts over (point, candidate) pairs."""

    pairs: int
    covered: int
    agreed: int

    @property
    def coverage(self) -> float:
        """Share of B's estimates inside A's intervals."""
        return self.covered / self.pairs if self.pairs else math.nan

    @property
    def agreement(self) -> float:
        """Share of pairs whose difference lies within the combined 95% interval."""
        return self.agreed / self.pairs if self.pairs else math.nan


def agreement(pairs: Iterable[tuple]) -> Agreement:
    """Coverage and agreement over (A's ratio, B's ratio) pairs (paired.Ratio each)."""
    count = covered = agreed = 0
    for a, b in pairs:
        if not (a.ratio > 0 and b.ratio > 0):
            continue  # a time of 0 in a hand-edited run: no ratio to judge
        count += 1
        covered += a.low <= b.ratio <= a.high
        spread = math.hypot(a.log_sd, b.log_sd)
        agreed += abs(math.log(a.ratio) - math.log(b.ratio)) <= Z_LEVEL * spread
    return Agreement(count, covered, agreed)


def candidate_pairs(a_points: Mapping, b_points: Mapping) -> list[tuple]:
    """(A's ratio, B's ratio) for every (point, candidate other than the reference) that
    both decisions hold, matched by (entry key, size) and label."""
    pairs = []
    for where, b in b_points.items():
        a = a_points.get(where)
        if a is None or a.reference is None or b.reference is None:
            continue
        for label, mine in a.candidates.items():
            theirs = b.candidates.get(label)
            if theirs is not None and label != a.reference:
                pairs.append((mine.ratio, theirs.ratio))
    return pairs


@dataclass(frozen=True)
class Captured:
    """The captured speedup and the points it rests on."""

    points: int
    gained: float  # sum of log(native / choice) in B
    available: float  # sum of log(native / best) in B
    unmeasured: int  # points whose choice B did not measure (counted as no gain)

    @property
    def share(self) -> float:
        """gained / available (NaN with nothing available)."""
        return self.gained / self.available if self.available > 0 else math.nan


def captured_speedup(choices: Iterable[tuple]) -> Captured:
    """From (B's decision at a point, the judged choice as B names it) pairs."""
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
