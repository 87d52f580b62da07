"""The performance model: robust fitting recovers known parameters, costs follow the
formulas, predicted tables load into the selector, the CLI rejects bad input with exit 2,
and a real (tiny) calibration job fits a platform (mpiexec, hard timeout)."""

import json
import math

import numpy as np
import pandas as pd
import pytest

from collectives.common import LinkCost, Machine
from collectives.registry import parse_variant
from collectives.shape import JobShape
from osu_dl_bench.errors import UsageError
from osu_dl_bench.model import accuracy
from osu_dl_bench.model.costs import oversubscription, predict_seconds
from osu_dl_bench.model.fit import fit_pieces, robust_line
from osu_dl_bench.model.mpich_native import kary_depth, native_label
from osu_dl_bench.model.platform import (
    ContentionState,
    Platform,
    PlatformError,
    load_platform,
    platform_from_dict,
    shipped_platforms,
    simple_link,
)
from osu_dl_bench.model.platform_fit import fit_platform
from osu_dl_bench.model.predict import predicted_table
from osu_dl_bench.model.selection import platform_model
from osu_dl_bench.selection.selector import Query, Selector
from osu_dl_bench.selection.table import load_table
from osu_dl_bench.train.oracle import Compute, predict_step

ALPHA, BETA, GAMMA, OVERHEAD = 2e-6, 1e-10, 5e-11, 1e-6
SIZES = 2.0 ** np.arange(3, 25)
SIZES2 = (1 << 20, 2 << 20)


def _platform(cores=None, overhead=OVERHEAD) -> Platform:
    link = simple_link(ALPHA, BETA, GAMMA)
    return Platform("test", link, simple_link(10e-6, 1e-9, GAMMA), cores, overhead, True)


def _noisy(times: np.ndarray, seed: int = 1) -> np.ndarray:
    """2% noise, and two gross outliers (the machine's speed swings)."""
    out = times * (1 + 0.02 * np.random.default_rng(seed).standard_normal(times.size))
    out[4] *= 3
    out[15] *= 0.3
    return out


def test_robust_line_recovers_alpha_beta_despite_outliers():
    fit = robust_line(SIZES, _noisy(ALPHA + BETA * SIZES))
    assert fit.intercept == pytest.approx(ALPHA, rel=0.05)
    assert fit.slope == pytest.approx(BETA, rel=0.05)


def test_robust_line_without_intercept_recovers_the_slope_despite_outliers():
    fit = robust_line(SIZES, _noisy(BETA * SIZES), intercept=False)
    assert fit.intercept == 0.0 and fit.slope == pytest.approx(BETA, rel=0.05)


def test_robust_line_keeps_both_coefficients_non_negative():
    sizes = SIZES[SIZES >= 4096]
    # A line through these times would start below zero: the intercept stays at 0.
    rising = robust_line(sizes, BETA * (sizes - 2048))
    assert 0 <= rising.intercept < 1e-6 * ALPHA and rising.slope == pytest.approx(BETA, rel=0.05)
    # Times that fall with size: the slope stays at 0, the intercept their level.
    falling = robust_line(sizes, 1e-3 - 1e-12 * sizes)
    assert 0 <= falling.slope < 1e-6 * BETA and falling.intercept == pytest.approx(1e-3, rel=0.02)


def test_fit_pieces_finds_the_regime_change():
    times = 1e-6 + np.where(SIZES < 2**20, 3e-11, 1.2e-10) * SIZES
    pieces = fit_pieces(SIZES, times)
    assert [p.min_x for p in pieces] == [0, 2**20]
    assert pieces[1].line.slope == pytest.approx(1.2e-10, rel=1e-6)


def test_fit_platform_recovers_alpha_beta_gamma_and_overhead(tmp_path):
    small = SIZES[SIZES <= 4096]
    rows = [("pingpong", s, t) for s, t in zip(SIZES, _noisy(ALPHA + BETA * SIZES), strict=True)]
    rows += [("reduce", s, t) for s, t in zip(SIZES, _noisy(3e-7 + GAMMA * SIZES, 2), strict=True)]
    rows += [("step", s, ALPHA + BETA * s + OVERHEAD) for s in small]
    frame = pd.DataFrame(rows, columns=["kind", "size_bytes", "median_s"])
    frame.to_csv(tmp_path / "calibration.csv", index=False)
    (tmp_path / "calibration.json").write_text(json.dumps({"cores_per_node": 2, "hosts": ["h"]}))
    platform, _ = fit_platform(tmp_path)
    alpha, beta, gamma = platform.intra.at(1 << 20)
    assert beta == pytest.approx(BETA, rel=0.05) and gamma == pytest.approx(GAMMA, rel=0.05)
    assert platform.intra.at(8)[0] == pytest.approx(ALPHA, rel=0.1)
    assert platform.software_overhead_s == pytest.approx(OVERHEAD, rel=0.1)
    assert not platform.inter.measured and platform.cores_per_node == 2
    # The written file loads back to the same parameters.
    loaded = load_platform(platform.write(tmp_path / "platform.json"))
    assert loaded.intra.at(1 << 20) == platform.intra.at(1 << 20)


