"""The tuning table: a versioned JSON document mapping message-size ranges to a choice of
(backend, algorithm, parameters) per (collective, buffer kind, nodes, ppn, comm size).

Schema version 1 (full description with an example in docs/tuning-table.md)::

    {"schema_version": 1,
     "format": "osu-dl-bench tuning table",
     "name": "...", "created": "<ISO 8601 UTC>",
     "noise_rule": "<the rule the tuner applied, in words>",
     "measured_with": {"dtype": "float32", "op": "sum"},
     "provenance": {"run_dir": ..., "run": {mpi_library, mpi_version, hosts, date,
                    package_version, command}, "run_metadata": {<metadata.json>},
                    "tuned_by": {package_version, command, host, platform, date}},
     "entries": [{"collective": "allreduce", "device": "cpu",
                  "nodes": 1, "ppn": 4, "nprocs": 4,
                  "measured_bytes": [8, 16777216],
                  "ranges": [{"min_bytes": 0, "max_bytes": 65536,
                              "choice": {"backend": "mpi", "algorithm": "native",
                                         "params": {}}},
                             {"min_bytes": 65536, "max_bytes": null, "choice": ...}],
                  "points": [{"size_bytes": 8, "chosen": "native", ...}, ...]}]}

Ranges are half-open ``[min_bytes, max_bytes)``; the first starts at 0, each starts where
the previous ends, and the last has ``max_bytes: null`` (open-ended). Loading checks all of
this and that every algorithm and parameter is registered; any problem raises TableError
naming the file and the field.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from collectives import SPECS, Variant, lookup
from collectives.buffers import DEVICES
from collectives.registry import format_params
from osu_dl_bench.errors import UsageError
from osu_dl_bench.jsonfile import (
    NULL,
    UnreadableJson,
    describe,
    is_kind,
    kind_text,
    load_json,
)
from osu_dl_bench.runtime import utc_now

SCHEMA_VERSION = 1
FORMAT = "osu-dl-bench tuning table"


def table_header(
    name: str, rule: str, measured_with: dict[str, Any], provenance: dict[str, Any]
) -> dict[str, Any]:
    """The header every table carries, measured or predicted: schema, name, date, the rule
    that chose the algorithms, what was measured and where it all came from."""
    return {
        "schema_version": SCHEMA_VERSION,
        "format": FORMAT,
        "name": name,
        "created": utc_now(),
        "noise_rule": rule,
        "measured_with": measured_with,
        "provenance": provenance,
    }


class TableError(UsageError):
    """A tuning table that cannot be used: names the file and the offending field."""

    def __init__(self, path: str | os.PathLike, where: str, problem: str) -> None:
        self.path, self.where = str(path), where
        super().__init__(f"tuning table {path}: {where}: {problem}")


@dataclass(frozen=True)
class Choice:
    """What to run for a range of sizes: a backend's algorithm with its parameters."""

    backend: str
    algorithm: str
    # (name, value) pairs in the variant's order: hashable, so choices can key dicts.
    params: tuple[tuple[str, int | str], ...] = ()

    @property
    def label(self) -> str:
        """As results spell it: 'chain:seg=256K'."""
        if not self.params:
            return self.algorithm
        return f"{self.algorithm}:{format_params(dict(self.params))}"

    @property
    def is_native(self) -> bool:
        """True for the MPI library's own selection."""
        return self.algorithm == "native"

    def variant(self, collective: str) -> Variant:
        """The registered variant this choice names (UsageError if there is none)."""
        return lookup(collective, self.algorithm).variant(**dict(self.params))

    @classmethod
    def of(cls, variant: Variant) -> Choice:
        """The choice that runs ``variant``."""
        algo = variant.algorithm
        return cls(algo.backend, algo.name, tuple(variant.params.items()))

    def as_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {"backend": self.backend, "algorithm": self.algorithm, "params": dict(self.params)}


NATIVE = Choice("mpi", "native")


@dataclass(frozen=True)
class SizeRange:
    """``[min_bytes, max_bytes)`` -> choice; ``max_bytes`` None means open-ended."""

    min_bytes: int
    max_bytes: int | None
    choice: Choice

    def as_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {
            "min_bytes": self.min_bytes,
            "max_bytes": self.max_bytes,
            "choice": self.choice.as_dict(),
        }


