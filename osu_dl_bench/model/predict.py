"""Predicted times of every registered variant at scale, and the predicted tuning table.

The table has the measured tables' schema (selection.table), one entry per collective for the
requested layout, ``"provenance": {"predicted": true, "platform": ...}`` and per size the
predicted time of the fastest eligible variant and of native (``median_us`` and
``native_median_us`` are predictions there). The selector loads it like any other table.
"""

from __future__ import annotations

from dataclasses import dataclass

from collectives import SPECS, CallContext, Variant, algorithms
from collectives.dtypes import element_type
from collectives.ops import reduce_op
from collectives.shape import JobShape
from collectives.units import format_size
from osu_dl_bench import __version__
from osu_dl_bench.model.costs import predict_seconds
from osu_dl_bench.model.platform import Platform
from osu_dl_bench.runtime.metadata import COMMAND_KEY, command_line, utc_now
from osu_dl_bench.selection.table import (
    Choice,
    Entry,
    EntryKey,
    TuningTable,
    table_header,
)
from osu_dl_bench.selection.tune import merge_ranges

RULE = "predicted: the variant with the lowest predicted time (alpha-beta-gamma model)"


@dataclass(frozen=True)
class Prediction:
    """One variant's predicted time at one size (None: not modelled)."""

    label: str
    variant: Variant
    seconds: float | None


def context(collective: str, layout: JobShape, device: str = "cpu") -> CallContext:
    """The call context eligibility is judged in (float32, sum)."""
    op = reduce_op("sum") if SPECS[collective].reduces else None
    return CallContext(
        layout.nprocs, element_type("float32"), op, device, layout.nodes, layout.ranks_per_node
    )


def eligible_variants(collective: str, layout: JobShape) -> list[Variant]:
    """Every grid variant of the collective that can run in the layout (MPI backend)."""
    ctx = context(collective, layout)
    found = []
    for algorithm in algorithms(collective):
        for variant in algorithm.grid_variants():
            if variant.ineligible_reason(ctx) is None:
                found.append(variant)
    return found


def predict_all(
    platform: Platform, collective: str, layout: JobShape, sizes: list[int]
) -> dict[int, list[Prediction]]:
    """size -> predictions of every eligible variant."""
    variants = eligible_variants(collective, layout)
    return {
        n: [
            Prediction(v.label, v, predict_seconds(platform, collective, v, layout, n))
            for v in variants
        ]
        for n in sizes
    }


def _point(size: int, preds: list[Prediction]) -> tuple[Choice, dict]:
    modelled = [p for p in preds if p.seconds is not None]
    best = min(modelled, key=lambda p: p.seconds)
    native = next((p for p in modelled if p.label == "native"), None)
    native_us = None if native is None else round(native.seconds * 1e6, 3)
    point = {
        "size_bytes": size,
        "chosen": best.label,
        "backend": best.variant.algorithm.backend,
        "median_us": round(best.seconds * 1e6, 3),
        "native_median_us": native_us,
        "speedup": None if native is None else round(native.seconds / best.seconds, 4),
        "fastest": best.label,
        "fastest_median_us": round(best.seconds * 1e6, 3),
        "candidates": len(modelled),
        "reason": "lowest predicted time",
        "predicted": True,
    }
    return Choice.of(best.variant), point


def predicted_entry(
    collective: str, layout: JobShape, by_size: dict[int, list[Prediction]]
) -> Entry | None:
    """The table entry of one collective (None if nothing is modelled)."""
    per_size, points = [], []
    for size in sorted(by_size):
        if any(p.seconds is not None for p in by_size[size]):
            choice, point = _point(size, by_size[size])
            per_size.append((size, choice))
            points.append(point)
    if not per_size:
        return None
    key = EntryKey(collective, "cpu", layout.nodes, layout.ranks_per_node, layout.nprocs)
    return Entry(key, merge_ranges(per_size), (per_size[0][0], per_size[-1][0]), tuple(points))


def predicted_table(
    platform: Platform, layout: JobShape, collectives: list[str], sizes: list[int], name: str
) -> tuple[TuningTable, dict[str, dict[int, list[Prediction]]]]:
    """The predicted table and every prediction behind it."""
    predictions = {c: predict_all(platform, c, layout, sizes) for c in collectives}
    entries = [predicted_entry(c, layout, predictions[c]) for c in collectives]
    provenance = {
        "predicted": True,
        "platform": platform.name,
        "platform_file": platform.path,
        "platform_assumed": platform.assumed,
        "platform_source": platform.source,
        "layout": {"nprocs": layout.nprocs, "nodes": layout.nodes, "ppn": layout.ppn},
        "run": {"mpi_library": "predicted", "hosts": [], "date": None},
        "tuned_by": {
            "package_version": __version__,
            COMMAND_KEY: command_line(),
            "date": utc_now(),
        },
    }
    header = table_header(name, RULE, {"dtype": "float32", "op": "sum"}, provenance)
    return TuningTable(tuple(e for e in entries if e is not None), header), predictions


def _us(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    us = seconds * 1e6
    return f"{us:.1f}" if us < 1e5 else f"{us:.3g}"


def prediction_text(collective: str, by_size: dict[int, list[Prediction]]) -> str:
    """size x variant table of predicted microseconds, the fastest marked with '*'."""
    labels = [p.label for p in next(iter(by_size.values()))]
    widths = [max(9, len(label)) + 1 for label in labels]
    head = " ".join(f"{label:>{w}}" for label, w in zip(labels, widths, strict=True))
    lines = [f"## {collective}: predicted latency (us), * = fastest", f"{'size':>8} {head}"]
    for size, preds in sorted(by_size.items()):
        modelled = [p.seconds for p in preds if p.seconds is not None]
        best = min(modelled) if modelled else None
        cells = [
            f"{_us(p.seconds) + ('*' if p.seconds == best else ''):>{w}}"
            for p, w in zip(preds, widths, strict=True)
        ]
        lines.append(f"{format_size(size):>8} " + " ".join(cells))
    return "\n".join(lines)
