"""selection.paired: paired log-ratios per round or per launch, the cluster bootstrap's
interval, and the legacy rule read as an interval."""

import math

import numpy as np
import pytest
from support.tuning import machine_states, scaled

from osu_dl_bench.selection.paired import (
    Series,
    cluster_bootstrap,
    launch_interval,
    launch_of,
    legacy_ratio,
    paired_ratio,
    same_group_samples,
    seed_of,
)


def _series(launches, group="mpi", first=1):
    return Series(
        group,
        tuple(
            launch_of(k, rounds, np.median(rounds), 0.0, 0.0, len(rounds))
            for k, rounds in enumerate(launches, start=first)
        ),
    )


def test_ten_percent_faster_in_every_round_of_three_launches_is_below_one():
    states = machine_states(launches=3, rounds=20)
    native, faster = _series(states), _series(scaled(states, 0.9))
    ratio = paired_ratio(faster, native, "point", "ring", "native")
    assert ratio.ratio == pytest.approx(0.9, rel=0.01)
    assert ratio.low <= ratio.ratio <= ratio.high < 1 and ratio.below_one
    assert (ratio.launches, ratio.rounds) == (3, 60)


def test_pairing_by_round_cancels_the_machine_state_that_unpaired_medians_keep():
    """The launches differ by 2x and the rounds by 10%: the pairs still agree to 1%."""
    states = machine_states(launches=3, rounds=20)
    ratio = paired_ratio(_series(scaled(states, 0.97)), _series(states), "p")
    assert ratio.high < 1  # 3% faster, told apart although every round moves by 10%
    pooled = np.concatenate(states)
    assert np.percentile(pooled, 75) / np.percentile(pooled, 25) > 1.3


def test_faster_in_one_launch_and_slower_in_two_is_not_below_one():
    states = machine_states(launches=3, rounds=20)
    mixed = _series(scaled(states, [0.8, 1.05, 1.05]))
    ratio = paired_ratio(mixed, _series(states), "p", "mixed")
    assert ratio.low < 1 < ratio.high and not ratio.below_one
    assert ratio.ratio == pytest.approx(1.05, rel=0.01)


def test_the_interval_is_the_same_every_time_and_depends_on_the_seed():
    states = machine_states(launches=3, rounds=20)
    native = _series(states)
    candidate = _series(scaled(states, [0.9, 1.0, 0.95], jitter=0.05))
    first = paired_ratio(candidate, native, "allreduce", 2, 1024, "ring")
    assert paired_ratio(candidate, native, "allreduce", 2, 1024, "ring") == first
    other = paired_ratio(candidate, native, "allreduce", 2, 2048, "ring")
    assert other.ratio == first.ratio  # the seed moves the bootstrap, never the estimate
    clusters = same_group_samples(candidate, native)
    assert cluster_bootstrap(clusters, seed_of("a")) == cluster_bootstrap(clusters, seed_of("a"))
    assert cluster_bootstrap(clusters, seed_of("a")) != cluster_bootstrap(clusters, seed_of("b"))


def test_few_launches_widen_the_interval_to_students_t_over_their_medians():
    states = machine_states(launches=3, rounds=20)
    candidate = _series(scaled(states, [0.8, 1.0, 0.9]))  # the launches disagree
    ratio = paired_ratio(candidate, _series(states), "p", "c")
    clusters = same_group_samples(candidate, _series(states))
    boot = cluster_bootstrap(clusters, seed_of("p", "c"))
    t_low, t_high = launch_interval(clusters)
    assert t_low < boot[0] and boot[1] < t_high  # three launches: t is the wider
    assert (math.log(ratio.low), math.log(ratio.high)) == pytest.approx((t_low, t_high))
    assert ratio.low < 1 < ratio.high  # so no candidate replaces native on it


def test_launches_are_the_top_stage_of_the_bootstrap():
    """Three launches that disagree (constant within each): the interval spans them, where
    resampling the 60 values as one pool would give a narrow one."""
    clusters = [np.full(20, value) for value in (-0.1, 0.0, 0.1)]
    low, high = cluster_bootstrap(clusters, seed=1)
    assert low == pytest.approx(-0.1) and high == pytest.approx(0.1)
    pooled_low, pooled_high = cluster_bootstrap([np.concatenate(clusters)], seed=1)
    assert pooled_high - pooled_low < 0.11


def test_another_group_pairs_launch_with_launch():
    """gloo ran in launches of its own: one log-ratio of medians per launch, so its
    round-to-round swings do not count as evidence."""
    states = machine_states(launches=3, rounds=20)
    native = _series(states, group="mpi")
    other = _series(scaled(machine_states(3, 20, seed=5), 0.9), group="gloo")
    ratio = paired_ratio(other, native, "p", "gloo")
    expected = [
        math.log(np.median(o)) - math.log(np.median(n))
        for o, n in zip(scaled(machine_states(3, 20, seed=5), 0.9), states, strict=True)
    ]
    assert math.log(ratio.ratio) == pytest.approx(np.median(expected))
    # the bootstrap's lowest launch, or Student's t over three launches where that is wider
    t_low, t_high = launch_interval([np.array([value]) for value in expected])
    assert ratio.low == pytest.approx(math.exp(min(min(expected), t_low)), rel=1e-9)
    assert ratio.high == pytest.approx(math.exp(max(max(expected), t_high)), rel=1e-9)
    assert ratio.launches == 3 and ratio.rounds == 60


def test_launches_measured_by_one_side_only_are_not_paired():
    states = machine_states(launches=3, rounds=10)
    native = _series(states[:1])
    later = _series(states[1:], first=2)
    assert paired_ratio(later, native, "p") is None


def test_legacy_rows_read_the_old_rule_as_an_interval():
    def legacy(median, q1, q3):
        return Series("shared", (launch_of(1, [], median, q1, q3, 7),))

    native = legacy(10.0, 9.0, 11.0)
    ratio = paired_ratio(legacy(8.0, 7.0, 9.5), native, "p")
    assert (ratio.ratio, ratio.low, ratio.high) == pytest.approx((0.8, 0.7, 0.95))
    assert ratio.below_one  # q3 9.5 < native's median 10
    touching = legacy_ratio(legacy(8.0, 7.0, 10.0), native)
    assert not touching.below_one  # q3 == native's median: within the noise


def test_rounds_of_different_counts_pair_by_their_common_prefix():
    states = machine_states(launches=2, rounds=25)
    longer = _series(scaled(states, 0.9))
    shorter = _series([s[:20] for s in states])
    ratio = paired_ratio(longer, shorter, "p")
    assert (ratio.launches, ratio.rounds) == (2, 40)
    assert ratio.ratio == pytest.approx(0.9, rel=0.01)


def test_an_interval_too_wide_for_exp_has_an_infinite_expected_ratio_not_an_error():
    # A point of two launches, one of them 1e30 times the other: a finite sd past exp's range.
    from osu_dl_bench.selection.paired import Ratio

    wide = Ratio(1.0, 1e-40, 1e40, 2, 0)
    assert math.isfinite(wide.log_sd) and wide.expected == math.inf
