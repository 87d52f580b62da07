"""Predictions scaled to the machine state a point was measured in.

Every round of a sweep also times a fixed reference (measurement.reference: a 1 MiB copy
and an 8-byte native allreduce), and so does the calibration. A point measured while the
machine ran k times slower than while it calibrated should be predicted k times slower:
its prediction is multiplied by (the point's reference / the calibration's reference, at
the point's process count). Which reference tracks a variant's time depends on what bounds
it (SCALINGS):

- ``copy``: the memory copy (bandwidth-bound: large messages);
- ``allreduce``: the small allreduce (latency-bound: scheduling and the library's path);
- ``blend``: both, weighted by the share of the formula's per-byte part in the prediction
  (s_copy^w * s_allreduce^(1 - w), w = bandwidth / (latency + bandwidth));
- ``none``: no scaling.

A row without a reference (a legacy sweep, a calibration without one) is not scaled. The
scaling a platform was fitted with (its corrections were fitted to times divided by the
same factors) is the one its predictions use: Platform.state_scaling.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from osu_dl_bench.model.platform import Platform

SCALINGS = ("none", "copy", "allreduce", "blend")


def _ratio(measured: pd.Series, calibrated: pd.Series) -> np.ndarray:
    ratio = measured.to_numpy(float) / calibrated.to_numpy(float)
    return np.where(np.isfinite(ratio) & (ratio > 0), ratio, 1.0)


def _calibrated(platform: Platform, nprocs: pd.Series, field: str) -> pd.Series:
    def reference(p: int) -> float:
        state = platform.state_for(int(p))
        found = None if state is None else state.reference
        return np.nan if found is None else getattr(found, field)

    return nprocs.map({p: reference(p) for p in nprocs.unique()})


def state_factors(rows: pd.DataFrame, platform: Platform, how: str) -> np.ndarray:
    """Per row, the factor its prediction is scaled by (1 where no reference). ``rows``
    has nprocs, ref_copy and ref_allreduce (seconds), and for ``blend`` the formula's
    latency_us and bandwidth_us."""
    if how not in SCALINGS:
        raise ValueError(f"expected a scaling in {SCALINGS}, got {how!r}")
    if how == "none" or rows.empty:
        return np.ones(len(rows))
    copy = _ratio(rows["ref_copy"], _calibrated(platform, rows["nprocs"], "copy_s"))
    allreduce = _ratio(rows["ref_allreduce"], _calibrated(platform, rows["nprocs"], "allreduce_s"))
    if how == "copy":
        return copy
    if how == "allreduce":
        return allreduce
    latency, data = rows["latency_us"].to_numpy(float), rows["bandwidth_us"].to_numpy(float)
    total = latency + data
    w = np.divide(data, total, out=np.full(len(rows), 0.5), where=total > 0)
    return copy**w * allreduce ** (1 - w)
