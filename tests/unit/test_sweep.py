"""The sweep: its pure parts directly, then real mpiexec jobs through the orchestrator and
--inside (every run with a hard timeout), checked against whatever the registry holds."""

from __future__ import annotations

import io
import itertools
from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from collectives import algorithms
from collectives.registry import Algorithm
from collectives.units import split_variant_texts
from osu_dl_bench.errors import UsageError
from osu_dl_bench.jobs.plan import finished_points, variants_for
from osu_dl_bench.jobs.progress import Progress, decode_event, encode_event
from osu_dl_bench.jobs.sweep_config import (
    parse_collectives,
    parse_process_counts,
)
from osu_dl_bench.measurement.schedule import (
    MAX_ITERATIONS,
    MAX_ROUNDS,
    MIN_ROUNDS,
    another_round,
    iterations_for,
    next_iteration_count,
    rotation,
    round_stats,
)
from osu_dl_bench.measurement.store import SWEEP_FIELDS, RunStore, SweepPoint


# No deadline: one example held off the 2 shared cores is not a failure.
@settings(deadline=None)
@given(st.floats(1e-7, 100.0), st.floats(0.01, 60.0))
def test_iterations_fill_the_budget_in_max_rounds(per_iteration, budget):
    iterations = iterations_for(per_iteration, budget)
    assert 1 <= iterations <= MAX_ITERATIONS
    # Over budget only at one iteration per round (huge messages).
    assert MAX_ROUNDS * iterations * per_iteration <= budget * 1.0001 or iterations == 1


def test_rounds_go_on_while_the_budget_lasts():
    assert iterations_for(20e-6, 2.0) == MAX_ITERATIONS  # 8 B, one candidate: capped
    assert iterations_for(1e-3, 2.0) == 50  # 2000 iterations in 40 rounds
    assert iterations_for(0.5, 2.0) == 1
    assert another_round(MIN_ROUNDS - 1, elapsed=100.0, budget=1.0)  # the floor
    assert not another_round(MIN_ROUNDS, elapsed=1.0, budget=1.0)
    assert another_round(MIN_ROUNDS, elapsed=0.5, budget=1.0)
    assert not another_round(MAX_ROUNDS, elapsed=0.0, budget=1.0)  # the ceiling


def test_the_iteration_count_grows_until_its_passes_reach_the_target():
    assert next_iteration_count(1, 0.5, 0.1) is None
    assert next_iteration_count(1, 0.0, 0.1) == 10
    assert next_iteration_count(4, 0.05, 0.1) == 10  # 4 * 2.4
    assert next_iteration_count(MAX_ITERATIONS, 0.0, 0.1) is None