@dataclass(frozen=True)
class EntryKey:
    """Where an entry applies: collective, buffer kind and the job's shape."""

    collective: str
    device: str
    nodes: int
    ppn: int
    nprocs: int

    def __str__(self) -> str:
        return (
            f"{self.collective} on {self.device}, p={self.nprocs} "
            f"({self.nodes} node{'s' if self.nodes != 1 else ''} x {self.ppn} ppn)"
        )


@dataclass(frozen=True)
class Entry:
    """The decisions for one key: contiguous size ranges plus the per-size evidence."""

    key: EntryKey
    ranges: tuple[SizeRange, ...]
    measured_bytes: tuple[int, int]
    # Per measured size: what was chosen and why (for summaries, plots and explain()).
    points: tuple[Mapping[str, Any], ...] = ()

    def as_dict(self) -> dict[str, Any]:
        """JSON form."""
        k = self.key
        return {
            "collective": k.collective,
            "device": k.device,
            "nodes": k.nodes,
            "ppn": k.ppn,
            "nprocs": k.nprocs,
            "measured_bytes": list(self.measured_bytes),
            "ranges": [r.as_dict() for r in self.ranges],
            "points": [dict(p) for p in self.points],
        }


@dataclass(frozen=True)
class TuningTable:
    """A whole table: entries plus the header (name, noise rule, provenance)."""

    entries: tuple[Entry, ...]
    header: Mapping[str, Any] = field(default_factory=dict)
    path: str | None = None

    def as_dict(self) -> dict[str, Any]:
        """JSON form, schema_version first."""
        head = {k: v for k, v in self.header.items() if k not in ("schema_version", "entries")}
        return {
            "schema_version": SCHEMA_VERSION,
            "format": FORMAT,
            **head,
            "entries": [e.as_dict() for e in self.entries],
        }

    def write(self, path: str | os.PathLike) -> Path:
        """Write the table as indented JSON."""
        target = Path(path)
        try:
            # JSON has no Infinity or NaN, and load_table refuses them: never write one.
            text = json.dumps(self.as_dict(), indent=1, allow_nan=False)
        except ValueError:
            raise TableError(
                target, "(table)", "holds a number that is not a finite number"
            ) from None
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text + "\n")
        return target


def hosts_text(hosts: Any) -> str:
    """Provenance hosts (a list or a string) as one comma-separated string."""
    if isinstance(hosts, (list, tuple)):
        return ",".join(map(str, hosts)) or "?"
    return str(hosts or "?")


# --- loading and validation -------------------------------------------------------------

# Byte counts: what MPI's counts hold. Process counts: what MPI's ranks (C ints) hold.
MAX_BYTES = (1 << 63) - 1
MAX_PROCESSES = (1 << 31) - 1
# Optional fields, checked when present: name -> the JSON kinds allowed.
_HEADER_FIELDS = {
    "format": str,
    "name": str,
    "created": str,
    "noise_rule": str,
    "measured_with": dict,
    "provenance": dict,
}
_MEASURED_WITH_FIELDS = {"dtype": str, "op": (str, NULL)}
_PROVENANCE_FIELDS = {"run_dir": (str, NULL), "run": dict, "run_metadata": dict, "tuned_by": dict}
_POINT_FIELDS = {
    "backend": str,
    "fastest": str,
    "reason": str,
    "predicted": bool,
    "candidates": int,
}
# Optional timings and ratios of a point: a number >= 0, or null.
_POINT_NUMBERS = ("q1_us", "q3_us", "native_median_us", "speedup", "fastest_median_us")


