"""From a sweep's run directory to a tuning table.

The rule (NOISE_RULE says it in one paragraph; docs/tuning-table.md at length): every
candidate's time is compared with clean native's, the MPI library's own algorithm measured
in the "mpi" isolation group (native also runs in the launches of other backends, where
their threads slow it down: those rows are never the reference).

- Evidence is shared across the run: per launch, each candidate's log time ratio to
  native; the launch-to-launch variance pooled over every point of the entry
  (selection.evidence); each candidate's ratio smoothed over log size with its band
  (stats.smoothing, selection.estimate).
- The rule (selection.rule.DecisionRule, one object with one default): a candidate is
  eligible where its chance of being more than 5% slower than native is at most the risk;
  the eligible one with the lowest expected time replaces native where its expected gain
  exceeds the indifference zone; the tie set is every eligible candidate within the zone
  of that best, native first when in it.
- Hysteresis: walking the sizes upward, a size joins the current range while the
  intersection of the range's tie sets with its own stays non-empty; the range's choice is
  native where it is in that intersection, else its member of lowest mean expected time:
  a choice is carried only within the zone.
- Legacy rows (no per-round times) read the old rule as an interval: ratio = median /
  native's median, interval = (q1, q3) / native's median.

Without a native measurement the candidate with the lowest median is the reference and
each point is judged alone (selection.paired). Points that failed validation (in any
launch) are never candidates; twins (collectives.distinct_variants) count as one; of the
rows of one (point, algorithm, group, launch) the last is used (a point measured in an
outlying machine state is re-measured in the same launch: the later row supersedes it).

Each measured size starts the range of its choice; adjacent sizes with the same choice
are merged, the first range starts at 0 and the last is open-ended, so a size between
two measured sizes takes the choice of the smaller one (as Open MPI's rules files do).
"""

from __future__ import annotations

import math
import os
import platform
import statistics
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any

import pandas as pd

from collectives import mpich_layers, mpit
from collectives.registry import NULL_CONTROL, NULL_CONTROLS, parse_variant, twin_representatives
from collectives.units import format_size
from osu_dl_bench import __version__
from osu_dl_bench.errors import UsageError
from osu_dl_bench.measurement.store import POINT_KEY, RunStore, collective_rows, round_values
from osu_dl_bench.runtime.metadata import COMMAND_KEY, command_line, utc_now
from osu_dl_bench.runtime.mpich_trees import generic_trees
from osu_dl_bench.selection.estimate import Measured, entry_ratios, run_pool
from osu_dl_bench.selection.evidence import LaunchPool
from osu_dl_bench.selection.null_control import NULL_FIELD, entry_nulls, null_record
from osu_dl_bench.selection.paired import (
    Ratio,
    Series,
    identity,
    launch_of,
    paired_ratio,
    quotient,
)
from osu_dl_bench.selection.period import WITHIN_ONLY, Period, read_period
from osu_dl_bench.selection.pooling import pool_across_counts
from osu_dl_bench.selection.pools import PoolIdentity, read_pool

# RISK and SLOWER_MARGIN re-exported: their home is selection.rule.
from osu_dl_bench.selection.rule import (  # noqa: F401
    DEFAULT_RULE,
    RISK,
    SLOWER_MARGIN,
    DecisionRule,
)
from osu_dl_bench.selection.table import (
    MPI_CUDA_PATHS,
    Choice,
    Entry,
    EntryKey,
    SizeRange,
    TuningTable,
    table_header,
)

NOISE_RULE = (
    "each candidate's time is divided by clean native's (native of the mpi isolation "
    "group): per launch, the median of the round-paired log-ratios (for other backends "
    "and forced library algorithms, the log-ratio of the launches' medians); the run's "
    "launch-to-launch variance is pooled over all its points (per collective and job "
    "shape, size band and pairing; a point whose own launches disagree beyond the pool "
    "has its band widened by its own excess spread); each candidate's log-ratio is "
    "smoothed over log2(size) by a penalised spline weighted by those variances (a point "
    "the curve misses by 3 standard errors keeps its own estimate); each candidate's "
    "estimate at a size is partially pooled with its estimates at the other process counts "
    "of the collective and buffer kind (empirical Bayes: DerSimonian-Laird between-count "
    "variance, posterior intervals); 95% intervals are "
    "Student's t on the log scale at the Welch-Satterthwaite df of their variance parts "
    "(the parts every point of a pool shares rest on its launches less one), printed "
    "widened by the between-period sd where compare stored one with the run (the decision "
    "keeps the within-run interval); a candidate may replace native only where the chance that "
    "it is more than 5% slower is at most the risk; the eligible one of lowest expected "
    "time (the lognormal mean) replaces native where its expected gain over native exceeds "
    "the indifference zone; the tie set is every eligible candidate whose expected time "
    "lies within the zone of that best's, native first when in it; neighbouring sizes "
    "whose tie sets intersect share one choice (native where it is in the intersection, "
    "else its member of lowest mean expected time); rows without per-round times: "
    "interval = (q1, q3) / native's median; points without native, or runs without a "
    "launch pool: the point's own paired"
    " ratio"
)
EVIDENCE = "evidence"
KEY_COLUMNS = ["collective", "device", "nodes", "ppn", "nprocs"]
# One candidate at one point, over every launch and group (POINT_KEY less those two).
CANDIDATE_KEY = [name for name in POINT_KEY if name not in ("launch", "group")]
# Groups whose native is clean, best first: the MPI group, or everything in one process.
CLEAN_GROUPS = ("mpi", "shared")
# What a paired.Launch takes from a row, in launch_of's order.
SERIES_COLUMNS = ("launch", "round_us", "median_us", "q1_us", "q3_us", "rounds")


# --- rows ---------------------------------------------------------------------------------


