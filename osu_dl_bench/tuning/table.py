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

from osu_dl_bench.collectives import SPECS, Variant, lookup
from osu_dl_bench.collectives.buffers import DEVICES
from osu_dl_bench.collectives.registry import format_params
from osu_dl_bench.errors import UsageError
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
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps(self.as_dict(), indent=1) + "\n")
        return target


def hosts_text(hosts: Any) -> str:
    """Provenance hosts (a list or a string) as one comma-separated string."""
    if isinstance(hosts, (list, tuple)):
        return ",".join(map(str, hosts)) or "?"
    return str(hosts or "?")


# --- loading and validation -------------------------------------------------------------


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
        value = obj[key]
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            names = kind.__name__ if isinstance(kind, type) else "/".join(k.__name__ for k in kind)
            raise self.fail(here, f"expected {names}, got {json.dumps(value)}")
        return value

    def count(self, obj: Mapping[str, Any], key: str, where: str, minimum: int) -> int:
        """A whole number >= minimum."""
        value = self.get(obj, key, where, int)
        if value < minimum:
            raise self.fail(f"{where}.{key}", f"expected a whole number >= {minimum}, got {value}")
        return value


def _parse_choice(chk: _Checker, obj: Any, collective: str, where: str) -> Choice:
    if not isinstance(obj, dict):
        raise chk.fail(where, f"expected an object, got {json.dumps(obj)}")
    name = chk.get(obj, "algorithm", where, str)
    backend = chk.get(obj, "backend", where, str)
    params = chk.get(obj, "params", where, dict) if "params" in obj else {}
    for key, value in params.items():
        if not isinstance(value, (int, str)) or isinstance(value, bool):
            raise chk.fail(f"{where}.params.{key}", f"expected a number or name, got {value!r}")
    try:
        variant = lookup(collective, name).variant(**params)
    except UsageError as exc:
        raise chk.fail(f"{where}.algorithm", str(exc)) from None
    if variant.algorithm.backend != backend:
        raise chk.fail(
            f"{where}.backend",
            f"algorithm {name!r} of {collective} runs on backend "
            f"{variant.algorithm.backend!r}, not {backend!r}",
        )
    return Choice.of(variant)


def _parse_ranges(chk: _Checker, items: list, collective: str, where: str) -> tuple:
    """Ranges must start at 0, touch end to start, grow, and end open."""
    if not items:
        raise chk.fail(f"{where}.ranges", "expected at least one range")
    ranges, expected_start = [], 0
    for i, item in enumerate(items):
        here = f"{where}.ranges[{i}]"
        if not isinstance(item, dict):
            raise chk.fail(here, f"expected an object, got {json.dumps(item)}")
        lo = chk.count(item, "min_bytes", here, 0)
        hi = item.get("max_bytes")
        last = i == len(items) - 1
        if lo < expected_start:
            raise chk.fail(
                f"{here}.min_bytes",
                f"overlapping ranges: starts at {lo}, before the previous range ends "
                f"({expected_start})",
            )
        if lo > expected_start:
            what = "the first range must start at 0" if i == 0 else "gap after the previous range"
            raise chk.fail(f"{here}.min_bytes", f"{what}: expected {expected_start}, got {lo}")
        if last and hi is not None:
            raise chk.fail(f"{here}.max_bytes", f"the last range must be open (null), got {hi}")
        if not last:
            hi = chk.count(item, "max_bytes", here, 0)
            if hi <= lo:
                raise chk.fail(f"{here}.max_bytes", f"expected more than min_bytes {lo}, got {hi}")
        choice = _parse_choice(chk, item.get("choice"), collective, f"{here}.choice")
        ranges.append(SizeRange(lo, hi, choice))
        expected_start = hi
    return tuple(ranges)


def _parse_entry(chk: _Checker, obj: Any, where: str) -> Entry:
    if not isinstance(obj, dict):
        raise chk.fail(where, f"expected an object, got {json.dumps(obj)}")
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
        chk.count(obj, "nodes", where, 1),
        chk.count(obj, "ppn", where, 1),
        chk.count(obj, "nprocs", where, 1),
    )
    ranges = _parse_ranges(chk, chk.get(obj, "ranges", where, list), collective, where)
    measured = obj.get("measured_bytes", [0, 0])
    if not (
        isinstance(measured, list)
        and len(measured) == 2
        and all(isinstance(m, int) and not isinstance(m, bool) for m in measured)
    ):
        raise chk.fail(f"{where}.measured_bytes", f"expected [min, max] in bytes, got {measured!r}")
    return Entry(key, ranges, (measured[0], measured[1]), _parse_points(chk, obj, where))


def _parse_points(chk: _Checker, obj: dict, where: str) -> tuple:
    """The evidence: optional, but each point needs what summaries and explain() read."""
    points = obj.get("points", [])
    if not isinstance(points, list):
        raise chk.fail(f"{where}.points", f"expected a list, got {json.dumps(points)}")
    for i, item in enumerate(points):
        here = f"{where}.points[{i}]"
        if not isinstance(item, dict):
            raise chk.fail(here, f"expected an object, got {json.dumps(item)}")
        chk.count(item, "size_bytes", here, 0)
        chk.get(item, "chosen", here, str)
        chk.get(item, "median_us", here, (int, float))
    return tuple(points)


def table_from_dict(data: Any, path: str | os.PathLike = "<table>") -> TuningTable:
    """Validate parsed JSON and build the table (TableError on the first problem)."""
    chk = _Checker(path)
    if not isinstance(data, dict):
        raise chk.fail("(top level)", "expected a JSON object")
    version = data.get("schema_version")
    if version != SCHEMA_VERSION:
        shown = "missing" if version is None else json.dumps(version)
        raise chk.fail("schema_version", f"expected {SCHEMA_VERSION}, got {shown}")
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
        text = Path(path).read_text()
    except OSError as exc:
        raise TableError(path, "(file)", f"cannot read: {exc.strerror or exc}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise TableError(
            path, "(file)", f"not JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
        ) from None
    return table_from_dict(data, path)
