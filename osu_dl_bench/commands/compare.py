"""``osu-dl-bench compare RUN_A RUN_B [--table T] [--referee R]``: how far two sweeps of the
same code on the same machine agree, in their measurements and in the decisions a tuning
table takes from them. The numbers (decisions judged, regret with its interval, agreement
and coverage beside their values under honest intervals, captured speedup on a referee or
held-out launches, shifts, spread, accuracy) are selection.comparison's and
selection.replication's; this module reads the runs through them and puts the report in
words.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable
from dataclasses import dataclass

import pandas as pd

from collectives.units import format_size
from osu_dl_bench.errors import UsageError
from osu_dl_bench.measurement.store import is_training_run
from osu_dl_bench.paths import os_reason, write_text_atomic
from osu_dl_bench.runtime.metadata import command_line
from osu_dl_bench.selection.comparison import (
    HELD_OUT_MIN,
    REGRET_BOUND,
    SLOWER,
    Evidence,
    Figures,
    Judged,
    Scored,
    Shift,
    decided_points,
    evidence_of,
    judge_decisions,
    judged_groups,
    judged_on_referee,
    launch_numbers,
    measured_points,
    paired_points,
    scored_choices,
    shifts,
    table_coverage,
)
from osu_dl_bench.selection.null_control import rate_lines
from osu_dl_bench.selection.paired import Ratio
from osu_dl_bench.selection.period import between_runs, stored_text, write_period
from osu_dl_bench.selection.replication import CAPTURE_MIN, CLEAR_WIN, Agreement, same_candidates
from osu_dl_bench.selection.rule import DEFAULT_RULE, DecisionRule, rule_text
from osu_dl_bench.selection.tune import run_nulls


@dataclass(frozen=True)
class CompareConfig:
    """The two runs, the table to judge instead of RUN_A's decisions (None: RUN_A's), the
    process counts to report (empty: every one) as parsed and as given, --out, and the
    referee run RUN_B's choices are scored on (None: RUN_B's held-out launches), the
    decision rule's risk and indifference zone (every run is decided by it)."""

    run_a: str
    run_b: str
    table: str | None
    nprocs: tuple[int, ...]
    nprocs_text: str | None  # as given, as the report names it
    out: str | None
    referee: str | None
    risk: float
    indifference: float

    def rule(self):
        """The decision rule of these options (selection.rule.DecisionRule)."""
        from osu_dl_bench.selection.rule import DecisionRule

        return DecisionRule(self.risk, self.indifference)


def same_run(first: str, second: str) -> bool:
    """Whether two paths name one run directory (through symlinks, '..' or a trailing
    '/'): the one home of compare's 'same run' checks."""
    return os.path.realpath(first) == os.path.realpath(second)


_PERCENT = f"{(SLOWER - 1) * 100:.0f}"
# What stands for the decisions when a run holds train-bench's training steps.
TRAINING_DECISIONS = (
    "# decisions: none: a run holds train-bench's training steps, whose configurations "
    "no tuning table chooses; each configuration's step time in both runs follows"
)
# The anchor for the mean regret: a published selector's mean performance penalty.
ANCHOR = (
    'the C4.5 decision trees of Pjesivac-Grbovic et al. ("Decision trees and MPI '
    'collective algorithm selection problem", Euro-Par 2007) report a 2.08% mean '
    "performance penalty (a mean regret of 1.021)"
)


def run_compare(cfg: CompareConfig) -> int:
    """Print (and with --out write) the decisions' report, then the measurements' shifts."""
    a, b = measured_points(cfg.run_a), measured_points(cfg.run_b)
    both = paired_points(a, b)
    if cfg.nprocs:
        both = both[both["nprocs"].isin(cfg.nprocs)]
    if both.empty:
        at = f" at p = {cfg.nprocs_text}" if cfg.nprocs else ""
        raise UsageError(f"{cfg.run_a} and {cfg.run_b} share no measured point{at}")
    if is_training_run(a) or is_training_run(b):
        reports = _training_reports(cfg, both)
    else:
        notes: list[str] = []
        decided = (
            decided_points(cfg.run_a, cfg.rule(), notes=notes),
            decided_points(cfg.run_b, cfg.rule(), notes=notes),
        )
        reports = [
            decision_report(
                cfg.run_a, cfg.run_b, cfg.table, cfg.nprocs, cfg.referee, cfg.rule(), decided
            ),
            null_report(cfg.run_a, cfg.run_b, cfg.nprocs, cfg.rule()),
            shift_report(both, cfg.run_a, cfg.run_b),
            period_report(cfg.run_a, cfg.run_b, *decided),
            *(["\n".join(f"# warning: {note}" for note in notes)] if notes else []),
        ]
    text = "\n\n".join(reports)
    print(text, flush=True)
    if cfg.out:
        write_text_atomic(cfg.out, f"# command: {command_line()}\n{text}\n")
    return 0


