"""What every export needs: the entries an MPI library can use (host buffers, one job shape
per comm size), comm-size bounds that reproduce the selector's nearest-entry rule, and the
table's ranges translated into a library's own rules with equal neighbours merged."""

from __future__ import annotations

import shlex
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from collectives.units import format_size
from osu_dl_bench.errors import UsageError
from osu_dl_bench.runtime.text import is_control, printable
from osu_dl_bench.selection.table import Choice, Entry, TuningTable, hosts_text

# MPI libraries tune host-memory collectives; GPU entries stay with the runtime selector.
EXPORTED_DEVICE = "cpu"


@dataclass(frozen=True)
class CommBounds:
    """Comm sizes ``lo..hi`` (hi None: and above) served by the entry measured at ``nprocs``."""

    lo: int
    hi: int | None
    nprocs: int


@dataclass(frozen=True)
class Rule:
    """A library rule for sizes ``[min_bytes, max_bytes)``: ``target`` is the library's own
    value (an id, a name, a subtree key), ``note`` what it stands for."""

    min_bytes: int
    max_bytes: int | None
    target: Hashable
    note: str


def in_scope(nodes: int, scope: str | None) -> bool:
    """Whether an entry measured on ``nodes`` nodes belongs to ``scope``: "one" (one node),
    "many" (several), or None (any)."""
    return scope is None or (nodes == 1) == (scope == "one")


def entries_per_comm_size(
    table: TuningTable, collective: str, warn: list[str], scope: str | None = None
) -> list[Entry]:
    """Host-buffer entries of a collective in ``scope`` (in_scope), one per comm size
    (sorted). Where the format keys no rule on nodes or ppn (Open MPI's), the one with
    most nodes of several shapes of one size wins."""
    chosen: dict[int, Entry] = {}
    for entry in table.entries:
        key = entry.key
        if key.collective != collective or key.device != EXPORTED_DEVICE:
            continue
        if not in_scope(key.nodes, scope):
            continue
        other = chosen.get(key.nprocs)
        if other is None or key.nodes > other.key.nodes:
            if other is not None:
                warn.append(f"{other.key}: not exported, {key} is used for p={key.nprocs}")
            chosen[key.nprocs] = entry
        else:
            warn.append(f"{key}: not exported, {other.key} is used for p={key.nprocs}")
    return [chosen[p] for p in sorted(chosen)]


def comm_bounds(sizes: list[int]) -> list[CommBounds]:
    """Each measured comm size serves the sizes nearest to it (ties to the smaller one), the
    first from 1 and the last without end, as the selector's nearest-entry rule does."""
    bounds = []
    for i, p in enumerate(sizes):
        lo = 1 if i == 0 else (sizes[i - 1] + p) // 2 + 1
        hi = None if i == len(sizes) - 1 else (p + sizes[i + 1]) // 2
        bounds.append(CommBounds(lo, hi, p))
    return bounds


def library_rules(
    entry: Entry,
    translate: Callable[[Choice], tuple[Hashable, str] | None],
    fallback: tuple[Hashable, str],
    warn: list[str],
    library: str,
) -> list[Rule]:
    """The entry's ranges as library rules; choices ``translate`` cannot map fall back to
    ``fallback`` (the library's own decision) with a warning; equal neighbours merge."""
    rules: list[Rule] = []
    for size_range in entry.ranges:
        mapped = translate(size_range.choice)
        if mapped is None:
            mapped = fallback
            if not size_range.choice.is_native:
                warn.append(
                    f"{entry.key}, {range_text(size_range.min_bytes, size_range.max_bytes)}: "
                    f"{size_range.choice.label} ({size_range.choice.backend}) has no {library} "
                    f"equivalent: {library} decides there"
                )
        target, note = mapped
        if rules and rules[-1].target == target:
            rules[-1] = Rule(rules[-1].min_bytes, size_range.max_bytes, target, rules[-1].note)
        else:
            rules.append(Rule(size_range.min_bytes, size_range.max_bytes, target, note))
    return rules


def shell_word(path: Path | str) -> str:
    """A file name as one shell word for an export's '# use:' line (shlex.quote): a name
    with spaces, quotes or $(...) pasted into a shell stays a name, never a command."""
    return shlex.quote(str(path))


def check_export_name(base: Path) -> None:
    """UsageError for an export name with a control character: a newline in it would start
    a line of its own in the file's comments (a rule of Open MPI's rules file)."""
    if any(is_control(ch) for ch in base.name):
        raise UsageError(f"{printable(base.name)!r}: an export name holds no control characters")


def beside(base: Path, suffix: str) -> Path:
    """The export file BASE``suffix`` (BASE: the table's path without .json)."""
    return base.with_name(base.name + suffix)


def range_text(lo: int, hi: int | None) -> str:
    """'[64K, 1M)' or '[1M, inf)'."""
    return f"[{format_size(lo)}, {'inf' if hi is None else format_size(hi)})"


def _one_line(value: Any) -> str:
    """``value`` as text fit for one comment line: controls escaped, whitespace collapsed
    (a table's provenance is data from a run directory, not trusted text)."""
    return " ".join(printable(str(value).replace("\0", "")).split())


