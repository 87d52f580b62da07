"""The null control's figures: how often the decision rule is fooled by noise alone.

A sweep measures native twice (collectives.registry.NULL_CONTROLS): the copy runs the same
code, so its true ratio to native is 1 at every size. Its estimated ratio goes through the
same estimator as every candidate (selection.estimate.entry_ratios, with the run's launch
pool and the curve over sizes), and the rule's own decision is asked at each point whether
it would choose the copy over native, were it a candidate (the rule is called, never
re-implemented). The share of points where it would is the false-win rate: a figure the
product prints beside the decisions it qualifies (Hoefler and Belli, "Scientific
Benchmarking of Parallel Computing Systems", SC15: report what noise alone produces).

The copy's ratio is smoothed over sizes as a candidate's is. A true ratio of 1 everywhere
is the flattest curve there is, so smoothing would shrink the copy's noise more than a real
candidate's; but the rule sees every candidate through that curve, launch-wide shifts and
all, and a false-win rate measured on anything else would not be the rule's. Where a size's
launches disagree beyond the pool the copy, like a candidate, keeps its own estimate.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from collectives.registry import NULL_CONTROL, NULL_CONTROLS
from osu_dl_bench.selection.estimate import Measured, entry_ratios
from osu_dl_bench.selection.evidence import LaunchPool
from osu_dl_bench.selection.paired import Ratio, Series
from osu_dl_bench.selection.rule import DecisionRule
from osu_dl_bench.selection.table import Choice, EntryKey

# The table header's field that keeps the figures (absent in tables of runs without it).
NULL_FIELD = "null_control"
# What the rule's entry point takes: the entry, size, element count, the candidates by
# label and the reference's label; it returns the point's decision (its ``chosen``).
Decide = Callable[[EntryKey, int, int, Mapping[str, Any], str], Any]


@dataclass(frozen=True)
class NullChoice(Choice):
    """The null control as the rule sees it: a candidate like any other (not native, so
    the rule's preference for the library's own selection does not shield it)."""

    name: str = NULL_CONTROL

    @property
    def label(self) -> str:
        """The null control's label, as results spell it."""
        return self.name

    @property
    def is_native(self) -> bool:
        """Never: it is judged as a candidate."""
        return False


@dataclass(frozen=True)
class NullPoint:
    """The null control at one size: its ratio to native, and whether the rule would have
    chosen it over native there."""

    size: int
    ratio: Ratio
    chosen: bool


@dataclass(frozen=True)
class NullFigures:
    """One entry's null control (one label) over its sizes."""

    key: EntryKey
    label: str
    points: tuple[NullPoint, ...]

    @property
    def wins(self) -> int:
        """Points where the rule would have chosen the null control over native."""
        return sum(p.chosen for p in self.points)

    @property
    def rate(self) -> float:
        """The false-win rate: wins over points judged."""
        return self.wins / len(self.points) if self.points else math.nan

    def line(self) -> str:
        """'native:null: 0.97-1.04x native (median 95% CI 0.93-1.08), chosen over native at 1 of
        22 points (4.5%)'."""
        return f"{self.label}: {ratio_range(self.points)}, {win_text(self.wins, len(self.points))}"

    def as_record(self) -> dict[str, Any]:
        """JSON-ready: the entry's key, the label, the counts and each point's figures."""
        return {
            "collective": self.key.collective,
            "device": self.key.device,
            "nodes": self.key.nodes,
            "ppn": self.key.ppn,
            "nprocs": self.key.nprocs,
            "label": self.label,
            "false_wins": self.wins,
            "points_judged": len(self.points),
            "points": [
                {
                    "size_bytes": p.size,
                    "ratio": round(p.ratio.ratio, 4),
                    "ratio_low": _finite(p.ratio.low),
                    "ratio_high": _finite(p.ratio.high),
                    "chosen": p.chosen,
                }
                for p in self.points
            ],
        }


def _finite(value: float) -> float | None:
    return round(value, 4) if math.isfinite(value) else None


def ratio_range(points: Iterable[NullPoint]) -> str:
    """'0.97-1.04x native (median 95% CI 0.90-1.12)': the estimates' range, and the medians
    of the points' interval bounds (one point of few launches can reach 0..inf: the union
    of every interval would say nothing)."""
    points = list(points)
    if not points:
        return "not measured"
    ratios = [p.ratio.ratio for p in points]
    low = statistics.median(p.ratio.low for p in points)
    high = statistics.median(p.ratio.high for p in points)
    return f"{min(ratios):.2f}-{max(ratios):.2f}x native (median 95% CI {low:.2f}-{_bound(high)})"


