"""Exports of a tuning table to libraries' own selection files, so the findings apply with
no Python at run time: ``openmpi`` (classic rules + 6.0 JSON), ``mpich`` and ``nccl``
(the CSV of NCCL's example tuner plugin)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from osu_dl_bench.errors import UsageError
from osu_dl_bench.selection.exports import mpich, nccl, openmpi
from osu_dl_bench.selection.exports.common import beside, check_export_name
from osu_dl_bench.selection.table import TuningTable

Exporter = Callable[[TuningTable, Path], tuple[list[Path], list[str]]]
EXPORTERS: dict[str, Exporter] = {
    "openmpi": openmpi.export,
    "mpich": mpich.export,
    "nccl": nccl.export,
}
# What each exporter may write beside BASE: every name, written or not this time.
SUFFIXES: dict[str, tuple[str, ...]] = {
    "openmpi": openmpi.SUFFIXES,
    "mpich": mpich.SUFFIXES,
    "nccl": nccl.SUFFIXES,
}


def parse_exports(text: str | None) -> list[str]:
    """'openmpi,mpich' -> ['openmpi', 'mpich'] (UsageError naming the choices)."""
    names = [t.strip() for t in (text or "").split(",") if t.strip()]
    unknown = [n for n in names if n not in EXPORTERS]
    if unknown:
        raise UsageError(
            f"--export {text}: unknown library {', '.join(unknown)}: "
            f"expected one or more of {', '.join(EXPORTERS)}"
        )
    return names


def export_paths(base: Path, names: list[str]) -> list[Path]:
    """Every file the named exports may write beside BASE, to check before any is written."""
    check_export_name(base)
    return [beside(base, suffix) for name in names for suffix in SUFFIXES[name]]


def write_exports(
    table: TuningTable, base: Path, names: list[str]
) -> list[tuple[str, list[Path], list[str]]]:
    """Write each named export next to BASE; (library, paths, warnings) per export."""
    return [(name, *EXPORTERS[name](table, base)) for name in names]