def usable_rows(frame: pd.DataFrame, failed: str = "candidate") -> pd.DataFrame:
    """The last row of each (point, algorithm, group, launch), less what failed
    validation: with ``failed="candidate"`` every row of a (point, algorithm) that failed
    in any launch (a decision must not rest on a variant that once gave wrong results),
    with ``"row"`` only the failing rows (a correct launch's time is still a time)."""
    frame = frame.drop_duplicates([k for k in POINT_KEY if k in frame.columns], keep="last")
    validation = frame["validation"] if "validation" in frame else pd.Series("", frame.index)
    wrong = (validation.fillna("") == "fail").rename("failed")
    if failed == "row":
        return frame[~wrong]
    # dropna=False: bcast has no op, and its rows must group too.
    spoilt = wrong.groupby([frame[name] for name in CANDIDATE_KEY], dropna=False)
    return frame[~spoilt.transform("any")]


def clean_rows(
    frame: pd.DataFrame, failed: str = "candidate", forced_library: bool = True
) -> pd.DataFrame:
    """The rows every reader of a run takes (tune, plot, compare, the model): the
    ``usable_rows`` (``failed`` says what a validation failure drops), less native
    measured beside another backend's threads (outside the clean groups); with
    ``forced_library=False`` also less the library's forced algorithms (native:alg=NAME),
    which neither the runtime nor the model's native path can choose."""
    rows = without_contaminated_native(usable_rows(frame, failed))
    return rows if forced_library else without_library_candidates(rows)


def without_contaminated_native(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` less the native rows (its null control's in rounds too) of other backends'
    launches (outside CLEAN_GROUPS), where native ran beside their threads."""
    beside = frame["algorithm"].isin(["native", NULL_CONTROL])
    return frame[~(beside & ~frame["group"].isin(CLEAN_GROUPS))]


def without_null_controls(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` less the null control's rows: never a candidate (selection.null_control
    reads them)."""
    return frame[~frame["algorithm"].isin(NULL_CONTROLS)]


def _most_common(series: pd.Series) -> Any:
    values = series.dropna()
    return None if values.empty else values.value_counts().index[0]


def select_rows(frame: pd.DataFrame, dtype: str | None, op: str | None) -> tuple:
    """Rows of one dtype and op (default: the most common), validated ones only."""
    if frame.empty:
        raise UsageError("the run directory has no results yet")
    dtype = dtype or _most_common(frame["dtype"])
    op = op or _most_common(frame["op"])
    keep = (frame["dtype"] == dtype) & (frame["op"].isna() | (frame["op"] == op))
    keep &= frame["validation"].fillna("") != "fail"
    rows = frame[keep]
    if rows.empty:
        raise UsageError(f"no validated results with dtype {dtype} and op {op}")
    return rows, dtype, op


def _choices_by_label(collective: str, labels: Iterable[str], warn: list[str]) -> dict:
    """label -> Choice for the labels registered here; the others are reported and left out."""
    found = {}
    for label in sorted(set(labels)):
        try:
            found[label] = Choice.of(parse_variant(collective, label))
        except UsageError as exc:
            warn.append(f"{collective}: {label!r} left out: {exc}")
    return found


def point_representatives(collective: str, at_size: pd.DataFrame, *extra: str) -> dict[str, str]:
    """Each algorithm label of one point's rows (and ``extra`` labels) -> the label kept of
    its twins there (collectives.distinct_variants): older sweeps timed twins apart."""
    first = at_size.iloc[0]
    count = int(first["count"])
    itemsize = int(first["size_bytes"]) // count if count else 1
    labels = [*at_size["algorithm"], *extra]
    return twin_representatives(collective, labels, int(first["nprocs"]), count, itemsize)


def without_twins(collective: str, at_size: pd.DataFrame) -> pd.DataFrame:
    """One point's rows less twins: a choice between equal code is noise."""
    kept = point_representatives(collective, at_size)
    return at_size[[kept[label] == label for label in at_size["algorithm"]]]


# --- one point ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Candidate:
    """One candidate at one point: what it runs, its measurements, its ratio to the
    point's reference (clean native when measured)."""

    choice: Choice
    series: Series
    ratio: Ratio

    @property
    def label(self) -> str:
        """The variant label."""
        return self.choice.label


@dataclass(frozen=True)
class PointDecision:
    """What the tuner decided at one measured size of one entry, and the evidence."""

    key: EntryKey
    size: int
    count: int
    candidates: Mapping[str, Candidate]  # label -> candidate, twins removed
    reference: str | None  # 'native' when measured, else None
    best: str  # the lowest ratio
    tie_set: tuple[str, ...]  # in the rule's order: its own pick first
    chosen: str  # after hysteresis: the range's choice, a member of tie_set
    # Every candidate, eligible or not, that cannot be told from the fastest beyond the
    # rule's zone (DecisionRule.equivalent): what compare's stability counts.
    equivalent: tuple[str, ...] = ()
    rule: DecisionRule = DEFAULT_RULE

    def ratios(self) -> dict[str, Ratio]:
        """label -> the candidate's ratio to the reference."""
        return {label: c.ratio for label, c in self.candidates.items()}

    @property
    def native(self) -> Candidate | None:
        """Clean native, when measured."""
        return None if self.reference is None else self.candidates[self.reference]

    def twin_of(self, label: str) -> str:
        """The candidate that runs the same code as ``label`` here (``label`` if none)."""
        itemsize = self.size // self.count if self.count else 1
        labels = [*self.candidates, label]
        kept = twin_representatives(
            self.key.collective, labels, self.key.nprocs, self.count, itemsize
        )
        return next((c for c in self.candidates if kept[c] == kept[label]), label)

    def ratio_between(self, label: str, other: str) -> Ratio | None:
        """time(label) / time(other) here, paired as the decisions are (None: not measured
        or no launch to pair)."""
        mine, theirs = self.candidates.get(label), self.candidates.get(other)
        if mine is None or theirs is None:
            return None
        if self.reference is None:
            return paired_ratio(mine.series, theirs.series, *self._seed(label, other))
        # Both ratios to native are the decisions' estimates: their quotient, the error
        # they share (native's own launch drift) cancelling (paired.quotient).
        return quotient(mine.ratio, theirs.ratio)

    def _seed(self, label: str, other: str) -> tuple:
        return (self.key, self.size, label, other)


