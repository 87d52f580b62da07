"""Degrees of freedom from what was measured: every point of a launch pool shares the same
K launches, so the components the pool's points see alike (a band-wide shift, native's
drift) rest on K - 1 degrees of freedom however many points the pool holds
(selection.evidence, selection.estimate, selection.paired)."""

from __future__ import annotations

import math
from dataclasses import replace
from types import SimpleNamespace

import numpy as np
import pytest

from osu_dl_bench.selection.estimate import _curve_ratios, _own, pooled_ratios
from osu_dl_bench.selection.evidence import LaunchValues, Observation, band_of, estimate_pool
from osu_dl_bench.selection.paired import Ratio, quotient, satterthwaite, t_quantile

SIZES = (1 << np.arange(18, 24)).tolist()  # one band (256K..8M): one pool
CANDIDATES = 2
TRUTH = -0.1  # every candidate's true log time ratio to native


def simulated_pool(rng, launches, shift_sd=0.05, point_sd=0.03, within_sd=0.01):
    """One entry's band: each candidate at each size, per launch, the truth plus a shift of
    the launch shared by every point and candidate (native's drift: 71% of the variance by
    default, a correlation like the 0.67-0.85 measured at p = 2), the point's own
    launch-to-launch variation and sampling noise of known variance."""
    shifts = rng.normal(0, shift_sd, launches)
    found = []
    for size in SIZES:
        for label in range(CANDIDATES):
            noise = rng.normal(0, point_sd, launches) + rng.normal(0, within_sd, launches)
            values = LaunchValues(
                tuple(range(1, launches + 1)),
                TRUTH + shifts + noise,
                np.full(launches, within_sd**2),
                True,
            )
            found.append(Observation("allreduce", f"c{label}", size, values))
    return found


def coverage(launches: int, pools: int = 600, seed: int = 0) -> float:
    """The share of intervals (every point of every simulated pool) that hold the truth."""
    rng = np.random.default_rng(seed + launches)
    held = []
    for _ in range(pools):
        for ratio in pooled_ratios(simulated_pool(rng, launches)):
            held.append(ratio.low <= math.exp(TRUTH) <= ratio.high)
    return float(np.mean(held))


@pytest.mark.parametrize("launches", [2, 3, 5])
def test_intervals_from_a_pool_with_a_shared_launch_shift_cover_the_truth_as_claimed(launches):
    assert 0.93 <= coverage(launches) <= 0.97


BAND_SIZES = (1 << np.arange(3, 25)).tolist()  # 8 B .. 16 MiB: three bands


def _curve_truth(size: int) -> float:
    return -0.3 * math.tanh((math.log2(size) - 14) / 3)


def curve_coverage(launches: int, pools: int = 100, shift_sd: float = 0.05) -> float:
    """The share of the curve's intervals (two candidates over 22 sizes, three bands) that
    hold the true curve, where each band has a shift per launch that both candidates and
    all its sizes share, as smoothing over sizes cannot average it out."""
    rng = np.random.default_rng(100 + launches)
    held = []
    for _ in range(pools):
        shifts = [rng.normal(0, shift_sd, launches) for _ in range(3)]
        found = []
        for label in ("c0", "c1"):
            for size in BAND_SIZES:
                noise = rng.normal(0, 0.03, launches) + rng.normal(0, 0.01, launches)
                values = LaunchValues(
                    tuple(range(1, launches + 1)),
                    _curve_truth(size) + shifts[band_of(size)] + noise,
                    np.full(launches, 0.01**2),
                    True,
                )
                found.append(Observation("allreduce", label, size, values))
        pool = estimate_pool(found)
        for label in ("c0", "c1"):
            mine = [o for o in found if o.label == label]
            owns = {i: _own(o.values, pool, o.entry, o.size) for i, o in enumerate(mine)}
            sizes = [SimpleNamespace(size=o.size) for o in mine]
            for i, ratio in _curve_ratios(sizes, owns).items():
                held.append(ratio.low <= math.exp(_curve_truth(mine[i].size)) <= ratio.high)
    return float(np.mean(held))


@pytest.mark.parametrize("launches", [2, 3, 5])
def test_the_curves_bands_with_a_shared_band_shift_cover_the_truth_as_claimed(launches):
    assert 0.93 <= curve_coverage(launches) <= 0.97


def test_the_launch_level_df_is_the_pools_launches_less_one():
    (ratio, *_) = pooled_ratios(simulated_pool(np.random.default_rng(1), 3))
    assert ratio.launch_df == 2
    assert 2 <= ratio.df < 6  # the shared shift dominates: close to 2, nowhere near 69


