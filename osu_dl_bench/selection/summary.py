"""The readable summary of a tuning table: per entry, its ranges and, for every measured
size, the chosen algorithm, its latency, native's latency and the speedup with its 95%
interval; then how many sizes are ties (more than one eligible candidate within the
decision rule's indifference zone of the best)."""

from __future__ import annotations

from typing import Any

from collectives.units import format_size
from osu_dl_bench.selection.null_control import entry_lines
from osu_dl_bench.selection.rule import rule_text
from osu_dl_bench.selection.table import Entry, TuningTable, hosts_text


def _us(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _speedup(point: dict[str, Any]) -> str:
    """'1.41x' and, where the point has its interval, ' (1.28-1.52)': the speedup is
    1 / ratio, so its interval is 1 / ratio_high .. 1 / ratio_low."""
    value = point.get("speedup")
    if value is None:
        return "-"
    low, high = point.get("ratio_low"), point.get("ratio_high")
    if not low or not high:
        return f"{value:.2f}x"
    return f"{value:.2f}x ({1 / high:.2f}-{1 / low:.2f})"


def _ties(point: dict[str, Any]) -> list[str]:
    """The other members of the point's tie set."""
    return [label for label in point.get("tie_set") or [] if label != point["chosen"]]


# What a point's estimate rests on, where it is not the curve over sizes.
_EVIDENCE_NOTES = {
    "misfit": "this size alone (off the curve)",
    "heterogeneous": "launches disagree beyond the pool",
    "point": "this size alone",
    "pooled": "pooled across process counts",
}


def _note(point: dict[str, Any]) -> str:
    """What else the measurements cannot tell from the choice, or why the choice differs
    from the fastest; and what the estimate rests on where it is not the curve."""
    notes = []
    if _ties(point):
        notes.append("tie: " + ", ".join(_ties(point)))
    elif point.get("fastest") not in (None, point["chosen"]):
        notes.append(f"{point['fastest']} {point['fastest_median_us']:.2f} us: within noise")
    if point.get("evidence") in _EVIDENCE_NOTES and point.get("chosen") != "native":
        notes.append(_EVIDENCE_NOTES[point["evidence"]])
    return "; ".join(notes)


def _columns(width: int, speed: int) -> str:
    return (
        f"{'size':>8}  {'chosen':<{width}}{'latency(us)':>12}{'native(us)':>12}"
        f"{'speedup (95% CI)':>{speed}}  note"
    )


def _point_line(point: dict[str, Any], width: int, speed: int) -> str:
    return (
        f"{format_size(point['size_bytes']):>8}  {point['chosen']:<{width}}"
        f"{_us(point['median_us']):>12}{_us(point.get('native_median_us')):>12}"
        f"{_speedup(point):>{speed}}  {_note(point)}"
    ).rstrip()


def _range_text(lo: int, hi: int | None) -> str:
    return f"[{format_size(lo)}, {'inf' if hi is None else format_size(hi)})"


def _points_lines(points: list[dict[str, Any]]) -> list[str]:
    width = max(len("chosen"), *(len(p["chosen"]) for p in points)) + 2
    speed = max(len("speedup (95% CI)"), *(len(_speedup(p)) for p in points)) + 2
    lines = ["", _columns(width, speed), *(_point_line(p, width, speed) for p in points)]
    gains = [p["speedup"] for p in points if p.get("speedup")]
    if gains:
        lines.append(f"   best speedup {max(gains):.2f}x, worst {min(gains):.2f}x over native")
    if any("tie_set" in p for p in points):
        ties = sum(1 for p in points if _ties(p))
        lines.append(
            f"   {ties} of {len(points)} sizes are ties (more than one eligible candidate "
            "within the indifference zone of the best's expected time; the rule chose)"
        )
    return lines


def entry_summary(entry: Entry) -> list[str]:
    """The lines for one entry: heading, ranges, then one line per measured size."""
    lines = [f"## {entry.key}"]
    lines += [
        f"   {_range_text(r.min_bytes, r.max_bytes):<18} {r.choice.label} ({r.choice.backend})"
        for r in entry.ranges
    ]
    if entry.points:
        lines += _points_lines([dict(p) for p in entry.points])
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
    evidence = head.get("evidence") or {}
    if evidence:
        lines.append(f"# {rule_text(evidence)}; the run's launch pools:")
        lines += [f"#   {line}" for line in evidence.get("summary") or []]
    for entry in table.entries:
        lines += ["", *entry_summary(entry)]
        # How often the rule would have taken native's own copy for a win, in this entry.
        lines += [f"   {line}" for line in entry_lines(head, entry.key)]
    return "\n".join(lines) + "\n"


def _measured(measured: dict[str, Any]) -> str:
    op = measured.get("op")
    return f"{measured.get('dtype', '?')}" + (f", op {op}" if op else "")