def _series(rows: pd.DataFrame) -> Series:
    """One candidate's rows at one point (one per launch) as paired.Series."""
    rows = rows.sort_values("launch", kind="stable")
    columns = [rows[name].tolist() for name in SERIES_COLUMNS]
    # The rounds' machine-state cells identify the rounds a row ran in (paired.Launch).
    columns.append((rows["ref_copy_us"] + " | " + rows["ref_allreduce_us"]).tolist())
    launches = tuple(
        launch_of(int(launch), round_values(text), median, q1, q3, int(count), ref.strip(" |"))
        for launch, text, median, q1, q3, count, ref in zip(*columns, strict=True)
    )
    return Series(str(rows["group"].iloc[-1]), launches)


def series_of(rows: pd.DataFrame) -> Series:
    """One candidate's usable rows at one point, one per launch, as paired.Series (its
    group: the last row's)."""
    return _series(rows)


def _reference_group(at_size: pd.DataFrame) -> str | None:
    """The isolation group whose native is clean: 'mpi', else 'shared', else None (native
    measured only beside another backend's threads, or not at all)."""
    groups = set(at_size.loc[at_size["algorithm"] == "native", "group"])
    return next((g for g in CLEAN_GROUPS if g in groups), None)


def _measurements(at_size: pd.DataFrame, choices: Mapping[str, Choice]) -> dict[str, Series]:
    """label -> Series for the registered candidates of one point; native from its clean
    group only (in other backends' launches it ran beside their threads)."""
    clean = _reference_group(at_size)
    contaminated = (at_size["algorithm"] == "native") & (at_size["group"] != clean)
    rows = at_size[~contaminated]
    return {
        str(label): _series(group)
        for label, group in rows.groupby("algorithm", sort=True)
        if label in choices
    }


def _reference_label(series: Mapping[str, Series]) -> str:
    """Native if measured, else the lowest median (name order breaks ties)."""
    if "native" in series:
        return "native"
    return min(series, key=lambda label: (series[label].latency_us(), label))


@dataclass(frozen=True)
class MeasuredPoint:
    """One size of one entry before deciding: its candidates' series and reference."""

    measured: Measured
    count: int
    choices: Mapping[str, Choice]


def measure_point(
    key: EntryKey, at_size: pd.DataFrame, choices: Mapping[str, Choice], warn: list[str]
) -> MeasuredPoint | None:
    """One size's usable rows as series per registered candidate (None: nothing to decide)."""
    size = int(at_size["size_bytes"].iloc[0])
    if (at_size["algorithm"] == "native").any() and _reference_group(at_size) is None:
        # Deciding against a native slowed by gloo's threads would favour gloo.
        groups = ", ".join(sorted(set(at_size["group"])))
        warn.append(
            f"{key} at {format_size(size)} left out: native was measured only in the "
            f"launches of {groups}, expected it in the mpi group's (a clean reference)"
        )
        return None
    series = _measurements(without_twins(key.collective, at_size), choices)
    if not series:
        return None
    measured = Measured(key, size, series, _reference_label(series))
    return MeasuredPoint(measured, int(at_size["count"].iloc[0]), choices)


def _decide(point: MeasuredPoint, ratios: Mapping[str, Ratio], warn: list[str], rule: DecisionRule):
    m = point.measured
    for label in m.series:
        if label not in ratios:
            warn.append(
                f"{m.key} at {format_size(m.size)}: {label} left out: no launch shared "
                f"with {m.reference}"
            )
    candidates = {
        label: Candidate(point.choices[label], m.series[label], ratio)
        for label, ratio in ratios.items()
    }
    reference = "native" if m.against_native else None
    return decide_candidates(m.key, m.size, point.count, candidates, reference, rule)


def decide_candidates(
    key: EntryKey,
    size: int,
    count: int,
    candidates: Mapping[str, Candidate],
    reference: str | None,
    rule: DecisionRule = DEFAULT_RULE,
) -> PointDecision:
    """The best, the tie set and the rule's pick among candidates whose ratios to the
    reference are known (``reference``: 'native', or None without native)."""
    ratios = {label: c.ratio for label, c in candidates.items()}
    best = min(candidates.values(), key=lambda c: (c.ratio.expected, c.label)).label
    ties = tuple(rule.tie_set(ratios, reference))
    return PointDecision(
        key,
        size,
        count,
        dict(candidates),
        reference,
        best,
        ties,
        ties[0],
        tuple(rule.equivalent(ratios)),
        rule,
    )


# --- sizes into ranges --------------------------------------------------------------------


def hysteresis(points: list[PointDecision]) -> list[PointDecision]:
    """The points (by size) with ``chosen`` set to their range's choice: a size joins the
    range while the range's tie sets still share a member with its own. The range's
    choice is the rule's order over the shared members: native where it lies within the
    zone at every size of the range, else the shared member of lowest mean expected time,
    eligible and within the zone of the best at each size: a choice is carried to a
    neighbouring size only within the indifference zone, never against the evidence."""
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
    """The reference where it is in the range's common tie set, else the shared member
    of the lowest mean log expected time over the range's sizes (names break exact ties)."""
    first = members[0]

    def mean_log_expected(label: str) -> float:
        return statistics.fmean(math.log(p.candidates[label].ratio.expected) for p in members)

    return min(
        common, key=lambda label: (label != first.reference, mean_log_expected(label), label)
    )


