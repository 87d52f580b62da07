"""The decision rule's own arithmetic: its settings checked, its expected loss against a
Monte Carlo draw of the same lognormal ratios."""

import math

import numpy as np
import pytest

from osu_dl_bench.errors import UsageError
from osu_dl_bench.selection.paired import Z_LEVEL, Ratio
from osu_dl_bench.selection.rule import DecisionRule


def _ratio(centre: float, sd: float) -> Ratio:
    half = Z_LEVEL * sd
    return Ratio(centre, centre * math.exp(-half), centre * math.exp(half), 3, 60)


@pytest.mark.parametrize("risk, zone", [(-0.1, 0.02), (1.5, 0.02), (0.2, -0.01), (0.2, 1.0)])
def test_settings_out_of_range_are_refused(risk, zone):
    with pytest.raises(UsageError, match="must lie in"):
        DecisionRule(risk, zone)


def test_the_expected_loss_against_one_contender_is_the_lognormal_excess():
    ratios = {"native": _ratio(1.0, 0.0), "ring": _ratio(0.9, 0.1)}
    rng = np.random.default_rng(1)
    draws = 0.9 * np.exp(rng.normal(0.0, 0.1, 400_000))
    # Choosing native: lose (1 - ring) where ring is faster; choosing ring: (ring - 1)+.
    assert DecisionRule().expected_loss(ratios, "native") == pytest.approx(
        np.mean(np.maximum(1 - draws, 0)), rel=0.02
    )
    assert DecisionRule().expected_loss(ratios, "ring") == pytest.approx(
        np.mean(np.maximum(draws - 1, 0)), rel=0.02
    )


def test_a_sure_choice_of_the_fastest_loses_nothing():
    ratios = {"native": _ratio(1.0, 0.0), "ring": _ratio(0.5, 0.0)}
    assert DecisionRule().expected_loss(ratios, "ring") == 0.0
    assert DecisionRule().expected_loss(ratios, "native") == pytest.approx(0.5)
