"""tune --for: a table judged on a model's buckets (selection.step_cost), from hand-made
sweep points whose medians follow known curves."""

from __future__ import annotations

import pytest
from support.options import command_config
from support.tuning import make_entry, make_table

from collectives.registry import parse_variant
from osu_dl_bench.commands.tune import TuneConfig
from osu_dl_bench.errors import UsageError
from osu_dl_bench.selection.paired import Ratio, Series, launch_of
from osu_dl_bench.selection.step_cost import loglog, step_cost_text, step_costs
from osu_dl_bench.selection.table import Choice, EntryKey
from osu_dl_bench.selection.tune import Candidate, decide_candidates

MIB = 1 << 20
KEY = EntryKey("allreduce", "cpu", 1, 2, 2)


def _point(size: int, medians: dict[str, float]):
    """A decided point whose candidates have these medians (us); ratios to native."""
    candidates = {}
    for name, median in medians.items():
        choice = Choice.of(parse_variant("allreduce", name))
        ratio = median / medians["native"]
        series = Series("mpi", (launch_of(1, [median] * 3, median, median, median, 3),))
        candidates[choice.label] = Candidate(choice, series, Ratio(ratio, ratio, ratio, 3, 9))
    return decide_candidates(KEY, size, size // 4, candidates, "native")


def _decisions(points):
    return {(KEY, p.size): p for p in points}


def test_loglog_follows_a_power_law_between_its_points():
    # y = 3 x^2 through (1, 3) and (4, 48): at 2 it is 12 (a linear blend would give 18).
    assert loglog(2, 1, 3, 4, 48) == pytest.approx(12)
    assert loglog(4, 1, 3, 4, 48) == pytest.approx(48)


def test_a_bucket_between_two_sizes_takes_each_candidates_interpolated_median():
    ring = parse_variant("allreduce", "ring").label
    points = [
        _point(MIB, {"native": 100.0, "ring": 50.0}),
        _point(4 * MIB, {"native": 400.0, "ring": 200.0}),
    ]
    table = make_table(make_entry(2, [(0, "ring")]))
    (cost,) = step_costs(table, _decisions(points), [2 * MIB])
    (bucket,) = cost.buckets
    assert bucket.choice == ring and bucket.best == ring
    # Time linear in size here, so log-log gives the midpoint in log space: 2x of 1 MiB.
    assert bucket.table_us == pytest.approx(100.0)
    assert bucket.native_us == pytest.approx(200.0)
    assert cost.regret == pytest.approx(1.0)


def test_regret_weights_each_bucket_by_its_share_of_the_step():
    points = [
        _point(MIB, {"native": 100.0, "ring": 50.0}),  # native twice the best
        _point(4 * MIB, {"native": 400.0, "ring": 800.0}),  # native is the best
    ]
    table = make_table(make_entry(2, [(0, "native")]))
    (cost,) = step_costs(table, _decisions(points), [MIB, 4 * MIB])
    assert [b.table_us / b.best_us for b in cost.buckets] == pytest.approx([2.0, 1.0])
    # The 4 MiB bucket carries 400 of the best step's 450 us: the regret is 500 / 450,
    # not the unweighted mean of 2 and 1.
    assert cost.table_us == pytest.approx(500.0) and cost.best_us == pytest.approx(450.0)
    assert cost.regret == pytest.approx(500 / 450)


def test_buckets_beyond_the_sweep_are_reported_apart_and_left_out_of_the_step():
    points = [
        _point(MIB, {"native": 100.0, "ring": 50.0}),
        _point(4 * MIB, {"native": 400.0, "ring": 200.0}),
    ]
    table = make_table(make_entry(2, [(0, "native")]))
    costs = step_costs(table, _decisions(points), [MIB, 16 * MIB, 100])
    (cost,) = costs
    assert [b.inside for b in cost.buckets] == [True, False, False]
    assert cost.table_us == pytest.approx(100.0) and cost.best_us == pytest.approx(50.0)
    text = step_cost_text("cnn", [MIB, 16 * MIB, 100], costs)
    assert text.count("outside the sweep (measured 1M..4M)") == 2
    assert "step over 1 of 3 buckets" in text
    assert "regret 2.000" in text


def _tune_config(*argv: str) -> TuneConfig:
    return command_config("tune", *argv)


def test_tune_for_takes_a_model_name():
    assert _tune_config("run", "--for", "resnet50").for_model == "resnet50"
    assert _tune_config("run").for_model is None


def test_tune_for_an_unknown_model_is_refused_when_the_options_are_parsed(tmp_path):
    with pytest.raises(UsageError, match="unknown model 'bert': expected one of"):
        _tune_config(str(tmp_path / "missing"), "--for", "bert", "-o", str(tmp_path / "t.json"))