def provenance_lines(table: TuningTable) -> list[str]:
    """Where the table came from, one fact a line, for comment headers."""
    prov = table.header.get("provenance") or {}
    run = prov.get("run") or {}
    lines = [
        f"table: {table.header.get('name', '?')} (schema {table.header.get('schema_version')})"
        f", created {table.header.get('created', '?')}",
        f"run: {prov.get('run_dir', '?')}",
        f"measured with: {run.get('mpi_library') or '?'} on {hosts_text(run.get('hosts'))}"
        f", {run.get('date') or '?'}",
    ]
    return [_one_line(line) for line in lines]


# --- the library's own algorithms, as the tuner decided them (selection.tune) -------------

# The table header's field holding them (selection.tune.LIBRARY_TUNING).
LIBRARY_TUNING = "library_tuning"
LIBRARY_DEFAULT = "auto"


@dataclass(frozen=True)
class SweptEntry:
    """The library's own decisions at one comm size: ranges of library algorithms
    ('auto': its default) with what was measured in each."""

    nprocs: int
    nodes: int
    ranges: tuple[dict[str, Any], ...]


def swept_entries(
    table: TuningTable, library: str, collective: str, warn: list[str], scope: str | None = None
) -> list[SweptEntry] | None:
    """The entries of a collective in ``scope`` (in_scope) where the sweep measured
    ``library``'s own algorithms (host buffers, one per comm size: the most nodes); None
    where it measured none, so the export keeps translating the table's own choices."""
    tuning = table.header.get(LIBRARY_TUNING) or {}
    if tuning.get("library") != library:
        return None
    chosen: dict[int, SweptEntry] = {}
    for item in tuning.get("entries") or []:
        if item["collective"] != collective or item["device"] != EXPORTED_DEVICE:
            continue
        if not in_scope(int(item["nodes"]), scope):
            continue
        entry = SweptEntry(int(item["nprocs"]), int(item["nodes"]), tuple(item["ranges"]))
        other = chosen.get(entry.nprocs)
        if other is None or entry.nodes > other.nodes:
            chosen[entry.nprocs] = entry
        else:
            warn.append(f"{collective} p={entry.nprocs}: one library entry per comm size used")
    return [chosen[p] for p in sorted(chosen)] or None


def evidence_text(size_range: dict[str, Any]) -> str:
    """What was measured in a library range, in words: its sizes and launches, the chosen
    algorithm's ratio to the default with its interval, the fastest other where the
    default was kept."""
    points = size_range.get("points") or []
    if not points:
        return f"{size_range['alg']}: no measured size"
    sizes = f"{format_size(points[0]['size_bytes'])}-{format_size(points[-1]['size_bytes'])}"
    launches = min(int(p.get("launches") or 0) for p in points)
    head = f"{size_range['alg']}: {len(points)} sizes measured ({sizes}), {launches} launches"
    if size_range["alg"] != LIBRARY_DEFAULT:
        low = min(p["ratio_low"] for p in points)
        high = max(p["ratio_high"] for p in points)
        ratios = ", ".join(f"{p['ratio']:.2f}" for p in points)
        return f"{head}; time/default {ratios} (95% CI within {low:.2f}-{high:.2f})"
    others = [p for p in points if p.get("fastest") not in (None, LIBRARY_DEFAULT)]
    if not others:
        return f"{head}; the default was the fastest"
    best = min(others, key=lambda p: p["fastest_ratio"])
    return (
        f"{head}; default kept (best other: {best['fastest']} {best['fastest_ratio']:.2f}x "
        f"at {format_size(best['size_bytes'])}, 95% CI {best['fastest_ratio_low']:.2f}-"
        f"{best['fastest_ratio_high']:.2f}, not below 1 with confidence)"
    )


def swept_rules(
    entry: SweptEntry,
    translate: Callable[[str], Hashable | None],
    fallback: Hashable,
    warn: list[str],
    library: str,
    collective: str,
) -> list[Rule]:
    """A library entry's ranges as rules, each noting what was measured; an algorithm
    ``translate`` cannot write falls back to the library's own decision with a warning."""
    rules: list[Rule] = []
    for size_range in entry.ranges:
        alg = size_range["alg"]
        target = None if alg == LIBRARY_DEFAULT else translate(alg)
        note = evidence_text(size_range)
        if target is None:
            target = fallback
            if alg != LIBRARY_DEFAULT:
                where = range_text(size_range["min_bytes"], size_range["max_bytes"])
                warn.append(
                    f"{collective} p={entry.nprocs}, {where}: {alg} won but cannot be written "
                    f"into {library}'s file: {library} decides there"
                )
                note = f"{note}; not writable here, {library} decides"
        if rules and rules[-1].target == target:
            last = rules[-1]
            rules[-1] = Rule(
                last.min_bytes, size_range["max_bytes"], target, f"{last.note} | {note}"
            )
        else:
            rules.append(Rule(size_range["min_bytes"], size_range["max_bytes"], target, note))
    return rules
