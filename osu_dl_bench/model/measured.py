"""A sweep's measurements as the model fits and scores them.

Rows: every (point, algorithm, launch) a results file holds, validated ones only; of a
point measured again in the same launch (its machine state was outlying) the last row; of
``native``, only the rows of the MPI library's own launches (group "mpi"; "shared" in
legacy files): the native timed beside gloo in gloo's launches shares a process with
gloo's threads. Each row keeps its launch and the medians of its per-round references.

Points: per (nprocs, nodes, ppn, collective, algorithm, dtype, op, device, size; a device
such as cpu-registered changes what the cma algorithms copy) the median over launches of
the launches' medians (one slow launch among three moves it little); the same over the
odd and over the even launches gives the two halves the ceiling compares.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from osu_dl_bench.errors import UsageError
from osu_dl_bench.measurement.store import (
    OPTIONAL_FIELDS,
    RESULTS,
    TEXT_COLUMNS,
    RunStore,
    collective_rows,
    round_values,
    with_defaults,
)
from osu_dl_bench.selection.paired import point_latency
from osu_dl_bench.selection.tune import clean_rows, without_null_controls

POINT = ("nprocs", "nodes", "ppn", "collective", "algorithm", "dtype", "op", "device", "size_bytes")
# What a frame without them (a hand-made one) measured; op '' for a collective without one.
_CALL_DEFAULTS = {"dtype": "float32", "op": "", "device": "cpu"}
_NEEDED = ("collective", "algorithm", "size_bytes", "nprocs", "nodes", "ppn", "median_us")


def _read(source: Path) -> pd.DataFrame:
    """The rows of a run directory, of its results.csv, or of any results CSV (legacy
    columns filled with their defaults)."""
    if source.is_dir() or source.name == RESULTS:
        run_dir = source if source.is_dir() else source.parent
        if not (run_dir / RESULTS).is_file():
            raise UsageError(f"{run_dir}: no {RESULTS}: expected a sweep's run directory")
        return RunStore(run_dir).load()  # dropped rows: a warning on stderr
    try:
        return pd.read_csv(source, dtype=TEXT_COLUMNS)
    except (OSError, pd.errors.ParserError, UnicodeDecodeError) as exc:
        raise UsageError(f"{source}: cannot read sweep results: {exc}") from None


def _median_of_rounds(column: pd.Series) -> np.ndarray:
    return np.array([np.median(v) if v.size else np.nan for v in map(round_values, column)])


def model_rows(frame: pd.DataFrame) -> pd.DataFrame:
    """The rows the model fits and scores: selection.tune.clean_rows keeping a
    candidate's launches that validated (the model fits times, not decisions), none of
    the library's forced algorithms (native:alg=NAME is not the library's own choice the
    model predicts) and none of the null control's (native again: it would count twice);
    with ``ref_copy``/``ref_allreduce``: seconds, NaN if none."""
    frame = with_defaults(frame.copy(), {**OPTIONAL_FIELDS, **_CALL_DEFAULTS})
    frame = without_null_controls(clean_rows(frame, failed="row", forced_library=False)).copy()
    frame["launch"] = frame["launch"].astype(int)
    frame["ref_copy"] = _median_of_rounds(frame["ref_copy_us"]) * 1e-6
    frame["ref_allreduce"] = _median_of_rounds(frame["ref_allreduce_us"]) * 1e-6
    return frame.reset_index(drop=True)


def load_rows(source: str | Path) -> pd.DataFrame:
    """A sweep's rows as the model reads them (model_rows): a run directory, its
    results.csv or any results CSV."""
    path = Path(source)
    frame = _read(path)
    missing = [c for c in _NEEDED if c not in frame.columns]
    if missing:
        raise UsageError(f"{path}: expected sweep columns {_NEEDED}; missing {missing}")
    return model_rows(collective_rows(frame, path.parent if path.name == RESULTS else path))


def points(rows: pd.DataFrame) -> pd.DataFrame:
    """Per point and algorithm: the median over launches of ``median_us`` and of the
    references, and the launch count."""
    return (
        rows.groupby(list(POINT), as_index=False, sort=True)
        .agg(
            median_us=("median_us", point_latency),
            launches=("launch", "nunique"),
            ref_copy=("ref_copy", "median"),
            ref_allreduce=("ref_allreduce", "median"),
        )
        .reset_index(drop=True)
    )


def launch_count(rows: pd.DataFrame) -> int:
    """How many launches the rows come from."""
    return int(rows["launch"].nunique()) if len(rows) else 0


def halves(rows: pd.DataFrame) -> pd.DataFrame:
    """Per point and algorithm measured in both: ``odd_us`` and ``even_us``, the medians
    over the odd and over the even launches of the launches' medians (empty with fewer
    than two launches)."""
    odd = rows[rows["launch"] % 2 == 1].groupby(list(POINT))["median_us"].median()
    even = rows[rows["launch"] % 2 == 0].groupby(list(POINT))["median_us"].median()
    both = pd.concat([odd.rename("odd_us"), even.rename("even_us")], axis=1).dropna()
    return both.reset_index()
