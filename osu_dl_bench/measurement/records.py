"""Benchmark records and their machine-readable files (CSV, JSON, Parquet via pandas)."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING

from osu_dl_bench.errors import UsageError
from osu_dl_bench.paths import check_new_file, write_atomic

if TYPE_CHECKING:  # pandas at first use: every rank of bench imports this module
    import pandas as pd

OUTPUT_SUFFIXES = (".csv", ".json", ".parquet")


@dataclass(frozen=True)
class BenchRecord:
    """One measured (collective, algorithm, size) point."""

    collective: str
    algorithm: str
    backend: str
    dtype: str
    op: str | None
    size_bytes: int
    count: int
    nprocs: int
    nodes: int
    ppn: int
    device: str
    in_place: bool
    root: str | None
    # OSU's statistics: min/avg/max across ranks of each rank's mean iteration time.
    avg_us: float
    min_us: float
    max_us: float
    # Percentiles of the per-iteration maximum across ranks (the collective's latency).
    p50_us: float
    p99_us: float
    iterations: int
    algbw_gbs: float
    busbw_gbs: float
    validation: str | None  # "pass", "fail" or None when not checked
    wrong_elements: int | None = None  # summed over ranks, as nccl-tests' #wrong
    # Point-to-point bandwidth tests only (OSU's MB/s, 1 MB = 1e6 B).
    bandwidth_mbs: float | None = None
    # The per-iteration maxima across ranks, in microseconds.
    iter_max_us: tuple[float, ...] = ()
    # With --per-rank (measurement.ranks): each rank's summary (and, raw, its stamps), and
    # the bound on the clock alignment's error.
    per_rank: tuple[dict, ...] = ()
    clock_residual_us: float | None = None


RECORD_FIELDS = tuple(f.name for f in fields(BenchRecord))


def check_output_path(path: str | None) -> None:
    """Reject an output file we could not write, before anything is measured."""
    if path is None:
        return
    suffix = Path(path).suffix.lower()
    if suffix not in OUTPUT_SUFFIXES:
        raise UsageError(f"-o {path}: expected a file ending in {', '.join(OUTPUT_SUFFIXES)}")
    if suffix == ".parquet":
        try:
            import pyarrow  # noqa: F401
        except ImportError as exc:
            raise UsageError(f"-o {path}: .parquet needs pyarrow (pip install pyarrow)") from exc
    check_new_file("-o", path, "bench")  # as train-bench refuses a directory holding results


def records_frame(records: list[BenchRecord], metadata: dict[str, str]) -> pd.DataFrame:
    """One row per record, with the run metadata repeated on every row."""
    import pandas as pd

    rows = [{**asdict(r), **metadata} for r in records]
    return pd.DataFrame(rows, columns=[*RECORD_FIELDS, *metadata])


def write_records(path: str, records: list[BenchRecord], metadata: dict[str, str]) -> None:
    """Write records atomically, so a crash or a full disk never leaves half a file."""
    frame = records_frame(records, metadata)
    frame["iter_max_us"] = frame["iter_max_us"].map(list)
    frame["per_rank"] = frame["per_rank"].map(list)
    suffix = Path(path).suffix.lower()
    write_atomic(Path(path), lambda tmp: _write_frame(frame, str(tmp), suffix))


def _write_frame(frame: pd.DataFrame, path: str, suffix: str) -> None:
    if suffix == ".csv":
        frame["iter_max_us"] = frame["iter_max_us"].map(lambda xs: " ".join(f"{x:.3f}" for x in xs))
        frame["per_rank"] = frame["per_rank"].map(json.dumps)
        frame.to_csv(path, index=False)
    elif suffix == ".json":
        frame.to_json(path, orient="records", indent=1)
    else:
        frame["per_rank"] = frame["per_rank"].map(json.dumps)  # nested lists of ranks' stamps
        frame.to_parquet(path, index=False)


def read_records(path: str) -> pd.DataFrame:
    """Read a file written by ``write_records``."""
    import pandas as pd

    suffix = Path(path).suffix.lower()
    if suffix == ".csv":
        return pd.read_csv(path)
    if suffix == ".json":
        return pd.read_json(path, orient="records")
    return pd.read_parquet(path)
