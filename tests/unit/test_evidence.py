"""The shared evidence of a run: the pooled launch variance (selection.evidence) and the
decisions built on it (the smooth curves over sizes: test_smoothing)."""

from __future__ import annotations

import numpy as np
import pytest

from osu_dl_bench.selection.evidence import LaunchValues, Observation, estimate_pool
from osu_dl_bench.selection.names import INDIFFERENCE, RISK
from osu_dl_bench.selection.tune import build_table
from tests.support.tuning import launch_rows, machine_states, scaled, write_run

LOG_SIZES = np.arange(3, 25, dtype=float)  # 8 B .. 16 MiB


def _true_curve(x):
    """A candidate's log time ratio to native that changes smoothly with log2(size)."""
    return -0.4 * np.tanh((x - 14) / 3)


def _synthetic_observations(rng, wide_sd, point_sd, within_sd, entries=12, labels=3, k=3):
    """Observations whose launch values are the curve plus a launch-wide shift per (entry,
    label, band), a point-launch shift, and sampling noise of known variance."""
    observations = []
    for entry in range(entries):
        for label in range(labels):
            shifts = {}  # (band, launch) -> u
            for x in LOG_SIZES:
                size = int(2**x)
                band = 0 if size < 4096 else 1 if size < 262144 else 2
                values = []
                for launch in range(k):
                    u = shifts.setdefault((band, launch), rng.normal(0, wide_sd))
                    noise = rng.normal(0, point_sd) + rng.normal(0, within_sd)
                    values.append(_true_curve(x) + u + noise)
                found = LaunchValues(
                    tuple(range(1, k + 1)), np.array(values), np.full(k, within_sd**2), True
                )
                observations.append(Observation(entry, f"c{label}", size, found))
    return observations


def test_the_pool_recovers_a_known_between_launch_variance_and_its_shared_part():
    rng = np.random.default_rng(5)
    wide_sd, point_sd, within_sd = 0.06, 0.04, 0.02
    pool = estimate_pool(_synthetic_observations(rng, wide_sd, point_sd, within_sd))
    component = pool.component(None, 1 << 20, True)  # every entry's points together
    assert component.points == 12 * 3 * 22  # the band 256K.. holds 7 sizes per series
    total = wide_sd**2 + point_sd**2
    assert component.point_launch == pytest.approx(total, rel=0.25)
    assert component.launch_wide == pytest.approx(wide_sd**2, rel=0.35)
    # Homogeneous data: about as many points flagged as chance gives.
    assert component.heterogeneous <= 4 * max(component.expected_heterogeneous, 1)


def test_the_pool_is_zero_where_launches_agree_beyond_their_sampling_noise():
    rng = np.random.default_rng(6)
    pool = estimate_pool(_synthetic_observations(rng, 0.0, 0.0, 0.02))
    component = pool.component(None, 64, True)
    assert component.point_launch < 0.1 * 0.02**2


def _consistent_win_run(path):
    """Sizes 1K..1M: 'recursive_doubling' 12% faster than native in every launch at every
    size, but by a launch-dependent amount (x0.80, x0.95, x0.85: three launch medians
    whose t interval with 2 degrees of freedom reaches above 1); five other candidates,
    slower, whose launch factors vary as much, independently."""
    rows = []
    others = ["ring", "rabenseifner", "reduce_bcast", "ring:seg=256K", "allgather_reduce"]
    rng = np.random.default_rng(11)
    other_factors = {name: 1.15 * rng.lognormal(0, 0.08, 3) for name in others}
    for offset, size in enumerate(1024 << np.arange(11)):
        states = machine_states(launches=3, rounds=20, seed=offset)
        rows += launch_rows("allreduce", "native", int(size), states)
        rd = scaled(states, [0.80, 0.95, 0.85], seed=offset + 50)
        rows += launch_rows("allreduce", "recursive_doubling", int(size), rd)
        for number, name in enumerate(others):
            times = scaled(states, list(other_factors[name]), seed=offset * 10 + number)
            rows += launch_rows("allreduce", name, int(size), times)
    return write_run(path, rows)


def test_a_win_repeated_at_every_size_replaces_native_though_each_point_alone_is_unsure(
    tmp_path,
):
    (entry,) = build_table(_consistent_win_run(tmp_path / "run"), "t")[0].entries
    chosen = {p["chosen"] for p in entry.points}
    assert chosen == {"recursive_doubling"}
    for point in entry.points:
        assert point["ratio_high"] < 1 and point["chance_slower"] < 0.05
        assert point["evidence"] in ("curve", "misfit", "heterogeneous")
    assert len(entry.ranges) == 1


def test_the_table_header_reports_the_launch_pools(tmp_path):
    table, _ = build_table(_consistent_win_run(tmp_path / "run"), "t")
    evidence = table.header["evidence"]
    assert (evidence["risk"], evidence["indifference"]) == (RISK, INDIFFERENCE)
    assert evidence["launch_pools"]
    assert any("launch-to-launch sd" in line for line in evidence["summary"])


def test_the_pool_recovers_the_share_of_a_launch_shift_every_candidate_shares():
    rng = np.random.default_rng(8)
    observations = []
    for size in (1 << np.arange(10, 20)).tolist():
        for entry in range(4):
            common = rng.normal(0, 0.06, 3)  # native's own drift: in every ratio alike
            for label in range(6):
                values = common + rng.normal(0, 0.06, 3)
                found = LaunchValues((1, 2, 3), values, np.full(3, 1e-6), True)
                observations.append(Observation(entry, f"c{label}", size, found))
    pool = estimate_pool(observations)
    assert pool.component(None, 1 << 12, True).correlation == pytest.approx(0.5, abs=0.1)
    assert pool.component(0, 1 << 12, True).correlation > 0.2  # one entry's band alone


def test_candidates_whose_intervals_overlap_but_differ_directly_are_not_tied():
    from osu_dl_bench.selection.paired import Ratio
    from tests.support.tuning import decision

    # shm 0.25 [0.17-0.36] and rabenseifner 0.49 [0.33-0.73] against native: intervals
    # that overlap, but the two compared directly differ (z = 2.4 with no shared error).
    point = decision(1 << 20, {"shm": (0.25, 0.17, 0.36), "rabenseifner": (0.49, 0.33, 0.73)})
    assert point.tie_set == ("shm:chunk=4M",) or point.tie_set[0].startswith("shm")
    assert "rabenseifner" not in point.tie_set
    # Errors they share cancel in the direct comparison: a shared sd narrows it.
    mine, theirs = (
        Ratio(0.5, 0.4, 0.625, 3, 0, "curve", 0.1),
        Ratio(0.55, 0.44, 0.69, 3, 0, "curve", 0.1),
    )
    from osu_dl_bench.selection.paired import quotient

    assert (
        quotient(mine, theirs).log_sd
        < quotient(Ratio(0.5, 0.4, 0.625, 3, 0), Ratio(0.55, 0.44, 0.69, 3, 0)).log_sd
    )