@pytest.mark.parametrize("n", range(2, 13))
def test_rotation_gives_every_candidate_each_position_and_each_predecessor_alike(n):
    """A Williams design: over a cycle (n rounds, 2n for odd n) each candidate runs in
    each position, and right after each other candidate, equally often."""
    cycle = n if n % 2 == 0 else 2 * n
    orders = [rotation(r, n) for r in range(cycle)]
    assert all(sorted(order) == list(range(n)) for order in orders)
    positions = Counter((j, c) for order in orders for j, c in enumerate(order))
    assert set(positions.values()) == {cycle // n} and len(positions) == n * n
    follows = Counter(pair for order in orders for pair in itertools.pairwise(order))
    assert set(follows.values()) == {cycle // n} and len(follows) == n * (n - 1)
    assert rotation(cycle + 1, n) == orders[1]  # the cycle repeats


def test_rotation_of_one_candidate_or_none():
    assert rotation(7, 1) == [0] and rotation(0, 0) == []


def test_round_stats_follow_the_store_definition():
    # times[round, candidate, iteration], already the per-iteration max across ranks
    times = np.zeros((5, 2, 2))
    times[:, 0, :] = np.array([[1, 3], [2, 2], [3, 3], [4, 4], [9, 11]])[:, :] * 1e-6
    times[:, 1, :] = 5e-6
    a, b = round_stats(times)
    assert (a.median_us, a.q1_us, a.q3_us) == pytest.approx((3.0, 2.0, 4.0))
    assert a.spread_us == pytest.approx(2.0)
    assert (a.min_us, a.max_us) == pytest.approx((2.0, 10.0))
    assert (b.median_us, b.spread_us) == pytest.approx((5.0, 0.0))
    with pytest.raises(ValueError):
        round_stats(np.zeros((0, 1, 1)))


def test_grid_expands_to_the_cartesian_product():
    algo = Algorithm(
        "allreduce",
        "fake",
        factory=lambda comm, **kw: None,
        defaults={"seg": 1024, "inner": "x", "fixed": 7},
        grid={"seg": (1024, 4096), "inner": ("x", "y")},
    )
    labels = [v.label for v in algo.grid_variants()]
    assert labels == [
        "fake:seg=1K,inner=x,fixed=7",
        "fake:seg=1K,inner=y,fixed=7",
        "fake:seg=4K,inner=x,fixed=7",
        "fake:seg=4K,inner=y,fixed=7",
    ]
    plain = Algorithm("allreduce", "plain", factory=lambda comm: None)
    assert [v.label for v in plain.grid_variants()] == ["plain"]


def test_algorithm_selection_uses_the_registry():
    everything = variants_for("allreduce", ["all"])
    assert everything[0].label == "native"  # native first: the baseline
    assert len({v.label for v in everything}) == len(everything)
    assert {v.algorithm.name for v in everything} == {a.name for a in algorithms("allreduce")}
    assert [v.label for v in variants_for("bcast", ["native", "native", "nosuch"])] == ["native"]
    assert variants_for("bcast", ["all", "native"]) == variants_for("bcast", ["all"])
    for algo in algorithms("allreduce"):
        swept = variants_for("allreduce", [algo.name])
        assert len(swept) == max(1, int(np.prod([len(v) for v in algo.grid.values()])))


def test_algorithm_lists_group_parameters_with_their_variant():
    assert split_variant_texts("native, chain:seg=64K,k=2,ring,") == [
        "native",
        "chain:seg=64K,k=2",
        "ring",
    ]


def test_process_counts_and_collectives():
    assert parse_process_counts("4,2,2-3") == (2, 3, 4)
    for bad in ("0", "", "x", "3-2", "5000"):
        with pytest.raises(UsageError, match="--np"):
            parse_process_counts(bad)
    assert parse_collectives("bcast,allreduce,bcast") == ("bcast", "allreduce")
    assert "barrier" in parse_collectives("all")
    with pytest.raises(UsageError, match="unknown collective 'allreduse'"):
        parse_collectives("allreduse")


def test_events_round_trip_and_other_lines_pass():
    line = encode_event("point", nprocs=2, seconds=1.5)
    assert decode_event(line) == {"event": "point", "nprocs": 2, "seconds": 1.5}
    assert decode_event("# p=3 bcast x: skipped: why") is None


def test_progress_counts_points_and_estimates_the_rest():
    now = [0.0]
    out = io.StringIO()
    bar = Progress({2: 4, 4: 4}, stream=out, interactive=False, clock=lambda: now[0], interval=1e9)
    assert "ETA ?" in bar.render()
    for _ in range(2):
        now[0] += 10
        bar.advance()
    assert bar.eta_seconds() == pytest.approx(60)
    bar.replan(4, 2)  # the job's own count replaces the planner's estimate
    assert bar.total == 6 and "2/6 points" in bar.render()
    bar.close()
    assert out.getvalue().splitlines()[-1].startswith("[########")


def test_finished_points_match_point_keys_also_without_op(tmp_path):
    store = RunStore(tmp_path)
    base = {f: 1 for f in SWEEP_FIELDS} | {"backend": "mpi", "algorithm": "native"}
    base |= {"dtype": "float32", "device": "cpu", "validation": "pass", "group": "mpi"}
    base |= {"state": "normal", "round_us": "1.5", "ref_copy_us": "2", "ref_allreduce_us": "3"}
    store.append(
        [
            SweepPoint(**base | {"collective": "bcast", "op": None}),
            SweepPoint(**base | {"collective": "allreduce", "op": "sum"}),
        ]
    )
    assert finished_points(store).stored == {
        (1, 1, 1, "bcast", "mpi", "native", "float32", None, "cpu", 1, 1, "mpi"),
        (1, 1, 1, "allreduce", "mpi", "native", "float32", "sum", "cpu", 1, 1, "mpi"),
    }


def test_launcher_arguments_that_start_with_dashes_stay_the_launchers():
    """'--launcher-args --mpi=pmix' must not be read as the sweep's own --mpi option."""
    from osu_dl_bench.cli import build_parser, verbatim_values

    argv = ["sweep", "-o", "r", "--launcher-args", "--mpi=pmix -N 2", "--mpi", "mpich"]
    args = build_parser().parse_args(verbatim_values(argv))
    assert args.launcher_args == "--mpi=pmix -N 2" and args.mpi == "mpich"
