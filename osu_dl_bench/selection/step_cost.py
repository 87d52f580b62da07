"""A tuning table judged on a model's gradient traffic (``tune --for MODEL``): the
communication time of one training step, the bucket sizes DDP reduces (given as bytes:
this module never builds the model), under the table's choices, under native and under
the best choice per bucket size.

Each bucket's time is the sweep's measured median (a candidate's median over its rounds
and launches, as the table's points record it) interpolated log-log between the two
measured sizes around the bucket: latency and bandwidth terms are each a power of the
size, so a straight line in log-log space fits them between two doublings better than a
linear one. A bucket below the smallest or above the largest measured size is "outside
the sweep" and counted apart. The regret is the table's step time over the best
per-size choice's: the mean of each bucket's regret weighted by that bucket's share of
the best step, so a bucket that carries most of the step counts most.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from collectives.units import format_size
from osu_dl_bench.selection.selector import Query, Selector, default_context
from osu_dl_bench.selection.table import EntryKey, TuningTable
from osu_dl_bench.selection.tune import PointDecision

NATIVE = "native"


def loglog(x: float, x0: float, y0: float, x1: float, y1: float) -> float:
    """y at x on the straight line through (x0, y0) and (x1, y1) in log-log space."""
    if x0 == x1:
        return y0
    t = (math.log(x) - math.log(x0)) / (math.log(x1) - math.log(x0))
    return math.exp(math.log(y0) + t * (math.log(y1) - math.log(y0)))


def median_us(point: PointDecision, label: str) -> float | None:
    """The sweep's median time of ``label`` (or its twin) at a measured point."""
    candidate = point.candidates.get(point.twin_of(label))
    return None if candidate is None else candidate.series.latency_us()


def interpolated_us(lo: PointDecision, hi: PointDecision, label: str, size: int) -> float | None:
    """``label``'s time at ``size`` between two measured points (None: not measured at
    both)."""
    y0, y1 = median_us(lo, label), median_us(hi, label)
    if y0 is None or y1 is None or y0 <= 0 or y1 <= 0:
        return None
    return loglog(size, lo.size, y0, hi.size, y1)


@dataclass(frozen=True)
class BucketCost:
    """One bucket's time (microseconds) under the table's choice, native and the best
    candidate at its size; all None for a bucket outside the sweep."""

    size: int
    choice: str | None = None
    table_us: float | None = None
    native_us: float | None = None
    best: str | None = None
    best_us: float | None = None

    @property
    def inside(self) -> bool:
        """Within the measured sizes, with the table's choice and the best both measured."""
        return self.table_us is not None and self.best_us is not None


def _bracket(points: Sequence[PointDecision], size: int) -> tuple[PointDecision, PointDecision]:
    """The measured points around ``size`` (the same point twice at a measured size)."""
    sizes = [p.size for p in points]
    at = bisect.bisect_left(sizes, size)
    if sizes[at] == size:
        return points[at], points[at]
    return points[at - 1], points[at]


def bucket_cost(points: Sequence[PointDecision], size: int, choice: str) -> BucketCost:
    """One bucket of ``size`` bytes at one entry's measured points (sorted by size)."""
    if not points or not points[0].size <= size <= points[-1].size:
        return BucketCost(size)
    lo, hi = _bracket(points, size)
    times = {label: interpolated_us(lo, hi, label, size) for label in lo.candidates}
    measured = {label: t for label, t in times.items() if t is not None}
    best = min(measured, key=measured.__getitem__) if measured else None
    return BucketCost(
        size,
        lo.twin_of(choice),
        interpolated_us(lo, hi, choice, size),
        interpolated_us(lo, hi, NATIVE, size),
        best,
        None if best is None else measured[best],
    )


def predicted_us(points: Sequence[PointDecision], size: int, label: str) -> float | None:
    """``label``'s time at ``size`` as ``tune --for`` predicts it from one entry's measured
    points (sorted by size): None outside the sweep or where ``label`` was not measured."""
    if not points or not points[0].size <= size <= points[-1].size:
        return None
    return interpolated_us(*_bracket(points, size), label, size)


