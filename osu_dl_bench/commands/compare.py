"""``osu-dl-bench compare RUN_A RUN_B [--table T]``: how far two sweeps of the same code on
the same machine agree, in their measurements and in the decisions a tuning table takes
from them.

The decisions (the one way this suite judges a table): every point of RUN_B is decided as
``tune`` decides it (selection.tune.run_decisions: paired ratios to clean native, tie
sets, the stable rule, hysteresis). The choice judged is RUN_A's, decided the same way,
or with --table T the runtime selector's from T. Per point:

- stable: the choice lies in RUN_B's tie set (twins, variants whose chunk or segment size
  has no effect at a size, count as one);
- regret: the choice's time over RUN_B's best (its lowest ratio), paired in RUN_B's data
  (selection.paired) with its 95% interval. A point whose interval starts above 1.05 is
  a real miss; one whose interval straddles 1.05 cannot be told from 5%.

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

import argparse
import math
import shlex
import statistics
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np
import pandas as pd

from collectives.units import format_size
from osu_dl_bench.errors import UsageError
from osu_dl_bench.measurement.store import RunStore
from osu_dl_bench.paths import check_writable_file, write_text_atomic
from osu_dl_bench.selection.agreement import (
    CAPTURE_MIN,
    CLEAR_WIN,
    agreement,
    candidate_pairs,
    captured_speedup,
    missed_wins,
)
from osu_dl_bench.selection.paired import Ratio, identity, point_latency
from osu_dl_bench.selection.selector import Query, Selector, default_context
from osu_dl_bench.selection.tune import PointDecision, clean_rows, run_decisions

# A point: one call measured in both runs. Its algorithms share the point's speed state.
POINT = ["device", "dtype", "op", "collective", "nprocs", "size_bytes"]
KEY = [*POINT, "algorithm"]
LARGE = 64 * 1024  # the model's accuracy is reported apart for messages of 64 KiB and above
MOVED = 1.05  # a shift beyond 5% either way counts as a move
# A choice more than 5% slower than the best, judged by the regret's interval.
SLOWER = 1.05
# Regret whose whole interval lies above this is a clear miss.
REGRET_BOUND = 1.25
_PERCENT = f"{(SLOWER - 1) * 100:.0f}"


def run_compare(args: argparse.Namespace) -> int:
    """Print (and with --out write) the decisions' report, then the measurements' shifts."""
    wanted = _process_counts(args.nprocs)
    check_writable_file("--out", args.out, make_parents=True)
    a, b = measured_points(args.run_a), measured_points(args.run_b)
    both = paired_points(a, b)
    if wanted:
        both = both[both["nprocs"].isin(wanted)]
    if both.empty:
        at = f" at p = {args.nprocs}" if wanted else ""
        raise UsageError(f"{args.run_a} and {args.run_b} share no measured point{at}")
    reports = [
        decision_report(args.run_a, args.run_b, args.table, wanted),
        shift_report(both, args.run_a, args.run_b),
    ]
    text = "\n\n".join(reports)
    print(text, flush=True)
    if args.out:
        write_text_atomic(args.out, f"# command: {shlex.join(command_line(args))}\n{text}\n")
    return 0


def command_line(args: argparse.Namespace) -> list[str]:
    """The command that gives this report, as the --out file records it."""
    argv = ["osu-dl-bench", "compare", args.run_a, args.run_b]
    for flag, value in (("--table", args.table), ("--nprocs", args.nprocs)):
        argv += [flag, value] if value else []
    return argv


def _process_counts(text: str | None) -> tuple[int, ...]:
    from osu_dl_bench.jobs.options import parse_process_counts

    if not text:
        return ()
    try:
        return parse_process_counts(text)
    except UsageError as exc:  # it names sweep's --np
        raise UsageError(str(exc).replace("--np ", "--nprocs ", 1)) from None


# --- decisions ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Judged:
    """One point of RUN_B and the judged side's choice there."""

    point: PointDecision  # RUN_B's
    choice: str | None  # as RUN_B names its twin; None: the judged side has no choice here
    regret: Ratio | None  # None where RUN_B did not measure the choice

    @property
    def stable(self) -> bool:
        """The choice lies in RUN_B's tie set."""
        return self.choice is not None and self.choice in self.point.tie_set


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


def judged_points(
    run_a: str, run_b: str, table: str | None = None, wanted: Iterable[int] = ()
) -> list[Judged]:
    """Every point of RUN_B (of the wanted p), judged against RUN_A's or the table's choice."""
    return _judged(_decided(run_a), _decided(run_b), table, wanted)


