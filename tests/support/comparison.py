"""Hand-made inputs for the compare tests (helpers only, no tests here): measured
medians as selection.comparison.measured_points gives them, and decision figures."""

from __future__ import annotations

import pandas as pd

from osu_dl_bench.selection import comparison
from osu_dl_bench.selection.paired import Ratio


def medians(rows, device="cpu"):
    """measured_points' frame of hand-made (size, algorithm, median) rows at p = 2."""
    return pd.DataFrame(
        [(device, "float32", "sum", "allreduce", 2, size, alg, us, 0.1) for size, alg, us in rows],
        columns=[*comparison.KEY, "median_us", "spread"],
    )


def shifted_medians():
    """A and B at one point: the machine got 2x slower for everyone, and cma alone 10%
    slower still."""
    a = medians([(1 << 20, "native", 100.0), (1 << 20, "ring", 50.0), (1 << 20, "cma", 40.0)])
    b = medians([(1 << 20, "native", 200.0), (1 << 20, "ring", 100.0), (1 << 20, "cma", 88.0)])
    return a, b


def figures(stable, regrets):
    """Figures of hand-made points: (ratio, low, high) regrets, ``stable`` of them stable."""
    ratios = tuple(Ratio(r, lo, hi, 3, 60) for r, lo, hi in regrets)
    return comparison.Figures(len(regrets), stable, ratios)
