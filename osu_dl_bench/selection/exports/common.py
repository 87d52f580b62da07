"""What every export needs: the entries an MPI library can use (host buffers, one job shape
per comm size), comm-size bounds that reproduce the selector's nearest-entry rule, and the
table's ranges translated into a library's own rules with equal neighbours merged."""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass

from collectives.units import format_size
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


def entries_per_comm_size(table: TuningTable, collective: str, warn: list[str]) -> list[Entry]:
    """Host-buffer entries of a collective, one per comm size (sorted). Libraries do not key
    rules on nodes and ppn: with several shapes of one size, the one with most nodes wins."""
    chosen: dict[int, Entry] = {}
    for entry in table.entries:
        key = entry.key
        if key.collective != collective or key.device != EXPORTED_DEVICE:
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


def range_text(lo: int, hi: int | None) -> str:
    """'[64K, 1M)' or '[1M, inf)'."""
    return f"[{format_size(lo)}, {'inf' if hi is None else format_size(hi)})"


def provenance_lines(table: TuningTable) -> list[str]:
    """Where the table came from, one fact a line, for comment headers."""
    prov = table.header.get("provenance") or {}
    run = prov.get("run") or {}
    return [
        f"table: {table.header.get('name', '?')} (schema {table.header.get('schema_version')})"
        f", created {table.header.get('created', '?')}",
        f"run: {prov.get('run_dir', '?')}",
        f"measured with: {run.get('mpi_library') or '?'} on {hosts_text(run.get('hosts'))}"
        f", {run.get('date') or '?'}",
    ]
