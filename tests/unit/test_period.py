"""The between-period component (selection.period): estimated from two sweeps of the same
machine by compare, stored with the later run, read by its tune; it widens the reported
intervals and never the decisions."""

from __future__ import annotations

import math
import os
import re

import numpy as np
import pytest
from support.tuning import launch_run

from osu_dl_bench.cli import main
from osu_dl_bench.errors import UsageError
from osu_dl_bench.paths import PERIOD, write_text_atomic
from osu_dl_bench.selection.paired import Z_LEVEL, Ratio
from osu_dl_bench.selection.period import Period, between_runs, read_period, write_period
from osu_dl_bench.selection.tune import build_table
from tests.unit.test_evidence import _consistent_win_run

pytestmark = pytest.mark.usefixtures("registered")


def test_the_reported_interval_widens_by_the_period_and_the_decision_reading_stays():
    ratio = Ratio(0.8, 0.8 / 1.1, 0.8 * 1.1, 3, 60, "curve", df=8.0, launch_df=2.0)
    assert ratio.reported() == ratio  # no period: as decided
    drifting = Ratio(
        *[getattr(ratio, f) for f in ("ratio", "low", "high", "launches")],
        60,
        "curve",
        df=8.0,
        launch_df=2.0,
        period_sd=0.1,
        period_df=4.0,
    )
    shown = drifting.reported()
    assert shown.low < ratio.low and shown.high > ratio.high and shown.ratio == ratio.ratio
    assert ratio.sd**2 < shown.sd**2  # the period's variance is in it
    assert 4.0 < shown.df < 8.0 + 4.0
    # The decision reads the within-run interval: the same chance with or without.
    assert drifting.chance_above(1.05) == ratio.chance_above(1.05)


def _ratio(log_value: float, sd: float) -> Ratio:
    half = Z_LEVEL * sd
    return Ratio(math.exp(log_value), math.exp(log_value - half), math.exp(log_value + half), 3, 0)


def test_two_runs_give_back_a_known_between_period_sd_with_one_df_per_entry_and_band():
    rng = np.random.default_rng(3)
    period_sd, within_sd = 0.08, 0.04
    pairs = []
    for entry in range(30):
        for band_sizes in ((64, 1024), (8192, 65536), (1 << 20, 1 << 22)):
            shift_a, shift_b = rng.normal(0, period_sd, 2)  # each run drew its own period
            for size in band_sizes:
                for _ in range(3):  # candidates
                    truth = rng.normal(-0.1, 0.2)
                    a = _ratio(truth + shift_a + rng.normal(0, within_sd), within_sd)
                    b = _ratio(truth + shift_b + rng.normal(0, within_sd), within_sd)
                    pairs.append((entry, size, a, b))
    period = between_runs(pairs, "compare A B")
    assert period.sd == pytest.approx(period_sd, rel=0.3)
    assert period.df == 90 and period.pairs == len(pairs)
    # Runs that agree within their intervals: no period.
    same = [(e, s, a, _ratio(math.log(a.ratio), within_sd)) for e, s, a, _ in pairs]
    assert between_runs(same, "x").sd < 0.01
    assert between_runs([], "x") is None


def test_tune_widens_the_reported_intervals_by_a_stored_period_and_decides_the_same(tmp_path):
    run = _consistent_win_run(tmp_path / "run")
    (plain,) = build_table(run, "t")[0].entries
    write_period(run, Period(0.1, 3.0, 40, "compare a b"))
    table, _ = build_table(run, "t")
    (wide,) = table.entries
    for before, after in zip(plain.points, wide.points, strict=True):
        assert after["chosen"] == before["chosen"]
        assert after["chance_slower"] == before["chance_slower"]
        assert (
            after["ratio_low"] < before["ratio_low"] and after["ratio_high"] > before["ratio_high"]
        )
        assert after["period_sd"] == 0.1
    evidence = table.header["evidence"]
    assert evidence["between_period"]["sd"] == 0.1 and evidence["between_period"]["df"] == 3
    assert any("between-period sd 10.0% (df 3" in line for line in evidence["summary"])
    assert wide.ranges == plain.ranges


def test_a_table_without_a_stored_period_says_its_intervals_hold_the_sweeps_drift_only(tmp_path):
    table, _ = build_table(_consistent_win_run(tmp_path / "run"), "t")
    assert table.header["evidence"]["between_period"] is None
    assert any("none stored with this run" in line for line in table.header["evidence"]["summary"])


