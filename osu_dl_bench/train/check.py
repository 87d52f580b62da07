"""The tuning table checked where it is used (``train --check-table``).

A table is measured by a microbenchmark on an idle machine; in training the same call runs
beside backward's compute, buckets arrive back to back and the communication thread shares
cores and memory bandwidth, so the ranking may change (AutoCCL, NSDI'25, tunes NCCL in the
first training iterations for that reason). After warm-up, for ``MIN_CALLS`` rounds, each
gradient bucket's allreduce rotates among its candidates: the table's choice, native, the
null control (native under another label, whose true ratio to native is 1) and up to
``CONTENDERS`` of the choice's contenders (the table point's tie set, then its fastest).
Every candidate is a valid allreduce, so training goes on (and ``--validate`` holds).

Order: a round gives each candidate one step per bucket; rounds follow the rows of a
Williams design (``measurement.schedule.rotation``, the sweep's balanced order), starting
at the row ``--seed`` names, each bucket shifted by its index so that neighbouring buckets
do not run the same candidate in the same step. Each call is timed by the step's own
clock (``train.device.step_clock``: the communication thread's marks around the call; on
GPUs CUDA events on its stream). A call's time is the fastest rank's: ranks reach a
bucket at different times (backward's compute differs), and every rank but the last waits
for the last inside the call, which a sweep's barrier before each call keeps out of its
times; the last to arrive waits for no one.

Per bucket size the candidates' times become paired ratios to native (rounds paired by
index, ``selection.paired.paired_ratio``) and the rule decides among them
(``selection.tune.decide_candidates`` with ``DEFAULT_RULE``; the null control is judged
apart: would the rule choose it over native?). The table's choice holds where it lies in
the rule's tie set; else the rule's choice is the one to keep (``--adapt`` keeps it).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from collectives.registry import NULL_CONTROL, Variant, null_control, parse_variant
from collectives.units import format_size
from osu_dl_bench.errors import UsageError
from osu_dl_bench.measurement.schedule import rotation
from osu_dl_bench.selection.null_control import NullChoice
from osu_dl_bench.selection.paired import (
    Ratio,
    Series,
    cluster_bootstrap,
    identity,
    log_times,
    paired_ratio,
    seed_of,
    series_of,
)
from osu_dl_bench.selection.rule import DEFAULT_RULE
from osu_dl_bench.selection.table import Choice, Entry, EntryKey, TuningTable
from osu_dl_bench.selection.tune import Candidate, decide_candidates

MIN_CALLS = 10  # calls per candidate and bucket: rounds of the check
CONTENDERS = 2  # of the choice's contenders, besides native and the null control
NATIVE = "native"
GROUP = "train"  # every candidate ran in the same steps: one isolation group


@dataclass(frozen=True)
class CheckPlan:
    """Which candidate each bucket runs at each step of the check."""

    first_step: int  # the global step the check starts at
    labels: tuple[tuple[str, ...], ...]  # per bucket: the table's choice first
    seed: int = 0

    @property
    def steps(self) -> int:
        """MIN_CALLS rounds of the bucket with the most candidates."""
        return MIN_CALLS * max((len(labels) for labels in self.labels), default=0)

    def covers(self, step: int) -> bool:
        """Whether global step ``step`` is one of the check's."""
        return self.first_step <= step < self.first_step + self.steps

    def candidate(self, step: int, bucket: int) -> int:
        """The index (in ``labels[bucket]``) of the candidate bucket ``bucket`` runs at the
        check's ``step``-th step."""
        n = len(self.labels[bucket])
        order = rotation(self.seed + step // n, n)
        return order[(step + bucket) % n]


def variant_of(label: str) -> Variant:
    """The allreduce variant a candidate's label names (the null control: native's copy)."""
    if label == NULL_CONTROL:
        return null_control(parse_variant("allreduce", NATIVE), NULL_CONTROL)
    return parse_variant("allreduce", label)


def _nearest_point(entry: Entry | None, nbytes: int) -> Mapping[str, Any]:
    """The entry's measured point nearest ``nbytes`` on a log scale ({} without one)."""
    if entry is None or not entry.points:
        return {}
    log = math.log2(max(nbytes, 1))
    return min(entry.points, key=lambda p: abs(math.log2(max(p["size_bytes"], 1)) - log))


def candidate_labels(choice: str, entry: Entry | None, nbytes: int) -> tuple[str, ...]:
    """The check's candidates at one bucket size: the table's choice, native, the null
    control, then up to CONTENDERS of the nearest point's tie set and fastest."""
    point = _nearest_point(entry, nbytes)
    contenders = [*point.get("tie_set", ()), point.get("fastest")]
    fixed = [choice, NATIVE, NULL_CONTROL]
    extra = [c for c in dict.fromkeys(contenders) if c and c not in fixed][:CONTENDERS]
    return tuple(dict.fromkeys([*fixed, *extra]))


# --- measured ------------------------------------------------------------------------------


@dataclass(frozen=True)
class CandidateTimes:
    """One candidate at one bucket size: the table's prediction and what training
    measured (µs; its median's 95% interval; its ratio to native, paired by round)."""

    label: str
    predicted_us: float | None
    measured_us: float
    low_us: float
    high_us: float
    calls: int
    ratio: float
    ratio_low: float
    ratio_high: float


@dataclass(frozen=True)
class SizeVerdict:
    """One bucket size: its candidates and what the rule makes of them in training."""

    nbytes: int
    buckets: list[int]
    table_choice: str
    candidates: list[CandidateTimes]
    best: str  # lowest expected time
    tie_set: list[str]  # the rule's, its own pick first
    rule_choice: str
    holds: bool  # the table's choice is in the rule's tie set
    kept: str  # what --adapt keeps: the table's choice where it holds, else the rule's
    null_ratio: float | None = None
    null_low: float | None = None
    null_high: float | None = None
    null_chosen: bool | None = None  # the rule would choose the null control over native

    def times(self, label: str) -> CandidateTimes | None:
        """The named candidate's times."""
        return next((c for c in self.candidates if c.label == label), None)


@dataclass(frozen=True)
class StepVerdict:
    """The step's consequence (ms per step): communication under the table's choices as the
    table predicts it and as training measured it, under the kept choices, and exposed."""

    predicted_comm_ms: float | None
    measured_comm_ms: float
    kept_comm_ms: float
    predicted_exposed_ms: float | None  # at least the last launched bucket's time
    measured_exposed_ms: float | None  # per step after the check (None: no step after it)
    measured_busy_ms: float | None


# The run's first steps carry one-off costs (allocations, first touch of every page): plain
# steps compared with the check's start after them.
SETTLED_STEP = 2


@dataclass(frozen=True)
class CheckCost:
    """The check's steps against as many plain steps right after it and, where the run has
    them (a later check: --warmup-steps), right before it (seconds, mean over ranks); the
    extra time as a share of 1,000 plain steps (None: no plain steps to compare with).
    Runs that put the check first and runs that put it after plain steps, alternated,
    cancel a drift of the step time over the run."""

    steps: int
    check_seconds: float
    after_seconds: float | None
    before_seconds: float | None = None
    share_of_1000_steps: float | None = None

    @classmethod
    def of(
        cls,
        steps: int,
        check_seconds: float,
        after_seconds: float | None,
        before_seconds: float | None = None,
    ) -> CheckCost:
        """The cost with its share computed against the mean of the plain sides."""
        plain = [s for s in (after_seconds, before_seconds) if s is not None and s > 0]
        share = None
        if plain:
            mean = sum(plain) / len(plain)
            share = (check_seconds - mean) / (1000 * mean / steps)
        return cls(steps, check_seconds, after_seconds, before_seconds, share)


@dataclass(frozen=True)
class CheckRecord:
    """The check's report (printed and in the summary JSON)."""

    first_step: int
    steps: int
    seed: int
    clock: str
    prediction_source: str
    sizes: list[SizeVerdict]
    step: StepVerdict
    cost: CheckCost
    adapted: bool = False
    switched: list[dict[str, Any]] = field(default_factory=list)
    wrote_table: str | None = None


def call_durations(spans: Sequence[Sequence[tuple[float, float, float]]]) -> np.ndarray:
    """steps x buckets: each call's end - start (seconds) from the step's bucket marks."""
    return np.array([[end - start for _, start, end in step] for step in spans], dtype=float)


def _times_us(plan: CheckPlan, durations: np.ndarray, buckets: Sequence[int]) -> dict:
    """label -> its calls' µs at buckets of one size, ordered by (round, bucket) so that
    index i of any two candidates ran in the same round at the same bucket."""
    labels = plan.labels[buckets[0]]
    n = len(labels)
    values: dict[str, list[float]] = {label: [] for label in labels}
    for round_ in range(plan.steps // n):
        for bucket in buckets:
            for offset in range(n):
                step = round_ * n + offset
                label = labels[plan.candidate(step, bucket)]
                values[label].append(float(durations[step, bucket]) * 1e6)
    return values


def _median_interval(values: Sequence[float], seed: int) -> tuple[float, float, float]:
    """The median of ``values`` and its 95% bootstrap interval (µs)."""
    logs = log_times(np.asarray(values, dtype=float))
    low, high = cluster_bootstrap([logs], seed)
    return float(np.median(values)), math.exp(low), math.exp(high)


def _ratios(series: Mapping[str, Series], nbytes: int) -> dict[str, Ratio]:
    """label -> its ratio to native, rounds paired by index."""
    native = series[NATIVE]
    ratios = {}
    for label, own in series.items():
        ratio = (
            identity(native)
            if label == NATIVE
            else paired_ratio(own, native, "train-check", nbytes, label)
        )
        if ratio is not None:
            ratios[label] = ratio
    return ratios


def _choice(label: str) -> Choice:
    return NullChoice("mpi", NATIVE) if label == NULL_CONTROL else Choice.of(variant_of(label))


def judge_size(
    key: EntryKey,
    plan: CheckPlan,
    durations: np.ndarray,
    buckets: list[int],
    nbytes: int,
    predicted: Mapping[str, float | None],
) -> SizeVerdict:
    """The rule's verdict at one bucket size from the check's calls there."""
    labels = plan.labels[buckets[0]]
    values = _times_us(plan, durations, buckets)
    series = {label: series_of(GROUP, {0: v}) for label, v in values.items()}
    ratios = _ratios(series, nbytes)
    candidates = {
        label: Candidate(_choice(label), series[label], ratio)
        for label, ratio in ratios.items()
        if label != NULL_CONTROL
    }
    count = nbytes // 4
    decision = decide_candidates(key, nbytes, count, candidates, NATIVE, DEFAULT_RULE)
    times = []
    for label in labels:
        ratio = ratios.get(label)
        if ratio is None:
            continue
        median, low, high = _median_interval(values[label], seed_of("train-check", nbytes, label))
        times.append(
            CandidateTimes(
                label,
                predicted.get(label),
                median,
                low,
                high,
                len(values[label]),
                ratio.ratio,
                ratio.low,
                ratio.high,
            )
        )
    table_choice = labels[0]
    holds = table_choice in decision.tie_set
    verdict = SizeVerdict(
        nbytes,
        list(buckets),
        table_choice,
        times,
        decision.best,
        list(decision.tie_set),
        decision.chosen,
        holds,
        table_choice if holds else decision.chosen,
    )
    null = ratios.get(NULL_CONTROL)
    if null is None:
        return verdict
    pair = {
        NATIVE: candidates[NATIVE],
        NULL_CONTROL: Candidate(_choice(NULL_CONTROL), series[NULL_CONTROL], null),
    }
    fooled = decide_candidates(key, nbytes, count, pair, NATIVE, DEFAULT_RULE).chosen
    return replace(
        verdict,
        null_ratio=null.ratio,
        null_low=null.low,
        null_high=null.high,
        null_chosen=fooled == NULL_CONTROL,
    )


def size_groups(plan: CheckPlan, nbytes: Sequence[int]) -> dict[int, list[int]]:
    """bucket size -> the buckets of that size, by size (their candidates are the same:
    the table decides by size)."""
    groups: dict[int, list[int]] = {}
    for bucket, size in enumerate(nbytes):
        groups.setdefault(size, []).append(bucket)
    for size, buckets in groups.items():
        if len({plan.labels[b] for b in buckets}) != 1:
            raise ValueError(f"buckets {buckets} of {size} bytes have different candidates")
    return dict(sorted(groups.items()))


def step_verdict(
    sizes: Sequence[SizeVerdict],
    last_bucket: int,
    exposed_ms: float | None,
    busy_ms: float | None,
) -> StepVerdict:
    """Sums over the buckets (each size's time counted once per bucket of that size)."""

    def total(of) -> float | None:
        values = [of(v) for v in sizes for _ in v.buckets]
        return None if not values or None in values else sum(values) / 1e3

    predicted = total(
        lambda v: v.times(v.table_choice).predicted_us if v.times(v.table_choice) else None
    )
    measured = total(lambda v: v.times(v.table_choice).measured_us)
    kept = total(lambda v: v.times(v.kept).measured_us)
    last = next((v for v in sizes if last_bucket in v.buckets), None)
    last_time = None if last is None else last.times(last.table_choice)
    last_us = None if last_time is None else last_time.predicted_us
    return StepVerdict(
        predicted,
        measured or 0.0,
        kept or 0.0,
        None if last_us is None else last_us / 1e3,
        exposed_ms,
        busy_ms,
    )


# --- predictions ---------------------------------------------------------------------------


def predictions(
    table: TuningTable, key: EntryKey | None, wanted: Mapping[int, Sequence[str]]
) -> tuple[dict[int, dict[str, float | None]], str]:
    """size -> label -> the table's prediction (µs) as ``tune --for`` computes it: the
    sweep's medians at the table's entry, interpolated log-log; and where they come from.
    Without the sweep's run directory here, no prediction (None)."""
    empty = {size: dict.fromkeys(labels) for size, labels in wanted.items()}
    run_dir = (table.header.get("provenance") or {}).get("run_dir")
    if key is None or not run_dir or not (Path(run_dir) / "results.csv").is_file():
        return empty, f"none: the table's sweep ({run_dir or 'not recorded'}) is not here"
    from osu_dl_bench.selection.step_cost import predicted_us
    from osu_dl_bench.selection.tune import run_decisions

    measured = table.header.get("measured_with") or {}
    try:
        decisions, _ = run_decisions(run_dir, measured.get("dtype"), measured.get("op"))
    except UsageError as exc:
        return empty, f"none: the table's sweep {run_dir}: {exc}"
    points = sorted((p for (k, _), p in decisions.items() if k == key), key=lambda p: p.size)
    found = {
        size: {label: predicted_us(points, size, label) for label in labels}
        for size, labels in wanted.items()
    }
    return found, f"the sweep's medians in {run_dir} at {key}, interpolated log-log"


# --- text ----------------------------------------------------------------------------------


def _us(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f} ms"


def _ratio_text(low: float, ratio: float, high: float) -> str:
    return f"{ratio:.3f}x [{low:.3f}-{high:.3f}]"


def _size_lines(v: SizeVerdict) -> list[str]:
    lines = [
        f"## allreduce {format_size(v.nbytes)} ({len(v.buckets)} bucket(s): "
        f"{', '.join(map(str, v.buckets))}): the table chose {v.table_choice}",
        f"#   {'candidate':<26}{'predicted(us)':>14}{'measured(us) [95% CI]':>30}"
        f"{'ratio to native [95% CI]':>28}{'calls':>7}",
    ]
    for c in v.candidates:
        mark = " (table)" if c.label == v.table_choice else ""
        measured = f"{c.measured_us:.1f} [{c.low_us:.1f}-{c.high_us:.1f}]"
        lines.append(
            f"#   {c.label + mark:<26}{_us(c.predicted_us):>14}{measured:>30}"
            f"{_ratio_text(c.ratio_low, c.ratio, c.ratio_high):>28}{c.calls:>7}"
        )
    if v.holds:
        verdict = (
            f"holds: {v.table_choice} is in the rule's tie set in training "
            f"({', '.join(v.tie_set)}; fastest {v.best})"
        )
    else:
        verdict = (
            f"does not hold: the rule chooses {v.rule_choice} in training (tie set "
            f"{', '.join(v.tie_set)}); {v.table_choice} is outside it"
        )
    lines.append(f"#   => {verdict}")
    if v.null_ratio is not None:
        chosen = "would" if v.null_chosen else "would not"
        lines.append(
            f"#   null control (native twice): "
            f"{_ratio_text(v.null_low, v.null_ratio, v.null_high)} of native; the rule "
            f"{chosen} choose it over native"
        )
    return lines


def check_lines(record: CheckRecord) -> list[str]:
    """The check's report, for rank 0 to print."""
    last = record.first_step + record.steps
    lines = [
        f"# table check in training: steps {record.first_step}..{last} ({record.steps} "
        f"steps, {MIN_CALLS} rounds; balanced order from seed {record.seed}); each call "
        f"timed on {record.clock}, the fastest rank's time; predictions: "
        f"{record.prediction_source}",
    ]
    for size in record.sizes:
        lines += _size_lines(size)
    s = record.step
    lines.append(
        f"# step: communication with the table's choices predicted {_ms(s.predicted_comm_ms)}, "
        f"measured in training {_ms(s.measured_comm_ms)} (the check's medians summed over "
        f"the buckets); with the kept choices {_ms(s.kept_comm_ms)}; exposed predicted at "
        f"least {_ms(s.predicted_exposed_ms)} (the last bucket's time), measured after the "
        f"check {_ms(s.measured_exposed_ms)} of {_ms(s.measured_busy_ms)} reducing"
    )
    cost = record.cost
    sides = [
        f"the {cost.steps} steps {side} it {seconds:.3f} s"
        for side, seconds in (("before", cost.before_seconds), ("after", cost.after_seconds))
        if seconds is not None
    ]
    if cost.share_of_1000_steps is None:
        lines.append(
            f"# cost: the check's {cost.steps} steps took {cost.check_seconds:.3f} s; not "
            f"compared: fewer than {cost.steps} plain steps ran after it (or before it, "
            f"after step {SETTLED_STEP})"
        )
    else:
        lines.append(
            f"# cost: the check's {cost.steps} steps took {cost.check_seconds:.3f} s, "
            f"{', '.join(sides)}: {cost.share_of_1000_steps:+.2%} of 1,000 plain steps"
        )
    if record.adapted:
        if record.switched:
            moves = "; ".join(
                f"{format_size(m['nbytes'])}: {m['from']} -> {m['to']}" for m in record.switched
            )
            lines.append(f"# --adapt: from step {last} on, {moves}")
        else:
            lines.append("# --adapt: every table choice holds in training: nothing switched")
    if record.wrote_table:
        lines.append(f"# wrote {record.wrote_table} (the choices kept in training)")
    return lines


# --- the table of the choices kept in training ---------------------------------------------


def _kept_reason(v: SizeVerdict) -> str:
    """Why the trained table keeps its choice at one size, in words."""
    if v.holds:
        return f"measured in training: the table's choice {v.table_choice} holds"
    return f"measured in training: the rule chose it over the table's {v.table_choice}"


def trained_table(
    source: TuningTable,
    key: EntryKey,
    sizes: Sequence[SizeVerdict],
    provenance: Mapping[str, Any],
) -> TuningTable:
    """``source`` with its allreduce entry for ``key`` replaced by the choices kept in
    training (one range per run of equal choices, split at the bucket sizes), with the
    provenance of that measurement; every other entry as ``source`` has it."""
    from osu_dl_bench.selection.table import table_header
    from osu_dl_bench.selection.tune import merge_ranges

    sizes = sorted(sizes, key=lambda v: v.nbytes)
    choices = [(v.nbytes, Choice.of(variant_of(v.kept))) for v in sizes]
    points = []
    for v in sizes:
        kept, native = v.times(v.kept), v.times(NATIVE)
        points.append(
            {
                "size_bytes": v.nbytes,
                "chosen": v.kept,
                "median_us": round(kept.measured_us, 3),
                "native_median_us": round(native.measured_us, 3),
                "speedup": round(1 / kept.ratio, 4),
                "ratio": round(kept.ratio, 4),
                "ratio_low": round(kept.ratio_low, 4),
                "ratio_high": round(kept.ratio_high, 4),
                "tie_set": v.tie_set,
                "fastest": v.best,
                "candidates": len(v.candidates),
                "rounds": kept.calls,
                "reason": _kept_reason(v),
            }
        )
    entry = Entry(key, merge_ranges(choices), (sizes[0].nbytes, sizes[-1].nbytes), tuple(points))
    others = tuple(e for e in source.entries if e.key != key)
    base = dict(source.header.get("provenance") or {})
    header = table_header(
        f"{source.header.get('name', 'table')}.trained",
        str(source.header.get("noise_rule", "")),
        dict(source.header.get("measured_with") or {}),
        {**base, "measured_in_training": dict(provenance), "source_table": source.path},
    )
    for name in ("evidence",):
        if name in source.header:
            header[name] = source.header[name]
    return TuningTable((*others, entry), header)