def _calibration_rows(nprocs: int, alpha: float, beta: float, gamma: float) -> list[tuple]:
    """Noisy exchange and reduce rows, and exact step and barrier rows, of one job."""
    seed = nprocs * 10
    exchange = _noisy(alpha + beta * SIZES, seed)
    reduce = _noisy(3e-7 + gamma * SIZES, seed + 1)
    rows = [("exchange", s, nprocs, t) for s, t in zip(SIZES, exchange, strict=True)]
    rows += [("reduce", s, nprocs, t) for s, t in zip(SIZES, reduce, strict=True)]
    small = SIZES[SIZES <= 4096]
    rows += [("step", s, nprocs, alpha + beta * s + OVERHEAD * nprocs) for s in small]
    rows += [("barrier", s, nprocs, 4e-6 * nprocs) for s in small]
    return rows


def test_fit_platform_keeps_one_contention_state_per_process_count(tmp_path):
    rows = _calibration_rows(2, ALPHA, BETA, GAMMA) + _calibration_rows(
        3, 5 * ALPHA, 2 * BETA, GAMMA
    )
    frame = pd.DataFrame(rows, columns=["kind", "size_bytes", "nprocs", "median_s"])
    frame.to_csv(tmp_path / "calibration.csv", index=False)
    (tmp_path / "calibration.json").write_text(json.dumps({"cores_per_node": 2, "hosts": ["h"]}))
    platform, _ = fit_platform(tmp_path)
    assert [s.ranks for s in platform.states] == [2, 3]
    two, three = platform.states
    assert platform.intra == two.intra  # the base link is the state with the fewest ranks
    assert three.intra.at(1 << 20)[1] == pytest.approx(2 * BETA, rel=0.05)
    assert three.intra.at(8)[0] == pytest.approx(5 * ALPHA, rel=0.1)
    assert three.software_overhead_s == pytest.approx(3 * OVERHEAD, rel=0.1)
    assert two.barrier_s == pytest.approx(8e-6)
    loaded = load_platform(platform.write(tmp_path / "platform.json"))
    assert loaded.states == platform.states


def _state_platform() -> Platform:
    """Measured at 2 ranks (ALPHA, BETA) and 3 ranks (alpha x 5, beta x 2) on 2 cores."""
    two = ContentionState(2, simple_link(ALPHA, BETA, GAMMA), OVERHEAD, 2e-6)
    three = ContentionState(3, simple_link(5 * ALPHA, 2 * BETA, GAMMA), 3 * OVERHEAD, 9e-6)
    base = _platform(cores=2)
    return Platform("s", two.intra, base.inter, 2, OVERHEAD, False, states=(two, three))


def _ring(p: int, alpha: float, beta: float, gamma: float, n: int) -> float:
    return 2 * (p - 1) * alpha + (p - 1) / p * n * (2 * beta + gamma) + n * beta


def test_each_process_count_takes_its_measured_contention_state():
    platform, ring, n = _state_platform(), parse_variant("allreduce", "ring:seg=0"), 1 << 20
    got2 = predict_seconds(platform, "allreduce", ring, JobShape(2), n)
    assert got2 == pytest.approx(_ring(2, ALPHA + OVERHEAD, BETA, GAMMA, n))
    # Measured at 3 ranks: those parameters as they are, no further slowdown.
    got3 = predict_seconds(platform, "allreduce", ring, JobShape(3), n)
    assert got3 == pytest.approx(_ring(3, 5 * ALPHA + 3 * OVERHEAD, 2 * BETA, GAMMA, n))
    # Beyond the measured states: the nearest one, time-shared further (6/2 over 3/2).
    got6 = predict_seconds(platform, "allreduce", ring, JobShape(6), n)
    slow = 2.0
    expected = _ring(6, slow * (5 * ALPHA + 3 * OVERHEAD), slow * 2 * BETA, slow * GAMMA, n)
    assert got6 == pytest.approx(expected)
    # A rooted collective takes the fewest-ranks state, time-shared (3 ranks / 2 cores).
    binomial = predict_seconds(
        platform, "bcast", parse_variant("bcast", "binomial"), JobShape(3), n
    )
    assert binomial == pytest.approx(2 * 1.5 * (ALPHA + OVERHEAD + n * BETA))


