"""How far two sweeps of the same code on the same machine agree, in the decisions a tuning
table takes from them and in their measurements: the numbers ``osu-dl-bench compare``
reports.

The decisions (the one way this suite judges a table): every point of RUN_B is decided as
``tune`` decides it (selection.tune.run_decisions with one selection.rule.DecisionRule:
paired ratios to clean native, pooled across process counts, the expected-loss rule with
compare's --risk and --indifference, hysteresis). The choice judged is RUN_A's, decided
the same way, or a tuning table's as the runtime selector takes it. Per point:

- stable: the choice lies in RUN_B's tie set over all candidates, eligible or not
  (PointDecision.equivalent: every candidate whose time over the fastest's has a 95%
  interval starting at or below 1 + the rule's zone; twins, variants whose chunk or
  segment size has no effect at a size, count as one). Counting only RUN_B's eligible
  candidates would reward a table for copying RUN_B's caution;
- regret: the choice's time over RUN_B's best (its lowest ratio), paired in RUN_B's data
  (selection.paired) with its 95% interval. A point whose interval starts above SLOWER is
  a real miss; one whose interval straddles SLOWER cannot be told from it. The mean
  regret is the arithmetic mean of the ratio, as the mean performance penalty of
  Pjesivac-Grbovic et al. ("Decision trees and MPI collective algorithm selection
  problem", Euro-Par 2007: 2.08% for their C4.5 trees) is a mean of time over best;
- slower than native: the choice's time over native's in RUN_B has a 95% interval that
  starts above SLOWER.

Captured speedup (selection.replication.captured_speedup) scores choices on measurements
they were not made from: RUN_B's choices scored on a referee run R decided the same way,
or, without one, RUN_B's choices from its first launches scored on its later launches
(where RUN_B has at least HELD_OUT_MIN). Its denominator, the scoring side's best, is the
fastest of noisy estimates and so biased fast: the figure errs low on average.

The measurements: every (buffer kind, dtype, op, collective, p, size, algorithm) point
both runs measured, by its median over launches (clean native only: native beside another
backend's threads is not native's time):

- the shift of one algorithm between the runs, as measured, and relative to its point's
  median shift (the machine's speed state moves every algorithm at once; what is left
  reorders algorithms);
- the spread within RUN_B: the median over its points of (q3 - q1) / median over rounds;
- RUN_A's medians taken as the prediction of RUN_B's, scored with the performance model's
  metric (accuracy = 1 - |pred - meas| / meas, Kahira et al.): the accuracy a perfect,
  state-frozen model would reach against RUN_B.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np
import pandas as pd

from osu_dl_bench.errors import UsageError
from osu_dl_bench.measurement.store import RunStore
from osu_dl_bench.selection.paired import Ratio, identity, point_latency
from osu_dl_bench.selection.replication import (
    Agreement,
    Captured,
    agreement,
    candidate_pairs,
    captured_speedup,
    missed_wins,
)
from osu_dl_bench.selection.rule import DEFAULT_RULE, DecisionRule
from osu_dl_bench.selection.selector import Query, Selector, default_context
from osu_dl_bench.selection.tune import ONE_LAUNCH, PointDecision, clean_rows, run_decisions

# A point: one call measured in both runs. Its algorithms share the point's speed state.
POINT = ["device", "dtype", "op", "collective", "nprocs", "size_bytes"]
KEY = [*POINT, "algorithm"]
LARGE = 64 * 1024  # the model's accuracy is reported apart for messages of 64 KiB and above
MOVED = 1.05  # a shift beyond 5% either way counts as a move
# A choice more than 5% slower than the best, judged by the regret's interval.
SLOWER = 1.05
# Regret whose whole interval lies above this is a clear miss.
REGRET_BOUND = 1.25
# The launches a run needs for a held-out split: half of them decide, the rest score (at
# least two each, so each half has a launch-to-launch variance of its own).
HELD_OUT_MIN = 4


def slower_by_interval(regret: Ratio) -> bool:
    """The regret's whole interval lies above SLOWER: a real miss."""
    return regret.low > SLOWER