def _first(labels: tuple[str, ...], chosen: str) -> tuple[str, ...]:
    """``labels`` with ``chosen`` moved to the front."""
    return (chosen, *(label for label in labels if label != chosen))


def merge_ranges(choices: list[tuple[int, Choice]]) -> tuple[SizeRange, ...]:
    """Per-size choices (sorted by size) -> contiguous ranges from 0, equal neighbours merged."""
    starts: list[tuple[int, Choice]] = []
    for size, choice in choices:
        if not starts or starts[-1][1] != choice:
            starts.append((0 if not starts else size, choice))
    ends = [start for start, _ in starts[1:]] + [None]
    return tuple(SizeRange(lo, hi, c) for (lo, c), hi in zip(starts, ends, strict=True))


# --- the table ----------------------------------------------------------------------------


def _rounded(value: float | None, digits: int = 3) -> float | None:
    return None if value is None else round(value, digits)


def _interval_text(ratio: Ratio, period: Period | None = None) -> str:
    # The reported interval: the between-period component widens it, not the decision.
    shown = (period.apply(ratio) if period else ratio).reported()
    return f"{shown.ratio:.2f}x native, 95% CI {shown.low:.2f}-{shown.high:.2f}"


def _df_value(df: float) -> float | None:
    """A df for JSON: None where infinite (a normal reading)."""
    return round(df, 2) if math.isfinite(df) else None


EVIDENCE_WORDS = {
    "curve": "from its curve over sizes",
    "point": "from this size alone with the run's pooled launch variance",
    "misfit": "from this size alone: the curve over sizes misses it",
    "heterogeneous": "its launches disagree beyond the run's pool: band widened by them",
    "pooled": "from its curve, partially pooled with its curves at the other process counts",
    "paired": "from this point's launches alone",
}


def _reason(point: PointDecision, period: Period | None = None) -> str:
    """Why the point's choice, in words (intervals as reported: ``period`` widens them)."""
    chosen, best = point.candidates[point.chosen], point.candidates[point.best]
    if point.native is None:
        text = "no native measurement: the lowest expected time, ratios to the lowest median"
    elif point.chosen == point.reference and point.best == point.reference:
        text = "native is the fastest"
    elif point.chosen == point.reference:
        text = f"{best.label} {_interval_text(best.ratio, period)}: native kept, {_kept_why(point)}"
    else:
        text = (
            f"{_interval_text(chosen.ratio, period)} "
            f"({EVIDENCE_WORDS.get(chosen.ratio.evidence, '')})"
            f", expected gain {1 - chosen.ratio.expected:.1%}"
            f", P(>5% slower) {chosen.ratio.chance_above(SLOWER_MARGIN):.3f}"
        )
    if len(point.tie_set) > 1:
        text += f"; {len(point.tie_set)} within the {point.rule.indifference:.0%} zone"
    if point.chosen != _own_pick(point):
        text += "; the choice of the neighbouring sizes whose tie sets it shares"
    return text


def _kept_why(point: PointDecision) -> str:
    """Why native stays where a faster candidate was measured: every faster one is too
    risky, or the best eligible one's expected gain lies within the zone."""
    ratios = point.ratios()
    allowed = point.rule.eligible(ratios, point.reference)
    faster = [label for label in allowed if label != point.reference]
    if not faster:
        best = ratios[point.best]
        return f"P(>5% slower) {best.chance_above(SLOWER_MARGIN):.2f} > risk {point.rule.risk}"
    top = min(faster, key=lambda label: ratios[label].expected)
    gain = 1 - ratios[top].expected
    return f"best eligible {top}'s expected gain {gain:.1%} within the zone"


def _own_pick(point: PointDecision) -> str:
    """The rule's pick at this size alone."""
    return point.rule.order(point.tie_set, point.ratios(), point.reference)[0]


def point_record(point: PointDecision, period: Period | None = None) -> dict[str, Any]:
    """The table's point: the choice, its ratio to native with the reported interval
    (``period``, the between-period component, widens it), the tie set."""
    chosen, best, native = (
        point.candidates[point.chosen],
        point.candidates[point.best],
        point.native,
    )
    q1, _, q3 = chosen.series.quartiles_us()
    evidence = chosen.ratio if native is not None else identity(chosen.series)
    decided = chosen.ratio if native is not None else None
    if decided is not None and period is not None:
        decided = period.apply(decided)
    ratio = None if decided is None else decided.reported()
    return {
        "size_bytes": point.size,
        "chosen": point.chosen,
        "backend": chosen.choice.backend,
        "median_us": round(chosen.series.latency_us(), 3),
        "q1_us": round(q1, 3),
        "q3_us": round(q3, 3),
        "native_median_us": None if native is None else _rounded(native.series.latency_us()),
        "speedup": None if ratio is None else round(1 / ratio.ratio, 4),
        "ratio": None if ratio is None else round(ratio.ratio, 4),
        "ratio_low": None if ratio is None else round(ratio.low, 4),
        "ratio_high": None if ratio is None else round(ratio.high, 4),
        "evidence": None if ratio is None else ratio.evidence,
        "chance_slower": None if decided is None else round(decided.chance_above(SLOWER_MARGIN), 4),
        # The interval's t df (Welch-Satterthwaite over its parts) and the launch-level df.
        "df": None if ratio is None else _df_value(ratio.df),
        "launch_df": None if decided is None else _df_value(decided.launch_df),
        "period_sd": None if decided is None else round(decided.period_sd, 5),
        "tie_set": list(point.tie_set),
        "launches": evidence.launches,
        "rounds": evidence.rounds,
        "fastest": best.label,
        "fastest_median_us": round(best.series.latency_us(), 3),
        "candidates": len(point.candidates),
        "reason": _reason(point, period),
    }


