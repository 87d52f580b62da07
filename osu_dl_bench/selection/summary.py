"""The readable summary of a tuning table: per entry, its ranges and, for every measured
size, the chosen algorithm, its latency, native's latency and the speedup."""

from __future__ import annotations

from typing import Any

from collectives.units import format_size
from osu_dl_bench.selection.table import Entry, TuningTable, hosts_text


def _us(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _speedup(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def _note(point: dict[str, Any]) -> str:
    """Why the choice differs from the fastest median, when it does."""
    if point["fastest"] != point["chosen"]:
        return f"{point['fastest']} {point['fastest_median_us']:.2f} us: within noise"
    return ""


def _columns(width: int) -> str:
    return (
        f"{'size':>8}  {'chosen':<{width}}{'latency(us)':>12}{'native(us)':>12}{'speedup':>9}  note"
    )


def _point_line(point: dict[str, Any], width: int) -> str:
    return (
        f"{format_size(point['size_bytes']):>8}  {point['chosen']:<{width}}"
        f"{_us(point['median_us']):>12}{_us(point['native_median_us']):>12}"
        f"{_speedup(point['speedup']):>9}  {_note(point)}"
    ).rstrip()


def _range_text(lo: int, hi: int | None) -> str:
    return f"[{format_size(lo)}, {'inf' if hi is None else format_size(hi)})"


def entry_summary(entry: Entry) -> list[str]:
    """The lines for one entry: heading, ranges, then one line per measured size."""
    lines = [f"## {entry.key}"]
    lines += [
        f"   {_range_text(r.min_bytes, r.max_bytes):<18} {r.choice.label} ({r.choice.backend})"
        for r in entry.ranges
    ]
    if entry.points:
        width = max(len("chosen"), *(len(p["chosen"]) for p in entry.points)) + 2
        lines += ["", _columns(width), *(_point_line(dict(p), width) for p in entry.points)]
        gains = [p["speedup"] for p in entry.points if p.get("speedup")]
        if gains:
            lines.append(f"   best speedup {max(gains):.2f}x, worst {min(gains):.2f}x over native")
    return lines


def table_summary(table: TuningTable) -> str:
    """The whole summary text, provenance first."""
    head = table.header
    run = (head.get("provenance") or {}).get("run") or {}
    lines = [
        f"# Tuning table {head.get('name', '')} (schema {head.get('schema_version')})",
        f"# run: {(head.get('provenance') or {}).get('run_dir', '?')}",
        f"# MPI: {run.get('mpi_library') or '?'}; hosts: {hosts_text(run.get('hosts'))}; "
        f"date: {run.get('date') or '?'}",
        f"# measured with {_measured(head.get('measured_with') or {})}",
        f"# noise rule: {head.get('noise_rule', '?')}",
    ]
    for entry in table.entries:
        lines += ["", *entry_summary(entry)]
    return "\n".join(lines) + "\n"


def _measured(measured: dict[str, Any]) -> str:
    op = measured.get("op")
    return f"{measured.get('dtype', '?')}" + (f", op {op}" if op else "")