def _judged(
    decided_a: dict, decided_b: dict, table: str | None, wanted: Iterable[int]
) -> list[Judged]:
    choose = _table_chooser(table) if table else _run_chooser(decided_a)
    wanted = set(wanted)
    return [
        judge(point, choose(point))
        for (key, _), point in sorted(decided_b.items(), key=lambda item: _order(item[0]))
        if not wanted or key.nprocs in wanted
    ]


def _decided(run_dir: str) -> dict:
    """A run's decisions as tune takes them; a run with none is refused with the reason
    (every point left out, e.g. native measured only beside another backend)."""
    decided, warn = run_decisions(run_dir)
    if not decided:
        why = f": {warn[-1]}" if warn else ""
        raise UsageError(f"{run_dir}: no point could be decided as tune decides{why}")
    return decided


def _order(item: tuple) -> tuple:
    key, size = item
    return (key.collective, key.device, key.nprocs, key.nodes, key.ppn, size)


@dataclass(frozen=True)
class Figures:
    """The decision figures of a set of points."""

    points: int  # points with a choice to judge
    stable: int
    regrets: tuple[Ratio, ...]  # of every point whose choice RUN_B measured

    @classmethod
    def of(cls, judged: Iterable[Judged]) -> Figures:
        """The figures of these points (those the judged side has no choice for left out)."""
        known = [j for j in judged if j.choice is not None]
        regrets = tuple(j.regret for j in known if j.regret is not None)
        return cls(len(known), sum(j.stable for j in known), regrets)

    @property
    def stability(self) -> float:
        """Share of the points whose choice lies in RUN_B's tie set."""
        return self.stable / self.points if self.points else 0.0

    @property
    def median_regret(self) -> float:
        """Median over the points of the choice's time over RUN_B's best."""
        return statistics.median(r.ratio for r in self.regrets) if self.regrets else math.nan

    @property
    def max_regret(self) -> float:
        """The largest regret."""
        return max((r.ratio for r in self.regrets), default=math.nan)

    @property
    def slower(self) -> int:
        """Points more than 5% slower than the best by their interval (its low end)."""
        return sum(r.low > SLOWER for r in self.regrets)

    @property
    def unclear(self) -> int:
        """Points whose interval straddles 5%: not distinguishable from it."""
        return sum(r.low <= SLOWER < r.high for r in self.regrets)

    @property
    def unmeasured(self) -> int:
        """Points whose choice RUN_B did not measure."""
        return self.points - len(self.regrets)


def figures_text(what: str, figures: Figures) -> str:
    """'# WHAT: stability ..%, .. points more than 5% slower by the interval, median regret ..'."""
    if not figures.regrets:
        return f"# {what}: no choice was measured in RUN_B"
    return (
        f"# {what}: stability {figures.stability * 100:.1f}%, "
        f"points more than {_PERCENT}% slower by the interval {figures.slower}, "
        f"median regret {figures.median_regret:.3f}, max {figures.max_regret:.3f}"
    )


def _number(value: float, digits: int = 3, scale: float = 1, unit: str = "") -> str:
    """A figure of the report, or '-' where there is none (no point to take it over)."""
    return "-" if math.isnan(value) else f"{value * scale:.{digits}f}{unit}"


def _figures_line(name: str, figures: Figures) -> str:
    stability = math.nan if not figures.points else figures.stability
    return (
        f"{name:<28}{figures.points:>7}{_number(stability, 1, 100, '%'):>9}"
        f"{_number(figures.median_regret):>15}{_number(figures.max_regret):>12}"
        f"{figures.slower:>12}{figures.unclear:>9}{figures.unmeasured:>14}"
    )


def _ratio_text(ratio: Ratio) -> str:
    return f"{ratio.ratio:.3f}x (95% CI {ratio.low:.3f}-{ratio.high:.3f})"


def _look_at(judged: Judged) -> str | None:
    """A line for a point that is unstable, slower by its interval, or unclear."""
    point, regret = judged.point, judged.regret
    slower = regret is not None and regret.low > SLOWER
    unclear = regret is not None and regret.low <= SLOWER < regret.high
    if judged.choice is None or (judged.stable and not slower and not unclear):
        return None
    k = point.key
    text = (
        f"{k.collective} {k.device} p={k.nprocs} {format_size(point.size)}: chose "
        f"{judged.choice}; RUN_B's tie set {', '.join(point.tie_set)}"
    )
    if regret is None:
        return text + "; the choice was not measured in RUN_B"
    text += f"; regret {_ratio_text(regret)} against {point.best}"
    if slower:
        return text + f": more than {_PERCENT}% slower"
    return text + (f": cannot be told from {_PERCENT}%" if unclear else "")


