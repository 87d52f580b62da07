"""Tuning: tables built from sweeps, the runtime selector that applies them per call, and
exports to MPI libraries' own selection files. Uses the collectives; never the reverse.

Names are re-exported lazily: the modules behind them load the registry and so mpi4py.MPI,
and importing ``osu_dl_bench.commands.tune_cli`` must not (MPI starts after option parsing).
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

_HOMES = {
    "FORCE_ENV": "names",
    "Decision": "selector",
    "Query": "selector",
    "Selector": "selector",
    "parse_force": "selector",
    "SCHEMA_VERSION": "table",
    "Choice": "table",
    "Entry": "table",
    "EntryKey": "table",
    "SizeRange": "table",
    "TableError": "table",
    "TuningTable": "table",
    "load_table": "table",
    "NOISE_RULE": "tune",
    "build_table": "tune",
}
__all__ = sorted(_HOMES)


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(f"{__name__}.{_HOMES[name]}"), name)