def _entry_groups(frame: pd.DataFrame) -> Iterable[tuple[EntryKey, pd.DataFrame]]:
    for values, rows in frame.groupby(KEY_COLUMNS, sort=True):
        collective, device, nodes, ppn, nprocs = values
        yield EntryKey(str(collective), str(device), int(nodes), int(ppn), int(nprocs)), rows


@dataclass(frozen=True)
class Decisions:
    """A run's decisions per entry (by size, hysteresis applied) and the launch pool they
    rest on."""

    entries: Mapping[EntryKey, list[PointDecision]]
    pool: LaunchPool

    def by_point(self) -> dict[tuple[EntryKey, int], PointDecision]:
        """(entry key, size) -> the point's decision."""
        return {(key, p.size): p for key, points in self.entries.items() for p in points}


def measured_entries(
    rows: pd.DataFrame, warn: list[str], wanted: Collection[tuple[EntryKey, int]] | None = None
) -> dict[EntryKey, list[MeasuredPoint]]:
    """Each entry's measured points from a run's usable rows, by size (only the (entry
    key, size) pairs in ``wanted``, when given)."""
    measured = {}
    for key, group in _entry_groups(rows):
        choices = _choices_by_label(key.collective, group["algorithm"], warn)
        points = [
            measure_point(key, at_size, choices, warn)
            for size, at_size in group.groupby("size_bytes", sort=True)
            if wanted is None or (key, int(size)) in wanted
        ]
        measured[key] = [p for p in points if p is not None]
    return measured


@dataclass(frozen=True)
class RunEstimates:
    """A run's measured points per entry, its launch pool, and every candidate's ratio
    per point: from its curve over sizes alone (``curves``), and pooled across process
    counts (``ratios``, what the rule decides on)."""

    measured: Mapping[EntryKey, list[MeasuredPoint]]
    pool: LaunchPool
    curves: Mapping[EntryKey, list[dict[str, Ratio]]]
    ratios: Mapping[EntryKey, list[dict[str, Ratio]]]


def estimate_run(
    rows: pd.DataFrame, warn: list[str], pool: LaunchPool | None = None
) -> RunEstimates:
    """A run's evidence from its usable rows (null controls left out: they are never
    candidates): the launch pool (selection.evidence; ``pool``: one given instead, e.g.
    stored from an earlier run), each candidate's curve over sizes (selection.estimate),
    pooled across process counts (selection.pooling)."""
    measured = measured_entries(without_null_controls(rows), warn)
    if pool is None:
        pool = run_pool(p.measured for points in measured.values() for p in points)
    curves = {
        key: entry_ratios([p.measured for p in points], pool) for key, points in measured.items()
    }
    return estimates_of(measured, pool, curves)


def estimates_of(
    measured: Mapping[EntryKey, list[MeasuredPoint]],
    pool: LaunchPool,
    curves: Mapping[EntryKey, list[dict[str, Ratio]]],
) -> RunEstimates:
    """A run's estimates from its entries' curves, pooled across process counts."""
    sizes = {key: [p.measured.size for p in points] for key, points in measured.items()}
    return RunEstimates(measured, pool, curves, pool_across_counts(curves, sizes))


def decide_estimates(
    estimates: RunEstimates, warn: list[str], rule: DecisionRule = DEFAULT_RULE
) -> Decisions:
    """Every entry's decisions from a run's estimates: the rule at each size, then
    hysteresis."""
    entries = {}
    for key, points in estimates.measured.items():
        ratios = estimates.ratios[key]
        decided = [_decide(p, r, warn, rule) for p, r in zip(points, ratios, strict=True)]
        if decided:
            entries[key] = hysteresis(decided)
            warn.extend(_without_native(key, decided))
    return Decisions(entries, estimates.pool)


def _without_native(key: EntryKey, points: list[PointDecision]) -> list[str]:
    """One line where an entry's points were decided without native (the run did not name
    it): by raw medians, with no null control to say how often noise fools the rule."""
    alone = sum(p.native is None for p in points)
    if not alone:
        return []
    where = "" if alone == len(points) else f" at {alone} of {len(points)} sizes"
    return [f"{key}: no native measured{where}: ratios to the lowest median, no null control"]


def decide_run(
    rows: pd.DataFrame,
    warn: list[str],
    rule: DecisionRule = DEFAULT_RULE,
    pool: LaunchPool | None = None,
) -> Decisions:
    """Every entry's decisions from a run's usable rows: its estimates (estimate_run,
    under ``pool`` where one is given), then the rule at each size, then hysteresis."""
    return decide_estimates(estimate_run(rows, warn, pool), warn, rule)


def build_entries(decisions: Decisions, period: Period | None = None) -> tuple[Entry, ...]:
    """One table entry per (collective, device, nodes, ppn, nprocs) with decisions; the
    points' reported intervals widened by ``period`` where one is known."""
    entries = []
    for key, points in decisions.entries.items():
        per_size = [(p.size, p.candidates[p.chosen].choice) for p in points]
        measured = (points[0].size, points[-1].size)
        records = tuple(point_record(p, period) for p in points)
        entries.append(Entry(key, merge_ranges(per_size), measured, records))
    return tuple(entries)


def _read_run(run_dir: str | os.PathLike) -> tuple[RunStore, pd.DataFrame, list[str]]:
    store = RunStore(run_dir)
    if not store.results_path.exists():
        raise UsageError(f"{run_dir}: no {store.results_path.name}: not a sweep run directory")
    # Rows a full disk cut short, or of the wrong shape, are left out with a warning.
    frame, warn = store.read()
    if frame.empty and warn:
        raise UsageError(f"no usable results: {warn[0]}")
    return store, collective_rows(frame, run_dir), warn