def test_a_rooted_algorithm_that_keeps_every_rank_busy_takes_the_full_state():
    """scatter + ring allgather declares all ranks busy: at 3 ranks it takes the measured
    3-rank state, as a symmetric collective does, where binomial takes the 2-rank one."""
    platform, n = _state_platform(), 3 << 20
    variant = parse_variant("bcast", "scatter_ring_allgather")
    assert variant.algorithm.busy_everywhere()
    assert not parse_variant("bcast", "binomial").algorithm.busy_everywhere()
    assert parse_variant("allreduce", "ring").algorithm.busy_everywhere()
    busy_state = ContentionState(3, simple_link(5 * ALPHA, 2 * BETA, GAMMA), 3 * OVERHEAD, 0.0)
    machine = Machine(
        LinkCost(busy_state.intra.at(n)[0] + 3 * OVERHEAD, 2 * BETA, GAMMA),
        LinkCost(0, 0, 0),
        ppn=3,
    )
    expected = variant.algorithm.cost(machine, 3, n)
    assert predict_seconds(platform, "bcast", variant, JobShape(3), n) == pytest.approx(expected)


def test_native_on_one_node_is_mpich_release_gather_timed_by_the_barrier():
    platform, n = _state_platform(), 1 << 20
    native = predict_seconds(
        platform, "allreduce", parse_variant("allreduce", "native"), JobShape(2), n
    )
    cells, wave = n // 8192, 2e-6 / 2  # one gather and one release wave per barrier
    assert native == pytest.approx(cells * 2 * wave + 2 * n * BETA + n * GAMMA)
    bcast = predict_seconds(platform, "bcast", parse_variant("bcast", "native"), JobShape(2), n)
    assert bcast == pytest.approx(cells * wave + (n + 8192) * BETA)
    assert [kary_depth(p, 4) for p in (1, 2, 5, 6, 21, 22)] == [0, 1, 1, 2, 2, 3]


def test_ring_allreduce_cost_is_the_textbook_formula():
    p, n = 4, 1 << 20
    ring = parse_variant("allreduce", "ring")
    got = predict_seconds(_platform(), "allreduce", ring, JobShape(p), n)
    alpha = ALPHA + OVERHEAD  # our Python algorithms pay the overhead per step
    steps = 2 * (p - 1) * alpha + 2 * (p - 1) / p * n * BETA + (p - 1) / p * n * GAMMA
    assert got == pytest.approx(steps + n * BETA)  # + the out-of-place copy of the input


def test_native_is_costed_as_mpich_default_choice_without_python_overhead():
    assert native_label("allreduce", 4, 1 << 20) == "rabenseifner"
    assert native_label("allreduce", 4, 8) == "recursive_doubling"
    assert native_label("bcast", 4, 1 << 20) == "binomial"
    # One node: MPICH's shared-memory (release_gather) collectives answer first.
    assert native_label("allreduce", 4, 1 << 20, posix=True) == "reduce_bcast"
    platform, layout = _platform(cores=2), JobShape(4)  # oversubscribed: MPICH's MPIR tree
    native = predict_seconds(
        platform, "allreduce", parse_variant("allreduce", "native"), layout, 1 << 20
    )
    raben = predict_seconds(
        _platform(cores=2, overhead=0.0),
        "allreduce",
        parse_variant("allreduce", "rabenseifner"),
        layout,
        1 << 20,
    )
    assert native == pytest.approx(raben)


def test_oversubscribed_nodes_slow_every_term_down():
    assert oversubscription(_platform(cores=2), JobShape(4)) == 2.0
    assert oversubscription(_platform(cores=2), JobShape(2)) == 1.0
    assert oversubscription(_platform(cores=None), JobShape(64)) == 1.0


def test_predicted_table_validates_and_the_selector_uses_it(tmp_path):
    layout = JobShape(1024, 128, 8)
    table, _ = predicted_table(_platform(), layout, ["allreduce", "bcast"], [8, 1 << 20], "t")
    path = table.write(tmp_path / "predicted.json")
    loaded = load_table(path)
    assert loaded.header["provenance"]["predicted"] is True
    decision = Selector.from_file(path).decide(Query("allreduce", 1024, 1 << 20, "cpu", 128, 8))
    assert decision.how == "table"
    # Nothing ineligible: one-node designs never appear in a 128-node table.
    labels = {r.choice.algorithm for e in loaded.entries for r in e.ranges}
    assert not labels & {"shm", "cma"}


