"""From a sweep's run directory to a tuning table.

Noise rule (the one the issue asks to pick and document): at each message size, a
candidate replaces native only when its upper quartile lies below native's median,
i.e. ``candidate.q3 < native.median``: in three rounds out of four the candidate beat
native's typical round (the quartiles are over interleaved rounds, so the machine's speed
swings widen both). The stricter ``q3 < native.q1`` kept native at sizes where, on
oversubscribed runs, native's own spread is wide although it was 1.5-2x slower in a
separate validation run. Among the candidates that pass, the lowest median
wins; if none passes, native stays. Where native was not measured, the lowest median
wins outright. Points that failed validation are never candidates.

Each measured size starts the range of its choice; adjacent sizes with the same choice
are merged, the first range starts at 0 and the last is open-ended, so a size between
two measured sizes takes the choice of the smaller one (as Open MPI's rules files do).
"""

from __future__ import annotations

import math
import os
import platform
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from collectives.registry import parse_variant, twin_representatives
from osu_dl_bench import __version__
from osu_dl_bench.errors import UsageError
from osu_dl_bench.measurement.store import RunStore
from osu_dl_bench.runtime import utc_now
from osu_dl_bench.selection.table import (
    Choice,
    Entry,
    EntryKey,
    SizeRange,
    TuningTable,
    table_header,
)

NOISE_RULE = (
    "a candidate replaces native at a size only if its q3 is below native's median "
    "(over interleaved rounds it beat native's typical round at least 3 times in 4); "
    "among those the "
    "lowest median wins; without a native measurement the lowest median wins"
)
KEY_COLUMNS = ["collective", "device", "nodes", "ppn", "nprocs"]


@dataclass(frozen=True)
class Measured:
    """One candidate's statistics at one size (microseconds)."""

    choice: Choice
    median_us: float
    q1_us: float
    q3_us: float

    @property
    def label(self) -> str:
        """The variant label."""
        return self.choice.label


def beats_native(candidate: Measured, native: Measured) -> bool:
    """The noise rule: the candidate's q3 below native's median."""
    return candidate.q3_us < native.median_us


def decide(candidates: list[Measured]) -> tuple[Measured, str]:
    """The choice at one size and the reason, by the noise rule."""
    native = next((c for c in candidates if c.choice.is_native), None)
    if native is None:
        best = min(candidates, key=lambda c: c.median_us)
        return best, "no native measurement: lowest median"
    winners = [c for c in candidates if not c.choice.is_native and beats_native(c, native)]
    if not winners:
        return native, "no candidate beats native beyond the spread"
    best = min(winners, key=lambda c: c.median_us)
    return best, f"q3 {best.q3_us:.2f} < native median {native.median_us:.2f}"


def _point(size: int, candidates: list[Measured]) -> tuple[Choice, dict[str, Any]]:
    chosen, reason = decide(candidates)
    native = next((c for c in candidates if c.choice.is_native), None)
    fastest = min(candidates, key=lambda c: c.median_us)
    point = {
        "size_bytes": size,
        "chosen": chosen.label,
        "backend": chosen.choice.backend,
        "median_us": round(chosen.median_us, 3),
        "q1_us": round(chosen.q1_us, 3),
        "q3_us": round(chosen.q3_us, 3),
        "native_median_us": None if native is None else round(native.median_us, 3),
        "speedup": None if native is None else round(native.median_us / chosen.median_us, 4),
        "fastest": fastest.label,
        "fastest_median_us": round(fastest.median_us, 3),
        "candidates": len(candidates),
        "reason": reason,
    }
    return chosen.choice, point


def merge_ranges(choices: list[tuple[int, Choice]]) -> tuple[SizeRange, ...]:
    """Per-size choices (sorted by size) -> contiguous ranges from 0, equal neighbours merged."""
    starts: list[tuple[int, Choice]] = []
    for size, choice in choices:
        if not starts or starts[-1][1] != choice:
            starts.append((0 if not starts else size, choice))
    ends = [start for start, _ in starts[1:]] + [None]
    return tuple(SizeRange(lo, hi, c) for (lo, c), hi in zip(starts, ends, strict=True))


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


def _entry(key: EntryKey, rows: pd.DataFrame, warn: list[str]) -> Entry | None:
    choices = _choices_by_label(key.collective, rows["algorithm"], warn)
    per_size, points = [], []
    for size, at_size in rows.groupby("size_bytes", sort=True):
        at_size = without_twins(key.collective, at_size.drop_duplicates("algorithm", keep="last"))
        candidates = [
            Measured(choices[r.algorithm], float(r.median_us), float(r.q1_us), float(r.q3_us))
            for r in at_size.itertuples()
            if r.algorithm in choices
        ]
        if candidates:
            choice, point = _point(int(size), candidates)
            per_size.append((int(size), choice))
            points.append(point)
    if not per_size:
        return None
    measured = (per_size[0][0], per_size[-1][0])
    return Entry(key, merge_ranges(per_size), measured, tuple(points))


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


def build_entries(frame: pd.DataFrame, warn: list[str]) -> tuple[Entry, ...]:
    """One entry per (collective, device, nodes, ppn, nprocs) group of the results."""
    entries = []
    for values, rows in frame.groupby(KEY_COLUMNS, sort=True):
        collective, device, nodes, ppn, nprocs = values
        key = EntryKey(str(collective), str(device), int(nodes), int(ppn), int(nprocs))
        entry = _entry(key, rows, warn)
        if entry is not None:
            entries.append(entry)
    return tuple(entries)


def _first(metadata: dict[str, Any], *names: str) -> Any:
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
            "mpi_library": _first(metadata, "mpi_library"),
            "mpi_version": _first(metadata, "mpi_version"),
            "hosts": _first(metadata, "hosts", "hostnames"),
            "date": _first(metadata, "date", "timestamp", "started"),
            "package_version": _first(metadata, "package_version"),
            "command": _first(metadata, "command"),
        },
        "run_metadata": metadata,
        "tuned_by": {
            "package_version": __version__,
            "command": " ".join(sys.argv),
            "host": platform.node(),
            "platform": platform.platform(),
            "date": utc_now(),
        },
    }


def build_table(
    run_dir: str | os.PathLike,
    name: str = "tuning",
    dtype: str | None = None,
    op: str | None = None,
) -> tuple[TuningTable, list[str]]:
    """The tuning table of a run directory, and warnings about what was left out."""
    store = RunStore(run_dir)
    if not store.results_path.exists():
        raise UsageError(f"{run_dir}: no {store.results_path.name}: not a sweep run directory")
    # Rows a full disk cut short, or of the wrong shape, are left out with a warning.
    frame, warn = store.read()
    rows, dtype, op = select_rows(frame, dtype, op)
    entries = build_entries(rows, warn)
    if not entries:
        raise UsageError(f"{run_dir}: no result names a registered algorithm")
    header = table_header(
        name,
        NOISE_RULE,
        {"dtype": dtype, "op": None if _is_missing(op) else op},
        provenance(Path(run_dir), store.read_metadata()),
    )
    return TuningTable(entries, header), warn


def _is_missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))