def run_decisions(
    run_dir: str | os.PathLike,
    dtype: str | None = None,
    op: str | None = None,
    rule: DecisionRule = DEFAULT_RULE,
    launches: Collection[int] = (),
) -> tuple[dict[tuple[EntryKey, int], PointDecision], list[str]]:
    """Every point's decision in a run directory, keyed by (entry key, size), as ``tune``
    takes them (from only the given launch numbers, where some are given: compare's
    held-out split); and warnings about what was left out."""
    rows, warn = decision_rows(run_dir, dtype, op, launches)
    return decide_run(rows, warn, rule, one_launch_pool(run_dir, rows, warn)).by_point(), warn


def decision_rows(
    run_dir: str | os.PathLike,
    dtype: str | None = None,
    op: str | None = None,
    launches: Collection[int] = (),
) -> tuple[pd.DataFrame, list[str]]:
    """The rows of a run directory the decisions rest on (of the given launches only,
    where some are given), and warnings about the rest."""
    _, frame, warn = _read_run(run_dir)
    if launches:
        frame = frame[frame["launch"].isin(list(launches))]
    rows, _, _ = select_rows(without_library_candidates(usable_rows(frame)), dtype, op)
    return rows, warn


def null_series(rows: pd.DataFrame) -> dict[EntryKey, dict[tuple[int, str], Series]]:
    """The null controls' series by entry, then (size, label), from a run's usable rows
    (the copy in rounds only from the clean groups, as native)."""
    nulls = without_contaminated_native(rows)
    nulls = nulls[nulls["algorithm"].isin(NULL_CONTROLS)]
    return {
        key: {
            (int(size), str(label)): _series(group)
            for (size, label), group in entry.groupby(["size_bytes", "algorithm"], sort=True)
        }
        for key, entry in _entry_groups(nulls)
    }


def decision_nulls(
    rows: pd.DataFrame, decisions: Decisions, rule: DecisionRule = DEFAULT_RULE
) -> list:
    """Every entry's null control figures (selection.null_control), judged by the rule
    on the run's own pool ([] for runs without a null)."""
    series = null_series(rows)
    decide = partial(decide_candidates, rule=rule)
    return [
        figures
        for key, points in decisions.entries.items()
        if key in series
        for figures in entry_nulls(key, points, series[key], decisions.pool, decide)
    ]


def run_nulls(
    run_dir: str | os.PathLike,
    dtype: str | None = None,
    op: str | None = None,
    rule: DecisionRule = DEFAULT_RULE,
) -> list:
    """A run directory's null control figures, as ``tune`` reports them."""
    _, frame, warn = _read_run(run_dir)
    rows, _, _ = select_rows(without_library_candidates(usable_rows(frame)), dtype, op)
    pool = one_launch_pool(run_dir, rows, warn)
    return decision_nulls(rows, decide_run(rows, warn, rule, pool), rule)


# The words that begin one_launch_pool's warning (compare repeats that line).
ONE_LAUNCH = "has one launch: its intervals"


def _has_rounds(rows: pd.DataFrame) -> bool:
    """Whether any row keeps its per-round times (rows from before launches do not)."""
    if "round_us" not in rows.columns:
        return False
    return bool(rows["round_us"].fillna("").astype(str).str.strip().ne("").any())


def one_launch_pool(
    run_dir: str | os.PathLike, rows: pd.DataFrame, warn: list[str]
) -> LaunchPool | None:
    """For a run of one launch (which holds no launch-to-launch variance of its own), the
    pool an earlier run of the same hosts, library and version stored (selection.pools),
    as sweep --adaptive reads its screening launch; None otherwise. One warning either way."""
    if rows.empty or "launch" not in rows.columns or rows["launch"].nunique() > 1:
        return None
    if not _has_rounds(rows):
        return None  # legacy rows: their intervals are quartiles, no launch pool applies
    who = PoolIdentity.of_run(RunStore(run_dir).read_metadata())
    pool, why = read_pool(who) if who else (None, "the run names no host set")
    if pool is not None:
        warn.append(
            f"{run_dir} {ONE_LAUNCH} take the launch-to-launch variance "
            f"from {why}, an earlier run of {who.text()}"
        )
        return pool
    warn.append(
        f"{run_dir} {ONE_LAUNCH} hold the rounds' noise only and understate "
        f"the launch-to-launch variance ({why}); sweep with --launches 3, or tune a run of "
        "2 launches or more of these hosts first: its pool is stored and used here"
    )
    return None


def evidence_record(
    pool: LaunchPool, rule: DecisionRule, period: Period | None = None
) -> dict[str, Any]:
    """The table header's account of the shared evidence: the rule, the launch pools and
    the between-period component the reported intervals hold (None: none stored)."""
    return {
        **rule.as_record(),
        "launch_pools": pool.as_record(),
        "between_period": None if period is None else period.as_record(),
        "summary": [*pool.lines(), WITHIN_ONLY if period is None else period.line()],
    }


def _skipped_library_candidates(metadata: dict[str, Any]) -> list[str]:
    """'p=2 allreduce native:alg=NAME: REASON' for each library candidate a sweep left
    unmeasured (MPICH's that run the default's code: jobs.plan.mpich_default_paths)."""
    found: dict[str, None] = {}
    for nprocs, job in sorted((metadata.get("jobs") or {}).items()):
        launches = job.get("launches") if isinstance(job, dict) else None
        for entry in (launches or {}).values():
            for item in entry.get("skipped") or [] if isinstance(entry, dict) else []:
                if str(item.get("algorithm", "")).startswith(LIBRARY_PREFIX):
                    text = f"p={nprocs} {item['collective']} {item['algorithm']}: {item['reason']}"
                    found[text] = None
    return list(found)


