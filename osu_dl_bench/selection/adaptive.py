"""Where more measurement can still change a decision: the points an adaptive sweep's
next launch measures, and the candidates it measures there.

After the first launches, a point is open while some candidate other than the choice has
more than ``risk`` chance of being more than 5% faster than the choice (judged on the
run's shared evidence: curves over sizes, pooled launch variance). Only the choice,
native (the reference every ratio needs in the same launch) and those contenders are
measured again there; a candidate far from the best (at 2x, its chance of beating the
choice is nil) is not measured again. Budgeted tuning after ACCLAiM (Wilkins et al.,
"ACCLAiM: Advancing the Practicality of MPI Collective Communication Autotuning Using
Machine Learning", CLUSTER 2022) and its predecessor FACT, which reached the same accuracy
with a fraction of the measurements by choosing where to measure next.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from collectives.registry import NULL_CONTROLS
from collectives.units import format_size
from osu_dl_bench.selection.rule import RISK, SLOWER_MARGIN
from osu_dl_bench.selection.tune import PointDecision


@dataclass(frozen=True)
class OpenPoint:
    """One undecided point: what to measure there next, and why."""

    decision: PointDecision
    contenders: tuple[tuple[str, float], ...]  # (label, chance it beats the choice by 5%)

    @property
    def labels(self) -> tuple[str, ...]:
        """The candidates to measure: native and its null controls (measured wherever native
        is, so the null's figures rest on as many launches), the choice, the contenders."""
        contenders = (label for label, _ in self.contenders)
        ordered = ["native", *NULL_CONTROLS, self.decision.chosen, *contenders]
        return tuple(dict.fromkeys(ordered))

    @property
    def reason(self) -> str:
        """One line: the point, its choice and each contender's chance."""
        k = self.decision.key
        chances = ", ".join(f"{label} {chance:.2f}" for label, chance in self.contenders)
        return (
            f"{k.collective} p={k.nprocs} {format_size(self.decision.size)}: chose "
            f"{self.decision.chosen}; P(>5% faster than it): {chances}"
        )


def chance_faster(point: PointDecision, label: str) -> float:
    """P(``label`` is more than 5% faster than the point's choice)."""
    ratio = point.ratio_between(label, point.chosen)
    return 0.0 if ratio is None else 1 - ratio.chance_above(1 / SLOWER_MARGIN)


def open_point(point: PointDecision, risk: float = RISK) -> OpenPoint | None:
    """The point's contenders, or None where the decision is settled at ``risk``."""
    if point.reference is None:
        return None
    contenders = []
    for label in point.candidates:
        if label in (point.chosen, point.reference):
            continue
        chance = chance_faster(point, label)
        if chance > risk:
            contenders.append((label, chance))
    if not contenders:
        return None
    contenders.sort(key=lambda item: (-item[1], item[0]))
    return OpenPoint(point, tuple(contenders))


def open_points(points: Iterable[PointDecision], risk: float = RISK) -> list[OpenPoint]:
    """Every open point of a run's decisions."""
    return [found for found in (open_point(p, risk) for p in points) if found is not None]
