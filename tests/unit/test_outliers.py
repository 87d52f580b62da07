"""diagnosis.outliers: a unit is named only when its whole interval lies beyond the
peers' own spread and the minimum effect, on the worse side."""

from __future__ import annotations

import numpy as np
import pytest

from osu_dl_bench.diagnosis.outliers import stand_out


def _units(medians, spread=0.05, count=40, seed=1):
    rng = np.random.default_rng(seed)
    return {f"u{i}": m * (1 + spread * rng.standard_normal(count)) for i, m in enumerate(medians)}


def test_a_link_at_a_tenth_of_its_peers_bandwidth_is_named_alone():
    samples = _units([900, 910, 890, 90, 905, 895])
    found = stand_out(samples, worse="lower")
    assert [f.name for f in found] == ["u3"]
    assert found[0].ratio_ci[1] < 0.2 and found[0].share > 0.9


def test_uniform_units_are_not_named_in_either_direction():
    for seed in range(10):
        samples = _units([900] * 6, spread=0.2, seed=seed)
        assert stand_out(samples, worse="lower") == []
        assert stand_out(samples, worse="higher") == []


def test_a_unit_within_the_peers_own_spread_is_not_named():
    # The peers lie 1x-2x apart; a unit at 2.2x is one of them, however many samples.
    samples = _units([100, 130, 160, 200, 220], spread=0.01, count=400)
    assert stand_out(samples, worse="higher", min_ratio=1.0) == []


def test_the_minimum_effect_holds_back_a_sure_but_small_difference():
    samples = _units([100, 100, 100, 115], spread=0.01, count=400)
    assert stand_out(samples, worse="higher", min_ratio=1.25) == []
    assert [f.name for f in stand_out(samples, worse="higher", min_ratio=1.05)] == ["u3"]


def test_lags_near_zero_are_judged_by_the_absolute_excess():
    rng = np.random.default_rng(0)
    lags = {f"rank {r}": np.abs(rng.normal(0, 10e-6, 200)) for r in range(5)}
    lags["rank 2"] = 2e-3 + rng.normal(0, 20e-6, 200)
    found = stand_out(lags, worse="higher", min_excess=100e-6)
    assert [f.name for f in found] == ["rank 2"]
    assert found[0].excess == pytest.approx(2e-3, rel=0.05)
    assert found[0].excess_ci[0] < 2e-3 < found[0].excess_ci[1] + 1e-4


def test_nan_samples_are_left_out_and_a_lone_unit_has_no_peers():
    assert stand_out({"a": [1.0, 2.0]}) == []
    assert stand_out({"a": [np.nan], "b": [1.0]}) == []
    with pytest.raises(ValueError, match="expected one of"):
        stand_out({"a": [1.0], "b": [2.0]}, worse="sideways")