def _training_reports(cfg: CompareConfig, both) -> list[str]:
    """Two train-bench runs: no decisions (no table chooses a configuration), each
    configuration's step time in both and its shift."""
    for flag, value in (("--table", cfg.table), ("--referee", cfg.referee)):
        if value:
            raise UsageError(
                f"{flag} {value}: {cfg.run_a} or {cfg.run_b} holds train-bench's training "
                "steps, whose configurations no tuning table chooses"
            )
    return [TRAINING_DECISIONS, configuration_report(both, cfg.run_a, cfg.run_b)]


def configuration_report(both, run_a: str, run_b: str) -> str:
    """One line per training configuration and p: its step time in each run and the
    shift, as measured and relative to the median shift at its p."""
    lines = [
        f"# {run_a} against {run_b}: {len(both)} configurations measured by both",
        f"{'configuration':<40}{'p':>4}{'step A (ms)':>13}{'step B (ms)':>13}"
        f"{'shift':>9}{'relative':>10}",
    ]
    for row in both.sort_values(["nprocs", "algorithm"]).itertuples(index=False):
        lines.append(
            f"{row.algorithm:<40}{row.nprocs:>4}{row.median_us_a / 1e3:>13.2f}"
            f"{row.median_us_b / 1e3:>13.2f}{(row.shift - 1) * 100:>8.1f}%"
            f"{(row.relative - 1) * 100:>9.1f}%"
        )
    return "\n".join(lines)


# --- decisions ----------------------------------------------------------------------------


def figures_text(what: str, figures: Figures) -> str:
    """'# WHAT: stability ..%, .. points more than 5% slower by the interval, median regret
    .., max .., mean ..; choices more than 5% slower than native ..'."""
    if not figures.regrets:
        return f"# {what}: no choice was measured in RUN_B"
    return (
        f"# {what}: stability {figures.stability * 100:.1f}%, "
        f"points more than {_PERCENT}% slower by the interval {figures.slower}, "
        f"median regret {figures.median_regret:.3f}, max {figures.max_regret:.3f}, "
        f"mean {figures.mean_regret:.3f}; {_native_text(figures)}"
    )


def _native_text(figures: Figures) -> str:
    """'choices more than 5% slower than native by the interval: N of M points (S%)'."""
    count, known = figures.slower_than_native, len(figures.to_native)
    share = _number(count / known if known else math.nan, 1, 100, "%")
    return (
        f"choices more than {_PERCENT}% slower than native by the interval: {count} of "
        f"{known} points ({share})"
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
        f"{_number(figures.mean_regret):>13}{figures.slower_than_native:>10}"
    )


def _ratio_text(ratio: Ratio) -> str:
    return f"{ratio.ratio:.3f}x (95% CI {ratio.low:.3f}-{ratio.high:.3f})"


def _look_at(judged: Judged) -> str | None:
    """A line for a point that is unstable, slower by its interval, or unclear."""
    if not judged.worth_a_look:
        return None
    point, regret = judged.point, judged.regret
    k = point.key
    text = (
        f"{k.collective} {k.device} p={k.nprocs} {format_size(point.size)}: chose "
        f"{judged.choice}; RUN_B's tie set over all candidates {', '.join(point.equivalent)}"
    )
    if regret is None:
        return text + "; the choice was not measured in RUN_B"
    text += f"; regret {_ratio_text(regret)} against {point.best}"
    if judged.slower:
        return text + f": more than {_PERCENT}% slower"
    return text + (f": cannot be told from {_PERCENT}%" if judged.unclear else "")


def agreement_text(name: str, found: Agreement) -> str:
    """Agreement with its binomial interval, then coverage beside its value under honest
    intervals of the same widths."""
    low, high = found.agreement_interval
    return (
        f"# {name}: agreement within the combined interval "
        f"{_number(found.agreement, 1, 100, '%')} of {found.pairs} (point, candidate) pairs "
        f"(binomial 95% CI {_number(low, 1, 100)}-{_number(high, 1, 100, '%')}; honest "
        f"intervals: 95%); coverage of RUN_A's 95% intervals by RUN_B's estimates "
        f"{_number(found.coverage, 1, 100, '%')} (honest intervals of these widths: "
        f"{_number(found.expected_coverage, 1, 100, '%')})"
    )


def evidence_lines(name: str, evidence: Evidence) -> list[str]:
    """Agreement and coverage of RUN_A's intervals on RUN_B, the points whose regret
    interval lies wholly above REGRET_BOUND, and the clear wins kept native."""
    return [
        agreement_text(name, evidence.found),
        f"# {name}: regret interval wholly above {REGRET_BOUND}: {evidence.above} points; "
        f"native kept at {evidence.missed} of the {evidence.clear} points where "
        f"RUN_B's best is >= {CLEAR_WIN}x native with its interval below 1",
    ]