def _group_fingerprints(metadata: dict[str, Any]) -> dict[str, dict[str, dict[str, list]]]:
    """p -> group -> size -> every rank's allreduce fingerprint (collectives.mpit), from
    the first launch of each isolation group that recorded them."""
    found: dict[str, dict[str, dict[str, list]]] = {}
    for nprocs, job in (metadata.get("jobs") or {}).items():
        launches = job.get("launches") if isinstance(job, dict) else None
        for key, entry in sorted((launches or {}).items()):
            prints = entry.get("fingerprints") if isinstance(entry, dict) else None
            group = key.partition("/")[2]
            if prints and group not in found.setdefault(str(nprocs), {}):
                found[str(nprocs)][group] = {str(k): v for k, v in prints.items()}
    return found


def _first_found(metadata: dict[str, Any], *names: str) -> Any:
    """The first of ``names`` found at the top level or in any job entry."""
    for name in names:
        if metadata.get(name) not in (None, "", []):
            return metadata[name]
    for job in (metadata.get("jobs") or {}).values():
        for name in names:
            if isinstance(job, dict) and job.get(name) not in (None, "", []):
                return job[name]
    return None


def provenance(run_dir: Path, metadata: dict[str, Any]) -> dict[str, Any]:
    """Which run (and its machine and library) and which tuner produced the table."""
    return {
        "run_dir": str(run_dir.resolve()),
        "run": {
            "mpi_library": _first_found(metadata, "mpi_library"),
            "mpi_version": _first_found(metadata, "mpi_version"),
            "hosts": _first_found(metadata, "hosts", "hostnames"),
            "date": _first_found(metadata, "date", "timestamp", "started"),
            "package_version": _first_found(metadata, "package_version"),
            COMMAND_KEY: _first_found(metadata, COMMAND_KEY),
        },
        "run_metadata": metadata,
        "tuned_by": {
            "package_version": __version__,
            COMMAND_KEY: command_line(),
            "host": platform.node(),
            "platform": platform.platform(),
            "date": utc_now(),
        },
    }


def measured_with(
    dtype: str, op: Any, entries: tuple[Entry, ...], metadata: dict[str, Any]
) -> dict[str, Any]:
    """What the table's points were measured with: dtype and op, and for entries on GPU
    buffers whether MPI read device memory ``direct`` or ``staged`` through host memory
    (the run's ``mpi_cuda``; absent where the run did not record it)."""
    fields = {"dtype": dtype, "op": None if _is_missing(op) else op}
    path = _first_found(metadata, "mpi_cuda")
    if path in MPI_CUDA_PATHS and any(e.key.device == "cuda" for e in entries):
        fields["mpi_cuda"] = path
    return fields


def build_table(
    run_dir: str | os.PathLike,
    name: str = "tuning",
    dtype: str | None = None,
    op: str | None = None,
    rule: DecisionRule = DEFAULT_RULE,
) -> tuple[TuningTable, list[str]]:
    """The tuning table of a run directory, and warnings about what was left out."""
    table, warn, _ = table_and_pool(run_dir, name, dtype, op, rule)
    return table, warn


def table_and_pool(
    run_dir: str | os.PathLike,
    name: str = "tuning",
    dtype: str | None = None,
    op: str | None = None,
    rule: DecisionRule = DEFAULT_RULE,
) -> tuple[TuningTable, list[str], LaunchPool]:
    """build_table, and the launch pool the decisions rest on (for selection.pools)."""
    store, frame, warn = _read_run(run_dir)
    rows, dtype, op = select_rows(usable_rows(frame), dtype, op)
    stored = one_launch_pool(run_dir, rows, warn)
    decisions = decide_run(without_library_candidates(rows), warn, rule, stored)
    period = read_period(run_dir)
    entries = build_entries(decisions, period)
    if not entries:
        why = f" ({warn[-1]})" if warn else ""
        raise UsageError(f"{run_dir}: no point could be decided{why}")
    metadata = store.read_metadata()
    header = table_header(
        name,
        NOISE_RULE,
        measured_with(dtype, op, entries, metadata),
        provenance(Path(run_dir), metadata),
    )
    header[EVIDENCE] = evidence_record(decisions.pool, rule, period)
    nulls = decision_nulls(rows, decisions, rule)
    if nulls:
        header[NULL_FIELD] = null_record(nulls, rule)
    version = _first_found(metadata, "mpi_library")
    pinned = bool(_first_found(metadata, "mpich_posix_cvars"))
    if mpit.library_of(str(version or "")) == "mpich":
        rows = without_default_code(rows, pinned, warn)
    library = library_tuning(rows, version, warn, rule, period)
    if library is not None and library["library"] == "mpich":
        # The POSIX layer's setting the candidates were measured under (oversubscribed
        # launches pin it to MPIR: runtime.launcher.OVERSUBSCRIBED_CVARS).
        library["mpich_posix_cvars"] = _first_found(metadata, "mpich_posix_cvars") or ""
        library["not_measured"] = _skipped_library_candidates(metadata)
        library["fingerprints"] = _group_fingerprints(metadata)
    if library is not None:
        header[LIBRARY_TUNING] = library
    # A stored pool borrowed for one launch is not this run's to store again.
    return TuningTable(entries, header), warn, LaunchPool() if stored else decisions.pool


# --- the MPI library's own algorithms (native:alg=NAME) -------------------------------------
#
# A library algorithm runs only where the library is told to run it (at launch, or from
# its selection file): the runtime selector cannot call it, so the table's own decisions
# never see these candidates. They are decided apart, among themselves and the library's
# default (plain native, the reference), by the same rule, and the exports write what
# wins into the library's selection file (header field LIBRARY_TUNING).

