"""``osu-dl-bench triage RUN_OR_FILE``: which ranks and nodes are late or slow, with the
evidence (diagnosis.ranks), from a sweep's run directory or a ``bench --per-rank -o``
file. No MPI is loaded."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from osu_dl_bench.commands.triage_cli import TriageConfig
from osu_dl_bench.diagnosis.ranks import (
    evidence_from_records,
    evidence_from_run,
    report_lines,
    triage,
)
from osu_dl_bench.errors import UsageError
from osu_dl_bench.measurement.records import OUTPUT_SUFFIXES, read_records
from osu_dl_bench.measurement.store import RunStore


def _evidence(source: Path) -> pd.DataFrame:
    """The per-rank evidence a run directory or a bench file holds."""
    if source.is_dir():
        store = RunStore(source)
        if not store.results_path.exists():
            raise UsageError(f"{source}: no results.csv (not a sweep's run directory)")
        return evidence_from_run(store.load(), store.read_metadata())
    if source.suffix.lower() not in OUTPUT_SUFFIXES:
        raise UsageError(
            f"{source}: expected a run directory or a bench file ending in "
            f"{', '.join(OUTPUT_SUFFIXES)}"
        )
    if source.name == "results.csv":
        raise UsageError(f"{source}: give the run directory ({source.parent}), not its results.csv")
    try:
        records = read_records(str(source))
    except ImportError:
        raise UsageError(
            f"{source}: reading .parquet needs pyarrow (pip install pyarrow)"
        ) from None
    except (OSError, ValueError, json.JSONDecodeError) as exc:
        raise UsageError(f"{source}: cannot read it as bench records ({exc})") from None
    if "per_rank" not in records:
        raise UsageError(f"{source}: no per-rank timing (measure with bench --per-rank -o)")
    try:
        return evidence_from_records(records)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise UsageError(
            f"{source}: a record's per-rank timing is not what bench --per-rank writes "
            f"({type(exc).__name__}: {str(exc)[:80]})"
        ) from None


def run_triage(cfg: TriageConfig) -> int:
    """Print the triage of one run or bench file; 0, whatever it names."""
    if not cfg.source.exists():
        raise UsageError(f"{cfg.source}: no such file or directory")
    evidence = _evidence(cfg.source)
    if evidence.empty:
        raise UsageError(
            f"{cfg.source}: no per-rank timing in it (sweeps keep it from this version on; "
            "bench needs --per-rank)"
        )
    print(f"# osu-dl-bench triage {cfg.source}")
    print("\n".join(report_lines(evidence, triage(evidence, cfg.min_share), cfg.min_share)))
    return 0