class _Checker:
    """Reads fields out of parsed JSON, raising TableError with the field's path."""

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = path

    def fail(self, where: str, problem: str) -> TableError:
        """The error to raise for ``where``."""
        return TableError(self.path, where, problem)

    def get(self, obj: Mapping[str, Any], key: str, where: str, kind: type | tuple) -> Any:
        """obj[key], which must exist and be of ``kind``."""
        here = f"{where}.{key}" if where else key
        if key not in obj:
            raise self.fail(here, "missing")
        return self.kind(obj[key], here, kind)

    def kind(self, value: Any, here: str, kind: type | tuple) -> Any:
        """``value``, which must be of ``kind``."""
        if not is_kind(value, kind):
            raise self.fail(here, f"expected {kind_text(kind)}, got {describe(value)}")
        return value

    def optional(self, obj: Mapping[str, Any], fields: Mapping[str, Any], where: str) -> None:
        """Each of ``fields`` present in obj must be of its kind."""
        for key, kind in fields.items():
            if key in obj:
                self.get(obj, key, where, kind)

    def count(
        self, obj: Mapping[str, Any], key: str, where: str, minimum: int, maximum: int = MAX_BYTES
    ) -> int:
        """A whole number from minimum to maximum."""
        value = self.get(obj, key, where, int)
        if not minimum <= value <= maximum:
            raise self.fail(
                f"{where}.{key}" if where else key,
                f"expected a whole number from {minimum} to {maximum}, got {describe(value)}",
            )
        return value

    def number(self, obj: Mapping[str, Any], key: str, where: str, nullable: bool) -> None:
        """obj[key], if present, is a number >= 0 (the loader admits finite ones only), or
        null where ``nullable``."""
        value = obj.get(key)
        if value is None and nullable:
            return
        if not is_kind(value, (int, float)) or not 0 <= value <= 1e300:
            expected = "a number >= 0 or null" if nullable else "a number >= 0"
            raise self.fail(f"{where}.{key}", f"expected {expected}, got {describe(value)}")


def _parse_choice(chk: _Checker, obj: Any, collective: str, where: str) -> Choice:
    obj = chk.kind(obj, where, dict)
    name = chk.get(obj, "algorithm", where, str)
    backend = chk.get(obj, "backend", where, str)
    params = chk.get(obj, "params", where, dict) if "params" in obj else {}
    try:
        algo = lookup(collective, name)
    except UsageError as exc:
        raise chk.fail(f"{where}.algorithm", str(exc)) from None
    try:
        variant = algo.variant(**params)
    except UsageError as exc:
        raise chk.fail(f"{where}.params", str(exc)) from None
    if algo.backend != backend:
        raise chk.fail(
            f"{where}.backend",
            f"algorithm {name!r} of {collective} runs on backend {algo.backend!r}, not {backend!r}",
        )
    return Choice.of(variant)


def _range_bounds(chk: _Checker, item: Any, here: str, start: int, last: bool) -> tuple:
    """(min_bytes, max_bytes) of one range, which must start at ``start``."""
    item = chk.kind(item, here, dict)
    lo = chk.count(item, "min_bytes", here, 0)
    if lo < start:
        raise chk.fail(
            f"{here}.min_bytes",
            f"overlapping ranges: starts at {lo}, before the previous range ends ({start})",
        )
    if lo > start:
        what = "the first range must start at 0" if start == 0 else "gap after the previous range"
        raise chk.fail(f"{here}.min_bytes", f"{what}: expected {start}, got {lo}")
    hi = item.get("max_bytes")
    if last and hi is not None:
        raise chk.fail(
            f"{here}.max_bytes", f"the last range must be open (null), got {describe(hi)}"
        )
    if not last:
        hi = chk.count(item, "max_bytes", here, 0)
        if hi <= lo:
            raise chk.fail(f"{here}.max_bytes", f"expected more than min_bytes {lo}, got {hi}")
    return lo, hi


def _parse_ranges(chk: _Checker, items: list, collective: str, where: str) -> tuple:
    """Ranges must start at 0, touch end to start, grow, and end open."""
    if not items:
        raise chk.fail(f"{where}.ranges", "expected at least one range")
    ranges, start = [], 0
    for i, item in enumerate(items):
        here = f"{where}.ranges[{i}]"
        lo, hi = _range_bounds(chk, item, here, start, i == len(items) - 1)
        choice = _parse_choice(chk, item.get("choice"), collective, f"{here}.choice")
        ranges.append(SizeRange(lo, hi, choice))
        start = hi
    return tuple(ranges)


def _measured_bytes(chk: _Checker, obj: dict, where: str) -> tuple[int, int]:
    measured = obj.get("measured_bytes", [0, 0])
    if not (
        isinstance(measured, list)
        and len(measured) == 2
        and all(is_kind(m, int) and 0 <= m <= MAX_BYTES for m in measured)
        and measured[0] <= measured[1]
    ):
        shown = describe(measured)
        if isinstance(measured, list) and len(measured) <= 4:
            shown = f"[{', '.join(map(describe, measured))}]"
        raise chk.fail(
            f"{where}.measured_bytes", f"expected [min, max] in bytes, 0 <= min <= max, got {shown}"
        )
    return measured[0], measured[1]