def test_compare_stores_the_period_with_run_b_where_its_tune_reads_it(tmp_path, capsys):
    a = launch_run(tmp_path / "a", {1 << k: {"recursive_doubling": 0.8} for k in range(10, 20)})
    b = launch_run(
        tmp_path / "b", {1 << k: {"recursive_doubling": 0.9} for k in range(10, 20)}, seed=7
    )
    assert main(["compare", str(a), str(b)]) == 0
    out = capsys.readouterr().out
    assert f"stored in {b / PERIOD} for tune of {b}" in out
    period = read_period(b)
    assert period is not None and period.sd > 0 and period.source == f"compare {a} {b}"
    assert read_period(a) is None
    # A run's own file: -o style writes elsewhere may not replace it.
    with pytest.raises(UsageError, match=PERIOD):
        write_text_atomic(b / PERIOD, "{}")


def test_a_damaged_period_file_is_one_clear_error(tmp_path):
    run = _consistent_win_run(tmp_path / "run")
    (run / PERIOD).write_text("{not json")
    with pytest.raises(UsageError, match="not a between-period record"):
        build_table(run, "t")
    (run / PERIOD).write_text('{"sd": -1, "df": 2, "pairs": 3, "source": "x"}')
    with pytest.raises(UsageError, match="out of range"):
        build_table(run, "t")


def test_the_librarys_own_decisions_report_the_same_widened_intervals(tmp_path):
    from support.mpich_layers import layered_run

    plan = {size: {"native:alg=ring": 0.5} for size in (1024, 4096, 65536, 1 << 20)}
    run = layered_run(tmp_path / "run", plan)

    def library_points():
        ranges = build_table(run, "lib")[0].header["library_tuning"]["entries"][0]["ranges"]
        return [p for r in ranges for p in r["points"]]

    plain = library_points()
    write_period(run, Period(0.1, 3.0, 40, "compare a b"))
    for before, after in zip(plain, library_points(), strict=True):
        assert after["alg"] == before["alg"]
        assert after["ratio_low"] < before["ratio_low"]
        assert after["fastest_ratio_high"] > before["fastest_ratio_high"]


def test_a_fifo_a_huge_sd_or_a_list_at_the_period_file_is_one_clear_error_never_a_hang(
    tmp_path,
):
    run = _consistent_win_run(tmp_path / "run")
    os.mkfifo(run / PERIOD)  # a blocking read would wait here for ever
    with pytest.raises(UsageError, match=f"{PERIOD}: not a between-period record .*regular"):
        read_period(run)
    (run / PERIOD).unlink()
    for sd in ("1e308", "5.5"):
        (run / PERIOD).write_text(f'{{"sd": {sd}, "df": 4, "pairs": 28, "source": "x"}}')
        with pytest.raises(UsageError, match=re.escape(f"{PERIOD}: sd {float(sd)}, df 4.0: out")):
            build_table(run, "t")
    (run / PERIOD).write_text("[1, 2]")
    with pytest.raises(UsageError, match="not a between-period record"):
        read_period(run)
    (run / PERIOD).write_text('{"sd": 5, "df": 4, "pairs": 28, "source": "x"}')
    assert read_period(run).sd == 5.0  # the bound itself: a factor of e^5


def test_an_interval_the_period_widens_past_any_float_is_unbounded_not_an_overflow():
    ratio = Ratio(0.8, 0.7, 0.9, 3, 60, "curve", df=8.0, period_sd=1e308, period_df=4.0)
    shown = ratio.reported()
    assert (shown.low, shown.high, shown.ratio) == (0.0, math.inf, 0.8)
    wide = Ratio(0.8, 0.7, 0.9, 3, 60, "curve", df=8.0, period_sd=300.0, period_df=4.0)
    assert wide.reported().high == math.inf  # exp of the bound overflows: unbounded


def test_compare_never_writes_the_period_through_a_symlink_and_says_what_it_replaces(
    tmp_path, capsys
):
    plan = {1 << k: {"recursive_doubling": 0.8} for k in range(10, 16)}
    a, b = launch_run(tmp_path / "a", plan), launch_run(tmp_path / "b", plan, seed=7)
    victim = tmp_path / "victim"
    victim.write_text("someone's file\n")
    (b / PERIOD).symlink_to(victim)
    assert main(["compare", str(a), str(b)]) == 2
    assert f"{b / PERIOD}: a symlink where the run keeps its own file" in capsys.readouterr().err
    assert victim.read_text() == "someone's file\n" and (b / PERIOD).is_symlink()
    (b / PERIOD).unlink()
    assert main(["compare", str(a), str(b)]) == 0
    assert ", replacing" not in capsys.readouterr().out
    first = read_period(b)
    assert main(["compare", str(a), str(b)]) == 0
    earlier = f"replacing the earlier estimate (sd {first.sd * 100:.1f}% from compare {a} {b})"
    assert earlier in capsys.readouterr().out