def test_selector_model_hook_answers_without_a_table():
    selector = Selector(model=platform_model(load_platform("ib-hdr200")), force={})
    decision = selector.decide(Query("bcast", 1024, 4 << 20, "cpu", 128, 8))
    assert decision.how == "model" and decision.variant.algorithm.name != "gloo"


def test_accuracy_is_one_minus_relative_error():
    platform = _platform()
    ring = parse_variant("allreduce", "ring:seg=0")
    layout = JobShape(2, 1, 2)
    pred = [predict_seconds(platform, "allreduce", ring, layout, n) * 1e6 for n in SIZES2]
    frame = pd.DataFrame(
        {
            "collective": "allreduce",
            "algorithm": ["ring:seg=0", "ring:seg=0", "gloo"],
            "size_bytes": [*SIZES2, 1 << 20],
            "nprocs": 2,
            "nodes": 1,
            "ppn": 2,
            "median_us": [pred[0], pred[1] / 0.5, 100.0],
        }
    )
    result = accuracy.compare(platform, frame).set_index(["algorithm", "size_bytes"])
    assert result.loc[("ring:seg=0", SIZES2[0]), "accuracy"] == pytest.approx(1.0)
    assert result.loc[("ring:seg=0", SIZES2[1]), "accuracy"] == pytest.approx(0.5)
    assert math.isnan(result.loc[("gloo", 1 << 20), "accuracy"])  # gloo: not modelled
    assert accuracy.summarize(result.reset_index()).large == pytest.approx(0.75)


def test_step_time_hides_communication_behind_backward():
    compute = Compute(forward=0.01, backward=0.02, optimizer=0.0, local_batch=8, threads=1)
    overlapped = predict_step(compute, (100, 100), [0.005, 0.005], True, 2)
    assert overlapped.exposed == pytest.approx(0.005)  # the last bucket waits for backward
    serial = predict_step(compute, (100, 100), [0.005, 0.005], False, 2)
    assert serial.exposed == pytest.approx(0.01) and serial.step == pytest.approx(0.04)


def test_shipped_platforms_load_and_say_they_are_assumed():
    assert {"ib-edr100", "ib-hdr200", "eth-25g-tcp", "eth-100g-roce"} <= set(shipped_platforms())
    for name in shipped_platforms():
        platform = load_platform(name)
        assert platform.assumed and "assumed" in platform.source


def test_bad_platform_file_names_the_field(tmp_path):
    data = json.loads(next(iter(shipped_platforms().values())).read_text())
    data["links"]["inter"]["alpha_beta"][0]["beta_s_per_byte"] = -1
    with pytest.raises(PlatformError, match=r"links\.inter\.alpha_beta\[0\]\.beta_s_per_byte"):
        platform_from_dict(data, "bad.json")
    good = _state_platform().as_dict()
    good["contention_states"][1]["ranks_per_node"] = 0
    with pytest.raises(PlatformError, match=r"contention_states\[1\]\.ranks_per_node"):
        platform_from_dict(good, "bad.json")
    good["schema_version"] = 3
    with pytest.raises(PlatformError, match="expected 1 or 2, got 3"):
        platform_from_dict(good, "bad.json")
    with pytest.raises(UsageError, match="not a shipped platform"):
        load_platform(tmp_path / "missing.json")


def test_a_calibration_with_a_node_per_rank_measured_the_inter_node_link():
    from osu_dl_bench.model.platform_fit import one_rank_per_node

    across = {"jobs": [{"nprocs": 2, "hosts": ["node1", "node2"]}]}
    assert one_rank_per_node(across) == ("node1", "node2")
    shared = {"jobs": [*across["jobs"], {"nprocs": 4, "hosts": ["node1", "node2"]}]}
    assert one_rank_per_node(shared) == ()
    assert one_rank_per_node({"nprocs": 2, "hosts": ["vm"]}) == ()


def test_tc_rates_read_as_bytes_per_second():
    from collectives.units import parse_link_rate

    assert parse_link_rate("1gbit") == 125e6
    assert parse_link_rate("250mbit") == 31.25e6
    assert parse_link_rate("10mbps") == 10e6
    with pytest.raises(ValueError, match="expected a rate"):
        parse_link_rate("1gbit;ls")
