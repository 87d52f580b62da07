"""The tuning table: a versioned JSON document mapping message-size ranges to a choice of
(backend, algorithm, parameters) per (collective, buffer kind, nodes, ppn, comm size).

Schema version 1 (full description with an example in docs/tuning-table.md)::

    {"schema_version": 1,
     "format": "osu-dl-bench tuning table",
     "name": "...", "created": "<ISO 8601 UTC>",
     "noise_rule": "<the rule the tuner applied, in words>",
     "measured_with": {"dtype": "float32", "op": "sum",
                       "mpi_cuda": "staged" | "direct" (tables with entries on cuda)},
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

A point is the evidence at one measured size: ``chosen`` (the range's choice) and its
``median_us``/``q1_us``/``q3_us`` over all its rounds, ``native_median_us``, ``ratio`` (the
chosen's time over clean native's, paired: selection.paired) with its 95% interval
``ratio_low``..``ratio_high``, ``speedup`` = 1 / ratio, ``tie_set`` (the candidates the
measurements cannot tell from the best, chosen first), ``launches`` and ``rounds`` behind
the ratio, ``fastest`` (the lowest ratio), ``candidates`` and ``reason``. Tables written
before launches lack ratio..rounds: every point field but size_bytes, chosen and
median_us is optional.

Ranges are half-open ``[min_bytes, max_bytes)``; the first starts at 0, each starts where
the previous ends, and the last has ``max_bytes: null`` (open-ended). Loading checks the
fields against the JSON Schema ``schemas/tuning-table.json``, then all of this and that every
algorithm and parameter is registered; any problem raises TableError naming the file and
the field.
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
from collectives.shape import JobShape
from osu_dl_bench.errors import UsageError
from osu_dl_bench.jsonfile import UnreadableJson, describe, load_json
from osu_dl_bench.paths import write_text_atomic
from osu_dl_bench.runtime.metadata import utc_now
from osu_dl_bench.selection.schema_check import first_problem, load_schema

SCHEMA_VERSION = 1
FORMAT = "osu-dl-bench tuning table"
# How MPI met device memory while the table's cuda entries were measured: reading it
# itself (CUDA-aware) or through host copies; tables written before it say neither.
MPI_CUDA_PATHS = ("direct", "staged")


def measured_mpi_cuda(header: Mapping[str, Any]) -> str | None:
    """'direct' or 'staged': how MPI met device memory when the table's cuda entries were
    measured; None where the table does not say (an older table, or none on cuda)."""
    path = (header.get("measured_with") or {}).get("mpi_cuda")
    return path if path in MPI_CUDA_PATHS else None


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

    @property
    def shape(self) -> JobShape:
        """The job's shape the entry was measured in."""
        return JobShape(self.nprocs, self.nodes, self.ppn)

    def __str__(self) -> str:
        return f"{self.collective} on {self.device}, {self.shape}"


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
        write_text_atomic(target, text + "\n")
        return target


def hosts_text(hosts: Any) -> str:
    """Provenance hosts (a list or a string) as one comma-separated string."""
    if isinstance(hosts, (list, tuple)):
        return ",".join(map(str, hosts)) or "?"
    return str(hosts or "?")


# --- loading and validation -------------------------------------------------------------

# The fields' kinds and bounds are the JSON Schema schemas/tuning-table.json; what needs the
# registry (collectives, algorithms, parameters) or several fields (ranges touching end to
# start, [min, max], distinct keys) is checked here.
SCHEMA = ("osu_dl_bench.selection", "tuning-table.json")


def _parse_choice(path: str, obj: dict, collective: str, where: str) -> Choice:
    name, backend = obj["algorithm"], obj["backend"]
    try:
        algo = lookup(collective, name)
    except UsageError as exc:
        raise TableError(path, f"{where}.algorithm", str(exc)) from None
    try:
        variant = algo.variant(**obj.get("params", {}))
    except UsageError as exc:
        raise TableError(path, f"{where}.params", str(exc)) from None
    if algo.backend != backend:
        raise TableError(
            path,
            f"{where}.backend",
            f"algorithm {name!r} of {collective} runs on backend {algo.backend!r}, not {backend!r}",
        )
    return Choice.of(variant)


def _range_bounds(path: str, item: dict, here: str, start: int, last: bool) -> tuple:
    """(min_bytes, max_bytes) of one range, which must start at ``start``."""
    lo, hi = item["min_bytes"], item.get("max_bytes")
    if lo < start:
        raise TableError(
            path,
            f"{here}.min_bytes",
            f"overlapping ranges: starts at {lo}, before the previous range ends ({start})",
        )
    if lo > start:
        what = "the first range must start at 0" if start == 0 else "gap after the previous range"
        raise TableError(path, f"{here}.min_bytes", f"{what}: expected {start}, got {lo}")
    if last and hi is not None:
        raise TableError(
            path, f"{here}.max_bytes", f"the last range must be open (null), got {describe(hi)}"
        )
    if not last and (hi is None or hi <= lo):
        got = "nothing" if hi is None else str(hi)
        raise TableError(
            path,
            f"{here}.max_bytes",
            f"expected more than min_bytes {lo} (only the last range is open), got {got}",
        )
    return lo, hi


def _parse_ranges(path: str, items: list, collective: str, where: str) -> tuple:
    """Ranges must start at 0, touch end to start, grow, and end open."""
    ranges, start = [], 0
    for i, item in enumerate(items):
        here = f"{where}.ranges[{i}]"
        lo, hi = _range_bounds(path, item, here, start, i == len(items) - 1)
        choice = _parse_choice(path, item["choice"], collective, f"{here}.choice")
        ranges.append(SizeRange(lo, hi, choice))
        start = hi
    return tuple(ranges)


def _measured_bytes(path: str, obj: dict, where: str) -> tuple[int, int]:
    low, high = obj.get("measured_bytes", [0, 0])
    if low > high:
        raise TableError(
            path,
            f"{where}.measured_bytes",
            f"expected [min, max] in bytes, 0 <= min <= max, got [{low}, {high}]",
        )
    return low, high


def _parse_entry(path: str, obj: dict, where: str) -> Entry:
    collective, device = obj["collective"], obj["device"]
    if collective not in SPECS:
        raise TableError(
            path,
            f"{where}.collective",
            f"unknown collective {collective!r}: expected one of {', '.join(SPECS)}",
        )
    if device not in DEVICES:
        raise TableError(
            path, f"{where}.device", f"expected one of {', '.join(DEVICES)}, got {device!r}"
        )
    key = EntryKey(collective, device, obj["nodes"], obj["ppn"], obj["nprocs"])
    layout = key.shape.problem()
    if layout:
        raise TableError(path, where, layout)
    ranges = _parse_ranges(path, obj["ranges"], collective, where)
    measured = _measured_bytes(path, obj, where)
    return Entry(key, ranges, measured, tuple(obj.get("points", [])))


def table_from_dict(data: Any, path: str | os.PathLike = "<table>") -> TuningTable:
    """Validate parsed JSON and build the table (TableError on the first problem)."""
    problem = first_problem(load_schema(*SCHEMA), data)
    if problem is not None:
        raise TableError(path, *problem)
    entries, seen = [], {}
    for i, item in enumerate(data["entries"]):
        entry = _parse_entry(str(path), item, f"entries[{i}]")
        if entry.key in seen:
            raise TableError(
                path, f"entries[{i}]", f"same key as entries[{seen[entry.key]}]: {entry.key}"
            )
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
