"""From a run directory's calibration measurements to its platform file.

alpha and beta of the intra-node link: piecewise robust fit of the ping-pong's one-way
time, t = alpha + beta n. gamma: piecewise robust fit of the in-place reduction's time,
t = c + gamma n (c, the ufunc call, is part of the software overhead), and the same for
MPI's own reduction (gamma of native, when measured). Software overhead:
the median excess of one Python algorithm step over the ping-pong at the same small size.
The inter-node link cannot be measured on one host: it is recorded as not measured (a copy
of the intra-node link) and predictions across nodes then need a named interconnect.
"""

from __future__ import annotations

import datetime as _dt
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from osu_dl_bench import __version__
from osu_dl_bench.errors import UsageError
from osu_dl_bench.model.calibrate import CALIBRATION_CSV, CALIBRATION_JSON, KINDS
from osu_dl_bench.model.fit import PieceFit, fit_pieces
from osu_dl_bench.model.platform import Link, Piece, Platform

PLATFORM_FILE = "platform.json"


def load_calibration(run_dir: Path) -> tuple[pd.DataFrame, dict]:
    """calibration.csv (checked) and calibration.json of a run directory."""
    path = run_dir / CALIBRATION_CSV
    try:
        frame = pd.read_csv(path)
    except (OSError, pd.errors.ParserError) as exc:
        raise UsageError(f"{path}: cannot read the calibration: {exc}") from None
    missing = {"kind", "size_bytes", "median_s"} - set(frame.columns)
    if missing:
        raise UsageError(f"{path}: expected columns kind, size_bytes, median_s; missing {missing}")
    for kind in ("pingpong", "reduce"):
        if (frame["kind"] == kind).sum() < 4:
            raise UsageError(f"{path}: expected >= 4 sizes of kind {kind!r} (kinds: {KINDS})")
    meta_path = run_dir / CALIBRATION_JSON
    meta = json.loads(meta_path.read_text()) if meta_path.exists() else {}
    return frame, meta


def _medians(frame: pd.DataFrame, kind: str) -> pd.Series:
    """size -> median over calibration jobs of the job medians."""
    rows = frame[(frame["kind"] == kind) & (frame["median_s"] > 0)]
    return rows.groupby("size_bytes")["median_s"].median().sort_index()


def _series(frame: pd.DataFrame, kind: str) -> tuple[np.ndarray, np.ndarray]:
    medians = _medians(frame, kind)
    return medians.index.to_numpy(float), medians.to_numpy(float)


def _has(frame: pd.DataFrame, kind: str) -> bool:
    return int((frame["kind"] == kind).sum()) >= 4


def _alpha_beta(fits: list[PieceFit]) -> tuple[Piece, ...]:
    return tuple(Piece(f.min_x, (f.line.intercept, f.line.slope)) for f in fits)


def _gamma(fits: list[PieceFit]) -> tuple[Piece, ...]:
    return tuple(Piece(f.min_x, (f.line.slope,)) for f in fits)


def _overhead(frame: pd.DataFrame) -> float:
    """Median excess of a Python algorithm step over the ping-pong, at the same sizes."""
    step, ping = _medians(frame, "step"), _medians(frame, "pingpong")
    both = step.index.intersection(ping.index)
    if both.empty:
        return 0.0
    return max(0.0, float(np.median(step[both] - ping[both])))


def fit_platform(run_dir: str | Path, name: str | None = None) -> tuple[Platform, dict]:
    """The platform of a run directory's calibration, and the fit's quality."""
    run_dir = Path(run_dir)
    frame, meta = load_calibration(run_dir)
    ab_fits = fit_pieces(*_series(frame, "pingpong"))
    gamma_fits = fit_pieces(*_series(frame, "reduce"))
    hosts = meta.get("hosts") or []
    native_fits = fit_pieces(*_series(frame, "reduce_mpi")) if _has(frame, "reduce_mpi") else []
    intra = Link(
        _alpha_beta(ab_fits),
        _gamma(gamma_fits),
        True,
        "fitted: ping-pong, numpy and MPI reductions",
        _gamma(native_fits) if native_fits else None,
    )
    inter = Link(
        intra.alpha_beta,
        intra.gamma,
        gamma_native=intra.gamma_native,
        measured=False,
        note=f"not measured: the calibration ran on one host ({','.join(hosts) or '?'}); "
        "a copy of the intra-node link. Predict across nodes with --inter NAME",
    )
    quality = {
        "pingpong_mean_rel_error": [round(f.line.error, 4) for f in ab_fits],
        "reduce_mean_rel_error": [round(f.line.error, 4) for f in gamma_fits],
        "reduce_mpi_mean_rel_error": [round(f.line.error, 4) for f in native_fits],
    }
    platform = Platform(
        name=name or run_dir.resolve().name,
        intra=intra,
        inter=inter,
        cores_per_node=meta.get("cores_per_node"),
        software_overhead_s=_overhead(frame),
        assumed=False,
        source=f"fitted to {run_dir / CALIBRATION_CSV} by robust (Huber) least squares",
        provenance={
            "calibration": meta,
            "fit_quality": quality,
            "fitted_by": {
                "package_version": __version__,
                "command": " ".join(sys.argv),
                "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            },
        },
    )
    return platform, quality