def straddles_slower(regret: Ratio) -> bool:
    """The regret's interval straddles SLOWER: not distinguishable from it."""
    return regret.low <= SLOWER < regret.high


# --- decisions ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Judged:
    """One point of RUN_B and the judged side's choice there."""

    point: PointDecision  # RUN_B's
    choice: str | None  # as RUN_B names its twin; None: the judged side has no choice here
    regret: Ratio | None  # None where RUN_B did not measure the choice

    @property
    def stable(self) -> bool:
        """The choice lies in RUN_B's tie set over all candidates, eligible or not."""
        return self.choice is not None and self.choice in self.point.equivalent

    @property
    def to_native(self) -> Ratio | None:
        """The choice's time over native's in RUN_B (None: no native, or not measured)."""
        if self.point.reference is None or self.regret is None:
            return None
        return self.point.candidates[self.choice].ratio

    @property
    def slower(self) -> bool:
        """The choice is more than SLOWER times the best by its regret's interval."""
        return self.regret is not None and slower_by_interval(self.regret)

    @property
    def unclear(self) -> bool:
        """The choice's regret interval straddles SLOWER."""
        return self.regret is not None and straddles_slower(self.regret)

    @property
    def worth_a_look(self) -> bool:
        """A choice that is unstable, slower by its interval, or unclear."""
        return self.choice is not None and (not self.stable or self.slower or self.unclear)


def judge(point: PointDecision, raw_choice: str | None) -> Judged:
    """RUN_B's point and a choice made elsewhere: its twin here, stability and regret."""
    if raw_choice is None:
        return Judged(point, None, None)
    choice = point.twin_of(raw_choice)
    if choice not in point.candidates:
        return Judged(point, choice, None)
    if choice == point.best:
        return Judged(point, choice, identity(point.candidates[choice].series))
    return Judged(point, choice, point.ratio_between(choice, point.best))


def _run_chooser(decided: dict) -> Callable:
    """point -> RUN_A's choice at the same (entry key, size), or None."""

    def choose(point: PointDecision) -> str | None:
        mine = decided.get((point.key, point.size))
        return None if mine is None else mine.chosen

    return choose


def _table_chooser(table: str) -> Callable:
    """point -> the runtime selector's choice from the table (as bench -a tuned runs it)."""
    selector = Selector.from_file(table, force={})

    def choose(point: PointDecision) -> str:
        k = point.key
        query = Query(k.collective, k.nprocs, point.size, k.device, k.nodes, k.ppn)
        return selector.decide(query, default_context(query)).label

    return choose


def table_coverage(table: str, points: Iterable[PointDecision]) -> dict[str, int]:
    """How the selector took its choice from ``table`` at each point: counts by the
    decision's ``how`` ('table': an entry of the point's own collective, buffer kind and
    layout; 'nearest': another layout's entry or the model; 'native': no entry at all)."""
    selector = Selector.from_file(table, force={})
    counts: dict[str, int] = {}
    for point in points:
        k = point.key
        query = Query(k.collective, k.nprocs, point.size, k.device, k.nodes, k.ppn)
        how = selector.decide(query, default_context(query)).how
        counts[how] = counts.get(how, 0) + 1
    return counts


def decided_points(
    run_dir: str,
    rule: DecisionRule = DEFAULT_RULE,
    launches: Iterable[int] = (),
    notes: list[str] | None = None,
) -> dict:
    """A run's decisions as tune takes them (from only ``launches``, where given); a run
    with none is refused with the reason (every point left out, e.g. native measured only
    beside another backend). ``notes`` receives tune's line about a run of one launch."""
    decided, warn = run_decisions(run_dir, rule=rule, launches=tuple(launches))
    if notes is not None:
        notes += [line for line in warn if ONE_LAUNCH in line]
    if not decided:
        why = f": {warn[-1]}" if warn else ""
        raise UsageError(f"{run_dir}: no point could be decided as tune decides{why}")
    return decided