def test_welch_satterthwaite_df():
    assert satterthwaite([(1.0, 4.0)]) == pytest.approx(4.0)
    assert satterthwaite([(1.0, 2.0), (1.0, 2.0)]) == pytest.approx(4.0)
    assert satterthwaite([(1.0, 2.0), (0.0, 1.0)]) == pytest.approx(2.0)
    assert math.isinf(satterthwaite([(1.0, math.inf)]))


def test_a_quotient_drops_the_shared_parts_df_with_the_shared_part():
    # Two ratios whose whole launch-level part (2 df) is the part they share: their
    # quotient rests on the point-level part alone (many df).
    sd, common, point_df = 0.1, 0.09, 60.0
    df = satterthwaite([(common**2, 2.0), (sd**2 - common**2, point_df)])
    half = t_quantile(df) * sd
    mine = Ratio(0.9, 0.9 * math.exp(-half), 0.9 * math.exp(half), 3, 0, "point", common, df, 2.0)
    assert mine.sd == pytest.approx(sd)
    # Two independent point-level parts of 60 df each: 120.
    assert quotient(mine, mine).df == pytest.approx(2 * point_df, rel=0.05)
    # Without a shared part, the quotient keeps the launch-level df's weight.
    alone = replace(mine, common_sd=0.0)
    assert quotient(alone, alone).df < 10


def test_the_table_keeps_each_points_df_and_the_launch_level_df(tmp_path):
    from osu_dl_bench.selection.tune import build_table
    from tests.unit.test_evidence import _consistent_win_run

    table, _ = build_table(_consistent_win_run(tmp_path / "run"), "t")
    (entry,) = table.entries
    for point in entry.points:
        assert point["launch_df"] == 2  # three launches
        assert point["df"] is not None and point["df"] >= 2
    assert any("launch-level df 2" in line for line in table.header["evidence"]["summary"])


THREE_BANDS = ((8, 64, 512), (8192, 16384, 65536), (1 << 20, 1 << 22, 1 << 23))


def three_band_pool(rng, launches=2, point_sd=0.02, within_sd=0.01, quiet_band=None):
    """One entry, two candidates at three sizes in each of three bands: a point's
    launch-to-launch sd ``point_sd`` everywhere (none in ``quiet_band``'s launches)."""
    found = []
    for band, sizes in enumerate(THREE_BANDS):
        for size, label in ((size, label) for size in sizes for label in ("c0", "c1")):
            if band == quiet_band:
                values = np.full(launches, TRUTH)
            else:
                noise = rng.normal(0, point_sd, launches) + rng.normal(0, within_sd, launches)
                values = TRUTH + noise
            values = LaunchValues(
                tuple(range(1, launches + 1)), values, np.full(launches, within_sd**2), True
            )
            found.append(Observation("allreduce", label, size, values))
    return found


def test_a_band_whose_launch_variance_estimate_is_0_borrows_its_entry_s_and_says_so():
    pool = estimate_pool(three_band_pool(np.random.default_rng(1), point_sd=0.1, quiet_band=0))
    quiet, entry = (
        pool.components[("allreduce", 0, True)],
        pool.components[("allreduce", None, True)],
    )
    assert entry.point_launch > 0 and quiet.point_launch == entry.point_launch
    assert quiet.launch_wide == entry.launch_wide and quiet.df == 6
    assert quiet.borrowed == "entry's pool over every band"
    (line,) = [text for text in pool.lines() if " 0-4K " in text]
    assert line.endswith("its own estimate 0, floored at the entry's pool over every band's")
    truly_quiet = estimate_pool(three_band_pool(np.random.default_rng(1), point_sd=0, within_sd=0))
    assert all(c.point_launch == 0 and not c.borrowed for c in truly_quiet.components.values())


def test_points_of_bands_estimated_at_0_cover_the_truth_once_the_entry_s_variance_stands_in():
    # 2 launches, few points per band: a band's estimate lands at 0 in about 1 of 7 pools;
    # its intervals on the rounds' noise alone held the truth at 79% (the entry's: 94%).
    rng = np.random.default_rng(5)
    held = []
    for _ in range(300):
        found = three_band_pool(rng)
        pool = estimate_pool(found)
        for o, ratio in zip(found, pooled_ratios(found), strict=True):
            if pool.components[("allreduce", band_of(o.size), True)].borrowed:
                held.append(ratio.low <= math.exp(TRUTH) <= ratio.high)
    assert len(held) > 100 and 0.90 <= np.mean(held) <= 0.99
