"""The decision rule the tables used before the expected-loss rule (helpers only, no tests
here): a faithful copy of selection/tune.py at commit 21a1d61, for the simulation that
compares the two (tests/unit/test_rule_simulation.py, scripts/rule_simulation.py).

- eligible: native, and the candidates whose chance of being more than 5% slower than
  native is below RISK (0.05);
- the tie set: every eligible candidate whose time over the eligible one of lowest
  expected time has a 95% interval reaching 1;
- the stable rule: native if tied, else the simplest variant of the tie set (backend mpi,
  fewer parameters off their defaults, fewer parameters), then the lower expected time;
- hysteresis: neighbouring sizes whose tie sets intersect share the stable rule's pick of
  the intersection;
- no pooling across process counts (each entry's curves alone).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace

from collectives.registry import lookup
from osu_dl_bench.selection.paired import quotient
from osu_dl_bench.selection.table import Choice
from osu_dl_bench.selection.tune import (
    Candidate,
    EntryKey,
    PointDecision,
    RunEstimates,
)

RISK = 0.05
SLOWER_MARGIN = 1.05


def simplicity(collective: str, choice: Choice) -> tuple[bool, bool, int, int]:
    """The stable rule's order (smaller is simpler): native, backend mpi, parameters off
    their defaults, parameters."""
    defaults = lookup(collective, choice.algorithm).defaults
    changed = sum(1 for name, value in choice.params if defaults.get(name) != value)
    return (not choice.is_native, choice.backend != "mpi", changed, len(choice.params))


def stable_order(
    collective: str, labels: Iterable[str], choices: Mapping[str, Choice], score: Callable
) -> list[str]:
    """``labels`` by the stable rule: simplest first, then the lower ``score(label)``."""
    return sorted(
        labels, key=lambda label: (*simplicity(collective, choices[label]), score(label), label)
    )


def eligible(candidates: Mapping[str, Candidate], native: bool, risk: float = RISK) -> list[str]:
    """Native and the candidates whose chance of being more than 5% slower is below risk."""
    if not native:
        return list(candidates)
    return [
        c.label
        for c in candidates.values()
        if c.label == "native" or c.ratio.chance_above(SLOWER_MARGIN) < risk
    ]


def tie_set(candidates: Mapping[str, Candidate], native: bool, risk: float = RISK) -> list[str]:
    """The eligible candidates whose time over the eligible best's has a 95% interval
    reaching 1."""
    allowed = [candidates[label] for label in eligible(candidates, native, risk)]
    best = min(allowed, key=lambda c: (c.ratio.expected, c.label))
    return [c.label for c in allowed if c is best or quotient(c.ratio, best.ratio).low <= 1]


def decide_candidates(
    key: EntryKey, size: int, count: int, candidates: Mapping[str, Candidate], reference
) -> PointDecision:
    """The best, the tie set and the stable rule's pick."""
    best = min(candidates.values(), key=lambda c: (c.ratio.expected, c.label)).label
    ties = stable_order(
        key.collective,
        tie_set(candidates, reference is not None),
        {label: c.choice for label, c in candidates.items()},
        lambda label: candidates[label].ratio.expected,
    )
    return PointDecision(key, size, count, dict(candidates), reference, best, tuple(ties), ties[0])


def hysteresis(points: list[PointDecision]) -> list[PointDecision]:
    """A size joins the range while the range's tie sets share a member with its own; the
    range's choice is the stable rule over the shared members."""
    ranges: list[tuple[list[PointDecision], set[str]]] = []
    for point in points:
        ties = set(point.tie_set)
        if ranges and ranges[-1][1] & ties:
            ranges[-1][0].append(point)
            ranges[-1] = (ranges[-1][0], ranges[-1][1] & ties)
        else:
            ranges.append(([point], ties))
    decided = []
    for members, common in ranges:
        choice = _range_choice(members, common)
        decided += [replace(p, chosen=choice, tie_set=_first(p.tie_set, choice)) for p in members]
    return decided


def _range_choice(members: list[PointDecision], common: set[str]) -> str:
    first = members[0]
    choices = {label: first.candidates[label].choice for label in common}

    def mean_log_ratio(label: str) -> float:
        return statistics.fmean(p.candidates[label].ratio.log_ratio for p in members)

    return stable_order(first.key.collective, common, choices, mean_log_ratio)[0]


def _first(labels: tuple[str, ...], chosen: str) -> tuple[str, ...]:
    return (chosen, *(label for label in labels if label != chosen))


def decide_estimates(
    estimates: RunEstimates, warn: list[str]
) -> dict[tuple[EntryKey, int], PointDecision]:
    """Every point's decision by the old rule, on each entry's curves alone (no pooling
    across process counts), keyed by (entry key, size)."""
    decided = {}
    for key, points in estimates.measured.items():
        found = []
        for point, ratios in zip(points, estimates.curves[key], strict=True):
            m = point.measured
            candidates = {
                label: Candidate(point.choices[label], m.series[label], ratio)
                for label, ratio in ratios.items()
            }
            reference = "native" if m.against_native else None
            found.append(decide_candidates(m.key, m.size, point.count, candidates, reference))
        decided.update({(key, p.size): p for p in hysteresis(found)})
    return decided