def judge_decisions(
    decided_a: dict, decided_b: dict, table: str | None = None, wanted: Iterable[int] = ()
) -> list[Judged]:
    """Every point of ``decided_b`` (of the wanted p), judged against ``decided_a``'s choice
    or, with ``table``, the runtime selector's from that table."""
    choose = _table_chooser(table) if table else _run_chooser(decided_a)
    wanted = set(wanted)
    return [
        judge(point, choose(point))
        for (key, _), point in sorted(decided_b.items(), key=lambda item: _order(item[0]))
        if not wanted or key.nprocs in wanted
    ]


def judged_points(
    run_a: str,
    run_b: str,
    table: str | None = None,
    wanted: Iterable[int] = (),
    rule: DecisionRule = DEFAULT_RULE,
) -> list[Judged]:
    """Every point of RUN_B (of the wanted p), judged against RUN_A's or the table's choice,
    both runs decided by ``rule``."""
    decided_a, decided_b = decided_points(run_a, rule), decided_points(run_b, rule)
    return judge_decisions(decided_a, decided_b, table, wanted)


def _order(item: tuple) -> tuple:
    key, size = item
    return (key.collective, key.device, key.nprocs, key.nodes, key.ppn, size)


def judged_groups(judged: Iterable[Judged]) -> dict[tuple[str, str, int], list[Judged]]:
    """The judged points per (collective, buffer kind, p), in the order first met."""
    groups: dict[tuple[str, str, int], list[Judged]] = {}
    for item in judged:
        k = item.point.key
        groups.setdefault((k.collective, k.device, k.nprocs), []).append(item)
    return groups


@dataclass(frozen=True)
class Figures:
    """The decision figures of a set of points."""

    points: int  # points with a choice to judge
    stable: int
    regrets: tuple[Ratio, ...]  # of every point whose choice RUN_B measured
    to_native: tuple[Ratio, ...] = ()  # the choice over native, where RUN_B measured both

    @classmethod
    def of(cls, judged: Iterable[Judged]) -> Figures:
        """The figures of these points (those the judged side has no choice for left out)."""
        known = [j for j in judged if j.choice is not None]
        regrets = tuple(j.regret for j in known if j.regret is not None)
        to_native = tuple(j.to_native for j in known if j.to_native is not None)
        return cls(len(known), sum(j.stable for j in known), regrets, to_native)

    @property
    def stability(self) -> float:
        """Share of the points whose choice lies in RUN_B's tie set."""
        return self.stable / self.points if self.points else 0.0

    @property
    def median_regret(self) -> float:
        """Median over the points of the choice's time over RUN_B's best."""
        return statistics.median(r.ratio for r in self.regrets) if self.regrets else math.nan

    @property
    def mean_regret(self) -> float:
        """Arithmetic mean over the points of the choice's time over RUN_B's best (the
        mean performance penalty is this less 1)."""
        return statistics.fmean(r.ratio for r in self.regrets) if self.regrets else math.nan

    @property
    def max_regret(self) -> float:
        """The largest regret."""
        return max((r.ratio for r in self.regrets), default=math.nan)

    @property
    def slower(self) -> int:
        """Points more than SLOWER times the best by their interval (its low end)."""
        return sum(map(slower_by_interval, self.regrets))

    @property
    def unclear(self) -> int:
        """Points whose interval straddles SLOWER: not distinguishable from it."""
        return sum(map(straddles_slower, self.regrets))

    @property
    def unmeasured(self) -> int:
        """Points whose choice RUN_B did not measure."""
        return self.points - len(self.regrets)

    @property
    def slower_than_native(self) -> int:
        """Points whose choice is more than SLOWER times native by its interval."""
        return sum(map(slower_by_interval, self.to_native))

    @property
    def above_bound(self) -> int:
        """Points whose regret interval lies wholly above REGRET_BOUND."""
        return sum(r.low > REGRET_BOUND for r in self.regrets)


