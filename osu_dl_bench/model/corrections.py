"""Per-variant corrections of the formulas, fitted to a sweep's measurements.

The calibration measures the machine (its links, reductions, overheads); an algorithm's
textbook formula then says how many of each it pays. What the formula cannot know is how
well one implementation uses them: MPICH's shared-memory bcast overlaps its copies, our
Python binomial tree pays more per step than one exchange, CMA copies without a second
pass. On this machine such factors reach 3x either way, the same from one sweep to the
next, so the formula is kept and two factors per variant, layout and size band are fitted
to a sweep (as Pjesivac-Grbovic et al. fit each algorithm's model parameters to its own
measurements: "Performance analysis of MPI collective operations", Cluster Computing
10(2), 2007): t = latency * L(n) + bandwidth * B(n), where L and B are the formula's
per-message and per-byte parts (costs.predict_parts) with the calibrated platform, fitted
by robust least squares on relative residuals over the band's sizes. Below and above
BAND_BYTES separately: small messages are set by per-call overheads, large ones by copies,
and one variant can be efficient at one and not at the other.

The fitted factors describe that sweep's variants and layouts only; other process counts,
node counts and platforms keep the plain formula.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd

from collectives.registry import parse_variant
from collectives.shape import JobShape
from osu_dl_bench.errors import UsageError
from osu_dl_bench.model.costs import predict_parts
from osu_dl_bench.model.fit import robust_coefficients
from osu_dl_bench.model.measured import POINT, model_rows, points
from osu_dl_bench.model.platform import Correction, Platform
from osu_dl_bench.model.state import state_factors

BAND_BYTES = (0, 64 << 10)
MIN_SIZES = 3  # per band: two factors need more sizes than factors to be checked at all
_GROUP = ["collective", "algorithm", "nprocs", "nodes"]


def _parts(platform: Platform, row) -> tuple[float, float] | None:
    try:
        variant = parse_variant(row.collective, row.algorithm)
    except UsageError:
        return None  # a backend missing here (gloo without torch): not modelled anyway
    layout = JobShape(int(row.nprocs), int(row.nodes), int(row.ppn))
    return predict_parts(platform, row.collective, variant, layout, int(row.size_bytes))


def formula_parts(platform: Platform, frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` with ``latency_us`` and ``bandwidth_us``: the uncorrected formula's two
    parts for each row (NaN where not modelled)."""
    plain = replace(platform, corrections=())
    parts = [_parts(plain, row) for row in frame.itertuples(index=False)]
    out = frame.copy()
    out["latency_us"] = [np.nan if p is None else p[0] * 1e6 for p in parts]
    out["bandwidth_us"] = [np.nan if p is None else p[1] * 1e6 for p in parts]
    return out


def _band_fit(rows: pd.DataFrame, target: str) -> tuple[float, float] | None:
    design = rows[["latency_us", "bandwidth_us"]].to_numpy(float)
    t = rows[target].to_numpy(float)
    usable = np.isfinite(t) & (t > 0) & np.all(np.isfinite(design), axis=1)
    design, t = design[usable], t[usable]
    if len(t) < MIN_SIZES or not np.any(design > 0):
        return None
    latency, bandwidth = robust_coefficients(design, t)
    return float(latency), float(bandwidth)


def fit_corrections(
    platform: Platform, measured: pd.DataFrame, target: str = "median_us"
) -> tuple[Correction, ...]:
    """Corrections of every modelled variant and layout in ``measured`` (measured.points'
    frame, or any with its columns), fitted to the column ``target`` (microseconds)."""
    frame = formula_parts(platform, measured).dropna(subset=["latency_us", "bandwidth_us"])
    found = []
    bounds = [*BAND_BYTES, np.inf]
    for (collective, algorithm, nprocs, nodes), rows in frame.groupby(_GROUP, sort=True):
        fitted = [
            _band_fit(rows[(rows["size_bytes"] >= low) & (rows["size_bytes"] < high)], target)
            for low, high in zip(bounds, bounds[1:], strict=False)
        ]
        if all(f is None for f in fitted):
            continue
        # A band without enough sizes keeps the formula, explicitly: a correction holds
        # up to the next one, and must not reach into a band it was not fitted on.
        for low, factors in zip(BAND_BYTES, fitted, strict=True):
            latency, bandwidth = factors or (1.0, 1.0)
            found.append(
                Correction(collective, algorithm, int(nprocs), int(nodes), low, latency, bandwidth)
            )
    return tuple(found)


def with_corrections(platform: Platform, corrections: tuple[Correction, ...]) -> Platform:
    """The platform with these corrections (any it had are replaced)."""
    ordered = tuple(sorted(corrections, key=lambda c: (*c.key, c.min_bytes)))
    return replace(platform, corrections=ordered)


def descaled_points(platform: Platform, rows: pd.DataFrame, how: str) -> pd.DataFrame:
    """measured.points of ``rows`` with ``median_us`` the median over launches of each
    launch's median divided by its state factor (model.state): the times in the
    calibration's state, which the corrections are fitted to."""
    unique = rows.drop_duplicates(list(POINT))[list(POINT)]
    with_parts = rows.merge(formula_parts(platform, unique), on=list(POINT), how="left")
    scaled = with_parts.assign(
        median_us=with_parts["median_us"] / state_factors(with_parts, platform, how)
    )
    return points(scaled)


def fit_to_sweep(platform: Platform, rows: pd.DataFrame, how: str = "none") -> Platform:
    """The platform with corrections fitted to a sweep's rows (cleaned: model.measured),
    their times put in the calibration's state by the ``how`` scaling, which it keeps."""
    plain = replace(platform, corrections=(), state_scaling=how)
    measured = descaled_points(plain, model_rows(rows), how)
    return with_corrections(plain, fit_corrections(plain, measured))