def evidence_lines(name: str, decided_a: dict, judged: list[Judged]) -> list[str]:
    """Coverage and agreement of RUN_A's intervals on RUN_B, the captured speedup of the
    judged choices, and the points whose regret interval lies wholly above REGRET_BOUND."""
    b_points = {(j.point.key, j.point.size): j.point for j in judged}
    found = agreement(candidate_pairs(decided_a, b_points))
    captured = captured_speedup((j.point, j.choice) for j in judged)
    clear, missed = missed_wins((j.point, j.choice) for j in judged)
    above = sum(j.regret is not None and j.regret.low > REGRET_BOUND for j in judged)
    return [
        f"# {name}: coverage of RUN_A's 95% intervals by RUN_B's estimates "
        f"{_number(found.coverage, 1, 100, '%')} of {found.pairs} (point, candidate) pairs; "
        f"agreement within the combined interval {_number(found.agreement, 1, 100, '%')}",
        f"# {name}: captured speedup {_number(captured.share, 1, 100, '%')} over "
        f"{captured.points} points where RUN_B's best is >= {CAPTURE_MIN}x native "
        f"({captured.unmeasured} choices not measured in RUN_B); regret interval wholly "
        f"above {REGRET_BOUND}: {above} points",
        f"# {name}: native kept at {missed} of the {clear} points where RUN_B's best is "
        f">= {CLEAR_WIN}x native with its interval below 1",
    ]


def decision_report(
    run_a: str, run_b: str, table: str | None = None, wanted: Iterable[int] = ()
) -> str:
    """Stability and regret of RUN_A's (or the table's) choices on RUN_B: per (collective,
    buffer kind, p), then per p and over all, with coverage and captured speedup, then the
    points to look at."""
    decided_a, decided_b = _decided(run_a), _decided(run_b)
    judged = _judged(decided_a, decided_b, table, wanted)
    source = f"table {table}'s choices (the selector's)" if table else f"{run_a}'s choices"
    lines = [
        f"# decisions: {source} on {run_b}'s measurements, decided as tune decides",
        "# stable: the choice is in RUN_B's tie set; regret: its time over RUN_B's best, "
        "in RUN_B's estimates (95% CI); slower: the interval's low end above "
        f"{SLOWER}; unclear: the interval straddles {SLOWER}",
        f"{'collective':<28}{'points':>7}{'stable':>9}{'median regret':>15}{'max regret':>12}"
        f"{'slower':>12}{'unclear':>9}{'not measured':>14}",
    ]
    groups: dict[tuple, list[Judged]] = {}
    for item in judged:
        k = item.point.key
        groups.setdefault((k.collective, k.device, k.nprocs), []).append(item)
    for (collective, device, nprocs), items in groups.items():
        lines.append(_figures_line(f"{collective} {device} p={nprocs}", Figures.of(items)))
    for nprocs in sorted({k[2] for k in groups}):
        items = [j for j in judged if j.point.key.nprocs == nprocs]
        lines.append(figures_text(f"p={nprocs}", Figures.of(items)))
        lines += evidence_lines(f"p={nprocs}", decided_a, items)
    lines.append(figures_text("all", Figures.of(judged)))
    lines += evidence_lines("all", decided_a, judged)
    notes = [text for text in map(_look_at, judged) if text]
    if notes:
        lines += ["# points to look at:", *notes]
    return "\n".join(lines)


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


def _moved(values: pd.Series) -> float:
    """Percentage of ratios beyond MOVED either way."""
    return float((np.abs(np.log(values)) > np.log(MOVED)).mean() * 100)


def shift_report(both: pd.DataFrame, run_a: str, run_b: str) -> str:
    """One line per process count, then all together."""
    lines = [
        f"# {run_a} against {run_b}: {len(both)} points measured by both",
        f"{'p':>4}{'points':>8}{'median shift':>14}{'moved >5%':>11}"
        f"{'relative >5%':>14}{'IQR in B':>10}{'accuracy >=64K':>16}{'<64K':>8}",
    ]
    groups = [(str(p), g) for p, g in both.groupby("nprocs")] + [("all", both)]
    for name, group in groups:
        large = group[group["size_bytes"] >= LARGE]
        small = group[group["size_bytes"] < LARGE]
        lines.append(
            f"{name:>4}{len(group):>8}"
            f"{np.median(np.abs(np.log(group['shift']))) * 100:>13.1f}%"
            f"{_moved(group['shift']):>10.0f}%{_moved(group['relative']):>13.0f}%"
            f"{np.median(group['spread']) * 100:>9.1f}%"
            f"{_number(large['accuracy'].mean(), 1, 100, '%'):>16}"
            f"{_number(small['accuracy'].mean(), 1, 100, '%'):>8}"
        )
    return "\n".join(lines)