@dataclass(frozen=True)
class StepCost:
    """One entry's step: every bucket's cost, and the sums over the buckets inside."""

    key: EntryKey
    buckets: tuple[BucketCost, ...]
    measured: tuple[int, int]  # the sweep's smallest and largest size at this entry

    def _total(self, field: str) -> float | None:
        values = [getattr(b, field) for b in self.buckets if b.inside]
        return None if not values or None in values else sum(values)

    @property
    def table_us(self) -> float | None:
        """The table's step time over the buckets inside the sweep."""
        return self._total("table_us")

    @property
    def native_us(self) -> float | None:
        """Native's step time over the same buckets (None if native was not measured)."""
        return self._total("native_us")

    @property
    def best_us(self) -> float | None:
        """The best per-size choice's step time over the same buckets."""
        return self._total("best_us")

    @property
    def regret(self) -> float | None:
        """Table over best: each bucket's regret weighted by its share of the best step."""
        table, best = self.table_us, self.best_us
        return None if table is None or not best else table / best


def step_costs(
    table: TuningTable,
    decisions: Mapping[tuple[EntryKey, int], PointDecision],
    bucket_bytes: Sequence[int],
    dtype: str = "float32",
    op: str = "sum",
) -> list[StepCost]:
    """The step's cost at every allreduce entry of ``decisions`` (the sweep's points, as
    ``tune`` decided them), the table's choice per bucket from the runtime selector."""
    selector = Selector(table, force={})
    by_key: dict[EntryKey, list[PointDecision]] = {}
    for (key, _), point in sorted(decisions.items(), key=lambda item: item[0][1]):
        if key.collective == "allreduce":
            by_key.setdefault(key, []).append(point)
    costs = []
    for key, points in sorted(by_key.items(), key=lambda item: str(item[0])):
        buckets = []
        for size in bucket_bytes:
            query = Query(key.collective, key.nprocs, size, key.device, key.nodes, key.ppn)
            choice = selector.decide(query, default_context(query, dtype, op)).label
            buckets.append(bucket_cost(points, size, choice))
        costs.append(StepCost(key, tuple(buckets), (points[0].size, points[-1].size)))
    return costs


# --- text ---------------------------------------------------------------------------------


def _us(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def _bucket_line(number: int, bucket: BucketCost, measured: tuple[int, int]) -> str:
    if bucket.best is None:
        lo, hi = (format_size(s) for s in measured)
        return f"{number:>6}  {bucket.size:>10}  outside the sweep (measured {lo}..{hi})"
    regret = f"{bucket.table_us / bucket.best_us:.3f}" if bucket.inside else "-"
    return (
        f"{number:>6}  {bucket.size:>10}  {bucket.choice or '-':<22}{_us(bucket.table_us):>12}"
        f"{_us(bucket.native_us):>12}{_us(bucket.best_us):>12}  {bucket.best:<22}{regret:>7}"
    )


def _ratio(numerator: float | None, denominator: float | None) -> str:
    return "-" if numerator is None or not denominator else f"{numerator / denominator:.3f}"


def _step_lines(cost: StepCost) -> list[str]:
    inside = [b for b in cost.buckets if b.inside]
    mib = sum(b.size for b in inside) / (1 << 20)
    lines = [
        f"## {cost.key}",
        f"{'bucket':>6}  {'bytes':>10}  {'table choice':<22}{'table(us)':>12}{'native(us)':>12}"
        f"{'best(us)':>12}  {'best':<22}{'regret':>7}",
        *(_bucket_line(i + 1, b, cost.measured) for i, b in enumerate(cost.buckets)),
    ]
    if not inside:
        return [*lines, "   no bucket lies within the sweep's sizes: nothing to judge"]
    lines.append(
        f"   step over {len(inside)} of {len(cost.buckets)} buckets ({mib:.2f} MiB): table "
        f"{_us(cost.table_us)} us, native {_us(cost.native_us)} us, best per size "
        f"{_us(cost.best_us)} us"
    )
    lines.append(
        f"   speedup over native {_ratio(cost.native_us, cost.table_us)}x; regret "
        f"{_ratio(cost.table_us, cost.best_us)} (the table's step over the best per-size "
        "choice's: bucket regrets weighted by their share of the step)"
    )
    return lines


def step_cost_text(model: str, bucket_bytes: Sequence[int], costs: Sequence[StepCost]) -> str:
    """The report of ``tune --for``: per allreduce entry, bucket by bucket, then the step."""
    total = sum(bucket_bytes) / (1 << 20)
    lines = [
        f"# Gradient traffic of {model}: {len(bucket_bytes)} buckets, {total:.2f} MiB per "
        "step (DDP's order); times are the sweep's medians interpolated log-log at each "
        "bucket's size",
    ]
    if not costs:
        lines.append("# no allreduce entry in this run: nothing to judge")
    for cost in costs:
        lines += ["", *_step_lines(cost)]
    return "\n".join(lines) + "\n"
