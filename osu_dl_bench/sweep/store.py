"""A sweep's run directory: ``metadata.json`` plus ``results.csv`` appended point by point.

Layout (schema version 1)::

    RUN_DIR/metadata.json   what ran where: MPI library, hosts, nodes, ppn, buffer kind,
                            package version, command line, date (one entry per launched job
                            under "jobs", keyed by process count)
    RUN_DIR/results.csv     one row per measured (nprocs, collective, algorithm, size),
                            columns SWEEP_FIELDS, appended and flushed as soon as measured
    RUN_DIR/results.parquet written at the end when pyarrow is present

A killed run loses at most the point in flight; ``finished_points`` lets --resume skip
what is already there.
"""

from __future__ import annotations

import csv
import json
import os
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

import pandas as pd

from osu_dl_bench.errors import UsageError

SCHEMA_VERSION = 1
RESULTS = "results.csv"
METADATA = "metadata.json"


@dataclass(frozen=True)
class SweepPoint:
    """One candidate's timing at one (nprocs, collective, size), from interleaved rounds.

    Each round runs every candidate ``iterations`` times; a round's time is the mean over
    those iterations of the per-iteration maximum across ranks. ``median_us`` and the
    quartiles are over rounds; ``spread_us`` = q3 - q1 is the noise the tuner respects.
    """

    collective: str
    backend: str
    algorithm: str  # variant label, e.g. 'chain:seg=256K'
    dtype: str
    op: str | None
    device: str
    size_bytes: int
    count: int
    nprocs: int
    nodes: int
    ppn: int
    median_us: float
    q1_us: float
    q3_us: float
    spread_us: float
    min_us: float
    max_us: float
    rounds: int
    iterations: int
    algbw_gbs: float
    busbw_gbs: float
    validation: str | None


SWEEP_FIELDS = tuple(f.name for f in fields(SweepPoint))
POINT_KEY = (
    "nprocs",
    "nodes",
    "ppn",
    "collective",
    "backend",
    "algorithm",
    "dtype",
    "op",
    "device",
    "size_bytes",
)


class RunStore:
    """Reads and appends a run directory."""

    def __init__(self, run_dir: str | os.PathLike) -> None:
        self.path = Path(run_dir)

    @property
    def results_path(self) -> Path:
        """The CSV that points are appended to."""
        return self.path / RESULTS

    def create(self) -> None:
        """Make the directory (fine if it exists: --resume continues in it)."""
        self.path.mkdir(parents=True, exist_ok=True)

    def append(self, points: list[SweepPoint]) -> None:
        """Append points and flush them to disk at once."""
        new = not self.results_path.exists()
        with self.results_path.open("a", newline="") as handle:
            writer = csv.DictWriter(handle, fieldnames=SWEEP_FIELDS)
            if new:
                writer.writeheader()
            for point in points:
                writer.writerow(asdict(point))
            handle.flush()
            os.fsync(handle.fileno())

    def load(self) -> pd.DataFrame:
        """All points so far (an empty frame with the columns if none)."""
        if not self.results_path.exists():
            return pd.DataFrame(columns=SWEEP_FIELDS)
        frame = pd.read_csv(self.results_path)
        missing = set(SWEEP_FIELDS) - set(frame.columns)
        if missing:
            raise UsageError(
                f"{self.results_path}: not a sweep results file, missing "
                f"columns {', '.join(sorted(missing))}"
            )
        return frame

    def finished_points(self) -> set[tuple]:
        """Keys (POINT_KEY order) of the points already stored, for --resume."""
        frame = self.load()
        # pandas 3's 'str' dtype keeps NaN after where(..., None): go through object.
        frame["op"] = frame["op"].astype(object).where(frame["op"].notna(), None)
        return {tuple(row) for row in frame[list(POINT_KEY)].itertuples(index=False)}

    def read_metadata(self) -> dict[str, Any]:
        """The metadata file, or an empty skeleton."""
        path = self.path / METADATA
        if not path.exists():
            return {"schema_version": SCHEMA_VERSION, "jobs": {}}
        return json.loads(path.read_text())

    def write_metadata(self, metadata: dict[str, Any]) -> None:
        """Write the metadata file atomically."""
        path = self.path / METADATA
        tmp = path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps({"schema_version": SCHEMA_VERSION, **metadata}, indent=1))
        os.replace(tmp, path)

    def write_parquet(self) -> Path | None:
        """Copy the results to Parquet when pyarrow is installed."""
        try:
            import pyarrow  # noqa: F401
        except ImportError:
            return None
        target = self.path / "results.parquet"
        self.load().to_parquet(target, index=False)
        return target