def _parse_entry(chk: _Checker, obj: Any, where: str) -> Entry:
    obj = chk.kind(obj, where, dict)
    collective = chk.get(obj, "collective", where, str)
    if collective not in SPECS:
        raise chk.fail(
            f"{where}.collective",
            f"unknown collective {collective!r}: expected one of {', '.join(SPECS)}",
        )
    device = chk.get(obj, "device", where, str)
    if device not in DEVICES:
        raise chk.fail(f"{where}.device", f"expected one of {', '.join(DEVICES)}, got {device!r}")
    key = EntryKey(
        collective,
        device,
        chk.count(obj, "nodes", where, 1, MAX_PROCESSES),
        chk.count(obj, "ppn", where, 1, MAX_PROCESSES),
        chk.count(obj, "nprocs", where, 1, MAX_PROCESSES),
    )
    ranges = _parse_ranges(chk, chk.get(obj, "ranges", where, list), collective, where)
    measured = _measured_bytes(chk, obj, where)
    return Entry(key, ranges, measured, _parse_points(chk, obj, where))


def _parse_point(chk: _Checker, item: Any, here: str) -> None:
    """What summaries and explain() read of one point: each field of its kind."""
    item = chk.kind(item, here, dict)
    chk.count(item, "size_bytes", here, 0)
    chk.get(item, "chosen", here, str)
    chk.get(item, "median_us", here, (int, float))
    chk.number(item, "median_us", here, nullable=False)
    chk.optional(item, _POINT_FIELDS, here)
    for key in _POINT_NUMBERS:
        chk.number(item, key, here, nullable=True)
    # explain() shows the speedup wherever it shows native's median.
    if item.get("native_median_us") is not None and item.get("speedup") is None:
        raise chk.fail(f"{here}.speedup", "expected a number where native_median_us is given")


def _parse_points(chk: _Checker, obj: dict, where: str) -> tuple:
    """The evidence: optional, but each point needs what summaries and explain() read."""
    points = chk.kind(obj.get("points", []), f"{where}.points", list)
    for i, item in enumerate(points):
        _parse_point(chk, item, f"{where}.points[{i}]")
    return tuple(points)


def _check_header(chk: _Checker, data: dict) -> None:
    """The optional header fields that summaries and exports read, each of its kind."""
    chk.optional(data, _HEADER_FIELDS, "")
    chk.optional(data.get("measured_with") or {}, _MEASURED_WITH_FIELDS, "measured_with")
    chk.optional(data.get("provenance") or {}, _PROVENANCE_FIELDS, "provenance")


def table_from_dict(data: Any, path: str | os.PathLike = "<table>") -> TuningTable:
    """Validate parsed JSON and build the table (TableError on the first problem)."""
    chk = _Checker(path)
    if not isinstance(data, dict):
        raise chk.fail("(top level)", "expected a JSON object")
    version = data.get("schema_version")
    if not is_kind(version, int) or version != SCHEMA_VERSION:
        shown = "missing" if "schema_version" not in data else describe(version)
        raise chk.fail("schema_version", f"expected {SCHEMA_VERSION}, got {shown}")
    _check_header(chk, data)
    items = chk.get(data, "entries", "", list)
    entries, seen = [], {}
    for i, item in enumerate(items):
        entry = _parse_entry(chk, item, f"entries[{i}]")
        if entry.key in seen:
            raise chk.fail(f"entries[{i}]", f"same key as entries[{seen[entry.key]}]: {entry.key}")
        seen[entry.key] = i
        entries.append(entry)
    header = {k: v for k, v in data.items() if k != "entries"}
    return TuningTable(tuple(entries), header, str(path))


def load_table(path: str | os.PathLike) -> TuningTable:
    """Read and validate a tuning table file; TableError names the file and the field."""
    try:
        data = load_json(path)
    except UnreadableJson as exc:
        raise TableError(path, "(file)", str(exc)) from None
    return table_from_dict(data, path)
