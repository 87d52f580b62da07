"""The expected-loss rule against the old one on simulated A/B sweeps (scripts/rule_simulation.py):
this machine's curve shapes, launch effects shared by a size band, near-ties at the 5%
margin, a null-like candidate, and a between-period shift between the two sweeps."""

import pytest
from support.scripts import load_script

from osu_dl_bench.selection.rule import DEFAULT_RULE


@pytest.fixture(scope="module")
def figures():
    simulation = load_script("rule_simulation")
    return simulation.simulate({"old": None, "new": DEFAULT_RULE}, pairs=8, seed=0)


def test_the_new_rule_is_more_stable_over_all_candidate_tie_sets(figures):
    assert figures["new"]["stability"] >= figures["old"]["stability"] + 2


def test_the_new_rule_captures_more_of_the_true_speedup(figures):
    assert figures["new"]["captured"] >= figures["old"]["captured"] + 2


def test_the_new_rule_loses_less_time_against_the_true_best(figures):
    assert figures["new"]["regret"] < figures["old"]["regret"]


def test_a_candidate_as_fast_as_native_is_chosen_at_2_percent_of_points_or_fewer(figures):
    assert figures["new"]["null_wins"] <= 2
