"""Per-size intervals where sizes' launch-to-launch spreads differ: the variance pooled over
sizes must not make a noisy size's interval too narrow (selection.estimate.pooled_ratios,
as verify-export's C client uses it)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from osu_dl_bench.selection.estimate import pooled_ratios
from osu_dl_bench.selection.evidence import LaunchValues, Observation

QUIET_SD, SIZES = 0.05, 22


def coverage(noisy_sd: float, launches: int, every: int, pools: int = 150) -> dict[str, float]:
    """The share of intervals holding the true ratio (1) at the noisy sizes (every
    ``every``-th size, launch sd ``noisy_sd``) and at the quiet ones (QUIET_SD), over
    simulated C client runs: one value per launch and size, no rounds (paired=False)."""
    rng = np.random.default_rng(launches * 100 + every)
    held: dict[str, list[bool]] = {"noisy": [], "quiet": []}
    for _ in range(pools):
        found = []
        for i in range(SIZES):
            sd = noisy_sd if i % every == 0 else QUIET_SD
            values = LaunchValues(
                tuple(range(1, launches + 1)),
                rng.normal(0, sd, launches),
                np.full(launches, np.nan),
                False,
            )
            found.append(Observation(("c", "allreduce", 2), "c", 8 << i, values))
        for i, ratio in enumerate(pooled_ratios(found)):
            held["noisy" if i % every == 0 else "quiet"].append(ratio.low <= 1 <= ratio.high)
    return {kind: float(np.mean(found)) for kind, found in held.items()}


@pytest.mark.parametrize("launches, every", [(6, 4), (12, 4), (12, 11)])
def test_a_size_noisier_than_the_pool_keeps_its_intervals_coverage(launches, every):
    # Twice the quiet sizes' sd (4x the variance): too little for the heterogeneity test
    # to flag reliably at 6-12 launches, enough to make the pooled interval too narrow.
    found = coverage(2 * QUIET_SD, launches, every)
    assert found["noisy"] >= 0.93, found
    assert 0.93 <= found["quiet"] <= 0.995, found
    assert not math.isnan(found["quiet"])