@dataclass(frozen=True)
class Evidence:
    """How RUN_A's intervals and the judged choices hold on RUN_B (selection.replication)."""

    found: Agreement  # coverage and agreement of RUN_A's intervals by RUN_B's estimates
    clear: int  # points where RUN_B's best is a clear win over native
    missed: int  # those of them where the choice is native
    above: int  # points whose regret interval lies wholly above REGRET_BOUND


def evidence_of(decided_a: dict, judged: list[Judged]) -> Evidence:
    """Coverage and agreement of RUN_A's intervals on RUN_B, the missed clear wins of the
    judged choices, and the points beyond REGRET_BOUND."""
    b_points = {(j.point.key, j.point.size): j.point for j in judged}
    found = agreement(candidate_pairs(decided_a, b_points))
    clear, missed = missed_wins((j.point, j.choice) for j in judged)
    return Evidence(found, clear, missed, Figures.of(judged).above_bound)


# --- choices scored on other measurements -------------------------------------------------


@dataclass(frozen=True)
class Scored:
    """RUN_B's choices scored on measurements they were not made from (a referee run, or
    RUN_B's held-out launches): what decided, what scored, and each point there."""

    decided_on: str  # in words: 'RUN_B', or 'RUN_B's launches 1, 2'
    scored_on: str  # 'the referee R', or 'RUN_B's launches 3, 4'
    judged: tuple[Judged, ...]  # the scoring run's points with RUN_B's choices

    def captured(self, wanted: Iterable[int] = ()) -> Captured:
        """The captured speedup of the choices at the wanted p (empty: all)."""
        return captured_speedup((j.point, j.choice) for j in self.at(wanted))

    def at(self, wanted: Iterable[int] = ()) -> list[Judged]:
        """The scored points at the wanted p (empty: all)."""
        wanted = set(wanted)
        return [j for j in self.judged if not wanted or j.point.key.nprocs in wanted]


def launch_numbers(run_dir: str) -> list[int]:
    """The launch numbers a run's usable rows hold, in order."""
    return sorted(int(n) for n in _results(run_dir)["launch"].unique())


def held_out_split(launches: list[int]) -> tuple[list[int], list[int]] | None:
    """(the launches that decide, those that score): the earlier half (rounded up)
    decides, the later scores, as a table meets the machine after its sweep; None with
    fewer than HELD_OUT_MIN launches."""
    if len(launches) < HELD_OUT_MIN:
        return None
    middle = math.ceil(len(launches) / 2)
    return launches[:middle], launches[middle:]


def _launch_words(run: str, launches: list[int]) -> str:
    numbers = ", ".join(map(str, launches))
    return f"{run}'s launches {numbers}"


def scored_choices(
    run_b: str,
    referee: str | None = None,
    wanted: Iterable[int] = (),
    rule: DecisionRule = DEFAULT_RULE,
) -> Scored | None:
    """RUN_B's choices scored on the referee's decisions (the referee's points of the
    wanted p where RUN_B has a choice), or without a referee on RUN_B's held-out launches;
    None where RUN_B has fewer than HELD_OUT_MIN launches and no referee is given."""
    if referee is not None:
        decided, scoring = decided_points(run_b, rule), decided_points(referee, rule)
        words = (run_b, f"the referee {referee}")
    else:
        split = held_out_split(launch_numbers(run_b))
        if split is None:
            return None
        deciding, held_out = split
        decided = decided_points(run_b, rule, deciding)
        scoring = decided_points(run_b, rule, held_out)
        words = (_launch_words(run_b, deciding), _launch_words(run_b, held_out))
    # Only the points both sides measured: where RUN_B has no choice there is none to score.
    judged = judge_decisions(decided, scoring, None, wanted)
    return Scored(*words, tuple(j for j in judged if j.choice is not None))