def _bound(value: float) -> str:
    return f"{value:.2f}" if math.isfinite(value) else "inf"


def win_text(wins: int, judged: int) -> str:
    """'chosen over native at 1 of 22 points (4.5%)'."""
    share = f" ({100 * wins / judged:.1f}%)" if judged else ""
    return f"chosen over native at {wins} of {judged} points{share}"


def entry_nulls(
    key: EntryKey,
    points: list,
    series: Mapping[tuple[int, str], Series],
    pool: LaunchPool,
    decide: Decide,
) -> list[NullFigures]:
    """One entry's null figures per null label, from its decided points (each with clean
    native: ``point.native``) and the null controls' series by (size, label)."""
    found = []
    for label in NULL_CONTROLS:
        judged = [p for p in points if p.native is not None and (p.size, label) in series]
        if not judged:
            continue
        measured = [
            Measured(
                key, p.size, {"native": p.native.series, label: series[p.size, label]}, "native"
            )
            for p in judged
        ]
        ratios = entry_ratios(measured, pool)
        nulls = []
        for point, ratio in zip(judged, ratios, strict=True):
            if label not in ratio:
                continue  # no launch shared with native
            copy = replace(
                point.native,
                choice=NullChoice(point.native.choice.backend, "native", (), label),
                series=series[point.size, label],
                ratio=ratio[label],
            )
            pair = {"native": point.native, label: copy}
            decided = decide(key, point.size, point.count, pair, "native")
            nulls.append(NullPoint(point.size, ratio[label], decided.chosen == label))
        if nulls:
            found.append(NullFigures(key, label, tuple(nulls)))
    return found


def null_record(figures: list[NullFigures], rule: DecisionRule) -> dict[str, Any]:
    """The table header's field: what the figures mean, and each entry's."""
    return {
        "meaning": "native measured a second time under another label (native:null in the "
        "same rounds, native:null_apart in launches of its own); its ratio to native by "
        "the candidates' estimator, and the points where the rule would have chosen it "
        "over native were it a candidate (the false-win rate)",
        **rule.as_record(),
        "entries": [f.as_record() for f in figures],
    }


def figures_of(header: Mapping[str, Any]) -> list[dict[str, Any]]:
    """A table header's null figures per entry and label ([] for tables without them)."""
    return list((header.get(NULL_FIELD) or {}).get("entries") or [])


def entry_lines(header: Mapping[str, Any], key: EntryKey) -> list[str]:
    """The null figures' lines of one entry of a table ([] where it has none)."""
    fields = ("collective", "device", "nodes", "ppn", "nprocs")
    wanted = tuple(getattr(key, name) for name in fields)
    return [
        f"null control {record_line(record)}"
        for record in figures_of(header)
        if tuple(record.get(name) for name in fields) == wanted
    ]


def record_line(record: Mapping[str, Any]) -> str:
    """One entry record's line, as NullFigures.line gives it."""
    points = [
        NullPoint(
            p["size_bytes"],
            Ratio(
                p["ratio"],
                p["ratio_low"] if p["ratio_low"] is not None else 0.0,
                p["ratio_high"] if p["ratio_high"] is not None else math.inf,
                0,
                0,
            ),
            p["chosen"],
        )
        for p in record.get("points") or []
    ]
    wins, judged = record.get("false_wins", 0), record.get("points_judged", 0)
    return f"{record['label']}: {ratio_range(points)}, {win_text(wins, judged)}"


def rates_by_nprocs(figures: Iterable[NullFigures]) -> dict[int, tuple[int, int]]:
    """p -> (false wins, points judged) over every entry and null label of that p."""
    counts: dict[int, tuple[int, int]] = {}
    for f in figures:
        wins, judged = counts.get(f.key.nprocs, (0, 0))
        counts[f.key.nprocs] = (wins + f.wins, judged + len(f.points))
    return dict(sorted(counts.items()))


def rate_lines(run: str, figures: Iterable[NullFigures], wanted: Iterable[int] = ()) -> list[str]:
    """One line per p: how often the rule would have chosen the null control over native
    in ``run`` (both labels together); one line saying so where the run has none."""
    wanted = set(wanted)
    counts = {p: c for p, c in rates_by_nprocs(figures).items() if not wanted or p in wanted}
    if not counts:
        return [f"# null control in {run}: not measured (a run from before it, or --no-null)"]
    return [
        f"# null control in {run}, p={nprocs}: {win_text(wins, judged)}"
        for nprocs, (wins, judged) in counts.items()
    ]