def scored_header(scored: Scored | None, run_b: str) -> list[str]:
    """What the captured speedup scores and on what, or why it is not given."""
    if scored is None:
        count = len(launch_numbers(run_b))
        return [
            f"# captured speedup: not given: {run_b} has {count} launches, a held-out split "
            f"needs {HELD_OUT_MIN} (half to decide, half to score), and no --referee run "
            "was given to score its choices on"
        ]
    return [
        f"# captured speedup: the choices decided on {scored.decided_on}, scored on "
        f"{scored.scored_on}, each decided as tune decides; over the points where the "
        f"scoring side's best is >= {CAPTURE_MIN}x native, sum log(native / choice) over "
        "sum log(native / best) in its estimates; regret there: the choice's time over its best"
    ]


def referee_notes(
    run_a: str, referee: str | None, scored: Scored | None, b_points: int
) -> list[str]:
    """What the referee can and cannot say, one line each: how many of RUN_B's points it
    scores, a referee of one launch (its intervals hold no launch-to-launch variance), a
    referee that is RUN_A (a second look at RUN_A's data, not a third run)."""
    if referee is None or scored is None:
        return []
    lines = [
        f"# the referee {referee} scores {len(scored.judged)} of RUN_B's {b_points} points "
        "(the captured speedup and regrets below are over those only)"
    ]
    launches = len(launch_numbers(referee))
    if launches < 2:
        lines.append(
            f"# the referee {referee} has {launches} launch: its intervals hold the rounds "
            "within that launch only, no launch-to-launch variance, so its regret intervals "
            "are too narrow"
        )
    if same_run(referee, run_a):
        lines.append(
            f"# the referee is RUN_A ({run_a}), not a third run: its figures score RUN_B's "
            "choices on RUN_A's data"
        )
    return lines


def scored_lines(name: str, scored: Scored, wanted: Iterable[int]) -> list[str]:
    """The captured speedup, mean and max regret, choices slower than native and points
    beyond REGRET_BOUND of RUN_B's choices where they were scored."""
    judged = scored.at(wanted)
    captured, figures = scored.captured(wanted), Figures.of(judged)
    return [
        f"# {name}: captured speedup {_number(captured.share, 1, 100, '%')} over "
        f"{captured.points} points ({captured.unmeasured} choices not measured there); "
        f"regret mean {_number(figures.mean_regret)}, max {_number(figures.max_regret)}, "
        f"interval wholly above {REGRET_BOUND}: {figures.above_bound} points; "
        f"{_native_text(figures)}"
    ]


def _coverage_lines(table: str, points: list) -> list[str]:
    """Where the table's choices come from: its own entries, or (for other process counts,
    layouts or collectives) the nearest entry, the model or native; a table that covers
    none of the points says so first, as its report would otherwise read as stability."""
    counts = table_coverage(table, points)
    own = counts.get("table", 0)
    lines = [
        f"# table {table}: {own} of {len(points)} points from an entry of their own "
        f"collective and layout, {counts.get('nearest', 0) + counts.get('model', 0)} from "
        f"the nearest entry or the model, {counts.get('native', 0)} native (no entry)"
    ]
    if not own:
        lines.append(
            f"# warning: {table} has no entry for these runs' process counts and collectives: "
            "the figures below judge its fallbacks, not its own decisions"
        )
    return lines


def _legend(rule: DecisionRule) -> list[str]:
    """What the columns and figures of the decisions' report mean."""
    return [
        "# stable: the choice is in RUN_B's tie set over all candidates, eligible or not "
        "(every one whose time over the fastest's has a 95% interval starting at or below "
        f"{1 + rule.indifference:g}); regret: its time over RUN_B's best, in RUN_B's "
        f"estimates (95% CI); slower: the interval's low end above {SLOWER}; unclear: the "
        f"interval straddles {SLOWER}; > native: the choice's time over native's has its "
        f"interval's low end above {SLOWER}",
        "# mean regret: the arithmetic mean of the choice's time over the best's; for "
        f"scale, {ANCHOR}",
    ]