LIBRARY_TUNING = "library_tuning"
LIBRARY_PREFIX = "native:alg="


def is_library_candidate(label: str) -> bool:
    """Whether a result's algorithm label is a library algorithm forced at launch."""
    return label.startswith(LIBRARY_PREFIX)


def without_default_code(rows: pd.DataFrame, pinned: bool, warn: list[str]) -> pd.DataFrame:
    """``rows`` less MPICH's candidates at the sizes where they run the default's code
    (collectives.mpich_layers: their path through MPICH's trees is the default's there,
    ``pinned`` when the POSIX layer was pinned to MPIR): not decided on there; ``warn``
    says which."""
    base = generic_trees().trees
    labels = rows["algorithm"].astype(str)
    drop = pd.Series(False, index=rows.index)
    for (label, collective, nprocs, nodes, size), part in rows[
        labels.str.startswith(LIBRARY_PREFIX)
    ].groupby(["algorithm", "collective", "nprocs", "nodes", "size_bytes"]):
        alg = library_alg(str(label))
        if (
            not mpich_layers.is_candidate(str(collective), alg)
            or str(part["device"].iloc[0]) != "cpu"
        ):
            continue
        call = mpich_layers.Call(
            str(collective), int(nprocs), int(nodes), int(size), oversubscribed=pinned
        )
        reason = mpich_layers.identical_reason(
            mpich_layers.candidate(str(collective), alg), call, base
        )
        if reason is not None:
            drop[part.index] = True
            where = f"{collective} p={nprocs} {format_size(int(size))}"
            warn.append(f"{where}: {label} not decided on: {reason}")
    return rows[~drop]


def without_library_candidates(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` less the library's forced algorithms (the runtime cannot choose them)."""
    return frame[~frame["algorithm"].astype(str).str.startswith(LIBRARY_PREFIX)]


def library_alg(label: str) -> str:
    """The library algorithm of a candidate label: 'auto' for plain native."""
    return label.removeprefix(LIBRARY_PREFIX) if is_library_candidate(label) else "auto"


def _library_point(point: PointDecision, period: Period | None = None) -> dict[str, Any]:
    """One size of a library entry: the library algorithm chosen, and what was measured
    (intervals as reported: ``period`` widens them)."""
    record = point_record(point, period)
    record["alg"] = library_alg(point.chosen)
    record["tie_set"] = [library_alg(label) for label in point.tie_set]
    record["fastest"] = library_alg(point.best)
    best = point.candidates[point.best].ratio
    best = (period.apply(best) if period else best).reported()
    record["fastest_ratio"] = round(best.ratio, 4)
    record["fastest_ratio_low"] = round(best.low, 4)
    record["fastest_ratio_high"] = round(best.high, 4)
    return record


def _library_ranges(
    points: list[PointDecision], period: Period | None = None
) -> list[dict[str, Any]]:
    """Contiguous size ranges of one library algorithm each, with the sizes measured in
    each and their evidence (ratio to the default, interval, launches)."""
    ranges: list[dict[str, Any]] = []
    for point in points:
        record = _library_point(point, period)
        if ranges and ranges[-1]["alg"] == record["alg"]:
            ranges[-1]["points"].append(record)
        else:
            ranges.append({"min_bytes": 0 if not ranges else point.size, "alg": record["alg"]})
            ranges[-1]["points"] = [record]
    for here, after in zip(ranges, [*ranges[1:], None], strict=True):
        here["max_bytes"] = None if after is None else after["min_bytes"]
    return ranges


def library_entries(
    rows: pd.DataFrame,
    warn: list[str],
    rule: DecisionRule = DEFAULT_RULE,
    period: Period | None = None,
) -> list[dict[str, Any]]:
    """Per (collective, device, nodes, ppn, nprocs) where library algorithms were swept:
    the library's choice per size range among them and its default (native)."""
    picked = rows[
        rows["algorithm"].astype(str).map(lambda a: a == "native" or a.startswith(LIBRARY_PREFIX))
    ]
    swept = picked.groupby(KEY_COLUMNS)["algorithm"].transform(
        lambda labels: labels.astype(str).str.startswith(LIBRARY_PREFIX).any()
    )
    decisions = decide_run(picked[swept.astype(bool)], warn, rule)
    entries = []
    for key, points in decisions.entries.items():
        if points[0].native is None:
            warn.append(f"{key}: library algorithms left out: no native (default) measured")
            continue
        entries.append({**asdict_key(key), "ranges": _library_ranges(points, period)})
    return entries


def asdict_key(key: EntryKey) -> dict[str, Any]:
    """An entry key's JSON fields."""
    return {
        "collective": key.collective,
        "device": key.device,
        "nodes": key.nodes,
        "ppn": key.ppn,
        "nprocs": key.nprocs,
    }


def library_tuning(
    rows: pd.DataFrame,
    version: Any,
    warn: list[str],
    rule: DecisionRule = DEFAULT_RULE,
    period: Period | None = None,
) -> dict[str, Any] | None:
    """The library's own decisions of a run (None where no library algorithm was swept):
    which library ('mpich', 'openmpi', from the run's mpi_library), and its entries."""
    entries = library_entries(rows, warn, rule, period)
    if not entries:
        return None
    return {
        "library": mpit.library_of(str(version or "")),
        "mpi_library": str(version or "").strip().splitlines()[0] if version else None,
        "rule": "as noise_rule, among the library's algorithms (native:alg=NAME, each "
        "forced for whole launches and paired with native by launch medians) and its "
        "default (native, alg 'auto'); 'auto' keeps the library's own selection",
        "entries": entries,
    }


def _is_missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))
