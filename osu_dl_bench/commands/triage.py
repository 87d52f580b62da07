"""``osu-dl-bench triage RUN_OR_FILE``: which ranks and nodes are late or slow, with the
evidence (diagnosis.ranks), from a sweep's run directory or a ``bench --per-rank -o``
file; which links and nodes are slow, from a ``bench linkmap -o`` record
(diagnosis.linkmap). No MPI is loaded."""

from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from osu_dl_bench.diagnosis import linkmap
from osu_dl_bench.diagnosis.ranks import (
    NotPerRankTiming,
    evidence_from_records,
    evidence_from_run,
    report_lines,
    triage,
)
from osu_dl_bench.errors import UsageError
from osu_dl_bench.jsonfile import UnreadableJson, parse_json, read_regular_file
from osu_dl_bench.measurement.records import OUTPUT_SUFFIXES
from osu_dl_bench.measurement.store import RunStore, collective_rows

BENCH_FILE = "bench --per-rank -o or bench linkmap -o"


@dataclass(frozen=True)
class TriageConfig:
    """What triage reads and how much of the call's own time a lag must be to be named."""

    source: Path
    min_share: float


def _run_evidence(source: Path) -> pd.DataFrame:
    """The per-rank evidence a sweep's run directory holds."""
    store = RunStore(source)
    if not store.results_path.exists():
        raise UsageError(f"{source}: no results.csv (not a sweep's run directory)")
    frame = collective_rows(store.load(), source)  # a train-bench run: one message
    evidence = evidence_from_run(frame, store.read_metadata())
    if evidence.empty:
        raise UsageError(
            f"{source}: no per-rank timing in its rows (written by an older version, "
            "which kept none: sweep again to triage it)"
        )
    return evidence


def _file_bytes(source: Path) -> bytes:
    """A bench file's bytes: a regular file of bounded size only (a FIFO would block the
    read, /dev/zero would never end it)."""
    if source.suffix.lower() not in OUTPUT_SUFFIXES:
        raise UsageError(
            f"{source}: expected a run directory or a file of {BENCH_FILE} ending in "
            f"{', '.join(OUTPUT_SUFFIXES)}"
        )
    if source.name == "results.csv":
        raise UsageError(f"{source}: give the run directory ({source.parent}), not its results.csv")
    try:
        return read_regular_file(source)
    except UnreadableJson as exc:
        raise UsageError(f"{source}: {exc}") from None


def _records(source: Path, data: bytes) -> pd.DataFrame | dict:
    """The bench records a file's bytes hold, or the linkmap record (a JSON object)."""
    suffix = source.suffix.lower()
    if suffix == ".json":
        try:
            document = parse_json(data)
        except UnreadableJson as exc:
            raise UsageError(f"{source}: {exc}") from None
        if linkmap.is_linkmap_record(document):
            return document
        if not (isinstance(document, list) and all(isinstance(r, dict) for r in document)):
            raise UsageError(f"{source}: not a list of records, as {BENCH_FILE} writes")
        return pd.DataFrame(document)
    try:
        if suffix == ".csv":
            return pd.read_csv(io.BytesIO(data))
        return pd.read_parquet(io.BytesIO(data))
    except ImportError:
        raise UsageError(
            f"{source}: reading .parquet needs pyarrow (pip install pyarrow)"
        ) from None
    except (ValueError, OSError, UnicodeDecodeError, pd.errors.ParserError):
        kind = suffix.lstrip(".").upper()
        raise UsageError(f"{source}: cannot be read as {kind}: not a file bench -o wrote") from None


def _file_evidence(source: Path, records: pd.DataFrame) -> pd.DataFrame:
    """The per-rank evidence of bench records."""
    if "per_rank" not in records:
        raise UsageError(f"{source}: no per-rank timing (measure with bench --per-rank -o)")
    for column in ("collective", "algorithm", "size_bytes"):
        if column not in records:
            raise UsageError(f"{source}: records without {column}: not a file bench -o wrote")
    try:
        evidence = evidence_from_records(records)
    except NotPerRankTiming as exc:
        raise UsageError(f"{source}: {exc}: not what bench --per-rank writes") from None
    if evidence.empty:
        raise UsageError(f"{source}: no per-rank timing in it (measure with bench --per-rank)")
    return evidence


def _linkmap_lines(source: Path, record: dict) -> list[str]:
    """A linkmap record judged and reported again, as bench linkmap printed it."""
    try:
        samples = linkmap.samples_from_record(record)
    except ValueError as exc:
        raise UsageError(
            f"{source}: not a linkmap record as bench linkmap -o writes it ({exc})"
        ) from None
    return linkmap.report_lines(linkmap.judge_links(samples))


def run_triage(cfg: TriageConfig) -> int:
    """Print the triage of one run, bench file or linkmap record; 0, whatever it names."""
    source = cfg.source
    if not source.exists():
        raise UsageError(f"{source}: no such file or directory")
    if source.is_dir():
        evidence = _run_evidence(source)
    else:
        records = _records(source, _file_bytes(source))
        if isinstance(records, dict):
            lines = _linkmap_lines(source, records)
            print(f"# osu-dl-bench triage {source}: a linkmap record", *lines, sep="\n")
            return 0
        evidence = _file_evidence(source, records)
    print(f"# osu-dl-bench triage {source}")
    print("\n".join(report_lines(evidence, triage(evidence, cfg.min_share), cfg.min_share)))
    return 0
