"""``osu-dl-bench triage RUN_OR_FILE``: which ranks and nodes are late or slow, with the
evidence (diagnosis.ranks), from a sweep's run directory or a ``bench --per-rank -o``
file. No MPI is loaded."""

from __future__ import annotations

import argparse
import json
import math
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from osu_dl_bench.diagnosis.ranks import (
    MIN_SHARE,
    evidence_from_records,
    evidence_from_run,
    report_lines,
    triage,
)
from osu_dl_bench.errors import UsageError
from osu_dl_bench.measurement.records import OUTPUT_SUFFIXES, read_records
from osu_dl_bench.measurement.store import RunStore


@dataclass(frozen=True)
class TriageConfig:
    """What triage reads and how much of the call's own time a lag must be to be named."""

    source: Path
    min_share: float


def add_triage_arguments(parser: argparse.ArgumentParser) -> None:
    """triage's options."""
    parser.add_argument(
        "source",
        metavar="RUN_OR_FILE",
        help="a sweep's run directory, or a file written by bench --per-rank -o",
    )
    parser.add_argument(
        "--min-share",
        type=float,
        default=MIN_SHARE,
        help=f"name a rank only where its lag exceeds its peers' by this share of the "
        "call's own time (the call less the wait for the latest rank) "
        f"(default {MIN_SHARE:g})",
    )


def config_from_args(args: argparse.Namespace) -> TriageConfig:
    """The checked options."""
    if not (math.isfinite(args.min_share) and 0 <= args.min_share < 100):
        raise UsageError(f"--min-share {args.min_share}: expected 0 or more, below 100")
    return TriageConfig(Path(args.source), args.min_share)


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