def judged_on_referee(
    decided_a: dict,
    referee: str,
    table: str | None = None,
    wanted: Iterable[int] = (),
    rule: DecisionRule = DEFAULT_RULE,
    among: Iterable[tuple] = (),
) -> Scored:
    """RUN_A's (or the table's) choices scored on the referee's decisions at the points
    ``among`` (RUN_B's (entry key, size) keys; empty: all the referee's): the judged side's
    own captured speedup, on a run neither side decided from (what compares two rules or
    tables judged on the same RUN_B and R)."""
    scoring = decided_points(referee, rule)
    among = set(among)
    if among:
        scoring = {key: point for key, point in scoring.items() if key in among}
    judged = judge_decisions(decided_a, scoring, table, wanted)
    return Scored("RUN_A", f"the referee {referee}", tuple(j for j in judged if j.choice))


# --- measurements -------------------------------------------------------------------------


def _results(run_dir: str) -> pd.DataFrame:
    """A run's usable rows (UsageError if it is no sweep's run directory), clean native
    only: in another backend's launches native ran beside that backend's threads."""
    store = RunStore(run_dir)
    if not store.results_path.is_file():
        raise UsageError(f"{run_dir}: no results.csv (expected a sweep's run directory)")
    return clean_rows(store.load())


def measured_points(run_dir: str) -> pd.DataFrame:
    """One row per point and algorithm, with its median over launches (of the launches'
    medians) and its relative spread (q3 - q1) / median, the median over launches."""
    frame = _results(run_dir)
    frame = frame.assign(
        op=frame["op"].astype(object).fillna(""),  # bcast has no op: '' matches ''
        spread=(frame["q3_us"] - frame["q1_us"]) / frame["median_us"],
    )
    grouped = frame.groupby(KEY, sort=False).agg({"median_us": point_latency, "spread": "median"})
    return grouped.reset_index()[[*KEY, "median_us", "spread"]]


def paired_points(a: pd.DataFrame, b: pd.DataFrame) -> pd.DataFrame:
    """Points both runs measured, with the shift b/a, the shift relative to the point's
    median shift, and a's median scored as the prediction of b's."""
    both = a.merge(b, on=KEY, suffixes=("_a", "_b")).rename(columns={"spread_b": "spread"})
    both["shift"] = both["median_us_b"] / both["median_us_a"]
    point_shift = both.groupby(POINT)["shift"].transform("median")
    both["relative"] = both["shift"] / point_shift
    both["accuracy"] = 1 - (both["median_us_a"] - both["median_us_b"]).abs() / both["median_us_b"]
    return both


def moved_percent(values: pd.Series) -> float:
    """Percentage of ratios beyond MOVED either way."""
    return float((np.abs(np.log(values)) > np.log(MOVED)).mean() * 100)


@dataclass(frozen=True)
class Shift:
    """How a set of paired points moved from RUN_A to RUN_B (percentages as 0-100, shares
    as 0-1; NaN accuracy where no point of that size class was measured)."""

    points: int
    median_shift: float  # median |log(shift)|, in percent
    moved: float  # percent of points that moved beyond MOVED
    reordered: float  # percent that moved beyond MOVED relative to their point's shift
    spread: float  # median relative IQR in RUN_B
    accuracy_large: float  # mean accuracy at LARGE and above
    accuracy_small: float  # below LARGE


def shift_of(group: pd.DataFrame) -> Shift:
    """The shift figures of these paired points (paired_points' rows)."""
    large = group[group["size_bytes"] >= LARGE]
    small = group[group["size_bytes"] < LARGE]
    return Shift(
        points=len(group),
        median_shift=np.median(np.abs(np.log(group["shift"]))) * 100,
        moved=moved_percent(group["shift"]),
        reordered=moved_percent(group["relative"]),
        spread=np.median(group["spread"]),
        accuracy_large=large["accuracy"].mean(),
        accuracy_small=small["accuracy"].mean(),
    )


def shifts(both: pd.DataFrame) -> list[tuple[str, Shift]]:
    """The shift figures per process count ('2', '4', ...), then over all ('all')."""
    groups = [(str(p), g) for p, g in both.groupby("nprocs")] + [("all", both)]
    return [(name, shift_of(group)) for name, group in groups]