def decision_report(
    run_a: str,
    run_b: str,
    table: str | None = None,
    wanted: Iterable[int] = (),
    referee: str | None = None,
    rule: DecisionRule = DEFAULT_RULE,
    decided: tuple[dict, dict] | None = None,
) -> str:
    """Stability and regret of RUN_A's (or the table's) choices on RUN_B: per (collective,
    buffer kind, p), then per p and over all, with agreement and coverage, and the
    captured speedup of RUN_B's choices on the referee or RUN_B's held-out launches; then
    the points to look at; every run decided by ``rule`` (``decided``: both runs'
    decisions, where already taken by it)."""
    decided_a, decided_b = decided or (decided_points(run_a, rule), decided_points(run_b, rule))
    wanted = set(wanted)
    judged = judge_decisions(decided_a, decided_b, table, wanted)
    scored = scored_choices(run_b, referee, wanted, rule)
    # The judged side's own choices on the referee: what tells two rules or tables apart.
    own = judged_on_referee(decided_a, referee, table, wanted, rule, decided_b) if referee else None
    source = f"table {table}'s choices (the selector's)" if table else f"{run_a}'s choices"
    who = f"table {table}" if table else run_a
    lines = [
        *(_coverage_lines(table, [j.point for j in judged]) if table else []),
        f"# decisions: {source} on {run_b}'s measurements, decided as tune decides "
        f"({rule_text(rule.as_record())})",
        *_legend(rule),
        f"{'collective':<28}{'points':>7}{'stable':>9}{'median regret':>15}{'max regret':>12}"
        f"{'slower':>12}{'unclear':>9}{'not measured':>14}{'mean regret':>13}{'> native':>10}",
    ]
    groups = judged_groups(judged)
    for (collective, device, nprocs), items in groups.items():
        lines.append(_figures_line(f"{collective} {device} p={nprocs}", Figures.of(items)))
    lines += scored_header(scored, run_b)
    b_points = sum(1 for key, _ in decided_b if not wanted or key.nprocs in wanted)
    lines += referee_notes(run_a, referee, scored, b_points)
    for nprocs in sorted({k[2] for k in groups}):
        items = [j for j in judged if j.point.key.nprocs == nprocs]
        lines.append(figures_text(f"p={nprocs}", Figures.of(items)))
        lines += evidence_lines(f"p={nprocs}", evidence_of(decided_a, items))
        lines += scored_lines(f"p={nprocs}", scored, [nprocs]) if scored else []
        lines += scored_lines(f"p={nprocs}, {who}'s choices on R", own, [nprocs]) if own else []
    lines.append(figures_text("all", Figures.of(judged)))
    lines += evidence_lines("all", evidence_of(decided_a, judged))
    lines += scored_lines("all", scored, wanted) if scored else []
    lines += scored_lines(f"all, {who}'s choices on R", own, wanted) if own else []
    notes = [text for text in map(_look_at, judged) if text]
    if notes:
        lines += ["# points to look at:", *notes]
    return "\n".join(lines)


def null_report(
    run_a: str, run_b: str, wanted: Iterable[int] = (), rule: DecisionRule = DEFAULT_RULE
) -> str:
    """The null control's false-win rate in each run, per p (selection.null_control)."""
    lines = [
        "# null control: native measured again under another label, judged by the rule "
        "as a candidate; chosen over native = a false win"
    ]
    for run in (run_a, run_b):
        lines += rate_lines(run, run_nulls(run, rule=rule), wanted)
    return "\n".join(lines)


def period_report(run_a: str, run_b: str, decided_a: dict, decided_b: dict) -> str:
    """The between-period component of the two runs' ratios, stored with RUN_B for its
    tune (selection.period), in one line."""
    period = between_runs(same_candidates(decided_a, decided_b), f"compare {run_a} {run_b}")
    if period is None:
        return "# between-period: no (point, candidate) with an interval in both runs"
    earlier = stored_text(run_b)
    try:
        path = write_period(run_b, period)
    except OSError as exc:  # a read-only archive of a run: the figure is still printed
        return f"# {period.line()}; not stored with {run_b}: {os_reason(exc)}"
    replaced = f", replacing {earlier}" if earlier else ""
    return f"# {period.line()}; stored in {path} for tune of {run_b}{replaced}"


# --- measurements -------------------------------------------------------------------------


def _shift_line(name: str, shift: Shift) -> str:
    return (
        f"{name:>4}{shift.points:>8}{shift.median_shift:>13.1f}%"
        f"{shift.moved:>10.0f}%{shift.reordered:>13.0f}%{shift.spread * 100:>9.1f}%"
        f"{_number(shift.accuracy_large, 1, 100, '%'):>16}"
        f"{_number(shift.accuracy_small, 1, 100, '%'):>8}"
    )


def shift_report(both: pd.DataFrame, run_a: str, run_b: str) -> str:
    """One line per process count, then all together."""
    lines = [
        f"# {run_a} against {run_b}: {len(both)} points measured by both",
        f"{'p':>4}{'points':>8}{'median shift':>14}{'moved >5%':>11}"
        f"{'relative >5%':>14}{'IQR in B':>10}{'accuracy >=64K':>16}{'<64K':>8}",
    ]
    lines += [_shift_line(name, shift) for name, shift in shifts(both)]
    return "\n".join(lines)
