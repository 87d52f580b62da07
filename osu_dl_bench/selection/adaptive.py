"""Where more measurement can still change a decision: the points an adaptive sweep's
next launch measures, and the candidates it measures there.

A point is settled once what its choice may still lose is below SETTLED_LOSS (1%) of
native's time: the expected loss of the choice (DecisionRule.expected_loss, Margrabe's
formula), less the part the rule accepts knowingly (the choice's expected time over the
best's, which the indifference zone allows). That remainder is the value of perfect
information at the point, the stopping rule of Chick and Inoue's linear-loss procedures
("New two-stage and sequential procedures for selecting the best simulated system",
Operations Research 49, 2001): a true tie shrinks it as sd / sqrt(launches) and stops,
where a test of "5% faster" would need (1.645 sd / 0.049)^2 launches.

An open point measures native (the reference every ratio needs in the same launch), the
choice, the best and its contenders: the candidates that may still save at least half the
threshold over the best (E[(time(best) - time(c))+]); a candidate far from the best (at 2x,
it can save nothing) is not measured again. Budgeted tuning after ACCLAiM (Wilkins et al.,
"ACCLAiM: Advancing the Practicality of MPI Collective Communication Autotuning Using
Machine Learning", CLUSTER 2022) and its predecessor FACT, which reached the same accuracy
with a fraction of the measurements by choosing where to measure next.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field

import pandas as pd

from collectives.registry import NULL_CONTROLS
from collectives.units import format_size
from osu_dl_bench.jobs.plan import is_native_copy
from osu_dl_bench.selection.estimate import entry_ratios, point_values
from osu_dl_bench.selection.evidence import LaunchPool, LaunchValues
from osu_dl_bench.selection.null_control import NullFigures
from osu_dl_bench.selection.paired import Ratio, quotient
from osu_dl_bench.selection.rule import DEFAULT_RULE, DecisionRule, exchange_value
from osu_dl_bench.selection.table import EntryKey
from osu_dl_bench.selection.tune import (
    Decisions,
    MeasuredPoint,
    PointDecision,
    decide_estimates,
    decision_nulls,
    estimate_run,
    estimates_of,
    measured_entries,
    without_null_controls,
)

# A point settles once its choice may lose less than this share of native's time.
SETTLED_LOSS = 0.01
# A candidate that may save less than this share of the threshold over the best cannot
# keep the point open on its own: it is not measured again.
CONTENDER_SHARE = 0.5


@dataclass(frozen=True)
class OpenPoint:
    """One undecided point: what to measure there next, and why."""

    decision: PointDecision
    loss: float  # what the choice may still lose, in native's time (loss_left)
    contenders: tuple[tuple[str, float], ...]  # (label, expected saving over the best)
    # The null controls the rule would choose over native here ('native:null 0.93x
    # [0.74-1.17]'): native's own copy looks faster, so the launches seen so far have not
    # averaged the launch's shift out.
    fooled: tuple[str, ...] = ()
    settled: float = SETTLED_LOSS

    @property
    def labels(self) -> tuple[str, ...]:
        """The candidates to measure: native and its null controls (measured wherever native
        is, so the null's figures rest on as many launches), the choice, the best, the
        contenders."""
        point = self.decision
        contenders = (label for label, _ in self.contenders)
        ordered = ["native", *NULL_CONTROLS, point.chosen, point.best, *contenders]
        return tuple(dict.fromkeys(ordered))

    @property
    def reason(self) -> str:
        """One line: the point, its choice and best, what is left to learn there."""
        point, k = self.decision, self.decision.key
        savings = ", ".join(f"{label} {saving:.1%}" for label, saving in self.contenders)
        # A point open for the null control alone may lose less than the threshold.
        why = (
            f"open while above {self.settled:.0%}"
            if self.loss >= self.settled
            else f"below {self.settled:.0%}, open for the null control"
        )
        return (
            f"{k.collective} p={k.nprocs} {format_size(point.size)}: chose {point.chosen}, "
            f"best {point.best}; the choice may still lose {self.loss:.1%} of native's time "
            f"({why}); contenders' expected saving over the best: "
            f"{savings or 'none beyond the best'}"
            + (
                f"; the rule would choose {', '.join(self.fooled)} over native"
                if self.fooled
                else ""
            )
        )


def exchange(point: PointDecision, mine: str, theirs: str) -> float:
    """E[(time(mine) - time(theirs))+] at the point, in native's time."""
    ratios = point.ratios()
    first, second = ratios[mine], ratios[theirs]
    return exchange_value(first, second, quotient(first, second).log_sd)


def loss_left(point: PointDecision) -> float:
    """What the choice may still lose, in native's time: its expected loss less the gap
    to the best's expected time that the rule accepts knowingly (the zone)."""
    ratios = point.ratios()
    accepted = max(ratios[point.chosen].expected - ratios[point.best].expected, 0.0)
    return max(point.rule.expected_loss(ratios, point.chosen) - accepted, 0.0)


def open_point(
    point: PointDecision, settled: float = SETTLED_LOSS, fooled: tuple[str, ...] = ()
) -> OpenPoint | None:
    """The point's contenders, or None where the choice may lose less than ``settled`` and
    no null control (``fooled``: those the rule would choose over native) says that the
    evidence still mistakes native for faster than itself where that matters: a choice
    other than native, which the launch's shift may have made (a choice of native has
    nothing a null win threatens)."""
    if point.reference is None:
        return None
    loss = loss_left(point)
    threatened = bool(fooled) and point.chosen != point.reference
    if loss < settled and not threatened:  # NaN (nothing to judge by) stays open, as inf does
        return None
    savings = {
        label: exchange(point, point.best, label)
        for label in point.candidates
        if label not in (point.chosen, point.best, point.reference)
    }
    contenders = sorted(
        (
            (label, saving)
            for label, saving in savings.items()
            if saving >= CONTENDER_SHARE * settled
        ),
        key=lambda item: (-item[1], item[0]),
    )
    if not contenders and is_native_copy(point.chosen) and is_native_copy(point.best):
        # A focused launch skips a point where only native is due (jobs.plan.Done
        # .native_alone). Open with native kept and no contender means nothing to judge
        # by (a NaN loss): every other candidate is measured; with none, nothing can be.
        if not savings:
            return None
        contenders = sorted((label, saving) for label, saving in savings.items())
    return OpenPoint(point, loss, tuple(contenders), fooled if threatened else (), settled)


def open_points(
    points: Iterable[PointDecision],
    settled: float = SETTLED_LOSS,
    fooled: Mapping[tuple[EntryKey, int], tuple[str, ...]] | None = None,
) -> list[OpenPoint]:
    """Every open point of a run's decisions (``fooled``: per (entry key, size), the null
    controls the rule would choose over native there)."""
    fooled = fooled or {}
    found = (open_point(p, settled, fooled.get((p.key, p.size), ())) for p in points)
    return [point for point in found if point is not None]


def fooled_points(figures: Iterable[NullFigures]) -> dict[tuple[EntryKey, int], tuple[str, ...]]:
    """(entry key, size) -> the null controls chosen over native there, with their ratio."""
    fooled: dict[tuple[EntryKey, int], tuple[str, ...]] = {}
    for entry in figures:
        for point in entry.points:
            if point.chosen:
                r = point.ratio
                text = f"{entry.label} {r.ratio:.2f}x [{r.low:.2f}-{r.high:.2f}]"
                fooled[(entry.key, point.size)] = (*fooled.get((entry.key, point.size), ()), text)
    return fooled


# (processes, collective, size): a point as an adaptive sweep's focus names it.
PointName = tuple[int, str, int]


def point_name(point: PointDecision) -> PointName:
    """The point's (processes, collective, size)."""
    return (point.key.nprocs, point.key.collective, point.size)


@dataclass
class AdaptiveDecisions:
    """A run's decisions kept between an adaptive sweep's launches: after the first, only
    the points just measured are read and decided again, under the launch pool of the
    first decision (the run's own, or one stored by an earlier run): only their entries'
    curves are refitted, with the launch values of every settled point kept, then pooled
    across process counts as tune pools them."""

    rule: DecisionRule
    pool: LaunchPool
    measured: dict[EntryKey, list[MeasuredPoint]]
    values: dict[tuple[EntryKey, int], dict[str, LaunchValues]]
    curves: dict[EntryKey, list[dict[str, Ratio]]]
    decisions: dict[tuple[EntryKey, int], PointDecision]
    fooled: dict[tuple[EntryKey, int], tuple[str, ...]] = field(default_factory=dict)

    @classmethod
    def first(
        cls,
        rows: pd.DataFrame,
        warn: list[str],
        rule: DecisionRule = DEFAULT_RULE,
        pool: LaunchPool | None = None,
    ) -> AdaptiveDecisions:
        """Every point decided (``pool``: a stored pool; None: the run's own)."""
        estimates = estimate_run(rows, warn, pool)
        measured = {key: list(points) for key, points in estimates.measured.items()}
        values = {
            (key, p.measured.size): point_values(p.measured)
            for key, points in measured.items()
            for p in points
        }
        decisions = decide_estimates(estimates, warn, rule)
        fooled = fooled_points(decision_nulls(rows, decisions, rule))
        curves = dict(estimates.curves)
        return cls(rule, estimates.pool, measured, values, curves, decisions.by_point(), fooled)

    def open_points(self, settled: float = SETTLED_LOSS) -> list[OpenPoint]:
        """The points still open, by entry and size."""
        return open_points(self.decisions.values(), settled, self.fooled)

    def redecide(self, rows: pd.DataFrame, names: Collection[PointName], warn: list[str]) -> int:
        """Read and decide again the points ``names`` (those a launch measured); how many."""
        wanted = {
            (key, p.measured.size)
            for key, points in self.measured.items()
            for p in points
            if (key.nprocs, key.collective, p.measured.size) in names
        }
        fresh = measured_entries(without_null_controls(rows), warn, wanted)
        for key, points in fresh.items():
            if not points:
                continue
            by_size = {p.measured.size: p for p in points}
            kept = self.measured[key]
            self.measured[key] = [by_size.get(p.measured.size, p) for p in kept]
            for size, point in by_size.items():
                self.values[(key, size)] = point_values(point.measured)
            values = [self.values[(key, p.measured.size)] for p in self.measured[key]]
            ratios = entry_ratios([p.measured for p in self.measured[key]], self.pool, values)
            self.curves[key] = ratios
        estimates = estimates_of(self.measured, self.pool, self.curves)
        decisions = decide_estimates(estimates, warn, self.rule)
        decided = decisions.by_point()
        self.decisions.update({name: decided[name] for name in wanted if name in decided})
        touched = {key for key, _ in wanted}
        nulls = decision_nulls(
            rows,
            Decisions({k: v for k, v in decisions.entries.items() if k in touched}, self.pool),
            self.rule,
        )
        fooled = fooled_points(nulls)
        for name in wanted:
            self.fooled.pop(name, None)
            if name in fooled:
                self.fooled[name] = fooled[name]
        return len(wanted)
